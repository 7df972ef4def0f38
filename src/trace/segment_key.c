/* What a cut's segment is keyed and built by: its inputs' types under the
 * shape policies (each dim exact, symbolic or at its bucket), the
 * GraphKey hashed from them and the cone's structure, and on a miss the
 * description that segment_graph.c builds the graph from. Below the run
 * (segment_run.c), which keys, looks up and describes; above state.c. */
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "trace/trace_internal.h"

/* ---- Keys ------------------------------------------------------------------ */

/* The strongest mode among the symbols of d: symbolic over bucket over
 * exact. *plain: d is one symbol (its number in *sym). */
/* Symbol sym's mode for w's segment (bucketed ones symbolic when the
 * segment cannot be padded). */
static tr_mode_t sym_mode(const loom_trace_t *t, const seg_work_t *w, int sym) {
  tr_mode_t m = tr_sym_mode(t, sym, NULL);
  return m == TR_BUCKET && w->no_buckets ? TR_SYMBOLIC : m;
}

static tr_mode_t dim_mode(const loom_trace_t *t, const seg_work_t *w, ir_dim_t d,
                          bool *plain, int *sym) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  *plain = false;
  if (!e || e->kind == IR_EXPR_CONST) return TR_EXACT;
  if (e->kind == IR_EXPR_SYM) {
    *plain = true;
    *sym = (int)e->c;
    return sym_mode(t, w, (int)e->c);
  }
  bool p;
  int s;
  tr_mode_t a = dim_mode(t, w, e->a, &p, &s), b = dim_mode(t, w, e->b, &p, &s);
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
    tr_mode_t m = dim_mode(t, w, ty->dims[a], &plain, &sym);
    if (m == TR_EXACT) continue;
    if (m == TR_BUCKET && !plain) return false;
    dm->mode = m;
    dm->sym = canonical(w, ty->dims[a], sym, m == TR_BUCKET);
    if (dm->sym < 0) return false;
    if (m == TR_BUCKET) {
      dm->size = tr_bucket_of(tr_sym_policy(t, sym), x->shape[a]);
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
  if (e->kind == IR_EXPR_SYM) return sym_mode(t, w, (int)e->c) != TR_SYMBOLIC;
  return attr_dim_ok(t, w, e->a) && attr_dim_ok(t, w, e->b);
}

/* Whether a cone node has a dim attribute that cannot be carried (the
 * segment then goes exact). */
static bool symbolic_attrs(const loom_trace_t *t, const seg_work_t *w) {
  for (int c = 0; c < w->n_cone; c++) {
    const ir_attrs_t *a = t->g->nodes[w->cone[c]].attrs;
    for (int i = 0; i < a->n; i++) {
      if (a->a[i].kind != IR_ATTR_INTS) continue;
      for (int k = 0; k < a->a[i].n; k++)
        if (ir_dim_is_sym(a->a[i].ints[k]) && !attr_dim_ok(t, w, a->a[i].ints[k]))
          return true;
    }
  }
  return false;
}

/* Whether the cone holds a control op: its subgraphs are typed with the
 * sizes of their step (their symbols are the trace's, not the segment's
 * canonical ones), so the segment goes exact. */
static bool has_control(const loom_trace_t *t, const seg_work_t *w) {
  for (int c = 0; c < w->n_cone; c++)
    if (ir_ops[t->g->nodes[w->cone[c]].op].flags & F_SUBGRAPH) return true;
  return false;
}

/* Bucketed dims that data decided (the counts of nonzero: an MoE's tokens
 * per expert) all take the largest of their buckets, so that a segment
 * is keyed by one bucket, not by a combination of them (eight experts'
 * buckets multiplied the compiles). */
static void join_data_buckets(const loom_trace_t *t, seg_work_t *w) {
  int64_t top = 0;
  int joined = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < w->n_ins; i++)
      for (int a = 0; a < w->in_types[i].rank; a++) {
        seg_dim_t *dm = &w->in_types[i].dims[a];
        if (dm->mode != TR_BUCKET) continue;
        int sym = w->group_sym[dm->sym];
        if (!t->policies[t->sym_policy[sym]].data) continue;
        if (pass == 0) {
          joined++;
          if (dm->size > top) top = dm->size;
        } else if (joined > 1) {
          dm->size = top;
        }
      }
}

/* Types of the inputs under the policies; exact for every dim when a
 * policy cannot apply to this segment (logged as a break reason). */
