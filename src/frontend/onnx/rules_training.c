/* Rules for the ops of ONNX's ai.onnx.preview.training domain: the
 * optimizers Momentum, Adagrad and Adam, one update step of several
 * tensors at once decomposed into elementwise Loom ops, and Gradient, by
 * loom_grad on the graph imported so far. The optimizers' inputs are
 * R (learning rate) and T (update count), then a group of tensors per
 * role (X..., G..., then the optimizer's states); the outputs are the
 * new X... and new states, group by group. */
#include <string.h>

#include "frontend/onnx/onnx_import.h"

/* The variadic inputs: n_groups groups of *count tensors after R and T. */
static loom_status_t groups(const ox_node_t *n, int n_groups, int *count) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  *count = (n->n_in - 2) / n_groups;
  if (*count < 1 || (n->n_in - 2) % n_groups)
    return ox_fail(n, LOOM_ERR_FORMAT, "%d inputs: R, T and %d groups of tensors expected",
                   n->n_in, n_groups);
  for (int i = 2; i < n->n_in; i++) LOOM_TRY(ox_need(n, i));
  if (n->n_out > (n_groups - 1) * *count)
    return ox_fail(n, LOOM_ERR_FORMAT, "%d outputs for %d tensors (at most %d)", n->n_out,
                   *count, (n_groups - 1) * *count);
  return LOOM_OK;
}

/* Input `group`'s tensor k, checked to be of x's dtype. */
static loom_status_t member(const ox_node_t *n, int group, int count, int k, loom_value_t *out) {
  *out = n->in[2 + group * count + k];
  loom_dtype_t want = ox_dtype(n, n->in[2 + k]), dt = ox_dtype(n, *out);
  if (!ox_is_float(want))
    return ox_fail(n, LOOM_ERR_DTYPE, "X %d is %s, not a float dtype", k, loom_dtype_name(want));
  if (dt != want)
    return ox_fail(n, LOOM_ERR_DTYPE, "input %d is %s, X %d %s", 2 + group * count + k,
                   loom_dtype_name(dt), k, loom_dtype_name(want));
  return LOOM_OK;
}

/* R and T as rank-0 values of dtype dt; T > 0 as a bool. */
static loom_status_t rate_and_count(ox_node_t *n, loom_dtype_t dt, loom_value_t *r,
                                    loom_value_t *t, loom_value_t *started) {
  if (ox_rank(n, n->in[0]) != 0 || ox_rank(n, n->in[1]) != 0)
    return ox_fail(n, LOOM_ERR_SHAPE, "R and T must be scalars (rank %d and %d)",
                   ox_rank(n, n->in[0]), ox_rank(n, n->in[1]));
  if (!ox_is_float(ox_dtype(n, n->in[0])))
    return ox_fail(n, LOOM_ERR_DTYPE, "R is %s, not a float dtype",
                   loom_dtype_name(ox_dtype(n, n->in[0])));
  loom_value_t zero;
  LOOM_TRY(loom_cast(n->g, n->in[0], dt, r));
  LOOM_TRY(loom_cast(n->g, n->in[1], dt, t));
  LOOM_TRY(ox_scalar(n, dt, 0, &zero));
  return loom_gt(n->g, *t, zero, started);
}

/* c * x + y (y -1: none), c a constant. */
static loom_status_t axpy(ox_node_t *n, double c, loom_value_t x, loom_value_t y,
                          loom_value_t *out) {
  loom_value_t k;
  LOOM_TRY(ox_like(n, x, c, &k));
  LOOM_TRY(loom_mul(n->g, k, x, out));
  return y.id >= 0 ? loom_add(n->g, *out, y, out) : LOOM_OK;
}

/* A float attribute the op requires. */
static loom_status_t required(const ox_node_t *n, const char *name, double *out) {
  if (!ox_attr(n, name)) return ox_fail(n, LOOM_ERR_FORMAT, "attribute %s is missing", name);
  *out = ox_float(n, name, 0);
  return LOOM_OK;
}

/* v' = alpha v + beta' (norm x + g), beta' = beta after the first step (T
 * > 0), 1 at it; x' = x - R v' (standard) or x - R (norm x + g + alpha v')
 * (nesterov). */
