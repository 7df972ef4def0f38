/* conv2d 3x3, stride 1, by Winograd's minimal filtering F(2x2, 3x3): each
 * 2x2 block of outputs (a tile) is A^T [U (.) V] A, where V = B^T d B is
 * the tile's 4x4 input patch transformed and U = G g G^T the filter's.
 * Summed over input channels, the element-wise products of the 16
 * transformed positions are 16 GEMMs, M[xi] = U[xi] (o x c) @ V[xi] (c x
 * tiles): 16 multiplies per 4 outputs and channel where the direct form
 * spends 36, so the GEMMs do 1/2.25 of the implicit im2col's FMAs.
 *
 * The tiles of an image are cut into blocks; one task transforms a
 * block's input (V, in L2), runs the 16 GEMMs on it with the transformed
 * weights packed once per call (or once per executable for frozen
 * weights), and transforms the products back into Y with the bias and the
 * epilogue. The transforms add and subtract only; the GEMMs round as the
 * implicit form's do, and the transforms' sums of up to 9 terms keep the
 * result within a few ulps of the channel sum's own rounding. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "kernels/gemm_impl.h"

enum { XI = 16 }; /* transformed positions of a 4x4 tile */

/* Widest output row taken; the transforms' row buffers live on the stack. */
enum { WINO_MAX_W = 2048 };

/* Tiles a call must have to transform the weights itself: U is 16/9 of
 * the weights, and a 14x14 layer's 49 tiles of 256 channels spent more on
 * it than the GEMMs saved (3.6 ms against the implicit form's 3.2). */
enum { PACKED_MIN_TILES = 16, PER_CALL_MIN_TILES = 128 };

static int64_t call_tiles(const loom_abi_conv2d_t *d) {
  return ((d->ho + 1) / 2) * ((d->wo + 1) / 2) * d->n;
}

int kern_conv2d_winograd_suits(const loom_abi_conv2d_t *d) {
  if (d->kh != 3 || d->kw != 3 || d->stride[0] != 1 || d->stride[1] != 1 ||
      d->dilation[0] != 1 || d->dilation[1] != 1 || d->groups != 1)
    return 0;
  /* The transforms cost per channel and tile what a 16-position GEMM
   * saves only with enough channels; small images (7x7 outputs: 16 tiles,
   * 64 positions for 49) leave the transformed weights to dominate. */
  return d->c >= 16 && d->o >= 16 && d->ho >= 7 && d->wo >= 7 && d->wo <= WINO_MAX_W &&
         call_tiles(d) >= PACKED_MIN_TILES;
}

/* ---- Scratch ------------------------------------------------------------ */

/* Buffers outlive calls (a replayed step allocates nothing): per task V
 * and M of one block, per call the transformed weights. A call or task
 * claims one for its duration; never freed, so they stay reachable. */
enum { WINO_SLOTS = 16 };

static struct {
  atomic_int busy;
  float *buf;
  size_t cap; /* bytes */
} wino_slots[WINO_SLOTS];

static int wino_claim(size_t bytes) {
  for (int i = 0; i < WINO_SLOTS; i++) {
    if (atomic_exchange_explicit(&wino_slots[i].busy, 1, memory_order_acquire)) continue;
    if (wino_slots[i].cap < bytes) {
      free(wino_slots[i].buf);
      wino_slots[i].buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
      wino_slots[i].cap = wino_slots[i].buf ? bytes : 0;
    }
    if (wino_slots[i].buf) return i;
    atomic_store_explicit(&wino_slots[i].busy, 0, memory_order_release);
    return -1;
  }
  return -1;
}

static void wino_release(int slot) {
  if (slot >= 0) atomic_store_explicit(&wino_slots[slot].busy, 0, memory_order_release);
}

/* ---- One block of tiles ------------------------------------------------ */

typedef struct wino {
  const loom_abi_conv2d_t *d;
  const void *u_packed;        /* gemm_pack_a_ahead of U: o x c, 16 groups */
  int64_t tx, ty;              /* tiles across and down an image */
  int64_t tiles, blocks, span; /* per image; tiles a block (the last may have fewer) */
  atomic_int failed;           /* a task found no scratch */
  int avx2;                    /* the transforms' instantiation */
} wino_t;

