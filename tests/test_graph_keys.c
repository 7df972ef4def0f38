/* The GraphKey listing (loom_trace_list_keys, loom_cache_list_keys) and
 * its lines in loom_trace_explain, against what a known program must
 * make: a trace over six steps with an exact, a symbolic and a bucketed
 * dim and a branch on a scalar has five keys, whose dims, paths and
 * counts follow from the steps by hand; a segment that cannot be compiled
 * is one failed key whose reason is the missing compiler; null and
 * out-of-range arguments fail with LOOM_ERR_INVALID; a caller's smaller
 * struct gets only its fields. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/ops.h"
#include "loom/trace.h"

/* A tensor of shape (rank 1 or 2) with every element v. */
static loom_tensor_t *filled(int rank, int64_t d0, int64_t d1, double v) {
  int64_t shape[2] = {d0, d1};
  int64_t n = rank == 1 ? d0 : d0 * d1;
  double *values = malloc(sizeof *values * (size_t)n);
  for (int64_t i = 0; i < n; i++) values[i] = v;
  loom_tensor_t *t = test_tensor(LOOM_F32, rank, shape, values);
  free(values);
  return t;
}

static loom_trace_t *private_trace(void) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0; /* no speculative entries: only the keys the steps need */
  o.input_dims.kind = LOOM_DIM_EXACT; /* undeclared dims keyed by size */
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

/* One step: x (n x 4; n symbolic, 4 exact) and y (m, bucketed to powers
 * of two) are summed; whether the sum is positive is read with
 * loom_trace_cond (the cut of segment A, inputs x and y); then x * 2 is
 * read (segment B, input x), the same ops on either branch, so the two
 * B keys differ in their path alone. */
static void keyed_step(loom_trace_t *t, int64_t n, int64_t m, double sign) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_tensor_t *xt = filled(2, n, 4, 0.5 * sign), *yt = filled(1, m, 0, 0.25 * sign);
  loom_dim_policy_t px[2] = {{.kind = LOOM_DIM_SYMBOLIC, .name = "n"}, {.kind = LOOM_DIM_EXACT}};
  loom_dim_policy_t py[1] = {{.kind = LOOM_DIM_BUCKET, .name = "m"}};
  loom_value_t x, y, sx, sy, s, zero, positive, two, z;
  CHECK_OK(loom_trace_input(t, xt, px, &x));
  CHECK_OK(loom_trace_input(t, yt, py, &y));
  CHECK_OK(loom_sum(g, x, 0, NULL, 0, &sx));
  CHECK_OK(loom_sum(g, y, 0, NULL, 0, &sy));
  CHECK_OK(loom_add(g, sx, sy, &s));
  CHECK_OK(loom_full(g, 0, NULL, 0.0, LOOM_F32, &zero));
  CHECK_OK(loom_gt(g, s, zero, &positive));
  int taken = -1;
  CHECK_OK(loom_trace_cond(t, positive, &taken));
  CHECK(taken == (sign > 0));
  CHECK_OK(loom_full(g, 0, NULL, 2.0, LOOM_F32, &two));
  CHECK_OK(loom_mul(g, x, two, &z));
  const loom_tensor_t *zt = NULL;
  CHECK_OK(loom_trace_read(t, z, &zt));
  if (zt) CHECK_NEAR(test_get(zt, 4 * n - 1), sign, 1e-6, 0);
  CHECK_OK(loom_trace_step_end(t));
  loom_tensor_destroy(xt);
  loom_tensor_destroy(yt);
}

/* What a key is expected to be: its inputs as text, counts by hand. */
typedef struct expected {
  const char *inputs; /* "f32[any,4] f32[b8]": dtype, then each dim's kind and size */
  int64_t hits, misses;
  int found;
} expected_t;

