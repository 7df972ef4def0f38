/* max_pool2d and avg_pool2d of dense f32 NCHW images: the reference's
 * windows and results (a maximum is exact, NaN winning as in PyTorch; an
 * average sums in double and rounds once, as the reference does) without
 * its per-element dtype dispatch or bounds tests: each tap runs over the
 * outputs of a row it lands inside, the planes spread over the pool. */
#include <math.h>
#include <stdatomic.h>

#include "backend/cpu/eager.h"
#include "core/alloc.h"
#include "core/pool.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"

/* Windows below this many taps in all run on the calling thread. */
enum { POOL_SPLIT_TAPS = 1 << 16 };

typedef struct pool_job {
  const float *x;
  float *y;
  int64_t h, w, oh, ow;
  int64_t kernel[2], stride[2], pads[4], dilation[2];
  bool max, include_pad;
  atomic_bool failed; /* an average's row buffers were not to be had */
} pool_job_t;

/* The outputs ow in [lo, hi) whose tap kw lies on the row (0 <= ow *
 * stride - pad + kw * dilation < w): the rest read padding. */
static void tap_span(const pool_job_t *j, int64_t kw, int64_t *lo, int64_t *hi) {
  int64_t off = kw * j->dilation[1] - j->pads[1], s = j->stride[1];
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = j->w - off <= 0 ? 0 : (j->w - off - 1) / s + 1;
  if (*hi > j->ow) *hi = j->ow;
  if (*lo > *hi) *lo = *hi;
}

/* One output row, a tap at a time over the row's outputs (the taps in the
 * reference's order, so that the same NaN wins and sums round alike):
 * max in float (exact), sums in double. */
static void pool_row(const pool_job_t *j, const float *x, int64_t oh, float *y, double *sum,
                     int64_t *count) {
  for (int64_t ow = 0; ow < j->ow; ow++) y[ow] = -INFINITY;
  for (int64_t ow = 0; !j->max && ow < j->ow; ow++) sum[ow] = 0, count[ow] = 0;
  for (int64_t kh = 0; kh < j->kernel[0]; kh++) {
    int64_t ih = oh * j->stride[0] - j->pads[0] + kh * j->dilation[0];
    if (ih < 0 || ih >= j->h) continue;
    const float *row = x + ih * j->w;
    for (int64_t kw = 0; kw < j->kernel[1]; kw++) {
      int64_t lo, hi, s = j->stride[1], off = kw * j->dilation[1] - j->pads[1];
      tap_span(j, kw, &lo, &hi);
      if (j->max) {
        for (int64_t ow = lo; ow < hi; ow++) {
          float v = row[ow * s + off];
          y[ow] = v > y[ow] || v != v ? v : y[ow];
        }
      } else {
        for (int64_t ow = lo; ow < hi; ow++) sum[ow] += row[ow * s + off];
        for (int64_t ow = lo; ow < hi; ow++) count[ow]++;
      }
    }
  }
  if (j->max) return;
  for (int64_t ow = 0; ow < j->ow; ow++)
    y[ow] = (float)(sum[ow] / (double)(j->include_pad ? j->kernel[0] * j->kernel[1] : count[ow]));
}

/* A max needs no buffers; an average's sums and counts are per row. */
static void pool_planes(void *ctx, int64_t begin, int64_t end) {
  pool_job_t *j = ctx;
  double *sum = j->max ? NULL : core_malloc(sizeof *sum * (size_t)(j->ow + 1));
  int64_t *count = j->max ? NULL : core_malloc(sizeof *count * (size_t)(j->ow + 1));
  if (!j->max && (!sum || !count)) {
    atomic_store(&j->failed, true);
    begin = end;
  }
  for (int64_t plane = begin; plane < end; plane++) {
    const float *x = j->x + plane * j->h * j->w;
    float *y = j->y + plane * j->oh * j->ow;
    for (int64_t oh = 0; oh < j->oh; oh++) pool_row(j, x, oh, y + oh * j->ow, sum, count);
  }
  core_free(sum);
  core_free(count);
}

static void read_ints(const ref_call_t *c, const char *name, int n, int64_t *dst) {
  const int64_t *v;
  if (ir_attr_ints(c->attrs, name, &v) == n)
    for (int i = 0; i < n; i++) dst[i] = v[i];
}

/* A padded input smaller than one window is the reference's error. */
bool cpu_eager_pool(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  if (x->dtype != LOOM_F32 || y->dtype != LOOM_F32 || x->rank != 4 || y->rank != 4 ||
      !tensor_is_contiguous(x) || !tensor_is_contiguous(y))
    return false;
  pool_job_t j = {.x = x->data, .y = y->data, .h = x->shape[2], .w = x->shape[3],
                  .oh = y->shape[2], .ow = y->shape[3], .dilation = {1, 1},
                  .max = c->node->op == IR_OP_MAX_POOL2D};
  read_ints(c, "kernel", 2, j.kernel);
  j.stride[0] = j.kernel[0], j.stride[1] = j.kernel[1];
  read_ints(c, "stride", 2, j.stride);
  read_ints(c, "pads", 4, j.pads);
  read_ints(c, "dilation", 2, j.dilation);
  j.include_pad = !j.max && ir_op_int(c->node->op, c->attrs, "count_include_pad") != 0;
  for (int i = 0; i < 2; i++)
    if (x->shape[2 + i] + j.pads[i] + j.pads[i + 2] < j.dilation[i] * (j.kernel[i] - 1) + 1)
      return false;
  int64_t planes = y->shape[0] * y->shape[1];
  double taps = (double)loom_tensor_numel(y) * (double)(j.kernel[0] * j.kernel[1]);
  if (c->pool && taps >= POOL_SPLIT_TAPS && planes > 1)
    core_pool_for(c->pool, planes, 1, pool_planes, &j);
  else pool_planes(&j, 0, planes);
  *status = atomic_load(&j.failed) ? loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for a row "
                                               "of %lld sums", ir_ops[c->node->op].name,
                                               (long long)j.ow)
                                   : LOOM_OK;
  return true;
}
