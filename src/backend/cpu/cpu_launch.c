/* Launches of a group: its function called with the run's ABI, on the
 * pool or on the calling thread alone, and the index-error record read
 * after it when it indexes.
 *
 * Which steps run on one thread: splitting a step over the pool pays only
 * where its work outweighs the wake-ups, the barrier and the traffic of a
 * second core: a small GEMM whose epilogue is an optimizer update, say,
 * runs slower on two threads than on one. What pays depends on the step's
 * shapes and on the machine, so each step of a program with more than one
 * thread is timed in its first runs: after one run to warm up, it runs
 * alternately on the pool and on the calling thread alone (the ABI's pool
 * NULL), SAMPLES times each, and from then on the faster way. The first
 * runs compute the same values either way, up to the rounding of sums
 * whose order the split changes. LOOM_LOG=steps names the steps that stay
 * on one thread, with both timings. LOOM_SPLIT=pool keeps every step on
 * the pool (the same bits in every run), LOOM_SPLIT=alone runs every
 * step alone (for tests).
 *
 * A short program is then timed whole: the per-step timing runs its pool
 * samples close together, while in use a program's runs come between the
 * host's other work (a trace's cuts and recording), the pool's workers
 * fall asleep, and the first steps on the pool of each run pay their
 * wake-up. So a program whose steps alone add up to under TRIAL_MOST_NS,
 * with some step left on the pool, runs blocks of runs with the steps'
 * choices and blocks with every step alone, alternately, and keeps every
 * step alone where that is faster in every round (a block each way, by
 * their fastest runs: a shared machine's slow minutes fall on both; a
 * way clearly faster in the first rounds decides at once): an LSTM
 * cell's backward at 2 threads ran 35 us with its steps' choices, 21
 * alone. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "core/clock.h"
#include "core/alloc.h"
#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "passes/fuse.h"

enum { SAMPLES = 3 };
/* Alone only when clearly faster, and shorter than the pool's workers
 * spin before they sleep: a longer step alone lets them fall asleep, and
 * the next step on the pool pays their wake-up (the MLP's weight-gradient
 * steps, 7-30% faster alone, made its training step 6-12% slower). */
static const double MARGIN = 0.8;
static const int64_t MOST_ALONE_NS = 15000;

/* Whole-program trials: TRIAL_ROUNDS rounds of a block of TRIAL_BLOCK
 * runs each way, the first run of a block not counted (the workers'
 * state is the other way's). */
enum { TRIAL_BLOCK = 3, TRIAL_ROUNDS = 3, TRIAL_SAMPLES = TRIAL_ROUNDS * (TRIAL_BLOCK - 1) };
static const int64_t TRIAL_MOST_NS = 1000000;
/* After r + 1 rounds, a way faster by TRIAL_MARGIN[r] in each ends the
 * trial (a program run once a step spends fewer steps being timed: the
 * GNN's runs with their steps' choices took 2.5-4x as long as alone);
 * after the last, all alone only if that was faster by the last margin. */
static const double TRIAL_MARGIN[TRIAL_ROUNDS] = {0.5, 0.7, 0.9};

typedef struct split_timing {
  int launches;    /* launches so far; the first warms up */
  int64_t best[2]; /* fastest launch on the pool [0] and alone [1], ns */
  uint8_t choice;  /* CPU_SPLIT_POOL or _ALONE, once decided */
} split_timing_t;

struct cpu_split {
  pthread_mutex_t lock; /* runs in lanes may launch one group at once */
  split_timing_t *timing; /* per group */
  int decided;            /* groups timed to the end */
  int launched;           /* groups with code (the others are not launched) */
  bool any;               /* a group was launched */
  int32_t first, last;    /* groups a run launches first and last */
  _Atomic bool trial;     /* the program is being timed whole */
  int runs;               /* trial runs so far */
  int n[2];               /* trial runs counted: with the choices [0], alone [1] */
  int64_t ns[2][TRIAL_SAMPLES];
};

/* How every group starts, by LOOM_SPLIT. */
static uint8_t first_split(const be_program_t *p) {
  const char *v = core_getenv("LOOM_SPLIT");
  if (core_pool_threads(p->pool) == 1 || (v && strcmp(v, "pool") == 0)) return CPU_SPLIT_POOL;
  return v && strcmp(v, "alone") == 0 ? CPU_SPLIT_ALONE : CPU_SPLIT_TIMING;
}

loom_status_t cpu_split_start(be_program_t *p) {
  int n = p->plan->n_groups;
  uint8_t split = first_split(p);
  for (int i = 0; i < n; i++) atomic_store_explicit(&p->kernel[i].split, split, memory_order_relaxed);
  bool tune = split == CPU_SPLIT_TIMING;
  if (!tune) return LOOM_OK;
  p->split = core_calloc(1, sizeof *p->split);
  if (p->split) p->split->timing = core_calloc((size_t)n + 1, sizeof *p->split->timing);
  if (!p->split || !p->split->timing) {
    cpu_split_free(p);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory starting a program's threads");
  }
  pthread_mutex_init(&p->split->lock, NULL);
  for (int i = 0; i < n; i++) p->split->launched += p->kernel[i].fn != NULL;
  return LOOM_OK;
}

