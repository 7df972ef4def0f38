/* Cuts: a segment is the cone of nodes between materialized values and
 * the values to produce. Its GraphKey is hashed from the trace's per-node
 * hashes and the inputs' types under their shape policies, so that a hit
 * costs hashing, one lookup (or none, on the hot path), binding and the
 * run; the segment's description (to build its graph from) is made only
 * on a miss. Looking up and running: segment_run.c. */
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

static loom_status_t work_reserve(loom_trace_t *t, seg_work_t **out) {
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
  w->bucket = w->train = false;
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

/* The values to produce: those asked for, and the pending region's
 * leaves (no consumer yet: the likely future uses). */
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
      if (t->vals[node->out[k]].uses == 0) LOOM_TRY(add_output(t, w, node->out[k]));
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
}

static loom_status_t keep_values(loom_trace_t *t, seg_work_t *w) {
  const loom_graph_t *g = t->g;
  uint64_t h = 0x6b;
  for (int c = 0; c < w->n_cone; c++) h = tr_mix(h, t->node_hash[w->cone[c]]);
  w->cone_hash = h;
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
      if (t->node_ran[iv->node]) keep_add(t, t->node_ran[iv->node]);
    }
  }
  return LOOM_OK;
}

/* Inputs in first-use order, and the structure hash over the cone. */
static loom_status_t collect_inputs(loom_trace_t *t, seg_work_t *w) {
  const loom_graph_t *g = t->g;
  uint64_t h = 0x51;
  for (int c = 0; c < w->n_cone; c++) {
    const ir_node_t *n = &g->nodes[w->cone[c]];
    h = tr_mix(h, t->node_hash[w->cone[c]]);
    for (int i = 0; i < n->n_in; i++) {
      int32_t v = n->in[i];
      if (t->vals[v].t && w->val_mark[v] != w->epoch) {
        w->val_mark[v] = w->epoch;
        w->val_pos[v] = w->n_ins;
        LOOM_TRY(push(&w->ins, &w->cap_ins, &w->n_ins, v));
      }
      seg_ref_t r = seg_ref_of(t, w, v);
      h = tr_mix(h, ((uint64_t)(uint32_t)r.node << 32) | (uint32_t)r.index);
    }
  }
  for (int k = 0; k < w->n_outs; k++) {
    seg_ref_t r = seg_ref_of(t, w, w->outs[k]);
    h = tr_mix(h, ((uint64_t)(uint32_t)r.node << 32) | (uint32_t)r.index);
  }
  w->site = h;
  return LOOM_OK;
}

/* ---- Keys ------------------------------------------------------------------ */

/* The strongest mode among the symbols of d: symbolic over bucket over
 * exact. *plain: d is one symbol (its number in *sym). */
static tr_mode_t dim_mode(const loom_trace_t *t, ir_dim_t d, bool *plain,
                          int *sym) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  *plain = false;
  if (!e || e->kind == IR_EXPR_CONST) return TR_EXACT;
  if (e->kind == IR_EXPR_SYM) {
    *plain = true;
    *sym = (int)e->c;
    return tr_sym_mode(t, (int)e->c, NULL);
  }
  bool p;
  int s;
  tr_mode_t a = dim_mode(t, e->a, &p, &s), b = dim_mode(t, e->b, &p, &s);
  return a > b ? a : b;
}

/* Canonical number of dim handle d among the segment's symbolic dims. */
static int canonical(seg_work_t *w, ir_dim_t d, int sym, bool group) {
  int n = group ? w->n_groups : w->n_syms;
  for (int k = 0; k < n; k++)
    if (group ? w->group_sym[k] == sym : w->sym_dim[k] == d) return k;
  if (n >= 32) return -1;
  if (group) w->group_sym[w->n_groups++] = sym;
  else w->sym_dim[w->n_syms++] = d;
  return n;
}

/* Input i's dims under the policies (exact: all sizes). Returns false
 * when a policy cannot apply (the caller then goes exact). */
