/* Weight gradients deferred to the end of the backward walk. A cell that
 * a trace runs once per time step multiplies a weight by a few rows (an
 * LSTM's batch of 16): its weight gradient, A^T B over those rows, is a
 * product with K = 16 (below the GEMM's large-K speed: 81 against 96
 * GFLOP/s on a Zen 5), and summing it into the accumulator is another
 * pass over the whole weight, once per time step. So a training
 * segment's backward graph returns the product's two operands instead of
 * the product (seg_defer_graph), the walk stacks them per value
 * (grad_defer_reserve, grad_defer_push), and one product over all the
 * rows they gathered, K = 16 T, is taken when the gradient is needed,
 * the rows reach GRAD_DEFER_ROWS, or the walk ends (grad_defer_take), as
 * a whole-sequence RNN layer computes its weight gradients; with two
 * threads or more, on a thread of its own while the walk goes on.
 *
 * Which gradients are deferred is decided at the cut (segment_key.c: a
 * weight used once, by x @ W or x @ W^T with few rows of x) and is part
 * of the key and the description, so that every graph built for a key,
 * on any thread, and the walk that runs it agree on the outputs. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/pool.h"
#include "core/status.h"
#include "core/tensor.h"
#include "loom/ops.h"
#include "passes/passes.h"
#include "runtime/interp.h"
#include "trace/trace_internal.h"

/* Rows gathered before a product is taken: enough that the GEMM runs at
 * its large-K speed, bounding what is held at GRAD_DEFER_ROWS * (M + N)
 * elements a value. */
#define GRAD_DEFER_ROWS 512

/* ---- Which gradients, and the graphs that defer them ------------------- */

/* How many times value v is read in g (operands and outputs). */
static int value_reads(const loom_graph_t *g, int32_t v) {
  int n = 0;
  for (int64_t k = 0; k < g->n_nodes; k++)
    for (int i = 0; i < g->nodes[k].n_in; i++) n += g->nodes[k].in[i] == v;
  for (int64_t k = 0; k < g->n_outputs; k++) n += g->outputs[k] == v;
  return n;
}

/* A zero (1, size) matrix of g's, for a gradient that is zero (no
 * gradient reaches the product). */
static loom_status_t zero_row(loom_graph_t *g, loom_dtype_t dtype, ir_dim_t size,
                              int32_t *out) {
  ir_attrs_t a = {0};
  ir_dim_t shape[2] = {1, size};
  ir_attrs_ints(&a, "shape", 2, shape);
  ir_attrs_float(&a, "value", 0.0);
  ir_attrs_int(&a, "dtype", dtype);
  return ir_add_node(g, IR_OP_FULL, 0, NULL, &a, out, 1);
}

/* Output i of g, the product A^T B, becomes A, and B is appended. */
static loom_status_t defer_output(loom_graph_t *g, int i, int32_t *extra) {
  int32_t v = g->outputs[i];
  const ir_value_t *x = &g->values[v];
  const ir_node_t *n = x->kind == IR_VALUE_NODE ? &g->nodes[x->node] : NULL;
  if (n && n->op == IR_OP_FULL && ir_attr_float(n->attrs, "value", 1.0) == 0.0) {
    ir_type_t ty = x->type;
    LOOM_TRY(zero_row(g, ty.dtype, ty.dims[0], &g->outputs[i]));
    return zero_row(g, ty.dtype, ty.dims[1], extra);
  }
  if (!n || n->op != IR_OP_MATMUL || ir_attr_int(n->attrs, "trans_a", 0) != 1 ||
      ir_attr_int(n->attrs, "trans_b", 0) != 0 || value_reads(g, v) != 1 ||
      g->values[n->in[0]].type.rank != 2 || g->values[n->in[1]].type.rank != 2)
    return loom_fail(LOOM_ERR_GRAPH, "internal: trace backward: the gradient of "
                     "output %d is not the product its description defers", i);
  g->outputs[i] = n->in[0];
  *extra = n->in[1];
  return LOOM_OK;
}

