/* The optimizer builders of loom/train.h for a caller that steps a
 * different subset of its parameters each run: the tracer, whose
 * optimizer step skips a parameter that got no gradient, as PyTorch's
 * optimizers skip a parameter whose .grad is None. */
#ifndef LOOM_TRAIN_OPTIM_H
#define LOOM_TRAIN_OPTIM_H

#include "loom/comm.h"
#include "loom/train.h"

/* loom_optimizer_apply, with take[i] (NULL: every parameter steps) a
 * bool rank-0 value per parameter: where it is false, the run leaves
 * params[i] and its state as they were. With take, Adam's and AdamW's
 * step counter is one per parameter ("<param name>.step"), since each
 * counts its own steps for the bias corrections. fn names the caller in
 * error messages. */
loom_status_t train_optimizer(const char *fn, loom_graph_t *g,
                              const loom_optimizer_t *o, int n,
                              const loom_value_t *params,
                              const loom_value_t *grads,
                              const loom_value_t *take, loom_value_t lr);

/* The updates of this rank's shards of the parameters (ZeRO-1,
 * src/train/zero.c): shards[i] is this rank's part of params[i] (the
 * parameter flattened and padded, ir.h's shards), grads[i] its gradient,
 * of its type; next[i] receives the new part, and nothing is assigned to
 * params[i]. The optimizer's state is made in the shards' shape and
 * recorded as rank `rank` of `ranks`' shards of the whole state; the
 * step counter is whole. */
loom_status_t train_optimizer_shards(const char *fn, loom_graph_t *g,
                                     const loom_optimizer_t *o, int ranks, int rank, int n,
                                     const loom_value_t *params, const loom_value_t *shards,
                                     const loom_value_t *grads, loom_value_t lr,
                                     loom_value_t *next);

/* loom_clip_grad_norm, naming fn in errors; with comm (else null) the
 * gradients are each rank's parts of the whole, whose sums of squares
 * add up across the ranks into the whole's norm. */
loom_status_t train_clip_grad_norm(const char *fn, loom_graph_t *g, loom_comm_t *comm, int n,
                                   const loom_value_t *grads, double max_norm,
                                   loom_value_t *out_grads, loom_value_t *total_norm);

/* Reads a caller's versioned loom_optimizer_t (loom.h) into out, the
 * fields it lacks left zero. Fails, naming fn, on an unset size. */
loom_status_t train_optimizer_read(const char *fn, const loom_optimizer_t *in,
                                   loom_optimizer_t *out);

/* One parameter's update of o (SGD, Adam or AdamW) computed directly over
 * f32 memory, as the graph train_optimizer builds computes it: p and
 * grad of numel elements, state_a and state_b Adam's m and v (state_a
 * SGD's momentum buffer, when momentum is not 0), step Adam's counter,
 * incremented here. Spread over pool's threads when given and large. */
struct core_pool;
loom_status_t train_optimizer_eager(const loom_optimizer_t *o, double lr, int64_t numel,
                                    float *p, const float *grad, float *state_a, float *state_b,
                                    int64_t *step, struct core_pool *pool);
#endif
