/* conv2d weights packed ahead of time (kern_conv2d_pack_weight,
 * loom_abi_conv2d_t.weight_packed, loom_compile_options_t.freeze_params):
 * results equal the unpacked kernel's bit for bit (the same panels feed
 * the same micro-kernel) and a direct sum written here, over groups,
 * ragged channel and position counts, k over several blocks, strides and
 * pads, the batched small-image form, 1 and 2 threads and every
 * micro-kernel this CPU runs; panels packed for another micro-kernel are
 * ignored; frozen compiled convolutions match the interpreter. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "harness.h"
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/gemm_impl.h"
#include "loom/ops.h"

static const char *const isas[] = {"portable", "avx2", "avx2_wide", "avx512"};

typedef struct conv_case {
  int64_t n, c, h, w, o, kh, kw, stride, pad, groups;
} conv_case_t;

static float *rand_floats(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) p[i] = (float)test_rand_uniform(-1, 1);
  return p;
}

static loom_abi_conv2d_t geometry(const conv_case_t *q, const float *x, const float *w,
                                  const float *bias, float *y) {
  int64_t ho = (q->h + 2 * q->pad - q->kh) / q->stride + 1;
  int64_t wo = (q->w + 2 * q->pad - q->kw) / q->stride + 1;
  return (loom_abi_conv2d_t){.n = q->n, .c = q->c, .h = q->h, .w = q->w, .o = q->o,
                             .kh = q->kh, .kw = q->kw, .ho = ho, .wo = wo,
                             .stride = {q->stride, q->stride},
                             .pads = {q->pad, q->pad, q->pad, q->pad},
                             .dilation = {1, 1}, .groups = q->groups,
                             .x = x, .weight = w, .bias = bias, .y = y};
}

/* y[img, o, oy, ox] from conv2d's definition, in double. */
static double direct(const loom_abi_conv2d_t *d, int64_t img, int64_t o, int64_t oy,
                     int64_t ox, double *abs_sum) {
  int64_t cg = d->c / d->groups, g = o / (d->o / d->groups);
  double s = d->bias ? d->bias[o] : 0.0;
  *abs_sum = fabs(s);
  for (int64_t ci = 0; ci < cg; ci++)
    for (int64_t ky = 0; ky < d->kh; ky++)
      for (int64_t kx = 0; kx < d->kw; kx++) {
        int64_t iy = oy * d->stride[0] - d->pads[0] + ky, ix = ox * d->stride[1] - d->pads[1] + kx;
        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
        double xy = (double)d->x[((img * d->c + g * cg + ci) * d->h + iy) * d->w + ix] *
                    d->weight[((o * cg + ci) * d->kh + ky) * d->kw + kx];
        s += xy;
        *abs_sum += fabs(xy);
      }
  return s;
}

/* Number of elements of y (d's output) farther from the direct sum than
 * float rounding allows. */
static int count_wrong(const loom_abi_conv2d_t *d, const float *y) {
  int64_t taps = d->c / d->groups * d->kh * d->kw, positions = d->ho * d->wo;
  int wrong = 0;
  for (int64_t img = 0; img < d->n; img++)
    for (int64_t o = 0; o < d->o; o++)
      for (int64_t p = 0; p < positions; p++) {
        double abs_sum, want = direct(d, img, o, p / d->wo, p % d->wo, &abs_sum);
        double got = y[(img * d->o + o) * positions + p];
        wrong += !(fabs(got - want) <= 2e-7 * (double)(taps + 1) * abs_sum + 1e-6);
      }
  return wrong;
}

/* Weights w of q packed for the algorithm a default-mode layer runs on
 * pool with packed weights. */
static void *pack(const conv_case_t *q, const float *w, core_pool_t *pool) {
  loom_abi_conv2d_t d = geometry(q, NULL, w, NULL, NULL);
  kern_conv_algo_t algo = kern_conv2d_algo(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 1, pool);
  size_t bytes = kern_conv2d_packed_bytes(&d, algo);
  void *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
  CHECK(kern_conv2d_pack_weight(&d, algo, buf));
  return buf;
}

