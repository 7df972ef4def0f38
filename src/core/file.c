#include "core/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"

loom_status_t core_write_all(int fd, const char *path, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return loom_fail(LOOM_ERR_IO, "%s: write: %s", path, strerror(errno));
    p += w;
    n -= (size_t)w;
  }
  return LOOM_OK;
}

loom_status_t core_write_tensor(int fd, const char *path, const loom_tensor_t *t) {
  size_t bytes = (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
  if (tensor_is_contiguous(t)) return core_write_all(fd, path, loom_tensor_data(t), bytes);
  loom_tensor_t *dense;
  LOOM_TRY(tensor_contiguous_copy(t, &dense));
  loom_status_t s = core_write_all(fd, path, loom_tensor_data(dense), bytes);
  loom_tensor_destroy(dense);
  return s;
}

void core_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

/* The directory part of path ("." or "/" when it has none), or NULL when
 * out of memory; the caller frees it. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return core_strdup(slash ? "/" : ".");
  char *dir = core_malloc((size_t)(slash - path) + 1);
  if (!dir) return NULL;
  memcpy(dir, path, (size_t)(slash - path));
  dir[slash - path] = '\0';
  return dir;
}

/* The directory of path, synced after a rename into it (the new file is
 * already in place, so a failure here loses nothing but durability). */
static void sync_dir_of(const char *path) {
  char *dir = dir_of(path);
  if (dir) core_sync_dir(dir);
  core_free(dir);
}

/* Creates, fills and closes tmp, its bytes durable before a rename can
 * publish them. */
static loom_status_t write_tmp(const char *tmp, core_file_fill_t fill, void *ctx) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return loom_fail(LOOM_ERR_IO, "%s: %s", tmp, strerror(errno));
  loom_status_t s = fill(fd, tmp, ctx);
  if (s == LOOM_OK && fsync(fd) != 0)
    s = loom_fail(LOOM_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
  if (close(fd) != 0 && s == LOOM_OK)
    s = loom_fail(LOOM_ERR_IO, "%s: close: %s", tmp, strerror(errno));
  return s;
}

/* The start of the names of path's temporaries in its directory: its
 * name + ".tmp.", or for a name too long to take the suffix within
 * NAME_MAX, ".loom-" + a hash of it + ".tmp."; room for 64 bytes. */
static void temp_prefix(const char *path, char *out, size_t size) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  if (strlen(base) + 40 <= NAME_MAX) {
    snprintf(out, size, "%s.tmp.", base);
    return;
  }
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *c = base; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  snprintf(out, size, ".loom-%016llx.tmp.", (unsigned long long)h);
}

