/* Data parallelism: gradients averaged across ranks in buckets, and the
 * host-side collectives that start every rank from the same state
 * (include/loom/comm.h). */
#include <string.h>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/dtype.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"
#include "train/data_parallel.h"

#define DEFAULT_BUCKET_BYTES (25ll << 20)

loom_status_t loom_data_parallel_options_init_sized(loom_data_parallel_options_t *o,
                                                    size_t size) {
  LOOM_CHECK_ARG(o);
  loom_data_parallel_options_t full = {.size = sizeof full,
                                       .bucket_bytes = DEFAULT_BUCKET_BYTES};
  return core_sized_init(__func__, "loom_data_parallel_options_t", o, size, &full,
                         sizeof full);
}

/* ---- Buckets ------------------------------------------------------------------ */

loom_status_t dp_read_grad(loom_graph_t *g, const char *fn, int i, loom_value_t v,
                           dp_grad_t *info) {
  LOOM_TRY(loom_value_type(g, v, &info->dtype, &info->rank, info->dims));
  if (!dtype_is_float(info->dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s: grads[%d] is %s; gradients are float", fn, i,
                     loom_dtype_name(info->dtype));
  /* the collectives' kernels sum f32 and f64 (DT_COMM) */
  if (info->dtype != LOOM_F32 && info->dtype != LOOM_F64)
    return loom_fail(LOOM_ERR_DTYPE, "%s: grads[%d] is %s; data parallelism averages f32 and "
                     "f64 gradients (keep a %s parameter's master copy in f32)", fn, i,
                     loom_dtype_name(info->dtype), loom_dtype_name(info->dtype));
  info->numel = 1;
  for (int d = 0; d < info->rank; d++) {
    if (info->dims[d] < 0)
      return loom_fail(LOOM_ERR_SHAPE, "%s: grads[%d] has a symbolic dim %d; a parameter's "
                       "gradient has constant dims", fn, i, d);
    info->numel *= info->dims[d];
  }
  return LOOM_OK;
}

/* Backward makes the last parameters' gradients first: buckets fill in
 * that order, each of one dtype, closing past bucket_bytes. */
int dp_buckets(int n, const dp_grad_t *info, int64_t bucket_bytes, int *members,
               dp_bucket_t *buckets) {
  int n_buckets = 0, count = 0;
  int64_t bytes = 0;
  buckets[0] = (dp_bucket_t){0};
  for (int i = n - 1; i >= 0; i--) {
    int64_t b = info[i].numel * (int64_t)loom_dtype_size(info[i].dtype);
    dp_bucket_t *open = &buckets[n_buckets];
    bool other_dtype = open->n > 0 && info[members[open->first]].dtype != info[i].dtype;
    if (open->n > 0 && (other_dtype || bytes + b > bucket_bytes)) {
      buckets[++n_buckets] = (dp_bucket_t){.first = count};
      open = &buckets[n_buckets];
      bytes = 0;
    }
    members[count++] = i;
    open->n++;
    bytes += b;
  }
  return n > 0 ? n_buckets + 1 : 0;
}

loom_status_t dp_read_options(const char *fn, const loom_data_parallel_options_t *o,
                              loom_data_parallel_options_t *opts) {
  LOOM_TRY(loom_data_parallel_options_init(opts));
  if (o) LOOM_TRY(core_sized_read(fn, "loom_data_parallel_options_t", opts, o, sizeof *opts));
  if (opts->bucket_bytes < 1)
    return loom_fail(LOOM_ERR_INVALID, "%s: bucket_bytes = %lld is not positive", fn,
                     (long long)opts->bucket_bytes);
  return LOOM_OK;
}

/* The bucket's gradients flattened into one value and its all_reduce
 * started (one gradient: started as it is). */
static loom_status_t start_bucket(loom_graph_t *g, loom_comm_t *comm, const int *members,
                                  const loom_value_t *grads, const dp_grad_t *info,
                                  dp_bucket_t *b) {
  loom_value_t flat[b->n], sum = grads[members[0]];
  if (b->n > 1) {
    for (int k = 0; k < b->n; k++) {
      int i = members[k];
      LOOM_TRY(loom_reshape(g, grads[i], 1, (loom_dim_t[]){info[i].numel}, &flat[k]));
    }
    LOOM_TRY(loom_concat(g, b->n, flat, 0, &sum));
  }
  return loom_all_reduce_start(g, comm, sum, LOOM_COMM_SUM, &b->started);
}

/* The sum over ranks of one gradient, over the number of ranks: an
 * elementwise op that fuses into the optimizer's update, where a mean in
 * the collective would be a pass of its own over the bucket. */
static loom_status_t mean_of(loom_graph_t *g, loom_comm_t *comm, loom_dtype_t dt,
                             loom_value_t sum, loom_value_t *out) {
  loom_value_t scale;
  LOOM_TRY(loom_full(g, 0, NULL, 1.0 / loom_comm_size(comm), dt, &scale));
  return loom_mul(g, sum, scale, out);
}

/* Waits for the bucket and gives each member its part. */
static loom_status_t finish_bucket(loom_graph_t *g, loom_comm_t *comm, const int *members,
                                   const dp_grad_t *info, const dp_bucket_t *b,
                                   loom_value_t *reduced) {
  loom_value_t sum;
  LOOM_TRY(loom_all_reduce_wait(g, comm, b->started, &sum));
  if (b->n == 1) return mean_of(g, comm, info[members[0]].dtype, sum, &reduced[members[0]]);
  int64_t at = 0;
  for (int k = 0; k < b->n; k++) {
    int i = members[k];
    int64_t start = at, end = at + info[i].numel, axis = 0, step = 1;
    loom_value_t part;
    LOOM_TRY(loom_slice(g, sum, 1, &start, &end, &axis, &step, &part));
    LOOM_TRY(loom_reshape(g, part, info[i].rank, info[i].dims, &part));
    LOOM_TRY(mean_of(g, comm, info[i].dtype, part, &reduced[i]));
    at = end;
  }
  return LOOM_OK;
}

/* Every start comes before every wait in the graph: collectives keep
 * their graph order across ranks, and a wait between two starts would
 * hold the second back. */
static loom_status_t reduce_buckets(loom_graph_t *g, loom_comm_t *comm, int n,
                                    const loom_value_t *grads, const dp_grad_t *info,
                                    int64_t bucket_bytes, int *members, dp_bucket_t *buckets,
                                    loom_value_t *reduced) {
  int n_buckets = dp_buckets(n, info, bucket_bytes, members, buckets);
  for (int k = 0; k < n_buckets; k++)
    LOOM_TRY(start_bucket(g, comm, members + buckets[k].first, grads, info, &buckets[k]));
  for (int k = 0; k < n_buckets; k++)
    LOOM_TRY(finish_bucket(g, comm, members + buckets[k].first, info, &buckets[k], reduced));
  return LOOM_OK;
}

loom_status_t loom_data_parallel_grads(loom_graph_t *g, loom_comm_t *comm, int n,
                                       const loom_value_t *grads,
                                       const loom_data_parallel_options_t *o,
                                       loom_value_t *reduced) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(comm);
  if (n < 0 || (n > 0 && (!grads || !reduced)))
    return loom_fail(LOOM_ERR_INVALID, "%s: n = %d with grads %s and reduced %s", __func__, n,
                     grads ? "set" : "null", reduced ? "set" : "null");
  loom_data_parallel_options_t opts;
  LOOM_TRY(dp_read_options(__func__, o, &opts));
  if (n == 0) return LOOM_OK;
  dp_grad_t *info = core_calloc((size_t)n, sizeof *info);
  int *members = core_malloc((size_t)n * sizeof *members);
  dp_bucket_t *buckets = core_calloc((size_t)n, sizeof *buckets);
  loom_value_t *in = core_malloc((size_t)n * sizeof *in); /* reduced may alias grads */
  loom_status_t s = info && members && buckets && in
                        ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", __func__);
  for (int i = 0; i < n && s == LOOM_OK; i++) {
    in[i] = grads[i];
    s = dp_read_grad(g, __func__, i, grads[i], &info[i]);
  }
  if (s == LOOM_OK)
    s = reduce_buckets(g, comm, n, in, info, opts.bucket_bytes, members, buckets, reduced);
  core_free(info);
  core_free(members);
  core_free(buckets);
  core_free(in);
  return s;
}

