/* Communicators and collectives: training across processes and machines.
 *
 * A communicator is the set of processes (ranks) of a job, as MPI knows
 * them: loom_comm_world() takes every process mpirun started, and
 * loom_comm_from_mpi() a communicator the program made itself. Graphs
 * name a communicator in their collective ops (loom_all_reduce ...), which
 * run in a compiled step like any op: every rank must run the same
 * collectives in the same order, and passes never reorder collectives
 * across each other nor delete them.
 *
 * Data parallelism: every rank holds the model and takes its share of the
 * batch; loom_data_parallel_grads() averages the gradients across ranks
 * (in buckets, one all_reduce each) before the optimizer uses them
 * (loom_data_parallel_step() does both, and can split the optimizer's
 * state across ranks: ZeRO stage 1), and loom_comm_broadcast_params()
 * makes every rank start from rank 0's parameters:
 *
 *   loom_comm_t *comm;
 *   loom_comm_world(&comm);
 *   ... build the forward and the loss on this rank's share of the batch ...
 *   loom_grad(g, loss, n, params, grads);
 *   loom_data_parallel_grads(g, comm, n, grads, NULL, grads);
 *   loom_optimizer_apply(g, &opt, n, params, grads, lr);
 *   loom_comm_broadcast_params(comm, g, 0);
 *   loom_compile(g, &o, &exe);  ... run ...
 *   loom_comm_destroy(comm);
 *
 * launched with `mpirun -np N program`. A collective that another rank
 * does not reach within the communicator's timeout ends the job with a
 * message naming the op and this rank, instead of hanging (MPI cannot
 * cancel a collective, and the ranks no longer agree on which collective
 * is which); a rank that dies ends the job through mpirun. MPI's own
 * errors fail with LOOM_ERR_COMM. A build of Loom without MPI fails
 * loom_comm_world with LOOM_ERR_UNSUPPORTED. */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include "loom/loom.h"
#include "loom/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_comm loom_comm_t;

typedef enum loom_comm_reduce {
  LOOM_COMM_SUM,  /* the elementwise sum over ranks */
  LOOM_COMM_MEAN, /* the sum divided by the number of ranks (float dtypes) */
  LOOM_COMM_MAX,  /* the elementwise maximum (no gradient) */
} loom_comm_reduce_t;

/* Every process of the job (MPI_COMM_WORLD), initializing MPI when the
 * program has not; the last communicator destroyed then finalizes it, and
 * MPI cannot start again in that process (a later call fails with
 * LOOM_ERR_UNSUPPORTED). */
LOOM_API loom_status_t loom_comm_world(loom_comm_t **out);
/* A communicator over the processes of the caller's MPI communicator:
 * mpi_comm points at an MPI_Comm, which Loom duplicates (the caller's
 * stays free for its own messages). MPI must have been initialized with
 * at least MPI_THREAD_SERIALIZED; with MPI_THREAD_MULTIPLE (which
 * loom_comm_world asks for) a timed-out collective also reports where
 * every other rank is. */
LOOM_API loom_status_t loom_comm_from_mpi(const void *mpi_comm, loom_comm_t **out);
LOOM_API void loom_comm_destroy(loom_comm_t *comm);
/* This process's rank (0 .. size - 1) and the number of ranks; -1 for a
 * null communicator. */
LOOM_API int loom_comm_rank(const loom_comm_t *comm);
LOOM_API int loom_comm_size(const loom_comm_t *comm);
/* How long a collective waits for the other ranks before it ends the job
 * (default: LOOM_COMM_TIMEOUT seconds from the environment, else 300),
 * printing the collective, this rank, and each other rank's answer to a
 * roll call: in it, not there yet (and its last collective), in another,
 * or no answer. */
LOOM_API loom_status_t loom_comm_set_timeout(loom_comm_t *comm, double seconds);

/* ---- Collective ops (graph builders) ----------------------------------
 * Each rank passes its own x; all ranks' x have one shape and dtype. */

/* The elementwise reduction of every rank's x, on every rank. */
LOOM_API loom_status_t loom_all_reduce(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                                       loom_comm_reduce_t op, loom_value_t *out);
/* all_reduce in two halves, so that the communication overlaps the work
 * between them: the start returns at once (the scheduler runs it as soon
 * as x is ready); only the wait may read its value, and gives the
 * reduction (the scheduler runs it when nothing else is ready). No
 * gradient flows through them (loom_data_parallel_grads uses them after
 * loom_grad). */
LOOM_API loom_status_t loom_all_reduce_start(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                                             loom_comm_reduce_t op, loom_value_t *out);
LOOM_API loom_status_t loom_all_reduce_wait(loom_graph_t *g, loom_comm_t *comm,
                                            loom_value_t started, loom_value_t *out);
/* Rank root's x, on every rank. */
LOOM_API loom_status_t loom_broadcast(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                                      int root, loom_value_t *out);
/* Every rank's x concatenated along dim 0 in rank order: dim 0 grows
 * size times. */
LOOM_API loom_status_t loom_all_gather(loom_graph_t *g, loom_comm_t *comm, loom_value_t x,
                                       loom_value_t *out);
/* The reduction of every rank's x, split along dim 0 into size equal
 * parts: rank r gets part r. Dim 0 must divide by size. */
