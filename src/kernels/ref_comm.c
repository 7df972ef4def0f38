/* Collectives: each call runs one MPI collective on the node's
 * communicator (core/comm.c), the same in the interpreter and in compiled
 * programs (no back end generates them). */
#include "core/comm.h"
#include "kernels/ref.h"

#include <string.h>

static loom_status_t find_comm(ref_call_t *c, loom_comm_t **out) {
  int64_t id = ir_attr_int(c->attrs, "comm", 0);
  loom_comm_t *comm = core_comm_get(id);
  if (!comm)
    return loom_fail(LOOM_ERR_INVALID, "%s: communicator %lld was destroyed (or never made "
                     "in this process)", ref_name(c), (long long)id);
  int64_t ranks = ir_attr_int(c->attrs, "ranks", 0);
  if (ranks != loom_comm_size(comm))
    return loom_fail(LOOM_ERR_INVALID, "%s: built for %lld ranks, its communicator has %d",
                     ref_name(c), (long long)ranks, loom_comm_size(comm));
  *out = comm;
  return LOOM_OK;
}

static core_comm_op_t op_of(ref_call_t *c, core_comm_kind_t kind, int64_t count) {
  return (core_comm_op_t){
      .kind = kind,
      .reduce = (loom_comm_reduce_t)ir_attr_int(c->attrs, "reduce", 0),
      .root = (int)ir_attr_int(c->attrs, "root", 0),
      .dtype = c->in[0]->dtype,
      .count = count,
      .send = c->in[0]->data,
      .recv = c->out[0]->data,
      .what = ref_name(c),
  };
}

static loom_status_t run(ref_call_t *c, core_comm_kind_t kind, int64_t count) {
  loom_comm_t *comm = NULL;
  LOOM_TRY(find_comm(c, &comm));
  core_comm_op_t op = op_of(c, kind, count);
  return core_comm_run(comm, &op);
}

loom_status_t ref_all_reduce(ref_call_t *c) {
  return run(c, COMM_ALL_REDUCE, loom_tensor_numel(c->in[0]));
}

/* The output (over the input, or a copy of it) is the buffer MPI reduces
 * in place until ref_all_reduce_wait. */
loom_status_t ref_all_reduce_start(ref_call_t *c) {
  loom_comm_t *comm = NULL;
  LOOM_TRY(find_comm(c, &comm));
  core_comm_op_t op = op_of(c, COMM_ALL_REDUCE, loom_tensor_numel(c->in[0]));
  return core_comm_start(comm, &op);
}

loom_status_t ref_all_reduce_wait(ref_call_t *c) {
  loom_comm_t *comm = NULL;
  LOOM_TRY(find_comm(c, &comm));
  LOOM_TRY(core_comm_finish(comm, c->in[0]->data, ref_name(c)));
  size_t bytes = (size_t)loom_tensor_numel(c->in[0]) * loom_dtype_size(c->in[0]->dtype);
  if (c->out[0]->data != c->in[0]->data && bytes) memcpy(c->out[0]->data, c->in[0]->data, bytes);
  return LOOM_OK;
}

loom_status_t ref_broadcast(ref_call_t *c) {
  return run(c, COMM_BROADCAST, loom_tensor_numel(c->in[0]));
}

loom_status_t ref_all_gather(ref_call_t *c) {
  return run(c, COMM_ALL_GATHER, loom_tensor_numel(c->in[0]));
}

loom_status_t ref_reduce_scatter(ref_call_t *c) {
  return run(c, COMM_REDUCE_SCATTER, loom_tensor_numel(c->out[0]));
}
