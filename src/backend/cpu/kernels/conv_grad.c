/* conv2d's input gradient (conv_transpose2d) as a GEMM and a col2im, per
 * group: Col[cg*kh*kw x n*ho*wo] = W_g^T[cg*kh*kw x og] @ dY_g[og x
 * n*ho*wo], then every entry of Col is added to the dX pixel its tap
 * reaches. The images join the GEMM's columns, so that the 2x2 and 4x4
 * layers of a small-image ResNet still give the micro-kernel whole
 * tiles; the columns are cut into chunks whose part of Col stays in L2
 * between the GEMM that writes it and the col2im that reads it. Tasks own
 * disjoint blocks of dX's channels (all images), so the scatter needs no
 * locks; a 1x1, stride-1, unpadded convolution writes dX straight from
 * the GEMM. */
#include "backend/cpu/kernels/conv.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels/gemm_impl.h"
#include "backend/cpu/kernels/scratch.h"

/* Col chunks: at most COL_FLOATS floats (512 KiB, one Zen 3 L2), and no
 * narrower than MIN_CHUNK columns unless the problem is; at most
 * LINE_MAX columns, the packer's line. */
enum { COL_FLOATS = 1 << 17, MIN_CHUNK = 64, LINE_MAX = 4096 };

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The problem and its split: task t is channel block t % parts of group
 * t / parts. */
typedef struct igrad {
  const loom_abi_conv2d_t *d;
  float *dx;
  int64_t og, cg, taps; /* taps: kh * kw */
  int64_t cols;         /* n * ho * wo: the GEMM's columns */
  int64_t parts, block; /* channel blocks per group, channels per block */
  int64_t chunk;        /* columns per GEMM call */
  const int32_t *tap_offset; /* small outputs' tap table (kern_conv_taps_build), or NULL */
} igrad_t;

/* What pack_b_dy reads: group g's channels of dY, columns from q0. */
typedef struct dy_ctx {
  const loom_abi_conv2d_t *d;
  int64_t g, q0;
} dy_ctx_t;

/* Columns [q, q + len) of dY's channel ch (columns are image-major
 * positions) into line, one image's run at a time. */
static void gather_dy(const loom_abi_conv2d_t *d, int64_t ch, int64_t q, int64_t len,
                      float *line) {
  int64_t positions = d->ho * d->wo;
  for (int64_t c = 0; c < len;) {
    int64_t img = (q + c) / positions, pos = (q + c) % positions;
    int64_t run = min64(len - c, positions - pos);
    memcpy(line + c, d->y + (img * d->o + ch) * positions + pos, (size_t)run * sizeof(float));
    c += run;
  }
}

/* Packs rows [pc, pc+kc) (dY's channels in the group) by columns [jc,
 * jc+nc) of the chunk into nr-wide panels: each row is gathered whole
 * into a line, then dealt out. */
static void pack_b_dy(const gemm_problem_t *p, int64_t item, int64_t pc, int64_t kc,
                      int64_t jc, int64_t nc, int nr, float *dst) {
  (void)item;
  const dy_ctx_t *x = p->b_ctx;
  _Alignas(64) float line[LINE_MAX];
  int64_t og = x->d->o / x->d->groups;
  for (int64_t q = 0; q < kc; q++) {
    gather_dy(x->d, x->g * og + pc + q, x->q0 + jc, nc, line);
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
      int64_t cols = min64(nc - j0, nr);
      float *out = dst + j0 * kc + q * nr;
      if (cols == 16 && nr == 16) memcpy(out, line + j0, 16 * sizeof(float));
      else {
        memcpy(out, line + j0, (size_t)cols * sizeof(float));
        for (int64_t c = cols; c < nr; c++) out[c] = 0.0f;
      }
    }
  }
}

/* First and one-past-last output column whose tap lands inside [0, w)
 * at ix = ox * s + off. */
static void inside(int64_t off, int64_t s, int64_t w, int64_t wo, int64_t *lo,
                   int64_t *hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = w - 1 - off < 0 ? 0 : (w - 1 - off) / s + 1;
  if (*hi > wo) *hi = wo;
  if (*lo > *hi) *lo = *hi;
}

/* Adds row r of a Col chunk (tap (ci, i, j) of channel block c0..,
 * columns [q0, q0 + n)) into dX, one output row of one image at a time. */
