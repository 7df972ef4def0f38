/* conv2d as GEMM, per image and group: Y[og x ho*wo] = W[og x cg*kh*kw] @
 * X_col[cg*kh*kw x ho*wo]. Output channels are rows and positions are
 * columns, which is NCHW's own layout (no transpose of Y) and the
 * epilogue's view. X_col is never built: the GEMM's B packer gathers its
 * panels straight from the image (an implicit im2col), so the column
 * matrix costs no memory and no extra pass; a 1x1 stride-1 unpadded
 * convolution reads the image itself as B. Images and groups are the
 * GEMM's batch, so they spread over the pool like batched matmuls; many
 * small images (fewer than 128 positions each) instead join one GEMM's
 * columns (see conv2d_batched). */
#include "backend/cpu/kernels/gemm.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm_impl.h"
#include "backend/cpu/kernels/scratch.h"

/* The output columns [first, last] of a tap whose input column ix = ox *
 * sx + dx lies inside the image (last < first: none). They are the same on
 * every output row, so they are found once per tap: two divisions per
 * row cost more than copying a 7- or 14-wide row. */
typedef struct tap_cols {
  int64_t first, last, sx, dx;
} tap_cols_t;

static tap_cols_t tap_cols(int64_t w, int64_t sx, int64_t dx) {
  tap_cols_t t = {dx >= 0 ? 0 : (-dx + sx - 1) / sx, w - 1 - dx < 0 ? -1 : (w - 1 - dx) / sx,
                  sx, dx};
  return t;
}

/* out[0:len] = the taps at output columns ox0.. of one output row, read
 * from input row `row` (NULL: the row lies in the padding): zeros left and
 * right of the image, a copy (or a strided gather) between, so that
 * packing runs at memory speed without a test per element. */
static void gather_row(const float *row, const tap_cols_t *t, int64_t ox0, int64_t len,
                       float *out) {
  int64_t lo = 0, hi = 0; /* [lo, hi): inside the image */
  if (row) {
    lo = t->first - ox0 < 0 ? 0 : t->first - ox0 > len ? len : t->first - ox0;
    hi = t->last + 1 - ox0 < lo ? lo : t->last + 1 - ox0 > len ? len : t->last + 1 - ox0;
  }
  for (int64_t c = 0; c < lo; c++) out[c] = 0.0f;
  if (hi > lo) {
    const float *src = row + (ox0 + lo) * t->sx + t->dx;
    float *dst = out + lo;
    /* memcpy: an inline loop (vector body, scalar tail) measured ~5%
     * slower on LeNet's 28-wide rows. A constant stride 2 (ResNet's
     * downsampling) lets the compiler vectorize the gather with shuffles. */
    if (t->sx == 1) memcpy(dst, src, (size_t)(hi - lo) * sizeof(float));
    else if (t->sx == 2) for (int64_t c = 0; c < hi - lo; c++) dst[c] = src[2 * c];
    else for (int64_t c = 0; c < hi - lo; c++) dst[c] = src[c * t->sx];
  }
  for (int64_t c = hi; c < len; c++) out[c] = 0.0f;
}

/* What the packers read: the layer, its tap table when its outputs are
 * small (kern_conv_taps_build), else NULL, and the stride-2 gather of
 * the machine's ISA. */
typedef struct conv_b {
  const loom_abi_conv2d_t *d;
  const int32_t *taps;
  kern_stride2_fn stride2;
} conv_b_t;

static conv_b_t conv_b(const loom_abi_conv2d_t *d, int32_t *table) {
  return (conv_b_t){d, kern_conv_taps_build(d, table) ? table : NULL, kern_gather_stride2()};
}

/* Row r of the image's column matrix (tap (ci, ky, kx)) at columns [jc,
 * jc + len) (output positions (oy, ox)): through the tap table, or a run
 * of output row at a time. */