/* Tiles [t0, t1) of image img; V's and M's rows are n = t1 - t0 long. */
typedef struct block {
  int64_t img, t0, t1, n;
} block_t;

/* ---- Transforms, 8 tiles a vector ------------------------------------ */

/* The loops below are written once over GCC's generic vectors and
 * instantiated for AVX2 and for the baseline ISA (two SSE halves). */
typedef float v8_t __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i_t __attribute__((vector_size(32)));

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define LD8(p) (*(const v8_t *)(p))
#define ST8(p, v) (*(v8_t *)(p) = (v))

/* Even and odd columns of input row iy of plane p, shifted by the left
 * pad, over the 2 * tx + 2 columns that tiles read (zeros outside). */
ALWAYS_INLINE void split_row(const loom_abi_conv2d_t *d, const float *plane, int64_t iy,
                             int64_t tx, float *restrict even, float *restrict odd) {
  int64_t pl = d->pads[1], w = d->w;
  if (iy < 0 || iy >= d->h) {
    memset(even, 0, (size_t)(tx + 1) * sizeof(float));
    memset(odd, 0, (size_t)(tx + 1) * sizeof(float));
    return;
  }
  const float *row = plane + iy * w;
  /* [lo, hi): both columns 2i - pl and 2i + 1 - pl inside the row */
  int64_t lo = (pl + 1) / 2, hi = (w + pl - 1) / 2;
  if (hi > tx + 1) hi = tx + 1;
  if (lo > hi) lo = hi;
  for (int64_t i = 0; i < lo; i++) {
    int64_t e = 2 * i - pl, o = e + 1;
    even[i] = e >= 0 && e < w ? row[e] : 0.0f;
    odd[i] = o >= 0 && o < w ? row[o] : 0.0f;
  }
  const float *src = row + 2 * lo - pl;
  int64_t i = 0;
  for (; i + 8 <= hi - lo; i += 8) {
    v8_t a = LD8(src + 2 * i), b = LD8(src + 2 * i + 8);
    ST8(even + lo + i, __builtin_shuffle(a, b, (v8i_t){0, 2, 4, 6, 8, 10, 12, 14}));
    ST8(odd + lo + i, __builtin_shuffle(a, b, (v8i_t){1, 3, 5, 7, 9, 11, 13, 15}));
  }
  for (; i < hi - lo; i++) {
    even[lo + i] = src[2 * i];
    odd[lo + i] = src[2 * i + 1];
  }
  for (int64_t i = hi; i <= tx; i++) {
    int64_t e = 2 * i - pl, o = e + 1;
    even[i] = e >= 0 && e < w ? row[e] : 0.0f;
    odd[i] = o >= 0 && o < w ? row[o] : 0.0f;
  }
}

/* Tiles [x0, x1) of one tile row: rows e[r], o[r] of the patch split into
 * even and odd columns (patch column j of tile x: e[r][x + j/2] for even j,
 * o[r][x + j/2] for odd), out[xi * stride + x] = (B^T d B)[xi]. */
