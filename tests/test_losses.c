/* Losses: cross-entropy (ignore_index, label smoothing, reductions), MSE
 * and BCE with logits against hand-computed values and PyTorch's
 * formulas, in every float dtype, through the interpreter and the
 * compiler (test_run1); a strided input; and the error paths. */
#include <string.h>

#include "harness.h"

static const loom_dtype_t floats[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_BF16};
#define NFLOATS 4

static loom_value_t input_like(loom_graph_t *g, const char *name,
                               const loom_tensor_t *t) {
  int64_t dims[LOOM_MAX_RANK];
  loom_value_t v = {-1};
  for (int i = 0; i < loom_tensor_rank(t); i++) dims[i] = loom_tensor_dim(t, i);
  CHECK_OK(loom_graph_input(g, name, loom_tensor_dtype(t), loom_tensor_rank(t), dims, &v));
  return v;
}

/* ---- Cross-entropy ------------------------------------------------------- */

/* Logits (2, 3) and their row logsumexps, by hand. */
static const double ce_x[6] = {1, 2, 3, 1, 1, 1};
static double lse0(void) { return 3 + log(1 + exp(-1) + exp(-2)); }
static double lse1(void) { return 1 + log(3.0); }

typedef struct ce_case {
  int64_t ignore;
  double smoothing;
  loom_reduction_t reduction;
} ce_case_t;

static loom_tensor_t *run_ce(loom_tensor_t *x, loom_tensor_t *y, ce_case_t c) {
  loom_graph_t *g;
  loom_value_t loss;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t vx = input_like(g, "logits", x), vy = input_like(g, "labels", y);
  CHECK_OK(loom_cross_entropy(g, vx, vy, c.ignore, c.smoothing, c.reduction, &loss));
  CHECK_OK(loom_graph_output(g, loss));
  loom_tensor_t *in[2] = {x, y};
  loom_tensor_t *out = test_run1(g, 2, in);
  loom_graph_destroy(g);
  return out;
}

static void check_ce(loom_dtype_t dt, loom_dtype_t lt, const double *labels,
                     ce_case_t c, const double *want, int n) {
  int64_t xs[2] = {2, 3}, ys[1] = {2};
  loom_tensor_t *x = test_tensor(dt, 2, xs, ce_x), *y = test_tensor(lt, 1, ys, labels);
  loom_tensor_t *out = run_ce(x, y, c);
  if (out) {
    CHECK(loom_tensor_numel(out) == n);
    CHECK_TENSOR(out, want, n, 1e-6, test_rtol(dt, 8));
  }
  loom_tensor_destroy(out);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
}

static void test_ce_plain(void) {
  double labels[2] = {2, 0};
  double nll[2] = {lse0() - 3, lse1() - 1};
  double mean = (nll[0] + nll[1]) / 2, sum = nll[0] + nll[1];
  /* Each compiled graph costs a C compilation: label dtypes alternate. */
  for (int k = 0; k < NFLOATS; k++) {
    loom_dtype_t lt = k % 2 ? LOOM_I64 : LOOM_I32, other = k % 2 ? LOOM_I32 : LOOM_I64;
    check_ce(floats[k], lt, labels, (ce_case_t){LOOM_NO_IGNORE_INDEX, 0, LOOM_REDUCTION_MEAN}, &mean, 1);
    check_ce(floats[k], other, labels, (ce_case_t){-100, 0, LOOM_REDUCTION_SUM}, &sum, 1);
    check_ce(floats[k], lt, labels, (ce_case_t){-100, 0, LOOM_REDUCTION_NONE}, nll, 2);
  }
}