loom_status_t ox_momentum(ox_node_t *n) {
  int count, nesterov = ox_string_is(n, "mode", "", "nesterov");
  double alpha = 0, beta = 0, norm = 0;
  LOOM_TRY(groups(n, 3, &count));
  LOOM_TRY(required(n, "alpha", &alpha));
  LOOM_TRY(required(n, "beta", &beta));
  LOOM_TRY(required(n, "norm_coefficient", &norm));
  if (!nesterov && !ox_string_is(n, "mode", "", "standard"))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "mode must be \"standard\" or \"nesterov\"");
  loom_graph_t *g = n->g;
  for (int k = 0; k < count; k++) {
    loom_value_t x, grad, v, r, t, started, b, one, step;
    LOOM_TRY(member(n, 0, count, k, &x));
    LOOM_TRY(member(n, 1, count, k, &grad));
    LOOM_TRY(member(n, 2, count, k, &v));
    loom_dtype_t dt = ox_dtype(n, x);
    LOOM_TRY(rate_and_count(n, dt, &r, &t, &started));
    LOOM_TRY(ox_scalar(n, dt, beta, &b));
    LOOM_TRY(ox_scalar(n, dt, 1, &one));
    LOOM_TRY(loom_where(g, started, b, one, &b));
    LOOM_TRY(axpy(n, norm, x, grad, &grad));
    LOOM_TRY(loom_mul(g, b, grad, &b));
    LOOM_TRY(axpy(n, alpha, v, b, &v));
    if (nesterov) LOOM_TRY(axpy(n, alpha, v, grad, &step));
    else step = v;
    LOOM_TRY(loom_mul(g, r, step, &step));
    LOOM_TRY(loom_sub(g, x, step, &x));
    LOOM_TRY(ox_set(n, k, x));
    LOOM_TRY(ox_set(n, count + k, v));
  }
  return LOOM_OK;
}

/* h' = h + (norm x + g)^2, x' = x - R / (1 + T decay) (norm x + g) /
 * (sqrt(h') + epsilon). */
loom_status_t ox_adagrad(ox_node_t *n) {
  int count;
  LOOM_TRY(groups(n, 3, &count));
  double norm = ox_float(n, "norm_coefficient", 0), eps = ox_float(n, "epsilon", 1e-6);
  double decay = ox_float(n, "decay_factor", 0);
  loom_graph_t *g = n->g;
  for (int k = 0; k < count; k++) {
    loom_value_t x, grad, h, r, t, started, sq, one;
    LOOM_TRY(member(n, 0, count, k, &x));
    LOOM_TRY(member(n, 1, count, k, &grad));
    LOOM_TRY(member(n, 2, count, k, &h));
    loom_dtype_t dt = ox_dtype(n, x);
    LOOM_TRY(rate_and_count(n, dt, &r, &t, &started));
    LOOM_TRY(ox_scalar(n, dt, 1, &one));
    LOOM_TRY(axpy(n, decay, t, one, &t));
    LOOM_TRY(loom_div(g, r, t, &r));
    LOOM_TRY(axpy(n, norm, x, grad, &grad));
    LOOM_TRY(loom_mul(g, grad, grad, &sq));
    LOOM_TRY(loom_add(g, h, sq, &h));
    LOOM_TRY(loom_sqrt(g, h, &sq));
    LOOM_TRY(ox_like(n, x, eps, &one));
    LOOM_TRY(loom_add(g, sq, one, &sq));
    LOOM_TRY(loom_mul(g, r, grad, &grad));
    LOOM_TRY(loom_div(g, grad, sq, &grad));
    LOOM_TRY(loom_sub(g, x, grad, &x));
    LOOM_TRY(ox_set(n, k, x));
    LOOM_TRY(ox_set(n, count + k, h));
  }
  return LOOM_OK;
}

/* Adam's learning rate: R sqrt(1 - beta^T) / (1 - alpha^T) after the first
 * step, R at it (no bias correction, whose denominator is 0 then). */
static loom_status_t adam_rate(ox_node_t *n, loom_value_t r, loom_value_t t, loom_value_t started,
                               double alpha, double beta, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t a, b, one;
  LOOM_TRY(ox_like(n, r, 1, &one));
  LOOM_TRY(ox_like(n, r, alpha, &a));
  LOOM_TRY(ox_like(n, r, beta, &b));
  LOOM_TRY(loom_pow(g, a, t, &a));
  LOOM_TRY(loom_pow(g, b, t, &b));
  LOOM_TRY(loom_sub(g, one, a, &a));
  LOOM_TRY(loom_sub(g, one, b, &b));
  LOOM_TRY(loom_sqrt(g, b, &b));
  LOOM_TRY(loom_mul(g, r, b, &b));
  LOOM_TRY(loom_div(g, b, a, &b));
  return loom_where(g, started, b, r, out);
}

/* v' = alpha v + (1 - alpha) g', h' = beta h + (1 - beta) g'^2 with g' =
 * norm x + g; x' = (1 - norm_post) (x - rate v' / (sqrt(h') + epsilon)). */