loom_status_t seg_defer_graph(const seg_desc_t *d, loom_graph_t **g) {
  uint64_t mask = d->part ? d->defer : 0;
  if (!mask) return LOOM_OK;
  if ((*g)->n_outputs != d->n_wrt)
    return loom_fail(LOOM_ERR_GRAPH, "internal: trace backward: %lld outputs, %d "
                     "expected", (long long)(*g)->n_outputs, d->n_wrt);
  int32_t extra[64];
  int n = 0;
  for (int i = 0; i < d->n_wrt; i++)
    if (seg_deferred(mask, i)) LOOM_TRY(defer_output(*g, i, &extra[n++]));
  for (int k = 0; k < n; k++) LOOM_TRY(loom_graph_output(*g, (loom_value_t){extra[k]}));
  loom_graph_t *out = NULL;
  LOOM_TRY(pass_dce(*g, &out)); /* the products */
  loom_graph_destroy(*g);
  *g = out;
  return LOOM_OK;
}

/* ---- The walk's pending operands ---------------------------------------
 * Per value, its parts' operands stacked by rows, a (rows, m) and b
 * (rows, n): the compiled backward writes its parts there (a run's
 * outputs are views of the next rows), the interpreter's are copied. */

static bool in_use(const tr_deferred_t *p) { return p->rows > 0 || p->reserved > 0; }

static tr_deferred_t *find(loom_trace_t *t, int32_t v) {
  for (int i = 0; i < t->tape.n_defer; i++)
    if (t->tape.defer[i].v == v && in_use(&t->tape.defer[i])) return &t->tape.defer[i];
  return NULL;
}

static bool handed_over(tr_defer_worker_t *w, int32_t v);
static void take_spare(tr_defer_worker_t *w, tr_deferred_t *p);

bool grad_defer_pending(loom_trace_t *t, int32_t v) {
  tr_deferred_t *p = find(t, v);
  return (p && p->rows > 0) || handed_over(t->tape.worker, v);
}

/* Grows stack *x (*cap bytes, used bytes kept) to hold need bytes. */
static loom_status_t grow(void **x, size_t *cap, size_t used, size_t need) {
  if (need <= *cap) return LOOM_OK;
  size_t c = need > 2 * *cap ? need : 2 * *cap;
  void *y = core_malloc(c);
  if (!y) return loom_fail(LOOM_ERR_NOMEM, "out of memory for deferred gradients");
  if (used) memcpy(y, *x, used);
  core_free(*x);
  *x = y;
  *cap = c;
  return LOOM_OK;
}

/* v's stacks (new ones: another value's emptied, or made), of dtype with
 * m and n columns, with room for k more rows. */
static loom_status_t stacks_for(loom_trace_t *t, int32_t v, loom_dtype_t dtype, int64_t k,
                                int64_t m, int64_t n, tr_deferred_t **out) {
  tr_deferred_t *p = find(t, v);
  for (int i = 0; !p && i < t->tape.n_defer; i++)
    if (!in_use(&t->tape.defer[i])) p = &t->tape.defer[i];
  if (!p) {
    LOOM_TRY(core_grow((void **)&t->tape.defer, &t->tape.cap_defer, t->tape.n_defer + 1,
                       sizeof *t->tape.defer));
    p = &t->tape.defer[t->tape.n_defer++];
    *p = (tr_deferred_t){0};
  }
  if (!in_use(p)) {
    take_spare(t->tape.worker, p);
    p->v = v;
    p->dtype = dtype;
    p->m = m;
    p->n = n;
  } else if (p->dtype != dtype || p->m != m || p->n != n) {
    return loom_fail(LOOM_ERR_SHAPE, "internal: trace backward: the deferred parts of "
                     "%%%d change shape", v);
  }
  if (p->reserved)
    return loom_fail(LOOM_ERR_INVALID, "internal: trace backward: rows of %%%d reserved "
                     "twice", v);
  size_t es = loom_dtype_size(dtype);
  LOOM_TRY(grow(&p->a, &p->cap_a, (size_t)(p->rows * m) * es, (size_t)((p->rows + k) * m) * es));
  LOOM_TRY(grow(&p->b, &p->cap_b, (size_t)(p->rows * n) * es, (size_t)((p->rows + k) * n) * es));
  *out = p;
  return LOOM_OK;
}

