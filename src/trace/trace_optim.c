/* The trace's optimizer step: one graph over every parameter entered so
 * far, made by the optimizer builders of loom/train.h (train_optimizer:
 * each optimizer has one implementation, for graphs and traces alike),
 * compiled once and replayed every step. The graph's parameters store
 * their values in the user's tensors (borrowed, so that a step updates
 * them in place, without copies in and out), its state (momentum buffers,
 * moments, step counters) in parameters of its own, which persist across
 * steps. Inputs: lr, then per parameter its gradient and whether it takes
 * the step. A tiered trace runs the step in the fallback interpreter
 * (eager kernels) while a copy of it compiles on a thread of its own,
 * and swaps the copy in, with the state carried over, at the first step
 * after the compile ends: a cold run's first step does not wait for the
 * C compiler. It calls only state.c of the tracer (the claim). */
#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/env.h"
#include "core/log.h"
#include "core/priority.h"
#include "core/status.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "runtime/interp.h"
#include "trace/trace_internal.h"
#include "train/data_parallel.h"
#include "train/optim.h"

typedef struct tr_optim {
  loom_graph_t *g;
  loom_executable_t *exe; /* NULL: interpreted (a trace that does not compile) */
  loom_optimizer_t hyper;
  int n;                  /* the trace's parameters when built */
  loom_value_t *params;   /* the graph's, per trace parameter */
  /* Per trace parameter, its storage (NULL once forgotten): the state of
   * "p<i>" goes with the parameter, whatever index it has next time. */
  const void **storage;
  loom_tensor_t *take[2]; /* bool scalars false and true, bound per parameter */
  /* Tiered: the same step compiling on `thread` into next->exe, its
   * status in next->compiled once next->ready. */
  struct tr_optim *next;
  pthread_t thread;
  bool joined;
  atomic_bool ready;
  int num_threads;        /* of the compile */
  core_env_t *env;        /* the environment it reads */
  loom_status_t compiled;
  char *why; /* the compile's error, when it failed */
  /* Per parameter, its state in g (m, v, step; or the momentum buffer),
   * for the step run without the graph (optim_eager); NULL until found. */
  loom_tensor_t *(*state)[3];
  struct tr_optim *retired; /* the next in the trace's list of retired steps */
} tr_optim_t;

/* Waits for a's background compile, if one is running. */
static void optim_join(tr_optim_t *a) {
  if (!a->next || a->joined) return;
  pthread_join(a->thread, NULL);
  a->joined = true;
}

static void optim_free(tr_optim_t *a) {
  if (!a) return;
  optim_join(a);
  optim_free(a->next);
  core_free(a->why);
  core_free(a->state);
  core_env_release(a->env);
  loom_executable_destroy(a->exe);
  loom_graph_destroy(a->g);
  core_free(a->params);
  core_free(a->storage);
  loom_tensor_destroy(a->take[0]);
  loom_tensor_destroy(a->take[1]);
  core_free(a);
}

bool tr_optim_compiled(loom_trace_t *t, bool wait) {
  tr_optim_t *a = t->optim;
  if (a && wait) optim_join(a);
  return a && a->exe;
}

static void staged_free(tr_param_t *q) {
  for (int k = 0; k < TR_OPTIM_STATES; k++) {
    loom_tensor_destroy(q->staged[k]);
    q->staged[k] = NULL;
  }
}

/* A replaced step whose compile still runs waits in the trace's list
 * until that compile ends, so that a new set of parameters (a new model)
 * does not wait for the C compiler of the step it replaces. */
static void optim_retire(loom_trace_t *t, tr_optim_t *a) {
  if (a && a->next && !a->joined && !atomic_load_explicit(&a->next->ready, memory_order_acquire)) {
    a->retired = t->retired;
    t->retired = a;
    return;
  }
  optim_free(a);
}

