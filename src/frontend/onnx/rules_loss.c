/* Rules for ONNX's losses: NegativeLogLikelihoodLoss, and
 * SoftmaxCrossEntropyLoss as the same loss of LogSoftmax's output. The
 * target's class is picked with a mask, the target compared with the
 * classes 0..C-1, rather than with a gather: a target equal to
 * ignore_index, which may lie outside 0..C-1, then picks nothing, and the
 * gradient reaches the input (and the weights) through loom_where. */
#include <string.h>

#include "frontend/onnx/onnx_import.h"

typedef enum { REDUCE_NONE, REDUCE_SUM, REDUCE_MEAN } reduction_t;

static loom_status_t read_reduction(const ox_node_t *n, reduction_t *out) {
  char buf[16];
  const char *r = ox_string(n, "reduction", "mean", buf, sizeof buf);
  if (!strcmp(r, "none")) *out = REDUCE_NONE;
  else if (!strcmp(r, "sum")) *out = REDUCE_SUM;
  else if (!strcmp(r, "mean")) *out = REDUCE_MEAN;
  else return ox_fail(n, LOOM_ERR_INVALID, "reduction '%s' (none, sum or mean)", r);
  return LOOM_OK;
}

/* Per-class v (C) shaped (1, C, 1, ...) to broadcast against rank r. */
static loom_status_t along_classes(ox_node_t *n, loom_value_t v, int64_t c, int r,
                                   loom_value_t *out) {
  loom_dim_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < r; d++) shape[d] = d == 1 ? c : 1;
  return loom_reshape(n->g, v, r, shape, out);
}

/* Whether each (n, c, d...) is the target's class: target (N, d...) of
 * rank r - 1 against classes 0..c-1, false everywhere for a target equal
 * to ignore_index (when the node has one). */
static loom_status_t class_mask(ox_node_t *n, loom_value_t target, int64_t c, int r,
                                loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t t, classes, ii, kept;
  int64_t axis = 1;
  LOOM_TRY(loom_cast(g, target, LOOM_I64, &t));
  LOOM_TRY(loom_unsqueeze(g, t, 1, &axis, &t));
  LOOM_TRY(loom_arange(g, 0, (double)c, 1, LOOM_I64, &classes));
  LOOM_TRY(along_classes(n, classes, c, r, &classes));
  LOOM_TRY(loom_eq(g, t, classes, out));
  if (!ox_attr(n, "ignore_index")) return LOOM_OK;
  LOOM_TRY(ox_scalar(n, LOOM_I64, (double)ox_int(n, "ignore_index", 0), &ii));
  LOOM_TRY(loom_ne(g, t, ii, &kept));
  return loom_and(g, *out, kept, out);
}

/* Checks input (N, C, d...) against target (N, d...); C into *c. */
static loom_status_t check_shapes(ox_node_t *n, loom_value_t input, loom_value_t target,
                                  int64_t *c) {
  loom_dim_t xd[LOOM_MAX_RANK], td[LOOM_MAX_RANK];
  int r, tr;
  LOOM_TRY(ox_dims(n, input, xd, &r));
  LOOM_TRY(ox_dims(n, target, td, &tr));
  if (r < 2) return ox_fail(n, LOOM_ERR_SHAPE, "input of rank %d (needs (N, C, ...))", r);
  if (tr != r - 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "target of rank %d for input of rank %d (needs %d)", tr,
                   r, r - 1);
  if (!ox_is_float(ox_dtype(n, input)))
    return ox_fail(n, LOOM_ERR_DTYPE, "input of dtype %s (needs a float type)",
                   loom_dtype_name(ox_dtype(n, input)));
  loom_dtype_t tt = ox_dtype(n, target);
  if (tt != LOOM_I64 && tt != LOOM_I32)
    return ox_fail(n, LOOM_ERR_DTYPE, "target of dtype %s (needs int32 or int64)",
                   loom_dtype_name(tt));
  for (int d = 0; d < tr; d++) {
    loom_dim_t want = xd[d ? d + 1 : 0];
    if (td[d] >= 0 && want >= 0 && td[d] != want)
      return ox_fail(n, LOOM_ERR_SHAPE, "target dim %d is %lld, the input's is %lld", d,
                     (long long)td[d], (long long)want);
  }
  if (xd[1] < 0) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a symbolic class count C");
  *c = xd[1];
  return LOOM_OK;
}

