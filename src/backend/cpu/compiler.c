#include "backend/cpu/compiler.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/cache_dir.h"
#include "core/cancel.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/file.h"
#include "core/isa.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/sha256.h"
#include "core/status.h"

/* -fno-math-errno: generated code never reads errno, and without it the
 * compiler keeps sqrtf calls scalar (an AdamW epilogue would not
 * vectorize). Results are unchanged: only errno writes go. -fopenmp-simd:
 * the prelude's math functions are vector functions (c_expr.c); no OpenMP
 * runtime is linked. */
static const char *const flags[] = {"-O3", "-march=native", "-fno-math-errno", "-fopenmp-simd",
                                    "-fPIC", "-shared", "-std=c11", "-w"};
/* A module's link: one read-only and one writable segment (the linker's
 * default maps code apart from read-only data and makes the writable one
 * read-only after relocation, RELRO). A trace loads dozens of small
 * modules, and in a process with threads each mapping and mprotect is a
 * TLB shootdown: a module's dlopen took 73 against 33 us alone here, and
 * three times that in a process with workers. The modules are Loom's own
 * code from a private directory, and import nothing but libm. */
static const char *const link_flags[] = {"-Wl,-z,noseparate-code", "-Wl,-z,norelro"};
enum {
  N_FLAGS = sizeof flags / sizeof flags[0],
  N_LINK_FLAGS = sizeof link_flags / sizeof link_flags[0],
  MAX_WORDS = 32
};

static char flags_text[256];
static pthread_once_t flags_once = PTHREAD_ONCE_INIT;

/* Joined from the table, so that the cache key always names the flags
 * that are really passed. */
static void join_flags(void) {
  size_t used = 0;
  for (int i = 0; i < N_FLAGS; i++)
    used += (size_t)snprintf(flags_text + used, sizeof flags_text - used, "%s ", flags[i]);
  for (int i = 0; i < N_LINK_FLAGS; i++)
    used += (size_t)snprintf(flags_text + used, sizeof flags_text - used, "%s ", link_flags[i]);
  if (core_isa_cc_flag())
    used += (size_t)snprintf(flags_text + used, sizeof flags_text - used, "%s ", core_isa_cc_flag());
  snprintf(flags_text + used, sizeof flags_text - used, "-lm");
}

const char *cpu_cc_flags(void) {
  pthread_once(&flags_once, join_flags);
  return flags_text;
}

/* LOOM_CC split at spaces, into storage (which the words point into). */
typedef struct cc_words {
  char storage[1024];
  char *word[MAX_WORDS];
  int n;
} cc_words_t;

static loom_status_t split_cc(const char *cc, cc_words_t *w) {
  if (snprintf(w->storage, sizeof w->storage, "%s", cc) >= (int)sizeof w->storage)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%.60s...': LOOM_CC is too long", cc);
  w->n = 0;
  for (char *save = NULL, *t = strtok_r(w->storage, " \t", &save); t;
       t = strtok_r(NULL, " \t", &save)) {
    if (w->n == MAX_WORDS)
      return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s': too many words in LOOM_CC", cc);
    w->word[w->n++] = t;
  }
  if (w->n == 0) return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s': LOOM_CC is empty", cc);
  return LOOM_OK;
}

static bool is_executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The program's absolute, symlink-free path: a name without a slash is
 * looked up in PATH, as the shell would. */
static bool resolve_program(const char *name, char resolved[PATH_MAX]) {
  if (strchr(name, '/'))
    return is_executable_file(name) && realpath(name, resolved) != NULL;
  const char *path = core_getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    size_t len = strcspn(path, ":");
    char candidate[PATH_MAX];
    int n = snprintf(candidate, sizeof candidate, "%.*s/%s", (int)len, len ? path : ".", name);
    if (n > 0 && n < (int)sizeof candidate && is_executable_file(candidate) &&
        realpath(candidate, resolved))
      return true;
    path += len + (path[len] == ':');
  }
  return false;
}

/* What a child printed (stdout and stderr together), and how it ended. */
typedef struct child_result {
  char output[8192]; /* the first bytes printed; the rest is read and dropped */
  size_t size;
  int wait_status;
  bool timed_out; /* killed (with its process group) at the deadline */
  bool cancelled; /* killed because the calling thread's wait was cut short */
} child_result_t;

static double now_s(void) { return (double)core_now_ns() / 1e9; }

