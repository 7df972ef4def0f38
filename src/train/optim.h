/* Pieces of the optimizers shared with the trace's own AdamW
 * (runtime/tape.c), so that both compute one formula. */
#ifndef LOOM_TRAIN_OPTIM_H
#define LOOM_TRAIN_OPTIM_H

#include "loom/loom.h"

/* Adam's direction from the new moments m and v and the bias corrections
 * bc1 = 1 - beta1^t and bc2 = 1 - beta2^t (rank-0 values of m's dtype):
 * m / bc1 / (sqrt(v / bc2) + eps), computed as torch.optim's Adam does,
 * (m * (1 / bc1)) / (sqrt(v) * (1 / sqrt(bc2)) + eps). The corrections'
 * reciprocals are scalars, so each element takes one division and one
 * square root where the textbook order takes three divisions (the update
 * runs in a weight-gradient GEMM's epilogue, and the divisions cost 15% of
 * an AdamW pass over memory here). */
loom_status_t train_adam_direction(loom_graph_t *g, loom_value_t m, loom_value_t v,
                                   loom_value_t bc1, loom_value_t bc2, double eps,
                                   loom_value_t *out);

#endif
