/* Gradient rules of reductions, softmax, layout and indexing ops
 * (src/passes/grad_reduce.c, grad_layout.c), checked against central
 * finite differences in f64 over random shapes and axes, and against
 * hand-computed gradients where the function has kinks (ties of max,
 * zeros of prod). The loss is logsumexp over every element of the op's
 * result, so that each output element gets a different weight (its
 * softmax) and a wrong permutation of the gradient shows. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "loom/ops.h"

#define MAX_X 3

#define TRY(call)                        \
  do {                                   \
    loom_status_t try_s_ = (call);       \
    if (try_s_ != LOOM_OK) return try_s_; \
  } while (0)

/* Parameters of one case, read by its builder. */
typedef struct params {
  int op;             /* which op of a family */
  int n;              /* count of axes / starts */
  int64_t a[LOOM_MAX_RANK], b[LOOM_MAX_RANK], s[LOOM_MAX_RANK],
      d[LOOM_MAX_RANK];
  int64_t axis, k;
  int flag1, flag2;
  loom_tensor_t *index; /* an index constant, for indexing ops */
} params_t;

typedef loom_status_t (*build_fn)(loom_graph_t *g, const loom_value_t *x,
                                  const params_t *p, loom_value_t *y);

/* The graph: inputs x_i like xs[i], y = build(x), loss = logsumexp(y);
 * outputs loss and d loss / d x_i. */
static loom_graph_t *grad_graph(int n_x, loom_tensor_t *const *xs,
                                build_fn build, const params_t *p,
                                loom_status_t *status) {
  loom_graph_t *g = NULL;
  loom_value_t x[MAX_X], y, loss, gx[MAX_X];
  CHECK_OK(loom_graph_create(&g));
  for (int i = 0; i < n_x; i++) {
    int64_t shape[LOOM_MAX_RANK];
    int rank = loom_tensor_rank(xs[i]);
    for (int d = 0; d < rank; d++) shape[d] = loom_tensor_dim(xs[i], d);
    char name[8] = {'x', (char)('0' + i), 0};
    CHECK_OK(loom_graph_input(g, name, loom_tensor_dtype(xs[i]), rank, shape,
                              &x[i]));
  }
  CHECK_OK(build(g, x, p, &y));
  CHECK_OK(loom_logsumexp(g, y, 0, NULL, 0, &loss));
  *status = loom_grad(g, loss, n_x, x, gx);
  if (*status != LOOM_OK) return g;
  CHECK_OK(loom_graph_output(g, loss));
  for (int i = 0; i < n_x; i++) CHECK_OK(loom_graph_output(g, gx[i]));
  return g;
}

static double run_loss(loom_graph_t *g, int n_x, loom_tensor_t *const *xs) {
  loom_tensor_t *out[1 + MAX_X] = {0};
  double v = NAN;
  CHECK_OK(loom_interpret(g, n_x, xs, 1 + n_x, out));
  if (out[0]) v = test_get(out[0], 0);
  for (int i = 0; i <= n_x; i++) loom_tensor_destroy(out[i]);
  return v;
}

/* Every element of every d loss / d x_i against (L(x+h) - L(x-h)) / 2h. */
static void check_fd(const char *what, int n_x, loom_tensor_t *const *xs,
                     build_fn build, const params_t *p) {
  loom_status_t s;
  loom_graph_t *g = grad_graph(n_x, xs, build, p, &s);
  CHECK_OK(s);
  loom_tensor_t *out[1 + MAX_X] = {0};
  if (s == LOOM_OK) CHECK_OK(loom_interpret(g, n_x, xs, 1 + n_x, out));
  const double h = 1e-6;
  int before = test_failures;
  for (int i = 0; out[0] && i < n_x; i++) {
    double *data = loom_tensor_data(xs[i]);
    for (int64_t j = 0; j < loom_tensor_numel(xs[i]); j++) {
      double keep = data[j];
      data[j] = keep + h;
      double up = run_loss(g, n_x, xs);
      data[j] = keep - h;
      double down = run_loss(g, n_x, xs);
      data[j] = keep;
      CHECK_NEAR(test_get(out[1 + i], j), (up - down) / (2 * h), 1e-6, 1e-5);
    }
  }
  if (test_failures != before) printf("  (in %s)\n", what);
  for (int i = 0; i <= n_x; i++) loom_tensor_destroy(out[i]);
  loom_graph_destroy(g);
}

/* A random f64 shape of the given rank, dims 1..4. */
static void rand_shape(int rank, int64_t *shape) {
  for (int d = 0; d < rank; d++) shape[d] = test_rand_int(1, 4);
}

static loom_tensor_t *rand_x(int rank, const int64_t *shape) {
  return test_rand_tensor(LOOM_F64, rank, shape, -2, 2);
}

static void check_fd1(const char *what, loom_tensor_t *x, build_fn build,
                      const params_t *p) {
  check_fd(what, 1, &x, build, p);
  loom_tensor_destroy(x);
}

/* A random subset of the axes of rank (at least one), some negative. */
static int rand_axes(int rank, int64_t *axes) {
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (test_rand_int(0, 1)) axes[n++] = test_rand_int(0, 1) ? d : d - rank;
  if (n == 0) axes[n++] = -1;
  return n;
}

