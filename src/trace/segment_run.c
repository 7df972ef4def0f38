/* Running segments: the hot path (each entry's predicted successor), the
 * lookup, compiles on a miss with speculation of the next buckets, binding
 * (padded to buckets, sliced back), the interpreter fallback, and the tape
 * records of training segments. The cut (segment.c) calls it; it keys and
 * describes through segment_key.c, runs through segment_pack.c and
 * records through tape.c. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/interp.h"
#include "trace/trace_internal.h"

static void release_ctx(void *ctx) { seg_desc_release(ctx); }

/* ---- The hot path -------------------------------------------------------------- */

static tr_link_t *link_slot(loom_trace_t *t, rt_entry_t *from) {
  uint64_t h = tr_mix(0x99, (uint64_t)(uintptr_t)from);
  for (int probe = 0; probe < TR_LINKS; probe++) {
    tr_link_t *l = &t->run.links[(h + (uint64_t)probe) & (TR_LINKS - 1)];
    if (!l->next[0].to || l->from == from) return l;
  }
  return NULL;
}

/* Gives up successor s: its entry's reference and its replay. */
static void succ_clear(loom_trace_t *t, tr_succ_t *s) {
  if (s->to) rt_entry_release(t->cache, s->to);
  core_free(s->replay);
  *s = (tr_succ_t){0};
}

/* Makes way i of l its latest. */
static void promote(tr_link_t *l, int i) {
  tr_succ_t s = l->next[i];
  for (; i > 0; i--) l->next[i] = l->next[i - 1];
  l->next[0] = s;
}

void seg_links_clear(loom_trace_t *t) {
  for (int i = 0; i < TR_LINKS; i++) {
    for (int k = 0; k < TR_WAYS; k++) succ_clear(t, &t->run.links[i].next[k]);
    t->run.links[i] = (tr_link_t){0};
  }
  t->run.prev = NULL;
  t->run.prev_valid = false;
}

/* The step start links from this sentinel. */
static rt_entry_t *from_key(loom_trace_t *t) {
  return t->run.prev ? t->run.prev : (rt_entry_t *)t->run.links;
}

tr_link_t *seg_hot_link(loom_trace_t *t) {
  return t->run.prev_valid ? link_slot(t, from_key(t)) : NULL;
}

/* The predicted successor whose key hash matches, made the latest. */
static rt_entry_t *follow(loom_trace_t *t, uint64_t hash) {
  tr_link_t *l = seg_hot_link(t);
  for (int i = 0; l && i < TR_WAYS && l->next[i].to; i++)
    if (l->next[i].to_hash == hash) {
      promote(l, i);
      return l->next[0].to;
    }
  return NULL;
}

/* Records prev -> e as the link's latest way, then e as prev. The link
 * takes over the reference held on e (its oldest way is given up to make
 * room), or it is given back where no link can be kept or e is a way
 * already. */
static void link_to(loom_trace_t *t, rt_entry_t *e, uint64_t hash) {
  tr_link_t *l = t->run.prev_valid ? link_slot(t, from_key(t)) : NULL; /* prev's, or empty */
  int i = 0;
  while (l && i < TR_WAYS && l->next[i].to &&
         !(l->next[i].to == e && l->next[i].to_hash == hash))
    i++;
  if (!l || (i < TR_WAYS && l->next[i].to)) {
    rt_entry_release(t->cache, e);
    if (l) promote(l, i);
  } else {
    if (i == TR_WAYS) succ_clear(t, &l->next[--i]);
    l->from = from_key(t);
    l->next[i] = (tr_succ_t){.to = e, .to_hash = hash};
    promote(l, i);
  }
  /* Only a key from here on: a link from a released entry still checks
   * its successor's key hash before it is followed. */
  t->run.prev = e;
  t->run.prev_valid = true;
}

/* ---- Running ---------------------------------------------------------------- */

loom_status_t seg_pad_copy(const loom_tensor_t *x, const int64_t *shape,
                           loom_tensor_t **out) {
  LOOM_TRY(tensor_new(x->dtype, x->rank, shape, out));
  int64_t n = loom_tensor_numel(x), es = (int64_t)loom_dtype_size(x->dtype);
  int64_t row = x->rank ? x->shape[x->rank - 1] : 1;
  for (int64_t i = 0; i < n; i += row) { /* one innermost row at a time */
    int64_t rem = i, off = 0, stride = 1;
    for (int a = x->rank - 1; a >= 0; a--) {
      off += (rem % x->shape[a]) * stride;
      rem /= x->shape[a];
      stride *= shape[a];
    }
    memcpy((char *)(*out)->data + off * es, (const char *)x->data + i * es,
           (size_t)(row * es));
  }
  return LOOM_OK;
}

