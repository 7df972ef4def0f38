/* The GraphKey executable cache (src/trace/cache.h): keys and their
 * hash; hits, misses and statistics; cached executables against the
 * interpreter and hand-computed values; LRU eviction under a small budget
 * with entries in use kept until released; failed compiles cached as
 * failed; eager entries (graphs kept for the interpreter) beside compiled
 * ones; lookups that need no builder; the recompile limit and its warning; the recompile reasons;
 * speculative compiles by the workers, reading the environment of when
 * they were queued; the keys listed with their entries' counts; four
 * threads sharing one cache (and a fifth listing its keys meanwhile); the
 * cost of a hit.
 *
 * Every segment here is y = x * 2 + 1 over an f32 input whose shape is
 * the key's, built by a builder whose context counts builds and frees. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cache_dir.h"
#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "core/text.h"
#include "harness.h"
#include "runtime/executable.h"
#include "trace/cache.h"

#define STRUCTURE 0x5eedull

static _Atomic int builds, frees;

typedef struct seg_ctx {
  int rank;
  int64_t dims[LOOM_MAX_RANK];
  bool fail;
  bool nomem; /* fail as out of memory */
  _Atomic int *gate; /* not NULL: the build waits until *gate is set */
  const char *mark;  /* not NULL: the LOOM_TEST_MARK the build must read */
} seg_ctx_t;

static _Atomic int marks_wrong;

/* The first dim of each build, in the order the builds ran. */
static int64_t build_order[64];
static _Atomic int n_built;

/* y = x * 2 + 1 for x of s's shape. */
static loom_status_t build_graph(const seg_ctx_t *s, loom_graph_t **graph) {
  loom_graph_t *g;
  loom_dim_t dims[LOOM_MAX_RANK];
  for (int d = 0; d < s->rank; d++) dims[d] = s->dims[d];
  LOOM_TRY(loom_graph_create(&g));
  *graph = g; /* destroyed by the cache if a step below fails */
  loom_value_t x, two, one, t, y;
  loom_tensor_t *c2, *c1;
  float v2 = 2.0f, v1 = 1.0f;
  LOOM_TRY(loom_graph_input(g, "x", LOOM_F32, s->rank, dims, &x));
  LOOM_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &v2, sizeof v2, &c2));
  loom_status_t st = loom_graph_constant(g, c2, &two);
  loom_tensor_destroy(c2);
  LOOM_TRY(st);
  LOOM_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &v1, sizeof v1, &c1));
  st = loom_graph_constant(g, c1, &one);
  loom_tensor_destroy(c1);
  LOOM_TRY(st);
  LOOM_TRY(loom_mul(g, x, two, &t));
  LOOM_TRY(loom_add(g, t, one, &y));
  return loom_graph_output(g, y);
}

/* The builder: counts its calls. */
static loom_status_t build_segment(void *ctx, loom_graph_t **graph,
                                   loom_compile_options_t *options) {
  seg_ctx_t *s = ctx;
  atomic_fetch_add(&builds, 1);
  while (s->gate && !atomic_load(s->gate)) nanosleep(&(struct timespec){0, 1000000}, NULL);
  const char *mark = core_getenv("LOOM_TEST_MARK");
  if (s->mark && (!mark || strcmp(mark, s->mark) != 0)) atomic_fetch_add(&marks_wrong, 1);
  int slot = atomic_fetch_add(&n_built, 1);
  if (slot < 64) build_order[slot] = s->rank ? s->dims[0] : 0;
  if (s->nomem) return loom_fail(LOOM_ERR_NOMEM, "out of memory in the test's builder");
  if (s->fail) return s->rank == 2 ? LOOM_ERR_UNSUPPORTED : loom_fail(LOOM_ERR_UNSUPPORTED, "refused by the test");
  options->num_threads = 1;
  return build_graph(s, graph);
}

static void free_segment(void *ctx) {
  atomic_fetch_add(&frees, 1);
  free(ctx);
}

static rt_builder_t builder_for(int rank, const int64_t *dims, bool fail) {
  seg_ctx_t *s = calloc(1, sizeof *s);
  s->rank = rank;
  memcpy(s->dims, dims, sizeof(int64_t) * (size_t)rank);
  s->fail = fail;
  return (rt_builder_t){build_segment, free_segment, s};
}

/* A key of one f32 input of shape dims at site. */
static rt_key_t key_for(rt_key_input_t *in, uint64_t site, int rank, const int64_t *dims) {
  memset(in, 0x7f, sizeof *in); /* dims past rank must not matter */
  in->dtype = LOOM_F32;
  in->rank = rank;
  memcpy(in->dims, dims, sizeof(int64_t) * (size_t)rank);
  memset(in->bucket, 0, (size_t)rank); /* exact sizes */
  in->provisional = 0;
  rt_key_t k = {.structure = STRUCTURE, .path = 0, .site = site, .n_inputs = 1, .inputs = in};
  rt_key_finish(&k);
  return k;
}

/* get with wait for a one-dim key of size n. */
static rt_get_result_t get1(loom_cache_t *c, uint64_t site, int64_t n, int limit,
                            rt_entry_t **e) {
  rt_key_input_t in;
  rt_key_t k = key_for(&in, site, 1, &n);
  rt_builder_t b = builder_for(1, &n, false);
  rt_get_result_t r = RT_FAILED;
  CHECK_OK(rt_cache_get(c, &k, &b, true, limit, &r, e));
  return r;
}

static loom_cache_stats_t stats_of(loom_cache_t *c) {
  loom_cache_stats_t s = LOOM_CACHE_STATS_INIT;
  CHECK_OK(loom_cache_get_stats(c, &s));
  return s;
}

/* Runs e on x of the key's shape: 0 when y equals both 2x + 1 and the
 * interpreter's result on an independently built graph. Thread-safe (no
 * shared random state), for the threads test. */
static int entry_errors(rt_entry_t *e, int rank, const int64_t *dims) {
  loom_tensor_t *x = NULL, *y = NULL, *want = NULL;
  int errors = 0;
  loom_tensor_create(LOOM_F32, rank, dims, &x);
  float *xs = loom_tensor_data(x);
  for (int64_t i = 0; i < loom_tensor_numel(x); i++) xs[i] = (float)(i % 7) * 0.75f - 2.5f;
  if (rt_entry_run(e, 1, &x, 0, NULL, NULL) == LOOM_OK) errors++; /* binding checked */
  loom_tensor_create(LOOM_F32, rank, dims, &y);
  if (rt_entry_run(e, 1, &x, 1, &y, NULL) != LOOM_OK) errors++;
  seg_ctx_t s = {.rank = rank};
  memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
  loom_graph_t *g = NULL;
  if (build_graph(&s, &g) != LOOM_OK || loom_interpret(g, 1, &x, 1, &want) != LOOM_OK)
    errors++;
  for (int64_t i = 0; !errors && i < loom_tensor_numel(x); i++) {
    double xi = test_get(x, i), yi = test_get(y, i);
    errors += yi != (float)(2.0f * (float)xi + 1.0f) || yi != test_get(want, i);
  }
  loom_graph_destroy(g);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_tensor_destroy(want);
  return errors;
}

