/* The module cache and the C compiler as loom_compile meets them: a
 * sealed entry of one graph placed under another graph's key, a FIFO at
 * an entry's path, a compiler that "succeeds" without making the kernels,
 * and one that hangs; the index (module_index.h), which loads a request's
 * module without the code generator, and its entries damaged, swapped or
 * left naming a pruned module. Each is either rebuilt or falls back to
 * the reference kernels; every result is checked against the
 * interpreter. Each test has its own cache directory. */
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

/* The cache's files named *ext: how many, and the paths of the first
 * `cap` in paths (each of PATH_SIZE bytes). */
enum { PATH_SIZE = 600 };
static int files(const char *ext, char (*paths)[PATH_SIZE], int cap) {
  DIR *d = opendir(cache);
  int n = 0;
  size_t e = strlen(ext);
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t len = strlen(de->d_name);
    if (len <= e || strcmp(de->d_name + len - e, ext) != 0) continue;
    if (n < cap) snprintf(paths[n], PATH_SIZE, "%s/%s", cache, de->d_name);
    n++;
  }
  if (d) closedir(d);
  return n;
}

/* The cache's modules (*.so). */
static int entries(char (*paths)[PATH_SIZE], int cap) { return files(".so", paths, cap); }

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
 * returns how many steps ran generated code (-1 if it did not compile),
 * and, with explained, whether the executable's explain text holds it. */
static int compile_and_explain(int which, const char *explained, bool *found) {
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
    char *text = NULL;
    if (explained) CHECK_OK(loom_executable_explain(e, &text));
    if (explained) *found = text && strstr(text, explained);
    loom_free(text);
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(got);
  loom_tensor_destroy(want);
  loom_tensor_destroy(x);
  loom_graph_destroy(g);
  return info.n_generated;
}

static int compile_and_check(int which) { return compile_and_explain(which, NULL, NULL); }

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

/* ---- The index ---- */

static void append_text(const char *path, const char *text) {
  FILE *f = fopen(path, "a");
  CHECK(f != NULL);
  if (f) fputs(text, f);
  if (f) fclose(f);
}

/* Whether compiling chain(which) now takes its module through the index:
 * the source it shows is the one kept on disk (marked here), not one the
 * code generator wrote. Checks the results as compile_and_check does,
 * and that neither the compiler nor a rebuild ran. */
static bool compiled_through_index(int which) {
  char src[1][PATH_SIZE];
  CHECK(files(".c", src, 1) == 1);
  append_text(src[0], "/* kept on disk */\n");
  loom_stats_t before = stats();
  bool found = false;
  CHECK(compile_and_explain(which, "/* kept on disk */", &found) > 0);
  CHECK(stats().cc_invocations == before.cc_invocations);
  CHECK(stats().disk_hits == before.disk_hits + 1);
  return found;
}

/* A request compiled before loads its module through the index (the code
 * generator does not run: the source shown is the file on disk), in this
 * process and after the module's in-memory copies are gone. */
static void index_skips_code_generation(void) {
  fresh_cache();
  CHECK(compile_and_check(0) > 0);
  CHECK(files(".idx", NULL, 0) >= 1);
  CHECK(compiled_through_index(0));
  drop_cache();
}

static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fseek(f, at, SEEK_SET) == 0);
  int c = fgetc(f);
  CHECK(fseek(f, at, SEEK_SET) == 0);
  fputc(c ^ 0x20, f);
  fclose(f);
}

/* Damaged index entries (a flipped byte in each, or each replaced by the
 * other graph's) are refused: the code generator runs, finds the module
 * by its source and writes the entry anew, which the next compile uses. */
static void damaged_index_refused(void) {
  fresh_cache();
  char idx[8][PATH_SIZE];
  CHECK(compile_and_check(0) > 0);
  int n = files(".idx", idx, 8);
  CHECK(n >= 1 && n <= 8);
  for (int i = 0; i < n && i < 8; i++) flip_byte(idx[i], 20);
  loom_stats_t before = stats();
  bool found = true;
  CHECK(compile_and_explain(0, "loom_group_", &found) > 0);
  CHECK(found); /* emitted: the source is the generator's */
  CHECK(stats().cc_invocations == before.cc_invocations);
  CHECK(compiled_through_index(0));
  drop_cache();

  fresh_cache();
  CHECK(compile_and_check(0) > 0);
  char a[8][PATH_SIZE], b[16][PATH_SIZE];
  int n_a = files(".idx", a, 8);
  CHECK(compile_and_check(1) > 0);
  int n_b = files(".idx", b, 16);
  CHECK(n_a >= 1 && n_b > n_a && n_b <= 16);
  /* Graph 1's entries (those not graph 0's) overwritten by graph 0's. */
  for (int i = 0; i < n_b && i < 16; i++) {
    bool of_a = false;
    for (int k = 0; k < n_a && k < 8; k++) of_a |= !strcmp(a[k], b[i]);
    if (!of_a) copy_file(a[0], b[i]);
  }
  CHECK(compile_and_check(1) > 0); /* checked against graph 1's results */
  drop_cache();
}

/* An index entry whose module was pruned: the module is built again from
 * source, and the entry then loads it. */
static void index_of_pruned_module(void) {
  fresh_cache();
  char so[1][PATH_SIZE], src[1][PATH_SIZE];
  CHECK(compile_and_check(0) > 0);
  CHECK(entries(so, 1) == 1 && files(".c", src, 1) == 1);
  CHECK(unlink(so[0]) == 0 && unlink(src[0]) == 0);
  loom_stats_t before = stats();
  CHECK(compile_and_check(0) > 0);
  CHECK(stats().cc_invocations == before.cc_invocations + 1);
  CHECK(entries(NULL, 0) == 1);
  CHECK(compiled_through_index(0));
  drop_cache();
}

int main(void) {
  TEST_RUN(entry_of_another_key_rebuilt);
  TEST_RUN(fifo_at_entry_rebuilt);
  TEST_RUN(compiler_without_kernels_falls_back);
  TEST_RUN(hanging_compiler_falls_back);
  TEST_RUN(index_skips_code_generation);
  TEST_RUN(damaged_index_refused);
  TEST_RUN(index_of_pruned_module);
  return test_summary();
}
