/* example_moe [--steps N] [--threads T] [--policy exact|bucket|symbolic|auto]
 *             [--interpret] [--every K] [--data-parallel]
 * Trains the mixture of experts (examples/dynamic/moe.c) through a trace:
 * top-2 routing sends a different number of tokens to each expert every
 * step, and --policy (default symbolic) says how those counts enter the
 * cache's keys. Prints the loss every K steps and the trace's statistics. */
#include "dynamic.h"

int main(int argc, char **argv) {
  dyn_config_t c = {.policy = LOOM_DIM_SYMBOLIC, .compile = 1, .every = 10, .log = stdout};
  int steps = 60;
  if (dyn_parse_args(argc, argv, 0, &c, &steps) != LOOM_OK) {
    fprintf(stderr, "example_moe: %s\nusage: example_moe [--steps N] [--threads T] "
            "[--policy exact|bucket|symbolic|auto] [--interpret] [--every K] [--data-parallel]\n",
            loom_last_error());
    return 2;
  }
  /* the first steps compile: time the rest */
  int warmup = steps > 5 ? 5 : 0;
  dyn_result_t r;
  if (dyn_moe_run(&c, warmup, steps - warmup, &r) != LOOM_OK) {
    fprintf(stderr, "example_moe: %s\n", loom_last_error());
    return 1;
  }
  if (!c.comm || loom_comm_rank(c.comm) == 0) dyn_print_stats(stdout, "moe (tokens)", &r);
  loom_comm_destroy(c.comm);
  return 0;
}
