/* bench overhead: the cost of one step of a replayed plan. A chain of 1000
 * tiny elementwise ops on 64 floats runs compiled without fusion (every
 * node a step: this measures dispatch), compiled with fusion, and in the
 * interpreter, at 1 and 2 threads. At 2 threads, also the thread pool's
 * own cost per parallel step: a loop of two chunks of 2 us of work each,
 * back to back (the worker spinning, as between a replay's steps) and
 * after 2 ms idle (the worker asleep): the median loop's time beyond 2 us
 * (both chunks at once, the ideal), with the share of chunks the worker
 * ran (a chunk it does not take, the caller runs after its own). Last,
 * what making a block and touching it whole costs (an arena's first
 * touch), by core_aligned_alloc (large blocks on transparent huge pages)
 * against aligned_alloc(64) in the same run, the median of 15 of each at
 * 0.94, 2 and 8 MiB. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/pool.h"
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

enum { CHUNK_NS = 2000 };

typedef struct pool_probe {
  _Atomic int64_t worker_chunks;
  pthread_t caller;
} pool_probe_t;

static void probe_chunk(void *ctx, int64_t begin, int64_t end) {
  pool_probe_t *p = ctx;
  if (!pthread_equal(pthread_self(), p->caller))
    atomic_fetch_add_explicit(&p->worker_chunks, end - begin, memory_order_relaxed);
  for (int64_t i = begin; i < end; i++) {
    int64_t t0 = core_now_ns();
    while (core_now_ns() - t0 < CHUNK_NS) {
    }
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nanoseconds per core_pool_for over two chunks beyond one chunk's work:
 * the median of `loops` calls, each after `idle_ms` of sleep (0: back to
 * back); *shared: the share of chunks the worker ran. */
static double pool_ns(core_pool_t *pool, int loops, int idle_ms, double *shared) {
  enum { MOST = 20000 };
  static double t[MOST];
  pool_probe_t p = {.caller = pthread_self()};
  struct timespec idle = {0, idle_ms * 1000000L};
  if (loops > MOST) loops = MOST;
  for (int i = 0; i < loops; i++) {
    if (idle_ms) nanosleep(&idle, NULL);
    int64_t t0 = core_now_ns();
    core_pool_for(pool, 2, 1, probe_chunk, &p);
    t[i] = (double)(core_now_ns() - t0);
  }
  *shared = (double)atomic_load(&p.worker_chunks) / (2.0 * loops);
  qsort(t, (size_t)loops, sizeof *t, cmp_double);
  return t[loops / 2] - CHUNK_NS;
}

static void pool_line(void) {
  core_pool_t *pool;
  BENCH_TRY(core_pool_create(2, &pool));
  double shared_hot, shared_cold;
  pool_ns(pool, 1000, 0, &shared_hot); /* warm-up */
  double hot = pool_ns(pool, 20000, 0, &shared_hot);
  double cold = pool_ns(pool, 200, 2, &shared_cold);
  core_pool_destroy(pool);
  bench_json_t j;
  bench_json_begin(&j, "overhead_pool");
  bench_json_num(&j, "threads", 2);
  bench_json_num(&j, "overhead_ns", hot);
  bench_json_num(&j, "worker_share", shared_hot);
  bench_json_num(&j, "overhead_ns_after_idle", cold);
  bench_json_num(&j, "worker_share_after_idle", shared_cold);
  bench_json_end(&j);
}

/* Milliseconds to make a block of `bytes` and write it whole, the median
 * of 15, by core_aligned_alloc (huge) or aligned_alloc(64). The blocks
 * stay live until all are made, so that each is new memory to the
 * process (a block freed and made again is the allocator's, touched
 * already). The first of two rounds is not timed: memory the machine has
 * never touched costs more again on a VM (the host backs it then), and
 * what the first round frees, the kernel hands out again. */
static double touch_ms(size_t bytes, int huge) {
  enum { REPS = 15 };
  double t[REPS];
  char *block[REPS];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < REPS; i++) {
      int64_t t0 = core_now_ns();
      char *p = block[i] = huge ? core_aligned_alloc(bytes)
                                : aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (!p) {
        fprintf(stderr, "bench overhead: out of memory\n");
        exit(1);
      }
      memset(p, 1, bytes);
      t[i] = (double)(core_now_ns() - t0) / 1e6;
      if (((volatile char *)p)[bytes - 1] != 1) t[i] = NAN; /* the writes are kept */
    }
    for (int i = 0; i < REPS; i++) {
      if (huge) core_free(block[i]);
      else free(block[i]);
    }
  }
  qsort(t, REPS, sizeof *t, cmp_double);
  return t[REPS / 2];
}

static void first_touch_line(void) {
  static const size_t sizes[] = {985600, 2u << 20, 8u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    double small = touch_ms(sizes[i], 0), huge = touch_ms(sizes[i], 1);
    bench_json_t j;
    bench_json_begin(&j, "first_touch");
    bench_json_num(&j, "bytes", (double)sizes[i]);
    bench_json_num(&j, "small_pages_ms", small);
    bench_json_num(&j, "loom_ms", huge);
    bench_json_num(&j, "speedup", small / huge);
    bench_json_end(&j);
  }
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
  pool_line();
  first_touch_line();
  loom_tensor_destroy(c.in);
  loom_graph_destroy(c.g);
  return 0;
}
