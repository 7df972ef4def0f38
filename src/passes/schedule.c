/* Scheduling: the order the fusion groups run in, chosen to keep the
 * bytes live at once low.
 *
 * A buffer is live from the group that writes it to the last group that
 * reads it. Greedy list schedules pick, among the groups whose inputs are
 * ready, the best by a priority; since no single priority wins on every
 * graph, each candidate order (one per priority, the first the plan's own
 * order) is simulated and the one with the lowest peak kept, the plan's
 * own on a tie. Assign groups always run last, in their relative order,
 * so that every read of a parameter sees its value from before the run.
 *
 * A group whose output is assigned to a parameter (an optimizer's new
 * weight) waits, while any other group is ready, until every other
 * reader of that parameter has run: then the runtime can write the new
 * value over the old one (compiler/inplace.c) instead of into a buffer of
 * its own copied back after the run. A dW GEMM with AdamW in its epilogue
 * and the dX GEMM reading the same weight are ready together.
 *
 * The output of an alias group (a reshape on contiguous data) shares its
 * input's storage, so a read of it keeps the input's buffer live. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "passes/memplan.h"

/* A list per group, stored flat: items[start[i] .. start[i + 1]). */
typedef struct sched_lists {
  int32_t *start, *items;
} sched_lists_t;

typedef struct sched_rank {
  int64_t major, minor;
} sched_rank_t;

/* A ready group's rank when it was queued: groups that wait for nothing
 * else to be ready (F_LATE: a collective's wait) last; before the others,
 * those that lead to the first pending F_EARLY group (a collective's
 * start, so that its communication overlaps the work after it: `due`);
 * then groups not held first, then by rank, then in the plan's order. A group's rank only improves while
 * it waits (its frees grow, a hold is lifted), and each change queues it
 * again, so the least entry whose version is the group's latest is the
 * best ready group, as a scan of them all would find. */
typedef struct sched_entry {
  bool late;   /* F_LATE */
  int32_t due; /* the first F_EARLY group it leads to, in plan order */
  bool held;
  sched_rank_t rank;
  int32_t group, version;
} sched_entry_t;

typedef struct sched {
  const loom_graph_t *g;
  const fuse_plan_t *plan;
  int n;                  /* groups */
  int64_t n_values;
  const int64_t *bytes;   /* per value; < 0: no buffer */
  int32_t *storage;       /* value -> the value whose buffer holds it */
  int32_t *maker;         /* value -> the group that writes its buffer, -1 */
  int32_t *stamp;         /* per value or group: last group that saw it */
  sched_lists_t reads;    /* buffers (storage values) a group reads */
  sched_lists_t writes;   /* buffers a group writes */
  sched_lists_t succs;    /* groups that read a group's outputs */
  int32_t *n_preds;       /* distinct groups a group reads from */
  int32_t *readers;       /* per value: groups reading its buffer */
  bool *is_assign;
  int32_t *assigned_to;   /* per value: the parameter assigned it, or -1 */
  int32_t *param_readers; /* per parameter: non-assign groups reading it */
  /* scratch for one schedule */
  int32_t *param_left;    /* per parameter: those readers not yet run */
  int32_t *left;          /* per value: readers not yet run */
  int32_t *waiting;       /* per group: predecessors not yet run */
  int32_t *step_of;       /* per group: its step, or -1 */
  int32_t *ready;
  int n_ready;
  int32_t *best;          /* the best order so far */
  /* The greedy schedules' ready groups, by rank (see greedy_order). */
  sched_lists_t readers_of; /* per buffer: the groups reading it */
  sched_lists_t writers_of; /* per parameter: groups computing its new value */
  sched_entry_t *heap;
  int n_heap;
  int32_t *version;       /* per group: its latest entry in heap */
  bool *queued_held;      /* per group: held, as its latest entry says */
  bool *late;             /* per group: sched_entry_t's late and due */
  int32_t *due;
} sched_t;

