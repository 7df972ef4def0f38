#include "backend/cpu/module_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/status.h"

#define KEY_PREFIX "\nloom-key:"
#define DIGEST_PREFIX "\nloom-sha256:"
enum {
  KEY_LEN = CORE_SHA256_HEX - 1,
  KEY_LINE = sizeof KEY_PREFIX - 1 + KEY_LEN,
  DIGEST_LINE = sizeof DIGEST_PREFIX - 1 + KEY_LEN + 1, /* prefix, hex, newline */
  SEAL_LEN = KEY_LINE + DIGEST_LINE,
};
_Static_assert((int)SEAL_LEN == (int)CPU_CACHE_SEAL_BYTES, "the seal's length in module_cache.h");

/* ---- entries ---- */

static bool is_key(const char *key) {
  return key && strlen(key) == KEY_LEN && strspn(key, "0123456789abcdef") == KEY_LEN;
}

/* Feeds the first n bytes of fd to h. */
static bool hash_prefix(int fd, off_t n, core_sha256_t *h) {
  uint8_t chunk[65536];
  for (off_t done = 0; done < n;) {
    size_t want = n - done < (off_t)sizeof chunk ? (size_t)(n - done) : sizeof chunk;
    ssize_t got = pread(fd, chunk, want, done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    core_sha256_update(h, chunk, (size_t)got);
    done += got;
  }
  return true;
}

static void digest_hex(core_sha256_t *h, char hex[CORE_SHA256_HEX]) {
  uint8_t digest[CORE_SHA256_BYTES];
  core_sha256_final(h, digest);
  core_sha256_hex(digest, hex);
}

const char *cpu_cache_defect(int fd, const char *key) {
  struct stat st;
  char seal[SEAL_LEN], hex[CORE_SHA256_HEX];
  if (!is_key(key)) return "no key to check against";
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_size < SEAL_LEN) return "too short to hold its seal";
  off_t body = st.st_size - SEAL_LEN;
  const char *key_line = seal, *digest_line = seal + KEY_LINE;
  if (pread(fd, seal, SEAL_LEN, body) != SEAL_LEN ||
      memcmp(key_line, KEY_PREFIX, sizeof KEY_PREFIX - 1) != 0 ||
      memcmp(digest_line, DIGEST_PREFIX, sizeof DIGEST_PREFIX - 1) != 0 ||
      seal[SEAL_LEN - 1] != '\n')
    return "no seal (truncated, or sealed by an older Loom)";
  if (memcmp(key_line + sizeof KEY_PREFIX - 1, key, KEY_LEN) != 0)
    return "sealed for another key (copied or renamed from another entry)";
  core_sha256_t h;
  core_sha256_init(&h);
  /* The key line is hashed too: a seal names the key it was made for. */
  if (!hash_prefix(fd, body + KEY_LINE, &h)) return "unreadable";
  digest_hex(&h, hex);
  if (memcmp(hex, digest_line + sizeof DIGEST_PREFIX - 1, KEY_LEN) != 0)
    return "checksum mismatch (corrupt)";
  return NULL;
}

cpu_entry_state_t cpu_cache_open(const char *path, const char *key, int *fd, const char **why) {
  /* O_NONBLOCK: opening a FIFO must not wait for a writer; the regular
   * file check then refuses it. On a regular file the flag does nothing. */
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (*fd < 0) {
    *why = errno == ENOENT ? "missing" : "cannot be opened";
    return errno == ENOENT ? CPU_ENTRY_MISSING : CPU_ENTRY_BAD;
  }
  const char *defect = cpu_cache_defect(*fd, key);
  *why = defect ? defect : "";
  if (!defect) return CPU_ENTRY_OK;
  close(*fd);
  *fd = -1;
  return CPU_ENTRY_BAD;
}

loom_status_t cpu_cache_seal_fd(int fd, const char *path, const char *key) {
  if (!is_key(key))
    return loom_fail(LOOM_ERR_INVALID, "module cache: cannot seal '%s' for key '%.80s'", path,
                     key ? key : "(null)");
  struct stat st;
  char seal[SEAL_LEN + 1], hex[CORE_SHA256_HEX];
  core_sha256_t h;
  core_sha256_init(&h);
  snprintf(seal, sizeof seal, "%s%s", KEY_PREFIX, key);
  bool ok = fstat(fd, &st) == 0 && hash_prefix(fd, st.st_size, &h);
  if (ok) {
    core_sha256_update(&h, seal, KEY_LINE);
    digest_hex(&h, hex);
    snprintf(seal + KEY_LINE, sizeof seal - KEY_LINE, "%s%s\n", DIGEST_PREFIX, hex);
    ok = lseek(fd, 0, SEEK_END) >= 0 && core_write_all(fd, path, seal, SEAL_LEN) == LOOM_OK &&
         fsync(fd) == 0;
  }
  if (!ok)
    return loom_fail(LOOM_ERR_IO, "module cache: cannot seal '%s': %s", path, strerror(errno));
  return LOOM_OK;
}

loom_status_t cpu_cache_seal(const char *path, const char *key) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return loom_fail(LOOM_ERR_IO, "module cache: cannot seal '%s': %s", path, strerror(errno));
  loom_status_t s = cpu_cache_seal_fd(fd, path, key);
  close(fd);
  return s;
}

bool cpu_cache_seal_of(const void *body, size_t size, const char *key,
                       char seal[CPU_CACHE_SEAL_BYTES + 1]) {
  if (!is_key(key)) return false;
  char hex[CORE_SHA256_HEX];
  core_sha256_t h;
  core_sha256_init(&h);
  core_sha256_update(&h, body, size);
  snprintf(seal, CPU_CACHE_SEAL_BYTES + 1, "%s%s", KEY_PREFIX, key);
  core_sha256_update(&h, seal, KEY_LINE);
  digest_hex(&h, hex);
  snprintf(seal + KEY_LINE, CPU_CACHE_SEAL_BYTES + 1 - KEY_LINE, "%s%s\n", DIGEST_PREFIX, hex);
  return true;
}

void cpu_cache_touch(int fd) { (void)futimens(fd, NULL); }

loom_status_t cpu_cache_publish(const char *from, const char *to, const char *dir) {
  if (rename(from, to) != 0)
    return loom_fail(LOOM_ERR_IO, "module cache: cannot move '%s' to '%s': %s", from, to,
                     strerror(errno));
  /* The rename itself reaches the disk only when the directory does. */
  core_sync_dir(dir);
  return LOOM_OK;
}

loom_status_t cpu_cache_scratch(const char *dir, char *out, size_t cap) {
  static atomic_long counter;
  int n = snprintf(out, cap, "%s/tmp-%ld-%ld-XXXXXX", dir, (long)getpid(),
                   atomic_fetch_add(&counter, 1));
  if (n <= 0 || (size_t)n >= cap) return loom_fail(LOOM_ERR_IO, "module cache: path too long");
  if (!mkdtemp(out))
    return loom_fail(LOOM_ERR_IO, "module cache: cannot create a directory in '%s': %s", dir,
                     strerror(errno));
  return LOOM_OK;
}

