/* The transforms of Winograd's F(m x m, 3x3), m = 2 and 4 (Lavin and
 * Gray's matrices): input patches V = B^T d B, filters U = G g G^T and
 * products back to outputs Y = A^T M A. Each is a 1-D transform applied
 * down the columns, then along the rows, 8 tiles (or 8 channels) a vector.
 * The loops are written once over generic vectors (GCC's and clang's), with
 * m a constant, and built for AVX2 and for the baseline ISA (two SSE
 * halves).
 * A last vector past the end of a range computes in full and stores only
 * its lanes inside (the buffers it reads carry WINO_SLACK floats). */
#include <string.h>

#include "backend/cpu/kernels/winograd_impl.h"

typedef float v8_t __attribute__((vector_size(32), aligned(4)));

/* Lanes of a and b (b's numbered 8-15), by constant indices: clang's
 * builtin, which GCC has from version 12 on; GCC's own before. */
#if defined(__clang__) || __GNUC__ >= 12
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef int32_t v8i_t __attribute__((vector_size(32)));
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (v8i_t){__VA_ARGS__})
#endif
/* The even and odd lanes of a then b; a's and b's halves interleaved
 * lane by lane (LO, HI), and pair by pair (LO2, HI2). */
#define EVENS(a, b) SHUFFLE(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define ODDS(a, b) SHUFFLE(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
#define LO(a, b) SHUFFLE(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define HI(a, b) SHUFFLE(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
#define LO2(a, b) SHUFFLE(a, b, 0, 1, 8, 9, 2, 3, 10, 11)
#define HI2(a, b) SHUFFLE(a, b, 4, 5, 12, 13, 6, 7, 14, 15)

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define LD8(p) (*(const v8_t *)(p))
#define ST8(p, v) (*(v8_t *)(p) = (v))

enum { ALPHA_MAX = 6 };

/* Stores the first `lanes` (<= 8) lanes of *v at p. By pointer: a
 * vector argument's ABI differs with and without AVX (-Wpsabi), even
 * inlined. */
ALWAYS_INLINE void store_lanes(float *p, const v8_t *v, int64_t lanes) {
  if (lanes >= 8) {
    ST8(p, *v);
    return;
  }
  float t[8];
  ST8(t, *v);
  for (int64_t i = 0; i < lanes; i++) p[i] = t[i];
}

/* ---- The 1-D transforms ------------------------------------------------ */

/* out[0:alpha] = B^T in[0:alpha] */
ALWAYS_INLINE void bt(const int m, const v8_t *in, v8_t *out) {
  if (m == 2) {
    out[0] = in[0] - in[2];
    out[1] = in[1] + in[2];
    out[2] = in[2] - in[1];
    out[3] = in[1] - in[3];
    return;
  }
  v8_t a = in[4] - 4.0f * in[2], b = in[3] - 4.0f * in[1];
  v8_t c = in[4] - in[2], e = 2.0f * (in[3] - in[1]);
  out[0] = 4.0f * in[0] - 5.0f * in[2] + in[4];
  out[1] = a + b;
  out[2] = a - b;
  out[3] = c + e;
  out[4] = c - e;
  out[5] = 4.0f * in[1] - 5.0f * in[3] + in[5];
}

/* out[0:alpha] = G in[0:3] */
ALWAYS_INLINE void g_(const int m, const v8_t *in, v8_t *out) {
  if (m == 2) {
    out[0] = in[0];
    out[1] = 0.5f * (in[0] + in[1] + in[2]);
    out[2] = 0.5f * (in[0] - in[1] + in[2]);
    out[3] = in[2];
    return;
  }
  v8_t even = in[0] + in[2], q = (1.0f / 24) * in[0] + (1.0f / 6) * in[2];
  out[0] = 0.25f * in[0];
  out[1] = (-1.0f / 6) * (even + in[1]);
  out[2] = (-1.0f / 6) * (even - in[1]);
  out[3] = q + (1.0f / 12) * in[1];
  out[4] = q - (1.0f / 12) * in[1];
  out[5] = in[2];
}