typedef enum sched_priority {
  SCHED_PLAN,       /* the plan's order */
  SCHED_FREE_MOST,  /* frees the most, then allocates the least */
  SCHED_DEPTH,      /* continues the most recently run branch */
  SCHED_PRIORITY_COUNT,
} sched_priority_t;

static bool has_buffer(const sched_t *s, int32_t v) {
  return s->bytes[v] >= 0 && s->maker[v] >= 0;
}

static int32_t producer_group(const sched_t *s, int32_t v) {
  const ir_value_t *val = &s->g->values[v];
  return val->kind == IR_VALUE_NODE ? s->plan->group_of_node[val->node] : -1;
}

/* ---- Checking the plan -------------------------------------------------- */

static loom_status_t check_ids(const sched_t *s, const fuse_group_t *grp, int i) {
  for (int k = 0; k < grp->n_nodes; k++)
    if (grp->nodes[k] < 0 || grp->nodes[k] >= s->g->n_nodes)
      return loom_fail(LOOM_ERR_INVALID, "schedule: group %d names node %d", i,
                       (int)grp->nodes[k]);
  for (int k = 0; k < grp->n_inputs + grp->n_outputs; k++) {
    int32_t v = k < grp->n_inputs ? grp->inputs[k] : grp->outputs[k - grp->n_inputs];
    if (v < 0 || v >= s->n_values)
      return loom_fail(LOOM_ERR_INVALID, "schedule: group %d names value %d",
                       i, (int)v);
  }
  return LOOM_OK;
}

static loom_status_t check_plan(const sched_t *s) {
  for (int64_t i = 0; i < s->g->n_nodes; i++)
    if (s->plan->group_of_node[i] < 0 || s->plan->group_of_node[i] >= s->n)
      return loom_fail(LOOM_ERR_INVALID, "schedule: node %lld is in group %d",
                       (long long)i, (int)s->plan->group_of_node[i]);
  for (int i = 0; i < s->n; i++) LOOM_TRY(check_ids(s, &s->plan->groups[i], i));
  return LOOM_OK;
}

/* ---- Building the lists ------------------------------------------------- */

/* Alias outputs take their input's storage; plan order puts the input's
 * own alias (if any) first. Other outputs with a buffer are written. */
static void find_storage(sched_t *s) {
  for (int64_t v = 0; v < s->n_values; v++) {
    s->storage[v] = (int32_t)v;
    s->maker[v] = -1;
  }
  for (int i = 0; i < s->n; i++) {
    const fuse_group_t *grp = &s->plan->groups[i];
    bool alias = grp->kind == FUSE_ALIAS && grp->n_inputs > 0;
    for (int k = 0; k < grp->n_outputs; k++) {
      int32_t v = grp->outputs[k];
      if (alias) s->storage[v] = s->storage[grp->inputs[0]];
      else if (s->bytes[v] >= 0) s->maker[v] = i;
    }
  }
}

/* Fills one list per group from add(s, group, items), run twice: once to
 * count, once to store. */
typedef int (*sched_list_fn)(sched_t *s, int group, int32_t *items);

static loom_status_t build_list(sched_t *s, sched_lists_t *l, sched_list_fn add) {
  l->start = core_calloc((size_t)s->n + 1, sizeof *l->start);
  if (!l->start) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
  for (int i = 0; i < s->n; i++) l->start[i + 1] = l->start[i] + add(s, i, NULL);
  l->items = core_malloc(sizeof *l->items * (size_t)(l->start[s->n] + 1));
  if (!l->items) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
  for (int i = 0; i < s->n; i++) add(s, i, l->items + l->start[i]);
  return LOOM_OK;
}

static int add_reads(sched_t *s, int group, int32_t *items) {
  const fuse_group_t *grp = &s->plan->groups[group];
  int k = 0;
  for (int q = 0; q < grp->n_inputs; q++) {
    int32_t b = s->storage[grp->inputs[q]];
    if (!has_buffer(s, b) || s->maker[b] == group || s->stamp[b] == group)
      continue;
    s->stamp[b] = group;
    if (items) items[k] = b;
    k++;
  }
  for (int q = 0; q < grp->n_inputs; q++) s->stamp[s->storage[grp->inputs[q]]] = -1;
  return k;
}

