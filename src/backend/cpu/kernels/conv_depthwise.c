/* Depthwise convolution (one group per channel, as many outputs as
 * inputs: MobileNet's 3x3 layers) computed directly. Posed as a GEMM per
 * group it is a 1 x (kh*kw) by (kh*kw) x positions product: the packing
 * of B replicates every pixel kh*kw times for one FMA each, and the
 * micro-kernel runs a single row. Tasks are (image, channel) planes, or
 * bands of their rows (row_bands); the bias is the sums' start, the
 * epilogue runs on each finished band.
 *
 * The 3x3 window (MobileNet's) reads the image in place, a vector of
 * output columns at a time, with masked loads that give zeros in the
 * padding: at stride 1 on AVX-512 and AVX2 (_direct in
 * conv_depthwise_rows.inc), at stride 2 on AVX-512 (s2_avx512: two-source
 * permutes pick a tap's columns). Output rows go in register tiles that
 * load each input row once for every output row it serves (at stride 1,
 * three). Measured on MobileNetV2's layers at one thread (AVX-512), this
 * took the 32x112x112 layer from 144 to 99 us and the stride-2 96x112x112
 * one from 300 to 152 us against the general path below. Planes at most
 * half a vector wide (7x7 on AVX-512) are taken flat instead: a vector
 * of outputs spans rows (_flat), four vectors a 7x7 plane where rows
 * took seven (MobileNetV2's 960-channel 7x7 layers, one thread: 47 to
 * 29 us in the network).
 *
 * Any other window (and stride 2 on AVX2) copies each plane into scratch,
 * zero-padded and split by phases of the strides: padded pixel (py, px)
 * goes to sub-plane (py % sy, px % sx) at row py / sy, column px / sx,
 * every sub-plane wq columns wide. Output (oy, ox) then reads tap (ky, kx)
 * at a fixed offset from oy * wq + ox in one sub-plane, whatever the
 * output: the outputs are computed as a "wide" plane of ho rows by wq
 * columns, a flat run vectorized across row ends (wq - wo columns a row
 * are wasted, not a vector's tail), and its first wo columns copied out;
 * large planes go in bands of rows that stay in L1. The runs are kh*kw
 * multiply-adds of eight independent accumulators. The 3x3 window at
 * stride 2 on rows of a vector or more takes the row tiles of _s2 over
 * the sub-planes instead. All but s2_avx512 are in conv_depthwise_rows.inc,
 * built for AVX-512 and AVX2 and taken with the direct kernel's instance
 * (kern_conv_direct_isa). */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/scratch.h"

enum {
  DW_MAX_TAPS = 64,          /* kernels up to 8x8 */
  DW_MAX_PLANE = (1 << 22),  /* floats of one padded plane */
  DW_SLACK = 16,             /* floats read past a run's end: the widest vector */
  DW_BAND = 2048,            /* wide outputs a band, about: 8 KB */
  DW_MAX_K = 5,              /* the widest window read in place */
  BAND_CHUNKS = 8,           /* chunks a band of rows (row_bands) is cut into */
  DW_FLAT_POSITIONS = 256,   /* the most positions of a plane taken flat */
  DW_FLAT_CHUNKS = 32,       /* their vectors of 8 */
};

