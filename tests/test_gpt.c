/* The GPT example (examples/gpt): the whole graph's gradient against
 * finite differences on a tiny f64 configuration; the first training
 * steps equal through the interpreter and the compiler; a compiled step
 * replayed 50 times without recompiling while the loss falls on a tiny
 * text, after which greedy sampling continues the text; dropout drawing
 * new masks each step through the offset; the error paths. */
#include <string.h>

#include "gpt.h"
#include "grad_check.h"
#include "grad_check.c"
#include "harness.h"

/* A text whose next character is fixed by the one before: a model that
 * learns it predicts it exactly, so its loss falls far and greedy
 * sampling repeats it. */
static const char tiny_text[] = "abcdeabcdeabcdeabcdeabcdeabcdeabcdeabcde";

static void tiny_config(gpt_config_t *c, int64_t vocab) {
  gpt_config_default(c, vocab);
  c->d_model = 8;
  c->n_layers = 1;
  c->n_heads = 2;
  c->seq = 4;
  c->batch = 2;
  c->dropout = 0.2;
}

/* ---- Gradient --------------------------------------------------------------------- */

typedef struct grad_ctx {
  gpt_config_t c;
  int n_params;
} grad_ctx_t;

/* x: the parameters, then tokens and targets. */
static loom_status_t build_loss(loom_graph_t *g, const loom_value_t *x,
                                void *ctx, loom_value_t *loss) {
  grad_ctx_t *k = ctx;
  loom_value_t offset, logits;
  GPT_TRY(loom_full(g, 0, NULL, 3, LOOM_I64, &offset));
  GPT_TRY(gpt_forward(g, &k->c, k->c.batch, x, x[k->n_params], offset, 1, &logits));
  return gpt_loss(g, &k->c, k->c.batch, logits, x[k->n_params + 1], loss);
}

/* Dropout stays on (its masks are fixed by the seed and offset), so the
 * check covers its gradient too; the weights are larger than GPT-2's
 * 0.02 so that every path carries a gradient well above rounding. */
static void test_whole_graph_gradient(void) {
  grad_ctx_t k;
  gpt_param_spec_t specs[GPT_MAX_PARAMS];
  loom_tensor_t *x[GPT_MAX_PARAMS + 2];
  tiny_config(&k.c, 5);
  k.c.dtype = LOOM_F64;
  k.n_params = gpt_param_specs(&k.c, specs);
  test_seed(11);
  for (int i = 0; i < k.n_params; i++) {
    double lo = specs[i].init == 2 ? 0.5 : -0.5, hi = specs[i].init == 2 ? 1.5 : 0.5;
    x[i] = test_rand_tensor(LOOM_F64, specs[i].rank, specs[i].shape, lo, hi);
  }
  int64_t n = k.c.batch * k.c.seq;
  double tokens[8] = {0, 3, 1, 4, 2, 2, 0, 1}, targets[8] = {3, 1, 4, 0, 2, 0, 1, 4};
  x[k.n_params] = test_tensor(LOOM_I32, 2, (int64_t[]){k.c.batch, k.c.seq}, tokens);
  x[k.n_params + 1] = test_tensor(LOOM_I32, 1, &n, targets);
  grad_check_opts_t o;
  grad_check_opts_init(&o);
  o.compile = 0; /* the training tests below compare compiled steps */
  o.atol = 1e-7;
  o.rtol = 1e-5;
  CHECK(grad_check("gpt", k.n_params + 2, x, build_loss, &k, &o));
  for (int i = 0; i < k.n_params + 2; i++) loom_tensor_destroy(x[i]);
}

/* ---- Training ---------------------------------------------------------------------- */

static void tiny_batch(const gpt_text_t *t, int step, int32_t *tokens, int32_t *targets) {
  uint64_t rng = 100 + (uint64_t)step;
  gpt_text_batch(t, 2, 4, &rng, tokens, targets);
}

static void check_same_params(gpt_trainer_t *a, gpt_trainer_t *b) {
  for (int i = 0; i < gpt_trainer_num_params(a); i++) {
    loom_tensor_t *pa = gpt_trainer_param(a, i), *pb = gpt_trainer_param(b, i);
    int64_t n = loom_tensor_numel(pa);
    double want[4096];
    CHECK(n <= 4096);
    for (int64_t j = 0; j < n && j < 4096; j++) want[j] = test_get(pa, j);
    CHECK_TENSOR(pb, want, n, 1e-5, 1e-4);
  }
}

/* Three steps through the interpreter and the compiler give the same
 * losses and parameters; the compiled step then replays 47 more times
 * with no compile, and the loss falls; sampling continues the text. */
