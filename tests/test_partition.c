/* The forward/backward partition of a segment (src/passes/partition.h):
 * for small graphs (an MLP layer, an LSTM cell with two outputs, softmax
 * over layer_norm, a graph with an integer output, dropout), the forward
 * then the backward, interpreted and compiled, give the gradients of
 * sum_i sum(Y_i * dY_i) that loom_grad gives on the joint graph and that
 * central differences in f64 give. An RNN-style run (the forward twice,
 * then the backward twice in reverse order) gives each invocation's
 * gradient. Also: what gets saved (recomputed values, dropout masks),
 * zeros for unreachable inputs, and the error paths. */
#include <string.h>

#include "core/alloc.h"
#include "harness.h"
#include "ir/ir.h"
#include "passes/partition.h"

#define MAX_IO 12

/* ---- Cases ---------------------------------------------------------------- */

typedef struct spec {
  loom_dtype_t dtype;
  int rank;
  int64_t shape[4];
  double lo, hi;
} spec_t;

/* Builds the segment's nodes and outputs on inputs x. */
typedef loom_status_t (*build_fn)(loom_graph_t *g, const loom_value_t *x);

typedef struct pcase {
  const char *name;
  int n_in;
  spec_t in[MAX_IO];
  build_fn build;
  int n_wrt;
  int wrt[MAX_IO];
} pcase_t;

/* gelu(x W + b) */
static loom_status_t build_mlp(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t h, y;
  loom_status_t s = loom_matmul(g, x[0], x[1], 0, 0, &h);
  if (s == LOOM_OK) s = loom_add(g, h, x[2], &h);
  if (s == LOOM_OK) s = loom_gelu(g, h, &y);
  return s == LOOM_OK ? loom_graph_output(g, y) : s;
}

/* An LSTM cell: x, h, c, W, U, b -> h', c' (outputs in that order). */
static loom_status_t lstm_cell(loom_graph_t *g, const loom_value_t *x,
                               loom_value_t *h2, loom_value_t *c2) {
  loom_value_t z, zh, gate[4], fc, ig, tc;
  loom_status_t s = loom_matmul(g, x[0], x[3], 0, 0, &z);
  if (s == LOOM_OK) s = loom_matmul(g, x[1], x[4], 0, 0, &zh);
  if (s == LOOM_OK) s = loom_add(g, z, zh, &z);
  if (s == LOOM_OK) s = loom_add(g, z, x[5], &z);
  loom_dim_t hd[2] = {0, 0};
  if (s == LOOM_OK) s = loom_value_type(g, x[1], NULL, NULL, hd);
  int64_t sizes[4] = {hd[1], hd[1], hd[1], hd[1]};
  if (s == LOOM_OK) s = loom_split(g, z, 1, 4, sizes, gate);
  if (s == LOOM_OK) s = loom_sigmoid(g, gate[0], &gate[0]);
  if (s == LOOM_OK) s = loom_sigmoid(g, gate[1], &gate[1]);
  if (s == LOOM_OK) s = loom_tanh(g, gate[2], &gate[2]);
  if (s == LOOM_OK) s = loom_sigmoid(g, gate[3], &gate[3]);
  if (s == LOOM_OK) s = loom_mul(g, gate[1], x[2], &fc);
  if (s == LOOM_OK) s = loom_mul(g, gate[0], gate[2], &ig);
  if (s == LOOM_OK) s = loom_add(g, fc, ig, c2);
  if (s == LOOM_OK) s = loom_tanh(g, *c2, &tc);
  if (s == LOOM_OK) s = loom_mul(g, gate[3], tc, h2);
  return s;
}

static loom_status_t build_lstm(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t h, c;
  loom_status_t s = lstm_cell(g, x, &h, &c);
  if (s == LOOM_OK) s = loom_graph_output(g, h);
  return s == LOOM_OK ? loom_graph_output(g, c) : s;
}

/* softmax(layer_norm(x) * scale + bias) over the last axis. */
static loom_status_t build_softmax_ln(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t n, y;
  loom_status_t s = loom_layer_norm(g, x[0], 1, x[1], 1, x[2], -1, 1e-5, &n);
  if (s == LOOM_OK) s = loom_softmax(g, n, -1, &y);
  return s == LOOM_OK ? loom_graph_output(g, y) : s;
}

/* Outputs argmax(x) (i64: no gradient input), tanh(x) * w; input 2 is
 * not used by any output (its gradient is zero). */
static loom_status_t build_int_output(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t idx, t, y;
  loom_status_t s = loom_argmax(g, x[0], 1, 1, 0, &idx);
  if (s == LOOM_OK) s = loom_tanh(g, x[0], &t);
  if (s == LOOM_OK) s = loom_mul(g, t, x[1], &y);
  if (s == LOOM_OK) s = loom_graph_output(g, idx);
  return s == LOOM_OK ? loom_graph_output(g, y) : s;
}

/* exp(dropout(x W, seed, offset) + x W); seed and offset are i64 inputs. */
static loom_status_t build_dropout(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t h, d, mask, y;
  loom_status_t s = loom_matmul(g, x[0], x[1], 0, 0, &h);
  if (s == LOOM_OK) s = loom_dropout(g, h, x[2], x[3], 0.4, &d, &mask);
  if (s == LOOM_OK) s = loom_add(g, d, h, &y);
  if (s == LOOM_OK) s = loom_exp(g, y, &y);
  return s == LOOM_OK ? loom_graph_output(g, y) : s;
}