/* out[0:m] = A^T in[0:alpha] */
ALWAYS_INLINE void at(const int m, const v8_t *in, v8_t *out) {
  if (m == 2) {
    out[0] = in[0] + in[1] + in[2];
    out[1] = in[1] - in[2] - in[3];
    return;
  }
  v8_t s = in[1] + in[2], d = in[1] - in[2], s34 = in[3] + in[4], d34 = in[3] - in[4];
  out[0] = in[0] + s + s34;
  out[1] = d + 2.0f * d34;
  out[2] = s + 4.0f * s34;
  out[3] = d + 8.0f * d34 + in[5];
}

/* ---- Input ---------------------------------------------------------------- */

/* Input row iy of the image plane split into m phases, shifted by the left
 * pad: ph[p][i] = row[m * i + p - pl], i < count (zeros outside the row). */
ALWAYS_INLINE void split_row(const int m, const loom_abi_conv2d_t *d, const float *plane,
                             int64_t iy, int64_t count, float **ph) {
  int64_t pl = d->pads[1], w = d->w;
  if (iy < 0 || iy >= d->h) {
    for (int p = 0; p < m; p++) memset(ph[p], 0, (size_t)count * sizeof(float));
    return;
  }
  const float *row = plane + iy * w;
  /* [lo, hi): all m columns of i inside the row */
  int64_t lo = (pl + m - 1) / m, hi = (w + pl) / m;
  if (hi > count) hi = count;
  if (lo > hi) lo = hi;
  int64_t i = 0;
  for (; i < lo; i++)
    for (int p = 0; p < m; p++) {
      int64_t col = m * i + p - pl;
      ph[p][i] = col >= 0 && col < w ? row[col] : 0.0f;
    }
  for (; i + 8 <= hi; i += 8) {
    const float *src = row + m * i - pl;
    v8_t a = LD8(src), b = LD8(src + 8);
    if (m == 2) {
      ST8(ph[0] + i, EVENS(a, b));
      ST8(ph[1] + i, ODDS(a, b));
      continue;
    }
    v8_t c = LD8(src + 16), e = LD8(src + 24);
    v8_t ab0 = EVENS(a, b), ab1 = ODDS(a, b);
    v8_t ce0 = EVENS(c, e), ce1 = ODDS(c, e);
    ST8(ph[0] + i, EVENS(ab0, ce0));
    ST8(ph[2] + i, ODDS(ab0, ce0));
    ST8(ph[1] + i, EVENS(ab1, ce1));
    ST8(ph[3] + i, ODDS(ab1, ce1));
  }
  for (; i < count; i++)
    for (int p = 0; p < m; p++) {
      int64_t col = m * i + p - pl;
      ph[p][i] = col >= 0 && col < w ? row[col] : 0.0f;
    }
}

/* Tiles [x0, x1) of one tile row from its alpha patch rows, each split
 * into phases (patch column j of tile x: rows[r][j % m][x + j / m]):
 * out[xi * stride + x] = V[xi]. */
ALWAYS_INLINE void tiles_in(const int m, float *rows[ALPHA_MAX][4], int64_t x0, int64_t x1,
                            float *out, int64_t stride) {
  const int alpha = m + 2;
  for (int64_t x = x0; x < x1; x += 8) {
    v8_t t[ALPHA_MAX][ALPHA_MAX]; /* t[row][column] = (B^T d) */
    for (int j = 0; j < alpha; j++) {
      v8_t col[ALPHA_MAX], tc[ALPHA_MAX];
      for (int r = 0; r < alpha; r++) col[r] = LD8(rows[r][j % m] + x + j / m);
      bt(m, col, tc);
      for (int r = 0; r < alpha; r++) t[r][j] = tc[r];
    }
    for (int k = 0; k < alpha; k++) {
      v8_t v[ALPHA_MAX];
      bt(m, t[k], v);
      for (int l = 0; l < alpha; l++)
        store_lanes(out + (alpha * k + l) * stride + x, &v[l], x1 - x);
    }
  }
}

