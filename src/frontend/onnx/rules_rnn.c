/* Rules for ONNX's recurrent layers, RNN, GRU and LSTM, unrolled over a
 * sequence length known when the model loads: the input projection X·Wᵀ
 * of every step is one matmul, and each step adds one matmul of the
 * hidden state by the recurrence weights of all its gates (two for GRU
 * without linear_before_reset, whose candidate gate reads r ⊙ h). A
 * sequence length known only when the model runs (a symbolic dim) makes
 * the step the body of a loop over it instead. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

/* The most steps unrolled: each costs a handful of nodes. */
#define RNN_MAX_STEPS 4096

typedef enum { CELL_RNN, CELL_GRU, CELL_LSTM } cell_kind_t;

typedef enum {
  ACT_TANH, ACT_SIGMOID, ACT_RELU, ACT_HARD_SIGMOID, ACT_AFFINE, ACT_LEAKY_RELU,
  ACT_THRESHOLDED_RELU, ACT_SCALED_TANH, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS
} act_kind_t;

typedef struct act {
  act_kind_t kind;
  double alpha, beta;
} act_t;

/* The activations ONNX names for recurrent layers, with the parameters each
 * reads from activation_alpha / activation_beta and their defaults (those
 * of the ONNX op of that name; ONNX Runtime's for Affine and ScaledTanh). */
static const struct {
  const char *name;
  act_kind_t kind;
  int uses_alpha, uses_beta;
  double alpha, beta;
} act_names[] = {
    {"Tanh", ACT_TANH, 0, 0, 0, 0},
    {"Sigmoid", ACT_SIGMOID, 0, 0, 0, 0},
    {"Relu", ACT_RELU, 0, 0, 0, 0},
    {"HardSigmoid", ACT_HARD_SIGMOID, 1, 1, 0.2, 0.5},
    {"Affine", ACT_AFFINE, 1, 1, 1.0, 0.0},
    {"LeakyRelu", ACT_LEAKY_RELU, 1, 0, 0.01, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, 1, 0, 1.0, 0},
    {"ScaledTanh", ACT_SCALED_TANH, 1, 1, 1.0, 1.0},
    {"Elu", ACT_ELU, 1, 0, 1.0, 0},
    {"Softsign", ACT_SOFTSIGN, 0, 0, 0, 0},
    {"Softplus", ACT_SOFTPLUS, 0, 0, 0, 0},
};

/* A recurrent node, read and checked. */
typedef struct rnn {
  ox_node_t *n;
  cell_kind_t kind;
  int gates;          /* gates per step: 1, 3 or 4 */
  int acts;           /* activations per direction: 1, 2 or 3 */
  int dirs;           /* 1 or 2 */
  int reverse;        /* direction "reverse" (dirs 1) */
  int layout;         /* 0: X (T, B, I); 1: X (B, T, I) */
  int64_t steps, hidden; /* steps -1: symbolic, t_dim */
  loom_dim_t t_dim;
  loom_dim_t batch;
  int has_clip, linear_before_reset, input_forget;
  double clip;
  loom_dtype_t dtype;
  act_t act[2][3];    /* per direction: f, g, h */
  loom_value_t x;     /* (T, B, I) */
  loom_value_t lens;  /* (B) or id -1: every sequence has T steps */
} rnn_t;

/* One direction's weights and state. */
typedef struct dir {
  loom_value_t w, r;     /* (G*H, I), (G*H, H); r_t: R and its split
                            transposed, (H, G*H) */
  int r_t;
  loom_value_t r_zr, r_h; /* GRU without linear_before_reset: R split */
  loom_value_t xbias;    /* (G*H) added to the input projection, or -1 */
  loom_value_t rbias_h;  /* GRU with linear_before_reset: Rbh, or -1 */
  loom_value_t peep[3];  /* LSTM: P split into i, o, f, or -1 */
  loom_value_t h, c;     /* the state, (B, H) */
  loom_value_t zero;     /* (B, H) zeros, for Y past a sequence's end (with
                            sequence_lens), or -1 */
} dir_t;

static const loom_value_t none = {.id = -1};

/* ---- Activations ------------------------------------------------------------ */

