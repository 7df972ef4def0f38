/* What plain data parallelism (src/train/data_parallel.c) and ZeRO-1
 * (src/train/zero.c) share: gradients' shapes and their buckets. */
#ifndef LOOM_TRAIN_DATA_PARALLEL_H
#define LOOM_TRAIN_DATA_PARALLEL_H

#include "loom/comm.h"

typedef struct dp_grad {
  loom_dtype_t dtype;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
  int64_t numel;
} dp_grad_t;

/* A bucket: its members (indices into the gradients, in the order
 * backward makes them) and the value its collective gives. */
typedef struct dp_bucket {
  int first, n; /* members[first .. first + n) */
  loom_value_t started;
} dp_bucket_t;

/* grads[i]'s type into info: a float gradient of constant dims, else an
 * error naming fn. */
loom_status_t dp_read_grad(loom_graph_t *g, const char *fn, int i, loom_value_t v,
                           dp_grad_t *info);
/* Splits n gradients into buckets (room for n) of about bucket_bytes,
 * each of one dtype, from the last gradient to the first (the order the
 * backward pass makes them); members (room for n) lists them in that
 * order. Gives the number of buckets. */
int dp_buckets(int n, const dp_grad_t *info, int64_t bucket_bytes, int *members,
               dp_bucket_t *buckets);
/* The caller's options (null: the defaults) into opts, checked. */
loom_status_t dp_read_options(const char *fn, const loom_data_parallel_options_t *o,
                              loom_data_parallel_options_t *opts);

/* loom_comm_all_reduce_tensor where every rank is known to hold the same
 * dtype and size (a gradient bucket after the ranks agreed on their
 * parameters): without the exchange that checks it. */
loom_status_t dp_all_reduce_agreed(loom_comm_t *comm, loom_tensor_t *t, loom_comm_reduce_t op);

#endif