static void test_key_hash(void) {
  rt_key_input_t a, b;
  int64_t d1[2] = {4, 32}, d2[2] = {4, 33};
  rt_key_t ka = key_for(&a, 1, 2, d1), kb = key_for(&b, 1, 2, d1);
  b.dims[5] = 12345; /* past the rank */
  rt_key_finish(&kb);
  CHECK(ka.hash == kb.hash);
  kb = key_for(&b, 1, 2, d2);
  CHECK(ka.hash != kb.hash);
  kb = key_for(&b, 2, 2, d1);
  CHECK(ka.hash != kb.hash);
  kb = key_for(&b, 1, 2, d1);
  kb.path = 7;
  rt_key_finish(&kb);
  CHECK(ka.hash != kb.hash);
}

static void test_hits_and_misses(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  atomic_store(&builds, 0);
  atomic_store(&frees, 0);
  rt_entry_t *e = NULL, *e2 = NULL;
  int64_t n = 6;
  CHECK(get1(c, 1, 6, 0, &e) == RT_READY);
  CHECK(e && rt_entry_executable(e) && rt_entry_graph(e));
  if (e) CHECK(entry_errors(e, 1, &n) == 0);
  rt_entry_release(c, e);
  CHECK(get1(c, 1, 6, 0, &e2) == RT_READY);
  CHECK(e2 == e);
  rt_entry_release(c, e2);
  rt_key_input_t in;
  rt_key_t k = key_for(&in, 1, 1, &n);
  rt_entry_t *h = rt_cache_lookup(c, &k);
  CHECK(h == e);
  rt_entry_release(c, h);
  n = 7;
  k = key_for(&in, 1, 1, &n);
  CHECK(rt_cache_lookup(c, &k) == NULL); /* counts nothing */
  CHECK(get1(c, 1, 7, 0, &e2) == RT_READY);
  CHECK(e2 && e2 != e);
  if (e2) CHECK(entry_errors(e2, 1, &n) == 0);
  rt_entry_release(c, e2);
  int64_t d3[3] = {2, 3, 5};
  rt_key_t k3 = key_for(&in, 1, 3, d3);
  rt_builder_t b3 = builder_for(3, d3, false);
  rt_get_result_t r;
  CHECK_OK(rt_cache_get(c, &k3, &b3, true, 0, &r, &e2));
  CHECK(r == RT_READY);
  if (e2) CHECK(entry_errors(e2, 3, d3) == 0);
  rt_entry_release(c, e2);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.hits == 2 && s.misses == 3 && s.compiles == 3 && s.entries == 3);
  CHECK(s.failed_compiles == 0 && s.evictions == 0 && s.spec_compiles == 0);
  CHECK(s.bytes > 3 * 16 * 1024 && s.compile_ms > 0);
  CHECK(atomic_load(&builds) == 3 && atomic_load(&frees) == 4); /* every get frees */
  /* Arguments: named errors, and the builder's ctx is still freed. */
  rt_builder_t b = builder_for(1, &n, false);
  CHECK_ERR(rt_cache_get(c, &k, &b, true, 0, NULL, &e2), LOOM_ERR_INVALID, "result");
  CHECK(atomic_load(&frees) == 5);
  rt_key_t bad = k;
  bad.inputs = NULL;
  b = builder_for(1, &n, false);
  CHECK_ERR(rt_cache_get(c, &bad, &b, true, 0, &r, &e2), LOOM_ERR_INVALID, "no input array");
  loom_cache_t *none;
  CHECK_ERR(loom_cache_create(-1, 0, &none), LOOM_ERR_INVALID, "budget_bytes");
  loom_cache_destroy(c);
}

/* Three keys of equal cost; the budget holds one and a half. */
static void test_lru_eviction(void) {
  loom_cache_t *c;
  rt_entry_t *a = NULL, *b = NULL, *x = NULL;
  int64_t costs[3];
  CHECK_OK(loom_cache_create(0, 0, &c));
  for (int i = 0; i < 3; i++) {
    int64_t before = stats_of(c).bytes;
    CHECK(get1(c, 2, 4 + i, 0, &x) == RT_READY);
    rt_entry_release(c, x);
    costs[i] = stats_of(c).bytes - before;
  }
  loom_cache_destroy(c);
  int64_t hi = costs[0], lo = costs[0];
  for (int i = 1; i < 3; i++) {
    hi = costs[i] > hi ? costs[i] : hi;
    lo = costs[i] < lo ? costs[i] : lo;
  }
  CHECK(lo > hi * 3 / 4);
  CHECK_OK(loom_cache_create(hi * 3 / 2, 0, &c));
  /* In use: a and b both stay although they exceed the budget. */
  CHECK(get1(c, 2, 4, 0, &a) == RT_READY);
  CHECK(get1(c, 2, 5, 0, &b) == RT_READY);
  CHECK(stats_of(c).entries == 2 && stats_of(c).evictions == 0);
  /* Released, b is evicted (a is still held). */
  rt_entry_release(c, b);
  CHECK(stats_of(c).entries == 1 && stats_of(c).evictions == 1);
  int64_t n = 4;
  CHECK(a && entry_errors(a, 1, &n) == 0);
  rt_key_input_t in;
  int64_t five = 5;
  rt_key_t kb = key_for(&in, 2, 1, &five);
  CHECK(rt_cache_lookup(c, &kb) == NULL);
  /* c is the newest and held: a goes when it is released. */
  CHECK(get1(c, 2, 6, 0, &x) == RT_READY);
  CHECK(stats_of(c).evictions == 1);
  rt_entry_release(c, a);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.entries == 1 && s.evictions == 2 && s.bytes <= hi * 3 / 2);
  rt_key_t ka = key_for(&in, 2, 1, &n);
  CHECK(rt_cache_lookup(c, &ka) == NULL);
  rt_entry_release(c, x);
  /* An evicted key compiles again; the LRU one goes. */
  CHECK(get1(c, 2, 4, 0, &a) == RT_READY);
  rt_entry_release(c, a);
  s = stats_of(c);
  CHECK(s.entries == 1 && s.evictions == 3 && s.compiles == 4);
  loom_cache_destroy(c);
}

static void test_failed_compile(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 1, &c));
  atomic_store(&builds, 0);
  int64_t n = 9;
  rt_key_input_t in;
  rt_key_t k = key_for(&in, 3, 1, &n);
  rt_entry_t *e = NULL;
  rt_get_result_t r = RT_READY;
  for (int i = 0; i < 3; i++) {
    rt_builder_t b = builder_for(1, &n, true);
    CHECK_OK(rt_cache_get(c, &k, &b, true, 0, &r, &e));
    CHECK(r == RT_FAILED && e == NULL);
  }
  CHECK(atomic_load(&builds) == 1); /* not retried */
  CHECK(strstr(loom_last_error(), "0000000000000003") &&
        strstr(loom_last_error(), "refused by the test"));
  /* Without wait, the failure is also known. */
  rt_builder_t b = builder_for(1, &n, true);
  CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
  CHECK(r == RT_FAILED);
  /* No C compiler: the executable would interpret, which is a failure. */
  setenv("LOOM_CC", "/nonexistent/cc", 1);
  CHECK(get1(c, 3, 10, 0, &e) == RT_FAILED);
  unsetenv("LOOM_CC");
  /* A builder failing without a message is named by its status. */
  int64_t d2[2] = {3, 3};
  rt_key_t k2 = key_for(&in, 3, 2, d2);
  b = builder_for(2, d2, true);
  CHECK_OK(rt_cache_get(c, &k2, &b, true, 0, &r, &e));
  CHECK(r == RT_FAILED);
  /* The cache goes on working. */
  CHECK(get1(c, 3, 11, 0, &e) == RT_READY);
  n = 11;
  if (e) CHECK(entry_errors(e, 1, &n) == 0);
  rt_entry_release(c, e);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.failed_compiles == 3 && s.compiles == 1 && s.entries == 4 && s.hits == 0);
  core_text_t t = {0};
  CHECK_OK(rt_cache_describe(c, &t));
  CHECK(t.s && strstr(t.s, "failed") && strstr(t.s, "ready") && strstr(t.s, "refused by the test") &&
        strstr(t.s, "builder failed with") && strstr(t.s, "no code could be generated"));
  free(t.s);
  loom_cache_destroy(c);
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* Eager entries: the graph built once and kept, beside the compiled
 * entry of the same key, counted as neither hit nor compile; a failed
 * build cached, out of memory not. */