/* ---- Reductions ------------------------------------------------------------ */

static const char *const reduce_names[] = {"sum", "mean", "max", "min", "prod",
                                           "logsumexp", "variance"};

static loom_status_t b_reduce(loom_graph_t *g, const loom_value_t *x,
                              const params_t *p, loom_value_t *y) {
  typedef loom_status_t (*reduce_fn)(loom_graph_t *, loom_value_t, int,
                                     const int64_t *, int, loom_value_t *);
  static const reduce_fn fns[] = {loom_sum, loom_max, loom_max, loom_min,
                                  loom_prod, loom_logsumexp, NULL};
  const int64_t *axes = p->n > 0 ? p->a : NULL;
  if (p->op == 1) return loom_mean(g, x[0], p->n, axes, p->flag1, y);
  if (p->op == 6)
    return loom_variance(g, x[0], p->n, axes, p->flag1, p->flag2, y);
  return fns[p->op](g, x[0], p->n, axes, p->flag1, y);
}

/* Each reduction over random shapes, axes subsets (negative too), all
 * axes, keepdim both ways, variance with correction 0 and 1. */
static void test_reductions(void) {
  test_seed(11);
  for (int op = 0; op < 7; op++)
    for (int trial = 0; trial < 6; trial++) {
      params_t p = {.op = op, .flag1 = trial % 2, .flag2 = trial / 2 % 2};
      int rank = (int)test_rand_int(1, 3);
      int64_t shape[LOOM_MAX_RANK];
      rand_shape(rank, shape);
      if (op == 6) shape[0] = 3; /* n - correction > 0 whatever the axes */
      p.n = trial >= 4 ? 0 : rand_axes(rank, p.a);
      if (op == 6 && p.n > 0) p.a[0] = 0, p.n = 1;
      check_fd1(reduce_names[op], rand_x(rank, shape), b_reduce, &p);
    }
}

/* A scalar input reduced over all (no) axes is the identity. */
static void test_reduce_scalar(void) {
  for (int op = 0; op < 6; op++) {
    params_t p = {.op = op};
    check_fd1(reduce_names[op], rand_x(0, NULL), b_reduce, &p);
  }
}

/* Hand-computed gradient of y = op(x) (loss logsumexp of a scalar: y). */
static void check_hand(int op, int n_axes, const int64_t *axes, int keepdim,
                       int rank, const int64_t *shape, const double *x,
                       const double *want, int n) {
  loom_tensor_t *t = test_tensor(LOOM_F64, rank, shape, x);
  params_t p = {.op = op, .n = n_axes, .flag1 = keepdim};
  memcpy(p.a, axes, sizeof(int64_t) * (size_t)n_axes);
  loom_status_t s;
  loom_graph_t *g = grad_graph(1, &t, b_reduce, &p, &s);
  loom_tensor_t *out[2] = {0};
  CHECK_OK(loom_interpret(g, 1, &t, 2, out));
  if (out[1]) CHECK_TENSOR(out[1], want, n, 1e-12, 1e-12);
  loom_tensor_destroy(out[0]);
  loom_tensor_destroy(out[1]);
  loom_tensor_destroy(t);
  loom_graph_destroy(g);
}