static void col2im_row(const igrad_t *k, int64_t ch, int64_t i, int64_t j,
                       int64_t q0, int64_t n, const float *src) {
  const loom_abi_conv2d_t *d = k->d;
  int64_t positions = d->ho * d->wo, sx = d->stride[1];
  int64_t offy = i * d->dilation[0] - d->pads[0], offx = j * d->dilation[1] - d->pads[1];
  if (k->tap_offset) {
    const int32_t *offset = k->tap_offset + (i * d->kw + j) * positions;
    for (int64_t q = q0; q < q0 + n;) {
      int64_t img = q / positions, pos = q % positions, run = min64(q0 + n - q, positions - pos);
      kern_conv_taps_scatter_add(offset + pos, src + (q - q0), run,
                                 k->dx + (img * d->c + ch) * d->h * d->w);
      q += run;
    }
    return;
  }
  int64_t lo, hi;
  inside(offx, sx, d->w, d->wo, &lo, &hi);
  for (int64_t q = q0; q < q0 + n;) {
    int64_t img = q / positions, pos = q % positions, oy = pos / d->wo, ox = pos % d->wo;
    int64_t run = min64(q0 + n - q, d->wo - ox);
    int64_t iy = oy * d->stride[0] + offy;
    if (iy >= 0 && iy < d->h) {
      float *row = k->dx + ((img * d->c + ch) * d->h + iy) * d->w;
      const float *s = src + (q - q0) - ox; /* s[x] is column x of this row */
      int64_t a = ox > lo ? ox : lo, b = min64(ox + run, hi);
      if (sx == 1)
        for (int64_t x = a; x < b; x++) row[x + offx] += s[x];
      else
        for (int64_t x = a; x < b; x++) row[x * sx + offx] += s[x];
    }
    q += run;
  }
}

/* Channels [c0, c1) of group g: zeros, the GEMM and col2im chunk by
 * chunk, then the bias and the epilogue on each image's block. */
static void igrad_block(const igrad_t *k, int64_t g, int64_t c0, int64_t c1, float *col) {
  const loom_abi_conv2d_t *d = k->d;
  int64_t hw = d->h * d->w, first = g * k->cg + c0, rows = c1 - c0;
  for (int64_t img = 0; img < d->n; img++)
    memset(k->dx + (img * d->c + first) * hw, 0, (size_t)(rows * hw) * sizeof(float));
  dy_ctx_t bx = {d, g, 0};
  gemm_problem_t p = {
      .m = rows * k->taps, .k = k->og, .batch = 1, .groups = 1,
      .a = d->weight + (g * k->og * k->cg + c0) * k->taps, .lda = k->cg * k->taps,
      .trans_a = 1, .b = d->y, .pack_b = pack_b_dy, .b_ctx = &bx, .c = col};
  for (int64_t q0 = 0; q0 < k->cols; q0 += k->chunk) {
    p.n = p.ldc = min64(k->chunk, k->cols - q0);
    bx.q0 = q0;
    gemm_run(&p, NULL);
    for (int64_t r = 0; r < p.m; r++)
      col2im_row(k, first + r / k->taps, r % k->taps / d->kw, r % d->kw, q0, p.n,
                 col + r * p.n);
  }
  for (int64_t img = 0; img < d->n; img++) {
    float *tile = k->dx + (img * d->c + first) * hw;
    if (d->bias)
      for (int64_t r = 0; r < rows; r++)
        for (int64_t x = 0; x < hw; x++) tile[r * hw + x] += d->bias[first + r];
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, tile, hw, first, rows, 0, hw);
  }
}

/* The direct sum, for when no column buffer can be had. */
static void igrad_direct(const igrad_t *k, int64_t g, int64_t c0, int64_t c1) {
  const loom_abi_conv2d_t *d = k->d;
  int64_t hw = d->h * d->w, positions = d->ho * d->wo, first = g * k->cg + c0;
  for (int64_t img = 0; img < d->n; img++) {
    memset(k->dx + (img * d->c + first) * hw, 0, (size_t)((c1 - c0) * hw) * sizeof(float));
    for (int64_t o = g * k->og; o < (g + 1) * k->og; o++)
      for (int64_t ci = c0; ci < c1; ci++)
        for (int64_t t = 0; t < k->taps; t++) {
          float wv = d->weight[(o * k->cg + ci) * k->taps + t];
          int64_t i = t / d->kw, j = t % d->kw;
          float line[LINE_MAX];
          for (int64_t oy = 0; oy < d->ho; oy++) {
            /* One output row at a time through col2im_row's bounds. */
            int64_t q = img * positions + oy * d->wo;
            for (int64_t x0 = 0; x0 < d->wo; x0 += LINE_MAX) {
              int64_t len = min64(d->wo - x0, LINE_MAX);
              const float *dy = d->y + (img * d->o + o) * positions + oy * d->wo + x0;
              for (int64_t x = 0; x < len; x++) line[x] = wv * dy[x];
              col2im_row(k, g * k->cg + ci, i, j, q + x0, len, line);
            }
          }
        }
  }
  for (int64_t img = 0; img < d->n; img++) {
    float *tile = k->dx + (img * d->c + first) * hw;
    if (d->bias)
      for (int64_t r = 0; r < c1 - c0; r++)
        for (int64_t x = 0; x < hw; x++) tile[r * hw + x] += d->bias[first + r];
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, tile, hw, first, c1 - c0, 0, hw);
  }
}

