#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/sanitize.h"
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

/* Large blocks on transparent huge pages: a first touch of a 4 KiB page
 * costs about 11 us on the VMs here (8 MiB: 22 ms), of a 2 MiB huge page
 * about 0.15 ms (8 MiB: 0.7 ms; bench_overhead's first_touch line), and
 * an arena is touched whole when made and again whenever a symbolic
 * executable's grows. A block of at least a quarter of a huge page starts
 * on a 2 MiB boundary and asks for huge pages (granted where the kernel's
 * THP mode is madvise or always); its last part-page is rounded up to a
 * whole one when it is at least a quarter of one, and otherwise stays on
 * small pages (at most 128 of them). What that costs in memory: at most
 * 1.5 MiB a block, 4x for a block of 512 KiB. */
enum { HUGE_PAGE = 2 << 20 };

void *core_aligned_alloc(size_t size) {
  if (injected_failure() || size > SIZE_MAX - HUGE_PAGE) return NULL;
  size_t rounded = size ? (size + 63) / 64 * 64 : 64;
  if (CORE_ASAN || rounded < HUGE_PAGE / 4) return aligned_alloc(64, rounded);
  size_t tail = rounded % HUGE_PAGE;
  if (tail >= HUGE_PAGE / 4) rounded += HUGE_PAGE - tail;
  void *p = NULL;
  if (posix_memalign(&p, HUGE_PAGE, rounded) != 0) return NULL;
  madvise(p, rounded - rounded % HUGE_PAGE, MADV_HUGEPAGE);
  return p;
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
