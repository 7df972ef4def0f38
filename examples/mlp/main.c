/* Trains an MLP classifier on Gaussian blobs (8 classes in 16 dims) with
 * one compiled training step replayed: loss, accuracy on each batch
 * before it is trained on, steps per second.
 *   example_mlp [--steps N] [--threads T] [--every K] [--lr X]
 *     [--data-parallel] */
#include <stdio.h>

#include "vision.h"

static const ex_mlp_cfg_t cfg = {.batch = 64, .in = 16, .hidden = 128, .classes = 8};

static void data(ex_rng_t *r, void *ctx, double *x, int64_t *y) {
  (void)ctx;
  ex_data_blobs(r, cfg.batch, cfg.in, cfg.classes, x, y);
}

int main(int argc, char **argv) {
  ex_args_t a = {.steps = 600, .threads = 0, .every = 50, .lr = 3e-3};
  ex_model_t m;
  loom_value_t logits;
  if (ex_parse_args(argc, argv, &a)) return 2;
  if (!a.comm || loom_comm_rank(a.comm) == 0) /* rank 0 prints */
    printf("MLP %ld-%ld-%ld-%ld on Gaussian blobs, batch %ld, AdamW\n", (long)cfg.in,
           (long)cfg.hidden, (long)cfg.hidden, (long)cfg.classes, (long)cfg.batch);
  loom_status_t s = ex_model_init(&m, LOOM_F32, 1);
  m.comm = a.comm;
  m.shard_optimizer_state = a.zero;
  if (s == LOOM_OK) s = ex_mlp(&m, &cfg, &logits);
  if (s == LOOM_OK) s = ex_train_step(&m, logits, cfg.batch, 1e-4);
  int rc = s == LOOM_OK ? ex_train_main(&m, &a, cfg.batch, data, NULL) : 1;
  if (s != LOOM_OK) fprintf(stderr, "error: %s\n", loom_last_error());
  ex_model_free(&m);
  return rc;
}