/* ---- Host side ---------------------------------------------------------------- */

static loom_status_t run_on_tensor(loom_comm_t *comm, loom_tensor_t *t, core_comm_kind_t kind,
                                   loom_comm_reduce_t reduce, int root, const char *what) {
  if (!comm || !t)
    return loom_fail(LOOM_ERR_INVALID, "%s: the %s is null", what, comm ? "tensor" : "communicator");
  if (!tensor_is_contiguous(t))
    return loom_fail(LOOM_ERR_INVALID, "%s: the tensor is not contiguous", what);
  core_comm_op_t op = {.kind = kind, .reduce = reduce, .root = root, .dtype = t->dtype,
                       .count = loom_tensor_numel(t), .send = t->data, .recv = t->data,
                       .what = what};
  return core_comm_run(comm, &op);
}

/* Every rank learns whether any rank's t differs in dtype or element
 * count (from root's, for a broadcast; root < 0: from any other's),
 * before bytes move that would not fit the receiver's tensor. */
static loom_status_t agree_on_size(loom_comm_t *comm, loom_tensor_t *t, int root,
                                   const char *what) {
  if (!comm || !t) return LOOM_OK; /* run_on_tensor names it */
  int64_t mine[2] = {t->dtype, loom_tensor_numel(t)};
  int64_t seen[4] = {mine[0], mine[1], -mine[0], -mine[1]}, n = root >= 0 ? 2 : 4;
  loom_tensor_t v;
  tensor_view_init(&v, LOOM_I64, 1, &n, seen);
  LOOM_TRY(run_on_tensor(comm, &v, root >= 0 ? COMM_BROADCAST : COMM_ALL_REDUCE, LOOM_COMM_MAX,
                         root >= 0 ? root : 0, what));
  int64_t differs = seen[0] != mine[0] || seen[1] != mine[1], one = 1;
  if (root < 0) differs |= seen[2] != -mine[0] || seen[3] != -mine[1];
  int64_t flag = differs;
  tensor_view_init(&v, LOOM_I64, 1, &one, &flag);
  LOOM_TRY(run_on_tensor(comm, &v, COMM_ALL_REDUCE, LOOM_COMM_MAX, 0, what));
  if (!flag) return LOOM_OK;
  if (!differs)
    return loom_fail(LOOM_ERR_INVALID, "%s: another rank's tensor differs in dtype or size "
                     "from %s (rank %d's: %s, %lld elements)", what,
                     root >= 0 ? "the root's" : "the others'", loom_comm_rank(comm),
                     loom_dtype_name(t->dtype), (long long)mine[1]);
  return loom_fail(LOOM_ERR_INVALID, "%s: rank %d's tensor (%s, %lld elements) differs from "
                   "%s (every rank's must have one dtype and size)", what, loom_comm_rank(comm),
                   loom_dtype_name(t->dtype), (long long)mine[1],
                   root >= 0 ? "the root's" : "another rank's");
}

