/* The LSTM workload: 16 sequences of one length T in [5, 200] (32
 * features) per step, a one-layer LSTM (hidden 128, gates i f g o, one
 * bias) whose last hidden state feeds a 4-class head; the label of a
 * sequence is the argmax of its first 4 features summed over time.
 * Items: tokens (16 * T). The twin is Lstm in bench/peers/torch_dynamic.py.
 *
 * Traced as one segment per time step (reading the cell state cuts after
 * each cell), then the head and the loss. The cell reads its x_t from the
 * whole sequence with index_select through a per-step i64 index input, so
 * every time step has the same structure and one cached cell serves them
 * all; T is the dim under the configured shape policy (symbolic: one cell
 * for every length). Each cell projects its own x_t (x_t W_ih^T): a
 * projection of the whole sequence as a segment of its own would make
 * every cell's backward return a gradient of the whole (T, 16, 512)
 * projection, O(T^2) work per step, whose size the backward's inputs do
 * not determine under a symbolic T. */
#include <string.h>

#include "dynamic.h"
#include "loom/ops.h"
#include "loom/train.h"

enum { B = 16, F = 32, H = 128, C = 4, T_MIN = 5, T_MAX = 200 };

typedef struct lstm {
  loom_tensor_t *w_ih, *w_hh, *b, *w_out, *b_out; /* parameters */
  loom_tensor_t *idx[T_MAX];                      /* i64 (1): the step */
  loom_tensor_t *h0, *c0;                         /* zeros (B, H) */
  loom_dim_policy_t len;                          /* the policy of T */
} lstm_t;

typedef struct lstm_batch {
  int64_t T;
  loom_tensor_t *x; /* (T, B, F) */
  loom_tensor_t *y; /* i64 (B) */
} lstm_batch_t;

static void lstm_free(lstm_t *m) {
  loom_tensor_t **ts[] = {&m->w_ih, &m->w_hh, &m->b, &m->w_out, &m->b_out, &m->h0, &m->c0};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
    loom_tensor_destroy(*ts[i]);
    *ts[i] = NULL;
  }
  for (int i = 0; i < T_MAX; i++) {
    loom_tensor_destroy(m->idx[i]);
    m->idx[i] = NULL;
  }
}

/* Weights as the twin's: bound 1/sqrt(H) for all of them. */
static loom_status_t lstm_init(lstm_t *m, loom_dim_policy_kind_t policy) {
  memset(m, 0, sizeof *m);
  const double bound = 0.08838834764831845; /* 1 / sqrt(128) */
  int64_t s_ih[2] = {4 * H, F}, s_hh[2] = {4 * H, H}, s_b[1] = {4 * H};
  int64_t s_out[2] = {C, H}, s_bout[1] = {C}, s_state[2] = {B, H}, one[1] = {1};
  DYN_TRY(dyn_values("lstm.w_ih", bound, 2, s_ih, &m->w_ih));
  DYN_TRY(dyn_values("lstm.w_hh", bound, 2, s_hh, &m->w_hh));
  DYN_TRY(dyn_values("lstm.b", bound, 1, s_b, &m->b));
  DYN_TRY(dyn_values("lstm.w_out", bound, 2, s_out, &m->w_out));
  DYN_TRY(dyn_values("lstm.b_out", bound, 1, s_bout, &m->b_out));
  DYN_TRY(loom_tensor_create(LOOM_F32, 2, s_state, &m->h0));
  DYN_TRY(loom_tensor_create(LOOM_F32, 2, s_state, &m->c0));
  for (int64_t i = 0; i < T_MAX; i++)
    DYN_TRY(loom_tensor_from_data(LOOM_I64, 1, one, &i, sizeof i, &m->idx[i]));
  m->len = dyn_policy(policy, "T");
  if (policy == LOOM_DIM_BUCKET) { /* 8, 16, ..., 256 */
    m->len.n_buckets = 6;
    for (int i = 0; i < 6; i++) m->len.buckets[i] = (int64_t)8 << i;
  }
  return LOOM_OK;
}

static void batch_free(lstm_batch_t *bt) {
  loom_tensor_destroy(bt->x);
  loom_tensor_destroy(bt->y);
  bt->x = bt->y = NULL;
}

/* Batch k: T from stream lstm.len, x from lstm.x.k, labels computed here
 * (data, not model) as the twin does: float sums over time, first max. */
static loom_status_t batch_make(int64_t k, lstm_batch_t *bt) {
  char name[32];
  memset(bt, 0, sizeof *bt);
  bt->T = dyn_randint("lstm.len", k, T_MIN, T_MAX);
  int64_t xs[3] = {bt->T, B, F}, ys[1] = {B};
  DYN_TRY(dyn_values(dyn_name(name, sizeof name, "lstm.x.%lld", (long long)k), 1.0, 3,
                     xs, &bt->x));
  DYN_TRY(loom_tensor_create(LOOM_I64, 1, ys, &bt->y));
  const float *x = loom_tensor_data(bt->x);
  int64_t *y = loom_tensor_data(bt->y);
  for (int b = 0; b < B; b++) {
    float sum[C] = {0};
    for (int64_t t = 0; t < bt->T; t++)
      for (int c = 0; c < C; c++) sum[c] += x[(t * B + b) * F + c];
    y[b] = 0;
    for (int c = 1; c < C; c++)
      if (sum[c] > sum[y[b]]) y[b] = c;
  }
  return LOOM_OK;
}

typedef struct lstm_vals {
  loom_value_t w_ih, w_hh, b, w_out, b_out;
} lstm_vals_t;

