/* example_gpt [--data-parallel] [--zero] [--steps N] [TEXT [STEPS [THREADS]]]:
 * trains a character-level GPT on TEXT (default
 * /usr/share/common-licenses/GPL-3) for STEPS steps (300), printing the
 * loss and steps/second, then prints a short sample. With
 * --data-parallel, run under `mpirun -np N`: every rank trains on its own
 * batches and the gradients are averaged across the ranks; --zero (implies
 * --data-parallel) also splits AdamW's state across them (ZeRO-1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

int main(int argc, char **argv) {
  const char *pos[3] = {"/usr/share/common-licenses/GPL-3", NULL, NULL};
  int n_pos = 0, data_parallel = 0, zero = 0, steps = 300;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--data-parallel")) {
      data_parallel = 1;
    } else if (!strcmp(argv[i], "--zero")) {
      data_parallel = zero = 1;
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = atoi(argv[++i]);
    } else if (argv[i][0] == '-' && argv[i][1] == '-') {
      fprintf(stderr, "example_gpt: unknown option %s\n"
              "usage: example_gpt [--data-parallel] [--zero] [--steps N] [TEXT [STEPS [THREADS]]]\n",
              argv[i]);
      return 2;
    } else if (n_pos < 3) {
      pos[n_pos++] = argv[i];
    }
  }
  if (pos[1]) steps = atoi(pos[1]);
  int threads = pos[2] ? atoi(pos[2]) : 0;
  if (steps <= 0) steps = 300;
  if (data_parallel) return gpt_run_data_parallel(pos[0], steps, 25, threads, 200, zero);
  return gpt_run(pos[0], steps, 25, threads, 200);
}
