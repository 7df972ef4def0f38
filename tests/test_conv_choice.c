/* The choice of a conv2d layer's algorithm (conv_choice.c): every
 * candidate a layer lists computes the layer's definition, forward and
 * input gradient, summed here in double; the choice is one of the
 * candidates, kept for the process (one answer for threads that ask at
 * once), the fixed rules' under LOOM_CONV_CHOICE=rules, logged with its
 * GFLOP/s under LOOM_LOG=steps (for a frozen executable's packing, on
 * its own pool's threads), and the rules' when the timings find no
 * memory. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/kernels/conv.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "harness.h"
#include "loom/loom.h"
#include "loom/ops.h"

typedef struct layer {
  int64_t n, c, h, w, o, k, stride, pad, groups;
} layer_t;

/* One of each algorithm's kind of layer. */
static const layer_t layers[] = {
    {2, 3, 12, 12, 8, 5, 1, 2, 1},    /* few output channels: direct */
    {3, 64, 4, 4, 40, 3, 1, 1, 1},    /* small images: batched */
    {2, 16, 20, 20, 24, 3, 1, 1, 1},  /* Winograd, per call */
    {1, 32, 14, 14, 32, 3, 1, 1, 1},  /* Winograd, 49 tiles */
    {1, 3, 30, 30, 16, 7, 2, 3, 1},   /* a stem, stride 2: polyphase direct */
    {2, 12, 10, 9, 26, 3, 2, 1, 2},   /* groups, stride 2: implicit only */
    {2, 16, 11, 11, 16, 3, 2, 1, 16}, /* depthwise, stride 2 */
};

static loom_abi_conv2d_t geometry(const layer_t *q) {
  int64_t ho = (q->h + 2 * q->pad - q->k) / q->stride + 1;
  int64_t wo = (q->w + 2 * q->pad - q->k) / q->stride + 1;
  return (loom_abi_conv2d_t){.n = q->n, .c = q->c, .h = q->h, .w = q->w, .o = q->o,
                             .kh = q->k, .kw = q->k, .ho = ho, .wo = wo,
                             .stride = {q->stride, q->stride},
                             .pads = {q->pad, q->pad, q->pad, q->pad},
                             .dilation = {1, 1}, .groups = q->groups};
}

static float *random_floats(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) p[i] = (float)test_rand_uniform(-1, 1);
  return p;
}

/* Calls f(x index, y index, w index) for every product of d's sum. */
#define FOR_PRODUCTS(d, BODY)                                                             \
  for (int64_t img = 0; img < (d)->n; img++)                                              \
    for (int64_t oc = 0; oc < (d)->o; oc++)                                               \
      for (int64_t ci = 0; ci < (d)->c / (d)->groups; ci++)                               \
        for (int64_t oy = 0; oy < (d)->ho; oy++)                                          \
          for (int64_t ox = 0; ox < (d)->wo; ox++)                                        \
            for (int64_t ky = 0; ky < (d)->kh; ky++)                                      \
              for (int64_t kx = 0; kx < (d)->kw; kx++) {                                  \
                int64_t cg = (d)->c / (d)->groups, g = oc / ((d)->o / (d)->groups);       \
                int64_t iy = oy * (d)->stride[0] - (d)->pads[0] + ky;                     \
                int64_t ix = ox * (d)->stride[1] - (d)->pads[1] + kx;                     \
                if (iy < 0 || iy >= (d)->h || ix < 0 || ix >= (d)->w) continue;           \
                int64_t xi = (((img * (d)->c + g * cg + ci) * (d)->h) + iy) * (d)->w + ix; \
                int64_t yi = (((img * (d)->o + oc) * (d)->ho) + oy) * (d)->wo + ox;       \
                int64_t wi = ((oc * cg + ci) * (d)->kh + ky) * (d)->kw + kx;              \
                BODY;                                                                     \
              }

/* Every candidate of q's layer, forward and input gradient, against the
 * definition in double; each runs on unpacked weights. */
