/* The module cache on disk: where it lives, and its entries' integrity.
 *
 * An entry is <dir>/<key>.so: the shared object with a checksum trailer
 * appended ("\nloom-sha256:" + the SHA-256 of every byte before it, in
 * hex, + "\n"; the dynamic loader ignores bytes past the ELF contents).
 * Carrying the checksum inside the file means one atomic rename publishes
 * an object and its checksum together, so no reader can pair an object
 * with another build's checksum. Beside it, <dir>/<key>.c keeps the
 * source for people to read; it is never loaded. */
#ifndef LOOM_BACKEND_CPU_MODULE_CACHE_H
#define LOOM_BACKEND_CPU_MODULE_CACHE_H

#include <stddef.h>

#include "loom/loom.h"

/* The cache directory, absolute, created (mode 0700) if missing:
 * LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom, read
 * anew on each call. When it cannot be created or written, a private
 * directory for this process (removed at exit), with one warning. */
loom_status_t cpu_cache_dir(char *out, size_t cap);

typedef enum cpu_entry_state {
  CPU_ENTRY_MISSING, /* no file */
  CPU_ENTRY_BAD,     /* a file that must not be loaded: truncated, corrupt */
  CPU_ENTRY_OK,      /* its checksum matches its contents */
} cpu_entry_state_t;

/* Checks an entry's checksum; *why says what is wrong with a bad one. */
cpu_entry_state_t cpu_cache_check(const char *path, const char **why);

/* Appends the checksum trailer to a freshly built object and flushes it
 * to disk. */
loom_status_t cpu_cache_seal(const char *path);

/* Renames a finished file into the cache directory dir, atomically, and
 * makes the rename durable. */
loom_status_t cpu_cache_publish(const char *from, const char *to, const char *dir);

/* A new private scratch directory inside dir for one build, named after
 * the process and a counter; cpu_cache_remove_tree removes it. */
loom_status_t cpu_cache_scratch(const char *dir, char *out, size_t cap);
void cpu_cache_remove_tree(const char *path);

#endif
