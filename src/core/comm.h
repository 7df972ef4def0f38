/* Communicators: the processes of a job and the collectives between them,
 * moved by MPI (Loom adds no transport of its own).
 *
 * Every MPI call after MPI_Init runs on one engine thread, in the order
 * the calls were queued, so that MPI needs no more than
 * MPI_THREAD_SERIALIZED and a caller can stop waiting: a collective that
 * another rank never reaches (it failed, exited, or issued others) ends
 * the job after the communicator's timeout, with a message naming the
 * collective and where the other ranks are (a roll call, under
 * MPI_THREAD_MULTIPLE, answered by each rank's listener thread), instead
 * of hanging (MPI cannot cancel a collective, which would go on writing
 * into the caller's buffers).
 * Collectives are identified across ranks by their order on a
 * communicator: every rank must issue the same ones in the same order.
 *
 * A build without MPI (no mpi.h when it was configured) keeps the API:
 * creating a communicator fails with LOOM_ERR_UNSUPPORTED. */
#ifndef LOOM_CORE_COMM_H
#define LOOM_CORE_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/comm.h"

/* What a collective computes, with the public enum's values. */
typedef enum core_comm_kind {
  COMM_ALL_REDUCE,
  COMM_BROADCAST,
  COMM_ALL_GATHER,
  COMM_REDUCE_SCATTER,
} core_comm_kind_t;

/* One collective: send and recv are contiguous buffers of `count`
 * elements of dtype per rank (all_gather's recv holds size * count,
 * reduce_scatter's send size * count); send == recv reduces in place. */
typedef struct core_comm_op {
  core_comm_kind_t kind;
  loom_comm_reduce_t reduce; /* all_reduce, reduce_scatter */
  int root;                  /* broadcast */
  loom_dtype_t dtype;
  int64_t count;
  const void *send;
  void *recv;
  const char *what; /* names the op in messages ("all_reduce") */
} core_comm_op_t;

/* The communicator registered under id (loom_comm_id), NULL when none
 * is: graphs name their communicator by id, so that a graph stays plain
 * data (hashable, copyable). */
loom_comm_t *core_comm_get(int64_t id);
int64_t core_comm_id(const loom_comm_t *c);

/* Runs one collective and waits for it, up to the communicator's
 * timeout (then the job ends). Mean divides the sum by the size on the
 * calling thread. */
loom_status_t core_comm_run(loom_comm_t *c, const core_comm_op_t *op);
/* The same in two halves: start queues the collective and returns; the
 * caller leaves op->recv (and, but for all_reduce and broadcast, whose
 * input start copies into op->recv, op->send) alone until core_comm_finish of
 * op->recv waits for it (and divides a mean). A start on a buffer whose
 * collective is still pending (a run that failed in between) finishes
 * that one first; destroying the communicator finishes them all. */
loom_status_t core_comm_start(loom_comm_t *c, const core_comm_op_t *op);
loom_status_t core_comm_finish(loom_comm_t *c, const void *recv, const char *what);

#endif