typedef struct dw {
  const loom_abi_conv2d_t *d;
  int64_t hq, wq; /* a sub-plane's rows and columns */
  int64_t sub;    /* floats from one sub-plane to the next */
  int64_t band;   /* output rows a band */
  int64_t taps;
  int64_t off[DW_MAX_TAPS]; /* where tap t reads, from the output's wide index */
  void (*run)(const struct dw *g, const float *planes, const float *w, float bias, int64_t n,
              float *wide);
  /* The 3x3 window at stride 2 on rows of a vector or more, over the
   * phase planes, or NULL. */
  void (*rows_s2)(const struct dw *g, const float *planes, const float *w, float bias,
                  float *y);
  /* Read from the image itself, or NULL: the 3x3 window at stride 1, and
   * at stride 2 on AVX-512. */
  void (*in_place)(const struct dw *g, const float *x, const float *w, float bias, float *y,
                   int64_t oy0, int64_t oy1);
  int64_t bands; /* of output rows a plane, each its own task (in place only) */
  /* Small planes taken flat (_flat in conv_depthwise_rows.inc), or NULL:
   * tap t of the 3x3 window reads at flat_off[t] from the output's
   * position, in the lanes flat_bits[vector][t] sets. */
  void (*flat)(const struct dw *g, const float *x, const float *w, const float *bias, float *y,
               int64_t n);
  int64_t flat_off[9];
  uint16_t flat_bits[DW_FLAT_CHUNKS][9];
  kern_stride2_fn stride2; /* the even columns of a row, vectorized */
  atomic_int failed;       /* a task found no scratch */
} dw_t;

/* The lanes of eight whose bits are set in b, as maskload takes them. */
__attribute__((target("avx2"))) static inline __m256i lanes_bits_avx2(unsigned b) {
  __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)b), bit), bit);
}

#define DW_CAT_(a, b) a##b
#define DW_CAT(a, b) DW_CAT_(a, b)

/* Lanes [lo, hi) of eight set (all ones), as maskload takes them. */
__attribute__((target("avx2"))) static inline __m256i lanes_avx2(int64_t lo, int64_t hi) {
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32((int)lo - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), idx));
}

#define DW_TARGET __attribute__((target("avx512f,fma")))
#define DW_VEC __m512
#define DW_W 16
#define DW_LOADU(p) _mm512_loadu_ps(p)
#define DW_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define DW_SET1(x) _mm512_set1_ps(x)
#define DW_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define DW_MASK __mmask16
#define DW_LANES(lo, hi) ((__mmask16)(((1u << (hi)) - 1) & ~((1u << (lo)) - 1)))
#define DW_LOAD_MASKED(p, m) _mm512_maskz_loadu_ps((m), (p))
#define DW_STORE_N(p, v, n) _mm512_mask_storeu_ps((p), DW_LANES(0, (n)), (v))
#define DW_FROM_BITS(b) ((__mmask16)(b))
#define DW_RD 8
#define DW_NAME run_avx512
#include "backend/cpu/kernels/conv_depthwise_rows.inc"
#undef DW_TARGET
#undef DW_VEC
#undef DW_W
#undef DW_LOADU
#undef DW_STOREU
#undef DW_SET1
#undef DW_FMA
#undef DW_NAME
#undef DW_RD
#undef DW_MASK
#undef DW_LANES
#undef DW_LOAD_MASKED
#undef DW_STORE_N
#undef DW_FROM_BITS

#define DW_TARGET __attribute__((target("avx2,fma")))
#define DW_VEC __m256
#define DW_W 8
#define DW_LOADU(p) _mm256_loadu_ps(p)
#define DW_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define DW_SET1(x) _mm256_set1_ps(x)
#define DW_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define DW_MASK __m256i
#define DW_LANES(lo, hi) lanes_avx2((lo), (hi))
#define DW_LOAD_MASKED(p, m) _mm256_maskload_ps((p), (m))
#define DW_STORE_N(p, v, n) _mm256_maskstore_ps((p), lanes_avx2(0, (n)), (v))
#define DW_FROM_BITS(b) lanes_bits_avx2(b)
#define DW_RD 4
#define DW_NAME run_avx2
#include "backend/cpu/kernels/conv_depthwise_rows.inc"

/* A K x K window (K = 3, 5) at stride 2 on AVX-512, read straight from
 * the image: output column x0 + l of a block of 16 reads input columns
 * c + 2l + kx (c = 2 x0 - left pad): for kx = 2j and 2j + 1, the even and
 * the odd lanes of the 32 columns from c + 2j, each one two-source
 * permute of two masked loads, so that no plane is split into phases
 * first (a pass over the whole input, which made the stride-2 layers the
 * slowest per FLOP). Lanes in the padding load zeros; input rows in it
 * are skipped. Input row i of a tile serves output rows (i - ky) / 2 for
 * the ky of i's parity. */
