/* The CPU back end behind the seam (backend.h): generated C compiled by
 * the system compiler into a module (codegen/, toolchain.c), run on a
 * thread pool through the ABI (abi.h) that offers generated code the
 * fast kernels (kernels/). Its files:
 *   backend_cpu.c  the be_backend_t: build, start, launch, runs, memory
 *   cpu_abi.c      the runtime side of the ABI (entries, conv modes)
 *   cpu_index_errors.c  index errors that generated code reports
 *   cpu_prepack.c  weights packed once: frozen ones at build, a caller's
 *                  stable ones per epoch (be_stable_t)
 *   cpu_launch.c   a group's launch: on the pool or alone (timed in the
 *                  first runs), index errors read after it */
#ifndef LOOM_BACKEND_CPU_BACKEND_CPU_H
#define LOOM_BACKEND_CPU_BACKEND_CPU_H

#include <stdatomic.h>

#include "backend/backend.h"
#include "backend/cpu/abi.h"
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/toolchain.h"
#include "core/pool.h"

extern const be_backend_t be_cpu;

/* How a group runs: on the pool, on the calling thread alone, or either
 * while its first launches are timed (cpu_launch.c). */
enum { CPU_SPLIT_POOL, CPU_SPLIT_ALONE, CPU_SPLIT_TIMING };

/* A group's function and its slot map (abi.h), side by side: a launch
 * reads one entry. */
typedef struct cpu_kernel {
  loom_abi_group_t fn;        /* NULL: the group has no generated code */
  const int32_t *map;         /* in the program's maps */
  bool checks;                /* it indexes (F_INDEX), so may report an
                                 index error: read the record after it */
  _Atomic uint8_t split;      /* CPU_SPLIT_* */
} cpu_kernel_t;

typedef struct cpu_split cpu_split_t;

struct be_program {
  const loom_graph_t *graph;  /* the request's (index errors name nodes) */
  const fuse_plan_t *plan;
  const int32_t *slot_of_value;
  const int64_t *syms;        /* the request's: the caller's, kept current */
  int n_slots;
  cpu_module_t *module;       /* NULL: nothing generated, or lost */
  /* The generated C, for explain, or NULL; when the module came through
   * the index, read from beside it when first asked (source_kept). */
  _Atomic(char *) source;
  bool source_kept;
  int64_t source_bytes;       /* its length, for the program's size */
  cpu_kernel_t *kernel;       /* per group */
  int32_t *maps;
  core_pool_t *pool;
  kern_conv_mode_t conv_mode; /* the conv algorithms options allow */
  loom_abi_t abi;             /* what every run starts from */
  void **packed_b;            /* frozen weights (cpu_prepack.c), or NULL */
  void **packed_w;
  cpu_split_t *split;         /* timings of the groups' first launches, or NULL */
};

/* One run's ABI: packed weights lent for it, its own index-error record. */
struct be_run {
  loom_abi_t abi;
  atomic_bool *index_error;   /* abi's record has a report (read per launch) */
  void **lent_b;              /* packed_b for a stable run (per slot pair) */
  int n_lent;
  int32_t lent[16];           /* entries of lent_b set for this run */
  /* While the program is timed whole (cpu_launch.c): this run's start
   * (0: none), its way and whether it counts. */
  int64_t trial_t0;
  bool trial_alone, trial_counts;
};

/* ---- cpu_launch.c ------------------------------------------------------------ */

/* be_backend_t.launch. */
loom_status_t cpu_launch(be_program_t *p, int32_t group, void *const *slots, const int64_t *syms,
                         be_run_t *r);
/* Sets every group to run on the pool, or with more than one thread, to
 * be timed first (LOOM_SPLIT may say otherwise). */
loom_status_t cpu_split_start(be_program_t *p);
void cpu_split_free(be_program_t *p);

/* ---- cpu_abi.c -------------------------------------------------------------- */

/* The conv algorithms o allows (its precise, else LOOM_PRECISE). */
kern_conv_mode_t cpu_conv_mode(const loom_compile_options_t *o);
/* p->abi for p's pool and conv mode, with no index-error record. */
void cpu_abi_init(be_program_t *p);
/* Gives abi an index-error record of its own. */
loom_status_t cpu_index_errors_attach(loom_abi_t *abi);
/* The flag of abi's record that says a report waits. */
atomic_bool *cpu_index_errors_flag(const loom_abi_t *abi);
/* After group's function ran with abi: the error it reported (and
 * forgets it), or OK. */
loom_status_t cpu_index_errors_take(const be_program_t *p, int32_t group, const loom_abi_t *abi);
void cpu_index_errors_free(loom_abi_t *abi);

/* ---- cpu_prepack.c ---------------------------------------------------------- */

/* Packs, once, the frozen weights (constants, parameters no assign
 * writes) of p's generated contractions, read from req->slots. */
loom_status_t cpu_prepack_frozen(be_program_t *p, const be_request_t *req);
void cpu_prepack_free(be_program_t *p);
/* be_backend_t.stable_use, stable, cache_new, cache_free. */
bool cpu_stable_use(const be_program_t *p, int32_t slot);
loom_status_t cpu_stable(be_program_t *p, be_run_t *run, void *const *slots,
                         const be_stable_t *st);
be_cache_t *cpu_cache_new(void);
void cpu_cache_free(be_cache_t *c);

#endif