/* Packed and unpacked runs give the same bits, and both the direct sum. */
static void check_packed(const conv_case_t *q, core_pool_t *pool) {
  int64_t cg = q->c / q->groups, numel_w = q->o * cg * q->kh * q->kw;
  float *x = rand_floats(q->n * q->c * q->h * q->w), *w = rand_floats(numel_w);
  float *bias = rand_floats(q->o);
  loom_abi_conv2d_t d = geometry(q, x, w, bias, NULL);
  int64_t numel_y = q->n * q->o * d.ho * d.wo;
  float *y0 = rand_floats(numel_y), *y1 = rand_floats(numel_y);
  void *packed = pack(q, w, pool);
  d.y = y0;
  kern_conv2d_f32(&d, KERN_CONV_DEFAULT, pool);
  kern_conv_algo_t unpacked = kern_conv2d_algo(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 0, pool);
  d.y = y1;
  d.weight_packed = packed;
  kern_conv2d_f32(&d, KERN_CONV_DEFAULT, pool);
  /* Same bits when both runs take the same algorithm (a layer with few
   * tiles, say, may run Winograd only with its weights transformed
   * ahead). */
  int differ = unpacked == kern_conv2d_algo(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 1, pool) &&
               memcmp(y0, y1, sizeof(float) * (size_t)numel_y) != 0;
  int wrong = count_wrong(&d, y1);
  if (differ || wrong)
    test_fail(__FILE__, __LINE__,
              "conv2d %s packed n=%lld c=%lld %lldx%lld o=%lld k=%lldx%lld s=%lld p=%lld "
              "groups=%lld threads=%d: %s, %d wrong",
              kern_gemm_isa(), (long long)q->n, (long long)q->c, (long long)q->h,
              (long long)q->w, (long long)q->o, (long long)q->kh, (long long)q->kw,
              (long long)q->stride, (long long)q->pad, (long long)q->groups,
              core_pool_threads(pool), differ ? "differs from unpacked" : "same bits", wrong);
  test_checks++;
  free(x);
  free(w);
  free(bias);
  free(y0);
  free(y1);
  free(packed);
}

/* n c h w o kh kw stride pad groups */
static const conv_case_t cases[] = {
    {1, 3, 9, 9, 20, 3, 3, 1, 1, 1},     /* ragged o (mr), 81 positions (nr) */
    {1, 8, 7, 7, 33, 3, 3, 1, 1, 1},     /* 49 positions: a 1-column last tile */
    {1, 64, 7, 7, 40, 3, 3, 1, 1, 1},    /* k = 576: several kc blocks */
    {2, 12, 10, 9, 26, 3, 3, 2, 1, 2},   /* groups, stride 2, two images */
    {1, 6, 8, 8, 24, 1, 1, 1, 0, 3},     /* pointwise, groups */
    {1, 5, 11, 13, 19, 5, 5, 2, 2, 1},   /* 5x5, stride 2, pad 2 */
    {1, 64, 6, 6, 96, 3, 3, 1, 1, 1},    /* tall: two threads split rows */
    {1, 16, 12, 12, 300, 3, 3, 1, 1, 1}, /* tall, 9 column tiles: column parts */
    {3, 64, 4, 4, 40, 3, 3, 1, 1, 1},    /* small images: the batched form */
    {2, 32, 5, 5, 64, 3, 3, 1, 1, 2},    /* batched form with groups */
    {1, 64, 30, 30, 20, 3, 3, 1, 1, 1},  /* 900 positions: several column blocks */
    {1, 24, 14, 14, 32, 3, 3, 1, 1, 1},  /* 49 tiles: Winograd when packed ahead */
    {2, 16, 15, 17, 20, 3, 3, 1, 1, 1},  /* Winograd, odd sizes, per call too */
};

static void packed_equals_unpacked(void) {
  test_seed(5);
  core_pool_t *pool = NULL;
  CHECK_OK(core_pool_create(2, &pool));
  for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
    if (!kern_gemm_force_isa(isas[i])) continue;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
      check_packed(&cases[c], NULL);
      check_packed(&cases[c], pool);
    }
  }
  kern_gemm_force_isa(NULL);
  core_pool_destroy(pool);
}

/* The panels are what the kernel reads: packed from weights A and called
 * with weights B, it computes A's convolution; with another micro-kernel
 * forced after packing, it ignores them and computes B's. */
static void panels_case(conv_case_t q) {
  int64_t numel_w = q.o * q.c / q.groups * q.kh * q.kw;
  float *x = rand_floats(q.n * q.c * q.h * q.w), *wa = rand_floats(numel_w),
        *wb = rand_floats(numel_w);
  loom_abi_conv2d_t d = geometry(&q, x, wa, NULL, NULL);
  int64_t numel_y = q.n * q.o * d.ho * d.wo;
  float *y = rand_floats(numel_y);
  d.y = y;
  for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
    if (!kern_gemm_force_isa(isas[i])) continue;
    void *packed = pack(&q, wa, NULL);
    d.weight = wb;
    d.weight_packed = packed;
    kern_conv2d_f32(&d, KERN_CONV_DEFAULT, NULL);
    d.weight = wa; /* the reference reads d.weight */
    CHECK(count_wrong(&d, y) == 0);
    const char *other = strcmp(isas[i], "portable") == 0 ? "avx2" : "portable";
    if (kern_gemm_force_isa(other)) {
      d.weight = wb;
      kern_conv2d_f32(&d, KERN_CONV_DEFAULT, NULL);
      CHECK(count_wrong(&d, y) == 0);
    }
    free(packed);
  }
  kern_gemm_force_isa(NULL);
  free(x);
  free(wa);
  free(wb);
  free(y);
}