ALWAYS_INLINE void input_body(const int m, const wino_block_t *b, int64_t c0, int64_t c1,
                              float *v) {
  const loom_abi_conv2d_t *d = b->d;
  const int alpha = m + 2;
  int64_t count = b->tx + 1; /* phase entries tiles read: x and x + 1 */
  /* alpha * m phase rows of count floats, and the 8 a last vector reads */
  int64_t pitch = (count + 8 + 15) / 16 * 16;
  _Alignas(64) float buf[24 * (WINO_MAX_W / 4 + 32)]; /* m = 2: 8 rows; m = 4: 24 */
  float *rows[ALPHA_MAX][4];
  for (int r = 0; r < alpha; r++)
    for (int p = 0; p < m; p++) rows[r][p] = buf + (r * m + p) * pitch;
  int64_t ty0 = b->t0 / b->tx;
  for (int64_t ci = c0; ci < c1; ci++) {
    const float *plane = d->x + (b->img * d->c + ci) * d->h * d->w;
    for (int64_t ty = ty0; ty * b->tx < b->t1; ty++) {
      int64_t x0 = ty * b->tx < b->t0 ? b->t0 - ty * b->tx : 0;
      int64_t x1 = (ty + 1) * b->tx > b->t1 ? b->t1 - ty * b->tx : b->tx;
      /* The last two patch rows of a tile row are the first two of the
       * next's: split once, the buffers rotated. */
      if (ty > ty0)
        for (int r = 0; r < 2; r++)
          for (int p = 0; p < m; p++) {
            float *t = rows[r][p];
            rows[r][p] = rows[r + m][p];
            rows[r + m][p] = t;
          }
      for (int r = ty > ty0 ? 2 : 0; r < alpha; r++)
        split_row(m, d, plane, m * ty - d->pads[0] + r, count, rows[r]);
      tiles_in(m, rows, x0, x1, v + ci * b->n + ty * b->tx - b->t0, d->c * b->n);
    }
  }
}

/* ---- Output ------------------------------------------------------------- */

/* Tiles [x0, x1) of one tile row: in[xi * stride + x] = M[xi];
 * out[r][m * x + c] = (A^T M A)[r][c] + bias. */
ALWAYS_INLINE void tiles_out(const int m, const float *in, int64_t stride, int64_t x0,
                             int64_t x1, float bias, float *out[4]) {
  const int alpha = m + 2;
  for (int64_t x = x0; x < x1; x += 8) {
    v8_t s[4][ALPHA_MAX]; /* s[row][column] = (A^T M) */
    for (int l = 0; l < alpha; l++) {
      v8_t col[ALPHA_MAX], sc[4];
      for (int k = 0; k < alpha; k++) col[k] = LD8(in + (alpha * k + l) * stride + x);
      at(m, col, sc);
      for (int r = 0; r < m; r++) s[r][l] = sc[r];
    }
    for (int r = 0; r < m; r++) {
      v8_t y[4];
      at(m, s[r], y);
      for (int c = 0; c < m; c++) y[c] += bias;
      float *o = out[r] + m * x;
      if (m == 2) {
        ST8(o, LO(y[0], y[1]));
        ST8(o + 8, HI(y[0], y[1]));
        continue;
      }
      v8_t a0 = LO(y[0], y[1]), a1 = HI(y[0], y[1]);
      v8_t b0 = LO(y[2], y[3]), b1 = HI(y[2], y[3]);
      ST8(o, LO2(a0, b0));
      ST8(o + 8, HI2(a0, b0));
      ST8(o + 16, LO2(a1, b1));
      ST8(o + 24, HI2(a1, b1));
    }
  }
}