static void test_eager_entries(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  atomic_store(&builds, 0);
  int64_t n = 6;
  rt_key_input_t in;
  rt_key_t k = key_for(&in, 4, 1, &n);
  rt_entry_t *e = NULL, *e2 = NULL;
  rt_builder_t b = builder_for(1, &n, false);
  CHECK_OK(rt_cache_eager(c, &k, &b, &e));
  CHECK(e && rt_entry_graph(e) && !rt_entry_executable(e) && atomic_load(&builds) == 1);
  int frees_before = atomic_load(&frees);
  b = builder_for(1, &n, false);
  CHECK_OK(rt_cache_eager(c, &k, &b, &e2));
  CHECK(e2 == e && atomic_load(&builds) == 1 && atomic_load(&frees) == frees_before + 1);
  if (e) { /* the kept graph computes 2x + 1 */
    float xs[6] = {0, 1, -2, 3.5f, -0.25f, 8};
    loom_tensor_t *x = NULL, *y = NULL;
    CHECK_OK(loom_tensor_from_data(LOOM_F32, 1, &n, xs, sizeof xs, &x));
    CHECK_OK(loom_interpret(rt_entry_graph(e), 1, &x, 1, &y));
    for (int i = 0; y && i < 6; i++) CHECK(((float *)loom_tensor_data(y))[i] == 2 * xs[i] + 1);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  rt_entry_release(c, e);
  rt_entry_release(c, e2);
  /* Not a compiled entry: a lookup misses, a get compiles beside it. */
  CHECK(rt_cache_lookup(c, &k) == NULL);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.entries == 1 && s.hits == 0 && s.misses == 0 && s.compiles == 0 && s.bytes > 0);
  CHECK(get1(c, 4, 6, 0, &e) == RT_READY && e && rt_entry_executable(e));
  rt_entry_release(c, e);
  s = stats_of(c);
  CHECK(s.entries == 2 && s.compiles == 1);
  /* A failed build is cached with its error. */
  int64_t m = 7;
  rt_key_t km = key_for(&in, 4, 1, &m);
  for (int i = 0; i < 2; i++) {
    b = builder_for(1, &m, true);
    CHECK(rt_cache_eager(c, &km, &b, &e) == LOOM_ERR_UNSUPPORTED && !e);
    CHECK(strstr(loom_last_error(), "0000000000000004") &&
          strstr(loom_last_error(), "refused by the test"));
  }
  CHECK(atomic_load(&builds) == 3);
  /* Out of memory is not cached: the next request builds again. */
  int64_t o = 8;
  rt_key_t ko = key_for(&in, 4, 1, &o);
  b = builder_for(1, &o, false);
  ((seg_ctx_t *)b.ctx)->nomem = true;
  CHECK(rt_cache_eager(c, &ko, &b, &e) == LOOM_ERR_NOMEM && !e);
  b = builder_for(1, &o, false);
  CHECK_OK(rt_cache_eager(c, &ko, &b, &e));
  CHECK(e && rt_entry_graph(e) && atomic_load(&builds) == 5);
  rt_entry_release(c, e);
  /* Bad arguments. */
  b = builder_for(1, &o, false);
  CHECK(rt_cache_eager(NULL, &ko, &b, &e) == LOOM_ERR_INVALID);
  b = builder_for(1, &o, false);
  CHECK(rt_cache_eager(c, &ko, &b, NULL) == LOOM_ERR_INVALID);
  loom_cache_destroy(c);
}

/* rt_cache_get_held answers, with no builder, for a key the cache holds
 * (ready, failed or pending) and for a new key its site's limit refuses,
 * as rt_cache_get would; for a key that needs a build it does nothing
 * and counts nothing. rt_cache_eager_held finds eager entries only. */
static void test_held_lookups(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 1, &c));
  atomic_store(&builds, 0);
  rt_key_input_t in;
  int64_t n = 6;
  rt_key_t k = key_for(&in, 9, 1, &n);
  rt_entry_t *e = NULL, *e2 = NULL;
  rt_get_result_t r = RT_READY;
  bool held = true;
  CHECK_OK(rt_cache_get_held(c, &k, true, 0, &r, &e, &held));
  CHECK(!held && !e && atomic_load(&builds) == 0);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.misses == 0 && s.hits == 0 && s.entries == 0);
  CHECK(rt_cache_eager_held(c, &k) == NULL);
  /* ready: a hit */
  CHECK(get1(c, 9, 6, 2, &e) == RT_READY);
  CHECK_OK(rt_cache_get_held(c, &k, true, 0, &r, &e2, &held));
  CHECK(held && r == RT_READY && e2 == e && e2 && entry_errors(e2, 1, &n) == 0);
  rt_entry_release(c, e);
  rt_entry_release(c, e2);
  s = stats_of(c);
  CHECK(s.hits == 1 && s.misses == 1 && atomic_load(&builds) == 1);
  CHECK(rt_cache_eager_held(c, &k) == NULL); /* a compiled entry is not an eager one */
  /* failed: the failure and its reason, a miss counted, nothing built */
  int64_t m = 7;
  rt_key_t km = key_for(&in, 9, 1, &m);
  rt_builder_t b = builder_for(1, &m, true);
  CHECK_OK(rt_cache_get(c, &km, &b, true, 0, &r, &e));
  CHECK(r == RT_FAILED);
  loom_clear_error();
  CHECK_OK(rt_cache_get_held(c, &km, true, 0, &r, &e, &held));
  CHECK(held && r == RT_FAILED && !e && strstr(loom_last_error(), "refused by the test"));
  CHECK(stats_of(c).misses == 3 && atomic_load(&builds) == 2);
  /* pending: a worker's build waits on the gate */
  _Atomic int gate = 0;
  int64_t p = 8;
  rt_key_t kp = key_for(&in, 9, 1, &p);
  b = builder_for(1, &p, false);
  ((seg_ctx_t *)b.ctx)->gate = &gate;
  CHECK_OK(rt_cache_get(c, &kp, &b, false, 2, &r, &e));
  CHECK(r == RT_PENDING && !e);
  CHECK_OK(rt_cache_get_held(c, &kp, false, 0, &r, &e, &held));
  CHECK(held && r == RT_PENDING && !e && stats_of(c).misses == 5);
  atomic_store(&gate, 1);
  rt_cache_drain(c);
  CHECK_OK(rt_cache_get_held(c, &kp, false, 0, &r, &e, &held));
  CHECK(held && r == RT_READY && e && entry_errors(e, 1, &p) == 0);
  rt_entry_release(c, e);
  /* a new key past its site's limit of 2 (6 and 8 counted): refused */
  int64_t q = 10;
  rt_key_t kq = key_for(&in, 9, 1, &q);
  test_capture_begin(NULL);
  CHECK_OK(rt_cache_get_held(c, &kq, true, 2, &r, &e, &held));
  free(test_capture_end());
  CHECK(held && r == RT_OVER_LIMIT && !e && strstr(loom_last_error(), "recompile limit of 2"));
  CHECK(atomic_load(&builds) == 3 && !rt_cache_holds(c, &kq));
  /* an eager entry */
  b = builder_for(1, &q, false);
  CHECK_OK(rt_cache_eager(c, &kq, &b, &e));
  CHECK(e && (e2 = rt_cache_eager_held(c, &kq)) == e);
  rt_entry_release(c, e);
  rt_entry_release(c, e2);
  /* bad arguments */
  CHECK_ERR(rt_cache_get_held(c, &k, true, 0, &r, &e, NULL), LOOM_ERR_INVALID, "held");
  CHECK_ERR(rt_cache_get_held(NULL, &k, true, 0, &r, &e, &held), LOOM_ERR_INVALID, "cache");
  CHECK(rt_cache_eager_held(NULL, &k) == NULL);
  loom_cache_destroy(c);
}