/* Frees the retired steps whose compile ended (all of them: wait). */
static void optim_reap(loom_trace_t *t, bool wait) {
  for (tr_optim_t **at = &t->retired; *at;) {
    tr_optim_t *a = *at;
    if (!wait && !atomic_load_explicit(&a->next->ready, memory_order_acquire)) {
      at = &a->retired;
      continue;
    }
    *at = a->retired;
    optim_free(a);
  }
}

void tr_optim_destroy(loom_trace_t *t) {
  optim_free(t->optim);
  t->optim = NULL;
  optim_reap(t, true);
  for (int64_t i = 0; i < t->n_params; i++) staged_free(&t->params[i]);
}

/* Whether a and b make the same graph (the fields of their kind). */
static bool same_hyper(const loom_optimizer_t *a, const loom_optimizer_t *b) {
  if (a->kind != b->kind || a->weight_decay != b->weight_decay) return false;
  if (a->kind == LOOM_OPTIMIZER_SGD)
    return a->momentum == b->momentum && a->nesterov == b->nesterov;
  return a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps;
}

/* Whether a fits the trace's parameters (their storage) and hyper. */
static bool optim_fits(const loom_trace_t *t, const tr_optim_t *a,
                       const loom_optimizer_t *hyper) {
  if (!a || a->n != t->n_params || !same_hyper(&a->hyper, hyper)) return false;
  for (int i = 0; i < a->n; i++) {
    const loom_tensor_t *p = t->params[i].t;
    const ir_value_t *v = &a->g->values[a->params[i].id];
    if (v->type.dtype != p->dtype || v->type.rank != p->rank || a->storage[i] != p->data ||
        memcmp(v->type.dims, p->shape, sizeof *p->shape * (size_t)p->rank))
      return false;
  }
  return true;
}

/* The graph's parameter pv stores its values in p's storage (borrowed). */
static void share_storage(loom_graph_t *g, loom_value_t pv, const loom_tensor_t *p) {
  loom_tensor_t *x = g->values[pv.id].data;
  if (x->owns_data) core_storage_free(x->data);
  x->data = p->data;
  x->owns_data = false;
}

void tr_optim_forget(loom_trace_t *t, const loom_tensor_t *p) {
  for (int64_t i = 0; i < t->n_params; i++)
    if (t->params[i].t == p) staged_free(&t->params[i]);
  for (tr_optim_t *a = t->optim; a; a = a->next)
    for (int i = 0; i < a->n; i++)
      if (a->storage[i] == p->data) a->storage[i] = NULL;
}

/* The name in old of a's state value `name`: state is "p<i>.<what>" after
 * parameter i, which may be old's parameter j (the same storage), or
 * NULL; other names (a step counter for all) stay as they are. */
static bool old_name(const tr_optim_t *a, const tr_optim_t *old, const char *name, char *out,
                     size_t size) {
  int i, at = 0;
  if (sscanf(name, "p%d.%n", &i, &at) != 1 || at == 0 || i < 0 || i >= a->n) {
    snprintf(out, size, "%s", name);
    return true;
  }
  for (int j = 0; j < old->n; j++)
    if (a->storage[i] && old->storage[j] == a->storage[i]) {
      snprintf(out, size, "p%d.%s", j, name + at);
      return true;
    }
  return false;
}

/* Copies the state of old into a's state of the same parameter (by
 * storage), name, dtype and size, so that a new or forgotten parameter
 * does not reset the others' state. */
static void carry_state(tr_optim_t *a, const tr_optim_t *old) {
  if (!old) return;
  for (int64_t i = 0; i < a->g->n_params; i++) {
    ir_value_t *v = &a->g->values[a->g->params[i]];
    char name[256];
    /* the state: the parameters themselves are the user's storage */
    if (!v->name || !v->data->owns_data || !old_name(a, old, v->name, name, sizeof name))
      continue;
    for (int64_t j = 0; j < old->g->n_params; j++) {
      const ir_value_t *o = &old->g->values[old->g->params[j]];
      if (o->name && !strcmp(name, o->name) && o->data->owns_data &&
          loom_tensor_numel(v->data) == loom_tensor_numel(o->data) &&
          v->data->dtype == o->data->dtype)
        memcpy(v->data->data, o->data->data,
               (size_t)loom_tensor_numel(v->data) * loom_dtype_size(v->data->dtype));
    }
  }
}

