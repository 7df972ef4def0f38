/* The keys the executable cache has compiled, remembered on disk across
 * processes: an empty file per key in the cache directory's keys/
 * folder. A tiered trace interprets a new key while a worker compiles
 * it, but waits for a key compiled before (by this process or an earlier
 * run): its module is then on disk, and loading it takes milliseconds,
 * where interpreting the segment until the worker is done would run
 * a warm program's first steps in the fallback. A key whose module was
 * since removed, or built by another version of Loom, only waits for a
 * compile, as an untiered trace does. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cache_dir.h"
#include "core/isa.h"
#include "trace/cache_internal.h"

/* Bumped when keys stop meaning what they meant (the key's layout, the
 * code a segment compiles to). */
#define JOURNAL_VERSION 1

/* keys/<name> for key hash h: the hash mixed with the journal's version
 * and the ISA cap (a key compiled under LOOM_CPU_ISA=avx2 is another
 * module). False when no cache directory can be had. */
static bool journal_path(uint64_t h, char *path, size_t cap, bool make) {
  char dir[PATH_MAX];
  if (core_cache_dir(dir, sizeof dir) != LOOM_OK) return false;
  const char *isa = core_isa_cap_name();
  for (const char *p = isa ? isa : ""; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
  h ^= (uint64_t)JOURNAL_VERSION << 56;
  int n = snprintf(path, cap, "%s/keys", dir);
  if (n <= 0 || (size_t)n >= cap || (make && !core_make_dirs(path))) return false;
  n = snprintf(path, cap, "%s/keys/%016llx", dir, (unsigned long long)h);
  return n > 0 && (size_t)n < cap;
}

bool cache_journal_has(uint64_t key_hash) {
  char path[PATH_MAX];
  struct stat st;
  return journal_path(key_hash, path, sizeof path, false) && stat(path, &st) == 0 &&
         S_ISREG(st.st_mode);
}

void cache_journal_note(uint64_t key_hash) {
  char path[PATH_MAX];
  if (!journal_path(key_hash, path, sizeof path, true)) return;
  /* empty: created whole or not at all */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) close(fd);
}
