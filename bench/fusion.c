/* bench fusion: a chain of 20 elementwise ops over 16M floats, compiled
 * (fused into one pass over memory), in the interpreter (one pass per op),
 * and a memcpy of the same bytes once: the bound a fused kernel nears. At 1
 * and 2 threads, each against a memcpy on as many threads (each copies its
 * share), since two cores draw more bandwidth than one; vs_memcpy is the
 * median of the compiled time over the memcpy time in alternated rounds.
 *
 * The chain's arithmetic is a bound of its own: 20 vector operations per
 * vector of input can take longer than moving the vector's bytes (on
 * AVX2, 8 floats a vector). compute_ms is the same compiled chain over a
 * slice that stays in L2, at one thread, scaled to the whole input and
 * divided by the threads; vs_bound is the compiled time over the larger
 * of the two bounds. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "bench_util.h"

enum { N_OPS = 20 };
#define N_ELEMS ((int64_t)1 << 24)
#define N_CACHED ((int64_t)1 << 15) /* 128 KiB in, 128 KiB out */

/* x -> 20 cheap ops (add, mul, max with a constant, in turn). */
static loom_graph_t *build_chain(int64_t n) {
  loom_graph_t *g;
  loom_value_t h, c[3];
  static const float consts[3] = {0.5f, 0.999f, -0.25f};
  BENCH_TRY(loom_graph_create(&g));
  BENCH_TRY(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){n}, &h));
  for (int k = 0; k < 3; k++) {
    loom_tensor_t *t;
    BENCH_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &consts[k], sizeof consts[k], &t));
    BENCH_TRY(loom_graph_constant(g, t, &c[k]));
    loom_tensor_destroy(t);
  }
  for (int i = 0; i < N_OPS; i++) {
    loom_status_t (*op)(loom_graph_t *, loom_value_t, loom_value_t, loom_value_t *) =
        i % 3 == 0 ? loom_add : i % 3 == 1 ? loom_mul : loom_maximum;
    BENCH_TRY(op(g, h, c[i % 3], &h));
  }
  BENCH_TRY(loom_graph_output(g, h));
  return g;
}

typedef struct run_ctx {
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *in, *out;
  int threads;
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

typedef struct copy_part {
  char *dst;
  const char *src;
  size_t bytes;
} copy_part_t;

static void *copy_part(void *arg) {
  copy_part_t *p = arg;
  memcpy(p->dst, p->src, p->bytes);
  return NULL;
}

/* The copy split over c->threads threads (the caller one of them). */
static void run_memcpy(void *arg) {
  run_ctx_t *c = arg;
  size_t bytes = (size_t)N_ELEMS * 4, share = bytes / (size_t)c->threads;
  copy_part_t parts[2];
  pthread_t helper;
  for (int t = 0; t < c->threads; t++)
    parts[t] = (copy_part_t){(char *)loom_tensor_data(c->out) + share * (size_t)t,
                             (const char *)loom_tensor_data(c->in) + share * (size_t)t,
                             t + 1 == c->threads ? bytes - share * (size_t)t : share};
  bool helped = c->threads > 1 && pthread_create(&helper, NULL, copy_part, &parts[1]) == 0;
  copy_part(&parts[0]);
  if (helped) pthread_join(helper, NULL);
  else if (c->threads > 1) copy_part(&parts[1]);
}

/* The chain's time over N_ELEMS floats when memory costs nothing: one
 * thread over N_CACHED floats, scaled. */
static double compute_bound_ms(void) {
  run_ctx_t c = {.g = build_chain(N_CACHED), .threads = 1};
  c.in = bench_input(1, (int64_t[]){N_CACHED});
  loom_compile_options_t o = bench_options(1, 1);
  BENCH_TRY(loom_compile(c.g, &o, &c.e));
  BENCH_TRY(loom_executable_new_output(c.e, 0, &c.out));
  double ms = bench_time_ms(run_compiled, &c, 20, 200, 100) * (double)(N_ELEMS / N_CACHED);
  loom_tensor_destroy(c.out);
  loom_tensor_destroy(c.in);
  loom_executable_destroy(c.e);
  loom_graph_destroy(c.g);
  return ms;
}

/* Rounds of compiled and memcpy timings, alternated: this machine's
 * memory bandwidth drifts within seconds, so each ratio compares times
 * taken moments apart, and the medians are reported. */
enum { ROUNDS = 9 };

int main(void) {
  run_ctx_t c = {.g = build_chain(N_ELEMS)};
  c.in = bench_input(1, (int64_t[]){N_ELEMS});
  double interp = NAN, compute = compute_bound_ms();
  for (c.threads = 1; c.threads <= 2; c.threads++) {
    if (!bench_threads_wanted(c.threads)) continue;
    loom_compile_options_t o = bench_options(1, c.threads);
    if (loom_compile(c.g, &o, &c.e) != LOOM_OK) {
      fprintf(stderr, "bench fusion: compile failed: %s\n", loom_last_error());
      return 1;
    }
    loom_tensor_t *out;
    BENCH_TRY(loom_executable_new_output(c.e, 0, &out));
    double compiled[ROUNDS], copy[ROUNDS], ratio[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
      /* Both buffers touched first: page faults are not the copy's cost. */
      c.out = out;
      compiled[r] = bench_time_ms(run_compiled, &c, r == 0 ? 2 : 0, 5, 50);
      copy[r] = bench_time_ms(run_memcpy, &c, r == 0 ? 2 : 0, 5, 50);
      ratio[r] = compiled[r] / copy[r];
    }
    if (c.threads == 1) interp = bench_time_ms(run_interp, &c, 0, 1, 0);
    loom_tensor_destroy(out);
    loom_executable_destroy(c.e);
    bench_json_t j;
    bench_json_begin(&j, "fusion");
    bench_json_num(&j, "threads", c.threads);
    bench_json_num(&j, "compiled_ms", bench_median(compiled, ROUNDS));
    bench_json_num(&j, "interp_ms", c.threads == 1 ? interp : NAN);
    bench_json_num(&j, "memcpy_ms", bench_median(copy, ROUNDS));
    bench_json_num(&j, "vs_memcpy", bench_median(ratio, ROUNDS));
    double bound = fmax(bench_median(copy, ROUNDS), compute / c.threads);
    bench_json_num(&j, "compute_ms", compute / c.threads);
    bench_json_num(&j, "vs_bound", bench_median(compiled, ROUNDS) / bound);
    bench_json_end(&j);
  }
  loom_tensor_destroy(c.in);
  loom_graph_destroy(c.g);
  return 0;
}
