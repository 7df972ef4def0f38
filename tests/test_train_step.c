/* The training step as one executable (issue 4, item 4): forward, loss,
 * loom_grad and AdamW compiled once and replayed 100 times with a new
 * learning rate each step, for the example MLP and LeNet and a small
 * Transformer block built here. Each replay must compile nothing, run no
 * C compiler and allocate nothing; the first steps must match the
 * interpreter; activations saved for the backward pass live in the one
 * planned arena. Dropout draws a new mask each step through an offset
 * parameter that an assign increments; batch norm in training mode
 * updates its running statistics through assigns. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/train.h"
#include "layers.h"
#include "models.h"

#define STEPS 100
#define MAX_PARAMS 64

/* ---- Counting heap allocations ---------------------------------------------
 * Outside AddressSanitizer (which owns malloc), the test's own malloc,
 * calloc and realloc count every call of the process, threads and
 * generated modules included, and forward to glibc. aligned_alloc is not
 * counted; mallinfo2 catches any block it leaves behind. */
#if defined(__SANITIZE_ADDRESS__)
#define COUNTS_ALLOCS 0
static long alloc_count(void) { return 0; }
#else
#define COUNTS_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
static _Atomic long n_allocs;
void *malloc(size_t n) {
  n_allocs++;
  return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
  n_allocs++;
  return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
  n_allocs++;
  return __libc_realloc(p, n);
}
static long alloc_count(void) { return atomic_load(&n_allocs); }
#endif

/* ---- A training step ---------------------------------------------------------- */

typedef loom_status_t (*model_fn_t)(loom_graph_t *g, loom_value_t *logits);

typedef struct step {
  loom_graph_t *g;
  int n_params;
  loom_value_t params[MAX_PARAMS];
  int n_in, n_out;
  loom_tensor_t *in[4];  /* the model's inputs, labels, lr */
  loom_tensor_t *out[2]; /* loss, and an extra output (a dropout mask) */
  loom_value_t extra;    /* set by a builder that wants a second output */
  loom_value_t offset;   /* the dropout offset parameter, if any */
  int has_extra;
  unsigned char mask_mem[1024]; /* a dropout mask and its guard band */
} step_t;

/* Every parameter of g, into out (at most max): value ids are dense from 0. */
static int params_of(loom_graph_t *g, loom_value_t *out, int max) {
  int n = 0;
  for (int32_t id = 0; n < max; id++) {
    loom_value_t v = {id};
    loom_tensor_t *t;
    if (loom_value_type(g, v, NULL, NULL, NULL) != LOOM_OK) break;
    if (loom_graph_param_tensor(g, v, &t) == LOOM_OK) out[n++] = v;
  }
  return n;
}

static void collect_params(step_t *s) { s->n_params = params_of(s->g, s->params, MAX_PARAMS); }

/* Random inputs for each model input (in order) and labels in [0, 10). */
static void make_inputs(step_t *s, int64_t batch, int n_classes) {
  int n_model_inputs = loom_graph_num_inputs(s->g);
  for (int i = 0; i < n_model_inputs; i++) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    CHECK_OK(loom_value_type(s->g, (loom_value_t){i}, &dt, &rank, dims));
    s->in[s->n_in++] = test_rand_tensor(dt, rank, dims, -1, 1);
  }
  double labels[64];
  for (int64_t i = 0; i < batch; i++) labels[i] = (double)test_rand_int(0, n_classes - 1);
  s->in[s->n_in++] = test_tensor(LOOM_I64, 1, &batch, labels);
  CHECK_OK(loom_tensor_create(LOOM_F32, 0, NULL, &s->in[s->n_in++]));
}