static void gather_col_row(const conv_b_t *cb, const float *img, int64_t r, int64_t jc,
                           int64_t len, float *out) {
  const loom_abi_conv2d_t *d = cb->d;
  int64_t taps = d->kh * d->kw;
  int64_t ci = r / taps, ky = r % taps / d->kw, kx = r % d->kw;
  const float *plane = img + ci * d->h * d->w;
  if (cb->taps) {
    kern_conv_taps_gather(cb->taps + r % taps * d->ho * d->wo + jc, plane, len, out);
    return;
  }
  int64_t dy = ky * d->dilation[0] - d->pads[0], wo = d->wo;
  tap_cols_t t = tap_cols(d->w, d->stride[1], kx * d->dilation[1] - d->pads[1]);
  int64_t c = 0, oy = jc / wo, ox = jc % wo;
  if (ox) { /* the rest of a row begun in the previous block */
    int64_t run = len < wo - ox ? len : wo - ox;
    int64_t iy = oy * d->stride[0] + dy;
    gather_row(iy >= 0 && iy < d->h ? plane + iy * d->w : NULL, &t, ox, run, out);
    c = run;
    oy++;
  }
  /* Whole rows, the bulk: the tap reads the same columns [lo, hi) of
   * each, so the clamps of gather_row are done once. (One loop calling
   * gather_row with the clamps hoisted ran the 3x3 stride-2 layers 1-2%
   * slower than this copy of its body.) */
  int64_t lo = t.first < wo ? t.first : wo, hi = t.last + 1 > wo ? wo : t.last + 1;
  if (hi < lo) hi = lo;
  for (; c + wo <= len; c += wo, oy++) {
    int64_t iy = oy * d->stride[0] + dy;
    float *o = out + c;
    if (iy < 0 || iy >= d->h) {
      memset(o, 0, (size_t)wo * sizeof(float));
      continue;
    }
    const float *src = plane + iy * d->w + lo * t.sx + t.dx;
    for (int64_t j = 0; j < lo; j++) o[j] = 0.0f;
    if (t.sx == 1) memcpy(o + lo, src, (size_t)(hi - lo) * sizeof(float));
    else if (t.sx == 2 && hi > lo) cb->stride2(src, hi - lo, o + lo);
    else for (int64_t j = 0; j < hi - lo; j++) o[lo + j] = src[j * t.sx];
    for (int64_t j = hi; j < wo; j++) o[j] = 0.0f;
  }
  if (c < len) { /* a row the next block finishes */
    int64_t iy = oy * d->stride[0] + dy;
    gather_row(iy >= 0 && iy < d->h ? plane + iy * d->w : NULL, &t, 0, len - c, out + c);
  }
}

/* Longest run of columns gathered at once (the driver's nc is at most
 * this; a larger one is packed in pieces). */
enum { GATHER_MAX = 4096 };

/* Deals a gathered line of len columns out to step q of the nr-wide
 * panels at `panels` (kc steps each), zero-padding the last. */
static void deal_line(const float *line, int64_t len, int64_t kc, int64_t q, int nr,
                      float *panels) {
  for (int64_t j0 = 0; j0 < len; j0 += nr) {
    int64_t cols = len - j0 < nr ? len - j0 : nr;
    float *out = panels + j0 * kc + q * nr;
    /* Full panels copy a constant size, which the compiler inlines: a
     * library call per 64 bytes would cost more than the copy. */
    if (cols == 16 && nr == 16) memcpy(out, line + j0, 16 * sizeof(float));
    else if (cols == 32 && nr == 32) memcpy(out, line + j0, 32 * sizeof(float));
    else {
      memcpy(out, line + j0, (size_t)cols * sizeof(float));
      for (int64_t c = cols; c < nr; c++) out[c] = 0.0f;
    }
  }
}

/* Packs rows [pc, pc+kc) by columns [jc, jc+nc) of the column matrix into
 * nr-wide panels: each row is gathered whole into a line in L1 (one pass
 * over the image per tap, in long runs), then dealt out to the panels. */
static void pack_b_conv(const gemm_problem_t *p, int64_t item, int64_t pc,
                        int64_t kc, int64_t jc, int64_t nc, int nr,
                        float *dst) {
  const conv_b_t *cb = p->b_ctx;
  const float *img = p->b + gemm_offset(p->sb, p->groups, item);
  _Alignas(64) float line[GATHER_MAX];
  for (int64_t j = 0; j < nc; j += GATHER_MAX) {
    int64_t len = nc - j < GATHER_MAX ? nc - j : GATHER_MAX; /* a multiple of nr unless last */
    for (int64_t q = 0; q < kc; q++) {
      gather_col_row(cb, img, pc + q, jc + j, len, line);
      deal_line(line, len, kc, q, nr, dst + j * kc);
    }
  }
}

