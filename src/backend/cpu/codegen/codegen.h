/* C code generation: one C function per fused group, one translation unit
 * per graph. The code is for people too: indented, with each function
 * headed by a comment listing the ops it fused, and locals named after the
 * graph's values (v12: those of the first group that runs the function).
 *
 * Storage: slot_of_value[v] is the slot holding value v (see
 * src/backend/cpu/abi.h: slots[k] points at its first element, contiguous,
 * row-major), or -1 when v lives only inside its group (then the group's
 * code keeps it in a local). A strided view (fuse.h) has its root's
 * slot; only the matmuls reading it see it, through ir_view_of. Shapes are concrete: the emitter evaluates
 * every dim with the symbol values compilation specialized them to.
 *
 * Group functions are named loom_group_<index in plan>, and groups whose
 * code is the same up to names share the first one's (cg_module_t.
 * function). Groups of kind FUSE_ALIAS and FUSE_REFERENCE get no
 * function. Work is split with
 * rt->parallel_for over the outermost independent dimension, with a grain
 * that keeps small kernels on one thread (a wake-up costs more than a
 * few microseconds of work); contractions call rt->gemm_f32 and
 * rt->conv2d_f32 with a generated epilogue. */
#ifndef LOOM_CODEGEN_CODEGEN_H
#define LOOM_CODEGEN_CODEGEN_H

#include "core/sha256.h"
#include "ir/view.h"
#include "passes/fuse.h"

/* Whether the emitter can generate code for node n (its op has a codegen
 * rule for its dtypes). Fusion asks this (cg_fuse_caps); a node it refuses becomes a
 * FUSE_REFERENCE group. */
bool cg_supports(const loom_graph_t *g, int64_t node);
/* Whether the emitter has a rule for op at all (for some dtypes and
 * shapes; cg_supports decides per node): what `loom ops` and
 * loom_op_get_info's has_codegen report. */
bool cg_op_generated(ir_op_t op);
/* Whether index node n (gather over its data's last axis, or scatter_add
 * over its second-to-last, with an index of rank >= 2) may compute its
 * index in its own group from elementwise ops and expands (a prologue),
 * each of whose outside inputs, of type t, cg_index_prologue_reads:
 * viewed as rows by columns like the index, or broadcast along them
 * (c_index.c). Fusion asks these (cg_fuse_caps). */
bool cg_index_prologue_ok(const loom_graph_t *g, const ir_node_t *n);
bool cg_index_prologue_reads(const loom_graph_t *g, const ir_node_t *n, const ir_type_t *t);
/* Whether index_select `take` (rows of a matrix) may compute scatter_add
 * `scatter`'s src (2-D, axis 0) in the scatter's group: a GNN's
 * message passing, out[dst[e]] += h[src[e]], without the (e, D) messages
 * in memory. */
bool cg_index_src_fits(const loom_graph_t *g, const ir_node_t *scatter,
                       const ir_node_t *take);

/* Whether matmul n can write its product through view v: columns one
 * element apart, steps forward. */
bool cg_matmul_writes_view(const loom_graph_t *g, const ir_node_t *n, const ir_view_t *v);
/* Whether matmul n can read an operand through view v: rows or columns
 * one element apart, steps forward. */
bool cg_matmul_reads_view(const loom_graph_t *g, const ir_node_t *n, const ir_view_t *v);
/* These decisions as the capabilities fusion asks of a back end (fuse.h):
 * the compile driver hands this to fuse_plan_build. */
extern const fuse_caps_t cg_fuse_caps;

typedef struct cg_module {
  char *source;     /* the translation unit, NUL-terminated */
  int64_t length;
  bool *generated;  /* per group: it has generated code */
  /* Per group with generated code: the group whose function,
   * loom_group_<function[g]>, runs it (g itself, or an earlier group
   * whose code is the same up to names: c_dedup.c). */
  int32_t *function;
  /* Per group, the slots its function reads (the step's map, abi.h):
   * maps[map_at[g]] to maps[map_at[g + 1]] (exclusive). */
  int32_t *map_at, *maps;
  int n_functions; /* the distinct functions in source */
  /* Where source may be cut into translation units (cpu_source_cuts_t):
   * source[0, prelude) is the ABI and the static helpers every function
   * may call, and cuts[i] the start of the i-th function's text (with its
   * own helpers), n_functions of them. */
  int64_t prelude;
  int64_t *cuts;
} cg_module_t;

/* sym_values: the value of each of g's symbols (compilation specializes
 * them), so that every dim evaluates to a constant (ir_dim_eval), or
 * CG_SYM_RUNTIME for a symbol known only at run time: code over it reads
 * syms[k] (a group it cannot handle so is declined). */
#define CG_SYM_RUNTIME (-2)
loom_status_t cg_emit_module(const loom_graph_t *g, const fuse_plan_t *plan,
                             const int32_t *slot_of_value,
                             const int64_t *sym_values, cg_module_t *out);
void cg_module_free(cg_module_t *m);

/* Feeds h what cg_emit_module's result depends on (c_key.c): two calls
 * that feed equal bytes emit equal modules, in the same build of Loom. */
void cg_key_update(core_sha256_t *h, const loom_graph_t *g, const fuse_plan_t *plan,
                   const int32_t *slot_of_value, const int64_t *sym_values);

/* The texts of src/backend/cpu/abi.h and float_math.h, embedded at
 * build time (cmake/embed_text.cmake). */
extern const char cg_abi_text[];
extern const char cg_float_math_text[];

#endif
