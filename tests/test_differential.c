/* The differential tester: random graphs (tests/random_graph.c) run by the
 * interpreter (the oracle) and by compiled executables in several
 * configurations must agree within each output's rounding-error bound.
 * LOOM_DIFF_GRAPHS sets how many graphs (default 60, a fifth under
 * sanitizers); `loom_difftest N SEED` is the long run. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "random_graph.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static int graph_count(void) {
  const char *env = getenv("LOOM_DIFF_GRAPHS");
  if (env && atoi(env) > 0) return atoi(env);
  return SANITIZED ? 12 : 60;
}

/* The same seed gives the same graph, and another seed another graph. */
static void generator_is_deterministic(void) {
  rg_case_t a, b, c;
  CHECK_OK(rg_case_build(17, &a));
  CHECK_OK(rg_case_build(17, &b));
  CHECK_OK(rg_case_build(18, &c));
  char *ta = NULL, *tb = NULL, *tc = NULL;
  CHECK_OK(loom_graph_print(a.graph, &ta));
  CHECK_OK(loom_graph_print(b.graph, &tb));
  CHECK_OK(loom_graph_print(c.graph, &tc));
  CHECK(ta && tb && !strcmp(ta, tb));
  CHECK(ta && tc && strcmp(ta, tc) != 0);
  CHECK(a.n_inputs == b.n_inputs && a.n_outputs == b.n_outputs);
  for (int i = 0; i < a.n_inputs; i++) {
    int64_t n = loom_tensor_numel(a.inputs[i]);
    CHECK(n == loom_tensor_numel(b.inputs[i]));
    for (int64_t k = 0; k < n; k++) CHECK(test_get(a.inputs[i], k) == test_get(b.inputs[i], k));
  }
  loom_free(ta), loom_free(tb), loom_free(tc);
  rg_case_free(&a), rg_case_free(&b), rg_case_free(&c);
}

/* Every graph is valid, sized as asked (5-40 nodes, give or take the
 * fixers), and the interpreter runs it. */
static void generated_graphs_are_valid(void) {
  for (uint64_t seed = 1000; seed < 1040; seed++) {
    rg_case_t c;
    loom_status_t s = rg_case_build(seed, &c);
    if (s != LOOM_OK) test_fail(__FILE__, __LINE__, "seed %llu: %s", (unsigned long long)seed, c.error);
    CHECK(c.n_nodes >= 5 && c.n_nodes <= 80);
    CHECK(c.n_outputs >= 1);
    rg_case_free(&c);
  }
}

/* The compiled executable agrees with the interpreter on every graph. */
static void compiled_agrees_with_interpreter(void) {
  int n = graph_count(), counts[RG_VERDICT_COUNT] = {0};
  for (int i = 0; i < n; i++) {
    rg_verdict_t v = rg_run_seed((uint64_t)i + 1, stderr);
    counts[v]++;
    test_checks++;
    if (v != RG_PASS)
      test_fail(__FILE__, __LINE__, "seed %d: %s (details above)", i + 1, rg_verdict_name(v));
  }
  printf("  %d graphs: %d pass, %d mismatch, %d compile error, %d run error, %d build error, "
         "%d code lost\n", n, counts[RG_PASS], counts[RG_MISMATCH], counts[RG_COMPILE_ERROR],
         counts[RG_RUN_ERROR], counts[RG_BUILD_ERROR], counts[RG_CODE_LOST]);
}

/* The generated graphs cover the op families the issue names. */
static void generator_covers_the_ops(void) {
  static const char *want[] = {"exp", "log", "add", "mul", "div", "sum", "max", "mean", "prod",
                               "softmax", "layer_norm", "reshape", "transpose", "slice",
                               "concat", "expand", "squeeze", "unsqueeze", "pad", "matmul",
                               "conv2d", "cast", "where", "argmax", "split"};
  const char **names;
  const int *counts;
  int n = rg_coverage(&names, &counts);
  for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
    int found = 0;
    for (int i = 0; i < n; i++) found |= !strcmp(names[i], want[k]) && counts[i] > 0;
    if (!found) test_fail(__FILE__, __LINE__, "no generated graph used %s", want[k]);
    test_checks++;
  }
}

int main(void) {
  TEST_RUN(generator_is_deterministic);
  TEST_RUN(generated_graphs_are_valid);
  TEST_RUN(compiled_agrees_with_interpreter);
  TEST_RUN(generator_covers_the_ops);
  return test_summary();
}
