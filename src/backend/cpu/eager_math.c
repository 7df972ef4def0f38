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

MATH_RUNS(avx512, CPU_EAGER_AVX512)
MATH_RUNS(avx2, CPU_EAGER_AVX2)
MATH_RUNS(portable, )

bool cpu_eager_runs(core_isa_t isa) {
  switch (isa) {
    case CORE_ISA_AVX512:
      return core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("fma");
    case CORE_ISA_AVX2:
      return core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
    default: return true;
  }
}

core_isa_t cpu_eager_isa(void) {
  return cpu_eager_runs(CORE_ISA_AVX512) ? CORE_ISA_AVX512
         : cpu_eager_runs(CORE_ISA_AVX2) ? CORE_ISA_AVX2
                                         : CORE_ISA_PORTABLE;
}

cpu_eager_math_fn cpu_eager_math_isa(ir_op_t op, core_isa_t isa) {
  if (!cpu_eager_runs(isa)) return NULL;
  switch (isa) {
    case CORE_ISA_AVX512: return math_avx512(op);
    case CORE_ISA_AVX2: return math_avx2(op);
    default: return math_portable(op);
  }
}

cpu_eager_math_fn cpu_eager_math(ir_op_t op) { return cpu_eager_math_isa(op, cpu_eager_isa()); }
