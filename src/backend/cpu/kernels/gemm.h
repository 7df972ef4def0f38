/* Fast f32 contractions for compiled code: GEMM and conv2d with a fused
 * epilogue (see loom_abi_gemm_t and loom_abi_conv2d_t in
 * src/backend/cpu/abi.h for the exact contract), split over the runtime's
 * thread pool. Micro-kernels for AVX-512 and AVX2+FMA are chosen at run
 * time from the CPU's features, with a portable C path for other CPUs.
 * Packing buffers are kept per thread and reused, so a steady state of
 * calls allocates nothing. */
#ifndef LOOM_KERNELS_GEMM_H
#define LOOM_KERNELS_GEMM_H

#include "core/pool.h"
#include "backend/cpu/abi.h"

void kern_gemm_f32(const loom_abi_gemm_t *d, core_pool_t *pool);

/* The algorithms a conv2d kernel may choose from
 * (loom_compile_options_t.precise). */
typedef enum kern_conv_mode {
  /* Winograd where its error bound for the layer stays within the direct
   * sum's (kern_conv2d_winograd_tile), else direct sums. */
  KERN_CONV_DEFAULT = 0,
  /* Direct sums only (the implicit GEMM, the direct kernel): no Winograd. */
  KERN_CONV_PRECISE = 1,
  /* The fastest: F(4x4) Winograd on large outputs whatever its error
   * (up to ~10x a direct sum's). */
  KERN_CONV_FAST = 2,
} kern_conv_mode_t;

void kern_conv2d_f32(const loom_abi_conv2d_t *d, kern_conv_mode_t mode, core_pool_t *pool);
/* dW = conv2d's weight gradient: x = the forward input, y = dY (read),
 * weight = dW (written, whole); the epilogue sees dW as o x cg*kh*kw. */
void kern_conv2d_weight_grad_f32(const loom_abi_conv2d_t *d, core_pool_t *pool);
/* B (k x n, or n x k stored when trans_b; rows ldb apart) packed once
 * for loom_abi_gemm_t.b_packed, in the micro-kernel's panel format:
 * kern_gemm_packed_bytes sizes the buffer (64-byte aligned), which
 * kern_gemm_pack_b fills. A buffer packed for another micro-kernel or
 * shape is ignored by the GEMM (it packs B itself). */
size_t kern_gemm_packed_bytes(int64_t k, int64_t n);
void kern_gemm_pack_b(const float *b, int64_t ldb, int trans_b, int64_t k, int64_t n,
                      void *dst);
/* "avx512", "avx2" or "portable": the micro-kernel in use. */
const char *kern_gemm_isa(void);
/* Grows the packing buffers that `tasks` concurrent GEMM tasks claim, so
 * that replays of an executable with that many threads never allocate
 * (best effort: a buffer not grown here grows at its first use). */
void kern_gemm_reserve(int tasks);

#endif