static loom_status_t read_acts(rnn_t *r) {
  ox_node_t *n = r->n;
  static const act_kind_t dflt[3][3] = {
      {ACT_TANH}, {ACT_SIGMOID, ACT_TANH}, {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
  const Onnx__AttributeProto *a = ox_attr_typed(n, "activations", OX_ATTR_STRINGS);
  int want = r->acts * r->dirs, na, nb;
  const float *alpha = ox_floats(n, "activation_alpha", &na);
  const float *beta = ox_floats(n, "activation_beta", &nb);
  if (a && (int)a->n_strings != want)
    return ox_fail(n, LOOM_ERR_INVALID, "activations has %zu names, %d expected (%d per "
                   "direction)", a->n_strings, want, r->acts);
  int ka = 0, kb = 0;
  for (int k = 0; k < want; k++) {
    act_t *act = &r->act[k / r->acts][k % r->acts];
    if (!a) {
      *act = (act_t){.kind = dflt[r->kind][k % r->acts]};
      continue;
    }
    char name[64];
    size_t len = a->strings[k].len < sizeof name - 1 ? a->strings[k].len : sizeof name - 1;
    ox_copy(name, a->strings[k].data, len);
    name[len] = 0;
    size_t i = 0, count = sizeof act_names / sizeof act_names[0];
    while (i < count && strcasecmp(act_names[i].name, name)) i++;
    if (i == count)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "activation '%s' is not supported", name);
    /* Parameters are consumed in order by the activations that take them
     * (as ONNX Runtime reads them). */
    act->kind = act_names[i].kind;
    act->alpha = act_names[i].uses_alpha && ka < na ? alpha[ka++] : act_names[i].alpha;
    act->beta = act_names[i].uses_beta && kb < nb ? beta[kb++] : act_names[i].beta;
  }
  return LOOM_OK;
}

/* alpha * x + beta. */
static loom_status_t affine(ox_node_t *n, loom_value_t x, double alpha, double beta,
                            loom_value_t *out) {
  loom_value_t a, b;
  LOOM_TRY(ox_like(n, x, alpha, &a));
  LOOM_TRY(loom_mul(n->g, x, a, out));
  if (beta == 0.0) return LOOM_OK;
  LOOM_TRY(ox_like(n, x, beta, &b));
  return loom_add(n->g, *out, b, out);
}

static loom_status_t apply_act(ox_node_t *n, const act_t *a, loom_value_t x, loom_value_t *out) {
  loom_graph_t *g = n->g;
  loom_value_t t, u;
  switch (a->kind) {
  case ACT_TANH: return loom_tanh(g, x, out);
  case ACT_SIGMOID: return loom_sigmoid(g, x, out);
  case ACT_RELU: return loom_relu(g, x, out);
  case ACT_LEAKY_RELU: return loom_leaky_relu(g, x, a->alpha, out);
  case ACT_ELU: return loom_elu(g, x, a->alpha, out);
  case ACT_SOFTPLUS: return loom_softplus(g, x, out);
  case ACT_AFFINE: return affine(n, x, a->alpha, a->beta, out);
  case ACT_HARD_SIGMOID:
    LOOM_TRY(affine(n, x, a->alpha, a->beta, &t));
    return loom_clamp(g, t, 0.0, 1.0, out);
  case ACT_SCALED_TANH:
    LOOM_TRY(affine(n, x, a->beta, 0.0, &t));
    LOOM_TRY(loom_tanh(g, t, &u));
    return affine(n, u, a->alpha, 0.0, out);
  case ACT_THRESHOLDED_RELU:
    LOOM_TRY(ox_like(n, x, a->alpha, &t));
    LOOM_TRY(loom_gt(g, x, t, &t));
    LOOM_TRY(ox_like(n, x, 0.0, &u));
    return loom_where(g, t, x, u, out);
  case ACT_SOFTSIGN:
    LOOM_TRY(loom_abs(g, x, &t));
    LOOM_TRY(ox_like(n, x, 1.0, &u));
    LOOM_TRY(loom_add(g, t, u, &t));
    return loom_div(g, x, t, out);
  }
  return ox_fail(n, LOOM_ERR_INVALID, "unknown activation");
}

/* An activation of a gate: its input clipped first when clip is set. */
static loom_status_t gate(const rnn_t *r, const act_t *a, loom_value_t x, loom_value_t *out) {
  if (r->has_clip) LOOM_TRY(loom_clamp(r->n->g, x, -r->clip, r->clip, &x));
  return apply_act(r->n, a, x, out);
}

/* ---- Reading the node ----------------------------------------------------------- */

/* Input i has rank `rank` and dims `want` (a negative entry, or a symbolic
 * dim of the input, matches any), and X's dtype unless it is sequence_lens. */
static loom_status_t check_dims(const rnn_t *r, int i, const char *what, int rank,
                                const loom_dim_t *want) {
  ox_node_t *n = r->n;
  loom_dim_t d[LOOM_MAX_RANK];
  int got;
  LOOM_TRY(ox_dims(n, n->in[i], d, &got));
  if (got != rank) return ox_fail(n, LOOM_ERR_SHAPE, "%s has rank %d, not %d", what, got, rank);
  for (int k = 0; k < rank; k++)
    if (want[k] != d[k] && want[k] >= 0 && d[k] >= 0)
      return ox_fail(n, LOOM_ERR_SHAPE, "%s has dim %d of size %lld, not %lld", what, k,
                     (long long)d[k], (long long)want[k]);
  if (i != 4 && ox_dtype(n, n->in[i]) != r->dtype)
    return ox_fail(n, LOOM_ERR_DTYPE, "%s is %s and X is %s", what,
                   loom_dtype_name(ox_dtype(n, n->in[i])), loom_dtype_name(r->dtype));
  return LOOM_OK;
}

static loom_status_t read_direction(rnn_t *r) {
  char buf[32];
  const char *d = ox_string(r->n, "direction", "forward", buf, sizeof buf);
  r->dirs = !strcmp(d, "bidirectional") ? 2 : 1;
  r->reverse = !strcmp(d, "reverse");
  if (r->dirs == 1 && !r->reverse && strcmp(d, "forward"))
    return ox_fail(r->n, LOOM_ERR_INVALID, "direction '%s' (forward, reverse or bidirectional)",
                   d);
  return LOOM_OK;
}

/* X as (T, B, I), whatever the layout. */
static loom_status_t read_x(rnn_t *r, loom_dim_t *input_size) {
  ox_node_t *n = r->n;
  loom_dim_t xd[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], xd, &rank));
  if (rank != 3) return ox_fail(n, LOOM_ERR_SHAPE, "X has rank %d, not 3", rank);
  r->dtype = ox_dtype(n, n->in[0]);
  if (!ox_is_float(r->dtype))
    return ox_fail(n, LOOM_ERR_DTYPE, "X is %s, not a float dtype", loom_dtype_name(r->dtype));
  loom_dim_t t = xd[r->layout], b = xd[1 - r->layout];
  r->t_dim = t;
  if (ox_is_dim_sym(t)) t = -1;
  else if (t < 1 || t > RNN_MAX_STEPS)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a sequence of %lld steps (1 to %d are supported)",
                   (long long)t, RNN_MAX_STEPS);
  r->steps = t;
  r->batch = b;
  *input_size = xd[2];
  r->x = n->in[0];
  if (r->layout) {
    static const int64_t swap[3] = {1, 0, 2};
    LOOM_TRY(loom_transpose(n->g, n->in[0], swap, &r->x));
  }
  return LOOM_OK;
}