/* loss (N, d...) = -input[n, target, d...] * weight[target], 0 where the
 * target is ignored; then summed, or divided by the sum of the weights
 * (the count when there are none) of the targets not ignored. */
static loom_status_t nll(ox_node_t *n, loom_value_t input, loom_value_t target,
                         loom_value_t weight, loom_value_t *out) {
  loom_graph_t *g = n->g;
  reduction_t red = REDUCE_MEAN;
  int64_t c;
  LOOM_TRY(read_reduction(n, &red));
  LOOM_TRY(check_shapes(n, input, target, &c));
  int r = ox_rank(n, input);
  int64_t axis = 1, all[LOOM_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d;
  loom_value_t hot, zero, picked, w, target_w, loss, total, count;
  LOOM_TRY(class_mask(n, target, c, r, &hot));
  LOOM_TRY(ox_like(n, input, 0.0, &zero));
  LOOM_TRY(loom_where(g, hot, input, zero, &picked));
  if (weight.id >= 0) {
    loom_dim_t wc = ox_dim(n, weight, 0);
    if (wc >= 0 && wc != c)
      return ox_fail(n, LOOM_ERR_SHAPE, "weight of %lld classes for %lld", (long long)wc,
                     (long long)c);
    LOOM_TRY(along_classes(n, weight, c, r, &w));
    LOOM_TRY(loom_mul(g, picked, w, &picked));
  } else {
    LOOM_TRY(ox_like(n, input, 1.0, &w));
  }
  LOOM_TRY(loom_sum(g, picked, 1, &axis, 0, &loss));
  LOOM_TRY(loom_neg(g, loss, &loss));
  if (red == REDUCE_NONE) {
    *out = loss;
    return LOOM_OK;
  }
  LOOM_TRY(loom_sum(g, loss, r - 1, all, 0, &total));
  if (red == REDUCE_SUM) {
    *out = total;
    return LOOM_OK;
  }
  LOOM_TRY(loom_where(g, hot, w, zero, &target_w));
  LOOM_TRY(loom_sum(g, target_w, r, all, 0, &count));
  return loom_div(g, total, count, out);
}

static loom_status_t need_inputs(ox_node_t *n, loom_value_t *weight) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  weight->id = -1;
  if (!ox_has(n, 2)) return LOOM_OK;
  *weight = n->in[2];
  if (ox_rank(n, *weight) != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "weight of rank %d (needs (C))", ox_rank(n, *weight));
  if (ox_dtype(n, *weight) != ox_dtype(n, n->in[0]))
    return ox_fail(n, LOOM_ERR_DTYPE, "weight of dtype %s for input of dtype %s",
                   loom_dtype_name(ox_dtype(n, *weight)), loom_dtype_name(ox_dtype(n, n->in[0])));
  return LOOM_OK;
}

loom_status_t ox_nll_loss(ox_node_t *n) {
  loom_value_t weight;
  LOOM_TRY(need_inputs(n, &weight));
  return nll(n, n->in[0], n->in[1], weight, &n->out[0]);
}

/* The loss, and the optional log_prob output: LogSoftmax over the classes. */
loom_status_t ox_softmax_cross_entropy(ox_node_t *n) {
  loom_value_t weight, log_prob;
  int64_t c;
  LOOM_TRY(need_inputs(n, &weight));
  LOOM_TRY(check_shapes(n, n->in[0], n->in[1], &c));
  LOOM_TRY(loom_log_softmax(n->g, n->in[0], 1, &log_prob));
  LOOM_TRY(nll(n, log_prob, n->in[1], weight, &n->out[0]));
  return ox_set(n, 1, log_prob);
}
