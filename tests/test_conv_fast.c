/* The fast kernels of convolutional networks against sums written here
 * straight from the definitions, in double: conv2d's input gradient
 * (conv_transpose2d) through its GEMM + col2im and its 1x1 GEMM, and the
 * forward conv2d's batched form for many small images. Odd shapes
 * (strides, uneven pads, dilation, groups, depthwise, batches, sizes off
 * every block), 1-3 threads, a bias, and an epilogue that must see each
 * element once, at the right address, after the sum. Then compiled
 * graphs against the interpreter: conv_transpose2d with a fused epilogue,
 * training-mode batch norm, per-channel sums and means, and max pooling's
 * gradient. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/isa.h"
#include "core/pool.h"
#include "harness.h"
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm.h"
#include "loom/ops.h"

enum { SENTINEL = 12345 };

static float *random_floats(int64_t n) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = (float)test_rand_uniform(-1, 1);
  return x;
}

/* Counts each element it sees, checks the tile's address against its
 * coordinates, and maps v to 2v + 1 (so the result shows it ran once,
 * after the sum). Images are `rows` x `cols` matrices `image` apart. */
typedef struct counter {
  float *base;
  int64_t images, rows, cols, image;
  int *seen;
  _Atomic int bad_address;
} counter_t;

static void count_epilogue(void *ctx, int64_t batch, float *c, int64_t ldc, int64_t row0,
                           int64_t rows, int64_t col0, int64_t cols) {
  counter_t *k = ctx;
  if (batch < 0 || batch >= k->images || ldc != k->cols || row0 < 0 || col0 < 0 ||
      row0 + rows > k->rows || col0 + cols > k->cols ||
      c != k->base + batch * k->image + row0 * ldc + col0) {
    k->bad_address = 1;
    return;
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      k->seen[(batch * k->rows + row0 + i) * k->cols + col0 + j]++;
      c[i * ldc + j] = 2 * c[i * ldc + j] + 1;
    }
}

typedef struct conv_case {
  int64_t n, c, h, w, o, kh, kw, sy, sx, pt, pl, pb, pr, dy, dx, groups;
  int bias, epilogue;
} conv_case_t;

static int64_t out_size(int64_t in, int64_t lo, int64_t hi, int64_t dil, int64_t k,
                        int64_t s) {
  return (in + lo + hi - dil * (k - 1) - 1) / s + 1;
}

/* ---- conv2d's input gradient ------------------------------------------- */

/* dX[img, ci, iy, ix]: the sum over every output position and output
 * channel of the group whose window tap lands on (iy, ix), of dY times
 * that tap's weight, plus the bias. */
static double igrad_ref(const loom_abi_conv2d_t *d, const float *dy, int64_t img,
                        int64_t ci, int64_t iy, int64_t ix, double *abs_sum) {
  int64_t cg = d->c / d->groups, og = d->o / d->groups, g = ci / cg;
  double s = d->bias ? d->bias[ci] : 0;
  *abs_sum = fabs(s);
  for (int64_t o = g * og; o < (g + 1) * og; o++)
    for (int64_t ky = 0; ky < d->kh; ky++)
      for (int64_t kx = 0; kx < d->kw; kx++)
        for (int64_t oy = 0; oy < d->ho; oy++) {
          if (oy * d->stride[0] - d->pads[0] + ky * d->dilation[0] != iy) continue;
          for (int64_t ox = 0; ox < d->wo; ox++) {
            if (ox * d->stride[1] - d->pads[1] + kx * d->dilation[1] != ix) continue;
            double v = (double)dy[((img * d->o + o) * d->ho + oy) * d->wo + ox] *
                       d->weight[((o * cg + ci % cg) * d->kh + ky) * d->kw + kx];
            s += v;
            *abs_sum += fabs(v);
          }
        }
  return s;
}

