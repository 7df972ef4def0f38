/* The CPU back end's eager kernels (be_backend_t.eager). */
#ifndef LOOM_BACKEND_CPU_EAGER_H
#define LOOM_BACKEND_CPU_EAGER_H

#include <stdbool.h>

#include "kernels/ref.h"

/* Runs c's node with a fast kernel: true, *status its result; false when
 * there is none for its op, dtypes or shapes. */
bool cpu_eager(ref_call_t *c, loom_status_t *status);

/* Each family's kernels, which cpu_eager calls; same contract. */

/* eager_elementwise.c: arithmetic, unary ops, comparisons; where */
bool cpu_eager_elementwise(ref_call_t *c, loom_status_t *status);
bool cpu_eager_where(ref_call_t *c, loom_status_t *status);

/* eager_index.c: gather, index_select and embedding; scatter_add */
bool cpu_eager_take(ref_call_t *c, loom_status_t *status);
bool cpu_eager_scatter_add(ref_call_t *c, loom_status_t *status);

/* eager_reduce.c: sum and mean */
bool cpu_eager_reduce(ref_call_t *c, loom_status_t *status);

#endif
