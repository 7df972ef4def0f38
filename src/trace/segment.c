/* Cuts: a segment is the cone of nodes between materialized values and
 * the values to produce. Its GraphKey is hashed from the trace's per-node
 * hashes and the inputs' types under their shape policies, so that a hit
 * costs hashing, one lookup (or none, on the hot path), binding and the
 * run; the segment's description (to build its graph from) is made only
 * on a miss (segment_key.c). Looking up and running: segment_run.c, which
 * a cut calls; a cut's reason is counted here as a graph break. Reads,
 * callbacks, the backward pass and the step's end call seg_cut. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "core/tensor.h"
#include "trace/trace_internal.h"

static seg_work_t *work_of(loom_trace_t *t) { return (seg_work_t *)t->seg; }

void seg_work_free(loom_trace_t *t) {
  seg_work_t *w = work_of(t);
  if (!w) return;
  core_free(w->node_mark);
  core_free(w->node_pos);
  core_free(w->val_mark);
  core_free(w->out_mark);
  core_free(w->val_pos);
  core_free(w->cone);
  core_free(w->stack);
  core_free(w->ins);
  core_free(w->outs);
  core_free(w->in_types);
  core_free(w->key_in);
  core_free(w->wrt);
  core_free(w);
  t->seg = NULL;
}

/* Grows an epoch-marked table, zeroing the new part. */
static loom_status_t grow_marks(void **p, int64_t cap, int64_t need, size_t elem) {
  int64_t c = cap;
  LOOM_TRY(core_grow(p, &c, need, elem));
  memset((char *)*p + cap * (int64_t)elem, 0, (size_t)(c - cap) * elem);
  return LOOM_OK;
}

loom_status_t seg_work_reserve(loom_trace_t *t, seg_work_t **out) {
  if (!t->seg) {
    t->seg = core_calloc(1, sizeof(seg_work_t));
    if (!t->seg) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a cut");
  }
  seg_work_t *w = work_of(t);
  int64_t nn = t->g->n_nodes + 1, nv = t->g->n_values + 1;
  if (nn > w->cap_nodes) {
    LOOM_TRY(grow_marks((void **)&w->node_mark, w->cap_nodes, nn * 2, sizeof *w->node_mark));
    LOOM_TRY(grow_marks((void **)&w->node_pos, w->cap_nodes, nn * 2, sizeof *w->node_pos));
    w->cap_nodes = nn * 2;
  }
  if (nv > w->cap_vals) {
    LOOM_TRY(grow_marks((void **)&w->val_mark, w->cap_vals, nv * 2, sizeof *w->val_mark));
    LOOM_TRY(grow_marks((void **)&w->out_mark, w->cap_vals, nv * 2, sizeof *w->out_mark));
    LOOM_TRY(grow_marks((void **)&w->val_pos, w->cap_vals, nv * 2, sizeof *w->val_pos));
    w->cap_vals = nv * 2;
  }
  if (++w->epoch == 0) { /* wrapped: clear the marks once */
    memset(w->node_mark, 0, sizeof *w->node_mark * (size_t)w->cap_nodes);
    memset(w->val_mark, 0, sizeof *w->val_mark * (size_t)w->cap_vals);
    memset(w->out_mark, 0, sizeof *w->out_mark * (size_t)w->cap_vals);
    w->epoch = 1;
  }
  w->n_cone = w->n_ins = w->n_outs = w->n_wrt = 0;
  w->n_syms = w->n_groups = 0;
  w->bucket = w->train = w->stand_in = w->cone_is_region = false;
  w->exec_outs = NULL;
  w->n_exec_outs = 0;
  *out = w;
  return LOOM_OK;
}

static loom_status_t push(int32_t **list, int64_t *cap, int *n, int32_t v) {
  if (*n >= *cap) LOOM_TRY(core_grow((void **)list, cap, *n + 1, sizeof **list));
  (*list)[(*n)++] = v;
  return LOOM_OK;
}