void cpu_split_free(be_program_t *p) {
  if (!p->split) return;
  if (p->split->timing) pthread_mutex_destroy(&p->split->lock);
  core_free(p->split->timing);
  core_free(p->split);
  p->split = NULL;
}

/* Calls group's function with r's ABI, then reads the index-error record
 * if it indexes. */
static loom_status_t call(be_program_t *p, int32_t group, void *const *slots,
                          const int64_t *syms, be_run_t *r) {
  const cpu_kernel_t *k = &p->kernel[group];
  k->fn(slots, k->map, syms, &r->abi);
  if (!k->checks || !atomic_load_explicit(r->index_error, memory_order_acquire)) return LOOM_OK;
  return cpu_index_errors_take(p, group, &r->abi);
}

/* The group on r's calling thread alone: r's ABI without the pool for the
 * call (r is this run's own). */
static loom_status_t call_alone(be_program_t *p, int32_t group, void *const *slots,
                                const int64_t *syms, be_run_t *r) {
  r->abi.pool = NULL;
  r->abi.threads = 1;
  loom_status_t s = call(p, group, slots, syms, r);
  r->abi.pool = p->abi.pool;
  r->abi.threads = p->abi.threads;
  return s;
}

/* Every group's way: alone, or each its choice. */
static void set_splits(be_program_t *p, bool alone) {
  for (int g = 0; g < p->plan->n_groups; g++)
    atomic_store_explicit(&p->kernel[g].split,
                          alone ? CPU_SPLIT_ALONE : p->split->timing[g].choice,
                          memory_order_relaxed);
}

/* Under the lock, once every group is timed: a program under
 * TRIAL_MOST_NS with a step on the pool is timed whole. How its runs
 * follow each other decides, which the per-step timing does not see: a
 * trace's cell, with the host's work between its runs, finds the pool's
 * workers asleep and runs fastest alone (an LSTM cell at 2 threads ran
 * 1.5x slower than at 1 with its larger steps on the pool); a loop's body,
 * run back to back while they spin, runs fastest with its steps' choices
 * (the 2-layer LSTM's loops over 50 steps: 3.0 ms a run against 4.1 ms
 * alone at 2 threads). */
static void decide_program(be_program_t *p) {
  int n = p->plan->n_groups;
  int64_t total = 0;
  bool pool = false;
  for (int g = 0; g < n; g++) {
    total += p->split->timing[g].best[1];
    pool |= p->split->timing[g].launches > 0 && p->split->timing[g].choice == CPU_SPLIT_POOL;
  }
  if (!pool)
    core_log(LOG_STEPS, "a program of %d steps runs on 1 thread: %.3f ms, each step faster "
             "alone", n, (double)total / 1e6);
  else if (total < TRIAL_MOST_NS) {
    for (int g = 0; g < n; g++) /* every launch through split_launch */
      atomic_store_explicit(&p->kernel[g].split, CPU_SPLIT_TIMING, memory_order_relaxed);
    atomic_store_explicit(&p->split->trial, true, memory_order_release);
  }
}

/* Keeps the faster way once both have SAMPLES timings. */
static void decide(be_program_t *p, int32_t group, split_timing_t *t) {
  bool alone = t->best[1] > 0 && t->best[0] > 0 && t->best[1] < t->best[0] * MARGIN &&
               t->best[1] <= MOST_ALONE_NS;
  t->choice = alone ? CPU_SPLIT_ALONE : CPU_SPLIT_POOL;
  atomic_store_explicit(&p->kernel[group].split, t->choice, memory_order_relaxed);
  if (++p->split->decided == p->split->launched) decide_program(p);
  if (!alone || !core_log_enabled(LOG_STEPS)) return;
  char what[512];
  fuse_group_name(p->graph, p->plan, group, "", what, sizeof what);
  core_log(LOG_STEPS, "%s runs on 1 thread: %.3f ms, against %.3f ms on %d", what,
           (double)t->best[1] / 1e6, (double)t->best[0] / 1e6, p->abi.threads);
}

/* The fastest run way `alone` counted in round r. */
static int64_t round_best(const cpu_split_t *sp, int alone, int r) {
  int64_t best = INT64_MAX;
  for (int i = r * (TRIAL_BLOCK - 1); i < (r + 1) * (TRIAL_BLOCK - 1); i++)
    if (sp->ns[alone][i] < best) best = sp->ns[alone][i];
  return best;
}

/* Under the lock, after each run counted: once a round is counted, the
 * way faster by its margin in every round so far, if either was; after
 * the last round, every step alone if that was, else each its choice.
 * Too many runs that did not count end the trial with the choices. */
