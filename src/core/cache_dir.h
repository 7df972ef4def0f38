/* Loom's cache directory (core/cache_dir.c). */
#ifndef LOOM_CORE_CACHE_DIR_H
#define LOOM_CORE_CACHE_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "loom/loom.h"

/* The cache directory, absolute, created (mode 0700) if missing:
 * LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom, read
 * anew on each call. When it cannot be created or written, a private
 * directory for this process (removed at exit), with one warning. */
loom_status_t core_cache_dir(char *out, size_t cap);
/* Creates a directory and its missing parents (mode 0700): whether it
 * exists, writable, afterwards. */
bool core_make_dirs(const char *path);
/* Removes path and everything below it (a file or directory; not
 * following links). */
void core_remove_tree(const char *path);

#endif