static void igrad_body(void *ctx, int64_t begin, int64_t end) {
  const igrad_t *k = ctx;
  kern_scratch_t col = kern_scratch_claim((size_t)(k->block * k->taps * k->chunk));
  for (int64_t t = begin; t < end; t++) {
    int64_t g = t / k->parts, c0 = t % k->parts * k->block, c1 = min64(c0 + k->block, k->cg);
    if (c0 >= c1) continue;
    if (col.buf) igrad_block(k, g, c0, c1, col.buf);
    else igrad_direct(k, g, c0, c1);
  }
  kern_scratch_release(col);
}

static int is_pointwise(const loom_abi_conv2d_t *d) {
  return d->kh == 1 && d->kw == 1 && d->stride[0] == 1 && d->stride[1] == 1 &&
         d->pads[0] == 0 && d->pads[1] == 0 && d->ho == d->h && d->wo == d->w;
}

/* dX_g[cg x hw] = W_g^T @ dY_g per image and group, with the bias and the
 * epilogue on each finished tile, as the forward's GEMM does. */
static void igrad_pointwise(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  int64_t og = d->o / d->groups, cg = d->c / d->groups, hw = d->h * d->w;
  gemm_problem_t p = {
      .m = cg, .n = hw, .k = og, .batch = d->n * d->groups, .groups = d->groups,
      .a = d->weight, .lda = cg, .sa = {0, og * cg}, .trans_a = 1,
      .b = d->y, .ldb = hw, .sb = {d->o * hw, og * hw}, .pack_b = gemm_pack_b_matrix,
      .c = (float *)d->x, .ldc = hw, .sc = {d->c * hw, cg * hw},
      .bias = d->bias, .epilogue = d->epilogue, .epilogue_ctx = d->epilogue_ctx};
  gemm_run(&p, pool);
}

static void igrad_gemm(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  int32_t table[KERN_TAPS_MAX];
  igrad_t k = {.d = d, .dx = (float *)d->x, .og = d->o / d->groups,
               .cg = d->c / d->groups, .taps = d->kh * d->kw,
               .cols = d->n * d->ho * d->wo, .parts = 1,
               .tap_offset = kern_conv_taps_build(d, table) ? table : NULL};
  int threads = core_pool_threads(pool);
  /* Enough tasks for every thread: channel blocks when groups are few. */
  if (d->groups < threads) k.parts = min64(ceil_div(threads, d->groups), k.cg);
  k.block = ceil_div(k.cg, k.parts);
  int64_t m = k.block * k.taps;
  k.chunk = COL_FLOATS / (m > 0 ? m : 1) / 16 * 16;
  if (k.chunk < MIN_CHUNK) k.chunk = MIN_CHUNK;
  if (k.chunk > LINE_MAX) k.chunk = LINE_MAX;
  if (k.chunk > k.cols) k.chunk = k.cols > 0 ? k.cols : 1;
  int64_t tasks = d->groups * k.parts;
  kern_scratch_reserve(threads, (size_t)(k.block * k.taps * k.chunk));
  if (threads == 1 || tasks == 1) igrad_body(&k, 0, tasks);
  else core_pool_for(pool, tasks, 1, igrad_body, &k);
}

int kern_conv2d_input_grad_run(const loom_abi_conv2d_t *d, kern_conv_algo_t algo,
                               core_pool_t *pool) {
  if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0) return 1;
  switch (algo) {
    case KERN_CONV_WINOGRAD2: return kern_conv2d_input_grad_winograd_f32(d, 2, pool);
    case KERN_CONV_WINOGRAD4: return kern_conv2d_input_grad_winograd_f32(d, 4, pool);
    case KERN_CONV_IMPLICIT:
      if (is_pointwise(d)) igrad_pointwise(d, pool);
      else igrad_gemm(d, pool);
      return 1;
    default: return 0;
  }
}
