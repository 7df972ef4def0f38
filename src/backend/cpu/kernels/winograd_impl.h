/* Inside the Winograd conv2d (conv_winograd.c): the transforms of F(m x m,
 * 3x3) for m = 2 and 4 (winograd_transforms.c), which the driver calls on
 * blocks of tiles. A tile is an m x m block of outputs, read from an
 * alpha x alpha input patch, alpha = m + 2; a layer's tiles run in raster
 * order, tx to a tile row. */
#ifndef LOOM_KERNELS_WINOGRAD_IMPL_H
#define LOOM_KERNELS_WINOGRAD_IMPL_H

#include <stdint.h>

#include "backend/cpu/abi.h"

/* Widest output row taken; the transforms' row buffers live on the stack. */
enum { WINO_MAX_W = 2048 };

/* Floats read past the end of a V, M or weight buffer by the transforms'
 * last vectors (whose extra lanes are dropped): buffers carry this slack. */
enum { WINO_SLACK = 16 };

/* Tiles [t0, t1) of image img of a layer with tx tiles a row, in columns
 * [col0, col0 + t1 - t0) of a block of n columns (a block may hold the
 * tiles of several images, one such part each); M's rows are n long.
 * V[xi] is the GEMM's B (channels x tiles) in the panels its driver packs
 * (gemm_b_layout): nr tiles a panel, kc-deep blocks of channels, npad
 * tiles a channel, so that the GEMMs read it as it is written. */
typedef struct wino_block {
  const loom_abi_conv2d_t *d;
  int64_t tx, img, t0, t1, col0, n;
  int64_t nr, kc, npad, xi_stride; /* xi_stride: floats from V[xi] to V[xi + 1] */
} wino_block_t;

/* V[xi] is c * npad floats and these more: a power of two between the
 * alpha^2 rows that one vector of tiles stores (16 KiB at 64 channels)
 * maps them to one set of L1, which made the input transform 2x slower. */
enum { WINO_XI_SKEW = 16 };

typedef struct wino_transforms {
  int m, alpha;
  /* U[xi][oc][ci] = (G g G^T)[xi] for the filters of output channels [o0,
   * o1), from w (o, c, 3, 3); flipped: from the weights (c, o, 3, 3) of
   * the layer whose input gradient this convolution is, filter (oc, ci)
   * being their (ci, oc) turned by 180 degrees. taps: scratch of 9 * c +
   * WINO_SLACK floats. */
  void (*filters)(const float *w, int64_t o, int64_t c, int64_t o0, int64_t o1, int flipped,
                  float *taps, float *u);
  /* V[xi] = (B^T d B)[xi] for b's tiles, channels [c0, c1), in b's
   * panels; the columns padding the last panel are zeros. */
  void (*input)(const wino_block_t *b, int64_t c0, int64_t c1, float *v);
  /* Y over b's tiles = A^T M A + bias, output channels [o0, o1), from
   * M[xi][oc][t - t0]. */
  void (*output)(const wino_block_t *b, int64_t o0, int64_t o1, const float *m);
} wino_transforms_t;

/* F(m x m, 3x3), m = 2 or 4, the instance for this CPU (AVX-512, AVX2
 * or the baseline; kern_winograd_force_isa in conv.h picks another). */
const wino_transforms_t *wino_transforms(int m);

/* The instances (winograd_transforms.c, winograd_avx512.c). */
extern const wino_transforms_t wino_f2_avx512, wino_f4_avx512, wino_f2_avx2, wino_f4_avx2,
    wino_f2_base, wino_f4_base;

#endif
