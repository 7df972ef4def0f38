/* LOOM_CPU_ISA caps the instruction set (core/isa.h). The test suite runs
 * this program with the variable unset, at avx2, at portable and at a
 * value it does not know, which caps nothing (CMakeLists.txt): every
 * kernel family names the instance the cap and
 * the CPU allow, no wider one can be forced, and a compiled graph (conv2d,
 * matmul, a fused elementwise chain, a reduction), whose generated code
 * is compiled within the cap, matches the reference interpreter, as does a
 * long elementwise chain, whose blocks of lanes are sized per ISA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/gemm_impl.h"
#include "harness.h"
#include "loom/loom.h"
#include "loom/ops.h"

static const char *cap(void) {
  const char *v = getenv("LOOM_CPU_ISA");
  return v && (!strcmp(v, "avx2") || !strcmp(v, "portable")) ? v : "avx512";
}

static int cpu_has_avx512(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

static int cpu_has_avx2(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The widest of avx512, avx2, portable that the cap and the CPU allow. */
static const char *expected(void) {
  const char *c = cap();
  if (!strcmp(c, "avx512") && cpu_has_avx512()) return "avx512";
  if (strcmp(c, "portable") && cpu_has_avx2()) return "avx2";
  return "portable";
}

static void kernels_within_the_cap(void) {
  const char *want = expected();
  printf("LOOM_CPU_ISA=%s: %s\n", getenv("LOOM_CPU_ISA") ? getenv("LOOM_CPU_ISA") : "(unset)",
         want);
  CHECK(!strcmp(loom_target_isa(NULL), want));
  CHECK(!strcmp(kern_gemm_isa(), want));
  /* Winograd's transforms call their portable instance "base"; the
   * direct kernel has none below AVX2. */
  CHECK(!strcmp(kern_winograd_isa(), strcmp(want, "portable") ? want : "base"));
  const char *direct = kern_conv_direct_isa();
  if (!strcmp(want, "portable")) CHECK(direct == NULL);
  else CHECK(direct && !strcmp(direct, want));
  if (strcmp(want, "avx512")) {
    CHECK(!kern_gemm_force_isa("avx512"));
    CHECK(!kern_winograd_force_isa("avx512"));
    CHECK(!kern_conv_direct_force_isa("avx512"));
  }
  if (!strcmp(want, "portable")) {
    CHECK(!kern_gemm_force_isa("avx2"));
    CHECK(!kern_winograd_force_isa("avx2"));
  }
}

static loom_value_t input(loom_graph_t *g, const char *name, int rank, const int64_t *dims) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, name, LOOM_F32, rank, dims, &v));
  return v;
}

/* g's one output, compiled (its generated code within the cap, no
 * fallback) against the interpreter's; destroys g and the inputs. */
static void check_compiled(loom_graph_t *g, int n_in, loom_tensor_t **in, double tol) {
  loom_tensor_t *want = NULL, *got = NULL;
  CHECK_OK(loom_interpret(g, n_in, in, 1, &want));
  loom_executable_t *ex = NULL;
  CHECK_OK(loom_compile(g, NULL, &ex));
  if (ex) {
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    CHECK_OK(loom_executable_info(ex, &info));
    CHECK(!info.fallback);
    CHECK_OK(loom_executable_new_output(ex, 0, &got));
    CHECK_OK(loom_executable_run(ex, n_in, in, 1, &got));
  }
  if (want && got) {
    int64_t n = loom_tensor_numel(want);
    double *w = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = test_get(want, i);
    CHECK_TENSOR(got, w, n, tol, tol);
    free(w);
  }
  loom_tensor_destroy(want);
  loom_tensor_destroy(got);
  loom_executable_destroy(ex);
  for (int i = 0; i < n_in; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

static void compiled_graph_matches_the_interpreter(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[4] = {2, 16, 12, 12}, sw[4] = {32, 16, 3, 3}, sm[2] = {32, 24}, last[1] = {-1};
  loom_value_t x = input(g, "x", 4, sx), w = input(g, "w", 4, sw), m = input(g, "m", 2, sm);
  loom_value_t y, r, t, e, s, flat, p;
  loom_conv_params_t cp = {.pads = {1, 1, 1, 1}};
  CHECK_OK(loom_conv2d(g, x, w, 0, x, &cp, &y));
  CHECK_OK(loom_relu(g, y, &r));
  int64_t shape[2] = {2 * 32 * 12 * 12 / 32, 32};
  CHECK_OK(loom_reshape(g, r, 2, shape, &flat));
  CHECK_OK(loom_matmul(g, flat, m, 0, 0, &p));
  CHECK_OK(loom_tanh(g, p, &t));
  CHECK_OK(loom_exp(g, t, &e));
  CHECK_OK(loom_sum(g, e, 1, last, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  test_seed(7);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 4, sx, -1, 1),
                          test_rand_tensor(LOOM_F32, 4, sw, -0.3, 0.3),
                          test_rand_tensor(LOOM_F32, 2, sm, -0.3, 0.3)};
  check_compiled(g, 3, in, 1e-4);
}

/* tanh(x + b) * x, then exp and a maximum, over 4 x 300 and over 1000
 * elements: enough work per element to run in blocks (c_elementwise.c),
 * with a tail after the last whole block at every block size. */
static void long_chain_matches_the_interpreter(void) {
  for (int rank = 1; rank <= 2; rank++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    int64_t sx[2] = {4, 300}, sb[2] = {1, 300};
    if (rank == 1) sx[0] = sb[0] = 1000;
    loom_value_t x = input(g, "x", rank, sx), b = input(g, "b", rank, sb), t, u, v, e, y;
    CHECK_OK(loom_add(g, x, b, &t));
    CHECK_OK(loom_tanh(g, t, &u));
    CHECK_OK(loom_mul(g, u, x, &v));
    CHECK_OK(loom_exp(g, v, &e));
    CHECK_OK(loom_maximum(g, e, t, &y));
    CHECK_OK(loom_graph_output(g, y));
    test_seed(17);
    loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, rank, sx, -2, 2),
                            test_rand_tensor(LOOM_F32, rank, sb, -2, 2)};
    check_compiled(g, 2, in, 1e-5);
  }
}

int main(void) {
  TEST_RUN(kernels_within_the_cap);
  TEST_RUN(compiled_graph_matches_the_interpreter);
  TEST_RUN(long_chain_matches_the_interpreter);
  return test_summary();
}
