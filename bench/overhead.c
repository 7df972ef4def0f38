/* bench overhead: the cost of one step of a replayed plan. A chain of 1000
 * tiny elementwise ops on 64 floats runs compiled without fusion (every
 * node a step: this measures dispatch), compiled with fusion, and in the
 * interpreter, at 1 and 2 threads. */
#include <math.h>
#include <stdio.h>

#include "bench_util.h"
#include "models.h"

enum { N_OPS = 1000, N_ELEMS = 64 };

static loom_value_t scalar(loom_graph_t *g, float v) {
  loom_tensor_t *t;
  loom_value_t out;
  BENCH_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &v, sizeof v, &t));
  BENCH_TRY(loom_graph_constant(g, t, &out));
  loom_tensor_destroy(t);
  return out;
}

/* x -> (+0.5, *0.75, relu, -0.25, ...) 1000 times: constants other than 0
 * and 1, so that no algebraic rule removes a node. */
static loom_graph_t *build_chain(void) {
  loom_graph_t *g;
  loom_value_t h, half, three_q, quarter;
  BENCH_TRY(loom_graph_create(&g));
  BENCH_TRY(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){N_ELEMS}, &h));
  half = scalar(g, 0.5f);
  three_q = scalar(g, 0.75f);
  quarter = scalar(g, 0.25f);
  for (int i = 0; i < N_OPS; i++) {
    switch (i % 4) {
      case 0: BENCH_TRY(loom_add(g, h, half, &h)); break;
      case 1: BENCH_TRY(loom_mul(g, h, three_q, &h)); break;
      case 2: BENCH_TRY(loom_relu(g, h, &h)); break;
      default: BENCH_TRY(loom_sub(g, h, quarter, &h)); break;
    }
  }
  BENCH_TRY(loom_graph_output(g, h));
  return g;
}

typedef struct run_ctx {
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *in, *out;
} run_ctx_t;

static void run_compiled(void *arg) {
  run_ctx_t *c = arg;
  BENCH_TRY(loom_executable_run(c->e, 1, &c->in, 1, &c->out));
}

static void run_interp(void *arg) {
  run_ctx_t *c = arg;
  loom_tensor_t *out;
  BENCH_TRY(loom_interpret(c->g, 1, &c->in, 1, &out));
  loom_tensor_destroy(out);
}

/* Nanoseconds per node of the compiled chain; NaN when it does not
 * compile (a note on stderr says why). */
static double compiled_ns(run_ctx_t *c, int fusion, int threads) {
  loom_compile_options_t o = bench_options(fusion, threads);
  if (loom_compile(c->g, &o, &c->e) != LOOM_OK) {
    fprintf(stderr, "bench overhead: compile failed: %s\n", loom_last_error());
    return NAN;
  }
  BENCH_TRY(loom_executable_new_output(c->e, 0, &c->out));
  double ms = bench_time_ms(run_compiled, c, 100, 200, 300);
  loom_tensor_destroy(c->out);
  loom_executable_destroy(c->e);
  return ms * 1e6 / loom_graph_num_nodes(c->g);
}

int main(void) {
  run_ctx_t c = {.g = build_chain()};
  c.in = bench_input(1, (int64_t[]){N_ELEMS});
  double interp = bench_time_ms(run_interp, &c, 3, 20, 300) * 1e6 / loom_graph_num_nodes(c.g);
  for (int threads = 1; threads <= 2; threads++) {
    bench_json_t j;
    bench_json_begin(&j, "overhead");
    bench_json_num(&j, "threads", threads);
    bench_json_num(&j, "ns_per_node", compiled_ns(&c, 0, threads));
    bench_json_num(&j, "ns_per_node_fused", compiled_ns(&c, 1, threads));
    bench_json_num(&j, "interp_ns_per_node", interp);
    bench_json_end(&j);
  }
  loom_tensor_destroy(c.in);
  loom_graph_destroy(c.g);
  return 0;
}
