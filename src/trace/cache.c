/* The GraphKey executable cache (trace/cache.h): a hash table of entries
 * keyed by rt_key_t, an LRU list bounded by a byte budget, a table of call
 * sites for the recompile limit and the recompile reasons, and the
 * compile of one entry. The background queue is in spec_worker.c.
 *
 * One mutex guards everything; it is never held while a graph is built,
 * compiled or destroyed, nor while a log line is written, so a hit costs
 * two short critical sections (lookup, release). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/text.h"
#include "ir/ir.h"
#include "trace/cache_internal.h"
#include "runtime/executable.h"

#define DEFAULT_BUDGET ((int64_t)1 << 30)
#define FIRST_BUCKETS 64
#define FIRST_SITES 16

static double now_ms(void) { return (double)core_now_ns() / 1e6; }

/* ---- Keys ------------------------------------------------------------- */

/* MurmurHash3's 64-bit finalizer: every input bit reaches every output
 * bit, so masking the low bits for a bucket is safe. */
static uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

static uint64_t combine(uint64_t h, uint64_t v) {
  return mix64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

void rt_key_finish(rt_key_t *key) {
  if (!key) return;
  uint64_t h = combine(combine(combine(0, key->structure), key->path), key->site);
  h = combine(h, (uint64_t)key->n_inputs | (uint64_t)key->eager << 32);
  for (int i = 0; i < key->n_inputs && key->inputs; i++) {
    const rt_key_input_t *in = &key->inputs[i];
    uint64_t buckets = 0; /* 0 for exact and symbolic dims: their hash is unchanged */
    for (int d = 0; d < in->rank && d < LOOM_MAX_RANK; d++)
      buckets |= (uint64_t)(in->bucket[d] != 0) << d;
    h = combine(h, (uint64_t)in->dtype | (uint64_t)in->rank << 8 | buckets << 16);
    for (int d = 0; d < in->rank && d < LOOM_MAX_RANK; d++) h = combine(h, (uint64_t)in->dims[d]);
  }
  key->hash = h;
}

/* key's identity for the recompile budget: its hash but for the sizes of
 * provisional dims. */
static uint64_t budget_id(const rt_key_t *key) {
  uint64_t h = combine(key->hash, 0xb0d9e7);
  for (int i = 0; i < key->n_inputs; i++) {
    const rt_key_input_t *in = &key->inputs[i];
    if (in->rank <= 0 || !(in->provisional & ((1u << in->rank) - 1))) continue;
    h = combine(combine(0, key->structure), key->path);
    for (int j = 0; j < key->n_inputs; j++) {
      in = &key->inputs[j];
      h = combine(h, (uint64_t)in->dtype | (uint64_t)in->rank << 8);
      for (int d = 0; d < in->rank; d++)
        h = combine(h, in->provisional >> d & 1 ? 0xa070 : (uint64_t)in->dims[d]);
    }
    break;
  }
  return h;
}

static bool input_equal(const rt_key_input_t *a, const rt_key_input_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d] || a->bucket[d] != b->bucket[d]) return false;
  return true;
}

static bool key_equal(const rt_key_t *a, const rt_key_t *b) {
  if (a->hash != b->hash || a->structure != b->structure || a->path != b->path ||
      a->site != b->site || a->eager != b->eager || a->n_inputs != b->n_inputs)
    return false;
  for (int i = 0; i < a->n_inputs; i++)
    if (!input_equal(&a->inputs[i], &b->inputs[i])) return false;
  return true;
}

static loom_status_t key_check(const rt_key_t *key, const char *fn) {
  if (key->n_inputs < 0 || (key->n_inputs > 0 && !key->inputs))
    return loom_fail(LOOM_ERR_INVALID, "%s: the key has %d inputs and %s input array", fn,
                     key->n_inputs, key->inputs ? "an" : "no");
  for (int i = 0; i < key->n_inputs; i++) {
    const rt_key_input_t *in = &key->inputs[i];
    if (in->rank < 0 || in->rank > LOOM_MAX_RANK || (int)in->dtype < 0 ||
        in->dtype >= LOOM_DTYPE_COUNT)
      return loom_fail(LOOM_ERR_INVALID, "%s: key input %d has rank %d and dtype %d", fn, i,
                       in->rank, (int)in->dtype);
    for (int d = 0; d < in->rank; d++)
      if (in->bucket[d] > 1 || (in->bucket[d] && in->dims[d] == RT_DIM_ANY))
        return loom_fail(LOOM_ERR_INVALID, "%s: key input %d dim %d: bucket mark %d on size %lld",
                         fn, i, d, in->bucket[d], (long long)in->dims[d]);
  }
  return LOOM_OK;
}

/* ---- The table -------------------------------------------------------- */

static rt_entry_t **bucket_of(const loom_cache_t *c, uint64_t hash) {
  return &c->buckets[hash & (uint64_t)(c->n_buckets - 1)];
}

rt_entry_t *cache_find(loom_cache_t *c, const rt_key_t *key) {
  for (rt_entry_t *e = *bucket_of(c, key->hash); e; e = e->bucket_next)
    if (key_equal(&e->key, key)) return e;
  return NULL;
}

/* Doubles the buckets when the table is as full as it is wide. */
static loom_status_t table_grow(loom_cache_t *c) {
  if (c->n_in_table < c->n_buckets) return LOOM_OK;
  int64_t n = c->n_buckets * 2;
  rt_entry_t **next = core_calloc((size_t)n, sizeof *next);
  if (!next) return loom_fail(LOOM_ERR_NOMEM, "out of memory growing the executable cache");
  for (int64_t b = 0; b < c->n_buckets; b++) {
    for (rt_entry_t *e = c->buckets[b], *after; e; e = after) {
      after = e->bucket_next;
      rt_entry_t **head = &next[e->key.hash & (uint64_t)(n - 1)];
      e->bucket_next = *head;
      *head = e;
    }
  }
  core_free(c->buckets);
  c->buckets = next;
  c->n_buckets = n;
  return LOOM_OK;
}