/* Whether v has a tensor (constants get theirs on first use). */
static loom_status_t materialized(loom_trace_t *t, int32_t v, bool *out) {
  tr_value_t *x = &t->vals[v];
  const ir_value_t *iv = &t->g->values[v];
  if (!x->t && iv->kind == IR_VALUE_CONST) x->t = iv->data;
  if (!x->t && iv->kind != IR_VALUE_NODE) {
    char buf[64];
    return loom_fail(LOOM_ERR_BINDING, "trace: %s is a graph input without a "
                     "tensor; enter inputs with loom_trace_input",
                     ir_value_str(t->g, v, buf, sizeof buf));
  }
  *out = x->t != NULL;
  return LOOM_OK;
}

/* ---- Extraction ------------------------------------------------------------ */

static loom_status_t add_output(loom_trace_t *t, seg_work_t *w, int32_t v) {
  bool real = false;
  LOOM_TRY(materialized(t, v, &real));
  if (real || w->out_mark[v] == w->epoch) return LOOM_OK;
  w->out_mark[v] = w->epoch;
  return push(&w->outs, &w->cap_outs, &w->n_outs, v);
}

/* The values to produce: those asked for, the pending region's leaves
 * (no consumer yet: the likely future uses), and the values whose
 * gradients are retained. */
static loom_status_t collect_outputs(loom_trace_t *t, seg_work_t *w, int n,
                                     const int32_t *want) {
  for (int i = 0; i < n; i++) LOOM_TRY(add_output(t, w, want[i]));
  const loom_graph_t *g = t->g;
  for (int64_t j = t->region_start; j < g->n_nodes; j++) {
    const ir_node_t *node = &g->nodes[j];
    /* ran eagerly, or refused by the hook */
    if (ir_node_data_shaped(g, node) ||
        (ir_ops[node->op].flags & (F_SIDE_EFFECT | F_SUBGRAPH)))
      continue;
    for (int k = 0; k < node->n_out; k++)
      if (t->vals[node->out[k]].uses == 0 || t->vals[node->out[k]].retain)
        LOOM_TRY(add_output(t, w, node->out[k]));
  }
  return LOOM_OK;
}

/* The cone: nodes reached walking back from the outputs to materialized
 * values, in graph (topological) order. */
static loom_status_t collect_cone(loom_trace_t *t, seg_work_t *w) {
  const loom_graph_t *g = t->g;
  int n_stack = 0;
  int64_t lo = g->n_nodes, hi = -1;
  for (int i = 0; i < w->n_outs; i++) LOOM_TRY(push(&w->stack, &w->cap_stack, &n_stack, w->outs[i]));
  while (n_stack > 0) {
    int32_t v = w->stack[--n_stack];
    bool real = false;
    LOOM_TRY(materialized(t, v, &real));
    if (real) continue;
    int32_t node = g->values[v].node;
    if (w->node_mark[node] == w->epoch) continue;
    w->node_mark[node] = w->epoch;
    if (node < lo) lo = node;
    if (node > hi) hi = node;
    for (int i = 0; i < g->nodes[node].n_in; i++)
      LOOM_TRY(push(&w->stack, &w->cap_stack, &n_stack, g->nodes[node].in[i]));
  }
  for (int64_t j = lo; j <= hi; j++)
    if (w->node_mark[j] == w->epoch) {
      w->node_pos[j] = w->n_cone;
      LOOM_TRY(push(&w->cone, &w->cap_cone, &w->n_cone, (int32_t)j));
    }
  return LOOM_OK;
}

/* ---- Keeping recomputed values ---------------------------------------------
 * A cut keeps what is asked for and the region's leaves; a value read
 * again inside its own region (an RNN's cell state c, read by tanh(c)) is
 * not a leaf, so the next step would recompute it, and its own inputs,
 * back to the start. So a value a cone has to recompute is kept by that
 * cone, and the segment position that produced it is remembered: the
 * next segment of that shape keeps it at once, and after a few steps a
 * recurrent state is computed once and kept, with stable keys. */