static int add_writes(sched_t *s, int group, int32_t *items) {
  const fuse_group_t *grp = &s->plan->groups[group];
  int k = 0;
  for (int q = 0; q < grp->n_outputs; q++) {
    int32_t v = grp->outputs[q];
    if (s->maker[v] != group || s->stamp[v] == group) continue;
    s->stamp[v] = group;
    if (items) items[k] = v;
    k++;
  }
  for (int q = 0; q < grp->n_outputs; q++) s->stamp[grp->outputs[q]] = -1;
  return k;
}

/* Adds delta to counts[p] for each parameter p that group reads (itself
 * or through a view), once per parameter. */
static void for_each_param_read(sched_t *s, int group, int32_t *counts, int delta) {
  const fuse_group_t *grp = &s->plan->groups[group];
  for (int q = 0; q < grp->n_inputs; q++) {
    int32_t p = s->storage[grp->inputs[q]];
    if (s->g->values[p].kind != IR_VALUE_PARAM || s->stamp[p] == group) continue;
    s->stamp[p] = group;
    counts[p] += delta;
  }
  for (int q = 0; q < grp->n_inputs; q++) s->stamp[s->storage[grp->inputs[q]]] = -1;
}

/* Whether group computes a parameter's new value while other readers of
 * the parameter's old value have yet to run. */
static bool held(const sched_t *s, int group) {
  const fuse_group_t *grp = &s->plan->groups[group];
  for (int o = 0; o < grp->n_outputs; o++) {
    int32_t p = s->assigned_to[grp->outputs[o]];
    if (p < 0) continue;
    int own = 0;
    for (int q = 0; q < grp->n_inputs; q++) own |= s->storage[grp->inputs[q]] == p;
    if (s->param_left[p] > own) return true;
  }
  return false;
}

static bool has_collective(const sched_t *s, int i) {
  const fuse_group_t *grp = &s->plan->groups[i];
  for (int k = 0; k < grp->n_nodes; k++)
    if (ir_ops[s->g->nodes[grp->nodes[k]].op].flags & F_COLLECTIVE) return true;
  return false;
}

/* A group's producers: those of its inputs, and for a collective the
 * collective before it in plan (graph) order, so that every rank issues
 * its collectives in one order whatever the schedule. */
static int32_t nth_producer(const sched_t *s, int i, int q, int32_t prev_collective) {
  const fuse_group_t *grp = &s->plan->groups[i];
  if (q < grp->n_inputs) return producer_group(s, grp->inputs[q]);
  return prev_collective;
}

/* Successors are found from the reading side: group i lists itself under
 * each distinct producer (nth_producer). Stored by producer, so built by
 * hand rather than with build_list. */
static loom_status_t build_succs(sched_t *s) {
  sched_lists_t *l = &s->succs;
  l->start = core_calloc((size_t)s->n + 1, sizeof *l->start);
  int32_t *fill = core_calloc((size_t)s->n + 1, sizeof *fill);
  if (!l->start || !fill) {
    core_free(fill);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
  }
  for (int pass = 0; pass < 2; pass++) {
    int32_t prev_collective = -1;
    for (int i = 0; i < s->n; i++) {
      const fuse_group_t *grp = &s->plan->groups[i];
      bool collective = has_collective(s, i);
      for (int q = 0; q < grp->n_inputs + collective; q++) {
        int32_t p = nth_producer(s, i, q, prev_collective);
        if (p < 0 || p == i || s->stamp[p] == i) continue;
        s->stamp[p] = i;
        if (pass == 0) l->start[p + 1]++, s->n_preds[i]++;
        else l->items[l->start[p] + fill[p]++] = i;
      }
      if (collective) prev_collective = i;
    }
    for (int i = 0; i < s->n; i++) s->stamp[i] = -1;
    if (pass == 1) break;
    for (int i = 0; i < s->n; i++) l->start[i + 1] += l->start[i];
    l->items = core_malloc(sizeof *l->items * (size_t)(l->start[s->n] + 1));
    if (!l->items) break;
  }
  core_free(fill);
  return l->items ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
}

