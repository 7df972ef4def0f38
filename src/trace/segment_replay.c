/* Stitched paths: when a cut follows the hot path (the same entry after
 * the same predecessor), the link remembers what the cut found: the
 * region's nodes (their hashes), its wiring (each operand an earlier node
 * of the region or an input, in first-use order), its outputs and its
 * key. The next time the region after that predecessor matches node for
 * node, it runs the link's entry at once, skipping the cut's analysis
 * (outputs, cone, keep, inputs, key hashing); a region that differs
 * anywhere takes the cut's way, with no wrong result, and restitches the
 * link. Above segment_run.c (the hot path's links and the run), below
 * segment.c (the cut). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "trace/trace_internal.h"

/* Restarts the numbering of the region's inputs. */
static void restart_inputs(tr_follow_t *f) {
  f->n_ins = 0;
  if (++f->epoch == 0) { /* wrapped: clear the marks once */
    memset(f->mark, 0, sizeof *f->mark * (size_t)f->cap_vals);
    f->epoch = 1;
  }
}

/* The code of operand v of a region node: node position << 8 | output
 * index for a value of a node of the region, -1 - p for input p
 * (materialized before the region: an input, a parameter, a constant,
 * an earlier segment's output), numbered in first-use order through f's
 * marks. INT32_MIN: neither (a value to recompute from before the
 * region), or out of memory. */
static int32_t operand_code(loom_trace_t *t, int32_t v) {
  tr_follow_t *f = &t->follow;
  tr_value_t *x = &t->vals[v];
  const ir_value_t *iv = &t->g->values[v];
  if (iv->kind == IR_VALUE_NODE && iv->node >= t->region_start) {
    int64_t pos = iv->node - t->region_start; /* a code holds 23 bits of it */
    if (iv->index > 255 || pos >= (INT64_C(1) << 23)) return INT32_MIN;
    return (int32_t)(pos << 8 | iv->index);
  }
  if (!x->t && iv->kind == IR_VALUE_CONST) x->t = iv->data;
  if (!x->t) return INT32_MIN;
  if (v >= f->cap_vals) {
    int64_t cap = f->cap_vals, c2 = cap;
    if (core_grow((void **)&f->mark, &cap, v + 1, sizeof *f->mark) != LOOM_OK ||
        core_grow((void **)&f->pos, &c2, cap, sizeof *f->pos) != LOOM_OK)
      return INT32_MIN;
    memset(f->mark + f->cap_vals, 0, sizeof *f->mark * (size_t)(cap - f->cap_vals));
    f->cap_vals = cap;
  }
  if (f->mark[v] != f->epoch) {
    if (f->n_ins >= f->cap_ins &&
        core_grow((void **)&f->ins, &f->cap_ins, f->n_ins + 1, sizeof *f->ins) != LOOM_OK)
      return INT32_MIN;
    f->mark[v] = f->epoch;
    f->pos[v] = f->n_ins;
    f->ins[f->n_ins++] = v;
  }
  return -1 - f->pos[v];
}

/* A region node's identity in a replay: its hash and operand count. */
static uint64_t node_ident(const loom_trace_t *t, int64_t node) {
  return tr_mix(t->node_hash[node], (uint64_t)t->g->nodes[node].n_in);
}

void seg_follow_node(loom_trace_t *t, int32_t node) {
  tr_follow_t *f = &t->follow;
  if (!f->armed || f->start != t->region_start) {
    tr_link_t *l = t->opt.compile && t->stitch && !t->retains ? seg_hot_link(t) : NULL;
    for (int i = 0; i < TR_WAYS; i++) f->r[i] = l ? l->next[i].replay : NULL;
    f->armed = true;
    f->start = t->region_start;
    f->k = f->c = 0;
    restart_inputs(f);
  }
  bool any = false;
  for (int i = 0; i < TR_WAYS; i++) any |= f->r[i] != NULL;
  if (!any) return;
  const ir_node_t *n = &t->g->nodes[node];
  int64_t k = node - t->region_start;
  uint64_t ident = node_ident(t, node);
  for (int i = 0; i < TR_WAYS; i++) {
    const tr_replay_t *r = f->r[i];
    if (r && (k != f->k || k >= r->n_nodes || ident != r->node_hash[k] ||
              f->c + n->n_in > r->n_codes))
      f->r[i] = NULL;
  }
  /* operands in codes: one numbering of the region's inputs for all ways */
  for (int j = 0; j < n->n_in; j++) {
    int32_t code = operand_code(t, n->in[j]);
    for (int i = 0; i < TR_WAYS; i++)
      if (f->r[i] && code != f->r[i]->codes[f->c + j]) f->r[i] = NULL;
  }
  f->c += n->n_in;
  f->k++;
}

