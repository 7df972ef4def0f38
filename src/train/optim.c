/* Optimizers in the graph: each parameter's update is a handful of
 * elementwise ops ending in an assign, so a whole training step (forward,
 * backward, update) compiles into one executable. State (momentum buffers,
 * moments, the step counter) is made of new parameters, which persist
 * between runs; the learning rate is a graph value, so that a schedule
 * changes it without recompiling. train_optimizer (train/optim.h) also
 * serves a caller that skips parameters run by run: the tracer's
 * optimizer step (trace/trace_optim.c). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/sized.h"
#include "core/status.h"
#include "ir/ir.h"
#include "loom/comm.h"
#include "loom/train.h"
#include "train/optim.h"

/* A scalar constant of an optimizer call: v in dtype. */
typedef struct opt_const {
  double v;
  loom_dtype_t dtype;
  loom_value_t value;
} opt_const_t;

/* One optimizer call: the graph, its name for messages, the learning
 * rate converted once per parameter dtype, whether the parameter being
 * updated takes this step (train_optimizer's take), and for
 * train_optimizer_shards the ranks the state is split over. */
typedef struct opt {
  loom_graph_t *g;
  const char *fn;
  loom_value_t lr;
  loom_value_t lr_as[LOOM_DTYPE_COUNT]; /* id -1: not made yet */
  loom_value_t take; /* bool, rank 0; id -1: the update is unconditional */
  int ranks, rank;   /* ranks 0: the state is whole */
  /* The scalar constants made so far (scalar): each is made once, not once
   * per parameter, which the fallback interpreter would run every step. */
  int n_consts;
  opt_const_t consts[16];
} opt_t;

/* One parameter's update: the parameter (its name names the state), the
 * value updated (the parameter itself, or this rank's shard of it) and
 * its gradient, of the value's type. next null: the new value is
 * assigned to the parameter; else it is given there. */
typedef struct slot {
  loom_value_t param, value, grad;
  loom_value_t *next;
} slot_t;

static const ir_type_t *type_of(const loom_graph_t *g, loom_value_t v) {
  return &g->values[v.id].type;
}

/* A rank-0 value of dtype holding v (broadcasts in binary ops). */
static loom_status_t constant(loom_graph_t *g, double v, loom_dtype_t dtype,
                              loom_value_t *out) {
  return loom_full(g, 0, NULL, v, dtype, out);
}

/* The call's constant v of dtype, made at its first use. */
static loom_status_t scalar(opt_t *o, double v, loom_dtype_t dtype, loom_value_t *out) {
  for (int i = 0; i < o->n_consts; i++)
    if (o->consts[i].dtype == dtype && !memcmp(&o->consts[i].v, &v, sizeof v)) {
      *out = o->consts[i].value;
      return LOOM_OK;
    }
  LOOM_TRY(constant(o->g, v, dtype, out));
  if (o->n_consts < (int)(sizeof o->consts / sizeof o->consts[0]))
    o->consts[o->n_consts++] = (opt_const_t){v, dtype, *out};
  return LOOM_OK;
}

/* x * k for a constant k. */
static loom_status_t scale(opt_t *o, loom_value_t x, double k, loom_value_t *out) {
  loom_value_t c;
  LOOM_TRY(scalar(o, k, type_of(o->g, x)->dtype, &c));
  return loom_mul(o->g, x, c, out);
}

/* a * x + b * y for constants a and b. */
static loom_status_t mix(opt_t *o, double a, loom_value_t x, double b, loom_value_t y,
                         loom_value_t *out) {
  loom_value_t ax, by;
  LOOM_TRY(scale(o, x, a, &ax));
  LOOM_TRY(scale(o, y, b, &by));
  return loom_add(o->g, ax, by, out);
}

/* The learning rate in dtype (a cast made once per dtype). */
static loom_status_t lr_in(opt_t *o, loom_dtype_t dtype, loom_value_t *out) {
  if (o->lr_as[dtype].id < 0) {
    if (type_of(o->g, o->lr)->dtype == dtype) o->lr_as[dtype] = o->lr;
    else LOOM_TRY(loom_cast(o->g, o->lr, dtype, &o->lr_as[dtype]));
  }
  *out = o->lr_as[dtype];
  return LOOM_OK;
}