/* Views of rows [from, from + k) of p's stacks. */
static loom_status_t views(const tr_deferred_t *p, int64_t from, int64_t k,
                           loom_tensor_t **a, loom_tensor_t **b) {
  size_t es = loom_dtype_size(p->dtype);
  *a = *b = NULL;
  LOOM_TRY(loom_tensor_wrap(p->dtype, 2, (int64_t[]){k, p->m}, NULL,
                            (char *)p->a + (size_t)(from * p->m) * es, a));
  return loom_tensor_wrap(p->dtype, 2, (int64_t[]){k, p->n}, NULL,
                          (char *)p->b + (size_t)(from * p->n) * es, b);
}

loom_status_t grad_defer_reserve(loom_trace_t *t, int32_t v, loom_dtype_t dtype, int64_t k,
                                 int64_t m, int64_t n, loom_tensor_t **a, loom_tensor_t **b) {
  tr_deferred_t *p = NULL;
  *a = *b = NULL;
  LOOM_TRY(stacks_for(t, v, dtype, k, m, n, &p));
  loom_status_t s = views(p, p->rows, k, a, b);
  if (s != LOOM_OK) {
    loom_tensor_destroy(*a);
    *a = NULL;
    return s;
  }
  p->reserved = k;
  return LOOM_OK;
}

loom_status_t grad_defer_commit(loom_trace_t *t, int32_t v, bool commit, bool *due) {
  tr_deferred_t *p = find(t, v);
  *due = false;
  if (!p || !p->reserved)
    return loom_fail(LOOM_ERR_INVALID, "internal: trace backward: %%%d has no rows "
                     "reserved", v);
  if (commit) {
    p->rows += p->reserved;
    t->stats.deferred_grads++;
    *due = p->rows >= GRAD_DEFER_ROWS;
  }
  p->reserved = 0;
  if (!in_use(p)) p->v = -1;
  return LOOM_OK;
}

/* x's elements, in row-major order, into dst (x contiguous or a view). */
static loom_status_t copy_rows(const loom_tensor_t *x, void *dst) {
  size_t bytes = (size_t)loom_tensor_numel(x) * loom_dtype_size(x->dtype);
  if (tensor_is_contiguous(x)) {
    memcpy(dst, x->data, bytes);
    return LOOM_OK;
  }
  loom_tensor_t *c = NULL;
  LOOM_TRY(tensor_contiguous_copy(x, &c));
  memcpy(dst, c->data, bytes);
  loom_tensor_destroy(c);
  return LOOM_OK;
}

loom_status_t grad_defer_push(loom_trace_t *t, int32_t v, loom_tensor_t *a, loom_tensor_t *b,
                              bool *due) {
  loom_tensor_t *va = NULL, *vb = NULL;
  loom_status_t s = a->rank == 2 && b->rank == 2 && a->shape[0] == b->shape[0] &&
                    a->dtype == b->dtype
                        ? LOOM_OK
                        : loom_fail(LOOM_ERR_SHAPE, "internal: trace backward: deferred "
                                    "operands of %%%d do not match", v);
  if (s == LOOM_OK)
    s = grad_defer_reserve(t, v, a->dtype, a->shape[0], a->shape[1], b->shape[1], &va, &vb);
  if (s == LOOM_OK) s = copy_rows(a, va->data);
  if (s == LOOM_OK) s = copy_rows(b, vb->data);
  if (va) { /* reserved: counted in, or given back */
    bool ok = s == LOOM_OK;
    loom_status_t c = grad_defer_commit(t, v, ok, due);
    if (s == LOOM_OK) s = c;
  }
  loom_tensor_destroy(va);
  loom_tensor_destroy(vb);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  return s;
}

/* a^T b on the back end's eager GEMM (pool: threads to lend it, or
 * NULL). */
static loom_status_t product(core_pool_t *pool, loom_tensor_t *a, loom_tensor_t *b,
                             loom_tensor_t **out) {
  loom_graph_t *g = NULL;
  loom_value_t in[2], y;
  LOOM_TRY(loom_graph_create(&g));
  loom_status_t s = ir_graph_input(g, "a", a->dtype, 2, a->shape, &in[0]);
  if (s == LOOM_OK) s = ir_graph_input(g, "b", b->dtype, 2, b->shape, &in[1]);
  if (s == LOOM_OK) s = loom_matmul(g, in[0], in[1], 1, 0, &y);
  if (s == LOOM_OK) s = loom_graph_output(g, y);
  if (s == LOOM_OK) s = ir_verify(g);
  loom_tensor_t *ins[2] = {a, b};
  *out = NULL;
  if (s == LOOM_OK) s = rt_interpret(g, 2, ins, 1, out, be_find(NULL), pool);
  loom_graph_destroy(g);
  return s;
}