static void test_recompile_limit(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  test_capture_begin(NULL);
  rt_get_result_t r[6];
  rt_entry_t *e;
  for (int i = 0; i < 5; i++) {
    r[i] = get1(c, 0xabc, 20 + i, 3, &e);
    rt_entry_release(c, e);
  }
  r[5] = get1(c, 0xabc, 21, 3, &e); /* compiled before the limit: a hit */
  rt_entry_release(c, e);
  char *err = test_capture_end();
  CHECK(r[0] == RT_READY && r[1] == RT_READY && r[2] == RT_READY);
  CHECK(r[3] == RT_OVER_LIMIT && r[4] == RT_OVER_LIMIT && r[5] == RT_READY);
  CHECK(count_of(err, "recompile limit") == 1);
  CHECK(strstr(loom_last_error(), "recompile limit of 3") != NULL);
  CHECK(strstr(err, "0000000000000abc") && strstr(err, "limit of 3") &&
        strstr(err, "LOOM_DIM_BUCKET") && strstr(err, "LOOM_DIM_SYMBOLIC"));
  free(err);
  /* Another site has its own count. */
  CHECK(get1(c, 0xdef, 20, 3, &e) == RT_READY);
  rt_entry_release(c, e);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.compiles == 4 && s.misses == 6 && s.hits == 1);
  loom_cache_destroy(c);
}

/* The budget counts structures and policies, not sizes: keys that differ
 * only in the sizes of provisional dims (automatic ones not symbolic
 * yet) count once, so a site at its limit still compiles them; the first
 * symbolic key of a structure compiles past the limit, a second is
 * refused. */
static rt_get_result_t get_key(loom_cache_t *c, rt_key_t *k, int64_t n, int limit) {
  rt_key_finish(k);
  rt_builder_t b = builder_for(1, &n, false);
  rt_get_result_t r = RT_FAILED;
  rt_entry_t *e = NULL;
  CHECK_OK(rt_cache_get(c, k, &b, true, limit, &r, &e));
  rt_entry_release(c, e);
  return r;
}

static void test_budget_identity(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  rt_entry_t *e;
  test_capture_begin(NULL);
  CHECK(get1(c, 0x123, 20, 2, &e) == RT_READY); /* counted: 1 of 2 */
  rt_entry_release(c, e);
  for (int64_t n = 30; n < 34; n++) { /* counted once: 2 of 2 */
    rt_key_input_t in;
    rt_key_t k = key_for(&in, 0x123, 1, &n);
    in.provisional = 1 | 0x80; /* bits past the rank do not matter */
    CHECK(get_key(c, &k, n, 2) == RT_READY);
  }
  CHECK(get1(c, 0x123, 21, 2, &e) == RT_OVER_LIMIT);
  rt_entry_release(c, e);
  int64_t any = RT_DIM_ANY;
  for (uint64_t structure = STRUCTURE; structure <= STRUCTURE + 1; structure++) {
    rt_key_input_t in;
    rt_key_t k = key_for(&in, 0x123, 1, &any);
    k.structure = structure;
    CHECK(get_key(c, &k, 5, 2) == RT_READY); /* the structure's first symbolic key */
    k.path = 7;
    CHECK(get_key(c, &k, 5, 2) == RT_OVER_LIMIT);
  }
  free(test_capture_end());
  CHECK(stats_of(c).compiles == 7);
  loom_cache_destroy(c);
}

/* A miss with a failing builder: records its reason, compiles nothing. */
static void miss(loom_cache_t *c, uint64_t site, uint64_t path, int n_inputs,
                 const rt_key_input_t *inputs) {
  rt_key_t k = {.structure = STRUCTURE, .path = path, .site = site, .n_inputs = n_inputs,
                .inputs = inputs};
  rt_key_finish(&k);
  int64_t one = 1;
  rt_builder_t b = builder_for(1, &one, true);
  rt_get_result_t r;
  rt_entry_t *e;
  CHECK_OK(rt_cache_get(c, &k, &b, true, 0, &r, &e));
  CHECK(r == RT_FAILED);
}

static rt_key_input_t input(loom_dtype_t dtype, int rank, int64_t d0, int64_t d1, int64_t d2) {
  rt_key_input_t in = {.dtype = dtype, .rank = rank, .dims = {d0, d1, d2}};
  return in;
}

static void test_recompile_reasons(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  test_capture_begin("recompiles,cache");
  rt_key_input_t a[3] = {input(LOOM_F32, 2, 4, 32, 0), input(LOOM_F32, 1, 8, 0, 0),
                         input(LOOM_F32, 1, 2, 0, 0)};
  miss(c, 5, 0, 3, a);
  rt_key_input_t b[3] = {input(LOOM_F32, 2, 4, 37, 0), input(LOOM_F32, 1, 8, 0, 0),
                         input(LOOM_F16, 1, 2, 0, 0)};
  miss(c, 5, 0, 3, b);
  miss(c, 5, 9, 3, a);
  rt_key_input_t d[3] = {input(LOOM_F32, 2, RT_DIM_ANY, 32, 0), input(LOOM_F32, 2, 8, 1, 0),
                         input(LOOM_F32, 1, 2, 0, 0)};
  miss(c, 5, 0, 3, d);
  /* The nearest entry: [8, 37, 5] shares two dims with [8, 37, 2]. */
  rt_key_input_t e1 = input(LOOM_F32, 3, 4, 32, 2), e2 = input(LOOM_F32, 3, 8, 37, 5),
                 e3 = input(LOOM_F32, 3, 8, 37, 2);
  miss(c, 6, 0, 1, &e1);
  miss(c, 6, 0, 1, &e2);
  miss(c, 6, 0, 1, &e3);
  miss(c, 6, 0, 2, a);
  char *err = test_capture_end();
  core_text_t t = {0};
  CHECK_OK(rt_cache_describe(c, &t));
  const char *want[] = {
      "site 0000000000000005: new site (first compile)",
      "site 0000000000000005: input 0 dim 1: 37 (cached: 32), dtype of input 2: f16 (cached: f32)",
      "site 0000000000000005: path signature differs\n",
      "site 0000000000000005: input 0 dim 0: any (cached: 4), rank of input 1: 2 (cached: 1)\n",
      "site 0000000000000006: input 0 dim 2: 2 (cached: 5)\n",
      "site 0000000000000006: number of inputs: 2 (cached: 1), rank of input 0: 2 (cached: 3)\n",
  };
  for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
    if (!t.s || !strstr(t.s, want[i])) test_fail(__FILE__, __LINE__, "describe lacks '%s'", want[i]);
    char line[300];
    snprintf(line, sizeof line, "loom[recompiles]: %s", want[i]);
    if (!strstr(err, line)) test_fail(__FILE__, __LINE__, "the log lacks '%s'", line);
    test_checks += 2;
  }
  CHECK(count_of(err, "loom[cache]: miss at site 0000000000000005: compiling now") == 4);
  CHECK(count_of(err, "loom[cache]: compile of site 0000000000000006 failed") == 4);
  free(t.s);
  free(err);
  loom_cache_destroy(c);
}

