/* Random graphs for differential testing: a seed gives a graph (a random
 * DAG of elementwise, reduction, composite, layout, contraction and cast
 * ops over f32, f64, i32, i64 and bool, with broadcasting), input data,
 * and a bound on the rounding error of every output. The interpreter is
 * the oracle; each compiled configuration must agree with it.
 *
 * The generator tracks, for every value, an interval holding all its
 * elements (so that log, sqrt, div, pow only see their domain and
 * integers never overflow) and a first-order bound on its rounding error
 * (0: bit-exact in any correct implementation). Ops whose result jumps
 * (floor, compare, cast to int, argmax, ...) only take bit-exact inputs,
 * so that a legitimate rounding difference never flips them.
 *
 * Shared by tests/test_differential.c and tools/difftest.c. */
#ifndef LOOM_TESTS_RANDOM_GRAPH_H
#define LOOM_TESTS_RANDOM_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "loom/loom.h"

#define RG_MAX_INPUTS 24
#define RG_MAX_OUTPUTS 8

typedef struct rg_case {
  uint64_t seed;
  loom_graph_t *graph;
  int n_inputs;
  loom_tensor_t *inputs[RG_MAX_INPUTS]; /* some are strided views */
  void *input_memory[RG_MAX_INPUTS];    /* storage of the strided views */
  int n_outputs;
  double out_err[RG_MAX_OUTPUTS]; /* rounding-error bound; 0: exact */
  int n_nodes;
  char error[256]; /* why building failed (a generator or builder bug) */
} rg_case_t;

/* Builds the case of `seed`. On failure c->error says why. */
loom_status_t rg_case_build(uint64_t seed, rg_case_t *c);
void rg_case_free(rg_case_t *c);

/* A way to compile. */
typedef struct rg_config {
  const char *name;
  int fusion, passes, use_cc, threads;
} rg_config_t;

typedef enum rg_verdict {
  RG_PASS,
  RG_MISMATCH,      /* an output differs beyond its tolerance */
  RG_COMPILE_ERROR, /* loom_compile failed */
  RG_RUN_ERROR,     /* loom_executable_run or the interpreter failed */
  RG_BUILD_ERROR,   /* the graph could not be built */
  RG_CODE_LOST,     /* generated code failed to compile or load although a C
                       compiler is present, and its steps fell back to
                       reference kernels (steps without a code generation
                       rule run them by design: no verdict) */
  RG_VERDICT_COUNT
} rg_verdict_t;

const char *rg_verdict_name(rg_verdict_t v);

/* Interprets c, compiles it with cfg, runs it twice and compares every
 * output. A failure is reported on `log` with the seed, the config, the
 * graph and the first differing element, or the compiler's message. */
rg_verdict_t rg_case_check(rg_case_t *c, const rg_config_t *cfg, FILE *log);

/* The configurations seed runs under (default always; fusion off,
 * passes off and threads vary with the seed). Returns their count. */
int rg_configs_for_seed(uint64_t seed, rg_config_t *out, int max);

/* Builds and checks seed under all its configs; the worst verdict. */
rg_verdict_t rg_run_seed(uint64_t seed, FILE *log);

/* How many times each generator op was emitted since the process began
 * (for coverage checks): names[i] and counts[i], n entries. */
int rg_coverage(const char ***names, const int **counts);

#endif
