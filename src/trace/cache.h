/* The executable cache behind loom_cache_t: compiled segments keyed by
 * GraphKey, bounded by bytes (LRU), shared between threads, with
 * background workers that compile speculatively.
 *
 * An entry owns its graph and its executable. A lookup that hits takes a
 * reference (rt_entry_release gives it back), so an eviction never frees
 * an executable that another thread is running. While a key is being
 * compiled its entry is "pending": a second request for the key never
 * starts a second compile; it waits (rt_cache_get with wait) or is told
 * to interpret (without wait). */
#ifndef LOOM_RUNTIME_CACHE_H
#define LOOM_RUNTIME_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/trace.h"

/* One input of a key: its dtype and dims as the shape policy sees them
 * (a symbolic dim is RT_DIM_ANY; a bucketed dim is its bucket, marked in
 * bucket so that it is told from an exact size). Dims and marks past
 * rank are ignored. */
#define RT_DIM_ANY (-1)

typedef struct rt_key_input {
  loom_dtype_t dtype;
  int rank;
  int64_t dims[LOOM_MAX_RANK];
  uint8_t bucket[LOOM_MAX_RANK]; /* 1: dims[d] is a bucket (never RT_DIM_ANY) */
  /* Bit d: dims[d] is exact only until it turns symbolic (an automatic
   * dim): the recompile budget, which counts structures and policies,
   * does not tell its sizes apart. Not part of the key's identity. */
  uint8_t provisional;
} rt_key_input_t;

/* GraphKey = (structure, input types under the policy, path signature).
 * site names where the segment comes from (for the recompile limit and
 * the reasons: misses with the same site are recompiles). hash combines
 * everything and is what the table indexes. */
typedef struct rt_key {
  uint64_t structure;
  uint64_t path;
  uint64_t site;
  bool eager; /* an eager entry's key (rt_cache_eager sets it) */
  int n_inputs;
  const rt_key_input_t *inputs; /* copied by the cache on insert */
  uint64_t hash;                /* rt_key_finish fills it */
} rt_key_t;

/* Fills key->hash from the other fields. */
void rt_key_finish(rt_key_t *key);

typedef struct rt_cache_entry rt_entry_t;

/* Builds the graph to compile for a key, on the calling thread or on a
 * worker: *graph becomes the entry's (the cache destroys it with the
 * entry). options are the compile options to use. ctx is the builder's;
 * free_ctx (may be NULL) is called once the cache is done with it.
 * rt_cache_get and rt_cache_speculate take ctx in every case: free_ctx
 * runs after the compile (options may point into ctx), or at once when
 * nothing is built (hit, pending, failed, over the limit, error). A
 * graph left in *graph by a failing build is destroyed by the cache. */
typedef struct rt_builder {
  loom_status_t (*build)(void *ctx, loom_graph_t **graph,
                         loom_compile_options_t *options);
  void (*free_ctx)(void *ctx);
  void *ctx;
} rt_builder_t;

/* The reference-holding lookup: a ready entry for key, or NULL. Counts a
 * hit or, when NULL, nothing (rt_cache_get counts the miss). */
rt_entry_t *rt_cache_lookup(loom_cache_t *c, const rt_key_t *key);

typedef enum rt_get_result {
  RT_READY,     /* *out is a ready entry (a reference is held) */
  RT_PENDING,   /* another thread compiles it; not waited for */
  RT_FAILED,    /* the compile failed: interpret (the failure is cached) */
  RT_OVER_LIMIT /* the site passed its recompile limit: interpret */
} rt_get_result_t;

/* Lookup, and on a miss compile with builder (on this thread when wait,
 * else by a worker while the caller interprets). A miss logs its reason
 * under LOOM_LOG=recompiles: the part of the key that differed from the
 * nearest entry of the same site. recompile_limit 0: none.
 * Every lookup that does not return RT_READY at once counts as a miss.
 * A build or compile that fails, or an executable that would only run
 * the interpreter (no C compiler), is cached as RT_FAILED. The limit
 * counts the keys rt_cache_get compiled for the site (speculative
 * compiles are not counted): a new key past it gets RT_OVER_LIMIT, and
 * one warning per site is printed. Without workers, wait=false compiles
 * on the calling thread too. With RT_FAILED and RT_OVER_LIMIT,
 * loom_last_error() says why. */
loom_status_t rt_cache_get(loom_cache_t *c, const rt_key_t *key,
                           const rt_builder_t *builder, bool wait,
                           int recompile_limit, rt_get_result_t *result,
                           rt_entry_t **out);

/* rt_cache_get without a builder, for a caller whose builder costs (a
 * segment's description copies its cone): for a key the cache holds, or
 * a new one its site's limit refuses, the same as rt_cache_get, with
 * *held true; for a key that would need the builder, *held false and
 * nothing done or counted, so that rt_cache_get follows. */
