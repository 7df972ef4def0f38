/* The backend seam: what the neutral compiler, runtime and tracer know of
 * a back end. A back end is one be_backend_t (a table of functions, like
 * IREE's HAL driver or a ggml backend), registered in registry.c; the
 * compiler asks it what it can fuse, hands it a fusion plan with a memory
 * plan already made, and gets back an opaque program whose kernels the
 * executable launches, one step at a time, by group index. Nothing above
 * this header knows whether a kernel is generated C in a shared object,
 * a CUDA module, or a reference kernel: docs/backends.md says what each
 * function must do, and how to add a back end.
 *
 * Storage is a table of slots (as in src/backend/cpu/abi.h, which the CPU
 * back end's code reads): slot s is one buffer of the back end's device,
 * an input or output bound per run, a parameter or constant, or an offset
 * of the arena the runtime allocates through alloc(). A kernel reads and
 * writes its group's values through the slot table it is launched with,
 * so one program serves every run and every lane (runs that overlap each
 * have a slot table and arena of their own, and a be_run_t). */
#ifndef LOOM_BACKEND_BACKEND_H
#define LOOM_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "kernels/ref.h"
#include "loom/loom.h"
#include "passes/fuse.h"

typedef struct be_program be_program_t; /* a built plan: the back end's own */
typedef struct be_run be_run_t;         /* one run's state (a lane's) */
typedef struct be_cache be_cache_t;     /* work kept across runs (be_stable_t) */

/* A symbol's value in be_request_t.sym_values when it is known only at
 * run time: code over it reads syms[k] at launch. */
#define BE_SYM_RUNTIME (-2)

/* What the compiler hands a back end to build. Everything is the
 * caller's and outlives the program (the program may keep pointers to
 * graph, plan, slot_of_value and syms, which the caller keeps current:
 * the executable destroys the program first). */
typedef struct be_request {
  const loom_graph_t *graph;    /* after the passes */
  const fuse_plan_t *plan;      /* made with this back end's fuse caps */
  /* Per group: build it (a kernel step will launch it). NULL: say which
   * groups the back end could build, as for a trial. Alias, assign and
   * if/loop groups are never wanted: the runtime runs them. */
  const bool *want;
  const int32_t *slot_of_value; /* per value: its slot, or -1 (it lives
                                   only inside its group) */
  int n_slots;
  /* Per slot: its storage where it is fixed before any run (parameters,
   * constants, the arena's intermediates), NULL where bound per run
   * (inputs, outputs): what prepacking may read. */
  void *const *slots;
  /* Per symbol of graph: its value, or for a runtime symbol a nominal
   * size (runtime symbols exist when sym_runtime is not NULL; their true
   * values come with each launch, and resize() says when they change). */
  const int64_t *syms;
  const bool *sym_runtime;      /* per symbol, or NULL */
  const loom_compile_options_t *options; /* use_cc, freeze_params, precise
                                           (NULL for a trial) */
  /* The target's eager kernels (be_backend_t.eager), for the reference
   * back end running the nodes the target did not build: tried before a
   * node's reference kernel. NULL: none. */
  bool (*eager)(ref_call_t *c, loom_status_t *status);
  /* Only say which groups would be built (fill generated), build
   * nothing: rt_sym_split_groups asks this before the memory plan. */
  bool trial;
} be_request_t;

/* What a build made. The caller allocates generated (plan->n_groups). */
typedef struct be_result {
  bool *generated;        /* per group: the program has a kernel for it */
  int n_kernels;          /* distinct kernels behind the generated groups */
  /* A build that lost its code (no C compiler, a failed compile, use_cc
   * 0) still succeeds, with every generated[] false, a program (which may
   * keep the source for explain), lost set and lost_reason (the
   * back end's message; the caller frees it with core_free). */
  loom_fallback_t lost;
  char *lost_reason;
} be_result_t;

/* Storage a caller promises unchanged while an epoch lasts (a trace's
 * parameters between optimizer steps, bound as inputs), so that a back
 * end may keep work derived from it across runs and executables (packed
 * GEMM weights), keyed by the storage's address. */
typedef struct be_stable {
  be_cache_t *cache;   /* made by this back end's cache_new */
  uint64_t epoch;      /* the caller bumps it whenever such storage may change */
  const bool *slot;    /* per slot of the program: holds such storage this run */
} be_stable_t;

/* Process-wide counters of a back end's toolchain (loom_stats_t). */
typedef struct be_stats {
  int64_t cc_invocations, disk_hits, disk_rebuilds;
} be_stats_t;

