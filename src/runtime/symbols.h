/* Runtime symbols (loom_compile_options_t.dynamic_symbols): symbols that
 * compilation leaves open are read from the inputs' dims at each run. When
 * they differ from the last run's, every size is evaluated again: the
 * memory plan's offsets (same live intervals, new sizes), the arena (grown
 * only when a larger size appears), the guards, the reference steps'
 * tensor shapes and the copies' byte counts; a strided input's staging
 * buffer grows when it is used at a larger size.
 * Generated code reads the values from syms[]; a group the emitters
 * cannot write over runtime sizes runs as reference steps. */
#ifndef LOOM_RUNTIME_SYMBOLS_H
#define LOOM_RUNTIME_SYMBOLS_H

#include "runtime/executable.h"

/* Size that runtime symbols take while compiling: the schedule compares
 * buffer sizes, and the arena is first allocated for it. */
#define RT_SYM_NOMINAL 64

/* Marks symbol k of e->source as a runtime symbol (e->syms[k] becomes
 * RT_SYM_NOMINAL until the first run). */
loom_status_t rt_sym_mark(loom_executable_t *e, int32_t k);
/* Whether symbol k can be read from some input dim (k, k*c or k+c). */
bool rt_sym_readable(const loom_graph_t *g, int32_t k);
/* Per symbol: whether it is a runtime symbol (be_request_t.sym_runtime),
 * or NULL when none is. */
const bool *rt_sym_runtime(const loom_executable_t *e);
/* Splits fused groups the target cannot build over runtime sizes (a
 * trial build says which) into one reference group per node (each runs
 * its reference kernel). */
loom_status_t rt_sym_split_groups(loom_executable_t *e);
/* Takes the memory plan's requests and req_of_slot (ownership passes). */
void rt_sym_keep_requests(loom_executable_t *e, mem_request_t *req, int n_req,
                          int32_t *req_of_slot);
/* Last step of loom_compile: the tables a replan needs. */
loom_status_t rt_sym_finish(loom_executable_t *e);
/* Reads the symbols from the inputs (counts already checked) and, when
 * they changed, resizes everything; LOOM_ERR_BINDING names the input and
 * dim that disagree. */
loom_status_t rt_sym_bind(loom_executable_t *e, loom_tensor_t *const *inputs);
/* Grows input i's staging buffer (for a strided binding) to its size. */
loom_status_t rt_sym_staging(loom_executable_t *e, int i);
/* Message for a binding whose shape differs from what the symbols make
 * its guard (what: "input" or "output"). */
loom_status_t rt_sym_mismatch(const loom_executable_t *e, const char *what, int i,
                              const guard_t *gd, const loom_tensor_t *t);
/* The shape of output i for the symbols these inputs give. */
loom_status_t rt_sym_output_shape(const loom_executable_t *e, loom_tensor_t *const *inputs,
                                  int i, int64_t *shape);
/* Whether the guards hold the sizes of a run (false before the first). */
bool rt_sym_sized(const loom_executable_t *e);
void rt_sym_free(loom_executable_t *e);

#endif
