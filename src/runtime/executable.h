/* Executables: the compiled form of a graph. A run is one guard on the
 * bindings and a loop over prebuilt steps: the CPU twin of a CUDA Graph
 * replay. Storage is a table of slots (src/backend/backend.h): inputs and
 * outputs are bound per run, parameters and constants point at the
 * graph's tensors, intermediates at fixed offsets of one arena allocated
 * at compile time (a run that overlaps another uses the same offsets in an
 * arena of its own: lanes, below). Kernels are the back ends' programs,
 * held opaquely and launched by group. */
#ifndef LOOM_RUNTIME_EXECUTABLE_H
#define LOOM_RUNTIME_EXECUTABLE_H

#include "backend/backend.h"
#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"

typedef enum step_kind {
  STEP_KERNEL,    /* a group's kernel, launched through its back end */
  STEP_COPY,      /* a memcpy between slots (outputs that alias others) */
  STEP_CONTROL,   /* an if or loop node: executables of its subgraphs */
} step_kind_t;

typedef struct rt_control rt_control_t; /* src/runtime/control.c */

/* A back end's part of an executable: the program it built for some
 * groups, and the state of the executable's own run (lanes have theirs). */
typedef struct rt_part {
  const be_backend_t *backend;
  be_program_t *program;
  be_run_t *run;
} rt_part_t;

/* The target's part, and the reference back end's for the single-node
 * groups the target did not build. */
#define RT_PARTS 2

typedef struct step {
  step_kind_t kind;
  int32_t group;           /* index in the fusion plan, -1 for copies */
  int32_t part;            /* STEP_KERNEL: e->parts[part] launches it, */
  be_program_t *program;   /* with its program and launch, kept here: the */
  loom_status_t (*launch)(be_program_t *, int32_t, void *const *, const int64_t *,
                          be_run_t *); /* replay reads one step */
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
  bool stable_use; /* stable storage bound here would serve the target
                      (be_backend_t.stable_use) */
} guard_t;

struct loom_executable {
  loom_graph_t *source;  /* the user's graph, held (ir_graph_hold) */
  loom_graph_t *graph;   /* after the passes (owned), or source */
  bool owns_graph;
  int64_t *syms;         /* symbol values the code is specialized to, and
                            runtime symbols' values at the last run */
  rt_symbols_t *dyn;     /* runtime symbols; NULL when every size is fixed */
  fuse_plan_t plan;
  int32_t *order;        /* groups in schedule order */
  bool *in_place_groups; /* per group: its result written in place by its
                            operands' producers, so no step runs it
                            (compiler/concat_place.h) */
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
  int n_kernels;         /* distinct kernels the generated steps launch */
  rt_part_t parts[RT_PARTS]; /* [0]: the target's (its backend set from the
                            start of compilation); unused ones zero */
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
 * buffers, the back ends' run states), or,
 * when runs overlap, in a lane: a copy of that storage made on demand and
 * kept for later runs. Runs of executables that write state (assigns),
 * resize it (runtime symbols) or run subgraphs (control steps) take turns
 * on the executable's own storage instead. */

/* The storage of one run. */
typedef struct rt_run {
  void **slots;
  be_run_t *runs[RT_PARTS]; /* per part: the back end's state for the run */
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

/* Value v's shape with e's symbol values (e->syms) put in. */
loom_status_t rt_value_shape(const loom_executable_t *e, int32_t v, int64_t *shape);

typedef struct rt_profile rt_profile_t;
typedef loom_status_t (*rt_step_fn)(loom_executable_t *e, step_t *st);
/* Runs every step through run_step, adding each one's time to e's
 * profile (allocated at the first call). */
loom_status_t rt_profile_run(loom_executable_t *e, rt_step_fn run_step);
/* Logs (LOOM_LOG=steps) the steps by time per run, the slowest first. */
void rt_profile_report(const loom_executable_t *e);
void rt_profile_free(loom_executable_t *e);

/* ---- Back ends (src/runtime/parts.c, executable.c) ------------------------- */

/* Work a back end keeps across runs of stable storage (be_stable_t): its
 * cache, made by the first target that asks, and the caller's epoch. */
typedef struct rt_stable {
  be_cache_t *cache;
  const be_backend_t *owner; /* the back end whose cache it is */
  uint64_t epoch;            /* bumped whenever stable storage may change */
} rt_stable_t;
/* How a caller of rt_executable_run_bound binds a run. */
typedef struct rt_binding {
  /* Inputs marked in stable_input (per input; NULL: none) are bound to
   * storage unchanged while stable's epoch lasts. */
  rt_stable_t *stable;
  const bool *stable_input;
  /* The caller has matched the inputs' dtypes, ranks and sizes against
   * the guards and made the outputs contiguous at theirs (a stitched
   * replay, whose key is the executable's): the guard is not checked
   * again. Ignored where the guard binds runtime symbols. */
  bool matched;
} rt_binding_t;
/* executable.c: loom_executable_run bound as b says (NULL: as plain). */
loom_status_t rt_executable_run_bound(loom_executable_t *e, int n_inputs,
                                      loom_tensor_t *const *inputs, int n_outputs,
                                      loom_tensor_t *const *outputs, const rt_binding_t *b);
void rt_stable_free(rt_stable_t *st);

/* parts.c: whether step st runs on the reference back end (a "reference"
 * step in info and explain, else a "generated" one). */
bool rt_step_is_reference(const loom_executable_t *e, const step_t *st);
/* Threads the target's kernels use (1 without a program). */
int rt_threads(const loom_executable_t *e);
/* The target's allocator: storage for an arena of bytes (zeroed), or NULL. */
void *rt_arena_alloc(const loom_executable_t *e, int64_t bytes);
void rt_arena_free(const loom_executable_t *e, void *arena);

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
