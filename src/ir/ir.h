/* The IR: graphs of SSA values typed by dtype and (possibly symbolic)
 * shape, the op table, attributes, and symbolic dims. */
#ifndef LOOM_IR_IR_H
#define LOOM_IR_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "loom/loom.h"

/* ---- Op table (rows in ops.def) --------------------------------------- */

typedef enum ir_op {
#define LOOM_OP(ID, ...) IR_OP_##ID,
#include "ir/ops.def"
#undef LOOM_OP
  IR_OP_COUNT
} ir_op_t;

typedef enum ir_fusion_class {
  IR_CLASS_EW,
  IR_CLASS_REDUCE,
  IR_CLASS_CONTRACT,
  IR_CLASS_LAYOUT,
  IR_CLASS_HOST,
} ir_fusion_class_t;

#define DT_BOOL DT_BIT(LOOM_BOOL)
/* What MPI reduces (the collectives' sum, mean and max). */
#define DT_COMM \
  (DT_BIT(LOOM_F32) | DT_BIT(LOOM_F64) | DT_BIT(LOOM_I8) | DT_BIT(LOOM_I32) | DT_BIT(LOOM_I64))
/* Integers and bool: what the bitwise ops take (bool as one bit). */
#define DT_INTEGRAL (DT_INT | DT_BOOL)
/* A condition: bool, or an integer read as "non-zero". */
#define DT_COND (DT_BOOL | DT_INT)

enum {
  F_DATA_SHAPE = 1u << 0,  /* output shape depends on input data */
  F_SIDE_EFFECT = 1u << 1, /* writes persistent state */
  F_RANDOM = 1u << 2,      /* draws from the counter-based generator */
  F_SUBGRAPH = 1u << 3,    /* runs subgraphs of its graph (if, loop) */
  F_INT_I64 = 1u << 4,     /* integer and bool inputs give an i64 result */
  F_FOLD = 1u << 5,        /* folds axes into one accumulator per output */
  F_WINDOW = 1u << 6,      /* windowed reduction (pooling) */
  F_VIEW = 1u << 7,        /* output: its input through a strided view */
  F_ALIAS = 1u << 8,       /* output: its input's elements in order */
  F_INDEX = 1u << 9,       /* indexes its data with an integer input */
  F_COLLECTIVE = 1u << 10, /* communicates with the other ranks: kept, never
                            * merged or folded, and run in graph order with
                            * respect to the other collectives */
  F_INPLACE = 1u << 11,    /* its step may write its output over its input
                            * 0's buffer when nothing reads that input after */
  F_EARLY = 1u << 12,      /* scheduled as soon as it is ready (a start) */
  F_LATE = 1u << 13,       /* scheduled when nothing else is ready (a wait) */
};


struct ir_infer;
typedef loom_status_t (*ir_shape_fn)(struct ir_infer *c);

typedef struct ir_op_info {
  const char *name;
  ir_fusion_class_t fusion_class;
  int in_min, in_max; /* in_max -1: variadic */
  int n_out;          /* -1: one per entry of attribute "sizes";
                       * -2: one per result of its subgraphs */
  uint32_t dtypes;    /* accepted dtypes of input 0 */
  uint32_t flags;
  ir_shape_fn shape;
  bool has_grad;
  bool not_differentiable; /* grad column ZERO: no gradient flows through */
  const char *attrs; /* schema: "name:kind[?] ..." */
  const char *doc;
} ir_op_info_t;

extern const ir_op_info_t ir_ops[IR_OP_COUNT];

/* Whether op ends a gradient's path, so that what only reaches the loss
 * through it gets no gradient at all (PyTorch's None): the ZERO ops, but
 * for the roundings, whose gradient is zeros (PyTorch's floor, round). */
static inline bool ir_op_blocks_gradient(ir_op_t op) {
  return ir_ops[op].not_differentiable && op != IR_OP_FLOOR && op != IR_OP_CEIL &&
         op != IR_OP_ROUND && op != IR_OP_SIGN;
}

/* Whether op's row has every one of flags (F_FOLD, F_VIEW, ...). */
static inline bool ir_op_has(ir_op_t op, uint32_t flags) {
  return (ir_ops[op].flags & flags) == flags;
}
const char *ir_fusion_class_name(ir_fusion_class_t c);

/* ---- Symbolic dims ------------------------------------------------------ */

