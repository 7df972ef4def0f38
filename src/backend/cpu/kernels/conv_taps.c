/* Where each tap of a convolution with small outputs reads its input: a
 * table, per tap (ky, kx) and output position, of the pixel's offset in an
 * input channel plane, or -1 in the padding. With outputs a few columns
 * wide (the 8x8, 4x4 and 2x2 layers of a small-image ResNet), gathering
 * by output rows costs divisions and a call per run of two to eight
 * pixels, more than the copies; the table makes every element one load.
 * Wider outputs gather by rows, and at stride 2 through the instance of
 * the gather below for the machine's ISA. */
#include "backend/cpu/kernels/conv.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

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

/* ---- Every other element -------------------------------------------------
 * A stride-2 layer's column matrix, gathered a row at a time (conv2d.c).
 * The library's own code is built for the baseline ISA, whose 4-wide
 * shuffles took a third of the gathering; one instance per ISA. A row's
 * last vector overlaps the one before instead of masking its lanes: masked
 * loads and stores made ResNet's 1x1 stride-2 layer on 28x28 images 40%
 * slower at two threads. */

/* The even (odd: 1) lanes of a then b. */
__attribute__((target("avx2"))) static __m256 lanes8(__m256 a, __m256 b, int odd) {
  __m256 v = odd ? _mm256_shuffle_ps(a, b, 0xdd) : _mm256_shuffle_ps(a, b, 0x88);
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
}

__attribute__((target("avx2"))) static void stride2_avx2(const float *src, int64_t n,
                                                          float *dst) {
  if (n < 9) {
    for (int64_t j = 0; j < n; j++) dst[j] = src[2 * j];
    return;
  }
  for (int64_t j = 0; j + 8 < n; j += 8) /* reads up to src[2 * j + 15] < src[2 * n - 2] */
    _mm256_storeu_ps(dst + j,
                     lanes8(_mm256_loadu_ps(src + 2 * j), _mm256_loadu_ps(src + 2 * j + 8), 0));
  /* dst[n - 8, n): the odd lanes of src[2n - 17, 2n - 1) */
  _mm256_storeu_ps(dst + n - 8, lanes8(_mm256_loadu_ps(src + 2 * n - 17),
                                       _mm256_loadu_ps(src + 2 * n - 9), 1));
}

__attribute__((target("avx512f,avx2"))) static void stride2_avx512(const float *src, int64_t n,
                                                                    float *dst) {
  if (n < 17) {
    stride2_avx2(src, n, dst);
    return;
  }
  const __m512i even =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t j = 0; j + 16 < n; j += 16) /* reads up to src[2 * j + 31] < src[2 * n - 2] */
    _mm512_storeu_ps(dst + j, _mm512_permutex2var_ps(_mm512_loadu_ps(src + 2 * j), even,
                                                     _mm512_loadu_ps(src + 2 * j + 16)));
  /* dst[n - 16, n): the odd lanes of src[2n - 33, 2n - 1) */
  _mm512_storeu_ps(dst + n - 16, _mm512_permutex2var_ps(_mm512_loadu_ps(src + 2 * n - 33), odd,
                                                        _mm512_loadu_ps(src + 2 * n - 17)));
}

static void stride2_portable(const float *src, int64_t n, float *dst) {
  for (int64_t j = 0; j < n; j++) dst[j] = src[2 * j];
}

kern_stride2_fn kern_gather_stride2(void) {
  const char *isa = kern_conv_direct_isa();
  if (isa && !strcmp(isa, "avx512")) return stride2_avx512;
  if (isa && !strcmp(isa, "avx2")) return stride2_avx2;
  return stride2_portable;
}