void seg_follow_free(loom_trace_t *t) {
  tr_follow_t *f = &t->follow;
  core_free(f->mark);
  core_free(f->pos);
  core_free(f->ins);
  *f = (tr_follow_t){0};
}

/* Whether the region, as recorded, matched r (way `way` of the hot
 * link) to its end; copies its inputs to w->ins. */
static bool region_matches(loom_trace_t *t, seg_work_t *w, int way, const tr_replay_t *r) {
  const tr_follow_t *f = &t->follow;
  if (!f->armed || f->start != t->region_start || f->r[way] != r || f->k != r->n_nodes ||
      t->g->n_nodes - t->region_start != r->n_nodes || f->c != r->n_codes ||
      f->n_ins != r->n_ins)
    return false;
  if (f->n_ins > w->cap_ins &&
      core_grow((void **)&w->ins, &w->cap_ins, f->n_ins, sizeof *w->ins) != LOOM_OK)
    return false;
  if (f->n_ins) memcpy(w->ins, f->ins, sizeof *w->ins * (size_t)f->n_ins);
  w->n_ins = f->n_ins;
  return true;
}

/* Which of the inputs gradients flow to, hashed: a replay made where none
 * did (an inference region) must not run where one does (a weight just
 * unfrozen, whose segment keeps a backward), nor the other way. */
static uint64_t input_grads(const loom_trace_t *t, const int32_t *ins, int n) {
  uint64_t h = 0x9d;
  for (int i = 0; i < n; i++)
    if (t->vals[ins[i]].grad) h = tr_mix(h, (uint64_t)i + 1);
  return h;
}

/* Whether the inputs fit r's key: dtypes, ranks, exact sizes (the key's
 * dims; a replay is never bucketed), and the dims of one symbol equal
 * (and above 1: automatic dims key sizes 0 and 1 apart). */
static bool inputs_fit(const loom_trace_t *t, const seg_work_t *w, const tr_replay_t *r) {
  int64_t sym_size[32];
  for (int k = 0; k < r->n_syms; k++) sym_size[k] = -1;
  for (int i = 0; i < r->n_ins; i++) {
    const loom_tensor_t *x = t->vals[w->ins[i]].t;
    const rt_key_input_t *k = &r->key_in[i];
    if (x->dtype != k->dtype || x->rank != k->rank) return false;
    for (int a = 0; a < k->rank; a++) {
      if (k->dims[a] != RT_DIM_ANY) {
        if (x->shape[a] != k->dims[a]) return false;
        continue;
      }
      int sym = r->in_types[i].dims[a].sym;
      if (x->shape[a] <= 1) return false;
      if (sym_size[sym] >= 0 && sym_size[sym] != x->shape[a]) return false;
      sym_size[sym] = x->shape[a];
    }
  }
  return true;
}

/* w's outputs from r (not real yet), with want among them or real. */
static bool outputs_of(loom_trace_t *t, seg_work_t *w, const tr_replay_t *r, int n,
                       const int32_t *want) {
  if (r->n_outs > w->cap_outs &&
      core_grow((void **)&w->outs, &w->cap_outs, r->n_outs, sizeof *w->outs) != LOOM_OK)
    return false;
  for (int k = 0; k < r->n_outs; k++) {
    int32_t v = t->g->nodes[t->region_start + r->outs[k].node].out[r->outs[k].index];
    if (t->vals[v].t) return false;
    w->outs[k] = v;
  }
  w->n_outs = r->n_outs;
  for (int i = 0; i < n; i++) {
    bool found = t->vals[want[i]].t != NULL;
    for (int k = 0; k < r->n_outs && !found; k++) found = w->outs[k] == want[i];
    if (!found) return false;
  }
  return true;
}

/* The rest of w as the run reads it: cone (the region), the input types
 * where symbols take their sizes from them, the key (its inputs r's: a
 * hit describes nothing, and a training one finds its backward kept). */
static loom_status_t fill_work(loom_trace_t *t, seg_work_t *w, const tr_replay_t *r,
                               rt_key_t *key) {
  /* a training replay keeps a backward, described from the cone */
  w->cone_is_region = !r->train;
  if (r->train && r->n_nodes > w->cap_cone)
    LOOM_TRY(core_grow((void **)&w->cone, &w->cap_cone, r->n_nodes, sizeof *w->cone));
  if (r->n_syms > 0 && r->n_ins > w->cap_types)
    LOOM_TRY(core_grow((void **)&w->in_types, &w->cap_types, r->n_ins, sizeof *w->in_types));
  for (int k = 0; r->train && k < r->n_nodes; k++) w->cone[k] = (int32_t)(t->region_start + k);
  w->n_cone = r->n_nodes;
  if (r->n_syms > 0) memcpy(w->in_types, r->in_types, sizeof *w->in_types * (size_t)r->n_ins);
  w->n_syms = r->n_syms;
  w->train = r->train;
  w->id = r->id;
  w->exec_outs = r->n_exec_outs ? r->exec_outs : NULL;
  w->n_exec_outs = r->n_exec_outs;
  *key = (rt_key_t){.structure = r->id.structure, .path = r->id.path, .site = r->id.site,
                    .n_inputs = r->n_ins, .inputs = r->key_in, .hash = r->id.key_hash};
  return LOOM_OK;
}