static void check_igrad(const conv_case_t *q, core_pool_t *pool) {
  int64_t ho = out_size(q->h, q->pt, q->pb, q->dy, q->kh, q->sy);
  int64_t wo = out_size(q->w, q->pl, q->pr, q->dx, q->kw, q->sx);
  int64_t hw = q->h * q->w, numel = q->n * q->c * hw;
  float *dy = random_floats(q->n * q->o * ho * wo);
  float *w = random_floats(q->o * (q->c / q->groups) * q->kh * q->kw);
  float *bias = q->bias ? random_floats(q->c) : NULL;
  float *dx = malloc((size_t)numel * sizeof(float));
  for (int64_t i = 0; i < numel; i++) dx[i] = SENTINEL;
  counter_t k = {dx, q->n, q->c, hw, q->c * hw, calloc((size_t)numel, sizeof(int)), 0};
  loom_abi_conv2d_t d = {q->n, q->c, q->h, q->w, q->o, q->kh, q->kw, ho, wo,
                         {q->sy, q->sx}, {q->pt, q->pl, q->pb, q->pr},
                         {q->dy, q->dx}, q->groups, dx, w, bias, dy,
                         q->epilogue ? count_epilogue : NULL, &k, NULL};
  kern_conv2d_input_grad_f32(&d, KERN_CONV_DEFAULT, pool);
  int wrong = 0, counts = 0;
  for (int64_t i = 0; i < numel; i++) {
    int64_t img = i / (q->c * hw), ci = i / hw % q->c, p = i % hw;
    double abs_sum, want = igrad_ref(&d, dy, img, ci, p / q->w, p % q->w, &abs_sum);
    if (q->epilogue) want = 2 * want + 1;
    double tol = (2e-7 * (double)(q->o * q->kh * q->kw + 1) * abs_sum + 1e-6) *
                 (q->epilogue ? 2 : 1);
    wrong += !(fabs(dx[i] - want) <= tol);
    counts += q->epilogue && k.seen[i] != 1;
  }
  if (wrong || counts || k.bad_address)
    test_fail(__FILE__, __LINE__,
              "input grad n=%lld c=%lld %lldx%lld o=%lld k=%lldx%lld s=%lldx%lld "
              "groups=%lld: %d wrong, %d counts, bad address %d",
              (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
              (long long)q->o, (long long)q->kh, (long long)q->kw, (long long)q->sy,
              (long long)q->sx, (long long)q->groups, wrong, counts, (int)k.bad_address);
  test_checks++;
  free(dy);
  free(w);
  free(bias);
  free(dx);
  free(k.seen);
}

/* n c h w o kh kw sy sx pt pl pb pr dy dx groups bias epilogue */
static const conv_case_t igrad_cases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    /* same padding */
    {1, 2, 9, 11, 5, 3, 2, 2, 3, 0, 1, 2, 0, 1, 1, 1, 0, 1},   /* strides, uneven pads */
    {2, 3, 10, 10, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 0},  /* dilation */
    {2, 4, 6, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1},    /* groups */
    {1, 3, 8, 8, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, 1, 1},    /* depthwise */
    {3, 8, 5, 7, 20, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},   /* pointwise: one GEMM */
    {2, 8, 7, 7, 5, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0, 1},    /* strided 1x1: holes */
    {2, 5, 9, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},    /* ResNet's s2 3x3, odd */
    {3, 40, 3, 3, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},  /* many channels, tiny */
    {1, 2, 11, 9, 3, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 0},   /* 7x7 stem */
    {2, 1, 12, 12, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},  /* LeNet-like */
    {1, 20, 30, 30, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1}, /* several column chunks */
    {2, 3, 4, 4, 2, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1},    /* kernel larger than x */
    {2, 16, 16, 16, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* Winograd F(4x4) */
    {1, 17, 23, 25, 16, 3, 3, 1, 1, 2, 0, 1, 2, 1, 1, 1, 0, 1}, /* Winograd, uneven pads */
    {8, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* Winograd F(2x2) */
};

static void input_grad_configurations(void) {
  for (int threads = 1; threads <= 3; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
    for (size_t i = 0; i < sizeof igrad_cases / sizeof *igrad_cases; i++)
      check_igrad(&igrad_cases[i], pool);
    core_pool_destroy(pool);
  }
}

/* ---- The forward conv2d, batched over small images ---------------------- */

static double conv_ref(const loom_abi_conv2d_t *d, int64_t img, int64_t o, int64_t oy,
                       int64_t ox, double *abs_sum) {
  int64_t cg = d->c / d->groups, g = o / (d->o / d->groups);
  double s = d->bias ? d->bias[o] : 0;
  *abs_sum = fabs(s);
  for (int64_t ci = 0; ci < cg; ci++)
    for (int64_t ky = 0; ky < d->kh; ky++)
      for (int64_t kx = 0; kx < d->kw; kx++) {
        int64_t iy = oy * d->stride[0] - d->pads[0] + ky * d->dilation[0];
        int64_t ix = ox * d->stride[1] - d->pads[1] + kx * d->dilation[1];
        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
        double v = (double)d->x[((img * d->c + g * cg + ci) * d->h + iy) * d->w + ix] *
                   d->weight[((o * cg + ci) * d->kh + ky) * d->kw + kx];
        s += v;
        *abs_sum += fabs(v);
      }
  return s;
}

/* Runs d's layer with one algorithm; 0: it did not take the layer. */
typedef int (*conv_runner_t)(const loom_abi_conv2d_t *d, core_pool_t *pool);

static int run_chosen(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  kern_conv2d_f32(d, KERN_CONV_DEFAULT, pool);
  return 1;
}

static void check_forward_by(const conv_case_t *q, core_pool_t *pool, conv_runner_t run) {
  int64_t ho = out_size(q->h, q->pt, q->pb, q->dy, q->kh, q->sy);
  int64_t wo = out_size(q->w, q->pl, q->pr, q->dx, q->kw, q->sx);
  int64_t positions = ho * wo, numel = q->n * q->o * positions;
  float *x = random_floats(q->n * q->c * q->h * q->w);
  float *w = random_floats(q->o * (q->c / q->groups) * q->kh * q->kw);
  float *bias = q->bias ? random_floats(q->o) : NULL;
  float *y = malloc((size_t)numel * sizeof(float));
  for (int64_t i = 0; i < numel; i++) y[i] = SENTINEL;
  counter_t k = {y, q->n, q->o, positions, q->o * positions,
                 calloc((size_t)numel, sizeof(int)), 0};
  loom_abi_conv2d_t d = {q->n, q->c, q->h, q->w, q->o, q->kh, q->kw, ho, wo,
                         {q->sy, q->sx}, {q->pt, q->pl, q->pb, q->pr},
                         {q->dy, q->dx}, q->groups, x, w, bias, y,
                         q->epilogue ? count_epilogue : NULL, &k, NULL};
  CHECK(run(&d, pool));
  int wrong = 0, counts = 0;
  for (int64_t i = 0; i < numel; i++) {
    int64_t img = i / (q->o * positions), o = i / positions % q->o, p = i % positions;
    double abs_sum, want = conv_ref(&d, img, o, p / wo, p % wo, &abs_sum);
    if (q->epilogue) want = 2 * want + 1;
    double tol = (2e-7 * (double)((q->c / q->groups) * q->kh * q->kw + 1) * abs_sum + 1e-6) *
                 (q->epilogue ? 2 : 1);
    wrong += !(fabs(y[i] - want) <= tol);
    counts += q->epilogue && k.seen[i] != 1;
  }
  if (wrong || counts || k.bad_address)
    test_fail(__FILE__, __LINE__,
              "conv2d n=%lld c=%lld %lldx%lld o=%lld k=%lldx%lld groups=%lld: "
              "%d wrong, %d counts, bad address %d",
              (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
              (long long)q->o, (long long)q->kh, (long long)q->kw, (long long)q->groups,
              wrong, counts, (int)k.bad_address);
  test_checks++;
  free(x);
  free(w);
  free(bias);
  free(y);
  free(k.seen);
}

static void check_forward(const conv_case_t *q, core_pool_t *pool) {
  check_forward_by(q, pool, run_chosen);
}

/* Batches of images with fewer than 128 output positions each and at
 * least 16384 weights per group, where the GEMM runs over every image's
 * columns at once. */
static const conv_case_t batched_cases[] = {
    {8, 48, 4, 4, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    /* 4x4 positions */
    {5, 64, 4, 4, 33, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 1},    /* 2x2 positions, s2 */
    {3, 64, 9, 7, 120, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1},   /* groups, dilation */
    {4, 128, 6, 6, 130, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 1},  /* strided 1x1 */
    {2, 48, 3, 3, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},    /* no epilogue */
    {6, 64, 2, 2, 464, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 1},   /* 4 groups */
};

static void batched_forward_configurations(void) {
  for (int threads = 1; threads <= 3; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
    for (size_t i = 0; i < sizeof batched_cases / sizeof *batched_cases; i++)
      check_forward(&batched_cases[i], pool);
    core_pool_destroy(pool);
  }
}

/* Stride 1, one group, at most 16 output channels: the direct kernel
 * (channel blocks of 6 with remainders, uneven pads, a single row, 1x1,
 * a window as large as the padded image), and a layer too large for its
 * buffers, which goes to the GEMM. */
static const conv_case_t direct_cases[] = {
    {64, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1},  /* LeNet's first */
    {5, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},  /* LeNet's second */
    {3, 3, 9, 13, 1, 3, 3, 1, 1, 1, 0, 2, 1, 1, 1, 1, 0, 1},    /* uneven pads */
    {2, 4, 7, 5, 13, 3, 2, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0},    /* 6 + 6 + 1 channels */
    {1, 2, 1, 17, 7, 1, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},    /* one row */
    {2, 3, 6, 6, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1},    /* 1x1 */
    {1, 1, 4, 4, 2, 5, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1},     /* one position */
    {1, 3, 100, 100, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* too large */
};

/* Every instance of the direct kernel this CPU runs, against the reference. */
static void direct_forward_configurations(void) {
  static const char *const isas[] = {"avx512", "avx2"};
  int tested = 0;
  for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
    if (!kern_conv_direct_force_isa(isas[k])) continue;
    CHECK(!strcmp(kern_conv_direct_isa(), isas[k]));
    tested++;
    for (int threads = 1; threads <= 3; threads++) {
      core_pool_t *pool = NULL;
      if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
      for (size_t i = 0; i < sizeof direct_cases / sizeof *direct_cases; i++)
        check_forward(&direct_cases[i], pool);
      core_pool_destroy(pool);
    }
  }
  CHECK(kern_conv_direct_force_isa(NULL));
  CHECK(!kern_conv_direct_force_isa("no such isa"));
  if (__builtin_cpu_supports("avx512f") && core_isa_allows(CORE_ISA_AVX512)) CHECK(tested == 2);
  /* The first case runs directly (on AVX2 CPUs), a strided one does not. */
  float x[28 * 28] = {0}, w[6 * 25] = {0}, y[6 * 28 * 28];
  loom_abi_conv2d_t d = {1, 1, 28, 28, 6, 5, 5, 28, 28, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1,
                         x, w, NULL, y, NULL, NULL, NULL};
  int avx2 = core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
  CHECK(kern_conv2d_direct_f32(&d, NULL) == avx2);
  d.stride[0] = d.stride[1] = 2;
  d.ho = d.wo = 14;
  CHECK(kern_conv2d_direct_f32(&d, NULL) == 0);
}

/* Depthwise layers (groups = c = o): MobileNet's 3x3 at strides 1 and 2,
 * uneven pads, a 5x5 window, dilation, stride 3, a single row, and no
 * bias or epilogue; 7x7 planes (a vector spans rows), planes taken flat
 * (their padding above, below and across rows' ends), planes in several
 * bands of rows, a 1x1 window, rows of a vector at most with uneven pads;
 * the 5x5 window (EfficientNet's, MnasNet's) at strides 1 and 2 in the
 * same ways. */
static const conv_case_t depthwise_cases[] = {
    {2, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, 1},  /* MobileNet, stride 1 */
    {1, 24, 15, 13, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 24, 1, 1},  /* stride 2, odd sizes */
    {3, 5, 9, 11, 5, 3, 3, 1, 2, 0, 1, 2, 0, 1, 1, 5, 0, 1},      /* uneven pads and strides */
    {2, 7, 12, 12, 7, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 7, 1, 0},     /* 5x5 */
    {1, 6, 13, 13, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 6, 1, 1},     /* dilation 2 */
    {1, 4, 10, 17, 4, 3, 2, 3, 3, 1, 0, 1, 1, 1, 1, 4, 0, 0},     /* stride 3 */
    {2, 3, 1, 40, 3, 1, 3, 1, 1, 0, 1, 0, 1, 1, 1, 3, 1, 1},      /* one row */
    {1, 20, 7, 7, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 20, 1, 1},    /* 7x7 planes */
    {1, 18, 14, 14, 18, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 18, 1, 1},  /* 14x14 to 7x7 */
    {1, 3, 75, 70, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1},     /* three bands */
    {1, 2, 81, 90, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2, 0, 1},     /* bands, stride 2 */
    {2, 5, 6, 9, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 5, 1, 0},       /* 1x1 */
    {1, 5, 9, 11, 5, 3, 3, 1, 1, 0, 1, 2, 0, 1, 1, 5, 1, 1},      /* small, uneven pads */
    {2, 4, 6, 7, 4, 3, 3, 1, 1, 2, 2, 0, 1, 1, 1, 4, 0, 1},       /* small, pads of 2 */
    {1, 3, 10, 9, 3, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 3, 1, 1},      /* stride 2, pads after */
    {1, 2, 5, 67, 2, 3, 3, 2, 2, 1, 0, 1, 2, 1, 1, 2, 0, 0},      /* stride 2, 34 wide */
    {1, 6, 13, 11, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 6, 1, 1},     /* 5x5, stride 1 */
    {2, 4, 7, 7, 4, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 4, 0, 1},       /* 5x5 on 7x7 planes */
    {1, 5, 33, 37, 5, 5, 5, 2, 2, 2, 1, 2, 2, 1, 1, 5, 1, 1},     /* 5x5, stride 2, wide */
    {1, 3, 40, 21, 3, 5, 5, 1, 1, 1, 3, 0, 2, 1, 1, 3, 1, 1},     /* 5x5, uneven pads, bands */
    {1, 2, 9, 41, 2, 5, 5, 2, 2, 0, 0, 3, 1, 1, 1, 2, 0, 1},      /* 5x5, stride 2, pads after */
    {1, 5, 9, 8, 5, 3, 3, 1, 1, 2, 0, 0, 2, 1, 1, 5, 1, 1},       /* flat: pads above, right */
    {1, 4, 5, 3, 4, 3, 3, 1, 1, 0, 2, 1, 0, 1, 1, 4, 0, 1},       /* flat: two pads left */
    {2, 3, 32, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1},      /* flat: the largest plane */
    {1, 3, 33, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 0},      /* one row more: in rows */
};

static int run_depthwise(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  return kern_conv2d_run(d, KERN_CONV_DEPTHWISE, pool);
}

/* Every instance of the depthwise kernel this CPU runs, against the
 * reference, on 1 to 3 threads; it takes depthwise layers only. */
static void depthwise_forward_configurations(void) {
  static const char *const isas[] = {"avx512", "avx2"};
  for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
    if (!kern_conv_direct_force_isa(isas[k])) continue;
    for (int threads = 1; threads <= 3; threads++) {
      core_pool_t *pool = NULL;
      if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
      for (size_t i = 0; i < sizeof depthwise_cases / sizeof *depthwise_cases; i++)
        check_forward_by(&depthwise_cases[i], pool, run_depthwise);
      core_pool_destroy(pool);
    }
  }
  CHECK(kern_conv_direct_force_isa(NULL));
  loom_abi_conv2d_t d = {1, 8, 6, 6, 8, 3, 3, 6, 6, {1, 1}, {1, 1, 1, 1}, {1, 1}, 8,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  int avx2 = core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
  CHECK(kern_conv2d_depthwise_suits(&d) == avx2);
  d.groups = 4; /* two channels a group: not depthwise */
  CHECK(!kern_conv2d_depthwise_suits(&d));
}

/* ---- Stride-2 gathers -------------------------------------------------- */

/* Each instance against its definition, for lengths around its vector
 * widths, reading from a buffer that ends at the last element it may
 * read (so that a read past it is caught under AddressSanitizer) into one
 * with a guard after the last element it may write. */
static void stride2_gather_instances(void) {
  static const char *const isas[] = {"avx512", "avx2"};
  for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
    if (!kern_conv_direct_force_isa(isas[k])) continue;
    kern_stride2_fn gather = kern_gather_stride2();
    for (int64_t n = 1; n <= 70; n++) {
      float *src = malloc((size_t)(2 * n - 1) * sizeof(float));
      float *dst = malloc((size_t)(n + 1) * sizeof(float));
      for (int64_t i = 0; i < 2 * n - 1; i++) src[i] = (float)i * 0.5f - 3.0f;
      dst[n] = SENTINEL;
      gather(src, n, dst);
      int wrong = 0;
      for (int64_t j = 0; j < n; j++) wrong += dst[j] != src[2 * j];
      if (wrong || dst[n] != SENTINEL)
        test_fail(__FILE__, __LINE__, "%s stride-2 gather of %lld: %d wrong, guard %s", isas[k],
                  (long long)n, wrong, dst[n] == SENTINEL ? "kept" : "written");
      test_checks++;
      free(src);
      free(dst);
    }
  }
  CHECK(kern_conv_direct_force_isa(NULL));
}

static int run_implicit(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  return kern_conv2d_run(d, KERN_CONV_IMPLICIT, pool);
}

/* The implicit GEMM's stride-2 column matrices under each instance of
 * the gather: output rows narrower and wider than a vector (1 to 40
 * columns), rows cut between the GEMM's column blocks (a 60x60 output is
 * 3600 positions), pads on either side or none, 1x1 and 3x3 taps. */
static const conv_case_t strided_cases[] = {
    {1, 8, 56, 56, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* ResNet's, 28 wide */
    {2, 5, 33, 34, 7, 3, 3, 2, 2, 1, 0, 1, 2, 1, 1, 1, 0, 1},    /* uneven pads */
    {1, 4, 20, 80, 9, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 0},    /* 1x1, 40 wide */
    {1, 3, 9, 2, 5, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0, 0},      /* one column */
    {1, 2, 120, 120, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0},  /* rows across blocks */
    {1, 6, 35, 35, 8, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1},    /* 5x5, 17 wide */
};

/* cases run by `run` under every instance of the direct kernels' ISA this
 * CPU runs, on 1 to max_threads threads, against the reference. */
static void check_per_isa(const conv_case_t *cases, size_t n, int max_threads,
                          conv_runner_t run) {
  static const char *const isas[] = {"avx512", "avx2"};
  for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
    if (!kern_conv_direct_force_isa(isas[k])) continue;
    for (int threads = 1; threads <= max_threads; threads++) {
      core_pool_t *pool = NULL;
      if (threads > 1) CHECK_OK(core_pool_create(threads, &pool));
      for (size_t i = 0; i < n; i++) check_forward_by(&cases[i], pool, run);
      core_pool_destroy(pool);
    }
  }
  CHECK(kern_conv_direct_force_isa(NULL));
}

static void strided_forward_configurations(void) {
  check_per_isa(strided_cases, sizeof strided_cases / sizeof *strided_cases, 2, run_implicit);
}

/* At most 8 input channels, one group, no dilation, strides 1 to 4: the
 * polyphase kernel (ResNet's stem; output channels in blocks of 8 or 6
 * with remainders; rows shorter than a vector; several tasks an image,
 * whose last vectors stop at the task's rows; uneven pads and strides). */
static const conv_case_t polyphase_cases[] = {
    {1, 3, 30, 30, 64, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1},   /* a stem */
    {2, 3, 17, 23, 13, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1},   /* 8 + 5 channels */
    {1, 3, 120, 300, 10, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1}, /* 3 tasks of 20 rows */
    {1, 2, 20, 19, 10, 5, 4, 3, 3, 2, 1, 0, 3, 1, 1, 1, 0, 1},   /* stride 3, uneven pads */
    {1, 3, 67, 67, 16, 11, 11, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1, 1}, /* 11x11 stride 4 */
    {2, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1},    /* stride 1 */
    {1, 3, 10, 8, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* 5-wide planes */
    {1, 4, 12, 40, 20, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},   /* strides 2 and 1 */
    {1, 8, 14, 14, 24, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0, 0},   /* 1x1 stride 2 */
};

static void polyphase_forward_configurations(void) {
  check_per_isa(polyphase_cases, sizeof polyphase_cases / sizeof *polyphase_cases, 3,
                kern_conv2d_polyphase_f32);
  /* Layers it leaves to the others: 9 input channels, groups, dilation. */
  float x[9 * 16 * 16] = {0}, w[8 * 9 * 9] = {0}, y[8 * 16 * 16];
  loom_abi_conv2d_t d = {1, 9, 16, 16, 8, 3, 3, 8, 8, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1,
                         x, w, NULL, y, NULL, NULL, NULL};
  CHECK(!kern_conv2d_polyphase_suits(&d) && !kern_conv2d_polyphase_f32(&d, NULL));
  d.c = 8;
  int avx2 = core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
  CHECK(kern_conv2d_polyphase_suits(&d) == avx2);
  d.groups = 2;
  CHECK(!kern_conv2d_polyphase_suits(&d));
  d.groups = 1;
  d.dilation[0] = 2;
  d.ho = 7;
  CHECK(!kern_conv2d_polyphase_suits(&d));
}

/* ---- Compiled conv_transpose2d ------------------------------------------ */

/* relu(conv_transpose2d(x, w) + r) * r: the transposed convolution with
 * an elementwise epilogue that reads another tensor, compiled (test_run1
 * compares the compiled result with the interpreter's). */
static void compiled_transpose_with_epilogue(void) {
  loom_conv_params_t p = {.stride = {2, 2}, .pads = {1, 0, 1, 0},
                          .output_padding = {1, 0}, .groups = 1};
  for (int bias = 0; bias < 2; bias++) {
    loom_graph_t *g;
    loom_value_t x, w, b = {0}, r, y;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){3, 6, 5, 4}, &x));
    CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 4, (loom_dim_t[]){6, 4, 3, 3}, &w));
    if (bias) CHECK_OK(loom_graph_input(g, "b", LOOM_F32, 1, (loom_dim_t[]){4}, &b));
    /* (5 - 1) * 2 - 2 + 3 + 1 = 10 rows, (4 - 1) * 2 + 3 = 9 columns */
    CHECK_OK(loom_graph_input(g, "r", LOOM_F32, 4, (loom_dim_t[]){3, 4, 10, 9}, &r));
    CHECK_OK(loom_conv_transpose2d(g, x, w, bias, b, &p, &y));
    CHECK_OK(loom_add(g, y, r, &y));
    CHECK_OK(loom_relu(g, y, &y));
    CHECK_OK(loom_mul(g, y, r, &y));
    CHECK_OK(loom_graph_output(g, y));
    loom_tensor_t *in[4] = {
        test_rand_tensor(LOOM_F32, 4, (int64_t[]){3, 6, 5, 4}, -1, 1),
        test_rand_tensor(LOOM_F32, 4, (int64_t[]){6, 4, 3, 3}, -1, 1),
        test_rand_tensor(LOOM_F32, 1, (int64_t[]){4}, -1, 1),
        test_rand_tensor(LOOM_F32, 4, (int64_t[]){3, 4, 10, 9}, -1, 1)};
    loom_tensor_t *in_no_bias[3] = {in[0], in[1], in[3]};
    loom_tensor_t *out = test_run1(g, bias ? 4 : 3, bias ? in : in_no_bias);
    CHECK(out != NULL);
    loom_tensor_destroy(out);
    for (int i = 0; i < 4; i++) loom_tensor_destroy(in[i]);
    loom_graph_destroy(g);
  }
}

