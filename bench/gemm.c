/* bench_gemm: SGEMM GFLOP/s of Loom's kernel at square sizes, 1 and 2
 * threads, beside the machine's FMA peak measured in the same run (and
 * oneDNN's dnnl_sgemm when built with -DLOOM_BENCH_DNNL; it is loaded with
 * dlopen, so the build needs no extra library). One JSON object a line:
 *   {"bench":"gemm","n":1024,"threads":1,"gflops":...,"peak_gflops":...,
 *    "fraction_of_peak":...}
 * Usage: bench_gemm [n ...]   (default 256 512 1024 2048)
 *        bench_gemm conv      conv2d layers: Loom's implicit im2col beside
 *                             an explicit im2col buffer + the same GEMM
 *        bench_gemm kernel    the micro-kernel alone, on packed panels that
 *                             stay in L1 and L2, beside the FMA peak
 *        bench_gemm step [m,n,k,trans_a,trans_b ...]
 *                             the Transformer training step's GEMM shapes
 *                             (or those given), Loom beside OpenBLAS
 *                             (PyTorch's BLAS here) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/isa.h"
#include "core/pool.h"
#include "fma_peak.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/gemm_impl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double fma_peak(int threads) { return bench_fma_peak(threads, 20000000); }

/* ---- GEMM timing ------------------------------------------------------- */

#ifdef LOOM_BENCH_DNNL
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float,
                             const float *, int64_t, const float *, int64_t,
                             float, float *, int64_t);
static dnnl_sgemm_fn dnnl_sgemm_p;
static void (*omp_set_threads_p)(int);

static void dnnl_load(void) {
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!h) h = dlopen("libdnnl.so", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "bench_gemm: no oneDNN: %s\n", dlerror());
    return;
  }
  dnnl_sgemm_p = (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm");
  omp_set_threads_p = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
}
#endif

typedef struct mats {
  int64_t n;
  float *a, *b, *c;
  core_pool_t *pool;
} mats_t;

static void run_loom(const mats_t *m) {
  loom_abi_gemm_t d = {.m = m->n, .n = m->n, .k = m->n, .batch = 1,
                       .a = m->a, .lda = m->n, .b = m->b, .ldb = m->n,
                       .c = m->c, .ldc = m->n};
  kern_gemm_f32(&d, m->pool);
}

#ifdef LOOM_BENCH_DNNL
static void run_dnnl(const mats_t *m) {
  dnnl_sgemm_p('N', 'N', m->n, m->n, m->n, 1.0f, m->a, m->n, m->b, m->n, 0.0f,
               m->c, m->n);
}
#endif

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* GFLOP/s of a GEMM beside the peak, measured in pairs: each sample is an
 * FMA-loop burst of ~5 ms at `threads` threads, then enough runs of fn to
 * fill ~5 ms. A shared machine's load comes and goes within seconds (the
 * peak alone moved by 30% within a minute here), so each sample's
 * fraction of peak sets the GEMM against the machine as it was at that
 * moment. Medians over samples filling ~1 s (at least 5). */
typedef struct rate {
  double gflops, peak, fraction;
} rate_t;

static rate_t measure(void (*fn)(const mats_t *), const mats_t *m, int threads) {
  enum { SAMPLES = 64 };
  double flop = 2.0 * (double)m->n * (double)m->n * (double)m->n;
  double g[SAMPLES], pk[SAMPLES], fr[SAMPLES];
  double t0 = now();
  fn(m); /* warm-up: first touch, packing buffers */
  int reps = (int)(0.005 / (now() - t0 + 1e-9)) + 1, samples = 0;
  double start = now();
  while (samples < SAMPLES && (samples < 5 || now() - start < 1.0)) {
    pk[samples] = bench_fma_peak(threads, 2500000);
    double t1 = now();
    for (int r = 0; r < reps; r++) fn(m);
    g[samples] = flop * reps / (now() - t1) * 1e-9;
    fr[samples] = g[samples] / pk[samples];
    samples++;
  }
  qsort(g, (size_t)samples, sizeof *g, cmp_double);
  qsort(pk, (size_t)samples, sizeof *pk, cmp_double);
  qsort(fr, (size_t)samples, sizeof *fr, cmp_double);
  return (rate_t){g[samples / 2], pk[samples / 2], fr[samples / 2]};
}

