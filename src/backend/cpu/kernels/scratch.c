#include "backend/cpu/kernels/scratch.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { SLOTS = 48 };

/* Buffers this large or larger take whole 2 MiB pages, asked of the
 * kernel as huge pages: on 4 KiB pages, one of two threads' Winograd
 * blocks (V and M, 270 KiB) ran 25% slower than the other's in every run,
 * always on the buffer allocated first; on one huge page each, both ran
 * at the one-thread rate (a 64 x 56 x 56 layer at two threads: 0.52 ->
 * 0.45 ms). */
#define HUGE_MIN ((size_t)256 << 10)
#define HUGE_PAGE ((size_t)2 << 20)

/* cap is read before a slot is taken (to prefer one that fits), so it is
 * atomic; buf only while the slot is held. */
static struct {
  atomic_int busy;
  float *buf;
  atomic_size_t cap; /* floats */
} slots[SLOTS];

static size_t cap_of(int i) { return atomic_load_explicit(&slots[i].cap, memory_order_relaxed); }

static int try_take(int i) {
  return !atomic_exchange_explicit(&slots[i].busy, 1, memory_order_acquire);
}

static void give_back(int i) { atomic_store_explicit(&slots[i].busy, 0, memory_order_release); }

/* The free slot with the smallest buffer of at least `floats`, taken; -1:
 * none. Smallest, so that a small request does not hold the one buffer a
 * larger request running beside it would otherwise have to grow. */
static int take_fitting(size_t floats) {
  for (;;) {
    int best = -1;
    for (int i = 0; i < SLOTS; i++)
      if (!atomic_load_explicit(&slots[i].busy, memory_order_relaxed) && cap_of(i) >= floats &&
          (best < 0 || cap_of(i) < cap_of(best)))
        best = i;
    if (best < 0) return -1;
    if (try_take(best)) {
      if (cap_of(best) >= floats) return best;
      give_back(best);
    }
  }
}

/* A buffer of at least *floats floats, *floats set to what it holds. */
static float *grow(size_t *floats) {
  size_t bytes = *floats * sizeof(float), align = 64;
  if (*floats > SIZE_MAX / sizeof(float) - HUGE_PAGE) return NULL;
  if (bytes >= HUGE_MIN) align = HUGE_PAGE;
  bytes = (bytes + align - 1) / align * align;
  float *buf = aligned_alloc(align, bytes);
  if (buf && align == HUGE_PAGE) madvise(buf, bytes, MADV_HUGEPAGE);
  *floats = bytes / sizeof(float);
  return buf;
}

kern_scratch_t kern_scratch_claim(size_t floats) {
  int i = take_fitting(floats);
  if (i >= 0) return (kern_scratch_t){i, slots[i].buf};
  for (i = 0; i < SLOTS; i++) {
    if (!try_take(i)) continue;
    if (cap_of(i) < floats) {
      free(slots[i].buf);
      size_t granted = floats;
      slots[i].buf = grow(&granted);
      atomic_store_explicit(&slots[i].cap, slots[i].buf ? granted : 0, memory_order_relaxed);
    }
    if (slots[i].buf) return (kern_scratch_t){i, slots[i].buf};
    give_back(i);
    return (kern_scratch_t){-1, NULL};
  }
  return (kern_scratch_t){-1, NULL};
}

void kern_scratch_release(kern_scratch_t s) {
  if (s.slot >= 0) give_back(s.slot);
}

void kern_scratch_reserve(int count, size_t floats) {
  kern_scratch_t held[SLOTS];
  int n = 0;
  while (n < count && n < SLOTS && (held[n] = kern_scratch_claim(floats)).buf) n++;
  while (n > 0) kern_scratch_release(held[--n]);
}