loom_status_t seg_slice_copy(const loom_tensor_t *p, int rank,
                             const int64_t *shape, loom_tensor_t **out) {
  LOOM_TRY(tensor_new(p->dtype, rank, shape, out));
  int64_t n = shape_numel(rank, shape), es = (int64_t)loom_dtype_size(p->dtype);
  int64_t row = rank ? shape[rank - 1] : 1;
  for (int64_t i = 0; i < n && row > 0; i += row) {
    int64_t rem = i, off = 0, stride = 1;
    for (int a = rank - 1; a >= 0; a--) {
      off += (rem % shape[a]) * stride;
      rem /= shape[a];
      stride *= p->shape[a];
    }
    memcpy((char *)(*out)->data + i * es, (const char *)p->data + off * es,
           (size_t)(row * es));
  }
  return LOOM_OK;
}

/* The values of a segment graph's symbols: s0.. at their sizes, then
 * (training halves of a bucketed segment) b0.. at their buckets; n: how
 * many the graph has. */
static loom_status_t segment_syms(loom_trace_t *t, seg_work_t *w, int n,
                                  int64_t *syms) {
  if (n == 0) return LOOM_OK;
  int64_t buckets[32];
  bool bucket_syms = w->bucket && w->train;
  if (bucket_syms) seg_group_buckets(w, buckets);
  for (int k = 0; k < n; k++)
    syms[k] = bucket_syms && k >= w->n_syms && k < w->n_syms + w->n_groups
                  ? buckets[k - w->n_syms] : -1;
  /* a symbol's size is that of an input dim it stands for */
  for (int i = 0; i < w->n_ins; i++)
    for (int a = 0; a < w->in_types[i].rank; a++) {
      const seg_dim_t *dm = &w->in_types[i].dims[a];
      if (dm->mode == TR_SYMBOLIC && dm->sym < n && syms[dm->sym] < 0)
        syms[dm->sym] = t->vals[w->ins[i]].t->shape[a];
    }
  return LOOM_OK;
}

/* The segment input whose value eg's output i is (a forward's saved
 * input: the backward reads a weight or a state as it came in), or -1. */
static int output_input(const loom_graph_t *eg, int i) {
  int32_t v = eg->outputs[i];
  if (eg->values[v].kind != IR_VALUE_INPUT) return -1;
  for (int j = 0; j < (int)eg->n_inputs; j++)
    if (eg->inputs[j] == v) return j;
  return -1;
}

/* A saved output that is input j of w itself (not a padded copy, and
 * contiguous, so that the executable's slot for it is its storage) is
 * bound to that storage: the executable's copy of it is a copy onto
 * itself, which the run skips, and the tape keeps a view, valid until
 * the step ends (inputs stay unchanged until then; a backward after
 * the optimizer step changed a viewed parameter fails, tape.c). */
static loom_status_t saved_view(loom_trace_t *t, seg_work_t *w, loom_tensor_t *const *ins,
                                int j, loom_tensor_t **out) {
  const loom_tensor_t *x = ins[j];
  *out = NULL;
  if (j >= w->n_ins || x != t->vals[w->ins[j]].t || !tensor_is_contiguous(x) ||
      !x->data)
    return LOOM_OK;
  return loom_tensor_wrap(x->dtype, x->rank, x->shape, NULL, x->data, out);
}

/* eg's saved outputs that are inputs of w, as views (saved_view); the
 * others stay NULL. kept (NULL: not wanted) marks the views, which the
 * interpreter then leaves where it would copy them. */
static loom_status_t saved_views(loom_trace_t *t, seg_work_t *w, const loom_graph_t *eg,
                                 loom_tensor_t *const *ins, loom_tensor_t **outs,
                                 bool *kept) {
  for (int i = 0; i < (int)eg->n_outputs; i++) {
    int j = w->train && i >= w->n_outs ? output_input(eg, i) : -1;
    if (j >= 0) LOOM_TRY(saved_view(t, w, ins, j, &outs[i]));
    if (kept) kept[i] = outs[i] != NULL;
  }
  return LOOM_OK;
}

/* Output tensors for the executable's outputs (the entry graph's types,
 * its symbols at their sizes). The executable writes every element, so
 * they are not zeroed. */
static loom_status_t new_outputs(loom_trace_t *t, seg_work_t *w, rt_entry_t *e,
                                 loom_tensor_t *const *ins, loom_tensor_t **outs,
                                 int n_out) {
  loom_graph_t *eg = rt_entry_graph(e);
  int64_t syms[ir_num_symbols(eg) + 1];
  LOOM_TRY(segment_syms(t, w, ir_num_symbols(eg), syms));
  LOOM_TRY(saved_views(t, w, eg, ins, outs, NULL));
  for (int i = 0; i < n_out; i++) {
    if (outs[i]) continue;
    const ir_type_t *ty = &eg->values[eg->outputs[i]].type;
    int64_t shape[LOOM_MAX_RANK];
    for (int a = 0; a < ty->rank; a++)
      LOOM_TRY(ir_dim_eval(eg, ty->dims[a], syms, &shape[a]));
    LOOM_TRY(tr_tensor_new(t, ty->dtype, ty->rank, shape, &outs[i]));
  }
  return LOOM_OK;
}