static float *random_rect(int64_t count) {
  float *x = aligned_alloc(64, (size_t)count * sizeof(float));
  if (!x) {
    fprintf(stderr, "bench_gemm: out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < count; i++) x[i] = (float)(rand() % 2001 - 1000) * 1e-3f;
  return x;
}

static float *random_matrix(int64_t n) { return random_rect(n * n); }

/* ---- conv2d: implicit im2col (Loom) vs explicit im2col + GEMM ------------ */

typedef struct conv_bench {
  loom_abi_conv2d_t d;
  float *col; /* explicit im2col buffer, allocated once */
  core_pool_t *pool;
} conv_bench_t;

static void run_conv_loom(const void *arg) {
  const conv_bench_t *b = arg;
  kern_conv2d_f32(&b->d, KERN_CONV_DEFAULT, b->pool);
}

/* The textbook route (groups = 1): build the column matrix, then GEMM. */
static void run_conv_explicit(const void *arg) {
  const conv_bench_t *b = arg;
  const loom_abi_conv2d_t *d = &b->d;
  int64_t k = d->c * d->kh * d->kw, pos = d->ho * d->wo;
  for (int64_t img = 0; img < d->n; img++) {
    const float *x = d->x + img * d->c * d->h * d->w;
    for (int64_t r = 0; r < k; r++) {
      int64_t ci = r / (d->kh * d->kw), ky = r / d->kw % d->kh, kx = r % d->kw;
      for (int64_t oy = 0; oy < d->ho; oy++)
        for (int64_t ox = 0; ox < d->wo; ox++) {
          int64_t iy = oy * d->stride[0] - d->pads[0] + ky * d->dilation[0];
          int64_t ix = ox * d->stride[1] - d->pads[1] + kx * d->dilation[1];
          int in = iy >= 0 && iy < d->h && ix >= 0 && ix < d->w;
          b->col[r * pos + oy * d->wo + ox] = in ? x[(ci * d->h + iy) * d->w + ix] : 0;
        }
    }
    loom_abi_gemm_t g = {.m = d->o, .n = pos, .k = k, .batch = 1, .a = d->weight,
                         .lda = k, .b = b->col, .ldb = pos,
                         .c = d->y + img * d->o * pos, .ldc = pos};
    kern_gemm_f32(&g, b->pool);
  }
}

static double median_ms(void (*fn)(const void *), const void *arg) {
  double times[64];
  fn(arg);
  int runs = 0;
  double start = now();
  while (runs < 64 && (runs < 3 || now() - start < 0.3)) {
    double t0 = now();
    fn(arg);
    times[runs++] = now() - t0;
  }
  qsort(times, (size_t)runs, sizeof *times, cmp_double);
  return times[runs / 2] * 1e3;
}

/* ResNet-18 and LeNet layers: n c h w o k stride pad. */
static const int64_t conv_layers[][8] = {
    {1, 3, 224, 224, 64, 7, 2, 3},  {1, 64, 56, 56, 64, 3, 1, 1},
    {1, 128, 28, 28, 128, 3, 1, 1}, {1, 256, 14, 14, 256, 3, 1, 1},
    {1, 512, 7, 7, 512, 3, 1, 1},   {1, 64, 56, 56, 128, 1, 2, 0},
    {1, 64, 56, 56, 128, 3, 2, 1},  {1, 256, 14, 14, 512, 3, 2, 1},
    {64, 1, 28, 28, 6, 5, 1, 2},    {64, 6, 14, 14, 16, 5, 1, 0},
};

static void bench_conv(void) {
  for (int threads = 1; threads <= 2; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1 && core_pool_create(threads, &pool) != LOOM_OK) exit(1);
    for (size_t i = 0; i < sizeof conv_layers / sizeof *conv_layers; i++) {
      const int64_t *l = conv_layers[i];
      int64_t ho = (l[2] + 2 * l[7] - l[5]) / l[6] + 1;
      conv_bench_t b = {.d = {l[0], l[1], l[2], l[3], l[4], l[5], l[5], ho, ho,
                              {l[6], l[6]}, {l[7], l[7], l[7], l[7]}, {1, 1}, 1,
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL},
                        .pool = pool};
      int64_t xs = l[0] * l[1] * l[2] * l[3], ws = l[4] * l[1] * l[5] * l[5];
      int64_t ys = l[0] * l[4] * ho * ho, cols = l[1] * l[5] * l[5] * ho * ho;
      float *x = calloc((size_t)xs, 4), *w = calloc((size_t)ws, 4);
      for (int64_t j = 0; j < xs; j++) x[j] = (float)(j % 7) * 0.1f;
      for (int64_t j = 0; j < ws; j++) w[j] = (float)(j % 5) * 0.1f;
      b.d.x = x;
      b.d.weight = w;
      b.d.y = calloc((size_t)ys, 4);
      b.col = calloc((size_t)cols, 4);
      double gflop = 2.0 * (double)ys * (double)(l[1] * l[5] * l[5]) * 1e-9;
      double t_loom = median_ms(run_conv_loom, &b), t_exp = median_ms(run_conv_explicit, &b);
      printf("{\"bench\":\"conv2d\",\"layer\":\"%lldx%lldx%lldx%lld o%lld k%lld s%lld\","
             "\"threads\":%d,\"implicit_ms\":%.3f,\"explicit_ms\":%.3f,"
             "\"implicit_gflops\":%.1f,\"isa\":\"%s\"}\n",
             (long long)l[0], (long long)l[1], (long long)l[2], (long long)l[3],
             (long long)l[4], (long long)l[5], (long long)l[6], threads, t_loom,
             t_exp, gflop / t_loom * 1e3, kern_gemm_isa());
      fflush(stdout);
      free(x);
      free(w);
      free(b.d.y);
      free(b.col);
    }
    core_pool_destroy(pool);
  }
}

/* ---- The micro-kernel alone ------------------------------------------ */

/* The best of five passes over 24 A panels (an mc-tall block, in L2) and
 * one B panel (in L1), as the macro-kernel feeds them: what the register
 * tile reaches when packing and memory cost nothing. */
static void bench_kernel(void) {
  const gemm_isa_t *isas[] = {&gemm_isa_avx512, &gemm_isa_avx2, &gemm_isa_portable};
  const gemm_isa_t *isa = NULL;
  for (size_t i = 0; i < sizeof isas / sizeof *isas && !isa; i++)
    if (!strcmp(isas[i]->name, kern_gemm_isa())) isa = isas[i];
  if (!isa) return;
  enum { PANELS = 24 };
  int64_t kc = isa->kc, ldc = 1024;
  float *a = aligned_alloc(64, (size_t)(PANELS * isa->mr * kc) * sizeof(float));
  float *b = aligned_alloc(64, (size_t)(isa->nr * kc) * sizeof(float));
  float *c = aligned_alloc(64, (size_t)(isa->mr * ldc) * sizeof(float));
  for (int64_t i = 0; i < PANELS * isa->mr * kc; i++) a[i] = (float)(i % 7) * 1e-3f;
  for (int64_t i = 0; i < isa->nr * kc; i++) b[i] = (float)(i % 5) * 1e-3f;
  memset(c, 0, (size_t)(isa->mr * ldc) * sizeof(float));
  long calls = 400000000L / (isa->mr * isa->nr * kc);
  double best = 0, peak = fma_peak(1);
  for (int pass = 0; pass < 5; pass++) {
    double t0 = now();
    for (long i = 0; i < calls; i++)
      isa->kernel(kc, a + (i % PANELS) * isa->mr * kc, b, c + (i % 8) * isa->nr % ldc,
                  ldc, 1);
    double g = 2.0 * isa->mr * isa->nr * (double)kc * (double)calls / (now() - t0) * 1e-9;
    if (g > best) best = g;
  }
  printf("{\"bench\":\"gemm_kernel\",\"isa\":\"%s\",\"mr\":%d,\"nr\":%d,\"kc\":%lld,"
         "\"gflops\":%.1f,\"peak_gflops\":%.1f}\n",
         isa->name, isa->mr, isa->nr, (long long)kc, best, peak);
  free(a);
  free(b);
  free(c);
}

/* ---- The Transformer step's GEMM shapes, against OpenBLAS -------------- */

/* OpenBLAS as PyTorch is run beside Loom (bench_torch_env): the
 * OpenMP build, with cblas_sgemm's row-major interface. */
#define OPENBLAS_PATH "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef struct step_gemm {
  loom_abi_gemm_t d[4]; /* operand sets cycled, so that they come from L3 as in a step */
  cblas_sgemm_fn sgemm;
  core_pool_t *pool;
} step_gemm_t;

