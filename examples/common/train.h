/* Shared pieces of the training examples: a model under construction
 * (its graph, dtype and trainable parameters), the layers the vision
 * models are made of, the one-graph training step (forward, loss,
 * loom_grad, clipping, AdamW, all compiled once and replayed), the
 * procedural data sets and the command line.
 *
 * Every model can be built in f32 (to train) or f64 (for finite-difference
 * checks); parameters draw their initial values from a seed, so two builds
 * with one seed hold the same numbers. */
#ifndef LOOM_EXAMPLES_TRAIN_H
#define LOOM_EXAMPLES_TRAIN_H

#include <stdint.h>

#include "loom/loom.h"

#define EX_TRY(call)                                                       \
  do {                                                                     \
    loom_status_t ex_s_ = (call);                                          \
    if (ex_s_ != LOOM_OK) return ex_s_;                                    \
  } while (0)

#define EX_MAX_PARAMS 256

typedef struct ex_model {
  loom_graph_t *g;
  loom_dtype_t dtype;
  uint64_t seed; /* the next parameter's initializer seed */
  int n_params;
  loom_value_t params[EX_MAX_PARAMS]; /* trainable only */
  int has_offset;
  loom_value_t offset; /* dropout's generator offset (i64 parameter) */
  int n_dropouts;      /* each dropout site draws from its own seed */
  loom_value_t x;      /* the input "x" */
  /* Data parallelism (--data-parallel): the gradients averaged across the
   * ranks of comm, which start from rank 0's parameters; NULL: alone. */
  loom_comm_t *comm;
  int shard_optimizer_state; /* with comm: ZeRO-1, AdamW's state split across the ranks */
} ex_model_t;

typedef enum ex_init { EX_INIT_KAIMING, EX_INIT_ZEROS, EX_INIT_ONES, EX_INIT_SMALL } ex_init_t;

/* A new graph; dtype LOOM_F32 or LOOM_F64. */
loom_status_t ex_model_init(ex_model_t *m, loom_dtype_t dtype, uint64_t seed);
void ex_model_free(ex_model_t *m);

/* A trainable parameter (kaiming: PyTorch's default kaiming_uniform(a =
 * sqrt(5)) of a weight; small: normal with std 0.02, for embeddings). */
loom_status_t ex_param(ex_model_t *m, const char *name, int rank,
                       const int64_t *shape, ex_init_t init, loom_value_t *out);

/* Layers, named as in PyTorch ("<name>.weight"). */
loom_status_t ex_linear(ex_model_t *m, const char *name, loom_value_t x,
                        int64_t in, int64_t out, loom_value_t *y);
loom_status_t ex_conv(ex_model_t *m, const char *name, loom_value_t x,
                      int64_t in, int64_t out, int64_t kernel, int64_t stride,
                      int64_t pad, int has_bias, loom_value_t *y);
/* Batch norm in training mode: the batch's statistics normalize, and the
 * running statistics (parameters, not trained) are updated by assigns. */
loom_status_t ex_batch_norm(ex_model_t *m, const char *name, loom_value_t x,
                            int64_t channels, loom_value_t *y);
loom_status_t ex_layer_norm(ex_model_t *m, const char *name, loom_value_t x,
                            int64_t dim, loom_value_t *y);
/* Dropout with probability p (p 0: x itself); the mask changes every step
 * through the model's offset, which the training step advances. */
loom_status_t ex_dropout(ex_model_t *m, loom_value_t x, double p, loom_value_t *y);
/* Adds the graph's input "x" of the model's dtype (the first input). */
loom_status_t ex_input(ex_model_t *m, int rank, const int64_t *shape);
loom_status_t ex_scalar(ex_model_t *m, double value, loom_value_t *out);

/* Adds the input "y" (i64 labels (batch)) and the mean cross-entropy. */
loom_status_t ex_loss(ex_model_t *m, loom_value_t logits, int64_t batch,
                      loom_value_t *loss);

/* The training step on top of the model's logits: inputs x (already
 * added by the model), y and lr (f32 scalar); outputs the loss and the
 * logits; gradients clipped to norm 1, AdamW (weight decay wd), dropout
 * offset advanced. */
loom_status_t ex_train_step(ex_model_t *m, loom_value_t logits, int64_t batch,
                            double wd);

/* ---- Data ------------------------------------------------------------------ */

typedef struct ex_rng {
  uint64_t s;
} ex_rng_t;
double ex_uniform(ex_rng_t *r);  /* [0, 1) */
double ex_normal(ex_rng_t *r);   /* N(0, 1) */

/* Gaussian blobs: classes centers in `dim` dims (fixed by seed 1), points
 * at std 1 around them: x (batch, dim), y (batch). */
void ex_data_blobs(ex_rng_t *r, int64_t batch, int64_t dim, int64_t classes,
                   double *x, int64_t *y);
/* Stripes: class k = orientation k * pi / classes of a sinusoidal grating
 * of random frequency and phase, in noise: x (batch, channels, size,
 * size), each channel of its own contrast. */
void ex_data_stripes(ex_rng_t *r, int64_t batch, int64_t channels,
                     int64_t size, int64_t classes, double *x, int64_t *y);

/* Writes doubles into a contiguous f32 or f64 tensor. */
loom_status_t ex_write(loom_tensor_t *t, const double *v);
/* The fraction of rows of logits (batch, classes) whose argmax is y. */
double ex_accuracy(const loom_tensor_t *logits, const int64_t *y);

/* ---- The command line --------------------------------------------------- */

typedef struct ex_args {
  int steps, threads, every;
  double lr;
  loom_comm_t *comm; /* --data-parallel: every process of the MPI job */
  int zero;          /* --zero: --data-parallel with AdamW's state split (ZeRO-1) */
  const char *checkpoint; /* --checkpoint PATH: saved at every report and at the end */
  const char *resume;     /* --resume PATH: weights and optimizer state loaded first */
} ex_args_t;
/* --steps N --threads T --every K --lr X --data-parallel --zero
 * --checkpoint PATH --resume PATH; 0 ok, 1 bad
 * usage or no communicator (printed). With --data-parallel (under
 * `mpirun -np N`) each rank trains on its own batches, rank 0 prints, and
 * ex_train_main destroys a->comm. Checkpoints hold the whole state
 * however many ranks wrote it (rank 0 writes; loom_comm_checkpoint_save),
 * so a run resumes on any number of ranks; the learning-rate schedule
 * starts again. */
int ex_parse_args(int argc, char **argv, ex_args_t *a);

/* Compiles m's training step, trains it `steps` steps on batches from
 * `data` (x then labels), printing loss, accuracy and steps per second;
 * the learning rate warms up over the first 10% of steps, then decays
 * along a half cosine to 10% of lr. Returns 0 on success. */
typedef void (*ex_data_fn)(ex_rng_t *r, void *ctx, double *x, int64_t *y);
int ex_train_main(ex_model_t *m, const ex_args_t *a, int64_t batch,
                  ex_data_fn data, void *ctx);

#endif
