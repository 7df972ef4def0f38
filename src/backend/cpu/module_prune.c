/* The module cache's size (module_cache.h): names in the directory, the
 * byte budget, and pruning the least recently used entries. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/module_cache.h"
#include "core/alloc.h"
#include "core/cache_dir.h"
#include "core/env.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"

enum { KEY_DIGITS = 64 };

/* ---- names ---- */

static bool hex_stem(const char *name, const char *ext) {
  return strspn(name, "0123456789abcdef") == KEY_DIGITS && !strcmp(name + KEY_DIGITS, ext);
}

/* Digits at *p (at most 10, so the value fits a long), advanced past. */
static bool number(const char **p, long *value) {
  size_t n = strspn(*p, "0123456789");
  if (n == 0 || n > 10) return false;
  *value = strtol(*p, NULL, 10);
  *p += n;
  return true;
}

/* tmp-PID-N-XXXXXX, as cpu_cache_scratch makes them (mkdtemp's six
 * letters and digits last). */
static bool scratch_name(const char *name, long *pid) {
  long counter;
  const char *p = name + 4;
  if (strncmp(name, "tmp-", 4) != 0 || !number(&p, pid) || *p++ != '-' ||
      !number(&p, &counter) || *p++ != '-')
    return false;
  for (int i = 0; i < 6; i++)
    if (!isalnum((unsigned char)p[i])) return false;
  return p[6] == '\0';
}

cpu_cache_name_t cpu_cache_classify(const char *name, long *pid) {
  long owner = -1;
  cpu_cache_name_t kind = CPU_NAME_OTHER;
  if (!name) kind = CPU_NAME_OTHER;
  else if (hex_stem(name, ".so")) kind = CPU_NAME_OBJECT;
  else if (hex_stem(name, ".c")) kind = CPU_NAME_SOURCE;
  else if (hex_stem(name, ".idx")) kind = CPU_NAME_INDEX;
  else if (scratch_name(name, &owner)) kind = CPU_NAME_SCRATCH;
  if (pid) *pid = kind == CPU_NAME_SCRATCH ? owner : -1;
  return kind;
}

/* ---- the budget ---- */

/* "N" or "N" followed by one of K M G T (binary multiples); -1 when text
 * is not that or overflows. */
static int64_t parse_bytes(const char *text) {
  const char *p = text;
  long long n;
  if (!isdigit((unsigned char)*p)) return -1;
  errno = 0;
  char *end;
  n = strtoll(p, &end, 10);
  if (errno) return -1;
  int shift = 0;
  if (*end) {
    const char *units = "KMGT", *u = strchr(units, toupper((unsigned char)*end));
    if (!u || end[1]) return -1;
    shift = 10 * (int)(u - units + 1);
  }
  if (n > (INT64_MAX >> shift)) return -1;
  return (int64_t)n << shift;
}

int64_t cpu_cache_budget(void) {
  static atomic_bool warned;
  const char *text = core_getenv("LOOM_CACHE_MAX_BYTES");
  if (!text || !*text) return CPU_CACHE_DEFAULT_BYTES;
  int64_t n = parse_bytes(text);
  if (n >= 0) return n;
  if (!atomic_exchange(&warned, true))
    core_warn("LOOM_CACHE_MAX_BYTES='%s' is not a byte count (like 500M or 2G); the module "
              "cache keeps its default of %lld bytes",
              text, (long long)CPU_CACHE_DEFAULT_BYTES);
  return CPU_CACHE_DEFAULT_BYTES;
}

/* ---- pruning ---- */

/* One file of an entry, as the scan saw it. */
typedef struct cache_file {
  char key[KEY_DIGITS + 1];
  cpu_cache_name_t kind; /* CPU_NAME_OBJECT, _SOURCE or _INDEX */
  int64_t bytes;
  struct timespec mtime;
  ino_t ino;
} cache_file_t;

/* An entry: its files (objects first), their bytes, and when it was last
 * used (its object's mtime, else its source's; an index entry is a file
 * of its own key). */
typedef struct cache_module {
  const char *key; /* its files' */
  int64_t first, n, bytes;
  struct timespec used;
} cache_module_t;

typedef struct scan {
  cache_file_t *files;
  int64_t n_files, cap_files;
  cache_module_t *modules;
  int64_t n_modules, cap_modules;
  int64_t bytes;
} scan_t;

static int by_key(const void *a, const void *b) {
  const cache_file_t *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (int)(y->kind == CPU_NAME_OBJECT) - (int)(x->kind == CPU_NAME_OBJECT);
}

static int time_cmp(struct timespec a, struct timespec b) {
  if (a.tv_sec != b.tv_sec) return a.tv_sec < b.tv_sec ? -1 : 1;
  return a.tv_nsec < b.tv_nsec ? -1 : a.tv_nsec > b.tv_nsec;
}

/* Oldest use first; the key breaks ties, so the order is the same in
 * every process. */
static int by_use(const void *a, const void *b) {
  const cache_module_t *x = a, *y = b;
  int c = time_cmp(x->used, y->used);
  return c ? c : strcmp(x->key, y->key);
}

static bool scratch_stale(int dir_fd, const char *name, long pid) {
  struct stat st;
  return fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
         core_owner_gone(pid, st.st_mtime);
}

static const char *extension(cpu_cache_name_t kind) {
  return kind == CPU_NAME_OBJECT ? ".so" : kind == CPU_NAME_SOURCE ? ".c" : ".idx";
}

