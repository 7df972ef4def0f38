/* Versioned structs: the public structs that carry their caller's sizeof
 * in a leading `size_t size` (loom.h, "Versioned structs"), so that a
 * caller built against an older header gets, and gives, only the fields
 * it knows. */
#ifndef LOOM_CORE_SIZED_H
#define LOOM_CORE_SIZED_H

#include <stddef.h>

#include "loom/loom.h"

/* Writes the library's complete struct `full` (ours bytes, its size field
 * first) into the caller's `out`: the first min(out->size, ours) bytes,
 * and that count into out->size. Fails, naming fn and type, when
 * out->size is unset or absurd; out is then left as it was. */
loom_status_t core_sized_write(const char *fn, const char *type, void *out,
                               const void *full, size_t ours);
/* Reads the caller's struct `in` over `dst`, which holds the library's
 * defaults (ours bytes, its size field first): fields past in->size keep
 * their defaults, and dst->size becomes ours. Fails as core_sized_write. */
loom_status_t core_sized_read(const char *fn, const char *type, void *dst,
                              const void *in, size_t ours);
/* An options struct's init: fills the caller's `out`, of `size` bytes
 * (the caller's sizeof), from the library's defaults `full` as
 * core_sized_write does. */
loom_status_t core_sized_init(const char *fn, const char *type, void *out,
                              size_t size, const void *full, size_t ours);

#endif