loom_status_t seg_input_types(loom_trace_t *t, seg_work_t *w, seg_types_t how) {
  bool exact = how == SEG_EXACT;
  w->no_buckets = how == SEG_NO_BUCKETS;
  if (w->n_ins > w->cap_types)
    LOOM_TRY(core_grow((void **)&w->in_types, &w->cap_types, w->n_ins, sizeof *w->in_types));
  if (w->n_ins > w->cap_key)
    LOOM_TRY(core_grow((void **)&w->key_in, &w->cap_key, w->n_ins, sizeof *w->key_in));
  bool ok = true;
  w->n_syms = w->n_groups = 0; /* rebuilt by input_dims */
  w->bucket = false;
  for (int i = 0; i < w->n_ins && ok; i++) ok = input_dims(t, w, i, exact);
  if (ok && w->n_syms > 0 && symbolic_attrs(t, w)) ok = false;
  if (ok && (w->n_syms > 0 || w->bucket) && has_control(t, w)) ok = false;
  if (ok && w->bucket) join_data_buckets(t, w);
  if (!ok) {
    core_log(LOG_BREAKS, "segment %016llx: a shape policy cannot apply (a "
             "bucketed dim inside an expression, an attribute over a "
             "symbol no input dim carries, or a control op's subgraph): "
             "exact sizes", (unsigned long long)w->id.site);
    w->n_syms = w->n_groups = 0;
    w->bucket = false;
    for (int i = 0; i < w->n_ins; i++) input_dims(t, w, i, true);
  }
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

/* Whether d mentions a symbol pinned after its node was recorded (the
 * node's hash then holds its expression, not its size). */
static bool mentions_pinned(const loom_trace_t *t, ir_dim_t d) {
  const ir_expr_t *e = ir_dim_expr(t->g, d);
  if (!e || e->kind == IR_EXPR_CONST) return false;
  if (e->kind == IR_EXPR_SYM) return t->sym_policy[e->c] == TR_PINNED;
  return mentions_pinned(t, e->a) || mentions_pinned(t, e->b);
}

/* The sizes that the segment's graph fixes in attributes over non-exact
 * or pinned symbols (bucketed ones, symbolic ones not carried as
 * symbols), mixed into h: the node hashes held only their expressions. */
static uint64_t mix_attr_sizes(const loom_trace_t *t, const seg_work_t *w,
                               uint64_t h) {
  if (t->n_policies == 0) return h; /* every symbol is exact: nothing to add */
  int64_t buckets[32], vals[ir_num_symbols(t->g) + 1];
  bool have = false;
  for (int c = 0; c < w->n_cone; c++) {
    const ir_attrs_t *a = t->g->nodes[w->cone[c]].attrs;
    for (int i = 0; i < a->n; i++)
      for (int k = 0; a->a[i].kind == IR_ATTR_INTS && k < a->a[i].n; k++) {
        ir_dim_t d = a->a[i].ints[k];
        bool plain;
        int sym;
        tr_mode_t m = ir_dim_is_sym(d) ? dim_mode(t, w, d, &plain, &sym) : TR_EXACT;
        if ((m == TR_EXACT && !(ir_dim_is_sym(d) && mentions_pinned(t, d))) ||
            (m == TR_SYMBOLIC && w->n_syms > 0))
          continue;
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

/* The wrt inputs whose gradients the backward returns as their products'
 * operands (grad_defer.c): a float matrix used once in the cone, as the
 * second operand of a matmul whose first is a matrix not transposed, of
 * at most DEFER_ROWS rows known at the cut. Those are a cell's weights,
 * summed over the time steps (16 rows a step for the LSTM, a tree
 * level's nodes for the TreeLSTM); a weight multiplied once a step by
 * many rows (the MoE's router over 256 tokens, a layer over a graph's
 * nodes) keeps its product in its backward, where deferring it would
 * only add a copy of its operands. */
enum { DEFER_ROWS = 128 };

static uint64_t defer_mask(const loom_trace_t *t, const seg_work_t *w) {
  uint64_t mask = 0;
  for (int i = 0; !w->bucket && i < w->n_wrt && i < 64; i++) {
    if (w->wrt[i] >= w->n_ins) break; /* retained outputs, after the inputs */
    int32_t v = w->ins[w->wrt[i]];
    const ir_type_t *ty = &t->g->values[v].type;
    if (ty->rank != 2 || (ty->dtype != LOOM_F32 && ty->dtype != LOOM_F64)) continue;
    int uses = 0, pos = -1;
    int32_t user = -1;
    for (int c = 0; c < w->n_cone; c++) {
      const ir_node_t *n = &t->g->nodes[w->cone[c]];
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] == v) uses++, user = w->cone[c], pos = k;
    }
    for (int k = 0; k < w->n_outs; k++) uses += w->outs[k] == v;
    if (uses != 1 || pos != 1) continue;
    const ir_node_t *n = &t->g->nodes[user];
    const ir_type_t *a = &t->g->values[n->in[0]].type;
    if (n->op == IR_OP_MATMUL && !ir_attr_int(n->attrs, "trans_a", 0) && a->rank == 2 &&
        !ir_dim_is_sym(a->dims[0]) && a->dims[0] <= DEFER_ROWS)
      mask |= UINT64_C(1) << i;
  }
  return mask;
}

/* The key: structure (cone, symbolic pattern, training), inputs, path. */
void seg_make_key(const loom_trace_t *t, seg_work_t *w, int part,
                     rt_key_t *key) {
  uint64_t h = tr_mix(w->id.sized, (uint64_t)part);
  for (int i = 0; i < w->n_ins; i++) {
    const seg_input_t *in = &w->in_types[i];
    rt_key_input_t *k = &w->key_in[i];
    k->dtype = in->dtype;
    k->rank = in->rank;
    k->provisional = 0;
    for (int a = 0; a < in->rank; a++) {
      if (in->dims[a].mode == TR_EXACT)
        k->provisional |= t->vals[w->ins[i]].provisional & (uint8_t)(1u << a);
      k->dims[a] = in->dims[a].mode == TR_SYMBOLIC ? RT_DIM_ANY : in->dims[a].size;
      k->bucket[a] = in->dims[a].mode == TR_BUCKET; /* told from an exact size in listings */
      if (in->dims[a].mode != TR_EXACT)
        h = tr_mix(h, ((uint64_t)in->dims[a].mode << 40) | ((uint64_t)a << 32) |
                          ((uint64_t)i << 8) | (uint64_t)in->dims[a].sym);
    }
  }
  for (int i = 0; i < w->n_wrt; i++) h = tr_mix(h, 0x77 + (uint64_t)w->wrt[i]);
  w->id.defer = part ? defer_mask(t, w) : 0;
  if (w->id.defer) h = tr_mix(h, 0xdefe4 ^ w->id.defer);
  h = mix_attr_sizes(t, w, h);
  w->id.structure = h;
  *key = (rt_key_t){.structure = h, .path = w->id.path, .site = w->id.site,
                    .n_inputs = w->n_ins, .inputs = w->key_in};
  rt_key_finish(key);
  w->id.key_hash = key->hash;
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
  if (w->n_syms > 0 && dim_mode(t, w, dim, &plain, &sym) == TR_SYMBOLIC) return true;
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

/* A copy of each subgraph of control node n in d, its attribute in
 * attrs renumbered to the copy's index there. */
static loom_status_t copy_subgraphs(const loom_trace_t *t, const ir_node_t *n, seg_desc_t *d,
                                    ir_attrs_t *attrs) {
  const char *names[2];
  int k = ir_subgraph_attrs(n->op, names);
  for (int i = 0; i < k; i++) {
    const loom_graph_t *sub = ir_attrs_subgraph(t->g, n->attrs, names[i]);
    if (!sub) return loom_fail(LOOM_ERR_GRAPH, "trace: %s names no subgraph", names[i]);
    loom_graph_t **grown = core_realloc(d->subgraphs, sizeof *grown * (size_t)(d->n_subgraphs + 1));
    if (!grown) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a segment");
    d->subgraphs = grown;
    LOOM_TRY(ir_graph_clone(sub, &d->subgraphs[d->n_subgraphs]));
    for (int a = 0; attrs && a < attrs->n; a++)
      if (!strcmp(attrs->a[a].name, names[i])) attrs->a[a].ints[0] = d->n_subgraphs;
    d->n_subgraphs++;
  }
  return LOOM_OK;
}

static loom_status_t copy_node(const loom_trace_t *t, const seg_work_t *w,
                               const int64_t *sym_vals, int32_t node,
                               seg_desc_t *d, seg_node_t *out) {
  const ir_node_t *n = &t->g->nodes[node];
  out->op = n->op;
  out->n_in = n->n_in;
  int n_attrs = n->attrs ? n->attrs->n : 0;
  out->in = core_malloc(sizeof *out->in * (size_t)(n->n_in + 1));
  if (n_attrs)
    out->attrs = core_malloc(ir_attrs_bytes(n_attrs));
  if (!out->in || (n_attrs && !out->attrs))
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a segment");
  if (n_attrs) ir_attrs_copy(out->attrs, n->attrs);
  if (ir_ops[n->op].flags & F_SUBGRAPH) LOOM_TRY(copy_subgraphs(t, n, d, out->attrs));
  for (int i = 0; i < n->n_in; i++) out->in[i] = seg_ref_of(t, w, n->in[i]);
  for (int i = 0; i < n_attrs; i++) {
    ir_attr_t *a = &out->attrs->a[i];
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
  d->defer = part ? w->id.defer : 0;
  if (w->n_wrt) memcpy(d->wrt, w->wrt, sizeof *d->wrt * (size_t)w->n_wrt);
  if (s != LOOM_OK) {
    seg_desc_release(d);
    return s;
  }
  *out = d;
  return LOOM_OK;
}
