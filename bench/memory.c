/* bench memory: the memory plan of each example model: the arena, the
 * lower bound (the most bytes live at one step) and the naive sum of
 * every intermediate buffer. */
#include <math.h>
#include <stdio.h>

#include "bench_util.h"

int main(void) {
  for (int i = 0; i < bench_n_models; i++) {
    const bench_model_t *m = &bench_models[i];
    loom_graph_t *g = bench_build_model(m);
    loom_executable_t *e;
    loom_executable_info_t info = {.size = sizeof(loom_executable_info_t), .arena_bytes = -1};
    if (loom_compile(g, NULL, &e) == LOOM_OK) {
      BENCH_TRY(loom_executable_info(e, &info));
      loom_executable_destroy(e);
    } else {
      fprintf(stderr, "bench memory: %s: %s\n", m->name, loom_last_error());
    }
    int ok = info.arena_bytes >= 0;
    bench_json_t j;
    bench_json_begin(&j, "memory");
    bench_json_str(&j, "model", m->name);
    bench_json_num(&j, "arena_bytes", ok ? (double)info.arena_bytes : NAN);
    bench_json_num(&j, "lower_bound_bytes", ok ? (double)info.lower_bound_bytes : NAN);
    bench_json_num(&j, "naive_bytes", ok ? (double)info.naive_bytes : NAN);
    bench_json_end(&j);
    loom_graph_destroy(g);
  }
  return 0;
}
