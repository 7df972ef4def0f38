/* Strided views: the elements of a value read in place from another
 * value's storage, through an offset and strides, where a chain of
 * slices, transposes and reshape-like ops would otherwise copy. This is
 * IR reasoning over constant shapes: which chains are views, and what
 * offset and strides they compose to. Fusion (src/passes/fuse.c) asks
 * which chains qualify; a back end that reads or writes views walks the
 * same chains for its addressing. */
#ifndef LOOM_IR_VIEW_H
#define LOOM_IR_VIEW_H

#include "ir/ir.h"

/* A strided view: the elements of a value read in place from `root`'s
 * storage, element (i0, i1, ...) at offset + i0 * stride[0] + ...
 * (elements). */
typedef struct ir_view {
  int32_t root;
  int rank;
  int64_t dim[LOOM_MAX_RANK], stride[LOOM_MAX_RANK];
  int64_t offset;
} ir_view_t;

/* Whether node n may be a view of its input: a slice, transpose,
 * reshape, squeeze or unsqueeze over constant dims. */
bool ir_view_op(const loom_graph_t *g, const ir_node_t *n);
/* Whether value v is stored as its producer's input (fusion made it a
 * view or an alias). */
typedef bool (*ir_view_shares_fn)(const void *ctx, int32_t node);
/* Value v as a view of the first value up its chain of producers that
 * `shares` does not pass over (or that no view op made); false when the
 * chain is not a strided view (a step backwards, a reshape across
 * strides). */
bool ir_view_of(const loom_graph_t *g, int32_t v, ir_view_shares_fn shares, const void *ctx,
                ir_view_t *out);
/* Value v in order in its own storage. */
bool ir_view_plain(const loom_graph_t *g, int32_t v, ir_view_t *out);
/* The other way, through a chain of transposes, reshapes, squeezes and
 * unsqueezes, each reading the one before: *v holds where chain[n - 1]'s
 * output lies, and becomes where chain[0]'s input lies. */
bool ir_view_back(const loom_graph_t *g, int n, const ir_node_t *const *chain, ir_view_t *v);
/* Whether view v is its root's storage in order (contiguous, offset 0). */
bool ir_view_is_plain(const ir_view_t *v);

#endif
