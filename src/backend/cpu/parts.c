/* A large module compiled as several translation units at once. Its
 * functions are independent (each group's text names only itself, the
 * ABI and the static helpers), so the source is cut between functions
 * into units of about equal size, each preceded by the shared prelude;
 * the units compile in parallel, one compiler process each (on threads
 * of this process that wait for them), and one more links the objects
 * into the shared object that the cache stores. Every process runs under
 * the time limit of its own input and is killed with its process group
 * at it, as a whole-module compile is (compiler.c). */
#include "backend/cpu/parts.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/compiler.h"
#include "core/alloc.h"
#include "core/env.h"
#include "core/status.h"

/* A unit of fewer bytes of functions than this costs more in the
 * compiler's fixed work (a process, the prelude's 14 KB: about 0.1 s)
 * and the link than it saves. */
#define UNIT_MIN_BYTES 16384

int cpu_parts_plan(const cpu_source_cuts_t *cuts, int64_t length, int jobs, int64_t *start) {
  int64_t body = length - cuts->prelude;
  int64_t most = body / UNIT_MIN_BYTES;
  int units = jobs < most ? jobs : (int)most;
  if (units > CPU_CC_MAX_INPUTS) units = CPU_CC_MAX_INPUTS;
  if (units <= 1 || cuts->n < 1) return 1;
  start[0] = cuts->prelude;
  int n = 1, c = 0;
  for (int k = 1; k < units; k++) {
    /* The cut nearest to an equal share, past the last one taken. */
    int64_t target = cuts->prelude + body * k / units;
    while (c < cuts->n && (cuts->at[c] <= start[n - 1] ||
                           (c + 1 < cuts->n && llabs(cuts->at[c + 1] - target) <=
                                                   llabs(cuts->at[c] - target))))
      c++;
    if (c == cuts->n || cuts->at[c] >= length) break;
    start[n++] = cuts->at[c];
  }
  start[n] = length;
  return n;
}

/* One unit's compile, on a thread of its own. */
typedef struct unit {
  const char *cc, *work_dir;
  char src[32], obj[32];
  double timeout_s;
  loom_status_t status;
  char error[1024]; /* the failure's message (the error is per thread) */
  core_env_t *env; /* the environment of the thread that started it */
  pthread_t thread;
  bool started;
} unit_t;

static void compile_unit(unit_t *u) {
  u->status = cpu_cc_compile_object(u->cc, u->work_dir, u->src, u->obj, u->timeout_s);
  if (u->status != LOOM_OK) snprintf(u->error, sizeof u->error, "%s", loom_last_error());
}

static void *unit_thread(void *arg) {
  unit_t *u = arg;
  core_env_enter(u->env);
  u->env = NULL;
  compile_unit(u);
  core_env_leave();
  return NULL;
}

static void unit_names(int i, char *src, char *obj) {
  snprintf(src, 32, "unit%d.c", i);
  snprintf(obj, 32, "unit%d.o", i);
}

loom_status_t cpu_parts_write(const char *work_dir, const char *source, int64_t prelude,
                              const int64_t *start, int n) {
  for (int i = 0; i < n; i++) {
    char name[32], obj[32], path[PATH_MAX];
    unit_names(i, name, obj);
    if (snprintf(path, sizeof path, "%s/%s", work_dir, name) >= (int)sizeof path)
      return loom_fail(LOOM_ERR_IO, "module cache: path too long in '%s'", work_dir);
    size_t body = (size_t)(start[i + 1] - start[i]);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(source, 1, (size_t)prelude, f) == (size_t)prelude &&
              fwrite(source + start[i], 1, body, f) == body;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) return loom_fail(LOOM_ERR_IO, "module cache: cannot write '%s'", path);
  }
  return LOOM_OK;
}

/* Starts every unit's compile (one on this thread if a thread cannot be
 * had), waits for all, and returns the first unit's failure. */
static loom_status_t compile_units(unit_t *units, int n) {
  for (int i = 0; i < n; i++) {
    units[i].env = core_env_hold();
    units[i].started = pthread_create(&units[i].thread, NULL, unit_thread, &units[i]) == 0;
    if (!units[i].started) core_env_release(units[i].env);
  }
  for (int i = 0; i < n; i++) {
    if (units[i].started) pthread_join(units[i].thread, NULL);
    else compile_unit(&units[i]);
  }
  for (int i = 0; i < n; i++)
    if (units[i].status != LOOM_OK) return loom_fail(units[i].status, "%s", units[i].error);
  return LOOM_OK;
}

loom_status_t cpu_parts_compile(const char *cc, const char *work_dir, int64_t prelude,
                                const int64_t *start, int n, const char *so) {
  unit_t *units = core_calloc((size_t)n, sizeof *units);
  if (!units) return loom_fail(LOOM_ERR_NOMEM, "C compiler '%s': out of memory", cc);
  const char *objs[CPU_CC_MAX_INPUTS];
  for (int i = 0; i < n; i++) {
    unit_t *u = &units[i];
    *u = (unit_t){.cc = cc, .work_dir = work_dir,
                  .timeout_s = cpu_cc_timeout((size_t)(prelude + start[i + 1] - start[i]))};
    unit_names(i, u->src, u->obj);
    objs[i] = u->obj;
  }
  loom_status_t s = compile_units(units, n);
  /* Linking takes a fraction of compiling: the limit of the smallest
   * source, to end a hang. */
  if (s == LOOM_OK) s = cpu_cc_link(cc, work_dir, objs, n, so, cpu_cc_timeout(0));
  core_free(units);
  return s;
}