loom_status_t rt_cache_get_held(loom_cache_t *c, const rt_key_t *key, bool wait,
                                int recompile_limit, rt_get_result_t *result, rt_entry_t **out,
                                bool *held);

/* Queues a speculative compile of key (nothing if present or pending,
 * or if the cache has no workers). */
loom_status_t rt_cache_speculate(loom_cache_t *c, const rt_key_t *key,
                                 const rt_builder_t *builder);

/* rt_cache_speculate for a key that will be needed (a training forward's
 * backward): the compile counts against its site's recompile limit, as
 * the rt_cache_get it spares would have (recompile_limit 0: none). */
loom_status_t rt_cache_ahead(loom_cache_t *c, const rt_key_t *key, const rt_builder_t *builder,
                             int recompile_limit);

/* Whether key's site has compiled recompile_limit keys through
 * rt_cache_get (0: no limit), so that key, new, would not compile:
 * speculation on its behalf (its backward) would spend what the limit
 * saves. The budget counts structures and policies, not sizes: keys
 * that differ only in the sizes of provisional dims count once, and
 * the first symbolic key of each structure at a site compiles past the
 * limit (a dim that turned symbolic after the site spent its budget on
 * exact sizes would otherwise stay in the fallback for good, and it
 * covers every size after). */
bool rt_cache_site_full(loom_cache_t *c, const rt_key_t *key, int recompile_limit);
/* (rt_cache_ahead's compiles count too.) */

/* The eager entry of key: the builder's graph with no executable, for
 * a segment that runs in the fallback interpreter (a trace that does not
 * compile, a key whose compile failed or is still pending, a site past
 * its recompile limit). Built once, on the calling thread (a second
 * caller waits for it), then kept like a compiled entry: shared between
 * traces, counted against the budget, evicted least recently used. Its
 * key is key with `eager` set, so that it lives beside the compiled entry
 * of the same key; it counts no hit, miss or compile, nor against the
 * recompile limit. *out holds a reference (rt_entry_release). A build
 * that fails is cached as failed and its error returned. Takes ctx as
 * rt_cache_get does. */
loom_status_t rt_cache_eager(loom_cache_t *c, const rt_key_t *key,
                             const rt_builder_t *builder, rt_entry_t **out);

/* The ready eager entry of key, a reference held, or NULL (then
 * rt_cache_eager builds it, or says why it failed). */
rt_entry_t *rt_cache_eager_held(loom_cache_t *c, const rt_key_t *key);

/* Whether key has an entry in c (ready, pending or failed). */
bool rt_cache_holds(loom_cache_t *c, const rt_key_t *key);

/* Whether key has an entry in c (ready, pending or failed), or was
 * compiled before by this process or an earlier one (its module may be
 * on disk): a lookup of it would not start a compile from nothing. */
bool rt_cache_has_key(loom_cache_t *c, const rt_key_t *key);
/* Whether key has an entry in c that a lookup missed before (its compile
 * had not ended, or it failed): a miss of it again is no new key. */
bool rt_cache_key_missed(loom_cache_t *c, const rt_key_t *key);

/* Whether c has workers, so that work a caller does not wait for can
 * run beside it (without them, rt_cache_get compiles on the caller). */
bool rt_cache_has_workers(const loom_cache_t *c);

/* Returns once no compile is queued or running: the caller compiles what
 * is queued itself and waits for what the workers run. */
void rt_cache_drain(loom_cache_t *c);
/* The same for at most seconds (< 0: no bound); a job the caller took
 * may run past them. What is left goes on in the workers. */
void rt_cache_drain_for(loom_cache_t *c, double seconds);

loom_executable_t *rt_entry_executable(rt_entry_t *e);
/* Counts a run of e that a trace found without a lookup (its hot path):
 * a hit of e's that the cache's lookups never saw. Lock-free. */
void rt_entry_count_stitched(rt_entry_t *e);
loom_graph_t *rt_entry_graph(rt_entry_t *e);
void rt_entry_release(loom_cache_t *c, rt_entry_t *e);
/* Runs e's executable as rt_executable_run_bound does (b NULL: as
 * loom_executable_run; b binds a trace's weights as stable storage, or
 * says the caller matched the bindings). Runs of one entry from several
 * threads overlap as the executable's runs do (runtime/lanes.c), but for
 * an executable of runtime sizes, whose runs take turns under the
 * entry's lock: an arena that its runs regrew is counted against the
 * budget when the entry is released. */
typedef struct rt_binding rt_binding_t; /* runtime/executable.h */
loom_status_t rt_entry_run(rt_entry_t *e, int n_inputs, loom_tensor_t *const *inputs,
                           int n_outputs, loom_tensor_t *const *outputs,
                           const rt_binding_t *b);
/* Appends the cache's counters, its keys (one line each, from the
 * listing loom_cache_list_keys gives: cache_keys.c) and its recent
 * recompile reasons to text. */
struct core_text;
loom_status_t rt_cache_describe(const loom_cache_t *c, struct core_text *text);

#endif
