/* The cache's keys, copied out (trace.h, "The cache's keys"): the list
 * behind loom_cache_list_keys and loom_trace_list_keys, and its text, one
 * line per key, which rt_cache_describe (and so loom_trace_explain)
 * prints. Both read one copy taken in one critical section, so the
 * listing and the report never disagree, and neither holds the lock
 * while it is read. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/text.h"
#include "trace/cache_internal.h"

/* One entry as it was when copied. */
typedef struct key_copy {
  rt_key_t key;      /* key.inputs points into the list's inputs */
  entry_state_t state;
  const char *error; /* into the list's errors, or NULL */
  int64_t hits, stitched, misses, bytes;
  int refs;
  bool speculative;
  double compile_ms;
} key_copy_t;

struct loom_cache_keys {
  int64_t n;
  key_copy_t *keys;
  rt_key_input_t *inputs;
  char *errors; /* the failed entries' reasons, each ending in '\0' */
  /* The rest of the report, copied at the same moment. */
  loom_cache_stats_t stats;
  int64_t budget;
  int n_reasons; /* recent compile reasons, oldest first */
  char reasons[CACHE_REASONS][CACHE_REASON_LEN];
};

/* ---- Copying ------------------------------------------------------------- */

/* Calls fn on every entry of c: published ones by recency, then pending
 * ones (in no list but the table). Under the lock. */
static void each_entry(const loom_cache_t *c, void (*fn)(const rt_entry_t *e, void *ctx),
                       void *ctx) {
  for (const rt_entry_t *e = c->lru_head; e; e = e->lru_next) fn(e, ctx);
  for (int64_t b = 0; b < c->n_buckets; b++)
    for (const rt_entry_t *e = c->buckets[b]; e; e = e->bucket_next)
      if (e->state == ENTRY_PENDING) fn(e, ctx);
}

/* What the copies take: keys, inputs and the errors' bytes. */
typedef struct copy_size {
  int64_t keys, inputs;
  size_t errors;
} copy_size_t;

static void count_entry(const rt_entry_t *e, void *ctx) {
  copy_size_t *n = ctx;
  n->keys++;
  n->inputs += e->key.n_inputs;
  n->errors += e->error ? strlen(e->error) + 1 : 0;
}

/* Under the lock: the arrays for every entry of c. Allocating here keeps
 * the copy whole (entries cannot come or go between counting and
 * copying); it is three blocks, and listing is rare. */
static loom_status_t alloc_copies(const loom_cache_t *c, loom_cache_keys_t *k) {
  copy_size_t n = {0};
  each_entry(c, count_entry, &n);
  k->keys = core_malloc(sizeof *k->keys * (size_t)(n.keys + 1));
  k->inputs = core_malloc(sizeof *k->inputs * (size_t)(n.inputs + 1));
  k->errors = core_malloc(n.errors + 1);
  if (!k->keys || !k->inputs || !k->errors)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory listing the %lld keys of an executable "
                     "cache", (long long)n.keys);
  return LOOM_OK;
}

/* Where the next copy goes: the list (its n counts the keys copied) and
 * the parts of its arrays used so far. */
typedef struct copy_into {
  loom_cache_keys_t *k;
  int64_t inputs_used;
  size_t errors_used;
} copy_into_t;

/* Appends a copy of e to the list, whose arrays alloc_copies sized. */
static void copy_entry(const rt_entry_t *e, void *ctx) {
  copy_into_t *to = ctx;
  loom_cache_keys_t *k = to->k;
  key_copy_t *x = &k->keys[k->n++];
  *x = (key_copy_t){.key = e->key, .state = e->state, .hits = e->hits,
                    .stitched = atomic_load_explicit(&e->stitched, memory_order_relaxed),
                    .misses = e->misses, .bytes = e->bytes, .refs = e->refs,
                    .speculative = e->speculative, .compile_ms = e->compile_ms};
  x->hits += x->stitched; /* a stitched run is a hit the lookups never saw */
  x->key.inputs = k->inputs + to->inputs_used;
  if (e->key.n_inputs)
    memcpy(k->inputs + to->inputs_used, e->inputs, sizeof *k->inputs * (size_t)e->key.n_inputs);
  to->inputs_used += e->key.n_inputs;
  if (!e->error) return;
  size_t len = strlen(e->error) + 1;
  memcpy(k->errors + to->errors_used, e->error, len);
  x->error = k->errors + to->errors_used;
  to->errors_used += len;
}

