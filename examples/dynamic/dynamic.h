/* The dynamic workloads (issue 5's examples): an LSTM over sequences of
 * varying length, a mixture of experts with top-2 routing, a GCN over
 * random graphs, and a TreeLSTM over random binary trees. Each trains
 * through a trace (include/loom/trace.h): host C code drives the model,
 * the trace cuts it into segments, and the cache compiles each segment
 * once per key. The same workloads in PyTorch eager are
 * bench/peers/torch_dynamic.py: data, sizes and initial weights come from
 * model_init_value streams with the same names on both sides, so the two
 * see the same steps and start from the same losses. */
#ifndef LOOM_EXAMPLES_DYNAMIC_H
#define LOOM_EXAMPLES_DYNAMIC_H

#include <stdint.h>
#include <stdio.h>

#include "loom/loom.h"
#include "loom/trace.h"

/* Returns the status of call from the calling function if it failed. */
#define DYN_TRY(call)                                                      \
  do {                                                                     \
    loom_status_t dyn_s_ = (call);                                         \
    if (dyn_s_ != LOOM_OK) return dyn_s_;                                  \
  } while (0)

/* Fails, naming the function and the argument, when arg is null. */
#define DYN_CHECK_ARG(arg)                                                 \
  do {                                                                     \
    if (!(arg))                                                            \
      return loom_set_error(LOOM_ERR_INVALID, "%s: argument '%s' is null", \
                            __func__, #arg);                               \
  } while (0)

typedef struct dyn_config {
  int threads;                   /* 0: LOOM_NUM_THREADS */
  loom_dim_policy_kind_t policy; /* of the workload's varying dims */
  int compile;                   /* 0: every segment interpreted */
  /* 1: a miss compiles before the segment runs (the trace's tiered off),
   * so that runs are alike; 0: the trace's default (tiered) */
  int wait_compiles;
  int form; /* treelstm: 0 one segment per node type, 1 level batching */
  int every; /* print the loss every `every` steps to log (0: never) */
  FILE *log;
  double *losses; /* not NULL: gets the loss of every step (warmup + steps) */
  /* Tests: when params is not NULL, the run copies its parameters' final
   * values there, concatenated in the workload's order (at most
   * params_cap floats; dyn_result_t.n_params counts them). */
  float *params;
  int64_t params_cap;
  int first_batch; /* tests: step k draws batch first_batch + k (lstm, gnn) */
  /* --data-parallel: every process of the MPI job; rank r of n draws
   * batch k * n + r at step k, the gradients averaged across the ranks
   * (loom_trace_data_parallel); rank 0 logs. NULL: one process. */
  loom_comm_t *comm;
} dyn_config_t;

typedef struct dyn_result {
  double items_per_s;     /* over the steps after warm-up */
  double first_loss, last_loss;
  double seconds;         /* of the timed steps */
  double wall_s;          /* of every step, warm-up and compiles included */
  int64_t n_params;       /* floats copied into dyn_config_t.params */
  loom_trace_stats_t stats;
} dyn_result_t;

typedef loom_status_t (*dyn_run_fn)(const dyn_config_t *c, int warmup,
                                    int steps, dyn_result_t *out);

/* Trains `warmup + steps` steps (step k draws batch k). */
loom_status_t dyn_lstm_run(const dyn_config_t *c, int warmup, int steps,
                           dyn_result_t *out);
loom_status_t dyn_moe_run(const dyn_config_t *c, int warmup, int steps,
                          dyn_result_t *out);
loom_status_t dyn_gnn_run(const dyn_config_t *c, int warmup, int steps,
                          dyn_result_t *out);
loom_status_t dyn_treelstm_run(const dyn_config_t *c, int warmup, int steps,
                               dyn_result_t *out);

/* ---- Shared data (data.c) ------------------------------------------------ */

/* Value i of stream name in lo..hi (randint in torch_dynamic.py). */
int64_t dyn_randint(const char *name, int64_t i, int64_t lo, int64_t hi);
/* n values of stream name, uniform in [-bound, bound), into a new f32
 * tensor of the given shape. */
loom_status_t dyn_values(const char *name, double bound, int rank,
                         const int64_t *shape, loom_tensor_t **out);
/* "prefix.k" style names: snprintf into a static-size buffer. */
const char *dyn_name(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies the n tensors' values (f32) into c->params, when asked, and
 * counts them in out->n_params. */
loom_status_t dyn_copy_params(const dyn_config_t *c, int n,
                              loom_tensor_t *const *params, dyn_result_t *out);

/* Prints "step K loss L" lines and the final statistics line every
 * example shares: items/s, hits, misses, compiles, compile time. */
void dyn_print_stats(FILE *f, const char *what, const dyn_result_t *r);

/* ---- The shared training loop (loop.c) ----------------------------------- */

/* AdamW of every workload (and of the PyTorch twins). */
#define DYN_LR 2e-3
#define DYN_BETA1 0.9
#define DYN_BETA2 0.999
#define DYN_EPS 1e-8
#define DYN_WD 0.01

/* A workload for dyn_train: batch draws batch k into self (untimed) and
 * returns its item count; forward records step k's forward on t (entering
 * parameters and inputs) and returns the loss value. */
typedef struct dyn_model {
  void *self;
  loom_status_t (*batch)(void *self, int k, int64_t *items);
  loom_status_t (*forward)(void *self, loom_trace_t *t, int k,
                           loom_value_t *loss);
} dyn_model_t;

/* The policy of a varying dim called name: LOOM_DIM_AUTO unnamed (the
 * trace's default, as if the program declared nothing). */
loom_dim_policy_t dyn_policy(loom_dim_policy_kind_t kind, const char *name);
/* A trace with c's compile, wait_compiles and threads; data_dims NULL: the
 * trace's default (automatic); c's policy exact: every input dim exact. */
loom_status_t dyn_trace_create(const dyn_config_t *c,
                               const loom_dim_policy_t *data_dims,
                               loom_trace_t **out);
/* Trains warmup + steps steps of m on t: per step the batch, the forward,
 * the loss read, backward, AdamW (DYN_*), step end; out gets the first and
 * last losses, the throughput of the timed steps and t's statistics. */
loom_status_t dyn_train(const dyn_config_t *c, loom_trace_t *t,
                        const dyn_model_t *m, int warmup, int steps,
                        dyn_result_t *out);
/* The options of the example programs: --steps N, --threads T, --policy
 * exact|bucket|symbolic|auto, --interpret, --every K, and with_form:
 * --form node|level. */
loom_status_t dyn_parse_args(int argc, char **argv, int with_form,
                             dyn_config_t *c, int *steps);

#endif