static void table_remove(loom_cache_t *c, rt_entry_t *e) {
  for (rt_entry_t **p = bucket_of(c, e->key.hash); *p; p = &(*p)->bucket_next) {
    if (*p == e) {
      *p = e->bucket_next;
      e->bucket_next = NULL;
      c->n_in_table--;
      return;
    }
  }
}

/* ---- Call sites (open addressing; sites are never removed) ------------- */

static cache_site_t *site_slot(cache_site_t *sites, int64_t cap, uint64_t site) {
  for (uint64_t i = mix64(site);; i++) {
    cache_site_t *s = &sites[i & (uint64_t)(cap - 1)];
    if (!s->used || s->site == site) return s;
  }
}

static loom_status_t sites_grow(loom_cache_t *c) {
  if (2 * (c->n_sites + 1) <= c->cap_sites) return LOOM_OK;
  int64_t cap = c->cap_sites ? 2 * c->cap_sites : FIRST_SITES;
  cache_site_t *next = core_calloc((size_t)cap, sizeof *next);
  if (!next) return loom_fail(LOOM_ERR_NOMEM, "out of memory for the cache's call sites");
  for (int64_t i = 0; i < c->cap_sites; i++)
    if (c->sites[i].used) *site_slot(next, cap, c->sites[i].site) = c->sites[i];
  core_free(c->sites);
  c->sites = next;
  c->cap_sites = cap;
  return LOOM_OK;
}

/* The site's record, made when create; NULL if absent (or out of memory,
 * with the error set). */
static cache_site_t *site_get(loom_cache_t *c, uint64_t site, bool create) {
  if (c->cap_sites) {
    cache_site_t *s = site_slot(c->sites, c->cap_sites, site);
    if (s->used || !create) return s->used ? s : NULL;
  }
  if (!create || sites_grow(c) != LOOM_OK) return NULL;
  cache_site_t *s = site_slot(c->sites, c->cap_sites, site);
  s->used = true;
  s->site = site;
  c->n_sites++;
  return s;
}

static void site_link(cache_site_t *s, rt_entry_t *e) {
  e->site_prev = NULL;
  e->site_next = s->entries;
  if (s->entries) s->entries->site_prev = e;
  s->entries = e;
}

static void site_unlink(loom_cache_t *c, rt_entry_t *e) {
  cache_site_t *s = site_get(c, e->key.site, false);
  if (e->site_prev) e->site_prev->site_next = e->site_next;
  else if (s) s->entries = e->site_next;
  if (e->site_next) e->site_next->site_prev = e->site_prev;
  e->site_prev = e->site_next = NULL;
}

/* ---- LRU and eviction ------------------------------------------------- */