static loom_status_t list_keys(const loom_cache_t *c, loom_cache_keys_t **out) {
  loom_cache_keys_t *k = core_calloc(1, sizeof *k);
  if (!k) return loom_fail(LOOM_ERR_NOMEM, "out of memory listing an executable cache's keys");
  /* The lock is the only thing written. */
  loom_cache_t *m = (loom_cache_t *)c;
  pthread_mutex_lock(&m->lock);
  loom_status_t s = alloc_copies(c, k);
  copy_into_t to = {k, 0, 0};
  if (s == LOOM_OK) each_entry(c, copy_entry, &to);
  k->stats = c->stats;
  k->budget = c->budget;
  int64_t first = c->n_reasons > CACHE_REASONS ? c->n_reasons - CACHE_REASONS : 0;
  for (int64_t i = first; i < c->n_reasons; i++)
    memcpy(k->reasons[k->n_reasons++], c->reasons[i % CACHE_REASONS], CACHE_REASON_LEN);
  pthread_mutex_unlock(&m->lock);
  if (s != LOOM_OK) {
    loom_cache_keys_destroy(k);
    return s;
  }
  *out = k;
  return LOOM_OK;
}

/* ---- The public listing ---------------------------------------------------- */

loom_status_t loom_cache_list_keys(const loom_cache_t *c, loom_cache_keys_t **out, int64_t *n) {
  if (out) *out = NULL;
  if (n) *n = 0;
  LOOM_CHECK_ARG(c);
  LOOM_CHECK_ARG(out);
  LOOM_CHECK_ARG(n);
  LOOM_TRY(list_keys(c, out));
  *n = (*out)->n;
  loom_clear_error();
  return LOOM_OK;
}

/* Key i of keys, or NULL with the error set (fn names the caller). */
static const key_copy_t *key_at(const loom_cache_keys_t *keys, int64_t i, const char *fn) {
  if (!keys) {
    loom_fail(LOOM_ERR_INVALID, "%s: argument 'keys' is null", fn);
    return NULL;
  }
  if (i < 0 || i >= keys->n) {
    loom_fail(LOOM_ERR_INVALID, "%s: key %lld is out of range (the list holds %lld)", fn,
              (long long)i, (long long)keys->n);
    return NULL;
  }
  return &keys->keys[i];
}

static loom_key_state_t state_of(const key_copy_t *x) {
  if (x->state == ENTRY_READY) return x->key.eager ? LOOM_KEY_EAGER : LOOM_KEY_READY;
  return x->state == ENTRY_FAILED ? LOOM_KEY_FAILED : LOOM_KEY_PENDING;
}

loom_status_t loom_cache_keys_get(const loom_cache_keys_t *keys, int64_t i,
                                  loom_cache_key_info_t *out) {
  const key_copy_t *x = key_at(keys, i, __func__);
  if (!x) return LOOM_ERR_INVALID;
  loom_cache_key_info_t info = {
      .size = sizeof info, .hash = x->key.hash, .structure = x->key.structure,
      .path = x->key.path, .site = x->key.site, .n_inputs = x->key.n_inputs,
      .state = state_of(x), .error = x->error, .hits = x->hits,
      .stitched = x->stitched, .misses = x->misses, .speculative = x->speculative,
      .in_use = x->refs, .compile_ms = x->compile_ms, .bytes = x->bytes};
  LOOM_TRY(core_sized_write(__func__, "loom_cache_key_info_t", out, &info, sizeof info));
  loom_clear_error();
  return LOOM_OK;
}

static loom_key_dim_t dim_kind(const rt_key_input_t *in, int d) {
  return in->dims[d] == RT_DIM_ANY ? LOOM_KEY_ANY : in->bucket[d] ? LOOM_KEY_BUCKET
                                                                  : LOOM_KEY_EXACT;
}

loom_status_t loom_cache_keys_input(const loom_cache_keys_t *keys, int64_t i, int input,
                                    loom_cache_key_input_t *out) {
  const key_copy_t *x = key_at(keys, i, __func__);
  if (!x) return LOOM_ERR_INVALID;
  if (input < 0 || input >= x->key.n_inputs)
    return loom_fail(LOOM_ERR_INVALID, "%s: key %lld has %d inputs, not an input %d", __func__,
                     (long long)i, x->key.n_inputs, input);
  const rt_key_input_t *in = &x->key.inputs[input];
  loom_cache_key_input_t info = {.size = sizeof info, .dtype = in->dtype, .rank = in->rank};
  for (int d = 0; d < in->rank; d++) {
    info.kinds[d] = dim_kind(in, d);
    info.dims[d] = in->dims[d];
  }
  LOOM_TRY(core_sized_write(__func__, "loom_cache_key_input_t", out, &info, sizeof info));
  loom_clear_error();
  return LOOM_OK;
}