ALWAYS_INLINE void tiles_in(float *e[4], float *o[4], int64_t x0, int64_t x1,
                            float *out, int64_t stride) {
  int64_t x = x0;
  for (; x + 8 <= x1; x += 8) {
    v8_t p[4][4], t[4][4];
    for (int r = 0; r < 4; r++) {
      p[r][0] = LD8(e[r] + x);
      p[r][1] = LD8(o[r] + x);
      p[r][2] = LD8(e[r] + x + 1);
      p[r][3] = LD8(o[r] + x + 1);
    }
    for (int j = 0; j < 4; j++) { /* B^T d */
      t[0][j] = p[0][j] - p[2][j];
      t[1][j] = p[1][j] + p[2][j];
      t[2][j] = p[2][j] - p[1][j];
      t[3][j] = p[1][j] - p[3][j];
    }
    for (int k = 0; k < 4; k++) { /* (B^T d) B */
      ST8(out + (4 * k + 0) * stride + x, t[k][0] - t[k][2]);
      ST8(out + (4 * k + 1) * stride + x, t[k][1] + t[k][2]);
      ST8(out + (4 * k + 2) * stride + x, t[k][2] - t[k][1]);
      ST8(out + (4 * k + 3) * stride + x, t[k][1] - t[k][3]);
    }
  }
  for (; x < x1; x++) {
    float p[4][4], t[4][4];
    for (int r = 0; r < 4; r++) {
      p[r][0] = e[r][x];
      p[r][1] = o[r][x];
      p[r][2] = e[r][x + 1];
      p[r][3] = o[r][x + 1];
    }
    for (int j = 0; j < 4; j++) {
      t[0][j] = p[0][j] - p[2][j];
      t[1][j] = p[1][j] + p[2][j];
      t[2][j] = p[2][j] - p[1][j];
      t[3][j] = p[1][j] - p[3][j];
    }
    for (int k = 0; k < 4; k++) {
      out[(4 * k + 0) * stride + x] = t[k][0] - t[k][2];
      out[(4 * k + 1) * stride + x] = t[k][1] + t[k][2];
      out[(4 * k + 2) * stride + x] = t[k][2] - t[k][1];
      out[(4 * k + 3) * stride + x] = t[k][1] - t[k][3];
    }
  }
}

/* Tiles [x0, x1) of one tile row: in[xi * stride + x] = M[xi];
 * top[2x + b], bottom[2x + b] = (A^T M A)[a][b] + bias. */
ALWAYS_INLINE void tiles_out(const float *in, int64_t stride, int64_t x0, int64_t x1,
                             float bias, float *restrict top, float *restrict bottom) {
  int64_t x = x0;
  for (; x + 8 <= x1; x += 8) {
    v8_t s0[4], s1[4];
    for (int l = 0; l < 4; l++) { /* A^T M */
      v8_t m0 = LD8(in + l * stride + x), m1 = LD8(in + (4 + l) * stride + x);
      v8_t m2 = LD8(in + (8 + l) * stride + x), m3 = LD8(in + (12 + l) * stride + x);
      s0[l] = m0 + m1 + m2;
      s1[l] = m1 - m2 - m3;
    }
    v8_t te = s0[0] + s0[1] + s0[2] + bias, to = s0[1] - s0[2] - s0[3] + bias; /* (A^T M) A */
    v8_t be = s1[0] + s1[1] + s1[2] + bias, bo = s1[1] - s1[2] - s1[3] + bias;
    /* even and odd output columns interleaved */
    const v8i_t lo = {0, 8, 1, 9, 2, 10, 3, 11}, hi = {4, 12, 5, 13, 6, 14, 7, 15};
    ST8(top + 2 * x, __builtin_shuffle(te, to, lo));
    ST8(top + 2 * x + 8, __builtin_shuffle(te, to, hi));
    ST8(bottom + 2 * x, __builtin_shuffle(be, bo, lo));
    ST8(bottom + 2 * x + 8, __builtin_shuffle(be, bo, hi));
  }
  for (; x < x1; x++) {
    float s0[4], s1[4];
    for (int l = 0; l < 4; l++) {
      float m0 = in[l * stride + x], m1 = in[(4 + l) * stride + x];
      float m2 = in[(8 + l) * stride + x], m3 = in[(12 + l) * stride + x];
      s0[l] = m0 + m1 + m2;
      s1[l] = m1 - m2 - m3;
    }
    top[2 * x] = s0[0] + s0[1] + s0[2] + bias;
    top[2 * x + 1] = s0[1] - s0[2] - s0[3] + bias;
    bottom[2 * x] = s1[0] + s1[1] + s1[2] + bias;
    bottom[2 * x + 1] = s1[1] - s1[2] - s1[3] + bias;
  }
}

/* U[xi][i][j] = (G g G^T)[xi] for filter g = w[i][j] (3x3), output
 * channel i, input channels [0, c): the filters' taps are first laid out
 * tap-major, so that 8 input channels transform as one vector. */