/* The padded copy of value v at shape, made once per step: a value read
 * by many segments (an RNN's whole sequence, read by every cell) is not
 * copied again by each. */
static loom_status_t padded_input(loom_trace_t *t, int32_t v,
                                  const int64_t *shape, loom_tensor_t **out) {
  tr_value_t *x = &t->vals[v];
  if (x->padded && !memcmp(x->padded->shape, shape, sizeof *shape * (size_t)x->t->rank)) {
    *out = x->padded;
    return LOOM_OK;
  }
  loom_tensor_destroy(x->padded);
  x->padded = NULL;
  LOOM_TRY(seg_pad_copy(x->t, shape, &x->padded));
  *out = x->padded;
  return LOOM_OK;
}

/* Binds the inputs (padded to their buckets, and the groups' real sizes
 * after them in staged tensors, when bucketed). */
static loom_status_t bind_inputs(loom_trace_t *t, seg_work_t *w,
                                 loom_tensor_t **ins, loom_tensor_t **staged) {
  int n = 0;
  for (int i = 0; i < w->n_ins; i++) {
    loom_tensor_t *x = t->vals[w->ins[i]].t;
    ins[i] = x;
    if (!w->bucket) continue;
    int64_t shape[LOOM_MAX_RANK];
    bool padded = false;
    for (int a = 0; a < x->rank; a++) {
      shape[a] = w->in_types[i].dims[a].size;
      padded |= shape[a] != x->shape[a];
    }
    if (padded) LOOM_TRY(padded_input(t, w->ins[i], shape, &ins[i]));
  }
  for (int k = 0; k < (w->bucket ? w->n_groups : 0); k++) {
    int64_t size = t->sym_values[w->group_sym[k]];
    LOOM_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &size, sizeof size, &staged[n]));
    ins[w->n_ins + k] = staged[n++];
  }
  return LOOM_OK;
}

/* Stores output k as the value of w->outs[k] (sliced back when padded). */
static loom_status_t store_output(loom_trace_t *t, seg_work_t *w, int k,
                                  loom_tensor_t *x) {
  int32_t v = w->outs[k];
  if (w->bucket) {
    int64_t shape[LOOM_MAX_RANK];
    const ir_type_t *ty = &t->g->values[v].type;
    loom_status_t s = tr_eval_type(t, ty, shape);
    bool same = s == LOOM_OK && ty->rank == x->rank;
    for (int a = 0; same && a < ty->rank; a++) same = shape[a] == x->shape[a];
    if (s == LOOM_OK && !same) {
      loom_tensor_t *sliced;
      s = seg_slice_copy(x, ty->rank, shape, &sliced);
      loom_tensor_destroy(x);
      x = sliced;
    }
    if (s != LOOM_OK) {
      loom_tensor_destroy(x);
      return s;
    }
  }
  t->vals[v].t = x;
  t->vals[v].owned = true;
  t->vals[v].made_uses = t->vals[v].uses;
  return LOOM_OK;
}

/* ---- Backward descriptions, kept by forward key ---------------------------- */

/* Whether two keys are equal in every field (dims past a rank ignored). */
static bool same_key(const rt_key_t *a, const rt_key_t *b) {
  if (a->hash != b->hash || a->structure != b->structure || a->path != b->path ||
      a->site != b->site || a->n_inputs != b->n_inputs)
    return false;
  for (int i = 0; i < a->n_inputs; i++) {
    const rt_key_input_t *x = &a->inputs[i], *y = &b->inputs[i];
    if (x->dtype != y->dtype || x->rank != y->rank ||
        memcmp(x->dims, y->dims, sizeof *x->dims * (size_t)x->rank))
      return false;
  }
  return true;
}

/* The kept description of key, or NULL. */
static tr_memo_t *memo_find(const loom_trace_t *t, const rt_key_t *key) {
  const tr_memo_t *set = &t->run.memo[(key->hash & (TR_MEMO_SETS - 1)) * TR_MEMO_WAYS];
  for (int i = 0; i < TR_MEMO_WAYS; i++)
    if (set[i].bwd && same_key(&set[i].key, key)) return (tr_memo_t *)&set[i];
  return NULL;
}

bool seg_memo_has(const loom_trace_t *t, const rt_key_t *key) {
  return memo_find(t, key) != NULL;
}

