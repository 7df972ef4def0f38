/* Lost generated code is visible: when the C compiler is missing, rejects
 * the module or leaves no object, loom_compile still returns a working
 * executable (reference kernels), and loom_executable_info's fallback and
 * fallback_reason, loom_executable_explain and LOOM_LOG=compile say what
 * happened, with the compiler's own words. Stand-in compilers are shell
 * scripts; the toolchain's stage report is checked below them. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/toolchain.h"
#include "core/log.h"
#include "harness.h"

static char dir[64]; /* this test's temporary directory */

/* A stand-in compiler: a script in dir running `body`. */
static const char *script(const char *name, const char *body) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return "/nonexistent";
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  CHECK(chmod(path, 0755) == 0);
  return path;
}

/* A graph with generated code: y = exp(x) * 2 + x, summed per row. */
static loom_graph_t *small_graph(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, e, two, m, y, s;
  loom_tensor_t *t2 = test_tensor(LOOM_F32, 0, NULL, (double[]){2});
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &x));
  CHECK_OK(loom_exp(g, x, &e));
  CHECK_OK(loom_graph_constant(g, t2, &two));
  CHECK_OK(loom_mul(g, e, two, &m));
  CHECK_OK(loom_add(g, m, x, &y));
  CHECK_OK(loom_sum(g, y, 1, (int64_t[]){1}, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  loom_tensor_destroy(t2);
  return g;
}

typedef struct compiled {
  loom_executable_t *e;
  loom_executable_info_t info;
  char *explain;
} compiled_t;

/* Compiles g with LOOM_CC = cc (NULL: the default) and checks that the
 * executable gives the interpreter's answer. */
static compiled_t compile_with(loom_graph_t *g, const char *cc, int use_cc) {
  compiled_t r = {.info = LOOM_EXECUTABLE_INFO_INIT};
  if (cc) setenv("LOOM_CC", cc, 1);
  else unsetenv("LOOM_CC");
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = use_cc;
  CHECK_OK(loom_compile(g, &o, &r.e));
  unsetenv("LOOM_CC");
  if (!r.e) return r;
  CHECK_OK(loom_executable_info(r.e, &r.info));
  CHECK_OK(loom_executable_explain(r.e, &r.explain));
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 5}, -1, 1), *want = NULL,
                *got = NULL;
  CHECK_OK(loom_interpret(g, 1, &x, 1, &want));
  CHECK_OK(loom_executable_new_output(r.e, 0, &got));
  CHECK_OK(loom_executable_run(r.e, 1, &x, 1, &got));
  for (int64_t i = 0; want && got && i < 3; i++)
    CHECK_NEAR(test_get(got, i), test_get(want, i), 1e-4, 1e-6);
  loom_tensor_destroy(x), loom_tensor_destroy(want), loom_tensor_destroy(got);
  return r;
}

static void compiled_free(compiled_t *r) {
  loom_free(r->explain);
  loom_executable_destroy(r->e);
}

static void working_compiler_loses_nothing(void) {
  loom_graph_t *g = small_graph();
  compiled_t r = compile_with(g, NULL, 1);
  if (r.info.fallback == LOOM_FALLBACK_NO_CC) {
    printf("  skipped: no C compiler\n");
  } else {
    CHECK(r.info.fallback == LOOM_FALLBACK_NONE);
    CHECK(r.info.fallback_reason && !strcmp(r.info.fallback_reason, ""));
    CHECK(r.info.n_generated > 0);
    CHECK(r.explain && !strstr(r.explain, "generated code lost"));
  }
  compiled_free(&r);
  loom_graph_destroy(g);
}

/* A compiler that rejects the module: its message reaches the user. */
static void rejected_module_is_reported(void) {
  loom_graph_t *g = small_graph();
  const char *cc = script("rejecting-cc", "echo 'module.c:7:3: error: stand-in rejection' >&2\n"
                                          "exit 1");
  compiled_t r = compile_with(g, cc, 1);
  CHECK(r.info.fallback == LOOM_FALLBACK_CC_FAILED);
  CHECK(r.info.fallback_reason && strstr(r.info.fallback_reason, "stand-in rejection"));
  CHECK(r.info.fallback_reason && strstr(r.info.fallback_reason, "exit status 1"));
  CHECK(r.info.n_generated == 0);
  CHECK(r.explain && strstr(r.explain, "generated code lost (cc-failed)"));
  CHECK(r.explain && strstr(r.explain, "stand-in rejection"));
  /* The code it rejected is there to report. */
  CHECK(r.explain && strstr(r.explain, "loom_group_"));
  compiled_free(&r);
  loom_graph_destroy(g);
}

static void missing_compiler_is_reported(void) {
  loom_graph_t *g = small_graph();
  compiled_t r = compile_with(g, "/nonexistent/loom-test-cc", 1);
  CHECK(r.info.fallback == LOOM_FALLBACK_NO_CC);
  CHECK(r.info.fallback_reason && strstr(r.info.fallback_reason, "/nonexistent/loom-test-cc"));
  CHECK(r.explain && strstr(r.explain, "generated code lost (no-cc)"));
  compiled_free(&r);
  loom_graph_destroy(g);
}

/* A compiler that exits 0 without writing the object. */
static void missing_object_is_reported(void) {
  loom_graph_t *g = small_graph();
  compiled_t r = compile_with(g, script("silent-cc", "exit 0"), 1);
  CHECK(r.info.fallback == LOOM_FALLBACK_NO_MODULE);
  CHECK(r.info.fallback_reason && r.info.fallback_reason[0] != '\0');
  compiled_free(&r);
  loom_graph_destroy(g);
}