static bool input_dims(loom_trace_t *t, seg_work_t *w, int i, bool exact) {
  int32_t v = w->ins[i];
  const ir_type_t *ty = &t->g->values[v].type;
  const loom_tensor_t *x = t->vals[v].t;
  seg_input_t *in = &w->in_types[i];
  in->dtype = ty->dtype;
  in->rank = ty->rank;
  for (int a = 0; a < ty->rank; a++) {
    seg_dim_t *dm = &in->dims[a];
    *dm = (seg_dim_t){.mode = TR_EXACT, .size = x->shape[a], .sym = -1};
    if (exact || !ir_dim_is_sym(ty->dims[a])) continue;
    bool plain;
    int sym = -1;
    tr_mode_t m = dim_mode(t, ty->dims[a], &plain, &sym);
    if (m == TR_EXACT) continue;
    if (m == TR_BUCKET && !plain) return false;
    dm->mode = m;
    dm->sym = canonical(w, ty->dims[a], sym, m == TR_BUCKET);
    if (dm->sym < 0) return false;
    if (m == TR_BUCKET) {
      dm->size = seg_bucket_of(tr_sym_policy(t, sym), x->shape[a]);
      w->bucket = true;
    }
  }
  return true;
}

/* The canonical symbol standing for dim d (a symbolic input dim), or -1. */
static int canonical_of(const seg_work_t *w, ir_dim_t d) {
  for (int k = 0; k < w->n_syms; k++)
    if (w->sym_dim[k] == d) return k;
  return -1;
}

/* Whether attribute dim d can be carried into the segment's graph: its
 * symbolic parts are symbolic dims of the inputs (others are evaluated). */
static bool attr_dim_ok(const loom_trace_t *t, const seg_work_t *w, ir_dim_t d) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  if (!e || e->kind == IR_EXPR_CONST || canonical_of(w, d) >= 0) return true;
  if (e->kind == IR_EXPR_SYM) return tr_sym_mode(t, (int)e->c, NULL) != TR_SYMBOLIC;
  return attr_dim_ok(t, w, e->a) && attr_dim_ok(t, w, e->b);
}

/* Whether a cone node has a dim attribute that cannot be carried (the
 * segment then goes exact). */
static bool symbolic_attrs(const loom_trace_t *t, const seg_work_t *w) {
  for (int c = 0; c < w->n_cone; c++) {
    const ir_attrs_t *a = &t->g->nodes[w->cone[c]].attrs;
    for (int i = 0; i < a->n; i++) {
      if (a->a[i].kind != IR_ATTR_INTS) continue;
      for (int k = 0; k < a->a[i].n; k++)
        if (ir_dim_is_sym(a->a[i].ints[k]) && !attr_dim_ok(t, w, a->a[i].ints[k]))
          return true;
    }
  }
  return false;
}

/* Types of the inputs under the policies; exact for every dim when a
 * policy cannot apply to this segment (logged as a break reason). */
loom_status_t seg_input_types(loom_trace_t *t, seg_work_t *w, bool exact) {
  if (w->n_ins > w->cap_types)
    LOOM_TRY(core_grow((void **)&w->in_types, &w->cap_types, w->n_ins, sizeof *w->in_types));
  if (w->n_ins > w->cap_key)
    LOOM_TRY(core_grow((void **)&w->key_in, &w->cap_key, w->n_ins, sizeof *w->key_in));
  bool ok = true;
  w->n_syms = w->n_groups = 0; /* rebuilt by input_dims */
  w->bucket = false;
  for (int i = 0; i < w->n_ins && ok; i++) ok = input_dims(t, w, i, exact);
  if (ok && w->n_syms > 0 && symbolic_attrs(t, w)) ok = false;
  if (!ok) {
    core_log(LOG_BREAKS, "segment %016llx: a shape policy cannot apply (a "
             "bucketed dim inside an expression, or an attribute over a "
             "symbol no input dim carries): exact sizes",
             (unsigned long long)w->site);
    w->n_syms = w->n_groups = 0;
    w->bucket = false;
    for (int i = 0; i < w->n_ins; i++) input_dims(t, w, i, true);
  }
  return LOOM_OK;
}

