/* Placeholder until the fast kernels land: plain loops. */
#include "kernels/gemm.h"

const char *kern_gemm_isa(void) { return "portable"; }

void kern_gemm_f32(const loom_abi_gemm_t *d, core_pool_t *pool) {
  (void)pool;
  for (int64_t b = 0; b < d->batch; b++) {
    const float *a = d->a + b * d->stride_a, *bm = d->b + b * d->stride_b;
    float *c = d->c + b * d->stride_c;
    for (int64_t i = 0; i < d->m; i++)
      for (int64_t j = 0; j < d->n; j++) {
        float s = 0;
        for (int64_t k = 0; k < d->k; k++) {
          float x = d->trans_a ? a[k * d->lda + i] : a[i * d->lda + k];
          float y = d->trans_b ? bm[j * d->ldb + k] : bm[k * d->ldb + j];
          s += x * y;
        }
        c[i * d->ldc + j] = s;
      }
    if (d->epilogue) d->epilogue(d->epilogue_ctx, b, c, d->ldc, 0, d->m, 0, d->n);
  }
}

void kern_conv2d_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  (void)d;
  (void)pool;
}
