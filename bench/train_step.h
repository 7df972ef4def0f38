/* The training steps the benchmarks time (bench/train.c against PyTorch
 * eager, bench/dist.c across ranks): the models of issue 4's table, each
 * step forward, cross-entropy, loom_grad, AdamW in one graph. */
#ifndef LOOM_BENCH_TRAIN_STEP_H
#define LOOM_BENCH_TRAIN_STEP_H

#include "loom/loom.h"
#include "models.h"

typedef struct train_model {
  const char *name;
  int rank;
  int64_t shape[4]; /* of x; shape[0] is the batch */
  int64_t classes;
} train_model_t;

extern const train_model_t train_models[];
extern const int train_n_models;

/* The model called name, or NULL. */
const train_model_t *train_model_find(const char *name);

/* The whole step in one graph: inputs x, labels, lr; output the loss; the
 * trainable parameters into p. With comm, the gradients are averaged
 * across its ranks (loom_data_parallel_grads) before AdamW; with zero as
 * well, AdamW's state is split across them (loom_data_parallel_step,
 * ZeRO-1). */
loom_status_t train_build_step(loom_graph_t *g, const train_model_t *m, model_params_t *p,
                               loom_comm_t *comm, int zero);

/* The step's inputs: x (bench_input), labels i * 7 % classes, lr. */
void train_make_inputs(const train_model_t *m, loom_tensor_t **in);

#endif