/* Uniform logits: the loss is log C whatever the label. */
static void test_ce_uniform_logits(void) {
  double x[8] = {0.5, 0.5, 0.5, 0.5, -2, -2, -2, -2}, labels[2] = {3, 1};
  double want = log(4.0);
  int64_t xs[2] = {2, 4}, ys[1] = {2};
  loom_tensor_t *tx = test_tensor(LOOM_F64, 2, xs, x), *ty = test_tensor(LOOM_I64, 1, ys, labels);
  loom_tensor_t *out = run_ce(tx, ty, (ce_case_t){LOOM_NO_IGNORE_INDEX, 0.3, LOOM_REDUCTION_MEAN});
  if (out) CHECK_NEAR(test_get(out, 0), want, 1e-12, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(tx);
  loom_tensor_destroy(ty);
}

/* PyTorch: loss_i = (1-e) nll_i + e/C sum_c -logp[i,c]. */
static void test_ce_label_smoothing(void) {
  double e = 0.1, labels[2] = {2, 0};
  double smooth0 = lse0() - 2, smooth1 = lse1() - 1; /* mean_c of -logp */
  double items[2] = {(1 - e) * (lse0() - 3) + e * smooth0,
                     (1 - e) * (lse1() - 1) + e * smooth1};
  double mean = (items[0] + items[1]) / 2;
  for (int k = 0; k < NFLOATS; k++) {
    check_ce(floats[k], LOOM_I64, labels, (ce_case_t){-100, e, LOOM_REDUCTION_MEAN}, &mean, 1);
    check_ce(floats[k], LOOM_I32, labels, (ce_case_t){LOOM_NO_IGNORE_INDEX, e, LOOM_REDUCTION_NONE}, items, 2);
  }
}

/* An ignored item adds 0 and is not counted by the mean. */
static void test_ce_ignore_index(void) {
  double labels[2] = {2, -100}, e = 0.2;
  double nll0 = lse0() - 3, items[2] = {nll0, 0};
  double smoothed = (1 - e) * nll0 + e * (lse0() - 2);
  for (int k = 0; k < NFLOATS; k++) {
    check_ce(floats[k], LOOM_I64, labels, (ce_case_t){-100, 0, LOOM_REDUCTION_MEAN}, &nll0, 1);
    check_ce(floats[k], LOOM_I32, labels, (ce_case_t){-100, 0, LOOM_REDUCTION_NONE}, items, 2);
  }
  check_ce(LOOM_F32, LOOM_I32, labels, (ce_case_t){-100, 0, LOOM_REDUCTION_SUM}, &nll0, 1);
  check_ce(LOOM_F32, LOOM_I64, labels, (ce_case_t){-100, e, LOOM_REDUCTION_MEAN}, &smoothed, 1);
  /* A class index may be the ignored one too. */
  double l2[2] = {2, 0}, only0 = lse0() - 3;
  check_ce(LOOM_F64, LOOM_I64, l2, (ce_case_t){0, 0, LOOM_REDUCTION_MEAN}, &only0, 1);
  /* Everything ignored: the mean is 0/0, NaN, as in PyTorch. */
  double all[2] = {-1, -1}, nan_ = NAN;
  check_ce(LOOM_F64, LOOM_I64, all, (ce_case_t){-1, 0, LOOM_REDUCTION_MEAN}, &nan_, 1);
}

/* Logits as a transposed view of user memory match the contiguous case. */
static void test_ce_strided(void) {
  double mem[6]; /* (3, 2) row-major; its transpose is ce_x */
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) mem[j * 2 + i] = ce_x[i * 3 + j];
  int64_t shape[2] = {2, 3}, strides[2] = {1, 2}, ys[1] = {2};
  double labels[2] = {2, 0}, mean = ((lse0() - 3) + (lse1() - 1)) / 2;
  loom_tensor_t *x, *y = test_tensor(LOOM_I64, 1, ys, labels);
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, shape, strides, mem, &x));
  loom_tensor_t *out = run_ce(x, y, (ce_case_t){-100, 0, LOOM_REDUCTION_MEAN});
  if (out) CHECK_NEAR(test_get(out, 0), mean, 1e-12, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
}

/* ---- MSE and BCE ---------------------------------------------------------------- */

typedef loom_status_t (*pair_loss_fn)(loom_graph_t *, loom_value_t, loom_value_t,
                                      loom_reduction_t, loom_value_t *);

