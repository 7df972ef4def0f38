/* Versioned structs (src/core/sized.h). */
#include "core/sized.h"

#include <string.h>

#include "core/status.h"

/* The bytes to copy for a caller's size: the smaller of it and ours.
 * Sizes below the size field itself (0: never set) and above
 * LOOM_MAX_STRUCT_SIZE are refused: they are not a struct's sizeof but an
 * unset field's garbage. */
static loom_status_t copy_bytes(const char *fn, const char *type, size_t size,
                                size_t ours, size_t *n) {
  if (size < sizeof(size_t) || size > LOOM_MAX_STRUCT_SIZE)
    return loom_fail(LOOM_ERR_INVALID, "%s: %s.size is %zu; set it to sizeof(%s) "
                     "(the struct's _INIT macro or init function does)",
                     fn, type, size, type);
  *n = size < ours ? size : ours;
  return LOOM_OK;
}

loom_status_t core_sized_init(const char *fn, const char *type, void *out,
                              size_t size, const void *full, size_t ours) {
  if (!out) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'o' (%s *) is null", fn, type);
  size_t n = 0;
  LOOM_TRY(copy_bytes(fn, type, size, ours, &n));
  memcpy(out, full, n);
  memcpy(out, &n, sizeof n);
  return LOOM_OK;
}

loom_status_t core_sized_write(const char *fn, const char *type, void *out,
                               const void *full, size_t ours) {
  if (!out) return loom_fail(LOOM_ERR_INVALID, "%s: argument 'out' (%s *) is null", fn, type);
  size_t size;
  memcpy(&size, out, sizeof size);
  return core_sized_init(fn, type, out, size, full, ours);
}

loom_status_t core_sized_read(const char *fn, const char *type, void *dst,
                              const void *in, size_t ours) {
  size_t size, n = 0;
  memcpy(&size, in, sizeof size);
  LOOM_TRY(copy_bytes(fn, type, size, ours, &n));
  memcpy(dst, in, n);
  memcpy(dst, &ours, sizeof ours);
  return LOOM_OK;
}