static void lru_unlink(loom_cache_t *c, rt_entry_t *e) {
  if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
  else c->lru_head = e->lru_next;
  if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
  else c->lru_tail = e->lru_prev;
  e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(loom_cache_t *c, rt_entry_t *e) {
  e->lru_prev = NULL;
  e->lru_next = c->lru_head;
  if (c->lru_head) c->lru_head->lru_prev = e;
  else c->lru_tail = e;
  c->lru_head = e;
}

static void lru_touch(loom_cache_t *c, rt_entry_t *e) {
  if (c->lru_head == e) return;
  lru_unlink(c, e);
  lru_push_front(c, e);
}

static void entry_free(rt_entry_t *e) {
  if (!e) return;
  /* The executable points into its graph: it goes first. */
  loom_executable_destroy(e->exe);
  loom_graph_destroy(e->graph);
  pthread_mutex_destroy(&e->run_lock);
  core_free(e->inputs);
  core_free(e->error);
  core_free(e);
}

/* Under the lock: takes the least recently used entries that nobody holds
 * out of the cache until it fits its budget. Pending entries are not in
 * the LRU list; held ones are skipped (released, they are reconsidered).
 * Returns the victims, chained by bucket_next, for evicted_free. */
static rt_entry_t *evict_over_budget(loom_cache_t *c) {
  rt_entry_t *victims = NULL;
  for (rt_entry_t *e = c->lru_tail, *prev; e && c->stats.bytes > c->budget; e = prev) {
    prev = e->lru_prev;
    if (e->refs > 0) continue;
    table_remove(c, e);
    site_unlink(c, e);
    lru_unlink(c, e);
    c->stats.entries--;
    c->stats.bytes -= e->bytes;
    c->stats.evictions++;
    e->bucket_next = victims;
    victims = e;
  }
  return victims;
}

/* Outside the lock: logs and frees what evict_over_budget took. */
static void evicted_free(rt_entry_t *victims) {
  for (rt_entry_t *e = victims, *next; e; e = next) {
    next = e->bucket_next;
    core_log(LOG_CACHE, "evicted the entry of site %016llx (%lld bytes)",
             (unsigned long long)e->key.site, (long long)e->bytes);
    entry_free(e);
  }
}

/* ---- Entries ---------------------------------------------------------- */

rt_entry_t *cache_insert_pending(loom_cache_t *c, const rt_key_t *key) {
  cache_site_t *site = site_get(c, key->site, true);
  if (!site || table_grow(c) != LOOM_OK) return NULL;
  rt_entry_t *e = core_calloc(1, sizeof *e);
  rt_key_input_t *inputs = core_calloc((size_t)key->n_inputs, sizeof *inputs);
  if (!e || !inputs) {
    core_free(e);
    core_free(inputs);
    loom_fail(LOOM_ERR_NOMEM, "out of memory for an executable cache entry");
    return NULL;
  }
  if (key->n_inputs) memcpy(inputs, key->inputs, (size_t)key->n_inputs * sizeof *inputs);
  e->key = *key;
  e->key.inputs = e->inputs = inputs;
  e->state = ENTRY_PENDING;
  e->built_before = !key->eager && cache_journal_has(key->hash);
  pthread_mutex_init(&e->run_lock, NULL);
  rt_entry_t **head = bucket_of(c, key->hash);
  e->bucket_next = *head;
  *head = e;
  c->n_in_table++;
  site_link(site, e);
  return e;
}

void cache_builder_done(const rt_builder_t *builder) {
  if (builder && builder->free_ctx) builder->free_ctx(builder->ctx);
}

/* What a graph's structure and its own constants occupy. Parameters are
 * the model's state, shared with it, and are not counted. */
static int64_t graph_bytes(const loom_graph_t *g) {
  if (!g) return 0;
  int64_t n = (int64_t)sizeof *g + g->cap_values * (int64_t)sizeof(ir_value_t) +
              g->cap_nodes * (int64_t)sizeof(ir_node_t) + g->cap_exprs * (int64_t)sizeof(ir_expr_t);
  for (int64_t i = 0; i < g->n_nodes; i++)
    n += (g->nodes[i].n_in + g->nodes[i].n_out) * (int64_t)sizeof(int32_t);
  for (int64_t i = 0; i < g->n_values; i++) {
    const ir_value_t *v = &g->values[i];
    if (v->kind == IR_VALUE_CONST && v->data && !v->borrowed)
      n += loom_tensor_numel(v->data) * (int64_t)loom_dtype_size(v->type.dtype);
  }
  return n;
}

/* An entry's bytes, an estimate of what freeing it gives back: the
 * executable's arena (exact), its back ends' programs (be_backend_t.bytes:
 * the CPU's loaded module), its step and slot tables, and
 * the graphs it owns (the source graph, and the one after the passes). */
static int64_t entry_bytes(const rt_entry_t *e) {
  int64_t n = (int64_t)sizeof *e + e->key.n_inputs * (int64_t)sizeof(rt_key_input_t);
  n += graph_bytes(e->graph);
  const loom_executable_t *x = e->exe;
  if (!x) return n;
  n += (int64_t)sizeof *x + x->arena_bytes + x->n_steps * (int64_t)sizeof(step_t) +
       x->n_slots * (int64_t)(sizeof(void *) + sizeof(int64_t));
  for (int k = 0; k < RT_PARTS; k++)
    if (x->parts[k].program) n += x->parts[k].backend->bytes(x->parts[k].program);
  if (x->owns_graph && x->graph != e->graph) n += graph_bytes(x->graph);
  return n;
}

/* Builds e's graph and compiles it. An executable that would run in the
 * interpreter (no C compiler, no generated code) counts as a failure:
 * the caller interprets the segment itself. */
static loom_status_t build_and_compile(rt_entry_t *e, const rt_builder_t *b) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  loom_graph_t *g = NULL;
  loom_clear_error();
  loom_status_t s = b->build(b->ctx, &g, &o);
  if (s != LOOM_OK && !*loom_last_error())
    loom_fail(s, "the segment's builder failed with %s", loom_status_name(s));
  if (s == LOOM_OK && !g)
    s = loom_fail(LOOM_ERR_INVALID, "the segment's builder returned no graph");
  e->graph = g;
  if (s == LOOM_OK) s = loom_compile(g, &o, &e->exe);
  /* o may point into the builder's context: free it only now. */
  cache_builder_done(b);
  if (s == LOOM_OK && e->exe->interpreted)
    s = loom_fail(LOOM_ERR_UNSUPPORTED,
                  "no code could be generated and compiled for the segment "
                  "(LOOM_LOG=compile says why)");
  return s;
}

/* Under the lock: makes e visible as ready or failed and counts it. */
static void publish(loom_cache_t *c, rt_entry_t *e, bool ok, bool speculative, double ms) {
  e->state = ok ? ENTRY_READY : ENTRY_FAILED;
  e->compile_ms = ms;
  lru_push_front(c, e);
  c->stats.entries++;
  c->stats.bytes += e->bytes;
  c->stats.compile_ms += ms;
  if (!ok) c->stats.failed_compiles++;
  else c->stats.compiles++;
  if (ok && speculative) c->stats.spec_compiles++;
  pthread_cond_broadcast(&c->ready);
}

void cache_compile_entry(loom_cache_t *c, rt_entry_t *e, const rt_builder_t *builder,
                         bool speculative) {
  double t0 = now_ms();
  loom_status_t s = build_and_compile(e, builder);
  double ms = now_ms() - t0;
  char why[400] = "";
  char *error = NULL;
  if (s != LOOM_OK) {
    snprintf(why, sizeof why, "%s", loom_last_error());
    loom_executable_destroy(e->exe);
    loom_graph_destroy(e->graph);
    e->exe = NULL;
    e->graph = NULL;
    error = core_strdup(why);
  }
  /* Only this thread touches a pending entry's graph and executable, but
   * rt_cache_describe reads error and bytes: they are set under the lock. */
  int64_t bytes = entry_bytes(e) + (error ? (int64_t)strlen(error) + 1 : 0);
  int64_t arena = e->exe ? e->exe->arena_bytes : 0;
  uint64_t site = e->key.site, key_hash = e->key.hash;
  atomic_store_explicit(&e->arena_now, arena, memory_order_relaxed);
  pthread_mutex_lock(&c->lock);
  e->error = error;
  e->bytes = bytes;
  e->arena_counted = arena;
  publish(c, e, s == LOOM_OK, speculative, ms);
  rt_entry_t *victims = evict_over_budget(c);
  pthread_mutex_unlock(&c->lock);
  /* e may be gone now (evicted by another thread): log from copies. */
  if (s == LOOM_OK) cache_journal_note(key_hash);
  if (s == LOOM_OK)
    core_log(LOG_CACHE, "compiled%s the entry of site %016llx in %.1f ms (%lld bytes)",
             speculative ? " speculatively" : "", (unsigned long long)site, ms,
             (long long)bytes);
  else
    core_log(LOG_CACHE, "compile of site %016llx failed, its segment runs in the interpreter: %s",
             (unsigned long long)site, why);
  evicted_free(victims);
}