/* Row r of the column matrix of every image side by side (columns are
 * image-major positions), at columns [col, col + len), images `image`
 * floats apart from group: through the tap table inline where there is
 * one (2x2 images are runs of four: a call each cost more than the
 * loads), else image by image. */
static void gather_images(const conv_b_t *cb, const float *group, int64_t image, int64_t r,
                          int64_t col, int64_t len, float *out) {
  const loom_abi_conv2d_t *d = cb->d;
  int64_t positions = d->ho * d->wo, taps = d->kh * d->kw;
  int64_t img = col / positions, pos = col % positions;
  if (!cb->taps) {
    for (int64_t c = 0; c < len; img++, pos = 0) {
      int64_t run = len - c < positions - pos ? len - c : positions - pos;
      gather_col_row(cb, group + img * image, r, pos, run, out + c);
      c += run;
    }
    return;
  }
  const int32_t *offset = cb->taps + r % taps * positions;
  const float *plane = group + r / taps * d->h * d->w + img * image;
  for (int64_t c = 0; c < len; c++, pos++) {
    if (pos == positions) {
      pos = 0;
      plane += image;
    }
    out[c] = offset[pos] >= 0 ? plane[offset[pos]] : 0.0f;
  }
}

/* The batched form's B: the column matrix of every image side by side
 * (columns are image-major positions), for group `item`. */
static void pack_b_conv_images(const gemm_problem_t *p, int64_t item, int64_t pc,
                               int64_t kc, int64_t jc, int64_t nc, int nr,
                               float *dst) {
  const conv_b_t *cb = p->b_ctx;
  const loom_abi_conv2d_t *d = cb->d;
  const float *group = d->x + item * (d->c / d->groups) * d->h * d->w;
  _Alignas(64) float line[GATHER_MAX];
  for (int64_t j = 0; j < nc; j += GATHER_MAX) {
    int64_t len = nc - j < GATHER_MAX ? nc - j : GATHER_MAX;
    for (int64_t q = 0; q < kc; q++) {
      gather_images(cb, group, d->c * d->h * d->w, pc + q, jc + j, len, line);
      deal_line(line, len, kc, q, nr, dst + j * kc);
    }
  }
}

static int is_pointwise(const loom_abi_conv2d_t *d) {
  return d->kh == 1 && d->kw == 1 && d->stride[0] == 1 && d->stride[1] == 1 &&
         d->pads[0] == 0 && d->pads[1] == 0 && d->pads[2] == 0 &&
         d->pads[3] == 0 && d->ho == d->h && d->wo == d->w;
}

/* ---- Small images, many of them -------------------------------------------------
 * Per image, each packed weight is used by ho*wo columns only: at 2x2 or
 * 4x4 positions (ResNet-18's last layers on 64x64 training images) packing
 * the weights once per image costs more than the FMAs. The batched form
 * is one GEMM per group over every image's positions, into a scratch
 * matrix [o x n*ho*wo], whose rows are then copied out to NCHW with the
 * bias and the epilogue. */
/* Small weights (LeNet's 16 x 150) stay in cache across images and the
 * per-image form keeps its B panel in L2: measured 2.6 ms per image
 * against 3.7 ms batched for LeNet's second layer at batch 64, while
 * ResNet's 512-channel layer at 2x2 positions, batch 8, went from 97 ms
 * to 4.4 ms batched. */
enum { BATCHED_MAX_POSITIONS = 128, BATCHED_MAX_FLOATS = 1 << 22, BATCHED_MIN_WEIGHTS = 1 << 14 };

typedef struct scatter {
  const loom_abi_conv2d_t *d;
  const float *out; /* o x n*ho*wo */
} scatter_t;

static void scatter_images(void *ctx, int64_t begin, int64_t end) {
  const scatter_t *s = ctx;
  const loom_abi_conv2d_t *d = s->d;
  int64_t positions = d->ho * d->wo, cols = d->n * positions;
  for (int64_t img = begin; img < end; img++) {
    float *y = d->y + img * d->o * positions;
    for (int64_t r = 0; r < d->o; r++) {
      const float *src = s->out + r * cols + img * positions;
      float bv = d->bias ? d->bias[r] : 0.0f, *dst = y + r * positions;
      for (int64_t x = 0; x < positions; x++) dst[x] = src[x] + bv;
    }
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, y, positions, 0, d->o, 0, positions);
  }
}

