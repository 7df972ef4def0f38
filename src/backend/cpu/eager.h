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
 * expand */
bool cpu_eager_elementwise(ref_call_t *c, loom_status_t *status);
bool cpu_eager_where(ref_call_t *c, loom_status_t *status);
bool cpu_eager_expand(ref_call_t *c, loom_status_t *status);

/* eager_index.c: gather, index_select and embedding; scatter_add */
bool cpu_eager_take(ref_call_t *c, loom_status_t *status);
bool cpu_eager_scatter_add(ref_call_t *c, loom_status_t *status);

/* eager_math.c: f32 exp, tanh and sigmoid over n contiguous elements
 * (y and a apart), as generated code computes them (float_math.h); the
 * instance of the widest ISA the CPU runs and LOOM_CPU_ISA allows, or
 * (for tests) of one ISA: NULL where the CPU lacks it. NULL for other
 * ops. */
typedef void (*cpu_eager_math_fn)(float *y, const float *a, int64_t n);
cpu_eager_math_fn cpu_eager_math(ir_op_t op);
cpu_eager_math_fn cpu_eager_math_isa(ir_op_t op, core_isa_t isa);

/* eager_reduce.c: sum and mean; softmax and log_softmax */
bool cpu_eager_reduce(ref_call_t *c, loom_status_t *status);
bool cpu_eager_softmax(ref_call_t *c, loom_status_t *status);

#endif