/* sequence_lens: kept only when some sequence may end before T. */
static loom_status_t read_lens(rnn_t *r) {
  ox_node_t *n = r->n;
  r->lens = none;
  if (!ox_has(n, 4)) return LOOM_OK;
  loom_value_t lens = n->in[4];
  loom_dtype_t dt = ox_dtype(n, lens);
  if (ox_is_float(dt) || dt == LOOM_BOOL)
    return ox_fail(n, LOOM_ERR_DTYPE, "sequence_lens is %s, not integers", loom_dtype_name(dt));
  loom_dim_t want[1] = {r->batch};
  LOOM_TRY(check_dims(r, 4, "sequence_lens", 1, want));
  const loom_tensor_t *t = ox_const(n, lens);
  if (t) {
    int full = 1;
    for (int64_t k = 0; k < loom_tensor_numel(t); k++) {
      double v;
      loom_tensor_get_f64(t, k, &v);
      if (v < 0 || (r->steps >= 0 && v > (double)r->steps))
        return ox_fail(n, LOOM_ERR_INVALID, "sequence_lens[%lld] is %g, outside 0..%lld",
                       (long long)k, v, (long long)r->steps);
      full &= v == (double)r->steps;
    }
    if (full) return LOOM_OK;
  }
  r->lens = lens;
  return LOOM_OK;
}

static loom_status_t read_node(rnn_t *r) {
  ox_node_t *n = r->n;
  for (int i = 0; i < 3; i++) LOOM_TRY(ox_need(n, i));
  r->layout = (int)ox_int(n, "layout", 0);
  if (r->layout != 0 && r->layout != 1)
    return ox_fail(n, LOOM_ERR_INVALID, "layout %d (0 or 1)", r->layout);
  LOOM_TRY(read_direction(r));
  loom_dim_t input_size = 0;
  LOOM_TRY(read_x(r, &input_size));
  loom_dim_t rd = ox_dim(n, n->in[2], 2);
  if (ox_rank(n, n->in[2]) != 3 || rd < 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "R must be (directions, %d * hidden_size, hidden_size) "
                   "with a static hidden_size", r->gates);
  r->hidden = ox_int(n, "hidden_size", rd);
  if (r->hidden != rd)
    return ox_fail(n, LOOM_ERR_SHAPE, "hidden_size is %lld and R is for %lld", (long long)r->hidden,
                   (long long)rd);
  int64_t gh = r->gates * r->hidden, dirs = r->dirs;
  loom_dim_t wd[3] = {dirs, gh, input_size}, rdims[3] = {dirs, gh, r->hidden};
  LOOM_TRY(check_dims(r, 1, "W", 3, wd));
  LOOM_TRY(check_dims(r, 2, "R", 3, rdims));
  loom_dim_t bd[2] = {dirs, 2 * gh}, pd[2] = {dirs, 3 * r->hidden};
  if (ox_has(n, 3)) LOOM_TRY(check_dims(r, 3, "B", 2, bd));
  LOOM_TRY(read_lens(r));
  loom_dim_t sd[3] = {dirs, r->batch, r->hidden};
  if (r->layout) sd[0] = r->batch, sd[1] = dirs;
  if (ox_has(n, 5)) LOOM_TRY(check_dims(r, 5, "initial_h", 3, sd));
  if (r->kind == CELL_LSTM && ox_has(n, 6)) LOOM_TRY(check_dims(r, 6, "initial_c", 3, sd));
  if (r->kind == CELL_LSTM && ox_has(n, 7)) LOOM_TRY(check_dims(r, 7, "P", 2, pd));
  r->has_clip = ox_attr(n, "clip") != NULL;
  r->clip = ox_float(n, "clip", 0.0);
  if (r->has_clip && !(r->clip > 0.0))
    return ox_fail(n, LOOM_ERR_INVALID, "clip is %g (it must be positive)", r->clip);
  r->linear_before_reset = r->kind == CELL_GRU && ox_int(n, "linear_before_reset", 0) != 0;
  r->input_forget = r->kind == CELL_LSTM && ox_int(n, "input_forget", 0) != 0;
  return read_acts(r);
}