/* v in dtype (a cast when it differs). */
static loom_status_t to(loom_graph_t *g, loom_value_t v, loom_dtype_t dtype,
                        loom_value_t *out) {
  if (type_of(g, v)->dtype == dtype) {
    *out = v;
    return LOOM_OK;
  }
  return loom_cast(g, v, dtype, out);
}

/* Updates of f16 and bf16 parameters are computed, and their state kept,
 * in f32: Adam's eps (1e-8) is 0 in f16, and small steps vanish when
 * added to a 16-bit weight's running sum. */
static loom_dtype_t compute_dtype(loom_dtype_t d) {
  return d == LOOM_F16 || d == LOOM_BF16 ? LOOM_F32 : d;
}

/* ---- Checks ----------------------------------------------------------------- */

static loom_status_t check_value(const opt_t *o, const char *what, int i,
                                 loom_value_t v) {
  if (!ir_value_valid(o->g, v.id))
    return loom_fail(LOOM_ERR_GRAPH, "%s: %s[%d] (value %d) is not a value of "
                     "the graph", o->fn, what, i, v.id);
  return LOOM_OK;
}

static bool same_type(const ir_type_t *a, const ir_type_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* p a float parameter, grad of value's type (value: p, or its shard). */
static loom_status_t check_pair(const opt_t *o, int i, loom_value_t p, loom_value_t value,
                                loom_value_t grad) {
  LOOM_TRY(check_value(o, "params", i, p));
  LOOM_TRY(check_value(o, "values", i, value));
  LOOM_TRY(check_value(o, "grads", i, grad));
  const ir_value_t *pv = &o->g->values[p.id];
  char pb[96], gb[96];
  if (pv->kind != IR_VALUE_PARAM)
    return loom_fail(LOOM_ERR_INVALID, "%s: params[%d] (%s) is not a parameter "
                     "(loom_graph_param)", o->fn, i,
                     ir_value_str(o->g, p.id, pb, sizeof pb));
  if (!dtype_is_float(pv->type.dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s: params[%d] (%s) is %s; optimizers "
                     "update float parameters", o->fn, i,
                     ir_value_str(o->g, p.id, pb, sizeof pb),
                     loom_dtype_name(pv->type.dtype));
  const ir_type_t *vt = type_of(o->g, value);
  if (vt->dtype != pv->type.dtype || !same_type(vt, type_of(o->g, grad))) {
    ir_type_str(o->g, vt, pb, sizeof pb);
    ir_type_str(o->g, type_of(o->g, grad), gb, sizeof gb);
    return loom_fail(LOOM_ERR_SHAPE, "%s: grads[%d] is %s but params[%d]%s is "
                     "%s; they must have one dtype and shape", o->fn, i, gb,
                     i, value.id == p.id ? "" : "'s shard", pb);
  }
  return LOOM_OK;
}

static loom_status_t check_lr(const opt_t *o) {
  if (!ir_value_valid(o->g, o->lr.id))
    return loom_fail(LOOM_ERR_GRAPH, "%s: lr (value %d) is not a value of the "
                     "graph", o->fn, o->lr.id);
  const ir_type_t *t = type_of(o->g, o->lr);
  if (t->rank != 0 || !dtype_is_float(t->dtype))
    return loom_fail(LOOM_ERR_SHAPE, "%s: lr must be a float scalar (rank 0), "
                     "got a rank %d %s value", o->fn, t->rank,
                     loom_dtype_name(t->dtype));
  return LOOM_OK;
}

static loom_status_t check_take(const opt_t *o, int i, loom_value_t take) {
  LOOM_TRY(check_value(o, "take", i, take));
  const ir_type_t *t = type_of(o->g, take);
  if (t->rank != 0 || t->dtype != LOOM_BOOL)
    return loom_fail(LOOM_ERR_SHAPE, "%s: take[%d] must be a bool scalar "
                     "(rank 0), got a rank %d %s value", o->fn, i, t->rank,
                     loom_dtype_name(t->dtype));
  return LOOM_OK;
}

/* values: null (the parameters themselves), or their shards. */
static loom_status_t opt_begin(opt_t *o, loom_graph_t *g, const char *fn,
                               int n, const loom_value_t *params,
                               const loom_value_t *values, const loom_value_t *grads,
                               const loom_value_t *take, loom_value_t lr) {
  *o = (opt_t){.g = g, .fn = fn, .lr = lr, .take = {-1}};
  for (int d = 0; d < LOOM_DTYPE_COUNT; d++) o->lr_as[d].id = -1;
  if (!g) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'g' is null", fn);
  if (n < 0 || (n > 0 && (!params || !grads)))
    return loom_fail(LOOM_ERR_INVALID, "%s: %d parameters with params or "
                     "grads null", fn, n);
  LOOM_TRY(check_lr(o));
  for (int i = 0; i < n; i++)
    LOOM_TRY(check_pair(o, i, params[i], values ? values[i] : params[i], grads[i]));
  for (int i = 0; take && i < n; i++) LOOM_TRY(check_take(o, i, take[i]));
  return LOOM_OK;
}

/* A rate in [0, 1). */
static loom_status_t check_rate(const char *fn, const char *what, double v) {
  if (!(v >= 0 && v < 1))
    return loom_fail(LOOM_ERR_INVALID, "%s: %s %g is not in [0, 1)", fn, what,
                     v);
  return LOOM_OK;
}

/* A finite number >= 0. */
static loom_status_t check_nonneg(const char *fn, const char *what, double v) {
  if (!(v >= 0 && v <= DBL_MAX))
    return loom_fail(LOOM_ERR_INVALID, "%s: %s %g must be finite and >= 0", fn,
                     what, v);
  return LOOM_OK;
}

/* ---- State -------------------------------------------------------------------- */

/* "<name of p>.<suffix>": state is named after its parameter, so that a
 * checkpoint finds it. */
static void state_name(const loom_graph_t *g, loom_value_t p,
                       const char *suffix, char *name, size_t size) {
  const ir_value_t *pv = &g->values[p.id];
  if (pv->name) snprintf(name, size, "%s.%s", pv->name, suffix);
  else snprintf(name, size, "param%d.%s", p.id, suffix);
}

/* A new zero parameter named after s's parameter (state_name), of the
 * updated value's shape, in its compute dtype; when the state is split
 * over ranks, recorded as the shard of a state of the parameter's shape. */
static loom_status_t state_like(opt_t *o, const slot_t *s, const char *suffix,
                                loom_value_t *out) {
  char name[256];
  state_name(o->g, s->param, suffix, name, sizeof name);
  int64_t shape[LOOM_MAX_RANK];
  ir_type_t t = o->g->values[s->value.id].type; /* a copy: adding a value may move the array */
  for (int d = 0; d < t.rank; d++) shape[d] = t.dims[d];
  LOOM_TRY(loom_graph_param(o->g, name, compute_dtype(t.dtype), t.rank, shape, NULL, out));
  if (o->ranks == 0) return LOOM_OK;
  ir_type_t whole = o->g->values[s->param.id].type;
  whole.dtype = compute_dtype(whole.dtype);
  return ir_shard_add(o->g, out->id, o->ranks, o->rank, &whole);
}

/* target = value when the run ends; when the parameter being updated may
 * skip the step (o->take), only where it takes it. */
static loom_status_t commit(opt_t *o, loom_value_t target, loom_value_t value) {
  if (o->take.id >= 0) LOOM_TRY(loom_where(o->g, o->take, value, target, &value));
  return loom_assign(o->g, target, value);
}

/* new = base - lr * dir (base, dir in the compute dtype), in the
 * parameter's dtype: committed to it, or given to s->next. */
static loom_status_t descend(opt_t *o, const slot_t *s, loom_value_t base,
                             loom_value_t dir) {
  loom_value_t lr, step, next;
  LOOM_TRY(lr_in(o, type_of(o->g, dir)->dtype, &lr));
  LOOM_TRY(loom_mul(o->g, dir, lr, &step));
  LOOM_TRY(loom_sub(o->g, base, step, &next));
  LOOM_TRY(to(o->g, next, type_of(o->g, s->param)->dtype, &next));
  if (!s->next) return commit(o, s->param, next);
  *s->next = next;
  return LOOM_OK;
}

/* p and grad in p's compute dtype. */
static loom_status_t computed(loom_graph_t *g, loom_value_t *p,
                              loom_value_t *grad) {
  loom_dtype_t ct = compute_dtype(type_of(g, *p)->dtype);
  LOOM_TRY(to(g, *p, ct, p));
  return to(g, *grad, ct, grad);
}

/* grad + wd * p (L2 regularization folded into the gradient). */
static loom_status_t decayed(opt_t *o, loom_value_t p, loom_value_t grad,
                             double wd, loom_value_t *out) {
  if (wd == 0) {
    *out = grad;
    return LOOM_OK;
  }
  return mix(o, 1.0, grad, wd, p, out);
}

/* ---- SGD ---------------------------------------------------------------------- */

static loom_status_t sgd_check(const char *fn, const loom_optimizer_t *h) {
  LOOM_TRY(check_nonneg(fn, "momentum", h->momentum));
  LOOM_TRY(check_nonneg(fn, "weight_decay", h->weight_decay));
  if (h->nesterov && h->momentum == 0)
    return loom_fail(LOOM_ERR_INVALID, "%s: nesterov needs momentum > 0", fn);
  return LOOM_OK;
}

static loom_status_t sgd_one(opt_t *o, const loom_optimizer_t *h, const slot_t *s) {
  loom_value_t pc = s->value, grad = s->grad, d, dir;
  LOOM_TRY(computed(o->g, &pc, &grad));
  LOOM_TRY(decayed(o, pc, grad, h->weight_decay, &d));
  if (h->momentum == 0) return descend(o, s, pc, d);
  loom_value_t buf, next;
  LOOM_TRY(state_like(o, s, "momentum", &buf));
  LOOM_TRY(mix(o, h->momentum, buf, 1.0, d, &next));
  LOOM_TRY(commit(o, buf, next));
  if (h->nesterov) LOOM_TRY(mix(o, 1.0, d, h->momentum, next, &dir));
  else dir = next;
  return descend(o, s, pc, dir);
}

/* ---- Adam and AdamW ------------------------------------------------------------ */

static bool decoupled(const loom_optimizer_t *h) {
  return h->kind == LOOM_OPTIMIZER_ADAMW;
}

static loom_status_t adam_check(const char *fn, const loom_optimizer_t *h) {
  LOOM_TRY(check_rate(fn, "beta1", h->beta1));
  LOOM_TRY(check_rate(fn, "beta2", h->beta2));
  LOOM_TRY(check_nonneg(fn, "eps", h->eps));
  return check_nonneg(fn, "weight_decay", h->weight_decay);
}

/* 1 - beta^t in dtype, as -expm1(t log beta) with log beta taken in
 * double: beta^t rounded to f32 and taken from 1 loses digits (f32's
 * 1 - 0.999 is 1.3e-5 off, and Adam's first step 6.4e-6 off torch's). */
static loom_status_t correction(opt_t *o, double beta, loom_value_t t,
                                loom_dtype_t dtype, loom_value_t *out) {
  loom_graph_t *g = o->g;
  loom_value_t tf, exponent, e;
  if (beta == 0) return scalar(o, 1.0, dtype, out); /* log 0: 0^t is 0 at every step */
  LOOM_TRY(loom_cast(g, t, dtype, &tf));
  LOOM_TRY(scale(o, tf, log(beta), &exponent));
  LOOM_TRY(loom_expm1(g, exponent, &e));
  return loom_neg(g, e, out);
}

/* Adam's direction from the new moments m and v at step t:
 * m / bc1 / (sqrt(v / bc2) + eps) with bc = 1 - beta^t, computed as
 * torch.optim's Adam does, (m * (1 / bc1)) / (sqrt(v) * (1 / sqrt(bc2))
 * + eps). The corrections' reciprocals are scalars, so each element takes
 * one division and one square root where the textbook order takes three
 * divisions (the update runs in a weight-gradient GEMM's epilogue, and
 * the divisions cost 15% of an AdamW pass over memory here). */
static loom_status_t adam_direction(opt_t *o, const loom_optimizer_t *h,
                                    loom_value_t t, loom_value_t m,
                                    loom_value_t v, loom_value_t *out) {
  loom_graph_t *g = o->g;
  loom_dtype_t dt = type_of(g, m)->dtype;
  loom_value_t bc1, bc2, inv1, inv2, mhat, root, scaled, eps_v, denom;
  LOOM_TRY(correction(o, h->beta1, t, dt, &bc1));
  LOOM_TRY(correction(o, h->beta2, t, dt, &bc2));
  LOOM_TRY(loom_reciprocal(g, bc1, &inv1));
  LOOM_TRY(loom_rsqrt(g, bc2, &inv2));
  LOOM_TRY(loom_mul(g, m, inv1, &mhat));
  LOOM_TRY(loom_sqrt(g, v, &root));
  LOOM_TRY(loom_mul(g, root, inv2, &scaled));
  LOOM_TRY(scalar(o, h->eps, dt, &eps_v));
  LOOM_TRY(loom_add(g, scaled, eps_v, &denom));
  return loom_div(g, mhat, denom, out);
}

/* p * (1 - lr * wd): AdamW's decay, decoupled from the gradient. */
static loom_status_t shrink(opt_t *o, loom_value_t p, double wd,
                            loom_value_t *out) {
  if (wd == 0) {
    *out = p;
    return LOOM_OK;
  }
  loom_value_t lr, lrwd, one, keep;
  loom_dtype_t dt = type_of(o->g, p)->dtype;
  LOOM_TRY(lr_in(o, dt, &lr));
  LOOM_TRY(scale(o, lr, wd, &lrwd));
  LOOM_TRY(scalar(o, 1.0, dt, &one));
  LOOM_TRY(loom_sub(o->g, one, lrwd, &keep));
  return loom_mul(o->g, p, keep, out);
}

static loom_status_t adam_one(opt_t *o, const loom_optimizer_t *h, loom_value_t t,
                              const slot_t *s) {
  loom_graph_t *g = o->g;
  double wd = h->weight_decay;
  loom_value_t pc = s->value, grad = s->grad, d, m, v, m2, d2, v2, dir, base;
  LOOM_TRY(computed(g, &pc, &grad));
  LOOM_TRY(decayed(o, pc, grad, decoupled(h) ? 0 : wd, &d));
  LOOM_TRY(state_like(o, s, "m", &m));
  LOOM_TRY(state_like(o, s, "v", &v));
  LOOM_TRY(mix(o, h->beta1, m, 1.0 - h->beta1, d, &m2));
  LOOM_TRY(loom_mul(g, d, d, &d2));
  LOOM_TRY(mix(o, h->beta2, v, 1.0 - h->beta2, d2, &v2));
  LOOM_TRY(commit(o, m, m2));
  LOOM_TRY(commit(o, v, v2));
  LOOM_TRY(adam_direction(o, h, t, m2, v2, &dir));
  LOOM_TRY(shrink(o, pc, decoupled(h) ? wd : 0, &base));
  return descend(o, s, base, dir);
}

/* The step counter after this step: a new i64 parameter named name,
 * incremented (where the parameter being updated takes the step). */
static loom_status_t step_counter(opt_t *o, const char *name, loom_value_t *t) {
  loom_value_t counter, one;
  LOOM_TRY(loom_graph_param(o->g, name, LOOM_I64, 0, NULL, NULL, &counter));
  LOOM_TRY(scalar(o, 1.0, LOOM_I64, &one));
  LOOM_TRY(loom_add(o->g, counter, one, t));
  return commit(o, counter, *t);
}

/* The counter of the call's parameters ("adam.step" or "adamw.step"),
 * or, for a caller that steps subsets, parameter p's own
 * ("<p's name>.step"). */
static loom_status_t adam_step(opt_t *o, const loom_optimizer_t *h,
                               loom_value_t p, loom_value_t *t) {
  char name[256];
  if (o->take.id >= 0) state_name(o->g, p, "step", name, sizeof name);
  else snprintf(name, sizeof name, "%s", decoupled(h) ? "adamw.step" : "adam.step");
  return step_counter(o, name, t);
}

/* ---- Any of them ---------------------------------------------------------------- */

static loom_status_t hyper_check(const char *fn, const loom_optimizer_t *h) {
  switch (h->kind) {
  case LOOM_OPTIMIZER_SGD: return sgd_check(fn, h);
  case LOOM_OPTIMIZER_ADAM:
  case LOOM_OPTIMIZER_ADAMW: return adam_check(fn, h);
  }
  return loom_fail(LOOM_ERR_INVALID, "%s: optimizer kind %d is none of "
                   "LOOM_OPTIMIZER_SGD, _ADAM, _ADAMW", fn, (int)h->kind);
}

/* The updates, after opt_begin; values and next as in
 * train_optimizer_shards (null: the parameters, assigned). */
static loom_status_t updates(opt_t *o, const loom_optimizer_t *h, int n,
                             const loom_value_t *params, const loom_value_t *values,
                             const loom_value_t *grads, const loom_value_t *take,
                             loom_value_t *next) {
  LOOM_TRY(hyper_check(o->fn, h));
  bool adam = h->kind != LOOM_OPTIMIZER_SGD;
  loom_value_t t = {-1};
  if (adam && !take) LOOM_TRY(adam_step(o, h, t, &t)); /* one, shared */
  for (int i = 0; i < n; i++) {
    slot_t s = {.param = params[i], .value = values ? values[i] : params[i],
                .grad = grads[i], .next = next ? &next[i] : NULL};
    if (take) o->take = take[i];
    if (adam && take) LOOM_TRY(adam_step(o, h, params[i], &t));
    if (adam) LOOM_TRY(adam_one(o, h, t, &s));
    else LOOM_TRY(sgd_one(o, h, &s));
  }
  return LOOM_OK;
}

loom_status_t train_optimizer(const char *fn, loom_graph_t *g,
                              const loom_optimizer_t *h, int n,
                              const loom_value_t *params,
                              const loom_value_t *grads,
                              const loom_value_t *take, loom_value_t lr) {
  if (!h) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'o' is null", fn);
  opt_t o;
  LOOM_TRY(opt_begin(&o, g, fn, n, params, NULL, grads, take, lr));
  return updates(&o, h, n, params, NULL, grads, take, NULL);
}

loom_status_t train_optimizer_shards(const char *fn, loom_graph_t *g,
                                     const loom_optimizer_t *h, int ranks, int rank, int n,
                                     const loom_value_t *params, const loom_value_t *shards,
                                     const loom_value_t *grads, loom_value_t lr,
                                     loom_value_t *next) {
  if (!h) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'o' is null", fn);
  opt_t o;
  LOOM_TRY(opt_begin(&o, g, fn, n, params, shards, grads, NULL, lr));
  o.ranks = ranks;
  o.rank = rank;
  return updates(&o, h, n, params, shards, grads, NULL, next);
}

loom_status_t loom_optimizer_init_sized(loom_optimizer_t *o, loom_optimizer_kind_t kind,
                                        size_t size) {
  LOOM_CHECK_ARG(o);
  if ((unsigned)kind > LOOM_OPTIMIZER_ADAMW)
    return loom_fail(LOOM_ERR_INVALID, "%s: optimizer kind %d is not SGD (0), Adam (1) or AdamW (2)",
                     __func__, (int)kind);
  loom_optimizer_t full = {.size = sizeof full, .kind = kind};
  if (kind != LOOM_OPTIMIZER_SGD) {
    full.beta1 = 0.9;
    full.beta2 = 0.999;
    full.eps = 1e-8;
    full.weight_decay = kind == LOOM_OPTIMIZER_ADAMW ? 0.01 : 0;
  }
  return core_sized_init(__func__, "loom_optimizer_t", o, size, &full, sizeof full);
}

loom_status_t train_optimizer_read(const char *fn, const loom_optimizer_t *in,
                                   loom_optimizer_t *out) {
  *out = (loom_optimizer_t){.size = sizeof *out};
  return core_sized_read(fn, "loom_optimizer_t", out, in, sizeof *out);
}

loom_status_t loom_optimizer_apply(loom_graph_t *g, const loom_optimizer_t *o,
                                   int n, const loom_value_t *params,
                                   const loom_value_t *grads, loom_value_t lr) {
  LOOM_CHECK_ARG(o);
  loom_optimizer_t full;
  LOOM_TRY(train_optimizer_read(__func__, o, &full));
  return train_optimizer(__func__, g, &full, n, params, grads, NULL, lr);
}

loom_status_t loom_sgd(loom_graph_t *g, int n, const loom_value_t *params,
                       const loom_value_t *grads, loom_value_t lr,
                       double momentum, int nesterov, double weight_decay) {
  loom_optimizer_t h = {.size = sizeof h, .kind = LOOM_OPTIMIZER_SGD, .momentum = momentum,
                        .nesterov = nesterov != 0, .weight_decay = weight_decay};
  return train_optimizer(__func__, g, &h, n, params, grads, NULL, lr);
}

loom_status_t loom_adam(loom_graph_t *g, int n, const loom_value_t *params,
                        const loom_value_t *grads, loom_value_t lr,
                        double beta1, double beta2, double eps,
                        double weight_decay) {
  loom_optimizer_t h = {.size = sizeof h, .kind = LOOM_OPTIMIZER_ADAM, .beta1 = beta1,
                       .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
  return train_optimizer(__func__, g, &h, n, params, grads, NULL, lr);
}

loom_status_t loom_adamw(loom_graph_t *g, int n, const loom_value_t *params,
                         const loom_value_t *grads, loom_value_t lr,
                         double beta1, double beta2, double eps,
                         double weight_decay) {
  loom_optimizer_t h = {.size = sizeof h, .kind = LOOM_OPTIMIZER_ADAMW, .beta1 = beta1,
                       .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
  return train_optimizer(__func__, g, &h, n, params, grads, NULL, lr);
}

/* ---- Gradient clipping ---------------------------------------------------------- */

static loom_status_t check_grads(const char *fn, loom_graph_t *g, int n,
                                 const loom_value_t *grads,
                                 loom_value_t *out_grads, double max_norm) {
  if (!g) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'g' is null", fn);
  if (n < 1 || !grads || !out_grads)
    return loom_fail(LOOM_ERR_INVALID, "%s: needs n >= 1 (got %d) and non-null "
                     "grads and out_grads", fn, n);
  if (!(max_norm > 0))
    return loom_fail(LOOM_ERR_INVALID, "%s: max_norm %g must be > 0", fn,
                     max_norm);
  for (int i = 0; i < n; i++) {
    if (!ir_value_valid(g, grads[i].id))
      return loom_fail(LOOM_ERR_GRAPH, "%s: grads[%d] (value %d) is not a "
                       "value of the graph", fn, i, grads[i].id);
    loom_dtype_t dt = type_of(g, grads[i])->dtype;
    if (!dtype_is_float(dt))
      return loom_fail(LOOM_ERR_DTYPE, "%s: grads[%d] is %s; gradients are "
                       "float", fn, i, loom_dtype_name(dt));
  }
  return LOOM_OK;
}

/* sum over i of sum(grads[i]^2), in grads[0]'s dtype. */
static loom_status_t sum_squares(loom_graph_t *g, int n,
                                 const loom_value_t *grads, loom_value_t *out) {
  loom_dtype_t dt = type_of(g, grads[0])->dtype;
  for (int i = 0; i < n; i++) {
    loom_value_t sq, s;
    LOOM_TRY(loom_mul(g, grads[i], grads[i], &sq));
    LOOM_TRY(loom_sum(g, sq, 0, NULL, 0, &s));
    if (type_of(g, s)->dtype != dt) LOOM_TRY(loom_cast(g, s, dt, &s));
    if (i == 0) *out = s;
    else LOOM_TRY(loom_add(g, *out, s, out));
  }
  return LOOM_OK;
}

loom_status_t train_clip_grad_norm(const char *fn, loom_graph_t *g, loom_comm_t *comm, int n,
                                   const loom_value_t *grads, double max_norm,
                                   loom_value_t *out_grads, loom_value_t *total_norm) {
  LOOM_TRY(check_grads(fn, g, n, grads, out_grads, max_norm));
  loom_dtype_t dt = type_of(g, grads[0])->dtype;
  loom_value_t total, norm, tiny, denom, mx, ratio, one, coef;
  LOOM_TRY(sum_squares(g, n, grads, &total));
  if (comm) LOOM_TRY(loom_all_reduce(g, comm, total, LOOM_COMM_SUM, &total));
  LOOM_TRY(loom_sqrt(g, total, &norm));
  /* PyTorch's 1e-6 keeps the ratio finite for an all-zero gradient. */
  LOOM_TRY(constant(g, 1e-6, dt, &tiny));
  LOOM_TRY(loom_add(g, norm, tiny, &denom));
  LOOM_TRY(constant(g, max_norm, dt, &mx));
  LOOM_TRY(loom_div(g, mx, denom, &ratio));
  LOOM_TRY(constant(g, 1.0, dt, &one));
  LOOM_TRY(loom_minimum(g, ratio, one, &coef));
  for (int i = 0; i < n; i++) {
    loom_value_t c = coef;
    loom_dtype_t di = type_of(g, grads[i])->dtype;
    if (di != dt) LOOM_TRY(loom_cast(g, coef, di, &c));
    LOOM_TRY(loom_mul(g, grads[i], c, &out_grads[i]));
  }
  if (total_norm) *total_norm = norm;
  return LOOM_OK;
}

loom_status_t loom_clip_grad_norm(loom_graph_t *g, int n, const loom_value_t *grads,
                                  double max_norm, loom_value_t *out_grads,
                                  loom_value_t *total_norm) {
  return train_clip_grad_norm(__func__, g, NULL, n, grads, max_norm, out_grads, total_norm);
}
