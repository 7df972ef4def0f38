#include "core/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/status.h"

/* Spins before a worker sleeps: long enough to catch the next step of a
 * replay, short enough not to burn a core between runs. */
enum { SPIN_ROUNDS = 20000 };

struct core_pool {
  int n_threads;
  pthread_t *workers;
  /* The current loop, published before `generation` moves. */
  core_pool_fn fn;
  void *ctx;
  int64_t n, chunk;
  _Atomic int64_t next;     /* first index not yet claimed */
  _Atomic int pending;      /* workers still inside the current loop */
  _Atomic uint32_t generation; /* bumped per loop; futex word */
  _Atomic int sleepers;
  _Atomic int stop;
};

static void futex_wait(_Atomic uint32_t *word, uint32_t seen) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims chunks of the current loop until none are left. */
static void work(core_pool_t *p) {
  for (;;) {
    int64_t begin = atomic_fetch_add(&p->next, p->chunk);
    if (begin >= p->n) return;
    int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
    p->fn(p->ctx, begin, end);
  }
}

/* Waits until the generation moves past `seen`; returns the new one. */
static uint32_t await_generation(core_pool_t *p, uint32_t seen) {
  for (int i = 0; i < SPIN_ROUNDS; i++) {
    uint32_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
    if (g != seen) return g;
  }
  /* Sequentially consistent with the publisher's bump-then-check of
   * sleepers, so that one of the two always sees the other. */
  atomic_fetch_add(&p->sleepers, 1);
  uint32_t g;
  while ((g = atomic_load(&p->generation)) == seen)
    futex_wait(&p->generation, seen);
  atomic_fetch_sub(&p->sleepers, 1);
  return g;
}

static void *worker_main(void *arg) {
  core_pool_t *p = arg;
  uint32_t seen = 0;
  for (;;) {
    seen = await_generation(p, seen);
    if (atomic_load(&p->stop)) return NULL;
    work(p);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
  }
}

int core_default_threads(void) {
  const char *env = getenv("LOOM_NUM_THREADS");
  if (env && *env) {
    char *end;
    long n = strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 1024) return (int)n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

loom_status_t core_pool_create(int n_threads, core_pool_t **out) {
  *out = NULL;
  if (n_threads <= 0) n_threads = core_default_threads();
  core_pool_t *p = core_calloc(1, sizeof *p);
  if (!p) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a thread pool");
  p->n_threads = 1;
  p->workers = core_calloc((size_t)n_threads, sizeof *p->workers);
  if (!p->workers) {
    core_free(p);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a thread pool");
  }
  for (int i = 1; i < n_threads; i++) {
    if (pthread_create(&p->workers[i - 1], NULL, worker_main, p) != 0) {
      /* Fewer threads than asked is still a working pool. */
      break;
    }
    p->n_threads++;
  }
  *out = p;
  return LOOM_OK;
}

void core_pool_destroy(core_pool_t *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  futex_wake_all(&p->generation);
  for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
  core_free(p->workers);
  core_free(p);
}

int core_pool_threads(const core_pool_t *p) { return p ? p->n_threads : 1; }

void core_pool_for(core_pool_t *p, int64_t n, int64_t grain, core_pool_fn fn,
                   void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int threads = p ? p->n_threads : 1;
  /* Too little work to share: a wake-up costs more than it saves. */
  if (threads == 1 || n <= grain) {
    fn(ctx, 0, n);
    return;
  }
  int64_t chunks = (n + grain - 1) / grain;
  int64_t per = chunks / threads > 0 ? chunks / threads : 1;
  /* A few chunks per thread balance uneven work without much contention. */
  int64_t chunk = (per > 4 ? per / 4 : 1) * grain;
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->chunk = chunk;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
  atomic_fetch_add(&p->generation, 1);
  if (atomic_load(&p->sleepers) > 0) futex_wake_all(&p->generation);
  work(p);
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
    /* Workers finish within a chunk's time: spin, yielding now and then. */
    sched_yield();
  }
}