/* Parameter i's graph parameter "p<i>" (the user's storage), and its
 * inputs "grad<i>" and "take<i>". */
static loom_status_t param_values(loom_graph_t *g, const loom_tensor_t *p, int i,
                                  loom_value_t *pv, loom_value_t *grad,
                                  loom_value_t *take) {
  char name[48];
  snprintf(name, sizeof name, "p%d", i);
  LOOM_TRY(loom_graph_param(g, name, p->dtype, p->rank, p->shape, NULL, pv));
  share_storage(g, *pv, p);
  snprintf(name, sizeof name, "grad%d", i);
  LOOM_TRY(loom_graph_input(g, name, p->dtype, p->rank, p->shape, grad));
  snprintf(name, sizeof name, "take%d", i);
  return loom_graph_input(g, name, LOOM_BOOL, 0, NULL, take);
}

/* lr is f64, so that an f64 parameter steps by the rate it was given (a
 * cast per dtype makes the others' rate, once per run). */
static loom_status_t optim_graph(loom_trace_t *t, tr_optim_t *a, const char *fn) {
  int n = a->n;
  loom_value_t lr, grads[n + 1], takes[n + 1];
  LOOM_TRY(loom_graph_input(a->g, "lr", LOOM_F64, 0, NULL, &lr));
  for (int i = 0; i < n; i++)
    LOOM_TRY(param_values(a->g, t->params[i].t, i, &a->params[i], &grads[i], &takes[i]));
  return train_optimizer(fn, a->g, &a->hyper, n, a->params, grads, takes, lr);
}

static loom_status_t optim_compile(loom_trace_t *t, tr_optim_t *a) {
  if (!t->opt.compile) return LOOM_OK;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = t->opt.num_threads;
  return loom_compile(a->g, &o, &a->exe);
}

static loom_status_t flags(tr_optim_t *a) {
  for (int k = 0; k < 2; k++) {
    bool v = k;
    LOOM_TRY(loom_tensor_from_data(LOOM_BOOL, 0, NULL, &v, sizeof v, &a->take[k]));
  }
  return LOOM_OK;
}

/* A step for the trace's parameters and hyper, not compiled. */
static loom_status_t optim_new(loom_trace_t *t, const loom_optimizer_t *hyper, const char *fn,
                               tr_optim_t **out) {
  tr_optim_t *a = core_calloc(1, sizeof *a);
  if (!a) return loom_fail(LOOM_ERR_NOMEM, "out of memory for the optimizer step");
  a->n = (int)t->n_params;
  a->hyper = *hyper;
  a->params = core_malloc(sizeof *a->params * (size_t)(a->n + 1));
  a->storage = core_malloc(sizeof *a->storage * (size_t)(a->n + 1));
  loom_status_t s = a->params && a->storage
                        ? loom_graph_create(&a->g)
                        : loom_fail(LOOM_ERR_NOMEM, "out of memory for the optimizer step");
  for (int i = 0; a->storage && i < a->n; i++) a->storage[i] = t->params[i].t->data;
  if (s == LOOM_OK) s = optim_graph(t, a, fn);
  if (s == LOOM_OK) s = ir_verify(a->g); /* once: the fallback runs it unchecked */
  if (s == LOOM_OK) s = flags(a);
  if (s != LOOM_OK) optim_free(a);
  else *out = a;
  return s;
}

/* The background compile: reads only b's graph (its structure; the
 * parameters' values, which the running step updates, are not read). */
static void *compile_main(void *arg) {
  tr_optim_t *b = arg;
  core_thread_background();
  core_env_enter(b->env);
  b->env = NULL;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = b->num_threads;
  b->compiled = loom_compile(b->g, &o, &b->exe);
  if (b->compiled != LOOM_OK) b->why = core_strdup(loom_last_error());
  core_env_leave();
  atomic_store_explicit(&b->ready, true, memory_order_release);
  return NULL;
}

