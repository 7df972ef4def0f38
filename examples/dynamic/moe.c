/* The mixture-of-experts workload (Moe in bench/peers/torch_dynamic.py):
 * 256 tokens of 64 features, a router with top-2 softmax routing over 8
 * experts (64-128-64, ReLU), gates renormalized over the two, a residual
 * sum and an 8-class head; the label of a token is the argmax of x @ T^T
 * for a fixed teacher T.
 *
 * Which tokens an expert sees is decided by data: the rows routed to
 * expert e come from nonzero, which the trace runs eagerly, and its count
 * (a dim under the config's policy, the trace's data_dims) sizes that
 * expert's part of the next segment. The trace thus cuts a step in two
 * segments: routing (up to the masks), then the experts, the head and the
 * loss, keyed by the eight counts. */
#include <math.h>
#include <string.h>

#include "dynamic.h"
#include "loom/ops.h"
#include "loom/train.h"

enum { MOE_N = 256, MOE_D = 64, MOE_E = 8, MOE_HID = 128, MOE_C = 8 };

typedef struct moe {
  loom_tensor_t *router, *head, *head_b;
  loom_tensor_t *w1[MOE_E], *b1[MOE_E], *w2[MOE_E], *b2[MOE_E];
  loom_tensor_t *teacher;
  loom_tensor_t *x, *y; /* the batch being trained */
  loom_tensor_t *all[4 * MOE_E + 3]; /* every parameter */
} moe_t;

static void moe_free(moe_t *m) {
  loom_tensor_t **all[] = {&m->router, &m->head, &m->head_b, &m->teacher,
                           &m->x, &m->y};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    loom_tensor_destroy(*all[i]);
    *all[i] = NULL;
  }
  for (int e = 0; e < MOE_E; e++) {
    loom_tensor_destroy(m->w1[e]);
    loom_tensor_destroy(m->b1[e]);
    loom_tensor_destroy(m->w2[e]);
    loom_tensor_destroy(m->b2[e]);
  }
}

static loom_status_t moe_init(moe_t *m) {
  memset(m, 0, sizeof *m);
  const double bd = 1 / sqrt(MOE_D), bh = 1 / sqrt(MOE_HID);
  int64_t rs[2] = {MOE_E, MOE_D}, hs[2] = {MOE_C, MOE_D}, hb = MOE_C;
  int64_t w1s[2] = {MOE_HID, MOE_D}, w2s[2] = {MOE_D, MOE_HID};
  int64_t b1s = MOE_HID, b2s = MOE_D;
  DYN_TRY(dyn_values("moe.router", bd, 2, rs, &m->router));
  char name[64];
  for (int e = 0; e < MOE_E; e++) {
    DYN_TRY(dyn_values(dyn_name(name, sizeof name, "moe.e%d.w1", e), bd, 2, w1s, &m->w1[e]));
    DYN_TRY(dyn_values(dyn_name(name, sizeof name, "moe.e%d.b1", e), bd, 1, &b1s, &m->b1[e]));
    DYN_TRY(dyn_values(dyn_name(name, sizeof name, "moe.e%d.w2", e), bh, 2, w2s, &m->w2[e]));
    DYN_TRY(dyn_values(dyn_name(name, sizeof name, "moe.e%d.b2", e), bh, 1, &b2s, &m->b2[e]));
  }
  DYN_TRY(dyn_values("moe.head", bd, 2, hs, &m->head));
  DYN_TRY(dyn_values("moe.head_b", bd, 1, &hb, &m->head_b));
  int n = 0;
  m->all[n++] = m->router;
  for (int e = 0; e < MOE_E; e++) {
    m->all[n++] = m->w1[e], m->all[n++] = m->b1[e];
    m->all[n++] = m->w2[e], m->all[n++] = m->b2[e];
  }
  m->all[n++] = m->head, m->all[n++] = m->head_b;
  return dyn_values("moe.teacher", 1.0, 2, hs, &m->teacher);
}

/* Batch k: x from stream moe.x.k; labels argmax(x @ T^T) (first maximum,
 * as torch.argmax), in double: a float32 near-tie is not worth a
 * different label. */
