/* The finite-difference gradient checker (see grad_check.h). */
#include "grad_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GC_MAX_INPUTS 64

void grad_check_opts_init(grad_check_opts_t *o) {
  o->h = 1e-6;
  o->atol = 1e-6;
  o->rtol = 1e-5;
  o->compile = 1;
}

loom_status_t grad_check_weighted_sum(loom_graph_t *g, loom_value_t y,
                                      loom_value_t *loss) {
  loom_dtype_t dt;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
  loom_status_t s = loom_value_type(g, y, &dt, &rank, dims);
  if (s != LOOM_OK) return s;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return LOOM_ERR_SHAPE; /* symbolic: no constant fits */
    n *= dims[i];
  }
  double *w = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) w[i] = 0.5 + (double)((i * 7) % 11) / 10.0;
  loom_tensor_t *t = test_tensor(dt, rank, dims, w);
  free(w);
  loom_value_t wv, p;
  s = loom_graph_constant(g, t, &wv);
  loom_tensor_destroy(t);
  if (s == LOOM_OK) s = loom_mul(g, y, wv, &p);
  if (s == LOOM_OK) s = loom_sum(g, p, 0, NULL, 0, loss);
  return s;
}

static int differentiable(const loom_tensor_t *t) {
  loom_dtype_t d = loom_tensor_dtype(t);
  return d == LOOM_F32 || d == LOOM_F64;
}

static loom_status_t add_inputs(loom_graph_t *g, int n,
                                loom_tensor_t *const *x, loom_value_t *in) {
  for (int i = 0; i < n; i++) {
    char name[16];
    int64_t dims[LOOM_MAX_RANK];
    for (int d = 0; d < loom_tensor_rank(x[i]); d++)
      dims[d] = loom_tensor_dim(x[i], d);
    snprintf(name, sizeof name, "x%d", i);
    loom_status_t s = loom_graph_input(g, name, loom_tensor_dtype(x[i]),
                                       loom_tensor_rank(x[i]), dims, &in[i]);
    if (s != LOOM_OK) return s;
  }
  return LOOM_OK;
}

/* The graph with outputs loss, then d loss / d x[wrt[k]] for each k. */
static loom_status_t gradient_graph(int n, loom_tensor_t *const *x,
                                    grad_check_build_fn build, void *ctx,
                                    int n_wrt, const int *wrt,
                                    loom_graph_t *g) {
  loom_value_t in[GC_MAX_INPUTS], w[GC_MAX_INPUTS], grads[GC_MAX_INPUTS];
  loom_value_t loss;
  loom_status_t s = add_inputs(g, n, x, in);
  if (s == LOOM_OK) s = build(g, in, ctx, &loss);
  for (int k = 0; k < n_wrt; k++) w[k] = in[wrt[k]];
  if (s == LOOM_OK) s = loom_grad(g, loss, n_wrt, w, grads);
  if (s == LOOM_OK) s = loom_graph_output(g, loss);
  for (int k = 0; s == LOOM_OK && k < n_wrt; k++)
    s = loom_graph_output(g, grads[k]);
  return s;
}

static loom_status_t forward_graph(int n, loom_tensor_t *const *x,
                                   grad_check_build_fn build, void *ctx,
                                   loom_graph_t *g) {
  loom_value_t in[GC_MAX_INPUTS], loss;
  loom_status_t s = add_inputs(g, n, x, in);
  if (s == LOOM_OK) s = build(g, in, ctx, &loss);
  if (s == LOOM_OK) s = loom_graph_output(g, loss);
  return s;
}

static double run_loss(loom_graph_t *f, int n, loom_tensor_t *const *x) {
  loom_tensor_t *out = NULL;
  double v = NAN;
  if (loom_interpret(f, n, x, 1, &out) == LOOM_OK) loom_tensor_get_f64(out, 0, &v);
  loom_tensor_destroy(out);
  return v;
}

/* Element j of a contiguous f32/f64 buffer. */
static double buf_get(const void *b, loom_dtype_t d, int64_t j) {
  return d == LOOM_F64 ? ((const double *)b)[j] : ((const float *)b)[j];
}
static void buf_set(void *b, loom_dtype_t d, int64_t j, double v) {
  if (d == LOOM_F64) ((double *)b)[j] = v;
  else ((float *)b)[j] = (float)v;
}

/* Compares analytic gradient `grad` of input i with central differences,
 * perturbing a contiguous copy of x[i] in xs. */
