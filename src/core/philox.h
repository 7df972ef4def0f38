/* Philox4x32-10, the counter-based generator of Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3" (SC 2011). A counter-based
 * generator makes element i of a random tensor a pure function of
 * (seed, offset, i), so any backend and any thread order draws the same
 * numbers, and a replayed graph draws new ones when its offset changes.
 *
 * The mapping from tensor elements to generator output, shared by every
 * op flagged F_RANDOM:
 *   key     = {seed low 32 bits, seed high 32 bits}
 *   counter = {b low, b high, offset low, offset high}, b = i / 4
 *   uniform element i  = word i % 4 of block b, as (u >> 8) * 2^-24, in
 *                        [0, 1 - 2^-24] for every dtype (exact in f32)
 *   normal element i   = Box-Muller on the pair of words (2k, 2k+1) of
 *                        block b, k = (i / 2) % 2: with u1 = 1 - uniform
 *                        of word 2k (in (0, 1], so the log is finite) and
 *                        u2 = uniform of word 2k+1, r = sqrt(-2 ln u1);
 *                        even i takes r cos(2 pi u2), odd i r sin(2 pi u2).
 * So normal elements come in pairs from one block, like uniform ones. */
#ifndef LOOM_CORE_PHILOX_H
#define LOOM_CORE_PHILOX_H

#include <stdint.h>

typedef struct philox_block {
  uint32_t w[4];
} philox_block_t;

/* The raw block function: ten rounds of Philox4x32 on ctr under key. */
philox_block_t philox4x32_10(const uint32_t ctr[4], const uint32_t key[2]);

/* Block b of the stream of (seed, offset), per the mapping above. */
philox_block_t philox_stream_block(uint64_t seed, uint64_t offset, uint64_t b);

/* A 32-bit word as a uniform double in [0, 1 - 2^-24]. */
double philox_word_uniform(uint32_t u);

/* Element i of the uniform [0, 1) and standard normal streams. */
double philox_uniform(uint64_t seed, uint64_t offset, uint64_t i);
double philox_normal(uint64_t seed, uint64_t offset, uint64_t i);

#endif
