/* Tensor storage (src/core/storage.c): a freed large block is handed out
 * again for a request it holds, zero-filled when asked, never for one it
 * cannot hold or would hold with much to spare; small and huge blocks go
 * straight back to the heap; the cache stays bounded; fault injection
 * reaches cached blocks too; blocks past the bound wait cold and are
 * taken again; threads freeing and taking blocks at once
 * never share one; copies into an unzeroed block write every element. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/storage.h"
#include "harness.h"

static void test_reuse(void) {
  core_storage_trim();
  size_t mib = (size_t)1 << 20;
  unsigned char *a = core_storage_alloc(mib, false);
  CHECK(a != NULL);
  if (!a) return;
  memset(a, 0xAB, mib);
  core_storage_free(a);
  unsigned char *b = core_storage_alloc(mib - 1000, true);
  CHECK(b != NULL);
  if (!b) return;
  if (core_storage_reuses()) CHECK(b == a);
  size_t nonzero = 0;
  for (size_t i = 0; i < mib - 1000; i++) nonzero += b[i] != 0;
  CHECK(nonzero == 0);
  core_storage_free(b);
  /* too large for it, or more than half of it would go unused: a new block */
  unsigned char *c = core_storage_alloc(2 * mib, false);
  unsigned char *d = core_storage_alloc(mib / 2 - 4096, false);
  CHECK(c != NULL && d != NULL);
  if (core_storage_reuses()) CHECK(c != b && d != b);
  core_storage_free(c);
  core_storage_free(d);
  core_storage_trim();
}

/* loom_tensor_copy and loom_tensor_from_data fill a block they take
 * unzeroed: a reused block that held other bytes shows through any
 * element they missed. The copy of a strided view is its logical
 * contents, row-major; a broadcast dim repeats. */
static void test_copies_write_every_element(void) {
  core_storage_trim();
  enum { N = 2048 }; /* 8 KiB of f32: a kept block */
  float *junk = core_storage_alloc(N * sizeof(float), false);
  CHECK(junk != NULL);
  if (!junk) return;
  for (int i = 0; i < N; i++) junk[i] = 99.0f;
  core_storage_free(junk);
  static float src[N];
  for (int i = 0; i < N; i++) src[i] = (float)i;
  int64_t shape[] = {64, 32}, strides[] = {1, 64}; /* a transposed 32x64 */
  loom_tensor_t *view = NULL, *copy = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, strides, src, &view));
  CHECK_OK(loom_tensor_copy(view, &copy));
  CHECK(copy && loom_tensor_rank(copy) == 2 && loom_tensor_dim(copy, 0) == 64 &&
        loom_tensor_dim(copy, 1) == 32 && loom_tensor_data(copy) != (void *)src);
  int wrong = 0;
  const float *c = copy ? loom_tensor_data(copy) : NULL;
  for (int i = 0; c && i < 64; i++)
    for (int j = 0; j < 32; j++) wrong += c[i * 32 + j] != (float)(j * 64 + i);
  CHECK(c && wrong == 0);
  loom_tensor_destroy(copy);
  loom_tensor_destroy(view);
  int64_t rows[] = {3, 4}, bcast[] = {0, 1}; /* one row of 4, three times */
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, rows, bcast, src, &view));
  CHECK_OK(loom_tensor_copy(view, &copy));
  c = copy ? loom_tensor_data(copy) : NULL;
  wrong = 0;
  for (int i = 0; c && i < 12; i++) wrong += c[i] != (float)(i % 4);
  CHECK(c && wrong == 0);
  loom_tensor_destroy(copy);
  loom_tensor_destroy(view);
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 1, (int64_t[]){N}, src, sizeof src, &t));
  c = t ? loom_tensor_data(t) : NULL;
  wrong = 0;
  for (int i = 0; c && i < N; i++) wrong += c[i] != (float)i;
  CHECK(c && wrong == 0);
  loom_tensor_destroy(t);
  core_storage_trim();
}

/* Blocks under 4 KiB and over 64 MiB are not kept; neither is more than
 * the cache's bound (256 MiB): the largest make room. */