/* As torch.amax: tied maxima share the gradient evenly. */
static void test_max_min_ties(void) {
  int64_t all[1] = {0};
  check_hand(2, 1, all, 0, 1, (int64_t[]){3}, (double[]){1, 3, 3},
             (double[]){0, 0.5, 0.5}, 3);
  check_hand(3, 1, all, 1, 1, (int64_t[]){4}, (double[]){2, -1, -1, -1},
             (double[]){0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 4);
  /* Per row: a 2x3 max over the last axis, then logsumexp of the two maxima
   * (both 5: weights 1/2 each). */
  check_hand(2, 1, (int64_t[]){-1}, 0, 2, (int64_t[]){2, 3},
             (double[]){5, 5, 1, 0, 5, 2}, (double[]){0.25, 0.25, 0, 0, 0.5, 0}, 6);
}

/* d prod / dx_i is the product of the others, also where x_i is 0. */
static void test_prod_zeros(void) {
  int64_t all[1] = {0};
  check_hand(4, 1, all, 0, 1, (int64_t[]){3}, (double[]){2, 0, 3},
             (double[]){0, 6, 0}, 3);
  check_hand(4, 1, all, 0, 1, (int64_t[]){3}, (double[]){0, 0, 2},
             (double[]){0, 0, 0}, 3);
  check_hand(4, 1, all, 1, 1, (int64_t[]){4}, (double[]){2, -3, 0.5, 4},
             (double[]){-6, 4, -24, -3}, 4);
}

/* ---- Scans, top-k, softmax ---------------------------------------------------- */

static loom_status_t b_cumsum(loom_graph_t *g, const loom_value_t *x,
                              const params_t *p, loom_value_t *y) {
  return loom_cumsum(g, x[0], p->axis, p->flag1, p->flag2, y);
}

static void test_cumsum(void) {
  test_seed(12);
  for (int trial = 0; trial < 8; trial++) {
    int rank = (int)test_rand_int(1, 3);
    int64_t shape[LOOM_MAX_RANK];
    rand_shape(rank, shape);
    params_t p = {.axis = test_rand_int(-rank, rank - 1), .flag1 = trial % 2,
                  .flag2 = trial / 2 % 2};
    check_fd1("cumsum", rand_x(rank, shape), b_cumsum, &p);
  }
}

static loom_status_t b_topk(loom_graph_t *g, const loom_value_t *x,
                            const params_t *p, loom_value_t *y) {
  loom_value_t ind;
  return loom_topk(g, x[0], p->k, p->axis, p->flag1, y, &ind);
}

/* Values only; the indices carry no gradient. */
static void test_topk(void) {
  test_seed(13);
  for (int trial = 0; trial < 6; trial++) {
    int rank = (int)test_rand_int(1, 3);
    int64_t shape[LOOM_MAX_RANK];
    rand_shape(rank, shape);
    params_t p = {.axis = test_rand_int(-rank, rank - 1), .flag1 = trial % 2};
    int a = (int)(p.axis < 0 ? p.axis + rank : p.axis);
    p.k = test_rand_int(1, shape[a]);
    check_fd1("topk", rand_x(rank, shape), b_topk, &p);
  }
}

static loom_status_t b_softmax(loom_graph_t *g, const loom_value_t *x,
                               const params_t *p, loom_value_t *y) {
  return p->op ? loom_log_softmax(g, x[0], p->axis, y)
               : loom_softmax(g, x[0], p->axis, y);
}

static void test_softmax(void) {
  test_seed(14);
  for (int trial = 0; trial < 8; trial++) {
    int rank = (int)test_rand_int(1, 3);
    int64_t shape[LOOM_MAX_RANK];
    rand_shape(rank, shape);
    params_t p = {.op = trial % 2, .axis = test_rand_int(-rank, rank - 1)};
    check_fd1(p.op ? "log_softmax" : "softmax", rand_x(rank, shape), b_softmax, &p);
  }
}

/* ---- Reshape, transpose, expand, squeeze, unsqueeze, flip, tile ------------- */

static loom_status_t b_reshape(loom_graph_t *g, const loom_value_t *x,
                               const params_t *p, loom_value_t *y) {
  (void)p;
  return loom_reshape(g, x[0], 2, (loom_dim_t[]){-1, 2}, y);
}
static loom_status_t b_squeeze(loom_graph_t *g, const loom_value_t *x,
                               const params_t *p, loom_value_t *y) {
  return loom_squeeze(g, x[0], p->n, p->a, y);
}
static loom_status_t b_unsqueeze(loom_graph_t *g, const loom_value_t *x,
                                 const params_t *p, loom_value_t *y) {
  return loom_unsqueeze(g, x[0], p->n, p->a, y);
}
static loom_status_t b_transpose(loom_graph_t *g, const loom_value_t *x,
                                 const params_t *p, loom_value_t *y) {
  return loom_transpose(g, x[0], p->n ? p->a : NULL, y);
}
static loom_status_t b_flip(loom_graph_t *g, const loom_value_t *x,
                            const params_t *p, loom_value_t *y) {
  return loom_flip(g, x[0], p->n, p->a, y);
}
static loom_status_t b_tile(loom_graph_t *g, const loom_value_t *x,
                            const params_t *p, loom_value_t *y) {
  return loom_tile(g, x[0], p->a, y);
}
/* Broadcasting: x expanded to p->n dims p->a, reduced by sum over axis 0
 * so that the expanded value meets a second rule. */
static loom_status_t b_expand(loom_graph_t *g, const loom_value_t *x,
                              const params_t *p, loom_value_t *y) {
  loom_value_t e;
  TRY(loom_expand(g, x[0], p->n, p->a, &e));
  return loom_sum(g, e, 1, (int64_t[]){0}, 0, y);
}

static void test_reshape_family(void) {
  test_seed(15);
  check_fd1("reshape", rand_x(3, (int64_t[]){2, 3, 2}), b_reshape, &(params_t){0});
  params_t sq = {.n = 2, .a = {0, -1}};
  check_fd1("squeeze", rand_x(3, (int64_t[]){1, 3, 1}), b_squeeze, &sq);
  params_t sq_all = {.n = 0};
  check_fd1("squeeze all", rand_x(3, (int64_t[]){1, 3, 1}), b_squeeze, &sq_all);
  params_t un = {.n = 2, .a = {-1, 1}};
  check_fd1("unsqueeze", rand_x(2, (int64_t[]){2, 3}), b_unsqueeze, &un);
}

static void test_transpose_flip_tile(void) {
  test_seed(16);
  for (int trial = 0; trial < 4; trial++) {
    int64_t shape[LOOM_MAX_RANK];
    rand_shape(4, shape);
    params_t p = {.n = 4, .a = {2, -1, 0, 1}};
    check_fd1("transpose", rand_x(4, shape), b_transpose, &p);
    params_t rev = {.n = 0};
    check_fd1("transpose default", rand_x(3, shape), b_transpose, &rev);
    params_t f = {.n = 2, .a = {-1, 1}};
    check_fd1("flip", rand_x(3, shape), b_flip, &f);
    params_t t = {.a = {test_rand_int(1, 3), 1, test_rand_int(2, 3)}};
    check_fd1("tile", rand_x(3, shape), b_tile, &t);
  }
}

static void test_expand(void) {
  test_seed(17);
  params_t p = {.n = 4, .a = {3, 2, 4, 3}};
  check_fd1("expand", rand_x(3, (int64_t[]){2, 1, 3}), b_expand, &p);
  check_fd1("expand rank 1", rand_x(1, (int64_t[]){1}), b_expand, &p);
  check_fd1("expand same", rand_x(4, (int64_t[]){3, 2, 4, 3}), b_expand, &p);
}

/* ---- Slice, concat, split, pad ------------------------------------------------ */

static loom_status_t b_slice(loom_graph_t *g, const loom_value_t *x,
                             const params_t *p, loom_value_t *y) {
  return loom_slice(g, x[0], p->n, p->a, p->b, p->d, p->s, y);
}

/* Whether Python's range(dim)[start:end:step] is empty, by walking it
 * (start within [-dim, dim) here; end may be INT64_MAX / INT64_MIN). */
static bool py_slice_empty(int64_t dim, int64_t start, int64_t end,
                           int64_t step) {
  int64_t i = start < 0 ? start + dim : start;
  if (end != INT64_MAX && end != INT64_MIN && end < 0) end += dim;
  if (end == INT64_MIN) end = -1;
  if (end < -1) end = -1;
  return step > 0 ? !(i < end) : !(i > end);
}

/* Random starts, ends and steps (negative too) on random axes, redrawn
 * until the result is not empty (the loss of nothing is -inf). */
static void test_slice(void) {
  test_seed(18);
  for (int trial = 0; trial < 24; trial++) {
    int rank = (int)test_rand_int(1, 3);
    int64_t shape[LOOM_MAX_RANK];
    for (int d = 0; d < rank; d++) shape[d] = test_rand_int(3, 7);
    params_t p = {.n = rank};
    for (int i = 0; i < rank; i++) {
      int axis = (i + trial) % rank;
      p.d[i] = test_rand_int(0, 1) ? axis : axis - rank;
      do {
        p.s[i] = test_rand_int(1, 3) * (test_rand_int(0, 2) ? 1 : -1);
        p.a[i] = test_rand_int(-shape[axis], shape[axis] - 1);
        p.b[i] = test_rand_int(0, 3) ? test_rand_int(-shape[axis], shape[axis])
                                     : (p.s[i] > 0 ? INT64_MAX : INT64_MIN);
      } while (py_slice_empty(shape[axis], p.a[i], p.b[i], p.s[i]));
    }
    check_fd1("slice", rand_x(rank, shape), b_slice, &p);
  }
}

/* An empty slice next to x itself: its gradient adds nothing. */
static loom_status_t b_slice_empty(loom_graph_t *g, const loom_value_t *x,
                                   const params_t *p, loom_value_t *y) {
  loom_value_t e, flat[2];
  (void)p;
  TRY(loom_slice(g, x[0], 1, (int64_t[]){3}, (int64_t[]){1}, (int64_t[]){-1},
                 NULL, &e));
  TRY(loom_reshape(g, e, 1, (loom_dim_t[]){-1}, &flat[0]));
  TRY(loom_reshape(g, x[0], 1, (loom_dim_t[]){-1}, &flat[1]));
  return loom_concat(g, 2, flat, 0, y);
}

static void test_slice_empty(void) {
  test_seed(25);
  check_fd1("slice empty", rand_x(2, (int64_t[]){2, 4}), b_slice_empty,
            &(params_t){0});
}

static loom_status_t b_concat(loom_graph_t *g, const loom_value_t *x,
                              const params_t *p, loom_value_t *y) {
  return loom_concat(g, p->n, x, p->axis, y);
}

static void test_concat(void) {
  test_seed(19);
  loom_tensor_t *xs[3] = {rand_x(3, (int64_t[]){2, 1, 3}),
                          rand_x(3, (int64_t[]){2, 3, 3}),
                          rand_x(3, (int64_t[]){2, 2, 3})};
  check_fd("concat 3", 3, xs, b_concat, &(params_t){.n = 3, .axis = -2});
  check_fd("concat 1", 1, xs, b_concat, &(params_t){.n = 1, .axis = 0});
  for (int i = 0; i < 3; i++) loom_tensor_destroy(xs[i]);
}

/* Pieces 0 and 2 of a split into 3 reach the loss; piece 1 gets zeros. */
static loom_status_t b_split(loom_graph_t *g, const loom_value_t *x,
                             const params_t *p, loom_value_t *y) {
  loom_value_t parts[3], flat[2];
  TRY(loom_split(g, x[0], p->axis, 3, (int64_t[]){1, 2, 1}, parts));
  TRY(loom_reshape(g, parts[0], 1, (loom_dim_t[]){-1}, &flat[0]));
  TRY(loom_reshape(g, parts[2], 1, (loom_dim_t[]){-1}, &flat[1]));
  return loom_concat(g, 2, flat, 0, y);
}

static void test_split(void) {
  test_seed(20);
  check_fd1("split", rand_x(2, (int64_t[]){3, 4}), b_split, &(params_t){.axis = -1});
  check_fd1("split 0", rand_x(2, (int64_t[]){4, 2}), b_split, &(params_t){.axis = 0});
}

static loom_status_t b_pad(loom_graph_t *g, const loom_value_t *x,
                           const params_t *p, loom_value_t *y) {
  return loom_pad(g, x[0], p->a, (loom_pad_mode_t)p->op, 0.5, y);
}

/* Constant, reflect (pads below the size) and edge, random pads. */
static void test_pad(void) {
  test_seed(21);
  for (int mode = 0; mode < 3; mode++)
    for (int trial = 0; trial < 4; trial++) {
      int rank = (int)test_rand_int(1, 3);
      int64_t shape[LOOM_MAX_RANK];
      for (int d = 0; d < rank; d++) shape[d] = test_rand_int(2, 4);
      params_t p = {.op = mode};
      for (int d = 0; d < rank; d++) {
        p.a[d] = test_rand_int(0, shape[d] - 1);
        p.a[d + rank] = test_rand_int(0, shape[d] - 1);
      }
      check_fd1(mode == 0 ? "pad constant" : mode == 1 ? "pad reflect" : "pad edge",
                rand_x(rank, shape), b_pad, &p);
    }
}

/* Negative pads crop: random crops and pads of every mode, each dim
 * keeping at least one element; and a crop reaching into the padding,
 * whose outputs are all fill (x gets zeros). */
static void test_pad_crop(void) {
  test_seed(25);
  for (int mode = 0; mode < 3; mode++)
    for (int trial = 0; trial < 4; trial++) {
      int rank = (int)test_rand_int(1, 3);
      int64_t shape[LOOM_MAX_RANK];
      params_t p = {.op = mode};
      for (int d = 0; d < rank; d++) {
        int64_t n = shape[d] = test_rand_int(3, 5);
        int64_t b = test_rand_int(-(n - 1), n - 1);
        int64_t room = n - 1 - (b < 0 ? -b : 0); /* what the end may still crop */
        p.a[d] = b;
        p.a[d + rank] = test_rand_int(-room, n - 1);
      }
      p.a[0] = -test_rand_int(1, shape[0] - 1); /* at least one crop */
      p.a[rank] = test_rand_int(0, 1);
      check_fd1(mode == 0 ? "pad constant, crops" : mode == 1 ? "pad reflect, crops" : "pad edge, crops",
                rand_x(rank, shape), b_pad, &p);
    }
  params_t beyond = {.op = 0, .a = {-4, 0, 3, 0}};
  check_fd1("pad crop into the padding", rand_x(2, (int64_t[]){3, 2}), b_pad, &beyond);
}

/* ---- Gather, index_select, embedding, scatter_add ------------------------------ */

static loom_status_t b_index(loom_graph_t *g, const loom_value_t *x,
                             const params_t *p, loom_value_t *y) {
  loom_value_t ind;
  TRY(loom_graph_constant(g, p->index, &ind));
  if (p->op == 0) return loom_gather(g, x[0], ind, p->axis, y);
  if (p->op == 1) return loom_index_select(g, x[0], ind, p->axis, y);
  return loom_embedding(g, x[0], ind, y);
}

/* Repeated indices accumulate; negative ones count from the end. */
static void test_gather_family(void) {
  test_seed(22);
  const loom_dtype_t idt[2] = {LOOM_I64, LOOM_I32};
  for (int k = 0; k < 2; k++) {
    params_t p = {.op = 0, .axis = -2};
    p.index = test_tensor(idt[k], 2, (int64_t[]){2, 3},
                          (double[]){0, 2, -1, 2, 1, 0});
    check_fd1("gather", rand_x(3, (int64_t[]){2, 3, 2}), b_index, &p);
    p.axis = 0;
    check_fd1("gather axis 0", rand_x(2, (int64_t[]){3, 4}), b_index, &p);
    loom_tensor_destroy(p.index);
    p.index = test_tensor(idt[k], 0, NULL, (double[]){-1});
    check_fd1("gather scalar index", rand_x(2, (int64_t[]){3, 4}), b_index, &p);
    loom_tensor_destroy(p.index);
    p = (params_t){.op = 1, .axis = 1};
    p.index = test_tensor(idt[k], 1, (int64_t[]){4}, (double[]){3, 0, 3, -2});
    check_fd1("index_select", rand_x(3, (int64_t[]){2, 4, 2}), b_index, &p);
    loom_tensor_destroy(p.index);
    p = (params_t){.op = 2};
    p.index = test_tensor(idt[k], 2, (int64_t[]){2, 2}, (double[]){4, 1, 1, 0});
    check_fd1("embedding", rand_x(2, (int64_t[]){5, 3}), b_index, &p);
    loom_tensor_destroy(p.index);
  }
}

static loom_status_t b_scatter_add(loom_graph_t *g, const loom_value_t *x,
                                   const params_t *p, loom_value_t *y) {
  loom_value_t ind;
  TRY(loom_graph_constant(g, p->index, &ind));
  return loom_scatter_add(g, x[0], ind, x[1], p->axis, y);
}

/* Both self and src; index smaller than src (src's other entries get
 * zero), repeated targets. */
static void test_scatter_add(void) {
  test_seed(23);
  params_t p = {.axis = -1};
  p.index = test_tensor(LOOM_I64, 2, (int64_t[]){2, 2},
                        (double[]){3, 3, 0, 2});
  loom_tensor_t *xs[2] = {rand_x(2, (int64_t[]){3, 4}),
                          rand_x(2, (int64_t[]){2, 3})};
  check_fd("scatter_add", 2, xs, b_scatter_add, &p);
  loom_tensor_destroy(p.index);
  p = (params_t){.axis = 0};
  p.index = test_tensor(LOOM_I32, 2, (int64_t[]){2, 3},
                        (double[]){1, 0, 1, 1, 2, 0});
  check_fd("scatter_add axis 0", 2, xs, b_scatter_add, &p);
  loom_tensor_destroy(p.index);
  loom_tensor_destroy(xs[0]);
  loom_tensor_destroy(xs[1]);
}

/* scatter_add whose index repeats a column (p->index) along every dim
 * but the axis: made by an add of zeros (op 0, the column first; 1,
 * second) or an expand (op 2) to src's shape (p->a, rank p->n). */
static loom_status_t b_scatter_column(loom_graph_t *g, const loom_value_t *x,
                                      const params_t *p, loom_value_t *y) {
  loom_value_t col, zeros, ind;
  TRY(loom_graph_constant(g, p->index, &col));
  loom_dim_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < p->n; d++) shape[d] = p->a[d];
  if (p->op == 2) {
    TRY(loom_expand(g, col, p->n, shape, &ind));
  } else {
    TRY(loom_full(g, p->n, shape, 0.0, loom_tensor_dtype(p->index), &zeros));
    TRY(p->op == 0 ? loom_add(g, col, zeros, &ind) : loom_add(g, zeros, col, &ind));
  }
  return loom_scatter_add(g, x[0], ind, x[1], p->axis, y);
}

