/* Versioned structs (loom.h): a caller built against an older header, whose
 * struct is shorter, gets only the bytes it has; one built against a newer
 * header, whose struct is longer, gets this library's fields and learns
 * how many from size; options past an older caller's size take their
 * defaults, whatever its memory holds there; an unset size is an error,
 * never a write out of bounds. */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "harness.h"
#include "loom/checkpoint.h"
#include "loom/trace.h"

#define SENTINEL 0xA5
#define SLACK 64

/* Whether bytes [from, to) of p all hold the sentinel. */
static bool untouched(const unsigned char *p, size_t from, size_t to) {
  for (size_t i = from; i < to; i++)
    if (p[i] != SENTINEL) return false;
  return true;
}

/* A struct of `size` bytes as the caller declares it, in a buffer SLACK
 * bytes longer, the rest sentinel. */
static void prepare(unsigned char *buf, size_t bufsize, size_t size) {
  memset(buf, SENTINEL, bufsize);
  memcpy(buf, &size, sizeof size);
}

static size_t size_of(const unsigned char *buf) {
  size_t s;
  memcpy(&s, buf, sizeof s);
  return s;
}

/* An older caller of loom_stats_get knows the fields before disk_hits. */
static void older_output(void) {
  unsigned char buf[sizeof(loom_stats_t) + SLACK];
  size_t old = offsetof(loom_stats_t, disk_hits);
  prepare(buf, sizeof buf, old);
  CHECK_OK(loom_stats_get((loom_stats_t *)buf));
  CHECK(size_of(buf) == old);
  CHECK(untouched(buf, old, sizeof buf));
  loom_stats_t full = LOOM_STATS_INIT;
  CHECK_OK(loom_stats_get(&full));
  CHECK(full.size == sizeof full);
  loom_stats_t *s = (loom_stats_t *)buf;
  CHECK(s->compiles == full.compiles && s->cc_invocations == full.cc_invocations);
}

/* A newer caller's struct is longer: the library fills its own fields,
 * says so in size, and leaves the newer ones alone. */
static void newer_output(void) {
  unsigned char buf[sizeof(loom_op_info_t) + SLACK];
  prepare(buf, sizeof buf, sizeof buf);
  CHECK_OK(loom_op_get_info(0, (loom_op_info_t *)buf));
  CHECK(size_of(buf) == sizeof(loom_op_info_t));
  CHECK(untouched(buf, sizeof(loom_op_info_t), sizeof buf));
  loom_op_info_t info = LOOM_OP_INFO_INIT;
  CHECK_OK(loom_op_get_info(0, &info));
  CHECK(!strcmp(((loom_op_info_t *)buf)->name, info.name));
}

/* 0 (never set) and garbage fail, naming the struct, and write nothing. */
static void unset_size(void) {
  unsigned char buf[sizeof(loom_op_info_t) + SLACK];
  size_t bad[] = {0, 3, LOOM_MAX_STRUCT_SIZE + 1, (size_t)-1};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    prepare(buf, sizeof buf, bad[i]);
    CHECK_ERR(loom_op_get_info(0, (loom_op_info_t *)buf), LOOM_ERR_INVALID,
              "loom_op_info_t.size");
    CHECK(size_of(buf) == bad[i] && untouched(buf, sizeof(size_t), sizeof buf));
    CHECK_ERR(loom_stats_get((loom_stats_t *)buf), LOOM_ERR_INVALID, "sizeof(loom_stats_t)");
  }
  CHECK_ERR(loom_stats_get(NULL), LOOM_ERR_INVALID, "out");
  loom_compile_options_t o;
  CHECK_ERR(loom_compile_options_init_sized(&o, 0), LOOM_ERR_INVALID,
            "loom_compile_options_t.size");
  CHECK_ERR(loom_compile_options_init_sized(NULL, sizeof o), LOOM_ERR_INVALID, "null");
}