/* Starts compiling a copy of a beside the trace (a tiered trace whose
 * cache has workers), or compiles a now. */
static loom_status_t optim_start(loom_trace_t *t, tr_optim_t *a, const char *fn) {
  if (!t->opt.compile) return LOOM_OK;
  if (!t->opt.tiered || !rt_cache_has_workers(t->cache)) return optim_compile(t, a);
  tr_optim_t *b;
  LOOM_TRY(optim_new(t, &a->hyper, fn, &b));
  b->num_threads = t->opt.num_threads;
  b->env = core_env_hold();
  if (pthread_create(&a->thread, NULL, compile_main, b) != 0) {
    optim_free(b);
    return optim_compile(t, a);
  }
  a->next = b;
  return LOOM_OK;
}

/* A new step for the trace's parameters and hyper, with the state of the
 * one it replaces. */
static loom_status_t optim_build(loom_trace_t *t, const loom_optimizer_t *hyper,
                                 const char *fn) {
  tr_optim_t *a;
  LOOM_TRY(optim_new(t, hyper, fn, &a));
  loom_status_t s = optim_start(t, a, fn);
  if (s != LOOM_OK) {
    optim_free(a);
    return s;
  }
  carry_state(a, t->optim);
  optim_retire(t, t->optim);
  t->optim = a;
  return LOOM_OK;
}

/* The compiled copy in place of the interpreted step, once its compile
 * ended: with the state so far. A failed compile leaves the step in the
 * fallback, as a segment's does (LOOM_LOG=compile says why). */
static void optim_swap(loom_trace_t *t) {
  tr_optim_t *a = t->optim, *b = a->next;
  if (!b || !atomic_load_explicit(&b->ready, memory_order_acquire)) return;
  if (t->comm && !t->dp_all_ready) return; /* the ranks swap at one step */
  optim_join(a);
  a->next = NULL;
  if (b->compiled != LOOM_OK || !b->exe) {
    core_log(LOG_COMPILE, "the optimizer step stays in the fallback: %s",
             b->why ? b->why : "no executable");
    optim_free(b);
    return;
  }
  carry_state(b, a);
  optim_free(a);
  t->optim = b;
}

/* ---- The step without its graph ------------------------------------------ */

static loom_tensor_t *state_named(const tr_optim_t *a, int i, const char *what) {
  char name[48];
  snprintf(name, sizeof name, "p%d.%s", i, what);
  for (int64_t j = 0; j < a->g->n_params; j++) {
    const ir_value_t *v = &a->g->values[a->g->params[j]];
    if (v->name && !strcmp(v->name, name)) return v->data;
  }
  return NULL;
}

static bool f32_like(const loom_tensor_t *x, int64_t numel) {
  return x && x->dtype == LOOM_F32 && tensor_is_contiguous(x) && loom_tensor_numel(x) == numel;
}

/* Whether parameter i's update can run without the graph: an f32
 * parameter, gradient and state, contiguous, its step counter an i64. */
static bool eager_fits(const loom_trace_t *t, const tr_optim_t *a, int i) {
  const tr_param_t *q = &t->params[i];
  int64_t numel = loom_tensor_numel(q->t);
  loom_tensor_t *const *st = a->state[i];
  if (!f32_like(q->t, numel) || !f32_like(q->grad, numel)) return false;
  if (a->hyper.kind == LOOM_OPTIMIZER_SGD)
    return a->hyper.momentum == 0 || f32_like(st[0], numel);
  return f32_like(st[0], numel) && f32_like(st[1], numel) && st[2] && st[2]->dtype == LOOM_I64 &&
         loom_tensor_numel(st[2]) == 1;
}

