#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
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

/* The directory of path, synced after a rename into it (the new file is
 * already in place, so a failure here loses nothing but durability). */
static void sync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) {
    core_sync_dir(slash ? "/" : ".");
    return;
  }
  char *dir = core_malloc((size_t)(slash - path) + 1);
  if (!dir) return;
  memcpy(dir, path, (size_t)(slash - path));
  dir[slash - path] = '\0';
  core_sync_dir(dir);
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

loom_status_t core_file_replace(const char *path, core_file_fill_t fill, void *ctx) {
  /* In path's directory, so that the rename is atomic; the counter keeps
   * two threads saving the same path apart. */
  static atomic_long counter;
  size_t n = strlen(path) + 48;
  char *tmp = core_malloc(n);
  if (!tmp) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", path);
  snprintf(tmp, n, "%s.tmp.%ld.%ld", path, (long)getpid(), atomic_fetch_add(&counter, 1));
  loom_status_t s = write_tmp(tmp, fill, ctx);
  if (s == LOOM_OK && rename(tmp, path) != 0)
    s = loom_fail(LOOM_ERR_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
  if (s != LOOM_OK) unlink(tmp);
  else sync_dir_of(path);
  core_free(tmp);
  return s;
}