static void step_loom(const step_gemm_t *s, int set) { kern_gemm_f32(&s->d[set], s->pool); }

static void step_blas(const step_gemm_t *s, int set) {
  const loom_abi_gemm_t *d = &s->d[set];
  s->sgemm(CBLAS_ROW_MAJOR, d->trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
           d->trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)d->m, (int)d->n, (int)d->k, 1.0f,
           d->a, (int)d->lda, d->b, (int)d->ldb, 0.0f, d->c, (int)d->ldc);
}

/* Seconds per call over a block of at least ~20 ms, after a 10 ms pause:
 * the other library's threads (OpenMP's spin after a parallel region, the
 * pool's) are asleep when the block starts, as in a step that follows
 * other work. */
static double step_block(void (*fn)(const step_gemm_t *, int), const step_gemm_t *s) {
  struct timespec pause = {0, 10 * 1000 * 1000};
  nanosleep(&pause, NULL);
  double t0 = now();
  int calls = 0;
  do fn(s, calls++ % 4);
  while (now() - t0 < 0.02 || calls < 4);
  return (now() - t0) / calls;
}

/* The GEMMs of bench train's Transformer step (batch 8 x 128 tokens, d
 * 256, FFN 1024, QKV 768): forward X @ W^T, input gradients dY @ W,
 * weight gradients dY^T @ X. Loom and OpenBLAS alternate blocks; each
 * side's figure is the median of its blocks, the ratio the median of the
 * pairs' ratios (OpenBLAS's time over Loom's: above 1, Loom is faster). */
