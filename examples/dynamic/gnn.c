/* The GNN workload (Gnn in bench/peers/torch_dynamic.py): per step a
 * random graph of N in [200, 1000] nodes (32 features) with 4N random
 * edges plus a self loop per node, and two mean-aggregating GCN layers
 * (32-64-8, ReLU between):
 *   aggregate(h) = scatter_add(zeros, dst, h[src]) / in_degree
 *   out = aggregate(relu(aggregate(x W1^T) + b1) W2^T) + b2
 * The label of a node is the argmax of (the mean of its in-neighbours'
 * features) @ T^T for a fixed teacher T. Items: nodes.
 *
 * The whole step is one segment (cut by the loss read); the node count N
 * and the edge count E are the dims under the configured shape policy, so
 * a symbolic policy compiles one forward and one backward for every
 * graph. Nothing in the graph has a size attribute: the zeros that
 * scatter_add adds into and its (E, D) index come from broadcasting
 * against constants of shape (1, D). */
#include <math.h>
#include <string.h>

#include "dynamic.h"
#include "loom/ops.h"
#include "loom/train.h"

enum { F = 32, HID = 64, C = 8, N_MIN = 200, N_MAX = 1000 };

typedef struct gnn {
  loom_tensor_t *w1, *b1, *w2, *b2, *teacher;
  /* the batch being trained */
  int64_t n, e;
  loom_tensor_t *x, *src, *dst, *deg, *y;
  loom_dim_policy_t nodes, edges;
  int first_batch;
} gnn_t;

static void batch_free(gnn_t *m) {
  loom_tensor_t **all[] = {&m->x, &m->src, &m->dst, &m->deg, &m->y};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    loom_tensor_destroy(*all[i]);
    *all[i] = NULL;
  }
}

static void gnn_free(gnn_t *m) {
  batch_free(m);
  loom_tensor_t **all[] = {&m->w1, &m->b1, &m->w2, &m->b2, &m->teacher};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    loom_tensor_destroy(*all[i]);
    *all[i] = NULL;
  }
}

/* Powers of two from 256 nodes up; E's buckets are five times those. */
static loom_dim_policy_t policy(loom_dim_policy_kind_t kind, const char *name,
                                int64_t scale) {
  loom_dim_policy_t p = dyn_policy(kind, name);
  if (kind == LOOM_DIM_BUCKET) {
    p.n_buckets = 3;
    for (int i = 0; i < 3; i++) p.buckets[i] = scale * ((int64_t)256 << i);
  }
  return p;
}

static loom_status_t gnn_init(gnn_t *m, loom_dim_policy_kind_t kind) {
  memset(m, 0, sizeof *m);
  int64_t s1[2] = {HID, F}, s2[2] = {C, HID}, st[2] = {C, F}, h = HID, c = C;
  DYN_TRY(dyn_values("gnn.w1", 1 / sqrt(F), 2, s1, &m->w1));
  DYN_TRY(dyn_values("gnn.b1", 1 / sqrt(F), 1, &h, &m->b1));
  DYN_TRY(dyn_values("gnn.w2", 1 / sqrt(HID), 2, s2, &m->w2));
  DYN_TRY(dyn_values("gnn.b2", 1 / sqrt(HID), 1, &c, &m->b2));
  DYN_TRY(dyn_values("gnn.teacher", 1.0, 2, st, &m->teacher));
  m->nodes = policy(kind, "N", 1);
  m->edges = policy(kind, "E", 5);
  return LOOM_OK;
}

/* Endpoints: 4n drawn from stream `name` (randints over 0..n-1), then
 * the n self loops. */
static void endpoints(const char *name, int64_t n, int64_t *out) {
  for (int64_t i = 0; i < 4 * n; i++) out[i] = dyn_randint(name, i, 0, n - 1);
  for (int64_t i = 0; i < n; i++) out[4 * n + i] = i;
}

/* Labels: argmax over classes of mean_in(x) @ T^T (first maximum), in
 * float with the edges in order, as the twin's index_add. */
static loom_status_t labels(gnn_t *m) {
  int64_t n = m->n, shape[2] = {n, F};
  loom_tensor_t *agg;
  DYN_TRY(loom_tensor_create(LOOM_F32, 2, shape, &agg));
  float *a = loom_tensor_data(agg);
  const float *x = loom_tensor_data(m->x), *deg = loom_tensor_data(m->deg);
  const float *tw = loom_tensor_data(m->teacher);
  const int64_t *src = loom_tensor_data(m->src), *dst = loom_tensor_data(m->dst);
  int64_t *y = loom_tensor_data(m->y);
  for (int64_t k = 0; k < m->e; k++)
    for (int f = 0; f < F; f++) a[dst[k] * F + f] += x[src[k] * F + f];
  for (int64_t i = 0; i < n; i++) {
    double best = -INFINITY;
    for (int c = 0; c < C; c++) {
      double v = 0;
      for (int f = 0; f < F; f++) v += (double)(a[i * F + f] / deg[i]) * tw[c * F + f];
      if (v > best) best = v, y[i] = c;
    }
  }
  loom_tensor_destroy(agg);
  return LOOM_OK;
}

/* Batch k: N from stream gnn.nodes, edges from gnn.src.k / gnn.dst.k,
 * features from gnn.x.k, in-degrees (self loops included) as floats. */