/* A dim: a constant, or a handle to an interned expression of the graph.
 * Handles sit at the bottom of the int64 range; constants above it may be
 * negative inside arithmetic, never in a value's type. */
typedef int64_t ir_dim_t;
#define IR_DIM_SYM_BASE (INT64_MIN / 2)
#define IR_DIM_SYM_END (IR_DIM_SYM_BASE + ((int64_t)1 << 40))

static inline bool ir_dim_is_sym(ir_dim_t d) {
  return d >= IR_DIM_SYM_BASE && d < IR_DIM_SYM_END;
}
static inline bool ir_dim_is_const(ir_dim_t d) { return d >= IR_DIM_SYM_END; }

typedef enum ir_expr_kind {
  IR_EXPR_CONST,
  IR_EXPR_SYM,
  IR_EXPR_ADD,
  IR_EXPR_MUL,
  IR_EXPR_FLOORDIV,
} ir_expr_kind_t;

typedef struct ir_expr {
  ir_expr_kind_t kind;
  int64_t c;      /* IR_EXPR_CONST: the value; IR_EXPR_SYM: symbol number */
  ir_dim_t a, b;  /* operands of ADD, MUL, FLOORDIV */
  char *name;     /* IR_EXPR_SYM */
} ir_expr_t;

loom_status_t ir_dim_symbol(loom_graph_t *g, const char *name, ir_dim_t *out);
/* A fresh symbol for a dim that only a run can tell (nonzero's count). */
loom_status_t ir_dim_fresh_symbol(loom_graph_t *g, const char *prefix,
                                  ir_dim_t *out);
loom_status_t ir_dim_add(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                         ir_dim_t *out);
loom_status_t ir_dim_mul(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                         ir_dim_t *out);
loom_status_t ir_dim_floordiv(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                              ir_dim_t *out);
/* The expression behind a symbolic dim. */
const ir_expr_t *ir_dim_expr(const loom_graph_t *g, ir_dim_t d);
/* Number of symbols in the graph (symbol numbers are 0..n-1). */
int ir_num_symbols(const loom_graph_t *g);
/* The symbol of g called name, or NULL. */
const ir_expr_t *ir_symbol_find(const loom_graph_t *g, const char *name);
/* The names of g's symbols, quoted and separated by commas ("" for
 * none), into buf (cut with "..." when it does not fit). */
const char *ir_symbols_str(const loom_graph_t *g, char *buf, size_t size);
/* Value of d when symbol k has value sym_values[k] (< 0: unbound). */
loom_status_t ir_dim_eval(const loom_graph_t *g, ir_dim_t d,
                          const int64_t *sym_values, int64_t *out);
const char *ir_dim_str(const loom_graph_t *g, ir_dim_t d, char *buf,
                       size_t size);

/* ---- Types -------------------------------------------------------------- */

typedef struct ir_type {
  loom_dtype_t dtype;
  int rank;
  ir_dim_t dims[LOOM_MAX_RANK];
} ir_type_t;

/* "f32[n, 3]" into buf. */
const char *ir_type_str(const loom_graph_t *g, const ir_type_t *t, char *buf,
                        size_t size);
bool ir_type_equal(const ir_type_t *a, const ir_type_t *b);

/* ---- Attributes --------------------------------------------------------- */

#define IR_MAX_ATTRS 8
#define IR_MAX_ATTR_INTS (2 * LOOM_MAX_RANK)
#define IR_ATTR_NAME 24

typedef enum ir_attr_kind { IR_ATTR_INT, IR_ATTR_FLOAT, IR_ATTR_INTS } ir_attr_kind_t;

typedef struct ir_attr {
  char name[IR_ATTR_NAME];
  ir_attr_kind_t kind;
  int n;                         /* IR_ATTR_INTS: count */
  int64_t ints[IR_MAX_ATTR_INTS]; /* IR_ATTR_INT: ints[0] */
  double f;
} ir_attr_t;

typedef struct ir_attrs {
  int n;
  ir_attr_t a[IR_MAX_ATTRS];
} ir_attrs_t;

/* A node's attributes are stored with room for its n alone (a node's
 * ir_attrs_t *attrs): only a[0, n) may be read, and never the whole
 * struct; ir_attrs_copy makes a full one from it. */
void ir_attrs_copy(ir_attrs_t *dst, const ir_attrs_t *src);
/* The bytes of attributes stored with room for n alone. */
size_t ir_attrs_bytes(int n);

