/* The CPU back end's eager kernels (be_backend_t.eager). */
#ifndef LOOM_BACKEND_CPU_EAGER_H
#define LOOM_BACKEND_CPU_EAGER_H

#include <stdbool.h>

#include "core/isa.h"
#include "kernels/ref.h"

/* Runs c's node with a fast kernel: true, *status its result; false when
 * there is none for its op, dtypes or shapes. */
bool cpu_eager(ref_call_t *c, loom_status_t *status);

/* Each family's kernels, which cpu_eager calls; same contract. */

/* eager_elementwise.c: arithmetic, unary ops, comparisons; where;
 * expand; cast */
bool cpu_eager_elementwise(ref_call_t *c, loom_status_t *status);
bool cpu_eager_where(ref_call_t *c, loom_status_t *status);
bool cpu_eager_expand(ref_call_t *c, loom_status_t *status);
bool cpu_eager_cast(ref_call_t *c, loom_status_t *status);

/* eager_index.c: gather, index_select and embedding; scatter_add */
bool cpu_eager_take(ref_call_t *c, loom_status_t *status);
bool cpu_eager_scatter_add(ref_call_t *c, loom_status_t *status);
/* scatter_add's loops over n elements in double (its sums are the
 * reference's): widen copies f32 into double, add adds f32 into double,
 * narrow rounds double to f32; in isa's instance (for tests), NULL where
 * the CPU lacks it. Every instance gives the same bits. */
typedef struct cpu_eager_sum_rows {
  void (*widen)(double *d, const float *s, int64_t n);
  void (*add)(double *d, const float *s, int64_t n);
  void (*narrow)(float *d, const double *s, int64_t n);
} cpu_eager_sum_rows_t;
const cpu_eager_sum_rows_t *cpu_eager_sum_rows_isa(core_isa_t isa);

/* eager_conv.c: conv2d, conv_transpose2d and conv2d_weight_grad */
bool cpu_eager_conv(ref_call_t *c, loom_status_t *status);
/* eager_pool.c: max_pool2d and avg_pool2d */
bool cpu_eager_pool(ref_call_t *c, loom_status_t *status);

/* eager_math.c: f32 exp, tanh and sigmoid over n contiguous elements
 * (y and a apart), as generated code computes them (float_math.h); the
 * instance of the widest ISA the CPU runs and LOOM_CPU_ISA allows, or
 * (for tests) of one ISA: NULL where the CPU lacks it. NULL for other
 * ops. */
typedef void (*cpu_eager_math_fn)(float *y, const float *a, int64_t n);
cpu_eager_math_fn cpu_eager_math(ir_op_t op);
cpu_eager_math_fn cpu_eager_math_isa(ir_op_t op, core_isa_t isa);
/* The widest ISA whose instances the eager kernels run: the CPU's,
 * within LOOM_CPU_ISA; and whether the CPU runs isa's within it. */
core_isa_t cpu_eager_isa(void);
bool cpu_eager_runs(core_isa_t isa);

/* The target attributes of the eager kernels' instances per ISA. GCC's
 * generic tuning would vectorize an AVX-512 instance 256 bits wide;
 * clang takes no such option in the attribute. */
#if defined(__GNUC__) && !defined(__clang__)
#define CPU_EAGER_AVX512 __attribute__((target("avx512f,fma,prefer-vector-width=512")))
#else
#define CPU_EAGER_AVX512 __attribute__((target("avx512f,fma")))
#endif
#define CPU_EAGER_AVX2 __attribute__((target("avx2,fma")))

/* eager_elementwise.c: an f32 op's loop over n elements, y[i] =
 * op(in[0][i * step[0]], in[1][i * step[1]]) with steps 0 or 1 (y apart
 * from the inputs), in isa's instance (for tests): NULL where the CPU
 * lacks it or the op has none. Every instance gives the same bits. */
typedef void (*cpu_eager_run_fn)(void *y, const void *const *in, const int64_t *step,
                                 int64_t n);
cpu_eager_run_fn cpu_eager_f32_run_isa(ir_op_t op, core_isa_t isa);

/* eager_reduce.c: sum and mean; softmax and log_softmax */
bool cpu_eager_reduce(ref_call_t *c, loom_status_t *status);
bool cpu_eager_softmax(ref_call_t *c, loom_status_t *status);

#endif