loom_status_t core_file_replace(const char *path, core_file_fill_t fill, void *ctx) {
  /* In path's directory, so that the rename is atomic; the counter keeps
   * two threads saving the same path apart. */
  static atomic_long counter;
  size_t n = strlen(path) + 96;
  char *tmp = core_malloc(n), *prefix = core_malloc(n);
  if (!tmp || !prefix) {
    core_free(tmp);
    core_free(prefix);
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", path);
  }
  temp_prefix(path, prefix, n);
  const char *slash = strrchr(path, '/');
  snprintf(tmp, n, "%.*s%s%ld.%ld", slash ? (int)(slash - path + 1) : 0, path, prefix,
           (long)getpid(), atomic_fetch_add(&counter, 1));
  core_free(prefix);
  core_file_clean_stale(path);
  loom_status_t s = write_tmp(tmp, fill, ctx);
  if (s == LOOM_OK && rename(tmp, path) != 0)
    s = loom_fail(LOOM_ERR_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
  if (s != LOOM_OK) unlink(tmp);
  else sync_dir_of(path);
  core_free(tmp);
  return s;
}

/* ---- Temporaries of processes that are gone ---------------------------- */

/* The boot time in seconds since the epoch (/proc/stat's btime), or -1. */
static long long boot_time;
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

static void read_boot_time(void) {
  boot_time = -1;
  FILE *f = fopen("/proc/stat", "re");
  if (!f) return;
  char line[256];
  long long t;
  /* Lines longer than the buffer (the interrupt counts) are read in
   * pieces; a piece starting with "btime " can only be that line. */
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %lld", &t) == 1) boot_time = t;
  fclose(f);
}

/* When process pid started, in seconds since the epoch, from the 22nd
 * field of /proc/PID/stat (clock ticks after boot); -1 when unknown. */
static double process_start(long pid) {
  pthread_once(&boot_once, read_boot_time);
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || boot_time < 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* The command name (field 2) may hold spaces and parentheses: fields
   * are counted from its closing parenthesis, the last one. */
  char *p = strrchr(buf, ')');
  for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
  unsigned long long ticks;
  long hz = sysconf(_SC_CLK_TCK);
  if (!p || hz <= 0 || sscanf(p + 1, "%llu", &ticks) != 1) return -1;
  return (double)boot_time + (double)ticks / (double)hz;
}

bool core_owner_gone(long pid, time_t mtime) {
  if (pid <= 0 || pid > INT_MAX) return false;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return true;
  double start = process_start(pid);
  /* btime has a resolution of one second: the margin keeps the file of a
   * live writer that started in the same second as its last write. */
  return start >= 0 && start > (double)mtime + 2;
}

/* The PID of name when it is prefix + "PID.N" (decimal numbers), else -1. */
static long temp_owner(const char *name, const char *prefix) {
  size_t len = strlen(prefix);
  if (strncmp(name, prefix, len) != 0) return -1;
  const char *p = name + len, *dot = p + strspn(p, "0123456789");
  if (dot == p || dot - p > 10 || *dot != '.') return -1;
  const char *end = dot + 1 + strspn(dot + 1, "0123456789");
  if (end == dot + 1 || *end) return -1;
  return strtol(p, NULL, 10);
}

int core_file_clean_stale(const char *path) {
  char *dir = dir_of(path);
  size_t n = strlen(path) + 96;
  char *prefix = core_malloc(n);
  DIR *d = dir && prefix ? opendir(dir) : NULL;
  int removed = 0;
  if (d) temp_prefix(path, prefix, n);
  for (struct dirent *de; d && (de = readdir(d));) {
    long pid = temp_owner(de->d_name, prefix);
    struct stat st;
    if (pid < 0 || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || !core_owner_gone(pid, st.st_mtime))
      continue;
    removed += unlinkat(dirfd(d), de->d_name, 0) == 0;
  }
  if (d) closedir(d);
  core_free(prefix);
  core_free(dir);
  return removed;
}

/* path opened for reading as a regular file (*fd), its size in *n. */
static loom_status_t open_regular(const char *path, int *fd, uint64_t *n) {
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (*fd < 0) return loom_fail(LOOM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(*fd);
    return loom_fail(LOOM_ERR_IO, "%s: not a regular file", path);
  }
  *n = (uint64_t)st.st_size;
  return LOOM_OK;
}

/* Bytes [offset, offset + length) of fd (path's) into a new buffer, one
 * byte past them 0; fd closed. */
static loom_status_t read_range(int fd, const char *path, uint64_t offset, uint64_t length,
                                void **data, size_t *size) {
  char *buf = core_malloc((size_t)length + 1);
  if (!buf) {
    close(fd);
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory reading %llu bytes", path,
                     (unsigned long long)length);
  }
  uint64_t got = 0;
  while (got < length) {
    ssize_t r = pread(fd, buf + got, (size_t)(length - got), (off_t)(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : 0;
      close(fd);
      core_free(buf);
      return loom_fail(LOOM_ERR_IO, "%s: read failed after %llu of %llu bytes%s%s", path,
                       (unsigned long long)got, (unsigned long long)length, e ? ": " : "",
                       e ? strerror(e) : "");
    }
    got += (uint64_t)r;
  }
  close(fd);
  buf[length] = 0;
  *data = buf;
  *size = (size_t)length;
  return LOOM_OK;
}

loom_status_t core_read_file(const char *path, size_t max_bytes, void **data, size_t *size) {
  *data = NULL;
  *size = 0;
  int fd;
  uint64_t n;
  LOOM_TRY(open_regular(path, &fd, &n));
  if (n > max_bytes) {
    close(fd);
    return loom_fail(LOOM_ERR_IO, "%s: %llu bytes, over the limit of %zu", path,
                     (unsigned long long)n, max_bytes);
  }
  return read_range(fd, path, 0, n, data, size);
}

loom_status_t core_read_file_range(const char *path, uint64_t offset, uint64_t length,
                                   void **data, size_t *size) {
  *data = NULL;
  *size = 0;
  int fd;
  uint64_t n;
  LOOM_TRY(open_regular(path, &fd, &n));
  if (length == UINT64_MAX && offset <= n) length = n - offset;
  if (offset > n || length > n - offset) {
    close(fd);
    return loom_fail(LOOM_ERR_FORMAT, "%s: bytes from %llu, %llu of them, are past its end (%llu)",
                     path, (unsigned long long)offset, (unsigned long long)length,
                     (unsigned long long)n);
  }
  return read_range(fd, path, offset, length, data, size);
}
