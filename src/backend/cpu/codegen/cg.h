/* Internals of the C emitter, shared by its files: a growing text buffer,
 * concrete shapes and broadcast strides, the per-op scalar expressions,
 * and one emitter per kind of group. */
#ifndef LOOM_CODEGEN_CG_H
#define LOOM_CODEGEN_CG_H

#include <stdarg.h>

#include "backend/cpu/codegen/codegen.h"
#include "core/status.h"

/* ---- Text (buf.c) --------------------------------------------------------- */

typedef struct cg_buf {
  char *s;
  int64_t len, cap;
  bool failed; /* out of memory: the text is incomplete */
} cg_buf_t;

void cg_printf(cg_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cg_vprintf(cg_buf_t *b, const char *fmt, va_list ap);
/* Like cg_printf, after 2*level spaces. */
void cg_line(cg_buf_t *b, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* n bytes of s, at the end; and at offset `at`, the text after it moving
 * on. */
void cg_append(cg_buf_t *b, const char *s, int64_t n);
void cg_insert(cg_buf_t *b, int64_t at, const char *s, int64_t n);
/* A double as a C literal ("0.5", "INFINITY", "-INFINITY", "NAN"). */
void cg_double(cg_buf_t *b, double v);

/* ---- Shapes (shape.c) ----------------------------------------------------- */

/* With runtime symbols (loom_compile_options_t.dynamic_symbols) the
 * leading dim may be known only at run time: `lead` is then that dim
 * (a symbolic handle) and dim 0 spans dim[0] * lead elements, dim[0]
 * holding the constant factor (merging dim 0 with constant dims below it
 * multiplies it). Only the leading dim may be symbolic, so every stride
 * stays a constant; lead is 0 when every dim is known. */
typedef struct cg_shape {
  int rank;
  int64_t dim[LOOM_MAX_RANK];
  ir_dim_t lead;
} cg_shape_t;

/* Marks an emitter keeps per node and per value of the graph while it
 * writes one group, allocated once per module and zero between groups:
 * the emitter clears those of its group's nodes and values when done, so
 * that a group costs its own size, not the graph's. */
#define CG_NODE_MARKS 5
#define CG_VALUE_MARKS 3
typedef struct cg_marks {
  int32_t *node[CG_NODE_MARKS];
  int32_t *value[CG_VALUE_MARKS];
} cg_marks_t;

/* The slots of the group being written, numbered in the order its code
 * first names them (cg_slot): its function finds slot k at slots[k],
 * gathered from the step's map (abi.h), so that the text does not depend
 * on where the group's values are stored. Allocated once per module;
 * local_of_slot is -1 between groups. */
typedef struct cg_locals {
  int32_t *local_of_slot; /* per slot of the graph: its number, or -1 */
  int32_t *slot;          /* per number: the slot */
  int n;
  int64_t gather_at;      /* where the group function's gather goes, or -1 */
} cg_locals_t;

/* What every group emitter needs. */
typedef struct cg_ctx {
  const loom_graph_t *g;
  const fuse_plan_t *plan;
  const int32_t *slot_of_value;
  const int64_t *sym_values;
  cg_buf_t *out;
  /* The function being written (cg_function) and, per value, the one
   * whose text declares its pointer p<v> (cg_declare_pointer). */
  int32_t function;
  int32_t *declared_in;
  cg_marks_t marks;
  cg_locals_t *locals;
} cg_ctx_t;

/* The shape of value v; false if a dim does not evaluate, except that a
 * leading dim over runtime symbols becomes s->lead (when its expression
 * can be written in C: sums and products). */
bool cg_value_shape(const cg_ctx_t *c, int32_t v, cg_shape_t *s);
/* The element count; with a runtime lead, its constant factor only. */
int64_t cg_numel(const cg_shape_t *s);
/* Whether dim d of a and dim e of b are the same size (runtime leads
 * compared as expressions). */
bool cg_same_dim(const cg_shape_t *a, int d, const cg_shape_t *b, int e);
/* Whether any value group gi reads or writes has a runtime dim. */
bool cg_group_is_dynamic(const cg_ctx_t *c, int gi);
/* The C expression of dim 0's extent: "128" or "(int64_t)64 * syms[2]". */
void cg_lead_extent(cg_buf_t *b, const loom_graph_t *g, const cg_shape_t *s);
/* The C expression of a symbolic dim over syms[] ("(syms[0] * 4)"). */
void cg_dim_expr(cg_buf_t *b, const loom_graph_t *g, ir_dim_t d);
/* The start of a group function whose outer extent is known only at run
 * time: "const int64_t n0 = <extent>;", then a parallel_for over n0
 * (when n0 * inner is large) or a direct call of body over [0, n0). */
void cg_dynamic_split(cg_buf_t *b, const loom_graph_t *g, const cg_shape_t *s,
                      int64_t inner, const char *body);
/* Strides (elements) of a contiguous tensor of shape s, broadcast into
 * space (NumPy alignment from the right; 0 on broadcast dims); false when
 * s does not broadcast to space. */
bool cg_broadcast_strides(const cg_shape_t *s, const cg_shape_t *space,
                          int64_t *stride);
/* Merges neighbouring dims of space[lo, hi) that every stride vector
 * walks as one (stride[d] == stride[d+1] * dim[d+1]) and drops dims of
 * size 1, rewriting space and the n vectors in place; returns the new
 * end of the range (dims past hi shift down). */
int cg_collapse(cg_shape_t *space, int lo, int hi, int n,
                int64_t (*strides)[LOOM_MAX_RANK]);
/* "i0 * 128 + i1" (dims lo..hi-1 of loop variables named <var><d>), or
 * "0" when every stride is 0. */
void cg_offset(cg_buf_t *b, const char *var, int lo, int hi,
               const int64_t *stride);

/* The C type of an element in memory, and of a local holding one (f16
 * and bf16 compute in float). */
const char *cg_ctype(loom_dtype_t d);
const char *cg_local_type(loom_dtype_t d);
/* "const float v3 = p3[" ... "];" and "p3[" ... "] = v3;", with the
 * conversions half-precision dtypes need; the caller writes the offset. */
void cg_load_begin(cg_buf_t *b, int level, const loom_graph_t *g, int32_t v);
void cg_load_end(cg_buf_t *b, const loom_graph_t *g, int32_t v);
void cg_store_begin(cg_buf_t *b, int level, int32_t v);
void cg_store_end(cg_buf_t *b, const loom_graph_t *g, int32_t v);
/* Whether v is a one-element f32 or f64 constant, and its value: code may
 * rely on it, since a compiled graph's constants never change (cpu_prepack.c
 * packs them once too). The code still loads it: given the literal, GCC
 * folds the constant through a chain's tests and turns them into mask
 * merges, slower than the loads. */
bool cg_scalar_constant(const loom_graph_t *g, int32_t v, double *x);
/* The number of v's slot in its group (the function reads it at
 * slots[number]; cg_locals_t), given at the first call, or -1 when v has
 * no slot. */
int32_t cg_slot(const cg_ctx_t *c, int32_t v);
/* "#pragma GCC ivdep", before a group's innermost loop: the only overlap
 * between its pointers is element i read, then element i written (an
 * output planned in place over an input, compiler/inplace.h), and GCC,
 * which takes no restrict from pointers loaded out of slots[], would
 * otherwise need more runtime alias checks than it tries. */
void cg_ivdep(const cg_ctx_t *c, int level);
/* Opens a fold in `lanes` independent accumulators over [0, blocks) of
 * one dim: `for (int64_t <block> = 0; <block> < <blocks>; <block> +=
 * lanes)`, then the lane loop `l` (kept rolled, so that GCC vectorizes it)
 * declaring `<index> = <block> + l`; the body goes at level + 2.
 * cg_close_lanes closes both. */
void cg_open_lanes(cg_buf_t *b, int level, const char *index, const char *block,
                   const char *blocks, int lanes);
void cg_close_lanes(cg_buf_t *b, int level);
/* Starts a function of the module: prints its header (printf-style, up
 * to and including the opening brace) and opens a new scope for
 * cg_declare_pointer. */
void cg_function(cg_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Starts group gi's function, loom_group_<gi>, whose body finds its
 * slots in `slots` (c_emit.c inserts the gather of the slots the group
 * names, once they are known). */
void cg_group_function(cg_ctx_t *c, int gi);
/* The position of node id among group gi's nodes (what index_error
 * reports: the runtime maps it back through the step's group). */
int cg_node_position(const cg_ctx_t *c, int gi, int32_t node);
/* "const float *restrict p3 = (const float *)slots[2];", once per
 * function: the name is the value's, not the operand position's, so a
 * node that reads one value at several positions (batch_norm(x, c, c, c,
 * c), a CSE-merged constant) must not declare it twice, and emitters may
 * declare a node's operands position by position. */
void cg_declare_pointer(const cg_ctx_t *c, const fuse_group_t *grp,
                        int level, int32_t v, bool write);
/* How a matmul's generated code reads operand v: as the view fusion made
 * of it, or in order from its own slot (also a value with a runtime dim);
 * false for a strided view it cannot compose. And where a strided
 * group's matmul writes its product y: as the chain of `into` aliases
 * after it makes their result lie in order. See c_view.c. */
bool cg_operand_view(const cg_ctx_t *c, int32_t v, ir_view_t *out);
bool cg_product_view(const cg_ctx_t *c, int32_t y, ir_view_t *out);
/* The group's comment line: "/\* g3: elementwise: add, relu (64x128) *\/"
 * (space NULL: no shape; note, if not NULL, follows the shape). */
void cg_group_comment(const cg_ctx_t *c, int gi, const char *what,
                      const cg_shape_t *space, const char *note);
/* Whether node id belongs to group grp; whether v is one of its outputs. */
bool cg_in_group(const cg_ctx_t *c, int gi, int32_t v);
bool cg_is_output(const fuse_group_t *grp, int32_t v);

/* ---- Scalar expressions (c_expr.c) --------------------------------------- */

/* Whether node n's op has a scalar expression for its dtypes; whether op
 * has one for any dtype. */
bool cg_expr_supported(const loom_graph_t *g, const ir_node_t *n);
bool cg_expr_has_rule(ir_op_t op);
/* An op's work per element in plain operations: a transcendental
 * function counts 8, a division or square root 3. */
int cg_op_cost(ir_op_t op);
/* A group's work per element, at least 1 (half the sum of its ops'
 * costs), which scales CG_PARALLEL_MIN: a row of exponentials repays a
 * wake-up sooner than a copy does. */
int64_t cg_group_cost(const loom_graph_t *g, const fuse_group_t *grp);
/* "const float v12 = expf(v11);": node n's output from its inputs'
 * locals. */
void cg_node_stmt(cg_buf_t *b, int level, const loom_graph_t *g,
                  const ir_node_t *n);
/* The static helpers that expressions call, once at the module's top. */
void cg_expr_helpers(cg_buf_t *b);

/* ---- Folds (c_reduce.c, c_columns.c) -------------------------------------- */

/* A fold: the accumulator's type, start, update and result, in text
 * where $a is the accumulator, $v the element, $n the count and $T the
 * output type. Floats fold in double for sums and products (closer to
 * the reference's double), integers in int64 wrapping. */
typedef struct cg_fold {
  ir_op_t op;
  const char *f_type, *f_init, *f_update, *f_result;
  const char *i_type, *i_init, *i_update, *i_result;
} cg_fold_t;

/* The fold of op (sum, mean, prod, max, min), or NULL. */
const cg_fold_t *cg_fold_of(ir_op_t op);
/* Writes template t with acc and v naming the accumulator and the element
 * ("acc12", "v11"), n the count as a double ("64.0", "((double)n0 * 8)"). */
void cg_fold_text(cg_buf_t *b, const char *t, const char *acc, const char *v,
                  const char *n, const char *type);
/* Whether node n folds axes that are not a suffix of its input's dims (a
 * bias gradient), and that group's emitter (c_columns.c). */
bool cg_keeps_last_dim(const cg_ctx_t *c, const ir_node_t *n);
loom_status_t cg_emit_columns(cg_ctx_t *c, int gi, const ir_node_t *n, bool *ok);

/* ---- Group emitters ------------------------------------------------------- */

/* Each writes loom_group_<gi> (and its static helpers, named
 * loom_g<gi>_<what>); false in *ok when the group's shapes are outside
 * what it handles. */
loom_status_t cg_emit_elementwise(cg_ctx_t *c, int gi, bool *ok);
loom_status_t cg_emit_layout(cg_ctx_t *c, int gi, bool *ok);
loom_status_t cg_emit_reduction(cg_ctx_t *c, int gi, bool *ok);
/* A reduction group anchored on a max or average pool (c_pool.c). */
loom_status_t cg_emit_pool(cg_ctx_t *c, int gi, bool *ok);
/* A sum or mean over every dim but the channel (dim 1) of a rank >= 3
 * value, with its elementwise prologue (c_channel.c). */
loom_status_t cg_emit_channel_reduction(cg_ctx_t *c, int gi, bool *ok);
bool cg_is_channel_reduction(const loom_graph_t *g, const ir_node_t *n);
/* One f32 batch_norm node (c_channel.c). */
loom_status_t cg_emit_batch_norm(cg_ctx_t *c, int gi, bool *ok);
/* One f32 max_pool2d_grad node (c_pool.c). */
loom_status_t cg_emit_max_pool_grad(cg_ctx_t *c, int gi, bool *ok);
loom_status_t cg_emit_contraction(cg_ctx_t *c, int gi, bool *ok);
/* A layout group whose last node is a gather, index_select, embedding,
 * scatter_add or one_hot, after the nodes computing its index, if any
 * (c_index.c). */
loom_status_t cg_emit_index(cg_ctx_t *c, int gi, bool *ok);
bool cg_is_index_op(ir_op_t op);

/* ---- Functions shared by groups (c_dedup.c) -------------------------------- */

/* Groups whose functions are the same text up to the names of their
 * locals and their own functions (v12, p12, acc12, loom_g3_body) run one
 * function: the first such group's. */
typedef struct cg_dedup cg_dedup_t;
loom_status_t cg_dedup_create(int64_t n_values, cg_dedup_t **out);
/* Group gi's text (its function and helpers, len bytes at text): *first
 * is the earlier group whose text is the same up to names, or gi (then
 * remembered for later groups). */
loom_status_t cg_dedup_find(cg_dedup_t *d, const char *text, int64_t len, int gi,
                            int32_t *first);
void cg_dedup_free(cg_dedup_t *d);

/* Elementwise work above this many elements is split over the pool: a
 * wake-up costs a few microseconds, which smaller loops do not repay. */
#define CG_PARALLEL_MIN 32768

#endif
