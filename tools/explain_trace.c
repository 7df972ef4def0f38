/* `loom explain trace`: a small traced program run for a few steps, then
 * the trace's report (loom_trace_explain): graph breaks with their
 * reasons, recompiles with the part of the key that differed, the cache.
 *
 * Each step: x (n tokens, n bucketed) goes through a trained layer
 * h = tanh(x W); whether max(h) > 0.9 picks a branch; nonzero over h > 0
 * makes a size from data; y (m rows, m symbolic) goes through W and a host
 * callback; the loss trains W with AdamW. */
#include <stdio.h>
#include <stdlib.h>

#include "explain_trace.h"
#include "loom/ops.h"
#include "loom/trace.h"

enum { FEATURES = 4, STEPS = 6 };

/* Returns from the function when call fails. */
#define TRY(call)                          \
  do {                                     \
    loom_status_t try_s_ = (call);         \
    if (try_s_ != LOOM_OK) return try_s_;  \
  } while (0)

/* The host callback: out = 0.5 * in, and its backward. */
static loom_status_t halve(void *user, int n_in, const loom_tensor_t *const *in,
                           int n_out, loom_tensor_t *const *out) {
  (void)user, (void)n_in, (void)n_out;
  const float *x = loom_tensor_data(in[0]);
  float *y = loom_tensor_data(out[0]);
  for (int64_t i = 0; i < loom_tensor_numel(in[0]); i++) y[i] = 0.5f * x[i];
  return LOOM_OK;
}

static loom_status_t halve_backward(void *user, int n_in,
                                    const loom_tensor_t *const *in, int n_out,
                                    loom_tensor_t *const *out) {
  (void)user, (void)n_in, (void)n_out; /* in: x, dy; out: dx */
  const float *dy = loom_tensor_data(in[1]);
  float *dx = loom_tensor_data(out[0]);
  for (int64_t i = 0; i < loom_tensor_numel(in[1]); i++) dx[i] = 0.5f * dy[i];
  return LOOM_OK;
}

static const loom_host_op_t halve_op = {"halve", halve, halve_backward, NULL};

/* A tensor of shape (rows, FEATURES) with values in [-1, 1). */
static loom_status_t rows(int64_t n, unsigned *seed, loom_tensor_t **out) {
  int64_t shape[2] = {n, FEATURES};
  loom_status_t s = loom_tensor_create(LOOM_F32, 2, shape, out);
  if (s != LOOM_OK) return s;
  float *d = loom_tensor_data(*out);
  for (int64_t i = 0; i < n * FEATURES; i++) {
    *seed = *seed * 1103515245u + 12345u;
    d[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return LOOM_OK;
}

/* One step of the program over n tokens and m rows. */
static loom_status_t step(loom_trace_t *t, loom_tensor_t *w, loom_tensor_t *x,
                          loom_tensor_t *y) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_dim_policy_t tokens[2] = {{.kind = LOOM_DIM_BUCKET, .name = "tokens"},
                                 {.kind = LOOM_DIM_EXACT}};
  loom_dim_policy_t batch[2] = {{.kind = LOOM_DIM_SYMBOLIC, .name = "batch"},
                                {.kind = LOOM_DIM_EXACT}};
  loom_value_t wv, xv, yv, xw, h, top, limit, high, zero, pos, idx, branch, yw,
      half, sq, a, b, l;
  TRY(loom_trace_param(t, w, &wv));
  TRY(loom_trace_input(t, x, tokens, &xv));
  TRY(loom_trace_input(t, y, batch, &yv));
  TRY(loom_matmul(g, xv, wv, 0, 0, &xw));
  TRY(loom_tanh(g, xw, &h));
  /* a branch on a scalar: the decision joins the path signature */
  TRY(loom_max(g, h, 0, NULL, 0, &top));
  TRY(loom_full(g, 0, NULL, 0.9, LOOM_F32, &limit));
  TRY(loom_gt(g, top, limit, &high));
  int decision = 0;
  TRY(loom_trace_cond(t, high, &decision));
  if (decision) TRY(loom_relu(g, h, &branch));
  else TRY(loom_neg(g, h, &branch));
  /* a data-dependent size: nonzero runs eagerly */
  TRY(loom_full(g, 0, NULL, 0.0, LOOM_F32, &zero));
  TRY(loom_gt(g, h, zero, &pos));
  TRY(loom_nonzero(g, pos, &idx));
  /* a host callback on the symbolic batch: its output is real, exact */
  TRY(loom_matmul(g, yv, wv, 0, 0, &yw));
  int rank = 2;
  int64_t shape[LOOM_MAX_RANK];
  TRY(loom_trace_shape(t, yw, &rank, shape));
  const loom_dtype_t f32 = LOOM_F32;
  const int64_t *shapes[1] = {shape};
  TRY(loom_trace_call(t, &halve_op, 1, &yw, 1, &f32, &rank, shapes, &half));
  TRY(loom_mul(g, half, half, &sq));
  TRY(loom_mean(g, sq, 0, NULL, 0, &a));
  TRY(loom_mean(g, branch, 0, NULL, 0, &b));
  TRY(loom_add(g, a, b, &l));
  TRY(loom_trace_backward(t, l));
  TRY(loom_trace_adamw(t, 0.01, 0.9, 0.999, 1e-8, 0.0));
  return loom_trace_step_end(t);
}

static loom_status_t run(loom_trace_t *t, char **report) {
  static const int64_t tokens[STEPS] = {5, 7, 12, 6, 20, 13};
  static const int64_t batch[STEPS] = {3, 3, 9, 3, 9, 3};
  unsigned seed = 7;
  loom_tensor_t *w = NULL;
  loom_status_t s = rows(FEATURES, &seed, &w);
  for (int k = 0; k < STEPS && s == LOOM_OK; k++) {
    loom_tensor_t *x = NULL, *y = NULL;
    s = rows(tokens[k], &seed, &x);
    if (s == LOOM_OK) s = rows(batch[k], &seed, &y);
    if (s == LOOM_OK) s = step(t, w, x, y);
    if (s != LOOM_OK) loom_trace_step_end(t);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  if (s == LOOM_OK) s = loom_trace_explain(t, report);
  loom_tensor_destroy(w);
  return s;
}

int loom_explain_trace_main(void) {
  printf("A traced program, %d steps: tokens 5, 7, 12, 6, 20, 13 (bucketed: "
         "powers of two); batch 3, 3, 9, 3, 9, 3 (symbolic); a host callback, "
         "a nonzero, a branch on a scalar, a backward and AdamW each step.\n\n",
         STEPS);
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0; /* compiles only what runs: the report is repeatable */
  loom_trace_t *t = NULL;
  char *report = NULL;
  loom_status_t s = loom_trace_create(&o, &t);
  if (s == LOOM_OK) s = run(t, &report);
  if (s == LOOM_OK) fputs(report, stdout);
  else fprintf(stderr, "loom explain trace: %s: %s\n", loom_status_name(s), loom_last_error());
  loom_free(report);
  loom_trace_destroy(t);
  return s == LOOM_OK ? 0 : 1;
}
