/* Per-step timings of an executable, for finding the steps that dominate
 * a run or do not scale with threads. With LOOM_LOG=steps every run times
 * each step; destroying the executable logs the steps by total time. */
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "runtime/executable.h"

struct rt_profile {
  int64_t runs;
  int64_t *ns;  /* per step, summed over runs */
  int64_t *min; /* per step, the fastest run (robust to a noisy machine) */
};

double rt_nodes_flops(const loom_executable_t *e, const int32_t *nodes, int64_t n) {
  /* Symbols are evaluated only when all have values (an unbound one
   * would leave an error message behind a call that succeeds). */
  const int64_t *syms = e->syms;
  for (int k = 0; syms && k < e->graph->n_symbols; k++)
    if (syms[k] < 0) syms = NULL;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    double f = ir_node_flops(e->graph, &e->graph->nodes[nodes ? nodes[i] : i], syms);
    if (f < 0) return -1;
    sum += f;
  }
  return sum;
}

loom_status_t rt_profile_run(loom_executable_t *e, rt_step_fn run_step) {
  if (!e->profile) {
    e->profile = core_calloc(1, sizeof *e->profile);
    if (e->profile) {
      e->profile->ns = core_calloc((size_t)e->n_steps + 1, sizeof(int64_t));
      e->profile->min = core_calloc((size_t)e->n_steps + 1, sizeof(int64_t));
    }
    if (!e->profile || !e->profile->ns || !e->profile->min) {
      rt_profile_free(e);
      return loom_fail(LOOM_ERR_NOMEM, "out of memory for the step timings of LOOM_LOG=steps");
    }
  }
  rt_profile_t *p = e->profile;
  for (int i = 0; i < e->n_steps; i++) {
    int64_t t0 = core_now_ns();
    LOOM_TRY(run_step(e, &e->steps[i]));
    int64_t t = core_now_ns() - t0;
    p->ns[i] += t;
    if (p->runs == 0 || t < p->min[i]) p->min[i] = t;
  }
  p->runs++;
  return LOOM_OK;
}

typedef struct timed {
  int64_t ns;
  int step;
} timed_t;

static int by_time(const void *a, const void *b) {
  int64_t x = ((const timed_t *)a)->ns, y = ((const timed_t *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* "g12 reduction [max sub exp sum div] f32[8, 4, 128, 128]". */
static void describe(const loom_executable_t *e, const step_t *st, char *buf, size_t size) {
  if (st->kind == STEP_COPY) {
    snprintf(buf, size, "copy %lld bytes", (long long)st->copy_bytes);
    return;
  }
  const fuse_group_t *grp = &e->plan.groups[st->group];
  int n = fuse_group_name(e->graph, &e->plan, st->group,
                          rt_step_is_reference(e, st) ? " (reference)" : "", buf, size);
  if (n > 0 && (size_t)n < size) n += snprintf(buf + n, size - (size_t)n, " ");
  if (n > 0 && (size_t)n < size && grp->n_outputs > 0)
    ir_type_str(e->graph, &e->graph->values[grp->outputs[0]].type, buf + n, size - (size_t)n);
}

/* A contraction step's GFLOP/s over ns nanoseconds, 7 wide; blanks for
 * other steps. */
static void rate_at(const loom_executable_t *e, const step_t *st, int64_t ns, char *buf,
                    size_t size) {
  snprintf(buf, size, "%7s", "");
  if (st->kind == STEP_COPY || ns <= 0) return;
  const fuse_group_t *grp = &e->plan.groups[st->group];
  double f = rt_nodes_flops(e, grp->nodes, grp->n_nodes);
  if (f > 0) snprintf(buf, size, "%7.1f", f / (double)ns);
}

void rt_profile_report(const loom_executable_t *e) {
  const rt_profile_t *p = e->profile;
  if (!p || p->runs == 0) return;
  timed_t *order = core_malloc(sizeof(timed_t) * (size_t)(e->n_steps + 1));
  if (!order) return;
  int64_t total = 0, total_min = 0;
  for (int i = 0; i < e->n_steps; i++) {
    order[i] = (timed_t){p->ns[i], i};
    total += p->ns[i];
    total_min += p->min[i];
  }
  qsort(order, (size_t)e->n_steps, sizeof *order, by_time);
  double flops = e->graph ? rt_nodes_flops(e, NULL, e->graph->n_nodes) : -1;
  char rate[64] = "";
  if (flops > 0 && total > 0)
    snprintf(rate, sizeof rate, ", %.1f GFLOP/s in contractions",
             flops * (double)p->runs / (double)total);
  core_log(LOG_STEPS, "%d steps, %lld runs, %.3f ms per run (sum of the fastest: %.3f) on %d threads%s",
           e->n_steps, (long long)p->runs, (double)total / 1e6 / (double)p->runs,
           (double)total_min / 1e6, rt_threads(e), rate);
  core_log(LOG_STEPS, "    mean  fastest  share  GFLOP/s (at the fastest)");
  for (int r = 0; r < e->n_steps; r++) {
    int i = order[r].step;
    char what[512], gf[16];
    describe(e, &e->steps[i], what, sizeof what);
    rate_at(e, &e->steps[i], p->min[i], gf, sizeof gf);
    core_log(LOG_STEPS, "%8.3f %8.3f %5.1f%% %s  step %3d %s",
             (double)p->ns[i] / 1e6 / (double)p->runs, (double)p->min[i] / 1e6,
             total ? 100.0 * (double)p->ns[i] / (double)total : 0.0, gf, i, what);
  }
  core_free(order);
}

void rt_profile_free(loom_executable_t *e) {
  if (!e->profile) return;
  core_free(e->profile->ns);
  core_free(e->profile->min);
  core_free(e->profile);
  e->profile = NULL;
}