typedef struct be_backend {
  const char *name;      /* the target's name: "cpu", "ref" */
  loom_device_t device;  /* where its slots' storage lives */
  /* What fusion may form for it (fuse.h). A back end without fused
   * kernels gives caps whose supports() says no: every node is then a
   * FUSE_REFERENCE group, which build() still runs when wanted. */
  const fuse_caps_t *fuse;
  /* Whether it generates code for op at all (for some dtypes and shapes;
   * fuse->supports decides per node): what `loom ops` reports. */
  bool (*generates)(ir_op_t op);

  /* ---- Compile time ----------------------------------------------------- */
  /* Builds the wanted groups it can (a trial only fills generated; *out
   * stays NULL). A group it cannot build is left to the reference back
   * end (one node) or the interpreter (a fused group). Errors other than
   * a lost build (out of memory, a bad plan) fail the compile. */
  loom_status_t (*build)(const be_request_t *req, be_result_t *res, be_program_t **out);
  /* Readies a built program to launch: its threads (0: LOOM_NUM_THREADS,
   * else the CPUs available). Called once, before run_new. */
  loom_status_t (*start)(be_program_t *p, int threads);
  /* Threads its kernels use (1 for a back end without a pool). */
  int (*threads)(const be_program_t *p);
  /* The runtime symbols' values changed (syms holds them): kernels whose
   * shapes were prebuilt take the new ones. May be NULL. */
  loom_status_t (*resize)(be_program_t *p, const int64_t *syms);
  /* What explain prints: the program's source, or NULL; *where names its
   * compiled form ("not compiled" when there is none). May be NULL. */
  const char *(*source)(const be_program_t *p, const char **where);
  /* Bytes the program holds beyond the executable (a loaded module):
   * what freeing a cache entry gives back. */
  int64_t (*bytes)(const be_program_t *p);
  void (*destroy)(be_program_t *p);

  /* ---- Run time ----------------------------------------------------------
   * Launches and runs of one be_run_t are one thread's at a time; several
   * be_run_t of one program may launch at once (lanes). */
  /* A run's state (a copy of what kernels need that a run changes: the
   * CPU's ABI with its index-error record). */
  loom_status_t (*run_new)(be_program_t *p, be_run_t **out);
  void (*run_free)(be_program_t *p, be_run_t *run);
  /* Runs group's kernel over slots, with syms the symbols' values (the
   * runtime ones this run's). Returns once its effects are ordered before
   * the next launch on run (a device back end may queue: sync waits). An
   * error the kernel detects (an index out of range) comes back here,
   * with the message the reference kernel would give. */
  loom_status_t (*launch)(be_program_t *p, int32_t group, void *const *slots,
                          const int64_t *syms, be_run_t *run);
  /* Waits for the launches on run: after it, outputs may be read. NULL
   * for a back end whose launches finish before they return (the CPU's):
   * a run then pays no call for it. */
  loom_status_t (*sync)(be_program_t *p, be_run_t *run);
  /* Whether stable storage in slot would serve the program (the CPU: a
   * generated matmul reads it as its B operand). Asked once per input at
   * compile time, so that runs whose stable storage would serve nothing
   * skip stable() (a hint costs tens of ns a run). May be NULL. */
  bool (*stable_use)(const be_program_t *p, int32_t slot);
  /* stable for the run about to start on run (slots: its slot table), or
   * NULL once it ended (forget what was lent to it). May be NULL. */
  loom_status_t (*stable)(be_program_t *p, be_run_t *run, void *const *slots,
                          const be_stable_t *stable);
  be_cache_t *(*cache_new)(void);
  void (*cache_free)(be_cache_t *c);

  /* ---- Memory ------------------------------------------------------------
   * Buffers of the device: the arena and its lanes' copies. alloc gives
   * zeroed storage (the arena's first contents) or NULL. */
  void *(*alloc)(int64_t bytes);
  void (*free)(void *p);
  /* Copies between host memory and a buffer of the device (dst or src an
   * address inside one alloc'd buffer, or a slot's storage). */
  loom_status_t (*to_host)(void *host, const void *dev, int64_t bytes);
  loom_status_t (*from_host)(void *dev, const void *host, int64_t bytes);

  /* ---- Eager ------------------------------------------------------------
   * One node run on host tensors by a kernel that exists before any
   * compile (a library GEMM, a vectorized loop): what the fallback
   * interpreter runs where it can (rt_interpret), under a reference
   * kernel's contract (kernels/ref.h), except that the outputs arrive
   * with their elements unset: a kernel that takes the node writes every
   * one. True when it ran the node, with *status its result; false when
   * it has no kernel for the node's op, dtypes, shapes or attributes
   * (the reference kernel runs instead, on zeroed outputs), having
   * written nothing.
   * Results may differ from the reference kernel's by the rounding of
   * f32 arithmetic, as compiled code's do. May be NULL. */
  bool (*eager)(ref_call_t *c, loom_status_t *status);

  /* Its toolchain's counters, added into out. May be NULL. */
  void (*stats)(be_stats_t *out);
  /* The instruction set its kernels run with on this machine ("avx512",
   * "avx2", "portable"), so that a figure can say what produced it. May
   * be NULL (none to name). */
  const char *(*isa)(void);
} be_backend_t;

/* ---- The registry (registry.c) ------------------------------------------ */

/* The back end named target (NULL: "cpu"), or NULL. */
const be_backend_t *be_find(const char *target);
/* The registered back ends, n of them (registration order). */
const be_backend_t *const *be_list(int *n);
/* "cpu, ref": the registered names, for an error message. */
void be_names(char *buf, size_t size);
/* Adds a back end (tests: one that counts launches); fails when the
 * table is full or the name is taken. Not thread-safe against compiles
 * running at the same time. */
loom_status_t be_register(const be_backend_t *b);
void be_unregister(const be_backend_t *b);
/* The reference back end: kernels for what a target did not build. */
const be_backend_t *be_reference(void);
/* Sums every back end's stats. */
void be_stats(be_stats_t *out);

#endif
