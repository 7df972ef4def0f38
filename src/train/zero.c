/* The optimizer step of data-parallel training, and ZeRO stage 1: the
 * optimizer's state split over the ranks (include/loom/comm.h).
 *
 * Each parameter, flattened and padded with zeros to a multiple of the
 * number of ranks R, is viewed as R rows of S elements; row r is rank r's
 * part. A bucket's gradients become one (R, K) value, the rows of its
 * members side by side, so that one reduce_scatter gives each rank its
 * rows of every member: (1, K). The rank updates its rows with state of
 * their size, and one all_gather of the updated rows gives every rank
 * the whole (R, K) again, cut back into the parameters. */
#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"
#include "ir/ir.h"
#include "train/data_parallel.h"
#include "train/optim.h"

/* One parameter's place: its numel, its part's size S (the numel over
 * R, rounded up) and its rows' first column in the bucket. */
typedef struct part {
  int64_t numel, size, at;
} part_t;

/* x flattened and padded to R * S elements, as (R, S). */
static loom_status_t as_rows(loom_graph_t *g, loom_value_t x, const part_t *p, int ranks,
                             loom_value_t *out) {
  LOOM_TRY(loom_reshape(g, x, 1, (loom_dim_t[]){p->numel}, out));
  int64_t pad = p->size * ranks - p->numel;
  if (pad > 0) LOOM_TRY(loom_pad(g, *out, (int64_t[]){0, pad}, LOOM_PAD_CONSTANT, 0.0, out));
  return loom_reshape(g, *out, 2, (loom_dim_t[]){ranks, p->size}, out);
}

/* Columns [at, at + size) of x (rows, K). */
static loom_status_t columns(loom_graph_t *g, loom_value_t x, int64_t at, int64_t size,
                             loom_value_t *out) {
  int64_t end = at + size, axis = 1, step = 1;
  return loom_slice(g, x, 1, &at, &end, &axis, &step, out);
}

/* This rank's row of parameter p: an index_select by a constant, whose
 * value the step's hash leaves out (loom_comm_broadcast_params), so
 * every rank's step hashes alike. */
static loom_status_t own_row(loom_graph_t *g, loom_value_t p, const part_t *part, int ranks,
                             int rank, loom_value_t *out) {
  loom_tensor_t *index = NULL;
  LOOM_TRY(loom_tensor_create(LOOM_I64, 1, (int64_t[]){1}, &index));
  *(int64_t *)loom_tensor_data(index) = rank;
  loom_value_t at, rows;
  loom_status_t s = loom_graph_constant(g, index, &at);
  loom_tensor_destroy(index);
  LOOM_TRY(s);
  LOOM_TRY(as_rows(g, p, part, ranks, &rows));
  LOOM_TRY(loom_index_select(g, rows, at, 0, out));
  return loom_reshape(g, *out, 1, (loom_dim_t[]){part->size}, out);
}

/* The bucket's gradients reduce_scattered: each member's mean gradient
 * rows into grad[i], its rows of the parameter into shard[i]. */
static loom_status_t scatter_bucket(loom_graph_t *g, loom_comm_t *comm, const int *members,
                                    int n, const loom_value_t *params,
                                    const loom_value_t *grads, part_t *parts,
                                    loom_value_t *shard, loom_value_t *grad) {
  int ranks = loom_comm_size(comm), rank = loom_comm_rank(comm);
  loom_value_t rows[n], sum, scale;
  int64_t k = 0;
  for (int j = 0; j < n; j++) {
    part_t *p = &parts[members[j]];
    p->at = k;
    k += p->size;
    LOOM_TRY(as_rows(g, grads[members[j]], p, ranks, &rows[j]));
  }
  if (n > 1) LOOM_TRY(loom_concat(g, n, rows, 1, &sum));
  else sum = rows[0];
  LOOM_TRY(loom_reduce_scatter(g, comm, sum, LOOM_COMM_SUM, &sum));
  loom_dtype_t dt;
  LOOM_TRY(loom_value_type(g, sum, &dt, NULL, NULL));
  LOOM_TRY(loom_full(g, 0, NULL, 1.0 / ranks, dt, &scale));
  for (int j = 0; j < n; j++) {
    int i = members[j];
    loom_value_t part;
    LOOM_TRY(columns(g, sum, parts[i].at, parts[i].size, &part));
    LOOM_TRY(loom_reshape(g, part, 1, (loom_dim_t[]){parts[i].size}, &part));
    LOOM_TRY(loom_mul(g, part, scale, &grad[i]));
    LOOM_TRY(own_row(g, params[i], &parts[i], ranks, rank, &shard[i]));
  }
  return LOOM_OK;
}