/* Model, cross-entropy, gradients of every parameter, AdamW. */
static int build_step(step_t *s, model_fn_t model, int64_t batch, int n_classes) {
  int failures = test_failures;
  memset(s, 0, sizeof *s);
  test_seed(7);
  loom_value_t logits, labels, lr, loss, grads[MAX_PARAMS];
  CHECK_OK(loom_graph_create(&s->g));
  CHECK_OK(model(s->g, &logits));
  collect_params(s);
  /* The offset counter is state, not something to train. */
  int n_trained = 0;
  for (int i = 0; i < s->n_params; i++) {
    loom_dtype_t dt;
    CHECK_OK(loom_value_type(s->g, s->params[i], &dt, NULL, NULL));
    if (dt != LOOM_I64) s->params[n_trained++] = s->params[i];
  }
  s->n_params = n_trained;
  make_inputs(s, batch, n_classes);
  CHECK_OK(loom_graph_input(s->g, "y", LOOM_I64, 1, &batch, &labels));
  CHECK_OK(loom_graph_input(s->g, "lr", LOOM_F32, 0, NULL, &lr));
  CHECK_OK(loom_cross_entropy(s->g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                              LOOM_REDUCTION_MEAN, &loss));
  CHECK_OK(loom_graph_output(s->g, loss));
  CHECK_OK(loom_grad(s->g, loss, s->n_params, s->params, grads));
  CHECK_OK(loom_adamw(s->g, s->n_params, s->params, grads, lr, 0.9, 0.999, 1e-8, 0.01));
  s->n_out = 1;
  CHECK_OK(loom_tensor_create(LOOM_F32, 0, NULL, &s->out[0]));
  if (s->has_extra) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    CHECK_OK(loom_graph_output(s->g, s->extra));
    CHECK_OK(loom_value_type(s->g, s->extra, &dt, &rank, dims));
    CHECK_OK(loom_tensor_create(dt, rank, dims, &s->out[s->n_out++]));
  }
  return test_failures == failures;
}

static void destroy_step(step_t *s) {
  for (int i = 0; i < s->n_in; i++) loom_tensor_destroy(s->in[i]);
  for (int i = 0; i < s->n_out; i++) loom_tensor_destroy(s->out[i]);
  loom_graph_destroy(s->g);
}

/* A warm-up schedule: new lr every step, no recompile. */
static void set_lr(step_t *s, int k) {
  float lr = 1e-3f * (float)fmin(1.0, (k + 1) / 5.0);
  CHECK_OK(loom_tensor_write(s->in[s->n_in - 1], &lr, sizeof lr));
}

static void interpret_step(step_t *s, int k) {
  set_lr(s, k);
  loom_tensor_t *out[2] = {NULL, NULL};
  CHECK_OK(loom_interpret(s->g, s->n_in, s->in, s->n_out, out));
  for (int i = 0; i < s->n_out; i++) {
    if (out[i]) {
      size_t bytes = (size_t)loom_tensor_numel(out[i]) * loom_dtype_size(loom_tensor_dtype(out[i]));
      CHECK_OK(loom_tensor_write(s->out[i], loom_tensor_data(out[i]), bytes));
    }
    loom_tensor_destroy(out[i]);
  }
}

/* The parameters of a and b (built alike) agree within atol + rtol|b|. */
static void check_same_params(step_t *a, step_t *b, double atol, double rtol) {
  CHECK(a->n_params == b->n_params);
  double worst = 0, wa = 0, wb = 0;
  for (int i = 0; i < a->n_params && i < b->n_params; i++) {
    loom_tensor_t *ta, *tb;
    CHECK_OK(loom_graph_param_tensor(a->g, a->params[i], &ta));
    CHECK_OK(loom_graph_param_tensor(b->g, b->params[i], &tb));
    for (int64_t j = 0; j < loom_tensor_numel(ta); j++) {
      double x = test_get(ta, j), y = test_get(tb, j);
      double excess = fabs(x - y) / (atol + rtol * fabs(y));
      if (excess > worst) worst = excess, wa = x, wb = y;
    }
  }
  CHECK_NEAR(wa, wb, atol, rtol);
}

/* The memory plan: everything saved for backward shares one arena. */
static void check_plan(loom_executable_t *e, const char *name) {
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(!info.interpreted);
  CHECK(info.arena_bytes >= info.lower_bound_bytes);
  CHECK(info.arena_bytes <= info.lower_bound_bytes + info.lower_bound_bytes / 10);
  CHECK(info.arena_bytes < info.naive_bytes);
  printf("  %s step: %d nodes, %d steps (%d generated, %d reference), arena %lld B, "
         "lower bound %lld B, naive %lld B\n",
         name, info.n_nodes, info.n_groups, info.n_generated, info.n_reference,
         (long long)info.arena_bytes, (long long)info.lower_bound_bytes,
         (long long)info.naive_bytes);
}