void loom_cache_keys_destroy(loom_cache_keys_t *keys) {
  if (!keys) return;
  core_free(keys->keys);
  core_free(keys->inputs);
  core_free(keys->errors);
  core_free(keys);
}

/* ---- Text ---------------------------------------------------------------------- */

const char *cache_dim_text(const rt_key_input_t *in, int d, char *buf) {
  switch (dim_kind(in, d)) {
  case LOOM_KEY_ANY: snprintf(buf, CACHE_DIM_TEXT, "any"); break;
  case LOOM_KEY_BUCKET: snprintf(buf, CACHE_DIM_TEXT, "b%lld", (long long)in->dims[d]); break;
  case LOOM_KEY_EXACT: snprintf(buf, CACHE_DIM_TEXT, "%lld", (long long)in->dims[d]); break;
  }
  return buf;
}

static const char *const state_names[] = {"pending", "ready", "failed", "eager"};

/* "  SITE STRUCTURE PATH STATE HITS STITCHED MISSES MS BYTES f32[any,64] f32[b8]: why" */
static void key_line(core_text_t *t, const key_copy_t *x) {
  core_text_put(t, "  %016llx %016llx %016llx %-7s %8lld %8lld %6lld %10.1f %10lld ",
                (unsigned long long)x->key.site, (unsigned long long)x->key.structure,
                (unsigned long long)x->key.path, state_names[state_of(x)], (long long)x->hits,
                (long long)x->stitched, (long long)x->misses, x->compile_ms,
                (long long)x->bytes);
  for (int i = 0; i < x->key.n_inputs; i++) {
    const rt_key_input_t *in = &x->key.inputs[i];
    core_text_put(t, "%s%s[", i ? " " : "", loom_dtype_name(in->dtype));
    for (int d = 0; d < in->rank; d++) {
      char buf[CACHE_DIM_TEXT];
      core_text_put(t, "%s%s", d ? "," : "", cache_dim_text(in, d, buf));
    }
    core_text_put(t, "]");
  }
  if (x->key.n_inputs == 0) core_text_put(t, "-");
  if (x->speculative) core_text_put(t, " (speculative)");
  if (x->error) core_text_put(t, ": %s", x->error);
  core_text_put(t, "\n");
}

static void describe_keys(const loom_cache_keys_t *k, core_text_t *text) {
  const loom_cache_stats_t *s = &k->stats;
  core_text_put(text,
                "executable cache: %lld entries, %lld of %lld bytes; %lld hits, %lld misses, "
                "%lld compiles (%lld speculative, %.1f ms), %lld failed, %lld evictions\n",
                (long long)s->entries, (long long)s->bytes, (long long)k->budget,
                (long long)s->hits, (long long)s->misses, (long long)s->compiles,
                (long long)s->spec_compiles, s->compile_ms, (long long)s->failed_compiles,
                (long long)s->evictions);
  if (k->n)
    core_text_put(text, "  %-16s %-16s %-16s %-7s %8s %8s %6s %10s %10s %s\n", "site",
                  "structure", "path", "state", "hits", "stitched", "misses", "compile ms",
                  "bytes", "inputs");
  for (int64_t i = 0; i < k->n; i++) key_line(text, &k->keys[i]);
  if (k->n_reasons) core_text_put(text, "recent compile reasons (oldest first):\n");
  for (int i = 0; i < k->n_reasons; i++) core_text_put(text, "  %s\n", k->reasons[i]);
}

loom_status_t rt_cache_describe(const loom_cache_t *c, struct core_text *text) {
  LOOM_CHECK_ARG(c);
  LOOM_CHECK_ARG(text);
  loom_cache_keys_t *k = NULL;
  LOOM_TRY(list_keys(c, &k));
  describe_keys(k, text);
  loom_cache_keys_destroy(k);
  return text->failed ? loom_fail(LOOM_ERR_NOMEM, "out of memory describing the cache") : LOOM_OK;
}