/* Training: the inputs gradients flow to. */
static loom_status_t collect_wrt(loom_trace_t *t, seg_work_t *w) {
  bool float_out = false;
  for (int k = 0; k < w->n_outs; k++) float_out |= t->vals[w->outs[k]].grad;
  if (!float_out) return LOOM_OK;
  if (w->n_ins > w->cap_wrt)
    LOOM_TRY(core_grow((void **)&w->wrt, &w->cap_wrt, w->n_ins, sizeof *w->wrt));
  for (int i = 0; i < w->n_ins; i++)
    if (t->vals[w->ins[i]].grad) w->wrt[w->n_wrt++] = i;
  w->train = w->n_wrt > 0;
  return LOOM_OK;
}

/* Symbol values with bucketed symbols at their bucket (for attributes). */
static void attr_sym_values(const loom_trace_t *t, const seg_work_t *w,
                            const int64_t *group_bucket, int64_t *vals) {
  int n = ir_num_symbols(t->g);
  if (n) memcpy(vals, t->sym_values, sizeof *vals * (size_t)n);
  for (int k = 0; k < w->n_groups; k++) vals[w->group_sym[k]] = group_bucket[k];
}

/* Each group's bucket, from the input types. */
void seg_group_buckets(const seg_work_t *w, int64_t *out) {
  for (int k = 0; k < w->n_groups; k++) out[k] = -1;
  for (int i = 0; i < w->n_ins; i++)
    for (int a = 0; a < w->in_types[i].rank; a++)
      if (w->in_types[i].dims[a].mode == TR_BUCKET)
        out[w->in_types[i].dims[a].sym] = w->in_types[i].dims[a].size;
}

/* The sizes that the segment's graph fixes in attributes over non-exact
 * symbols (bucketed ones, symbolic ones not carried as symbols), mixed
 * into h: the node hashes held only their expressions. */
static uint64_t mix_attr_sizes(const loom_trace_t *t, const seg_work_t *w,
                               uint64_t h) {
  if (t->n_policies == 0) return h; /* every symbol is exact: nothing to add */
  int64_t buckets[32], vals[ir_num_symbols(t->g) + 1];
  bool have = false;
  for (int c = 0; c < w->n_cone; c++) {
    const ir_attrs_t *a = &t->g->nodes[w->cone[c]].attrs;
    for (int i = 0; i < a->n; i++)
      for (int k = 0; a->a[i].kind == IR_ATTR_INTS && k < a->a[i].n; k++) {
        ir_dim_t d = a->a[i].ints[k];
        bool plain;
        int sym;
        tr_mode_t m = ir_dim_is_sym(d) ? dim_mode(t, d, &plain, &sym) : TR_EXACT;
        if (m == TR_EXACT || (m == TR_SYMBOLIC && w->n_syms > 0)) continue;
        if (!have) {
          seg_group_buckets(w, buckets);
          attr_sym_values(t, w, buckets, vals);
          have = true;
        }
        int64_t v = -1;
        if (ir_dim_eval(t->g, d, vals, &v) != LOOM_OK) v = -1;
        h = tr_mix(h, (uint64_t)v);
      }
  }
  return h;
}

/* The key: structure (cone, symbolic pattern, training), inputs, path. */
void seg_make_key(const loom_trace_t *t, seg_work_t *w, int part,
                     rt_key_t *key) {
  uint64_t h = tr_mix(w->site, (uint64_t)part);
  for (int i = 0; i < w->n_ins; i++) {
    const seg_input_t *in = &w->in_types[i];
    rt_key_input_t *k = &w->key_in[i];
    k->dtype = in->dtype;
    k->rank = in->rank;
    for (int a = 0; a < in->rank; a++) {
      k->dims[a] = in->dims[a].mode == TR_SYMBOLIC ? RT_DIM_ANY : in->dims[a].size;
      if (in->dims[a].mode != TR_EXACT)
        h = tr_mix(h, ((uint64_t)in->dims[a].mode << 40) | ((uint64_t)a << 32) |
                          ((uint64_t)i << 8) | (uint64_t)in->dims[a].sym);
    }
  }
  for (int i = 0; i < w->n_wrt; i++) h = tr_mix(h, 0x77 + (uint64_t)w->wrt[i]);
  h = mix_attr_sizes(t, w, h);
  w->structure = h;
  *key = (rt_key_t){.structure = h, .path = w->path, .site = w->site,
                    .n_inputs = w->n_ins, .inputs = w->key_in};
  rt_key_finish(key);
}

