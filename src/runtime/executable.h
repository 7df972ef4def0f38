/* Executables: the compiled form of a graph. A run is one guard on the
 * bindings and a loop over prebuilt steps: the CPU twin of a CUDA Graph
 * replay. Storage is a table of slots (src/backend/cpu/abi.h): inputs and
 * outputs are bound per run, parameters and constants point at the
 * graph's tensors, intermediates at fixed offsets of one arena allocated
 * at compile time (a run that overlaps another uses the same offsets in an
 * arena of its own: lanes, below). */
#ifndef LOOM_RUNTIME_EXECUTABLE_H
#define LOOM_RUNTIME_EXECUTABLE_H

#include "backend/cpu/toolchain.h"
#include "core/pool.h"
#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"
#include "backend/cpu/kernels/gemm.h"
#include "kernels/ref.h"
#include "backend/cpu/abi.h"

typedef enum step_kind {
  STEP_GENERATED, /* a function of the compiled module */
  STEP_REFERENCE, /* one node's reference kernel */
  STEP_COPY,      /* a memcpy between slots (outputs that alias others) */
  STEP_CONTROL,   /* an if or loop node: executables of its subgraphs */
} step_kind_t;

typedef struct rt_control rt_control_t; /* src/runtime/control.c */

/* A reference kernel call with its tensors prebuilt: templates (dtype and
 * shape) that a run copies, pointing the copies at its slots. */
typedef struct ref_step {
  const ir_node_t *node;
  loom_tensor_t **in, **out;
  int32_t *in_slot, *out_slot;
  ref_scratch_t scratch; /* lent to the kernel in the executable's own
                            storage, kept between runs (lanes have theirs) */
} ref_step_t;

typedef struct step {
  step_kind_t kind;
  int32_t group;           /* index in the fusion plan, -1 for copies */
  loom_abi_group_t fn;     /* STEP_GENERATED, called with map */
  const int32_t *map;      /* STEP_GENERATED: the group's slots (abi.h), in
                              the executable's maps */
  ref_step_t ref;          /* STEP_REFERENCE */
  int32_t copy_from, copy_to; /* STEP_COPY: slots */
  rt_control_t *control;   /* STEP_CONTROL */
  int64_t copy_bytes;
} step_t;

/* Runtime symbols' state (src/runtime/symbols.c). */
typedef struct rt_symbols rt_symbols_t;

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
  int64_t *syms;         /* symbol values the code is specialized to, and
                            runtime symbols' values at the last run */
  rt_symbols_t *dyn;     /* runtime symbols; NULL when every size is fixed */
  fuse_plan_t plan;
  int32_t *order;        /* groups in schedule order */
  int32_t *slot_of_value;
  int n_slots;
  void **slots;
  int64_t *slot_bytes;
  mem_plan_t mem;
  void *arena;
  int64_t arena_bytes;   /* allocated (runtime symbols: >= mem.arena_bytes) */
  int n_inputs, n_outputs;
  guard_t *inputs;
  guard_t *outputs;      /* dtype and shape each output binding must have */
  int32_t *output_slot;
  step_t *steps;
  int n_steps;
  int32_t *maps;         /* the generated steps' slot maps (owned) */
  int n_kernels;         /* distinct generated functions the steps call */
  cpu_module_t *module;
  char *source_text;     /* the generated C, for explain */
  char *passes_text;     /* the IR after the passes, for explain */
  core_pool_t *pool;
  loom_abi_t abi;
  kern_conv_mode_t conv_mode; /* the conv algorithms allowed (options' precise) */
  void **packed_b;       /* freeze_params: [2 * slot + trans_b] a frozen
                            weight packed as a GEMM's B, or NULL (owned) */
  void **packed_w;       /* freeze_params: [slot] a frozen conv2d weight
                            packed as its GEMM's A, or NULL (owned) */
  bool interpreted;      /* fallback: run the source graph in the interpreter */
  loom_fallback_t fallback; /* why generated code was lost (rt_fallback_note) */
  char *fallback_reason;    /* the compiler's message, or NULL (owned) */
  int n_generated, n_reference;
  double compile_ms;
  struct rt_profile *profile; /* step timings (LOOM_LOG=steps), or NULL */
  struct rt_lanes *lanes; /* who runs now, and storage for overlapping runs */
};