static void test_speculation(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 2, &c));
  rt_key_input_t in;
  int64_t sizes[3] = {16, 32, 64};
  for (int i = 0; i < 3; i++) {
    rt_key_t k = key_for(&in, 7, 1, &sizes[i]);
    rt_builder_t b = builder_for(1, &sizes[i], false);
    CHECK_OK(rt_cache_speculate(c, &k, &b));
  }
  rt_cache_drain(c);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.compiles == 3 && s.spec_compiles == 3 && s.entries == 3);
  rt_entry_t *e = NULL;
  CHECK(get1(c, 7, 32, 1, &e) == RT_READY); /* speculation is not a recompile */
  CHECK(e && entry_errors(e, 1, &sizes[1]) == 0);
  rt_entry_release(c, e);
  s = stats_of(c);
  CHECK(s.hits == 1 && s.misses == 0);
  /* Without wait: pending now, a worker compiles, then a hit. */
  int64_t n = 48;
  rt_key_t k = key_for(&in, 7, 1, &n);
  rt_builder_t b = builder_for(1, &n, false);
  rt_get_result_t r;
  CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
  CHECK(r == RT_PENDING || r == RT_READY);
  if (r == RT_READY) rt_entry_release(c, e);
  rt_cache_drain(c);
  CHECK((e = rt_cache_lookup(c, &k)) != NULL);
  rt_entry_release(c, e);
  s = stats_of(c);
  CHECK(s.compiles == 4 && s.spec_compiles == 3 && s.misses == 1);
  /* Speculating what is cached does nothing. */
  b = builder_for(1, &n, false);
  CHECK_OK(rt_cache_speculate(c, &k, &b));
  rt_cache_drain(c);
  CHECK(stats_of(c).compiles == 4);
  loom_cache_destroy(c);
  /* Destroyed with jobs queued: they are dropped and their ctx freed. */
  atomic_store(&frees, 0);
  CHECK_OK(loom_cache_create(0, 1, &c));
  for (int i = 0; i < 20; i++) {
    n = 100 + i;
    k = key_for(&in, 8, 1, &n);
    b = builder_for(1, &n, false);
    CHECK_OK(rt_cache_speculate(c, &k, &b));
  }
  loom_cache_destroy(c);
  CHECK(atomic_load(&frees) == 20);
}

/* A background compile reads the environment as it was when it was
 * queued, while the caller goes on changing it: each adds and removes a
 * variable, and glibc's setenv then moves the array of variables, which
 * the workers' compiles (the C compiler's process, the cache directory)
 * would read freed (the sanitizer passes catch that). */
static void test_environment_of_jobs(void) {
  enum { JOBS = 6 };
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 2, &c));
  atomic_store(&marks_wrong, 0);
  rt_key_input_t in;
  char mark[JOBS][16];
  for (int i = 0; i < JOBS; i++) {
    snprintf(mark[i], sizeof mark[i], "job%d", i);
    setenv("LOOM_TEST_MARK", mark[i], 1);
    int64_t n = 300 + i;
    rt_key_t k = key_for(&in, 11, 1, &n);
    rt_builder_t b = builder_for(1, &n, false);
    ((seg_ctx_t *)b.ctx)->mark = mark[i];
    CHECK_OK(rt_cache_speculate(c, &k, &b));
  }
  unsetenv("LOOM_TEST_MARK");
  char name[40];
  for (int i = 0; stats_of(c).entries < JOBS; i++) {
    snprintf(name, sizeof name, "LOOM_TEST_FILLER_%d", i);
    setenv(name, "x", 1);
    unsetenv(name);
  }
  rt_cache_drain(c);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.compiles == JOBS && s.failed_compiles == 0);
  CHECK(atomic_load(&marks_wrong) == 0);
  loom_cache_destroy(c);
}

/* Queues a speculative build of n at site, held at gate when one is
 * given. */
static loom_status_t speculate(loom_cache_t *c, uint64_t site, int64_t n, _Atomic int *gate) {
  rt_key_input_t in;
  rt_key_t k = key_for(&in, site, 1, &n);
  rt_builder_t b = builder_for(1, &n, false);
  ((seg_ctx_t *)b.ctx)->gate = gate;
  return rt_cache_speculate(c, &k, &b);
}

/* A cache with one worker, held at gate (closed) in the build of n at
 * site. */
static loom_cache_t *held_worker(uint64_t site, int64_t n, _Atomic int *gate) {
  loom_cache_t *c;
  if (loom_cache_create(0, 1, &c) != LOOM_OK) return NULL;
  atomic_store(&builds, 0);
  atomic_store(&n_built, 0);
  atomic_store(gate, 0);
  CHECK_OK(speculate(c, site, n, gate));
  while (atomic_load(&builds) == 0) nanosleep(&(struct timespec){0, 1000000}, NULL);
  return c;
}

/* A caller that waits for a queued job compiles it itself; one that does
 * not wait moves it to the front of the queue. */
static void test_queue_order(void) {
  static _Atomic int gate;
  loom_cache_t *c = held_worker(11, 40, &gate);
  CHECK(c != NULL);
  if (!c) return;
  /* The worker is held in 40's build: 41, 42, 43 wait in the queue. */
  for (int64_t n = 41; n <= 43; n++) CHECK_OK(speculate(c, 11, n, NULL));
  rt_entry_t *e = NULL;
  CHECK(get1(c, 11, 42, 0, &e) == RT_READY); /* taken out of the queue */
  rt_entry_release(c, e);
  rt_key_input_t in;
  int64_t n = 43;
  rt_key_t k = key_for(&in, 11, 1, &n);
  rt_builder_t b = builder_for(1, &n, false);
  rt_get_result_t r;
  CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
  CHECK(r == RT_PENDING);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.compiles == 1 && s.spec_compiles == 0 && s.misses == 2);
  atomic_store(&gate, 1);
  rt_cache_drain(c);
  s = stats_of(c);
  CHECK(s.compiles == 4 && s.spec_compiles == 2 && s.entries == 4);
  CHECK(atomic_load(&n_built) == 4);
  /* 42 was built while 40's build waited at the gate; of the queued two,
   * 43 went first (the drain takes them on its own thread while the
   * worker finishes 40, so 40's place among them varies). */
  int at[44] = {0};
  for (int i = 0; i < 4; i++)
    if (build_order[i] >= 40 && build_order[i] <= 43) at[build_order[i]] = i;
  CHECK(build_order[0] == 42 && at[43] < at[41] && at[40] > 0);
  loom_cache_destroy(c);
}