/* The repeated column's gradient is src's rows picked by index_select (no
 * flat positions gathered): checked by finite differences, and that the
 * gradient graph holds no gather. */
static void test_scatter_add_column(void) {
  test_seed(26);
  for (int op = 0; op < 3; op++) {
    params_t p = {.op = op, .axis = 0, .n = 2, .a = {5, 3}};
    p.index = test_tensor(LOOM_I64, 2, (int64_t[]){5, 1}, (double[]){2, 0, 2, 3, 1});
    loom_tensor_t *xs[2] = {rand_x(2, (int64_t[]){4, 3}), rand_x(2, (int64_t[]){5, 3})};
    check_fd("scatter_add, a repeated column", 2, xs, b_scatter_column, &p);
    loom_status_t s;
    loom_graph_t *g = grad_graph(2, xs, b_scatter_column, &p, &s);
    int gathers = 0, selects = 0;
    for (int64_t i = 0; g && i < g->n_nodes; i++) {
      gathers += g->nodes[i].op == IR_OP_GATHER;
      selects += g->nodes[i].op == IR_OP_INDEX_SELECT;
    }
    CHECK(gathers == 0 && selects == 1);
    loom_graph_destroy(g);
    loom_tensor_destroy(p.index);
    loom_tensor_destroy(xs[0]);
    loom_tensor_destroy(xs[1]);
  }
  /* the middle axis of rank 3 */
  params_t p = {.op = 2, .axis = -2, .n = 3, .a = {2, 4, 3}};
  p.index = test_tensor(LOOM_I32, 3, (int64_t[]){1, 4, 1}, (double[]){1, 1, 0, 2});
  loom_tensor_t *xs[2] = {rand_x(3, (int64_t[]){2, 3, 3}), rand_x(3, (int64_t[]){2, 4, 3})};
  check_fd("scatter_add, a repeated column on axis 1", 2, xs, b_scatter_column, &p);
  loom_tensor_destroy(p.index);
  loom_tensor_destroy(xs[0]);
  loom_tensor_destroy(xs[1]);
}

