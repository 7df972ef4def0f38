/* Memory planning: offsets for the buffers that cross fusion groups, in
 * one 64-byte-aligned arena.
 *
 * First, in-place requests are chained: a chain is a run of buffers each
 * written over the one before, so all of them share one offset. Then the
 * chains are placed one at a time, each in the gap that wastes the fewest
 * bytes among the buffers already placed that are live at the same time
 * (best fit over live intervals, the idea of TFLite's "greedy by size").
 * The result depends on the order chains are placed in, so a few orders
 * are tried and the smallest arena kept. */
#include <stdlib.h>

#include "core/alloc.h"
#include "core/status.h"
#include "passes/memplan.h"

#define MEM_ALIGN 64

/* A placed buffer that the chain being placed must keep clear of: its
 * bytes [lo, hi), the most bytes a chain member live beside it needs, and
 * the highest offset at which the chain still fits below it and every
 * conflict above it. */
typedef struct mem_conflict {
  int64_t lo, hi, need, room;
} mem_conflict_t;

/* A sort key for placement orders: major, then minor descending, then id. */
typedef struct mem_key {
  int64_t major, minor;
  int32_t id;
} mem_key_t;

/* The requests by live interval, so that the placed buffers a chain
 * conflicts with are found without a scan of every placed buffer: a
 * segment tree over the distinct first steps, each request stored in the
 * O(log n) nodes that cover its interval (those live at a step are on
 * one leaf's path to the root), and the requests in order of first step
 * (those starting inside an interval are a run of it). */
typedef struct mem_index {
  int64_t *steps;        /* the distinct first steps, ascending */
  int n_steps, leaves;   /* leaves: a power of two, at least n_steps */
  int32_t *lo, *hi;      /* per request: its interval as indices into steps */
  int32_t *node_start;   /* node k holds node_items[node_start[k] .. [k + 1]) */
  int32_t *node_items;
  int32_t *by_first;     /* requests by first step */
  int32_t *step_start;   /* per step index: its first place in by_first */
} mem_index_t;

typedef struct mem_planner {
  const mem_request_t *r;
  int n;
  int64_t *size;         /* aligned bytes per request */
  int32_t *took;         /* the request whose offset i took in place, or -1 */
  int32_t *gave;         /* the request that took i's offset, or -1 */
  int32_t *placed;       /* requests placed so far, in placement order */
  int n_placed;
  mem_conflict_t *conflicts, *sorted; /* sorted: scratch of sort_conflicts */
  mem_key_t *keys;       /* one per chain */
  int n_chains;
  int64_t *offsets;      /* scratch: one placement order's offsets */
  struct mem_event *events; /* scratch of the lower bound: 4 per request */
  mem_index_t index;
  int32_t *placed_in;    /* per request: the placement run that placed it */
  int32_t *seen_in;      /* per request: the last search that met it */
  int32_t *entry;        /* per request: its place in conflicts, that search */
  int32_t run, search;
} mem_planner_t;

typedef enum mem_order {
  MEM_ORDER_SIZE,  /* biggest first: big buffers shape the arena */
  MEM_ORDER_SPAN,  /* longest-lived first: they block the most gaps */
  MEM_ORDER_FIRST, /* in schedule order, like a linear scan */
  MEM_ORDER_AREA,  /* biggest bytes x steps first: often the best when
                      sizes and lifetimes both vary */
  MEM_ORDER_COUNT,
} mem_order_t;