loom_status_t ox_adam(ox_node_t *n) {
  int count;
  LOOM_TRY(groups(n, 4, &count));
  double alpha = ox_float(n, "alpha", 0.9), beta = ox_float(n, "beta", 0.999);
  double eps = ox_float(n, "epsilon", 1e-6), norm = ox_float(n, "norm_coefficient", 0);
  double post = ox_float(n, "norm_coefficient_post", 0);
  loom_graph_t *g = n->g;
  for (int k = 0; k < count; k++) {
    loom_value_t x, grad, v, h, r, t, started, sq, e, none = {.id = -1};
    LOOM_TRY(member(n, 0, count, k, &x));
    LOOM_TRY(member(n, 1, count, k, &grad));
    LOOM_TRY(member(n, 2, count, k, &v));
    LOOM_TRY(member(n, 3, count, k, &h));
    LOOM_TRY(rate_and_count(n, ox_dtype(n, x), &r, &t, &started));
    LOOM_TRY(adam_rate(n, r, t, started, alpha, beta, &r));
    LOOM_TRY(axpy(n, norm, x, grad, &grad));
    LOOM_TRY(axpy(n, 1 - alpha, grad, none, &sq));
    LOOM_TRY(axpy(n, alpha, v, sq, &v));
    LOOM_TRY(loom_mul(g, grad, grad, &sq));
    LOOM_TRY(axpy(n, 1 - beta, sq, none, &sq));
    LOOM_TRY(axpy(n, beta, h, sq, &h));
    LOOM_TRY(loom_sqrt(g, h, &sq));
    LOOM_TRY(ox_like(n, x, eps, &e));
    LOOM_TRY(loom_add(g, sq, e, &sq));
    LOOM_TRY(loom_div(g, v, sq, &sq));
    LOOM_TRY(loom_mul(g, r, sq, &sq));
    LOOM_TRY(loom_sub(g, x, sq, &x));
    LOOM_TRY(axpy(n, 1 - post, x, none, &x));
    LOOM_TRY(ox_set(n, k, x));
    LOOM_TRY(ox_set(n, count + k, v));
    LOOM_TRY(ox_set(n, 2 * count + k, h));
  }
  return LOOM_OK;
}

/* String k of attribute a, as a NUL-terminated name in buf. */
static const char *attr_string(const Onnx__AttributeProto *a, size_t k, char *buf, size_t size) {
  const ProtobufCBinaryData *s = a->n_strings > k ? &a->strings[k] : &a->s;
  size_t len = s->len < size - 1 ? s->len : size - 1;
  ox_copy(buf, s->data, len);
  buf[len] = 0;
  return buf;
}

/* d y / d x for each x named in xs: loom_grad of y, summed to a scalar
 * when it is not one (ONNX does not say; the sum's gradient is y's with
 * a seed of ones). The zs, inputs held fixed, change nothing here. */
loom_status_t ox_gradient(ox_node_t *n) {
  const Onnx__AttributeProto *xs = ox_attr_typed(n, "xs", OX_ATTR_STRINGS),
                             *ya = ox_attr_typed(n, "y", OX_ATTR_STRING),
                             *zs = ox_attr_typed(n, "zs", OX_ATTR_STRINGS);
  if (!xs || !xs->n_strings || !ya || !ya->has_s)
    return ox_fail(n, LOOM_ERR_FORMAT, "attributes xs and y are required");
  int n_x = (int)xs->n_strings, n_z = zs ? (int)zs->n_strings : 0;
  if (n->n_in != n_x + n_z || n->n_out > n_x)
    return ox_fail(n, LOOM_ERR_FORMAT, "%d inputs and %d outputs for %d xs and %d zs",
                   n->n_in, n->n_out, n_x, n_z);
  char name[512];
  loom_value_t y, wrt[64], grads[64];
  if (n_x > 64) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d xs (at most 64)", n_x);
  LOOM_TRY(ox_lookup(n, attr_string(ya, 0, name, sizeof name), &y));
  for (int k = 0; k < n_x; k++) LOOM_TRY(ox_lookup(n, attr_string(xs, k, name, sizeof name), &wrt[k]));
  if (!ox_is_float(ox_dtype(n, y)))
    return ox_fail(n, LOOM_ERR_DTYPE, "y is %s, not a float dtype",
                   loom_dtype_name(ox_dtype(n, y)));
  if (ox_rank(n, y) > 0) LOOM_TRY(loom_sum(n->g, y, 0, NULL, 0, &y));
  if (loom_grad(n->g, y, n_x, wrt, grads) != LOOM_OK)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s", loom_last_error());
  for (int k = 0; k < n_x; k++) LOOM_TRY(ox_set(n, k, grads[k]));
  return LOOM_OK;
}
