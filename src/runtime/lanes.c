/* Runs of one executable from several threads.
 *
 * Runs of an executable that only reads its parameters may overlap: the
 * first takes the executable's own storage, and a run that finds it busy
 * takes a lane (a slot table over an arena of its own, staging buffers
 * and the back ends' run states: reference kernels' scratch, the CPU's
 * index-error record), made on demand
 * and kept for the runs after it. That is ONNX Runtime's contract for
 * concurrent Session::Run calls, each with its own memory: a server
 * thread per request needs no lock of its own, and an executable run by
 * one thread at a time never pays for a second arena.
 *
 * Runs of an executable that writes its parameters (assigns: a training
 * step) would race on them whatever storage they had, so they take turns
 * on the executable's own storage, each seeing the state the run before
 * it left, as calls one after another would. So do runs that resize the
 * executable (runtime symbols replan its arena), run subgraph
 * executables of their own (if/loop steps), or time their steps
 * (LOOM_LOG=steps keeps one profile). */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "runtime/executable.h"

struct rt_lane {
  rt_run_t run;
  void *arena;
  rt_lane_t *next; /* in the spare list */
};

typedef struct rt_lanes {
  pthread_mutex_t own;   /* held by the run in the executable's own storage */
  pthread_mutex_t spare_lock;
  rt_lane_t *spare;      /* lanes no run holds */
  bool overlap;          /* runs may overlap (else they take turns) */
  /* What a lane copies, kept before the first run (runs rebind inputs and
   * outputs in the executable's own table). */
  void **slots;
} rt_lanes_t;

/* Whether a run writes state that outlives it, or resizes the executable:
 * overlapping runs would race on it. */
static bool runs_take_turns(const loom_executable_t *e) {
  if (e->dyn) return true;
  const loom_graph_t *g = e->source;
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (ir_ops[g->nodes[i].op].flags & (F_SIDE_EFFECT | F_SUBGRAPH | F_COLLECTIVE)) return true;
  for (int i = 0; i < e->n_steps; i++)
    if (e->steps[i].kind == STEP_CONTROL) return true;
  return false;
}

loom_status_t rt_lanes_init(loom_executable_t *e) {
  rt_lanes_t *l = core_calloc(1, sizeof *l);
  if (!l) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  pthread_mutex_init(&l->own, NULL);
  pthread_mutex_init(&l->spare_lock, NULL);
  e->lanes = l;
  l->overlap = !runs_take_turns(e);
  if (!l->overlap || e->interpreted) return LOOM_OK; /* the interpreter needs no lane */
  l->slots = core_calloc((size_t)e->n_slots + 1, sizeof *l->slots);
  if (!l->slots) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  if (e->n_slots) memcpy(l->slots, e->slots, sizeof *l->slots * (size_t)e->n_slots);
  return LOOM_OK;
}

static void lane_free(const loom_executable_t *e, rt_lane_t *lane) {
  if (!lane) return;
  for (int i = 0; lane->run.staging && i < e->n_inputs; i++) core_free(lane->run.staging[i]);
  core_free(lane->run.staging);
  core_free(lane->run.slots);
  rt_arena_free(e, lane->arena);
  for (int k = 0; k < RT_PARTS; k++)
    if (lane->run.runs[k]) e->parts[k].backend->run_free(e->parts[k].program, lane->run.runs[k]);
  core_free(lane);
}

/* The lane's slots: the kept table, with the arena's slots moved to the
 * lane's arena (the same offsets). */
static void lane_slots(const loom_executable_t *e, rt_lane_t *lane) {
  const char *base = e->arena;
  for (int s = 0; s < e->n_slots; s++) {
    char *p = e->lanes->slots[s];
    bool in_arena = base && p >= base && p < base + e->arena_bytes;
    lane->run.slots[s] = in_arena ? (char *)lane->arena + (p - base) : p;
  }
}

static loom_status_t lane_new(const loom_executable_t *e, rt_lane_t **out) {
  rt_lane_t *lane = core_calloc(1, sizeof *lane);
  *out = NULL;
  if (!lane) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a run's storage");
  if (e->interpreted) { /* the interpreter keeps its storage per call: an empty lane */
    *out = lane;
    return LOOM_OK;
  }
  lane->run.slots = core_calloc((size_t)e->n_slots + 1, sizeof *lane->run.slots);
  lane->run.staging = core_calloc((size_t)e->n_inputs + 1, sizeof *lane->run.staging);
  bool ok = lane->run.slots && lane->run.staging;
  if (ok && e->arena_bytes > 0) {
    /* Zeroed as the executable's own arena was at compile time. */
    lane->arena = rt_arena_alloc(e, e->arena_bytes);
    ok = lane->arena != NULL;
  }
  loom_status_t s = ok ? LOOM_OK
                       : loom_fail(LOOM_ERR_NOMEM, "out of memory for a run's storage "
                                   "(an arena of %lld bytes)", (long long)e->arena_bytes);
  for (int k = 0; k < RT_PARTS && s == LOOM_OK; k++)
    if (e->parts[k].run)
      s = e->parts[k].backend->run_new(e->parts[k].program, &lane->run.runs[k]);
  if (s != LOOM_OK) {
    lane_free(e, lane);
    return s;
  }
  if (e->n_slots) lane_slots(e, lane);
  *out = lane;
  return LOOM_OK;
}

loom_status_t rt_lanes_enter(loom_executable_t *e, rt_lane_t **lane) {
  rt_lanes_t *l = e->lanes;
  *lane = NULL;
  if (!l) return loom_fail(LOOM_ERR_INVALID, "loom_executable_run: the executable is not "
                           "a finished compilation");
  if (!l->overlap || core_log_enabled(LOG_STEPS)) {
    pthread_mutex_lock(&l->own);
    return LOOM_OK;
  }
  if (pthread_mutex_trylock(&l->own) == 0) return LOOM_OK;
  pthread_mutex_lock(&l->spare_lock);
  *lane = l->spare;
  if (*lane) l->spare = (*lane)->next;
  pthread_mutex_unlock(&l->spare_lock);
  return *lane ? LOOM_OK : lane_new(e, lane);
}

rt_run_t *rt_lane_run(rt_lane_t *lane) { return &lane->run; }

void rt_lanes_leave(loom_executable_t *e, rt_lane_t *lane) {
  rt_lanes_t *l = e->lanes;
  if (!lane) {
    pthread_mutex_unlock(&l->own);
    return;
  }
  pthread_mutex_lock(&l->spare_lock);
  lane->next = l->spare;
  l->spare = lane;
  pthread_mutex_unlock(&l->spare_lock);
}

void rt_lanes_hold(const loom_executable_t *e) {
  if (e->lanes && e->dyn) pthread_mutex_lock(&e->lanes->own);
}

void rt_lanes_drop(const loom_executable_t *e) {
  if (e->lanes && e->dyn) pthread_mutex_unlock(&e->lanes->own);
}

void rt_lanes_free(loom_executable_t *e) {
  rt_lanes_t *l = e->lanes;
  if (!l) return;
  while (l->spare) {
    rt_lane_t *next = l->spare->next;
    lane_free(e, l->spare);
    l->spare = next;
  }
  core_free(l->slots);
  pthread_mutex_destroy(&l->own);
  pthread_mutex_destroy(&l->spare_lock);
  core_free(l);
  e->lanes = NULL;
}