int kern_conv2d_batched_suits(const loom_abi_conv2d_t *d) {
  int64_t og = d->o / d->groups, cg = d->c / d->groups, positions = d->ho * d->wo;
  return d->n >= 2 && positions > 0 && positions < BATCHED_MAX_POSITIONS &&
         d->o * d->n * positions <= BATCHED_MAX_FLOATS &&
         og * cg * d->kh * d->kw >= BATCHED_MIN_WEIGHTS;
}

/* Returns 0 (nothing done) when the batched form does not suit d. */
static int conv2d_batched(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  int64_t og = d->o / d->groups, cg = d->c / d->groups;
  int64_t positions = d->ho * d->wo, cols = d->n * positions;
  if (!kern_conv2d_batched_suits(d)) return 0;
  kern_scratch_t scratch = kern_scratch_claim((size_t)(d->o * cols));
  if (!scratch.buf) return 0;
  float *out = scratch.buf;
  int64_t taps = cg * d->kh * d->kw;
  int32_t table[KERN_TAPS_MAX];
  conv_b_t cb = conv_b(d, table);
  gemm_problem_t p = {
      .m = og, .n = cols, .k = taps, .batch = d->groups, .groups = d->groups,
      .a = d->weight, .lda = taps, .sa = {0, og * taps},
      .pack_b = pack_b_conv_images, .b_ctx = &cb,
      .c = out, .ldc = cols, .sc = {0, og * cols}};
  gemm_use_packed_a(&p, d->weight_packed);
  gemm_run(&p, pool);
  scatter_t s = {d, out};
  core_pool_for(pool, d->n, 1, scatter_images, &s);
  kern_scratch_release(scratch);
  return 1;
}

static void conv2d_implicit(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  int64_t og = d->o / d->groups, cg = d->c / d->groups;
  int64_t positions = d->ho * d->wo, taps = cg * d->kh * d->kw;
  int32_t table[KERN_TAPS_MAX];
  conv_b_t cb = conv_b(d, table);
  gemm_problem_t p = {
      .m = og, .n = positions, .k = taps, .batch = d->n * d->groups,
      .groups = d->groups,
      .a = d->weight, .lda = taps, .sa = {0, og * taps},
      .b = d->x, .ldb = d->h * d->w, .sb = {d->c * d->h * d->w, cg * d->h * d->w},
      .pack_b = is_pointwise(d) ? gemm_pack_b_matrix : pack_b_conv, .b_ctx = &cb,
      .c = d->y, .ldc = positions, .sc = {d->o * positions, og * positions},
      .bias = d->bias, .epilogue = d->epilogue, .epilogue_ctx = d->epilogue_ctx};
  gemm_use_packed_a(&p, d->weight_packed);
  gemm_run(&p, pool);
}

int kern_conv2d_run(const loom_abi_conv2d_t *d, kern_conv_algo_t algo, core_pool_t *pool) {
  switch (algo) {
    case KERN_CONV_DIRECT: return kern_conv2d_direct_f32(d, pool);
    case KERN_CONV_POLYPHASE: return kern_conv2d_polyphase_f32(d, pool);
    case KERN_CONV_DEPTHWISE: return kern_conv2d_depthwise_f32(d, pool);
    case KERN_CONV_WINOGRAD2: return kern_conv2d_winograd_f32(d, 2, pool);
    case KERN_CONV_WINOGRAD4: return kern_conv2d_winograd_f32(d, 4, pool);
    case KERN_CONV_BATCHED: return conv2d_batched(d, pool);
    case KERN_CONV_IMPLICIT: conv2d_implicit(d, pool); return 1;
    default: return 0;
  }
}

/* Per group g, the GEMM's A is W[g * og : (g + 1) * og] as og x
 * cg*kh*kw; Winograd packs its transformed weights instead. */
static int winograd_tile_of(kern_conv_algo_t algo) {
  return algo == KERN_CONV_WINOGRAD2 ? 2 : algo == KERN_CONV_WINOGRAD4 ? 4 : 0;
}

