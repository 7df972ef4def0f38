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

/* ---- Algorithms ------------------------------------------------------------
 * The ways a conv2d layer can run (forward, or its input gradient); which
 * one does is chosen per layer (conv_choice.c). For the input gradient,
 * KERN_CONV_IMPLICIT is the GEMM and col2im of conv_grad.c. */
typedef enum kern_conv_algo {
  KERN_CONV_IMPLICIT,  /* GEMM over an implicit im2col: always runs */
  KERN_CONV_BATCHED,   /* one GEMM over every image's positions */
  KERN_CONV_DIRECT,    /* the direct kernel, few output channels */
  KERN_CONV_POLYPHASE, /* direct by phases, few input channels, any stride */
  KERN_CONV_WINOGRAD2, /* Winograd F(2x2, 3x3) */
  KERN_CONV_WINOGRAD4, /* Winograd F(4x4, 3x3) */
  KERN_CONV_DEPTHWISE, /* direct, one channel per group */
  KERN_CONV_N_ALGOS
} kern_conv_algo_t;

typedef enum kern_conv_pass { KERN_CONV_FORWARD, KERN_CONV_INPUT_GRAD } kern_conv_pass_t;

const char *kern_conv_algo_name(kern_conv_algo_t algo, kern_conv_pass_t pass);

/* The algorithm conv2d (or its input gradient) runs d's layer with under
 * mode, on pool's threads, its weights packed ahead (packed) or not: of
 * the candidates that take the layer, the fastest on this machine, timed
 * the first time the layer's geometry is asked for and remembered for the
 * process (LOOM_LOG=steps prints each choice with the candidates'
 * GFLOP/s). LOOM_CONV_CHOICE=rules takes fixed rules instead of timings.
 * d's data may be NULL: the timings run on scratch buffers. */
kern_conv_algo_t kern_conv2d_algo(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                  kern_conv_pass_t pass, int packed, core_pool_t *pool);
/* kern_conv2d_algo for a forward layer whose weights (d->weight) are
 * about to be packed: *packed = those weights packed for the choice
 * (kern_conv2d_pack_weight's form, freed with core_free) when the timings
 * packed them, else NULL (the caller packs). */
kern_conv_algo_t kern_conv2d_algo_packing(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                          core_pool_t *pool, void **packed);
/* The fixed rules' choice (what LOOM_CONV_CHOICE=rules runs). */
kern_conv_algo_t kern_conv2d_algo_by_rules(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                           kern_conv_pass_t pass, int packed);
/* The algorithms that take d's layer under mode, into out (at most
 * KERN_CONV_N_ALGOS); their number. */
int kern_conv2d_candidates(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                           kern_conv_pass_t pass, kern_conv_algo_t *out);

/* Runs d's layer forward (or its input gradient) with algo; 0, having
 * written nothing, when algo does not take d as it is (its packed weights
 * in another form, no scratch memory). */
int kern_conv2d_run(const loom_abi_conv2d_t *d, kern_conv_algo_t algo, core_pool_t *pool);
int kern_conv2d_input_grad_run(const loom_abi_conv2d_t *d, kern_conv_algo_t algo,
                               core_pool_t *pool);

/* conv2d's weight (o, c/groups, kh, kw) packed once for
 * loom_abi_conv2d_t.weight_packed, in the form algo takes (d->weight is
 * read; x, y and the rest unused): the GEMM's A panels, or Winograd's
 * transformed weights; the direct kernels take the GEMM's form and
 * ignore it. kern_conv2d_packed_bytes sizes the buffer (64-byte
 * aligned), which kern_conv2d_pack_weight fills (0: out of memory). A
 * buffer packed for another algorithm, micro-kernel or shape is ignored
 * by conv2d (it packs the weights itself). */
size_t kern_conv2d_packed_bytes(const loom_abi_conv2d_t *d, kern_conv_algo_t algo);
int kern_conv2d_pack_weight(const loom_abi_conv2d_t *d, kern_conv_algo_t algo, void *dst);

/* Whether the batched GEMM (many small images) takes d's layer. */
int kern_conv2d_batched_suits(const loom_abi_conv2d_t *d);

/* ---- Taps of small outputs (conv_taps.c) ------------------------------------
 * _build fills table (KERN_TAPS_MAX entries) with, per tap (ky, kx) and
 * output position, the offset in an input channel plane of the pixel the
 * tap reads there, or -1 in the padding: table[(ky * kw + kx) * ho * wo +
 * pos]. Returns 0 (the table unset) for outputs wide enough that copying
 * runs of a row is faster, or too many entries.
 * _gather: out[c] = plane[offset[c]], 0 in the padding; _scatter_add:
 * plane[offset[c]] += src[c] outside it. */
enum { KERN_TAPS_MAX = 4096 };
int kern_conv_taps_build(const loom_abi_conv2d_t *d, int32_t *table);
void kern_conv_taps_gather(const int32_t *offset, const float *plane, int64_t len, float *out);
void kern_conv_taps_scatter_add(const int32_t *offset, const float *src, int64_t len,
                                float *plane);