static void decide_trial(be_program_t *p) {
  cpu_split_t *sp = p->split;
  int rounds = (sp->n[0] < sp->n[1] ? sp->n[0] : sp->n[1]) / (TRIAL_BLOCK - 1);
  bool given_up = sp->runs > 8 * TRIAL_BLOCK * TRIAL_ROUNDS;
  if (rounds == 0 && !given_up) return;
  bool all_alone = !given_up && rounds > 0, all_choices = rounds < TRIAL_ROUNDS;
  double margin = rounds > 0 ? TRIAL_MARGIN[rounds - 1] : 1;
  int64_t choices = 0, alone = 0; /* the rounds' sums, for the log */
  for (int r = 0; r < rounds; r++) {
    int64_t c = round_best(sp, 0, r), a = round_best(sp, 1, r);
    all_alone &= a < c * margin;
    all_choices &= c < a * margin;
    choices += c;
    alone += a;
  }
  if (!given_up && rounds < TRIAL_ROUNDS && !all_alone && !all_choices) return;
  set_splits(p, all_alone);
  atomic_store_explicit(&sp->trial, false, memory_order_release);
  if (rounds > 0)
    core_log(LOG_STEPS, "a program of %d steps runs %s: %.3f ms a run alone, against %.3f ms "
             "with its steps' ways on %d (runs timed whole)", p->plan->n_groups,
             all_alone ? "on 1 thread" : "with its steps' ways", (double)alone / rounds / 1e6,
             (double)choices / rounds / 1e6, p->abi.threads);
}

/* A launch while the program is timed whole: a run from its first group's
 * launch to the end of its last group's, in the way of its block. */
static loom_status_t trial_launch(be_program_t *p, int32_t group, void *const *slots,
                                  const int64_t *syms, be_run_t *r) {
  cpu_split_t *sp = p->split;
  if (group == sp->first) {
    pthread_mutex_lock(&sp->lock);
    r->trial_alone = (sp->runs / TRIAL_BLOCK) % 2 == 1;
    r->trial_counts = sp->runs % TRIAL_BLOCK != 0;
    sp->runs++;
    pthread_mutex_unlock(&sp->lock);
    r->trial_t0 = core_now_ns();
  }
  bool alone = r->trial_alone || sp->timing[group].choice == CPU_SPLIT_ALONE;
  loom_status_t s = alone ? call_alone(p, group, slots, syms, r) : call(p, group, slots, syms, r);
  if (group != sp->last || !r->trial_t0) return s;
  int64_t ns = core_now_ns() - r->trial_t0;
  r->trial_t0 = 0;
  pthread_mutex_lock(&sp->lock);
  int *n = &sp->n[r->trial_alone];
  if (atomic_load_explicit(&sp->trial, memory_order_relaxed) && r->trial_counts && s == LOOM_OK &&
      *n < TRIAL_SAMPLES)
    sp->ns[r->trial_alone][(*n)++] = ns;
  if (atomic_load_explicit(&sp->trial, memory_order_relaxed)) decide_trial(p);
  pthread_mutex_unlock(&sp->lock);
  return s;
}

/* A launch of a group that runs alone or is being timed. */
static loom_status_t split_launch(be_program_t *p, int32_t group, void *const *slots,
                                  const int64_t *syms, be_run_t *r) {
  if (atomic_load_explicit(&p->kernel[group].split, memory_order_relaxed) == CPU_SPLIT_ALONE)
    return call_alone(p, group, slots, syms, r);
  cpu_split_t *sp = p->split;
  if (atomic_load_explicit(&sp->trial, memory_order_acquire))
    return trial_launch(p, group, slots, syms, r);
  pthread_mutex_lock(&sp->lock);
  int n = sp->timing[group].launches++;
  if (!sp->any) { /* the first launch: a run's first group */
    sp->any = true;
    sp->first = group;
  }
  if (group > sp->last) sp->last = group;
  pthread_mutex_unlock(&sp->lock);
  /* Launch 0 warms up on the pool; then the pool and alone take turns. */
  bool alone = n > 0 && n <= 2 * SAMPLES && n % 2 == 0;
  int64_t t0 = core_now_ns();
  loom_status_t s = alone ? call_alone(p, group, slots, syms, r) : call(p, group, slots, syms, r);
  int64_t ns = core_now_ns() - t0;
  if (n == 0 || n > 2 * SAMPLES || s != LOOM_OK) return s;
  pthread_mutex_lock(&sp->lock);
  split_timing_t *t = &sp->timing[group];
  if (t->best[alone] == 0 || ns < t->best[alone]) t->best[alone] = ns;
  if (n == 2 * SAMPLES) decide(p, group, t);
  pthread_mutex_unlock(&sp->lock);
  return s;
}

/* The replay's inner loop calls this once per step: one entry read and
 * the call, with nothing kept across it (~2 ns a step with the loop,
 * bench/overhead.c). */
loom_status_t cpu_launch(be_program_t *p, int32_t group, void *const *slots, const int64_t *syms,
                         be_run_t *r) {
  cpu_kernel_t *k = &p->kernel[group];
  if (atomic_load_explicit(&k->split, memory_order_relaxed) != CPU_SPLIT_POOL)
    return split_launch(p, group, slots, syms, r);
  if (k->checks) return call(p, group, slots, syms, r);
  k->fn(slots, k->map, syms, &r->abi);
  return LOOM_OK;
}