/* The first runs of a multi-threaded executable time its steps on the
 * pool and alone (src/backend/cpu/cpu_launch.c); a step's first run
 * alone may grow the kernels' scratch. */
enum { TIMED_RUNS = 7 };

/* Replays STEPS compiled steps: no compile, no cc, no allocation once
 * the timed runs are over; the loss on the fixed batch falls. */
static void check_replay(step_t *s, loom_executable_t *e, int first_step, int known_allocs) {
  double first = test_get(s->out[0], 0);
  for (int k = first_step; k < first_step + TIMED_RUNS; k++) {
    set_lr(s, k);
    CHECK_OK(loom_executable_run(e, s->n_in, s->in, s->n_out, s->out));
  }
  loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
  loom_stats_get(&before);
  struct mallinfo2 m0 = mallinfo2();
  long allocs = alloc_count();
  for (int k = first_step + TIMED_RUNS; k < STEPS; k++) {
    set_lr(s, k);
    CHECK_OK(loom_executable_run(e, s->n_in, s->in, s->n_out, s->out));
  }
  long replay_allocs = alloc_count() - allocs;
  struct mallinfo2 m1 = mallinfo2();
  loom_stats_get(&after);
  CHECK(after.compiles == before.compiles);
  CHECK(after.cc_invocations == before.cc_invocations);
  if (replay_allocs) printf("  %ld allocations in %d replays%s\n", replay_allocs,
                            STEPS - first_step - TIMED_RUNS,
                            known_allocs ? " (known, see below)" : "");
  if (!known_allocs) {
    CHECK(replay_allocs == 0);
    CHECK(m1.uordblks == m0.uordblks && m1.hblkhd == m0.hblkhd);
  }
  double last = test_get(s->out[0], 0);
  CHECK(isfinite(last) && last < first);
}

/* a interpreted, b compiled: the first steps agree; then b replays. */
static void train_both(model_fn_t model, const char *name, int64_t batch, int n_classes,
                       int n_first, int known_allocs) {
  step_t a, b;
  int ok_a = build_step(&a, model, batch, n_classes);
  int ok_b = build_step(&b, model, batch, n_classes);
  if (!ok_a || !ok_b) {
    destroy_step(&a);
    destroy_step(&b);
    return;
  }
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(b.g, NULL, &e));
  if (e) {
    check_plan(e, name);
    for (int k = 0; k < n_first; k++) {
      interpret_step(&a, k);
      set_lr(&b, k);
      CHECK_OK(loom_executable_run(e, b.n_in, b.in, b.n_out, b.out));
      CHECK_NEAR(test_get(b.out[0], 0), test_get(a.out[0], 0), 1e-5, 1e-4);
    }
    check_same_params(&a, &b, 1e-5, 1e-3);
    check_replay(&b, e, n_first, known_allocs);
    loom_executable_destroy(e);
  }
  destroy_step(&a);
  destroy_step(&b);
}

/* ---- The models ---------------------------------------------------------------- */

static loom_status_t mlp4(loom_graph_t *g, loom_value_t *logits) {
  return model_mlp(g, 4, logits);
}
static loom_status_t lenet2(loom_graph_t *g, loom_value_t *logits) {
  return model_lenet(g, 2, logits);
}

static void test_mlp_step(void) { train_both(mlp4, "MLP 784-512-512-10 batch 4", 4, 10, 2, 0); }
/* LeNet's backward runs reference steps whose kernels need scratch: the
 * executable lends each its own, allocated on the first run only. */
static void test_lenet_step(void) { train_both(lenet2, "LeNet batch 2", 2, 10, 2, 0); }

/* ---- A Transformer block with dropout --------------------------------------------- */

enum { TB = 2, TS = 4, TD = 8, TH = 2, TDH = TD / TH, TFF = 16, TCLASSES = 4 };

/* The block's dropout reports here (one block per graph). */
static step_t *block_step;