enum { S2_R = 4 };
__attribute__((target("avx512f,fma"))) static inline __attribute__((always_inline)) void
s2_avx512_k(const dw_t *g, const float *x, const float *w, float bias, float *y, int64_t oy0,
            int64_t oy1, const int K) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t h = d->h, wi = d->w, wo = d->wo, pt = d->pads[0], pl = d->pads[1];
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const int pairs = (K + 1) / 2; /* column pairs: taps 2j and 2j + 1 */
  __m512 wv[DW_MAX_K][DW_MAX_K], b = _mm512_set1_ps(bias);
  for (int ky = 0; ky < K; ky++)
    for (int kx = 0; kx < K; kx++) wv[ky][kx] = _mm512_set1_ps(w[ky * K + kx]);
  for (int64_t x0 = 0; x0 < wo; x0 += 16) {
    int64_t n = wo - x0 < 16 ? wo - x0 : 16, c = 2 * x0 - pl;
    /* pair j loads at columns c + 2j and c + 2j + 16: lanes inside [0, wi) */
    __mmask16 m[DW_MAX_K + 1];
    int64_t at[DW_MAX_K + 1];
    for (int j = 0; j < 2 * pairs; j++) {
      at[j] = c + 2 * (j / 2) + 16 * (j % 2);
      int64_t lo = at[j] < 0 ? -at[j] : 0, hi = wi - at[j] < 16 ? wi - at[j] : 16;
      m[j] = hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
    }
    __mmask16 out = (__mmask16)((1u << n) - 1);
    for (int64_t oy = oy0; oy < oy1; oy += S2_R) {
      __m512 acc[S2_R];
      _Pragma("GCC unroll 8") for (int r = 0; r < S2_R; r++) acc[r] = b;
      _Pragma("GCC unroll 16") for (int i = 0; i < 2 * S2_R + K - 2; i++) {
        int64_t iy = 2 * oy - pt + i;
        if (iy < 0 || iy >= h) continue;
        const float *row = x + iy * wi;
        __m512 v[DW_MAX_K + 1];
        _Pragma("GCC unroll 3") for (int j = 0; j < pairs; j++) {
          __m512 p = _mm512_maskz_loadu_ps(m[2 * j], row + at[2 * j]);
          __m512 q = _mm512_maskz_loadu_ps(m[2 * j + 1], row + at[2 * j + 1]);
          v[2 * j] = _mm512_permutex2var_ps(p, even, q);
          if (2 * j + 1 < K) v[2 * j + 1] = _mm512_permutex2var_ps(p, odd, q);
        }
        _Pragma("GCC unroll 5") for (int ky = 0; ky < K; ky++) {
          if ((i - ky) % 2) continue;
          int r = (i - ky) / 2;
          if (r < 0 || r >= S2_R) continue;
          _Pragma("GCC unroll 5") for (int kx = 0; kx < K; kx++)
            acc[r] = _mm512_fmadd_ps(wv[ky][kx], v[kx], acc[r]);
        }
      }
      _Pragma("GCC unroll 8") for (int r = 0; r < S2_R; r++) if (oy + r < oy1)
        _mm512_mask_storeu_ps(y + (oy + r) * wo + x0, out, acc[r]);
    }
  }
}

__attribute__((target("avx512f,fma"))) static void s2_avx512_3(const dw_t *g, const float *x,
                                                               const float *w, float bias,
                                                               float *y, int64_t oy0,
                                                               int64_t oy1) {
  s2_avx512_k(g, x, w, bias, y, oy0, oy1, 3);
}

__attribute__((target("avx512f,fma"))) static void s2_avx512_5(const dw_t *g, const float *x,
                                                               const float *w, float bias,
                                                               float *y, int64_t oy0,
                                                               int64_t oy1) {
  s2_avx512_k(g, x, w, bias, y, oy0, oy1, 5);
}