/* ---- Batch norm and per-channel reductions, compiled ----------------------- */

/* Runs g (n_out outputs) through the interpreter and the compiler (for 1
 * and 2 threads) and compares every output; checks that the compiled
 * plan runs no reference step when `all_generated`. */
static void compare_compiled(loom_graph_t *g, int n_in, loom_tensor_t *const *in, int n_out,
                             bool all_generated) {
  loom_tensor_t *want[4] = {NULL}, *got[4] = {NULL};
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  for (int threads = 1; threads <= 2; threads++) {
    loom_compile_options_t o;
    loom_compile_options_init(&o);
    o.num_threads = threads;
    loom_executable_t *e = NULL;
    CHECK_OK(loom_compile(g, &o, &e));
    if (!e) return;
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    CHECK_OK(loom_executable_info(e, &info));
    if (all_generated) CHECK(info.n_reference == 0 && !info.interpreted);
    for (int i = 0; i < n_out; i++) CHECK_OK(loom_executable_new_output(e, i, &got[i]));
    CHECK_OK(loom_executable_run(e, n_in, in, n_out, got));
    for (int i = 0; i < n_out; i++) {
      int64_t n = loom_tensor_numel(want[i]);
      double *v = malloc((size_t)n * sizeof(double));
      for (int64_t j = 0; j < n; j++) v[j] = test_get(want[i], j);
      CHECK_TENSOR(got[i], v, n, 1e-5, 1e-5);
      free(v);
      loom_tensor_destroy(got[i]);
    }
    loom_executable_destroy(e);
  }
  for (int i = 0; i < n_out; i++) loom_tensor_destroy(want[i]);
}

