/* Tensor storage with a cache of freed blocks (storage.h). A block is a
 * 16-byte header, holding its capacity (and, while kept, the next block
 * of its class), then the elements. Capacities of the sizes that may be
 * kept are rounded up to eight steps per power of two: a class each, so
 * that a block serves the slightly larger tensors of a later step too (a
 * graph's sizes change from step to step). A request takes the newest
 * block of its class or of the seven above it (at most half of the block
 * left unused). Blocks of the sizes kept are cut from huge-page regions
 * (core/pages.c), their elements 64-byte aligned; one the cache has no
 * room for gives its pages back and waits, cold, on a second list of its
 * class, taken only when no block of the class holds pages. */
#include "core/storage.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/pages.h"
#include "core/sanitize.h"

#define STORAGE_KEEPS (!CORE_ASAN)

enum {
  HEADER = 16,
  MIN_SHIFT = 12, /* 4 KiB */
  MAX_SHIFT = 26, /* 64 MiB */
  STEPS = 8,      /* classes per power of two */
  CLASSES = (MAX_SHIFT - MIN_SHIFT) * STEPS + 1,
};
static const size_t MIN_KEPT = (size_t)1 << MIN_SHIFT, MAX_KEPT = (size_t)1 << MAX_SHIFT;
static const size_t MAX_HELD = (size_t)256 << 20;

/* Where a block cut from a region starts before its header, so that its
 * elements start on 64 bytes. */
enum { PAGES_PAD = 64 - HEADER };

typedef struct header {
  size_t capacity;     /* bytes after the header; bit 0: cut from a region */
  struct header *next; /* kept: the next block of its class */
} header_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static header_t *kept[CLASSES]; /* newest first */
static header_t *cold[CLASSES]; /* region blocks whose pages went back */
static int n_kept;
static size_t held;

static header_t *header_of(void *p) { return (header_t *)((char *)p - HEADER); }
static size_t capacity_of(const header_t *h) { return h->capacity & ~(size_t)1; }
static bool from_pages(const header_t *h) { return h->capacity & 1; }

static bool keepable(size_t capacity) {
  return STORAGE_KEEPS && capacity >= MIN_KEPT && capacity <= MAX_KEPT;
}

static int log2_floor(size_t v) { return 63 - __builtin_clzll((unsigned long long)v); }

/* The capacity a request of bytes gets (even: bit 0 of a header's is
 * a flag; bytes at most SIZE_MAX / 2). */
static size_t capacity_for(size_t bytes) {
  if (bytes < MIN_KEPT || bytes > MAX_KEPT) return bytes ? (bytes + 15) / 16 * 16 : 16;
  size_t step = ((size_t)1 << log2_floor(bytes)) / STEPS;
  return (bytes + step - 1) / step * step;
}

/* The class of a keepable capacity (a multiple of its step). */
static int class_of(size_t capacity) {
  int shift = log2_floor(capacity);
  size_t step = ((size_t)1 << shift) / STEPS;
  return (shift - MIN_SHIFT) * STEPS + (int)(capacity / step) - STEPS;
}

/* Under the lock: takes the newest block of class c, or NULL. */
static header_t *pop(int c) {
  header_t *h = kept[c];
  if (!h) return NULL;
  kept[c] = h->next;
  n_kept--;
  held -= capacity_of(h);
  return h;
}

/* Under the lock: takes the newest cold block of class c, or NULL. */
static header_t *pop_cold(int c) {
  header_t *h = cold[c];
  if (h) cold[c] = h->next;
  return h;
}

/* A kept block for a request of capacity, or NULL. */
static void *take(size_t capacity) {
  int c = class_of(capacity);
  header_t *h = NULL;
  pthread_mutex_lock(&lock);
  for (int k = c; !h && k < c + STEPS && k < CLASSES; k++) h = pop(k);
  for (int k = c; !h && k < c + STEPS && k < CLASSES; k++) h = pop_cold(k);
  pthread_mutex_unlock(&lock);
  return h ? (char *)h + HEADER : NULL;
}