/* The product of all of p's rows. */
static loom_status_t stacked_product(core_pool_t *pool, const tr_deferred_t *p,
                                     loom_tensor_t **out) {
  loom_tensor_t *a = NULL, *b = NULL;
  loom_status_t s = views(p, 0, p->rows, &a, &b);
  if (s == LOOM_OK) s = product(pool, a, b, out);
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  return s;
}

/* Empties p; stacks grown past what GRAD_DEFER_ROWS rows need (for one
 * part of many rows) are not kept for the next value. */
static void empty(tr_deferred_t *p) {
  size_t keep = (size_t)(2 * GRAD_DEFER_ROWS * (p->m + p->n)) * loom_dtype_size(p->dtype);
  if (p->cap_a + p->cap_b > keep) {
    core_free(p->a);
    core_free(p->b);
    p->a = p->b = NULL;
    p->cap_a = p->cap_b = 0;
  }
  p->rows = p->reserved = 0;
  p->v = -1;
}

/* ---- Products on a thread of their own ----------------------------------
 * With two threads or more, a value's rows that reach GRAD_DEFER_ROWS are
 * handed to a thread that takes their product while the walk goes on
 * (the products of an LSTM's weights beside the time steps' backward
 * segments), and the walk sums the results in the order they were handed
 * over, so the gradients do not depend on timing. */

enum { SPARES = 4 }; /* stacks kept for reuse, so that new ones fault no pages in */

typedef struct defer_job {
  struct defer_job *next;
  tr_deferred_t rows; /* the stacks handed over, the job's until done */
  loom_tensor_t *out;
  loom_status_t status;
  char error[256];
  bool started, done;
} defer_job_t;

struct tr_defer_worker {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  defer_job_t *head, *tail; /* in the order handed over */
  tr_deferred_t spares[SPARES]; /* stacks the jobs are done with (cap 0: none) */
  bool stop;
};

static void *worker_main(void *arg) {
  tr_defer_worker_t *w = arg;
  pthread_mutex_lock(&w->lock);
  for (;;) {
    defer_job_t *j = w->head;
    while (j && j->started) j = j->next;
    if (!j) {
      if (w->stop) break;
      pthread_cond_wait(&w->wake, &w->lock);
      continue;
    }
    j->started = true;
    pthread_mutex_unlock(&w->lock);
    loom_tensor_t *out = NULL;
    loom_status_t s = stacked_product(NULL, &j->rows, &out);
    if (s != LOOM_OK) snprintf(j->error, sizeof j->error, "%s", loom_last_error());
    pthread_mutex_lock(&w->lock);
    j->out = out;
    j->status = s;
    j->done = true;
    int k = 0; /* the stacks go to the spares (or are freed) */
    while (k < SPARES && w->spares[k].cap_a + w->spares[k].cap_b > 0) k++;
    if (k < SPARES) {
      w->spares[k] = j->rows;
    } else {
      core_free(j->rows.a);
      core_free(j->rows.b);
    }
    j->rows.a = j->rows.b = NULL;
    pthread_cond_broadcast(&w->done);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

/* The trace's worker, started at the first call with two threads or more
 * (NULL: one thread, or it could not start). */
static tr_defer_worker_t *worker(loom_trace_t *t) {
  if (t->tape.worker || t->tape.worker_failed) return t->tape.worker;
  int threads = t->opt.num_threads > 0 ? t->opt.num_threads : core_default_threads();
  t->tape.worker_failed = true;
  if (threads < 2) return NULL;
  tr_defer_worker_t *w = core_calloc(1, sizeof *w);
  if (!w) return NULL;
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->wake, NULL);
  pthread_cond_init(&w->done, NULL);
  if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    core_free(w);
    return NULL;
  }
  t->tape.worker_failed = false;
  t->tape.worker = w;
  return w;
}

/* Gives p, emptied for another value, a spare's stacks if it has none. */
static void take_spare(tr_defer_worker_t *w, tr_deferred_t *p) {
  if (!w || p->cap_a + p->cap_b > 0) return;
  pthread_mutex_lock(&w->lock);
  for (int k = 0; k < SPARES; k++)
    if (w->spares[k].cap_a + w->spares[k].cap_b > 0) {
      p->a = w->spares[k].a, p->cap_a = w->spares[k].cap_a;
      p->b = w->spares[k].b, p->cap_b = w->spares[k].cap_b;
      w->spares[k] = (tr_deferred_t){0};
      break;
    }
  pthread_mutex_unlock(&w->lock);
}