/* ---- Descriptions ------------------------------------------------------------- */

/* The bucket group whose trace symbol is sym, or -1. */
static int group_of(const seg_work_t *w, int sym) {
  for (int k = 0; k < w->n_groups; k++)
    if (w->group_sym[k] == sym) return k;
  return -1;
}

/* Whether d is made from a bucket group's symbol. */
static bool mentions_group(const loom_trace_t *t, const seg_work_t *w,
                           ir_dim_t d) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  if (!e || e->kind == IR_EXPR_CONST) return false;
  if (e->kind == IR_EXPR_SYM) return group_of(w, (int)e->c) >= 0;
  return mentions_group(t, w, e->a) || mentions_group(t, w, e->b);
}

/* Whether attribute dim d stays an expression in the segment's graph:
 * over symbolic dims, and over bucket groups when the graph keeps them
 * as symbols (training: segment_graph.c). */
static bool carried(const loom_trace_t *t, const seg_work_t *w,
                    const seg_desc_t *d, ir_dim_t dim) {
  bool plain;
  int sym;
  if (w->n_syms > 0 && dim_mode(t, dim, &plain, &sym) == TR_SYMBOLIC) return true;
  return d->bucket && d->part && mentions_group(t, w, dim);
}

/* Attribute dim d for the description: a size, or (symbolic) a handle
 * IR_DIM_SYM_BASE + i into d->exprs, whose symbols are canonical ones
 * (bucket group g is canonical symbol n_syms + g). */
static loom_status_t encode_dim(const loom_trace_t *t, const seg_work_t *w,
                                const int64_t *sym_vals, seg_desc_t *d,
                                ir_dim_t dim, ir_dim_t *out) {
  const ir_expr_t *e = ir_dim_expr(t->g, dim);
  int k = canonical_of(w, dim);
  if (k < 0 && !carried(t, w, d, dim))
    return ir_dim_eval(t->g, dim, sym_vals, out); /* exact or bucketed */
  if (k < 0 && e->kind == IR_EXPR_SYM) {
    int g = d->bucket && d->part ? group_of(w, (int)e->c) : -1;
    if (g < 0) /* symbolic_attrs rules it out */
      return loom_fail(LOOM_ERR_SHAPE, "trace: symbol '%s' of an attribute is "
                       "no input dim of its segment", e->name);
    k = w->n_syms + g;
  }
  ir_expr_t x = {.kind = IR_EXPR_SYM, .c = k};
  if (k < 0) {
    x.kind = e->kind;
    LOOM_TRY(encode_dim(t, w, sym_vals, d, e->a, &x.a));
    LOOM_TRY(encode_dim(t, w, sym_vals, d, e->b, &x.b));
  }
  LOOM_TRY(core_grow((void **)&d->exprs, &d->cap_exprs, d->n_exprs + 1, sizeof *d->exprs));
  d->exprs[d->n_exprs] = x;
  *out = IR_DIM_SYM_BASE + d->n_exprs++;
  return LOOM_OK;
}

static loom_status_t copy_node(const loom_trace_t *t, const seg_work_t *w,
                               const int64_t *sym_vals, int32_t node,
                               seg_desc_t *d, seg_node_t *out) {
  const ir_node_t *n = &t->g->nodes[node];
  out->op = n->op;
  out->n_in = n->n_in;
  out->attrs = n->attrs;
  out->in = core_malloc(sizeof *out->in * (size_t)(n->n_in + 1));
  if (!out->in) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a segment");
  for (int i = 0; i < n->n_in; i++) out->in[i] = seg_ref_of(t, w, n->in[i]);
  for (int i = 0; i < out->attrs.n; i++) {
    ir_attr_t *a = &out->attrs.a[i];
    if (a->kind != IR_ATTR_INTS) continue;
    for (int k = 0; k < a->n; k++) {
      if (!ir_dim_is_sym(a->ints[k])) continue;
      LOOM_TRY(encode_dim(t, w, sym_vals, d, a->ints[k], &a->ints[k]));
      out->sym_attrs |= ir_dim_is_sym(a->ints[k]);
    }
  }
  return LOOM_OK;
}