/* Reads what is there; false at end of file or on an error. */
static bool read_some(int fd, child_result_t *r) {
  char chunk[4096];
  ssize_t n = read(fd, chunk, sizeof chunk);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  size_t keep = sizeof r->output - 1 - r->size;
  if ((size_t)n < keep) keep = (size_t)n;
  memcpy(r->output + r->size, chunk, keep);
  r->size += keep;
  r->output[r->size] = '\0';
  return true;
}

/* 1 when pid has exited (its status in r), 0 while it runs, else -errno
 * (an application that ignores SIGCHLD leaves nothing to wait for). */
static int exited(pid_t pid, child_result_t *r, int flags) {
  pid_t got;
  while ((got = waitpid(pid, &r->wait_status, flags)) < 0 && errno == EINTR) continue;
  return got == pid ? 1 : got == 0 ? 0 : -errno;
}

/* Collects the child's output until it exits, or kills its process group
 * at the deadline (timeout_s <= 0: none) or once the calling thread's
 * wait is cancelled (core/cancel.h); returns 0 or an errno. The
 * child's exit, not the end of its output, ends the wait: a process it
 * left behind may hold the pipe open for ever. Waits in slices that grow
 * from 1 ms to 100 ms, so that a quick child costs little and a slow one
 * few wakeups; the end of the output starts them again at 1 ms, as the
 * exit follows it closely. */
static int wait_child(pid_t pid, int fd, double timeout_s, bool cancellable,
                      child_result_t *r) {
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  bool open = true;
  int state, slice_ms = 1;
  while ((state = exited(pid, r, WNOHANG)) == 0) {
    double left = deadline > 0 ? deadline - now_s() : 1e9;
    bool cancelled = cancellable && core_cancelled();
    if (left <= 0 || cancelled) {
      kill(-pid, SIGKILL);
      r->timed_out = !cancelled;
      r->cancelled = cancelled;
      state = exited(pid, r, 0);
      break;
    }
    int wait_ms = left * 1e3 < slice_ms ? (int)(left * 1e3) + 1 : slice_ms;
    slice_ms = slice_ms < 100 ? 2 * slice_ms : 100;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (!open) nanosleep(&(struct timespec){0, wait_ms * 1000000L}, NULL);
    else if (poll(&p, 1, wait_ms) > 0 && !(open = read_some(fd, r))) slice_ms = 1;
  }
  /* What it printed before it exited is in the pipe already. */
  while (open && poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, 0) > 0 &&
         read_some(fd, r))
    continue;
  return state < 0 ? -state : 0;
}

/* Runs argv[0] (an absolute path) in work_dir (NULL: this one) with its
 * output captured, in a process group of its own so that a timeout kills
 * whatever it started; cancellable: stopped (or not started) once the
 * calling thread's wait is cancelled (r->cancelled). Returns 0 or the
 * errno that kept it from starting. */
static int run_child(char *const argv[], const char *work_dir, double timeout_s,
                     bool cancellable, child_result_t *r) {
  int pipe_fd[2];
  r->size = 0;
  r->output[0] = '\0';
  r->timed_out = r->cancelled = false;
  r->wait_status = 0;
  if (cancellable && core_cancelled()) {
    r->cancelled = true;
    return 0;
  }
  /* Close-on-exec, so that children spawned by other threads do not
   * inherit the write end and hold the pipe open; non-blocking, so that
   * a read never outlasts the deadline. */
  if (pipe2(pipe_fd, O_CLOEXEC) != 0) return errno;
  (void)fcntl(pipe_fd[0], F_SETFL, O_NONBLOCK);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], 2);
  if (work_dir) posix_spawn_file_actions_addchdir_np(&actions, work_dir);
  pid_t pid;
  int err = posix_spawn(&pid, argv[0], &actions, &attr, argv, core_env_vector());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fd[1]);
  if (err == 0) err = wait_child(pid, pipe_fd[0], timeout_s, cancellable, r);
  close(pipe_fd[0]);
  return err;
}

/* The first lines of a child's output, for an error message. */
static void first_lines(const char *text, int max_lines, char *out, size_t cap) {
  size_t end = 0;
  for (int line = 0; text[end] && line < max_lines; line++) {
    end += strcspn(text + end, "\n");
    if (text[end] == '\n') end++;
  }
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) end--;
  snprintf(out, cap, "%.*s", (int)end, text);
}

