/* The trace's state that every layer of the tracer reads: whose step it
 * is (the claim), the per-value, per-node and per-symbol tables, the
 * step's tensors, sizes and shape policies. The bottom layer: it calls
 * no other file of the tracer. */
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "core/status.h"
#include "trace/trace_internal.h"

/* ---- One thread at a time ----------------------------------------------------
 * A trace is a graph under construction plus a step's tensors: calls from
 * two threads would interleave their recordings and free each other's
 * values, so a step belongs to the thread that began it (its first call
 * after loom_trace_create or loom_trace_step_end, a builder recording into
 * the trace's graph included) until its loom_trace_step_end. Another
 * thread's call meanwhile is refused before it touches anything; between
 * steps, or once that thread has ended, any thread may take the trace
 * over. The claim is an atomic exchange, so one thread's step happens
 * before the next one's. */

/* An address unique to the calling thread while it lives. */
static uintptr_t this_thread(void) {
  static _Thread_local char token;
  return (uintptr_t)&token;
}

/* A thread that ends with a step open (a worker that recorded a result
 * and handed it to another thread) would keep the trace from every other
 * thread for good, until the process exits: when it ends, its claims are
 * released (a thread-specific key's destructor), and the step goes on in
 * whichever thread calls next, as a step that thread began. Only traces
 * still alive are touched: the live list and its lock. */
enum { CLAIMS_KEPT = 8 }; /* traces a thread releases when it ends */

typedef struct claims {
  loom_trace_t *trace[CLAIMS_KEPT];
} claims_t;

static _Thread_local claims_t claims;
static _Thread_local int oldest_claim; /* the slot a claim takes when all are used */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static bool exit_key_made;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_trace_t *live;

static void release_claims(void *arg) {
  claims_t *c = arg;
  uintptr_t me = this_thread();
  pthread_mutex_lock(&live_lock);
  for (int i = 0; i < CLAIMS_KEPT; i++) {
    for (loom_trace_t *t = live; c->trace[i] && t; t = t->next_live) {
      uintptr_t mine = me;
      if (t == c->trace[i])
        atomic_compare_exchange_strong_explicit(&t->user, &mine, 0, memory_order_release,
                                                memory_order_relaxed);
    }
    c->trace[i] = NULL;
  }
  pthread_mutex_unlock(&live_lock);
}

static void make_exit_key(void) { exit_key_made = pthread_key_create(&exit_key, release_claims) == 0; }

/* t just claimed by this thread: released when the thread ends. */
static void note_claim(loom_trace_t *t) {
  int free_slot = -1;
  for (int i = 0; i < CLAIMS_KEPT; i++) {
    if (claims.trace[i] == t) return;
    if (!claims.trace[i] && free_slot < 0) free_slot = i;
  }
  pthread_once(&exit_once, make_exit_key);
  if (!exit_key_made) return; /* the trace stays claimed past the thread */
  if (free_slot < 0) { /* the oldest claim gives way (most are of traces long gone) */
    free_slot = oldest_claim;
    oldest_claim = (oldest_claim + 1) % CLAIMS_KEPT;
  }
  claims.trace[free_slot] = t;
  if (!pthread_getspecific(exit_key)) pthread_setspecific(exit_key, &claims);
}

loom_status_t loom_trace_release(loom_trace_t *t) {
  if (!t) return loom_fail(LOOM_ERR_INVALID, "loom_trace_release: the trace is NULL");
  uintptr_t me = this_thread();
  for (int i = 0; i < CLAIMS_KEPT; i++)
    if (claims.trace[i] == t) claims.trace[i] = NULL;
  atomic_compare_exchange_strong_explicit(&t->user, &me, 0, memory_order_release,
                                          memory_order_relaxed);
  return LOOM_OK;
}

void tr_live_add(loom_trace_t *t) {
  pthread_mutex_lock(&live_lock);
  t->next_live = live;
  live = t;
  pthread_mutex_unlock(&live_lock);
}

void tr_live_remove(loom_trace_t *t) {
  pthread_mutex_lock(&live_lock);
  for (loom_trace_t **p = &live; *p; p = &(*p)->next_live)
    if (*p == t) {
      *p = t->next_live;
      break;
    }
  pthread_mutex_unlock(&live_lock);
}

static loom_status_t refuse(const char *fn) {
  return loom_fail(LOOM_ERR_INVALID, "%s: the trace is in use by another thread (a step "
                   "belongs to the thread that began it until its loom_trace_step_end; "
                   "threads that trace at once need a trace each, which may share a "
                   "loom_cache_t)", fn);
}

loom_status_t tr_claim(loom_trace_t *t, const char *fn) {
  uintptr_t me = this_thread(), user = 0;
  /* Only this thread stores its own token: seeing it needs no exchange. */
  if (atomic_load_explicit(&t->user, memory_order_relaxed) == me) return LOOM_OK;
  if (atomic_compare_exchange_strong_explicit(&t->user, &user, me, memory_order_acquire,
                                              memory_order_relaxed)) {
    note_claim(t);
    return LOOM_OK;
  }
  return user == me ? LOOM_OK : refuse(fn);
}

/* For a call that only reads t: takes t unless this thread has it (*taken
 * says so), so that no step begins while it reads. */
loom_status_t tr_claim_to_read(const loom_trace_t *t, const char *fn, bool *taken) {
  /* The claim word is the one field readers write: t is not const there. */
  loom_trace_t *w = (loom_trace_t *)t;
  uintptr_t me = this_thread(), user = 0;
  *taken = false;
  if (atomic_load_explicit(&w->user, memory_order_relaxed) == me) return LOOM_OK;
  *taken = atomic_compare_exchange_strong_explicit(&w->user, &user, me, memory_order_acquire,
                                                   memory_order_relaxed);
  return *taken || user == me ? LOOM_OK : refuse(fn);
}

