/* The runtime's thread pool: persistent workers that split index ranges.
 * Executables share one pool per thread count (core_pool_acquire), so
 * that a replay pays no thread start-up, a process runs the workers its
 * thread counts ask for and not a set per executable, and the next
 * executable's loop finds the workers still spinning from the last one's;
 * a caller that waits also works (no thread sits idle while the caller
 * blocks). Workers spin briefly before sleeping, because the
 * steps of a replay arrive microseconds apart. A loop ends when its last
 * chunk does: the caller never waits for a worker that took no chunk (one
 * still waking up, or descheduled on a busy machine). */
#ifndef LOOM_CORE_POOL_H
#define LOOM_CORE_POOL_H

#include <stdint.h>

#include "loom/loom.h"

typedef struct core_pool core_pool_t;

/* Runs indices [begin, end) of a parallel loop. */
typedef void (*core_pool_fn)(void *ctx, int64_t begin, int64_t end);

/* A pool of n_threads threads in all, the caller included (n_threads - 1
 * workers). n_threads <= 0: LOOM_NUM_THREADS, else the number of CPUs. */
loom_status_t core_pool_create(int n_threads, core_pool_t **out);
void core_pool_destroy(core_pool_t *pool);
/* The process's pool of n_threads threads (<= 0: the default), shared with
 * every other holder of that count; core_pool_release gives it back, and
 * the last holder's release ends its workers. A pool that got fewer
 * threads than asked is the caller's own. */
loom_status_t core_pool_acquire(int n_threads, core_pool_t **out);
void core_pool_release(core_pool_t *pool);
int core_pool_threads(const core_pool_t *pool);

/* Calls fn over [0, n) in chunks of at least `grain` indices, spread over
 * the pool, and returns when every chunk is done. Safe from several
 * threads and from inside fn: the pool runs one loop at a time, and a
 * call that finds it busy runs its whole loop on the calling thread. */
void core_pool_for(core_pool_t *pool, int64_t n, int64_t grain,
                   core_pool_fn fn, void *ctx);

/* Threads from LOOM_NUM_THREADS, or the CPUs this process may use. */
int core_default_threads(void);

#endif