static void *drain_main(void *arg) {
  rt_cache_drain(arg);
  return NULL;
}

/* A drain compiles the queued jobs on its own thread: the worker is held
 * in another job's build, and the queued one is built all the same. */
static void test_drain_compiles_queued(void) {
  static _Atomic int gate;
  loom_cache_t *c = held_worker(12, 50, &gate);
  CHECK(c != NULL);
  if (!c) return;
  CHECK_OK(speculate(c, 12, 51, NULL));
  pthread_t drainer;
  CHECK(pthread_create(&drainer, NULL, drain_main, c) == 0);
  /* up to a minute: the drainer's compile on a loaded machine */
  for (int i = 0; i < 60000 && atomic_load(&n_built) == 0; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  CHECK(atomic_load(&n_built) == 1); /* the held worker built nothing */
  atomic_store(&gate, 1);
  pthread_join(drainer, NULL);
  CHECK(atomic_load(&n_built) == 2 && stats_of(c).entries == 2);
  CHECK(build_order[0] == 51 && build_order[1] == 50);
  loom_cache_destroy(c);
}

/* y = (x @ W) @ W for x of shape [n, 4], n symbolic: h = x @ W lives in
 * the arena, whose size follows n. */
static loom_status_t build_symbolic(void *ctx, loom_graph_t **graph,
                                    loom_compile_options_t *options) {
  (void)ctx;
  options->num_threads = 1;
  options->dynamic_symbols = 1;
  loom_graph_t *g;
  LOOM_TRY(loom_graph_create(&g));
  *graph = g;
  loom_dim_t n, dims[2];
  LOOM_TRY(loom_dim_symbol(g, "n", &n));
  dims[0] = n, dims[1] = 4;
  float w[16];
  for (int i = 0; i < 16; i++) w[i] = (float)(i % 5) * 0.25f;
  int64_t wshape[2] = {4, 4};
  loom_tensor_t *wt;
  loom_value_t x, wv, h, y;
  LOOM_TRY(loom_graph_input(g, "x", LOOM_F32, 2, dims, &x));
  LOOM_TRY(loom_tensor_from_data(LOOM_F32, 2, wshape, w, sizeof w, &wt));
  loom_status_t s = loom_graph_constant(g, wt, &wv);
  loom_tensor_destroy(wt);
  LOOM_TRY(s);
  LOOM_TRY(loom_matmul(g, x, wv, 0, 0, &h));
  LOOM_TRY(loom_matmul(g, h, wv, 0, 0, &y));
  return loom_graph_output(g, y);
}

/* Runs e on x of [n, 4] against the interpreter on e's graph. */
static void run_symbolic(rt_entry_t *e, int64_t n) {
  int64_t shape[2] = {n, 4};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 2, shape, -1, 1), *y = NULL, *want = NULL;
  loom_tensor_create(LOOM_F32, 2, shape, &y);
  /* a binding said matched still binds the runtime symbols (n) */
  rt_binding_t matched = {.matched = true};
  CHECK_OK(rt_entry_run(e, 1, &x, 1, &y, n % 2 ? &matched : NULL));
  CHECK_OK(loom_interpret(rt_entry_graph(e), 1, &x, 1, &want));
  for (int64_t i = 0; want && i < n * 4; i++) CHECK_NEAR(test_get(y, i), test_get(want, i), 1e-5, 1e-5);
  loom_tensor_destroy(x);
  loom_tensor_destroy(y);
  loom_tensor_destroy(want);
}

/* One executable for every n: an arena regrown by a run with a larger n
 * is counted when the entry is released. */
static void test_symbolic_bytes(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  rt_key_input_t in = {.dtype = LOOM_F32, .rank = 2, .dims = {RT_DIM_ANY, 4}};
  rt_key_t k = {.structure = 0x5eed2, .site = 12, .n_inputs = 1, .inputs = &in};
  rt_key_finish(&k);
  rt_builder_t b = {build_symbolic, NULL, NULL};
  rt_get_result_t r;
  rt_entry_t *e = NULL;
  CHECK_OK(rt_cache_get(c, &k, &b, true, 0, &r, &e));
  CHECK(r == RT_READY && e);
  if (!e) {
    loom_cache_destroy(c);
    return;
  }
  run_symbolic(e, 3);
  rt_entry_release(c, e);
  int64_t small = stats_of(c).bytes;
  e = rt_cache_lookup(c, &k);
  CHECK(e != NULL);
  if (e) run_symbolic(e, 5000);
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  CHECK_OK(loom_executable_info(rt_entry_executable(e), &info));
  rt_entry_release(c, e);
  int64_t large = stats_of(c).bytes;
  /* h alone is 5000 x 4 floats. */
  CHECK(large - small >= 5000 * 4 * 4);
  CHECK(stats_of(c).compiles == 1);
  loom_cache_destroy(c);
}

/* ---- The listing ---- */

/* The key listed with site site and inputs' first dim kind `kind`, or
 * -1; its info and input in *k and *in. */
static int64_t listed(const loom_cache_keys_t *keys, int64_t n, uint64_t site,
                      loom_key_dim_t kind, loom_cache_key_info_t *k,
                      loom_cache_key_input_t *in) {
  for (int64_t i = 0; i < n; i++) {
    *k = (loom_cache_key_info_t)LOOM_CACHE_KEY_INFO_INIT;
    *in = (loom_cache_key_input_t)LOOM_CACHE_KEY_INPUT_INIT;
    CHECK_OK(loom_cache_keys_get(keys, i, k));
    if (k->site != site || k->n_inputs != 1) continue;
    CHECK_OK(loom_cache_keys_input(keys, i, 0, in));
    if (in->kinds[in->rank - 1] == kind) return i;
  }
  return -1;
}

/* Hand-made keys listed: a dim marked as a bucket lists as one (and is
 * another key than the same exact size), RT_DIM_ANY as any; hits count
 * lookups that found the key ready and runs counted as stitched; misses
 * count every lookup that did not; a failed key keeps its reason; a
 * speculative one says so, with no miss; a held entry is in use. */