static void test_bounds(void) {
  core_storage_trim();
  core_storage_free(core_storage_alloc(1000, true));
  core_storage_free(core_storage_alloc(65u << 20, true));
  CHECK(core_storage_kept(NULL) == 0);
  enum { N = 300 };
  void *blocks[N];
  size_t bytes = 0;
  for (int i = 0; i < N; i++) blocks[i] = core_storage_alloc((size_t)1 << 20, false);
  for (int i = 0; i < N; i++) core_storage_free(blocks[i]);
  CHECK(core_storage_kept(&bytes) == (core_storage_reuses() ? 256 : 0));
  /* 15 MiB blocks make room by taking out the largest kept first */
  for (int i = 0; i < 20; i++) blocks[i] = core_storage_alloc((size_t)15 << 20, false);
  for (int i = 0; i < 20; i++) core_storage_free(blocks[i]);
  int n = core_storage_kept(&bytes);
  CHECK(bytes <= (size_t)256 << 20);
  if (core_storage_reuses()) CHECK(n >= 16 && bytes >= (size_t)240 << 20);
  core_storage_trim();
  CHECK(core_storage_kept(&bytes) == 0 && bytes == 0);
  /* small blocks of one class are reused newest first */
  void *a = core_storage_alloc(5000, false), *b = core_storage_alloc(5000, false);
  core_storage_free(a);
  core_storage_free(b);
  void *c = core_storage_alloc(4800, false);
  if (core_storage_reuses()) CHECK(c == b);
  core_storage_free(c);
  core_storage_trim();
}

/* Kept sizes come from huge-page regions, their elements 64-byte
 * aligned. Blocks past the cache's bound give their pages back and wait
 * cold: a later request of their class takes them (no new address space
 * is cut while one waits), zero-filled when asked. */
static void test_cold_blocks(void) {
  if (!core_storage_reuses()) return;
  core_storage_trim();
  enum { N = 300 };
  size_t mib = (size_t)1 << 20;
  static unsigned char *first[N];
  for (int i = 0; i < N; i++) {
    first[i] = core_storage_alloc(mib, false);
    CHECK(first[i] != NULL && (uintptr_t)first[i] % 64 == 0);
    if (first[i]) memset(first[i], 0x5A, mib);
  }
  for (int i = 0; i < N; i++) core_storage_free(first[i]);
  size_t bytes = 0;
  CHECK(core_storage_kept(&bytes) == 256); /* 44 went cold */
  int known = 0, nonzero = 0;
  static unsigned char *again[N];
  for (int i = 0; i < N; i++) {
    again[i] = core_storage_alloc(mib, true);
    for (int k = 0; k < N && again[i]; k++) known += again[i] == first[k];
    for (size_t b = 0; again[i] && b < mib; b += 4093) nonzero += again[i][b] != 0;
  }
  CHECK(known == N && nonzero == 0);
  CHECK(core_storage_kept(NULL) == 0);
  for (int i = 0; i < N; i++) core_storage_free(again[i]);
  core_storage_trim();
  CHECK(core_storage_kept(&bytes) == 0 && bytes == 0);
}

/* A cached block counts as an allocation for fault injection. */
static void test_fault_injection(void) {
  core_storage_trim();
  core_storage_free(core_storage_alloc((size_t)1 << 20, false));
  core_alloc_fail_after(0);
  CHECK(core_storage_alloc((size_t)1 << 20, false) == NULL);
  core_alloc_fail_after(-1);
  void *p = core_storage_alloc((size_t)1 << 20, false);
  CHECK(p != NULL);
  core_storage_free(p);
  core_storage_trim();
}

typedef struct hammer {
  int id;
  int bad;
} hammer_t;

/* Each thread fills its blocks with its id and checks them before
 * freeing: a block handed to two threads at once would be overwritten. */
static void *hammer_main(void *arg) {
  hammer_t *h = arg;
  for (int round = 0; round < 200; round++) {
    size_t bytes = ((size_t)64 << 10) * (size_t)(1 + (round + h->id) % 7);
    unsigned char *p = core_storage_alloc(bytes, round % 2 == 0);
    if (!p) {
      h->bad++;
      continue;
    }
    memset(p, h->id, bytes);
    for (size_t i = 0; i < bytes; i += 4096) h->bad += p[i] != (unsigned char)h->id;
    core_storage_free(p);
  }
  return NULL;
}

static void test_threads(void) {
  enum { THREADS = 4 };
  pthread_t t[THREADS];
  hammer_t h[THREADS];
  for (int i = 0; i < THREADS; i++) {
    h[i] = (hammer_t){.id = i + 1};
    CHECK(pthread_create(&t[i], NULL, hammer_main, &h[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK(h[i].bad == 0);
  }
  core_storage_trim();
}

int main(void) {
  TEST_RUN(test_reuse);
  TEST_RUN(test_bounds);
  TEST_RUN(test_cold_blocks);
  TEST_RUN(test_copies_write_every_element);
  TEST_RUN(test_fault_injection);
  TEST_RUN(test_threads);
  return test_summary();
}
