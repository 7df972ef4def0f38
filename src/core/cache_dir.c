/* Loom's cache directory: LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom,
 * else $HOME/.cache/loom, created (mode 0700) when missing; where it
 * cannot be, a private directory for this process, removed at exit, with
 * one warning. The CPU back end keeps its compiled modules there
 * (backend/cpu/module_cache.h), the executable cache the keys it has
 * built (trace/cache_journal.c). */
#include "core/cache_dir.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"
#include "core/status.h"

static bool usable_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, W_OK | X_OK) == 0;
}

/* mkdir -p, creating missing components with mode 0700. */
bool core_make_dirs(const char *path) {
  if (usable_dir(path)) return true;
  char partial[PATH_MAX];
  size_t len = strlen(path);
  if (len == 0 || len >= sizeof partial) return false;
  memcpy(partial, path, len + 1);
  for (char *p = partial + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(partial, 0700) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  if (mkdir(partial, 0700) != 0 && errno != EEXIST) return false;
  return usable_dir(partial);
}

/* The configured directory, or false when no variable names one. */
static bool configured_dir(char *out, size_t cap) {
  const char *dir = core_getenv("LOOM_CACHE_DIR"), *xdg = core_getenv("XDG_CACHE_HOME");
  const char *home = core_getenv("HOME");
  int n;
  if (dir && *dir)
    n = snprintf(out, cap, "%s", dir);
  else if (xdg && *xdg)
    n = snprintf(out, cap, "%s/loom", xdg);
  else if (home && *home)
    n = snprintf(out, cap, "%s/.cache/loom", home);
  else
    return false;
  return n > 0 && (size_t)n < cap;
}

static char fallback[PATH_MAX];
static pthread_once_t fallback_once = PTHREAD_ONCE_INIT;

static void remove_fallback(void) { core_remove_tree(fallback); }

static void make_fallback(void) {
  const char *tmp = core_getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  int n = snprintf(fallback, sizeof fallback, "%s/loom-cache-%ld-XXXXXX", tmp, (long)getpid());
  if (n <= 0 || (size_t)n >= sizeof fallback || !mkdtemp(fallback)) {
    fallback[0] = '\0';
    return;
  }
  atexit(remove_fallback);
}

static loom_status_t use_fallback(const char *wanted, char *out, size_t cap) {
  static atomic_bool warned;
  pthread_once(&fallback_once, make_fallback);
  if (!fallback[0])
    return loom_fail(LOOM_ERR_IO, "cache directory: cannot create '%s' nor a temporary directory",
                     wanted);
  if (!atomic_exchange(&warned, true))
    core_warn("cannot use the cache directory '%s'; compiled modules go to '%s' for "
              "this process only (set LOOM_CACHE_DIR)",
              wanted, fallback);
  snprintf(out, cap, "%s", fallback);
  return LOOM_OK;
}

loom_status_t core_cache_dir(char *out, size_t cap) {
  char wanted[PATH_MAX], absolute[PATH_MAX];
  if (!configured_dir(wanted, sizeof wanted))
    return use_fallback("(none: LOOM_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)", out, cap);
  if (!core_make_dirs(wanted) || !realpath(wanted, absolute) || strlen(absolute) >= cap)
    return use_fallback(wanted, out, cap);
  memcpy(out, absolute, strlen(absolute) + 1);
  return LOOM_OK;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  remove(path);
  return 0;
}

void core_remove_tree(const char *path) {
  if (path && path[0]) nftw(path, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}
