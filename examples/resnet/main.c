/* Trains a small ResNet (conv, batch norm in training mode with running
 * statistics updated by assigns, ReLU, residual blocks, global pooling,
 * linear head) to tell the orientation of noisy stripes (4 classes), with
 * one compiled training step replayed.
 *   example_resnet [--steps N] [--threads T] [--every K] [--lr X]
 *     [--data-parallel] */
#include <stdio.h>

#include "vision.h"

static const ex_resnet_cfg_t cfg = {.batch = 16, .channels = 3, .size = 12, .width = 6, .classes = 4};

static void data(ex_rng_t *r, void *ctx, double *x, int64_t *y) {
  (void)ctx;
  ex_data_stripes(r, cfg.batch, cfg.channels, cfg.size, cfg.classes, x, y);
}

int main(int argc, char **argv) {
  ex_args_t a = {.steps = 120, .threads = 0, .every = 10, .lr = 3e-3};
  ex_model_t m;
  loom_value_t logits;
  if (ex_parse_args(argc, argv, &a)) return 2;
  if (!a.comm || loom_comm_rank(a.comm) == 0) /* rank 0 prints */
    printf("ResNet (width %ld, 2 blocks) on %ldx%ld stripe orientations (%ld classes), batch %ld\n",
           (long)cfg.width, (long)cfg.size, (long)cfg.size, (long)cfg.classes, (long)cfg.batch);
  loom_status_t s = ex_model_init(&m, LOOM_F32, 1);
  m.comm = a.comm;
  m.shard_optimizer_state = a.zero;
  if (s == LOOM_OK) s = ex_resnet(&m, &cfg, &logits);
  if (s == LOOM_OK) s = ex_train_step(&m, logits, cfg.batch, 1e-4);
  int rc = s == LOOM_OK ? ex_train_main(&m, &a, cfg.batch, data, NULL) : 1;
  if (s != LOOM_OK) fprintf(stderr, "error: %s\n", loom_last_error());
  ex_model_free(&m);
  return rc;
}