static loom_tensor_t *run_pair(pair_loss_fn f, loom_tensor_t *a, loom_tensor_t *b,
                               loom_reduction_t r) {
  loom_graph_t *g;
  loom_value_t loss;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t va = input_like(g, "a", a), vb = input_like(g, "b", b);
  CHECK_OK(f(g, va, vb, r, &loss));
  CHECK_OK(loom_graph_output(g, loss));
  loom_tensor_t *in[2] = {a, b};
  loom_tensor_t *out = test_run1(g, 2, in);
  loom_graph_destroy(g);
  return out;
}

static void check_pair(pair_loss_fn f, loom_dtype_t dt, int64_t n,
                       const double *a, const double *b, const double *items) {
  loom_tensor_t *ta = test_tensor(dt, 1, &n, a), *tb = test_tensor(dt, 1, &n, b);
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += items[i];
  double mean = sum / (double)n;
  loom_tensor_t *o1 = run_pair(f, ta, tb, LOOM_REDUCTION_MEAN);
  loom_tensor_t *o2 = run_pair(f, ta, tb, LOOM_REDUCTION_SUM);
  loom_tensor_t *o3 = run_pair(f, ta, tb, LOOM_REDUCTION_NONE);
  double rtol = test_rtol(dt, 8);
  if (o1) CHECK_TENSOR(o1, &mean, 1, 1e-6, rtol);
  if (o2) CHECK_TENSOR(o2, &sum, 1, 1e-6, rtol);
  if (o3) CHECK_TENSOR(o3, items, n, 1e-6, rtol);
  loom_tensor_destroy(o1);
  loom_tensor_destroy(o2);
  loom_tensor_destroy(o3);
  loom_tensor_destroy(ta);
  loom_tensor_destroy(tb);
}

static void test_mse(void) {
  double p[4] = {1, 2, 3, -1.5}, t[4] = {0, 2, 5, 0.5}, sq[4] = {1, 0, 4, 4};
  for (int k = 0; k < NFLOATS; k++) check_pair(loom_mse, floats[k], 4, p, t, sq);
}

/* -[t log sigmoid(x) + (1-t) log(1 - sigmoid(x))], by hand; x = +-100 must
 * neither overflow nor lose the linear term. */
static void test_bce_with_logits(void) {
  double x[6] = {0, 2, -3, 100, -100, 0.5}, t[6] = {1, 0, 0.5, 1, 1, 0.25};
  double want[6] = {
      log(2.0),                                  /* -log(1/2) */
      log(1 + exp(2.0)),                         /* -log(1 - s(2)) */
      0.5 * log(1 + exp(3.0)) + 0.5 * log(1 + exp(-3.0)),
      0,                                         /* e^-100, below atol */
      100,                                       /* -log s(-100) */
      0.25 * log(1 + exp(-0.5)) + 0.75 * log(1 + exp(0.5)),
  };
  for (int k = 0; k < NFLOATS; k++)
    check_pair(loom_bce_with_logits, floats[k], 6, x, t, want);
}

/* ---- Gradients through loom_grad ----------------------------------------------- */

/* d loss / d input through loom_grad, interpreted; NULL (and a note) while
 * an op on the way has no gradient rule yet. */
static loom_tensor_t *grad_of(loom_graph_t *g, loom_value_t loss, loom_value_t x,
                              int n_in, loom_tensor_t *const *in) {
  loom_value_t dx;
  loom_status_t s = loom_grad(g, loss, 1, &x, &dx);
  if (s == LOOM_ERR_UNSUPPORTED) {
    printf("  (skipped: %s)\n", loom_last_error());
    return NULL;
  }
  CHECK_OK(s);
  if (s != LOOM_OK) return NULL;
  CHECK_OK(loom_graph_output(g, dx));
  loom_tensor_t *out = NULL;
  CHECK_OK(loom_interpret(g, n_in, in, 1, &out));
  return out;
}

/* Mean cross-entropy: (softmax(x) - q) * keep / count, with q the smoothed
 * target (1-e) onehot + e/C. */