/* The interpreted step computed by train_optimizer_eager, one pass per
 * parameter instead of the graph's nodes (the compiled copy, once it
 * lands, runs the graph). false: some parameter does not fit, and the
 * graph runs instead (nothing was updated). */
static bool optim_eager(loom_trace_t *t, tr_optim_t *a, double lr, loom_status_t *s) {
  if (!a->state) {
    a->state = core_calloc((size_t)a->n + 1, sizeof *a->state);
    if (!a->state) return false;
    bool sgd = a->hyper.kind == LOOM_OPTIMIZER_SGD;
    for (int i = 0; i < a->n; i++) {
      a->state[i][0] = state_named(a, i, sgd ? "momentum" : "m");
      a->state[i][1] = sgd ? NULL : state_named(a, i, "v");
      a->state[i][2] = sgd ? NULL : state_named(a, i, "step");
    }
  }
  for (int i = 0; i < a->n; i++)
    if (t->params[i].got_grad && !eager_fits(t, a, i)) return false;
  struct core_pool *pool = tr_fallback_pool(t);
  for (int i = 0; i < a->n && *s == LOOM_OK; i++) {
    tr_param_t *q = &t->params[i];
    loom_tensor_t **st = a->state[i];
    if (!q->got_grad) continue; /* the graph's take: no step, no count */
    *s = train_optimizer_eager(&a->hyper, lr, loom_tensor_numel(q->t), q->t->data,
                               q->grad->data, st[0] ? st[0]->data : NULL,
                               st[1] ? st[1]->data : NULL, st[2] ? st[2]->data : NULL, pool);
  }
  return true;
}

/* Runs the step: lr, and per parameter its gradient (zeros when none
 * came) and whether it got one, bound; the graph's parameters are the
 * user's tensors. */
static loom_status_t optim_run(loom_trace_t *t, double lr) {
  tr_optim_t *a = t->optim;
  int n = a->n, n_in = 1 + 2 * n;
  loom_tensor_t *ins[n_in];
  LOOM_TRY(loom_tensor_from_data(LOOM_F64, 0, NULL, &lr, sizeof lr, &ins[0]));
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < n && s == LOOM_OK; i++) {
    tr_param_t *q = &t->params[i];
    const loom_tensor_t *p = q->t;
    if (!q->grad) s = tensor_new(p->dtype, p->rank, p->shape, &q->grad);
    ins[1 + 2 * i] = q->grad;
    ins[2 + 2 * i] = a->take[q->got_grad];
  }
  if (s == LOOM_OK && a->exe) s = loom_executable_run(a->exe, n_in, ins, 0, NULL);
  else if (s == LOOM_OK && !optim_eager(t, a, lr, &s))
    s = rt_interpret(a->g, n_in, ins, 0, NULL, be_find(NULL), tr_fallback_pool(t));
  loom_tensor_destroy(ins[0]);
  return s;
}

/* ---- Data parallelism ----------------------------------------------------------- */

enum { DP_BUCKET_BYTES = 25 << 20 };

/* Every rank holds the same parameters (their count, dtypes and shapes),
 * and a parameter that got a gradient on any rank counts as having one. */