static void find_assigns_and_readers(sched_t *s) {
  for (int64_t v = 0; v < s->n_values; v++) s->assigned_to[v] = -1;
  for (int i = 0; i < s->n; i++) {
    const fuse_group_t *grp = &s->plan->groups[i];
    for (int k = 0; k < grp->n_nodes; k++) {
      const ir_node_t *node = &s->g->nodes[grp->nodes[k]];
      if (node->op != IR_OP_ASSIGN) continue;
      s->is_assign[i] = true;
      s->assigned_to[node->in[1]] = node->in[0];
    }
    for (int q = s->reads.start[i]; q < s->reads.start[i + 1]; q++)
      s->readers[s->reads.items[q]]++;
  }
  for (int i = 0; i < s->n; i++)
    if (!s->is_assign[i]) for_each_param_read(s, i, s->param_readers, 1);
}

/* ---- Setup and teardown ------------------------------------------------- */

static void sched_free(sched_t *s) {
  void *all[] = {s->storage, s->maker, s->stamp, s->reads.start, s->reads.items,
                 s->writes.start, s->writes.items, s->succs.start, s->succs.items,
                 s->n_preds, s->readers, s->is_assign, s->left, s->waiting,
                 s->step_of, s->ready, s->best, s->assigned_to, s->param_readers,
                 s->param_left, s->readers_of.start, s->readers_of.items,
                 s->writers_of.start, s->writers_of.items, s->heap, s->version,
                 s->queued_held, s->late, s->due};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) core_free(all[i]);
}

static loom_status_t sched_alloc(sched_t *s) {
  size_t nv = (size_t)s->n_values + 1, ng = (size_t)s->n + 1;
  size_t nstamp = nv > ng ? nv : ng;
  s->storage = core_malloc(nv * sizeof(int32_t));
  s->maker = core_malloc(nv * sizeof(int32_t));
  s->stamp = core_malloc(nstamp * sizeof(int32_t));
  s->readers = core_calloc(nv, sizeof(int32_t));
  s->left = core_malloc(nv * sizeof(int32_t));
  s->n_preds = core_calloc(ng, sizeof(int32_t));
  s->is_assign = core_calloc(ng, sizeof(bool));
  s->waiting = core_malloc(ng * sizeof(int32_t));
  s->step_of = core_malloc(ng * sizeof(int32_t));
  s->ready = core_malloc(ng * sizeof(int32_t));
  s->best = core_malloc(ng * sizeof(int32_t));
  s->assigned_to = core_malloc(nv * sizeof(int32_t));
  s->param_readers = core_calloc(nv, sizeof(int32_t));
  s->param_left = core_malloc(nv * sizeof(int32_t));
  if (!s->storage || !s->maker || !s->stamp || !s->readers || !s->left ||
      !s->n_preds || !s->is_assign || !s->waiting || !s->step_of ||
      !s->ready || !s->best || !s->assigned_to || !s->param_readers || !s->param_left)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
  for (size_t i = 0; i < nstamp; i++) s->stamp[i] = -1;
  return LOOM_OK;
}

/* Inverts per-group lists into per-value ones: out's list of value v
 * holds each group with an item in by_group whose key is v. */
typedef int32_t (*sched_key_fn)(const sched_t *s, int group, int32_t item);

static int32_t item_itself(const sched_t *s, int group, int32_t item) {
  (void)s, (void)group;
  return item;
}

static loom_status_t invert_list(sched_t *s, const sched_lists_t *by_group,
                                 sched_key_fn key, sched_lists_t *out) {
  size_t nv = (size_t)s->n_values + 1;
  out->start = core_calloc(nv + 1, sizeof *out->start);
  out->items = core_malloc(sizeof *out->items * (size_t)(by_group->start[s->n] + 1));
  if (!out->start || !out->items) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
  for (int i = 0; i < s->n; i++)
    for (int q = by_group->start[i]; q < by_group->start[i + 1]; q++) {
      int32_t v = key(s, i, by_group->items[q]);
      if (v >= 0) out->start[v + 1]++;
    }
  for (int64_t v = 0; v < s->n_values; v++) out->start[v + 1] += out->start[v];
  for (int i = 0; i < s->n; i++)
    for (int q = by_group->start[i]; q < by_group->start[i + 1]; q++) {
      int32_t v = key(s, i, by_group->items[q]);
      if (v >= 0) out->items[out->start[v]++] = i;
    }
  for (int64_t v = s->n_values; v > 0; v--) out->start[v] = out->start[v - 1];
  out->start[0] = 0;
  return LOOM_OK;
}