loom_status_t loom_comm_broadcast_tensor(loom_comm_t *comm, loom_tensor_t *t, int root) {
  LOOM_TRY(agree_on_size(comm, t, root, __func__));
  return run_on_tensor(comm, t, COMM_BROADCAST, LOOM_COMM_SUM, root, __func__);
}

loom_status_t loom_comm_all_reduce_tensor(loom_comm_t *comm, loom_tensor_t *t,
                                          loom_comm_reduce_t op) {
  LOOM_TRY(agree_on_size(comm, t, -1, __func__));
  return dp_all_reduce_agreed(comm, t, op);
}

loom_status_t dp_all_reduce_agreed(loom_comm_t *comm, loom_tensor_t *t, loom_comm_reduce_t op) {
  if ((unsigned)op > LOOM_COMM_MAX)
    return loom_fail(LOOM_ERR_INVALID, "loom_comm_all_reduce_tensor: reduce %d is not sum (0), "
                     "mean (1) or max (2)", (int)op);
  return run_on_tensor(comm, t, COMM_ALL_REDUCE, op, 0, "loom_comm_all_reduce_tensor");
}

/* FNV-1a over what every rank's step must share: the parameters' names,
 * dtypes and shapes, and the nodes (op, operands, attributes, output
 * types), not constants' values (a broadcast's gradient keeps a
 * rank's own 1 or 0). */
