/* example_treelstm [--steps N] [--threads T] [--form node|level]
 *                  [--policy exact|bucket|symbolic|auto] [--interpret]
 *                  [--every K] [--data-parallel]
 * Trains the TreeLSTM (examples/dynamic/treelstm.c) on random binary
 * trees through a trace: --form node (default) walks each tree by
 * recursion with one segment per node, --form level batches all nodes of
 * one height in one segment, and --policy (default symbolic) says how the
 * node counts of the level form enter the cache's keys. Prints the loss
 * every K steps and the trace's statistics. */
#include "dynamic.h"

int main(int argc, char **argv) {
  dyn_config_t c = {.policy = LOOM_DIM_SYMBOLIC, .compile = 1, .every = 10, .log = stdout};
  int steps = 60;
  if (dyn_parse_args(argc, argv, 1, &c, &steps) != LOOM_OK) {
    fprintf(stderr, "example_treelstm: %s\nusage: example_treelstm [--steps N] "
            "[--threads T] [--form node|level] [--policy exact|bucket|symbolic|auto] "
            "[--interpret] [--every K] [--data-parallel]\n", loom_last_error());
    return 2;
  }
  /* the first steps compile: time the rest */
  int warmup = steps > 5 ? 5 : 0;
  dyn_result_t r;
  if (dyn_treelstm_run(&c, warmup, steps - warmup, &r) != LOOM_OK) {
    fprintf(stderr, "example_treelstm: %s\n", loom_last_error());
    return 1;
  }
  if (!c.comm || loom_comm_rank(c.comm) == 0)
    dyn_print_stats(stdout, c.form ? "treelstm level (trees)" : "treelstm node (trees)", &r);
  loom_comm_destroy(c.comm);
  return 0;
}