/* ---- One direction's weights --------------------------------------------------- */

/* Rows [from, to) of v along axis 0, that axis dropped when drop. A
 * constant's rows are a constant of their own, so that compiled matmuls
 * find their weights frozen and pack them once, not at every step. */
static loom_status_t slice_rows(ox_node_t *n, loom_value_t v, int64_t from, int64_t to, int drop,
                                loom_value_t *out) {
  const loom_tensor_t *t = ox_const(n, v);
  int64_t axis = 0;
  if (!t) {
    LOOM_TRY(loom_slice(n->g, v, 1, &from, &to, &axis, NULL, out));
    return drop ? loom_squeeze(n->g, *out, 1, &axis, out) : LOOM_OK;
  }
  loom_dtype_t dt = loom_tensor_dtype(t);
  int rank = loom_tensor_rank(t);
  int64_t shape[LOOM_MAX_RANK], row = (int64_t)loom_dtype_size(dt);
  for (int d = 1; d < rank; d++) row *= shape[d] = loom_tensor_dim(t, d);
  shape[0] = to - from;
  const char *data = loom_tensor_data(t);
  loom_tensor_t *part = NULL;
  LOOM_TRY(loom_tensor_from_data(dt, rank - drop, shape + drop, data + from * row,
                                 (size_t)(row * (to - from)), &part));
  loom_status_t st = loom_graph_constant(n->g, part, out);
  loom_tensor_destroy(part);
  return st;
}

/* Entry d of v along axis 0, that axis dropped. */
static loom_status_t take(ox_node_t *n, loom_value_t v, int d, loom_value_t *out) {
  return slice_rows(n, v, d, d + 1, 1, out);
}

/* The rows [from, to) of v. */
static loom_status_t rows(ox_node_t *n, loom_value_t v, int64_t from, int64_t to,
                          loom_value_t *out) {
  return slice_rows(n, v, from, to, 0, out);
}

/* The initial state of direction d, (B, H); zeros when input i is absent. */
static loom_status_t initial(const rnn_t *r, int i, int d, loom_value_t *out) {
  ox_node_t *n = r->n;
  if (!ox_has(n, i)) {
    loom_dim_t dims[2] = {r->batch, r->hidden};
    return loom_full(n->g, 2, dims, 0.0, r->dtype, out);
  }
  if (!r->layout) return take(n, n->in[i], d, out);
  int64_t start = d, end = d + 1, axis = 1;
  LOOM_TRY(loom_slice(n->g, n->in[i], 1, &start, &end, &axis, NULL, out));
  return loom_squeeze(n->g, *out, 1, &axis, out);
}

/* The bias of the input projection: Wb + Rb, except GRU's Rbh when it is
 * applied inside the reset gate (linear_before_reset). */
static loom_status_t read_bias(const rnn_t *r, int d, dir_t *w) {
  ox_node_t *n = r->n;
  w->xbias = w->rbias_h = none;
  if (!ox_has(n, 3)) return LOOM_OK;
  int64_t gh = r->gates * r->hidden;
  loom_value_t b, wb, rb;
  LOOM_TRY(take(n, n->in[3], d, &b));
  LOOM_TRY(rows(n, b, 0, gh, &wb));
  LOOM_TRY(rows(n, b, gh, 2 * gh, &rb));
  if (r->linear_before_reset) {
    loom_value_t rb_zr, zeros;
    loom_dim_t h = r->hidden;
    LOOM_TRY(rows(n, rb, 0, 2 * r->hidden, &rb_zr));
    LOOM_TRY(rows(n, rb, 2 * r->hidden, gh, &w->rbias_h));
    LOOM_TRY(loom_full(n->g, 1, &h, 0.0, r->dtype, &zeros));
    loom_value_t parts[2] = {rb_zr, zeros};
    LOOM_TRY(loom_concat(n->g, 2, parts, 0, &rb));
  }
  return loom_add(n->g, wb, rb, &w->xbias);
}