/* tanh(x * c) * w with c a constant: the backward reads c itself. */
static loom_status_t build_const(loom_graph_t *g, const loom_value_t *x) {
  int64_t shape[2] = {3, 4};
  double v[12];
  for (int i = 0; i < 12; i++) v[i] = 0.25 * (i % 5) - 0.5;
  loom_tensor_t *t = test_tensor(LOOM_F64, 2, shape, v);
  loom_value_t c, y;
  loom_status_t s = loom_graph_constant(g, t, &c);
  loom_tensor_destroy(t);
  if (s == LOOM_OK) s = loom_mul(g, x[0], c, &y);
  if (s == LOOM_OK) s = loom_tanh(g, y, &y);
  if (s == LOOM_OK) s = loom_mul(g, y, x[1], &y);
  return s == LOOM_OK ? loom_graph_output(g, y) : s;
}

/* Outputs x itself, tanh(x), and x again: seeds meet on an input. */
static loom_status_t build_passthrough(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t t;
  loom_status_t s = loom_tanh(g, x[0], &t);
  if (s == LOOM_OK) s = loom_graph_output(g, x[0]);
  if (s == LOOM_OK) s = loom_graph_output(g, t);
  return s == LOOM_OK ? loom_graph_output(g, x[0]) : s;
}

#define F64(r, a, b, c, lo_, hi_) {LOOM_F64, r, {a, b, c, 0}, lo_, hi_}
#define I64(v) {LOOM_I64, 0, {0}, v, v}

static const pcase_t cases[] = {
    {"mlp", 3, {F64(2, 4, 3, 0, -1, 1), F64(2, 3, 5, 0, -1, 1), F64(1, 5, 0, 0, -1, 1)},
     build_mlp, 3, {0, 1, 2}},
    {"lstm", 6, {F64(2, 2, 3, 0, -1, 1), F64(2, 2, 2, 0, -1, 1), F64(2, 2, 2, 0, -1, 1),
                 F64(2, 3, 8, 0, -1, 1), F64(2, 2, 8, 0, -1, 1), F64(1, 8, 0, 0, -1, 1)},
     build_lstm, 6, {0, 1, 2, 3, 4, 5}},
    {"softmax_layer_norm", 3, {F64(2, 3, 5, 0, -2, 2), F64(1, 5, 0, 0, 0.5, 1.5),
                               F64(1, 5, 0, 0, -1, 1)},
     build_softmax_ln, 3, {0, 1, 2}},
    {"int_output", 3, {F64(2, 3, 4, 0, -1, 1), F64(2, 3, 4, 0, -1, 1), F64(1, 4, 0, 0, -1, 1)},
     build_int_output, 3, {0, 1, 2}},
    {"dropout", 4, {F64(2, 4, 3, 0, -1, 1), F64(2, 3, 6, 0, -0.5, 0.5), I64(7), I64(1000)},
     build_dropout, 2, {0, 1}},
    {"dropout_offset", 4, {F64(2, 4, 3, 0, -1, 1), F64(2, 3, 6, 0, -0.5, 0.5), I64(7),
                           I64(5000)},
     build_dropout, 2, {0, 1}},
    {"constant", 2, {F64(2, 3, 4, 0, -1, 1), F64(2, 3, 4, 0, -1, 1)},
     build_const, 2, {0, 1}},
    /* Only some inputs: the gradient of W alone. */
    {"mlp_wrt_w", 3, {F64(2, 4, 3, 0, -1, 1), F64(2, 3, 5, 0, -1, 1), F64(1, 5, 0, 0, -1, 1)},
     build_mlp, 1, {1}},
    {"passthrough", 1, {F64(2, 2, 3, 0, -1, 1)}, build_passthrough, 1, {0}},
};

/* ---- Running -------------------------------------------------------------- */

static loom_graph_t *src_graph(const pcase_t *c, loom_value_t *x) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  for (int i = 0; i < c->n_in; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    CHECK_OK(loom_graph_input(g, name, c->in[i].dtype, c->in[i].rank,
                              c->in[i].shape, &x[i]));
  }
  CHECK_OK(c->build(g, x));
  return g;
}

static void make_inputs(const pcase_t *c, loom_tensor_t **x) {
  for (int i = 0; i < c->n_in; i++)
    x[i] = test_rand_tensor(c->in[i].dtype, c->in[i].rank, c->in[i].shape,
                            c->in[i].lo, c->in[i].hi);
}

static void destroy_all(int n, loom_tensor_t **t) {
  for (int i = 0; i < n; i++) {
    loom_tensor_destroy(t[i]);
    t[i] = NULL;
  }
}

/* Runs g compiled (new output tensors in out). */
static loom_status_t run_compiled(loom_graph_t *g, int n_in,
                                  loom_tensor_t *const *in, loom_tensor_t **out) {
  loom_executable_t *e = NULL;
  int n_out = loom_graph_num_outputs(g);
  loom_status_t s = loom_compile(g, NULL, &e);
  for (int k = 0; s == LOOM_OK && k < n_out; k++)
    s = loom_executable_new_output(e, k, &out[k]);
  if (s == LOOM_OK) s = loom_executable_run(e, n_in, in, n_out, out);
  loom_executable_destroy(e);
  return s;
}

