/* Winograd's transforms 16 wide for AVX-512 (winograd_transforms.inc):
 * a tile row's 16 tiles, or 16 channels, a vector; partial vectors end
 * in masked stores. */
#include <immintrin.h>

#define VL 16
#define WT_TARGET __attribute__((target("avx512f,fma")))
#include "backend/cpu/kernels/winograd_transforms.inc"

WINO_INSTANCE(2, _avx512, WT_TARGET)
WINO_INSTANCE(4, _avx512, WT_TARGET)