/* Sets g up for the flat kernel on vectors of `lanes`: where each tap
 * reads, and in which lanes of each vector of outputs it reads inside the
 * image. */
static void flat_setup(dw_t *g, int lanes) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t hw = d->ho * d->wo, pt = d->pads[0], pl = d->pads[1];
  g->flat = lanes == 16 ? run_avx512_flat : run_avx2_flat;
  for (int t = 0; t < 9; t++) g->flat_off[t] = (t / 3 - pt) * d->w + t % 3 - pl;
  memset(g->flat_bits, 0, sizeof g->flat_bits);
  for (int64_t p = 0; p < hw; p++)
    for (int t = 0; t < 9; t++) {
      int64_t iy = p / d->wo - pt + t / 3, ix = p % d->wo - pl + t % 3;
      if (iy >= 0 && iy < d->h && ix >= 0 && ix < d->w)
        g->flat_bits[p / lanes][t] |= (uint16_t)(1u << (p % lanes));
    }
}

static int suits(const loom_abi_conv2d_t *d, dw_t *g) {
  if (d->groups != d->c || d->o != d->c || d->kh * d->kw > DW_MAX_TAPS || d->n < 1 ||
      d->ho < 1 || d->wo < 1 || d->stride[0] < 1 || d->stride[1] < 1 || d->dilation[0] < 1 ||
      d->dilation[1] < 1 || d->pads[0] < 0 || d->pads[1] < 0 || d->pads[2] < 0 || d->pads[3] < 0)
    return 0;
  const char *isa = kern_conv_direct_isa();
  if (!isa) return 0;
  int64_t sy = d->stride[0], sx = d->stride[1];
  int avx512 = !strcmp(isa, "avx512");
  g->run = avx512 ? run_avx512 : run_avx2;
  int three = d->kh == 3 && d->kw == 3 && d->dilation[0] == 1 && d->dilation[1] == 1;
  g->rows_s2 = NULL;
  if (three && sy == 2 && sx == 2 && d->wo >= (avx512 ? 16 : 8))
    g->rows_s2 = avx512 ? run_avx512_s2 : run_avx2_s2;
  int five = d->kh == 5 && d->kw == 5 && d->dilation[0] == 1 && d->dilation[1] == 1;
  g->in_place = NULL;
  if (three && sy == 1 && sx == 1) g->in_place = avx512 ? run_avx512_direct3 : run_avx2_direct3;
  if (five && sy == 1 && sx == 1) g->in_place = avx512 ? run_avx512_direct5 : run_avx2_direct5;
  if (three && sy == 2 && sx == 2 && avx512) g->in_place = s2_avx512_3;
  if (five && sy == 2 && sx == 2 && avx512) g->in_place = s2_avx512_5;
  g->flat = NULL;
  int lanes = avx512 ? 16 : 8;
  if (three && sy == 1 && sx == 1 && d->wo == d->w && 2 * d->wo <= lanes &&
      d->ho * d->wo <= DW_FLAT_POSITIONS)
    flat_setup(g, lanes);
  g->stride2 = kern_gather_stride2();
  g->hq = (d->h + d->pads[0] + d->pads[2] + sy - 1) / sy;
  g->wq = (d->w + d->pads[1] + d->pads[3] + sx - 1) / sx;
  if (g->hq > DW_MAX_PLANE / g->wq) return 0;
  /* A run reads up to a row and two vectors past its sub-plane's last row. */
  g->sub = (g->hq + 1) * g->wq + 2 * DW_SLACK;
  if (sy * sx * g->sub > DW_MAX_PLANE) return 0;
  g->band = DW_BAND / g->wq + 1;
  g->taps = d->kh * d->kw;
  for (int64_t ky = 0, t = 0; ky < d->kh; ky++)
    for (int64_t kx = 0; kx < d->kw; kx++, t++) {
      int64_t ay = ky * d->dilation[0], ax = kx * d->dilation[1];
      g->off[t] = ((ay % sy) * sx + ax % sx) * g->sub + (ay / sy) * g->wq + ax / sx;
    }
  return 1;
}