/* ---- identity, memoized per value of LOOM_CC ---- */

typedef struct identity_entry {
  struct identity_entry *next;
  char *cc;
  char *identity;
} identity_entry_t;

static identity_entry_t *identities;
static pthread_mutex_t identities_lock = PTHREAD_MUTEX_INITIALIZER;

static bool lookup_identity(const char *cc, char *out, size_t cap) {
  bool found = false;
  pthread_mutex_lock(&identities_lock);
  for (identity_entry_t *e = identities; e && !found; e = e->next)
    if (!strcmp(e->cc, cc)) {
      snprintf(out, cap, "%s", e->identity);
      found = true;
    }
  pthread_mutex_unlock(&identities_lock);
  return found;
}

/* Entries live until the process ends: one per compiler tried. */
static void remember_identity(const char *cc, const char *identity) {
  identity_entry_t *e = core_calloc(1, sizeof *e);
  char *cc_copy = core_strdup(cc), *identity_copy = core_strdup(identity);
  if (!e || !cc_copy || !identity_copy) {
    core_free(e);
    core_free(cc_copy);
    core_free(identity_copy);
    return;
  }
  e->cc = cc_copy;
  e->identity = identity_copy;
  pthread_mutex_lock(&identities_lock);
  e->next = identities;
  identities = e;
  pthread_mutex_unlock(&identities_lock);
}

/* ---- The version line, kept on disk ---- */

/* Where the version line of the program at resolved is kept in the
 * cache directory: a file named after the program's path and its file's
 * identity (device, inode, size, times), which an upgrade changes. */