LOOM_API loom_status_t loom_reduce_scatter(loom_graph_t *g, loom_comm_t *comm,
                                           loom_value_t x, loom_comm_reduce_t op,
                                           loom_value_t *out);

/* ---- Host side --------------------------------------------------------- */

/* Overwrites t on every rank with rank root's t (same dtype and shape on
 * every rank: a rank whose t differs from root's in dtype or element
 * count fails every rank with LOOM_ERR_INVALID before any byte moves). */
LOOM_API loom_status_t loom_comm_broadcast_tensor(loom_comm_t *comm, loom_tensor_t *t,
                                                  int root);
/* Reduces t in place across ranks (every rank's t of one dtype and
 * element count, else LOOM_ERR_INVALID on every rank, checked first). */
LOOM_API loom_status_t loom_comm_all_reduce_tensor(loom_comm_t *comm, loom_tensor_t *t,
                                                   loom_comm_reduce_t op);
/* Broadcasts every parameter of g (weights, optimizer moments, step
 * counters) from rank root, so that every rank starts identical (state
 * split by ZeRO-1 stays each rank's own part). Fails on
 * every rank when the ranks' graphs differ (a hash of the parameters'
 * names, dtypes and shapes and of the nodes' ops, operands, attributes
 * and types, exchanged first): one step, built alike on every rank. */
LOOM_API loom_status_t loom_comm_broadcast_params(loom_comm_t *comm, loom_graph_t *g, int root);

/* ---- Data parallelism -------------------------------------------------- */

typedef struct loom_data_parallel_options {
  size_t size;          /* sizeof(loom_data_parallel_options_t): init sets it */
  /* Gradients are packed into buckets of about this many bytes, in the
   * order the backward pass produces them (the last parameters' first),
   * and each bucket is averaged by one all_reduce. Default 25 MiB. */
  int64_t bucket_bytes;
  /* 1: ZeRO stage 1 in loom_data_parallel_step (each rank keeps and
   * updates 1 / ranks of the optimizer's state). Default 0. */
  int shard_optimizer_state;
  /* > 0: loom_data_parallel_step clips the mean gradient to this global
   * L2 norm before the update, as loom_clip_grad_norm (with split state,
   * the parts' sums of squares add up across ranks). Default 0: none. */
  double max_grad_norm;
} loom_data_parallel_options_t;

LOOM_API loom_status_t loom_data_parallel_options_init_sized(loom_data_parallel_options_t *o,
                                                             size_t size);
#define loom_data_parallel_options_init(o) loom_data_parallel_options_init_sized((o), sizeof *(o))

/* reduced[i] = the mean over ranks of grads[i] (n float values, e.g. from
 * loom_grad). o may be null (the defaults); reduced may be grads. */
LOOM_API loom_status_t loom_data_parallel_grads(loom_graph_t *g, loom_comm_t *comm, int n,
                                                const loom_value_t *grads,
                                                const loom_data_parallel_options_t *o,
                                                loom_value_t *reduced);

/* The optimizer step of a data-parallel training step: params (n
 * parameters) updated by opt from the mean over ranks of grads.
 * Without o->shard_optimizer_state: loom_data_parallel_grads, then
 * loom_clip_grad_norm when o->max_grad_norm > 0, then
 * loom_optimizer_apply. With it, ZeRO stage 1: each bucket of gradients
 * is reduce_scattered, so that rank r receives the mean of its r-th part
 * of every parameter (each parameter flattened and split in `ranks`
 * equal parts, the last padded with zeros); the rank updates that part
 * with optimizer state of that part's size only (moments "<name>.m" and
 * "<name>.v" of 1 / ranks of the parameter, a whole step counter), and
 * the updated parts are all_gathered back into every rank's parameters.
 * The same numbers as without (the mean and the update are elementwise);
 * per-rank optimizer memory falls by the number of ranks. Such a graph's
 * state saves and loads whole with loom_comm_checkpoint_save / _load
 * (loom_checkpoint_save refuses it). */
LOOM_API loom_status_t loom_data_parallel_step(loom_graph_t *g, loom_comm_t *comm,
                                               const loom_optimizer_t *opt, int n,
                                               const loom_value_t *params,
                                               const loom_value_t *grads, loom_value_t lr,
                                               const loom_data_parallel_options_t *o);

/* ---- Checkpoints across ranks -------------------------------------------
 * Called on every rank, with one graph (built alike) on each. The file is
 * the one loom_checkpoint_save writes for a graph whose state is whole:
 * parameters sharded by ZeRO-1 are gathered for the save and split again
 * for the load, so a checkpoint moves between any numbers of ranks, with
 * or without sharding, and to a single process's loom_checkpoint_load. */

/* Rank 0 writes path (atomically, as loom_checkpoint_save); every rank
 * returns its status. */
LOOM_API loom_status_t loom_comm_checkpoint_save(loom_comm_t *comm, loom_graph_t *g,
                                                 const char *path);
/* Every rank reads path (on a file system every rank sees) with
 * loom_checkpoint_load's strict checks, and takes its part; no rank's
 * parameters change unless every rank read the file. */
LOOM_API loom_status_t loom_comm_checkpoint_load(loom_comm_t *comm, loom_graph_t *g,
                                                 const char *path);

#ifdef __cplusplus
}
#endif

#endif