static loom_status_t read_weights(const rnn_t *r, int d, dir_t *w) {
  ox_node_t *n = r->n;
  *w = (dir_t){.r_zr = none, .r_h = none, .xbias = none, .rbias_h = none};
  LOOM_TRY(take(n, n->in[1], d, &w->w));
  LOOM_TRY(take(n, n->in[2], d, &w->r));
  LOOM_TRY(read_bias(r, d, w));
  if (r->kind == CELL_GRU && !r->linear_before_reset) {
    LOOM_TRY(rows(n, w->r, 0, 2 * r->hidden, &w->r_zr));
    LOOM_TRY(rows(n, w->r, 2 * r->hidden, 3 * r->hidden, &w->r_h));
  }
  for (int k = 0; k < 3; k++) w->peep[k] = none;
  if (r->kind == CELL_LSTM && ox_has(n, 7)) {
    loom_value_t p;
    LOOM_TRY(take(n, n->in[7], d, &p));
    for (int k = 0; k < 3; k++) LOOM_TRY(rows(n, p, k * r->hidden, (k + 1) * r->hidden, &w->peep[k]));
  }
  LOOM_TRY(initial(r, 5, d, &w->h));
  w->c = none;
  if (r->kind == CELL_LSTM) LOOM_TRY(initial(r, 6, d, &w->c));
  w->zero = none;
  if (r->lens.id < 0) return LOOM_OK;
  loom_dim_t dims[2] = {r->batch, r->hidden};
  return loom_full(n->g, 2, dims, 0.0, r->dtype, &w->zero);
}

/* X·Wᵀ + bias for every step at once, (T, B, G*H). */
static loom_status_t project_all(const rnn_t *r, const dir_t *w, loom_value_t *p) {
  ox_node_t *n = r->n;
  loom_graph_t *g = n->g;
  loom_dim_t flat[2] = {-1, ox_dim(n, r->x, 2)};
  loom_dim_t steps[3] = {r->t_dim, r->batch, r->gates * r->hidden};
  loom_value_t x2;
  LOOM_TRY(loom_reshape(g, r->x, 2, flat, &x2));
  LOOM_TRY(loom_matmul(g, x2, w->w, 0, 1, p));
  if (w->xbias.id >= 0) LOOM_TRY(loom_add(g, *p, w->xbias, p));
  return loom_reshape(g, *p, 3, steps, p);
}

/* The projection as T values (B, G*H). */
static loom_status_t project_input(const rnn_t *r, const dir_t *w, loom_value_t *xw) {
  ox_node_t *n = r->n;
  loom_graph_t *g = n->g;
  loom_dim_t steps[3] = {r->steps, r->batch, r->gates * r->hidden};
  loom_value_t p;
  LOOM_TRY(project_all(r, w, &p));
  for (int64_t t = 0; t < r->steps; t++) {
    LOOM_TRY(rows(n, p, t, t + 1, &xw[t]));
    LOOM_TRY(loom_reshape(g, xw[t], 2, steps + 1, &xw[t]));
  }
  return LOOM_OK;
}

/* ---- One step of each cell -------------------------------------------------------- */

/* v split into k equal parts along axis 1. */
static loom_status_t split_gates(const rnn_t *r, loom_value_t v, int k, loom_value_t *parts) {
  int64_t sizes[4] = {r->hidden, r->hidden, r->hidden, r->hidden};
  return loom_split(r->n->g, v, 1, k, sizes, parts);
}

/* h = f(xw + h·Rᵀ). */
static loom_status_t rnn_step(const rnn_t *r, const act_t *a, dir_t *w, loom_value_t xw) {
  loom_graph_t *g = r->n->g;
  loom_value_t s;
  LOOM_TRY(loom_matmul(g, w->h, w->r, 0, !w->r_t, &s));
  LOOM_TRY(loom_add(g, xw, s, &s));
  return gate(r, &a[0], s, &w->h);
}

/* z, r = f(...); h' = g(xh + (r ⊙ h)·Rhᵀ), or with linear_before_reset
 * g(xh + r ⊙ (h·Rhᵀ + Rbh)); h = h' + z ⊙ (h - h'). */
static loom_status_t gru_step(const rnn_t *r, const act_t *a, dir_t *w, loom_value_t xw) {
  loom_graph_t *g = r->n->g;
  loom_value_t x[3], s[3], zr, gz[2], cand, d;
  LOOM_TRY(split_gates(r, xw, 3, x));
  LOOM_TRY(loom_matmul(g, w->h, r->linear_before_reset ? w->r : w->r_zr, 0, !w->r_t, &zr));
  LOOM_TRY(split_gates(r, zr, r->linear_before_reset ? 3 : 2, s));
  for (int k = 0; k < 2; k++) {
    LOOM_TRY(loom_add(g, x[k], s[k], &gz[k]));
    LOOM_TRY(gate(r, &a[0], gz[k], &gz[k]));
  }
  if (r->linear_before_reset) {
    if (w->rbias_h.id >= 0) LOOM_TRY(loom_add(g, s[2], w->rbias_h, &s[2]));
    LOOM_TRY(loom_mul(g, gz[1], s[2], &cand));
  } else {
    LOOM_TRY(loom_mul(g, gz[1], w->h, &cand));
    LOOM_TRY(loom_matmul(g, cand, w->r_h, 0, !w->r_t, &cand));
  }
  LOOM_TRY(loom_add(g, x[2], cand, &cand));
  LOOM_TRY(gate(r, &a[1], cand, &cand));
  LOOM_TRY(loom_sub(g, w->h, cand, &d));
  LOOM_TRY(loom_mul(g, gz[0], d, &d));
  return loom_add(g, cand, d, &w->h);
}