/* Every element of got near want (same numel), relative to want's scale. */
static void check_close(const char *what, int k, const loom_tensor_t *got,
                        const loom_tensor_t *want, double tol) {
  CHECK(got && want);
  if (!got || !want) return;
  CHECK(loom_tensor_numel(got) == loom_tensor_numel(want));
  double scale = 1;
  for (int64_t j = 0; j < loom_tensor_numel(want); j++)
    if (fabs(test_get(want, j)) > scale) scale = fabs(test_get(want, j));
  for (int64_t j = 0; j < loom_tensor_numel(want); j++) {
    double a = test_get(got, j), b = test_get(want, j);
    test_checks++;
    if (!(fabs(a - b) <= tol * scale)) {
      test_fail(__FILE__, __LINE__, "%s: tensor %d[%lld] = %.12g, want %.12g",
                what, k, (long long)j, a, b);
      return;
    }
  }
}

/* sum_i sum(Y_i * dY_i) over src's float outputs, summed here in C. */
static double weighted_loss(loom_graph_t *src, loom_tensor_t *const *x,
                            loom_tensor_t *const *dy) {
  int n_out = loom_graph_num_outputs(src);
  loom_tensor_t *y[MAX_IO] = {0};
  double l = 0;
  CHECK_OK(loom_interpret(src, loom_graph_num_inputs(src), x, n_out, y));
  for (int i = 0, k = 0; i < n_out; i++) {
    if (!y[i] || (loom_tensor_dtype(y[i]) != LOOM_F64 &&
                  loom_tensor_dtype(y[i]) != LOOM_F32))
      continue;
    for (int64_t j = 0; j < loom_tensor_numel(y[i]); j++)
      l += test_get(y[i], j) * test_get(dy[k], j);
    k++;
  }
  destroy_all(n_out, y);
  return l;
}

/* Central differences of weighted_loss against the gradient of input i
 * (an f64 tensor, perturbed in place and restored). */
static void check_fd(const char *what, loom_graph_t *src, loom_tensor_t **x,
                     int i, loom_tensor_t *const *dy,
                     const loom_tensor_t *grad) {
  double *d = loom_tensor_data(x[i]), h = 1e-6;
  for (int64_t j = 0; j < loom_tensor_numel(x[i]); j++) {
    double v = d[j];
    d[j] = v + h;
    double lp = weighted_loss(src, x, dy);
    d[j] = v - h;
    double lm = weighted_loss(src, x, dy);
    d[j] = v;
    double fd = (lp - lm) / (2 * h), an = test_get(grad, j);
    test_checks++;
    if (!(fabs(an - fd) <= 1e-6 + 1e-5 * fabs(fd))) {
      test_fail(__FILE__, __LINE__, "%s: d/d x%d[%lld] = %.10g, finite "
                "differences give %.10g", what, i, (long long)j, an, fd);
      return;
    }
  }
}

/* The reference: the joint graph with loss sum_i sum(Y_i * dY_i) and
 * loom_grad, interpreted. grads receive one tensor per wrt. */
static void joint_gradients(const pcase_t *c, loom_tensor_t *const *x,
                            loom_tensor_t *const *dy, loom_tensor_t **grads) {
  loom_value_t in[MAX_IO], w[MAX_IO], gv[MAX_IO], loss = {-1};
  loom_graph_t *g = src_graph(c, in);
  loom_tensor_t *all[2 * MAX_IO];
  int n_all = c->n_in;
  memcpy(all, x, sizeof(loom_tensor_t *) * (size_t)c->n_in);
  for (int i = 0; i < loom_graph_num_outputs(g); i++) {
    loom_value_t y = {g->outputs[i]}, d, p;
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    CHECK_OK(loom_value_type(g, y, &dt, &rank, dims));
    if (dt != LOOM_F64) continue;
    char name[16];
    snprintf(name, sizeof name, "dy%d", i);
    CHECK_OK(loom_graph_input(g, name, dt, rank, dims, &d));
    all[n_all] = dy[n_all - c->n_in];
    n_all++;
    CHECK_OK(loom_mul(g, y, d, &p));
    CHECK_OK(loom_sum(g, p, 0, NULL, 0, &p));
    if (loss.id < 0) loss = p;
    else CHECK_OK(loom_add(g, loss, p, &loss));
  }
  for (int k = 0; k < c->n_wrt; k++) w[k] = in[c->wrt[k]];
  CHECK_OK(loom_grad(g, loss, c->n_wrt, w, gv));
  /* Outputs: src's, then the gradients. */
  int n_out = loom_graph_num_outputs(g);
  loom_tensor_t *out[2 * MAX_IO] = {0};
  for (int k = 0; k < c->n_wrt; k++) CHECK_OK(loom_graph_output(g, gv[k]));
  CHECK_OK(loom_interpret(g, n_all, all, n_out + c->n_wrt, out));
  destroy_all(n_out, out);
  memcpy(grads, out + n_out, sizeof(loom_tensor_t *) * (size_t)c->n_wrt);
  loom_graph_destroy(g);
}

