/* The pass pipeline. Each pass reads a graph and builds a new one with
 * the rewriter (src/ir/rewrite.h); src is left untouched. A pass that
 * finds nothing to do still returns a (copied) graph. With LOOM_LOG=passes
 * the pipeline prints the IR after every pass. */
#ifndef LOOM_PASSES_PASSES_H
#define LOOM_PASSES_PASSES_H

#include "ir/ir.h"

typedef loom_status_t (*pass_fn)(const loom_graph_t *src, loom_graph_t **out);

/* Evaluates nodes whose inputs are all constants (with the reference
 * kernels) into constants. Skips random, side-effecting and data-shaped
 * ops, and results larger than a limit (folding must not bloat the
 * graph with big constants). */
loom_status_t pass_const_fold(const loom_graph_t *src, loom_graph_t **out);
/* Merges nodes with the same op, attributes and inputs. Random ops with
 * the same seed and offset are equal too; side effects never merge. */
loom_status_t pass_cse(const loom_graph_t *src, loom_graph_t **out);
/* Drops nodes whose outputs reach neither a graph output nor an assign. */
loom_status_t pass_dce(const loom_graph_t *src, loom_graph_t **out);
/* Gives a concat that reads one value more than once a copy of it for
 * each repeat, so that the memory plan can place every operand inside
 * the result (CSE makes such repeats). */
loom_status_t pass_concat_distinct(const loom_graph_t *src, loom_graph_t **out);
/* Algebraic identities: x*1, x+0, x-0, x-x (to zeros for integer dtypes
 * only: for floats, inf-inf is NaN), double transpose, reshape of
 * reshape, cast to the same dtype, expand or broadcast of a value already
 * of that shape, identity. A rewrite keeps the value's type exactly. */
loom_status_t pass_simplify(const loom_graph_t *src, loom_graph_t **out);
/* Rewrites composite ops into primitives that fusion joins: softmax,
 * log_softmax, layer_norm, rms_norm, gelu (both forms), silu, batch_norm
 * in inference, logsumexp, variance, mean (to sum and a scale). Results
 * agree with the composite's reference kernel within float rounding. */
loom_status_t pass_decompose(const loom_graph_t *src, loom_graph_t **out);

typedef struct pass_options {
  bool fold, cse, simplify, decompose, dce;
} pass_options_t;

/* All passes on. */
void pass_options_init(pass_options_t *o);

/* Runs the enabled passes in order: simplify, decompose, fold, simplify,
 * cse, dce, concat_distinct (with cse). */
loom_status_t pass_pipeline(const loom_graph_t *src, const pass_options_t *o,
                            loom_graph_t **out);

#endif