ALWAYS_INLINE void filters_body(const float *w, int64_t o, int64_t c, int64_t i,
                                float *restrict taps, float *u) {
  for (int64_t j = 0; j < c; j++)
    for (int k = 0; k < 9; k++) taps[k * c + j] = w[(i * c + j) * 9 + k];
  int64_t stride = o * c; /* floats between positions xi */
  float *out = u + i * c;
  int64_t j = 0;
  for (; j + 8 <= c; j += 8) {
    v8_t g[3][3], t[4][3];
    for (int r = 0; r < 3; r++)
      for (int q = 0; q < 3; q++) g[r][q] = LD8(taps + (3 * r + q) * c + j);
    for (int q = 0; q < 3; q++) { /* G g */
      t[0][q] = g[0][q];
      t[1][q] = 0.5f * (g[0][q] + g[1][q] + g[2][q]);
      t[2][q] = 0.5f * (g[0][q] - g[1][q] + g[2][q]);
      t[3][q] = g[2][q];
    }
    for (int k = 0; k < 4; k++) { /* (G g) G^T */
      ST8(out + (4 * k + 0) * stride + j, t[k][0]);
      ST8(out + (4 * k + 1) * stride + j, 0.5f * (t[k][0] + t[k][1] + t[k][2]));
      ST8(out + (4 * k + 2) * stride + j, 0.5f * (t[k][0] - t[k][1] + t[k][2]));
      ST8(out + (4 * k + 3) * stride + j, t[k][2]);
    }
  }
  for (; j < c; j++) {
    float g[3][3], t[4][3];
    for (int r = 0; r < 3; r++)
      for (int q = 0; q < 3; q++) g[r][q] = taps[(3 * r + q) * c + j];
    for (int q = 0; q < 3; q++) {
      t[0][q] = g[0][q];
      t[1][q] = 0.5f * (g[0][q] + g[1][q] + g[2][q]);
      t[2][q] = 0.5f * (g[0][q] - g[1][q] + g[2][q]);
      t[3][q] = g[2][q];
    }
    for (int k = 0; k < 4; k++) {
      out[(4 * k + 0) * stride + j] = t[k][0];
      out[(4 * k + 1) * stride + j] = 0.5f * (t[k][0] + t[k][1] + t[k][2]);
      out[(4 * k + 2) * stride + j] = 0.5f * (t[k][0] - t[k][1] + t[k][2]);
      out[(4 * k + 3) * stride + j] = t[k][2];
    }
  }
}

__attribute__((target("avx2,fma"))) static void filters_avx2(const float *w, int64_t o,
                                                            int64_t c, int64_t i, float *taps,
                                                            float *u) {
  filters_body(w, o, c, i, taps, u);
}

static void filters_base(const float *w, int64_t o, int64_t c, int64_t i, float *taps,
                         float *u) {
  filters_body(w, o, c, i, taps, u);
}

/* U[xi][o][c] for all 16 positions, from w (o, c, 3, 3); taps is scratch
 * of 9 * c floats. */
static void weights_transform(const float *w, int64_t o, int64_t c, float *taps, float *u) {
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  for (int64_t i = 0; i < o; i++) {
    if (avx2) filters_avx2(w, o, c, i, taps, u);
    else filters_base(w, o, c, i, taps, u);
  }
}

/* V[xi][ci][t - t0] = (B^T d B)[xi] for block b's tiles, channels ci in
 * [c0, c1). */