static void bench_step_shapes(int n_custom, const int64_t (*custom)[5]) {
  /* These machines set OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) for older
   * OpenBLAS builds; read when the library loads, it would pin this one to
   * Haswell kernels (half its speed on AVX-512). The peer runs as PyTorch
   * is run in bench/train.c: with both unset (../shared/PEERS.md), or
   * pinned to LOOM_CPU_ISA's cap when one is set, as Loom is. */
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  const char *cap = core_isa_cap_name();
  if (cap) setenv("OPENBLAS_CORETYPE", strcmp(cap, "avx2") ? "Nehalem" : "Haswell", 1);
  void *h = dlopen(OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  cblas_sgemm_fn sgemm = h ? (cblas_sgemm_fn)dlsym(h, "cblas_sgemm") : NULL;
  void (*set_threads)(int) = h ? (void (*)(int))dlsym(h, "openblas_set_num_threads") : NULL;
  if (!sgemm || !set_threads) {
    fprintf(stderr, "bench_gemm: no OpenBLAS at %s (bench/setup.sh)\n", OPENBLAS_PATH);
    return;
  }
  static const int64_t shapes[][5] = {/* m, n, k, trans_a, trans_b */
                                      {1024, 768, 256, 0, 1},  {1024, 1024, 256, 0, 1},
                                      {1024, 256, 1024, 0, 1}, {1024, 256, 256, 0, 1},
                                      {1024, 256, 1024, 0, 0}, {1024, 1024, 256, 0, 0},
                                      {256, 1024, 1024, 1, 0}, {1024, 256, 1024, 1, 0},
                                      {768, 256, 1024, 1, 0},  {256, 256, 1024, 1, 0}};
  size_t n_shapes = n_custom ? (size_t)n_custom : sizeof shapes / sizeof *shapes;
  const int64_t(*list)[5] = n_custom ? custom : shapes;
  enum { PAIRS = 9 };
  for (int threads = 1; threads <= 2; threads++) {
    step_gemm_t s = {.sgemm = sgemm};
    if (threads > 1 && core_pool_create(threads, &s.pool) != LOOM_OK) return;
    set_threads(threads);
    for (size_t i = 0; i < n_shapes; i++) {
      int64_t m = list[i][0], n = list[i][1], k = list[i][2];
      int ta = (int)list[i][3], tb = (int)list[i][4];
      for (int q = 0; q < 4; q++)
        s.d[q] = (loom_abi_gemm_t){.m = m, .n = n, .k = k, .batch = 1,
                                   .a = random_rect(m * k), .lda = ta ? m : k, .trans_a = ta,
                                   .b = random_rect(k * n), .ldb = tb ? k : n, .trans_b = tb,
                                   .c = random_rect(m * n), .ldc = n};
      double lt[PAIRS], bt[PAIRS], ratio[PAIRS], flop = 2.0 * (double)(m * n * k);
      for (int r = 0; r < PAIRS; r++) {
        int blas_first = r % 2;
        if (blas_first) bt[r] = step_block(step_blas, &s);
        lt[r] = step_block(step_loom, &s);
        if (!blas_first) bt[r] = step_block(step_blas, &s);
        ratio[r] = bt[r] / lt[r];
      }
      qsort(lt, PAIRS, sizeof *lt, cmp_double);
      qsort(bt, PAIRS, sizeof *bt, cmp_double);
      qsort(ratio, PAIRS, sizeof *ratio, cmp_double);
      printf("{\"bench\":\"gemm_step\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"trans_a\":%d,"
             "\"trans_b\":%d,\"threads\":%d,\"loom_gflops\":%.1f,\"openblas_gflops\":%.1f,"
             "\"vs_openblas\":%.3f,\"isa\":\"%s\"}\n",
             (long long)m, (long long)n, (long long)k, ta, tb, threads,
             flop / lt[PAIRS / 2] * 1e-9, flop / bt[PAIRS / 2] * 1e-9, ratio[PAIRS / 2],
             kern_gemm_isa());
      fflush(stdout);
      for (int q = 0; q < 4; q++) {
        free((void *)s.d[q].a);
        free((void *)s.d[q].b);
        free(s.d[q].c);
      }
    }
    core_pool_destroy(s.pool);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "conv") == 0) {
    bench_conv();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "kernel") == 0) {
    bench_kernel();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "step") == 0) {
    int64_t custom[16][5];
    int n_custom = 0;
    for (int i = 2; i < argc && n_custom < 16; i++) {
      long long v[5];
      if (sscanf(argv[i], "%lld,%lld,%lld,%lld,%lld", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5 ||
          v[0] < 1 || v[1] < 1 || v[2] < 1) {
        fprintf(stderr, "bench_gemm: a shape is m,n,k,trans_a,trans_b: %s\n", argv[i]);
        return 2;
      }
      for (int j = 0; j < 5; j++) custom[n_custom][j] = v[j];
      n_custom++;
    }
    bench_step_shapes(n_custom, (const int64_t(*)[5])custom);
    return 0;
  }
  int64_t sizes[16] = {256, 512, 1024, 2048};
  int n_sizes = 4;
  if (argc > 1) {
    n_sizes = 0;
    for (int i = 1; i < argc && n_sizes < 16; i++) sizes[n_sizes++] = atoll(argv[i]);
  }
#ifdef LOOM_BENCH_DNNL
  dnnl_load();
#endif
  for (int threads = 1; threads <= 2; threads++) {
    core_pool_t *pool = NULL;
    if (threads > 1 && core_pool_create(threads, &pool) != LOOM_OK) return 1;
    for (int s = 0; s < n_sizes; s++) {
      int64_t n = sizes[s];
      mats_t m = {n, random_matrix(n), random_matrix(n), random_matrix(n), pool};
      rate_t r = measure(run_loom, &m, threads);
      printf("{\"bench\":\"gemm\",\"n\":%lld,\"threads\":%d,\"gflops\":%.1f,"
             "\"peak_gflops\":%.1f,\"fraction_of_peak\":%.3f,\"isa\":\"%s\"",
             (long long)n, threads, r.gflops, r.peak, r.fraction, kern_gemm_isa());
#ifdef LOOM_BENCH_DNNL
      if (dnnl_sgemm_p) {
        if (omp_set_threads_p) omp_set_threads_p(threads);
        rate_t d = measure(run_dnnl, &m, threads);
        printf(",\"dnnl_gflops\":%.1f,\"dnnl_fraction_of_peak\":%.3f", d.gflops, d.fraction);
      }
#endif
      printf("}\n");
      fflush(stdout);
      free(m.a);
      free(m.b);
      free(m.c);
    }
    core_pool_destroy(pool);
  }
  return 0;
}