/* ---- Dtypes, strided inputs, errors ----------------------------------------- */

/* The rules build graphs in the input's dtype: the gradient in each float
 * dtype matches f64's within that dtype's precision. */
static void test_float_dtypes(void) {
  static const loom_dtype_t dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  static const double tol[] = {1e-5, 1e-2, 5e-2};
  test_seed(24);
  params_t pads = {.op = 1, .a = {1, 2, 1, 0}};
  params_t var = {.op = 6, .n = 1, .a = {-1}, .flag2 = 1};
  params_t sm = {.op = 1, .axis = 0};
  const build_fn fns[] = {b_pad, b_reduce, b_softmax};
  const params_t *ps[] = {&pads, &var, &sm};
  for (int f = 0; f < 3; f++) {
    loom_tensor_t *x = rand_x(2, (int64_t[]){3, 3});
    loom_status_t s;
    loom_graph_t *g = grad_graph(1, &x, fns[f], ps[f], &s);
    loom_tensor_t *want[2] = {0};
    CHECK_OK(loom_interpret(g, 1, &x, 2, want));
    for (int k = 0; k < 3; k++) {
      double v[9];
      for (int i = 0; i < 9; i++) v[i] = test_get(x, i);
      loom_tensor_t *xk = test_tensor(dts[k], 2, (int64_t[]){3, 3}, v);
      loom_graph_t *gk = grad_graph(1, &xk, fns[f], ps[f], &s);
      loom_tensor_t *got[2] = {0};
      CHECK_OK(loom_interpret(gk, 1, &xk, 2, got));
      for (int i = 0; got[1] && want[1] && i < 9; i++)
        CHECK_NEAR(test_get(got[1], i), test_get(want[1], i), tol[k], 8 * tol[k]);
      loom_tensor_destroy(got[0]);
      loom_tensor_destroy(got[1]);
      loom_tensor_destroy(xk);
      loom_graph_destroy(gk);
    }
    loom_tensor_destroy(want[0]);
    loom_tensor_destroy(want[1]);
    loom_tensor_destroy(x);
    loom_graph_destroy(g);
  }
}

