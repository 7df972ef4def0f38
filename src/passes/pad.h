/* Bucket padding (the LOOM_DIM_BUCKET shape policy): a segment compiled
 * for a bucket size runs on inputs padded up to it, and must give, on the
 * real elements, exactly what the unpadded graph gives.
 *
 * pass_mask_padding rewrites a graph whose inputs carry padded dims so
 * that padding never leaks into real elements: wherever a reduction,
 * softmax, normalization, cumulative op or contraction crosses a padded
 * axis, the padded positions are masked to the operation's identity (0
 * for sum and matmul, -inf for max and softmax, ...), and means and
 * variances divide by the real size, not the bucket. The real size of
 * each group of padded dims is a new i64 rank-0 input, so one compiled
 * executable serves every real size of its bucket.
 *
 * Padded dims should be symbols (compile the result with them set to the
 * bucket), and a graph with a backward should be rewritten after
 * loom_grad, so that the backward's sums over padding are masked too
 * (docs/dynamic.md). */
#ifndef LOOM_PASSES_PAD_H
#define LOOM_PASSES_PAD_H

#include "ir/ir.h"

/* Axis `axis` of graph input `input` is padded; dims padded together (the
 * same real length, e.g. a sequence axis of several inputs) share a
 * group (0, 1, ...). */
typedef struct pad_dim {
  int input;
  int axis;
  int group;
} pad_dim_t;

typedef struct pad_result {
  /* Inputs: src's inputs, then one i64 rank-0 input per group holding
   * its real size. Outputs: src's, in order. */
  loom_graph_t *graph;
  int n_groups;
  int n_outputs;
  /* out_group[i][a]: the group whose padding axis a of output i carries
   * (slice it back to the real size), or -1. */
  int8_t (*out_group)[LOOM_MAX_RANK];
} pad_result_t;

/* LOOM_ERR_UNSUPPORTED (naming the op) when padding reaches an op it
 * cannot mask exactly (a reshape that mixes a padded axis with others,
 * an op whose output shape depends on data, ...): the caller then falls
 * back to the exact policy. */
loom_status_t pass_mask_padding(const loom_graph_t *src, int n,
                                const pad_dim_t *dims, pad_result_t *out);
void pad_result_free(pad_result_t *r);

#endif
