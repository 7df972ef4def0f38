/* Scratch buffers of the fast kernels (conv2d's batched form and weight
 * gradient, the input gradient's column chunks, Winograd's blocks and
 * transformed weights). Buffers outlive calls, so that a replayed step
 * allocates nothing once warm: a call or task claims one for its
 * duration. Never freed, so they stay reachable for leak checkers. */
#ifndef LOOM_KERNELS_SCRATCH_H
#define LOOM_KERNELS_SCRATCH_H

#include <stddef.h>

typedef struct kern_scratch {
  int slot; /* -1: none */
  float *buf; /* 64-byte aligned, at least the floats asked for */
} kern_scratch_t;

/* A buffer of at least `floats` floats: a free one that is large enough,
 * else a free one grown; .buf NULL when all are busy or memory ran out. */
kern_scratch_t kern_scratch_claim(size_t floats);
void kern_scratch_release(kern_scratch_t s);

/* Grows `count` buffers to `floats` on the calling thread before tasks
 * claim them, so that which thread first runs a task cannot make a later
 * replay allocate. */
void kern_scratch_reserve(int count, size_t floats);

#endif
