/* The module cache and the C compiler as loom_compile meets them: a
 * sealed entry of one graph placed under another graph's key, a FIFO at
 * an entry's path, a compiler that "succeeds" without making the kernels,
 * and one that hangs. Each is either rebuilt or falls back to the
 * reference kernels; every result is checked against the interpreter.
 * Each test has its own cache directory. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static char root[256]; /* this test's temporary directory */
static char cache[300];

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  remove(path);
  return 0;
}

static void fresh_cache(void) {
  snprintf(root, sizeof root, "/tmp/loom-test-module-cache-XXXXXX");
  CHECK(mkdtemp(root) != NULL);
  snprintf(cache, sizeof cache, "%s/cache", root);
  setenv("LOOM_CACHE_DIR", cache, 1);
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
}

static void drop_cache(void) {
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
  nftw(root, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* The cache's entries (*.so): how many, and the paths of the first
 * `cap` in paths (each of PATH_SIZE bytes). */
enum { PATH_SIZE = 600 };
static int entries(char (*paths)[PATH_SIZE], int cap) {
  DIR *d = opendir(cache);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t len = strlen(de->d_name);
    if (len < 4 || strcmp(de->d_name + len - 3, ".so") != 0) continue;
    if (n < cap) snprintf(paths[n], PATH_SIZE, "%s/%s", cache, de->d_name);
    n++;
  }
  if (d) closedir(d);
  return n;
}

/* y = tanh(x) * 3 + 1 (which = 0) or sigmoid(x) * 3 - 2 (which = 1) over
 * 64 floats: one fused group each, with a function of the same name in
 * each module, so that one's module would run for the other. */
static loom_graph_t *chain(int which) {
  loom_graph_t *g;
  loom_value_t x, a, b, y, three, c;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){64}, &x));
  loom_tensor_t *three_t = test_tensor(LOOM_F32, 0, NULL, (double[]){3});
  loom_tensor_t *c_t = test_tensor(LOOM_F32, 0, NULL, (double[]){which ? -2 : 1});
  CHECK_OK(loom_graph_constant(g, three_t, &three));
  CHECK_OK(loom_graph_constant(g, c_t, &c));
  CHECK_OK(which ? loom_sigmoid(g, x, &a) : loom_tanh(g, x, &a));
  CHECK_OK(loom_mul(g, a, three, &b));
  CHECK_OK(loom_add(g, b, c, &y));
  CHECK_OK(loom_graph_output(g, y));
  loom_tensor_destroy(three_t);
  loom_tensor_destroy(c_t);
  return g;
}

/* Compiles chain(which), runs it, and checks it against the interpreter;
 * returns how many steps ran generated code (-1 if it did not compile). */
static int compile_and_check(int which) {
  loom_graph_t *g = chain(which);
  test_seed(3);
  loom_tensor_t *x = test_rand_tensor(LOOM_F32, 1, (int64_t[]){64}, -3, 3);
  loom_tensor_t *want = NULL, *got = NULL;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_interpret(g, 1, &x, 1, &want));
  loom_status_t s = loom_compile(g, NULL, &e);
  CHECK_OK(s);
  loom_executable_info_t info = {.size = sizeof(loom_executable_info_t), .n_generated = -1};
  if (s == LOOM_OK) {
    CHECK_OK(loom_executable_new_output(e, 0, &got));
    CHECK_OK(loom_executable_run(e, 1, &x, 1, &got));
    for (int64_t i = 0; got && want && i < 64; i++)
      CHECK_NEAR(test_get(got, i), test_get(want, i), 1e-5, 1e-5);
    CHECK_OK(loom_executable_info(e, &info));
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(got);
  loom_tensor_destroy(want);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
  return info.n_generated;
}

static loom_stats_t stats(void) {
  loom_stats_t s = LOOM_STATS_INIT;
  loom_stats_get(&s);
  return s;
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  CHECK(in != NULL && out != NULL);
  char buf[65536];
  for (size_t n; in && out && (n = fread(buf, 1, sizeof buf, in)) > 0;)
    CHECK(fwrite(buf, 1, n, out) == n);
  if (in) fclose(in);
  if (out) fclose(out);
}

/* Graph A's sealed entry copied over graph B's: compiling B rebuilds its
 * own module (the seal names A's key) and gives B's results, where
 * loading the copy would run A's kernel (errors near 1). */