/* Setters replace an attribute of the same name. They fail only when the
 * list is full or the name or list is too long, which is a programming
 * error; the op's schema check then reports it. */
void ir_attrs_int(ir_attrs_t *a, const char *name, int64_t v);
void ir_attrs_float(ir_attrs_t *a, const char *name, double v);
void ir_attrs_ints(ir_attrs_t *a, const char *name, int n, const int64_t *v);

const ir_attr_t *ir_attrs_find(const ir_attrs_t *a, const char *name);
int64_t ir_attr_int(const ir_attrs_t *a, const char *name, int64_t dflt);
double ir_attr_float(const ir_attrs_t *a, const char *name, double dflt);
/* Count of the list and a pointer to it in *v; -1 when absent. */
int ir_attr_ints(const ir_attrs_t *a, const char *name, const int64_t **v);
/* out[0:count] = the list when it has count entries, else dflt each. */
void ir_attr_ints_or(const ir_attrs_t *a, const char *name, int count, int64_t dflt,
                     int64_t *out);
/* Checks attributes against the op's schema (and the origin every op
 * may carry). */
loom_status_t ir_attrs_check(ir_op_t op, const ir_attrs_t *a);

/* ---- Attribute schemas (src/ir/schema.c) ----------------------------------
 * The attrs column of the op table, parsed once: one spec per word
 * "name:kind", kind int|float|ints|dtype|graph (dtype: an int holding a
 * loom_dtype_t; graph: an int naming a subgraph of the node's graph).
 * After the kind, '?' marks an optional attribute whose absence has a
 * meaning of its own (the op's doc says which: "all axes"), and "=value"
 * an optional one with that default ("0.01", "-inf", "1,1", "i64"). */

#define IR_MAX_DEFAULT_INTS 4

typedef struct ir_attr_spec {
  char name[IR_ATTR_NAME];
  loom_attr_kind_t kind;
  bool optional, has_default;
  int n_ints;                          /* an ints default: its count */
  int64_t ints[IR_MAX_DEFAULT_INTS];   /* int and dtype defaults: ints[0] */
  double f;                            /* a float default */
  char text[24];                       /* the default as the table writes it */
} ir_attr_spec_t;

typedef struct ir_schema {
  int n;
  ir_attr_spec_t a[IR_MAX_ATTRS];
  char error[96]; /* a malformed schema (an op table bug): why; else "" */
} ir_schema_t;

const ir_schema_t *ir_op_schema(ir_op_t op);
/* OK when i is an op index, else an error naming fn. */
loom_status_t ir_op_check(const char *fn, int i);
/* The spec of attribute name of op, or NULL. */
const ir_attr_spec_t *ir_op_attr_spec(ir_op_t op, const char *name);
/* How a node stores an attribute of this kind. */
ir_attr_kind_t ir_attr_storage(loom_attr_kind_t kind);
/* "int", "float", "ints", "dtype", "graph"; "?" out of range. */
const char *ir_attr_kind_name(loom_attr_kind_t kind);

/* Attribute name of a node of op, or the default op's schema gives it
 * (0, or zeros, when it has none: a required attribute, or an optional
 * one whose absence the caller handles). The one place defaults come
 * from, so that shape rules, kernels and rules agree. ir_op_ints takes
 * the list when it has count entries, else the default when it has. */
int64_t ir_op_int(ir_op_t op, const ir_attrs_t *a, const char *name);
double ir_op_float(ir_op_t op, const ir_attrs_t *a, const char *name);
void ir_op_ints(ir_op_t op, const ir_attrs_t *a, const char *name, int count, int64_t *out);

/* ---- Graphs ------------------------------------------------------------- */

typedef enum ir_value_kind {
  IR_VALUE_INPUT,
  IR_VALUE_PARAM,
  IR_VALUE_CONST,
  IR_VALUE_NODE,
} ir_value_kind_t;

typedef struct ir_value {
  ir_type_t type;
  ir_value_kind_t kind;
  int32_t node;        /* IR_VALUE_NODE: producer */
  int32_t index;       /* output index; or position among inputs/params */
  char *name;          /* may be NULL */
  loom_tensor_t *data; /* IR_VALUE_CONST: value; IR_VALUE_PARAM: state */
  bool borrowed;       /* data belongs to another graph (src/ir/rewrite.h) */
} ir_value_t;