void seg_memo_clear(loom_trace_t *t) {
  for (int i = 0; i < TR_MEMO; i++) {
    seg_desc_release(t->run.memo[i].bwd);
    core_free((void *)t->run.memo[i].key.inputs);
    t->run.memo[i] = (tr_memo_t){0};
  }
}

/* The backward description of the segment w whose forward key is key:
 * made once per key (a cell replayed every time step would copy its
 * cone at each run), then a reference to the kept one. The key decides
 * the description: the cone and its wiring, the inputs' types under
 * the policies and the attribute sizes are all in it. */
static loom_status_t backward_desc(loom_trace_t *t, seg_work_t *w, const rt_key_t *key,
                                   seg_desc_t **out) {
  tr_memo_t *m = memo_find(t, key);
  if (m) {
    m->used = ++t->run.memo_clock;
    m->bwd->refs++;
    *out = m->bwd;
    return LOOM_OK;
  }
  LOOM_TRY(seg_make_desc(t, w, 2, out));
  tr_memo_t *set = &t->run.memo[(key->hash & (TR_MEMO_SETS - 1)) * TR_MEMO_WAYS];
  m = set;
  for (int i = 1; i < TR_MEMO_WAYS; i++) /* an empty way, or the least recent */
    if (m->bwd && (!set[i].bwd || set[i].used < m->used)) m = &set[i];
  rt_key_input_t *kin = core_malloc(sizeof *kin * (size_t)(key->n_inputs + 1));
  if (!kin) return LOOM_OK; /* not kept: made again next time */
  if (key->n_inputs) memcpy(kin, key->inputs, sizeof *kin * (size_t)key->n_inputs);
  seg_desc_release(m->bwd);
  core_free((void *)m->key.inputs);
  m->key = *key;
  m->key.inputs = kin;
  m->used = ++t->run.memo_clock;
  m->bwd = *out;
  (*out)->refs++;
  return LOOM_OK;
}

/* Pushes the tape record of a training segment: saved = outs[n_outs..),
 * kept at their buckets when padded, with the sizes the backward needs. */
static loom_status_t push_tape(loom_trace_t *t, seg_work_t *w, const rt_key_t *key,
                               loom_tensor_t **outs, int n_total) {
  seg_desc_t *bwd = NULL;
  int n_sizes = w->bucket ? w->n_syms + 2 * w->n_groups : 0;
  int64_t sizes[n_sizes + 1];
  loom_status_t s = backward_desc(t, w, key, &bwd);
  if (s == LOOM_OK && w->bucket) {
    s = segment_syms(t, w, w->n_syms + w->n_groups, sizes);
    for (int k = 0; k < w->n_groups; k++)
      sizes[w->n_syms + w->n_groups + k] = t->sym_values[w->group_sym[k]];
  }
  if (s == LOOM_OK) {
    s = tape_push_segment(t, bwd, key, w->n_ins, w->ins, w->n_outs, w->outs,
                          n_total - w->n_outs, outs + w->n_outs,
                          w->bucket ? sizes : NULL);
    if (s == LOOM_OK) t->tape.recs[t->tape.n - 1].eager_only = w->stand_in;
  } else
    for (int i = w->n_outs; i < n_total; i++) loom_tensor_destroy(outs[i]);
  seg_desc_release(bwd);
  return s;
}

/* Hands the outputs over: the segment's values, then the saved ones. */
static loom_status_t finish_outputs(loom_trace_t *t, seg_work_t *w,
                                    const rt_key_t *key, loom_tensor_t **outs,
                                    int n_total) {
  loom_status_t s = LOOM_OK;
  for (int k = 0; k < w->n_outs; k++) {
    if (s == LOOM_OK) s = store_output(t, w, k, outs[k]);
    else loom_tensor_destroy(outs[k]);
  }
  if (w->train && s == LOOM_OK) return push_tape(t, w, key, outs, n_total);
  for (int i = w->n_outs; i < n_total; i++) loom_tensor_destroy(outs[i]);
  return s;
}

/* Runs entry e for w: its executable, or an eager entry's graph in the
 * fallback interpreter (the back end's eager kernels). Both bind the
 * inputs padded to their buckets and slice the outputs back. */