static int64_t align_up(int64_t bytes) {
  return (bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
}

static loom_status_t check_requests(const mem_request_t *r, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    if (r[i].bytes < 0 || r[i].bytes > MEM_PLAN_MAX_BYTES)
      return loom_fail(LOOM_ERR_INVALID,
                       "memory plan: request %d has %lld bytes", i,
                       (long long)r[i].bytes);
    if (r[i].first < 0 || r[i].first > r[i].last)
      return loom_fail(LOOM_ERR_INVALID,
                       "memory plan: request %d has live interval [%d, %d]",
                       i, (int)r[i].first, (int)r[i].last);
    if (r[i].inplace_of < -1 || r[i].inplace_of >= n || r[i].inplace_of == i)
      return loom_fail(LOOM_ERR_INVALID,
                       "memory plan: request %d is in place of %d (of %d)", i,
                       (int)r[i].inplace_of, n);
    total += align_up(r[i].bytes);
    if (total > MEM_PLAN_MAX_BYTES)
      return loom_fail(LOOM_ERR_INVALID,
                       "memory plan: the requests total more than %lld bytes, "
                       "the most one arena holds",
                       (long long)MEM_PLAN_MAX_BYTES);
  }
  return LOOM_OK;
}

/* ---- In-place chains ---------------------------------------------------- */

/* Whether i may take j's offset. A request in the middle of a chain must
 * live more than one step: two handovers at one step would leave j's
 * source and i sharing bytes while both are live. */
static bool can_take(const mem_planner_t *p, int i, int j) {
  const mem_request_t *r = p->r;
  if (j < 0 || p->gave[j] >= 0) return false;
  if (r[j].last != r[i].first || r[i].bytes > r[j].bytes) return false;
  if (p->took[j] >= 0 && r[j].first == r[j].last) return false;
  if (p->gave[i] >= 0 && r[i].first == r[i].last) return false;
  /* No cycle: up j's chain the last steps never rise (each took from one
   * that ended where it began), and i ends at or after r[i].first, so the
   * walk stops once below it. */
  for (int k = j; k >= 0 && r[k].last >= r[i].first; k = p->took[k])
    if (k == i) return false;
  return true;
}

static int link_chains(mem_planner_t *p) {
  int n_inplace = 0;
  for (int i = 0; i < p->n; i++) {
    int j = p->r[i].inplace_of;
    if (!can_take(p, i, j)) continue;
    p->took[i] = j;
    p->gave[j] = i;
    n_inplace++;
  }
  return n_inplace;
}

/* ---- Lower bound -------------------------------------------------------- */

typedef struct mem_event {
  int64_t step, delta;
} mem_event_t;


static int event_cmp(const void *a, const void *b) {
  const mem_event_t *x = a, *y = b;
  return (x->step > y->step) - (x->step < y->step);
}

/* The most bytes live at one step; a taken-over buffer and the one that
 * took it count once at their handover step. */
static int64_t lower_bound(const mem_planner_t *p) {
  mem_event_t *ev = p->events;
  int k = 0;
  for (int i = 0; i < p->n; i++) {
    ev[k++] = (mem_event_t){p->r[i].first, p->size[i]};
    ev[k++] = (mem_event_t){(int64_t)p->r[i].last + 1, -p->size[i]};
    if (p->took[i] < 0) continue;
    ev[k++] = (mem_event_t){p->r[i].first, -p->size[i]};
    ev[k++] = (mem_event_t){(int64_t)p->r[i].first + 1, p->size[i]};
  }
  qsort(ev, (size_t)k, sizeof *ev, event_cmp);
  int64_t live = 0, most = 0;
  for (int e = 0; e < k; e++) {
    live += ev[e].delta;
    if (e + 1 == k || ev[e + 1].step != ev[e].step) most = live > most ? live : most;
  }
  return most;
}

/* ---- Placement ---------------------------------------------------------- */