/* A description of the segment in w (part 0: plain, 1: forward, 2:
 * backward). */
loom_status_t seg_make_desc(loom_trace_t *t, seg_work_t *w, int part,
                               seg_desc_t **out) {
  seg_desc_t *d = core_calloc(1, sizeof *d);
  if (!d) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a segment");
  d->refs = 1;
  d->n_inputs = w->n_ins;
  d->n_outputs = w->n_outs;
  d->n_syms = w->n_syms;
  d->bucket = w->bucket;
  d->n_groups = w->bucket ? w->n_groups : 0;
  d->part = part;
  d->num_threads = t->opt.num_threads;
  d->inputs = core_malloc(sizeof *d->inputs * (size_t)(w->n_ins + 1));
  d->outputs = core_malloc(sizeof *d->outputs * (size_t)(w->n_outs + 1));
  d->nodes = core_calloc((size_t)w->n_cone + 1, sizeof *d->nodes);
  d->wrt = core_malloc(sizeof *d->wrt * (size_t)(w->n_wrt + 1));
  int64_t buckets[32], sym_vals[ir_num_symbols(t->g) + 1];
  if (!d->inputs || !d->outputs || !d->nodes || !d->wrt) {
    seg_desc_release(d);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a segment");
  }
  if (w->n_ins) memcpy(d->inputs, w->in_types, sizeof *d->inputs * (size_t)w->n_ins);
  seg_group_buckets(w, buckets);
  for (int k = 0; k < d->n_groups; k++) d->group_bucket[k] = buckets[k];
  attr_sym_values(t, w, buckets, sym_vals);
  loom_status_t s = LOOM_OK;
  for (int c = 0; c < w->n_cone && s == LOOM_OK; c++) {
    s = copy_node(t, w, sym_vals, w->cone[c], d, &d->nodes[c]);
    d->n_nodes = c + 1;
  }
  for (int k = 0; k < w->n_outs; k++) d->outputs[k] = seg_ref_of(t, w, w->outs[k]);
  d->n_wrt = part ? w->n_wrt : 0;
  if (w->n_wrt) memcpy(d->wrt, w->wrt, sizeof *d->wrt * (size_t)w->n_wrt);
  if (s != LOOM_OK) {
    seg_desc_release(d);
    return s;
  }
  *out = d;
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

loom_status_t seg_cut(loom_trace_t *t, int n, const int32_t *want,
                      const tr_reason_t *reason) {
  if (t->in_cut)
    return loom_fail(LOOM_ERR_INVALID, "trace: a cut inside a cut");
  LOOM_TRY(tr_reserve_values(t));
  seg_work_t *w = NULL;
  LOOM_TRY(work_reserve(t, &w));
  LOOM_TRY(collect_outputs(t, w, n, want));
  if (w->n_outs == 0) {
    t->region_start = t->g->n_nodes;
    return LOOM_OK;
  }
  t->in_cut = true;
  loom_status_t s = collect_cone(t, w);
  if (s == LOOM_OK) s = keep_values(t, w);
  if (s == LOOM_OK) s = collect_inputs(t, w);
  if (s == LOOM_OK) s = collect_wrt(t, w);
  if (s == LOOM_OK && reason) s = tr_note_break(t, w->site, reason);
  if (s == LOOM_OK) s = seg_run(t, w);
  t->in_cut = false;
  if (s != LOOM_OK) return s;
  for (int c = 0; c < w->n_cone; c++) t->node_ran[w->cone[c]] = keep_key(w->cone_hash, c);
  t->region_start = t->g->n_nodes;
  return s;
}
