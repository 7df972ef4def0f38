/* SHA-256 written from FIPS 180-4 (sections 4.1.2, 4.2.2, 5.1.1, 6.2),
 * and its compression with the x86 SHA extensions where the CPU has them
 * (Intel's SHA extensions reference: SHA256RNDS2 runs two rounds on the
 * state held as ABEF and CDGH, SHA256MSG1/MSG2 extend the schedule):
 * every module load checks its file's digest, 6x faster so (bench_compile
 * hash). */
#include "core/sha256.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "core/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA_X86 1
#endif

/* The first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes (4.2.2). */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
static uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
static uint32_t maj(uint32_t x, uint32_t y, uint32_t z) {
  return (x & y) ^ (x & z) ^ (y & z);
}
static uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
static uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
static uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
static uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

static uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t x) {
  p[0] = (uint8_t)(x >> 24);
  p[1] = (uint8_t)(x >> 16);
  p[2] = (uint8_t)(x >> 8);
  p[3] = (uint8_t)x;
}

/* One 512-bit block (6.2.2). */
static void compress_block(uint32_t state[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; t++)
    w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = h + big_sigma1(e) + ch(e, f, g) + K[t] + w[t];
    uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

static void blocks_portable(uint32_t state[8], const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) compress_block(state, p + 64 * i);
}

#ifdef SHA_X86
#define SHA_TARGET __attribute__((target("sha,sse4.1,ssse3")))

/* Words W[4j+16 .. 4j+19] from the four groups before them, m0 holding
 * W[4j .. 4j+3]: W[t-16] + s0(W[t-15]) by MSG1, + W[t-7], then s1(W[t-2])
 * by MSG2. */
SHA_TARGET static __m128i schedule(__m128i m0, __m128i m1, __m128i m2, __m128i m3) {
  __m128i t = _mm_sha256msg1_epu32(m0, m1);
  t = _mm_add_epi32(t, _mm_alignr_epi8(m3, m2, 4));
  return _mm_sha256msg2_epu32(t, m3);
}

SHA_TARGET static void blocks_sha(uint32_t state[8], const uint8_t *p, size_t n) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
  /* a..h into the instructions' order: abef = (f, e, b, a) and
   * cdgh = (h, g, d, c), lane 0 first. */
  __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)state), 0xB1);
  __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(state + 4)), 0x1B);
  __m128i abef = _mm_alignr_epi8(dcba, hgfe, 8);
  __m128i cdgh = _mm_blend_epi16(hgfe, dcba, 0xF0);
  for (; n > 0; n--, p += 64) {
    __m128i abef_in = abef, cdgh_in = cdgh, m[4];
    for (int j = 0; j < 4; j++)
      m[j] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * j)), bswap);
    for (int j = 0; j < 16; j++) {
      __m128i wk = _mm_add_epi32(m[j & 3], _mm_loadu_si128((const __m128i *)(K + 4 * j)));
      /* Two rounds make the old abef the new cdgh: each call writes the
       * new abef over the old cdgh, so two leave the names right. */
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
      if (j < 12) m[j & 3] = schedule(m[j & 3], m[(j + 1) & 3], m[(j + 2) & 3], m[(j + 3) & 3]);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i hgdc = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128((__m128i *)state, _mm_blend_epi16(feba, hgdc, 0xF0));
  _mm_storeu_si128((__m128i *)(state + 4), _mm_alignr_epi8(hgdc, feba, 8));
}

static bool cpu_has_sha(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return false;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

static const core_sha256_impl_t impls[] = {
    {"portable", blocks_portable},
#ifdef SHA_X86
    {"sha", blocks_sha},
#endif
};

int core_sha256_impls(const core_sha256_impl_t **out) {
  *out = impls;
  int n = 1;
#ifdef SHA_X86
  if (cpu_has_sha()) n++;
#endif
  return n;
}

static core_sha256_blocks_fn chosen = blocks_portable;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

/* The SHA extensions unless LOOM_CPU_ISA=portable asks for none. */
static void choose(void) {
  const core_sha256_impl_t *all;
  int n = core_sha256_impls(&all);
  if (core_isa_allows(CORE_ISA_AVX2)) chosen = all[n - 1].blocks;
}

static void compress(uint32_t state[8], const uint8_t *p, size_t n) {
  pthread_once(&chosen_once, choose);
  chosen(state, p, n);
}

void core_sha256_init(core_sha256_t *h) {
  /* The first 32 bits of the fractional parts of the square roots of the
   * first 8 primes (5.3.3). */
  static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(h->state, initial, sizeof initial);
  h->length = 0;
  h->used = 0;
}

void core_sha256_update(core_sha256_t *h, const void *data, size_t size) {
  const uint8_t *p = data;
  /* memcpy's arguments must not be null, even for zero bytes. */
  if (size == 0) return;
  h->length += size;
  if (h->used > 0) {
    size_t take = 64 - h->used < size ? 64 - h->used : size;
    memcpy(h->block + h->used, p, take);
    h->used += take;
    p += take;
    size -= take;
    if (h->used < 64) return;
    compress(h->state, h->block, 1);
    h->used = 0;
  }
  size_t n = size / 64;
  if (n) compress(h->state, p, n);
  p += 64 * n;
  size -= 64 * n;
  memcpy(h->block, p, size);
  h->used = size;
}

/* Padding (5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, then the
 * message length in bits as a big-endian 64-bit integer. */
void core_sha256_final(core_sha256_t *h, uint8_t digest[CORE_SHA256_BYTES]) {
  uint64_t bits = h->length * 8;
  h->block[h->used++] = 0x80;
  if (h->used > 56) {
    memset(h->block + h->used, 0, 64 - h->used);
    compress(h->state, h->block, 1);
    h->used = 0;
  }
  memset(h->block + h->used, 0, 56 - h->used);
  for (int i = 0; i < 8; i++) h->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
  compress(h->state, h->block, 1);
  for (int i = 0; i < 8; i++) store_be32(digest + 4 * i, h->state[i]);
}

void core_sha256_hex(const uint8_t digest[CORE_SHA256_BYTES], char hex[CORE_SHA256_HEX]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < CORE_SHA256_BYTES; i++) {
    hex[2 * i] = digits[digest[i] >> 4];
    hex[2 * i + 1] = digits[digest[i] & 15];
  }
  hex[64] = '\0';
}

void core_sha256_hex_of(const void *data, size_t size, char hex[CORE_SHA256_HEX]) {
  core_sha256_t h;
  uint8_t digest[CORE_SHA256_BYTES];
  core_sha256_init(&h);
  core_sha256_update(&h, data, size);
  core_sha256_final(&h, digest);
  core_sha256_hex(digest, hex);
}