/* One dY per float output of src, random. */
static int make_dy(loom_graph_t *src, loom_tensor_t **dy) {
  int n = 0;
  for (int i = 0; i < loom_graph_num_outputs(src); i++) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    CHECK_OK(loom_value_type(src, (loom_value_t){src->outputs[i]}, &dt, &rank, dims));
    if (dt == LOOM_F64) dy[n++] = test_rand_tensor(dt, rank, dims, -1, 1);
  }
  return n;
}

/* Bytes of the saved values (the forward's outputs after src's). */
static int64_t saved_bytes(const partition_t *p, int n_out) {
  int64_t b = 0;
  for (int i = n_out; i < n_out + p->n_saved; i++) {
    const ir_type_t *t = &p->forward->values[p->forward->outputs[i]].type;
    int64_t n = (int64_t)loom_dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++) n *= t->dims[d];
    b += n;
  }
  return b;
}

/* Forward then backward, interpreted and compiled, against the joint
 * graph's gradients and finite differences. */
static void check_case(const pcase_t *c) {
  loom_value_t in[MAX_IO];
  loom_graph_t *src = src_graph(c, in);
  loom_tensor_t *x[MAX_IO], *dy[MAX_IO], *fw[2 * MAX_IO] = {0},
                *fwc[2 * MAX_IO] = {0}, *bin[2 * MAX_IO], *gi[MAX_IO] = {0},
                *gc[MAX_IO] = {0}, *want[MAX_IO] = {0};
  partition_t p;
  make_inputs(c, x);
  int n_dy = make_dy(src, dy), n_out = loom_graph_num_outputs(src);
  CHECK_OK(pass_partition(src, c->n_wrt, c->wrt, &p));
  CHECK(p.n_grad_inputs == n_dy);
  CHECK(loom_graph_num_outputs(p.forward) == n_out + p.n_saved);
  CHECK(loom_graph_num_inputs(p.backward) == p.n_saved + n_dy);
  printf("  %s: %d saved values, %lld bytes\n", c->name, p.n_saved,
         (long long)saved_bytes(&p, n_out));
  int n_fw = n_out + p.n_saved;
  CHECK_OK(loom_interpret(p.forward, c->n_in, x, n_fw, fw));
  CHECK_OK(run_compiled(p.forward, c->n_in, x, fwc));
  for (int k = 0; k < n_fw; k++) check_close(c->name, k, fwc[k], fw[k], 1e-12);
  for (int k = 0; k < p.n_saved; k++) bin[k] = fw[n_out + k];
  for (int k = 0; k < n_dy; k++) bin[p.n_saved + k] = dy[k];
  CHECK_OK(loom_interpret(p.backward, p.n_saved + n_dy, bin, c->n_wrt, gi));
  CHECK_OK(run_compiled(p.backward, p.n_saved + n_dy, bin, gc));
  joint_gradients(c, x, dy, want);
  for (int k = 0; k < c->n_wrt; k++) {
    check_close(c->name, k, gi[k], want[k], 1e-12);
    check_close(c->name, k, gc[k], want[k], 1e-9);
    if (gi[k]) check_fd(c->name, src, x, c->wrt[k], dy, gi[k]);
  }
  destroy_all(c->n_in, x);
  destroy_all(n_dy, dy);
  destroy_all(n_fw, fw);
  destroy_all(n_fw, fwc);
  destroy_all(c->n_wrt, gi);
  destroy_all(c->n_wrt, gc);
  destroy_all(c->n_wrt, want);
  partition_free(&p);
  loom_graph_destroy(src);
}

