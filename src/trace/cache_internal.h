/* The executable cache's inside, shared by cache.c (table, LRU, lookups,
 * compiles) and spec_worker.c (the background compile queue). Every field
 * below `lock` is guarded by it. */
#ifndef LOOM_RUNTIME_CACHE_INTERNAL_H
#define LOOM_RUNTIME_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/env.h"
#include "trace/cache.h"

typedef enum entry_state {
  ENTRY_PENDING, /* a compile is queued or running */
  ENTRY_READY,   /* exe is usable */
  ENTRY_FAILED,  /* the compile failed: callers interpret */
} entry_state_t;

typedef struct cache_job cache_job_t;

struct rt_cache_entry {
  rt_key_t key;             /* key.inputs points at inputs */
  rt_key_input_t *inputs;   /* owned copy */
  entry_state_t state;
  int refs;                 /* callers running it, and waiters */
  loom_graph_t *graph;      /* owned; destroyed after exe */
  loom_executable_t *exe;
  int64_t bytes;            /* counted against the budget once published */
  /* The arena counted in bytes, and the one the executable holds after
   * its last rt_entry_run (runtime symbols regrow it). */
  int64_t arena_counted;
  _Atomic int64_t arena_now;
  double compile_ms;
  char *error;              /* ENTRY_FAILED: why */
  loom_status_t status;     /* ENTRY_FAILED: the build's status (eager entries) */
  /* For the listing (cache_keys.c): lookups that found it ready; runs a
   * trace found without a lookup (rt_entry_count_stitched, lock-free);
   * lookups that did not find it ready (the first made it); made by
   * rt_cache_speculate. */
  int64_t hits;
  _Atomic int64_t stitched;
  int64_t misses;
  bool speculative;
  /* compiled before, by this process or an earlier one (cache_journal.c):
   * a tiered lookup has a free worker load it, else loads it itself */
  bool built_before;
  cache_job_t *job;         /* queued and not started, else NULL */
  pthread_mutex_t run_lock; /* runs of an exe of runtime sizes take turns (arena_now) */
  rt_entry_t *bucket_next;
  rt_entry_t *lru_prev, *lru_next;   /* published entries, newest first */
  rt_entry_t *site_prev, *site_next; /* entries of one site, newest first */
};

/* A call site: how many keys rt_cache_get compiled for it (the
 * recompile limit), whether its warning was printed, its entries. */
typedef struct cache_site {
  uint64_t site;
  int compiles;       /* distinct budget identities counted (cache.c) */
  uint64_t *counted; /* those identities */
  int64_t n_counted, cap_counted;
  bool warned;
  bool used; /* slot taken in the open-addressed table */
  rt_entry_t *entries;
} cache_site_t;

struct cache_job {
  rt_entry_t *entry;
  rt_builder_t builder;
  bool speculative; /* from rt_cache_speculate (stats.spec_compiles) */
  core_env_t *env;  /* the environment when queued, which its compile reads */
  cache_job_t *prev, *next;
};

/* The queue runs what the cache gives it: the workers call back into the
 * cache through these, so that the queue depends on nothing of it. */
typedef void (*cache_job_fn)(loom_cache_t *c, rt_entry_t *e, const rt_builder_t *builder,
                             bool speculative);
typedef void (*cache_drop_fn)(const rt_builder_t *builder);

#define CACHE_REASONS 16
#define CACHE_REASON_LEN 240

struct loom_cache {
  pthread_mutex_t lock;
  pthread_cond_t ready; /* an entry left ENTRY_PENDING */
  pthread_cond_t work;  /* a job was queued, or the workers must stop */
  pthread_cond_t idle;  /* no job queued or running */
  int64_t budget;
  rt_entry_t **buckets;
  int64_t n_buckets, n_in_table;
  rt_entry_t *lru_head, *lru_tail;
  cache_site_t *sites;
  int64_t n_sites, cap_sites;
  cache_job_t *queue_head, *queue_tail;
  int running;          /* jobs being compiled by workers */
  bool stop;
  /* Set when the workers stop: the compiles they run are abandoned (their
   * compilers killed) rather than waited for (core/cancel.h). */
  _Atomic bool abandon;
  pthread_t *workers;
  int n_workers;
  cache_job_fn run_job;   /* what a worker does with a job (cache.c's) */
  cache_drop_fn drop_job; /* what becomes of a job never run */
  loom_cache_stats_t stats;
  char reasons[CACHE_REASONS][CACHE_REASON_LEN]; /* ring of recent ones */
  int64_t n_reasons;
};

/* ---- cache.c, for the workers ---- */

/* Builds and compiles e's graph outside the lock, then publishes e
 * (ready or failed) and wakes its waiters. Calls builder's free_ctx. */
void cache_compile_entry(loom_cache_t *c, rt_entry_t *e,
                         const rt_builder_t *builder, bool speculative);
/* Under the lock: e for key, or NULL. */
rt_entry_t *cache_find(loom_cache_t *c, const rt_key_t *key);
/* Under the lock: a new pending entry for key in the table (NULL: out of
 * memory, with the error set). */
rt_entry_t *cache_insert_pending(loom_cache_t *c, const rt_key_t *key);
/* Calls the builder's free_ctx, if any. */
void cache_builder_done(const rt_builder_t *builder);

/* ---- cache_keys.c, for the reasons ---- */

/* Dim d of in as the listing writes it: "any" (symbolic), "b128" (a
 * bucket) or "64" (exact), in buf (CACHE_DIM_TEXT bytes); returns buf. */
#define CACHE_DIM_TEXT 24
const char *cache_dim_text(const rt_key_input_t *in, int d, char *buf);

/* ---- spec_worker.c ---- */

/* Starts n worker threads (fewer if the system refuses some) that run each
 * job with run, and drop with drop those still queued when they stop. */
loom_status_t cache_workers_start(loom_cache_t *c, int n, cache_job_fn run, cache_drop_fn drop);
/* Stops and joins the workers; drops the queued jobs (free_ctx called),
 * leaving their entries pending for the caller to free. */
void cache_workers_stop(loom_cache_t *c);
/* Under the lock: queues a compile of e (front: needed now; back:
 * speculative). NULL when out of memory. */
cache_job_t *cache_job_push(loom_cache_t *c, rt_entry_t *e,
                            const rt_builder_t *builder, bool speculative);
/* Under the lock: takes e's queued job out of the queue (a caller that
 * waits compiles it itself); returns it, for the caller to free. */
cache_job_t *cache_job_take(loom_cache_t *c, rt_entry_t *e);
void cache_job_free(cache_job_t *j);
/* Under the lock: moves e's queued job to the front (needed now). */
void cache_job_promote(loom_cache_t *c, rt_entry_t *e);

/* cache_journal.c: whether a key (its hash) was compiled before, in
 * this process or an earlier one; noting one that compiled. */
bool cache_journal_has(uint64_t key_hash);
void cache_journal_note(uint64_t key_hash);

#endif
