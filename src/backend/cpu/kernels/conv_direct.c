/* Direct convolution for layers with few output channels (LeNet's 6 and
 * 16). Posed as a GEMM, such a layer packs every image element kh*kw times
 * into B panels that then feed only o FMAs each: on LeNet packing took
 * half the run and the micro-kernel a fifth. Here nothing is replicated.
 *
 * Stride 1 and no dilation make a convolution one-dimensional over the
 * zero-padded image flattened row by row: output position p = oy * wp + ox
 * (wp the padded row length) reads tap (c, ky, kx) at input index
 * c * cs + p + ky * wp + kx, contiguous in p. A tile is up to 6 output
 * channels by 16 consecutive positions (12 accumulators, as the GEMM
 * micro-kernel): per tap two unaligned loads of the image and 6 broadcast
 * weights feed 12 FMAs. The kw - 1 columns past each output row are
 * computed and dropped when the rows are copied out. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"

enum {
  OB = 6,                     /* output channels per tile */
  XW = 16,                    /* positions per tile: two vectors */
  DIRECT_MAX_O = 16,          /* beyond this the GEMM's packing pays for itself */
  DIRECT_MAX_WEIGHTS = 4096,  /* floats of the transposed weights, on the stack */
  DIRECT_MAX_SCRATCH = 16384, /* floats of padded image + output rows a task */
};

/* One call's geometry, shared by its tasks. */
typedef struct direct {
  const loom_abi_conv2d_t *d;
  const float *wt;    /* weights as [tap][o], tap = (c * kh + ky) * kw + kx */
  int64_t hp, wp;     /* padded image rows, row length */
  int64_t cs;         /* floats per padded channel, slack included */
  int64_t span;       /* positions computed per channel: ho * wp, to XW */
} direct_t;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The layers this kernel takes, with buffers that fit its limits. */
static int suits(const loom_abi_conv2d_t *d, direct_t *g) {
  if (d->groups != 1 || d->stride[0] != 1 || d->stride[1] != 1 || d->dilation[0] != 1 ||
      d->dilation[1] != 1 || d->o > DIRECT_MAX_O || d->n < 1 || d->ho < 1 || d->wo < 1)
    return 0;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  g->hp = d->h + d->pads[0] + d->pads[2];
  g->wp = d->w + d->pads[1] + d->pads[3];
  if (g->hp - d->kh + 1 != d->ho || g->wp - d->kw + 1 != d->wo) return 0;
  g->span = round_up(d->ho * g->wp, XW);
  /* the last tile reads up to span - 1 + (kh - 1) * wp + kw - 1 */
  g->cs = round_up(g->hp * g->wp + XW + d->kw, 8);
  int64_t taps = d->c * d->kh * d->kw;
  return taps * d->o <= DIRECT_MAX_WEIGHTS &&
         d->c * g->cs + d->o * g->span <= DIRECT_MAX_SCRATCH;
}

/* The zero-padded image, channel after channel, cs floats apart. */
static void pad_image(const direct_t *g, const float *x, float *in) {
  const loom_abi_conv2d_t *d = g->d;
  memset(in, 0, (size_t)(d->c * g->cs) * sizeof(float));
  for (int64_t c = 0; c < d->c; c++)
    for (int64_t y = 0; y < d->h; y++)
      memcpy(in + c * g->cs + (y + d->pads[0]) * g->wp + d->pads[1],
             x + (c * d->h + y) * d->w, (size_t)d->w * sizeof(float));
}

/* Output channels [o0, o0 + ob) at positions [p0, p0 + XW). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile(const direct_t *g, const float *in, float *out, int64_t o0, int64_t p0, const int ob) {
  const loom_abi_conv2d_t *d = g->d;
  __m256 acc[OB][2];
  _Pragma("GCC unroll 6") for (int i = 0; i < ob; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d->c; c++)
    for (int64_t ky = 0; ky < d->kh; ky++) {
      const float *r = in + c * g->cs + ky * g->wp + p0;
      const float *w = g->wt + (c * d->kh + ky) * d->kw * d->o + o0;
      for (int64_t kx = 0; kx < d->kw; kx++, w += d->o) {
        __m256 x0 = _mm256_loadu_ps(r + kx), x1 = _mm256_loadu_ps(r + kx + 8);
        _Pragma("GCC unroll 6") for (int i = 0; i < ob; i++) {
          __m256 wv = _mm256_broadcast_ss(w + i);
          acc[i][0] = _mm256_fmadd_ps(wv, x0, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(wv, x1, acc[i][1]);
        }
      }
    }
  _Pragma("GCC unroll 6") for (int i = 0; i < ob; i++) {
    _mm256_storeu_ps(out + (o0 + i) * g->span + p0, acc[i][0]);
    _mm256_storeu_ps(out + (o0 + i) * g->span + p0 + 8, acc[i][1]);
  }
}

/* One tile with ob a constant in each branch, so that the loops over the
 * channels of the tile unroll and the accumulators stay in registers. */
__attribute__((target("avx2,fma"))) static void
tile_any(const direct_t *g, const float *in, float *out, int64_t o0, int64_t p0, int64_t ob) {
  switch (ob) {
  case 1: tile(g, in, out, o0, p0, 1); break;
  case 2: tile(g, in, out, o0, p0, 2); break;
  case 3: tile(g, in, out, o0, p0, 3); break;
  case 4: tile(g, in, out, o0, p0, 4); break;
  case 5: tile(g, in, out, o0, p0, 5); break;
  default: tile(g, in, out, o0, p0, 6); break;
  }
}

/* Images [begin, end): pad, compute every tile, copy the valid columns of
 * each row out with the bias, then the epilogue on the whole image. */
static void run_images(void *ctx, int64_t begin, int64_t end) {
  const direct_t *g = ctx;
  const loom_abi_conv2d_t *d = g->d;
  _Alignas(64) float scratch[DIRECT_MAX_SCRATCH];
  float *in = scratch, *out = scratch + d->c * g->cs;
  int64_t positions = d->ho * d->wo;
  for (int64_t img = begin; img < end; img++) {
    pad_image(g, d->x + img * d->c * d->h * d->w, in);
    for (int64_t o0 = 0; o0 < d->o; o0 += OB)
      for (int64_t p0 = 0; p0 < g->span; p0 += XW)
        tile_any(g, in, out, o0, p0, d->o - o0 < OB ? d->o - o0 : OB);
    float *y = d->y + img * d->o * positions;
    for (int64_t o = 0; o < d->o; o++) {
      float bv = d->bias ? d->bias[o] : 0.0f;
      for (int64_t oy = 0; oy < d->ho; oy++) {
        const float *src = out + o * g->span + oy * g->wp;
        float *dst = y + o * positions + oy * d->wo;
        for (int64_t ox = 0; ox < d->wo; ox++) dst[ox] = src[ox] + bv;
      }
    }
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, y, positions, 0, d->o, 0, positions);
  }
}

int kern_conv2d_direct_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  direct_t g = {.d = d};
  if (!suits(d, &g)) return 0;
  int64_t taps = d->c * d->kh * d->kw;
  _Alignas(64) float wt[DIRECT_MAX_WEIGHTS];
  for (int64_t o = 0; o < d->o; o++)
    for (int64_t t = 0; t < taps; t++) wt[t * d->o + o] = d->weight[o * taps + t];
  g.wt = wt;
  core_pool_for(pool, d->n, 1, run_images, &g);
  return 1;
}