static void test_cases(void) {
  test_seed(5);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* ---- RNN-style: forward twice, backward in reverse order ------------------ */

/* Two LSTM steps: inputs x1, x2, h0, c0, W, U, b; outputs h1, h2, c2. */
static loom_status_t build_unrolled(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t in1[6] = {x[0], x[2], x[3], x[4], x[5], x[6]}, h1, c1, h2, c2;
  loom_status_t s = lstm_cell(g, in1, &h1, &c1);
  loom_value_t in2[6] = {x[1], h1, c1, x[4], x[5], x[6]};
  if (s == LOOM_OK) s = lstm_cell(g, in2, &h2, &c2);
  if (s == LOOM_OK) s = loom_graph_output(g, h1);
  if (s == LOOM_OK) s = loom_graph_output(g, h2);
  return s == LOOM_OK ? loom_graph_output(g, c2) : s;
}

static const pcase_t unrolled = {
    "unrolled_lstm", 7,
    {F64(2, 2, 3, 0, -1, 1), F64(2, 2, 3, 0, -1, 1), F64(2, 2, 2, 0, -1, 1),
     F64(2, 2, 2, 0, -1, 1), F64(2, 3, 8, 0, -1, 1), F64(2, 2, 8, 0, -1, 1),
     F64(1, 8, 0, 0, -1, 1)},
    build_unrolled, 7, {0, 1, 2, 3, 4, 5, 6}};

/* A graph run either by the interpreter or by one executable replayed. */
typedef struct runner {
  loom_graph_t *g;
  loom_executable_t *e;
} runner_t;

static loom_status_t runner_run(runner_t *r, int n_in, loom_tensor_t *const *in,
                                loom_tensor_t **out) {
  int n_out = loom_graph_num_outputs(r->g);
  if (!r->e) return loom_interpret(r->g, n_in, in, n_out, out);
  loom_status_t s = LOOM_OK;
  for (int k = 0; s == LOOM_OK && k < n_out; k++)
    s = loom_executable_new_output(r->e, k, &out[k]);
  return s == LOOM_OK ? loom_executable_run(r->e, n_in, in, n_out, out) : s;
}

/* a + b, elementwise, as a new f64 tensor. */
static loom_tensor_t *tensor_add(const loom_tensor_t *a, const loom_tensor_t *b) {
  int64_t n = loom_tensor_numel(a), shape[LOOM_MAX_RANK];
  double v[64];
  CHECK(n <= 64 && n == loom_tensor_numel(b));
  for (int64_t j = 0; j < n && j < 64; j++) v[j] = test_get(a, j) + test_get(b, j);
  for (int d = 0; d < loom_tensor_rank(a); d++) shape[d] = loom_tensor_dim(a, d);
  return test_tensor(LOOM_F64, loom_tensor_rank(a), shape, v);
}

/* u: the unrolled inputs (x1, x2, h0, c0, W, U, b); g: (G1, Gh, Gc), the
 * gradients of h1, h2, c2. Gives the 7 gradients of the unrolled inputs
 * from two forwards and two backwards of the cell's partition. */
static void rnn_gradients(runner_t *fw, runner_t *bw, int n_saved,
                          loom_tensor_t *const *u, loom_tensor_t *const *g,
                          loom_tensor_t **grads) {
  loom_tensor_t *f1[16] = {0}, *f2[16] = {0}, *b1[6] = {0}, *b2[6] = {0};
  loom_tensor_t *in1[6] = {u[0], u[2], u[3], u[4], u[5], u[6]};
  CHECK_OK(runner_run(fw, 6, in1, f1));
  loom_tensor_t *in2[6] = {u[1], f1[0], f1[1], u[4], u[5], u[6]};
  CHECK_OK(runner_run(fw, 6, in2, f2));
  /* Step 2 first, with its own saved values: dh2 = Gh, dc2 = Gc. */
  loom_tensor_t *bin[16];
  for (int k = 0; k < n_saved; k++) bin[k] = f2[2 + k];
  bin[n_saved] = g[1];
  bin[n_saved + 1] = g[2];
  CHECK_OK(runner_run(bw, n_saved + 2, bin, b2));
  /* Step 1: h1 gets G1 and what step 2 sent back. */
  loom_tensor_t *dh1 = tensor_add(g[0], b2[1]);
  for (int k = 0; k < n_saved; k++) bin[k] = f1[2 + k];
  bin[n_saved] = dh1;
  bin[n_saved + 1] = b2[2];
  CHECK_OK(runner_run(bw, n_saved + 2, bin, b1));
  grads[0] = b1[0], b1[0] = NULL;
  grads[1] = b2[0], b2[0] = NULL;
  grads[2] = b1[1], b1[1] = NULL;
  grads[3] = b1[2], b1[2] = NULL;
  for (int k = 3; k < 6; k++) grads[k + 1] = tensor_add(b1[k], b2[k]);
  loom_tensor_destroy(dh1);
  destroy_all(16, f1);
  destroy_all(16, f2);
  destroy_all(6, b1);
  destroy_all(6, b2);
}

static void test_rnn_two_invocations(void) {
  test_seed(11);
  loom_value_t in[MAX_IO];
  const pcase_t *cell = &cases[1];
  loom_graph_t *src = src_graph(cell, in), *un = src_graph(&unrolled, in);
  partition_t p;
  CHECK_OK(pass_partition(src, cell->n_wrt, cell->wrt, &p));
  CHECK(p.n_saved <= 14);
  loom_tensor_t *u[7], *g[3], *want[7] = {0};
  make_inputs(&unrolled, u);
  int n_dy = make_dy(un, g);
  CHECK(n_dy == 3);
  joint_gradients(&unrolled, u, g, want);
  for (int compiled = 0; compiled < 2; compiled++) {
    runner_t fw = {p.forward, NULL}, bw = {p.backward, NULL};
    if (compiled) {
      CHECK_OK(loom_compile(p.forward, NULL, &fw.e));
      CHECK_OK(loom_compile(p.backward, NULL, &bw.e));
    }
    loom_tensor_t *got[7] = {0};
    rnn_gradients(&fw, &bw, p.n_saved, u, g, got);
    for (int k = 0; k < 7; k++) {
      check_close(compiled ? "rnn compiled" : "rnn", k, got[k], want[k], 1e-9);
      if (!compiled && got[k]) check_fd("rnn", un, u, k, g, got[k]);
    }
    destroy_all(7, got);
    loom_executable_destroy(fw.e);
    loom_executable_destroy(bw.e);
  }
  destroy_all(7, u);
  destroy_all(3, g);
  destroy_all(7, want);
  partition_free(&p);
  loom_graph_destroy(src);
  loom_graph_destroy(un);
}

/* ---- What gets saved ------------------------------------------------------ */

/* tanh(x) * sigmoid(x) * w: the backward reads tanh(x), sigmoid(x) and
 * their product, all elementwise in x alone: x is saved (with w) and the
 * three are recomputed. */
static loom_status_t build_recompute(loom_graph_t *g, const loom_value_t *x) {
  loom_value_t a, b, y;
  loom_status_t s = loom_tanh(g, x[0], &a);
  if (s == LOOM_OK) s = loom_sigmoid(g, x[0], &b);
  if (s == LOOM_OK) s = loom_mul(g, a, b, &y);
  if (s == LOOM_OK) s = loom_mul(g, y, x[1], &y);
  return s == LOOM_OK ? loom_graph_output(g, y) : s;
}

static bool has_op(const loom_graph_t *g, ir_op_t op) {
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == op) return true;
  return false;
}