ALWAYS_INLINE void input_body(const wino_t *w, const block_t *b, int64_t c0, int64_t c1,
                              float *v) {
  const loom_abi_conv2d_t *d = w->d;
  int64_t img = b->img, t0 = b->t0, t1 = b->t1, n = b->n;
  _Alignas(64) float rows[8][WINO_MAX_W / 2 + 8];
  float *e[4] = {rows[0], rows[1], rows[2], rows[3]}, *o[4] = {rows[4], rows[5], rows[6], rows[7]};
  for (int64_t ci = c0; ci < c1; ci++) {
    const float *plane = d->x + (img * d->c + ci) * d->h * d->w;
    for (int64_t ty = t0 / w->tx; ty * w->tx < t1; ty++) {
      int64_t x0 = ty * w->tx < t0 ? t0 - ty * w->tx : 0;
      int64_t x1 = (ty + 1) * w->tx > t1 ? t1 - ty * w->tx : w->tx;
      /* The last two rows of a tile row's patches are the first two of
       * the next's: split once, the buffers rotated. */
      int first = ty == t0 / w->tx;
      if (!first)
        for (int r = 0; r < 2; r++) {
          float *te = e[r], *to = o[r];
          e[r] = e[r + 2];
          o[r] = o[r + 2];
          e[r + 2] = te;
          o[r + 2] = to;
        }
      for (int r = first ? 0 : 2; r < 4; r++)
        split_row(d, plane, 2 * ty - d->pads[0] + r, w->tx, e[r], o[r]);
      tiles_in(e, o, x0, x1, v + ci * n + ty * w->tx - t0, d->c * n);
    }
  }
}

/* Y over block b's tiles = A^T M A + bias, output channels oc in [o0,
 * o1); M[xi][oc][t - t0]. */
ALWAYS_INLINE void output_body(const wino_t *w, const block_t *b, int64_t o0, int64_t o1,
                               const float *m) {
  const loom_abi_conv2d_t *d = w->d;
  int64_t img = b->img, t0 = b->t0, t1 = b->t1, n = b->n;
  _Alignas(64) float top[WINO_MAX_W + 16], bottom[WINO_MAX_W + 16];
  for (int64_t oc = o0; oc < o1; oc++) {
    float *plane = d->y + (img * d->o + oc) * d->ho * d->wo;
    float bias = d->bias ? d->bias[oc] : 0.0f;
    for (int64_t ty = t0 / w->tx; ty * w->tx < t1; ty++) {
      int64_t x0 = ty * w->tx < t0 ? t0 - ty * w->tx : 0;
      int64_t x1 = (ty + 1) * w->tx > t1 ? t1 - ty * w->tx : w->tx;
      tiles_out(m + oc * n + ty * w->tx - t0, d->o * n, x0, x1, bias, top, bottom);
      int64_t c0 = 2 * x0, c1 = 2 * x1 < d->wo ? 2 * x1 : d->wo;
      memcpy(plane + 2 * ty * d->wo + c0, top + c0, (size_t)(c1 - c0) * sizeof(float));
      if (2 * ty + 1 < d->ho)
        memcpy(plane + (2 * ty + 1) * d->wo + c0, bottom + c0, (size_t)(c1 - c0) * sizeof(float));
    }
  }
}

__attribute__((target("avx2,fma"))) static void input_avx2(const wino_t *w, const block_t *b,
                                                          int64_t c0, int64_t c1, float *v) {
  input_body(w, b, c0, c1, v);
}

static void input_base(const wino_t *w, const block_t *b, int64_t c0, int64_t c1, float *v) {
  input_body(w, b, c0, c1, v);
}

__attribute__((target("avx2,fma"))) static void output_avx2(const wino_t *w, const block_t *b,
                                                           int64_t o0, int64_t o1,
                                                           const float *m) {
  output_body(w, b, o0, o1, m);
}

static void output_base(const wino_t *w, const block_t *b, int64_t o0, int64_t o1,
                        const float *m) {
  output_body(w, b, o0, o1, m);
}

/* The epilogue over block b's positions, output channels [o0, o1): whole
 * output rows in one call, the columns of a partial tile row one output
 * row at a time (another task may still be writing the rest of it). */