static void test_key_listing(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 1, &c));
  int64_t shape[2] = {3, 32};
  rt_key_input_t bucketed = {.dtype = LOOM_F32, .rank = 2, .dims = {RT_DIM_ANY, 32},
                             .bucket = {0, 1}};
  rt_key_input_t exact = {.dtype = LOOM_F32, .rank = 2, .dims = {RT_DIM_ANY, 32}};
  rt_key_t kb = {.structure = STRUCTURE, .site = 20, .n_inputs = 1, .inputs = &bucketed};
  rt_key_t ke = {.structure = STRUCTURE, .site = 20, .n_inputs = 1, .inputs = &exact};
  rt_key_finish(&kb);
  rt_key_finish(&ke);
  CHECK(kb.hash != ke.hash);
  rt_get_result_t r;
  rt_entry_t *e = NULL, *held = NULL;
  rt_builder_t b = builder_for(2, shape, false);
  CHECK_OK(rt_cache_get(c, &kb, &b, true, 0, &r, &e));
  CHECK(r == RT_READY);
  rt_entry_release(c, e);
  CHECK((held = rt_cache_lookup(c, &kb)) != NULL);
  b = builder_for(2, shape, false);
  CHECK_OK(rt_cache_get(c, &kb, &b, true, 0, &r, &e));
  CHECK(r == RT_READY);
  rt_entry_release(c, e);
  b = builder_for(2, shape, false);
  CHECK_OK(rt_cache_get(c, &ke, &b, true, 0, &r, &e));
  CHECK(r == RT_READY);
  rt_entry_release(c, e);
  /* A failing key, asked three times. */
  int64_t nine = 9, big = 64;
  rt_key_input_t in;
  rt_key_t kf = key_for(&in, 21, 1, &nine);
  for (int i = 0; i < 3; i++) {
    b = builder_for(1, &nine, true);
    CHECK_OK(rt_cache_get(c, &kf, &b, true, 0, &r, &e));
    CHECK(r == RT_FAILED);
  }
  /* A speculative key, then one hit and two stitched runs. */
  rt_key_input_t in2;
  rt_key_t ks = key_for(&in2, 22, 1, &big);
  b = builder_for(1, &big, false);
  CHECK_OK(rt_cache_speculate(c, &ks, &b));
  rt_cache_drain(c);
  CHECK((e = rt_cache_lookup(c, &ks)) != NULL);
  rt_entry_count_stitched(e);
  rt_entry_count_stitched(e);
  rt_entry_release(c, e);
  /* A bucket mark on a symbolic dim is no key. */
  rt_key_input_t wrong = {.dtype = LOOM_F32, .rank = 1, .dims = {RT_DIM_ANY}, .bucket = {1}};
  rt_key_t kw = {.structure = STRUCTURE, .site = 23, .n_inputs = 1, .inputs = &wrong};
  rt_key_finish(&kw);
  b = builder_for(1, &nine, false);
  CHECK_ERR(rt_cache_get(c, &kw, &b, true, 0, &r, &e), LOOM_ERR_INVALID, "bucket mark 1");

  loom_cache_keys_t *keys = NULL;
  int64_t n = 0;
  CHECK_OK(loom_cache_list_keys(c, &keys, &n));
  CHECK(n == 4);
  loom_cache_key_info_t k;
  loom_cache_key_input_t x;
  CHECK(listed(keys, n, 20, LOOM_KEY_BUCKET, &k, &x) >= 0);
  CHECK(k.hash == kb.hash && k.structure == STRUCTURE && k.path == 0);
  CHECK(k.state == LOOM_KEY_READY && k.hits == 2 && k.stitched == 0 && k.misses == 1);
  CHECK(k.in_use == 1 && !k.speculative && k.error == NULL && k.bytes > 0);
  CHECK(x.dtype == LOOM_F32 && x.rank == 2 && x.kinds[0] == LOOM_KEY_ANY && x.dims[0] == -1 &&
        x.dims[1] == 32);
  CHECK(listed(keys, n, 20, LOOM_KEY_EXACT, &k, &x) >= 0);
  CHECK(k.hash == ke.hash && k.hits == 0 && k.misses == 1 && k.in_use == 0);
  CHECK(x.kinds[0] == LOOM_KEY_ANY && x.dims[1] == 32);
  CHECK(listed(keys, n, 21, LOOM_KEY_EXACT, &k, &x) >= 0);
  CHECK(k.state == LOOM_KEY_FAILED && k.hits == 0 && k.misses == 3);
  CHECK(k.error && strstr(k.error, "refused by the test"));
  CHECK(x.rank == 1 && x.dims[0] == 9);
  CHECK(listed(keys, n, 22, LOOM_KEY_EXACT, &k, &x) >= 0);
  CHECK(k.state == LOOM_KEY_READY && k.speculative && k.misses == 0);
  CHECK(k.hits == 3 && k.stitched == 2);
  CHECK(x.dims[0] == 64);
  loom_cache_keys_destroy(keys);
  /* The report's lines: one per key, the bucket and the symbolic dim as
   * written in trace.h. */
  core_text_t t = {0};
  CHECK_OK(rt_cache_describe(c, &t));
  CHECK(t.s && strstr(t.s, " ready ") && strstr(t.s, " f32[any,b32]\n") &&
        strstr(t.s, " f32[any,32]\n") && strstr(t.s, " f32[64] (speculative)\n") &&
        strstr(t.s, " failed ") && strstr(t.s, " f32[9]: refused by the test"));
  free(t.s);
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.hits == 3 && s.misses == 5);
  rt_entry_release(c, held);
  loom_cache_destroy(c);
}

/* ---- Four threads on one cache ---- */

enum { THREADS = 4, ROUNDS = 150, KEYS = 6 };
static const int64_t shared_sizes[KEYS] = {3, 5, 7, 9, 11, 13};

typedef struct hammer {
  loom_cache_t *c;
  uint64_t seed;
  int gets, speculates, lookup_hits, errors;
} hammer_t;

static void *hammer_main(void *arg) {
  hammer_t *h = arg;
  uint64_t x = h->seed;
  for (int i = 0; i < ROUNDS; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int64_t n = shared_sizes[(x >> 33) % KEYS];
    int op = (int)((x >> 40) % 4);
    rt_key_input_t in;
    rt_key_t k = key_for(&in, 9, 1, &n);
    rt_entry_t *e = NULL;
    if (op == 3) {
      if ((e = rt_cache_lookup(h->c, &k))) h->lookup_hits++;
    } else {
      rt_builder_t b = builder_for(1, &n, false);
      rt_get_result_t r = RT_FAILED;
      if (op == 2) {
        h->speculates++;
        h->errors += rt_cache_speculate(h->c, &k, &b) != LOOM_OK;
        continue;
      }
      h->gets++;
      h->errors += rt_cache_get(h->c, &k, &b, op == 0, 0, &r, &e) != LOOM_OK;
      h->errors += r == RT_FAILED || r == RT_OVER_LIMIT || (op == 0 && r != RT_READY);
    }
    if (e) h->errors += entry_errors(e, 1, &n);
    rt_entry_release(h->c, e);
  }
  return NULL;
}

/* Lists the cache's keys until told to stop, while the hammers run:
 * every copy must be whole (keys of the hammers' shape, in a state). */
typedef struct lister {
  loom_cache_t *c;
  atomic_bool stop;
  int lists, errors;
} lister_t;

static int list_errors(loom_cache_t *c) {
  loom_cache_keys_t *keys = NULL;
  int64_t n = 0;
  int errors = loom_cache_list_keys(c, &keys, &n) != LOOM_OK || n > KEYS;
  for (int64_t i = 0; i < n && !errors; i++) {
    loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
    loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
    errors += loom_cache_keys_get(keys, i, &k) != LOOM_OK ||
              loom_cache_keys_input(keys, i, 0, &in) != LOOM_OK;
    errors += k.site != 9 || k.n_inputs != 1 || k.hits < 0 || k.misses < 0 ||
              k.state == LOOM_KEY_FAILED || in.rank != 1 || in.kinds[0] != LOOM_KEY_EXACT;
    int known = 0;
    for (int j = 0; j < KEYS; j++) known |= in.dims[0] == shared_sizes[j];
    errors += !known;
  }
  loom_cache_keys_destroy(keys);
  return errors;
}

