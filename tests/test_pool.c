/* The thread pool: every index runs exactly once, for any size, grain and
 * thread count, over many consecutive loops (as replays issue them), also
 * when several threads share the pool (overlapping runs of one
 * executable) and when a body starts a loop of its own; shared pools are
 * one per thread count, held and given back from several threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "harness.h"

typedef struct {
  _Atomic int *hits;
  _Atomic int64_t sum;
} count_ctx_t;

static void count(void *arg, int64_t begin, int64_t end) {
  count_ctx_t *c = arg;
  int64_t s = 0;
  for (int64_t i = begin; i < end; i++) {
    atomic_fetch_add(&c->hits[i], 1);
    s += i;
  }
  atomic_fetch_add(&c->sum, s);
}

/* Runs one loop of n indices and checks each ran once. */
static void check_loop(core_pool_t *pool, int64_t n, int64_t grain) {
  count_ctx_t c = {.hits = calloc((size_t)(n ? n : 1), sizeof(_Atomic int))};
  core_pool_for(pool, n, grain, count, &c);
  int once = 1;
  for (int64_t i = 0; i < n; i++) once &= c.hits[i] == 1;
  CHECK(once);
  CHECK(atomic_load(&c.sum) == n * (n - 1) / 2);
  free((void *)c.hits);
}

static void every_index_once(void) {
  for (int threads = 1; threads <= 4; threads++) {
    core_pool_t *pool;
    CHECK_OK(core_pool_create(threads, &pool));
    CHECK(core_pool_threads(pool) == threads);
    int64_t sizes[] = {0, 1, 2, 7, 64, 1000, 100003};
    int64_t grains[] = {1, 3, 64, 4096};
    for (int s = 0; s < 7; s++)
      for (int g = 0; g < 4; g++) check_loop(pool, sizes[s], grains[g]);
    core_pool_destroy(pool);
  }
}

/* Thousands of tiny loops back to back: the replay pattern. */
static void many_small_loops(void) {
  core_pool_t *pool;
  CHECK_OK(core_pool_create(3, &pool));
  for (int round = 0; round < 3000; round++) check_loop(pool, 16, 1);
  core_pool_destroy(pool);
}

/* One chunk far slower than the rest: the caller, done with its own
 * chunks, outwaits its spin and sleeps until the last chunk ends. */
typedef struct {
  count_ctx_t count;
  int64_t slow;
} slow_ctx_t;

static void count_slowly(void *arg, int64_t begin, int64_t end) {
  slow_ctx_t *c = arg;
  if (begin <= c->slow && c->slow < end) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
  }
  count(&c->count, begin, end);
}

static void slow_chunk_wakes_the_caller(void) {
  for (int threads = 2; threads <= 3; threads++) {
    core_pool_t *pool;
    CHECK_OK(core_pool_create(threads, &pool));
    for (int round = 0; round < 40; round++) {
      int64_t n = 4 + round % 5;
      slow_ctx_t c = {.count.hits = calloc((size_t)n, sizeof(_Atomic int)), .slow = round % n};
      core_pool_for(pool, n, 1, count_slowly, &c);
      int once = 1;
      for (int64_t i = 0; i < n; i++) once &= c.count.hits[i] == 1;
      CHECK(once);
      CHECK(atomic_load(&c.count.sum) == n * (n - 1) / 2);
      free((void *)c.count.hits);
    }
    core_pool_destroy(pool);
  }
}

/* Callers on several threads share one pool: a caller that finds it busy
 * runs its loop alone. Each counts the loops whose indices did not all
 * run once (the harness's counters are not thread-safe). */
typedef struct {
  core_pool_t *pool;
  int bad;
} caller_t;

static void *call_loops(void *arg) {
  caller_t *c = arg;
  for (int round = 0; round < 200; round++) {
    int64_t n = 8 + round % 57;
    count_ctx_t x = {.hits = calloc((size_t)n, sizeof(_Atomic int))};
    core_pool_for(c->pool, n, 1 + round % 3, count, &x);
    int once = 1;
    for (int64_t i = 0; i < n; i++) once &= x.hits[i] == 1;
    c->bad += !once || atomic_load(&x.sum) != n * (n - 1) / 2;
    free((void *)x.hits);
  }
  return NULL;
}