/* gates + peephole ⊙ c, when the model has peepholes. */
static loom_status_t peephole(const rnn_t *r, const dir_t *w, int k, loom_value_t c,
                              loom_value_t *v) {
  if (w->peep[k].id < 0) return LOOM_OK;
  loom_value_t pc;
  LOOM_TRY(loom_mul(r->n->g, w->peep[k], c, &pc));
  return loom_add(r->n->g, *v, pc, v);
}

/* Gates i, o, f, c in ONNX's order: c' = f ⊙ c + i ⊙ g(c~),
 * h = o ⊙ h(c'); peepholes add P ⊙ c to i and f and P ⊙ c' to o. */
static loom_status_t lstm_step(const rnn_t *r, const act_t *a, dir_t *w, loom_value_t xw) {
  loom_graph_t *g = r->n->g;
  loom_value_t s, p[4], fc, ic, hc;
  LOOM_TRY(loom_matmul(g, w->h, w->r, 0, !w->r_t, &s));
  LOOM_TRY(loom_add(g, xw, s, &s));
  LOOM_TRY(split_gates(r, s, 4, p));
  LOOM_TRY(peephole(r, w, 0, w->c, &p[0]));
  LOOM_TRY(gate(r, &a[0], p[0], &p[0]));
  if (r->input_forget) {
    /* input_forget couples the gates: f = 1 - i. */
    loom_value_t one;
    LOOM_TRY(ox_like(r->n, p[0], 1.0, &one));
    LOOM_TRY(loom_sub(g, one, p[0], &p[2]));
  } else {
    LOOM_TRY(peephole(r, w, 2, w->c, &p[2]));
    LOOM_TRY(gate(r, &a[0], p[2], &p[2]));
  }
  LOOM_TRY(gate(r, &a[1], p[3], &p[3]));
  LOOM_TRY(loom_mul(g, p[2], w->c, &fc));
  LOOM_TRY(loom_mul(g, p[0], p[3], &ic));
  LOOM_TRY(loom_add(g, fc, ic, &w->c));
  LOOM_TRY(peephole(r, w, 1, w->c, &p[1]));
  LOOM_TRY(gate(r, &a[0], p[1], &p[1]));
  LOOM_TRY(apply_act(r->n, &a[2], w->c, &hc));
  return loom_mul(g, p[1], hc, &w->h);
}

static loom_status_t cell_step(const rnn_t *r, const act_t *a, dir_t *w, loom_value_t xw) {
  if (r->kind == CELL_RNN) return rnn_step(r, a, w, xw);
  if (r->kind == CELL_GRU) return gru_step(r, a, w, xw);
  return lstm_step(r, a, w, xw);
}

/* ---- The unrolled sequence ---------------------------------------------------------- */

/* Past its sequence's end a batch entry keeps its state and outputs zeros:
 * step t runs for the entries with t < sequence_lens (in either direction,
 * as a reversed sequence starts at its own last step). */
static loom_status_t mask_step(const rnn_t *r, loom_value_t step, dir_t *w,
                               loom_value_t h_prev, loom_value_t c_prev, loom_value_t *y) {
  *y = w->h;
  if (r->lens.id < 0) return LOOM_OK;
  loom_graph_t *g = r->n->g;
  loom_value_t live;
  loom_dim_t col[2] = {r->batch, 1};
  LOOM_TRY(loom_cast(g, step, ox_dtype(r->n, r->lens), &step));
  LOOM_TRY(loom_lt(g, step, r->lens, &live));
  LOOM_TRY(loom_reshape(g, live, 2, col, &live));
  LOOM_TRY(loom_where(g, live, w->h, w->zero, y));
  LOOM_TRY(loom_where(g, live, w->h, h_prev, &w->h));
  if (r->kind == CELL_LSTM) LOOM_TRY(loom_where(g, live, w->c, c_prev, &w->c));
  return LOOM_OK;
}

/* Runs direction d over the sequence: ys[t] is its h at step t, (1, 1, B, H). */
static loom_status_t run_direction(const rnn_t *r, int d, dir_t *w, loom_value_t *xw,
                                   loom_value_t *ys) {
  const act_t *a = r->act[d];
  int back = d == 1 || r->reverse;
  loom_dim_t one_step[4] = {1, 1, r->batch, r->hidden};
  LOOM_TRY(project_input(r, w, xw));
  for (int64_t k = 0; k < r->steps; k++) {
    int64_t t = back ? r->steps - 1 - k : k;
    loom_value_t h_prev = w->h, c_prev = w->c, y, step = none;
    LOOM_TRY(cell_step(r, a, w, xw[t]));
    if (r->lens.id >= 0) LOOM_TRY(ox_scalar(r->n, LOOM_I64, (double)t, &step));
    LOOM_TRY(mask_step(r, step, w, h_prev, c_prev, &y));
    LOOM_TRY(loom_reshape(r->n->g, y, 4, one_step, &ys[t]));
  }
  return LOOM_OK;
}