loom_status_t seg_replay(loom_trace_t *t, seg_work_t *w, int n, const int32_t *want,
                         bool *done) {
  *done = false;
  tr_link_t *l = t->opt.compile && t->stitch && !t->retains ? seg_hot_link(t) : NULL;
  tr_replay_t *r = NULL;
  int way = 0;
  for (; l && way < TR_WAYS && !r; way++) {
    r = l->next[way].replay;
    if (r && (r->keep_gen != t->keep_gen || r->id.path != t->path ||
              r->id.key_hash != l->next[way].to_hash ||
              !region_matches(t, w, way, r) ||
              input_grads(t, w->ins, w->n_ins) != r->grads || !inputs_fit(t, w, r) ||
              !outputs_of(t, w, r, n, want)))
      r = NULL;
  }
  if (!r) return LOOM_OK;
  rt_key_t key;
  LOOM_TRY(fill_work(t, w, r, &key));
  if (w->train && !seg_memo_has(t, &key)) return LOOM_OK;
  *done = true;
  t->path = 0;
  LOOM_TRY(seg_run_linked(t, w, l, way - 1, &key));
  r->runs++;
  t->stats.replayed++;
  return LOOM_OK;
}

/* Whether w's cone is the region, whole, with nothing in it a replay
 * cannot repeat: buckets (padding), symbolic sizes inside attributes
 * (evaluated into the key), more outputs than an operand code holds. */
static bool replayable(const loom_trace_t *t, const seg_work_t *w) {
  int64_t region = t->g->n_nodes - t->region_start;
  if (w->bucket || w->n_cone != region || region == 0 || w->cone[0] != t->region_start ||
      w->n_syms > 32)
    return false;
  for (int c = 0; c < w->n_cone; c++) {
    const ir_node_t *n = &t->g->nodes[w->cone[c]];
    for (int i = 0; i < n->attrs->n; i++)
      for (int k = 0; n->attrs->a[i].kind == IR_ATTR_INTS && k < n->attrs->a[i].n; k++)
        if (ir_dim_is_sym(n->attrs->a[i].ints[k])) return false;
  }
  return true;
}

/* The graph of entry e when w's run of it makes outputs of exact types,
 * which a replay can keep (an executable's, not for training, every dim
 * a size), or NULL. */
static const loom_graph_t *exact_outputs(const seg_work_t *w, rt_entry_t *e) {
  if (w->train || w->bucket || w->n_syms || !e || !rt_entry_executable(e)) return NULL;
  const loom_graph_t *eg = rt_entry_graph(e);
  for (int64_t i = 0; i < eg->n_outputs; i++) {
    const ir_type_t *ty = &eg->values[eg->outputs[i]].type;
    for (int a = 0; a < ty->rank; a++)
      if (ir_dim_is_sym(ty->dims[a])) return NULL;
  }
  return eg;
}

/* One allocation for r and its arrays (each aligned for what follows). */
static tr_replay_t *replay_new(int n_nodes, int n_codes, int n_ins, int n_outs,
                               int n_exec_outs) {
  size_t at = sizeof(tr_replay_t), sizes[6] = {
      sizeof(uint64_t) * (size_t)n_nodes, sizeof(seg_input_t) * (size_t)n_ins,
      sizeof(rt_key_input_t) * (size_t)n_ins, sizeof(seg_ref_t) * (size_t)n_outs,
      sizeof(tr_model_t) * (size_t)n_exec_outs, sizeof(int32_t) * (size_t)n_codes};
  size_t offs[6];
  for (int i = 0; i < 6; i++) {
    at = (at + 15) & ~(size_t)15;
    offs[i] = at;
    at += sizes[i];
  }
  char *p = core_calloc(1, at);
  if (!p) return NULL;
  tr_replay_t *r = (tr_replay_t *)p;
  r->node_hash = (uint64_t *)(p + offs[0]);
  r->in_types = (seg_input_t *)(p + offs[1]);
  r->key_in = (rt_key_input_t *)(p + offs[2]);
  r->outs = (seg_ref_t *)(p + offs[3]);
  r->exec_outs = (tr_model_t *)(p + offs[4]);
  r->codes = (int32_t *)(p + offs[5]);
  r->n_exec_outs = n_exec_outs;
  r->n_nodes = n_nodes;
  r->n_codes = n_codes;
  r->n_ins = n_ins;
  r->n_outs = n_outs;
  return r;
}