static void check_candidates(const layer_t *q, core_pool_t *pool) {
  loom_abi_conv2d_t d = geometry(q);
  int64_t nx = d.n * d.c * d.h * d.w, ny = d.n * d.o * d.ho * d.wo;
  float *x = random_floats(nx), *w = random_floats(d.o * d.c / d.groups * d.kh * d.kw);
  float *dy = random_floats(ny), *out = malloc(sizeof(float) * (size_t)(nx > ny ? nx : ny));
  double *want_y = calloc((size_t)ny, sizeof(double)), *want_dx = calloc((size_t)nx, sizeof(double));
  FOR_PRODUCTS(&d, {
    want_y[yi] += (double)x[xi] * w[wi];
    want_dx[xi] += (double)dy[yi] * w[wi];
  });
  d.weight = w;
  for (int pass = KERN_CONV_FORWARD; pass <= KERN_CONV_INPUT_GRAD; pass++) {
    kern_conv_algo_t cand[KERN_CONV_N_ALGOS];
    int n = kern_conv2d_candidates(&d, KERN_CONV_FAST, pass, cand);
    CHECK(n >= 1 && cand[0] == KERN_CONV_IMPLICIT);
    for (int i = 0; i < n; i++) {
      int64_t len = pass == KERN_CONV_FORWARD ? ny : nx;
      const double *want = pass == KERN_CONV_FORWARD ? want_y : want_dx;
      for (int64_t j = 0; j < len; j++) out[j] = NAN;
      d.x = pass == KERN_CONV_FORWARD ? x : out;
      d.y = pass == KERN_CONV_FORWARD ? out : dy;
      int ran = pass == KERN_CONV_FORWARD ? kern_conv2d_run(&d, cand[i], pool)
                                          : kern_conv2d_input_grad_run(&d, cand[i], pool);
      CHECK(ran);
      int wrong = 0;
      /* F(4x4) rounds most: up to ~10x a direct sum's error. */
      for (int64_t j = 0; j < len; j++) wrong += !(fabs(out[j] - want[j]) <= 2e-4);
      if (wrong)
        test_fail(__FILE__, __LINE__, "%s, %s, layer n=%lld c=%lld %lldx%lld o=%lld: %d wrong",
                  pass == KERN_CONV_FORWARD ? "forward" : "input grad",
                  kern_conv_algo_name(cand[i], pass), (long long)d.n, (long long)d.c,
                  (long long)d.h, (long long)d.w, (long long)d.o, wrong);
    }
  }
  free(x);
  free(w);
  free(dy);
  free(out);
  free(want_y);
  free(want_dx);
}

static void candidates_compute_the_definition(void) {
  test_seed(3);
  core_pool_t *pool = NULL;
  CHECK_OK(core_pool_create(2, &pool));
  for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
    check_candidates(&layers[i], NULL);
    check_candidates(&layers[i], pool);
  }
  /* The kinds of layer above list what they are there for. */
  kern_conv_algo_t cand[KERN_CONV_N_ALGOS];
  static const kern_conv_algo_t expected[] = {KERN_CONV_DIRECT, KERN_CONV_BATCHED,
                                              KERN_CONV_WINOGRAD2, KERN_CONV_WINOGRAD2,
                                              KERN_CONV_POLYPHASE};
  for (size_t i = 0; i < sizeof expected / sizeof *expected; i++) {
    loom_abi_conv2d_t d = geometry(&layers[i]);
    int n = kern_conv2d_candidates(&d, KERN_CONV_FAST, KERN_CONV_FORWARD, cand), found = 0;
    for (int k = 0; k < n; k++) found |= cand[k] == expected[i];
    CHECK(found);
  }
  core_pool_destroy(pool);
}

static int is_candidate(const loom_abi_conv2d_t *d, kern_conv_mode_t mode, kern_conv_pass_t pass,
                        kern_conv_algo_t algo) {
  kern_conv_algo_t cand[KERN_CONV_N_ALGOS];
  int n = kern_conv2d_candidates(d, mode, pass, cand);
  for (int i = 0; i < n; i++)
    if (cand[i] == algo) return 1;
  return 0;
}

/* Chosen from the candidates, on scratch data (the layer's pointers
 * NULL), and the same answer when asked again. */
