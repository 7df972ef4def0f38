/* The CPU toolchain: SHA-256 against the FIPS 180-4 test vectors; a
 * module compiled, cached on disk and loaded again without the compiler;
 * truncated and corrupt entries rebuilt, never loaded; a missing, failing
 * or rejecting compiler reported by name; two processes and several
 * threads building one module at once; the cache directory's defaults
 * and its fallback; the log lines. Each test has its own cache directory
 * under a fresh temporary one. */
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu/toolchain.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/sha256.h"
#include "harness.h"

static const char answer_source[] = "int answer(void) { return 42; }\n";
static char root[256]; /* this test's temporary directory */

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  remove(path);
  return 0;
}

/* A new temporary directory, made the cache directory (LOOM_CACHE_DIR). */
static void fresh_cache(void) {
  snprintf(root, sizeof root, "/tmp/loom-test-toolchain-XXXXXX");
  CHECK(mkdtemp(root) != NULL);
  char dir[300];
  snprintf(dir, sizeof dir, "%s/cache", root);
  setenv("LOOM_CACHE_DIR", dir, 1);
  unsetenv("LOOM_CC");
}

static void drop_cache(void) { nftw(root, remove_one, 8, FTW_DEPTH | FTW_PHYS); }

static cpu_toolchain_stats_t stats(void) {
  cpu_toolchain_stats_t s;
  cpu_toolchain_stats(&s);
  return s;
}

/* Builds source and returns what its function `name` returns (-1 if it
 * cannot), with the module released. */
static int build_and_call(const char *source, const char *name, bool *from_cache) {
  cpu_module_t *m = NULL;
  loom_status_t s = cpu_module_build(source, (int64_t)strlen(source), &m);
  CHECK_OK(s);
  if (s != LOOM_OK) return -1;
  int (*fn)(void) = (int (*)(void))cpu_module_symbol(m, name);
  CHECK(fn != NULL);
  int result = fn ? fn() : -1;
  if (from_cache) *from_cache = cpu_module_from_cache(m);
  cpu_module_release(m);
  return result;
}

static char *entry_path(const char *source) {
  cpu_module_t *m = NULL;
  CHECK_OK(cpu_module_build(source, (int64_t)strlen(source), &m));
  char *path = strdup(m ? cpu_module_path(m) : "");
  cpu_module_release(m);
  return path;
}

static void check_sha256(const char *message, const char *want) {
  char hex[CORE_SHA256_HEX];
  core_sha256_hex_of(message, strlen(message), hex);
  if (strcmp(hex, want) != 0) test_fail(__FILE__, __LINE__, "sha256(\"%s\") = %s", message, hex);
  test_checks++;
}