/* An executable's info, cut before `fallback` as an older caller's. */
static void older_executable_info(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){4}, &x));
  CHECK_OK(loom_neg(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.use_cc = 0;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  unsigned char buf[sizeof(loom_executable_info_t) + SLACK];
  size_t old = offsetof(loom_executable_info_t, fallback);
  prepare(buf, sizeof buf, old);
  if (e) CHECK_OK(loom_executable_info(e, (loom_executable_info_t *)buf));
  CHECK(size_of(buf) == old && untouched(buf, old, sizeof buf));
  CHECK(((loom_executable_info_t *)buf)->n_nodes == 1);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* Options from an older caller: what lies past its size is not read.
 * n_symbols -1 would fail the compile if it were. */
static void older_compile_options(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){4}, &x));
  CHECK_OK(loom_exp(g, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  size_t old = offsetof(loom_compile_options_t, n_symbols);
  loom_compile_options_t o;
  memset(&o, SENTINEL, sizeof o);
  CHECK_OK(loom_compile_options_init_sized(&o, old));
  CHECK(o.size == old && o.fusion == 1 && o.use_cc == 1);
  CHECK(untouched((const unsigned char *)&o, old, sizeof o));
  o.use_cc = 0;
  o.n_symbols = -1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e) CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.fallback == LOOM_FALLBACK_DISABLED);
  loom_executable_destroy(e);
  /* The same options at full size are read whole: n_symbols is refused. */
  o.size = sizeof o;
  CHECK_ERR(loom_compile(g, &o, &e), LOOM_ERR_INVALID, "n_symbols");
  o.size = 0;
  CHECK_ERR(loom_compile(g, &o, &e), LOOM_ERR_INVALID, "loom_compile_options_t.size");
  loom_graph_destroy(g);
}

/* Trace options cut before recompile_limit: the garbage there (negative,
 * which loom_trace_create refuses) is not read. */
static void older_trace_options(void) {
  size_t old = offsetof(loom_trace_options_t, recompile_limit);
  loom_trace_options_t o;
  memset(&o, 0xff, sizeof o);
  CHECK_OK(loom_trace_options_init_sized(&o, old));
  o.compile = 0;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  if (t) CHECK_OK(loom_trace_get_stats(t, &s));
  CHECK(s.size == sizeof s && s.cache.size == sizeof s.cache && s.segments == 0);
  loom_trace_destroy(t);
  o.size = sizeof o;
  CHECK_ERR(loom_trace_create(&o, &t), LOOM_ERR_INVALID, "recompile_limit");
}

/* Checkpoint options: allow_unexpected past an older caller's size is
 * its default, strict. */
static void older_checkpoint_options(void) {
  loom_graph_t *g, *h;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_create(&h));
  loom_value_t p;
  CHECK_OK(loom_graph_param(g, "a", LOOM_F32, 1, (int64_t[]){2}, NULL, &p));
  CHECK_OK(loom_graph_param(g, "b", LOOM_F32, 1, (int64_t[]){2}, NULL, &p));
  CHECK_OK(loom_graph_param(h, "a", LOOM_F32, 1, (int64_t[]){2}, NULL, &p));
  const char *path = "test_sized_structs.safetensors";
  CHECK_OK(loom_checkpoint_save(g, path));
  loom_checkpoint_options_t o;
  memset(&o, 0xff, sizeof o);
  CHECK_OK(loom_checkpoint_options_init_sized(&o, offsetof(loom_checkpoint_options_t,
                                                           allow_unexpected)));
  CHECK_ERR(loom_checkpoint_load_ex(h, path, &o), LOOM_ERR_INVALID, "b");
  o.size = sizeof o;
  CHECK_OK(loom_checkpoint_load_ex(h, path, &o));
  remove(path);
  loom_graph_destroy(g);
  loom_graph_destroy(h);
}

int main(void) {
  TEST_RUN(older_output);
  TEST_RUN(newer_output);
  TEST_RUN(unset_size);
  TEST_RUN(older_executable_info);
  TEST_RUN(older_compile_options);
  TEST_RUN(older_trace_options);
  TEST_RUN(older_checkpoint_options);
  return test_summary();
}