static loom_status_t heads(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  loom_value_t r;
  MODEL_TRY(loom_reshape(g, x, 4, (loom_dim_t[]){TB, TS, TH, TDH}, &r));
  return loom_transpose(g, r, (int64_t[]){0, 2, 1, 3}, y);
}

static loom_status_t attention(loom_graph_t *g, loom_value_t x, loom_value_t *y) {
  loom_value_t q, k, v, qh, kh, vh, scores, scale, probs, ctx, ctx_t, merged;
  MODEL_TRY(layer_linear(g, "attn.q", x, TD, TD, &q));
  /* No key bias: softmax over keys cancels it, so its gradient is zero up
   * to rounding noise, which Adam would blow up to steps of size lr. */
  loom_value_t wk;
  int64_t wk_shape[2] = {TD, TD};
  MODEL_TRY(layer_param(g, "attn.k", "weight", 2, wk_shape, sqrt(6.0 / TD), &wk));
  MODEL_TRY(loom_matmul(g, x, wk, 0, 1, &k));
  MODEL_TRY(layer_linear(g, "attn.v", x, TD, TD, &v));
  MODEL_TRY(heads(g, q, &qh));
  MODEL_TRY(heads(g, k, &kh));
  MODEL_TRY(heads(g, v, &vh));
  MODEL_TRY(loom_matmul(g, qh, kh, 0, 1, &scores));
  MODEL_TRY(layer_scalar(g, (float)(1.0 / sqrt(TDH)), &scale));
  MODEL_TRY(loom_mul(g, scores, scale, &scores));
  MODEL_TRY(loom_softmax(g, scores, -1, &probs));
  MODEL_TRY(loom_matmul(g, probs, vh, 0, 0, &ctx));
  MODEL_TRY(loom_transpose(g, ctx, (int64_t[]){0, 2, 1, 3}, &ctx_t));
  MODEL_TRY(loom_reshape(g, ctx_t, 3, (loom_dim_t[]){TB, TS, TD}, &merged));
  return layer_linear(g, "attn.out", merged, TD, TD, y);
}

/* Dropout whose offset parameter advances by one each run. */
static loom_status_t dropout(loom_graph_t *g, loom_value_t x, double p, loom_value_t *y) {
  loom_value_t seed, offset, one, next, mask;
  int64_t seed_v = 1234, one_v = 1;
  loom_tensor_t *t;
  MODEL_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &seed_v, 8, &t));
  loom_status_t s = loom_graph_constant(g, t, &seed);
  loom_tensor_destroy(t);
  MODEL_TRY(s);
  MODEL_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &one_v, 8, &t));
  s = loom_graph_constant(g, t, &one);
  loom_tensor_destroy(t);
  MODEL_TRY(s);
  MODEL_TRY(loom_graph_param(g, "dropout.offset", LOOM_I64, 0, NULL, NULL, &offset));
  MODEL_TRY(loom_dropout(g, x, seed, offset, p, y, &mask));
  MODEL_TRY(loom_add(g, offset, one, &next));
  MODEL_TRY(loom_assign(g, offset, next));
  block_step->extra = mask;
  block_step->offset = offset;
  block_step->has_extra = 1;
  return LOOM_OK;
}

/* Pre-LN block: x + drop(attn(ln1(x))), then + mlp(ln2(.)) with GELU;
 * mean over the sequence; a linear head. */
static loom_status_t block(loom_graph_t *g, loom_value_t *logits) {
  loom_value_t x, h, a, d, r1, h2, f1, act, f2, r2, pooled;
  MODEL_TRY(loom_graph_input(g, "x", LOOM_F32, 3, (loom_dim_t[]){TB, TS, TD}, &x));
  MODEL_TRY(layer_layer_norm(g, "ln1", x, TD, &h));
  MODEL_TRY(attention(g, h, &a));
  MODEL_TRY(dropout(g, a, 0.25, &d));
  MODEL_TRY(loom_add(g, x, d, &r1));
  MODEL_TRY(layer_layer_norm(g, "ln2", r1, TD, &h2));
  MODEL_TRY(layer_linear(g, "mlp.fc1", h2, TD, TFF, &f1));
  MODEL_TRY(loom_gelu(g, f1, &act));
  MODEL_TRY(layer_linear(g, "mlp.fc2", act, TFF, TD, &f2));
  MODEL_TRY(loom_add(g, r1, f2, &r2));
  MODEL_TRY(loom_mean(g, r2, 1, (int64_t[]){1}, 0, &pooled));
  return layer_linear(g, "head", pooled, TD, TCLASSES, logits);
}

