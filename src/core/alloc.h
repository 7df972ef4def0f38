/* Heap allocation, with fault injection for tests. Every allocation in
 * Loom goes through here, so that tests can make the Nth one fail. */
#ifndef LOOM_CORE_ALLOC_H
#define LOOM_CORE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/loom.h"

void *core_malloc(size_t size);
void *core_calloc(size_t count, size_t size);
void *core_realloc(void *p, size_t size);
void core_free(void *p);
char *core_strdup(const char *s);

/* Aligned to 64 bytes (2 MiB blocks of at least 2 MiB, on transparent
 * huge pages where the kernel grants them), released by core_free. */
void *core_aligned_alloc(size_t size);

/* Lets the next n allocations succeed and fails the ones after (n < 0:
 * never fail). Counts per process; for single-threaded tests. */
void core_alloc_fail_after(int64_t n);
/* Counts an allocation served without the heap (a block kept for
 * reuse): true when fault injection says it must fail. */
bool core_alloc_fault(void);
/* Allocations made since the last core_alloc_fail_after call. */
int64_t core_alloc_count(void);

/* Grows *items (of *cap elements of size elem) to hold at least need. */
loom_status_t core_grow(void **items, int64_t *cap, int64_t need,
                        size_t elem);

#endif
