/* Trains a small Vision Transformer (patch embedding by a strided conv,
 * class token, position embeddings, pre-LN encoder blocks with multi-head
 * attention and GELU MLPs, dropout) to tell the orientation of noisy
 * stripes (4 classes), with one compiled training step replayed.
 *   example_vit [--steps N] [--threads T] [--every K] [--lr X]
 *     [--data-parallel] */
#include <stdio.h>

#include "vision.h"

static const ex_vit_cfg_t cfg = {.batch = 16, .channels = 3, .size = 16, .patch = 4,
                                 .dim = 32, .heads = 4, .depth = 2, .mlp = 64,
                                 .classes = 4, .dropout = 0.1};

static void data(ex_rng_t *r, void *ctx, double *x, int64_t *y) {
  (void)ctx;
  ex_data_stripes(r, cfg.batch, cfg.channels, cfg.size, cfg.classes, x, y);
}

int main(int argc, char **argv) {
  ex_args_t a = {.steps = 400, .threads = 0, .every = 25, .lr = 2e-3};
  ex_model_t m;
  loom_value_t logits;
  if (ex_parse_args(argc, argv, &a)) return 2;
  if (!a.comm || loom_comm_rank(a.comm) == 0) /* rank 0 prints */
    printf("ViT (dim %ld, %ld heads, depth %ld, patch %ld) on %ldx%ld stripe orientations, "
           "batch %ld\n",
           (long)cfg.dim, (long)cfg.heads, (long)cfg.depth, (long)cfg.patch, (long)cfg.size,
           (long)cfg.size, (long)cfg.batch);
  loom_status_t s = ex_model_init(&m, LOOM_F32, 1);
  m.comm = a.comm;
  m.shard_optimizer_state = a.zero;
  if (s == LOOM_OK) s = ex_vit(&m, &cfg, &logits);
  if (s == LOOM_OK) s = ex_train_step(&m, logits, cfg.batch, 0.05);
  int rc = s == LOOM_OK ? ex_train_main(&m, &a, cfg.batch, data, NULL) : 1;
  if (s != LOOM_OK) fprintf(stderr, "error: %s\n", loom_last_error());
  ex_model_free(&m);
  return rc;
}