static int check_input(const char *what, loom_graph_t *f, int n,
                       loom_tensor_t *const *x, int i,
                       const loom_tensor_t *grad,
                       const grad_check_opts_t *o) {
  loom_tensor_t *xs[GC_MAX_INPUTS];
  memcpy(xs, x, sizeof(loom_tensor_t *) * (size_t)n);
  loom_dtype_t d = loom_tensor_dtype(x[i]);
  int64_t numel = loom_tensor_numel(x[i]);
  size_t bytes = (size_t)(numel ? numel : 1) * loom_dtype_size(d);
  void *buf = malloc(bytes);
  int64_t dims[LOOM_MAX_RANK];
  for (int k = 0; k < loom_tensor_rank(x[i]); k++) dims[k] = loom_tensor_dim(x[i], k);
  CHECK_OK(loom_tensor_read(x[i], buf, bytes));
  CHECK_OK(loom_tensor_from_data(d, loom_tensor_rank(x[i]), dims, buf, bytes, &xs[i]));
  int ok = 1;
  for (int64_t j = 0; j < numel && ok; j++) {
    double v = buf_get(buf, d, j), f2[2];
    for (int k = 0; k < 2; k++) {
      buf_set(buf, d, j, v + (k ? -o->h : o->h));
      loom_tensor_write(xs[i], buf, bytes);
      f2[k] = run_loss(f, n, xs);
    }
    buf_set(buf, d, j, v);
    loom_tensor_write(xs[i], buf, bytes);
    double numeric = (f2[0] - f2[1]) / (2 * o->h), analytic = test_get(grad, j);
    test_checks++;
    if (!(fabs(analytic - numeric) <= o->atol + o->rtol * fabs(numeric))) {
      test_fail(__FILE__, __LINE__, "%s: d loss / d x%d[%lld] = %.10g, finite "
                "differences give %.10g", what, i, (long long)j, analytic, numeric);
      ok = 0;
    }
  }
  loom_tensor_destroy(xs[i]);
  free(buf);
  return ok;
}

/* Compiles the gradient graph and checks every output against `want`. */
static int check_compiled(const char *what, loom_graph_t *g, int n,
                          loom_tensor_t *const *x, int n_out,
                          loom_tensor_t *const *want) {
  loom_executable_t *e = NULL;
  loom_tensor_t *got[GC_MAX_INPUTS + 1] = {0};
  loom_status_t s = loom_compile(g, NULL, &e);
  for (int k = 0; s == LOOM_OK && k < n_out; k++)
    s = loom_executable_new_output(e, k, &got[k]);
  if (s == LOOM_OK) s = loom_executable_run(e, n, x, n_out, got);
  test_checks++;
  int ok = s == LOOM_OK;
  if (!ok)
    test_fail(__FILE__, __LINE__, "%s: compiled gradient: %s: %s", what,
              loom_status_name(s), loom_last_error());
  for (int k = 0; ok && k < n_out; k++) {
    double scale = 1;
    for (int64_t j = 0; j < loom_tensor_numel(want[k]); j++)
      if (fabs(test_get(want[k], j)) > scale) scale = fabs(test_get(want[k], j));
    double tol = (loom_tensor_dtype(want[k]) == LOOM_F64 ? 1e-9 : 1e-4) * scale;
    for (int64_t j = 0; ok && j < loom_tensor_numel(want[k]); j++) {
      double a = test_get(got[k], j), b = test_get(want[k], j);
      if (!(fabs(a - b) <= tol) && !(isnan(a) && isnan(b))) {
        test_fail(__FILE__, __LINE__, "%s: compiled output %d[%lld] = %.10g, "
                  "the interpreter gives %.10g", what, k, (long long)j, a, b);
        ok = 0;
      }
    }
  }
  for (int k = 0; k < n_out; k++) loom_tensor_destroy(got[k]);
  loom_executable_destroy(e);
  return ok;
}

int grad_check(const char *what, int n, loom_tensor_t *const *x,
               grad_check_build_fn build, void *ctx,
               const grad_check_opts_t *opts) {
  grad_check_opts_t dflt;
  grad_check_opts_init(&dflt);
  const grad_check_opts_t *o = opts ? opts : &dflt;
  int wrt[GC_MAX_INPUTS], n_wrt = 0, ok = 1;
  if (n > GC_MAX_INPUTS) {
    test_fail(__FILE__, __LINE__, "%s: %d inputs, at most %d", what, n, GC_MAX_INPUTS);
    return 0;
  }
  for (int i = 0; i < n; i++)
    if (differentiable(x[i])) wrt[n_wrt++] = i;
  loom_graph_t *g = NULL, *f = NULL;
  loom_tensor_t *outs[GC_MAX_INPUTS + 1] = {0};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_create(&f));
  loom_status_t s = gradient_graph(n, x, build, ctx, n_wrt, wrt, g);
  if (s == LOOM_OK) s = forward_graph(n, x, build, ctx, f);
  if (s == LOOM_OK) s = loom_interpret(g, n, x, 1 + n_wrt, outs);
  test_checks++;
  if (s != LOOM_OK) {
    test_fail(__FILE__, __LINE__, "%s: %s: %s", what, loom_status_name(s),
              loom_last_error());
    ok = 0;
  }
  for (int k = 0; ok && k < n_wrt; k++)
    ok &= check_input(what, f, n, x, wrt[k], outs[1 + k], o);
  if (ok && o->compile) ok &= check_compiled(what, g, n, x, 1 + n_wrt, outs);
  for (int k = 0; k <= n_wrt; k++) loom_tensor_destroy(outs[k]);
  loom_graph_destroy(g);
  loom_graph_destroy(f);
  return ok;
}
