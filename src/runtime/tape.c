/* Training through traces: the tape of this step's differentiable
 * pieces (compiled segments with the values their backward needs, kept
 * per invocation, and host callbacks), the backward walk over it, the
 * parameters' gradients, and the AdamW step as one executable. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/trace_internal.h"

/* ---- Records ------------------------------------------------------------- */

static loom_status_t new_record(loom_trace_t *t, tape_kind_t kind, int n_in,
                                const int32_t *in, int n_out,
                                const int32_t *out, tape_rec_t **rec) {
  LOOM_TRY(core_grow((void **)&t->tape, &t->cap_tape, t->n_tape + 1,
                     sizeof *t->tape));
  tape_rec_t *r = &t->tape[t->n_tape];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->n_in = n_in;
  r->n_out = n_out;
  r->in = core_malloc(sizeof *r->in * (size_t)(n_in + 1));
  r->out = core_malloc(sizeof *r->out * (size_t)(n_out + 1));
  if (!r->in || !r->out) {
    core_free(r->in);
    core_free(r->out);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for the tape");
  }
  if (n_in) memcpy(r->in, in, sizeof *r->in * (size_t)n_in);
  if (n_out) memcpy(r->out, out, sizeof *r->out * (size_t)n_out);
  t->n_tape++;
  *rec = r;
  return LOOM_OK;
}

static void free_record(loom_trace_t *t, tape_rec_t *r) {
  (void)t;
  for (int i = 0; i < r->n_saved; i++) loom_tensor_destroy(r->saved[i]);
  core_free(r->saved);
  core_free((void *)r->key.inputs);
  seg_desc_release(r->bwd);
  core_free(r->in);
  core_free(r->out);
}

loom_status_t tape_push_segment(loom_trace_t *t, seg_desc_t *bwd,
                                const rt_key_t *key, int n_in,
                                const int32_t *in, int n_out,
                                const int32_t *out, int n_saved,
                                loom_tensor_t **saved) {
  tape_rec_t *r = NULL;
  loom_status_t s = new_record(t, TAPE_SEGMENT, n_in, in, n_out, out, &r);
  rt_key_input_t *kin = NULL;
  if (s == LOOM_OK) {
    kin = core_malloc(sizeof *kin * (size_t)(key->n_inputs + 1));
    r->saved = core_malloc(sizeof *r->saved * (size_t)(n_saved + 1));
    if (!kin || !r->saved) s = loom_fail(LOOM_ERR_NOMEM, "out of memory for the tape");
  }
  if (s != LOOM_OK) {
    core_free(kin);
    if (r) {
      core_free(r->saved);
      r->saved = NULL;
    }
    for (int i = 0; i < n_saved; i++) loom_tensor_destroy(saved[i]);
    return s;
  }
  if (key->n_inputs) memcpy(kin, key->inputs, sizeof *kin * (size_t)key->n_inputs);
  r->key = *key;
  r->key.inputs = kin;
  r->key.structure = tr_mix(key->structure, 0xbac4);
  rt_key_finish(&r->key);
  r->bwd = bwd;
  bwd->refs++;
  r->n_saved = n_saved;
  if (n_saved) memcpy(r->saved, saved, sizeof *saved * (size_t)n_saved);
  return LOOM_OK;
}

loom_status_t tape_push_callback(loom_trace_t *t, const loom_host_op_t *op,
                                 int n_in, const int32_t *in, int n_out,
                                 const int32_t *out) {
  tape_rec_t *r = NULL;
  LOOM_TRY(new_record(t, TAPE_CALLBACK, n_in, in, n_out, out, &r));
  r->op = *op;
  return LOOM_OK;
}

void tape_clear(loom_trace_t *t) {
  for (int64_t i = 0; i < t->n_tape; i++) free_record(t, &t->tape[i]);
  t->n_tape = 0;
  for (int64_t i = 0; i < t->n_params; i++) {
    loom_tensor_destroy(t->params[i].grad);
    t->params[i].grad = NULL;
  }
}

/* ---- Gradients ------------------------------------------------------------ */

