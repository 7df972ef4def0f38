/* Huge-page regions for tensor storage (pages.h). A region is 256 MiB of
 * address space reserved without backing (the kernel backs what is
 * touched), aligned to 2 MiB and marked for huge pages (granted where the
 * kernel's THP mode is madvise or always); requests are cut from its
 * front. A request that does not fit what is left of the region opens a
 * new one (the rest of the old is address space only, never touched). */
#include "core/pages.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

enum { HUGE_PAGE = 2 << 20, ALIGN = 64 };
static const size_t REGION = (size_t)256 << 20;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *next, *end; /* what is left of the current region */

/* A fresh region of at least bytes, or false. */
static bool open_region(size_t bytes) {
  size_t size = bytes > REGION ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : REGION;
  if (size > SIZE_MAX - HUGE_PAGE) return false;
  char *p = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  char *start = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  /* the unaligned ends go back; failing that they stay reserved */
  if (start > p) munmap(p, (size_t)(start - p));
  if (start + size < p + size + HUGE_PAGE)
    munmap(start + size, (size_t)(p + size + HUGE_PAGE - (start + size)));
  madvise(start, size, MADV_HUGEPAGE);
  next = start;
  end = start + size;
  return true;
}

void *core_pages_take(size_t bytes) {
  if (bytes > SIZE_MAX - ALIGN) return NULL;
  bytes = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  pthread_mutex_lock(&lock);
  void *p = NULL;
  if ((size_t)(end - next) >= bytes || open_region(bytes)) {
    p = next;
    next += bytes;
  }
  pthread_mutex_unlock(&lock);
  return p;
}

void core_pages_release(void *p, size_t bytes) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t hi = ((uintptr_t)p + bytes) & ~(page - 1);
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