/* Input j of key i as "f32[any,4]", from the listing's fields. */
static void input_text(const loom_cache_keys_t *keys, int64_t i, int j, char *buf, size_t size) {
  loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
  CHECK_OK(loom_cache_keys_input(keys, i, j, &in));
  size_t len = (size_t)snprintf(buf, size, "%s[", loom_dtype_name(in.dtype));
  for (int d = 0; d < in.rank && len < size; d++) {
    const char *sep = d ? "," : "";
    if (in.kinds[d] == LOOM_KEY_ANY) {
      CHECK(in.dims[d] == -1);
      len += (size_t)snprintf(buf + len, size - len, "%sany", sep);
    } else {
      CHECK(in.dims[d] > 0);
      len += (size_t)snprintf(buf + len, size - len, "%s%s%lld", sep,
                              in.kinds[d] == LOOM_KEY_BUCKET ? "b" : "", (long long)in.dims[d]);
    }
  }
  if (len < size) snprintf(buf + len, size - len, "]");
}

/* Key i's inputs, space-separated. */
static void key_inputs(const loom_cache_keys_t *keys, int64_t i, int n_inputs, char *buf,
                       size_t size) {
  buf[0] = '\0';
  for (int j = 0; j < n_inputs; j++) {
    char one[64];
    input_text(keys, i, j, one, sizeof one);
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s%s", j ? " " : "", one);
  }
}

/* The line of report that ends with tail (a key's inputs), copied into
 * line; 0 when there is none or more than one. */
static int line_ending(const char *report, const char *tail, char *line, size_t size) {
  int found = 0;
  for (const char *p = report; p && *p;) {
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    size_t n = strlen(tail);
    if (len > n && !memcmp(p + len - n, tail, n) && p[len - n - 1] == ' ') {
      snprintf(line, size, "%.*s", (int)len, p);
      found++;
    }
    p = end ? end + 1 : NULL;
  }
  return found == 1;
}

/* Steps, by hand (buckets are powers of two; B's path is the branch):
 *   n  m (bucket) sign   A                 B
 *   3  5 (8)      +      miss A_b8         miss B+
 *   6  7 (8)      +      hit A_b8          hit B+
 *   2 12 (16)     +      miss A_b16        hit B+
 *   5  6 (8)      -      hit A_b8          miss B-
 *   3  3 (4)      -      miss A_b4         hit B-
 *   4  8 (8)      +      hit A_b8          hit B+
 * Five keys; A's inputs x = f32[any,4] and y at its bucket; B's input x. */