static loom_status_t add_file(scan_t *s, int dir_fd, const char *name, cpu_cache_name_t kind) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
    return LOOM_OK;
  LOOM_TRY(core_grow((void **)&s->files, &s->cap_files, s->n_files + 1, sizeof *s->files));
  cache_file_t *f = &s->files[s->n_files++];
  memcpy(f->key, name, KEY_DIGITS);
  f->key[KEY_DIGITS] = '\0';
  f->kind = kind;
  f->bytes = (int64_t)st.st_size;
  f->mtime = st.st_mtim;
  f->ino = st.st_ino;
  s->bytes += f->bytes;
  return LOOM_OK;
}

/* Reads the directory: entries' files into s, stale scratch directories
 * removed on the way. */
static loom_status_t scan_dir(const char *dir, DIR *d, scan_t *s, cpu_prune_stats_t *st) {
  for (struct dirent *de; (de = readdir(d));) {
    long pid;
    cpu_cache_name_t kind = cpu_cache_classify(de->d_name, &pid);
    if (kind == CPU_NAME_OBJECT || kind == CPU_NAME_SOURCE || kind == CPU_NAME_INDEX) {
      LOOM_TRY(add_file(s, dirfd(d), de->d_name, kind));
    } else if (kind == CPU_NAME_SCRATCH && scratch_stale(dirfd(d), de->d_name, pid)) {
      char path[PATH_MAX];
      if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
      core_remove_tree(path);
      st->removed_scratch++;
    }
  }
  return LOOM_OK;
}

/* Groups the sorted files by key into modules. */
static loom_status_t group_modules(scan_t *s) {
  if (s->n_files == 0) return LOOM_OK; /* qsort must not see a null array */
  qsort(s->files, (size_t)s->n_files, sizeof *s->files, by_key);
  for (int64_t i = 0; i < s->n_files;) {
    LOOM_TRY(core_grow((void **)&s->modules, &s->cap_modules, s->n_modules + 1,
                       sizeof *s->modules));
    cache_module_t *m = &s->modules[s->n_modules++];
    *m = (cache_module_t){.key = s->files[i].key, .first = i, .used = s->files[i].mtime};
    for (; i < s->n_files && !strcmp(s->files[i].key, m->key); i++) {
      m->n++;
      m->bytes += s->files[i].bytes;
    }
  }
  qsort(s->modules, (size_t)s->n_modules, sizeof *s->modules, by_use);
  return LOOM_OK;
}

/* Removes m's files, object first. A file that changed since the scan (a
 * load touched it, a build published it anew) is in use: it and the rest
 * of m stay. The check and the unlink are not one step; what slips
 * between them is only a module whose user has already loaded it. */
static bool remove_module(int dir_fd, const scan_t *s, const cache_module_t *m) {
  for (int64_t i = m->first; i < m->first + m->n; i++) {
    const cache_file_t *f = &s->files[i];
    char name[KEY_DIGITS + 5];
    struct stat st;
    snprintf(name, sizeof name, "%s%s", f->key, extension(f->kind));
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_ino != f->ino ||
        time_cmp(st.st_mtim, f->mtime) != 0 || unlinkat(dir_fd, name, 0) != 0)
      return false;
  }
  return true;
}

static void remove_oldest(int dir_fd, scan_t *s, int64_t max_bytes, cpu_prune_stats_t *st) {
  for (int64_t i = 0; i < s->n_modules && max_bytes > 0 && s->bytes > max_bytes; i++) {
    if (!remove_module(dir_fd, s, &s->modules[i])) continue;
    s->bytes -= s->modules[i].bytes;
    st->removed_bytes += s->modules[i].bytes;
    st->removed_modules++;
  }
  st->bytes = s->bytes;
  st->modules = s->n_modules - st->removed_modules;
}

static bool lock_path(const char *dir, char path[PATH_MAX]) {
  return snprintf(path, PATH_MAX, "%s/prune.lock", dir) < PATH_MAX;
}

bool cpu_cache_pruned_since(const char *dir, double seconds) {
  char path[PATH_MAX];
  struct stat st;
  return lock_path(dir, path) && stat(path, &st) == 0 &&
         difftime(time(NULL), st.st_mtime) < seconds;
}

/* The lock file, held exclusively, or -1 when another process holds it
 * or it cannot be made (then nobody prunes now; the next build tries). */
static int take_lock(const char *dir) {
  char path[PATH_MAX];
  if (!lock_path(dir, path)) return -1;
  int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0600);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0)
    return fd;
  if (fd >= 0) close(fd);
  return -1;
}

loom_status_t cpu_cache_prune(const char *dir, int64_t max_bytes, cpu_prune_stats_t *out) {
  cpu_prune_stats_t st = {0};
  scan_t s = {0};
  loom_status_t status = LOOM_OK;
  int lock = take_lock(dir);
  DIR *d = lock >= 0 ? opendir(dir) : NULL;
  st.skipped = lock < 0;
  if (lock >= 0 && !d)
    status = loom_fail(LOOM_ERR_IO, "module cache: cannot read '%s': %s", dir, strerror(errno));
  if (d) status = scan_dir(dir, d, &s, &st);
  if (d && status == LOOM_OK) status = group_modules(&s);
  if (d && status == LOOM_OK) remove_oldest(dirfd(d), &s, max_bytes, &st);
  /* The lock's mtime says when the cache was last pruned. */
  if (d && status == LOOM_OK) (void)futimens(lock, NULL);
  if (d) closedir(d);
  if (lock >= 0) close(lock);
  core_free(s.files);
  core_free(s.modules);
  if (status == LOOM_OK && !st.skipped)
    core_log(LOG_CACHE,
             "pruned %s: removed %lld modules (%lld bytes) and %lld stale scratch directories; "
             "%lld modules, %lld bytes of %lld kept",
             dir, (long long)st.removed_modules, (long long)st.removed_bytes,
             (long long)st.removed_scratch, (long long)st.modules, (long long)st.bytes,
             (long long)max_bytes);
  if (out) *out = st;
  return status;
}