/* ---- Runs from several threads (src/runtime/lanes.c) -----------------------
 * A run works in the executable's own storage (slots, arena, staging
 * buffers, reference steps' scratch, ABI with its index-error record), or,
 * when runs overlap, in a lane: a copy of that storage made on demand and
 * kept for later runs. Runs of executables that write state (assigns),
 * resize it (runtime symbols) or run subgraphs (control steps) take turns
 * on the executable's own storage instead. */

/* The storage of one run. */
typedef struct rt_run {
  void **slots;
  const loom_abi_t *abi;
  ref_scratch_t *scratch; /* per step; NULL: the steps' own */
  void **staging;         /* per input, made when first needed; NULL: the
                             guards' own */
} rt_run_t;

typedef struct rt_lane rt_lane_t;

/* Last step of loom_compile: decides whether runs may overlap, and keeps
 * what a lane copies (nothing has run yet). */
loom_status_t rt_lanes_init(loom_executable_t *e);
/* Starts a run: *lane is NULL for the executable's own storage (waited
 * for when runs take turns), else a lane to run in. */
loom_status_t rt_lanes_enter(loom_executable_t *e, rt_lane_t **lane);
/* The storage of a lane. */
rt_run_t *rt_lane_run(rt_lane_t *lane);
/* Ends the run started by rt_lanes_enter. */
void rt_lanes_leave(loom_executable_t *e, rt_lane_t *lane);
/* Readers of state that runs change (runtime symbols' sizes) wait for the
 * run in progress, and keep runs out until they let go. */
void rt_lanes_hold(const loom_executable_t *e);
void rt_lanes_drop(const loom_executable_t *e);
void rt_lanes_free(loom_executable_t *e);

/* ---- Fallback (src/runtime/executable.c) ---------------------------------- */

/* Records that e lost generated code, and why (the first loss is kept:
 * later ones follow from it). */
void rt_fallback_note(loom_executable_t *e, loom_fallback_t f, const char *reason);

/* ---- Step timings (src/runtime/profile.c) ---------------------------------- */

/* Flops of the contractions among nodes[0..n) of e's graph (ir_node_flops),
 * with e's symbol values when all are bound; -1 when a size is unknown. */
double rt_nodes_flops(const loom_executable_t *e, const int32_t *nodes, int64_t n);

typedef struct rt_profile rt_profile_t;
typedef loom_status_t (*rt_step_fn)(loom_executable_t *e, step_t *st);
/* Runs every step through run_step, adding each one's time to e's
 * profile (allocated at the first call). */
loom_status_t rt_profile_run(loom_executable_t *e, rt_step_fn run_step);
/* Logs (LOOM_LOG=steps) the steps by time per run, the slowest first. */
void rt_profile_report(const loom_executable_t *e);
void rt_profile_free(loom_executable_t *e);

/* ---- Index errors of generated code (src/runtime/index_error.c) ----------- */

typedef struct rt_index_errors rt_index_errors_t;
/* Sets e->abi's index_error and its record. */
loom_status_t rt_index_errors_init(loom_executable_t *e);
/* The same for abi (a lane's), with a record of its own. */
loom_status_t rt_index_errors_attach(loom_abi_t *abi);
/* After the generated step of e's group `group` run with abi: the error
 * it reported (and forgets it), or OK. */
loom_status_t rt_index_errors_take(const loom_executable_t *e, int32_t group,
                                   const loom_abi_t *abi);
void rt_index_errors_free(loom_abi_t *abi);

/* ---- Control-flow steps (src/runtime/control.c) ---------------------------- */

/* The step of if or loop node `node` of e->graph: each subgraph compiled
 * once, with options o, for the shapes the node sees. */
loom_status_t rt_control_build(loom_executable_t *e, int32_t node,
                               const loom_compile_options_t *o, rt_control_t **out);
/* Runs it on e's slots, deciding on the host which subgraph runs. */
loom_status_t rt_control_run(loom_executable_t *e, rt_control_t *c);
void rt_control_free(rt_control_t *c);

/* Process-wide compile counter (behind loom_stats_get). */
void rt_count_compile(void);

#endif
