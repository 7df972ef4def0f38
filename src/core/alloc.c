#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

static int64_t fail_after = -1;
static int64_t made;

void core_alloc_fail_after(int64_t n) {
  fail_after = n;
  made = 0;
}

int64_t core_alloc_count(void) { return made; }

/* True when the injected fault says this allocation must fail. */
static int injected_failure(void) {
  made++;
  return fail_after >= 0 && made > fail_after;
}

void *core_malloc(size_t size) {
  if (injected_failure()) return NULL;
  return malloc(size ? size : 1);
}

void *core_calloc(size_t count, size_t size) {
  if (injected_failure()) return NULL;
  return calloc(count ? count : 1, size ? size : 1);
}

void *core_realloc(void *p, size_t size) {
  if (injected_failure()) return NULL;
  return realloc(p, size ? size : 1);
}

void *core_aligned_alloc(size_t size) {
  if (injected_failure() || size > SIZE_MAX - 63) return NULL;
  size_t rounded = (size + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

void core_free(void *p) { free(p); }

char *core_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = core_malloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}

loom_status_t core_grow(void **items, int64_t *cap, int64_t need,
                        size_t elem) {
  if (need <= *cap) return LOOM_OK;
  int64_t next = *cap ? *cap * 2 : 8;
  while (next < need && next <= INT64_MAX / 2) next *= 2;
  if (next < need || (uint64_t)next > SIZE_MAX / elem)
    return loom_fail(LOOM_ERR_NOMEM, "an array of %lld items is too large",
                     (long long)need);
  void *grown = core_realloc(*items, (size_t)next * elem);
  if (!grown)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory growing an array to %lld",
                     (long long)next);
  *items = grown;
  *cap = next;
  return LOOM_OK;
}