/* The parameter that output `item` of group is assigned to, or -1. */
static int32_t param_assigned(const sched_t *s, int group, int32_t item) {
  (void)group;
  return s->assigned_to[item];
}

/* All outputs of a group, as a list per group, for writers_of. */
static int add_outputs(sched_t *s, int group, int32_t *items) {
  const fuse_group_t *grp = &s->plan->groups[group];
  if (items) memcpy(items, grp->outputs, sizeof(int32_t) * (size_t)grp->n_outputs);
  return grp->n_outputs;
}

/* late and due per group: successors come after their producers in plan
 * order, so one backward walk carries each start's index to everything
 * it needs. */
static void find_timing(sched_t *s) {
  for (int i = 0; i < s->n; i++) {
    const fuse_group_t *grp = &s->plan->groups[i];
    s->due[i] = INT32_MAX;
    for (int k = 0; k < grp->n_nodes; k++) {
      uint32_t f = ir_ops[s->g->nodes[grp->nodes[k]].op].flags;
      if (f & F_EARLY) s->due[i] = i;
      if (f & F_LATE) s->late[i] = true;
    }
  }
  for (int i = s->n - 1; i >= 0; i--)
    for (int q = s->succs.start[i]; q < s->succs.start[i + 1]; q++)
      if (s->due[s->succs.items[q]] < s->due[i]) s->due[i] = s->due[s->succs.items[q]];
}

static loom_status_t sched_init(sched_t *s) {
  LOOM_TRY(sched_alloc(s));
  find_storage(s);
  LOOM_TRY(build_list(s, &s->writes, add_writes));
  LOOM_TRY(build_list(s, &s->reads, add_reads));
  LOOM_TRY(build_succs(s));
  find_assigns_and_readers(s);
  LOOM_TRY(invert_list(s, &s->reads, item_itself, &s->readers_of));
  sched_lists_t outputs = {0};
  loom_status_t st = build_list(s, &outputs, add_outputs);
  if (st == LOOM_OK) st = invert_list(s, &outputs, param_assigned, &s->writers_of);
  core_free(outputs.start);
  core_free(outputs.items);
  LOOM_TRY(st);
  /* Entries: one when a group becomes ready, one when its frees grow
   * (a buffer it reads is left to it: once per buffer), one when it is
   * no longer held. */
  s->heap = core_malloc(sizeof *s->heap * ((size_t)s->n * 2 + (size_t)s->reads.start[s->n] + 1));
  s->version = core_calloc((size_t)s->n + 1, sizeof *s->version);
  s->queued_held = core_calloc((size_t)s->n + 1, sizeof *s->queued_held);
  s->late = core_calloc((size_t)s->n + 1, sizeof *s->late);
  s->due = core_malloc(((size_t)s->n + 1) * sizeof *s->due);
  if (!s->heap || !s->version || !s->queued_held || !s->late || !s->due)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a schedule");
  find_timing(s);
  return LOOM_OK;
}

/* ---- Simulating a schedule ---------------------------------------------- */

static int64_t allocates(const sched_t *s, int group) {
  int64_t sum = 0;
  for (int q = s->writes.start[group]; q < s->writes.start[group + 1]; q++)
    sum += s->bytes[s->writes.items[q]];
  return sum;
}

/* Bytes freed after group runs: buffers it reads last, and its own
 * outputs that nobody reads. */
