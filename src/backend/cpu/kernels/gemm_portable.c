/* The portable micro-kernel: plain C that any compiler vectorizes for the
 * baseline ISA (SSE2 on x86-64). */
#include "backend/cpu/kernels/gemm_impl.h"

enum { PMR = 4, PNR = 16 };

static void ukernel_portable(int64_t kc, const float *restrict a,
                             const float *restrict b, float *restrict c,
                             int64_t ldc, int accumulate) {
  float acc[PMR][PNR] = {{0}};
  for (int64_t p = 0; p < kc; p++, a += PMR, b += PNR)
    for (int i = 0; i < PMR; i++)
      for (int j = 0; j < PNR; j++) acc[i][j] += a[i] * b[j];
  for (int i = 0; i < PMR; i++)
    for (int j = 0; j < PNR; j++)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

static int always(void) { return 1; }

const gemm_isa_t gemm_isa_portable = {.name = "portable", .supported = always,
                                      .kernel = ukernel_portable, .mr = PMR, .nr = PNR,
                                      .mc = 128, .kc = 256, .nc = 4096};