static loom_status_t dp_agree(loom_trace_t *t, const char *fn) {
  int64_t n = t->n_params;
  uint64_t hu = 1469598103934665603ull; /* FNV-1a */
  for (int64_t i = 0; i < n; i++) {
    const loom_tensor_t *p = t->params[i].t;
    hu = (hu ^ (uint64_t)(p->dtype + 31 * p->rank)) * 1099511628211ull;
    for (int d = 0; d < p->rank; d++) hu = (hu ^ (uint64_t)p->shape[d]) * 1099511628211ull;
  }
  int64_t h = (int64_t)(hu >> 1); /* and -h fits */
  int64_t count[2] = {n, -n};
  loom_tensor_t c, v;
  tensor_view_init(&c, LOOM_I64, 1, (int64_t[]){2}, count);
  LOOM_TRY(dp_all_reduce_agreed(t->comm, &c, LOOM_COMM_MAX));
  if (count[0] != n || count[1] != -n)
    return loom_fail(LOOM_ERR_INVALID, "%s: rank %d entered %lld parameters, another rank %lld "
                     "(data parallelism needs the same parameters on every rank)", fn,
                     loom_comm_rank(t->comm), (long long)n,
                     (long long)(count[0] != n ? count[0] : -count[1]));
  int64_t *flags = core_malloc(sizeof(int64_t) * (size_t)(n + 3));
  if (!flags) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", fn);
  flags[0] = h, flags[1] = -h;
  for (int64_t i = 0; i < n; i++) flags[2 + i] = t->params[i].got_grad;
  const tr_optim_t *a = t->optim;
  flags[n + 2] = !(a && a->next && atomic_load_explicit(&a->next->ready, memory_order_acquire));
  tensor_view_init(&v, LOOM_I64, 1, (int64_t[]){n + 3}, flags);
  loom_status_t s = dp_all_reduce_agreed(t->comm, &v, LOOM_COMM_MAX);
  if (s == LOOM_OK && (flags[0] != h || flags[1] != -h))
    s = loom_fail(LOOM_ERR_INVALID, "%s: the ranks' parameters differ in dtype or shape "
                  "(data parallelism needs the same parameters on every rank)", fn);
  for (int64_t i = 0; i < n && s == LOOM_OK; i++) t->params[i].got_grad = flags[2 + i] != 0;
  t->dp_all_ready = s == LOOM_OK && flags[n + 2] == 0;
  core_free(flags);
  return s;
}

/* Sums params [first, last) of dtype dt (gradients, zeros where none)
 * across the ranks in one all_reduce of the staging buffer, and divides. */
static loom_status_t dp_bucket(loom_trace_t *t, int64_t first, int64_t last, loom_dtype_t dt,
                               int64_t bytes) {
  if (bytes > t->dp_stage_bytes) {
    void *stage = core_aligned_alloc((size_t)bytes);
    if (!stage) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a %lld-byte gradient bucket",
                                 (long long)bytes);
    core_free(t->dp_stage);
    t->dp_stage = stage, t->dp_stage_bytes = bytes;
  }
  char *at = t->dp_stage;
  for (int64_t i = first; i < last; i++) {
    tr_param_t *q = &t->params[i];
    if (q->t->dtype != dt || !q->got_grad) continue;
    size_t n = (size_t)loom_tensor_numel(q->t) * loom_dtype_size(dt);
    if (q->grad && !tensor_is_contiguous(q->grad)) { /* the average goes back in place */
      loom_tensor_t *copy;
      LOOM_TRY(tensor_contiguous_copy(q->grad, &copy));
      loom_tensor_destroy(q->grad);
      q->grad = copy;
    }
    if (q->grad) memcpy(at, q->grad->data, n);
    else memset(at, 0, n);
    at += n;
  }
  int64_t count = (at - (char *)t->dp_stage) / (int64_t)loom_dtype_size(dt);
  loom_tensor_t stage;
  tensor_view_init(&stage, dt, 1, &count, t->dp_stage);
  LOOM_TRY(dp_all_reduce_agreed(t->comm, &stage, LOOM_COMM_MEAN));
  at = t->dp_stage;
  for (int64_t i = first; i < last; i++) {
    tr_param_t *q = &t->params[i];
    if (q->t->dtype != dt || !q->got_grad) continue;
    if (!q->grad) LOOM_TRY(tensor_new(dt, q->t->rank, q->t->shape, &q->grad));
    size_t n = (size_t)loom_tensor_numel(q->t) * loom_dtype_size(dt);
    memcpy(q->grad->data, at, n);
    at += n;
  }
  return LOOM_OK;
}

/* The gradients averaged across the ranks, in buckets of one dtype in
 * the parameters' order, the same on every rank. */
