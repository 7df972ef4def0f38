/* Executables: the compiled form of a graph. A run is one guard on the
 * bindings and a loop over prebuilt steps: the CPU twin of a CUDA Graph
 * replay. Storage is a table of slots (src/runtime/abi.h): inputs and
 * outputs are bound per run, parameters and constants point at the
 * graph's tensors, intermediates at fixed offsets of one arena allocated
 * at compile time. */
#ifndef LOOM_RUNTIME_EXECUTABLE_H
#define LOOM_RUNTIME_EXECUTABLE_H

#include "backend/cpu/toolchain.h"
#include "core/pool.h"
#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "kernels/ref.h"
#include "runtime/abi.h"

typedef enum step_kind {
  STEP_GENERATED, /* a function of the compiled module */
  STEP_REFERENCE, /* one node's reference kernel */
  STEP_COPY,      /* a memcpy between slots (outputs that alias others) */
} step_kind_t;

/* A reference kernel call with its tensors prebuilt: a run only points
 * their data at the slots. */
typedef struct ref_step {
  const ir_node_t *node;
  loom_tensor_t **in, **out;
  int32_t *in_slot, *out_slot;
  ref_scratch_t scratch; /* lent to the kernel, kept between runs */
} ref_step_t;

typedef struct step {
  step_kind_t kind;
  int32_t group;           /* index in the fusion plan, -1 for copies */
  loom_abi_group_t fn;     /* STEP_GENERATED */
  ref_step_t ref;          /* STEP_REFERENCE */
  int32_t copy_from, copy_to; /* STEP_COPY: slots */
  int64_t copy_bytes;
} step_t;

/* What one input accepts: exactly this dtype and shape. */
typedef struct guard {
  loom_dtype_t dtype;
  int rank;
  int64_t shape[LOOM_MAX_RANK];
  int32_t slot;
  void *staging; /* preallocated copy target for strided inputs */
} guard_t;

struct loom_executable {
  loom_graph_t *source;  /* the user's graph */
  loom_graph_t *graph;   /* after the passes (owned), or source */
  bool owns_graph;
  int64_t *syms;         /* symbol values the code is specialized to */
  fuse_plan_t plan;
  int32_t *order;        /* groups in schedule order */
  int32_t *slot_of_value;
  int n_slots;
  void **slots;
  int64_t *slot_bytes;
  mem_plan_t mem;
  void *arena;
  int64_t arena_bytes;
  int n_inputs, n_outputs;
  guard_t *inputs;
  guard_t *outputs;      /* dtype and shape each output binding must have */
  int32_t *output_slot;
  step_t *steps;
  int n_steps;
  cpu_module_t *module;
  char *source_text;     /* the generated C, for explain */
  char *passes_text;     /* the IR after the passes, for explain */
  core_pool_t *pool;
  loom_abi_t abi;
  bool interpreted;      /* fallback: run the source graph in the interpreter */
  int n_generated, n_reference;
  double compile_ms;
};

/* Process-wide compile counter (behind loom_stats_get). */
void rt_count_compile(void);

#endif