/* acc += g, elementwise; g is consumed. v names the value for messages. */
static loom_status_t add_into(loom_tensor_t *acc, loom_tensor_t *g, int32_t v) {
  int64_t n = loom_tensor_numel(acc);
  loom_status_t s = LOOM_OK;
  if (loom_tensor_numel(g) != n || g->dtype != acc->dtype)
    s = loom_fail(LOOM_ERR_SHAPE, "trace backward: gradient of %%%d has %lld "
                  "elements, %lld expected", v, (long long)loom_tensor_numel(g),
                  (long long)n);
  else if (acc->dtype == LOOM_F32)
    for (int64_t i = 0; i < n; i++) ((float *)acc->data)[i] += ((float *)g->data)[i];
  else
    for (int64_t i = 0, es = (int64_t)loom_dtype_size(acc->dtype); i < n; i++) {
      char *a = (char *)acc->data + i * es;
      dtype_store_f64(acc->dtype, a, dtype_load_f64(acc->dtype, a) +
                      dtype_load_f64(g->dtype, (char *)g->data + i * es));
    }
  loom_tensor_destroy(g);
  return s;
}

/* grads[v] += g (g is consumed). */
static loom_status_t accumulate(loom_trace_t *t, int32_t v, loom_tensor_t *g) {
  if (t->grads[v]) return add_into(t->grads[v], g, v);
  t->grads[v] = g;
  return LOOM_OK;
}

/* grads[v], or a new zero tensor of v's type. */
static loom_status_t grad_or_zeros(loom_trace_t *t, int32_t v,
                                   loom_tensor_t **out, bool *made) {
  *made = !t->grads[v];
  if (!*made) {
    *out = t->grads[v];
    return LOOM_OK;
  }
  const loom_tensor_t *x = t->vals[v].t;
  return tensor_new(x->dtype, x->rank, x->shape, out);
}

/* The backward of a segment: compiled through the cache (the forward's
 * key under another structure), else interpreted. */
static loom_status_t run_backward_graph(loom_trace_t *t, tape_rec_t *r,
                                        int n_in, loom_tensor_t **ins,
                                        int n_out, loom_tensor_t **outs) {
  rt_entry_t *e = NULL;
  rt_get_result_t res = RT_FAILED;
  if (t->opt.compile) {
    e = rt_cache_lookup(t->cache, &r->key);
    res = RT_READY;
    if (!e) {
      r->bwd->refs++;
      rt_builder_t b = {seg_desc_build, (void (*)(void *))seg_desc_release, r->bwd};
      LOOM_TRY(rt_cache_get(t->cache, &r->key, &b, !t->opt.tiered,
                            t->opt.recompile_limit, &res, &e));
    }
  }
  if (res == RT_READY && e) {
    loom_status_t s = LOOM_OK;
    for (int i = 0; i < n_out && s == LOOM_OK; i++) { /* of the inputs' shapes */
      const loom_tensor_t *x = t->vals[r->in[r->bwd->wrt[i]]].t;
      s = tensor_new(x->dtype, x->rank, x->shape, &outs[i]);
    }
    if (s == LOOM_OK) s = rt_entry_run(e, n_in, ins, n_out, outs);
    rt_entry_release(t->cache, e);
    return s;
  }
  loom_graph_t *g = NULL;
  LOOM_TRY(seg_desc_build(r->bwd, &g, NULL));
  loom_status_t s = loom_interpret(g, n_in, ins, n_out, outs);
  loom_graph_destroy(g);
  t->stats.interpreted++;
  return s;
}

static loom_status_t backward_segment(loom_trace_t *t, tape_rec_t *r) {
  const seg_desc_t *d = r->bwd;
  int n_grad = 0;
  for (int k = 0; k < r->n_out; k++)
    n_grad += dtype_is_float(t->g->values[r->out[k]].type.dtype);
  int n_in = r->n_saved + n_grad;
  loom_tensor_t *ins[n_in + 1], *outs[d->n_wrt + 1];
  bool made[n_in + 1];
  memset(made, 0, sizeof made);
  memset(outs, 0, sizeof outs);
  for (int i = 0; i < r->n_saved; i++) ins[i] = r->saved[i];
  loom_status_t s = LOOM_OK;
  for (int k = 0, j = r->n_saved; k < r->n_out && s == LOOM_OK; k++)
    if (dtype_is_float(t->g->values[r->out[k]].type.dtype)) {
      s = grad_or_zeros(t, r->out[k], &ins[j], &made[j]);
      j++;
    }
  if (s == LOOM_OK) s = run_backward_graph(t, r, n_in, ins, d->n_wrt, outs);
  for (int i = 0; i < n_in; i++)
    if (made[i]) loom_tensor_destroy(ins[i]);
  for (int i = 0; i < d->n_wrt; i++) {
    if (s == LOOM_OK) s = accumulate(t, r->in[d->wrt[i]], outs[i]);
    else loom_tensor_destroy(outs[i]);
  }
  return s;
}