static void entry_of_another_key_rebuilt(void) {
  fresh_cache();
  char paths[2][PATH_SIZE];
  CHECK(compile_and_check(0) > 0);
  CHECK(entries(paths, 2) == 1);
  char a[PATH_SIZE];
  snprintf(a, sizeof a, "%s", paths[0]);
  CHECK(compile_and_check(1) > 0);
  CHECK(entries(paths, 2) == 2);
  const char *b = strcmp(paths[0], a) ? paths[0] : paths[1];
  copy_file(a, b);
  loom_stats_t before = stats();
  CHECK(compile_and_check(1) > 0);
  loom_stats_t after = stats();
  CHECK(after.disk_rebuilds == before.disk_rebuilds + 1);
  CHECK(after.cc_invocations == before.cc_invocations + 1);
  CHECK(after.disk_hits == before.disk_hits);
  /* The rebuilt entry is B's own: the next compile loads it. */
  CHECK(compile_and_check(1) > 0);
  CHECK(stats().disk_hits == after.disk_hits + 1);
  drop_cache();
}

/* A FIFO where an entry should be: opened without blocking, refused as
 * not a regular file, and replaced by a rebuilt entry. */
static void fifo_at_entry_rebuilt(void) {
  fresh_cache();
  char paths[1][PATH_SIZE];
  CHECK(compile_and_check(0) > 0);
  CHECK(entries(paths, 1) == 1);
  CHECK(unlink(paths[0]) == 0);
  CHECK(mkfifo(paths[0], 0600) == 0);
  /* Were the open to block, the test would end here: SIGALRM kills it. */
  alarm(300);
  loom_stats_t before = stats();
  CHECK(compile_and_check(0) > 0);
  alarm(0);
  CHECK(stats().disk_rebuilds == before.disk_rebuilds + 1);
  struct stat st;
  CHECK(stat(paths[0], &st) == 0 && S_ISREG(st.st_mode));
  drop_cache();
}

/* An executable script at root/name. */
static void write_script(const char *name, const char *body, char *path, size_t size) {
  snprintf(path, size, "%s/%s", root, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(body, f);
  fclose(f);
  CHECK(chmod(path, 0755) == 0);
}

/* A compiler wrapper that exits 0 after building a module without the
 * kernels: loom_compile falls back to the reference kernels, correctly,
 * and no entry is kept, so a second compile falls back again instead of
 * loading a module that fails. */
static void compiler_without_kernels_falls_back(void) {
  fresh_cache();
  char script[400];
  write_script("empty-cc",
               "#!/bin/sh\n"
               "out=\n"
               "for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
               "[ -n \"$out\" ] || exec cc \"$@\"\n"
               "echo 'int loom_unrelated;' | cc -shared -fPIC -x c -o \"$out\" -\n",
               script, sizeof script);
  setenv("LOOM_CC", script, 1);
  loom_stats_t before = stats();
  CHECK(compile_and_check(0) == 0);
  CHECK(entries(NULL, 0) == 0);
  CHECK(compile_and_check(0) == 0);
  CHECK(entries(NULL, 0) == 0);
  CHECK(stats().cc_invocations == before.cc_invocations + 2);
  CHECK(stats().disk_hits == before.disk_hits);
  /* The real compiler then builds and caches the module. */
  unsetenv("LOOM_CC");
  CHECK(compile_and_check(0) > 0);
  CHECK(entries(NULL, 0) == 1);
  drop_cache();
}

/* A compiler that never finishes is killed at LOOM_CC_TIMEOUT, and the
 * graph runs on the reference kernels. */
static void hanging_compiler_falls_back(void) {
  fresh_cache();
  char script[400];
  write_script("hang-cc",
               "#!/bin/sh\n"
               "[ \"$1\" = --version ] && exec cc --version\n"
               "sleep 600\n",
               script, sizeof script);
  setenv("LOOM_CC", script, 1);
  setenv("LOOM_CC_TIMEOUT", "0.5", 1);
  loom_stats_t before = stats();
  CHECK(compile_and_check(0) == 0);
  CHECK(stats().cc_invocations == before.cc_invocations + 1);
  CHECK(entries(NULL, 0) == 0);
  drop_cache();
}

int main(void) {
  TEST_RUN(entry_of_another_key_rebuilt);
  TEST_RUN(fifo_at_entry_rebuilt);
  TEST_RUN(compiler_without_kernels_falls_back);
  TEST_RUN(hanging_compiler_falls_back);
  return test_summary();
}