typedef struct ir_node {
  ir_op_t op;
  int n_in, n_out;
  int32_t *in;  /* value ids */
  int32_t *out; /* value ids */
  /* Its attributes, in storage sized to them (a full ir_attrs_t is 1.3
   * KB): read-only, and only a[0, attrs->n) is there. */
  const ir_attrs_t *attrs;
} ir_node_t;

/* ---- Origins (src/ir/origin.c) --------------------------------------------
 * A node that a public call built as part of a composition carries the
 * int attribute "origin", an ir_origin_t, so that its run-time errors name
 * that call and its argument instead of an op the user never called. */

#define IR_ORIGIN_ATTR "origin"

typedef enum ir_origin {
  IR_ORIGIN_NONE,
  IR_ORIGIN_CROSS_ENTROPY_LABELS, /* loom_cross_entropy's one-hot of its labels */
  IR_ORIGIN_COUNT
} ir_origin_t;

typedef struct ir_origin_info {
  const char *call;  /* the public call: "loom_cross_entropy" */
  const char *index; /* what the node's indices are to the caller: "label" */
  const char *range; /* what they count: "classes" */
} ir_origin_info_t;

/* Entry `origin` of the table, or NULL for none or a number out of range. */
const ir_origin_info_t *ir_origin_info(int64_t origin);
/* Node n's origin, or NULL when it has none. */
const ir_origin_info_t *ir_node_origin(const ir_node_t *n);
/* Fails with LOOM_ERR_VALUE for index `value`, entry `position` of node
 * n's indices, out of range for a dim of `size`: in the terms of n's
 * origin when it has one, else of its op. */
loom_status_t ir_index_error(const ir_node_t *n, int64_t value, int64_t position,
                             int64_t size);

/* Called after each node is added (the tracer records through it). A
 * non-OK return makes the builder call fail with that status; the node
 * stays in the graph. before_change (may be NULL) is called before any
 * change (a node, a value, an output, a symbol); a non-OK return refuses
 * the change, which leaves the graph as it was (the tracer refuses a
 * thread other than the one recording the step). `what` names the call
 * (an op's name, "loom_graph_input", ...) for its message. */
/* pin_dim (may be NULL) gives a symbolic dim's size now, in a graph
 * whose symbols have sizes while it is built (a trace), and from then on
 * treats the dim as that constant (the tracer keys its segments on it):
 * shape inference asks for it where symbolic dims cannot be proven to
 * agree (ir_specialize). false: the size is not known. */
/* size_now (may be NULL) gives a symbolic dim's size now without pinning
 * it: a node over symbolic dims is also checked by its op's rule at those
 * sizes (a window larger than this step's input fails when it is added,
 * not when the graph runs). false: the size is not known. */
/* node_check (may be NULL) refuses an op before its node exists: a
 * refusal from node_added leaves the node in the graph. */
typedef struct ir_hook {
  loom_status_t (*node_check)(void *ctx, const loom_graph_t *g, ir_op_t op);
  loom_status_t (*node_added)(void *ctx, loom_graph_t *g, int32_t node);
  loom_status_t (*before_change)(void *ctx, loom_graph_t *g, const char *what);
  bool (*pin_dim)(void *ctx, loom_graph_t *g, ir_dim_t d, int64_t *size);
  bool (*size_now)(void *ctx, const loom_graph_t *g, ir_dim_t d, int64_t *size);
  void *ctx;
} ir_hook_t;

struct loom_graph {
  ir_value_t *values;
  int64_t n_values, cap_values;
  ir_node_t *nodes; /* in execution (topological) order */
  int64_t n_nodes, cap_nodes;
  int32_t *inputs, *params, *outputs;
  int64_t n_inputs, cap_inputs, n_params, cap_params, n_outputs, cap_outputs;
  /* Names of outputs given by loom_graph_output_named (NULL: unnamed),
   * n_output_names of them: one per output named or added after one. */
  char **output_names;
  int64_t n_output_names;
  ir_expr_t *exprs;
  int64_t n_exprs, cap_exprs;
  int n_symbols;
  int n_fresh; /* fresh symbols made so far, for unique names */
  ir_hook_t hook; /* node_added NULL: none */
  /* Bodies of if and loop nodes, owned; nodes name them by index. */
  loom_graph_t **subgraphs;
  int64_t n_subgraphs, cap_subgraphs;
  loom_graph_t *owner; /* the graph this one is a subgraph of, or NULL */
  /* Index of the input and parameter names (src/ir/names.c): value ids,
   * -1 for an empty slot; n_names_indexed leaves are in it (-1: stale). */
  int32_t *names;
  int64_t cap_names, n_names_indexed;
  /* The nodes' in and out arrays, carved from blocks that a reset keeps
   * (ids_take in src/ir/graph.c). */
  struct ir_id_block *id_blocks;
  /* Parameters holding one rank's shard of a whole value (src/ir/shard.c). */
  struct ir_shard *shards;
  int64_t n_shards;
  /* Holders besides the creator (ir_graph_hold): executables compiled
   * from it, which share its parameters; the graph is freed by whichever
   * of loom_graph_destroy and the last let-go comes last. */
  _Atomic int32_t holds;
};