/* One cell: gates = x_t W_ih^T + b + h W_hh^T, c' = sig(f) c + sig(i)
 * tanh(g), h' = sig(o) tanh(c'). */
static loom_status_t cell(loom_graph_t *g, const lstm_vals_t *p, loom_value_t xt,
                          loom_value_t *h, loom_value_t *c) {
  loom_value_t xw, xb, hw, gates, q[4], i, f, u, o, fc, iu, tc;
  int64_t sizes[4] = {H, H, H, H};
  DYN_TRY(loom_matmul(g, xt, p->w_ih, 0, 1, &xw));
  DYN_TRY(loom_add(g, xw, p->b, &xb));
  DYN_TRY(loom_matmul(g, *h, p->w_hh, 0, 1, &hw));
  DYN_TRY(loom_add(g, xb, hw, &gates));
  DYN_TRY(loom_split(g, gates, 1, 4, sizes, q));
  DYN_TRY(loom_sigmoid(g, q[0], &i));
  DYN_TRY(loom_sigmoid(g, q[1], &f));
  DYN_TRY(loom_tanh(g, q[2], &u));
  DYN_TRY(loom_sigmoid(g, q[3], &o));
  DYN_TRY(loom_mul(g, f, *c, &fc));
  DYN_TRY(loom_mul(g, i, u, &iu));
  DYN_TRY(loom_add(g, fc, iu, c));
  DYN_TRY(loom_tanh(g, *c, &tc));
  return loom_mul(g, o, tc, h);
}

/* Records the forward of batch bt and the loss. */
static loom_status_t forward(loom_trace_t *t, lstm_t *m, const lstm_batch_t *bt,
                             loom_value_t *loss) {
  loom_graph_t *g = loom_trace_graph(t);
  lstm_vals_t p;
  DYN_TRY(loom_trace_param(t, m->w_ih, &p.w_ih));
  DYN_TRY(loom_trace_param(t, m->w_hh, &p.w_hh));
  DYN_TRY(loom_trace_param(t, m->b, &p.b));
  DYN_TRY(loom_trace_param(t, m->w_out, &p.w_out));
  DYN_TRY(loom_trace_param(t, m->b_out, &p.b_out));
  loom_dim_policy_t pol[3] = {m->len, {.kind = LOOM_DIM_EXACT}, {.kind = LOOM_DIM_EXACT}};
  loom_value_t x, y, h, c, logits, hw;
  DYN_TRY(loom_trace_input(t, bt->x, pol, &x));
  DYN_TRY(loom_trace_input(t, bt->y, NULL, &y));
  DYN_TRY(loom_trace_input(t, m->h0, NULL, &h));
  DYN_TRY(loom_trace_input(t, m->c0, NULL, &c));
  const int64_t axis0[1] = {0};
  for (int64_t s = 0; s < bt->T; s++) {
    loom_value_t idx, sel, xt;
    DYN_TRY(loom_trace_input(t, m->idx[s], NULL, &idx));
    DYN_TRY(loom_index_select(g, x, idx, 0, &sel));
    DYN_TRY(loom_squeeze(g, sel, 1, axis0, &xt));
    DYN_TRY(cell(g, &p, xt, &h, &c));
    /* Cut after the cell. A cut keeps the values asked for and the
     * region's leaves (h); c feeds tanh inside the cell, so it must be
     * asked for, or the next cell would recompute it from the start. */
    const loom_tensor_t *real;
    DYN_TRY(loom_trace_read(t, c, &real));
  }
  DYN_TRY(loom_matmul(g, h, p.w_out, 0, 1, &hw));
  DYN_TRY(loom_add(g, hw, p.b_out, &logits));
  return loom_cross_entropy(g, logits, y, -100, 0.0, LOOM_REDUCTION_MEAN, loss);
}

typedef struct lstm_run {
  lstm_t m;
  lstm_batch_t bt;
  int first_batch;
} lstm_run_t;

static loom_status_t lstm_batch(void *self, int k, int64_t *items) {
  lstm_run_t *r = self;
  batch_free(&r->bt);
  DYN_TRY(batch_make(r->first_batch + k, &r->bt));
  *items = B * r->bt.T;
  return LOOM_OK;
}

static loom_status_t lstm_forward(void *self, loom_trace_t *t, int k,
                                  loom_value_t *loss) {
  (void)k;
  lstm_run_t *r = self;
  return forward(t, &r->m, &r->bt, loss);
}

loom_status_t dyn_lstm_run(const dyn_config_t *c, int warmup, int steps,
                           dyn_result_t *out) {
  DYN_CHECK_ARG(c);
  DYN_CHECK_ARG(out);
  lstm_run_t r;
  memset(&r, 0, sizeof r);
  r.first_batch = c->first_batch;
  loom_trace_t *t = NULL;
  dyn_model_t model = {&r, lstm_batch, lstm_forward};
  loom_status_t s = lstm_init(&r.m, c->policy);
  if (s == LOOM_OK) s = dyn_trace_create(c, NULL, &t);
  if (s == LOOM_OK) s = dyn_train(c, t, &model, warmup, steps, out);
  loom_tensor_t *params[5] = {r.m.w_ih, r.m.w_hh, r.m.b, r.m.w_out, r.m.b_out};
  if (s == LOOM_OK) s = dyn_copy_params(c, 5, params, out);
  loom_trace_destroy(t);
  batch_free(&r.bt);
  lstm_free(&r.m);
  return s;
}
