#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* Relaxed atomics: fault injection is set up by one test thread, but
 * worker threads allocate too, and a plain counter would race. */
static _Atomic int64_t fail_after = -1;
static _Atomic int64_t made;

void core_alloc_fail_after(int64_t n) {
  atomic_store_explicit(&made, 0, memory_order_relaxed);
  atomic_store_explicit(&fail_after, n, memory_order_relaxed);
}

int64_t core_alloc_count(void) {
  return atomic_load_explicit(&made, memory_order_relaxed);
}

/* True when the injected fault says this allocation must fail. Disarmed,
 * the count is a plain load and store, not a locked add (a tracer
 * allocates per segment): threads racing may lose counts, which only
 * single-threaded tests read. */
static int injected_failure(void) {
  int64_t limit = atomic_load_explicit(&fail_after, memory_order_relaxed);
  if (limit < 0) {
    atomic_store_explicit(&made, atomic_load_explicit(&made, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return 0;
  }
  return atomic_fetch_add_explicit(&made, 1, memory_order_relaxed) + 1 > limit;
}

bool core_alloc_fault(void) { return injected_failure(); }

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