static uint64_t keep_key(uint64_t cone_hash, int pos) {
  return tr_mix(cone_hash, (uint64_t)pos) | 1;
}

static bool keep_has(const loom_trace_t *t, uint64_t k) {
  if (!t->cap_keep) return false;
  for (int64_t i = (int64_t)(k & (uint64_t)(t->cap_keep - 1));; i = (i + 1) & (t->cap_keep - 1)) {
    if (t->keep[i] == k) return true;
    if (t->keep[i] == 0) return false;
  }
}

enum { KEEP_MAX = 1 << 16 };

/* Remembers k; a full set (KEEP_MAX) or no memory just stops learning. */
static void keep_add(loom_trace_t *t, uint64_t k) {
  if (keep_has(t, k)) return;
  if (2 * (t->n_keep + 1) > t->cap_keep) {
    int64_t cap = t->cap_keep ? 2 * t->cap_keep : 64;
    if (cap > KEEP_MAX) return;
    uint64_t *table = core_calloc((size_t)cap, sizeof *table);
    if (!table) return;
    for (int64_t i = 0; i < t->cap_keep; i++) {
      if (!t->keep[i]) continue;
      int64_t j = (int64_t)(t->keep[i] & (uint64_t)(cap - 1));
      while (table[j]) j = (j + 1) & (cap - 1);
      table[j] = t->keep[i];
    }
    core_free(t->keep);
    t->keep = table;
    t->cap_keep = cap;
  }
  int64_t j = (int64_t)(k & (uint64_t)(t->cap_keep - 1));
  while (t->keep[j]) j = (j + 1) & (t->cap_keep - 1);
  t->keep[j] = k;
  t->n_keep++;
  t->keep_gen++;
}

/* Learns to keep v where it last ran, if an earlier cut computed it. */
static void learn_keep(loom_trace_t *t, int32_t v) {
  const ir_value_t *iv = &t->g->values[v];
  if (iv->kind != IR_VALUE_NODE || iv->node >= t->region_start) return;
  uint64_t ran = t->node_ran[iv->node];
  if (ran && (int64_t)(ran >> 32) <= t->n_ran_cones)
    keep_add(t, keep_key(t->ran_cones[(ran >> 32) - 1], (int)(uint32_t)ran));
}

static loom_status_t keep_values(loom_trace_t *t, seg_work_t *w) {
  const loom_graph_t *g = t->g;
  uint64_t h = 0x6b;
  for (int c = 0; c < w->n_cone; c++) h = tr_mix(h, t->node_hash[w->cone[c]]);
  w->id.cone_hash = h;
  /* a value asked for that an earlier cut computed and dropped (a
   * training step's logits, read when the step ends after the backward
   * cut made the loss): that cut keeps it next time */
  for (int k = 0, n_asked = w->n_outs; k < n_asked; k++) learn_keep(t, w->outs[k]);
  for (int c = 0, n_cone = w->n_cone; c < n_cone; c++) {
    int32_t j = w->cone[c];
    const ir_node_t *n = &g->nodes[j];
    if (keep_has(t, keep_key(h, c)))
      for (int k = 0; k < n->n_out; k++) LOOM_TRY(add_output(t, w, n->out[k]));
    if (j < t->region_start) continue;
    for (int i = 0; i < n->n_in; i++) {
      const ir_value_t *iv = &g->values[n->in[i]];
      if (iv->kind != IR_VALUE_NODE || iv->node >= t->region_start ||
          w->node_mark[iv->node] != w->epoch)
        continue;
      LOOM_TRY(add_output(t, w, n->in[i]));
      learn_keep(t, n->in[i]);
    }
  }
  return LOOM_OK;
}