static void test_recompute(void) {
  test_seed(3);
  const pcase_t c = {"recompute", 2, {F64(2, 3, 4, 0, -1, 1), F64(2, 3, 4, 0, -1, 1)},
                     build_recompute, 2, {0, 1}};
  loom_value_t in[MAX_IO];
  loom_graph_t *src = src_graph(&c, in);
  partition_t p;
  CHECK_OK(pass_partition(src, 2, c.wrt, &p));
  CHECK(p.n_saved == 2);
  /* The saved values are the inputs themselves. */
  for (int k = 0; k < p.n_saved && k < 2; k++)
    CHECK(p.forward->outputs[1 + k] == p.forward->inputs[k]);
  CHECK(has_op(p.backward, IR_OP_TANH) && has_op(p.backward, IR_OP_SIGMOID));
  partition_free(&p);
  loom_graph_destroy(src);
  check_case(&c);
}

/* The dropout mask is saved (a bool value), never drawn again. */
static void test_dropout_mask_saved(void) {
  loom_value_t in[MAX_IO];
  const pcase_t *c = &cases[4];
  loom_graph_t *src = src_graph(c, in);
  partition_t p;
  CHECK_OK(pass_partition(src, c->n_wrt, c->wrt, &p));
  int masks = 0;
  for (int k = 0; k < p.n_saved; k++)
    masks += p.forward->values[p.forward->outputs[1 + k]].type.dtype == LOOM_BOOL;
  CHECK(masks == 1);
  for (int64_t i = 0; i < p.backward->n_nodes; i++)
    CHECK(!(ir_ops[p.backward->nodes[i].op].flags & F_RANDOM));
  partition_free(&p);
  loom_graph_destroy(src);
}

/* An input that no output depends on gets exact zeros. */
static void test_unreachable_zero(void) {
  test_seed(8);
  const pcase_t *c = &cases[3];
  loom_value_t in[MAX_IO];
  loom_graph_t *src = src_graph(c, in);
  partition_t p;
  CHECK_OK(pass_partition(src, c->n_wrt, c->wrt, &p));
  loom_tensor_t *x[MAX_IO], *dy[MAX_IO], *fw[MAX_IO] = {0}, *gr[3] = {0},
                *bin[MAX_IO];
  make_inputs(c, x);
  int n_dy = make_dy(src, dy);
  CHECK(n_dy == 1 && p.n_grad_inputs == 1);
  CHECK_OK(loom_interpret(p.forward, 3, x, 2 + p.n_saved, fw));
  for (int k = 0; k < p.n_saved; k++) bin[k] = fw[2 + k];
  bin[p.n_saved] = dy[0];
  CHECK_OK(loom_interpret(p.backward, p.n_saved + 1, bin, 3, gr));
  for (int64_t j = 0; gr[2] && j < loom_tensor_numel(gr[2]); j++)
    CHECK(test_get(gr[2], j) == 0.0);
  destroy_all(3, x);
  destroy_all(n_dy, dy);
  destroy_all(2 + p.n_saved, fw);
  destroy_all(3, gr);
  partition_free(&p);
  loom_graph_destroy(src);
}

/* g compiled with its symbol n = batch, run on in into new outputs out. */
static void run_compiled_at(loom_graph_t *g, int64_t batch, int n_in, loom_tensor_t **in,
                            int n_out, loom_tensor_t **out) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  const char *names[1] = {"n"};
  o.n_symbols = 1, o.symbol_names = names, o.symbol_values = &batch;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  for (int k = 0; e && k < n_out; k++) CHECK_OK(loom_executable_new_output(e, k, &out[k]));
  if (e) CHECK_OK(loom_executable_run(e, n_in, in, n_out, out));
  loom_executable_destroy(e);
}

/* A symbolic batch dim: one partition serves two batch sizes, and compiles
 * for a given size. */
static void test_symbolic_batch(void) {
  test_seed(21);
  loom_graph_t *g;
  loom_value_t x[3];
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t xs[2] = {n, 3}, ws[2] = {3, 5}, bs[1] = {5};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, xs, &x[0]));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F64, 2, ws, &x[1]));
  CHECK_OK(loom_graph_input(g, "b", LOOM_F64, 1, bs, &x[2]));
  CHECK_OK(build_mlp(g, x));
  partition_t p;
  int wrt[3] = {0, 1, 2};
  CHECK_OK(pass_partition(g, 3, wrt, &p));
  for (int64_t batch = 2; batch <= 4; batch += 2) {
    pcase_t c = cases[0];
    c.in[0].shape[0] = batch;
    loom_tensor_t *in[3], *dy[1], *fw[8] = {0}, *bin[8], *gi[3] = {0},
                  *gc[3] = {0}, *want[3] = {0};
    make_inputs(&c, in);
    int64_t ys[2] = {batch, 5};
    dy[0] = test_rand_tensor(LOOM_F64, 2, ys, -1, 1);
    CHECK_OK(loom_interpret(p.forward, 3, in, 1 + p.n_saved, fw));
    for (int k = 0; k < p.n_saved; k++) bin[k] = fw[1 + k];
    bin[p.n_saved] = dy[0];
    CHECK_OK(loom_interpret(p.backward, p.n_saved + 1, bin, 3, gi));
    run_compiled_at(p.backward, batch, p.n_saved + 1, bin, 3, gc);
    joint_gradients(&c, in, dy, want);
    for (int k = 0; k < 3; k++) {
      check_close("symbolic", k, gi[k], want[k], 1e-12);
      check_close("symbolic compiled", k, gc[k], want[k], 1e-9);
    }
    destroy_all(3, in);
    destroy_all(1, dy);
    destroy_all(1 + p.n_saved, fw);
    destroy_all(3, gi);
    destroy_all(3, gc);
    destroy_all(3, want);
  }
  partition_free(&p);
  loom_graph_destroy(g);
}