/* Floats of a task's scratch: the sub-planes, then one band's wide
 * outputs (a vector of slack: runs end on whole vectors). */
static size_t scratch_floats(const dw_t *g) {
  const loom_abi_conv2d_t *d = g->d;
  return (size_t)(d->stride[0] * d->stride[1] * g->sub + g->band * g->wq + DW_SLACK);
}

/* Channel plane x (h, w) into the sub-planes. Positions in the padding
 * are never written: they stay as the task's first clearing left them.
 * Column phase p holds the image's columns from col0[p] on, every sx-th,
 * at q0[p] on: found once per plane, not per row. */
static void split_plane(const dw_t *g, const float *x, float *planes) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t sy = d->stride[0], sx = d->stride[1], top = d->pads[0], left = d->pads[1];
  for (int64_t p = 0; p < sx; p++) {
    int64_t q0 = left > p ? (left - p + sx - 1) / sx : 0, col0 = q0 * sx + p - left;
    if (col0 >= d->w) continue;
    /* Padded row iy + top: row phase ry, row qy of it (no division a row). */
    int64_t ry = top % sy, qy = top / sy;
    for (int64_t iy = 0; iy < d->h; iy++, ry = ry + 1 == sy ? 0 : ry + 1, qy += ry == 0) {
      float *dst = planes + (ry * sx + p) * g->sub + qy * g->wq + q0;
      const float *src = x + iy * d->w + col0;
      if (sx == 1) memcpy(dst, src, (size_t)d->w * sizeof(float));
      else if (sx == 2) g->stride2(src, (d->w - col0 + 1) / 2, dst);
      else
        for (int64_t col = 0, q = 0; col0 + col < d->w; col += sx, q++) dst[q] = src[col];
    }
  }
}

/* One plane's outputs, a band of rows at a time: wide rows of wq, of
 * which the first wo are the outputs. */
static void plane_outputs(const dw_t *g, const float *planes, const float *w, float bias,
                          float *wide, float *y) {
  const loom_abi_conv2d_t *d = g->d;
  if (g->rows_s2) {
    g->rows_s2(g, planes, w, bias, y);
    return;
  }
  for (int64_t oy = 0; oy < d->ho; oy += g->band) {
    int64_t rows = d->ho - oy < g->band ? d->ho - oy : g->band;
    g->run(g, planes + oy * g->wq, w, bias, rows * g->wq, wide);
    for (int64_t r = 0; r < rows; r++)
      memcpy(y + (oy + r) * d->wo, wide + r * g->wq, (size_t)d->wo * sizeof(float));
  }
}

/* Whole planes [begin, end) of n * c read in place (g->bands == 1), each
 * image's run of them in one call of the flat kernel or one call a plane
 * of the in-place one, and its epilogue in one call more: a call a plane
 * cost a 7x7 layer of 960 channels as much as its sums. */
static void whole_planes(const dw_t *g, int64_t begin, int64_t end) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t positions = d->ho * d->wo, in_plane = d->h * d->w;
  for (int64_t i = begin; i < end;) {
    int64_t img = i / d->c, ch = i % d->c, n = d->c - ch < end - i ? d->c - ch : end - i;
    const float *x = d->x + i * in_plane, *w = d->weight + ch * g->taps;
    float *y = d->y + i * positions;
    if (g->flat) {
      g->flat(g, x, w, d->bias ? d->bias + ch : NULL, y, n);
    } else {
      for (int64_t k = 0; k < n; k++)
        g->in_place(g, x + k * in_plane, w + k * g->taps, d->bias ? d->bias[ch + k] : 0.0f,
                    y + k * positions, 0, d->ho);
    }
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, y, positions, ch, n, 0, positions);
    i += n;
  }
}

/* Tasks [begin, end) of n * bands * c, each a band of output rows of an
 * (image, channel) plane, bands outer: the image read in place
 * (g->in_place), or through the task's scratch (one band a plane). */