static void callers_on_several_threads(void) {
  core_pool_t *pool;
  CHECK_OK(core_pool_create(3, &pool));
  caller_t c[3];
  pthread_t th[3];
  for (int t = 0; t < 3; t++) {
    c[t] = (caller_t){.pool = pool};
    CHECK(pthread_create(&th[t], NULL, call_loops, &c[t]) == 0);
  }
  for (int t = 0; t < 3; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    CHECK(c[t].bad == 0);
  }
  core_pool_destroy(pool);
}

/* A body that runs a loop of its own on the same pool: the inner loop
 * runs on the body's thread, and every (i, j) runs once. */
enum { OUTER = 12, INNER = 40 };

typedef struct {
  core_pool_t *pool;
  _Atomic int hits[OUTER][INNER];
} nest_ctx_t;

typedef struct {
  nest_ctx_t *nest;
  int64_t i;
} row_ctx_t;

static void inner_body(void *arg, int64_t begin, int64_t end) {
  row_ctx_t *r = arg;
  for (int64_t j = begin; j < end; j++) atomic_fetch_add(&r->nest->hits[r->i][j], 1);
}

static void outer_body(void *arg, int64_t begin, int64_t end) {
  nest_ctx_t *c = arg;
  for (int64_t i = begin; i < end; i++) {
    row_ctx_t r = {c, i};
    core_pool_for(c->pool, INNER, 1, inner_body, &r);
  }
}

static void nested_loops(void) {
  core_pool_t *pool;
  CHECK_OK(core_pool_create(3, &pool));
  static nest_ctx_t c;
  c.pool = pool;
  for (int round = 0; round < 20; round++) {
    memset(c.hits, 0, sizeof c.hits);
    core_pool_for(pool, OUTER, 1, outer_body, &c);
    int once = 1;
    for (int i = 0; i < OUTER; i++)
      for (int j = 0; j < INNER; j++) once &= atomic_load(&c.hits[i][j]) == 1;
    CHECK(once);
  }
  core_pool_destroy(pool);
}

static void threads_from_environment(void) {
  setenv("LOOM_NUM_THREADS", "3", 1);
  CHECK(core_default_threads() == 3);
  setenv("LOOM_NUM_THREADS", "zero", 1);
  CHECK(core_default_threads() >= 1); /* ignored: falls back to the CPUs */
  unsetenv("LOOM_NUM_THREADS");
  core_pool_t *pool;
  CHECK_OK(core_pool_create(0, &pool));
  CHECK(core_pool_threads(pool) == core_default_threads());
  core_pool_destroy(pool);
}

/* Holders of one thread count share one pool, another count has its own,
 * and a pool given back by its last holder is ended (the next acquire
 * makes a working one). */
static void shared_per_thread_count(void) {
  core_pool_t *a, *b, *c;
  CHECK_OK(core_pool_acquire(3, &a));
  CHECK_OK(core_pool_acquire(3, &b));
  CHECK_OK(core_pool_acquire(2, &c));
  CHECK(a == b && a != c);
  CHECK(core_pool_threads(a) == 3 && core_pool_threads(c) == 2);
  core_pool_release(a);
  check_loop(b, 1000, 7); /* still held by b */
  core_pool_release(b);
  core_pool_release(c);
  core_pool_release(NULL);
  CHECK_OK(core_pool_acquire(3, &a));
  check_loop(a, 1000, 7);
  core_pool_release(a);
}

/* Threads that acquire, run loops on and release the shared pool at once
 * (executables made and destroyed on several threads). */
static void *hold_and_run(void *arg) {
  caller_t *c = arg;
  for (int round = 0; round < 20; round++) {
    core_pool_t *pool;
    if (core_pool_acquire(2, &pool) != LOOM_OK) {
      c->bad++;
      continue;
    }
    c->pool = pool;
    call_loops(c);
    core_pool_release(pool);
  }
  return NULL;
}

static void shared_from_several_threads(void) {
  caller_t c[3] = {0};
  pthread_t th[3];
  for (int t = 0; t < 3; t++) CHECK(pthread_create(&th[t], NULL, hold_and_run, &c[t]) == 0);
  for (int t = 0; t < 3; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    CHECK(c[t].bad == 0);
  }
}

int main(void) {
  TEST_RUN(every_index_once);
  TEST_RUN(many_small_loops);
  TEST_RUN(slow_chunk_wakes_the_caller);
  TEST_RUN(callers_on_several_threads);
  TEST_RUN(nested_loops);
  TEST_RUN(threads_from_environment);
  TEST_RUN(shared_per_thread_count);
  TEST_RUN(shared_from_several_threads);
  return test_summary();
}