/* Training-mode batch norm: y and both running statistics, on odd sizes. */
static void compiled_batch_norm(void) {
  static const int64_t shapes[][4] = {{3, 5, 7, 6}, {8, 16, 2, 2}, {2, 3, 1, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    const int64_t *xs = shapes[s], c = xs[1];
    loom_graph_t *g;
    loom_value_t x, sc, bi, rm, rv, y, nm, nv;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){xs[0], c, xs[2], xs[3]}, &x));
    CHECK_OK(loom_graph_input(g, "scale", LOOM_F32, 1, (loom_dim_t[]){c}, &sc));
    CHECK_OK(loom_graph_input(g, "bias", LOOM_F32, 1, (loom_dim_t[]){c}, &bi));
    CHECK_OK(loom_graph_input(g, "mean", LOOM_F32, 1, (loom_dim_t[]){c}, &rm));
    CHECK_OK(loom_graph_input(g, "var", LOOM_F32, 1, (loom_dim_t[]){c}, &rv));
    CHECK_OK(loom_batch_norm(g, x, sc, bi, rm, rv, 1e-5, 0.1, 1, &y, &nm, &nv));
    CHECK_OK(loom_graph_output(g, y));
    CHECK_OK(loom_graph_output(g, nm));
    CHECK_OK(loom_graph_output(g, nv));
    loom_tensor_t *in[5] = {test_rand_tensor(LOOM_F32, 4, xs, -2, 3),
                            test_rand_tensor(LOOM_F32, 1, &c, 0.5, 1.5),
                            test_rand_tensor(LOOM_F32, 1, &c, -1, 1),
                            test_rand_tensor(LOOM_F32, 1, &c, -1, 1),
                            test_rand_tensor(LOOM_F32, 1, &c, 0.5, 2)};
    compare_compiled(g, 5, in, 3, true);
    for (int i = 0; i < 5; i++) loom_tensor_destroy(in[i]);
    loom_graph_destroy(g);
  }
}

