/* The eager kernels' f32 transcendental functions (eager.h): exp, tanh
 * and sigmoid over contiguous arrays, computed as generated code computes
 * them (float_math.h, one source), so that a segment gives the same
 * values in the fallback as compiled, within the functions' few ulp of
 * the reference's double results. The library's own code is built for
 * the baseline ISA; these loops are one template, instanced per ISA and
 * chosen at run time as the GEMM's micro-kernels are (LOOM_CPU_ISA caps
 * the choice). */
#include "backend/cpu/eager.h"
#include "backend/cpu/float_math.h"
#include "core/isa.h"

#define MATH_RUN(name, isa, target, expr)                                          \
  target static void name##_##isa(float *restrict y, const float *restrict a,      \
                                  int64_t n) {                                     \
    for (int64_t i = 0; i < n; i++) {                                              \
      float x = a[i];                                                              \
      y[i] = expr;                                                                 \
    }                                                                              \
  }

#define MATH_RUNS(isa, target)                                                     \
  MATH_RUN(exp, isa, target, loom_expf(x))                                         \
  MATH_RUN(tanh, isa, target, loom_tanhf(x))                                       \
  MATH_RUN(sigmoid, isa, target, loom_sigmoidf(x))                                 \
  static cpu_eager_math_fn math_##isa(ir_op_t op) {                                \
    switch (op) {                                                                  \
      case IR_OP_EXP: return exp_##isa;                                            \
      case IR_OP_TANH: return tanh_##isa;                                          \
      case IR_OP_SIGMOID: return sigmoid_##isa;                                    \
      default: return NULL;                                                        \
    }                                                                              \
  }

/* GCC's generic tuning would vectorize the AVX-512 instance 256 bits wide;
 * clang takes no such option in the attribute. */
#if defined(__GNUC__) && !defined(__clang__)
#define AVX512_TARGET __attribute__((target("avx512f,fma,prefer-vector-width=512")))
#else
#define AVX512_TARGET __attribute__((target("avx512f,fma")))
#endif

MATH_RUNS(avx512, AVX512_TARGET)
MATH_RUNS(avx2, __attribute__((target("avx2,fma"))))
MATH_RUNS(portable, )

static bool runs_avx512(void) {
  return core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("fma");
}

static bool runs_avx2(void) {
  return core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
}

cpu_eager_math_fn cpu_eager_math(ir_op_t op) {
  if (runs_avx512()) return math_avx512(op);
  if (runs_avx2()) return math_avx2(op);
  return math_portable(op);
}

cpu_eager_math_fn cpu_eager_math_isa(ir_op_t op, core_isa_t isa) {
  switch (isa) {
    case CORE_ISA_AVX512: return runs_avx512() ? math_avx512(op) : NULL;
    case CORE_ISA_AVX2: return runs_avx2() ? math_avx2(op) : NULL;
    default: return math_portable(op);
  }
}