void seg_replay_record(loom_trace_t *t, seg_work_t *w, tr_link_t *link, uint64_t from_site,
                       uint64_t from_key) {
  tr_succ_t *way = &link->next[0];
  if (!t->stitch || !way->to || way->to != t->run.prev || !t->run.prev_valid ||
      !replayable(t, w))
    return;
  if (way->replay && way->replay->keep_gen == t->keep_gen &&
      way->replay->id.key_hash == way->to_hash)
    return; /* stitched already (the region differed in an operand this time) */
  int n_codes = 0;
  for (int c = 0; c < w->n_cone; c++) n_codes += t->g->nodes[w->cone[c]].n_in;
  const loom_graph_t *eg = exact_outputs(w, way->to);
  tr_replay_t *r = replay_new(w->n_cone, n_codes, w->n_ins, w->n_outs,
                              eg ? (int)eg->n_outputs : 0);
  if (!r) return; /* not stitched: the cut's way goes on */
  /* the wiring, coded as a replay will check it (its own input numbering,
   * which must give w's inputs in w's order) */
  tr_follow_t *f = &t->follow;
  f->armed = false; /* the numbering is taken: the next region looks up anew */
  restart_inputs(f);
  int c = 0;
  bool ok = true;
  for (int k = 0; k < r->n_nodes && ok; k++) {
    const ir_node_t *n = &t->g->nodes[w->cone[k]];
    r->node_hash[k] = node_ident(t, w->cone[k]);
    for (int i = 0; i < n->n_in && ok; i++) {
      r->codes[c] = operand_code(t, n->in[i]);
      ok = r->codes[c++] != INT32_MIN;
    }
  }
  ok = ok && f->n_ins == w->n_ins &&
       (w->n_ins == 0 || !memcmp(f->ins, w->ins, sizeof *w->ins * (size_t)w->n_ins));
  for (int k = 0; k < w->n_outs && ok; k++) {
    const ir_value_t *iv = &t->g->values[w->outs[k]];
    ok = iv->kind == IR_VALUE_NODE && iv->node >= t->region_start;
    if (ok) r->outs[k] = (seg_ref_t){(int32_t)(iv->node - t->region_start), iv->index};
  }
  if (!ok) {
    core_free(r);
    return;
  }
  if (w->n_ins) {
    memcpy(r->in_types, w->in_types, sizeof *r->in_types * (size_t)w->n_ins);
    memcpy(r->key_in, w->key_in, sizeof *r->key_in * (size_t)w->n_ins);
  }
  for (int i = 0; i < r->n_exec_outs; i++) {
    const ir_type_t *ty = &eg->values[eg->outputs[i]].type;
    tr_model_init(&r->exec_outs[i], ty->dtype, ty->rank, ty->dims);
  }
  r->id = w->id;
  r->keep_gen = t->keep_gen;
  r->from_site = from_site;
  r->from_key = from_key;
  r->n_syms = w->n_syms;
  r->train = w->train;
  r->grads = input_grads(t, w->ins, w->n_ins);
  core_free(way->replay);
  way->replay = r;
}

void seg_replay_describe(const loom_trace_t *t, core_text_t *text) {
  int64_t n = 0, runs = 0;
  for (int i = 0; i < TR_LINKS * TR_WAYS; i++) {
    const tr_replay_t *r = t->run.links[i / TR_WAYS].next[i % TR_WAYS].replay;
    if (r) n++, runs += r->runs;
  }
  core_text_put(text, "stitched boundaries: %lld (%lld replays)%s\n", (long long)n,
                (long long)runs, t->stitch ? "" : ", off (LOOM_STITCH=0)");
  for (int i = 0; i < TR_LINKS * TR_WAYS; i++) {
    const tr_replay_t *r = t->run.links[i / TR_WAYS].next[i % TR_WAYS].replay;
    if (!r) continue;
    char from[80] = "step start";
    if (r->from_site)
      snprintf(from, sizeof from, "site %016llx (key %016llx)",
               (unsigned long long)r->from_site, (unsigned long long)r->from_key);
    core_text_put(text, "  %s -> site %016llx (key %016llx): %d nodes, %d inputs, "
                  "%d outputs, ran %lld times\n", from, (unsigned long long)r->id.site,
                  (unsigned long long)r->id.key_hash, r->n_nodes, r->n_ins, r->n_outs,
                  (long long)r->runs);
  }
}