/* Keeps g (the graph owning it, for a subgraph) alive until a matching
 * ir_graph_let_go, whether or not loom_graph_destroy comes first. */
void ir_graph_hold(loom_graph_t *g);
void ir_graph_let_go(loom_graph_t *g);

/* The hook's verdict on a change of g (OK without a hook). */
static inline loom_status_t ir_before_change(loom_graph_t *g, const char *what) {
  return g->hook.before_change ? g->hook.before_change(g->hook.ctx, g, what) : LOOM_OK;
}

/* Empties g (values, nodes, symbols) but keeps its allocations, so that a
 * trace refilled every step does not allocate again. The hook stays. */
void ir_graph_reset(loom_graph_t *g);

/* loom_graph_constant taking t itself, which must be contiguous and own
 * its storage (a front end's freshly decoded weights: no second copy);
 * t is the graph's from then on, or destroyed on failure. */
loom_status_t ir_graph_constant_adopt(loom_graph_t *g, loom_tensor_t *t, loom_value_t *out);
/* loom_graph_input without the check that its name is unique, for graphs
 * Loom builds itself (a trace, a pass's graph), where names only label
 * values in messages and may repeat. */
loom_status_t ir_graph_input(loom_graph_t *g, const char *name, loom_dtype_t dtype,
                             int rank, const loom_dim_t *dims, loom_value_t *out);

/* ---- Names of inputs and parameters (src/ir/names.c) --------------------- */

/* Fails, naming fn and the input or parameter that has it, when name
 * (not NULL) is taken by an input or parameter of g; else makes room for
 * it in the index. */
loom_status_t ir_names_check(loom_graph_t *g, const char *fn, const char *name);
/* Records leaf id, just added to g's inputs or parameters, in the index. */
void ir_names_add(loom_graph_t *g, int32_t id);
/* Marks the index stale (the leaves changed), to be rebuilt on next use. */
void ir_names_forget(loom_graph_t *g);

/* Destroys g but keeps its node and value arrays for the next graph
 * ir_graph_take_spare fills on this thread (one graph's worth: keeping
 * another frees the last). A pass pipeline drops a graph as each pass
 * makes the next; the fresh pages of a new 100,000-node graph (1.3 KB a
 * node) cost more than its pass, and memory that large is never reused
 * by malloc, which maps it anew each time. */
void ir_graph_recycle(loom_graph_t *g);
/* Gives g, a new empty graph, the arrays ir_graph_recycle kept, with
 * room for `nodes` nodes and `values` values at least (a rewrite of a
 * graph that size: growing them by doubling copied the nodes over again
 * at each step). */
loom_status_t ir_graph_take_spare(loom_graph_t *g, int64_t nodes, int64_t values);
/* Frees what ir_graph_recycle kept on this thread. */
void ir_graph_free_spare(void);

/* ---- Shards (src/ir/shard.c) ----------------------------------------------
 * A parameter that holds rank `rank`'s part of a whole value split over
 * `ranks` ranks (ZeRO-1's optimizer state, src/train/zero.c): the whole
 * flattened and padded with zeros to ranks * n elements, n the
 * parameter's numel, rank r holds elements [r * n, (r + 1) * n).
 * Checkpoints save and load the whole (src/train/checkpoint_comm.c); the
 * parameters' broadcast leaves shards alone. */
typedef struct ir_shard {
  int32_t value; /* the parameter */
  int ranks, rank;
  ir_type_t whole;
} ir_shard_t;