/* A transposed view bound as the input gives the contiguous gradient. */
static void test_strided_input(void) {
  double buf[6] = {0.3, -1.2, 0.7, 2.0, -0.4, 1.1}; /* (3, 2) row-major */
  double tr[6] = {0.3, 0.7, -0.4, -1.2, 2.0, 1.1};  /* its transpose (2, 3) */
  loom_tensor_t *view = NULL, *dense = test_tensor(LOOM_F64, 2, (int64_t[]){2, 3}, tr);
  CHECK_OK(loom_tensor_wrap(LOOM_F64, 2, (int64_t[]){2, 3}, (int64_t[]){1, 2},
                            buf, &view));
  params_t p = {.n = 1, .a = {2}, .b = {INT64_MIN}, .d = {1}, .s = {-2}};
  loom_status_t s;
  loom_graph_t *g = grad_graph(1, &dense, b_slice, &p, &s);
  loom_tensor_t *a[2] = {0}, *b[2] = {0};
  CHECK_OK(loom_interpret(g, 1, &dense, 2, a));
  CHECK_OK(loom_interpret(g, 1, &view, 2, b));
  for (int i = 0; a[1] && b[1] && i < 6; i++)
    CHECK_NEAR(test_get(b[1], i), test_get(a[1], i), 0, 0);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(a[i]), loom_tensor_destroy(b[i]);
  loom_tensor_destroy(view);
  loom_tensor_destroy(dense);
  loom_graph_destroy(g);
}