static void finish_block(const wino_t *w, const block_t *b, int64_t o0, int64_t o1) {
  const loom_abi_conv2d_t *d = w->d;
  int64_t img = b->img, t0 = b->t0, t1 = b->t1;
  int64_t positions = d->ho * d->wo;
  float *y = d->y + img * d->o * positions;
  int64_t run0 = 0, run1 = 0; /* pending positions [run0, run1) */
  for (int64_t ty = t0 / w->tx; ty * w->tx < t1; ty++) {
    int64_t x0 = ty * w->tx < t0 ? t0 - ty * w->tx : 0;
    int64_t x1 = (ty + 1) * w->tx > t1 ? t1 - ty * w->tx : w->tx;
    int64_t c0 = 2 * x0, c1 = 2 * x1 < d->wo ? 2 * x1 : d->wo;
    for (int64_t r = 2 * ty; r < 2 * ty + 2 && r < d->ho; r++) {
      int64_t p0 = r * d->wo + c0, p1 = r * d->wo + c1;
      if (run1 > run0 && p0 == run1) {
        run1 = p1;
        continue;
      }
      if (run1 > run0)
        d->epilogue(d->epilogue_ctx, img, y + o0 * positions + run0, positions, o0, o1 - o0,
                    run0, run1 - run0);
      run0 = p0;
      run1 = p1;
    }
  }
  if (run1 > run0)
    d->epilogue(d->epilogue_ctx, img, y + o0 * positions + run0, positions, o0, o1 - o0, run0,
                run1 - run0);
}

static block_t block_of(const wino_t *w, int64_t i) {
  int64_t t0 = i % w->blocks * w->span;
  int64_t t1 = t0 + w->span < w->tiles ? t0 + w->span : w->tiles;
  return (block_t){i / w->blocks, t0, t1, t1 - t0};
}

/* The 16 products of block b: M[xi] = U[xi] @ V[xi]. */
static void block_gemms(const wino_t *w, const block_t *b, const float *v, float *m,
                        core_pool_t *pool) {
  const loom_abi_conv2d_t *d = w->d;
  gemm_problem_t p = {.m = d->o, .n = b->n, .k = d->c, .batch = XI, .groups = XI,
                      .lda = d->c, .sa = {0, d->o * d->c},
                      .b = v, .ldb = b->n, .sb = {0, d->c * b->n}, .pack_b = gemm_pack_b_matrix,
                      .c = m, .ldc = b->n, .sc = {0, d->o * b->n}};
  gemm_use_packed_a(&p, w->u_packed);
  gemm_run(&p, pool);
}

static void run_input(const wino_t *w, const block_t *b, int64_t c0, int64_t c1, float *v) {
  if (w->avx2) input_avx2(w, b, c0, c1, v);
  else input_base(w, b, c0, c1, v);
}

static void run_output(const wino_t *w, const block_t *b, int64_t o0, int64_t o1,
                       const float *m) {
  if (w->avx2) output_avx2(w, b, o0, o1, m);
  else output_base(w, b, o0, o1, m);
  if (w->d->epilogue) finish_block(w, b, o0, o1);
}

/* One task computes a block whole. */
static void run_block(const wino_t *w, int64_t i, float *v, float *m) {
  block_t b = block_of(w, i);
  run_input(w, &b, 0, w->d->c, v);
  block_gemms(w, &b, v, m, NULL);
  run_output(w, &b, 0, w->d->o, m);
}

/* Too few tiles to give each thread blocks of its own (a 7x7 layer has
 * 16): each block runs in three steps, each split over the pool, by
 * input channels, by the 16 GEMMs and by output channels. */
typedef struct phased {
  const wino_t *w;
  block_t b;
  float *v, *m;
} phased_t;

static void phased_input(void *ctx, int64_t c0, int64_t c1) {
  phased_t *ph = ctx;
  run_input(ph->w, &ph->b, c0, c1, ph->v);
}

static void phased_output(void *ctx, int64_t o0, int64_t o1) {
  phased_t *ph = ctx;
  run_output(ph->w, &ph->b, o0, o1, ph->m);
}

static int run_phased(const wino_t *w, core_pool_t *pool) {
  const loom_abi_conv2d_t *d = w->d;
  int slot = wino_claim((size_t)(XI * (d->c + d->o) * w->span) * sizeof(float));
  if (slot < 0) return 0;
  phased_t ph = {.w = w, .v = wino_slots[slot].buf};
  ph.m = ph.v + XI * d->c * w->span;
  for (int64_t i = 0; i < d->n * w->blocks; i++) {
    ph.b = block_of(w, i);
    core_pool_for(pool, d->c, 8, phased_input, &ph);
    block_gemms(w, &ph.b, ph.v, ph.m, pool);
    core_pool_for(pool, d->o, 8, phased_output, &ph);
  }
  wino_release(slot);
  return 1;
}