/* Every rank's updated rows of the bucket's members gathered and cut
 * back into the parameters. */
static loom_status_t gather_bucket(loom_graph_t *g, loom_comm_t *comm, const int *members,
                                   int n, const loom_value_t *params, const dp_grad_t *info,
                                   const part_t *parts, const loom_value_t *next) {
  int ranks = loom_comm_size(comm);
  loom_value_t mine[n], all;
  for (int j = 0; j < n; j++) mine[j] = next[members[j]];
  if (n > 1) LOOM_TRY(loom_concat(g, n, mine, 0, &all));
  else all = mine[0];
  const part_t *last = &parts[members[n - 1]];
  int64_t k = last->at + last->size;
  LOOM_TRY(loom_reshape(g, all, 2, (loom_dim_t[]){1, k}, &all));
  LOOM_TRY(loom_all_gather(g, comm, all, &all));
  for (int j = 0; j < n; j++) {
    int i = members[j];
    const part_t *p = &parts[i];
    loom_value_t whole;
    LOOM_TRY(columns(g, all, p->at, p->size, &whole));
    LOOM_TRY(loom_reshape(g, whole, 1, (loom_dim_t[]){ranks * p->size}, &whole));
    if (ranks * p->size > p->numel) {
      int64_t start = 0, end = p->numel, axis = 0, step = 1;
      LOOM_TRY(loom_slice(g, whole, 1, &start, &end, &axis, &step, &whole));
    }
    LOOM_TRY(loom_reshape(g, whole, info[i].rank, info[i].dims, &whole));
    LOOM_TRY(loom_assign(g, params[i], whole));
  }
  return LOOM_OK;
}

/* params[i]: a parameter of grads[i]'s dtype and dims, checked before
 * the parts are cut (the optimizer checks the parts only). */
static loom_status_t check_params(loom_graph_t *g, int n, const loom_value_t *params,
                                  const dp_grad_t *info) {
  for (int i = 0; i < n; i++) {
    if (!ir_value_valid(g, params[i].id) || g->values[params[i].id].kind != IR_VALUE_PARAM)
      return loom_fail(LOOM_ERR_INVALID, "loom_data_parallel_step: params[%d] (value %d) is "
                       "not a parameter of the graph (loom_graph_param)", i, params[i].id);
    const ir_type_t *t = &g->values[params[i].id].type;
    bool same = t->dtype == info[i].dtype && t->rank == info[i].rank;
    for (int d = 0; same && d < t->rank; d++) same = t->dims[d] == info[i].dims[d];
    if (!same) {
      char pb[96];
      ir_type_str(g, t, pb, sizeof pb);
      return loom_fail(LOOM_ERR_SHAPE, "loom_data_parallel_step: grads[%d] has %lld elements "
                       "of %s but params[%d] is %s; they must have one dtype and shape", i,
                       (long long)info[i].numel, loom_dtype_name(info[i].dtype), i, pb);
    }
  }
  return LOOM_OK;
}

/* Buckets scattered in the order backward makes them, the parts
 * clipped (an all_reduce of their sums of squares), every update, then
 * the buckets gathered: collectives keep their graph order on every
 * rank. */
