/* Checkpoints of data-parallel training (include/loom/comm.h): the file
 * holds the whole state, however many ranks wrote it and however they
 * split it, so it loads on any number of ranks and in one process. A
 * graph of the same parameters, each whole, stands between the ranks'
 * graph and the file, and loom_checkpoint_save / _load do the rest. */
#include <string.h>

#include "core/comm.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"
#include "loom/checkpoint.h"

static const char *name_of(const ir_value_t *v) { return v->name ? v->name : ""; }

/* Shard sh (its storage t) gathered from every rank into a new parameter
 * of w, of the whole's type. */
static loom_status_t gathered(loom_comm_t *comm, const ir_shard_t *sh, const char *name,
                              loom_tensor_t *t, loom_graph_t *w) {
  loom_tensor_t *all = NULL, whole;
  int64_t count = loom_tensor_numel(t);
  LOOM_TRY(loom_tensor_create(t->dtype, 1, (int64_t[]){count * sh->ranks}, &all));
  core_comm_op_t op = {.kind = COMM_ALL_GATHER, .dtype = t->dtype, .count = count,
                       .send = t->data, .recv = all->data, .what = "checkpoint all_gather"};
  loom_status_t s = core_comm_run(comm, &op);
  loom_value_t v;
  tensor_view_init(&whole, sh->whole.dtype, sh->whole.rank, sh->whole.dims, all->data);
  if (s == LOOM_OK)
    s = loom_graph_param(w, name, sh->whole.dtype, sh->whole.rank, sh->whole.dims, &whole, &v);
  loom_tensor_destroy(all);
  return s;
}

/* w: g's parameters in g's order (so that unnamed ones keep their
 * generated names), a shard as its whole gathered from every rank, the
 * others borrowing g's storage. */
static loom_status_t gather_whole(loom_comm_t *comm, loom_graph_t *g, loom_graph_t *w) {
  for (int64_t i = 0; i < g->n_params; i++) {
    const ir_value_t *p = &g->values[g->params[i]];
    const ir_shard_t *sh = ir_shard_of(g, g->params[i]);
    loom_value_t v;
    if (sh) LOOM_TRY(gathered(comm, sh, name_of(p), p->data, w));
    else LOOM_TRY(loom_graph_param_borrow(w, name_of(p), p->data, &v));
  }
  return LOOM_OK;
}

/* w: g's parameters in g's order, zero, each of its whole type. */
static loom_status_t empty_whole(loom_graph_t *g, loom_graph_t *w) {
  for (int64_t i = 0; i < g->n_params; i++) {
    const ir_value_t *p = &g->values[g->params[i]];
    const ir_shard_t *sh = ir_shard_of(g, g->params[i]);
    const ir_type_t *t = sh ? &sh->whole : &p->type;
    loom_value_t v;
    LOOM_TRY(loom_graph_param(w, name_of(p), t->dtype, t->rank, t->dims, NULL, &v));
  }
  return LOOM_OK;
}

/* g's parameters from w's: a shard takes its rank's part of the whole
 * (zero past the whole's end), the others all of it. */
static void take_parts(loom_graph_t *g, loom_graph_t *w) {
  for (int64_t i = 0; i < g->n_params; i++) {
    loom_tensor_t *dst = g->values[g->params[i]].data, *src = w->values[w->params[i]].data;
    const ir_shard_t *sh = ir_shard_of(g, g->params[i]);
    size_t es = loom_dtype_size(dst->dtype);
    int64_t n = loom_tensor_numel(dst), from = sh ? sh->rank * n : 0;
    int64_t have = loom_tensor_numel(src) - from;
    have = have < 0 ? 0 : have > n ? n : have;
    if (have) memcpy(dst->data, (char *)src->data + from * es, (size_t)have * es);
    if (have < n) memset((char *)dst->data + have * es, 0, (size_t)(n - have) * es);
  }
}

/* Every rank learns whether a rank failed (s): the failing rank keeps
 * its own error, the others fail naming it with its status. */
static loom_status_t agree(loom_comm_t *comm, loom_status_t s, const char *fn,
                           const char *path, const char *doing) {
  int64_t failed = s == LOOM_OK ? 0 : loom_comm_rank(comm) + 1, code = s;
  loom_tensor_t t;
  tensor_view_init(&t, LOOM_I64, 0, NULL, &failed);
  LOOM_TRY(loom_comm_all_reduce_tensor(comm, &t, LOOM_COMM_MAX));
  if (!failed) return LOOM_OK;
  tensor_view_init(&t, LOOM_I64, 0, NULL, &code);
  LOOM_TRY(loom_comm_broadcast_tensor(comm, &t, (int)failed - 1));
  if (s != LOOM_OK) return s;
  return loom_fail((loom_status_t)code, "%s: rank %d failed %s %s (%s; its own message "
                   "says why)", fn, (int)failed - 1, doing, path,
                   loom_status_name((loom_status_t)code));
}

loom_status_t loom_comm_checkpoint_save(loom_comm_t *comm, loom_graph_t *g, const char *path) {
  LOOM_CHECK_ARG(comm);
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(path);
  loom_graph_t *w = NULL;
  loom_status_t s = loom_graph_create(&w);
  if (s == LOOM_OK) s = gather_whole(comm, g, w);
  if (s == LOOM_OK && loom_comm_rank(comm) == 0) s = loom_checkpoint_save(w, path);
  loom_graph_destroy(w);
  return agree(comm, s, __func__, path, "to write");
}

loom_status_t loom_comm_checkpoint_load(loom_comm_t *comm, loom_graph_t *g, const char *path) {
  LOOM_CHECK_ARG(comm);
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(path);
  loom_graph_t *w = NULL;
  loom_status_t s = loom_graph_create(&w);
  if (s == LOOM_OK) s = empty_whole(g, w);
  if (s == LOOM_OK) s = loom_checkpoint_load(w, path);
  s = agree(comm, s, __func__, path, "to read");
  if (s == LOOM_OK) take_parts(g, w);
  loom_graph_destroy(w);
  return s;
}