static loom_status_t backward_callback(loom_trace_t *t, tape_rec_t *r) {
  int n = r->n_in + r->n_out;
  const loom_tensor_t *ins[n + 1];
  loom_tensor_t *grads[r->n_in + 1], *made[r->n_out + 1];
  memset(grads, 0, sizeof grads);
  memset(made, 0, sizeof made);
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < r->n_in; i++) ins[i] = t->vals[r->in[i]].t;
  for (int k = 0; k < r->n_out && s == LOOM_OK; k++) {
    bool fresh;
    loom_tensor_t *g = NULL;
    s = grad_or_zeros(t, r->out[k], &g, &fresh);
    ins[r->n_in + k] = g;
    if (fresh) made[k] = g;
  }
  for (int i = 0; i < r->n_in && s == LOOM_OK; i++) {
    const loom_tensor_t *x = ins[i];
    s = tensor_new(x->dtype, x->rank, x->shape, &grads[i]);
  }
  if (s == LOOM_OK) {
    loom_clear_error();
    s = r->op.backward(r->op.user, n, ins, r->n_in, grads);
    if (s != LOOM_OK) {
      char said[256]; /* the callback's own message, if it set one */
      snprintf(said, sizeof said, "%s", loom_last_error());
      loom_fail(s, "backward of host callback '%s' failed (%s)%s%s", r->op.name,
                loom_status_name(s), said[0] ? ": " : "", said);
    }
  }
  for (int k = 0; k < r->n_out; k++) loom_tensor_destroy(made[k]);
  for (int i = 0; i < r->n_in; i++) {
    if (s == LOOM_OK && t->vals[r->in[i]].grad) s = accumulate(t, r->in[i], grads[i]);
    else loom_tensor_destroy(grads[i]);
  }
  return s;
}

/* Hands the parameters' gradients of this walk to their accumulators,
 * and frees the others. */
static loom_status_t collect_grads(loom_trace_t *t) {
  loom_status_t s = LOOM_OK;
  for (int64_t i = 0; i < t->n_params; i++) {
    int32_t v = t->params[i].value;
    if (v < 0 || !t->grads[v]) continue;
    loom_tensor_t *g = t->grads[v];
    t->grads[v] = NULL;
    if (!t->params[i].grad) t->params[i].grad = g;
    else if (s == LOOM_OK) s = add_into(t->params[i].grad, g, v);
    else loom_tensor_destroy(g);
  }
  for (int64_t v = 0; v < t->cap_grads; v++) {
    loom_tensor_destroy(t->grads[v]);
    t->grads[v] = NULL;
  }
  return s;
}