static void test_keys_of_a_trace(void) {
  loom_trace_t *t = private_trace();
  static const int64_t ns[6] = {3, 6, 2, 5, 3, 4}, ms[6] = {5, 7, 12, 6, 3, 8};
  static const double signs[6] = {1, 1, 1, -1, -1, 1};
  for (int k = 0; k < 6; k++) keyed_step(t, ns[k], ms[k], signs[k]);
  expected_t want[5] = {{"f32[any,4] f32[b8]", 3, 1, 0}, {"f32[any,4] f32[b16]", 0, 1, 0},
                        {"f32[any,4] f32[b4]", 0, 1, 0}, {"f32[any,4]", 3, 1, 0},
                        {"f32[any,4]", 1, 1, 0}};
  loom_cache_keys_t *keys = NULL;
  int64_t n = -1;
  CHECK_OK(loom_trace_list_keys(t, &keys, &n));
  CHECK(n == 5);
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.interpreted == 0 && s.misses == 5 && s.hits == 7);
  char *report = NULL;
  CHECK_OK(loom_trace_explain(t, &report));
  int64_t hits = 0, stitched = 0, misses = 0;
  uint64_t a_site = 0, a_structure = 0, b_site = 0, b_structure = 0, b_paths[2] = {0, 0};
  int n_b = 0;
  for (int64_t i = 0; i < n; i++) {
    loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
    CHECK_OK(loom_cache_keys_get(keys, i, &k));
    CHECK(k.size == sizeof k);
    CHECK(k.state == LOOM_KEY_READY && k.error == NULL && !k.speculative);
    CHECK(k.compile_ms > 0 && k.bytes > 0);
    CHECK(k.stitched >= 0 && k.stitched <= k.hits);
    hits += k.hits, stitched += k.stitched, misses += k.misses;
    char inputs[128];
    key_inputs(keys, i, k.n_inputs, inputs, sizeof inputs);
    bool is_b = k.n_inputs == 1;
    /* A's keys: one site and structure, no path; B's: another structure,
     * one path per branch. */
    if (!is_b) {
      CHECK(k.path == 0);
      if (!a_site) a_site = k.site, a_structure = k.structure;
      CHECK(k.site == a_site && k.structure == a_structure);
    } else {
      CHECK(k.path != 0);
      if (!b_site) b_site = k.site, b_structure = k.structure;
      CHECK(k.site == b_site && k.structure == b_structure);
      if (n_b < 2) b_paths[n_b++] = k.path;
    }
    /* B+ and B- have the same inputs: told apart by their hits. */
    int match = -1;
    for (int w = 0; w < 5; w++)
      if (!want[w].found && !strcmp(want[w].inputs, inputs) && want[w].hits == k.hits) match = w;
    if (match < 0) {
      test_fail(__FILE__, __LINE__, "unexpected key %s (%lld hits)", inputs, (long long)k.hits);
      continue;
    }
    want[match].found = 1;
    CHECK(k.misses == want[match].misses);
    /* The report's line of this key says the same. */
    char line[512] = "", state[16] = "";
    unsigned long long site = 0, structure = 0, path = 0;
    long long line_hits = -1, line_stitched = -1, line_misses = -1, line_bytes = -1;
    double ms = -1;
    char tail[160];
    snprintf(tail, sizeof tail, "%s", inputs);
    if (is_b) { /* two lines end the same: pick this one by its path */
      snprintf(tail, sizeof tail, "%016llx", (unsigned long long)k.path);
      const char *at = report ? strstr(report, tail) : NULL;
      const char *start = at;
      while (start && start > report && start[-1] != '\n') start--;
      if (start) snprintf(line, sizeof line, "%.*s", (int)strcspn(start, "\n"), start);
    } else {
      CHECK(report && line_ending(report, tail, line, sizeof line));
    }
    CHECK(sscanf(line, "%llx %llx %llx %15s %lld %lld %lld %lf %lld", &site, &structure, &path,
                 state, &line_hits, &line_stitched, &line_misses, &ms, &line_bytes) == 9);
    CHECK(site == k.site && structure == k.structure && path == k.path);
    CHECK(!strcmp(state, "ready") && line_hits == want[match].hits && line_misses == 1);
    CHECK(line_stitched == k.stitched && line_bytes == k.bytes);
    CHECK(strlen(line) > strlen(inputs) && !strcmp(line + strlen(line) - strlen(inputs), inputs));
  }
  for (int w = 0; w < 5; w++) CHECK(want[w].found);
  CHECK(a_structure != b_structure && a_site != b_site);
  CHECK(n_b == 2 && b_paths[0] != b_paths[1]);
  /* The counters add up to the trace's and its private cache's. */
  CHECK(hits == s.hits && stitched == s.stitched && misses == s.misses);
  CHECK(hits - stitched == s.cache.hits && misses == s.cache.misses && n == s.cache.entries);
  loom_free(report);
  loom_cache_keys_destroy(keys);
  loom_trace_destroy(t);
}

/* x -> tanh(x) + 1, read: one segment, one key per shape. */
static void plain_step(loom_trace_t *t, int64_t n) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_tensor_t *xt = filled(1, n, 0, 0.5);
  loom_value_t x, h, one, y;
  CHECK_OK(loom_trace_input(t, xt, NULL, &x));
  CHECK_OK(loom_tanh(g, x, &h));
  CHECK_OK(loom_full(g, 0, NULL, 1.0, LOOM_F32, &one));
  CHECK_OK(loom_add(g, h, one, &y));
  const loom_tensor_t *yt = NULL;
  CHECK_OK(loom_trace_read(t, y, &yt));
  if (yt) CHECK_NEAR(test_get(yt, 0), tanh(0.5) + 1, 1e-6, 1e-6);
  CHECK_OK(loom_trace_step_end(t));
  loom_tensor_destroy(xt);
}

