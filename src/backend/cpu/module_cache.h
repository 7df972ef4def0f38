/* The module cache on disk: where it lives, its entries' integrity, and
 * its size.
 *
 * An entry is <dir>/<key>.so: the shared object with a seal appended,
 *   "\nloom-key:" KEY "\nloom-sha256:" DIGEST "\n"
 * where KEY is the entry's key (the 64 hex digits of its name) and DIGEST
 * the SHA-256, in hex, of every byte before "\nloom-sha256:", the object
 * and the key line both (the dynamic loader ignores bytes past the ELF
 * contents). Carrying the seal inside the file means one atomic rename
 * publishes an object and its seal together, so no reader can pair an
 * object with another build's checksum; the key inside it means an entry
 * copied or renamed under another key is refused, not run for another
 * graph. Beside it, <dir>/<key>.c keeps the source for people to read; it
 * is never loaded. <dir>/<key>.idx files are the index (module_index.h),
 * sealed the same way and pruned as entries of their own.
 *
 * The cache is bounded by LOOM_CACHE_MAX_BYTES: cpu_cache_prune removes
 * the least recently used entries (by the object's mtime, which every
 * load sets: atime is often not kept) while other processes use the
 * directory. A module another process has loaded stays usable (a mapped
 * file outlives its unlink); one removed between another process's check
 * and its dlopen is rebuilt there. Scratch directories of builds whose
 * process is gone are removed too. */
#ifndef LOOM_BACKEND_CPU_MODULE_CACHE_H
#define LOOM_BACKEND_CPU_MODULE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/loom.h"


typedef enum cpu_entry_state {
  CPU_ENTRY_MISSING, /* no file */
  CPU_ENTRY_BAD,     /* a file that must not be loaded: truncated, corrupt,
                        another key's, not a regular file */
  CPU_ENTRY_OK,      /* sealed for this key, and its digest matches */
} cpu_entry_state_t;

/* The seal's bytes: the key line (10 + 64) and the digest line
 * (13 + 64 + 1). */
enum { CPU_CACHE_SEAL_BYTES = 152 };

/* Opens the entry at path and checks its seal against key (64 hex
 * digits). With CPU_ENTRY_OK, *fd is open for the caller to close;
 * otherwise *why says what is wrong. Never blocks on a FIFO or device
 * placed at path. */
cpu_entry_state_t cpu_cache_open(const char *path, const char *key, int *fd,
                                 const char **why);

/* Why the open file fd must not be loaded as key's entry, or NULL when
 * its seal is key's and its digest matches (what cpu_cache_open checks;
 * the fuzz harness calls it on arbitrary bytes). */
const char *cpu_cache_defect(int fd, const char *key);

/* Appends key's seal to a freshly built object and flushes it to disk;
 * _fd seals an open file (read and written at its end), naming it path in
 * errors. */
loom_status_t cpu_cache_seal(const char *path, const char *key);
loom_status_t cpu_cache_seal_fd(int fd, const char *path, const char *key);

/* The seal of a file whose bytes before it are body[0, size), for files
 * written whole from memory; false when key is not a key. */
bool cpu_cache_seal_of(const void *body, size_t size, const char *key,
                       char seal[CPU_CACHE_SEAL_BYTES + 1]);

/* Marks the entry open at fd as used now, for pruning (best effort: a
 * read-only cache stays as it is). */
void cpu_cache_touch(int fd);

/* Renames a finished file into the cache directory dir, atomically, and
 * makes the rename durable. */
loom_status_t cpu_cache_publish(const char *from, const char *to, const char *dir);

/* A new private scratch directory inside dir for one build, named
 * tmp-PID-N-XXXXXX after the process and a counter; core_remove_tree
 * removes it. */
loom_status_t cpu_cache_scratch(const char *dir, char *out, size_t cap);

/* What a name in the cache directory is. */
typedef enum cpu_cache_name {
  CPU_NAME_OTHER,   /* not the cache's: never removed */
  CPU_NAME_OBJECT,  /* <key>.so */
  CPU_NAME_SOURCE,  /* <key>.c */
  CPU_NAME_SCRATCH, /* tmp-PID-N-XXXXXX; *pid is PID */
  CPU_NAME_INDEX,   /* <key>.idx (module_index.h) */
} cpu_cache_name_t;
cpu_cache_name_t cpu_cache_classify(const char *name, long *pid);

/* The byte budget: LOOM_CACHE_MAX_BYTES (a count of bytes, optionally
 * followed by K, M, G or T, binary multiples; 0: no limit), else
 * CPU_CACHE_DEFAULT_BYTES. A value that does not parse is warned about
 * once and the default used. */
#define CPU_CACHE_DEFAULT_BYTES ((int64_t)1 << 30)
int64_t cpu_cache_budget(void);

typedef struct cpu_prune_stats {
  bool skipped;          /* another process was pruning: nothing done */
  int64_t bytes;         /* the entries' bytes (objects and sources) after */
  int64_t modules;       /* entries (keys) after */
  int64_t removed_bytes; /* what was removed */
  int64_t removed_modules;
  int64_t removed_scratch; /* scratch directories of processes gone */
} cpu_prune_stats_t;

/* Removes the scratch directories of processes that are gone, then the
 * least recently used entries until the entries' bytes are within
 * max_bytes (0: no limit). One process prunes at a time (an flock on
 * <dir>/prune.lock); a second one skips. Best effort: a failure leaves
 * the cache as it was (with the error set). out may be NULL. */
loom_status_t cpu_cache_prune(const char *dir, int64_t max_bytes, cpu_prune_stats_t *out);

/* Whether a prune of dir finished less than `seconds` ago (in any
 * process). */
bool cpu_cache_pruned_since(const char *dir, double seconds);

#endif