/* y = sum(3 x) over a symbolic batch: the backward reads no forward
 * value, but spreads dy over (n, 4); x is saved for its size alone, so
 * the backward runs (interpreted and compiled) at each batch with
 * gradient 3 everywhere. Before x was saved the run failed: symbol 'n'
 * has no value. */
static void test_symbol_saved_for_its_size(void) {
  loom_graph_t *g;
  loom_value_t x, three, t, y;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t xs[2] = {n, 4};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, xs, &x));
  CHECK_OK(loom_full(g, 0, NULL, 3.0, LOOM_F64, &three));
  CHECK_OK(loom_mul(g, x, three, &t));
  CHECK_OK(loom_sum(g, t, 0, NULL, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  partition_t p;
  int wrt[1] = {0};
  CHECK_OK(pass_partition(g, 1, wrt, &p));
  CHECK(p.n_saved == 1);
  for (int64_t batch = 2; batch <= 5; batch += 3) {
    int64_t shape[2] = {batch, 4};
    loom_tensor_t *in = test_rand_tensor(LOOM_F64, 2, shape, -1, 1), *fw[2] = {0};
    double one = 1.0;
    loom_tensor_t *dy = test_tensor(LOOM_F64, 0, NULL, &one), *gi = NULL, *gc = NULL;
    CHECK_OK(loom_interpret(p.forward, 1, &in, 2, fw));
    loom_tensor_t *bin[2] = {fw[1], dy};
    CHECK_OK(loom_interpret(p.backward, 2, bin, 1, &gi));
    run_compiled_at(p.backward, batch, 2, bin, 1, &gc);
    for (int64_t i = 0; gi && gc && i < batch * 4; i++) {
      CHECK(test_get(gi, i) == 3.0);
      CHECK(test_get(gc, i) == 3.0);
    }
    loom_tensor_destroy(in);
    loom_tensor_destroy(dy);
    destroy_all(2, fw);
    loom_tensor_destroy(gi);
    loom_tensor_destroy(gc);
  }
  partition_free(&p);
  loom_graph_destroy(g);
}

/* wrt past the inputs names an output: its whole gradient, the incoming
 * dY plus its reads inside src. h = x * x, outputs h and z = sum(h * h):
 * dL/dh = dh + 2 h dz. */
static void test_output_gradient(void) {
  test_seed(5);
  loom_graph_t *g;
  loom_value_t x, h, hh, z;
  CHECK_OK(loom_graph_create(&g));
  loom_dim_t xs[1] = {6};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 1, xs, &x));
  CHECK_OK(loom_mul(g, x, x, &h));
  CHECK_OK(loom_mul(g, h, h, &hh));
  CHECK_OK(loom_sum(g, hh, 0, NULL, 0, &z));
  CHECK_OK(loom_graph_output(g, h));
  CHECK_OK(loom_graph_output(g, z));
  partition_t p;
  int wrt[2] = {0, 1 + 0}; /* x, then output 0 (h): n_inputs + 0 */
  CHECK_OK(pass_partition(g, 2, wrt, &p));
  int64_t n = 6;
  loom_tensor_t *in = test_rand_tensor(LOOM_F64, 1, &n, -1, 1);
  loom_tensor_t *dh = test_rand_tensor(LOOM_F64, 1, &n, -1, 1);
  double two = 2.0;
  loom_tensor_t *dz = test_tensor(LOOM_F64, 0, NULL, &two);
  loom_tensor_t *fw[8] = {0}, *gr[2] = {0}, *bin[8];
  CHECK_OK(loom_interpret(p.forward, 1, &in, 2 + p.n_saved, fw));
  for (int k = 0; k < p.n_saved; k++) bin[k] = fw[2 + k];
  bin[p.n_saved] = dh;
  bin[p.n_saved + 1] = dz;
  CHECK_OK(loom_interpret(p.backward, p.n_saved + 2, bin, 2, gr));
  for (int64_t i = 0; gr[1] && i < n; i++) {
    double xi = test_get(in, i), h_i = xi * xi, want_h = test_get(dh, i) + 2 * h_i * 2.0;
    CHECK_NEAR(test_get(gr[1], i), want_h, 1e-12, 1e-12);
    CHECK_NEAR(test_get(gr[0], i), want_h * 2 * xi, 1e-12, 1e-12);
  }
  partition_free(&p);
  int bad[1] = {3};
  CHECK_ERR(pass_partition(g, 1, bad, &p), LOOM_ERR_INVALID, "input or output index");
  loom_tensor_destroy(in);
  loom_tensor_destroy(dh);
  loom_tensor_destroy(dz);
  destroy_all(8, fw);
  destroy_all(2, gr);
  loom_graph_destroy(g);
}