static loom_status_t dp_exchange(loom_trace_t *t, const char *fn) {
  LOOM_TRY(dp_agree(t, fn));
  for (int64_t i = 0; i < t->n_params; i++) {
    loom_dtype_t dt = t->params[i].t->dtype;
    if (t->params[i].got_grad && dt != LOOM_F32 && dt != LOOM_F64)
      return loom_fail(LOOM_ERR_DTYPE, "%s: parameter %lld is %s; data parallelism averages "
                       "f32 and f64 gradients", fn, (long long)i, loom_dtype_name(dt));
  }
  static const loom_dtype_t dtypes[] = {LOOM_F32, LOOM_F64};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    int64_t first = 0, bytes = 0;
    for (int64_t i = 0; i < t->n_params; i++) {
      tr_param_t *q = &t->params[i];
      if (q->t->dtype != dtypes[k] || !q->got_grad) continue;
      int64_t b = loom_tensor_numel(q->t) * (int64_t)loom_dtype_size(dtypes[k]);
      if (bytes > 0 && bytes + b > DP_BUCKET_BYTES) {
        LOOM_TRY(dp_bucket(t, first, i, dtypes[k], bytes));
        first = i, bytes = 0;
      }
      bytes += b;
    }
    if (bytes > 0) LOOM_TRY(dp_bucket(t, first, t->n_params, dtypes[k], bytes));
  }
  return LOOM_OK;
}

loom_status_t loom_trace_data_parallel(loom_trace_t *t, loom_comm_t *comm) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  t->comm = comm;
  for (int64_t i = 0; comm && i < t->n_params; i++)
    LOOM_TRY(loom_comm_broadcast_tensor(comm, t->params[i].t, 0));
  return LOOM_OK;
}

/* ---- State, read and set ------------------------------------------------------
 * What a checkpoint of the optimizer needs: each parameter's state by the
 * name train/optim.c gives it after the step graph's parameter ("p<i>.m"). */

static const char *const state_names[TR_OPTIM_STATES] = {"momentum", "m", "v", "step"};

static int state_index(const char *name) {
  for (int k = 0; name && k < TR_OPTIM_STATES; k++)
    if (!strcmp(name, state_names[k])) return k;
  return -1;
}

/* For fn, with t taken: the trace's record of parameter p and the index
 * of state `name`, or a failure naming which is wrong. */
static loom_status_t state_of(loom_trace_t *t, const loom_tensor_t *p, const char *name,
                              const char *fn, tr_param_t **q, int *k) {
  LOOM_TRY(tr_claim(t, fn));
  *k = state_index(name);
  if (*k < 0)
    return loom_fail(LOOM_ERR_INVALID, "%s: no optimizer state is named \"%s\" (\"momentum\", "
                     "\"m\", \"v\", \"step\")", fn, name ? name : "(null)");
  return tr_find_param(t, p, fn, q);
}

/* The tensor of state k of the parameter whose storage is data in a's
 * graph, or NULL. */
static loom_tensor_t *graph_state(const tr_optim_t *a, const void *data, int k) {
  for (int i = 0; a && i < a->n; i++) {
    if (a->storage[i] != data) continue;
    char name[64];
    snprintf(name, sizeof name, "p%d.%s", i, state_names[k]);
    for (int64_t j = 0; j < a->g->n_params; j++) {
      ir_value_t *v = &a->g->values[a->g->params[j]];
      if (v->name && !strcmp(v->name, name)) return v->data;
    }
  }
  return NULL;
}

loom_status_t loom_trace_optimizer_state(loom_trace_t *t, const loom_tensor_t *p,
                                         const char *name, const loom_tensor_t **out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(p);
  LOOM_CHECK_ARG(out);
  tr_param_t *q;
  int k;
  LOOM_TRY(state_of(t, p, name, __func__, &q, &k));
  *out = q->staged[k] ? q->staged[k] : graph_state(t->optim, p->data, k);
  return LOOM_OK;
}