/* sum(x * y), mean(x) and sum((x - c)^2) over every dim but the channel,
 * with and without keepdim, and x * y also exported over the full space;
 * 5x4 and 9x8 images: the inner dims that merge (x, a per-channel c) fold
 * in lanes, a whole block and a tail of them; y's broadcast row keeps
 * them apart. */
static void compiled_channel_reductions(void) {
  static const int64_t axes[3] = {0, 2, 3};
  static const int64_t shapes[2][4] = {{3, 7, 5, 4}, {2, 3, 9, 8}};
  for (int k = 0; k < 4; k++) {
    const int64_t *xs = shapes[k / 2], ys[4] = {xs[0], xs[1], 1, xs[3]}, cs[4] = {1, xs[1], 1, 1};
    int keep = k % 2;
    loom_graph_t *g;
    loom_value_t x, y, c, p, s, m, t, u, v;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, xs, &x));
    CHECK_OK(loom_graph_input(g, "y", LOOM_F32, 4, ys, &y));
    CHECK_OK(loom_graph_input(g, "c", LOOM_F32, 4, cs, &c));
    CHECK_OK(loom_mul(g, x, y, &p));
    CHECK_OK(loom_sum(g, p, 3, axes, keep, &s));
    CHECK_OK(loom_mean(g, x, 3, axes, keep, &m));
    CHECK_OK(loom_sub(g, x, c, &t));
    CHECK_OK(loom_mul(g, t, t, &u));
    CHECK_OK(loom_sum(g, u, 3, axes, keep, &v));
    CHECK_OK(loom_graph_output(g, s));
    CHECK_OK(loom_graph_output(g, m));
    CHECK_OK(loom_graph_output(g, p));
    CHECK_OK(loom_graph_output(g, v));
    loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 4, xs, -1, 1),
                            test_rand_tensor(LOOM_F32, 4, ys, -1, 1),
                            test_rand_tensor(LOOM_F32, 4, cs, -1, 1)};
    compare_compiled(g, 3, in, 4, true);
    for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
    loom_graph_destroy(g);
  }
}