static int64_t frees(const sched_t *s, int group) {
  int64_t sum = 0;
  for (int q = s->reads.start[group]; q < s->reads.start[group + 1]; q++)
    if (s->left[s->reads.items[q]] == 1) sum += s->bytes[s->reads.items[q]];
  for (int q = s->writes.start[group]; q < s->writes.start[group + 1]; q++)
    if (s->readers[s->writes.items[q]] == 0) sum += s->bytes[s->writes.items[q]];
  return sum;
}

static void reset(sched_t *s) {
  memcpy(s->left, s->readers, sizeof(int32_t) * (size_t)s->n_values);
  memcpy(s->waiting, s->n_preds, sizeof(int32_t) * (size_t)s->n);
  memcpy(s->param_left, s->param_readers, sizeof(int32_t) * (size_t)s->n_values);
  for (int i = 0; i < s->n; i++) s->step_of[i] = -1;
  s->n_ready = 0;
}

/* Runs group at step: returns the change in live bytes after it. */
static int64_t run_group(sched_t *s, int group, int step) {
  int64_t freed = frees(s, group);
  for (int q = s->reads.start[group]; q < s->reads.start[group + 1]; q++)
    s->left[s->reads.items[q]]--;
  s->step_of[group] = step;
  if (!s->is_assign[group]) for_each_param_read(s, group, s->param_left, -1);
  for (int q = s->succs.start[group]; q < s->succs.start[group + 1]; q++) {
    int succ = s->succs.items[q];
    if (--s->waiting[succ] == 0 && !s->is_assign[succ]) s->ready[s->n_ready++] = succ;
  }
  return allocates(s, group) - freed;
}

/* The most bytes live at one step when groups run in order. */
static int64_t order_peak(sched_t *s, const int32_t *order) {
  reset(s);
  int64_t live = 0, peak = 0;
  for (int t = 0; t < s->n; t++) {
    int64_t in_step = live + allocates(s, order[t]);
    if (in_step > peak) peak = in_step;
    live += run_group(s, order[t], t);
  }
  return peak;
}

/* ---- Greedy list schedules ---------------------------------------------- */

static sched_rank_t rank_of(const sched_t *s, int group, sched_priority_t p) {
  if (p == SCHED_PLAN) return (sched_rank_t){group, 0};
  int64_t alloc = allocates(s, group), net = alloc - frees(s, group);
  if (p == SCHED_FREE_MOST) return (sched_rank_t){net, alloc};
  int64_t latest = -1;
  const fuse_group_t *grp = &s->plan->groups[group];
  for (int q = 0; q < grp->n_inputs; q++) {
    int32_t pg = producer_group(s, grp->inputs[q]);
    if (pg >= 0 && pg != group && s->step_of[pg] > latest) latest = s->step_of[pg];
  }
  return (sched_rank_t){-latest, net};
}

static bool entry_before(const sched_entry_t *a, const sched_entry_t *b) {
  if (a->late != b->late) return !a->late;
  if (a->due != b->due) return a->due < b->due;
  if (a->held != b->held) return !a->held;
  if (a->rank.major != b->rank.major) return a->rank.major < b->rank.major;
  if (a->rank.minor != b->rank.minor) return a->rank.minor < b->rank.minor;
  return a->group < b->group;
}

static void heap_push(sched_t *s, sched_entry_t e) {
  int i = s->n_heap++;
  for (; i > 0 && entry_before(&e, &s->heap[(i - 1) / 2]); i = (i - 1) / 2)
    s->heap[i] = s->heap[(i - 1) / 2];
  s->heap[i] = e;
}

static sched_entry_t heap_pop(sched_t *s) {
  sched_entry_t top = s->heap[0], last = s->heap[--s->n_heap];
  int i = 0;
  for (int c; (c = 2 * i + 1) < s->n_heap; i = c) {
    if (c + 1 < s->n_heap && entry_before(&s->heap[c + 1], &s->heap[c])) c++;
    if (!entry_before(&s->heap[c], &last)) break;
    s->heap[i] = s->heap[c];
  }
  s->heap[i] = last;
  return top;
}