/* ---- Recompile reasons ------------------------------------------------ */

/* A bounded line that formatted parts are appended to, ", "-separated
 * after the first `start` characters. */
typedef struct reason_line {
  char *buf;
  size_t size, len, start;
} reason_line_t;

__attribute__((format(printf, 2, 3))) static void reason_put(reason_line_t *l, const char *fmt,
                                                              ...) {
  if (l->len + 1 >= l->size) return;
  if (l->len > l->start) l->len += (size_t)snprintf(l->buf + l->len, l->size - l->len, ", ");
  if (l->len + 1 >= l->size) {
    l->len = l->size - 1;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(l->buf + l->len, l->size - l->len, fmt, ap);
  va_end(ap);
  l->len = n < 0 ? l->len : l->len + (size_t)n;
  if (l->len >= l->size) l->len = l->size - 1;
}

/* How close cached is to key: structure and path first, then how many
 * input dtypes, ranks and dims agree. */
static int key_score(const rt_key_t *key, const rt_key_t *cached) {
  int score = (key->structure == cached->structure) * 4000 + (key->path == cached->path) * 2000 +
              (key->n_inputs == cached->n_inputs) * 1000;
  int n = key->n_inputs < cached->n_inputs ? key->n_inputs : cached->n_inputs;
  for (int i = 0; i < n; i++) {
    const rt_key_input_t *a = &key->inputs[i], *b = &cached->inputs[i];
    score += (a->dtype == b->dtype) + (a->rank == b->rank);
    for (int d = 0; a->rank == b->rank && d < a->rank; d++) score += a->dims[d] == b->dims[d];
  }
  return score;
}

/* What differs between key and cached, as "input 0 dim 1: 37 (cached:
 * 32), dtype of input 2: f16 (cached: f32), ...". */
static void key_diff(const rt_key_t *key, const rt_key_t *cached, reason_line_t *l) {
  if (key->structure != cached->structure) reason_put(l, "graph structure differs");
  if (key->path != cached->path) reason_put(l, "path signature differs");
  if (key->n_inputs != cached->n_inputs)
    reason_put(l, "number of inputs: %d (cached: %d)", key->n_inputs, cached->n_inputs);
  int n = key->n_inputs < cached->n_inputs ? key->n_inputs : cached->n_inputs;
  for (int i = 0; i < n; i++) {
    const rt_key_input_t *a = &key->inputs[i], *b = &cached->inputs[i];
    if (a->dtype != b->dtype)
      reason_put(l, "dtype of input %d: %s (cached: %s)", i, loom_dtype_name(a->dtype),
                 loom_dtype_name(b->dtype));
    if (a->rank != b->rank) {
      reason_put(l, "rank of input %d: %d (cached: %d)", i, a->rank, b->rank);
      continue;
    }
    for (int d = 0; d < a->rank; d++) {
      char x[CACHE_DIM_TEXT], y[CACHE_DIM_TEXT];
      if (a->dims[d] != b->dims[d] || a->bucket[d] != b->bucket[d])
        reason_put(l, "input %d dim %d: %s (cached: %s)", i, d, cache_dim_text(a, d, x),
                   cache_dim_text(b, d, y));
    }
  }
}

/* Under the lock: why key missed, against the nearest entry of its site,
 * as a line "site S: ..." in buf, also kept among the recent reasons. */
static void miss_reason(loom_cache_t *c, const cache_site_t *site, const rt_key_t *key, char *buf,
                        size_t size) {
  reason_line_t l = {buf, size, 0, 0};
  buf[0] = '\0';
  const rt_entry_t *best = NULL;
  int best_score = -1;
  for (const rt_entry_t *e = site ? site->entries : NULL; e; e = e->site_next) {
    if (e->key.eager) continue; /* not a compile */
    int score = key_score(key, &e->key);
    if (score > best_score) best = e, best_score = score;
  }
  l.len = l.start = (size_t)snprintf(buf, size, "site %016llx: ", (unsigned long long)key->site);
  if (best) key_diff(key, &best->key, &l);
  else if (site && site->compiles > 0)
    reason_put(&l, "the site's earlier entries were evicted");
  else
    reason_put(&l, "new site (first compile)");
  snprintf(c->reasons[c->n_reasons % CACHE_REASONS], CACHE_REASON_LEN, "%s", buf);
  c->n_reasons++;
}

/* ---- Lookups ---------------------------------------------------------- */

/* Under the lock: a hit on ready entry e. Returns the hit count. */
static int64_t take_hit(loom_cache_t *c, rt_entry_t *e) {
  e->refs++;
  e->hits++;
  lru_touch(c, e);
  return ++c->stats.hits;
}

/* Hits are logged at powers of two only: a line per hit would drown the
 * misses and compiles. */
static void log_hits(int64_t hits) {
  if ((hits & (hits - 1)) == 0) core_log(LOG_CACHE, "%lld hits so far", (long long)hits);
}

rt_entry_t *rt_cache_lookup(loom_cache_t *c, const rt_key_t *key) {
  if (!c || !key) return NULL;
  pthread_mutex_lock(&c->lock);
  rt_entry_t *e = cache_find(c, key);
  int64_t hits = 0;
  if (e && e->state == ENTRY_READY) hits = take_hit(c, e);
  else e = NULL;
  pthread_mutex_unlock(&c->lock);
  if (e) log_hits(hits);
  return e;
}

/* Under the lock: copies why failed entry e failed, for failed_error. */
static void copy_error(const rt_entry_t *e, char *buf, size_t size) {
  snprintf(buf, size, "%s", e->error ? e->error : "");
}

/* Outside the lock: makes loom_last_error() say why a segment of site
 * must be interpreted (the call itself succeeds). */
static void failed_error(uint64_t site, const char *why) {
  loom_fail(LOOM_ERR_UNSUPPORTED, "the segment of site %016llx could not be compiled: %s",
            (unsigned long long)site, why);
}

/* Under the lock, which it releases: the outcome for a caller that holds
 * a reference on e and saw it leave ENTRY_PENDING. */
static loom_status_t finish_wait(loom_cache_t *c, rt_entry_t *e, rt_get_result_t *result,
                                 rt_entry_t **out) {
  rt_entry_t *victims = NULL;
  char why[CACHE_REASON_LEN] = "";
  uint64_t site = e->key.site;
  if (e->state == ENTRY_READY) {
    lru_touch(c, e);
    *out = e;
    *result = RT_READY;
  } else {
    copy_error(e, why, sizeof why);
    /* Failed entries are tiny; dropping the reference frees no budget
     * unless it was the only thing keeping an eviction back. */
    if (--e->refs == 0) victims = evict_over_budget(c);
    *result = RT_FAILED;
  }
  pthread_mutex_unlock(&c->lock);
  evicted_free(victims);
  if (*result == RT_FAILED) failed_error(site, why);
  return LOOM_OK;
}

/* Under the lock: whether every worker is running a job (or there are
 * none), so that a job queued now would wait behind them. */
static bool workers_busy(const loom_cache_t *c) {
  return c->running >= c->n_workers;
}

/* Under the lock, which it releases: a miss on an entry that exists
 * (pending or failed). The builder is not needed: its ctx is freed. */
static loom_status_t get_existing(loom_cache_t *c, rt_entry_t *e, const rt_builder_t *builder,
                                  bool wait, rt_get_result_t *result, rt_entry_t **out) {
  /* as get_new: a load still queued behind busy workers is done here */
  wait = wait || (e->built_before && e->job && workers_busy(c));
  if (e->state == ENTRY_FAILED || !wait) {
    char why[CACHE_REASON_LEN] = "";
    if (e->state == ENTRY_PENDING) cache_job_promote(c, e);
    else copy_error(e, why, sizeof why);
    *result = e->state == ENTRY_FAILED ? RT_FAILED : RT_PENDING;
    uint64_t site = e->key.site;
    pthread_mutex_unlock(&c->lock);
    cache_builder_done(builder);
    if (*result == RT_FAILED) failed_error(site, why);
    return LOOM_OK;
  }
  e->refs++;
  /* Queued but not started: compile it here rather than wait behind the
   * queue. */
  cache_job_t *job = cache_job_take(c, e);
  pthread_mutex_unlock(&c->lock);
  cache_builder_done(builder);
  if (job) {
    cache_compile_entry(c, e, &job->builder, false);
    cache_job_free(job);
  }
  pthread_mutex_lock(&c->lock);
  while (e->state == ENTRY_PENDING) pthread_cond_wait(&c->ready, &c->lock);
  return finish_wait(c, e, result, out);
}

static bool site_counted(const cache_site_t *site, uint64_t id) {
  for (int i = 0; i < site->n_counted; i++)
    if (site->counted[i] == id) return true;
  return false;
}

/* Under the lock: counts key's compile against its site's budget, once
 * per budget identity (only when there is a limit to count for). */
static void site_count(loom_cache_t *c, const rt_key_t *key, int limit) {
  cache_site_t *site = site_get(c, key->site, false);
  uint64_t id = budget_id(key);
  if (!site || limit <= 0 || site_counted(site, id)) return;
  if (core_grow((void **)&site->counted, &site->cap_counted, site->n_counted + 1,
                sizeof *site->counted) == LOOM_OK)
    site->counted[site->n_counted++] = id;
  site->compiles++;
}

static bool key_symbolic(const rt_key_t *key) {
  for (int i = 0; i < key->n_inputs; i++)
    for (int d = 0; d < key->inputs[i].rank; d++)
      if (key->inputs[i].dims[d] == RT_DIM_ANY) return true;
  return false;
}

/* Under the lock: whether the limit refuses key, new at site
 * (rt_cache_site_full). */
static bool over_limit(const cache_site_t *site, const rt_key_t *key, int limit) {
  if (limit <= 0 || !site || site->compiles < limit) return false;
  if (site_counted(site, budget_id(key))) return false; /* its sizes only: counted */
  if (!key_symbolic(key)) return true;
  for (const rt_entry_t *e = site->entries; e; e = e->site_next)
    if (!e->key.eager && e->key.structure == key->structure && key_symbolic(&e->key))
      return true;
  return false;
}

/* Under the lock, which it releases: a miss on a key not in the cache. */
/* Under the lock, which it releases: a new key at a site past its
 * limit runs in the fallback (one warning per site). */
static loom_status_t refuse_over_limit(loom_cache_t *c, cache_site_t *site, const rt_key_t *key,
                                       const rt_builder_t *builder, int limit,
                                       rt_get_result_t *result) {
  bool warn = !site->warned;
  site->warned = true;
  pthread_mutex_unlock(&c->lock);
  cache_builder_done(builder);
  if (warn) {
    core_warn("call site %016llx passed its recompile limit of %d compiles; its new keys "
              "now run in the fallback interpreter (eager kernels, nothing compiled). "
              "Declare the dims that change LOOM_DIM_AUTO, LOOM_DIM_BUCKET or "
              "LOOM_DIM_SYMBOLIC, giving dims that must agree one name (an op that meets "
              "two symbols fixes their sizes), or raise recompile_limit "
              "(LOOM_RECOMPILE_UNLIMITED for none); LOOM_LOG=recompiles says which dims "
              "changed",
              (unsigned long long)key->site, limit);
    core_log(LOG_RECOMPILES, "site %016llx: past its recompile limit of %d: new keys run "
             "in the fallback interpreter", (unsigned long long)key->site, limit);
  }
  loom_fail(LOOM_ERR_UNSUPPORTED, "call site %016llx passed its recompile limit of %d",
            (unsigned long long)key->site, limit);
  *result = RT_OVER_LIMIT;
  return LOOM_OK;
}

/* Under the lock, which it releases: a key the cache does not hold, its
 * site within its limit, compiled with builder. */
static loom_status_t get_new(loom_cache_t *c, cache_site_t *site, const rt_key_t *key,
                             const rt_builder_t *builder, bool wait, int limit,
                             rt_get_result_t *result, rt_entry_t **out) {
  char reason[CACHE_REASON_LEN];
  miss_reason(c, site, key, reason, sizeof reason);
  rt_entry_t *e = cache_insert_pending(c, key);
  if (!e) {
    pthread_mutex_unlock(&c->lock);
    cache_builder_done(builder);
    return LOOM_ERR_NOMEM;
  }
  site_count(c, key, limit);
  e->misses = 1;
  /* A key compiled before has its module on disk and loads in about a
   * millisecond: a free worker loads it while the caller interprets (a
   * dynamic model's small segment runs in less time than its load takes);
   * with every worker busy, perhaps compiling for seconds, the caller
   * loads it itself. */
  wait = wait || (e->built_before && workers_busy(c));
  /* Without workers nobody else would compile it: this thread does. */
  bool here = wait || c->n_workers == 0 || !cache_job_push(c, e, builder, false);
  if (here) e->refs++;
  pthread_mutex_unlock(&c->lock);
  core_log(LOG_RECOMPILES, "%s", reason);
  core_log(LOG_CACHE, "miss at site %016llx: compiling %s", (unsigned long long)key->site,
           here ? "now" : "in the background");
  if (!here) {
    *result = RT_PENDING;
    return LOOM_OK;
  }
  cache_compile_entry(c, e, builder, false);
  pthread_mutex_lock(&c->lock);
  return finish_wait(c, e, result, out);
}

/* rt_cache_get, and rt_cache_get_held when builder is NULL: then a key
 * that would need it leaves *held false, nothing counted, the lock
 * released. */
static loom_status_t get(loom_cache_t *c, const rt_key_t *key, const rt_builder_t *builder,
                         bool wait, int limit, rt_get_result_t *result, rt_entry_t **out,
                         bool *held) {
  pthread_mutex_lock(&c->lock);
  rt_entry_t *e = cache_find(c, key);
  if (e && e->state == ENTRY_READY) {
    int64_t hits = take_hit(c, e);
    pthread_mutex_unlock(&c->lock);
    cache_builder_done(builder);
    log_hits(hits);
    *out = e;
    *result = RT_READY;
    return LOOM_OK;
  }
  cache_site_t *site = e ? NULL : site_get(c, key->site, false);
  bool refused = !e && over_limit(site, key, limit);
  if (!builder && !e && !refused) {
    pthread_mutex_unlock(&c->lock);
    *held = false;
    return LOOM_OK;
  }
  c->stats.misses++;
  if (e) e->misses++; /* the entry's own count, for the listing */
  if (e) return get_existing(c, e, builder, wait, result, out);
  if (refused) return refuse_over_limit(c, site, key, builder, limit, result);
  loom_status_t s = get_new(c, site, key, builder, wait, limit, result, out);
  if (s == LOOM_ERR_NOMEM)
    return loom_fail(s, "out of memory for an entry of the executable cache (site %016llx)",
                     (unsigned long long)key->site);
  return s;
}

loom_status_t rt_cache_get(loom_cache_t *c, const rt_key_t *key, const rt_builder_t *builder,
                           bool wait, int recompile_limit, rt_get_result_t *result,
                           rt_entry_t **out) {
  loom_status_t s = LOOM_OK;
  if (out) *out = NULL;
  if (!c || !key || !result || !out || !builder || !builder->build)
    s = loom_fail(LOOM_ERR_INVALID, "rt_cache_get: null %s",
                  !c ? "cache" : !key ? "key" : !result ? "result" : !out ? "out" : "builder");
  if (s == LOOM_OK) s = key_check(key, "rt_cache_get");
  if (s != LOOM_OK) {
    cache_builder_done(builder);
    return s;
  }
  bool held = true;
  return get(c, key, builder, wait, recompile_limit, result, out, &held);
}

loom_status_t rt_cache_get_held(loom_cache_t *c, const rt_key_t *key, bool wait,
                                int recompile_limit, rt_get_result_t *result, rt_entry_t **out,
                                bool *held) {
  if (out) *out = NULL;
  if (held) *held = false;
  if (!c || !key || !result || !out || !held)
    return loom_fail(LOOM_ERR_INVALID, "rt_cache_get_held: null %s",
                     !c ? "cache" : !key ? "key" : !result ? "result" : !out ? "out" : "held");
  LOOM_TRY(key_check(key, "rt_cache_get_held"));
  *held = true;
  return get(c, key, NULL, wait, recompile_limit, result, out, held);
}

static loom_status_t speculate(loom_cache_t *c, const rt_key_t *key,
                               const rt_builder_t *builder, bool counted, int limit) {
  loom_status_t s = LOOM_OK;
  if (!c || !key || !builder || !builder->build)
    s = loom_fail(LOOM_ERR_INVALID, "rt_cache_speculate: null %s",
                  !c ? "cache" : !key ? "key" : "builder");
  if (s == LOOM_OK) s = key_check(key, "rt_cache_speculate");
  if (s != LOOM_OK) {
    cache_builder_done(builder);
    return s;
  }
  pthread_mutex_lock(&c->lock);
  bool queued = false;
  if (c->n_workers > 0 && !c->stop && !cache_find(c, key)) {
    rt_entry_t *e = cache_insert_pending(c, key);
    if (e) e->speculative = true;
    queued = e && cache_job_push(c, e, builder, true);
    if (queued && counted) site_count(c, key, limit);
    if (e && !queued) {
      site_unlink(c, e);
      table_remove(c, e);
      entry_free(e);
      s = loom_fail(LOOM_ERR_NOMEM, "out of memory queueing a speculative compile");
    } else if (!e) {
      s = LOOM_ERR_NOMEM;
    }
  }
  pthread_mutex_unlock(&c->lock);
  if (!queued) cache_builder_done(builder);
  if (queued)
    core_log(LOG_CACHE, "queued a speculative compile for site %016llx",
             (unsigned long long)key->site);
  return s;
}

loom_status_t rt_cache_speculate(loom_cache_t *c, const rt_key_t *key,
                                 const rt_builder_t *builder) {
  return speculate(c, key, builder, false, 0);
}

loom_status_t rt_cache_ahead(loom_cache_t *c, const rt_key_t *key, const rt_builder_t *builder,
                             int recompile_limit) {
  return speculate(c, key, builder, true, recompile_limit);
}

bool rt_cache_site_full(loom_cache_t *c, const rt_key_t *key, int recompile_limit) {
  if (!c || !key || recompile_limit <= 0) return false;
  pthread_mutex_lock(&c->lock);
  bool full = over_limit(site_get(c, key->site, false), key, recompile_limit);
  pthread_mutex_unlock(&c->lock);
  return full;
}

/* ---- Eager entries ---------------------------------------------------- */

/* Builds eager entry e's graph outside the lock, then publishes it (ready
 * or failed) and wakes those waiting for it. Calls builder's free_ctx. */
static void build_eager(loom_cache_t *c, rt_entry_t *e, const rt_builder_t *builder) {
  loom_graph_t *g = NULL;
  loom_compile_options_t unused; /* the builder may set them; nothing compiles */
  loom_compile_options_init(&unused);
  loom_clear_error();
  loom_status_t s = builder->build(builder->ctx, &g, &unused);
  cache_builder_done(builder);
  if (s == LOOM_OK && !g) s = loom_fail(LOOM_ERR_INVALID, "the segment's builder returned no graph");
  if (s == LOOM_OK) s = ir_verify(g); /* once: rt_interpret runs it unchecked */
  char *error = NULL;
  if (s != LOOM_OK) {
    loom_graph_destroy(g);
    g = NULL;
    error = core_strdup(*loom_last_error() ? loom_last_error() : loom_status_name(s));
  }
  e->graph = g;
  int64_t bytes = entry_bytes(e) + (error ? (int64_t)strlen(error) + 1 : 0);
  pthread_mutex_lock(&c->lock);
  e->error = error;
  e->status = s;
  e->bytes = bytes;
  e->state = g ? ENTRY_READY : ENTRY_FAILED;
  lru_push_front(c, e);
  c->stats.entries++;
  c->stats.bytes += bytes;
  pthread_cond_broadcast(&c->ready);
  rt_entry_t *victims = evict_over_budget(c);
  pthread_mutex_unlock(&c->lock);
  evicted_free(victims);
}

/* The key of key's eager entry: key with `eager` set. */
static rt_key_t eager_key(const rt_key_t *key) {
  rt_key_t k = *key;
  k.eager = true;
  rt_key_finish(&k);
  return k;
}

rt_entry_t *rt_cache_eager_held(loom_cache_t *c, const rt_key_t *key) {
  if (!c || !key) return NULL;
  rt_key_t k = eager_key(key);
  pthread_mutex_lock(&c->lock);
  rt_entry_t *e = cache_find(c, &k);
  if (e && e->state == ENTRY_READY) {
    e->refs++;
    lru_touch(c, e);
  } else {
    e = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  return e;
}

loom_status_t rt_cache_eager(loom_cache_t *c, const rt_key_t *key, const rt_builder_t *builder,
                             rt_entry_t **out) {
  loom_status_t s = LOOM_OK;
  if (out) *out = NULL;
  if (!c || !key || !out || !builder || !builder->build)
    s = loom_fail(LOOM_ERR_INVALID, "rt_cache_eager: null %s",
                  !c ? "cache" : !key ? "key" : !out ? "out" : "builder");
  if (s == LOOM_OK) s = key_check(key, "rt_cache_eager");
  if (s != LOOM_OK) {
    cache_builder_done(builder);
    return s;
  }
  rt_key_t k = eager_key(key);
  pthread_mutex_lock(&c->lock);
  rt_entry_t *e = cache_find(c, &k);
  bool build = !e;
  if (e && e->state == ENTRY_FAILED && e->status == LOOM_ERR_NOMEM && e->refs == 0) {
    /* out of memory was not the key's fault: build it again */
    lru_unlink(c, e);
    c->stats.entries--;
    c->stats.bytes -= e->bytes;
    core_free(e->error);
    e->error = NULL;
    e->state = ENTRY_PENDING;
    build = true;
  }
  if (build && !e && !(e = cache_insert_pending(c, &k))) {
    pthread_mutex_unlock(&c->lock);
    cache_builder_done(builder);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for an eager entry of the executable "
                     "cache (site %016llx)", (unsigned long long)key->site);
  }
  e->refs++;
  pthread_mutex_unlock(&c->lock);
  if (build) build_eager(c, e, builder);
  else cache_builder_done(builder);
  pthread_mutex_lock(&c->lock);
  while (e->state == ENTRY_PENDING) pthread_cond_wait(&c->ready, &c->lock);
  if (e->state == ENTRY_READY) {
    lru_touch(c, e);
    *out = e;
    pthread_mutex_unlock(&c->lock);
    return LOOM_OK;
  }
  char why[CACHE_REASON_LEN];
  copy_error(e, why, sizeof why);
  loom_status_t failed = e->status;
  rt_entry_t *victims = --e->refs == 0 ? evict_over_budget(c) : NULL;
  pthread_mutex_unlock(&c->lock);
  evicted_free(victims);
  return loom_fail(failed, "the segment of site %016llx could not be built: %s",
                   (unsigned long long)key->site, why);
}

bool rt_cache_holds(loom_cache_t *c, const rt_key_t *key) {
  pthread_mutex_lock(&c->lock);
  bool has = cache_find(c, key) != NULL;
  pthread_mutex_unlock(&c->lock);
  return has;
}

bool rt_cache_has_key(loom_cache_t *c, const rt_key_t *key) {
  return rt_cache_holds(c, key) || cache_journal_has(key->hash);
}

bool rt_cache_key_missed(loom_cache_t *c, const rt_key_t *key) {
  pthread_mutex_lock(&c->lock);
  rt_entry_t *e = cache_find(c, key);
  bool missed = e && e->misses > 0;
  pthread_mutex_unlock(&c->lock);
  return missed;
}

/* ---- Entries' accessors ------------------------------------------------ */

loom_executable_t *rt_entry_executable(rt_entry_t *e) { return e ? e->exe : NULL; }

loom_graph_t *rt_entry_graph(rt_entry_t *e) { return e ? e->graph : NULL; }

void rt_entry_count_stitched(rt_entry_t *e) {
  if (e) atomic_fetch_add_explicit(&e->stitched, 1, memory_order_relaxed);
}

loom_status_t rt_entry_run(rt_entry_t *e, int n_inputs, loom_tensor_t *const *inputs,
                           int n_outputs, loom_tensor_t *const *outputs,
                           const rt_binding_t *b) {
  LOOM_CHECK_ARG(e);
  if (!e->exe)
    return loom_fail(LOOM_ERR_INVALID, "rt_entry_run: the entry of site %016llx has no executable",
                     (unsigned long long)e->key.site);
  if (!e->exe->dyn) /* overlapping runs take lanes of their own (runtime/lanes.c) */
    return rt_executable_run_bound(e->exe, n_inputs, inputs, n_outputs, outputs, b);
  pthread_mutex_lock(&e->run_lock);
  loom_status_t s = rt_executable_run_bound(e->exe, n_inputs, inputs, n_outputs, outputs, b);
  atomic_store_explicit(&e->arena_now, e->exe->arena_bytes, memory_order_relaxed);
  pthread_mutex_unlock(&e->run_lock);
  return s;
}

/* Under the lock: counts the arena a run with new sizes regrew. */
static void recount_arena(loom_cache_t *c, rt_entry_t *e) {
  int64_t now = atomic_load_explicit(&e->arena_now, memory_order_relaxed);
  if (now == e->arena_counted || e->state != ENTRY_READY) return;
  e->bytes += now - e->arena_counted;
  c->stats.bytes += now - e->arena_counted;
  e->arena_counted = now;
}

void rt_entry_release(loom_cache_t *c, rt_entry_t *e) {
  if (!c || !e) return;
  pthread_mutex_lock(&c->lock);
  rt_entry_t *victims = NULL;
  recount_arena(c, e);
  if (--e->refs == 0 && c->stats.bytes > c->budget) victims = evict_over_budget(c);
  pthread_mutex_unlock(&c->lock);
  evicted_free(victims);
}

/* ---- The cache -------------------------------------------------------- */

loom_status_t loom_cache_create(int64_t budget_bytes, int spec_workers, loom_cache_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  if (budget_bytes < 0 || spec_workers < 0)
    return loom_fail(LOOM_ERR_INVALID,
                     "loom_cache_create: budget_bytes (%lld) and spec_workers (%d) must not "
                     "be negative",
                     (long long)budget_bytes, spec_workers);
  loom_cache_t *c = core_calloc(1, sizeof *c);
  rt_entry_t **buckets = core_calloc(FIRST_BUCKETS, sizeof *buckets);
  if (!c || !buckets) {
    core_free(c);
    core_free(buckets);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory creating an executable cache");
  }
  c->budget = budget_bytes ? budget_bytes : DEFAULT_BUDGET;
  c->buckets = buckets;
  c->n_buckets = FIRST_BUCKETS;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->ready, NULL);
  pthread_cond_init(&c->work, NULL);
  pthread_cond_init(&c->idle, NULL);
  loom_status_t s = cache_workers_start(c, spec_workers, cache_compile_entry, cache_builder_done);
  if (s != LOOM_OK) {
    loom_cache_destroy(c);
    return s;
  }
  *out = c;
  loom_clear_error();
  return LOOM_OK;
}

void loom_cache_destroy(loom_cache_t *c) {
  if (!c) return;
  cache_workers_stop(c);
  for (int64_t b = 0; b < c->n_buckets; b++) {
    for (rt_entry_t *e = c->buckets[b], *next; e; e = next) {
      next = e->bucket_next;
      entry_free(e);
    }
  }
  core_free(c->buckets);
  for (int64_t i = 0; i < c->cap_sites; i++) core_free(c->sites[i].counted);
  core_free(c->sites);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->ready);
  pthread_cond_destroy(&c->work);
  pthread_cond_destroy(&c->idle);
  core_free(c);
}

loom_status_t loom_cache_get_stats(const loom_cache_t *c, loom_cache_stats_t *out) {
  LOOM_CHECK_ARG(c);
  /* The lock is the only thing written. */
  loom_cache_t *m = (loom_cache_t *)c;
  pthread_mutex_lock(&m->lock);
  loom_cache_stats_t s = c->stats;
  pthread_mutex_unlock(&m->lock);
  s.size = sizeof s;
  LOOM_TRY(core_sized_write(__func__, "loom_cache_stats_t", out, &s, sizeof s));
  loom_clear_error();
  return LOOM_OK;
}