loom_status_t loom_trace_backward(loom_trace_t *t, loom_value_t loss) {
  LOOM_CHECK_ARG(t);
  if (!ir_value_valid(t->g, loss.id))
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_backward: %%%d is not a "
                     "value of this step", loss.id);
  const ir_type_t *ty = &t->g->values[loss.id].type;
  if (ty->rank != 0 || !dtype_is_float(ty->dtype))
    return loom_fail(LOOM_ERR_SHAPE, "loom_trace_backward: the loss must be a "
                     "float scalar (rank 0), not rank %d %s", ty->rank,
                     loom_dtype_name(ty->dtype));
  static const tr_reason_t why = {"loom_trace_backward of %%%lld", NULL, 0};
  tr_reason_t r = why;
  r.num = loss.id;
  if (!tr_tensor(t, loss.id)) LOOM_TRY(seg_cut(t, 1, &loss.id, &r));
  if (t->g->n_values > t->cap_grads) {
    int64_t old = t->cap_grads;
    LOOM_TRY(core_grow((void **)&t->grads, &t->cap_grads, t->g->n_values, sizeof *t->grads));
    memset(t->grads + old, 0, sizeof *t->grads * (size_t)(t->cap_grads - old));
  }
  loom_tensor_t *seed;
  LOOM_TRY(tensor_new(ty->dtype, 0, NULL, &seed));
  dtype_store_f64(ty->dtype, seed->data, 1.0);
  t->grads[loss.id] = seed;
  loom_status_t s = LOOM_OK;
  for (int64_t i = t->n_tape - 1; i >= 0 && s == LOOM_OK; i--) {
    tape_rec_t *r = &t->tape[i];
    bool reached = false; /* skip records no gradient reaches */
    for (int k = 0; k < r->n_out; k++) reached |= t->grads[r->out[k]] != NULL;
    if (!reached) continue;
    s = r->kind == TAPE_SEGMENT ? backward_segment(t, r) : backward_callback(t, r);
  }
  loom_status_t c = collect_grads(t);
  if (s == LOOM_OK) s = c;
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

loom_status_t loom_trace_grad(loom_trace_t *t, const loom_tensor_t *p,
                              const loom_tensor_t **out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(p);
  LOOM_CHECK_ARG(out);
  for (int64_t i = 0; i < t->n_params; i++) {
    tr_param_t *q = &t->params[i];
    if (q->t != p) continue;
    if (!q->grad) LOOM_TRY(tensor_new(p->dtype, p->rank, p->shape, &q->grad));
    *out = q->grad;
    return LOOM_OK;
  }
  return loom_fail(LOOM_ERR_INVALID, "loom_trace_grad: the tensor is not a "
                   "parameter of this trace (enter it with loom_trace_param)");
}

/* ---- AdamW ---------------------------------------------------------------- */

/* The optimizer step: one graph over every parameter (graph parameters
 * that the user's tensors are copied into and back from), the moments
 * as its own parameters, gradients and lr as inputs. */
typedef struct tr_adamw {
  loom_graph_t *g;
  loom_executable_t *exe;
  int n;
  double hyper[4];
  loom_value_t *params;
} tr_adamw_t;

static void adamw_free(tr_adamw_t *a) {
  if (!a) return;
  loom_executable_destroy(a->exe);
  loom_graph_destroy(a->g);
  core_free(a->params);
  core_free(a);
}

/* Whether a fits the trace's parameters and hyperparameters. */
static bool adamw_fits(const loom_trace_t *t, const tr_adamw_t *a,
                       const double *hyper) {
  if (!a || a->n != t->n_params || memcmp(a->hyper, hyper, sizeof a->hyper)) return false;
  for (int i = 0; i < a->n; i++) {
    const loom_tensor_t *p = t->params[i].t;
    const ir_type_t *ty = &a->g->values[a->params[i].id].type;
    if (ty->dtype != p->dtype || ty->rank != p->rank ||
        memcmp(ty->dims, p->shape, sizeof *p->shape * (size_t)p->rank))
      return false;
  }
  return true;
}

/* Copies the state (moments, step) of old into a's parameters of the
 * same name and shape, so that a new parameter does not reset the rest. */
static void adamw_carry(tr_adamw_t *a, const tr_adamw_t *old) {
  if (!old) return;
  for (int64_t i = 0; i < a->g->n_params; i++) {
    ir_value_t *v = &a->g->values[a->g->params[i]];
    for (int64_t j = 0; j < old->g->n_params; j++) {
      const ir_value_t *o = &old->g->values[old->g->params[j]];
      if (v->name && o->name && !strcmp(v->name, o->name) &&
          loom_tensor_numel(v->data) == loom_tensor_numel(o->data) &&
          v->data->dtype == o->data->dtype)
        memcpy(v->data->data, o->data->data,
               (size_t)loom_tensor_numel(v->data) * loom_dtype_size(v->data->dtype));
    }
  }
}

