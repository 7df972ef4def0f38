#include "backend/cpu/kernels/scratch.h"

#include <stdatomic.h>
#include <stdlib.h>

enum { SLOTS = 48 };

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

kern_scratch_t kern_scratch_claim(size_t floats) {
  int i = take_fitting(floats);
  if (i >= 0) return (kern_scratch_t){i, slots[i].buf};
  for (i = 0; i < SLOTS; i++) {
    if (!try_take(i)) continue;
    if (cap_of(i) < floats) {
      free(slots[i].buf);
      slots[i].buf = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
      atomic_store_explicit(&slots[i].cap, slots[i].buf ? floats : 0, memory_order_relaxed);
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