/* The gather of a stride-2 row (conv_taps.c): dst[j] = src[2 * j] for j
 * < n (n >= 1), reading nothing past src[2 * n - 2]; the instance of the
 * direct kernel's ISA (kern_conv_direct_isa), or a plain loop. */
typedef void (*kern_stride2_fn)(const float *src, int64_t n, float *dst);
kern_stride2_fn kern_gather_stride2(void);

/* dX = conv2d's input gradient for dY, i.e. conv_transpose2d(dY, W): the
 * geometry is the forward conv2d's (n, c, h, w = dX; o, kh, kw = W; ho,
 * wo = dY). x = dX (written whole, cast from const), y = dY (read),
 * weight = W (o, c/groups, kh, kw); bias (c values) may be NULL. The
 * epilogue sees each image of dX as c rows by h*w columns. */
void kern_conv2d_input_grad_f32(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                core_pool_t *pool);

/* conv2d computed directly, without packing, for layers with few output
 * channels (stride 1, no dilation, one group; conv_direct.c). Returns 0,
 * having done nothing, when d is not such a layer or the CPU lacks AVX2
 * (kern_conv2d_direct_suits says which). */
int kern_conv2d_direct_f32(const loom_abi_conv2d_t *d, core_pool_t *pool);
int kern_conv2d_direct_suits(const loom_abi_conv2d_t *d);
/* The instance of the direct kernel in use ("avx512", "avx2"; NULL: none
 * the CPU runs), and for tests, forcing one: 0 when the CPU lacks it;
 * NULL goes back to the best. */
const char *kern_conv_direct_isa(void);
int kern_conv_direct_force_isa(const char *name);

/* conv2d computed directly for depthwise layers (groups = c = o; any
 * stride, dilation and kernel up to 64 taps; conv_depthwise.c), with the
 * direct kernel's ISA. Returns 0, having done nothing, when d is not such
 * a layer or the CPU lacks AVX2; 0 too when a task found no scratch
 * memory (conv2d then runs the layer by the implicit GEMM). */
int kern_conv2d_depthwise_f32(const loom_abi_conv2d_t *d, core_pool_t *pool);
int kern_conv2d_depthwise_suits(const loom_abi_conv2d_t *d);

/* conv2d computed directly for layers with few input channels (at most 8,
 * one group, no dilation, strides up to 4; conv_polyphase.c), with the
 * direct kernel's ISA. Returns 0, having done nothing, when d is not such
 * a layer or the CPU lacks AVX2; 0 too when a task found no scratch
 * memory, its rows then unwritten (conv2d runs the layer again by the
 * implicit GEMM, as for Winograd). */
int kern_conv2d_polyphase_f32(const loom_abi_conv2d_t *d, core_pool_t *pool);
int kern_conv2d_polyphase_suits(const loom_abi_conv2d_t *d);

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
 * _takes: the rule of a call with d, as its weight_packed is: F(m x m)
 * when its weights are packed transformed, or none are packed and the
 * call has enough outputs to transform them itself.
 * _f32 runs F(m x m) for a layer it suits whose weights are packed
 * transformed or not at all; 0, having done nothing, otherwise or when
 * it finds no scratch memory.
 * kern_conv2d_winograd_pack_weight fills a buffer of
 * kern_conv2d_winograd_packed_bytes (64-byte aligned) with d->weight
 * transformed for F(m x m); 0: out of memory. */
int kern_conv2d_winograd_suits(const loom_abi_conv2d_t *d);
int kern_conv2d_winograd_tile(const loom_abi_conv2d_t *d, kern_conv_mode_t mode);
int kern_conv2d_winograd_takes(const loom_abi_conv2d_t *d, int m);
int kern_conv2d_winograd_f32(const loom_abi_conv2d_t *d, int m, core_pool_t *pool);
size_t kern_conv2d_winograd_packed_bytes(const loom_abi_conv2d_t *d, int m);
int kern_conv2d_winograd_pack_weight(const loom_abi_conv2d_t *d, int m, void *dst);
/* The instance of Winograd's transforms in use ("avx512", "avx2",
 * "base"), and for tests, forcing one: 0 when the CPU lacks it; NULL goes
 * back to the widest. */
const char *kern_winograd_isa(void);
int kern_winograd_force_isa(const char *name);
/* conv2d's input gradient (kern_conv2d_input_grad_f32's contract) by the
 * same form, for a 3x3 stride-1 layer with pads of at most 2: _tile is
 * the m the transposed convolution may run with under mode (0: none),
 * _takes the rule of _tile's (enough outputs to transform the weights per
 * call), _f32 runs F(m x m) (0: not done). */
int kern_conv2d_input_grad_winograd_tile(const loom_abi_conv2d_t *d, kern_conv_mode_t mode);
int kern_conv2d_input_grad_winograd_takes(const loom_abi_conv2d_t *d, int m);
int kern_conv2d_input_grad_winograd_f32(const loom_abi_conv2d_t *d, int m, core_pool_t *pool);

#endif
