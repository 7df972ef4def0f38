/* The interpreter as the runtime's fallback. loom_interpret (the public
 * form) runs the reference kernels only: it is the oracle that compiled
 * code is tested against. rt_interpret runs a back end's eager kernels
 * where it has them (be_backend_t.eager) and the reference kernels
 * elsewhere: what a trace runs for a segment it does not compile, and an
 * executable whose code was lost (no C compiler). */
#ifndef LOOM_RUNTIME_INTERP_H
#define LOOM_RUNTIME_INTERP_H

#include "backend/backend.h"

/* loom_interpret, with fast's eager kernels first (NULL: none), on a
 * graph that passed ir_verify: the runtime's callers run graphs they
 * verified once when they built them, not at every run. pool (NULL: none)
 * lends the eager kernels and the elementwise runs its threads. */
loom_status_t rt_interpret(loom_graph_t *g, int n_inputs, loom_tensor_t *const *inputs,
                           int n_outputs, loom_tensor_t **outputs, const be_backend_t *fast,
                           struct core_pool *pool);

/* rt_interpret, where each output i with kept[i] set (kept NULL: none)
 * is the caller's tensor already: a view of the storage of the input
 * that output is (a saved input held without a copy), which the run
 * leaves as it is, and fails (LOOM_ERR_BINDING) if it is not (a kept
 * output that is NULL: LOOM_ERR_INVALID). */
loom_status_t rt_interpret_keeping(loom_graph_t *g, int n_inputs, loom_tensor_t *const *inputs,
                                   int n_outputs, loom_tensor_t **outputs, const bool *kept,
                                   const be_backend_t *fast, struct core_pool *pool);

#endif