static int build_block(step_t *s) {
  int failures = test_failures;
  /* build_step clears s before the model runs: the hook fills it after. */
  step_t tmp;
  block_step = &tmp;
  memset(&tmp, 0, sizeof tmp);
  memset(s, 0, sizeof *s);
  loom_value_t logits, labels, lr, loss, grads[MAX_PARAMS];
  test_seed(9);
  CHECK_OK(loom_graph_create(&s->g));
  CHECK_OK(block(s->g, &logits));
  s->extra = tmp.extra;
  s->offset = tmp.offset;
  s->has_extra = 1;
  collect_params(s);
  int n_trained = 0;
  for (int i = 0; i < s->n_params; i++)
    if (s->params[i].id != s->offset.id) s->params[n_trained++] = s->params[i];
  s->n_params = n_trained;
  make_inputs(s, TB, TCLASSES);
  CHECK_OK(loom_graph_input(s->g, "y", LOOM_I64, 1, (int64_t[]){TB}, &labels));
  CHECK_OK(loom_graph_input(s->g, "lr", LOOM_F32, 0, NULL, &lr));
  CHECK_OK(loom_cross_entropy(s->g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                              LOOM_REDUCTION_MEAN, &loss));
  CHECK_OK(loom_graph_output(s->g, loss));
  CHECK_OK(loom_graph_output(s->g, s->extra));
  CHECK_OK(loom_grad(s->g, loss, s->n_params, s->params, grads));
  CHECK_OK(loom_adamw(s->g, s->n_params, s->params, grads, lr, 0.9, 0.999, 1e-8, 0.01));
  s->n_out = 2;
  CHECK_OK(loom_tensor_create(LOOM_F32, 0, NULL, &s->out[0]));
  /* The mask lands in user memory followed by a guard band that no
   * kernel may touch. */
  memset(s->mask_mem, 0x5a, sizeof s->mask_mem);
  CHECK_OK(loom_tensor_wrap(LOOM_BOOL, 3, (int64_t[]){TB, TS, TD}, NULL, s->mask_mem,
                            &s->out[1]));
  return test_failures == failures;
}

static int64_t offset_of(step_t *s) {
  loom_tensor_t *t;
  CHECK_OK(loom_graph_param_tensor(s->g, s->offset, &t));
  return (int64_t)test_get(t, 0);
}

static void set_offset(step_t *s, int64_t v) {
  loom_tensor_t *t;
  CHECK_OK(loom_graph_param_tensor(s->g, s->offset, &t));
  CHECK_OK(loom_tensor_write(t, &v, sizeof v));
}

enum { MASK_N = TB * TS * TD };

static void read_mask(step_t *s, bool *mask) {
  CHECK_OK(loom_tensor_read(s->out[1], mask, MASK_N));
}

/* Interpreted and compiled steps agree (masks included); masks change
 * each step, the offset counts the steps, and the same offset draws the
 * same mask again. */