void tr_give_back(const loom_trace_t *t, bool taken) {
  if (taken) atomic_store_explicit(&((loom_trace_t *)t)->user, 0, memory_order_release);
}

/* ---- Tables ---------------------------------------------------------------- */

/* Grows the per-value, per-node and per-symbol tables to the graph. */
loom_status_t tr_reserve_values(loom_trace_t *t) {
  loom_graph_t *g = t->g;
  if (g->n_values > t->cap_vals) {
    int64_t old = t->cap_vals;
    LOOM_TRY(core_grow((void **)&t->vals, &t->cap_vals, g->n_values,
                       sizeof *t->vals));
    memset(t->vals + old, 0, sizeof *t->vals * (size_t)(t->cap_vals - old));
  }
  if (g->n_nodes > t->cap_nodes) {
    int64_t cap = t->cap_nodes;
    LOOM_TRY(core_grow((void **)&t->node_ran, &cap, g->n_nodes,
                       sizeof *t->node_ran));
    cap = t->cap_nodes;
    LOOM_TRY(core_grow((void **)&t->node_site, &cap, g->n_nodes,
                       sizeof *t->node_site));
    LOOM_TRY(core_grow((void **)&t->node_hash, &t->cap_nodes, g->n_nodes,
                       sizeof *t->node_hash));
  }
  if (g->n_symbols > t->cap_syms) {
    int64_t old = t->cap_syms, cap = old;
    LOOM_TRY(core_grow((void **)&t->sym_values, &cap, g->n_symbols,
                       sizeof *t->sym_values));
    cap = old;
    LOOM_TRY(core_grow((void **)&t->sym_policy, &cap, g->n_symbols,
                       sizeof *t->sym_policy));
    for (int64_t i = old; i < cap; i++) {
      t->sym_values[i] = -1;
      t->sym_policy[i] = -1;
    }
    t->cap_syms = cap;
  }
  return LOOM_OK;
}

loom_tensor_t *tr_tensor(const loom_trace_t *t, int32_t v) {
  return v >= 0 && v < t->cap_vals ? t->vals[v].t : NULL;
}

loom_status_t tr_eval_type(const loom_trace_t *t, const ir_type_t *type,
                           int64_t *shape) {
  for (int d = 0; d < type->rank; d++) {
    if (ir_dim_is_const(type->dims[d])) {
      shape[d] = type->dims[d];
      continue;
    }
    LOOM_TRY(ir_dim_eval(t->g, type->dims[d], t->sym_values, &shape[d]));
    if (shape[d] < 0) {
      char buf[64];
      return loom_fail(LOOM_ERR_SHAPE, "trace: dim %s has no size in this step",
                       ir_dim_str(t->g, type->dims[d], buf, sizeof buf));
    }
  }
  return LOOM_OK;
}

const loom_dim_policy_t *tr_sym_policy(const loom_trace_t *t, int sym) {
  if (sym < 0 || sym >= t->cap_syms || t->sym_policy[sym] < 0) return NULL;
  return &t->policies[t->sym_policy[sym]].p;
}

tr_mode_t tr_sym_mode(const loom_trace_t *t, int sym, int64_t *bucket) {
  const loom_dim_policy_t *p = tr_sym_policy(t, sym);
  if (!p) return TR_EXACT;
  switch (p->kind) {
  case LOOM_DIM_SYMBOLIC: return TR_SYMBOLIC;
  case LOOM_DIM_AUTO:
    return t->policies[t->sym_policy[sym]].switched ? TR_SYMBOLIC : TR_EXACT;
  case LOOM_DIM_BUCKET:
    if (bucket) *bucket = tr_bucket_of(p, t->sym_values[sym]);
    return TR_BUCKET;
  default: return TR_EXACT;
  }
}

int64_t tr_bucket_below(const loom_dim_policy_t *p, int64_t b) {
  if (p->n_buckets == 0) return b > 1 ? b / 2 : 0;
  int64_t below = 0;
  for (int i = 0; i < p->n_buckets && p->buckets[i] < b; i++) below = p->buckets[i];
  return below;
}

int64_t tr_bucket_of(const loom_dim_policy_t *p, int64_t size) {
  if (p->n_buckets == 0) {
    int64_t b = 1;
    while (b < size) b *= 2;
    return b;
  }
  for (int i = 0; i < p->n_buckets; i++)
    if (p->buckets[i] >= size) return p->buckets[i];
  return size;
}

core_pool_t *tr_fallback_pool(loom_trace_t *t) {
  if (!t->fallback_pool_made) {
    t->fallback_pool_made = true;
    int threads = t->opt.num_threads > 0 ? t->opt.num_threads : core_default_threads();
    if (threads > 1 && core_pool_acquire(threads, &t->fallback_pool) != LOOM_OK) {
      t->fallback_pool = NULL;
      loom_clear_error();
    }
  }
  return t->fallback_pool;
}

loom_status_t tr_find_param(loom_trace_t *t, const loom_tensor_t *p, const char *fn,
                            tr_param_t **out) {
  for (int64_t i = 0; i < t->n_params; i++)
    if (t->params[i].t == p) {
      *out = &t->params[i];
      return LOOM_OK;
    }
  return loom_fail(LOOM_ERR_INVALID, "%s: the tensor is not a parameter of this trace "
                   "(enter it with loom_trace_param)", fn);
}
