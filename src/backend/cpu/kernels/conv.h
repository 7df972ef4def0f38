/* Fast f32 kernels of convolutional networks beyond the forward conv2d
 * (which lives with the GEMM in gemm.h): conv2d's input gradient (the
 * transposed convolution), batch normalization in training mode, and max
 * pooling's gradient. Each is called by generated code through the ABI
 * (src/backend/cpu/abi.h), splits its work over the runtime's pool, and
 * allocates nothing once warm. */
#ifndef LOOM_KERNELS_CONV_H
#define LOOM_KERNELS_CONV_H

#include "core/pool.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/abi.h"

/* dX = conv2d's input gradient for dY, i.e. conv_transpose2d(dY, W): the
 * geometry is the forward conv2d's (n, c, h, w = dX; o, kh, kw = W; ho,
 * wo = dY). x = dX (written whole, cast from const), y = dY (read),
 * weight = W (o, c/groups, kh, kw); bias (c values) may be NULL. The
 * epilogue sees each image of dX as c rows by h*w columns. */
void kern_conv2d_input_grad_f32(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                core_pool_t *pool);

/* conv2d computed directly, without packing, for layers with few output
 * channels (stride 1, no dilation, one group; conv_direct.c). Returns 0,
 * having done nothing, when d is not such a layer or the CPU lacks AVX2;
 * kern_conv2d_f32 tries it first. */
int kern_conv2d_direct_f32(const loom_abi_conv2d_t *d, core_pool_t *pool);
/* The instance of the direct kernel in use ("avx512", "avx2"; NULL: none
 * the CPU runs), and for tests, forcing one: 0 when the CPU lacks it;
 * NULL goes back to the best. */
const char *kern_conv_direct_isa(void);
int kern_conv_direct_force_isa(const char *name);

/* conv2d 3x3 stride 1 by Winograd's F(m x m, 3x3), m = 2 or 4
 * (conv_winograd.c): GEMMs over transformed tiles, 1/2.25 (F(2x2)) or
 * 1/4 (F(4x4)) of the FMAs, at a cost in rounding error
 * (docs/contractions.md).
 * _suits: d is a layer whose frozen weights are best packed transformed
 * (one group, at least 16 channels in and out, at most 512 x 512 channel
 * pairs, outputs of at least 7x7).
 * _tile: the m that conv2d runs d's layer with under mode: the fastest
 * whose error bound for the layer stays within the direct sum's; 0: none
 * (direct sums).
 * _takes: a call with d, as its weight_packed is, runs F(m x m) (packed
 * transformed weights, or none and enough outputs to transform them per
 * call).
 * _f32 returns 0, having done nothing, when it does not take d or finds
 * no scratch memory.
 * kern_conv2d_winograd_pack_weight fills a buffer of
 * kern_conv2d_winograd_packed_bytes (64-byte aligned) with d->weight
 * transformed for F(m x m); 0: out of memory. */
int kern_conv2d_winograd_suits(const loom_abi_conv2d_t *d);
int kern_conv2d_winograd_tile(const loom_abi_conv2d_t *d, kern_conv_mode_t mode);
int kern_conv2d_winograd_takes(const loom_abi_conv2d_t *d, int m);
int kern_conv2d_winograd_f32(const loom_abi_conv2d_t *d, int m, core_pool_t *pool);
size_t kern_conv2d_winograd_packed_bytes(const loom_abi_conv2d_t *d, int m);
int kern_conv2d_winograd_pack_weight(const loom_abi_conv2d_t *d, int m, void *dst);
/* conv2d's input gradient (kern_conv2d_input_grad_f32's contract) by the
 * same form, for a 3x3 stride-1 layer with pads of at most 2 whose
 * transposed convolution it takes under mode; 0: not done. */
int kern_conv2d_input_grad_winograd_f32(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                        core_pool_t *pool);

#endif