/* The final states of both directions, (D, B, H), or (B, D, H) in layout 1. */
static loom_status_t stack_states(const rnn_t *r, const loom_value_t *s, loom_value_t *out) {
  loom_graph_t *g = r->n->g;
  loom_dim_t dims[3] = {1, r->batch, r->hidden};
  loom_value_t parts[2];
  for (int d = 0; d < r->dirs; d++) LOOM_TRY(loom_reshape(g, s[d], 3, dims, &parts[d]));
  LOOM_TRY(loom_concat(g, r->dirs, parts, 0, out));
  if (!r->layout) return LOOM_OK;
  static const int64_t perm[3] = {1, 0, 2};
  return loom_transpose(g, *out, perm, out);
}

/* Y: (T, D, B, H), or (B, T, D, H) in layout 1. */
static loom_status_t stack_outputs(const rnn_t *r, loom_value_t *ys, loom_value_t *out) {
  loom_graph_t *g = r->n->g;
  loom_value_t per_dir[2];
  for (int d = 0; d < r->dirs; d++)
    LOOM_TRY(loom_concat(g, (int)r->steps, ys + d * r->steps, 0, &per_dir[d]));
  LOOM_TRY(loom_concat(g, r->dirs, per_dir, 1, out));
  if (!r->layout) return LOOM_OK;
  static const int64_t perm[4] = {2, 0, 1, 3};
  return loom_transpose(g, *out, perm, out);
}

static loom_status_t unroll(rnn_t *r) {
  ox_node_t *n = r->n;
  size_t count = (size_t)r->steps * 3;
  loom_value_t *buf = core_calloc(count, sizeof *buf);
  if (!buf) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  loom_value_t *xw = buf, *ys = buf + r->steps, h[2], c[2];
  loom_status_t st = LOOM_OK;
  for (int d = 0; st == LOOM_OK && d < r->dirs; d++) {
    dir_t w;
    st = read_weights(r, d, &w);
    if (st == LOOM_OK) st = run_direction(r, d, &w, xw, ys + d * r->steps);
    h[d] = w.h;
    c[d] = w.c;
  }
  loom_value_t y, yh, yc = none;
  if (st == LOOM_OK) st = stack_outputs(r, ys, &y);
  if (st == LOOM_OK) st = stack_states(r, h, &yh);
  if (st == LOOM_OK && r->kind == CELL_LSTM) st = stack_states(r, c, &yc);
  core_free(buf);
  LOOM_TRY(st);
  LOOM_TRY(ox_set(n, 0, y));
  LOOM_TRY(ox_set(n, 1, yh));
  return ox_set(n, 2, yc);
}

/* ---- A sequence of symbolic length: a loop over its steps --------------------- */

/* The fields of w a step reads beside h and c (R, its GRU split, Rbh,
 * peepholes): the body takes each present one as an input. */
static int step_reads(dir_t *w, loom_value_t **out) {
  loom_value_t *all[7] = {&w->r, &w->r_zr, &w->r_h, &w->rbias_h,
                          &w->peep[0], &w->peep[1], &w->peep[2]};
  int k = 0;
  for (int i = 0; i < 7; i++)
    if (all[i]->id >= 0) out[k++] = all[i];
  return k;
}

enum { LOOP_INVARIANTS = 10 }; /* the projection, 7 reads, lens, the last step */

/* The loop body of direction d over the projection p (T, B, G*H): inputs
 * (step i, cond, h, [c], p, reads.., [lens], [T - 1]), outputs (cond,
 * h, [c], y); inv receives the outer values of its invariants. */
static loom_status_t step_body(const rnn_t *r, int d, dir_t *w, loom_value_t p,
                               loom_value_t last, loom_graph_t *body, loom_value_t *inv,
                               int *n_inv) {
  ox_node_t *n = r->n, bn = *n;
  bn.g = body;
  rnn_t br = *r;
  br.n = &bn;
  dir_t bw = *w;
  loom_value_t i, cond, whole, t, xw, y, *outer[7], *inner[7];
  int lstm = r->kind == CELL_LSTM, reads = step_reads(w, outer), back = d == 1 || r->reverse;
  step_reads(&bw, inner);
  LOOM_TRY(loom_graph_input(body, NULL, LOOM_I64, 0, NULL, &i));
  LOOM_TRY(loom_graph_input(body, NULL, LOOM_BOOL, 0, NULL, &cond));
  LOOM_TRY(ox_input_like(n, body, NULL, w->h, -1, &bw.h));
  if (lstm) LOOM_TRY(ox_input_like(n, body, NULL, w->c, -1, &bw.c));
  *n_inv = 0;
  LOOM_TRY(ox_input_like(n, body, NULL, p, -1, &whole));
  inv[(*n_inv)++] = p;
  for (int k = 0; k < reads; k++) {
    LOOM_TRY(ox_input_like(n, body, NULL, *outer[k], -1, inner[k]));
    inv[(*n_inv)++] = *outer[k];
  }
  if (r->lens.id >= 0) {
    LOOM_TRY(ox_input_like(n, body, NULL, r->lens, -1, &br.lens));
    inv[(*n_inv)++] = r->lens;
  }
  t = i;
  if (back) { /* step T - 1 - i */
    loom_value_t last_in;
    LOOM_TRY(ox_input_like(n, body, NULL, last, -1, &last_in));
    inv[(*n_inv)++] = last;
    LOOM_TRY(loom_sub(body, last_in, i, &t));
  }
  if (r->lens.id >= 0) {
    loom_dim_t hd[2];
    int rank;
    LOOM_TRY(ox_dims(&bn, bw.h, hd, &rank));
    br.batch = hd[0];
    LOOM_TRY(loom_full(body, 2, hd, 0.0, r->dtype, &bw.zero));
  }
  LOOM_TRY(loom_gather(body, whole, t, 0, &xw));
  loom_value_t h_prev = bw.h, c_prev = bw.c;
  LOOM_TRY(cell_step(&br, r->act[d], &bw, xw));
  LOOM_TRY(mask_step(&br, t, &bw, h_prev, c_prev, &y));
  LOOM_TRY(loom_graph_output(body, cond));
  LOOM_TRY(loom_graph_output(body, bw.h));
  if (lstm) LOOM_TRY(loom_graph_output(body, bw.c));
  return loom_graph_output(body, y);
}