static bool version_path(const char *resolved, char path[PATH_MAX]) {
  struct stat st;
  char dir[PATH_MAX], key[CORE_SHA256_HEX];
  if (stat(resolved, &st) != 0 || core_cache_dir(dir, sizeof dir) != LOOM_OK) {
    loom_clear_error();
    return false;
  }
  char text[PATH_MAX + 160];
  int n = snprintf(text, sizeof text, "%s\n%llu %llu %lld %lld.%09ld %lld.%09ld", resolved,
                   (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                   (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                   (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
  if (n < 0 || n >= (int)sizeof text) return false;
  core_sha256_hex_of(text, (size_t)n, key);
  return snprintf(path, PATH_MAX, "%s/cc-%.32s.version", dir, key) < PATH_MAX;
}

static bool recall_version(const char *path, char *version, size_t cap) {
  void *text = NULL;
  size_t size = 0;
  if (core_read_file(path, 4096, &text, &size) != LOOM_OK) {
    loom_clear_error();
    return false;
  }
  bool ok = size > 0 && ((char *)text)[size - 1] == '\n' && size <= cap;
  if (ok) snprintf(version, cap, "%.*s", (int)(size - 1), (char *)text);
  core_free(text);
  return ok;
}

static loom_status_t fill_version(int fd, const char *tmp, void *ctx) {
  const char *version = ctx;
  LOOM_TRY(core_write_all(fd, tmp, version, strlen(version)));
  return core_write_all(fd, tmp, "\n", 1);
}

/* The first line of `resolved --version`: from the cache directory when
 * this file of the program answered before, else asked (and kept). A
 * probe costs a process start, a few milliseconds, in every process. */
static void version_of(const char *cc, const char *resolved, char *version, size_t cap) {
  char path[PATH_MAX];
  bool keep = version_path(resolved, path);
  if (keep && recall_version(path, version, cap)) return;
  char *argv[] = {(char *)resolved, "--version", NULL};
  child_result_t *r = core_malloc(sizeof *r);
  if (!r) return;
  double limit = cpu_cc_timeout(0);
  /* A compiler that cannot say its version still gets an identity (its
   * path); if it is broken, the compile itself reports why. */
  bool answered = run_child(argv, NULL, limit, false, r) == 0 && !r->timed_out;
  if (answered) first_lines(r->output, 1, version, cap);
  if (r->timed_out)
    core_warn("C compiler '%s': '%s --version' did not answer within %g s (LOOM_CC_TIMEOUT) "
              "and was killed; modules are cached under its path alone",
              cc, resolved, limit);
  core_free(r);
  if (answered && keep && !strchr(version, '\n') &&
      core_file_replace(path, fill_version, version) != LOOM_OK)
    loom_clear_error(); /* best effort: the next process asks again */
}

static loom_status_t compute_identity(const char *cc, char *out, size_t cap) {
  cc_words_t w;
  char resolved[PATH_MAX];
  LOOM_TRY(split_cc(cc, &w));
  if (!resolve_program(w.word[0], resolved))
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "C compiler '%s' was not found (set LOOM_CC to a C compiler)", cc);
  char version[512] = "";
  version_of(cc, resolved, version, sizeof version);
  int n = snprintf(out, cap, "%s", resolved);
  for (int i = 1; i < w.n && n >= 0 && (size_t)n < cap; i++)
    n += snprintf(out + n, cap - (size_t)n, " %s", w.word[i]);
  if (n >= 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, "\n%s", version);
  return LOOM_OK;
}

loom_status_t cpu_cc_identity(const char *cc, char *out, size_t cap) {
  if (lookup_identity(cc, out, cap)) return LOOM_OK;
  LOOM_TRY(compute_identity(cc, out, cap));
  remember_identity(cc, out);
  return LOOM_OK;
}

/* ---- compiling ---- */

/* A compile of the largest module the test suite makes (245 KB of C)
 * took 13 s on a 2-core machine under a load of 9, and a 480 KB one 43 s
 * (gcc 12, -O3): 120 s per 64 KiB leaves a margin of 10x and more, as
 * the limit is there to end a hang, not a slow compile. */
#define DEFAULT_TIMEOUT_S 120.0
#define TIMEOUT_UNIT_BYTES 65536.0

/* LOOM_CC_TIMEOUT's seconds (0: no limit), or the default. */
static double timeout_unit(void) {
  static atomic_bool warned;
  const char *text = core_getenv("LOOM_CC_TIMEOUT");
  if (!text || !*text) return DEFAULT_TIMEOUT_S;
  char *end;
  double t = strtod(text, &end);
  if (end != text && !*end && t >= 0 && t < 1e9) return t;
  if (!atomic_exchange(&warned, true))
    core_warn("LOOM_CC_TIMEOUT='%s' is not a number of seconds; the C compiler gets the "
              "default %g s per 64 KiB of source",
              text, DEFAULT_TIMEOUT_S);
  return DEFAULT_TIMEOUT_S;
}

double cpu_cc_timeout(size_t source_bytes) {
  double unit = timeout_unit(), scale = (double)source_bytes / TIMEOUT_UNIT_BYTES;
  return unit * (scale > 1 ? scale : 1);
}

static double now_ms(void) { return now_s() * 1e3; }

static void join_words(char *const argv[], char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; argv[i] && used + 1 < cap; i++) {
    int n = snprintf(out + used, cap - used, "%s%s", i ? " " : "", argv[i]);
    if (n < 0) break;
    used += (size_t)n;
  }
}

static loom_status_t compile_failure(const char *cc, int err, const child_result_t *r,
                                     double timeout_s) {
  char lines[600];
  if (r->cancelled)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s' was stopped: the compile was "
                     "abandoned (its cache was destroyed, or a bounded wait ended)", cc);
  if (err != 0)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s' could not be run: %s", cc,
                     strerror(err));
  first_lines(r->output, 8, lines, sizeof lines);
  if (r->timed_out)
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "C compiler '%s' did not finish within %g s and was killed with the "
                     "processes it started (LOOM_CC_TIMEOUT sets the limit per 64 KiB of "
                     "source)%s%s",
                     cc, timeout_s, lines[0] ? ": " : "", lines);
  if (strstr(r->output, "No space left on device"))
    return loom_fail(LOOM_ERR_IO, "the module cache's disk is full: C compiler '%s': %s", cc,
                     lines);
  if (WIFSIGNALED(r->wait_status))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s' was killed by signal %d: %s",
                     cc, WTERMSIG(r->wait_status), lines);
  return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s' failed (exit status %d): %s", cc,
                   WEXITSTATUS(r->wait_status), lines[0] ? lines : "(no output)");
}

/* What a compiler run makes: the whole module's shared object, one
 * translation unit's object (-c, without -shared), or a shared object
 * linked from objects. */
typedef enum cc_step { CC_MODULE, CC_OBJECT, CC_LINK } cc_step_t;

/* The command line of a run, in argv (of at least MAX_ARGS entries;
 * resolved and w hold the strings it points at). */