/* max_pool2d_grad: overlapping windows (ResNet's 3x3 stride 2 pad 1),
 * dilation, uneven pads, ties (x rounded to a few values) and a NaN. */
static void compiled_max_pool_grad(void) {
  static const loom_pool_params_t params[] = {
      {.kernel = {3, 3}, .stride = {2, 2}, .pads = {1, 1, 1, 1}},
      {.kernel = {2, 3}, .stride = {1, 2}, .pads = {0, 1, 1, 0}, .dilation = {2, 1}},
      {.kernel = {2, 2}, .stride = {2, 2}},
  };
  for (size_t q = 0; q < sizeof params / sizeof *params; q++) {
    const loom_pool_params_t *p = &params[q];
    int64_t xs[4] = {2, 3, 9, 8}, h = xs[2], w = xs[3], ys[4] = {2, 3, 0, 0};
    int64_t dil[2] = {p->dilation[0] ? p->dilation[0] : 1, p->dilation[1] ? p->dilation[1] : 1};
    ys[2] = (h + p->pads[0] + p->pads[2] - dil[0] * (p->kernel[0] - 1) - 1) / p->stride[0] + 1;
    ys[3] = (w + p->pads[1] + p->pads[3] - dil[1] * (p->kernel[1] - 1) - 1) / p->stride[1] + 1;
    loom_graph_t *g;
    loom_value_t x, dy, dx;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){xs[0], xs[1], h, w}, &x));
    CHECK_OK(loom_graph_input(g, "dy", LOOM_F32, 4, (loom_dim_t[]){ys[0], ys[1], ys[2], ys[3]},
                              &dy));
    CHECK_OK(loom_max_pool2d_grad(g, x, dy, p, &dx));
    CHECK_OK(loom_graph_output(g, dx));
    loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 4, xs, -2, 2),
                            test_rand_tensor(LOOM_F32, 4, ys, -1, 1)};
    float *xv = loom_tensor_data(in[0]);
    for (int64_t i = 0; i < loom_tensor_numel(in[0]); i++) xv[i] = (float)(int)(xv[i] * 2);
    xv[17] = NAN;
    compare_compiled(g, 2, in, 1, true);
    for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
    loom_graph_destroy(g);
  }
}

int main(void) {
  test_seed(20261130);
  TEST_RUN(input_grad_configurations);
  TEST_RUN(batched_forward_configurations);
  TEST_RUN(direct_forward_configurations);
  TEST_RUN(depthwise_forward_configurations);
  TEST_RUN(polyphase_forward_configurations);
  TEST_RUN(stride2_gather_instances);
  TEST_RUN(strided_forward_configurations);
  TEST_RUN(compiled_transpose_with_epilogue);
  TEST_RUN(compiled_batch_norm);
  TEST_RUN(compiled_channel_reductions);
  TEST_RUN(compiled_max_pool_grad);
  return test_summary();
}