static void *lister_main(void *arg) {
  lister_t *l = arg;
  while (!atomic_load(&l->stop)) {
    l->errors += list_errors(l->c);
    l->lists++;
  }
  return NULL;
}

static void test_threads(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 2, &c));
  lister_t lister = {.c = c};
  pthread_t lister_thread;
  CHECK(pthread_create(&lister_thread, NULL, lister_main, &lister) == 0);
  atomic_store(&builds, 0);
  atomic_store(&frees, 0);
  hammer_t h[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    h[i] = (hammer_t){.c = c, .seed = 1000 + (uint64_t)i};
    CHECK(pthread_create(&t[i], NULL, hammer_main, &h[i]) == 0);
  }
  int gets = 0, speculates = 0, lookup_hits = 0, errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    gets += h[i].gets, speculates += h[i].speculates;
    lookup_hits += h[i].lookup_hits, errors += h[i].errors;
  }
  atomic_store(&lister.stop, true);
  pthread_join(lister_thread, NULL);
  rt_cache_drain(c);
  CHECK(errors == 0);
  CHECK(lister.errors == 0 && lister.lists > 0);
  /* Every key once more, then: each was compiled exactly once. */
  for (int i = 0; i < KEYS; i++) {
    rt_entry_t *e;
    CHECK(get1(c, 9, shared_sizes[i], 0, &e) == RT_READY);
    rt_entry_release(c, e);
  }
  gets += KEYS;
  loom_cache_stats_t s = stats_of(c);
  CHECK(s.compiles == KEYS && s.entries == KEYS && s.failed_compiles == 0);
  CHECK(atomic_load(&builds) == KEYS);
  CHECK(s.hits + s.misses == gets + lookup_hits);
  CHECK(atomic_load(&frees) == gets + speculates);
  CHECK(s.spec_compiles <= KEYS && s.evictions == 0);
  /* Each lookup counted on its key: the keys' counts add up. */
  loom_cache_keys_t *keys = NULL;
  int64_t n = 0, key_hits = 0, key_misses = 0;
  CHECK_OK(loom_cache_list_keys(c, &keys, &n));
  for (int64_t i = 0; i < n; i++) {
    loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
    CHECK_OK(loom_cache_keys_get(keys, i, &k));
    key_hits += k.hits, key_misses += k.misses;
  }
  loom_cache_keys_destroy(keys);
  CHECK(n == KEYS && key_hits == s.hits && key_misses == s.misses);
  printf("  threads: %d gets, %d speculates, %d lookup hits; %lld hits, %lld misses, %lld "
         "compiles (%lld speculative)\n",
         gets, speculates, lookup_hits, (long long)s.hits, (long long)s.misses,
         (long long)s.compiles, (long long)s.spec_compiles);
  loom_cache_destroy(c);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* A hit (lookup and release) must cost well under a microsecond. */
static void test_hit_cost(void) {
  loom_cache_t *c;
  CHECK_OK(loom_cache_create(0, 0, &c));
  rt_entry_t *e;
  for (int i = 0; i < 64; i++) { /* a table with some entries */
    CHECK(get1(c, 10, 1 + i % 8, 0, &e) == RT_READY);
    rt_entry_release(c, e);
  }
  int64_t n = 5;
  rt_key_input_t in;
  rt_key_t k = key_for(&in, 10, 1, &n);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  enum { N = 20000 };
#else
  enum { N = 200000 };
#endif
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now_ns();
    for (int i = 0; i < N; i++) {
      e = rt_cache_lookup(c, &k);
      rt_entry_release(c, e);
    }
    double ns = (now_ns() - t0) / N;
    if (ns < best) best = ns;
  }
  printf("  hit (lookup + release): %.0f ns\n", best);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  CHECK(best < 1000);
#endif
  CHECK(stats_of(c).hits == 5 * N + 56);
  loom_cache_destroy(c);
}

/* A key compiled by an earlier cache over the same cache directory (an
 * earlier run) loads on a free worker while the caller goes on, and on
 * the caller when the worker is busy; a failed compile is not taken for
 * one. */
static void test_journal(void) {
  rt_key_input_t in, in2;
  int64_t n = 77, m = 79, bad = 78, busy = 80;
  for (int round = 0; round < 2; round++) {
    loom_cache_t *c = NULL;
    CHECK_OK(loom_cache_create(0, 1, &c));
    rt_key_t k = key_for(&in, 12, 1, &n);
    rt_builder_t b = builder_for(1, &n, false);
    rt_entry_t *e = NULL;
    rt_get_result_t r = RT_FAILED;
    CHECK(rt_cache_has_key(c, &k) == (round == 1));
    CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
    CHECK(r == RT_PENDING && !e);
    rt_cache_drain(c);
    b = builder_for(1, &n, false);
    CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
    CHECK(r == RT_READY && e);
    rt_entry_release(c, e);
    /* the worker held by a compile that waits on a gate */
    _Atomic int gate = 0;
    int before = atomic_load(&builds);
    rt_key_t kb = key_for(&in2, 13, 1, &busy);
    b = builder_for(1, &busy, false);
    ((seg_ctx_t *)b.ctx)->gate = &gate;
    CHECK_OK(rt_cache_get(c, &kb, &b, false, 0, &r, &e));
    CHECK(r == RT_PENDING && !e);
    while (atomic_load(&builds) == before) nanosleep(&(struct timespec){0, 1000000}, NULL);
    k = key_for(&in, 12, 1, &m);
    b = builder_for(1, &m, false);
    e = NULL;
    CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
    CHECK(r == (round == 0 ? RT_PENDING : RT_READY));
    if (e) rt_entry_release(c, e);
    /* a compile that fails is never noted: pending in both rounds */
    k = key_for(&in, 12, 1, &bad);
    b = builder_for(1, &bad, true);
    e = NULL;
    CHECK_OK(rt_cache_get(c, &k, &b, false, 0, &r, &e));
    CHECK(r == RT_PENDING && !e);
    atomic_store(&gate, 1);
    rt_cache_drain(c);
    loom_cache_destroy(c);
  }
}

int main(void) {
  test_seed(5);
  /* a cache directory of its own: the journal of compiled keys
   * (cache_journal.c) must start empty for the tiered tests */
  char dir[] = "/tmp/loom-test-cache-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  setenv("LOOM_CACHE_DIR", dir, 1);
  TEST_RUN(test_key_hash);
  TEST_RUN(test_hits_and_misses);
  TEST_RUN(test_lru_eviction);
  TEST_RUN(test_failed_compile);
  TEST_RUN(test_eager_entries);
  TEST_RUN(test_held_lookups);
  TEST_RUN(test_recompile_limit);
  TEST_RUN(test_budget_identity);
  TEST_RUN(test_recompile_reasons);
  TEST_RUN(test_speculation);
  TEST_RUN(test_queue_order);
  TEST_RUN(test_drain_compiles_queued);
  TEST_RUN(test_environment_of_jobs);
  TEST_RUN(test_symbolic_bytes);
  TEST_RUN(test_key_listing);
  TEST_RUN(test_threads);
  TEST_RUN(test_hit_cost);
  TEST_RUN(test_journal);
  core_remove_tree(dir);
  return test_summary();
}
