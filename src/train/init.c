/* Initializers: fill a parameter's storage from the Philox stream, with
 * PyTorch's fan conventions (torch.nn.init). */
#include <math.h>

#include "core/dtype.h"
#include "core/philox.h"
#include "core/status.h"
#include "core/tensor.h"
#include "loom/train.h"

typedef enum init_dist { INIT_UNIFORM, INIT_NORMAL } init_dist_t;

/* Writes f(i) to every element of t, following its strides. */
static void fill(loom_tensor_t *t, init_dist_t dist, uint64_t seed, double a,
                 double b) {
  int64_t n = loom_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double u = dist == INIT_UNIFORM ? a + (b - a) * philox_uniform(seed, 0, i)
                                    : a + b * philox_normal(seed, 0, i);
    dtype_store_f64(t->dtype, (char *)t->data + tensor_offset(t, i), u);
  }
}

static loom_status_t check_float(const char *fn, const loom_tensor_t *t) {
  if (!t) return loom_fail(LOOM_ERR_INVALID, "%s: argument 't' is null", fn);
  if (!dtype_is_float(t->dtype))
    return loom_fail(LOOM_ERR_DTYPE,
                     "%s: tensor is %s; random initializers need a float "
                     "dtype (f32, f64, f16, bf16)",
                     fn, loom_dtype_name(t->dtype));
  return LOOM_OK;
}

static loom_status_t random_fill(const char *fn, loom_tensor_t *t,
                                 init_dist_t dist, uint64_t seed, double a,
                                 double b) {
  LOOM_TRY(check_float(fn, t));
  fill(t, dist, seed, a, b);
  loom_clear_error();
  return LOOM_OK;
}

static loom_status_t constant_fill(const char *fn, loom_tensor_t *t,
                                   double v) {
  if (!t) return loom_fail(LOOM_ERR_INVALID, "%s: argument 't' is null", fn);
  int64_t n = loom_tensor_numel(t);
  for (int64_t i = 0; i < n; i++)
    dtype_store_f64(t->dtype, (char *)t->data + tensor_offset(t, i), v);
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_init_zeros(loom_tensor_t *t) {
  return constant_fill(__func__, t, 0.0);
}

loom_status_t loom_init_ones(loom_tensor_t *t) {
  return constant_fill(__func__, t, 1.0);
}

loom_status_t loom_init_normal(loom_tensor_t *t, uint64_t seed, double mean,
                               double std) {
  if (!(std >= 0))
    return loom_fail(LOOM_ERR_INVALID, "%s: std %g is negative", __func__, std);
  return random_fill(__func__, t, INIT_NORMAL, seed, mean, std);
}

loom_status_t loom_init_uniform(loom_tensor_t *t, uint64_t seed, double low,
                                double high) {
  if (!(low <= high))
    return loom_fail(LOOM_ERR_INVALID, "%s: low %g is above high %g", __func__,
                     low, high);
  return random_fill(__func__, t, INIT_UNIFORM, seed, low, high);
}

/* torch.nn.init._calculate_fan_in_and_fan_out. */
static loom_status_t fans(const char *fn, const loom_tensor_t *t,
                          double *fan_in, double *fan_out) {
  LOOM_TRY(check_float(fn, t));
  if (t->rank < 2)
    return loom_fail(LOOM_ERR_SHAPE,
                     "%s: fan in and fan out need a tensor of rank >= 2, got "
                     "rank %d", fn, t->rank);
  double receptive = 1;
  for (int d = 2; d < t->rank; d++) receptive *= (double)t->shape[d];
  *fan_in = (double)t->shape[1] * receptive;
  *fan_out = (double)t->shape[0] * receptive;
  if (*fan_in == 0 || *fan_out == 0)
    return loom_fail(LOOM_ERR_SHAPE, "%s: a fan is zero (a dim of size 0)", fn);
  return LOOM_OK;
}

static loom_status_t kaiming_std(const char *fn, const loom_tensor_t *t,
                                 double a, loom_fan_mode_t mode, double *std) {
  double fan_in = 0, fan_out = 0;
  LOOM_TRY(fans(fn, t, &fan_in, &fan_out));
  if (mode != LOOM_FAN_IN && mode != LOOM_FAN_OUT)
    return loom_fail(LOOM_ERR_INVALID, "%s: mode %d is neither LOOM_FAN_IN "
                     "nor LOOM_FAN_OUT", fn, (int)mode);
  double gain = sqrt(2.0 / (1.0 + a * a));
  *std = gain / sqrt(mode == LOOM_FAN_IN ? fan_in : fan_out);
  return LOOM_OK;
}

loom_status_t loom_init_kaiming_uniform(loom_tensor_t *t, uint64_t seed,
                                        double a, loom_fan_mode_t mode) {
  double std = 0;
  LOOM_TRY(kaiming_std(__func__, t, a, mode, &std));
  double bound = sqrt(3.0) * std;
  return random_fill(__func__, t, INIT_UNIFORM, seed, -bound, bound);
}

loom_status_t loom_init_kaiming_normal(loom_tensor_t *t, uint64_t seed,
                                       double a, loom_fan_mode_t mode) {
  double std = 0;
  LOOM_TRY(kaiming_std(__func__, t, a, mode, &std));
  return random_fill(__func__, t, INIT_NORMAL, seed, 0.0, std);
}

static loom_status_t xavier_std(const char *fn, const loom_tensor_t *t,
                                double gain, double *std) {
  double fan_in = 0, fan_out = 0;
  LOOM_TRY(fans(fn, t, &fan_in, &fan_out));
  *std = gain * sqrt(2.0 / (fan_in + fan_out));
  return LOOM_OK;
}

loom_status_t loom_init_xavier_uniform(loom_tensor_t *t, uint64_t seed,
                                       double gain) {
  double std = 0;
  LOOM_TRY(xavier_std(__func__, t, gain, &std));
  double bound = sqrt(3.0) * std;
  return random_fill(__func__, t, INIT_UNIFORM, seed, -bound, bound);
}

loom_status_t loom_init_xavier_normal(loom_tensor_t *t, uint64_t seed,
                                      double gain) {
  double std = 0;
  LOOM_TRY(xavier_std(__func__, t, gain, &std));
  return random_fill(__func__, t, INIT_NORMAL, seed, 0.0, std);
}