/* Direction d as a loop of T steps: w's state becomes the final one, *y
 * the outputs (T, 1, B, H). */
static loom_status_t loop_direction(const rnn_t *r, int d, dir_t *w, loom_value_t *y) {
  ox_node_t *n = r->n;
  loom_graph_t *g = n->g;
  loom_value_t p, trips, last, one, inv[LOOP_INVARIANTS], res[3];
  LOOM_TRY(project_all(r, w, &p));
  /* The recurrence weights transposed once, outside the loop (folded
   * where they are constants): each step's product of a few rows then
   * reads them in place rather than packing R^T every step (half of a
   * 2-layer LSTM's time). */
  loom_value_t *rw[3] = {&w->r, &w->r_zr, &w->r_h};
  for (int k = 0; k < 3; k++)
    if (rw[k]->id >= 0) LOOM_TRY(loom_transpose(g, *rw[k], NULL, rw[k]));
  w->r_t = 1;
  LOOM_TRY(ox_dim_tensor(n, r->t_dim, &trips));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 1, &one));
  LOOM_TRY(loom_sub(g, trips, one, &last));
  loom_graph_t *body = NULL;
  int n_inv = 0, lstm = r->kind == CELL_LSTM;
  LOOM_TRY(loom_graph_create(&body));
  loom_status_t st = step_body(r, d, w, p, last, body, inv, &n_inv);
  if (st != LOOM_OK) {
    loom_graph_destroy(body);
    return st;
  }
  loom_value_t init[2] = {w->h, w->c};
  LOOM_TRY(loom_loop(g, trips, LOOM_NO_VALUE, body, 1 + lstm, init, n_inv, inv, 2 + lstm, res));
  w->h = res[0];
  if (lstm) w->c = res[1];
  /* The loop's outputs are stacked along a dim of its own (its trip count
   * is a value when the graph runs): a gather of 0..T-1 (reversed: T-1..0)
   * puts them along T itself. */
  loom_value_t ys = res[1 + lstm], pos;
  LOOM_TRY(ox_iota(n, r->t_dim, 0, 1, &pos));
  if (d == 1 || r->reverse) LOOM_TRY(loom_sub(g, last, pos, &pos));
  LOOM_TRY(loom_gather(g, ys, pos, 0, &ys));
  loom_dim_t dims[4] = {r->t_dim, 1, r->batch, r->hidden};
  return loom_reshape(g, ys, 4, dims, y);
}

static loom_status_t over_loop(rnn_t *r) {
  ox_node_t *n = r->n;
  loom_value_t per_dir[2], h[2], c[2], y, yh, yc = none;
  for (int d = 0; d < r->dirs; d++) {
    dir_t w;
    LOOM_TRY(read_weights(r, d, &w));
    LOOM_TRY(loop_direction(r, d, &w, &per_dir[d]));
    h[d] = w.h;
    c[d] = w.c;
  }
  LOOM_TRY(loom_concat(n->g, r->dirs, per_dir, 1, &y));
  if (r->layout) LOOM_TRY(loom_transpose(n->g, y, (int64_t[]){2, 0, 1, 3}, &y));
  LOOM_TRY(stack_states(r, h, &yh));
  if (r->kind == CELL_LSTM) LOOM_TRY(stack_states(r, c, &yc));
  LOOM_TRY(ox_set(n, 0, y));
  LOOM_TRY(ox_set(n, 1, yh));
  return ox_set(n, 2, yc);
}

static loom_status_t recurrent(ox_node_t *n, cell_kind_t kind) {
  static const int gates[3] = {1, 3, 4}, acts[3] = {1, 2, 3};
  rnn_t r = {.n = n, .kind = kind, .gates = gates[kind], .acts = acts[kind]};
  LOOM_TRY(read_node(&r));
  return r.steps < 0 ? over_loop(&r) : unroll(&r);
}

loom_status_t ox_rnn(ox_node_t *n) { return recurrent(n, CELL_RNN); }
loom_status_t ox_gru(ox_node_t *n) { return recurrent(n, CELL_GRU); }
loom_status_t ox_lstm(ox_node_t *n) { return recurrent(n, CELL_LSTM); }
