/* Address space for tensor storage on transparent huge pages. A fresh
 * page costs far more where it is first touched than the work done on it
 * (about 11 us for 4 KiB on the VMs here, 0.15 ms for a 2 MiB huge page:
 * alloc.c), and a dynamic program's steps keep asking for blocks a little
 * larger than any it has freed. So core/storage.c carves the blocks it
 * keeps out of large regions marked for huge pages, packed one after the
 * other, rather than taking each from the heap on small pages. Nothing
 * taken comes back here: the storage cache reuses blocks by size class,
 * and gives the pages of those it holds too many of back to the OS.
 * Thread-safe. */
#ifndef LOOM_CORE_PAGES_H
#define LOOM_CORE_PAGES_H

#include <stddef.h>

/* bytes of zero-filled, 64-byte aligned address space, never returned;
 * NULL when no region can be reserved (the caller takes the heap). */
void *core_pages_take(size_t bytes);
/* Gives the whole pages inside [p, p + bytes) back to the OS; they read
 * as zeros when next touched. */
void core_pages_release(void *p, size_t bytes);

#endif