static void test_ce_gradient(void) {
  int64_t ys[1] = {3};
  double x3[9] = {1, 2, 3, 1, 1, 1, 0, -1, 2}, labels[3] = {2, -100, 0}, e = 0.1;
  loom_tensor_t *x = test_tensor(LOOM_F64, 2, (int64_t[]){3, 3}, x3),
                *y = test_tensor(LOOM_I64, 1, ys, labels);
  loom_graph_t *g;
  loom_value_t loss;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t vx = input_like(g, "logits", x), vy = input_like(g, "labels", y);
  CHECK_OK(loom_cross_entropy(g, vx, vy, -100, e, LOOM_REDUCTION_MEAN, &loss));
  loom_tensor_t *in[2] = {x, y};
  loom_tensor_t *dx = grad_of(g, loss, vx, 2, in);
  if (dx) {
    double want[9] = {0};
    for (int i = 0; i < 3; i++) {
      if (labels[i] < 0) continue;
      double z = 0;
      for (int c = 0; c < 3; c++) z += exp(x3[i * 3 + c]);
      for (int c = 0; c < 3; c++) {
        double q = (1 - e) * (c == labels[i]) + e / 3;
        want[i * 3 + c] = (exp(x3[i * 3 + c]) / z - q) / 2; /* 2 counted */
      }
    }
    CHECK_TENSOR(dx, want, 9, 1e-12, 1e-9);
  }
  loom_tensor_destroy(dx);
  loom_graph_destroy(g);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
}

/* Mean MSE: 2 (p - t) / n; mean BCE with logits: (sigmoid(x) - t) / n. */
static void test_mse_bce_gradient(void) {
  int64_t n = 3;
  double a[3] = {0.5, -2, 4}, t[3] = {1, 0, 0.25};
  for (int k = 0; k < 2; k++) {
    loom_tensor_t *ta = test_tensor(LOOM_F64, 1, &n, a), *tt = test_tensor(LOOM_F64, 1, &n, t);
    loom_graph_t *g;
    loom_value_t loss;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t va = input_like(g, "a", ta), vt = input_like(g, "t", tt);
    if (k == 0) CHECK_OK(loom_mse(g, va, vt, LOOM_REDUCTION_MEAN, &loss));
    else CHECK_OK(loom_bce_with_logits(g, va, vt, LOOM_REDUCTION_MEAN, &loss));
    loom_tensor_t *in[2] = {ta, tt};
    loom_tensor_t *d = grad_of(g, loss, va, 2, in);
    double want[3];
    for (int i = 0; i < 3; i++)
      want[i] = k == 0 ? 2 * (a[i] - t[i]) / 3 : (1 / (1 + exp(-a[i])) - t[i]) / 3;
    if (d) CHECK_TENSOR(d, want, 3, 1e-12, 1e-9);
    loom_tensor_destroy(d);
    loom_graph_destroy(g);
    loom_tensor_destroy(ta);
    loom_tensor_destroy(tt);
  }
}

/* ---- Errors ------------------------------------------------------------------------ */