static loom_status_t moe_batch(void *self, int k, int64_t *items) {
  moe_t *m = self;
  char name[64];
  int64_t xs[2] = {MOE_N, MOE_D}, n = MOE_N;
  loom_tensor_destroy(m->x);
  loom_tensor_destroy(m->y);
  m->x = m->y = NULL;
  DYN_TRY(dyn_values(dyn_name(name, sizeof name, "moe.x.%d", k), 1.0, 2, xs, &m->x));
  DYN_TRY(loom_tensor_create(LOOM_I64, 1, &n, &m->y));
  const float *x = loom_tensor_data(m->x), *tw = loom_tensor_data(m->teacher);
  int64_t *y = loom_tensor_data(m->y);
  for (int i = 0; i < MOE_N; i++) {
    double best = -INFINITY;
    for (int c = 0; c < MOE_C; c++) {
      double s = 0;
      for (int d = 0; d < MOE_D; d++) s += (double)x[i * MOE_D + d] * tw[c * MOE_D + d];
      if (s > best) best = s, y[i] = c;
    }
  }
  *items = MOE_N;
  return LOOM_OK;
}

/* Routing: gates G (N, E), the renormalized top-2 probability of each
 * token's experts (0 elsewhere), and M (N, E), 1 where a token goes. */
static loom_status_t route(loom_graph_t *g, loom_value_t x, loom_value_t router,
                           loom_value_t *gates, loom_value_t *mask) {
  loom_value_t logits, probs, topv, topi, vsum, top, oh, g3, wg;
  const int64_t ax1 = 1, ax2 = 2;
  DYN_TRY(loom_matmul(g, x, router, 0, 1, &logits));
  DYN_TRY(loom_softmax(g, logits, 1, &probs));
  DYN_TRY(loom_topk(g, probs, 2, 1, 1, &topv, &topi));
  DYN_TRY(loom_sum(g, topv, 1, &ax1, 1, &vsum));
  DYN_TRY(loom_div(g, topv, vsum, &top));
  DYN_TRY(loom_one_hot(g, topi, MOE_E, LOOM_F32, &oh)); /* (N, 2, E) */
  DYN_TRY(loom_unsqueeze(g, top, 1, &ax2, &g3));
  DYN_TRY(loom_mul(g, g3, oh, &wg));
  DYN_TRY(loom_sum(g, wg, 1, &ax1, 0, gates));
  return loom_sum(g, oh, 1, &ax1, 0, mask);
}

/* Column e of v (N, E) as (N, 1) (keep 1) or (N) (keep 0). */
static loom_status_t column(loom_graph_t *g, loom_value_t v, int e, int keep,
                            loom_value_t *out) {
  int64_t start = e, end = e + 1, axis = 1, one = 1;
  loom_value_t c;
  DYN_TRY(loom_slice(g, v, 1, &start, &end, &axis, NULL, &c));
  if (keep) {
    *out = c;
    return LOOM_OK;
  }
  return loom_squeeze(g, c, 1, &one, out);
}

/* w (out, in) and b (out) as one (out, in + 1) matrix. */
static loom_status_t with_bias(loom_graph_t *g, loom_value_t w, loom_value_t b,
                               loom_value_t *out) {
  const int64_t ax1 = 1;
  loom_value_t wb[2] = {w, b};
  DYN_TRY(loom_unsqueeze(g, b, 1, &ax1, &wb[1]));
  return loom_concat(g, 2, wb, 1, out);
}

/* acc += expert e on the rows nz (count, 1) of x, times their gates:
 * torch's out.index_add(0, rows, (h @ w2^T + b2) * gate), a scatter_add
 * whose index is the rows broadcast along the features (gcol: the gate
 * of each token for this expert). The expert's rows are taken from x1 =
 * [x 1], so that b1 joins w1 as a last column, and b2 w2 against a column
 * of ones: its gradients come out of the GEMMs instead of sums over a dim
 * of data-decided size. */
static loom_status_t expert(loom_graph_t *g, loom_value_t x1, loom_value_t nz,
                            loom_value_t gcol, const loom_value_t *w,
                            loom_value_t *acc) {
  const int64_t ax1 = 1, last[1] = {MOE_D}, end[1] = {MOE_D + 1}, axis[1] = {1};
  loom_value_t rows, w1, w2, xe, one, a, h, h1[2], hb, b, gate, y, zi, index;
  DYN_TRY(loom_squeeze(g, nz, 1, &ax1, &rows));
  DYN_TRY(with_bias(g, w[0], w[1], &w1)); /* (HID, D + 1) */
  DYN_TRY(with_bias(g, w[2], w[3], &w2)); /* (D, HID + 1) */
  DYN_TRY(loom_index_select(g, x1, rows, 0, &xe));
  DYN_TRY(loom_slice(g, xe, 1, last, end, axis, NULL, &one)); /* (count, 1) */
  DYN_TRY(loom_matmul(g, xe, w1, 0, 1, &a));
  DYN_TRY(loom_relu(g, a, &h));
  h1[0] = h, h1[1] = one;
  DYN_TRY(loom_concat(g, 2, h1, 1, &hb));
  DYN_TRY(loom_matmul(g, hb, w2, 0, 1, &b));
  DYN_TRY(loom_index_select(g, gcol, rows, 0, &gate)); /* (count, 1) */
  DYN_TRY(loom_mul(g, b, gate, &y));
  DYN_TRY(loom_full(g, 2, (loom_dim_t[]){1, MOE_D}, 0.0, LOOM_I64, &zi));
  DYN_TRY(loom_add(g, nz, zi, &index)); /* (count, D) */
  return loom_scatter_add(g, *acc, index, y, 0, acc);
}