static int key_cmp(const void *a, const void *b) {
  const mem_key_t *x = a, *y = b;
  if (x->major != y->major) return x->major < y->major ? 1 : -1;
  if (x->minor != y->minor) return x->minor < y->minor ? 1 : -1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Sorts the k conflicts by offset. Buffers live together can number in
 * the thousands (a training step's saved activations), and each chain
 * sorts its own: a radix sort on the offsets (multiples of MEM_ALIGN),
 * byte by byte over the bytes they use, costs a few passes over them
 * where qsort cost k log k calls. */
static void sort_conflicts(mem_planner_t *p, int k) {
  mem_conflict_t *c = p->conflicts, *tmp = p->sorted;
  if (k < 32) { /* insertion sort */
    for (int i = 1; i < k; i++) {
      mem_conflict_t x = c[i];
      int j = i;
      for (; j > 0 && c[j - 1].lo > x.lo; j--) c[j] = c[j - 1];
      c[j] = x;
    }
    return;
  }
  uint64_t top = 0;
  for (int i = 0; i < k; i++) top |= (uint64_t)c[i].lo / MEM_ALIGN;
  for (int shift = 0; shift < 64 && (top >> shift) != 0; shift += 8) {
    int count[257] = {0};
    for (int i = 0; i < k; i++) count[(((uint64_t)c[i].lo / MEM_ALIGN) >> shift & 255) + 1]++;
    for (int d = 0; d < 256; d++) count[d + 1] += count[d];
    for (int i = 0; i < k; i++) tmp[count[((uint64_t)c[i].lo / MEM_ALIGN) >> shift & 255]++] = c[i];
    mem_conflict_t *swap = c;
    c = tmp;
    tmp = swap;
  }
  if (c != p->conflicts)
    for (int i = 0; i < k; i++) p->conflicts[i] = c[i];
}

static int chain_tail(const mem_planner_t *p, int root) {
  int m = root;
  while (p->gave[m] >= 0) m = p->gave[m];
  return m;
}

static void sort_chains(mem_planner_t *p, mem_order_t order) {
  p->n_chains = 0;
  for (int i = 0; i < p->n; i++) {
    if (p->took[i] >= 0) continue;
    int64_t first = p->r[i].first, last = p->r[chain_tail(p, i)].last;
    int64_t size = p->size[i], span = last - first + 1;
    mem_key_t k = {size, span, i};
    if (order == MEM_ORDER_SPAN) k = (mem_key_t){span, size, i};
    if (order == MEM_ORDER_FIRST) k = (mem_key_t){-first, size, i};
    if (order == MEM_ORDER_AREA)
      k = (mem_key_t){size > INT64_MAX / span ? INT64_MAX : size * span, size, i};
    p->keys[p->n_chains++] = k;
  }
  qsort(p->keys, (size_t)p->n_chains, sizeof *p->keys, key_cmp);
}

/* ---- The index ---------------------------------------------------------- */

static int int64_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The first index of steps holding a step above v. */
static int32_t steps_above(const mem_index_t *x, int64_t v) {
  int32_t lo = 0, hi = x->n_steps;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (x->steps[mid] <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Counts request i in, or stores it into, each segment tree node that
 * covers its interval. */
static void index_cover(mem_index_t *x, int32_t i, bool store) {
  for (int l = x->lo[i] + x->leaves, r = x->hi[i] + x->leaves + 1; l < r; l >>= 1, r >>= 1) {
    if (l & 1) {
      if (store) x->node_items[x->node_start[l]++] = i;
      else x->node_start[l + 1]++;
      l++;
    }
    if (r & 1) {
      --r;
      if (store) x->node_items[x->node_start[r]++] = i;
      else x->node_start[r + 1]++;
    }
  }
}

/* Builds the index of the n requests in arrays allocated for n. */
static void index_build(mem_index_t *x, const mem_request_t *r, int n) {
  for (int i = 0; i < n; i++) x->steps[i] = r[i].first;
  qsort(x->steps, (size_t)n, sizeof *x->steps, int64_cmp);
  x->n_steps = 0;
  for (int i = 0; i < n; i++)
    if (i == 0 || x->steps[i] != x->steps[i - 1]) x->steps[x->n_steps++] = x->steps[i];
  for (x->leaves = 1; x->leaves < x->n_steps; x->leaves *= 2) {}
  for (int i = 0; i < n; i++) {
    x->lo[i] = steps_above(x, r[i].first) - 1;
    x->hi[i] = steps_above(x, r[i].last) - 1;
  }
  int nodes = 2 * x->leaves;
  for (int k = 0; k <= nodes; k++) x->node_start[k] = 0;
  for (int i = 0; i < n; i++) index_cover(x, i, false);
  for (int k = 0; k < nodes; k++) x->node_start[k + 1] += x->node_start[k];
  for (int i = 0; i < n; i++) index_cover(x, i, true);
  for (int k = nodes; k > 0; k--) x->node_start[k] = x->node_start[k - 1];
  x->node_start[0] = 0;
  for (int s = 0; s <= x->n_steps; s++) x->step_start[s] = 0;
  for (int i = 0; i < n; i++) x->step_start[x->lo[i] + 1]++;
  for (int s = 0; s < x->n_steps; s++) x->step_start[s + 1] += x->step_start[s];
  for (int i = 0; i < n; i++) x->by_first[x->step_start[x->lo[i]]++] = i;
  for (int s = x->n_steps; s > 0; s--) x->step_start[s] = x->step_start[s - 1];
  x->step_start[0] = 0;
}

/* ---- Placement (continued) ------------------------------------------------ */

/* Notes that placed buffer b is live beside chain member m. */
static void meet(mem_planner_t *p, int b, int m, int *k) {
  if (p->placed_in[b] != p->run || p->size[b] == 0) return;
  if (p->seen_in[b] != p->search) {
    p->seen_in[b] = p->search;
    p->entry[b] = *k;
    p->conflicts[(*k)++] = (mem_conflict_t){p->offsets[b], p->offsets[b] + p->size[b], 0, 0};
  }
  mem_conflict_t *c = &p->conflicts[p->entry[b]];
  if (p->size[m] > c->need) c->need = p->size[m];
}

/* The placed buffers live beside some member of the chain at root, with
 * the most bytes a member live beside each needs, sorted by offset. A
 * request live beside member m is live at m's first step, or starts
 * after it and no later than m's last. */
static int collect_conflicts(mem_planner_t *p, int root) {
  const mem_index_t *x = &p->index;
  int k = 0;
  p->search++;
  for (int m = root; m >= 0; m = p->gave[m]) {
    for (int node = x->lo[m] + x->leaves; node >= 1; node >>= 1)
      for (int32_t q = x->node_start[node]; q < x->node_start[node + 1]; q++)
        meet(p, x->node_items[q], m, &k);
    for (int32_t q = x->step_start[x->lo[m] + 1]; q < x->step_start[x->hi[m] + 1]; q++)
      meet(p, x->by_first[q], m, &k);
  }
  int kept = 0;
  for (int q = 0; q < k; q++)
    if (p->conflicts[q].need > 0) p->conflicts[kept++] = p->conflicts[q];
  sort_conflicts(p, kept);
  return kept;
}

/* Best fit: sweeping the conflicts by offset, each gap below the next one
 * is a candidate; the chain fits at `at` when at <= room. The top of the
 * highest conflict always fits. */
static int64_t best_offset(mem_conflict_t *c, int k, int64_t size) {
  for (int q = k - 1; q >= 0; q--) {
    c[q].room = c[q].lo - c[q].need;
    if (q + 1 < k && c[q + 1].room < c[q].room) c[q].room = c[q + 1].room;
  }
  int64_t at = 0, best = -1, best_waste = INT64_MAX;
  for (int q = 0; q < k; q++) {
    int64_t waste = c[q].lo - at - size;
    if (c[q].lo >= at && c[q].room >= at && waste < best_waste) {
      best = at;
      best_waste = waste;
    }
    if (c[q].hi > at) at = c[q].hi;
  }
  return best >= 0 ? best : at;
}

static void place_chain(mem_planner_t *p, int root) {
  int64_t at = 0;
  if (p->size[root] != 0) {
    int k = collect_conflicts(p, root);
    at = best_offset(p->conflicts, k, p->size[root]);
  }
  for (int m = root; m >= 0; m = p->gave[m]) {
    p->offsets[m] = at;
    p->placed_in[m] = p->run;
    p->placed[p->n_placed++] = m;
  }
}

static int64_t place_all(mem_planner_t *p, mem_order_t order) {
  sort_chains(p, order);
  p->n_placed = 0;
  p->run++;
  for (int c = 0; c < p->n_chains; c++) place_chain(p, p->keys[c].id);
  int64_t arena = 0;
  for (int i = 0; i < p->n; i++)
    if (p->offsets[i] + p->size[i] > arena) arena = p->offsets[i] + p->size[i];
  return arena;
}

/* ---- Entry points ------------------------------------------------------- */

static void planner_free(mem_planner_t *p) {
  core_free(p->size);
  core_free(p->took);
  core_free(p->gave);
  core_free(p->placed);
  core_free(p->conflicts);
  core_free(p->sorted);
  core_free(p->keys);
  core_free(p->offsets);
  core_free(p->events);
  core_free(p->placed_in);
  core_free(p->seen_in);
  core_free(p->entry);
  mem_index_t *x = &p->index;
  core_free(x->steps);
  core_free(x->lo);
  core_free(x->hi);
  core_free(x->node_start);
  core_free(x->node_items);
  core_free(x->by_first);
  core_free(x->step_start);
}

/* Room in x for n requests: a tree of at most 2 * leaves nodes, each
 * request in at most two nodes per level. */
static bool index_alloc(mem_index_t *x, size_t n) {
  size_t leaves = 1, levels = 1;
  for (; leaves < n; leaves *= 2) levels++;
  x->steps = core_malloc(n * sizeof *x->steps);
  x->lo = core_malloc(n * sizeof *x->lo);
  x->hi = core_malloc(n * sizeof *x->hi);
  x->node_start = core_malloc((2 * leaves + 1) * sizeof *x->node_start);
  x->node_items = core_malloc(2 * levels * n * sizeof *x->node_items);
  x->by_first = core_malloc(n * sizeof *x->by_first);
  x->step_start = core_malloc((n + 1) * sizeof *x->step_start);
  return x->steps && x->lo && x->hi && x->node_start && x->node_items && x->by_first &&
         x->step_start;
}

/* Scratch for n requests; planner_reset then takes the requests. */
static loom_status_t planner_alloc(mem_planner_t *p, int n) {
  size_t m = (size_t)(n ? n : 1);
  *p = (mem_planner_t){.n = n};
  p->size = core_malloc(m * sizeof *p->size);
  p->took = core_malloc(m * sizeof *p->took);
  p->gave = core_malloc(m * sizeof *p->gave);
  p->placed = core_malloc(m * sizeof *p->placed);
  p->conflicts = core_malloc(m * sizeof *p->conflicts);
  p->sorted = core_malloc(m * sizeof *p->sorted);
  p->keys = core_malloc(m * sizeof *p->keys);
  p->offsets = core_malloc(m * sizeof *p->offsets);
  p->events = core_malloc(4 * m * sizeof *p->events);
  p->placed_in = core_calloc(m, sizeof *p->placed_in);
  p->seen_in = core_calloc(m, sizeof *p->seen_in);
  p->entry = core_malloc(m * sizeof *p->entry);
  bool indexed = index_alloc(&p->index, m);
  if (!p->size || !p->took || !p->gave || !p->placed || !p->conflicts || !p->sorted ||
      !p->keys || !p->offsets || !p->events || !p->placed_in || !p->seen_in ||
      !p->entry || !indexed) {
    planner_free(p);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a memory plan");
  }
  return LOOM_OK;
}

static void planner_reset(mem_planner_t *p, const mem_request_t *r) {
  p->r = r;
  for (int i = 0; i < p->n; i++) {
    p->size[i] = align_up(r[i].bytes);
    p->took[i] = p->gave[i] = -1;
    p->placed_in[i] = p->seen_in[i] = 0;
  }
  p->run = p->search = 0;
  index_build(&p->index, r, p->n);
}

static void keep_best(mem_planner_t *p, mem_plan_t *out);

/* Chains, the lower bound, the naive sum and the best of the placement
 * orders, into out (whose offsets hold p->n); allocates nothing. */
static void planner_run(mem_planner_t *p, mem_plan_t *out) {
  out->n_inplace = link_chains(p);
  out->lower_bound_bytes = lower_bound(p);
  out->naive_bytes = 0;
  for (int i = 0; i < p->n; i++) out->naive_bytes += p->size[i];
  keep_best(p, out);
}

/* Tries the placement orders in turn; one that reaches the lower bound
 * cannot be beaten (no placement needs less than the bytes live at one
 * step), so the rest are not tried. */
static void keep_best(mem_planner_t *p, mem_plan_t *out) {
  out->arena_bytes = INT64_MAX;
  for (int o = 0; o < MEM_ORDER_COUNT && out->arena_bytes > out->lower_bound_bytes; o++) {
    int64_t arena = place_all(p, (mem_order_t)o);
    if (arena >= out->arena_bytes) continue;
    out->arena_bytes = arena;
    for (int i = 0; i < p->n; i++) out->offsets[i] = p->offsets[i];
  }
}

loom_status_t mem_plan_build(const mem_request_t *requests, int n,
                             mem_plan_t *out) {
  LOOM_CHECK_ARG(out);
  *out = (mem_plan_t){0};
  if (n < 0 || (n > 0 && !requests))
    return loom_fail(LOOM_ERR_INVALID, "memory plan: %d requests at %p", n,
                     (const void *)requests);
  LOOM_TRY(check_requests(requests, n));
  mem_planner_t p;
  LOOM_TRY(planner_alloc(&p, n));
  out->offsets = core_calloc((size_t)(n ? n : 1), sizeof *out->offsets);
  loom_status_t s = out->offsets
                        ? LOOM_OK
                        : loom_fail(LOOM_ERR_NOMEM, "out of memory for a memory plan");
  if (s == LOOM_OK) {
    planner_reset(&p, requests);
    planner_run(&p, out);
  }
  planner_free(&p);
  if (s != LOOM_OK) mem_plan_free(out);
  return s;
}

struct mem_replanner {
  mem_planner_t p;
};

loom_status_t mem_replanner_create(int n, mem_replanner_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  if (n < 0) return loom_fail(LOOM_ERR_INVALID, "memory plan: %d requests", n);
  mem_replanner_t *r = core_calloc(1, sizeof *r);
  if (!r) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a memory plan");
  loom_status_t s = planner_alloc(&r->p, n);
  if (s != LOOM_OK) {
    core_free(r);
    return s;
  }
  *out = r;
  return LOOM_OK;
}

loom_status_t mem_replan(mem_replanner_t *r, const mem_request_t *requests,
                         mem_plan_t *plan) {
  LOOM_CHECK_ARG(r);
  LOOM_CHECK_ARG(plan);
  if (r->p.n > 0 && (!requests || !plan->offsets))
    return loom_fail(LOOM_ERR_INVALID, "memory plan: no requests or offsets to replan");
  LOOM_TRY(check_requests(requests, r->p.n));
  planner_reset(&r->p, requests);
  planner_run(&r->p, plan);
  return LOOM_OK;
}

void mem_replanner_destroy(mem_replanner_t *r) {
  if (!r) return;
  planner_free(&r->p);
  core_free(r);
}

void mem_plan_free(mem_plan_t *plan) {
  if (!plan) return;
  core_free(plan->offsets);
  plan->offsets = NULL;
}
