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
    else for (int64_t c = lo; c < hi; c++) out[c] = src[(c - lo) * sx];
  }
  for (int64_t c = hi < lo ? lo : hi; c < len; c++) out[c] = 0.0f;
}

/* Packs rows [pc, pc+kc) (taps (ci, ky, kx)) by columns [jc, jc+nc)
 * (output positions (oy, ox)) of the image's column matrix, a run of
 * output row at a time. */
static void pack_b_conv(const gemm_problem_t *p, int64_t item, int64_t pc,
                        int64_t kc, int64_t jc, int64_t nc, int nr,
                        float *dst) {
  const loom_abi_conv2d_t *d = p->b_ctx;
  const float *img = p->b + gemm_offset(p->sb, p->groups, item);
  int64_t taps = d->kh * d->kw;
  for (int64_t j0 = 0; j0 < nc; j0 += nr, dst += (int64_t)nr * kc) {
    int64_t cols = nc - j0 < nr ? nc - j0 : nr;
    int64_t oy0 = (jc + j0) / d->wo, ox0 = (jc + j0) % d->wo;
    for (int64_t q = 0; q < kc; q++) {
      int64_t r = pc + q, ci = r / taps, ky = r % taps / d->kw, kx = r % d->kw;
      const float *plane = img + ci * d->h * d->w;
      int64_t dy = ky * d->dilation[0] - d->pads[0];
      int64_t dx = kx * d->dilation[1] - d->pads[1];
      float *out = dst + q * nr;
      for (int64_t c = 0, oy = oy0, ox = ox0; c < cols; oy++, ox = 0) {
        int64_t len = cols - c < d->wo - ox ? cols - c : d->wo - ox;
        int64_t iy = oy * d->stride[0] + dy;
        const float *row = iy >= 0 && iy < d->h ? plane + iy * d->w : NULL;
        gather_row(row, d->w, ox, len, d->stride[1], dx, out + c);
        c += len;
      }
      for (int64_t c = cols; c < nr; c++) out[c] = 0.0f;
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