/* A fresh block of capacity from a region (zero-filled), or NULL. */
static void *from_region(size_t capacity) {
  char *block = core_pages_take(PAGES_PAD + HEADER + capacity);
  if (!block) return NULL;
  block += PAGES_PAD;
  ((header_t *)block)->capacity = capacity | 1;
  return block + HEADER;
}

void *core_storage_alloc(size_t bytes, bool zero) {
  if (bytes > SIZE_MAX / 2) return NULL;
  size_t capacity = capacity_for(bytes);
  if (keepable(capacity)) {
    if (core_alloc_fault()) return NULL;
    void *p = take(capacity);
    if (p && zero) memset(p, 0, bytes);
    if (!p) p = from_region(capacity);
    if (p) return p; /* else the heap, where no region can be had */
  }
  /* An empty tensor's elements still point inside their block (of 16
   * bytes), so that leak checkers see the block as referenced. */
  /* calloc: the pages of a large block come zeroed from the OS when
   * touched; a larger block than is kept, unzeroed, starts on huge pages */
  char *block = zero                                 ? core_calloc(1, HEADER + capacity)
                : STORAGE_KEEPS && capacity > MAX_KEPT ? core_aligned_alloc(HEADER + capacity)
                                                       : core_malloc(HEADER + capacity);
  if (!block) return NULL;
  ((header_t *)block)->capacity = capacity;
  /* Under the sanitizers an unset block reads as NaN (-1 as an integer),
   * so that a producer that leaves an element unwritten shows. */
  if (!STORAGE_KEEPS && !zero) memset(block + HEADER, 0xff, capacity);
  return block + HEADER;
}

/* Lets go of a chain of blocks linked by next, outside the lock: a heap
 * block is freed, a region block gives its pages back and waits cold. */
static void let_go(header_t *h) {
  header_t *chilled = NULL;
  for (header_t *next; h; h = next) {
    next = h->next;
    if (!from_pages(h)) {
      core_free(h);
      continue;
    }
    core_pages_release((char *)h + HEADER, capacity_of(h));
    h->next = chilled;
    chilled = h;
  }
  if (!chilled) return;
  pthread_mutex_lock(&lock);
  for (header_t *next; chilled; chilled = next) {
    next = chilled->next;
    int c = class_of(capacity_of(chilled));
    chilled->next = cold[c];
    cold[c] = chilled;
  }
  pthread_mutex_unlock(&lock);
}

void core_storage_free(void *p) {
  if (!p) return;
  header_t *h = header_of(p);
  size_t capacity = capacity_of(h);
  if (!keepable(capacity)) {
    core_free(h);
    return;
  }
  header_t *evicted = NULL;
  pthread_mutex_lock(&lock);
  /* The largest make room (the most bytes back for the fewest blocks). */
  for (int c = CLASSES - 1; c >= 0 && held + capacity > MAX_HELD; c--)
    for (header_t *x; held + capacity > MAX_HELD && (x = pop(c));) {
      x->next = evicted;
      evicted = x;
    }
  h->next = kept[class_of(capacity)];
  kept[class_of(capacity)] = h;
  n_kept++;
  held += capacity;
  pthread_mutex_unlock(&lock);
  let_go(evicted);
}

void core_storage_trim(void) {
  header_t *all = NULL;
  pthread_mutex_lock(&lock);
  for (int c = 0; c < CLASSES; c++)
    for (header_t *x; (x = pop(c));) {
      x->next = all;
      all = x;
    }
  pthread_mutex_unlock(&lock);
  let_go(all);
}

int core_storage_kept(size_t *bytes) {
  pthread_mutex_lock(&lock);
  int n = n_kept;
  if (bytes) *bytes = held;
  pthread_mutex_unlock(&lock);
  return n;
}

bool core_storage_reuses(void) { return STORAGE_KEEPS; }
