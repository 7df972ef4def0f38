/* example_gnn [--steps N] [--threads T] [--policy exact|bucket|symbolic|auto]
 *             [--interpret] [--every K] [--data-parallel]
 * Trains the two-layer GCN (examples/dynamic/gnn.c) through a trace on a
 * new random graph every step (200 to 1000 nodes, five edges per node);
 * --policy (default symbolic) says how the node and edge counts enter the
 * cache's keys. Prints the loss every K steps and the trace's statistics. */
#include "dynamic.h"

int main(int argc, char **argv) {
  dyn_config_t c = {.policy = LOOM_DIM_SYMBOLIC, .compile = 1, .every = 10, .log = stdout};
  int steps = 60;
  if (dyn_parse_args(argc, argv, 0, &c, &steps) != LOOM_OK) {
    fprintf(stderr, "example_gnn: %s\nusage: example_gnn [--steps N] [--threads T] "
            "[--policy exact|bucket|symbolic|auto] [--interpret] [--every K] [--data-parallel]\n",
            loom_last_error());
    return 2;
  }
  /* the first steps compile: time the rest */
  int warmup = steps > 5 ? 5 : 0;
  dyn_result_t r;
  if (dyn_gnn_run(&c, warmup, steps - warmup, &r) != LOOM_OK) {
    fprintf(stderr, "example_gnn: %s\n", loom_last_error());
    return 1;
  }
  if (!c.comm || loom_comm_rank(c.comm) == 0) dyn_print_stats(stdout, "gnn (nodes)", &r);
  loom_comm_destroy(c.comm);
  return 0;
}