/* A grouped layer (the implicit form's panels) and one that packs
 * Winograd's transformed weights. */
static void panels_used_or_ignored(void) {
  test_seed(9);
  panels_case((conv_case_t){2, 16, 7, 7, 30, 3, 3, 1, 1, 2});
  panels_case((conv_case_t){1, 16, 12, 12, 24, 3, 3, 1, 1, 1});
}

/* ---- freeze_params over conv2d -------------------------------------------- */

/* relu(conv2d(x, W1, b1, groups 2)) -> conv2d(., W2, stride 2) on 7x7
 * images: frozen, equal to the interpreter and deaf to later writes to
 * the weights (they were packed); unfrozen, it sees them. */
static void compiled_frozen_conv(void) {
  test_seed(13);
  int64_t sx[4] = {1, 8, 7, 7}, sw1[4] = {24, 4, 3, 3}, sb1[1] = {24}, sw2[4] = {20, 24, 3, 3};
  loom_graph_t *g;
  loom_value_t x, w1, b1, w2, h, y;
  loom_tensor_t *t_w1 = test_rand_tensor(LOOM_F32, 4, sw1, -1, 1),
                *t_b1 = test_rand_tensor(LOOM_F32, 1, sb1, -1, 1),
                *t_w2 = test_rand_tensor(LOOM_F32, 4, sw2, -1, 1);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, sx, &x));
  CHECK_OK(loom_graph_param(g, "w1", LOOM_F32, 4, sw1, t_w1, &w1));
  CHECK_OK(loom_graph_param(g, "b1", LOOM_F32, 1, sb1, t_b1, &b1));
  CHECK_OK(loom_graph_param(g, "w2", LOOM_F32, 4, sw2, t_w2, &w2));
  loom_conv_params_t p1 = {.pads = {1, 1, 1, 1}, .groups = 2};
  loom_conv_params_t p2 = {.stride = {2, 2}};
  CHECK_OK(loom_conv2d(g, x, w1, 1, b1, &p1, &h));
  CHECK_OK(loom_relu(g, h, &h));
  CHECK_OK(loom_conv2d(g, h, w2, 0, b1, &p2, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 4, sx, -1, 1);
  loom_tensor_t *before = NULL, *after = NULL;
  CHECK_OK(loom_interpret(g, 1, &in, 1, &before));
  loom_executable_t *frozen = NULL, *live = NULL;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.freeze_params = 1;
  CHECK_OK(loom_compile(g, &o, &frozen));
  o.freeze_params = 0;
  CHECK_OK(loom_compile(g, &o, &live));
  loom_tensor_t *param;
  CHECK_OK(loom_graph_param_tensor(g, w2, &param));
  float *wd = loom_tensor_data(param);
  for (int64_t i = 0; i < loom_tensor_numel(param); i++) wd[i] *= -2.0f;
  CHECK_OK(loom_interpret(g, 1, &in, 1, &after));
  loom_executable_t *exes[2] = {frozen, live};
  loom_tensor_t *wants[2] = {before, after};
  for (int k = 0; k < 2 && before && after; k++) {
    loom_tensor_t *out = NULL;
    if (exes[k]) CHECK_OK(loom_executable_new_output(exes[k], 0, &out));
    if (out) CHECK_OK(loom_executable_run(exes[k], 1, &in, 1, &out));
    for (int64_t i = 0; out && i < loom_tensor_numel(out); i++)
      CHECK_NEAR(test_get(out, i), test_get(wants[k], i), 1e-4, 1e-4);
    loom_tensor_destroy(out);
  }
  loom_executable_destroy(frozen);
  loom_executable_destroy(live);
  loom_tensor_destroy(before);
  loom_tensor_destroy(after);
  loom_tensor_destroy(in);
  loom_tensor_destroy(t_w1);
  loom_tensor_destroy(t_b1);
  loom_tensor_destroy(t_w2);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(packed_equals_unpacked);
  TEST_RUN(panels_used_or_ignored);
  TEST_RUN(compiled_frozen_conv);
  return test_summary();
}