/* Records parameter `value` as a shard of a value of type whole. */
loom_status_t ir_shard_add(loom_graph_t *g, int32_t value, int ranks, int rank,
                           const ir_type_t *whole);
/* The record of parameter `value`, or NULL when it is no shard. */
const ir_shard_t *ir_shard_of(const loom_graph_t *g, int32_t value);

/* ---- Subgraphs (src/ir/op_control.c) ------------------------------------ */

/* Makes sub a subgraph of g, at index *index. g owns sub from then on;
 * on failure sub is destroyed, unless it already belongs to a graph or
 * is g or one of g's owners, which is then left alone. */
loom_status_t ir_graph_adopt(loom_graph_t *g, loom_graph_t *sub, int64_t *index);
/* Destroys sub unless some graph holds it (or it is null): a builder
 * that takes subgraphs over, failing before it adopts sub. */
void ir_graph_drop_unowned(loom_graph_t *g, loom_graph_t *sub);
/* Undoes the adoption of subgraph `index` (the last one) after a failed
 * build, unless g has other nodes than its n_nodes then (a node hook
 * failed after the node that names it went in). */
void ir_graph_drop_adopted(loom_graph_t *g, int64_t index, int64_t n_nodes);
/* ---- Subgraph lookup (src/ir/subgraph.c) ---- */
/* The subgraph of g named by int attribute `attr` of a, or NULL. */
loom_graph_t *ir_attrs_subgraph(const loom_graph_t *g, const ir_attrs_t *a, const char *attr);
/* The subgraph named by int attribute `attr` of node n, or NULL. */
loom_graph_t *ir_node_subgraph(const loom_graph_t *g, const ir_node_t *n,
                               const char *attr);
/* The names of op's subgraph attributes into names[0..1]; their count
 * (0 for an op without subgraphs). */
int ir_subgraph_attrs(ir_op_t op, const char **names);
/* A hash of g's structure (src/ir/hash.c): its inputs' types, constants'
 * values, nodes (op, operands, attributes; a subgraph by its own hash,
 * not its index) and outputs; symbols by name. Graphs built alike hash
 * alike. */
uint64_t ir_graph_hash(const loom_graph_t *g);
/* Number of outputs of an op whose n_out is -2, from its subgraphs
 * (0 when they are missing: the shape rule reports it). */
int ir_control_n_out(const loom_graph_t *g, ir_op_t op, const ir_attrs_t *a);
/* Checks the subgraphs of node i: present, owned by g, valid, and free
 * of assigns (a body cannot write the outer graph's state). */
loom_status_t ir_verify_subgraphs(const loom_graph_t *g, int64_t i);
/* Whether node n's output shapes are known only when it runs: ops
 * flagged F_DATA_SHAPE, except a loop whose scan outputs have a constant
 * length (a constant trip count and no condition) or a dim's (a trip
 * count that ir_counted_dim reads, and no condition). */
bool ir_node_data_shaped(const loom_graph_t *g, const ir_node_t *n);
/* The dim d when value v counts it as a rank-0 i64 sum of a full of d
 * ones (a symbolic dim made a tensor: the ONNX importer's), else -1. */
ir_dim_t ir_counted_dim(const loom_graph_t *g, int32_t v);
/* The value that node n only broadcasts, its elements unchanged: an
 * expand's input, or the other operand of an integer add of zeros (a
 * full of 0, or a constant whose bytes are all 0); -1 for any other node
 * (src/ir/op_generate.c). */
int32_t ir_broadcast_source(const loom_graph_t *g, const ir_node_t *n);

/* ---- Cost (src/ir/op_contract.c) ------------------------------------------ */

/* Floating-point operations of node n when it is a contraction (matmul,
 * convolutions: 2 per multiply-add), 0 for any other op; symbol k has the
 * value syms[k] (syms may be NULL), and -1 means a size is unbound. */
double ir_node_flops(const loom_graph_t *g, const ir_node_t *n, const int64_t *syms);

/* Shape-rule context: the input types and attributes of a node being
 * built; the rule fills out[0..n_out-1]. */
typedef struct ir_infer {
  loom_graph_t *g;
  ir_op_t op;
  const ir_attrs_t *attrs;
  int n_in;
  const ir_type_t *const *in;
  const int32_t *in_ids; /* value ids of the inputs */
  int n_out;
  ir_type_t *out;
} ir_infer_t;

