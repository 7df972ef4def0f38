/* loom_difftest N SEED: the long differential run. Builds N random graphs
 * (seeds SEED .. SEED+N-1), runs each through the interpreter and the
 * compiler in several configurations, and reports every disagreement with
 * its seed and graph. Exit status 1 if any seed failed. */
#include <stdio.h>
#include <stdlib.h>

#include "random_graph.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s N SEED\n  runs N random graphs from seed SEED\n", argv[0]);
    return 2;
  }
  long long n = atoll(argv[1]);
  unsigned long long first = strtoull(argv[2], NULL, 10);
  int counts[RG_VERDICT_COUNT] = {0};
  long long failed_seeds[32];
  int n_failed = 0;
  for (long long i = 0; i < n; i++) {
    uint64_t seed = first + (uint64_t)i;
    rg_verdict_t v = rg_run_seed(seed, stderr);
    counts[v]++;
    if (v != RG_PASS && n_failed < 32) failed_seeds[n_failed++] = (long long)seed;
    if ((i + 1) % 100 == 0) fprintf(stderr, "difftest: %lld/%lld graphs\n", i + 1, n);
  }
  printf("difftest: %lld graphs from seed %llu:", n, first);
  for (int v = 0; v < RG_VERDICT_COUNT; v++)
    printf(" %s %d%s", rg_verdict_name((rg_verdict_t)v), counts[v],
           v < RG_VERDICT_COUNT - 1 ? "," : "\n");
  if (n_failed) {
    printf("failing seeds:");
    for (int i = 0; i < n_failed; i++) printf(" %lld", failed_seeds[i]);
    printf("\n");
  }
  return counts[RG_PASS] == n ? 0 : 1;
}