size_t kern_conv2d_packed_bytes(const loom_abi_conv2d_t *d, kern_conv_algo_t algo) {
  int m = winograd_tile_of(algo);
  if (m) return kern_conv2d_winograd_packed_bytes(d, m);
  return gemm_packed_a_bytes(d->o / d->groups, d->c / d->groups * d->kh * d->kw, d->groups);
}

int kern_conv2d_pack_weight(const loom_abi_conv2d_t *d, kern_conv_algo_t algo, void *dst) {
  int m = winograd_tile_of(algo);
  if (m) return kern_conv2d_winograd_pack_weight(d, m, dst);
  int64_t og = d->o / d->groups, taps = d->c / d->groups * d->kh * d->kw;
  gemm_pack_a_ahead(d->weight, taps, og * taps, og, taps, d->groups, dst, NULL);
  return 1;
}

/* ---- Weight gradient ------------------------------------------------------------
 * Per group, dW[og x cg*kh*kw] = dY[og x n*ho*wo] @ X_col^T[n*ho*wo x
 * cg*kh*kw]: the images join the GEMM's k dimension, so the sum over the
 * batch is the GEMM's own accumulation and dW is written once. dY is first
 * regrouped so that each group's rows run over every image's positions; B
 * is packed from the images like the forward's (a tap is one B column). */

/* out[0:len] = tap row r of X_col (one group's images side by side) at
 * positions [q, q + len), which may run across images. */
static void gather_positions(const conv_b_t *cb, const float *x, int64_t r, int64_t q,
                             int64_t len, float *out) {
  const loom_abi_conv2d_t *d = cb->d;
  int64_t positions = d->ho * d->wo, image = d->c * d->h * d->w;
  while (len > 0) {
    int64_t img = q / positions, pos = q % positions;
    int64_t run = len < positions - pos ? len : positions - pos;
    gather_col_row(cb, x + img * image, r, pos, run, out);
    out += run;
    q += run;
    len -= run;
  }
}

/* Positions per tile of the weight gradient's B: nr x this floats (16 KiB
 * at nr = 32, the widest micro-kernel's) stay in L1 between their gather
 * and their transpose. */
enum { WGRAD_TILE_K = 128, WGRAD_MAX_NR = 32 };

/* pack_b_wgrad of a layer with a tap table (outputs of at most 8 x 8):
 * each tap's pixels are read through the table and dealt straight down
 * its panel column, one pass (a tile and a transpose cost more than a run
 * of 4 to 16 positions saves). */
static void pack_b_wgrad_taps(const conv_b_t *cb, const float *x, int64_t pc, int64_t kc,
                              int64_t jc, int64_t nc, int nr, float *dst) {
  const loom_abi_conv2d_t *d = cb->d;
  int64_t positions = d->ho * d->wo, image = d->c * d->h * d->w, taps = d->kh * d->kw;
  int64_t padded = (nc + nr - 1) / nr * nr;
  for (int64_t j = nc; j < padded; j++) /* the last panel's spare columns */
    for (int64_t q = 0; q < kc; q++) dst[(j / nr) * nr * kc + q * nr + j % nr] = 0.0f;
  for (int64_t q0 = pc; q0 < pc + kc;) {
    int64_t img = q0 / positions, pos = q0 % positions;
    int64_t len = pc + kc - q0 < positions - pos ? pc + kc - q0 : positions - pos;
    /* tap t of channel ci, stepped: two divisions per column cost as much
     * as a 2x2 layer's four loads */
    for (int64_t j = 0, ci = jc / taps, t = jc % taps; j < nc; j++) {
      float *out = dst + (j / nr) * nr * kc + (q0 - pc) * nr + j % nr;
      const int32_t *offset = cb->taps + t * positions + pos;
      const float *plane = x + img * image + ci * d->h * d->w;
      for (int64_t s = 0; s < len; s++) out[s * nr] = offset[s] >= 0 ? plane[offset[s]] : 0.0f;
      if (++t == taps) {
        t = 0;
        ci++;
      }
    }
    q0 += len;
  }
}

/* Packs rows [pc, pc+kc) (positions of all images) by columns [jc, jc+nc)
 * (taps) of X_col^T. A tap's positions lie along a row of X_col, across
 * the panel's rows: each panel's taps are gathered as rows of a tile, which
 * the GEMM's packer of a transposed B turns into the panel with vector
 * transposes (dealing each gathered row down its panel column, one float
 * per store, was half of a 64-channel 16x16 layer's weight gradient). */