bool grad_defer_submit(loom_trace_t *t, int32_t v) {
  tr_deferred_t *p = find(t, v);
  tr_defer_worker_t *w = p && p->rows && !p->reserved ? worker(t) : NULL;
  defer_job_t *j = w ? core_calloc(1, sizeof *j) : NULL;
  if (!j) {
    loom_clear_error();
    return false;
  }
  j->rows = *p;
  p->a = p->b = NULL;
  p->cap_a = p->cap_b = 0;
  empty(p);
  take_spare(w, p);
  pthread_mutex_lock(&w->lock);
  if (w->tail) w->tail->next = j;
  else w->head = j;
  w->tail = j;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->lock);
  return true;
}

/* Whether w holds a job of v's. */
static bool handed_over(tr_defer_worker_t *w, int32_t v) {
  if (!w) return false;
  pthread_mutex_lock(&w->lock);
  defer_job_t *j = w->head;
  while (j && j->rows.v != v) j = j->next;
  pthread_mutex_unlock(&w->lock);
  return j != NULL;
}

/* Unlinks and returns v's first job, waited for (NULL: none). */
static defer_job_t *finished_job(tr_defer_worker_t *w, int32_t v) {
  if (!w) return NULL;
  pthread_mutex_lock(&w->lock);
  defer_job_t *prev = NULL, *j = w->head;
  while (j && j->rows.v != v) prev = j, j = j->next;
  while (j && !j->done) pthread_cond_wait(&w->done, &w->lock);
  if (j) {
    if (prev) prev->next = j->next;
    else w->head = j->next;
    if (w->tail == j) w->tail = prev;
  }
  pthread_mutex_unlock(&w->lock);
  return j;
}

loom_status_t grad_defer_take(loom_trace_t *t, int32_t v, loom_tensor_t **out) {
  *out = NULL;
  defer_job_t *j = finished_job(t->tape.worker, v);
  if (j) {
    loom_status_t s = j->status;
    *out = j->out;
    if (s != LOOM_OK) loom_fail(s, "%s", j->error);
    else t->stats.deferred_products++;
    core_free(j);
    return s;
  }
  tr_deferred_t *p = find(t, v);
  if (!p) return LOOM_OK;
  loom_status_t s = stacked_product(tr_fallback_pool(t), p, out);
  empty(p);
  t->stats.deferred_products += s == LOOM_OK;
  return s;
}

void grad_defer_clear(loom_trace_t *t) {
  for (int i = 0; i < t->tape.n_defer; i++) empty(&t->tape.defer[i]);
  tr_defer_worker_t *w = t->tape.worker;
  if (!w) return;
  pthread_mutex_lock(&w->lock);
  for (defer_job_t *j = w->head; j; j = j->next)
    while (!j->done) pthread_cond_wait(&w->done, &w->lock);
  defer_job_t *j = w->head;
  w->head = w->tail = NULL;
  pthread_mutex_unlock(&w->lock);
  while (j) {
    defer_job_t *next = j->next;
    loom_tensor_destroy(j->out);
    core_free(j);
    j = next;
  }
}

void grad_defer_free(loom_trace_t *t) {
  grad_defer_clear(t);
  for (int i = 0; i < t->tape.n_defer; i++) {
    core_free(t->tape.defer[i].a);
    core_free(t->tape.defer[i].b);
  }
  core_free(t->tape.defer);
  t->tape.defer = NULL;
  t->tape.n_defer = 0;
  t->tape.cap_defer = 0;
  tr_defer_worker_t *w = t->tape.worker;
  if (!w) return;
  pthread_mutex_lock(&w->lock);
  w->stop = true;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->lock);
  pthread_join(w->thread, NULL);
  for (int k = 0; k < SPARES; k++) {
    core_free(w->spares[k].a);
    core_free(w->spares[k].b);
  }
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->wake);
  pthread_cond_destroy(&w->done);
  core_free(w);
  t->tape.worker = NULL;
  t->tape.worker_failed = false;
}