static void test_sha256_vectors(void) {
  check_sha256("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha256("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  check_sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
               "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

/* One million 'a's (FIPS 180-4 examples), fed in uneven pieces, so that
 * the buffering across block boundaries is exercised. */
static void test_sha256_incremental(void) {
  static char a[1000000];
  memset(a, 'a', sizeof a);
  core_sha256_t h;
  uint8_t digest[CORE_SHA256_BYTES];
  char hex[CORE_SHA256_HEX];
  core_sha256_init(&h);
  for (size_t done = 0, piece = 1; done < sizeof a; piece = piece % 131 + 1) {
    size_t n = piece < sizeof a - done ? piece : sizeof a - done;
    core_sha256_update(&h, a + done, n);
    done += n;
  }
  core_sha256_final(&h, digest);
  core_sha256_hex(digest, hex);
  CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

static void test_build_and_call(void) {
  fresh_cache();
  cpu_toolchain_stats_t before = stats();
  bool cached = true;
  CHECK(build_and_call(answer_source, "answer", &cached) == 42);
  CHECK(!cached);
  CHECK(stats().cc_invocations == before.cc_invocations + 1);
  char *path = entry_path(answer_source);
  CHECK(strncmp(path, root, strlen(root)) == 0);
  CHECK(strlen(path) > 3 && !strcmp(path + strlen(path) - 3, ".so"));
  /* The source is kept beside the entry, for people to read. */
  char source[4200];
  snprintf(source, sizeof source, "%.*s.c", (int)strlen(path) - 3, path);
  CHECK(access(source, R_OK) == 0);
  free(path);
  drop_cache();
}

static void test_second_build_is_disk_hit(void) {
  fresh_cache();
  CHECK(build_and_call(answer_source, "answer", NULL) == 42);
  cpu_toolchain_stats_t before = stats();
  bool cached = false;
  CHECK(build_and_call(answer_source, "answer", &cached) == 42);
  CHECK(cached);
  CHECK(stats().cc_invocations == before.cc_invocations);
  CHECK(stats().disk_hits == before.disk_hits + 1);
  CHECK(stats().disk_rebuilds == before.disk_rebuilds);
  drop_cache();
}

static void truncate_to_half(const char *path) {
  struct stat st;
  CHECK(stat(path, &st) == 0);
  CHECK(truncate(path, st.st_size / 2) == 0);
}

static void flip_middle_byte(const char *path) {
  struct stat st;
  CHECK(stat(path, &st) == 0);
  int fd = open(path, O_RDWR);
  unsigned char byte = 0;
  CHECK(fd >= 0 && pread(fd, &byte, 1, st.st_size / 2) == 1);
  byte ^= 0x10;
  CHECK(pwrite(fd, &byte, 1, st.st_size / 2) == 1);
  close(fd);
}

/* A damaged entry is rebuilt (counted), loads fine, and is a hit after. */
static void check_damage_rebuilt(void (*damage)(const char *)) {
  fresh_cache();
  char *path = entry_path(answer_source);
  damage(path);
  cpu_toolchain_stats_t before = stats();
  bool cached = true;
  CHECK(build_and_call(answer_source, "answer", &cached) == 42);
  CHECK(!cached);
  CHECK(stats().disk_rebuilds == before.disk_rebuilds + 1);
  CHECK(stats().cc_invocations == before.cc_invocations + 1);
  CHECK(stats().disk_hits == before.disk_hits);
  CHECK(build_and_call(answer_source, "answer", &cached) == 42);
  CHECK(cached);
  free(path);
  drop_cache();
}

static void test_truncated_entry_rebuilt(void) { check_damage_rebuilt(truncate_to_half); }
static void test_corrupt_entry_rebuilt(void) { check_damage_rebuilt(flip_middle_byte); }

static void test_missing_compiler(void) {
  fresh_cache();
  cpu_module_t *m = (cpu_module_t *)1;
  setenv("LOOM_CC", "/nonexistent", 1);
  CHECK_ERR(cpu_module_build(answer_source, (int64_t)strlen(answer_source), &m),
            LOOM_ERR_UNSUPPORTED, "C compiler '/nonexistent'");
  CHECK(m == NULL);
  setenv("LOOM_CC", "loom-no-such-compiler", 1);
  CHECK_ERR(cpu_module_build(answer_source, (int64_t)strlen(answer_source), &m),
            LOOM_ERR_UNSUPPORTED, "loom-no-such-compiler");
  unsetenv("LOOM_CC");
  drop_cache();
}

static void test_failing_compiler(void) {
  fresh_cache();
  char script[300];
  snprintf(script, sizeof script, "%s/broken-cc", root);
  FILE *f = fopen(script, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("#!/bin/sh\necho 'broken-cc: out of order' >&2\nexit 1\n", f);
  fclose(f);
  CHECK(chmod(script, 0755) == 0);
  setenv("LOOM_CC", script, 1);
  cpu_module_t *m = NULL;
  CHECK_ERR(cpu_module_build(answer_source, (int64_t)strlen(answer_source), &m),
            LOOM_ERR_UNSUPPORTED, "out of order");
  CHECK(strstr(loom_last_error(), script) != NULL);
  CHECK(strstr(loom_last_error(), "exit status 1") != NULL);
  CHECK(m == NULL);
  unsetenv("LOOM_CC");
  drop_cache();
}

static void test_syntax_error(void) {
  fresh_cache();
  const char *bad = "int answer(void) { return 42 }\n";
  cpu_module_t *m = NULL;
  CHECK_ERR(cpu_module_build(bad, (int64_t)strlen(bad), &m), LOOM_ERR_UNSUPPORTED, "error");
  CHECK(strstr(loom_last_error(), "C compiler 'cc'") != NULL);
  CHECK(m == NULL);
  drop_cache();
}

/* Two processes released at the same moment build one new module. */
static void test_two_processes(void) {
  fresh_cache();
  int gate[2];
  CHECK(pipe(gate) == 0);
  pid_t child[2];
  for (int i = 0; i < 2; i++) {
    child[i] = fork();
    if (child[i] == 0) {
      char c;
      close(gate[1]);
      (void)!read(gate[0], &c, 1);
      /* _exit: the child must not run the parent's exit handlers. */
      _exit(build_and_call(answer_source, "answer", NULL) == 42 && test_failures == 0 ? 0 : 1);
    }
  }
  close(gate[0]);
  close(gate[1]);
  for (int i = 0; i < 2; i++) {
    int status = -1;
    CHECK(child[i] > 0 && waitpid(child[i], &status, 0) == child[i]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  cpu_toolchain_stats_t before = stats();
  bool cached = false;
  CHECK(build_and_call(answer_source, "answer", &cached) == 42);
  CHECK(cached);
  CHECK(stats().cc_invocations == before.cc_invocations);
  drop_cache();
}

static void *thread_build(void *arg) {
  (void)arg;
  cpu_module_t *m = NULL;
  loom_status_t s = cpu_module_build(answer_source, (int64_t)strlen(answer_source), &m);
  int (*fn)(void) = s == LOOM_OK ? (int (*)(void))cpu_module_symbol(m, "answer") : NULL;
  intptr_t result = fn ? fn() : -1;
  cpu_module_release(m);
  return (void *)result;
}

static void test_threads(void) {
  fresh_cache();
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, thread_build, NULL) == 0);
  for (int i = 0; i < 4; i++) {
    void *result = NULL;
    pthread_join(t[i], &result);
    CHECK((intptr_t)result == 42);
  }
  drop_cache();
}

static void test_different_sources_different_keys(void) {
  fresh_cache();
  const char *other = "int answer(void) { return 43; }\n";
  char *a = entry_path(answer_source), *b = entry_path(other);
  CHECK(strcmp(a, b) != 0);
  CHECK(build_and_call(other, "answer", NULL) == 43);
  /* The compiler's arguments are part of its identity. */
  setenv("LOOM_CC", "cc -DUNUSED=1", 1);
  char *c = entry_path(answer_source);
  CHECK(strcmp(a, c) != 0);
  unsetenv("LOOM_CC");
  free(a);
  free(b);
  free(c);
  drop_cache();
}

static bool starts_with(const char *s, const char *prefix) {
  return !strncmp(s, prefix, strlen(prefix));
}

static void test_cache_dir_defaults(void) {
  fresh_cache();
  char *saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *saved_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char want[300];
  unsetenv("LOOM_CACHE_DIR");
  snprintf(want, sizeof want, "%s/xdg", root);
  setenv("XDG_CACHE_HOME", want, 1);
  snprintf(want, sizeof want, "%s/xdg/loom/", root);
  char *path = entry_path(answer_source);
  CHECK(starts_with(path, want));
  struct stat st;
  want[strlen(want) - 1] = '\0';
  CHECK(stat(want, &st) == 0 && (st.st_mode & 0777) == 0700);
  free(path);
  unsetenv("XDG_CACHE_HOME");
  snprintf(want, sizeof want, "%s/home", root);
  setenv("HOME", want, 1);
  snprintf(want, sizeof want, "%s/home/.cache/loom/", root);
  path = entry_path(answer_source);
  CHECK(starts_with(path, want));
  free(path);
  if (saved_home) setenv("HOME", saved_home, 1);
  if (saved_xdg) setenv("XDG_CACHE_HOME", saved_xdg, 1);
  free(saved_home);
  free(saved_xdg);
  drop_cache();
}

/* A cache directory that cannot be made (a file is in the way): the
 * module still builds, elsewhere. */
static void test_unusable_cache_dir(void) {
  fresh_cache();
  char blocker[300], wanted[320];
  snprintf(blocker, sizeof blocker, "%s/file", root);
  FILE *f = fopen(blocker, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  snprintf(wanted, sizeof wanted, "%s/sub", blocker);
  setenv("LOOM_CACHE_DIR", wanted, 1);
  char *path = entry_path(answer_source);
  CHECK(path[0] == '/' && !starts_with(path, root));
  CHECK(build_and_call(answer_source, "answer", NULL) == 42);
  free(path);
  drop_cache();
}

static void test_bad_arguments(void) {
  cpu_module_t *m = NULL;
  CHECK_ERR(cpu_module_build(NULL, 0, &m), LOOM_ERR_INVALID, "source");
  CHECK_ERR(cpu_module_build(answer_source, -1, &m), LOOM_ERR_INVALID, "negative");
  CHECK_ERR(cpu_module_build(answer_source, 1, NULL), LOOM_ERR_INVALID, "out");
  CHECK(cpu_module_symbol(NULL, "answer") == NULL);
  cpu_module_release(NULL);
}

/* Every allocation made to fail in turn: a clean NOMEM or a success,
 * never a crash or a leak. */
static void test_allocation_failures(void) {
  fresh_cache();
  const char *source = "int answer(void) { return 44; }\n";
  int failures = 0;
  for (int64_t n = 0; n < 8; n++) {
    cpu_module_t *m = NULL;
    core_alloc_fail_after(n);
    loom_status_t s = cpu_module_build(source, (int64_t)strlen(source), &m);
    core_alloc_fail_after(-1);
    CHECK(s == LOOM_OK || s == LOOM_ERR_NOMEM);
    CHECK((s == LOOM_OK) == (m != NULL));
    failures += s == LOOM_ERR_NOMEM;
    cpu_module_release(m);
  }
  CHECK(failures > 0);
  drop_cache();
}

/* LOOM_LOG=cache,compile: a miss, the compiler's command line, a hit. */
static void test_log_lines(void) {
  fresh_cache();
  char log_path[300];
  snprintf(log_path, sizeof log_path, "%s/log.txt", root);
  fflush(stderr);
  int saved = dup(2), fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  setenv("LOOM_LOG", "cache,compile", 1);
  core_log_reload();
  build_and_call(answer_source, "answer", NULL);
  build_and_call(answer_source, "answer", NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  unsetenv("LOOM_LOG");
  core_log_reload();
  char text[4096] = "";
  FILE *log = fopen(log_path, "r");
  CHECK(log != NULL);
  if (log) {
    text[fread(text, 1, sizeof text - 1, log)] = '\0';
    fclose(log);
  }
  CHECK(strstr(text, "loom[cache]: miss ") != NULL);
  CHECK(strstr(text, "loom[cache]: hit ") != NULL);
  CHECK(strstr(text, "loom[compile]: ") != NULL);
  CHECK(strstr(text, "-march=native") != NULL);
  CHECK(strstr(text, " ms") != NULL);
  drop_cache();
}

/* ---- Generated code compiled by clang ------------------------------------- */

/* y = softmax(reshape(gelu(conv2d(x, w) + b)) @ m) and its sum: the
 * contraction, elementwise, reduction and layout emitters in one graph. */
static loom_graph_t *mixed_graph(loom_tensor_t *const *params) {
  int64_t sx[4] = {2, 16, 12, 12}, sw[4] = {16, 16, 3, 3}, sb[1] = {16}, sm[2] = {144, 10};
  loom_graph_t *g = NULL;
  loom_value_t x, w, b, m, y, s;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, sx, &x));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 4, sw, params[0], &w));
  CHECK_OK(loom_graph_param(g, "b", LOOM_F32, 1, sb, params[1], &b));
  CHECK_OK(loom_graph_param(g, "m", LOOM_F32, 2, sm, params[2], &m));
  loom_conv_params_t p = {.pads = {1, 1, 1, 1}};
  loom_dim_t rows[2] = {32, 144};
  int64_t all[2] = {0, 1};
  CHECK_OK(loom_conv2d(g, x, w, 1, b, &p, &y));
  CHECK_OK(loom_gelu(g, y, &y));
  CHECK_OK(loom_reshape(g, y, 2, rows, &y));
  CHECK_OK(loom_matmul(g, y, m, 0, 0, &y));
  CHECK_OK(loom_softmax(g, y, 1, &y));
  CHECK_OK(loom_sum(g, y, 2, all, 0, &s));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, s));
  return g;
}