static loom_status_t gnn_batch(void *self, int k, int64_t *items) {
  gnn_t *m = self;
  char name[48];
  batch_free(m);
  k += m->first_batch;
  m->n = dyn_randint("gnn.nodes", k, N_MIN, N_MAX);
  m->e = 5 * m->n;
  int64_t xs[2] = {m->n, F};
  DYN_TRY(dyn_values(dyn_name(name, sizeof name, "gnn.x.%d", k), 1.0, 2, xs, &m->x));
  DYN_TRY(loom_tensor_create(LOOM_I64, 1, &m->e, &m->src));
  DYN_TRY(loom_tensor_create(LOOM_I64, 1, &m->e, &m->dst));
  DYN_TRY(loom_tensor_create(LOOM_F32, 1, &m->n, &m->deg));
  DYN_TRY(loom_tensor_create(LOOM_I64, 1, &m->n, &m->y));
  int64_t *src = loom_tensor_data(m->src), *dst = loom_tensor_data(m->dst);
  endpoints(dyn_name(name, sizeof name, "gnn.src.%d", k), m->n, src);
  endpoints(dyn_name(name, sizeof name, "gnn.dst.%d", k), m->n, dst);
  float *deg = loom_tensor_data(m->deg);
  for (int64_t i = 0; i < m->e; i++) deg[dst[i]] += 1.0f;
  *items = m->n;
  return labels(m);
}

typedef struct graph_vals {
  loom_value_t src, dst, deg; /* deg: (N, 1) */
} graph_vals_t;

/* scatter_add(zeros (N, D), dst, h[src]) / deg, for h (N, D). */
static loom_status_t aggregate(loom_graph_t *g, const graph_vals_t *gv,
                               loom_value_t h, int64_t d, loom_value_t *out) {
  loom_dim_t row[2] = {1, d};
  const int64_t axis1[1] = {1};
  loom_value_t zf, zi, zeros, dst1, index, picked, sum;
  DYN_TRY(loom_full(g, 2, row, 0.0, LOOM_F32, &zf));
  DYN_TRY(loom_full(g, 2, row, 0.0, LOOM_I64, &zi));
  DYN_TRY(loom_mul(g, gv->deg, zf, &zeros));       /* (N, d) zeros */
  DYN_TRY(loom_unsqueeze(g, gv->dst, 1, axis1, &dst1));
  DYN_TRY(loom_add(g, dst1, zi, &index));          /* (E, d) */
  DYN_TRY(loom_index_select(g, h, gv->src, 0, &picked));
  DYN_TRY(loom_scatter_add(g, zeros, index, picked, 0, &sum));
  return loom_div(g, sum, gv->deg, out);
}

static loom_status_t gnn_forward(void *self, loom_trace_t *t, int k,
                                 loom_value_t *loss) {
  (void)k;
  gnn_t *m = self;
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t w1, b1, w2, b2, x, y, deg, xw, a1, z1, h1, hw, a2, logits;
  DYN_TRY(loom_trace_param(t, m->w1, &w1));
  DYN_TRY(loom_trace_param(t, m->b1, &b1));
  DYN_TRY(loom_trace_param(t, m->w2, &w2));
  DYN_TRY(loom_trace_param(t, m->b2, &b2));
  loom_dim_policy_t pn[2] = {m->nodes, {.kind = LOOM_DIM_EXACT}};
  graph_vals_t gv;
  DYN_TRY(loom_trace_input(t, m->x, pn, &x));
  DYN_TRY(loom_trace_input(t, m->src, &m->edges, &gv.src));
  DYN_TRY(loom_trace_input(t, m->dst, &m->edges, &gv.dst));
  DYN_TRY(loom_trace_input(t, m->deg, &m->nodes, &deg));
  DYN_TRY(loom_trace_input(t, m->y, &m->nodes, &y));
  const int64_t axis1[1] = {1};
  DYN_TRY(loom_unsqueeze(g, deg, 1, axis1, &gv.deg));
  DYN_TRY(loom_matmul(g, x, w1, 0, 1, &xw));
  DYN_TRY(aggregate(g, &gv, xw, HID, &a1));
  DYN_TRY(loom_add(g, a1, b1, &z1));
  DYN_TRY(loom_relu(g, z1, &h1));
  DYN_TRY(loom_matmul(g, h1, w2, 0, 1, &hw));
  DYN_TRY(aggregate(g, &gv, hw, C, &a2));
  DYN_TRY(loom_add(g, a2, b2, &logits));
  return loom_cross_entropy(g, logits, y, -100, 0.0, LOOM_REDUCTION_MEAN, loss);
}

loom_status_t dyn_gnn_run(const dyn_config_t *c, int warmup, int steps,
                          dyn_result_t *out) {
  DYN_CHECK_ARG(c);
  DYN_CHECK_ARG(out);
  gnn_t m;
  loom_trace_t *t = NULL;
  dyn_model_t model = {&m, gnn_batch, gnn_forward};
  loom_status_t s = gnn_init(&m, c->policy);
  m.first_batch = c->first_batch;
  if (s == LOOM_OK) s = dyn_trace_create(c, NULL, &t);
  if (s == LOOM_OK) s = dyn_train(c, t, &model, warmup, steps, out);
  loom_tensor_t *params[4] = {m.w1, m.b1, m.w2, m.b2};
  if (s == LOOM_OK) s = dyn_copy_params(c, 4, params, out);
  loom_trace_destroy(t);
  gnn_free(&m);
  return s;
}
