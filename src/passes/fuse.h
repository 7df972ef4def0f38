/* Fusion: groups of nodes that become one kernel. A value used only
 * inside its group gets no buffer; values that cross groups (and graph
 * outputs) do. Groups never recompute a contraction or a reduction, and
 * the groups, in the order listed, respect every dependency.
 *
 * Kinds of group:
 *   FUSE_ELEMENTWISE  a DAG of elementwise ops over one iteration space
 *                     (the shape of its outputs, which all share it);
 *                     inputs broadcast into it. A value used twice inside
 *                     is computed once.
 *   FUSE_REDUCTION    reductions over the same trailing axes of one
 *                     iteration space [outer..., inner...], with their
 *                     elementwise prologue (over the full space) and
 *                     epilogue (over the full space, reading reduced
 *                     values broadcast back, or over the reduced space).
 *                     softmax, layer_norm, rms_norm, logsumexp and
 *                     cross-entropy after decomposition are one such group
 *                     (or two). A reduction over other axes is a group of
 *                     its own (with its prologue). A max or average pool
 *                     is also a reduction group, anchored on the pool,
 *                     with an elementwise prologue and epilogue.
 *   FUSE_CONTRACTION  one matmul or conv2d (the anchor) with elementwise
 *                     epilogue nodes over the anchor's output space (bias,
 *                     activation, residual add, dropout mask; and nodes
 *                     that do not read the product but only feed the
 *                     epilogue, such as an optimizer's m * beta1).
 *   FUSE_LAYOUT       one layout op that moves data (transpose, slice,
 *                     concat, pad, ...); an index op (gather,
 *                     scatter_add, ...) last, after the elementwise ops
 *                     and expands computing its index and a
 *                     scatter_add's index_select computing its src.
 *   FUSE_ALIAS        a reshape-like op (reshape, squeeze, unsqueeze,
 *                     identity) on contiguous data: its output shares its
 *                     input's storage; no step runs. Never used when the
 *                     output is a graph output. Also a slice, transpose
 *                     or reshape whose output only matmuls read, through
 *                     strides (a strided view: the head split of
 *                     attention; see ir/view.c); and transposes
 *                     and reshapes that alone carry a matmul's product
 *                     on, which the matmul writes through (the heads
 *                     merged back).
 *   FUSE_REFERENCE    one node the code generator cannot handle; the
 *                     executable runs its reference kernel.
 * With fusion off (fuse_options.enabled false) every node is a group of
 * its own (elementwise ops become one-node FUSE_ELEMENTWISE groups). */
#ifndef LOOM_PASSES_FUSE_H
#define LOOM_PASSES_FUSE_H

#include "ir/ir.h"
#include "ir/view.h"

typedef enum fuse_kind {
  FUSE_ELEMENTWISE,
  FUSE_REDUCTION,
  FUSE_CONTRACTION,
  FUSE_LAYOUT,
  FUSE_ALIAS,
  FUSE_REFERENCE,
} fuse_kind_t;

/* A group takes at most FUSE_MAX_NODES nodes: its generated function
 * grows with them, and the C compiler's time faster than its length (a
 * chain of 4,000 tanh and neg: 10 s as one function, 3.6 s as functions
 * of 256 nodes), so a longer chain becomes several groups. A reduction
 * group takes at most FUSE_MAX_FOLDS folds (sum, max, ...): each fold's
 * pass computes again the nodes before it that the row cache
 * (backend/cpu/codegen/c_reduce.c) does not keep, so its code and work grow as folds
 * times nodes. */
#define FUSE_MAX_NODES 256
#define FUSE_MAX_FOLDS 8

typedef struct fuse_group {
  fuse_kind_t kind;
  int32_t anchor;   /* the contraction or (first) reduction node; -1 */
  int n_nodes;
  int32_t *nodes;   /* node ids, in graph order */
  int n_inputs;
  int32_t *inputs;  /* values read from outside the group, no repeats */
  int n_outputs;
  int32_t *outputs; /* values read outside the group or graph outputs */
  /* The output does not lie in order in its storage (ir/view.c): a
   * FUSE_ALIAS of a slice or transpose, which only the generated code of
   * the matmuls reading it knows how to walk; or a matmul's product,
   * written through strides where a chain of `into` aliases makes the
   * chain's result lie in order. Only generated code runs such groups
   * and their readers. */
  bool strided;
  /* FUSE_ALIAS in such a chain after a matmul: readers of its output see
   * it in order; views are not followed through it. */
  bool into;
} fuse_group_t;

typedef struct fuse_plan {
  int n_groups;
  fuse_group_t *groups; /* in an order that respects dependencies */
  int32_t *group_of_node; /* node id -> group index */
} fuse_plan_t;

typedef struct fuse_options {
  bool enabled;
} fuse_options_t;

/* What a back end tells fusion: which nodes it generates code for, and
 * which fused forms its code can take. Fusion asks only these (and the
 * op table), never the back end's emitter; the CPU code generator's
 * instance is cg_fuse_caps (src/backend/cpu/codegen/codegen.h). A NULL member means
 * "no": a back end without index prologues or strided matmuls leaves
 * them out. */
typedef struct fuse_caps {
  /* Whether the back end generates code for node n (its op, dtypes,
   * shapes, attributes); a node it refuses becomes a FUSE_REFERENCE
   * group, run by its reference kernel. Required. */
  bool (*supports)(const loom_graph_t *g, int64_t node);
  /* Whether matmul n can read an operand through view v (ir/view.h),
   * instead of a copy made by the view's chain of layout ops. */
  bool (*matmul_reads_view)(const loom_graph_t *g, const ir_node_t *n, const ir_view_t *v);
  /* Whether matmul n can write its product through view v, so that a
   * chain of transposes and reshapes after it becomes aliases. */
  bool (*matmul_writes_view)(const loom_graph_t *g, const ir_node_t *n, const ir_view_t *v);
  /* Whether index node n (gather, scatter_add) may compute its index in
   * its own group from elementwise ops and expands (a prologue), and
   * whether such a prologue may read an outside input of type t. */
  bool (*index_prologue_ok)(const loom_graph_t *g, const ir_node_t *n);
  bool (*index_prologue_reads)(const loom_graph_t *g, const ir_node_t *n, const ir_type_t *t);
  /* Whether index_select `take` may compute scatter_add `scatter`'s src
   * in the scatter's group (a GNN's message passing without the
   * messages in memory). */
  bool (*index_src_fits)(const loom_graph_t *g, const ir_node_t *scatter,
                         const ir_node_t *take);
} fuse_caps_t;

/* Groups g's nodes for the back end described by caps. Assign nodes
 * form FUSE_REFERENCE groups of their own, placed last. */
loom_status_t fuse_plan_build(const loom_graph_t *g, const fuse_options_t *o,
                              const fuse_caps_t *caps, fuse_plan_t *out);
void fuse_plan_free(fuse_plan_t *plan);
const char *fuse_kind_name(fuse_kind_t kind);
/* "g12 reduction [max sub exp sum div]" for group gi of plan, note (may
 * be "") after its kind, into buf; its length as snprintf gives it. */
int fuse_group_name(const loom_graph_t *g, const fuse_plan_t *plan, int gi, const char *note,
                    char *buf, size_t size);
/* One line per group ("g3 reduction [max, sub, exp, sum, div] in: %4
 * out: %9"; "g5 alias (view) [transpose] ..." for a strided view),
 * appended to a string the caller frees with core_free. */
loom_status_t fuse_plan_describe(const loom_graph_t *g,
                                 const fuse_plan_t *plan, char **out);

#endif