/* With LOOM_CC=clang (when clang is installed) a graph's generated code
 * compiles, nothing falls back to reference kernels, and its outputs
 * match the interpreter's. */
static void test_clang_compiles_generated_code(void) {
  if (system("clang --version >/dev/null 2>&1") != 0) {
    printf("  (clang not installed: skipped)\n");
    return;
  }
  fresh_cache();
  setenv("LOOM_CC", "clang", 1);
  int64_t sx[4] = {2, 16, 12, 12}, sw[4] = {16, 16, 3, 3}, sb[1] = {16}, sm[2] = {144, 10};
  loom_tensor_t *params[3] = {test_rand_tensor(LOOM_F32, 4, sw, -0.3, 0.3),
                              test_rand_tensor(LOOM_F32, 1, sb, -1, 1),
                              test_rand_tensor(LOOM_F32, 2, sm, -0.2, 0.2)};
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 4, sx, -1, 1);
  loom_graph_t *g = mixed_graph(params);
  loom_tensor_t *want[2] = {NULL, NULL}, *got[2] = {NULL, NULL};
  CHECK_OK(loom_interpret(g, 1, &x, 2, want));
  loom_executable_t *e = NULL;
  loom_executable_info_t info = {0};
  cpu_toolchain_stats_t before = stats();
  CHECK_OK(loom_compile(g, NULL, &e));
  if (e) CHECK_OK(loom_executable_info(e, &info));
  CHECK(e && !info.interpreted && info.n_generated > 0 && info.n_reference == 0);
  CHECK(stats().cc_invocations > before.cc_invocations);
  for (int i = 0; i < 2 && e; i++) CHECK_OK(loom_executable_new_output(e, i, &got[i]));
  if (e && got[0] && got[1]) CHECK_OK(loom_executable_run(e, 1, &x, 2, got));
  for (int i = 0; i < 2 && got[i] && want[i]; i++)
    for (int64_t j = 0; j < loom_tensor_numel(want[i]); j++)
      CHECK_NEAR(test_get(got[i], j), test_get(want[i], j), 1e-5, 1e-4);
  for (int i = 0; i < 2; i++) {
    loom_tensor_destroy(got[i]);
    loom_tensor_destroy(want[i]);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  loom_tensor_destroy(x);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(params[i]);
  unsetenv("LOOM_CC");
  drop_cache();
}

int main(void) {
  TEST_RUN(test_sha256_vectors);
  TEST_RUN(test_sha256_incremental);
  TEST_RUN(test_bad_arguments);
  TEST_RUN(test_build_and_call);
  TEST_RUN(test_second_build_is_disk_hit);
  TEST_RUN(test_truncated_entry_rebuilt);
  TEST_RUN(test_corrupt_entry_rebuilt);
  TEST_RUN(test_missing_compiler);
  TEST_RUN(test_failing_compiler);
  TEST_RUN(test_syntax_error);
  TEST_RUN(test_clang_compiles_generated_code);
  TEST_RUN(test_two_processes);
  TEST_RUN(test_threads);
  TEST_RUN(test_different_sources_different_keys);
  TEST_RUN(test_cache_dir_defaults);
  TEST_RUN(test_unusable_cache_dir);
  TEST_RUN(test_allocation_failures);
  TEST_RUN(test_log_lines);
  return test_summary();
}