/* Rules that need a known size fail naming the op when it is symbolic. */
static void check_symbolic_error(build_fn build, const params_t *p,
                                 int sym_axis, const char *word) {
  loom_graph_t *g = NULL;
  loom_value_t x, y, loss, gx;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  loom_dim_t shape[2] = {3, 4};
  shape[sym_axis] = n;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, shape, &x));
  CHECK_OK(build(g, &x, p, &y));
  CHECK_OK(loom_logsumexp(g, y, 0, NULL, 0, &loss));
  CHECK_ERR(loom_grad(g, loss, 1, &x, &gx), LOOM_ERR_SHAPE, "symbolic");
  CHECK_ERR(loom_grad(g, loss, 1, &x, &gx), LOOM_ERR_SHAPE, word);
  loom_graph_destroy(g);
}

static loom_status_t b_concat_self(loom_graph_t *g, const loom_value_t *x,
                                   const params_t *p, loom_value_t *y) {
  return loom_concat(g, 2, (loom_value_t[]){x[0], x[0]}, p->axis, y);
}

static void test_symbolic_errors(void) {
  check_symbolic_error(b_concat_self, &(params_t){.axis = 0}, 0, "concat");
  check_symbolic_error(b_pad, &(params_t){.a = {1, 0, 0, 0}}, 0, "pad");
}

/* index_select over a symbolic axis (a trace's dim): the gradient adds
 * dy's rows at the indices; a negative index, which only a known size
 * could wrap, fails at run time naming the scatter. */
static void test_symbolic_gather(void) {
  loom_graph_t *g = NULL;
  loom_value_t x, ind, y, loss, gx;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, (loom_dim_t[]){n, 2}, &x));
  CHECK_OK(loom_graph_input(g, "i", LOOM_I64, 1, (loom_dim_t[]){3}, &ind));
  CHECK_OK(loom_index_select(g, x, ind, 0, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &x, &gx));
  CHECK_OK(loom_graph_output(g, gx));
  loom_tensor_t *in[2] = {test_tensor(LOOM_F64, 2, (int64_t[]){4, 2},
                                      (double[]){1, 2, 3, 4, 5, 6, 7, 8}),
                          test_tensor(LOOM_I64, 1, (int64_t[]){3}, (double[]){2, 0, 2})};
  loom_tensor_t *out = NULL;
  CHECK_OK(loom_interpret(g, 2, in, 1, &out));
  double want[8] = {1, 1, 0, 0, 2, 2, 0, 0}; /* row 2 picked twice */
  if (out) CHECK_TENSOR(out, want, 8, 0, 0);
  loom_tensor_destroy(out);
  out = NULL;
  loom_tensor_destroy(in[1]);
  in[1] = test_tensor(LOOM_I64, 1, (int64_t[]){3}, (double[]){-1, 0, 2});
  CHECK_ERR(loom_interpret(g, 2, in, 1, &out), LOOM_ERR_VALUE, "scatter_add");
  loom_tensor_destroy(out);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* With symbolic dims on reduced axes, mean and variance count at run time. */