static void use_cc_zero_is_reported(void) {
  loom_graph_t *g = small_graph();
  compiled_t r = compile_with(g, NULL, 0);
  CHECK(r.info.fallback == LOOM_FALLBACK_DISABLED);
  CHECK(r.info.fallback_reason && strstr(r.info.fallback_reason, "use_cc"));
  compiled_free(&r);
  loom_graph_destroy(g);
}

/* Reference kernels by design are no fallback: an op without a code
 * generation rule, a graph only the interpreter runs. */
static void reference_by_design_is_no_fallback(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, nz, s, lse;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &x));
  CHECK_OK(loom_logsumexp(g, x, 0, NULL, 0, &lse));
  CHECK_OK(loom_graph_output(g, lse));
  compiled_t r = compile_with(g, NULL, 1);
  CHECK(r.info.fallback == LOOM_FALLBACK_NONE || r.info.fallback == LOOM_FALLBACK_NO_CC);
  compiled_free(&r);
  loom_graph_destroy(g);
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &x));
  CHECK_OK(loom_nonzero(g, x, &nz));
  CHECK_OK(loom_sum(g, nz, 0, NULL, 0, &s));
  CHECK_OK(loom_graph_output(g, s));
  loom_executable_t *e = NULL;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_compile(g, NULL, &e));
  CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.interpreted && info.fallback == LOOM_FALLBACK_NONE);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* A branch of an if whose module the compiler rejects: the outer
 * executable reports it (the outer graph itself has no generated code). */
static void subgraph_loss_is_reported(void) {
  loom_graph_t *g, *branch[2];
  CHECK_OK(loom_graph_create(&g));
  for (int k = 0; k < 2; k++) {
    loom_value_t a, y;
    CHECK_OK(loom_graph_create(&branch[k]));
    CHECK_OK(loom_graph_input(branch[k], "a", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &a));
    CHECK_OK(k ? loom_exp(branch[k], a, &y) : loom_tanh(branch[k], a, &y));
    CHECK_OK(loom_graph_output(branch[k], y));
  }
  loom_value_t c, x, y;
  CHECK_OK(loom_graph_input(g, "c", LOOM_BOOL, 0, NULL, &c));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){3, 5}, &x));
  CHECK_OK(loom_if(g, c, branch[0], branch[1], 1, &x, 1, &y));
  CHECK_OK(loom_graph_output(g, y));
  setenv("LOOM_CC", script("rejecting-cc2", "echo 'stand-in branch error' >&2\nexit 1"), 1);
  loom_executable_t *e = NULL;
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_compile(g, NULL, &e));
  unsetenv("LOOM_CC");
  if (e) CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.fallback == LOOM_FALLBACK_CC_FAILED);
  CHECK(info.fallback_reason && strstr(info.fallback_reason, "stand-in branch error"));
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* LOOM_LOG=compile carries the compiler's message. */
static void log_names_the_failure(void) {
  loom_graph_t *g = small_graph();
  const char *cc = script("rejecting-cc3", "echo 'stand-in logged error' >&2\nexit 1");
  test_capture_begin("compile");
  compiled_t r = compile_with(g, cc, 1);
  char *text = test_capture_end();
  CHECK(strstr(text, "loom[compile]: the C compiler failed on the generated code") != NULL);
  CHECK(strstr(text, "[cc-failed]") != NULL);
  CHECK(strstr(text, "stand-in logged error") != NULL);
  free(text);
  compiled_free(&r);
  loom_graph_destroy(g);
}

/* Below the executable: where cpu_module_build_staged says a build failed. */
static void toolchain_names_the_stage(void) {
  static const char source[] = "int answer(void) { return 42; }\n";
  static const struct {
    const char *cc;
    cpu_build_stage_t stage;
  } cases[] = {
      {"/nonexistent/loom-test-cc", CPU_BUILD_NO_CC},
      {"rejecting-cc", CPU_BUILD_CC_FAILED},
      {"silent-cc", CPU_BUILD_NO_MODULE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s%s%s", cases[i].cc[0] == '/' ? "" : dir,
             cases[i].cc[0] == '/' ? "" : "/", cases[i].cc);
    setenv("LOOM_CC", path, 1);
    cpu_module_t *m = NULL;
    cpu_build_stage_t stage = CPU_BUILD_DONE;
    CHECK(cpu_module_build_staged(source, (int64_t)strlen(source), NULL, NULL, 0, &m, &stage) != LOOM_OK);
    CHECK(stage == cases[i].stage);
    CHECK(m == NULL);
  }
  unsetenv("LOOM_CC");
  cpu_module_t *m = NULL;
  cpu_build_stage_t stage = CPU_BUILD_NO_CC;
  if (cpu_module_build_staged(source, (int64_t)strlen(source), NULL, NULL, 0, &m, &stage) == LOOM_OK)
    CHECK(stage == CPU_BUILD_DONE);
  cpu_module_release(m);
  CHECK(!strcmp(loom_fallback_name(LOOM_FALLBACK_CC_FAILED), "cc-failed"));
  CHECK(!strcmp(loom_fallback_name((loom_fallback_t)99), "?"));
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-test-fallback-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  TEST_RUN(working_compiler_loses_nothing);
  TEST_RUN(rejected_module_is_reported);
  TEST_RUN(missing_compiler_is_reported);
  TEST_RUN(missing_object_is_reported);
  TEST_RUN(use_cc_zero_is_reported);
  TEST_RUN(reference_by_design_is_no_fallback);
  TEST_RUN(subgraph_loss_is_reported);
  TEST_RUN(log_names_the_failure);
  TEST_RUN(toolchain_names_the_stage);
  static const char *names[] = {"rejecting-cc", "rejecting-cc2", "rejecting-cc3", "silent-cc",
                                "log.txt"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
  return test_summary();
}