static loom_status_t moe_forward(void *self, loom_trace_t *t, int k,
                                 loom_value_t *loss) {
  (void)k;
  moe_t *m = self;
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t x, y, router, head, head_b, w[MOE_E][4];
  DYN_TRY(loom_trace_input(t, m->x, NULL, &x));
  DYN_TRY(loom_trace_input(t, m->y, NULL, &y));
  DYN_TRY(loom_trace_param(t, m->router, &router));
  for (int e = 0; e < MOE_E; e++) {
    DYN_TRY(loom_trace_param(t, m->w1[e], &w[e][0]));
    DYN_TRY(loom_trace_param(t, m->b1[e], &w[e][1]));
    DYN_TRY(loom_trace_param(t, m->w2[e], &w[e][2]));
    DYN_TRY(loom_trace_param(t, m->b2[e], &w[e][3]));
  }
  DYN_TRY(loom_trace_param(t, m->head, &head));
  DYN_TRY(loom_trace_param(t, m->head_b, &head_b));

  loom_value_t gates, mask, gcol[MOE_E], sel[MOE_E], nz[MOE_E];
  DYN_TRY(route(g, x, router, &gates, &mask));
  /* every column before the first nonzero: its cut makes them all real */
  for (int e = 0; e < MOE_E; e++) {
    DYN_TRY(column(g, gates, e, 1, &gcol[e]));
    DYN_TRY(column(g, mask, e, 0, &sel[e]));
  }
  for (int e = 0; e < MOE_E; e++) DYN_TRY(loom_nonzero(g, sel[e], &nz[e]));

  int64_t xs[2] = {MOE_N, MOE_D}, os[2] = {MOE_N, 1};
  loom_value_t acc, ones, x1, xo[2], z, logits, hl;
  DYN_TRY(loom_full(g, 2, xs, 0.0, LOOM_F32, &acc));
  DYN_TRY(loom_full(g, 2, os, 1.0, LOOM_F32, &ones));
  xo[0] = x, xo[1] = ones;
  DYN_TRY(loom_concat(g, 2, xo, 1, &x1)); /* (N, D + 1) */
  for (int e = 0; e < MOE_E; e++)
    DYN_TRY(expert(g, x1, nz[e], gcol[e], w[e], &acc));
  DYN_TRY(loom_add(g, x, acc, &z));
  DYN_TRY(loom_matmul(g, z, head, 0, 1, &hl));
  DYN_TRY(loom_add(g, hl, head_b, &logits));
  return loom_cross_entropy(g, logits, y, LOOM_NO_IGNORE_INDEX, 0.0,
                            LOOM_REDUCTION_MEAN, loss);
}

loom_status_t dyn_moe_run(const dyn_config_t *c, int warmup, int steps,
                          dyn_result_t *out) {
  DYN_CHECK_ARG(c);
  DYN_CHECK_ARG(out);
  moe_t m;
  loom_trace_t *t = NULL;
  /* the counts of tokens per expert are the sizes nonzero decides */
  loom_dim_policy_t counts = dyn_policy(c->policy, NULL);
  loom_status_t s = moe_init(&m);
  if (s == LOOM_OK) s = dyn_trace_create(c, c->policy == LOOM_DIM_AUTO ? NULL : &counts, &t);
  if (s == LOOM_OK) {
    dyn_model_t model = {&m, moe_batch, moe_forward};
    s = dyn_train(c, t, &model, warmup, steps, out);
  }
  if (s == LOOM_OK) s = dyn_copy_params(c, 4 * MOE_E + 3, m.all, out);
  loom_trace_destroy(t);
  moe_free(&m);
  return s;
}