static void choice_is_a_candidate_and_kept(void) {
  core_pool_t *pool = NULL;
  CHECK_OK(core_pool_create(2, &pool));
  for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
    loom_abi_conv2d_t d = geometry(&layers[i]);
    for (int pass = KERN_CONV_FORWARD; pass <= KERN_CONV_INPUT_GRAD; pass++)
      for (int packed = 0; packed < 2; packed++) {
        kern_conv_algo_t a = kern_conv2d_algo(&d, KERN_CONV_DEFAULT, pass, packed, pool);
        CHECK(is_candidate(&d, KERN_CONV_DEFAULT, pass, a));
        CHECK(kern_conv2d_algo(&d, KERN_CONV_DEFAULT, pass, packed, pool) == a);
        CHECK(is_candidate(&d, KERN_CONV_PRECISE, pass,
                           kern_conv2d_algo(&d, KERN_CONV_PRECISE, pass, packed, NULL)));
      }
  }
  /* Precise mode never takes Winograd. */
  loom_abi_conv2d_t d = geometry(&layers[2]);
  kern_conv_algo_t a = kern_conv2d_algo(&d, KERN_CONV_PRECISE, KERN_CONV_FORWARD, 0, pool);
  CHECK(a != KERN_CONV_WINOGRAD2 && a != KERN_CONV_WINOGRAD4);
  core_pool_destroy(pool);
}

static void rules_when_asked(void) {
  setenv("LOOM_CONV_CHOICE", "rules", 1);
  for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
    loom_abi_conv2d_t d = geometry(&layers[i]);
    d.n += 7; /* a geometry not timed yet */
    for (int pass = KERN_CONV_FORWARD; pass <= KERN_CONV_INPUT_GRAD; pass++)
      CHECK(kern_conv2d_algo(&d, KERN_CONV_DEFAULT, pass, 0, NULL) ==
            kern_conv2d_algo_by_rules(&d, KERN_CONV_DEFAULT, pass, 0));
  }
  unsetenv("LOOM_CONV_CHOICE");
}

/* Runs fn(arg) with stderr in a file; returns what was written (to
 * free). */
static char *capturing_stderr(void (*fn)(void *), void *arg) {
  test_capture_begin(NULL);
  fn(arg);
  return test_capture_end();
}

typedef struct ask_algo {
  const loom_abi_conv2d_t *d;
  kern_conv_algo_t algo;
} ask_algo_t;

static void ask_algo(void *arg) {
  ask_algo_t *a = arg;
  a->algo = kern_conv2d_algo(a->d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 0, NULL);
}

/* kern_conv2d_algo on d with stderr in a file; returns what was written. */
static char *algo_capturing_stderr(const loom_abi_conv2d_t *d, kern_conv_algo_t *algo) {
  ask_algo_t a = {d, KERN_CONV_IMPLICIT};
  char *text = capturing_stderr(ask_algo, &a);
  *algo = a.algo;
  return text;
}

/* LOOM_LOG=steps shows the layer, the choice and its GFLOP/s, and the
 * candidate it beat; nothing when the choice was made before. */
static void choice_logged(void) {
  setenv("LOOM_LOG", "steps", 1);
  core_log_reload();
  layer_t q = layers[2];
  q.h = q.w = 22; /* not timed yet */
  loom_abi_conv2d_t d = geometry(&q);
  kern_conv_algo_t algo;
  char *text = algo_capturing_stderr(&d, &algo);
  char want[128];
  snprintf(want, sizeof want, "conv2d 2x16x22x22 -> 24, 3x3 stride 1 pads 1 groups 1, 1 thread: %s ",
           kern_conv_algo_name(algo, KERN_CONV_FORWARD));
  if (!text || !strstr(text, want) || !strstr(text, "GFLOP/s (") ||
      !strstr(text, algo == KERN_CONV_IMPLICIT ? "Winograd F(2x2) " : "implicit GEMM "))
    test_fail(__FILE__, __LINE__, "log %s lacks \"%s\"", text ? text : "(none)", want);
  test_checks++;
  free(text);
  text = algo_capturing_stderr(&d, &algo);
  CHECK(text && text[0] == '\0');
  free(text);
  unsetenv("LOOM_LOG");
  core_log_reload();
}

/* A frozen executable on 2 threads packs its conv weights for the
 * algorithm timed on its own pool (not on one thread before the pool
 * exists). */
static void compile_frozen(void *arg) {
  loom_graph_t *g = arg;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = 2;
  o.freeze_params = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  loom_executable_destroy(e);
}