static void run_planes(void *ctx, int64_t begin, int64_t end) {
  dw_t *g = ctx;
  const loom_abi_conv2d_t *d = g->d;
  if (g->in_place && g->bands == 1) {
    whole_planes(g, begin, end);
    return;
  }
  kern_scratch_t s = {.slot = -1, .buf = NULL};
  float *planes = NULL, *wide = NULL;
  if (!g->in_place) {
    size_t floats = scratch_floats(g);
    s = kern_scratch_claim(floats);
    if (!s.buf) {
      atomic_store(&g->failed, 1);
      return;
    }
    memset(s.buf, 0, floats * sizeof(float));
    planes = s.buf, wide = s.buf + d->stride[0] * d->stride[1] * g->sub;
  }
  int64_t positions = d->ho * d->wo, per_image = g->bands * d->c;
  for (int64_t i = begin; i < end; i++) {
    int64_t img = i / per_image, band = i % per_image / d->c, ch = i % d->c;
    int64_t plane = img * d->c + ch;
    int64_t oy0 = d->ho * band / g->bands, oy1 = d->ho * (band + 1) / g->bands;
    const float *x = d->x + plane * d->h * d->w, *w = d->weight + ch * g->taps;
    float *y = d->y + plane * positions, bias = d->bias ? d->bias[ch] : 0.0f;
    if (g->in_place) {
      g->in_place(g, x, w, bias, y, oy0, oy1);
    } else {
      split_plane(g, x, planes);
      plane_outputs(g, planes, w, bias, wide, y);
    }
    if (d->epilogue)
      d->epilogue(d->epilogue_ctx, img, y + oy0 * d->wo, positions, ch, 1, oy0 * d->wo,
                  (oy1 - oy0) * d->wo);
  }
  if (s.buf) kern_scratch_release(s);
}

/* How many bands of rows a plane is cut into: as many as threads where
 * the 1x1 convolutions around the layer (MobileNet's expansion before it,
 * projection after) cut each image's positions among the threads, that
 * is (gemm_run) where an image's positions outnumber its channels and the
 * images do not share out evenly. Thread t's band is then the part of the
 * input thread t wrote and of the output thread t reads, where a channel
 * split reads half of each from the other core's cache. MobileNetV2's
 * 16 -> 96 expansion, stride-2 depthwise layer and 96 -> 24 projection
 * at 112x112, in a chain at 2 threads (best of 500): 0.375 + 0.231 +
 * 0.083 ms with planes split by channel, 0.289 + 0.141 + 0.053 in bands. */
static int64_t row_bands(const dw_t *g, int threads) {
  const loom_abi_conv2d_t *d = g->d;
  if (!g->in_place || g->flat || threads < 2 || d->n % threads == 0 || d->n >= 4 * threads ||
      d->h * d->w < d->c)
    return 1;
  return threads < d->ho ? threads : d->ho;
}

int kern_conv2d_depthwise_suits(const loom_abi_conv2d_t *d) {
  dw_t g = {.d = d};
  return suits(d, &g);
}

int kern_conv2d_depthwise_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  dw_t g = {.d = d};
  if (!suits(d, &g)) return 0;
  atomic_init(&g.failed, 0);
  if (!g.in_place) kern_scratch_reserve(core_pool_threads(pool), scratch_floats(&g));
  g.bands = row_bands(&g, core_pool_threads(pool));
  /* A plane a task at least; with bands, an eighth of a band's channels:
   * the pool's ranges then give thread t band t, and a thread that comes
   * late leaves chunks of its band for the others, where whole bands kept
   * the early one waiting (MobileNetV2's 28x28 layers at 2 threads: 0.11
   * ms on the mean with whole bands, 0.08 with eighths, 0.04 at the
   * fastest either way). */
  int64_t grain = g.bands > 1 ? (d->c + BAND_CHUNKS - 1) / BAND_CHUNKS
                                : 4096 / (d->ho * d->wo) + 1;
  core_pool_for(pool, d->n * g.bands * d->c, grain, run_planes, &g);
  return !atomic_load(&g.failed);
}
