/* Tensor storage: the blocks that hold tensors' elements. Blocks of 4 KiB
 * to 64 MiB that are freed are kept, by size class (eight per power of
 * two), up to 256 MiB in all (the largest make room), and handed out
 * again for a request they hold with at most half to spare, so that code
 * that makes a fresh tensor per op or per segment (the fallback
 * interpreter, a trace's segment outputs and saved values) does not
 * return pages to the OS and fault them back in at every step. Blocks
 * of those sizes are cut from regions on huge pages (core/pages.h), and
 * larger ones start on huge pages too: what a step touches for the first
 * time (a batch larger than any before) costs a fault per 2 MiB, not per
 * 4 KiB. Thread-safe. Under AddressSanitizer nothing is kept and every
 * block comes from the heap, so that a use after free is still caught. */
#ifndef LOOM_CORE_STORAGE_H
#define LOOM_CORE_STORAGE_H

#include <stdbool.h>
#include <stddef.h>

/* A block of at least bytes (16-byte aligned, 64 for the sizes kept),
 * zero-filled when zero is true; NULL when memory runs out (or fault
 * injection says so). */
void *core_storage_alloc(size_t bytes, bool zero);
/* Frees a block of core_storage_alloc (NULL: nothing). */
void core_storage_free(void *p);
/* Frees the blocks kept for reuse. */
void core_storage_trim(void);
/* Blocks kept for reuse now, and their bytes in *bytes (may be NULL). */
int core_storage_kept(size_t *bytes);
/* Whether freed blocks are kept for reuse in this build (not under
 * AddressSanitizer). */
bool core_storage_reuses(void);

#endif
