/* Tensor storage with a small cache of large freed blocks (storage.h).
 * A block is a 16-byte header, holding its capacity, then the elements.
 * Capacities of sizes that may be kept are rounded up to eight steps per
 * power of two, so that a block serves the slightly larger tensors of a
 * later step too (a graph's size changes from step to step). */
#include "core/storage.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"

#if defined(__SANITIZE_ADDRESS__)
#define STORAGE_KEEPS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STORAGE_KEEPS 0
#endif
#endif
#ifndef STORAGE_KEEPS
#define STORAGE_KEEPS 1
#endif

enum { HEADER = 16, SLOTS = 256 };
static const size_t MIN_KEPT = (size_t)16 << 10, MAX_KEPT = (size_t)16 << 20;
static const size_t MAX_HELD = (size_t)256 << 20;

typedef struct header {
  size_t capacity; /* bytes after the header */
  size_t unused;   /* keeps the elements 16-byte aligned */
} header_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *kept[SLOTS]; /* oldest first */
static int n_kept;
static size_t held;

static header_t *header_of(void *p) { return (header_t *)((char *)p - HEADER); }

/* The capacity a request of bytes gets. */
static size_t capacity_for(size_t bytes) {
  if (bytes < MIN_KEPT || bytes > MAX_KEPT) return bytes;
  size_t pow = MIN_KEPT;
  while (pow * 2 <= bytes) pow *= 2;
  size_t step = pow / 8;
  return (bytes + step - 1) / step * step;
}

/* The smallest kept block that holds bytes without wasting more than
 * half of it, taken out of the cache, or NULL. (A step's sizes change
 * by several times from step to step in the dynamic workloads: with a
 * quarter and 32 blocks, the GNN's fallback missed the cache and faulted
 * fresh pages in; with half and 128 blocks it ran 1.26x faster.) */
static void *take(size_t bytes) {
  pthread_mutex_lock(&lock);
  int best = -1;
  for (int i = 0; i < n_kept; i++) {
    size_t cap = header_of(kept[i])->capacity;
    if (cap >= bytes && cap - bytes <= cap / 2 &&
        (best < 0 || cap < header_of(kept[best])->capacity))
      best = i;
  }
  void *p = best < 0 ? NULL : kept[best];
  if (p) {
    held -= header_of(p)->capacity;
    memmove(&kept[best], &kept[best + 1], sizeof *kept * (size_t)(n_kept - best - 1));
    n_kept--;
  }
  pthread_mutex_unlock(&lock);
  return p;
}

void *core_storage_alloc(size_t bytes, bool zero) {
  size_t capacity = capacity_for(bytes);
  if (STORAGE_KEEPS && capacity >= MIN_KEPT && capacity <= MAX_KEPT) {
    void *p = take(bytes);
    if (p) {
      if (core_alloc_fault()) {
        core_storage_free(p);
        return NULL;
      }
      if (zero) memset(p, 0, bytes);
      return p;
    }
  }
  if (capacity > SIZE_MAX - HEADER) return NULL;
  /* An empty tensor's elements still point inside their block, so that
   * leak checkers see the block as referenced. */
  if (capacity == 0) capacity = 1;
  /* calloc: fresh pages of a large block come zeroed from the OS */
  char *block = zero ? core_calloc(1, HEADER + capacity) : core_malloc(HEADER + capacity);
  if (!block) return NULL;
  ((header_t *)block)->capacity = capacity;
  /* Under the sanitizers an unset block reads as NaN (-1 as an integer),
   * so that a producer that leaves an element unwritten shows. */
  if (!STORAGE_KEEPS && !zero) memset(block + HEADER, 0xff, capacity);
  return block + HEADER;
}

void core_storage_free(void *p) {
  if (!p) return;
  header_t *h = header_of(p);
  size_t capacity = h->capacity;
  if (!STORAGE_KEEPS || capacity < MIN_KEPT || capacity > MAX_KEPT) {
    core_free(h);
    return;
  }
  void *evicted[SLOTS];
  int n_evicted = 0;
  pthread_mutex_lock(&lock);
  /* The oldest make room; freed outside the lock. */
  while (n_kept > 0 && (n_kept == SLOTS || held + capacity > MAX_HELD)) {
    evicted[n_evicted++] = kept[0];
    held -= header_of(kept[0])->capacity;
    memmove(&kept[0], &kept[1], sizeof *kept * (size_t)(--n_kept));
  }
  kept[n_kept++] = p;
  held += capacity;
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < n_evicted; i++) core_free(header_of(evicted[i]));
}

void core_storage_trim(void) {
  pthread_mutex_lock(&lock);
  int n = n_kept;
  void *blocks[SLOTS];
  memcpy(blocks, kept, sizeof *kept * (size_t)n);
  n_kept = 0;
  held = 0;
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < n; i++) core_free(header_of(blocks[i]));
}

int core_storage_kept(size_t *bytes) {
  pthread_mutex_lock(&lock);
  int n = n_kept;
  if (bytes) *bytes = held;
  pthread_mutex_unlock(&lock);
  return n;
}

bool core_storage_reuses(void) { return STORAGE_KEEPS; }