static void test_transformer_block_step(void) {
  step_t a, b;
  int ok_a = build_block(&a), ok_b = build_block(&b), ok = ok_a && ok_b;
  loom_executable_t *e = NULL;
  if (ok) CHECK_OK(loom_compile(b.g, NULL, &e));
  if (e) {
    check_plan(e, "Transformer block");
    bool first[MASK_N], ma[MASK_N], mb[MASK_N];
    for (int k = 0; k < 3; k++) {
      interpret_step(&a, k);
      set_lr(&b, k);
      CHECK_OK(loom_executable_run(e, b.n_in, b.in, b.n_out, b.out));
      CHECK_NEAR(test_get(b.out[0], 0), test_get(a.out[0], 0), 1e-5, 1e-4);
      read_mask(&a, ma);
      read_mask(&b, mb);
      CHECK(memcmp(ma, mb, sizeof ma) == 0);
      if (k == 0) memcpy(first, mb, sizeof first);
      else CHECK(memcmp(first, mb, sizeof first) != 0);
      CHECK(offset_of(&b) == k + 1);
    }
    check_same_params(&a, &b, 1e-5, 1e-3);
    check_replay(&b, e, 3, 0);
    CHECK(offset_of(&b) == STEPS);
    /* About 1 - p of the elements kept. */
    int kept = 0;
    read_mask(&b, mb);
    for (int i = 0; i < MASK_N; i++) kept += mb[i];
    CHECK(kept > MASK_N / 2 && kept < MASK_N);
    set_offset(&b, 0);
    set_lr(&b, 0);
    CHECK_OK(loom_executable_run(e, b.n_in, b.in, b.n_out, b.out));
    read_mask(&b, mb);
    CHECK(memcmp(first, mb, sizeof first) == 0);
    int guard_ok = 1;
    for (size_t i = MASK_N; i < sizeof b.mask_mem; i++) guard_ok &= b.mask_mem[i] == 0x5a;
    CHECK(guard_ok);
    loom_executable_destroy(e);
  }
  destroy_step(&a);
  destroy_step(&b);
}

/* ---- Batch norm in training mode ------------------------------------------------- */

enum { BN_N = 4, BN_C = 3, BN_HW = 4, BN_COUNT = BN_N * BN_HW };
#define BN_MOMENTUM 0.1

typedef struct bn_step {
  loom_graph_t *g;
  loom_value_t mean, var;
  loom_tensor_t *in[3], *loss;
} bn_step_t;

/* x (4, 3, 2, 2) -> batch norm (training) -> global average pool ->
 * linear to 3 -> cross-entropy; AdamW on scale, shift and the linear. */
static void build_bn(bn_step_t *s, const double *xv) {
  loom_value_t x, y, lr, scale, shift, bn, new_mean, new_var, pooled, flat, logits, loss;
  loom_value_t params[4], grads[4];
  int64_t xs[4] = {BN_N, BN_C, 2, 2}, n = BN_N;
  double labels[BN_N] = {0, 1, 2, 1};
  CHECK_OK(loom_graph_create(&s->g));
  CHECK_OK(loom_graph_input(s->g, "x", LOOM_F32, 4, xs, &x));
  CHECK_OK(loom_graph_input(s->g, "y", LOOM_I64, 1, &n, &y));
  CHECK_OK(loom_graph_input(s->g, "lr", LOOM_F32, 0, NULL, &lr));
  CHECK_OK(layer_param_fill(s->g, "bn", "weight", BN_C, 1, &scale));
  CHECK_OK(layer_param_fill(s->g, "bn", "bias", BN_C, 0, &shift));
  CHECK_OK(layer_param_fill(s->g, "bn", "running_mean", BN_C, 0, &s->mean));
  CHECK_OK(layer_param_fill(s->g, "bn", "running_var", BN_C, 1, &s->var));
  CHECK_OK(loom_batch_norm(s->g, x, scale, shift, s->mean, s->var, 1e-5, BN_MOMENTUM, 1,
                           &bn, &new_mean, &new_var));
  CHECK_OK(loom_assign(s->g, s->mean, new_mean));
  CHECK_OK(loom_assign(s->g, s->var, new_var));
  CHECK_OK(loom_global_avg_pool(s->g, bn, &pooled));
  CHECK_OK(loom_reshape(s->g, pooled, 2, (loom_dim_t[]){BN_N, BN_C}, &flat));
  CHECK_OK(layer_linear(s->g, "fc", flat, BN_C, 3, &logits));
  CHECK_OK(loom_cross_entropy(s->g, logits, y, LOOM_NO_IGNORE_INDEX, 0, LOOM_REDUCTION_MEAN,
                              &loss));
  CHECK_OK(loom_graph_output(s->g, loss));
  /* Every parameter but the running statistics. */
  loom_value_t all[8];
  int n_all = params_of(s->g, all, 8), n_params = 0;
  for (int i = 0; i < n_all; i++)
    if (all[i].id != s->mean.id && all[i].id != s->var.id && n_params < 4)
      params[n_params++] = all[i];
  CHECK(n_params == 4);
  CHECK_OK(loom_grad(s->g, loss, 4, params, grads));
  CHECK_OK(loom_adamw(s->g, 4, params, grads, lr, 0.9, 0.999, 1e-8, 0));
  s->in[0] = test_tensor(LOOM_F32, 4, xs, xv);
  s->in[1] = test_tensor(LOOM_I64, 1, &n, labels);
  float lrv = 0.01f;
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 0, NULL, &lrv, sizeof lrv, &s->in[2]));
  CHECK_OK(loom_tensor_create(LOOM_F32, 0, NULL, &s->loss));
}