static void test_errors(void) {
  loom_graph_t *g;
  loom_value_t x, xi, y, yf, y3, p, p2, q, loss;
  int64_t xs[2] = {2, 3}, ys[1] = {2}, y3s[1] = {3};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, xs, &x));
  CHECK_OK(loom_graph_input(g, "xi", LOOM_I32, 2, xs, &xi));
  CHECK_OK(loom_graph_input(g, "y", LOOM_I64, 1, ys, &y));
  CHECK_OK(loom_graph_input(g, "yf", LOOM_F32, 1, ys, &yf));
  CHECK_OK(loom_graph_input(g, "y3", LOOM_I64, 1, y3s, &y3));
  CHECK_OK(loom_graph_input(g, "p", LOOM_F32, 1, ys, &p));
  CHECK_OK(loom_graph_input(g, "p2", LOOM_F64, 1, ys, &p2));
  CHECK_OK(loom_graph_input(g, "q", LOOM_F32, 1, y3s, &q));
  const loom_reduction_t mean = LOOM_REDUCTION_MEAN;
  CHECK_ERR(loom_cross_entropy(g, xi, y, -100, 0, mean, &loss), LOOM_ERR_DTYPE, "logits");
  CHECK_ERR(loom_cross_entropy(g, x, yf, -100, 0, mean, &loss), LOOM_ERR_DTYPE, "labels");
  CHECK_ERR(loom_cross_entropy(g, x, y3, -100, 0, mean, &loss), LOOM_ERR_SHAPE, "(N, C)");
  CHECK_ERR(loom_cross_entropy(g, y, y, -100, 0, mean, &loss), LOOM_ERR_DTYPE, "logits");
  CHECK_ERR(loom_cross_entropy(g, x, y, -100, 1.0, mean, &loss), LOOM_ERR_INVALID, "label_smoothing");
  CHECK_ERR(loom_cross_entropy(g, x, y, -100, -0.1, mean, &loss), LOOM_ERR_INVALID, "label_smoothing");
  CHECK_ERR(loom_cross_entropy(g, x, y, -100, 0, (loom_reduction_t)9, &loss), LOOM_ERR_INVALID, "reduction");
  CHECK_ERR(loom_cross_entropy(g, x, (loom_value_t){999}, -100, 0, mean, &loss), LOOM_ERR_GRAPH, "labels");
  CHECK_ERR(loom_cross_entropy(NULL, x, y, -100, 0, mean, &loss), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_cross_entropy(g, x, y, -100, 0, mean, NULL), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_mse(g, p, q, mean, &loss), LOOM_ERR_SHAPE, "same shape");
  CHECK_ERR(loom_mse(g, p, p2, mean, &loss), LOOM_ERR_DTYPE, "f64");
  CHECK_ERR(loom_mse(g, y, y, mean, &loss), LOOM_ERR_DTYPE, "float");
  CHECK_ERR(loom_mse(NULL, p, p, mean, &loss), LOOM_ERR_INVALID, "null");
  CHECK_ERR(loom_bce_with_logits(g, p, q, mean, &loss), LOOM_ERR_SHAPE, "same shape");
  CHECK_ERR(loom_bce_with_logits(g, p, p, (loom_reduction_t)-1, &loss), LOOM_ERR_INVALID, "reduction");
  CHECK_ERR(loom_bce_with_logits(g, p, p, mean, NULL), LOOM_ERR_INVALID, "null");
  loom_graph_destroy(g);
}

/* A label outside [0, C) that is not ignored fails when the graph runs. */
static void test_ce_label_out_of_range(void) {
  int64_t xs[2] = {2, 3}, ys[1] = {2};
  double labels[2] = {1, 3};
  loom_tensor_t *x = test_tensor(LOOM_F32, 2, xs, ce_x), *y = test_tensor(LOOM_I64, 1, ys, labels);
  loom_graph_t *g;
  loom_value_t loss;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t vx = input_like(g, "logits", x), vy = input_like(g, "labels", y);
  CHECK_OK(loom_cross_entropy(g, vx, vy, -100, 0, LOOM_REDUCTION_MEAN, &loss));
  CHECK_OK(loom_graph_output(g, loss));
  loom_tensor_t *in[2] = {x, y}, *out = NULL;
  CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_VALUE,
            "loom_cross_entropy: label 3 (at position 1) is out of range for 3 classes");
  loom_tensor_destroy(out);
  loom_graph_destroy(g);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
}

int main(void) {
  TEST_RUN(test_ce_plain);
  TEST_RUN(test_ce_uniform_logits);
  TEST_RUN(test_ce_label_smoothing);
  TEST_RUN(test_ce_ignore_index);
  TEST_RUN(test_ce_strided);
  TEST_RUN(test_mse);
  TEST_RUN(test_bce_with_logits);
  TEST_RUN(test_ce_gradient);
  TEST_RUN(test_mse_bce_gradient);
  TEST_RUN(test_errors);
  TEST_RUN(test_ce_label_out_of_range);
  return test_summary();
}