/* Queues group (ready) with its rank now. */
static void enqueue(sched_t *s, int group, sched_priority_t p) {
  s->queued_held[group] = held(s, group);
  heap_push(s, (sched_entry_t){s->late[group], s->due[group], s->queued_held[group],
                               rank_of(s, group, p), group, ++s->version[group]});
}

static bool waits_ready(const sched_t *s, int group) {
  return s->waiting[group] == 0 && s->step_of[group] < 0 && !s->is_assign[group];
}

/* After group ran: the groups it made ready, the group now last to read
 * a buffer it read (its frees grew), and those computing new values of
 * the parameters it read (their hold may be lifted) are queued again. */
static void requeue(sched_t *s, int group, sched_priority_t p) {
  for (int k = 0; k < s->n_ready; k++) enqueue(s, s->ready[k], p);
  s->n_ready = 0;
  for (int q = s->reads.start[group]; q < s->reads.start[group + 1]; q++) {
    int32_t b = s->reads.items[q];
    if (s->left[b] != 1 || p == SCHED_PLAN) continue;
    for (int r = s->readers_of.start[b]; r < s->readers_of.start[b + 1]; r++)
      if (waits_ready(s, s->readers_of.items[r])) enqueue(s, s->readers_of.items[r], p);
  }
  if (s->is_assign[group]) return;
  const fuse_group_t *grp = &s->plan->groups[group];
  for (int q = 0; q < grp->n_inputs; q++) {
    int32_t v = s->storage[grp->inputs[q]];
    if (s->g->values[v].kind != IR_VALUE_PARAM) continue;
    for (int w = s->writers_of.start[v]; w < s->writers_of.start[v + 1]; w++) {
      int h = s->writers_of.items[w];
      if (waits_ready(s, h) && s->queued_held[h] && !held(s, h)) enqueue(s, h, p);
    }
  }
}

static loom_status_t greedy_order(sched_t *s, sched_priority_t p, int32_t *order) {
  reset(s);
  s->n_heap = 0;
  for (int i = 0; i < s->n; i++)
    if (s->n_preds[i] == 0 && !s->is_assign[i]) enqueue(s, i, p);
  int t = 0;
  while (s->n_heap > 0) {
    sched_entry_t e = heap_pop(s);
    if (e.version != s->version[e.group] || s->step_of[e.group] >= 0) continue;
    order[t] = e.group;
    run_group(s, e.group, t++);
    requeue(s, e.group, p);
  }
  for (int i = 0; i < s->n; i++)
    if (s->is_assign[i]) order[t++] = i;
  if (t != s->n)
    return loom_fail(LOOM_ERR_INVALID,
                     "schedule: %d of %d groups wait on a cycle or an assign",
                     s->n - t, s->n);
  return LOOM_OK;
}

static loom_status_t choose_order(sched_t *s, int32_t *order) {
  LOOM_TRY(greedy_order(s, SCHED_PLAN, s->best));
  int64_t best_peak = order_peak(s, s->best);
  for (int p = SCHED_PLAN + 1; p < SCHED_PRIORITY_COUNT; p++) {
    LOOM_TRY(greedy_order(s, (sched_priority_t)p, order));
    int64_t peak = order_peak(s, order);
    if (peak >= best_peak) continue;
    best_peak = peak;
    memcpy(s->best, order, sizeof(int32_t) * (size_t)s->n);
  }
  memcpy(order, s->best, sizeof(int32_t) * (size_t)s->n);
  return LOOM_OK;
}

loom_status_t sched_order(const loom_graph_t *g, const fuse_plan_t *plan,
                          const int64_t *bytes_of_value, int32_t *order) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(plan);
  LOOM_CHECK_ARG(bytes_of_value);
  if (plan->n_groups == 0) return LOOM_OK;
  LOOM_CHECK_ARG(order);
  sched_t s = {.g = g, .plan = plan, .n = plan->n_groups,
               .n_values = g->n_values, .bytes = bytes_of_value};
  loom_status_t st = check_plan(&s);
  if (st == LOOM_OK) st = sched_init(&s);
  if (st == LOOM_OK) st = choose_order(&s, order);
  sched_free(&s);
  return st;
}