/* Inputs in first-use order, and the cone's hashes (w->id.site, w->id.sized). */
static loom_status_t collect_inputs(loom_trace_t *t, seg_work_t *w) {
  const loom_graph_t *g = t->g;
  uint64_t h = 0x51, wiring = 0x57;
  for (int c = 0; c < w->n_cone; c++) {
    const ir_node_t *n = &g->nodes[w->cone[c]];
    h = tr_mix(h, t->node_hash[w->cone[c]]);
    wiring = tr_mix(wiring, t->node_site[w->cone[c]]);
    for (int i = 0; i < n->n_in; i++) {
      int32_t v = n->in[i];
      if (t->vals[v].t && w->val_mark[v] != w->epoch) {
        w->val_mark[v] = w->epoch;
        w->val_pos[v] = w->n_ins;
        LOOM_TRY(push(&w->ins, &w->cap_ins, &w->n_ins, v));
      }
      seg_ref_t r = seg_ref_of(t, w, v);
      wiring = tr_mix(wiring, ((uint64_t)(uint32_t)r.node << 32) | (uint32_t)r.index);
    }
  }
  for (int k = 0; k < w->n_outs; k++) {
    seg_ref_t r = seg_ref_of(t, w, w->outs[k]);
    wiring = tr_mix(wiring, ((uint64_t)(uint32_t)r.node << 32) | (uint32_t)r.index);
  }
  w->id.site = wiring;
  w->id.sized = tr_mix(h, wiring);
  return LOOM_OK;
}

/* Training: the inputs gradients flow to, then (numbered n_ins + k) the
 * outputs whose whole gradients are retained. */
static loom_status_t collect_wrt(loom_trace_t *t, seg_work_t *w) {
  bool float_out = false;
  for (int k = 0; k < w->n_outs; k++) float_out |= t->vals[w->outs[k]].grad;
  if (!float_out) return LOOM_OK;
  if (w->n_ins + w->n_outs > w->cap_wrt)
    LOOM_TRY(core_grow((void **)&w->wrt, &w->cap_wrt, w->n_ins + w->n_outs, sizeof *w->wrt));
  for (int i = 0; i < w->n_ins; i++)
    if (t->vals[w->ins[i]].grad) w->wrt[w->n_wrt++] = i;
  for (int k = 0; k < w->n_outs && w->n_wrt > 0; k++)
    if (t->vals[w->outs[k]].retain && t->vals[w->outs[k]].grad)
      w->wrt[w->n_wrt++] = w->n_ins + k;
  w->train = w->n_wrt > 0;
  return LOOM_OK;
}

/* ---- Breaks and the cut ---------------------------------------------------- */

/* A break is its site and its kind (fmt, and the callback or op name):
 * the value id in a read's reason differs per invocation of one place of
 * the program (each cell of an RNN), so it is shown but not compared. */
static bool same_break(const tr_break_t *b, uint64_t site, const tr_reason_t *r) {
  return b->site == site && b->fmt == r->fmt &&
         (!r->str || !strncmp(b->str, r->str, sizeof b->str - 1));
}

loom_status_t tr_note_break(loom_trace_t *t, uint64_t site,
                            const tr_reason_t *r) {
  t->stats.breaks++;
  int64_t last = t->last_break; /* a loop repeats its break: try it first */
  if (last < t->n_breaks && same_break(&t->breaks[last], site, r)) {
    t->breaks[last].count++;
    return LOOM_OK;
  }
  for (int64_t i = 0; i < t->n_breaks; i++)
    if (same_break(&t->breaks[i], site, r)) {
      t->breaks[i].count++;
      t->last_break = i;
      return LOOM_OK;
    }
  LOOM_TRY(core_grow((void **)&t->breaks, &t->cap_breaks, t->n_breaks + 1,
                     sizeof *t->breaks));
  t->last_break = t->n_breaks;
  tr_break_t *b = &t->breaks[t->n_breaks++];
  memset(b, 0, sizeof *b);
  b->fmt = r->fmt;
  b->num = r->num;
  if (r->str) {
    snprintf(b->str, sizeof b->str, "%s", r->str);
    snprintf(b->reason, sizeof b->reason, r->fmt, b->str);
  } else {
    snprintf(b->reason, sizeof b->reason, r->fmt, (long long)r->num);
  }
  b->site = site;
  b->count = 1;
  core_log(LOG_BREAKS, "graph break at site %016llx: %s",
           (unsigned long long)site, b->reason);
  return LOOM_OK;
}