#define MIX(h, x) ((h) = ((h) ^ (uint64_t)(x)) * 1099511628211ull)

static uint64_t mix_type(uint64_t h, const ir_type_t *t) {
  MIX(h, t->dtype);
  MIX(h, t->rank);
  for (int d = 0; d < t->rank; d++) MIX(h, t->dims[d]);
  return h;
}

static uint64_t step_hash(const loom_graph_t *g) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < g->n_params; i++) {
    const ir_value_t *v = &g->values[g->params[i]];
    for (const char *p = v->name ? v->name : ""; *p; p++) MIX(h, (unsigned char)*p);
    h = mix_type(h, &v->type);
    MIX(h, v->data != NULL);
  }
  for (int64_t i = 0; i < g->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[i];
    MIX(h, n->op);
    for (int k = 0; k < n->n_in; k++) MIX(h, n->in[k]);
    for (int k = 0; k < n->n_out; k++) h = mix_type(h, &g->values[n->out[k]].type);
    for (int a = 0; a < n->attrs->n; a++) {
      const ir_attr_t *at = &n->attrs->a[a];
      for (const char *p = at->name; *p; p++) MIX(h, (unsigned char)*p);
      if (!strcmp(at->name, "comm")) continue; /* ids are each process's own */
      for (int k = 0; k < (at->kind == IR_ATTR_INTS ? at->n : 1); k++) MIX(h, at->ints[k]);
      uint64_t f;
      memcpy(&f, &at->f, sizeof f);
      MIX(h, f);
    }
  }
  return h;
}
#undef MIX

loom_status_t loom_comm_broadcast_params(loom_comm_t *comm, loom_graph_t *g, int root) {
  LOOM_CHECK_ARG(comm);
  LOOM_CHECK_ARG(g);
  /* Every rank learns whether any rank's parameters differ from root's,
   * before sending bytes that would not fit. */
  int64_t mine = (int64_t)step_hash(g), theirs = mine, differs;
  loom_tensor_t h, d;
  tensor_view_init(&h, LOOM_I64, 0, NULL, &theirs);
  LOOM_TRY(loom_comm_broadcast_tensor(comm, &h, root));
  differs = theirs != mine;
  tensor_view_init(&d, LOOM_I64, 0, NULL, &differs);
  LOOM_TRY(loom_comm_all_reduce_tensor(comm, &d, LOOM_COMM_MAX));
  if (differs)
    return loom_fail(LOOM_ERR_INVALID, "%s: the ranks' graphs differ: rank %d's (its "
                     "parameters' names, dtypes and shapes, its ops, operands, attributes and "
                     "types) %s rank %d's", __func__, loom_comm_rank(comm),
                     theirs != mine ? "differs from" : "matches, but another rank's differs from",
                     root);
  for (int i = 0; i < g->n_params; i++) {
    loom_tensor_t *t = g->values[g->params[i]].data;
    if (t && !ir_shard_of(g, g->params[i])) LOOM_TRY(loom_comm_broadcast_tensor(comm, t, root));
  }
  return LOOM_OK;
}