static loom_status_t adamw_graph(loom_trace_t *t, tr_adamw_t *a,
                                 const double *hyper) {
  loom_graph_t *g = a->g;
  int n = a->n;
  loom_value_t grads[n + 1], lr;
  for (int i = 0; i < n; i++) {
    const loom_tensor_t *p = t->params[i].t;
    char name[32];
    snprintf(name, sizeof name, "p%d", i);
    LOOM_TRY(loom_graph_param(g, name, p->dtype, p->rank, p->shape, NULL, &a->params[i]));
    snprintf(name, sizeof name, "grad%d", i);
    LOOM_TRY(loom_graph_input(g, name, p->dtype, p->rank, p->shape, &grads[i]));
  }
  LOOM_TRY(loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr));
  return loom_adamw(g, n, a->params, grads, lr, hyper[0], hyper[1], hyper[2], hyper[3]);
}

static loom_status_t adamw_build(loom_trace_t *t, const double *hyper) {
  tr_adamw_t *a = core_calloc(1, sizeof *a);
  if (!a) return loom_fail(LOOM_ERR_NOMEM, "out of memory for the AdamW step");
  a->n = (int)t->n_params;
  memcpy(a->hyper, hyper, sizeof a->hyper);
  a->params = core_malloc(sizeof *a->params * (size_t)(a->n + 1));
  loom_status_t s = a->params ? loom_graph_create(&a->g)
                              : loom_fail(LOOM_ERR_NOMEM, "out of memory for the AdamW step");
  if (s == LOOM_OK) s = adamw_graph(t, a, hyper);
  if (s == LOOM_OK && t->opt.compile) {
    loom_compile_options_t o;
    loom_compile_options_init(&o);
    o.num_threads = t->opt.num_threads;
    s = loom_compile(a->g, &o, &a->exe);
  }
  if (s != LOOM_OK) {
    adamw_free(a);
    return s;
  }
  adamw_carry(a, t->adamw);
  adamw_free(t->adamw);
  t->adamw = a;
  return LOOM_OK;
}

/* Runs the step: the user's parameters in, gradients and lr bound, the
 * updated parameters copied back. */
static loom_status_t adamw_run(loom_trace_t *t, double lr) {
  tr_adamw_t *a = t->adamw;
  int n = a->n;
  loom_tensor_t *ins[n + 1], *lr_t;
  float lr32 = (float)lr;
  LOOM_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &lr32, sizeof lr32, &lr_t));
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < n && s == LOOM_OK; i++) {
    tr_param_t *q = &t->params[i];
    loom_tensor_t *storage = a->g->values[a->params[i].id].data;
    memcpy(storage->data, q->t->data,
           (size_t)loom_tensor_numel(q->t) * loom_dtype_size(q->t->dtype));
    if (!q->grad) s = tensor_new(q->t->dtype, q->t->rank, q->t->shape, &q->grad);
    ins[i] = q->grad;
  }
  ins[n] = lr_t;
  if (s == LOOM_OK)
    s = a->exe ? loom_executable_run(a->exe, n + 1, ins, 0, NULL)
               : loom_interpret(a->g, n + 1, ins, 0, NULL);
  for (int i = 0; i < n && s == LOOM_OK; i++) {
    loom_tensor_t *storage = a->g->values[a->params[i].id].data;
    memcpy(t->params[i].t->data, storage->data,
           (size_t)loom_tensor_numel(storage) * loom_dtype_size(storage->dtype));
  }
  loom_tensor_destroy(lr_t);
  return s;
}

loom_status_t loom_trace_adamw(loom_trace_t *t, double lr, double beta1,
                               double beta2, double eps,
                               double weight_decay) {
  LOOM_CHECK_ARG(t);
  if (t->n_params == 0)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_adamw: no parameters were "
                     "entered (loom_trace_param)");
  double hyper[4] = {beta1, beta2, eps, weight_decay};
  if (!adamw_fits(t, t->adamw, hyper)) LOOM_TRY(adamw_build(t, hyper));
  LOOM_TRY(adamw_run(t, lr));
  loom_clear_error();
  return LOOM_OK;
}

void tape_destroy(loom_trace_t *t) {
  tape_clear(t);
  core_free(t->tape);
  t->tape = NULL;
  for (int64_t v = 0; v < t->cap_grads; v++) loom_tensor_destroy(t->grads[v]);
  core_free(t->grads);
  t->grads = NULL;
  adamw_free(t->adamw);
  t->adamw = NULL;
}
