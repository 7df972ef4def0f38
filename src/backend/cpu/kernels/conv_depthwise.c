/* Depthwise convolution (one group per channel, as many outputs as
 * inputs: MobileNet's 3x3 layers) computed directly. Posed as a GEMM per
 * group it is a 1 x (kh*kw) by (kh*kw) x positions product: the packing
 * of B replicates every pixel kh*kw times for one FMA each, and the
 * micro-kernel runs a single row. Here each channel's plane is copied once
 * into scratch, zero-padded and, for strides, split by phases: column j of
 * a padded row goes to phase j % sx at index j / sx, so that a tap reads
 * consecutive outputs' pixels from consecutive addresses. Every output row
 * is then kh*kw multiply-adds of contiguous runs held in registers
 * (conv_depthwise_rows.inc), built for AVX-512 and AVX2 and taken with the direct kernel's instance
 * (kern_conv_direct_isa). Tasks are (image, channel) planes; the bias is
 * the rows' start, the epilogue runs on each finished plane. */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/scratch.h"

enum {
  DW_MAX_TAPS = 64,              /* kernels up to 8x8 */
  DW_MAX_PLANE = (1 << 22),      /* floats of one padded plane */
};

typedef struct dw {
  const loom_abi_conv2d_t *d;
  int64_t hp, wp; /* the padded plane */
  int64_t wq;     /* a phase's length: ceil(wp / sx) */
  int64_t row;    /* floats per padded row: sx phases of wq */
  void (*rows)(const struct dw *g, const float *plane, const float *w, float bias, float *y);
  kern_stride2_fn stride2; /* the even columns of a row, vectorized */
  atomic_int failed; /* a task found no scratch */
} dw_t;

#define DW_TARGET __attribute__((target("avx512f,fma")))
#define DW_VEC __m512
#define DW_W 16
#define DW_LOADU(p) _mm512_loadu_ps(p)
#define DW_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define DW_SET1(x) _mm512_set1_ps(x)
#define DW_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define DW_NAME rows_avx512
#include "backend/cpu/kernels/conv_depthwise_rows.inc"
#undef DW_TARGET
#undef DW_VEC
#undef DW_W
#undef DW_LOADU
#undef DW_STOREU
#undef DW_SET1
#undef DW_FMA
#undef DW_NAME

#define DW_TARGET __attribute__((target("avx2,fma")))
#define DW_VEC __m256
#define DW_W 8
#define DW_LOADU(p) _mm256_loadu_ps(p)
#define DW_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define DW_SET1(x) _mm256_set1_ps(x)
#define DW_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define DW_NAME rows_avx2
#include "backend/cpu/kernels/conv_depthwise_rows.inc"

enum { DW_SLACK = 16 }; /* floats read past a plane's end: the widest DW_W */

static int suits(const loom_abi_conv2d_t *d, dw_t *g) {
  if (d->groups != d->c || d->o != d->c || d->kh * d->kw > DW_MAX_TAPS || d->n < 1 ||
      d->ho < 1 || d->wo < 1 || d->stride[0] < 1 || d->stride[1] < 1 || d->pads[0] < 0 ||
      d->pads[1] < 0 || d->pads[2] < 0 || d->pads[3] < 0)
    return 0;
  const char *isa = kern_conv_direct_isa();
  if (!isa) return 0;
  g->rows = !strcmp(isa, "avx512") ? rows_avx512 : rows_avx2;
  g->stride2 = kern_gather_stride2();
  g->hp = d->h + d->pads[0] + d->pads[2];
  g->wp = d->w + d->pads[1] + d->pads[3];
  g->wq = (g->wp + d->stride[1] - 1) / d->stride[1];
  g->row = g->wq * d->stride[1];
  return g->hp * g->row <= DW_MAX_PLANE;
}

/* Channel plane x (h, w) into the zero-padded, phase-split plane: phase
 * p of a row holds its padded columns p, p + sx, p + 2 sx, ... */
static void pad_plane(const dw_t *g, const float *x, float *plane) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t sx = d->stride[1], left = d->pads[1];
  memset(plane, 0, (size_t)(g->hp * g->row + DW_SLACK) * sizeof(float));
  for (int64_t iy = 0; iy < d->h; iy++) {
    float *row = plane + (iy + d->pads[0]) * g->row;
    const float *src = x + iy * d->w;
    if (sx == 1) {
      memcpy(row + left, src, (size_t)d->w * sizeof(float));
      continue;
    }
    for (int64_t p = 0; p < sx; p++) {
      /* The first column of phase p inside the image, and its index q. */
      int64_t q = left > p ? (left - p + sx - 1) / sx : 0, col = q * sx + p - left;
      float *dst = row + p * g->wq;
      if (sx == 2 && col < d->w) {
        g->stride2(src + col, (d->w - col + 1) / 2, dst + q);
        continue;
      }
      for (; col < d->w; col += sx, q++) dst[q] = src[col];
    }
  }
}

/* Planes [begin, end) of n * c, each an (image, channel). */
static void run_planes(void *ctx, int64_t begin, int64_t end) {
  dw_t *g = ctx;
  const loom_abi_conv2d_t *d = g->d;
  kern_scratch_t s = kern_scratch_claim((size_t)(g->hp * g->row + DW_SLACK));
  if (!s.buf) {
    atomic_store(&g->failed, 1);
    return;
  }
  int64_t positions = d->ho * d->wo, taps = d->kh * d->kw;
  for (int64_t i = begin; i < end; i++) {
    int64_t img = i / d->c, ch = i % d->c;
    pad_plane(g, d->x + i * d->h * d->w, s.buf);
    float *y = d->y + i * positions;
    g->rows(g, s.buf, d->weight + ch * taps, d->bias ? d->bias[ch] : 0.0f, y);
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, y, positions, ch, 1, 0, positions);
  }
  kern_scratch_release(s);
}

int kern_conv2d_depthwise_suits(const loom_abi_conv2d_t *d) {
  dw_t g = {.d = d};
  return suits(d, &g);
}

int kern_conv2d_depthwise_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  dw_t g = {.d = d};
  if (!suits(d, &g)) return 0;
  atomic_init(&g.failed, 0);
  kern_scratch_reserve(core_pool_threads(pool), (size_t)(g.hp * g.row + DW_SLACK));
  /* A plane a task at least: the epilogue's rows are whole planes. */
  int64_t grain = 4096 / (d->ho * d->wo) + 1;
  core_pool_for(pool, d->n * d->c, grain, run_planes, &g);
  return !atomic_load(&g.failed);
}