static loom_status_t zero_step(loom_graph_t *g, loom_comm_t *comm, const loom_optimizer_t *opt,
                               int n, const loom_value_t *params, const loom_value_t *grads,
                               loom_value_t lr, const dp_grad_t *info, int64_t bucket_bytes,
                               double max_grad_norm, int *members, dp_bucket_t *buckets, part_t *parts,
                               loom_value_t *vals) {
  int ranks = loom_comm_size(comm);
  loom_value_t *shard = vals, *grad = vals + n, *next = vals + 2 * n;
  LOOM_TRY(check_params(g, n, params, info));
  for (int i = 0; i < n; i++)
    parts[i] = (part_t){.numel = info[i].numel, .size = (info[i].numel + ranks - 1) / ranks};
  int n_buckets = dp_buckets(n, info, bucket_bytes, members, buckets);
  for (int b = 0; b < n_buckets; b++)
    LOOM_TRY(scatter_bucket(g, comm, members + buckets[b].first, buckets[b].n, params, grads,
                            parts, shard, grad));
  if (max_grad_norm > 0)
    LOOM_TRY(train_clip_grad_norm("loom_data_parallel_step", g, comm, n, grad, max_grad_norm,
                                  grad, NULL));
  LOOM_TRY(train_optimizer_shards("loom_data_parallel_step", g, opt, ranks,
                                  loom_comm_rank(comm), n, params, shard, grad, lr, next));
  for (int b = 0; b < n_buckets; b++)
    LOOM_TRY(gather_bucket(g, comm, members + buckets[b].first, buckets[b].n, params, info,
                           parts, next));
  return LOOM_OK;
}

/* Without sharding: the gradients' mean, clipped, then the optimizer. */
static loom_status_t whole_step(loom_graph_t *g, loom_comm_t *comm,
                                const loom_optimizer_t *opt, int n, const loom_value_t *params,
                                const loom_value_t *grads, loom_value_t lr,
                                const loom_data_parallel_options_t *opts, loom_value_t *mean) {
  LOOM_TRY(loom_data_parallel_grads(g, comm, n, grads, opts, mean));
  if (opts->max_grad_norm > 0)
    LOOM_TRY(train_clip_grad_norm("loom_data_parallel_step", g, NULL, n, mean,
                                  opts->max_grad_norm, mean, NULL));
  return loom_optimizer_apply(g, opt, n, params, mean, lr);
}

loom_status_t loom_data_parallel_step(loom_graph_t *g, loom_comm_t *comm,
                                      const loom_optimizer_t *opt, int n,
                                      const loom_value_t *params, const loom_value_t *grads,
                                      loom_value_t lr, const loom_data_parallel_options_t *o) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(comm);
  LOOM_CHECK_ARG(opt);
  if (n < 1 || !params || !grads)
    return loom_fail(LOOM_ERR_INVALID, "%s: n = %d with params %s and grads %s; needs n >= 1 "
                     "and both set", __func__, n, params ? "set" : "null",
                     grads ? "set" : "null");
  loom_data_parallel_options_t opts;
  loom_optimizer_t full;
  LOOM_TRY(dp_read_options(__func__, o, &opts));
  LOOM_TRY(train_optimizer_read(__func__, opt, &full));
  if (!(opts.max_grad_norm >= 0 && opts.max_grad_norm <= 1e300))
    return loom_fail(LOOM_ERR_INVALID, "%s: max_grad_norm %g must be finite and >= 0 (0: no "
                     "clipping)", __func__, opts.max_grad_norm);
  dp_grad_t *info = core_calloc((size_t)n, sizeof *info);
  int *members = core_malloc((size_t)n * sizeof *members);
  dp_bucket_t *buckets = core_calloc((size_t)n, sizeof *buckets);
  part_t *parts = core_calloc((size_t)n, sizeof *parts);
  loom_value_t *vals = core_malloc((size_t)n * 3 * sizeof *vals);
  loom_status_t s = info && members && buckets && parts && vals
                        ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", __func__);
  for (int i = 0; i < n && s == LOOM_OK; i++)
    s = dp_read_grad(g, __func__, i, grads[i], &info[i]);
  if (s == LOOM_OK && !opts.shard_optimizer_state)
    s = whole_step(g, comm, &full, n, params, grads, lr, &opts, vals);
  else if (s == LOOM_OK)
    s = zero_step(g, comm, &full, n, params, grads, lr, info, opts.bucket_bytes,
                  opts.max_grad_norm, members, buckets, parts, vals);
  core_free(info);
  core_free(members);
  core_free(buckets);
  core_free(parts);
  core_free(vals);
  return s;
}