loom_status_t loom_trace_optimizer_state_set(loom_trace_t *t, const loom_tensor_t *p,
                                             const char *name, const loom_tensor_t *value) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(p);
  LOOM_CHECK_ARG(value);
  tr_param_t *q;
  int k;
  LOOM_TRY(state_of(t, p, name, __func__, &q, &k));
  bool step = !strcmp(name, "step");
  /* the update dtype: f16 and bf16 parameters keep f32 state (train/optim.c) */
  loom_dtype_t dt = step ? LOOM_I64 : p->dtype == LOOM_F16 || p->dtype == LOOM_BF16 ? LOOM_F32
                                                                                   : p->dtype;
  if (value->dtype != dt)
    return loom_fail(LOOM_ERR_DTYPE, "%s: state \"%s\" is %s (got %s)", __func__, name,
                     loom_dtype_name(dt), loom_dtype_name(value->dtype));
  if (step ? value->rank != 0
           : value->rank != p->rank ||
                 memcmp(value->shape, p->shape, sizeof *p->shape * (size_t)p->rank))
    return loom_fail(LOOM_ERR_SHAPE, "%s: state \"%s\" has %s (got rank %d)", __func__, name,
                     step ? "rank 0" : "the parameter's shape", value->rank);
  loom_tensor_t *copy;
  LOOM_TRY(tensor_contiguous_copy(value, &copy));
  loom_tensor_destroy(q->staged[k]);
  q->staged[k] = copy;
  loom_clear_error();
  return LOOM_OK;
}

/* The staged state into the step about to run (built for the trace's
 * parameters); a state it does not keep is dropped. */
static void staged_apply(loom_trace_t *t) {
  for (int64_t i = 0; i < t->n_params; i++) {
    tr_param_t *q = &t->params[i];
    for (int k = 0; k < TR_OPTIM_STATES; k++) {
      if (!q->staged[k]) continue;
      loom_tensor_t *into = graph_state(t->optim, q->t->data, k);
      if (into)
        memcpy(into->data, q->staged[k]->data,
               (size_t)loom_tensor_numel(into) * loom_dtype_size(into->dtype));
      loom_tensor_destroy(q->staged[k]);
      q->staged[k] = NULL;
    }
  }
}

static loom_status_t optimizer_step(loom_trace_t *t, const loom_optimizer_t *o,
                                    double lr, const char *fn) {
  LOOM_TRY(tr_claim(t, fn));
  if (t->n_params == 0)
    return loom_fail(LOOM_ERR_INVALID, "%s: no parameters were entered "
                     "(loom_trace_param)", fn);
  if (!(lr >= 0 && lr <= DBL_MAX))
    return loom_fail(LOOM_ERR_INVALID, "%s: lr %g must be finite and >= 0", fn, lr);
  /* a compile started by this step is swapped in at a later one (one
   * that ended at once, its module found in this process, would else
   * race this step) */
  if (t->comm) LOOM_TRY(dp_exchange(t, fn));
  optim_reap(t, false);
  if (!optim_fits(t, t->optim, o)) LOOM_TRY(optim_build(t, o, fn));
  else optim_swap(t);
  staged_apply(t);
  loom_status_t s = optim_run(t, lr);
  /* the parameters changed (in part, if the run failed) */
  t->tape.stale = t->tape.n;
  t->packs.stable.epoch++;
  LOOM_TRY(s);
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_trace_optimizer_step(loom_trace_t *t,
                                        const loom_optimizer_t *o, double lr) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(o);
  loom_optimizer_t full;
  LOOM_TRY(train_optimizer_read(__func__, o, &full));
  return optimizer_step(t, &full, lr, __func__);
}

loom_status_t loom_trace_adamw(loom_trace_t *t, double lr, double beta1,
                               double beta2, double eps,
                               double weight_decay) {
  LOOM_CHECK_ARG(t);
  loom_optimizer_t o = {.size = sizeof o, .kind = LOOM_OPTIMIZER_ADAMW, .beta1 = beta1, .beta2 = beta2,
                        .eps = eps, .weight_decay = weight_decay};
  return optimizer_step(t, &o, lr, __func__);
}
