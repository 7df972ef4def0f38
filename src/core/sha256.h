/* SHA-256 (FIPS 180-4): the digest behind the module cache's keys and
 * its entries' checksums. Incremental: init, update any number of times,
 * final. */
#ifndef LOOM_CORE_SHA256_H
#define LOOM_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

enum { CORE_SHA256_BYTES = 32, CORE_SHA256_HEX = 65 /* 64 digits + NUL */ };

typedef struct core_sha256 {
  uint32_t state[8];  /* H0..H7, the running hash value */
  uint64_t length;    /* message bytes hashed so far */
  uint8_t block[64];  /* bytes waiting for a full block */
  size_t used;        /* how many of block are filled */
} core_sha256_t;

void core_sha256_init(core_sha256_t *h);
void core_sha256_update(core_sha256_t *h, const void *data, size_t size);
void core_sha256_final(core_sha256_t *h, uint8_t digest[CORE_SHA256_BYTES]);

/* The digest as 64 lowercase hex digits. */
void core_sha256_hex(const uint8_t digest[CORE_SHA256_BYTES],
                     char hex[CORE_SHA256_HEX]);
/* One-shot: the hex digest of size bytes at data. */
void core_sha256_hex_of(const void *data, size_t size,
                        char hex[CORE_SHA256_HEX]);

/* The compression of n 64-byte blocks into state, one function per
 * instruction set: "portable", and "sha" (the x86 SHA extensions) where
 * the CPU has them; the hash uses the last this CPU runs, unless
 * LOOM_CPU_ISA=portable. Listed for tests: every one must agree. */
typedef void (*core_sha256_blocks_fn)(uint32_t state[8], const uint8_t *p, size_t n);
typedef struct core_sha256_impl {
  const char *name;
  core_sha256_blocks_fn blocks;
} core_sha256_impl_t;
/* Those this CPU runs, portable first: their count. */
int core_sha256_impls(const core_sha256_impl_t **out);

#endif