static void test_symbolic_mean(void) {
  loom_graph_t *g = NULL;
  loom_value_t x, y, loss, gx;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, (loom_dim_t[]){n, 2}, &x));
  CHECK_OK(loom_mean(g, x, 1, (int64_t[]){0}, 0, &y));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &x, &gx));
  CHECK_OK(loom_graph_output(g, gx));
  loom_tensor_t *in = test_tensor(LOOM_F64, 2, (int64_t[]){4, 2},
                                  (double[]){1, 2, 3, 4, 5, 6, 7, 8}), *out = NULL;
  CHECK_OK(loom_interpret(g, 1, &in, 1, &out));
  double want[8] = {0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25};
  if (out) CHECK_TENSOR(out, want, 8, 1e-15, 0);
  loom_tensor_destroy(out);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* A whole-axis slice keeps a symbolic dim; its gradient on a graph with
 * x (n, 3) equals the one on a graph with x (4, 3), checked above by
 * finite differences. */
static void test_symbolic_slice(void) {
  params_t p = {.n = 2, .a = {-1, 1}, .b = {INT64_MIN, 3}, .d = {0, 1},
                .s = {-1, 1}};
  test_seed(27);
  loom_tensor_t *x = rand_x(2, (int64_t[]){4, 3});
  check_fd("slice whole axis", 1, &x, b_slice, &p);
  loom_status_t s;
  loom_graph_t *fixed = grad_graph(1, &x, b_slice, &p, &s), *g = NULL;
  loom_tensor_t *want[2] = {0}, *got = NULL;
  CHECK_OK(loom_interpret(fixed, 1, &x, 2, want));
  loom_value_t xv, y, loss, gx;
  loom_dim_t n;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_dim_symbol(g, "n", &n));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F64, 2, (loom_dim_t[]){n, 3}, &xv));
  CHECK_OK(b_slice(g, &xv, &p, &y));
  CHECK_OK(loom_logsumexp(g, y, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &xv, &gx));
  CHECK_OK(loom_graph_output(g, gx));
  CHECK_OK(loom_interpret(g, 1, &x, 1, &got));
  for (int i = 0; got && want[1] && i < 12; i++)
    CHECK_NEAR(test_get(got, i), test_get(want[1], i), 0, 0);
  loom_tensor_destroy(got);
  loom_tensor_destroy(want[0]);
  loom_tensor_destroy(want[1]);
  loom_tensor_destroy(x);
  loom_graph_destroy(fixed);
  loom_graph_destroy(g);
}

/* The gradient graphs compile: test_run1 checks the compiled gradient
 * against the interpreter's. */
static void check_compiled(loom_tensor_t *x, build_fn build, const params_t *p) {
  loom_graph_t *g = NULL;
  loom_value_t xv, y, loss, gx;
  int64_t shape[LOOM_MAX_RANK];
  int rank = loom_tensor_rank(x);
  for (int d = 0; d < rank; d++) shape[d] = loom_tensor_dim(x, d);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", loom_tensor_dtype(x), rank, shape, &xv));
  CHECK_OK(build(g, &xv, p, &y));
  CHECK_OK(loom_logsumexp(g, y, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &xv, &gx));
  CHECK_OK(loom_graph_output(g, gx));
  loom_tensor_destroy(test_run1(g, 1, &x));
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
}

static void test_compiled(void) {
  test_seed(26);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 5}, -2, 2);
  check_compiled(x, b_slice, &(params_t){.n = 2, .a = {3, 0}, .b = {INT64_MIN, 5},
                                         .d = {0, 1}, .s = {-2, 2}});
  x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 4}, -2, 2);
  check_compiled(x, b_pad, &(params_t){.op = 1, .a = {2, 1, 1, 3}});
  x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 4}, -2, 2);
  check_compiled(x, b_reduce, &(params_t){.op = 2, .n = 1, .a = {-1}});
  x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 4}, -2, 2);
  check_compiled(x, b_softmax, &(params_t){.axis = -1});
  params_t gp = {.op = 0, .axis = 1};
  gp.index = test_tensor(LOOM_I64, 1, (int64_t[]){3}, (double[]){0, -1, 0});
  x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 4}, -2, 2);
  check_compiled(x, b_index, &gp);
  loom_tensor_destroy(gp.index);
}

int main(void) {
  TEST_RUN(test_reductions);
  TEST_RUN(test_reduce_scalar);
  TEST_RUN(test_max_min_ties);
  TEST_RUN(test_prod_zeros);
  TEST_RUN(test_cumsum);
  TEST_RUN(test_topk);
  TEST_RUN(test_softmax);
  TEST_RUN(test_reshape_family);
  TEST_RUN(test_transpose_flip_tile);
  TEST_RUN(test_expand);
  TEST_RUN(test_slice);
  TEST_RUN(test_slice_empty);
  TEST_RUN(test_concat);
  TEST_RUN(test_split);
  TEST_RUN(test_pad);
  TEST_RUN(test_pad_crop);
  TEST_RUN(test_gather_family);
  TEST_RUN(test_scatter_add);
  TEST_RUN(test_scatter_add_column);
  TEST_RUN(test_float_dtypes);
  TEST_RUN(test_strided_input);
  TEST_RUN(test_symbolic_errors);
  TEST_RUN(test_symbolic_gather);
  TEST_RUN(test_symbolic_mean);
  TEST_RUN(test_symbolic_slice);
  TEST_RUN(test_compiled);
  return test_summary();
}