/* Without a C compiler the segment's key is cached as failed, with the
 * reason; every step's lookup of it is a miss, and none a hit. Beside it,
 * the eager entry of the same key: the graph the fallback interpreter
 * runs. */
static void test_failed_key(void) {
  setenv("LOOM_CC", "/nonexistent/loom-test-cc", 1);
  loom_trace_t *t = private_trace();
  for (int k = 0; k < 3; k++) plain_step(t, 5);
  unsetenv("LOOM_CC");
  loom_cache_keys_t *keys = NULL;
  int64_t n = -1;
  CHECK_OK(loom_trace_list_keys(t, &keys, &n));
  CHECK(n == 2);
  loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT, other = LOOM_CACHE_KEY_INFO_INIT;
  int failed = 0;
  CHECK_OK(loom_cache_keys_get(keys, 0, &k));
  if (k.state != LOOM_KEY_FAILED) {
    failed = 1;
    CHECK_OK(loom_cache_keys_get(keys, 1, &k));
  }
  CHECK_OK(loom_cache_keys_get(keys, 1 - failed, &other));
  CHECK(other.state == LOOM_KEY_EAGER && other.site == k.site && other.structure == k.structure &&
        other.hits == 0 && other.misses == 0 && other.bytes > 0);
  CHECK(k.state == LOOM_KEY_FAILED && k.hits == 0 && k.stitched == 0 && k.misses == 3);
  CHECK(k.error && strstr(k.error, "no code could be generated"));
  CHECK(k.n_inputs == 1 && k.path == 0);
  loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
  CHECK_OK(loom_cache_keys_input(keys, failed, 0, &in));
  CHECK(in.dtype == LOOM_F32 && in.rank == 1 && in.kinds[0] == LOOM_KEY_EXACT && in.dims[0] == 5);
  char *report = NULL, line[512] = "";
  CHECK_OK(loom_trace_explain(t, &report));
  const char *at = report ? strstr(report, " failed ") : NULL;
  const char *start = at;
  while (start && start > report && start[-1] != '\n') start--;
  if (start) snprintf(line, sizeof line, "%.*s", (int)strcspn(start, "\n"), start);
  CHECK(strstr(line, " f32[5]: no code could be generated"));
  loom_free(report);
  loom_cache_keys_destroy(keys);
  loom_trace_destroy(t);
}

/* Nulls and indices out of range fail with LOOM_ERR_INVALID and say
 * which; an empty cache lists no key. */
static void test_bad_arguments(void) {
  loom_cache_t *c = NULL;
  CHECK_OK(loom_cache_create(0, 0, &c));
  loom_cache_keys_t *keys = (loom_cache_keys_t *)&c; /* must be reset */
  int64_t n = 77;
  CHECK_ERR(loom_cache_list_keys(NULL, &keys, &n), LOOM_ERR_INVALID, "'c' is null");
  CHECK(keys == NULL && n == 0);
  CHECK_ERR(loom_cache_list_keys(c, NULL, &n), LOOM_ERR_INVALID, "'out' is null");
  CHECK_ERR(loom_cache_list_keys(c, &keys, NULL), LOOM_ERR_INVALID, "'n' is null");
  CHECK_ERR(loom_trace_list_keys(NULL, &keys, &n), LOOM_ERR_INVALID, "'t' is null");
  CHECK_OK(loom_cache_list_keys(c, &keys, &n));
  CHECK(keys != NULL && n == 0);
  loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
  CHECK_ERR(loom_cache_keys_get(keys, 0, &k), LOOM_ERR_INVALID, "out of range");
  CHECK_ERR(loom_cache_keys_get(NULL, 0, &k), LOOM_ERR_INVALID, "'keys' is null");
  loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
  CHECK_ERR(loom_cache_keys_input(keys, 0, 0, &in), LOOM_ERR_INVALID, "out of range");
  loom_cache_keys_destroy(keys);
  loom_cache_keys_destroy(NULL);
  loom_cache_destroy(c);

  loom_trace_t *t = private_trace();
  plain_step(t, 3);
  CHECK_OK(loom_trace_list_keys(t, &keys, &n));
  CHECK(n == 1);
  CHECK_ERR(loom_cache_keys_get(keys, -1, &k), LOOM_ERR_INVALID, "key -1 is out of range");
  CHECK_ERR(loom_cache_keys_get(keys, 1, &k), LOOM_ERR_INVALID, "key 1 is out of range");
  CHECK_ERR(loom_cache_keys_get(keys, 0, NULL), LOOM_ERR_INVALID, "null");
  loom_cache_key_info_t unset = {0};
  CHECK_ERR(loom_cache_keys_get(keys, 0, &unset), LOOM_ERR_INVALID, "size");
  CHECK_ERR(loom_cache_keys_input(keys, 0, 1, &in), LOOM_ERR_INVALID, "not an input 1");
  CHECK_ERR(loom_cache_keys_input(keys, 0, -1, &in), LOOM_ERR_INVALID, "not an input -1");
  CHECK_ERR(loom_cache_keys_input(keys, 0, 0, NULL), LOOM_ERR_INVALID, "null");
  loom_cache_keys_destroy(keys);
  loom_trace_destroy(t);
}