/* The halves own their constants: they run after src is gone (the tracer
 * replaces a segment's graph by one of them). */
static void test_outlives_src(void) {
  test_seed(4);
  const pcase_t *c = &cases[6];
  loom_value_t in[MAX_IO];
  loom_graph_t *src = src_graph(c, in);
  partition_t p;
  CHECK_OK(pass_partition(src, c->n_wrt, c->wrt, &p));
  loom_tensor_t *x[2], *dy[1], *fw[8] = {0}, *bin[8], *gr[2] = {0}, *want[2] = {0};
  make_inputs(c, x);
  CHECK(make_dy(src, dy) == 1);
  loom_graph_destroy(src);
  CHECK_OK(loom_interpret(p.forward, 2, x, 1 + p.n_saved, fw));
  for (int k = 0; k < p.n_saved; k++) bin[k] = fw[1 + k];
  bin[p.n_saved] = dy[0];
  CHECK_OK(loom_interpret(p.backward, p.n_saved + 1, bin, 2, gr));
  joint_gradients(c, x, dy, want);
  for (int k = 0; k < 2; k++) check_close("outlives src", k, gr[k], want[k], 1e-12);
  destroy_all(2, x);
  destroy_all(1, dy);
  destroy_all(1 + p.n_saved, fw);
  destroy_all(2, gr);
  destroy_all(2, want);
  partition_free(&p);
}

/* ---- Errors --------------------------------------------------------------- */

static void test_errors(void) {
  loom_graph_t *g;
  loom_value_t x, d, y, seed, w, q;
  partition_t p;
  CHECK_OK(loom_graph_create(&g));
  int64_t xs[4] = {1, 1, 4, 4}, ds[4] = {1, 1, 2, 2};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 4, xs, &x));
  CHECK_OK(loom_graph_input(g, "dy", LOOM_F64, 4, ds, &d));
  CHECK_OK(loom_graph_input(g, "seed", LOOM_I64, 0, NULL, &seed));
  loom_pool_params_t pp = {.kernel = {2, 2}};
  CHECK_OK(loom_avg_pool2d_grad(g, x, d, &pp, &y));
  CHECK_OK(loom_graph_output(g, y));
  int wrt_dy = 1, wrt_bad = 9, wrt_int = 2, wrt_x = 0;
  CHECK_ERR(pass_partition(g, 1, &wrt_dy, &p), LOOM_ERR_UNSUPPORTED,
            "'avg_pool2d_grad' has no gradient rule");
  CHECK(p.forward == NULL && p.backward == NULL);
  CHECK_ERR(pass_partition(g, 1, &wrt_bad, &p), LOOM_ERR_INVALID, "wrt[0] = 9");
  CHECK_ERR(pass_partition(g, 1, &wrt_int, &p), LOOM_ERR_DTYPE, "seed");
  CHECK_ERR(pass_partition(g, 1, NULL, &p), LOOM_ERR_INVALID, "null");
  CHECK_ERR(pass_partition(NULL, 0, NULL, &p), LOOM_ERR_INVALID, "src");
  int64_t ws[1] = {2};
  CHECK_OK(loom_graph_param(g, "w", LOOM_F64, 1, ws, NULL, &w));
  CHECK_OK(loom_add(g, w, w, &q));
  CHECK_OK(loom_assign(g, w, q));
  CHECK_ERR(pass_partition(g, 1, &wrt_x, &p), LOOM_ERR_UNSUPPORTED, "assign");
  loom_graph_destroy(g);
}

/* Every allocation of a partition failing in turn: a clean
 * LOOM_ERR_NOMEM, nothing handed out (AddressSanitizer finds leaks). */
static void test_fails_cleanly_at_every_allocation(void) {
  loom_value_t in[MAX_IO];
  const pcase_t *c = &cases[1];
  loom_graph_t *src = src_graph(c, in);
  partition_t p;
  loom_status_t s = LOOM_ERR_NOMEM;
  int n = 0, wrong = 0;
  for (; n < 100000 && s != LOOM_OK; n++) {
    core_alloc_fail_after(n);
    s = pass_partition(src, c->n_wrt, c->wrt, &p);
    core_alloc_fail_after(-1);
    if (s != LOOM_OK && (s != LOOM_ERR_NOMEM || p.forward || p.backward)) wrong++;
  }
  CHECK(wrong == 0 && n > 10 && s == LOOM_OK);
  partition_free(&p);
  loom_graph_destroy(src);
}

int main(void) {
  TEST_RUN(test_symbol_saved_for_its_size);
  TEST_RUN(test_output_gradient);
  TEST_RUN(test_cases);
  TEST_RUN(test_rnn_two_invocations);
  TEST_RUN(test_recompute);
  TEST_RUN(test_dropout_mask_saved);
  TEST_RUN(test_unreachable_zero);
  TEST_RUN(test_symbolic_batch);
  TEST_RUN(test_outlives_src);
  TEST_RUN(test_errors);
  TEST_RUN(test_fails_cleanly_at_every_allocation);
  return test_summary();
}
