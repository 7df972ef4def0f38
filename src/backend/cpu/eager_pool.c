/* max_pool2d and avg_pool2d of dense f32 NCHW images: the reference's
 * windows and results (a maximum is exact, NaN winning as in PyTorch; an
 * average sums in double and rounds once, as the reference does) without
 * its per-element dtype dispatch, the planes spread over the pool. */
#include <math.h>

#include "backend/cpu/eager.h"
#include "core/pool.h"
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
} pool_job_t;

static float window(const pool_job_t *j, const float *x, int64_t oh, int64_t ow) {
  double acc = j->max ? -INFINITY : 0;
  int64_t count = 0;
  for (int64_t kh = 0; kh < j->kernel[0]; kh++) {
    int64_t ih = oh * j->stride[0] - j->pads[0] + kh * j->dilation[0];
    if (ih < 0 || ih >= j->h) continue;
    for (int64_t kw = 0; kw < j->kernel[1]; kw++) {
      int64_t iw = ow * j->stride[1] - j->pads[1] + kw * j->dilation[1];
      if (iw < 0 || iw >= j->w) continue;
      double v = x[ih * j->w + iw];
      if (!j->max) acc += v;
      else if (isnan(v) || v > acc) acc = v;
      count++;
    }
  }
  if (j->max) return (float)acc;
  return (float)(acc / (double)(j->include_pad ? j->kernel[0] * j->kernel[1] : count));
}

static void pool_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job_t *j = ctx;
  for (int64_t plane = begin; plane < end; plane++) {
    const float *x = j->x + plane * j->h * j->w;
    float *y = j->y + plane * j->oh * j->ow;
    for (int64_t oh = 0; oh < j->oh; oh++)
      for (int64_t ow = 0; ow < j->ow; ow++) y[oh * j->ow + ow] = window(j, x, oh, ow);
  }
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
  *status = LOOM_OK;
  return true;
}