static void frozen_weights_timed_on_the_pool(void) {
  int64_t sx[4] = {2, 16, 26, 26}, sw[4] = {24, 16, 3, 3};
  loom_graph_t *g = NULL;
  loom_value_t x, w, y;
  loom_tensor_t *tw = test_rand_tensor(LOOM_F32, 4, sw, -1, 1);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, sx, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 4, sw, tw, &w));
  loom_conv_params_t p = {.pads = {1, 1, 1, 1}};
  CHECK_OK(loom_conv2d(g, x, w, 0, w, &p, &y));
  CHECK_OK(loom_graph_output(g, y));
  setenv("LOOM_LOG", "steps", 1);
  core_log_reload();
  char *text = capturing_stderr(compile_frozen, g);
  const char *want = "conv2d 2x16x26x26 -> 24, 3x3 stride 1 pads 1 groups 1, 2 threads: ";
  if (!text || !strstr(text, want))
    test_fail(__FILE__, __LINE__, "log %s lacks \"%s\"", text ? text : "(none)", want);
  test_checks++;
  free(text);
  unsetenv("LOOM_LOG");
  core_log_reload();
  loom_tensor_destroy(tw);
  loom_graph_destroy(g);
}

/* No memory for the timings' buffers: the rules choose, and nothing is
 * kept (the next call times the layer). */
static void rules_without_memory(void) {
  layer_t q = layers[2];
  q.h = q.w = 23;
  loom_abi_conv2d_t d = geometry(&q);
  core_alloc_fail_after(0);
  kern_conv_algo_t a = kern_conv2d_algo(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 1, NULL);
  core_alloc_fail_after(-1);
  CHECK(a == kern_conv2d_algo_by_rules(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 1));
  for (int64_t fail = 1; fail < 12; fail++) { /* later allocations fail */
    q.h = q.w = 23 + fail;
    d = geometry(&q);
    core_alloc_fail_after(fail);
    a = kern_conv2d_algo(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 1, NULL);
    core_alloc_fail_after(-1);
    CHECK(is_candidate(&d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, a));
  }
}

/* Threads asking for one new layer at once all get one answer. */
typedef struct asker {
  loom_abi_conv2d_t d;
  kern_conv_algo_t algo;
} asker_t;

static void *ask(void *arg) {
  asker_t *a = arg;
  a->algo = kern_conv2d_algo(&a->d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 0, NULL);
  return NULL;
}

static void threads_agree(void) {
  enum { THREADS = 4 };
  layer_t q = layers[2];
  q.h = q.w = 40;
  pthread_t t[THREADS];
  asker_t a[THREADS];
  for (int i = 0; i < THREADS; i++) {
    a[i].d = geometry(&q);
    CHECK(pthread_create(&t[i], NULL, ask, &a[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  kern_conv_algo_t kept = kern_conv2d_algo(&a[0].d, KERN_CONV_DEFAULT, KERN_CONV_FORWARD, 0, NULL);
  for (int i = 0; i < THREADS; i++) CHECK(a[i].algo == kept);
}

/* A batch of 0 (an exported model run on no images) writes nothing and
 * divides by nothing: every layer's forward and input gradient, by the
 * choice and under each mode, on one thread and on a pool. */
static void empty_batches_compute_nothing(void) {
  core_pool_t *pool = NULL;
  CHECK_OK(core_pool_create(2, &pool));
  float one = 1.0f;
  for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
    loom_abi_conv2d_t d = geometry(&layers[i]);
    d.n = 0;
    float *w = random_floats(d.o * d.c / d.groups * d.kh * d.kw);
    d.x = &one, d.weight = w, d.y = &one;
    for (int p = 0; p < 2; p++) {
      kern_conv2d_f32(&d, KERN_CONV_DEFAULT, p ? pool : NULL);
      d.x = &one, d.y = &one;
      kern_conv2d_input_grad_f32(&d, KERN_CONV_DEFAULT, p ? pool : NULL);
    }
    CHECK(one == 1.0f);
    free(w);
  }
  core_pool_destroy(pool);
}

int main(void) {
  TEST_RUN(empty_batches_compute_nothing);
  TEST_RUN(candidates_compute_the_definition);
  TEST_RUN(choice_is_a_candidate_and_kept);
  TEST_RUN(rules_when_asked);
  TEST_RUN(choice_logged);
  TEST_RUN(frozen_weights_timed_on_the_pool);
  TEST_RUN(rules_without_memory);
  TEST_RUN(threads_agree);
  return test_summary();
}