ALWAYS_INLINE void output_body(const int m, const wino_block_t *b, int64_t o0, int64_t o1,
                               const float *mm) {
  const loom_abi_conv2d_t *d = b->d;
  _Alignas(64) float buf[4][WINO_MAX_W + 64];
  float *rows[4] = {buf[0], buf[1], buf[2], buf[3]};
  for (int64_t oc = o0; oc < o1; oc++) {
    float *plane = d->y + (b->img * d->o + oc) * d->ho * d->wo;
    float bias = d->bias ? d->bias[oc] : 0.0f;
    for (int64_t ty = b->t0 / b->tx; ty * b->tx < b->t1; ty++) {
      int64_t x0 = ty * b->tx < b->t0 ? b->t0 - ty * b->tx : 0;
      int64_t x1 = (ty + 1) * b->tx > b->t1 ? b->t1 - ty * b->tx : b->tx;
      tiles_out(m, mm + oc * b->n + ty * b->tx - b->t0, d->o * b->n, x0, x1, bias, rows);
      int64_t c0 = m * x0, c1 = m * x1 < d->wo ? m * x1 : d->wo;
      for (int r = 0; r < m && m * ty + r < d->ho; r++)
        memcpy(plane + (m * ty + r) * d->wo + c0, rows[r] + c0,
               (size_t)(c1 - c0) * sizeof(float));
    }
  }
}

/* ---- Filters ------------------------------------------------------------ */

/* The filters of output channels [o0, o1): their taps laid out tap-major
 * first, so that 8 input channels transform as one vector. */
ALWAYS_INLINE void filters_body(const int m, const float *w, int64_t o, int64_t c, int64_t o0,
                                int64_t o1, float *restrict taps, float *u) {
  const int alpha = m + 2;
  int64_t stride = o * c; /* floats between positions xi */
  for (int64_t i = o0; i < o1; i++) {
    for (int64_t j = 0; j < c; j++)
      for (int k = 0; k < 9; k++) taps[k * c + j] = w[(i * c + j) * 9 + k];
    float *out = u + i * c;
    for (int64_t j = 0; j < c; j += 8) {
      v8_t t[ALPHA_MAX][3]; /* t[row][q] = (G g) */
      for (int q = 0; q < 3; q++) {
        v8_t col[3], tc[ALPHA_MAX];
        for (int r = 0; r < 3; r++) col[r] = LD8(taps + (3 * r + q) * c + j);
        g_(m, col, tc);
        for (int r = 0; r < alpha; r++) t[r][q] = tc[r];
      }
      for (int k = 0; k < alpha; k++) {
        v8_t uk[ALPHA_MAX];
        g_(m, t[k], uk);
        for (int l = 0; l < alpha; l++)
          store_lanes(out + (alpha * k + l) * stride + j, &uk[l], c - j);
      }
    }
  }
}

/* ---- Instances ---------------------------------------------------------- */

#define INSTANCE(M, SUFFIX, TARGET)                                                         \
  TARGET static void filters_##M##SUFFIX(const float *w, int64_t o, int64_t c, int64_t o0,  \
                                         int64_t o1, float *taps, float *u) {               \
    filters_body(M, w, o, c, o0, o1, taps, u);                                             \
  }                                                                                         \
  TARGET static void input_##M##SUFFIX(const wino_block_t *b, int64_t c0, int64_t c1,       \
                                       float *v) {                                          \
    input_body(M, b, c0, c1, v);                                                           \
  }                                                                                         \
  TARGET static void output_##M##SUFFIX(const wino_block_t *b, int64_t o0, int64_t o1,      \
                                        const float *mm) {                                  \
    output_body(M, b, o0, o1, mm);                                                         \
  }                                                                                         \
  static const wino_transforms_t f##M##SUFFIX = {M, M + 2, filters_##M##SUFFIX,             \
                                                 input_##M##SUFFIX, output_##M##SUFFIX};

#define AVX2 __attribute__((target("avx2,fma")))
INSTANCE(2, _avx2, AVX2)
INSTANCE(4, _avx2, AVX2)
INSTANCE(2, _base, )
INSTANCE(4, _base, )

const wino_transforms_t *wino_transforms(int m) {
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (m == 4) return avx2 ? &f4_avx2 : &f4_base;
  return avx2 ? &f2_avx2 : &f2_base;
}
