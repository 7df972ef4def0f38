/* Generators, random numbers and data-dependent ops: reference kernels.
 * Random ops draw element i from the Philox stream of (seed, offset) as
 * core/philox.h maps it. */
#include <math.h>

#include "core/philox.h"
#include "kernels/ref.h"

loom_status_t ref_arange(ref_call_t *c) {
  double start = ir_op_float(c->node->op, c->attrs, "start");
  double delta = ir_op_float(c->node->op, c->attrs, "delta");
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(y);
  for (int64_t i = 0; i < n; i++) ref_set(y, i, start + (double)i * delta);
  return LOOM_OK;
}

loom_status_t ref_full(ref_call_t *c) {
  double value = ir_op_float(c->node->op, c->attrs, "value");
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(y);
  for (int64_t i = 0; i < n; i++) ref_set(y, i, value);
  return LOOM_OK;
}

/* Seed and offset are integer scalars; negative ones are taken as their
 * two's-complement 64-bit patterns. */
static uint64_t scalar_u64(const loom_tensor_t *t) {
  return (uint64_t)ref_geti(t, 0);
}

/* The largest value of dtype below high. A uniform scaled to [low, high)
 * may round up to high when stored in a narrow dtype (f16, bf16), and is
 * then replaced by this value to keep the interval half-open. */
static double dtype_below(loom_dtype_t dtype, double high) {
  char slot[8];
  for (double step = high - nextafter(high, -INFINITY);; step *= 2) {
    dtype_store_f64(dtype, slot, high - step);
    double r = dtype_load_f64(dtype, slot);
    if (r < high) return r;
  }
}

loom_status_t ref_random_uniform(ref_call_t *c) {
  uint64_t seed = scalar_u64(c->in[0]), offset = scalar_u64(c->in[1]);
  double low = ir_op_float(c->node->op, c->attrs, "low");
  double high = ir_op_float(c->node->op, c->attrs, "high");
  loom_tensor_t *y = c->out[0];
  double top = dtype_below(y->dtype, high);
  int64_t n = loom_tensor_numel(y);
  for (int64_t i = 0; i < n; i++) {
    double u = philox_uniform(seed, offset, (uint64_t)i);
    ref_set(y, i, low + (high - low) * u);
    if (ref_get(y, i) >= high) ref_set(y, i, top);
  }
  return LOOM_OK;
}

loom_status_t ref_random_normal(ref_call_t *c) {
  uint64_t seed = scalar_u64(c->in[0]), offset = scalar_u64(c->in[1]);
  double mean = ir_op_float(c->node->op, c->attrs, "mean");
  double std = ir_op_float(c->node->op, c->attrs, "std");
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(y);
  for (int64_t i = 0; i < n; i++)
    ref_set(y, i, mean + std * philox_normal(seed, offset, (uint64_t)i));
  return LOOM_OK;
}

/* A dropped element is 0 even where x is NaN or infinite: the mask
 * selects, it does not multiply. */
loom_status_t ref_dropout(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  uint64_t seed = scalar_u64(c->in[1]), offset = scalar_u64(c->in[2]);
  double p = ir_attr_float(c->attrs, "p", 0.0);
  loom_tensor_t *y = c->out[0], *mask = c->out[1];
  int64_t n = loom_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    bool keep = philox_uniform(seed, offset, (uint64_t)i) >= p;
    ref_seti(mask, i, keep);
    ref_set(y, i, keep ? ref_get(x, i) / (1.0 - p) : 0.0);
  }
  return LOOM_OK;
}

static bool is_nonzero(const loom_tensor_t *x, int64_t i) {
  /* NaN counts as non-zero, as NaN != 0. */
  return dtype_is_float(x->dtype) ? ref_get(x, i) != 0 : ref_geti(x, i) != 0;
}

/* Data-dependent: counts first, then creates its (count, rank) output. */
loom_status_t ref_nonzero(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  int64_t n = loom_tensor_numel(x), count = 0;
  for (int64_t i = 0; i < n; i++) count += is_nonzero(x, i);
  int64_t shape[2] = {count, x->rank};
  LOOM_TRY(tensor_new(LOOM_I64, 2, shape, &c->out[0]));
  int64_t idx[LOOM_MAX_RANK], row = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!is_nonzero(x, i)) continue;
    ref_unravel(x->rank, x->shape, i, idx);
    for (int d = 0; d < x->rank; d++) ref_seti(c->out[0], row * x->rank + d, idx[d]);
    row++;
  }
  return LOOM_OK;
}