enum { MAX_ARGS = MAX_WORDS + N_FLAGS + N_LINK_FLAGS + 8 + CPU_CC_MAX_INPUTS };
static void command_line(char **argv, char *resolved, const cc_words_t *w, cc_step_t step,
                         const char *const *inputs, int n_inputs, const char *out) {
  int n = 0;
  argv[n++] = resolved;
  for (int i = 1; i < w->n; i++) argv[n++] = w->word[i];
  for (int i = 0; i < N_FLAGS && step != CC_LINK; i++)
    if (step == CC_MODULE || strcmp(flags[i], "-shared")) argv[n++] = (char *)flags[i];
  if (step != CC_LINK && core_isa_cc_flag()) argv[n++] = (char *)core_isa_cc_flag();
  if (step == CC_OBJECT) argv[n++] = "-c";
  if (step == CC_LINK) argv[n++] = "-shared";
  for (int i = 0; i < N_LINK_FLAGS && step != CC_OBJECT; i++) argv[n++] = (char *)link_flags[i];
  argv[n++] = "-o";
  argv[n++] = (char *)out;
  for (int i = 0; i < n_inputs; i++) argv[n++] = (char *)inputs[i];
  if (step != CC_OBJECT) argv[n++] = "-lm";
  argv[n] = NULL;
}

static loom_status_t run_cc(const char *cc, const char *work_dir, cc_step_t step,
                            const char *const *inputs, int n_inputs, const char *out,
                            double timeout_s) {
  cc_words_t w;
  char resolved[PATH_MAX];
  if (n_inputs < 1 || n_inputs > CPU_CC_MAX_INPUTS)
    return loom_fail(LOOM_ERR_INVALID, "C compiler '%s': %d inputs (1 to %d)", cc, n_inputs,
                     CPU_CC_MAX_INPUTS);
  LOOM_TRY(split_cc(cc, &w));
  if (!resolve_program(w.word[0], resolved))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s' was not found", cc);
  char *argv[MAX_ARGS];
  command_line(argv, resolved, &w, step, inputs, n_inputs, out);
  child_result_t *r = core_malloc(sizeof *r);
  if (!r) return loom_fail(LOOM_ERR_NOMEM, "C compiler '%s': out of memory", cc);
  double start = now_ms();
  int err = run_child(argv, work_dir, timeout_s, true, r);
  bool ok = err == 0 && !r->timed_out && !r->cancelled && WIFEXITED(r->wait_status) &&
            WEXITSTATUS(r->wait_status) == 0;
  if (core_log_enabled(LOG_COMPILE)) {
    char line[1500];
    join_words(argv, line, sizeof line);
    core_log(LOG_COMPILE, "in %s: %s (%.1f ms%s)", work_dir, line, now_ms() - start,
             ok ? "" : ", failed");
  }
  loom_status_t status = ok ? LOOM_OK : compile_failure(cc, err, r, timeout_s);
  core_free(r);
  return status;
}

loom_status_t cpu_cc_compile(const char *cc, const char *work_dir, const char *src,
                             const char *so, double timeout_s) {
  return run_cc(cc, work_dir, CC_MODULE, &src, 1, so, timeout_s);
}

loom_status_t cpu_cc_compile_object(const char *cc, const char *work_dir, const char *src,
                                    const char *obj, double timeout_s) {
  return run_cc(cc, work_dir, CC_OBJECT, &src, 1, obj, timeout_s);
}

loom_status_t cpu_cc_link(const char *cc, const char *work_dir, const char *const *objs,
                          int n_objs, const char *so, double timeout_s) {
  return run_cc(cc, work_dir, CC_LINK, objs, n_objs, so, timeout_s);
}

int cpu_cc_jobs(void) {
  static atomic_bool warned;
  const char *text = core_getenv("LOOM_CC_JOBS");
  if (text && *text) {
    char *end;
    long n = strtol(text, &end, 10);
    if (*end == '\0' && n >= 1 && n <= CPU_CC_MAX_INPUTS) return (int)n;
    if (!atomic_exchange(&warned, true))
      core_warn("LOOM_CC_JOBS='%s' is not a count from 1 to %d; the C compiler runs as "
                "many jobs as there are processors", text, CPU_CC_MAX_INPUTS);
  }
  int n = core_default_threads();
  return n < CPU_CC_MAX_INPUTS ? n : CPU_CC_MAX_INPUTS;
}