static void wino_body(void *ctx, int64_t begin, int64_t end) {
  wino_t *w = ctx;
  const loom_abi_conv2d_t *d = w->d;
  size_t floats = (size_t)(XI * (d->c + d->o) * w->span);
  int slot = wino_claim(floats * sizeof(float));
  if (slot < 0) {
    atomic_store(&w->failed, 1);
    return;
  }
  float *v = wino_slots[slot].buf, *m = v + XI * d->c * w->span;
  for (int64_t i = begin; i < end; i++) run_block(w, i, v, m);
  wino_release(slot);
}

/* ---- Weights packed ahead ---------------------------------------------- */

size_t kern_conv2d_winograd_packed_bytes(int64_t o, int64_t c) {
  return gemm_packed_a_bytes(o, c, XI);
}

int kern_conv2d_winograd_pack_weight(const float *w, int64_t o, int64_t c, void *dst) {
  float *u = malloc((size_t)((XI * o + 9) * c) * sizeof(float));
  if (!u) return 0;
  weights_transform(w, o, c, u + XI * o * c, u);
  gemm_pack_a_ahead(u, c, o * c, o, c, XI, dst);
  free(u);
  return 1;
}

/* Whether weight_packed holds U for d (else it is NULL or the implicit
 * form's panels). */
static int packed_for_winograd(const loom_abi_conv2d_t *d) {
  gemm_problem_t probe = {.m = d->o, .k = d->c, .batch = XI, .groups = XI};
  gemm_use_packed_a(&probe, d->weight_packed);
  return probe.a_packed != NULL;
}

int kern_conv2d_winograd_takes(const loom_abi_conv2d_t *d) {
  if (!kern_conv2d_winograd_suits(d)) return 0;
  /* The implicit form's packed weights beat transforming them per call. */
  return packed_for_winograd(d) || (!d->weight_packed && call_tiles(d) >= PER_CALL_MIN_TILES);
}

int kern_conv2d_winograd_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  if (!kern_conv2d_winograd_takes(d)) return 0;
  int packed = packed_for_winograd(d);
  wino_t w = {.d = d, .tx = (d->wo + 1) / 2, .ty = (d->ho + 1) / 2,
              .avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")};
  w.tiles = w.tx * w.ty;
  /* About 64 tiles a block (V and M of 64 channels: 2 x 256 KiB), at
   * least two blocks a thread, of at least 32 tiles (a block's GEMMs are
   * 16 x o x c x tiles; fewer tiles waste the 16-wide register tile);
   * else blocks of up to 64 tiles, each split over the pool. */
  int threads = core_pool_threads(pool);
  int64_t blocks = (w.tiles + 63) / 64;
  int phased = 0;
  if (threads > 1 && d->n * blocks < 2 * threads) {
    int64_t want = (2 * threads + d->n - 1) / d->n;
    if (w.tiles / want >= 32) blocks = want;
    else phased = 1;
  }
  w.span = (w.tiles + blocks - 1) / blocks;
  w.blocks = (w.tiles + w.span - 1) / w.span;
  int u_slot = -1;
  w.u_packed = d->weight_packed;
  if (!packed) {
    /* U, after the packed panels, transformed and packed for this call. */
    size_t bytes = (kern_conv2d_winograd_packed_bytes(d->o, d->c) + 63) / 64 * 64;
    u_slot = wino_claim(bytes + (size_t)((XI * d->o + 9) * d->c) * sizeof(float));
    if (u_slot < 0) return 0;
    char *base = (char *)wino_slots[u_slot].buf;
    float *u = (float *)(base + bytes);
    weights_transform(d->weight, d->o, d->c, u + XI * d->o * d->c, u);
    gemm_pack_a_ahead(u, d->c, d->o * d->c, d->o, d->c, XI, base);
    w.u_packed = base;
  }
  int done = 1;
  if (phased) done = run_phased(&w, pool);
  else core_pool_for(pool, d->n * w.blocks, 1, wino_body, &w);
  wino_release(u_slot);
  return done && !atomic_load(&w.failed);
}