static loom_status_t run_entry(loom_trace_t *t, seg_work_t *w, rt_entry_t *e,
                               const rt_key_t *key) {
  loom_graph_t *eg = rt_entry_graph(e);
  bool eager = !rt_entry_executable(e);
  int n_in = (int)eg->n_inputs, n_out = (int)eg->n_outputs;
  loom_tensor_t *ins[n_in + 1], *outs[n_out + 1], *staged[n_in + 1];
  memset(outs, 0, sizeof outs);
  if (w->bucket) memset(staged, 0, sizeof staged); /* else none are made */
  bool kept[n_out + 1];
  loom_status_t s = bind_inputs(t, w, ins, staged);
  if (s == LOOM_OK && eager) s = saved_views(t, w, eg, ins, outs, kept);
  if (s == LOOM_OK && eager)
    s = rt_interpret_keeping(eg, n_in, ins, n_out, outs, kept, be_find(NULL),
                             tr_fallback_pool(t));
  if (s == LOOM_OK && !eager) s = new_outputs(t, w, e, ins, outs, n_out);
  if (s == LOOM_OK && !eager) s = seg_entry_run(t, e, n_in, ins, n_out, outs, false);
  for (int i = 0; w->bucket && i < n_in; i++) loom_tensor_destroy(staged[i]);
  if (s != LOOM_OK) {
    for (int i = 0; i < n_out; i++) loom_tensor_destroy(outs[i]);
    return s;
  }
  return finish_outputs(t, w, key, outs, n_out);
}

/* Runs a stitched replay of exact outputs (w->exec_outs) on e's
 * executable: the inputs bound as they are (exact sizes, no padding),
 * the outputs made from their models, and the bindings, which the replay
 * matched to its key, not checked again. */
static loom_status_t run_exact_replay(loom_trace_t *t, seg_work_t *w, rt_entry_t *e) {
  int n_in = w->n_ins, n_out = w->n_exec_outs;
  loom_tensor_t *ins[n_in + 1], *outs[n_out + 1];
  for (int i = 0; i < n_in; i++) ins[i] = t->vals[w->ins[i]].t;
  for (int k = 0; k < n_out; k++) {
    loom_status_t s = tr_tensor_like(t, &w->exec_outs[k], &outs[k]);
    if (s != LOOM_OK) {
      while (k--) loom_tensor_destroy(outs[k]);
      return s;
    }
  }
  loom_status_t s = seg_entry_run(t, e, n_in, ins, n_out, outs, true);
  for (int k = 0; k < n_out; k++) {
    if (s == LOOM_OK) s = store_output(t, w, k, outs[k]);
    else loom_tensor_destroy(outs[k]);
  }
  return s;
}

loom_status_t seg_run_linked(loom_trace_t *t, seg_work_t *w, tr_link_t *l, int way,
                             const rt_key_t *key) {
  t->stats.segments++;
  t->stats.stitched++;
  t->stats.hits++;
  promote(l, way);
  rt_entry_t *e = l->next[0].to;
  rt_entry_count_stitched(e);
  t->run.prev = e;
  const loom_graph_t *eg = rt_entry_graph(e);
  /* exec_outs: a replay neither training nor bucketed (exact_outputs) */
  if (w->exec_outs && rt_entry_executable(e) && eg->n_inputs == w->n_ins &&
      eg->n_outputs == w->n_outs && w->n_outs == w->n_exec_outs)
    return run_exact_replay(t, w, e);
  return run_entry(t, w, e, key);
}

static bool site_unpadded(const loom_trace_t *t, uint64_t site) {
  for (int64_t i = 0; i < t->run.n_unpadded; i++)
    if (t->run.unpadded[i] == site) return true;
  return false;
}

/* The padding pass refused w's bucketed segment (a reshape merging the
 * padded axis, ...): its bucketed dims are keyed symbolic from now on
 * (at exact sizes if even that cannot apply), and *key is rekeyed. */
static loom_status_t unpadded(loom_trace_t *t, seg_work_t *w, rt_key_t *key) {
  core_log(LOG_BREAKS, "segment %016llx: bucket padding failed (%s): its bucketed dims "
           "symbolic", (unsigned long long)w->id.site, loom_last_error());
  if (!site_unpadded(t, w->id.site)) {
    LOOM_TRY(core_grow((void **)&t->run.unpadded, &t->run.cap_unpadded,
                       t->run.n_unpadded + 1, sizeof *t->run.unpadded));
    t->run.unpadded[t->run.n_unpadded++] = w->id.site;
  }
  LOOM_TRY(seg_input_types(t, w, SEG_NO_BUCKETS));
  seg_make_key(t, w, w->train ? 1 : 0, key);
  return LOOM_OK;
}

/* ---- Training halves for the fallback ---------------------------------------
 * A training segment's partition makes its forward and its backward at
 * once: building the forward's eager entry keeps the backward half for
 * the backward's eager entry (tr_runs_t.half), so that a segment at new
 * sizes every step (an exact policy) is partitioned once a step, not
 * twice. */

typedef struct half_build {
  loom_trace_t *t;
  seg_desc_t *d;
  uint64_t key, structure; /* the backward's (tape_backward_key) */
} half_build_t;

void seg_halves_clear(loom_trace_t *t) {
  for (int i = 0; i < TR_HALVES; i++) {
    loom_graph_destroy(t->run.half[i]);
    t->run.half[i] = NULL;
  }
}

