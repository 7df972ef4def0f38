/* Parameters as stable storage for segment runs. A traced RNN runs its
 * cell's executables once per time step, and each of their GEMMs would
 * pack the same weight as its B operand again (W_hh: 64K floats, in the
 * forward and in the backward, the packing taking as long as the product
 * at 16 rows). A parameter's storage changes only at the optimizer step
 * or between steps, so the trace tells the run which of its inputs are
 * parameters, unchanged within the current epoch (a step, or the part of
 * one before loom_trace_optimizer_step), and the back end keeps what it
 * derives from them (the CPU's packed panels) for the epoch
 * (rt_executable_run_bound, be_stable_t). It calls no other file of the
 * tracer: the run (segment_run.c) and the backward pass (backward.c) call
 * it. */
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/executable.h"
#include "trace/trace_internal.h"

void seg_packs_free(loom_trace_t *t) { rt_stable_free(&t->packs.stable); }

/* Whether x's storage is a parameter's (unchanged within an epoch). */
static bool param_storage(const loom_trace_t *t, const loom_tensor_t *x) {
  for (int64_t p = 0; p < t->n_params; p++)
    if (t->params[p].t->data == x->data) return true;
  return false;
}

loom_status_t seg_entry_run(loom_trace_t *t, rt_entry_t *e, int n_in,
                            loom_tensor_t *const *ins, int n_out,
                            loom_tensor_t *const *outs, bool matched) {
  rt_binding_t b = {.matched = matched};
  const loom_executable_t *x = rt_entry_executable(e);
  if (!x || x->interpreted || !x->graph || t->n_params == 0 || n_in <= 0)
    return rt_entry_run(e, n_in, ins, n_out, outs, &b);
  /* Read in place: a strided input is copied for the run, and its copy
   * changes with every run. */
  bool stable[n_in];
  bool any = false;
  for (int j = 0; j < n_in; j++) {
    /* Only where the target would use it (a hint costs tens of ns). */
    stable[j] = j < x->n_inputs && x->inputs[j].stable_use && ins[j] && ins[j]->data &&
                tensor_is_contiguous(ins[j]) && param_storage(t, ins[j]);
    any |= stable[j];
  }
  if (any) b.stable = &t->packs.stable, b.stable_input = stable;
  return rt_entry_run(e, n_in, ins, n_out, outs, &b);
}
