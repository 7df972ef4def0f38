/* The CPU toolchain: SHA-256 against the FIPS 180-4 test vectors; a
 * module compiled, cached on disk and loaded again without the compiler;
 * truncated, corrupt and misplaced (another key's) entries rebuilt, never
 * loaded; a missing, failing or rejecting compiler reported by name; two
 * processes and several threads building one module at once; the cache
 * directory's defaults and its fallback; the log lines; a compiler that
 * hangs, or leaves a process holding its output, or "succeeds" without
 * the functions; pruning to the byte budget, least recently used first,
 * while modules are in use; scratch directories of dead processes; a large
 * module compiled as several units at once and linked, with the same
 * failures and limits per unit. Each
 * test has its own cache directory under a fresh temporary one. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/compiler.h"
#include "backend/cpu/module_cache.h"
#include "backend/cpu/parts.h"
#include "backend/cpu/toolchain.h"
#include "core/alloc.h"
#include "core/cache_dir.h"
#include "core/log.h"
#include "core/sha256.h"
#include "harness.h"

static const char answer_source[] = "int answer(void) { return 42; }\n";
static const char *const answer_symbol[] = {"answer"};
static char root[256]; /* this test's temporary directory */

/* cpu_module_build of source, which must define answer(). */
static loom_status_t build(const char *source, cpu_module_t **m) {
  return cpu_module_build(source, (int64_t)strlen(source), answer_symbol, 1, m);
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

static void drop_cache(void) { core_remove_tree(root); }

static cpu_toolchain_stats_t stats(void) {
  cpu_toolchain_stats_t s;
  cpu_toolchain_stats(&s);
  return s;
}

/* Builds source and returns what its function `name` returns (-1 if it
 * cannot), with the module released. */
static int build_and_call(const char *source, const char *name, bool *from_cache) {
  cpu_module_t *m = NULL;
  loom_status_t s = build(source, &m);
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
  CHECK_OK(build(source, &m));
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

/* Every compression this CPU runs (the portable one, the SHA
 * extensions') gives the portable one's state, from random states over
 * random blocks, one block and many at a time. */
static void test_sha256_instances(void) {
  const core_sha256_impl_t *impls;
  int n = core_sha256_impls(&impls);
  CHECK(n >= 1 && !strcmp(impls[0].name, "portable"));
  enum { BLOCKS = 37 };
  static uint8_t data[64 * BLOCKS];
  for (int round = 0; round < 20; round++) {
    uint32_t start[8], want[8];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)test_rand_u64();
    for (int i = 0; i < 8; i++) start[i] = (uint32_t)test_rand_u64();
    memcpy(want, start, sizeof want);
    impls[0].blocks(want, data, BLOCKS);
    for (int k = 0; k < n; k++) {
      uint32_t got[8], one[8];
      memcpy(got, start, sizeof got);
      memcpy(one, start, sizeof one);
      impls[k].blocks(got, data, BLOCKS);
      for (int b = 0; b < BLOCKS; b++) impls[k].blocks(one, data + 64 * b, 1);
      if (memcmp(got, want, sizeof want) || memcmp(one, want, sizeof want))
        test_fail(__FILE__, __LINE__, "sha256 blocks '%s' differ from the portable ones",
                  impls[k].name);
      test_checks++;
    }
  }
  printf("sha256 instances: %d (%s)\n", n, impls[n - 1].name);
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

/* Another source's sealed entry put in place of this one's, as a copy
 * would: its seal names the other key. */
static void replace_with_other_entry(const char *path) {
  char *other = entry_path("int answer(void) { return 43; }\n");
  FILE *in = fopen(other, "rb"), *out = fopen(path, "wb");
  CHECK(in != NULL && out != NULL);
  char buf[4096];
  for (size_t n; in && out && (n = fread(buf, 1, sizeof buf, in)) > 0;) fwrite(buf, 1, n, out);
  if (in) fclose(in);
  if (out) fclose(out);
  free(other);
}

/* The seal's bytes against a digest computed apart from Loom (Python's
 * hashlib.sha256 of "hello\nloom-key:" + KEY), and its checks. */
static void test_seal_format(void) {
  fresh_cache();
  static const char key[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  static const char want[] =
      "hello\nloom-key:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
      "\nloom-sha256:9260ddf7e072fa2b39e2729b769e5014908f9abedbaed842c7c1f19b01af795c\n";
  char path[300], got[400] = "";
  snprintf(path, sizeof path, "%s/sealed", root);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs("hello", f);
    fclose(f);
  }
  CHECK_OK(cpu_cache_seal(path, key));
  f = fopen(path, "r");
  if (f) {
    got[fread(got, 1, sizeof got - 1, f)] = '\0';
    fclose(f);
  }
  CHECK(!strcmp(got, want));
  CHECK(strlen(want) == 5 + CPU_CACHE_SEAL_BYTES);
  int fd = -1;
  const char *why = NULL;
  CHECK(cpu_cache_open(path, key, &fd, &why) == CPU_ENTRY_OK && fd >= 0);
  if (fd >= 0) close(fd);
  char other[65];
  snprintf(other, sizeof other, "%s", key);
  other[63] = 'e';
  CHECK(cpu_cache_open(path, other, &fd, &why) == CPU_ENTRY_BAD && fd < 0);
  CHECK(strstr(why, "another key") != NULL);
  CHECK(cpu_cache_open(path, "0123", &fd, &why) == CPU_ENTRY_BAD);
  CHECK_ERR(cpu_cache_seal(path, "0123"), LOOM_ERR_INVALID, "key");
  snprintf(path, sizeof path, "%s/absent", root);
  CHECK(cpu_cache_open(path, key, &fd, &why) == CPU_ENTRY_MISSING);
  drop_cache();
}

static void test_truncated_entry_rebuilt(void) { check_damage_rebuilt(truncate_to_half); }
static void test_other_keys_entry_rebuilt(void) { check_damage_rebuilt(replace_with_other_entry); }
static void test_corrupt_entry_rebuilt(void) { check_damage_rebuilt(flip_middle_byte); }

static void test_missing_compiler(void) {
  fresh_cache();
  cpu_module_t *m = (cpu_module_t *)1;
  setenv("LOOM_CC", "/nonexistent", 1);
  CHECK_ERR(build(answer_source, &m), LOOM_ERR_UNSUPPORTED, "C compiler '/nonexistent'");
  CHECK(m == NULL);
  setenv("LOOM_CC", "loom-no-such-compiler", 1);
  CHECK_ERR(build(answer_source, &m), LOOM_ERR_UNSUPPORTED, "loom-no-such-compiler");
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
  CHECK_ERR(build(answer_source, &m), LOOM_ERR_UNSUPPORTED, "out of order");
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
  CHECK_ERR(build(bad, &m), LOOM_ERR_UNSUPPORTED, "error");
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
  loom_status_t s = build(answer_source, &m);
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

/* ---- the compiler's time limit ---- */

/* An executable script at root/name; "@ROOT@" in body stands for root. */
static void write_script(const char *name, const char *body, char *path, size_t size) {
  char text[2048];
  const char *at = strstr(body, "@ROOT@");
  size_t used = 0;
  for (; at; body = at + 6, at = strstr(body, "@ROOT@"))
    used += (size_t)snprintf(text + used, sizeof text - used, "%.*s%s", (int)(at - body), body,
                             root);
  snprintf(text + used, sizeof text - used, "%s", body);
  snprintf(path, size, "%s/%s", root, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
  CHECK(chmod(path, 0755) == 0);
}

/* The pids a script appended to root/pids, one a line; how many. */
static int read_pids(long *pids, int cap) {
  char path[300];
  snprintf(path, sizeof path, "%s/pids", root);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && n < cap && fscanf(f, "%ld", &pids[n]) == 1) n++;
  if (f) fclose(f);
  return n;
}

/* Whether pid has ended (gone, or a zombie nobody reaped yet), waiting up
 * to 10 s for a killed process to die. */
static bool process_ended(long pid) {
  for (int i = 0; i < 1000; i++) {
    char path[64], text[512] = "";
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *paren = strrchr(text, ')');
    if (paren && paren[1] == ' ' && paren[2] == 'Z') return true;
    usleep(10000);
  }
  return false;
}

static void kill_pids(void) {
  long pids[8];
  int n = read_pids(pids, 8);
  for (int i = 0; i < n; i++) kill((pid_t)pids[i], SIGKILL);
}

/* A fresh cache and LOOM_CC set to a compiler that starts a child (its
 * pid appended to pids), then waits for it forever. */
static void use_hanging_compiler(void) {
  fresh_cache();
  char script[400];
  write_script("hang-cc",
               "#!/bin/sh\n"
               "[ \"$1\" = --version ] && exec cc --version\n"
               "sleep 600 &\n"
               "echo $! >> @ROOT@/pids\n"
               "wait\n",
               script, sizeof script);
  setenv("LOOM_CC", script, 1);
}

/* The identity of compiler cc, computed in a new process (the parent's
 * in-memory record of identities stays empty). */
static void identity_in_child(const char *cc) {
  pid_t pid = fork();
  if (pid == 0) {
    char id[PATH_MAX + 600];
    bool ok = cpu_cc_identity(cc, id, sizeof id) == LOOM_OK;
    const char *version = ok ? strchr(id, '\n') : NULL; /* after the path */
    _exit(version && version[1] ? 0 : 1);
  }
  int status = -1;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int probes(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/probes", root);
  FILE *f = fopen(path, "r");
  int n = 0;
  for (int c; f && (c = fgetc(f)) != EOF;) n += c == '\n';
  if (f) fclose(f);
  return n;
}

/* The version line is asked once, then read from the cache directory by
 * later processes, until the compiler's file changes. */
static void test_version_probe_kept(void) {
  fresh_cache();
  static const char body[] = "#!/bin/sh\n"
                             "[ \"$1\" = --version ] && echo >> @ROOT@/probes\n"
                             "exec cc \"$@\"\n";
  char script[400];
  write_script("counting-cc", body, script, sizeof script);
  identity_in_child(script);
  CHECK(probes() == 1);
  identity_in_child(script);
  CHECK(probes() == 1);
  CHECK(unlink(script) == 0);
  write_script("counting-cc", body, script, sizeof script); /* a new file */
  identity_in_child(script);
  CHECK(probes() == 2);
  drop_cache();
}

/* A compiler that never finishes is killed at LOOM_CC_TIMEOUT with the
 * process it started, and the build fails naming the limit. */
static void test_hanging_compiler_killed(void) {
  use_hanging_compiler();
  /* Long enough for the script to start and write its child's pid on a
   * loaded machine. */
  setenv("LOOM_CC_TIMEOUT", "2", 1);
  cpu_module_t *m = NULL;
  CHECK_ERR(build(answer_source, &m), LOOM_ERR_UNSUPPORTED, "did not finish within 2 s");
  CHECK(strstr(loom_last_error(), "hang-cc") != NULL);
  CHECK(m == NULL);
  long pids[8];
  CHECK(read_pids(pids, 8) == 1);
  CHECK(process_ended(pids[0]));
  kill_pids();
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
  drop_cache();
}

/* A `--version` probe that hangs is killed at the limit (with a warning)
 * and the compiler is still used. The source is padded with a comment to
 * 32 times 64 KiB, so that the compile's own limit is 32 times the
 * probe's. */
static void test_hanging_version_probe(void) {
  fresh_cache();
  char script[400];
  write_script("slow-version-cc",
               "#!/bin/sh\n"
               "if [ \"$1\" = --version ]; then\n"
               "  sleep 600 &\n"
               "  echo $! >> @ROOT@/pids\n"
               "  wait\n"
               "fi\n"
               "exec cc \"$@\"\n",
               script, sizeof script);
  setenv("LOOM_CC", script, 1);
  setenv("LOOM_CC_TIMEOUT", "2", 1);
  size_t pad = 32 * 65536;
  char *source = malloc(pad + sizeof answer_source + 8);
  memcpy(source, "/* ", 3);
  memset(source + 3, 'x', pad);
  snprintf(source + 3 + pad, sizeof answer_source + 5, " */\n%s", answer_source);
  CHECK(build_and_call(source, "answer", NULL) == 42);
  long pids[8];
  CHECK(read_pids(pids, 8) == 1);
  CHECK(process_ended(pids[0]));
  kill_pids();
  free(source);
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
  drop_cache();
}

/* A compiler that leaves a process holding its output open: its exit,
 * not the end of its output, ends the wait (else this would wait for the
 * limit and fail). */
static void test_compiler_child_holding_output(void) {
  fresh_cache();
  char script[400];
  write_script("daemon-cc",
               "#!/bin/sh\n"
               "sleep 600 &\n"
               "echo $! >> @ROOT@/pids\n"
               "exec cc \"$@\"\n",
               script, sizeof script);
  setenv("LOOM_CC", script, 1);
  setenv("LOOM_CC_TIMEOUT", "60", 1);
  CHECK(build_and_call(answer_source, "answer", NULL) == 42);
  long pids[8];
  CHECK(read_pids(pids, 8) == 2); /* the probe's and the compile's */
  kill_pids();
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
  drop_cache();
}

static void test_timeout_scales_with_source(void) {
  setenv("LOOM_CC_TIMEOUT", "2", 1);
  CHECK_NEAR(cpu_cc_timeout(0), 2, 0, 0);
  CHECK_NEAR(cpu_cc_timeout(65536), 2, 0, 0);
  CHECK_NEAR(cpu_cc_timeout(4 * 65536), 8, 0, 1e-12);
  setenv("LOOM_CC_TIMEOUT", "soon", 1);
  CHECK_NEAR(cpu_cc_timeout(0), 120, 0, 0);
  unsetenv("LOOM_CC_TIMEOUT");
  CHECK_NEAR(cpu_cc_timeout(10), 120, 0, 0);
  CHECK_NEAR(cpu_cc_timeout(640 * 1024), 1200, 0, 1e-12);
}

/* ---- modules without their functions ---- */

/* How many entries (*.so) the cache directory holds. */
static int entry_count(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/cache", root);
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    n += cpu_cache_classify(de->d_name, NULL) == CPU_NAME_OBJECT;
  if (d) closedir(d);
  return n;
}

/* A wrapper that exits 0 with a module lacking the function: refused,
 * never cached, so the next build does not load it either. */
static void test_module_without_symbols_refused(void) {
  fresh_cache();
  char script[400];
  write_script("empty-cc",
               "#!/bin/sh\n"
               "out=\n"
               "for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
               "[ -n \"$out\" ] || exec cc \"$@\"\n"
               "echo 'int unrelated;' | cc -shared -fPIC -x c -o \"$out\" -\n",
               script, sizeof script);
  setenv("LOOM_CC", script, 1);
  cpu_toolchain_stats_t before = stats();
  for (int i = 0; i < 2; i++) {
    cpu_module_t *m = NULL;
    CHECK_ERR(build(answer_source, &m), LOOM_ERR_UNSUPPORTED, "lacks the function answer");
    CHECK(m == NULL);
    CHECK(entry_count() == 0);
  }
  CHECK(stats().cc_invocations == before.cc_invocations + 2);
  CHECK(stats().disk_hits == before.disk_hits);
  unsetenv("LOOM_CC");
  drop_cache();
}

/* A sealed entry that lacks a wanted function (cached by a Loom that did
 * not check) is not loaded: it counts as a rebuild. */
static void test_cached_module_without_symbols_rebuilt(void) {
  fresh_cache();
  cpu_module_t *m = NULL;
  CHECK_OK(cpu_module_build(answer_source, (int64_t)strlen(answer_source), NULL, 0, &m));
  cpu_module_release(m);
  const char *const other[] = {"answer", "question"};
  cpu_toolchain_stats_t before = stats();
  m = NULL;
  CHECK_ERR(cpu_module_build(answer_source, (int64_t)strlen(answer_source), other, 2, &m),
            LOOM_ERR_UNSUPPORTED, "lacks the function question");
  CHECK(m == NULL);
  CHECK(stats().disk_rebuilds == before.disk_rebuilds + 1);
  CHECK(stats().disk_hits == before.disk_hits);
  drop_cache();
}

/* ---- pruning ---- */

static char *cache_dir(void) {
  static char dir[300];
  snprintf(dir, sizeof dir, "%s/cache", root);
  return dir;
}

/* The sibling of an entry's object with another extension. */
static void sibling(const char *so, const char *ext, char *out, size_t size) {
  snprintf(out, size, "%.*s%s", (int)strlen(so) - 3, so, ext);
}

static int64_t file_bytes(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* An entry's bytes: its object and its source. */
static int64_t entry_size(const char *so) {
  char c[4200];
  sibling(so, ".c", c, sizeof c);
  return file_bytes(so) + file_bytes(c);
}

static bool entry_present(const char *so) {
  char c[4200];
  sibling(so, ".c", c, sizeof c);
  return access(so, F_OK) == 0 && access(c, F_OK) == 0;
}

static bool entry_absent(const char *so) {
  char c[4200];
  sibling(so, ".c", c, sizeof c);
  return access(so, F_OK) != 0 && access(c, F_OK) != 0;
}

/* The bytes of every entry's files in the cache directory. */
static int64_t cache_bytes(void) {
  DIR *d = opendir(cache_dir());
  int64_t n = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    cpu_cache_name_t kind = cpu_cache_classify(de->d_name, NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", cache_dir(), de->d_name);
    if (kind == CPU_NAME_OBJECT || kind == CPU_NAME_SOURCE) n += file_bytes(path);
  }
  if (d) closedir(d);
  return n;
}

static void set_mtime(const char *path, time_t t) {
  struct timespec times[2] = {{.tv_sec = t}, {.tv_sec = t}};
  CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
}

static void answer_source_for(int value, char *out, size_t size) {
  snprintf(out, size, "int answer(void) { return %d; }\n", value);
}

/* Seven entries against a budget of three and a half: the four least
 * recently used go, where a load counts as a use (entry 0, the oldest
 * built, was loaded last but two), and the total ends within the budget.
 * A file that is not the cache's stays. */
static void test_prune_least_recently_used(void) {
  fresh_cache();
  setenv("LOOM_CACHE_MAX_BYTES", "0", 1);
  char src[7][64], *path[7];
  int64_t biggest = 0;
  time_t now = time(NULL);
  for (int i = 0; i < 6; i++) {
    answer_source_for(100 + i, src[i], sizeof src[i]);
    path[i] = entry_path(src[i]);
    if (entry_size(path[i]) > biggest) biggest = entry_size(path[i]);
  }
  /* Entry i was last used 1000 - 10 i seconds ago. */
  for (int i = 0; i < 6; i++) set_mtime(path[i], now - 1000 + 10 * i);
  bool cached = false;
  CHECK(build_and_call(src[0], "answer", &cached) == 100 && cached);
  char notes[400];
  snprintf(notes, sizeof notes, "%s/notes.txt", cache_dir());
  FILE *f = fopen(notes, "w");
  if (f) fclose(f);
  char budget[32];
  snprintf(budget, sizeof budget, "%lld", (long long)(3 * biggest + biggest / 2));
  setenv("LOOM_CACHE_MAX_BYTES", budget, 1);
  answer_source_for(106, src[6], sizeof src[6]);
  CHECK(build_and_call(src[6], "answer", &cached) == 106 && !cached);
  path[6] = entry_path(src[6]);
  CHECK(entry_present(path[0]));
  for (int i = 1; i <= 4; i++) CHECK(entry_absent(path[i]));
  CHECK(entry_present(path[5]));
  CHECK(entry_present(path[6]));
  CHECK(cache_bytes() <= 3 * biggest + biggest / 2);
  CHECK(access(notes, F_OK) == 0);
  for (int i = 0; i < 7; i++) free(path[i]);
  unsetenv("LOOM_CACHE_MAX_BYTES");
  drop_cache();
}

/* A budget of one byte removes every entry, also ones in use: a module a
 * child process loaded, one this process holds, and the one just built
 * (whose build triggers the prune) all keep working. */
static void test_prune_spares_modules_in_use(void) {
  fresh_cache();
  setenv("LOOM_CACHE_MAX_BYTES", "0", 1);
  char a[64], b[64], c[64];
  answer_source_for(200, a, sizeof a);
  answer_source_for(201, b, sizeof b);
  answer_source_for(202, c, sizeof c);
  char *pa = entry_path(a), *pb = entry_path(b);
  int ready[2], go[2];
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    cpu_module_t *m = NULL;
    bool ok = build(a, &m) == LOOM_OK;
    int (*fn)(void) = ok ? (int (*)(void))cpu_module_symbol(m, "answer") : NULL;
    char byte = 'r';
    (void)!write(ready[1], &byte, 1);
    (void)!read(go[0], &byte, 1);
    _exit(fn && fn() == 200 ? 0 : 1);
  }
  char byte;
  CHECK(read(ready[0], &byte, 1) == 1);
  cpu_module_t *held = NULL, *fresh = NULL;
  CHECK_OK(build(b, &held));
  setenv("LOOM_CACHE_MAX_BYTES", "1", 1);
  CHECK_OK(build(c, &fresh));
  CHECK(entry_absent(pa));
  CHECK(entry_absent(pb));
  CHECK(cache_bytes() == 0);
  int (*fb)(void) = held ? (int (*)(void))cpu_module_symbol(held, "answer") : NULL;
  int (*fc)(void) = fresh ? (int (*)(void))cpu_module_symbol(fresh, "answer") : NULL;
  CHECK(fb && fb() == 201);
  CHECK(fc && fc() == 202);
  CHECK(write(go[1], "g", 1) == 1);
  int status = -1;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cpu_module_release(held);
  cpu_module_release(fresh);
  close(ready[0]);
  close(ready[1]);
  close(go[0]);
  close(go[1]);
  free(pa);
  free(pb);
  unsetenv("LOOM_CACHE_MAX_BYTES");
  drop_cache();
}

/* While another process holds the lock, a prune does nothing. */
static void test_prune_lock_skips(void) {
  fresh_cache();
  char *path = entry_path(answer_source), lock[400];
  snprintf(lock, sizeof lock, "%s/prune.lock", cache_dir());
  int fd = open(lock, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0);
  fflush(NULL);
  pid_t holder = fork();
  if (holder == 0) {
    /* An flock belongs to an open file: the child's own open contends. */
    int own = open(lock, O_RDWR);
    (void)!flock(own, LOCK_EX);
    pause();
    _exit(0);
  }
  /* Wait until the child holds the lock (a try from here fails). */
  int probe = open(lock, O_RDWR);
  for (int i = 0; i < 1000 && flock(probe, LOCK_EX | LOCK_NB) == 0; i++) {
    flock(probe, LOCK_UN);
    usleep(10000);
  }
  cpu_prune_stats_t st;
  CHECK_OK(cpu_cache_prune(cache_dir(), 1, &st));
  CHECK(st.skipped);
  CHECK(entry_present(path));
  kill(holder, SIGKILL);
  CHECK(waitpid(holder, NULL, 0) == holder);
  CHECK_OK(cpu_cache_prune(cache_dir(), 1, &st));
  CHECK(!st.skipped && st.removed_modules == 1 && st.modules == 0 && st.bytes == 0);
  CHECK(entry_absent(path));
  close(probe);
  close(fd);
  free(path);
  drop_cache();
}

/* A pid that no process has: a child's, after it exited and was reaped. */
static long dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0 && waitpid(pid, NULL, 0) == pid);
  return (long)pid;
}

static void make_scratch(const char *dir, long pid, const char *rest, time_t mtime, char *out,
                         size_t size) {
  snprintf(out, size, "%s/tmp-%ld-%s", dir, pid, rest);
  CHECK(mkdir(out, 0700) == 0);
  char inside[600];
  snprintf(inside, sizeof inside, "%s/module.c", out);
  FILE *f = fopen(inside, "w");
  if (f) fclose(f);
  if (mtime) set_mtime(out, mtime);
}

/* Scratch directories of builds whose process is gone (killed
 * mid-compile) are removed when a process first uses the cache, and by
 * every prune; a live process's stay. */
static void test_stale_scratch_removed(void) {
  fresh_cache();
  char dir[300], dead[600], reused[600], live[600], other[600];
  snprintf(dir, sizeof dir, "%s", cache_dir());
  CHECK(mkdir(dir, 0700) == 0);
  long gone = dead_pid();
  make_scratch(dir, gone, "0-aB3xYz", 0, dead, sizeof dead);
  /* This pid a day before this process started: another process then. */
  make_scratch(dir, (long)getpid(), "998-cccccc", time(NULL) - 86400, reused, sizeof reused);
  make_scratch(dir, (long)getpid(), "999-bbbbbb", 0, live, sizeof live);
  snprintf(other, sizeof other, "%s/tmp-x-1-zzzzzz", dir);
  CHECK(mkdir(other, 0700) == 0);
  /* The first build in this directory is its first use by this process. */
  CHECK(build_and_call(answer_source, "answer", NULL) == 42);
  CHECK(access(dead, F_OK) != 0);
  CHECK(access(reused, F_OK) != 0);
  CHECK(access(live, F_OK) == 0);
  CHECK(access(other, F_OK) == 0);
  make_scratch(dir, dead_pid(), "1-dddddd", 0, dead, sizeof dead);
  cpu_prune_stats_t st;
  CHECK_OK(cpu_cache_prune(dir, 0, &st));
  CHECK(st.removed_scratch == 1 && st.removed_modules == 0 && st.modules == 1);
  CHECK(access(dead, F_OK) != 0);
  CHECK(access(live, F_OK) == 0);
  drop_cache();
}

static void test_cache_names(void) {
  long pid = 0;
  const char *key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char name[128];
  snprintf(name, sizeof name, "%s.so", key);
  CHECK(cpu_cache_classify(name, &pid) == CPU_NAME_OBJECT && pid == -1);
  snprintf(name, sizeof name, "%s.c", key);
  CHECK(cpu_cache_classify(name, NULL) == CPU_NAME_SOURCE);
  snprintf(name, sizeof name, "%s.idx", key);
  CHECK(cpu_cache_classify(name, NULL) == CPU_NAME_INDEX);
  snprintf(name, sizeof name, "%s.idx.tmp.12.0", key);
  CHECK(cpu_cache_classify(name, NULL) == CPU_NAME_OTHER);
  snprintf(name, sizeof name, "%s.so.x", key);
  CHECK(cpu_cache_classify(name, NULL) == CPU_NAME_OTHER);
  snprintf(name, sizeof name, "%.63s.so", key);
  CHECK(cpu_cache_classify(name, NULL) == CPU_NAME_OTHER);
  snprintf(name, sizeof name, "%.63sA.so", key);
  CHECK(cpu_cache_classify(name, NULL) == CPU_NAME_OTHER);
  CHECK(cpu_cache_classify("tmp-1234-7-aB3xYz", &pid) == CPU_NAME_SCRATCH && pid == 1234);
  CHECK(cpu_cache_classify("tmp-1234-7-aB3xY", NULL) == CPU_NAME_OTHER);
  CHECK(cpu_cache_classify("tmp-1234-7-aB3xYz1", NULL) == CPU_NAME_OTHER);
  CHECK(cpu_cache_classify("tmp--7-aB3xYz", NULL) == CPU_NAME_OTHER);
  CHECK(cpu_cache_classify("tmp-12345678901-7-aB3xYz", NULL) == CPU_NAME_OTHER);
  CHECK(cpu_cache_classify("prune.lock", NULL) == CPU_NAME_OTHER);
  CHECK(cpu_cache_classify(NULL, &pid) == CPU_NAME_OTHER && pid == -1);
}

static void test_budget_parsing(void) {
  static const struct {
    const char *text;
    int64_t bytes;
  } cases[] = {{"2048", 2048},           {"2K", 2048},
               {"3m", 3 << 20},          {"1G", (int64_t)1 << 30},
               {"2T", (int64_t)2 << 40}, {"0", 0},
               {"", CPU_CACHE_DEFAULT_BYTES}, {"12abc", CPU_CACHE_DEFAULT_BYTES},
               {"-5", CPU_CACHE_DEFAULT_BYTES}, {"1.5G", CPU_CACHE_DEFAULT_BYTES},
               {"99999999999T", CPU_CACHE_DEFAULT_BYTES},
               {"99999999999999999999", CPU_CACHE_DEFAULT_BYTES}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("LOOM_CACHE_MAX_BYTES", cases[i].text, 1);
    int64_t got = cpu_cache_budget();
    if (got != cases[i].bytes)
      test_fail(__FILE__, __LINE__, "LOOM_CACHE_MAX_BYTES='%s' gave %lld", cases[i].text,
                (long long)got);
    test_checks++;
  }
  unsetenv("LOOM_CACHE_MAX_BYTES");
  CHECK(cpu_cache_budget() == CPU_CACHE_DEFAULT_BYTES);
}

static void test_bad_arguments(void) {
  cpu_module_t *m = NULL;
  CHECK_ERR(cpu_module_build(NULL, 0, NULL, 0, &m), LOOM_ERR_INVALID, "source");
  CHECK_ERR(cpu_module_build(answer_source, -1, NULL, 0, &m), LOOM_ERR_INVALID, "negative");
  CHECK_ERR(cpu_module_build(answer_source, 1, NULL, 0, NULL), LOOM_ERR_INVALID, "out");
  CHECK_ERR(cpu_module_build(answer_source, 1, NULL, 1, &m), LOOM_ERR_INVALID, "symbol");
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
    loom_status_t s = build(source, &m);
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

/* ---- A large module in several units (parts.h) ------------------------------ */

enum { PART_FUNCTIONS = 8, PART_PAD = 12000 };

/* A module of PART_FUNCTIONS functions f<i>() = twice(i) after a prelude
 * defining the static twice, each padded by a comment to about 12 KB so
 * that the source is worth cutting, and where each function starts. A
 * broken function (bad >= 0) lacks a semicolon. */
static char *parted_source(int bad, cpu_source_cuts_t *cuts, int64_t *at) {
  size_t cap = PART_FUNCTIONS * (PART_PAD + 200) + 200, used = 0;
  char *s = malloc(cap);
  used += (size_t)snprintf(s, cap, "static int twice(int x) { return 2 * x; }\n");
  cuts->prelude = (int64_t)used;
  for (int i = 0; i < PART_FUNCTIONS; i++) {
    at[i] = (int64_t)used;
    used += (size_t)snprintf(s + used, cap - used, "/* ");
    memset(s + used, 'x', PART_PAD);
    used += PART_PAD;
    used += (size_t)snprintf(s + used, cap - used, " */\nint f%d(void) { return twice(%d)%s }\n",
                             i, i, i == bad ? "" : ";");
  }
  cuts->at = at;
  cuts->n = PART_FUNCTIONS;
  return s;
}

static const char *const part_symbols[PART_FUNCTIONS] = {"f0", "f1", "f2", "f3",
                                                         "f4", "f5", "f6", "f7"};

/* Units of about equal size, cut where functions start; none for a
 * source too small to repay a second compiler, or one job. */
static void test_parts_plan(void) {
  int64_t at[PART_FUNCTIONS], start[CPU_CC_MAX_INPUTS + 1];
  cpu_source_cuts_t cuts;
  char *s = parted_source(-1, &cuts, at);
  int64_t length = (int64_t)strlen(s);
  int n = cpu_parts_plan(&cuts, length, 3, start);
  CHECK(n == 3);
  CHECK(start[0] == cuts.prelude && start[n] == length);
  for (int i = 1; i < n; i++) {
    bool at_cut = false;
    for (int k = 0; k < cuts.n; k++) at_cut |= start[i] == at[k];
    CHECK(at_cut && start[i] > start[i - 1]);
    /* 8 functions in 3 units: 2 or 3 each. */
    int64_t size = start[i] - start[i - 1];
    CHECK(size > 2 * PART_PAD && size < 4 * PART_PAD);
  }
  CHECK(cpu_parts_plan(&cuts, length, 1, start) == 1);
  CHECK(cpu_parts_plan(&cuts, length, 64, start) == 5); /* 96 KB: units of >= 16 KB */
  cuts.n = 1; /* one place to cut: one unit */
  CHECK(cpu_parts_plan(&cuts, length, 3, start) == 1);
  cuts.n = 2;
  CHECK(cpu_parts_plan(&cuts, length, 3, start) == 2);
  CHECK(start[1] == at[1]);
  free(s);
}

/* Captures stderr into root/log.txt around build (LOOM_LOG=compile). */
static loom_status_t build_logged(const char *source, const cpu_source_cuts_t *cuts,
                                  cpu_module_t **m, char *log, size_t cap) {
  char log_path[300];
  snprintf(log_path, sizeof log_path, "%s/log.txt", root);
  fflush(stderr);
  int saved = dup(2), fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  setenv("LOOM_LOG", "compile", 1);
  core_log_reload();
  cpu_build_stage_t stage;
  loom_status_t s = cpu_module_build_staged(source, (int64_t)strlen(source), cuts,
                                            part_symbols, PART_FUNCTIONS, m, &stage);
  char error[1024];
  snprintf(error, sizeof error, "%s", loom_last_error());
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  unsetenv("LOOM_LOG");
  core_log_reload();
  FILE *f = fopen(log_path, "r");
  log[0] = '\0';
  if (f) {
    log[fread(log, 1, cap - 1, f)] = '\0';
    fclose(f);
  }
  if (s != LOOM_OK) loom_set_error(s, "%s", error);
  return s;
}

/* Scratch directories left in the cache (a build's units and objects). */
static int scratch_count(void) {
  DIR *d = opendir(cache_dir());
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    n += cpu_cache_classify(de->d_name, NULL) == CPU_NAME_SCRATCH;
  if (d) closedir(d);
  return n;
}

static int count_of(const char *text, const char *what) {
  int n = 0;
  for (const char *c = text; (c = strstr(c, what)); c++) n++;
  return n;
}

/* With 3 jobs the module is compiled as 3 units at once and linked; each
 * function works, the counter says one build, and the source kept beside
 * the entry is the whole module's. */
static void test_parts_build_and_call(void) {
  fresh_cache();
  setenv("LOOM_CC_JOBS", "3", 1);
  int64_t at[PART_FUNCTIONS];
  cpu_source_cuts_t cuts;
  char *s = parted_source(-1, &cuts, at), log[8192];
  cpu_toolchain_stats_t before = stats();
  cpu_module_t *m = NULL;
  CHECK_OK(build_logged(s, &cuts, &m, log, sizeof log));
  for (int i = 0; m && i < PART_FUNCTIONS; i++) {
    int (*fn)(void) = (int (*)(void))cpu_module_symbol(m, part_symbols[i]);
    CHECK(fn && fn() == 2 * i);
  }
  CHECK(count_of(log, " -c -o unit") == 3);
  CHECK(count_of(log, "-shared -Wl,-z,noseparate-code -Wl,-z,norelro -o module.so unit0.o unit1.o "
                         "unit2.o -lm") == 1);
  CHECK(stats().cc_invocations == before.cc_invocations + 1);
  CHECK(scratch_count() == 0);
  if (m) {
    char kept[400];
    struct stat st;
    snprintf(kept, sizeof kept, "%.*s.c", (int)(strlen(cpu_module_path(m)) - 3),
             cpu_module_path(m));
    CHECK(stat(kept, &st) == 0 && st.st_size == (off_t)strlen(s));
  }
  cpu_module_release(m);
  /* The same source with one job: one compile, the same key (a hit). */
  setenv("LOOM_CC_JOBS", "1", 1);
  m = NULL;
  CHECK_OK(build_logged(s, &cuts, &m, log, sizeof log));
  CHECK(m && cpu_module_from_cache(m));
  cpu_module_release(m);
  free(s);
  unsetenv("LOOM_CC_JOBS");
  drop_cache();
}

/* A unit the compiler rejects fails the build with its message (the
 * fallback's stage: the compiler failed); nothing is cached and no unit
 * or object is left behind. */
static void test_parts_syntax_error(void) {
  fresh_cache();
  setenv("LOOM_CC_JOBS", "3", 1);
  int64_t at[PART_FUNCTIONS];
  cpu_source_cuts_t cuts;
  char *s = parted_source(5, &cuts, at), log[8192];
  cpu_module_t *m = NULL;
  CHECK_ERR(build_logged(s, &cuts, &m, log, sizeof log), LOOM_ERR_UNSUPPORTED, "error");
  CHECK(strstr(loom_last_error(), "unit2.c") != NULL);
  CHECK(m == NULL);
  CHECK(entry_count() == 0);
  CHECK(scratch_count() == 0);
  cpu_build_stage_t stage = CPU_BUILD_DONE;
  CHECK(cpu_module_build_staged(s, (int64_t)strlen(s), &cuts, part_symbols, PART_FUNCTIONS, &m,
                                &stage) == LOOM_ERR_UNSUPPORTED);
  CHECK(stage == CPU_BUILD_CC_FAILED);
  free(s);
  unsetenv("LOOM_CC_JOBS");
  drop_cache();
}

/* A compiler that hangs is killed in every unit, each at its own limit,
 * with the process it started. */
static void test_parts_hanging_compiler_killed(void) {
  use_hanging_compiler();
  setenv("LOOM_CC_TIMEOUT", "2", 1);
  setenv("LOOM_CC_JOBS", "3", 1);
  int64_t at[PART_FUNCTIONS];
  cpu_source_cuts_t cuts;
  char *s = parted_source(-1, &cuts, at), log[8192];
  cpu_module_t *m = NULL;
  CHECK_ERR(build_logged(s, &cuts, &m, log, sizeof log), LOOM_ERR_UNSUPPORTED,
            "did not finish within 2 s");
  CHECK(m == NULL);
  long pids[8];
  CHECK(read_pids(pids, 8) == 3);
  for (int i = 0; i < 3; i++) CHECK(process_ended(pids[i]));
  CHECK(scratch_count() == 0);
  kill_pids();
  free(s);
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
  unsetenv("LOOM_CC_JOBS");
  drop_cache();
}

/* Cuts that do not fit the source are refused. */
static void test_parts_bad_cuts(void) {
  fresh_cache();
  int64_t at[PART_FUNCTIONS];
  cpu_source_cuts_t cuts;
  char *s = parted_source(-1, &cuts, at);
  int64_t t = at[2];
  at[2] = at[3];
  cpu_module_t *m = NULL;
  cpu_build_stage_t stage;
  CHECK_ERR(cpu_module_build_staged(s, (int64_t)strlen(s), &cuts, part_symbols, PART_FUNCTIONS,
                                    &m, &stage),
            LOOM_ERR_INVALID, "cuts");
  at[2] = t;
  cuts.prelude = (int64_t)strlen(s) + 1;
  CHECK_ERR(cpu_module_build_staged(s, (int64_t)strlen(s), &cuts, part_symbols, PART_FUNCTIONS,
                                    &m, &stage),
            LOOM_ERR_INVALID, "cuts");
  CHECK(m == NULL);
  free(s);
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
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
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
  TEST_RUN(test_sha256_instances);
  TEST_RUN(test_bad_arguments);
  TEST_RUN(test_build_and_call);
  TEST_RUN(test_second_build_is_disk_hit);
  TEST_RUN(test_seal_format);
  TEST_RUN(test_truncated_entry_rebuilt);
  TEST_RUN(test_corrupt_entry_rebuilt);
  TEST_RUN(test_other_keys_entry_rebuilt);
  TEST_RUN(test_missing_compiler);
  TEST_RUN(test_failing_compiler);
  TEST_RUN(test_syntax_error);
  TEST_RUN(test_clang_compiles_generated_code);
  TEST_RUN(test_parts_plan);
  TEST_RUN(test_parts_build_and_call);
  TEST_RUN(test_parts_syntax_error);
  TEST_RUN(test_parts_hanging_compiler_killed);
  TEST_RUN(test_parts_bad_cuts);
  TEST_RUN(test_two_processes);
  TEST_RUN(test_threads);
  TEST_RUN(test_different_sources_different_keys);
  TEST_RUN(test_cache_dir_defaults);
  TEST_RUN(test_unusable_cache_dir);
  TEST_RUN(test_allocation_failures);
  TEST_RUN(test_log_lines);
  TEST_RUN(test_timeout_scales_with_source);
  TEST_RUN(test_hanging_compiler_killed);
  TEST_RUN(test_hanging_version_probe);
  TEST_RUN(test_version_probe_kept);
  TEST_RUN(test_compiler_child_holding_output);
  TEST_RUN(test_module_without_symbols_refused);
  TEST_RUN(test_cached_module_without_symbols_rebuilt);
  TEST_RUN(test_cache_names);
  TEST_RUN(test_budget_parsing);
  TEST_RUN(test_prune_least_recently_used);
  TEST_RUN(test_prune_spares_modules_in_use);
  TEST_RUN(test_prune_lock_skips);
  TEST_RUN(test_stale_scratch_removed);
  return test_summary();
}