static loom_status_t build_keeping_half(void *ctx, loom_graph_t **graph,
                                        loom_compile_options_t *options) {
  (void)options; /* an eager entry compiles nothing */
  half_build_t *hb = ctx;
  tr_runs_t *run = &hb->t->run;
  loom_graph_t *other = NULL;
  LOOM_TRY(seg_desc_build_both(hb->d, graph, &other));
  if (!other) return LOOM_OK;
  int i = run->next_half;
  run->next_half = (i + 1) % TR_HALVES;
  loom_graph_destroy(run->half[i]);
  run->half[i] = other;
  run->half_key[i] = hb->key;
  run->half_structure[i] = hb->structure;
  return LOOM_OK;
}

static void half_done(void *ctx) { seg_desc_release(((half_build_t *)ctx)->d); }

/* The kept half for the backward key of hash `key` and `structure`,
 * taken (NULL: none). */
static loom_graph_t *take_half(loom_trace_t *t, uint64_t key, uint64_t structure) {
  for (int i = 0; i < TR_HALVES; i++)
    if (t->run.half[i] && t->run.half_key[i] == key && t->run.half_structure[i] == structure) {
      loom_graph_t *g = t->run.half[i];
      t->run.half[i] = NULL;
      return g;
    }
  return NULL;
}

static loom_status_t build_backward(void *ctx, loom_graph_t **graph,
                                    loom_compile_options_t *options) {
  half_build_t *hb = ctx;
  *graph = take_half(hb->t, hb->key, hb->structure);
  return *graph ? LOOM_OK : seg_desc_build(hb->d, graph, options);
}

loom_status_t seg_backward_eager(loom_trace_t *t, const rt_key_t *key, seg_desc_t *bwd,
                                 rt_entry_t **e) {
  bwd->refs++;
  half_build_t hb = {t, bwd, key->hash, key->structure};
  return rt_cache_eager(t->cache, key, &(rt_builder_t){build_backward, half_done, &hb}, e);
}

/* The segment in the fallback interpreter, on its eager entry (its graph
 * built once per key and kept by the cache, as a compiled one is), under
 * the key it would compile under, so that its backward is keyed as a
 * compiled forward's would be. A bucketed segment runs at its real sizes
 * instead, its bucketed dims symbolic: the fallback's kernels take any
 * size, and padding and masking only cost there (the GNN's masked edge
 * index, materialized and scattered a value at a time, tripled a step). */
static loom_status_t eager_entry(loom_trace_t *t, seg_work_t *w, const rt_key_t *key,
                                 rt_entry_t **e) {
  if ((*e = rt_cache_eager_held(t->cache, key))) return LOOM_OK; /* no description needed */
  seg_desc_t *d = NULL;
  LOOM_TRY(seg_make_desc(t, w, w->train ? 1 : 0, &d));
  if (!w->train)
    return rt_cache_eager(t->cache, key, &(rt_builder_t){seg_desc_build, release_ctx, d}, e);
  rt_key_t bwd;
  tape_backward_key(key, &bwd);
  half_build_t hb = {t, d, bwd.hash, bwd.structure};
  return rt_cache_eager(t->cache, key, &(rt_builder_t){build_keeping_half, half_done, &hb}, e);
}

static loom_status_t interpret(loom_trace_t *t, seg_work_t *w, rt_key_t *key) {
  rt_entry_t *e = NULL;
  if (w->bucket) {
    LOOM_TRY(seg_input_types(t, w, SEG_NO_BUCKETS));
    seg_make_key(t, w, w->train ? 1 : 0, key);
    w->stand_in = true;
  }
  loom_status_t s = eager_entry(t, w, key, &e);
  if (s != LOOM_OK && s != LOOM_ERR_NOMEM && w->n_syms > 0) { /* symbolic would not build */
    core_log(LOG_BREAKS, "segment %016llx: its symbolic graph failed (%s): exact sizes",
             (unsigned long long)w->id.site, loom_last_error());
    LOOM_TRY(seg_input_types(t, w, SEG_EXACT));
    seg_make_key(t, w, w->train ? 1 : 0, key);
    s = eager_entry(t, w, key, &e);
  }
  if (s != LOOM_OK) return s;
  s = run_entry(t, w, e, key);
  rt_entry_release(t->cache, e);
  t->stats.interpreted++;
  t->run.prev_valid = false;
  return s;
}

/* Whether site missed before (its key changed since it compiled). */
static bool site_missed(const loom_trace_t *t, uint64_t site) {
  for (int64_t i = 0; i < t->run.n_sites; i++)
    if (t->run.sites[i] == site) return true;
  return false;
}

/* Whether a lookup of key missed before: its first sighting ran in the
 * fallback (first_sighting), or its entry was missed (still compiling). */