static void test_training(void) {
  gpt_text_t text;
  gpt_config_t c;
  gpt_trainer_t *interp = NULL, *comp = NULL;
  int32_t tokens[8], targets[8];
  CHECK_OK(gpt_text_from_string(tiny_text, (int64_t)strlen(tiny_text), &text));
  CHECK(text.vocab == 5);
  tiny_config(&c, text.vocab);
  CHECK_OK(gpt_trainer_create(&c, 0, 0, &interp));
  CHECK_OK(gpt_trainer_create(&c, 1, 0, &comp));
  if (!interp || !comp) goto done;
  float first = 0, last = 0;
  for (int k = 0; k < 3; k++) {
    float li, lc, lr = gpt_lr_at(k, 1e-2f, 3);
    tiny_batch(&text, k, tokens, targets);
    CHECK_OK(gpt_trainer_step(interp, tokens, targets, lr, &li));
    CHECK_OK(gpt_trainer_step(comp, tokens, targets, lr, &lc));
    CHECK_NEAR(lc, li, 1e-5, 1e-4);
    if (k == 0) first = lc;
  }
  check_same_params(interp, comp);
  loom_stats_t before = LOOM_STATS_INIT, after = LOOM_STATS_INIT;
  loom_stats_get(&before);
  for (int k = 3; k < 50; k++) {
    tiny_batch(&text, k, tokens, targets);
    CHECK_OK(gpt_trainer_step(comp, tokens, targets, 1e-2f, &last));
  }
  loom_stats_get(&after);
  CHECK(after.compiles == before.compiles);
  CHECK(after.cc_invocations == before.cc_invocations);
  CHECK(gpt_trainer_offset(comp) == 50);
  /* ln 5 = 1.61 at the start; the text is deterministic after its first
   * character, so a model that learns it goes far below. */
  CHECK_NEAR(first, 1.609, 0.1, 0);
  CHECK(last < 0.5 * first);
  gpt_sampler_t *s = NULL;
  CHECK_OK(gpt_sampler_create(comp, 0, &s));
  int32_t prompt[2] = {0, 1}, out[10];
  if (s) CHECK_OK(gpt_sample(s, prompt, 2, 8, 0, 1, out));
  int32_t want[10] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
  if (s) CHECK(memcmp(out, want, sizeof want) == 0);
  gpt_sampler_destroy(s);
done:
  gpt_trainer_destroy(interp);
  gpt_trainer_destroy(comp);
  gpt_text_free(&text);
}

/* Two steps on one batch at learning rate 0 leave the parameters as they
 * are, so their losses differ only through the dropout masks: they do
 * with dropout (the offset advanced by the step's assign), and do not
 * without. */
static void test_dropout_masks_change(void) {
  gpt_text_t text;
  int32_t tokens[8], targets[8];
  CHECK_OK(gpt_text_from_string(tiny_text, (int64_t)strlen(tiny_text), &text));
  tiny_batch(&text, 0, tokens, targets);
  for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
    gpt_config_t c;
    gpt_trainer_t *t = NULL;
    float l0 = 0, l1 = 0;
    tiny_config(&c, text.vocab);
    c.dropout = with_dropout ? 0.5 : 0;
    CHECK_OK(gpt_trainer_create(&c, 0, 0, &t));
    if (!t) continue;
    CHECK(gpt_trainer_offset(t) == 0);
    CHECK_OK(gpt_trainer_step(t, tokens, targets, 0, &l0));
    CHECK_OK(gpt_trainer_step(t, tokens, targets, 0, &l1));
    CHECK(gpt_trainer_offset(t) == 2);
    if (with_dropout) CHECK(l0 != l1);
    else CHECK_NEAR(l0, l1, 1e-7, 0);
    gpt_trainer_destroy(t);
  }
  gpt_text_free(&text);
}

static void test_schedule_and_errors(void) {
  CHECK_NEAR(gpt_lr_at(0, 1, 4), 0.25, 0, 0);
  CHECK_NEAR(gpt_lr_at(3, 1, 4), 1, 0, 0);
  CHECK_NEAR(gpt_lr_at(100, 1, 4), 1, 0, 0);
  gpt_text_t text;
  CHECK(gpt_text_load("/nonexistent/gpt-text", &text) == LOOM_ERR_IO);
  CHECK(gpt_text_from_string("a", 1, &text) == LOOM_ERR_INVALID);
  gpt_trainer_t *t = NULL;
  CHECK(gpt_trainer_create(NULL, 0, 0, &t) == LOOM_ERR_INVALID);
  gpt_config_t c;
  tiny_config(&c, 5);
  c.n_heads = 3; /* 8 is not a multiple of 3 */
  CHECK(gpt_trainer_create(&c, 0, 0, &t) == LOOM_ERR_INVALID && t == NULL);
  CHECK(gpt_run("/nonexistent/gpt-text", 1, 1, 0, 0) == 1);
}

int main(void) {
  TEST_RUN(test_whole_graph_gradient);
  TEST_RUN(test_training);
  TEST_RUN(test_dropout_masks_change);
  TEST_RUN(test_schedule_and_errors);
  return test_summary();
}
