#include "core/philox.h"

#include <math.h>

/* Round multipliers and Weyl key increments from the Philox paper. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void round4x32(uint32_t x[4], const uint32_t k[2]) {
  uint64_t p0 = (uint64_t)PHILOX_M0 * x[0];
  uint64_t p1 = (uint64_t)PHILOX_M1 * x[2];
  uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k[0];
  uint32_t y1 = (uint32_t)p1;
  uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k[1];
  uint32_t y3 = (uint32_t)p0;
  x[0] = y0;
  x[1] = y1;
  x[2] = y2;
  x[3] = y3;
}

philox_block_t philox4x32_10(const uint32_t ctr[4], const uint32_t key[2]) {
  philox_block_t b = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k[0] += PHILOX_W0;
      k[1] += PHILOX_W1;
    }
    round4x32(b.w, k);
  }
  return b;
}

philox_block_t philox_stream_block(uint64_t seed, uint64_t offset, uint64_t b) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)offset,
                     (uint32_t)(offset >> 32)};
  return philox4x32_10(ctr, key);
}

double philox_word_uniform(uint32_t u) { return (double)(u >> 8) * 0x1p-24; }

double philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  philox_block_t b = philox_stream_block(seed, offset, i / 4);
  return philox_word_uniform(b.w[i % 4]);
}

double philox_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  philox_block_t b = philox_stream_block(seed, offset, i / 4);
  int k = (int)((i / 2) % 2);
  double u1 = 1.0 - philox_word_uniform(b.w[2 * k]);
  double u2 = philox_word_uniform(b.w[2 * k + 1]);
  double r = sqrt(-2.0 * log(u1));
  double theta = 2.0 * M_PI * u2;
  return i % 2 == 0 ? r * cos(theta) : r * sin(theta);
}
