/* The executable cache's background compiles: a queue of jobs (an entry
 * and the builder of its graph) served by spec_workers threads. Jobs that
 * a caller needs now (rt_cache_get without wait) go to the front;
 * speculative ones (rt_cache_speculate) to the back. A caller that waits
 * for a job still queued takes it out and compiles it itself. */
#include <time.h>

#include "core/alloc.h"
#include "core/cancel.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/log.h"
#include "core/priority.h"
#include "core/status.h"
#include "trace/cache_internal.h"

static void queue_unlink(loom_cache_t *c, cache_job_t *j) {
  if (j->prev) j->prev->next = j->next;
  else c->queue_head = j->next;
  if (j->next) j->next->prev = j->prev;
  else c->queue_tail = j->prev;
  j->prev = j->next = NULL;
}

static void queue_push_front(loom_cache_t *c, cache_job_t *j) {
  j->prev = NULL;
  j->next = c->queue_head;
  if (c->queue_head) c->queue_head->prev = j;
  else c->queue_tail = j;
  c->queue_head = j;
}

static void queue_push_back(loom_cache_t *c, cache_job_t *j) {
  j->next = NULL;
  j->prev = c->queue_tail;
  if (c->queue_tail) c->queue_tail->next = j;
  else c->queue_head = j;
  c->queue_tail = j;
}

/* Under the lock: wakes rt_cache_drain when nothing is left to do. */
static void note_idle(loom_cache_t *c) {
  if (!c->queue_head && c->running == 0) pthread_cond_broadcast(&c->idle);
}

cache_job_t *cache_job_push(loom_cache_t *c, rt_entry_t *e, const rt_builder_t *builder,
                            bool speculative) {
  cache_job_t *j = core_calloc(1, sizeof *j);
  if (!j) {
    loom_fail(LOOM_ERR_NOMEM, "out of memory queueing a compile");
    return NULL;
  }
  j->entry = e;
  j->builder = *builder;
  j->speculative = speculative;
  j->env = core_env_hold();
  if (speculative) queue_push_back(c, j);
  else queue_push_front(c, j);
  e->job = j;
  pthread_cond_signal(&c->work);
  return j;
}

cache_job_t *cache_job_take(loom_cache_t *c, rt_entry_t *e) {
  cache_job_t *j = e->job;
  if (!j) return NULL;
  queue_unlink(c, j);
  e->job = NULL;
  note_idle(c);
  return j;
}

void cache_job_free(cache_job_t *j) {
  if (!j) return;
  core_env_release(j->env);
  core_free(j);
}

void cache_job_promote(loom_cache_t *c, rt_entry_t *e) {
  cache_job_t *j = e->job;
  if (!j || c->queue_head == j) return;
  queue_unlink(c, j);
  j->speculative = false;
  queue_push_front(c, j);
}

/* Under the lock, which it releases while the job runs: runs the job at
 * the queue's head on the calling thread. */
static void run_head(loom_cache_t *c) {
  cache_job_t *j = c->queue_head;
  queue_unlink(c, j);
  j->entry->job = NULL;
  c->running++;
  pthread_mutex_unlock(&c->lock);
  core_env_enter(j->env);
  j->env = NULL;
  c->run_job(c, j->entry, &j->builder, j->speculative);
  core_env_leave();
  cache_job_free(j);
  pthread_mutex_lock(&c->lock);
  c->running--;
  note_idle(c);
}

static void *worker_main(void *arg) {
  loom_cache_t *c = arg;
  core_thread_background(); /* its compiles: callers interpret meanwhile */
  core_cancel_watch(&c->abandon);
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (!c->queue_head && !c->stop) pthread_cond_wait(&c->work, &c->lock);
    if (c->stop) break;
    run_head(c);
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

loom_status_t cache_workers_start(loom_cache_t *c, int n, cache_job_fn run, cache_drop_fn drop) {
  c->run_job = run;
  c->drop_job = drop;
  if (n <= 0) return LOOM_OK;
  c->workers = core_calloc((size_t)n, sizeof *c->workers);
  if (!c->workers)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for %d compile workers", n);
  for (int i = 0; i < n; i++) {
    if (pthread_create(&c->workers[i], NULL, worker_main, c) != 0) {
      /* Fewer workers still work; none means callers compile. */
      core_warn("started %d of %d background compile workers", i, n);
      break;
    }
    c->n_workers++;
  }
  return LOOM_OK;
}

void cache_workers_stop(loom_cache_t *c) {
  pthread_mutex_lock(&c->lock);
  c->stop = true;
  atomic_store_explicit(&c->abandon, true, memory_order_release);
  pthread_cond_broadcast(&c->work);
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < c->n_workers; i++) pthread_join(c->workers[i], NULL);
  /* Workers are gone: what is still queued is dropped, its entries stay
   * pending for loom_cache_destroy to free. */
  for (cache_job_t *j = c->queue_head, *next; j; j = next) {
    next = j->next;
    j->entry->job = NULL;
    c->drop_job(&j->builder);
    cache_job_free(j);
  }
  c->queue_head = c->queue_tail = NULL;
  core_free(c->workers);
  c->workers = NULL;
  c->n_workers = 0;
}

bool rt_cache_has_workers(const loom_cache_t *c) { return c && c->n_workers > 0; }

/* The caller compiles what is still queued itself, at its own priority
 * and beside the workers, and waits only for the jobs they run; from
 * the deadline on (seconds < 0: none) it starts no job and waits no
 * more, leaving the rest to the workers, and a compile of its own that
 * is still running then is abandoned (core/cancel.h). */
void rt_cache_drain_for(loom_cache_t *c, double seconds) {
  if (!c) return;
  int64_t deadline = seconds < 0 ? INT64_MAX : core_now_ns() + (int64_t)(seconds * 1e9);
  core_cancel_deadline(deadline == INT64_MAX ? 0 : deadline);
  pthread_mutex_lock(&c->lock);
  while ((c->queue_head || c->running > 0) && core_now_ns() < deadline) {
    if (c->queue_head) {
      run_head(c);
      continue;
    }
    if (deadline == INT64_MAX) {
      pthread_cond_wait(&c->idle, &c->lock);
      continue;
    }
    /* Timed waits in short slices: the condition reads the wall clock. */
    struct timespec slice;
    clock_gettime(CLOCK_REALTIME, &slice);
    slice.tv_nsec += 50 * 1000 * 1000;
    if (slice.tv_nsec >= 1000000000L) slice.tv_sec++, slice.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&c->idle, &c->lock, &slice);
  }
  pthread_mutex_unlock(&c->lock);
  core_cancel_deadline(0);
}

void rt_cache_drain(loom_cache_t *c) { rt_cache_drain_for(c, -1); }