/* A caller built against a header whose loom_cache_key_info_t ended
 * after n_inputs gets those fields, and nothing past them is written. */
static void test_older_struct(void) {
  loom_trace_t *t = private_trace();
  plain_step(t, 3);
  loom_cache_keys_t *keys = NULL;
  int64_t n = 0;
  CHECK_OK(loom_trace_list_keys(t, &keys, &n));
  size_t old = offsetof(loom_cache_key_info_t, n_inputs) + sizeof(int);
  loom_cache_key_info_t k;
  memset(&k, 0x5a, sizeof k);
  k.size = old;
  CHECK_OK(loom_cache_keys_get(keys, 0, &k));
  CHECK(k.size == old && k.n_inputs == 1 && k.site != 0x5a5a5a5a5a5a5a5aull);
  unsigned char *tail = (unsigned char *)&k + old;
  int untouched = 1;
  for (size_t i = old; i < sizeof k; i++, tail++) untouched &= *tail == 0x5a;
  CHECK(untouched);
  loom_cache_keys_destroy(keys);
  loom_trace_destroy(t);
}

/* A list is a copy: later steps change the cache, not the list. */
static void test_list_is_a_copy(void) {
  loom_trace_t *t = private_trace();
  plain_step(t, 3);
  loom_cache_keys_t *before = NULL, *after = NULL;
  int64_t n0 = 0, n1 = 0;
  CHECK_OK(loom_trace_list_keys(t, &before, &n0));
  plain_step(t, 3);
  plain_step(t, 4);
  CHECK_OK(loom_trace_list_keys(t, &after, &n1));
  CHECK(n0 == 1 && n1 == 2);
  loom_cache_key_info_t k = LOOM_CACHE_KEY_INFO_INIT;
  CHECK_OK(loom_cache_keys_get(before, 0, &k));
  CHECK(k.hits == 0 && k.misses == 1);
  /* the most recently used first: size 4, then size 3 with its hit */
  loom_cache_key_input_t in = LOOM_CACHE_KEY_INPUT_INIT;
  CHECK_OK(loom_cache_keys_input(after, 0, 0, &in));
  CHECK(in.dims[0] == 4);
  CHECK_OK(loom_cache_keys_input(after, 1, 0, &in));
  CHECK(in.dims[0] == 3);
  CHECK_OK(loom_cache_keys_get(after, 1, &k));
  CHECK(k.hits == 1 && k.misses == 1);
  loom_cache_keys_destroy(before);
  loom_cache_keys_destroy(after);
  loom_trace_destroy(t);
}

int main(void) {
  TEST_RUN(test_keys_of_a_trace);
  TEST_RUN(test_failed_key);
  TEST_RUN(test_bad_arguments);
  TEST_RUN(test_older_struct);
  TEST_RUN(test_list_is_a_copy);
  return test_summary();
}
