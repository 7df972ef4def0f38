/* conv2d as GEMM, per image and group: Y[og x ho*wo] = W[og x cg*kh*kw] @
 * X_col[cg*kh*kw x ho*wo]. Output channels are rows and positions are
 * columns, which is NCHW's own layout (no transpose of Y) and the
 * epilogue's view. X_col is never built: the GEMM's B packer gathers its
 * panels straight from the image (an implicit im2col), so the column
 * matrix costs no memory and no extra pass; a 1x1 stride-1 unpadded
 * convolution reads the image itself as B. Images and groups are the
 * GEMM's batch, so they spread over the pool like batched matmuls. */
#include "kernels/gemm.h"

#include <string.h>

#include "kernels/gemm_impl.h"

/* out[0:len] = the taps at output columns ox0.. of one output row, read
 * from input row `row` (NULL: the row lies in the padding) at ix = ox * sx
 * + dx: zeros left and right of the image, a copy (or a strided gather)
 * between, so that packing runs at memory speed without a test per
 * element. */
static void gather_row(const float *row, int64_t w, int64_t ox0, int64_t len,
                       int64_t sx, int64_t dx, float *out) {
  int64_t lo = 0, hi = len; /* [lo, hi): inside the image */
  if (!row) hi = 0;
  else {
    int64_t first = dx >= 0 ? 0 : (-dx + sx - 1) / sx; /* first ox inside */
    int64_t last = w - 1 - dx < 0 ? -1 : (w - 1 - dx) / sx; /* last ox inside */
    lo = first - ox0 < 0 ? 0 : first - ox0 > len ? len : first - ox0;
    hi = last + 1 - ox0 < lo ? lo : last + 1 - ox0 > len ? len : last + 1 - ox0;
  }
  for (int64_t c = 0; c < lo; c++) out[c] = 0.0f;
  if (hi > lo) {
    const float *src = row + (ox0 + lo) * sx + dx;
    if (sx == 1) memcpy(out + lo, src, (size_t)(hi - lo) * sizeof(float));
    /* A constant stride 2 (ResNet's downsampling) lets the compiler
     * vectorize the gather with shuffles. */
    else if (sx == 2) for (int64_t c = 0; c < hi - lo; c++) out[lo + c] = src[2 * c];
    else for (int64_t c = lo; c < hi; c++) out[c] = src[(c - lo) * sx];
  }
  for (int64_t c = hi < lo ? lo : hi; c < len; c++) out[c] = 0.0f;
}

/* Row r of the image's column matrix (tap (ci, ky, kx)) at columns [jc,
 * jc + len) (output positions (oy, ox)), a run of output row at a time. */
static void gather_col_row(const loom_abi_conv2d_t *d, const float *img,
                           int64_t r, int64_t jc, int64_t len, float *out) {
  int64_t taps = d->kh * d->kw;
  int64_t ci = r / taps, ky = r % taps / d->kw, kx = r % d->kw;
  const float *plane = img + ci * d->h * d->w;
  int64_t dy = ky * d->dilation[0] - d->pads[0];
  int64_t dx = kx * d->dilation[1] - d->pads[1];
  for (int64_t c = 0, oy = jc / d->wo, ox = jc % d->wo; c < len; oy++, ox = 0) {
    int64_t run = len - c < d->wo - ox ? len - c : d->wo - ox;
    int64_t iy = oy * d->stride[0] + dy;
    const float *row = iy >= 0 && iy < d->h ? plane + iy * d->w : NULL;
    gather_row(row, d->w, ox, run, d->stride[1], dx, out + c);
    c += run;
  }
}

/* Longest run of columns gathered at once (the driver's nc is at most
 * this; a larger one is packed in pieces). */
enum { GATHER_MAX = 4096 };

/* Packs rows [pc, pc+kc) by columns [jc, jc+nc) of the column matrix into
 * nr-wide panels: each row is gathered whole into a line in L1 (one pass
 * over the image per tap, in long runs), then dealt out to the panels. */
static void pack_b_conv(const gemm_problem_t *p, int64_t item, int64_t pc,
                        int64_t kc, int64_t jc, int64_t nc, int nr,
                        float *dst) {
  const loom_abi_conv2d_t *d = p->b_ctx;
  const float *img = p->b + gemm_offset(p->sb, p->groups, item);
  _Alignas(64) float line[GATHER_MAX];
  for (int64_t j = 0; j < nc; j += GATHER_MAX) {
    int64_t len = nc - j < GATHER_MAX ? nc - j : GATHER_MAX; /* a multiple of nr unless last */
    float *panels = dst + j * kc;
    for (int64_t q = 0; q < kc; q++) {
      gather_col_row(d, img, pc + q, jc + j, len, line);
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
  }
}

static int is_pointwise(const loom_abi_conv2d_t *d) {
  return d->kh == 1 && d->kw == 1 && d->stride[0] == 1 && d->stride[1] == 1 &&
         d->pads[0] == 0 && d->pads[1] == 0 && d->pads[2] == 0 &&
         d->pads[3] == 0 && d->ho == d->h && d->wo == d->w;
}

void kern_conv2d_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  int64_t og = d->o / d->groups, cg = d->c / d->groups;
  int64_t positions = d->ho * d->wo, taps = cg * d->kh * d->kw;
  gemm_problem_t p = {
      .m = og, .n = positions, .k = taps, .batch = d->n * d->groups,
      .groups = d->groups,
      .a = d->weight, .lda = taps, .sa = {0, og * taps},
      .b = d->x, .ldb = d->h * d->w, .sb = {d->c * d->h * d->w, cg * d->h * d->w},
      .pack_b = is_pointwise(d) ? gemm_pack_b_matrix : pack_b_conv, .b_ctx = d,
      .c = d->y, .ldc = positions, .sc = {d->o * positions, og * positions},
      .bias = d->bias, .epilogue = d->epilogue, .epilogue_ctx = d->epilogue_ctx};
  gemm_run(&p, pool);
}