void seg_cut_done(loom_trace_t *t, seg_work_t *w) {
  /* no room to remember the cut: its nodes are as if they had not run (a
   * recomputed value is then not kept, nothing else changes) */
  uint64_t cut = (uint64_t)t->n_ran_cones + 1;
  if (t->n_ran_cones < t->cap_ran_cones ||
      core_grow((void **)&t->ran_cones, &t->cap_ran_cones, t->n_ran_cones + 1,
                sizeof *t->ran_cones) == LOOM_OK)
    t->ran_cones[t->n_ran_cones++] = w->id.cone_hash;
  else
    cut = 0, loom_clear_error();
  uint64_t *ran = w->cone_is_region ? t->node_ran + t->region_start : NULL;
  /* cone node c: cut << 32 | c, or 0 where the cut is not remembered */
  uint64_t at = cut << 32, step = cut ? 1 : 0;
  if (ran)
    for (int c = 0; c < w->n_cone; c++, at += step) ran[c] = at;
  else
    for (int c = 0; c < w->n_cone; c++, at += step) t->node_ran[w->cone[c]] = at;
  t->region_start = t->g->n_nodes;
  t->run.last_site = w->id.site;
  t->run.last_key = w->id.key_hash;
}

/* A cut that failed (an index out of range, a failing callback) leaves
 * its values unmade, and its region closed: later cuts make only what
 * they read, so a value that does not depend on the failure reads, and
 * one that does fails again with the same error, as eager ops would. */
static loom_status_t cut_failed(loom_trace_t *t, loom_status_t s) {
  t->region_start = t->g->n_nodes;
  return s;
}

loom_status_t seg_cut(loom_trace_t *t, int n, const int32_t *want,
                      const tr_reason_t *reason) {
  if (t->in_cut)
    return loom_fail(LOOM_ERR_INVALID, "trace: a cut inside a cut");
  LOOM_TRY(tr_reserve_values(t));
  seg_work_t *w = NULL;
  LOOM_TRY(seg_work_reserve(t, &w));
  bool done = false;
  t->in_cut = true;
  loom_status_t s = seg_replay(t, w, n, want, &done);
  t->in_cut = false;
  if (s == LOOM_OK && done && reason) s = tr_note_break(t, w->id.site, reason);
  if (s == LOOM_OK && done) seg_cut_done(t, w);
  if (s != LOOM_OK) return cut_failed(t, s);
  if (done) return s;
  LOOM_TRY(seg_work_reserve(t, &w));
  tr_link_t *link = seg_hot_link(t);
  rt_entry_t *predicted[TR_WAYS] = {NULL};
  for (int i = 0; link && i < TR_WAYS; i++) predicted[i] = link->next[i].to;
  uint64_t from_site = t->run.last_site, from_key = t->run.last_key;
  LOOM_TRY(collect_outputs(t, w, n, want));
  if (w->n_outs == 0) {
    t->region_start = t->g->n_nodes;
    return LOOM_OK;
  }
  t->in_cut = true;
  s = collect_cone(t, w);
  if (s == LOOM_OK) s = keep_values(t, w);
  if (s == LOOM_OK) s = collect_inputs(t, w);
  if (s == LOOM_OK) s = collect_wrt(t, w);
  if (s == LOOM_OK && reason) s = tr_note_break(t, w->id.site, reason);
  if (s == LOOM_OK) s = seg_run(t, w);
  t->in_cut = false;
  if (s != LOOM_OK) return cut_failed(t, s);
  /* stitched once the successor repeats: a link that changes at every cut
   * (segments that alternate) would allocate a stitch per cut */
  bool repeated = false;
  for (int i = 0; i < TR_WAYS; i++) repeated |= predicted[i] && predicted[i] == t->run.prev;
  if (repeated && !t->retains) seg_replay_record(t, w, link, from_site, from_key);
  seg_cut_done(t, w);
  return s;
}