static void destroy_bn(bn_step_t *s) {
  for (int i = 0; i < 3; i++) loom_tensor_destroy(s->in[i]);
  loom_tensor_destroy(s->loss);
  loom_graph_destroy(s->g);
}

/* After k steps on the same batch: running = (1-m)^k * start +
 * (1 - (1-m)^k) * batch statistic (the variance unbiased). */
static void check_running(bn_step_t *s, const double *xv, int k) {
  double want_mean[BN_C], want_var[BN_C], decay = pow(1 - BN_MOMENTUM, k);
  for (int c = 0; c < BN_C; c++) {
    double sum = 0, sq = 0;
    for (int i = 0; i < BN_N; i++)
      for (int j = 0; j < BN_HW; j++) sum += (float)xv[(i * BN_C + c) * BN_HW + j];
    double mu = sum / BN_COUNT;
    for (int i = 0; i < BN_N; i++)
      for (int j = 0; j < BN_HW; j++) {
        double dx = (float)xv[(i * BN_C + c) * BN_HW + j] - mu;
        sq += dx * dx;
      }
    want_mean[c] = (1 - decay) * mu;
    want_var[c] = decay * 1.0 + (1 - decay) * sq / (BN_COUNT - 1);
  }
  loom_tensor_t *m, *v;
  CHECK_OK(loom_graph_param_tensor(s->g, s->mean, &m));
  CHECK_OK(loom_graph_param_tensor(s->g, s->var, &v));
  CHECK_TENSOR(m, want_mean, BN_C, 1e-6, 1e-5);
  CHECK_TENSOR(v, want_var, BN_C, 1e-6, 1e-5);
}

static void test_batch_norm_running_stats(void) {
  double xv[BN_N * BN_C * BN_HW];
  test_seed(21);
  for (int i = 0; i < BN_N * BN_C * BN_HW; i++)
    xv[i] = test_rand_uniform(-2, 2) + (i / BN_HW) % BN_C; /* channel c centred near c */
  bn_step_t a, b;
  build_bn(&a, xv);
  build_bn(&b, xv);
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(b.g, NULL, &e));
  if (e) {
    for (int k = 1; k <= 2; k++) {
      loom_tensor_t *out = NULL;
      CHECK_OK(loom_interpret(a.g, 3, a.in, 1, &out));
      CHECK_OK(loom_executable_run(e, 3, b.in, 1, &b.loss));
      if (out) CHECK_NEAR(test_get(b.loss, 0), test_get(out, 0), 1e-6, 1e-5);
      loom_tensor_destroy(out);
      check_running(&a, xv, k);
      check_running(&b, xv, k);
    }
    loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
    loom_stats_get(&before);
    long allocs = alloc_count();
    for (int k = 2; k < STEPS; k++) CHECK_OK(loom_executable_run(e, 3, b.in, 1, &b.loss));
    loom_stats_get(&after);
    CHECK(after.compiles == before.compiles);
    CHECK(alloc_count() == allocs);
    check_running(&b, xv, STEPS);
    loom_executable_destroy(e);
  }
  destroy_bn(&a);
  destroy_bn(&b);
}

int main(void) {
  if (!COUNTS_ALLOCS) printf("  (allocations not counted under AddressSanitizer)\n");
  TEST_RUN(test_mlp_step);
  TEST_RUN(test_lenet_step);
  TEST_RUN(test_transformer_block_step);
  TEST_RUN(test_batch_norm_running_stats);
  return test_summary();
}
