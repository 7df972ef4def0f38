/* Fast f32 contractions for compiled code: GEMM and conv2d with a fused
 * epilogue (see loom_abi_gemm_t and loom_abi_conv2d_t in
 * src/runtime/abi.h for the exact contract), split over the runtime's
 * thread pool. Micro-kernels for AVX-512 and AVX2+FMA are chosen at run
 * time from the CPU's features, with a portable C path for other CPUs.
 * Packing buffers are kept per thread and reused, so a steady state of
 * calls allocates nothing. */
#ifndef LOOM_KERNELS_GEMM_H
#define LOOM_KERNELS_GEMM_H

#include "core/pool.h"
#include "runtime/abi.h"

void kern_gemm_f32(const loom_abi_gemm_t *d, core_pool_t *pool);
void kern_conv2d_f32(const loom_abi_conv2d_t *d, core_pool_t *pool);
/* conv2d's weight (o, cg, kh, kw; cg = input channels per group) packed
 * once for loom_abi_conv2d_t.weight_packed, as the GEMM's A operand of
 * each group in the micro-kernel's panel format: kern_conv2d_packed_bytes
 * sizes the buffer (64-byte aligned), which kern_conv2d_pack_weight fills.
 * A buffer packed for another micro-kernel or shape is ignored by conv2d
 * (it packs the weights itself). */
size_t kern_conv2d_packed_bytes(int64_t o, int64_t cg, int64_t kh, int64_t kw,
                                int64_t groups);
void kern_conv2d_pack_weight(const float *w, int64_t o, int64_t cg, int64_t kh, int64_t kw,
                             int64_t groups, void *dst);
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