static void pack_b_wgrad(const gemm_problem_t *p, int64_t item, int64_t pc,
                         int64_t kc, int64_t jc, int64_t nc, int nr,
                         float *dst) {
  const conv_b_t *cb = p->b_ctx;
  const float *x = p->b + gemm_offset(p->sb, p->groups, item);
  if (cb->taps) {
    pack_b_wgrad_taps(cb, x, pc, kc, jc, nc, nr, dst);
    return;
  }
  _Alignas(64) float tile[WGRAD_MAX_NR * WGRAD_TILE_K];
  gemm_problem_t t = {.b = tile, .ldb = WGRAD_TILE_K, .trans_b = 1, .groups = 1};
  for (int64_t j0 = 0; j0 < nc; j0 += nr) {
    int64_t cols = nc - j0 < nr ? nc - j0 : nr;
    float *panel = dst + j0 * kc;
    for (int64_t q0 = 0; q0 < kc; q0 += WGRAD_TILE_K) {
      int64_t steps = kc - q0 < WGRAD_TILE_K ? kc - q0 : WGRAD_TILE_K;
      for (int64_t c = 0; c < cols; c++)
        gather_positions(cb, x, jc + j0 + c, pc + q0, steps, tile + c * WGRAD_TILE_K);
      gemm_pack_b_matrix(&t, 0, 0, steps, 0, cols, nr, panel + q0 * nr);
    }
  }
}

/* The direct sum, for when the regrouped dY cannot be allocated. */
static void wgrad_direct(const conv_b_t *cb, float *dw) {
  const loom_abi_conv2d_t *d = cb->d;
  int64_t og = d->o / d->groups, cg = d->c / d->groups;
  int64_t positions = d->ho * d->wo, taps = cg * d->kh * d->kw;
  for (int64_t o = 0; o < d->o; o++) {
    int64_t g = o / og;
    for (int64_t r = 0; r < taps; r++) {
      double acc = 0.0;
      float line[64];
      for (int64_t n = 0; n < d->n; n++) {
        const float *img = d->x + (n * d->c + g * cg) * d->h * d->w;
        const float *dy = d->y + (n * d->o + o) * positions;
        for (int64_t q = 0; q < positions; q += 64) {
          int64_t len = positions - q < 64 ? positions - q : 64;
          gather_col_row(cb, img, r, q, len, line);
          for (int64_t s = 0; s < len; s++) acc += (double)line[s] * dy[q + s];
        }
      }
      dw[o * taps + r] = (float)acc;
    }
  }
}

void kern_conv2d_weight_grad_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  int64_t og = d->o / d->groups, cg = d->c / d->groups;
  int64_t positions = d->ho * d->wo, taps = cg * d->kh * d->kw;
  int64_t k = d->n * positions;
  float *dw = (float *)d->weight; /* the output, by the ABI's contract */
  const float *dy = d->y;
  int32_t table[KERN_TAPS_MAX];
  conv_b_t cb = conv_b(d, table);
  kern_scratch_t scratch = {-1, NULL};
  if (d->n > 1) { /* one image's dY is already og x positions per group */
    scratch = kern_scratch_claim((size_t)(d->o * k));
    if (!scratch.buf) {
      wgrad_direct(&cb, dw);
      return;
    }
    float *regrouped = scratch.buf;
    for (int64_t o = 0; o < d->o; o++)
      for (int64_t n = 0; n < d->n; n++)
        memcpy(regrouped + o * k + n * positions, dy + (n * d->o + o) * positions,
               (size_t)positions * sizeof(float));
    dy = regrouped;
  }
  gemm_problem_t p = {
      .m = og, .n = taps, .k = k, .batch = d->groups, .groups = d->groups,
      .a = dy, .lda = k, .sa = {0, og * k},
      .b = d->x, .ldb = 0, .sb = {0, cg * d->h * d->w},
      .pack_b = pack_b_wgrad, .b_ctx = &cb,
      .c = dw, .ldc = taps, .sc = {0, og * taps},
      .epilogue = d->epilogue, .epilogue_ctx = d->epilogue_ctx};
  gemm_run(&p, pool);
  kern_scratch_release(scratch);
}