/* Appends a node, after checking its arity, input dtypes and attributes
 * and inferring its output types. out (may be null) receives the output
 * value ids; out_cap is its capacity. */
loom_status_t ir_add_node(loom_graph_t *g, ir_op_t op, int n_in,
                          const int32_t *in, const ir_attrs_t *attrs,
                          int32_t *out, int out_cap);
/* Whether v names a value of g (inline: every node added asks it of
 * each input). */
static inline bool ir_value_valid(const loom_graph_t *g, int32_t v) {
  return v >= 0 && v < g->n_values;
}
/* "value %3 ('x')" style name for messages. */
const char *ir_value_str(const loom_graph_t *g, int32_t v, char *buf,
                         size_t size);
loom_status_t ir_verify(const loom_graph_t *g);

/* Builds a node from a public call with a single output. */
loom_status_t ir_build1(loom_graph_t *g, ir_op_t op, int n_in,
                        const loom_value_t *in, const ir_attrs_t *attrs,
                        loom_value_t *out);

/* ---- Shape-rule helpers (src/ir/shape.c) --------------------------------- */

/* NumPy broadcasting of a and b into out; names op and inputs on failure. */
/* Where *a and *b cannot be proven to agree and one is symbolic: replaces
 * both by their sizes now when the graph's hook knows them (pin_dim),
 * and returns true; the caller compares again. */
bool ir_specialize(loom_graph_t *g, ir_dim_t *a, ir_dim_t *b);
/* *d by its size now (pin_dim); false when the hook does not know it. */
bool ir_pin_dim(loom_graph_t *g, ir_dim_t *d);
loom_status_t ir_broadcast(ir_infer_t *c, const ir_type_t *a,
                           const ir_type_t *b, ir_type_t *out);
/* Normalizes a possibly negative axis against rank; fails naming op. */
loom_status_t ir_axis(ir_infer_t *c, int64_t axis, int rank, int *out);
/* Fails with LOOM_ERR_DTYPE unless input i's dtype is in mask. */
loom_status_t ir_check_dtype(ir_infer_t *c, int i, uint32_t mask,
                             const char *what);
/* Python slicing with clamping on one axis of size dim: the first index
 * taken and the count. Shared by slice's shape rule and its kernel, so
 * that the shape and the elements taken cannot disagree. */
void ir_slice_range(int64_t dim, int64_t start, int64_t end, int64_t step,
                    int64_t *first, int64_t *count);
/* A slice node's bounds (its attributes starts, ends, axes, steps): each
 * one's axis (a negative one counted back from rank; not range-checked),
 * start, end and step (1 when absent). Returns how many, at most
 * IR_MAX_ATTR_INTS. */
typedef struct ir_slice_bound {
  int axis;
  int64_t start, end, step;
} ir_slice_bound_t;
int ir_slice_bounds(const ir_attrs_t *a, int rank, ir_slice_bound_t *out);
/* Fails with LOOM_ERR_SHAPE naming the op and the types of all inputs. */
loom_status_t ir_shape_fail(ir_infer_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- Sizes (src/ir/shape.c) ----------------------------------------------- */

/* Whether t's constant dims pass shape_size with its dtype's bytes (its
 * symbolic dims are checked when their values are known); else a reason
 * into why. */
bool ir_type_size_ok(const ir_type_t *t, char *why, size_t size);
/* Checks every output type of a node being built; LOOM_ERR_SHAPE naming
 * the op, the output and the inputs. */
loom_status_t ir_check_output_sizes(ir_infer_t *c);
/* "value %5 'x' (made by expand)" into buf, for messages. */
const char *ir_value_desc(const loom_graph_t *g, int32_t v, char *buf, size_t size);
/* Bytes of value v at shape (its dims evaluated); LOOM_ERR_SHAPE naming
 * `what` (the caller's context), the value, the op making it and the
 * shape when shape_size refuses it. */
loom_status_t ir_value_bytes(const loom_graph_t *g, const char *what, int32_t v,
                             const int64_t *shape, int64_t *bytes);
/* Value v at shape, when a convolution makes it: LOOM_ERR_SHAPE
 * naming `what` when a spatial dim is empty, its input smaller than the
 * kernel (an error, as PyTorch's, not an empty result; a constant size
 * fails when the graph is built, a symbolic one only when it runs). */
loom_status_t ir_check_window_output(const loom_graph_t *g, const char *what, int32_t v,
                                     const int64_t *shape);

#endif
