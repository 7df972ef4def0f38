/* Where each tap of a convolution with small outputs reads its input: a
 * table, per tap (ky, kx) and output position, of the pixel's offset in an
 * input channel plane, or -1 in the padding. With outputs a few columns
 * wide (the 8x8, 4x4 and 2x2 layers of a small-image ResNet), gathering
 * by output rows costs divisions and a call per run of two to eight
 * pixels, more than the copies; the table makes every element one load. */
#include "backend/cpu/kernels/conv.h"

#include <stdint.h>

/* Rows this narrow or narrower gather through the table; wider ones copy
 * whole runs (conv2d.c's gather_row), which is faster from 16 on. */
enum { TABLE_MAX_WO = 8 };

int kern_conv_taps_build(const loom_abi_conv2d_t *d, int32_t *table) {
  int64_t positions = d->ho * d->wo;
  /* Offsets are int32: a plane past 2^31 pixels gathers by rows. */
  if (d->wo > TABLE_MAX_WO || d->kh * d->kw * positions > KERN_TAPS_MAX ||
      d->h * d->w > INT32_MAX)
    return 0;
  for (int64_t ky = 0; ky < d->kh; ky++)
    for (int64_t kx = 0; kx < d->kw; kx++) {
      int32_t *row = table + (ky * d->kw + kx) * positions;
      for (int64_t oy = 0; oy < d->ho; oy++)
        for (int64_t ox = 0; ox < d->wo; ox++) {
          int64_t iy = oy * d->stride[0] + ky * d->dilation[0] - d->pads[0];
          int64_t ix = ox * d->stride[1] + kx * d->dilation[1] - d->pads[1];
          int inside = iy >= 0 && iy < d->h && ix >= 0 && ix < d->w;
          row[oy * d->wo + ox] = inside ? (int32_t)(iy * d->w + ix) : -1;
        }
    }
  return 1;
}

void kern_conv_taps_gather(const int32_t *offset, const float *plane, int64_t len, float *out) {
  for (int64_t c = 0; c < len; c++) out[c] = offset[c] >= 0 ? plane[offset[c]] : 0.0f;
}

void kern_conv_taps_scatter_add(const int32_t *offset, const float *src, int64_t len,
                                float *plane) {
  for (int64_t c = 0; c < len; c++)
    if (offset[c] >= 0) plane[offset[c]] += src[c];
}