static bool key_missed(const loom_trace_t *t, const rt_key_t *key) {
  for (int i = 0; i < TR_SEEN; i++)
    if (t->run.seen[i] == key->hash) return true;
  return rt_cache_key_missed(t->cache, key);
}

/* Counts a miss, and a recompile when the site missed before with
 * another key: a key whose compile has not ended yet, missed again, is
 * a miss only. */
static loom_status_t note_miss(loom_trace_t *t, const rt_key_t *key) {
  t->stats.misses++;
  if (site_missed(t, key->site)) {
    if (!key_missed(t, key)) t->stats.recompiles++;
    return LOOM_OK;
  }
  LOOM_TRY(core_grow((void **)&t->run.sites, &t->run.cap_sites, t->run.n_sites + 1,
                     sizeof *t->run.sites));
  t->run.sites[t->run.n_sites++] = key->site;
  return LOOM_OK;
}

static bool data_group(const loom_trace_t *t, const seg_work_t *w, int k) {
  return t->policies[t->sym_policy[w->group_sym[k]]].data;
}

/* Sets each bucketed dim of group k to bucket b (of every group data
 * decided when k is one: they share their bucket, segment_key.c). */
static void set_bucket(const loom_trace_t *t, seg_work_t *w, int k, int64_t b) {
  bool data = data_group(t, w, k);
  for (int i = 0; i < w->n_ins; i++)
    for (int a = 0; a < w->in_types[i].rank; a++) {
      seg_dim_t *dm = &w->in_types[i].dims[a];
      if (dm->mode == TR_BUCKET && (dm->sym == k || (data && data_group(t, w, dm->sym))))
        dm->size = b;
    }
}

/* The buckets to compile ahead for group k: the next one up, the next
 * one down and, the first time, every bucket of a declared profile
 * (profile_opt's first). */
static int predicted(loom_trace_t *t, const seg_work_t *w, int k, int64_t now,
                     int64_t *planned) {
  const loom_dim_policy_t *p = tr_sym_policy(t, w->group_sym[k]);
  tr_policy_t *q = &t->policies[t->sym_policy[w->group_sym[k]]];
  int n = 0;
  /* past a list's largest bucket every size is its own: nothing to predict */
  if (!p->n_buckets || now < p->buckets[p->n_buckets - 1])
    planned[n++] = tr_bucket_of(p, now + 1);
  int64_t down = tr_bucket_below(p, now); /* sizes that shrink (a tree's levels) */
  if (down > 0) planned[n++] = down;
  if (p->profile_max <= 0 || q->profiled) return n;
  q->profiled = true;
  planned[n++] = tr_bucket_of(p, p->profile_opt > 0 ? p->profile_opt : p->profile_min);
  int64_t last = p->n_buckets ? p->buckets[p->n_buckets - 1] : INT64_MAX;
  for (int64_t b = tr_bucket_of(p, p->profile_min);
       n < LOOM_MAX_BUCKETS + 2 && b <= last; b = tr_bucket_of(p, b + 1)) {
    planned[n++] = b;
    if (b >= p->profile_max) break;
  }
  return n;
}

/* A training forward's miss queues its backward for the workers, keyed
 * as its tape record will key it, so that it compiles while the forward
 * (and the rest of the step's forward) compiles and runs; not once the
 * forward's or the backward's site is past its recompile limit. */
static void speculate_backward(loom_trace_t *t, seg_work_t *w, const rt_key_t *key) {
  seg_desc_t *bwd = NULL;
  if (backward_desc(t, w, key, &bwd) != LOOM_OK) return; /* made again at the tape */
  rt_key_t bkey;
  tape_backward_key(key, &bkey);
  if (rt_cache_site_full(t->cache, &bkey, t->opt.recompile_limit)) {
    seg_desc_release(bwd);
    return;
  }
  rt_cache_ahead(t->cache, &bkey, &(rt_builder_t){seg_desc_build, release_ctx, bwd},
                 t->opt.recompile_limit);
}

/* Queues the buckets predicted after a bucketed miss. Each is keyed and
 * described as a cut at that bucket would (the work's types are moved to
 * it, then back, and the key of this cut is recomputed). */
