/* Step timings (LOOM_LOG=steps): a profiled run computes what an
 * unprofiled one does, the report names every step once with the number
 * of runs, and a profile that cannot be allocated fails the run with a
 * message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "harness.h"

/* y = sum(relu(x @ w) * 2): a contraction and a reduction step. */
static loom_graph_t *small_graph(void) {
  loom_graph_t *g;
  loom_value_t x, w, h, r, s, y;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){16, 32}, &x));
  CHECK_OK(loom_graph_input(g, "w", LOOM_F32, 2, (loom_dim_t[]){32, 8}, &w));
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &h));
  CHECK_OK(loom_relu(g, h, &r));
  CHECK_OK(loom_add(g, r, r, &s));
  CHECK_OK(loom_sum(g, s, 1, (int64_t[]){1}, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  return g;
}

static void set_log(const char *spec) {
  if (spec) setenv("LOOM_LOG", spec, 1);
  else unsetenv("LOOM_LOG");
  core_log_reload();
}

/* Destroys e with stderr captured; returns what was written. */
static char *destroy_capturing_stderr(loom_executable_t *e) {
  test_capture_begin(NULL);
  loom_executable_destroy(e);
  char *text = test_capture_end();
  CHECK(text && text[0]);
  return text;
}

static void profiled_runs_match_and_report_every_step(void) {
  loom_graph_t *g = small_graph();
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){32, 8}, -1, 1)};
  loom_executable_t *e = NULL;
  loom_tensor_t *plain = NULL, *timed = NULL;
  CHECK_OK(loom_compile(g, NULL, &e));
  if (!e) goto done;
  CHECK_OK(loom_executable_new_output(e, 0, &plain));
  CHECK_OK(loom_executable_new_output(e, 0, &timed));
  CHECK_OK(loom_executable_run(e, 2, in, 1, &plain));
  set_log("steps");
  for (int i = 0; i < 3; i++) CHECK_OK(loom_executable_run(e, 2, in, 1, &timed));
  CHECK(memcmp(loom_tensor_data(plain), loom_tensor_data(timed), 16 * sizeof(float)) == 0);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(e, &info));
  char *text = destroy_capturing_stderr(e);
  if (text) {
    CHECK(strstr(text, "3 runs") != NULL);
    CHECK(strstr(text, "sum of the fastest") != NULL);
    CHECK(strstr(text, "contraction [matmul") != NULL);
    CHECK(strstr(text, "GFLOP/s in contractions") != NULL);
    int listed = 0;
    for (const char *p = text; (p = strstr(p, "  step ")) != NULL; p++) listed++;
    CHECK(listed == info.n_generated + info.n_reference);
    /* The matmul's step line has a rate after its share, the reduction's
     * none: "mean fastest share% [GFLOP/s] step i ..." */
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
      const char *pct = strchr(line, '%');
      if (!pct || !strstr(line, "  step ")) continue;
      double rate = 0;
      int has_rate = sscanf(pct + 1, "%lf", &rate) == 1;
      if (strstr(line, "contraction [matmul")) CHECK(has_rate && rate > 0);
      else CHECK(!has_rate);
      lines++;
    }
    CHECK(lines == listed);
  }
  free(text);
done:
  set_log(NULL);
  loom_tensor_destroy(plain);
  loom_tensor_destroy(timed);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

static void profile_out_of_memory_fails_the_run(void) {
  loom_graph_t *g = small_graph();
  loom_tensor_t *in[2] = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){32, 8}, -1, 1)};
  loom_executable_t *e = NULL;
  loom_tensor_t *out = NULL;
  CHECK_OK(loom_compile(g, NULL, &e));
  if (e) {
    CHECK_OK(loom_executable_new_output(e, 0, &out));
    set_log("steps");
    for (int64_t n = 0; n < 3; n++) {
      core_alloc_fail_after(n);
      CHECK_ERR(loom_executable_run(e, 2, in, 1, &out), LOOM_ERR_NOMEM, "LOOM_LOG=steps");
      core_alloc_fail_after(-1);
    }
    CHECK_OK(loom_executable_run(e, 2, in, 1, &out));
    set_log(NULL);
    loom_executable_destroy(e);
  }
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(profiled_runs_match_and_report_every_step);
  TEST_RUN(profile_out_of_memory_fails_the_run);
  return test_summary();
}
