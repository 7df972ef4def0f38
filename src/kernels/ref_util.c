/* Helpers shared by the reference kernels. */
#include <string.h>

#include "core/alloc.h"

#include "kernels/ref.h"

void ref_copy_elem(loom_tensor_t *dst, int64_t j, const loom_tensor_t *src,
                   int64_t i) {
  size_t es = loom_dtype_size(src->dtype);
  memcpy((char *)dst->data + j * (int64_t)es,
         (const char *)src->data + i * (int64_t)es, es);
}

void ref_unravel(int rank, const int64_t *shape, int64_t i, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
}

int64_t ref_broadcast_index(int rank, const int64_t *shape, int out_rank,
                            const int64_t *idx) {
  int64_t flat = 0;
  for (int d = 0; d < rank; d++) {
    int64_t k = shape[d] == 1 ? 0 : idx[d + out_rank - rank];
    flat = flat * shape[d] + k;
  }
  return flat;
}

void *ref_scratch(ref_call_t *c, size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (!c->scratch) return core_calloc(1, bytes);
  if (c->scratch->bytes < bytes) {
    void *grown = core_realloc(c->scratch->data, bytes);
    if (!grown) return NULL;
    c->scratch->data = grown;
    c->scratch->bytes = bytes;
  }
  memset(c->scratch->data, 0, bytes);
  return c->scratch->data;
}

void ref_scratch_release(ref_call_t *c, void *p) {
  if (!c->scratch) core_free(p);
}