static void speculate(loom_trace_t *t, seg_work_t *w, int part) {
  int64_t base[32];
  seg_group_buckets(w, base);
  bool data_done = false; /* the groups data decided move together */
  for (int k = 0; k < w->n_groups; k++) {
    if (data_group(t, w, k) && data_done) continue;
    data_done |= data_group(t, w, k);
    int64_t planned[LOOM_MAX_BUCKETS + 3];
    int n = predicted(t, w, k, base[k], planned);
    for (int j = 0; j < n; j++) {
      if (planned[j] == base[k]) continue; /* compiled: this cut's own */
      set_bucket(t, w, k, planned[j]);
      rt_key_t key;
      seg_make_key(t, w, part, &key);
      if (!rt_cache_holds(t->cache, &key)) { /* a held key needs no description */
        seg_desc_t *d = NULL;
        if (seg_make_desc(t, w, part, &d) != LOOM_OK) continue;
        rt_cache_speculate(t->cache, &key, &(rt_builder_t){seg_desc_build, release_ctx, d});
      }
      if (w->train) speculate_backward(t, w, &key);
    }
    set_bucket(t, w, k, base[k]);
  }
  rt_key_t key;
  seg_make_key(t, w, part, &key);
}

/* A miss: compile through the cache (or hear that it cannot). */
/* Tiered, with workers: whether a new key at a site that missed before
 * (its sizes change) is seen now for the first time, and so runs in the
 * fallback without a compile; the second sighting compiles it. A key seen once, an
 * exact size that never comes back, would cost a compile that no run
 * uses (the GNN at exact sizes queued 16 a run beside its fallback). The
 * first key of a site, and keys the cache has or compiled before, go to
 * the cache at once. */
static bool first_sighting(loom_trace_t *t, const rt_key_t *key) {
  tr_runs_t *run = &t->run;
  for (int i = 0; i < TR_SEEN; i++)
    if (run->seen[i] == key->hash) return false;
  if (rt_cache_has_key(t->cache, key)) return false;
  run->seen[run->next_seen] = key->hash;
  run->next_seen = (run->next_seen + 1) % TR_SEEN;
  core_log(LOG_CACHE, "miss at site %016llx: key %016llx seen for the first time runs in "
           "the fallback; it compiles if it comes back", (unsigned long long)key->site,
           (unsigned long long)key->hash);
  return true;
}

static loom_status_t miss(loom_trace_t *t, seg_work_t *w, const rt_key_t *key,
                          rt_get_result_t *res, rt_entry_t **e) {
  bool again = site_missed(t, w->id.site);
  LOOM_TRY(note_miss(t, key));
  if (t->opt.tiered && again && rt_cache_has_workers(t->cache) && first_sighting(t, key)) {
    *res = RT_PENDING; /* the fallback runs it, its backward too */
    *e = NULL;
    w->stand_in = true;
    return LOOM_OK;
  }
  if (w->train && !rt_cache_site_full(t->cache, key, t->opt.recompile_limit))
    speculate_backward(t, w, key);
  /* A key pending or failed (a cold run's cuts until its compile is done)
   * or refused needs no description. */
  bool held = false;
  loom_status_t s = rt_cache_get_held(t->cache, key, !t->opt.tiered, t->opt.recompile_limit,
                                      res, e, &held);
  if (s == LOOM_OK && !held) {
    seg_desc_t *d = NULL;
    LOOM_TRY(seg_make_desc(t, w, w->train ? 1 : 0, &d));
    rt_builder_t b = {seg_desc_build, release_ctx, d};
    s = rt_cache_get(t->cache, key, &b, !t->opt.tiered, t->opt.recompile_limit, res, e);
  }
  if (s == LOOM_OK && w->bucket && (*res == RT_READY || *res == RT_PENDING))
    speculate(t, w, w->train ? 1 : 0);
  return s;
}

/* Looks the segment up (hot path first) and runs it. */
loom_status_t seg_run(loom_trace_t *t, seg_work_t *w) {
  rt_key_t key;
  w->id.path = t->path;
  t->path = 0;
  LOOM_TRY(seg_input_types(t, w, site_unpadded(t, w->id.site) ? SEG_NO_BUCKETS : SEG_POLICIES));
  seg_make_key(t, w, w->train ? 1 : 0, &key);
  t->stats.segments++;
  if (!t->opt.compile) return interpret(t, w, &key);
  rt_entry_t *e = follow(t, key.hash);
  if (e) { /* the link holds the reference */
    t->stats.stitched++;
    t->stats.hits++;
    rt_entry_count_stitched(e);
    t->run.prev = e;
    return run_entry(t, w, e, &key);
  }
  e = rt_cache_lookup(t->cache, &key);
  rt_get_result_t res = RT_READY;
  if (e) t->stats.hits++;
  else LOOM_TRY(miss(t, w, &key, &res, &e));
  if (res == RT_FAILED && w->bucket) { /* the padding pass said no */
    LOOM_TRY(unpadded(t, w, &key));
    e = rt_cache_lookup(t->cache, &key);
    res = RT_READY;
    if (!e) LOOM_TRY(miss(t, w, &key, &res, &e));
  }
  if (res != RT_READY || !e) return interpret(t, w, &key);
  loom_status_t s = run_entry(t, w, e, &key);
  link_to(t, e, key.hash);
  return s;
}
