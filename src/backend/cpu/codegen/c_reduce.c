/* Reduction groups: reductions over the trailing (inner) dims of one space [outer...,
 * inner...] with their elementwise prologue and epilogue (a fold that
 * keeps the last dim is c_columns.c's). One loop runs over the outer index (split over the pool);
 * per row, the nodes run in graph order: each reduction is an inner loop
 * that recomputes the full-space nodes it reads and folds into a local;
 * nodes over the reduced space are scalars of the row; a last inner loop
 * computes and stores the full-space outputs. Softmax decomposed (max,
 * sub, exp, sum, div) is one such function. */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

/* ---- The group's values ----------------------------------------------------- */

/* A row keeps a value its passes would compute again (softmax's exp, read
 * by the sum and by the division) in a local array when the row has at
 * most ROW_CACHE_MAX elements, the value costs at least ROW_CACHE_COST
 * plain operations (cg_op_cost) and fewer than ROW_CACHE_VALUES are kept. */
#define ROW_CACHE_MAX 2048
#define ROW_CACHE_COST 4
#define ROW_CACHE_VALUES 4

typedef struct red {
  cg_ctx_t *c;
  int gi;
  const fuse_group_t *grp;
  cg_shape_t space; /* collapsed: [0, n_outer) outer, then inner */
  int n_outer, n_inner;
  int64_t inner_count; /* with `runtime`, times n0 / space.dim[0] */
  bool runtime;        /* one row whose first inner dim is known at run time: n0 */
  /* Per value and per node, in the context's marks (cg_marks_t). */
  int32_t *acc_of;  /* per value: 1 + index into access strides, or 0 */
  int32_t *row;     /* per value: constant along the inner dims */
  int32_t *used;    /* per value: read by the pass being emitted */
  int32_t *need, *later; /* per node: cones of passes (mark_cone) */
  int32_t *cost;    /* per node: what it costs a pass (pass_costs) */
  int n_acc;
  int64_t (*stride)[LOOM_MAX_RANK];
  /* The row cache (plan_cache): per node, its values of the row sit in
   * cache_v<out>[] (cached), or the pass being emitted puts them there
   * (caching); NULL when rows are too long to keep. */
  int32_t *cached, *caching;
  int n_cached;
} red_t;

/* Clears per-node marks of the group's nodes. */
static void clear_nodes(const red_t *r, int32_t *marks) {
  for (int k = 0; k < r->grp->n_nodes; k++) marks[r->grp->nodes[k]] = 0;
}

/* Leaves the context's marks zero, as red_build found them. */
static void red_free(red_t *r) {
  const loom_graph_t *g = r->c->g;
  const fuse_group_t *grp = r->grp;
  for (int i = 0; i < grp->n_inputs + grp->n_outputs; i++) {
    int32_t v = i < grp->n_inputs ? grp->inputs[i] : grp->outputs[i - grp->n_inputs];
    r->acc_of[v] = r->row[v] = r->used[v] = 0;
  }
  for (int k = 0; k < grp->n_nodes; k++) {
    const ir_node_t *n = &g->nodes[grp->nodes[k]];
    for (int i = 0; i < n->n_out; i++) r->acc_of[n->out[i]] = r->row[n->out[i]] = 0;
  }
  for (int i = 0; i < CG_NODE_MARKS; i++) clear_nodes(r, r->c->marks.node[i]);
  core_free(r->stride);
}

/* Index into the access strides of an input or output. */
static int acc(const red_t *r, int32_t v) { return r->acc_of[v] - 1; }

static bool is_fold(const loom_graph_t *g, int32_t node) {
  return cg_fold_of(g->nodes[node].op) != NULL;
}

static bool in_group_node(const red_t *r, int32_t v) { return cg_in_group(r->c, r->gi, v); }

/* A fold's result is stored by outer index, contiguous. */
static void row_strides(const cg_shape_t *full, int outer, int64_t *stride) {
  int64_t step = 1;
  for (int d = full->rank - 1; d >= 0; d--) {
    stride[d] = d < outer ? step : 0;
    if (d < outer) step *= full->dim[d];
  }
}

static bool inner_zero(const int64_t *stride, int outer, int rank) {
  for (int d = outer; d < rank; d++)
    if (stride[d] != 0) return false;
  return true;
}

/* Strides of an accessed value (an input, or a stored output); false when
 * it does not fit the space. */
static bool value_strides(red_t *r, const cg_shape_t *full, int outer, int32_t v,
                          int64_t *stride) {
  const loom_graph_t *g = r->c->g;
  if (in_group_node(r, v) && is_fold(g, g->values[v].node)) {
    row_strides(full, outer, stride);
    return true;
  }
  cg_shape_t s;
  return cg_value_shape(r->c, v, &s) && cg_broadcast_strides(&s, full, stride);
}

/* The kept leading dims of a fold over trailing axes (a fold that keeps
 * the last dim goes to emit_columns; cg_supports admits no other kind);
 * a scalar's one axis (-1) keeps nothing. */
static int outer_dims(const ir_node_t *n, int rank) {
  const int64_t *axes;
  int na = ir_attr_ints(n->attrs, "axes", &axes);
  return na < 0 || na > rank ? 0 : rank - na;
}

/* Row-ness of every node output, and the check that a fold's result is
 * read inside only where its broadcast puts it on the row (keepdim). */
static bool classify_nodes(red_t *r, const cg_shape_t *full, int outer) {
  const loom_graph_t *g = r->c->g;
  for (int k = 0; k < r->grp->n_nodes; k++) {
    const ir_node_t *n = &g->nodes[r->grp->nodes[k]];
    bool row = true;
    for (int i = 0; i < n->n_in && !is_fold(g, r->grp->nodes[k]); i++) {
      int32_t v = n->in[i];
      if (in_group_node(r, v) && is_fold(g, g->values[v].node)) {
        int64_t st[LOOM_MAX_RANK];
        cg_shape_t s;
        if (!cg_value_shape(r->c, v, &s) || !cg_broadcast_strides(&s, full, st) ||
            !inner_zero(st, outer, full->rank) ||
            (outer > 0 && s.rank != full->rank))
          return false;
      }
      row &= r->row[v];
    }
    if (is_fold(g, r->grp->nodes[k])) {
      cg_shape_t s;
      if (!cg_value_shape(r->c, n->in[0], &s) || s.rank != full->rank) return false;
      for (int d = 0; d < s.rank; d++)
        if (!cg_same_dim(&s, d, full, d)) return false;
      if (outer_dims(n, full->rank) != outer) return false;
      if (!dtype_is_float(g->values[n->in[0]].type.dtype) && !cg_fold_of(n->op)->i_type)
        return false;
    }
    r->row[n->out[0]] = row || is_fold(g, r->grp->nodes[k]);
  }
  return true;
}

static loom_status_t red_build(cg_ctx_t *c, int gi, red_t *r, cg_shape_t *full,
                               bool *ok) {
  const loom_graph_t *g = c->g;
  const cg_marks_t *m = &c->marks;
  *r = (red_t){.c = c, .gi = gi, .grp = &c->plan->groups[gi], .acc_of = m->value[0],
               .row = m->value[1], .used = m->value[2], .need = m->node[0],
               .later = m->node[1], .cost = m->node[2]};
  const fuse_group_t *grp = r->grp;
  const ir_node_t *anchor = &g->nodes[grp->anchor >= 0 ? grp->anchor : grp->nodes[0]];
  *ok = cg_fold_of(anchor->op) && cg_value_shape(c, anchor->in[0], full);
  if (!*ok) return LOOM_OK;
  int outer = outer_dims(anchor, full->rank);
  int n_acc = grp->n_inputs + grp->n_outputs;
  r->stride = core_calloc((size_t)n_acc + 1, sizeof *r->stride);
  if (!r->stride) return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  for (int i = 0; i < n_acc && *ok; i++) {
    int32_t v = i < grp->n_inputs ? grp->inputs[i] : grp->outputs[i - grp->n_inputs];
    *ok = cg_slot(c, v) >= 0 && value_strides(r, full, outer, v, r->stride[i]);
    r->acc_of[v] = i + 1;
    if (i < grp->n_inputs) r->row[v] = inner_zero(r->stride[i], outer, full->rank);
  }
  *ok = *ok && classify_nodes(r, full, outer);
  if (!*ok) return LOOM_OK;
  r->n_acc = n_acc;
  r->space = *full;
  int hi = cg_collapse(&r->space, 0, outer, n_acc, r->stride);
  int end = cg_collapse(&r->space, hi, r->space.rank, n_acc, r->stride);
  r->n_outer = hi;
  r->n_inner = end - hi;
  r->space.rank = end;
  r->inner_count = 1;
  for (int d = hi; d < end; d++) r->inner_count *= r->space.dim[d];
  /* A runtime leading dim is a row dim, or the first inner one of a
   * group with no rows (a loss summed over a trace's items). */
  r->runtime = r->space.lead && r->n_outer == 0;
  if (!r->runtime && r->n_inner == 1 && r->inner_count <= ROW_CACHE_MAX) {
    r->cached = m->node[3];
    r->caching = m->node[4];
  }
  return LOOM_OK;
}

/* ---- Text ---------------------------------------------------------------------- */

static void load(red_t *r, int level, int32_t v, const char *var, int lo, int hi) {
  cg_buf_t *b = r->c->out;
  cg_load_begin(b, level, r->c->g, v);
  cg_printf(b, "(");
  cg_offset(b, "o", 0, r->n_outer, r->stride[acc(r, v)]);
  cg_printf(b, ") + ");
  cg_offset(b, var, lo, hi, r->stride[acc(r, v)]);
  cg_load_end(b, r->c->g, v);
}

static void store(red_t *r, int level, int32_t v, bool inner) {
  cg_buf_t *b = r->c->out;
  cg_store_begin(b, level, v);
  cg_offset(b, "o", 0, r->n_outer, r->stride[acc(r, v)]);
  if (inner) {
    cg_printf(b, " + ");
    cg_offset(b, "i", r->n_outer, r->space.rank, r->stride[acc(r, v)]);
  }
  cg_store_end(b, r->c->g, v);
}

/* The extent of dim d as C: a constant, or n0 for a runtime one. */
static void extent(red_t *r, int d) {
  if (r->runtime && d == 0) cg_printf(r->c->out, "n0");
  else cg_printf(r->c->out, "%lld", (long long)r->space.dim[d]);
}

/* Marks the full-space nodes that value v needs, transitively. */
static void mark_cone(red_t *r, int32_t v, int32_t *need) {
  const loom_graph_t *g = r->c->g;
  if (r->row[v] || !in_group_node(r, v)) return;
  int32_t node = g->values[v].node;
  if (need[node]) return;
  need[node] = true;
  if (r->cached && r->cached[node]) return; /* read back from the row cache */
  for (int i = 0; i < g->nodes[node].n_in; i++) mark_cone(r, g->nodes[node].in[i], need);
}

static bool is_cached(const red_t *r, int32_t node) { return r->cached && r->cached[node]; }

/* What each node in need costs this pass, in r->cost: its own op and
 * the inputs computed with it, an input counted once per path to it as
 * the pass recomputes it. In graph order, so that each node is costed
 * once from its inputs' costs; saturating, since paths multiply (y = y +
 * y thirty times has 2^30). */
static void pass_costs(red_t *r, const int32_t *need) {
  const loom_graph_t *g = r->c->g;
  for (int k = 0; k < r->grp->n_nodes; k++) {
    int32_t node = r->grp->nodes[k];
    if (!need[node] || is_cached(r, node)) continue;
    const ir_node_t *n = &g->nodes[node];
    int64_t cost = cg_op_cost(n->op);
    for (int i = 0; i < n->n_in; i++) {
      int32_t v = n->in[i];
      if (r->row[v] || !in_group_node(r, v)) continue;
      int32_t u = g->values[v].node;
      if (need[u] && !is_cached(r, u)) cost += r->cost[u];
    }
    r->cost[node] = cost < INT32_MAX ? (int32_t)cost : INT32_MAX;
  }
}

/* The cone of the passes after position pos of the group (the folds
 * there, then the outputs), over the values cached so far. */
static void later_cone(red_t *r, int pos, int32_t *later) {
  const loom_graph_t *g = r->c->g;
  const fuse_group_t *grp = r->grp;
  clear_nodes(r, later);
  for (int k = pos + 1; k < grp->n_nodes; k++)
    if (cg_fold_of(g->nodes[grp->nodes[k]].op)) mark_cone(r, g->nodes[grp->nodes[k]].in[0], later);
  for (int i = 0; i < grp->n_outputs; i++)
    if (!r->row[grp->outputs[i]]) mark_cone(r, grp->outputs[i], later);
}

/* Before the pass at position pos (a fold; the outputs' pass has none
 * after it) computes the nodes in need: marks `caching` the costly ones a
 * later pass would compute again, consumers first, so that a value
 * computed from a kept one is not kept too. */
static void plan_cache(red_t *r, int pos, const int32_t *need, int32_t *later) {
  const loom_graph_t *g = r->c->g;
  if (!r->cached) return;
  /* Keeping a node changes no cost of the nodes before it, which come
   * next; the later cone changes only when a node is kept. */
  pass_costs(r, need);
  bool cone_stale = true;
  for (int k = r->grp->n_nodes - 1; k >= 0 && r->n_cached < ROW_CACHE_VALUES; k--) {
    int32_t node = r->grp->nodes[k];
    if (!need[node] || is_cached(r, node) || cg_fold_of(g->nodes[node].op) ||
        r->cost[node] < ROW_CACHE_COST)
      continue;
    if (cone_stale) later_cone(r, pos, later);
    cone_stale = false;
    if (!later[node]) continue;
    r->cached[node] = true; /* for the later cones while planning */
    r->caching[node] = true;
    r->n_cached++;
    cone_stale = true;
  }
  for (int k = 0; k < r->grp->n_nodes; k++)
    if (r->caching[r->grp->nodes[k]]) r->cached[r->grp->nodes[k]] = false;
}

/* After the pass: what it stored is there for the next ones. */
static void end_caching(red_t *r) {
  if (!r->cached) return;
  for (int k = 0; k < r->grp->n_nodes; k++) {
    int32_t node = r->grp->nodes[k];
    if (r->caching[node]) r->cached[node] = true, r->caching[node] = false;
  }
}

/* Declares the arrays of the values the coming pass keeps. */
static void declare_caches(red_t *r, int level) {
  const loom_graph_t *g = r->c->g;
  if (!r->cached) return;
  for (int k = 0; k < r->grp->n_nodes; k++) {
    int32_t node = r->grp->nodes[k];
    int32_t v = g->nodes[node].out[0];
    if (r->caching[node])
      cg_line(r->c->out, level, "%s cache_v%d[%lld];\n",
              cg_local_type(g->values[v].type.dtype), v, (long long)r->inner_count);
  }
}

/* Sets r->used to `to` for `extra` (-1: none) and the values read by
 * the nodes in need that the pass computes. */
static void mark_used(red_t *r, const int32_t *need, int32_t extra, int32_t to) {
  const loom_graph_t *g = r->c->g;
  if (extra >= 0) r->used[extra] = to;
  for (int k = 0; k < r->grp->n_nodes; k++) {
    int32_t node = r->grp->nodes[k];
    if (!need[node] || is_cached(r, node)) continue;
    for (int j = 0; j < g->nodes[node].n_in; j++) r->used[g->nodes[node].in[j]] = to;
  }
}

/* An inner loop computing the marked nodes, their full inputs (and
 * `extra`, a fold's own input) loaded; without `loops`, only its body
 * (the caller writes the loop). */
static void open_inner_body(red_t *r, int level, const int32_t *need, int32_t extra,
                            bool loops) {
  const loom_graph_t *g = r->c->g;
  for (int d = r->n_outer; d < r->space.rank && loops; d++) {
    cg_line(r->c->out, level + d - r->n_outer, "for (int64_t i%d = 0; i%d < ", d, d);
    extent(r, d);
    cg_printf(r->c->out, "; i%d++) {\n", d);
  }
  int in = loops ? level + r->n_inner : level;
  mark_used(r, need, extra, 1);
  for (int i = 0; i < r->grp->n_inputs; i++) {
    int32_t v = r->grp->inputs[i];
    if (r->used[v] && !r->row[v]) load(r, in, v, "i", r->n_outer, r->space.rank);
  }
  mark_used(r, need, extra, 0);
  for (int k = 0; k < r->grp->n_nodes; k++) {
    int32_t node = r->grp->nodes[k], v = g->nodes[node].out[0];
    if (!need[node]) continue;
    if (is_cached(r, node)) {
      cg_line(r->c->out, in, "const %s v%d = cache_v%d[i%d];\n",
              cg_local_type(g->values[v].type.dtype), v, v, r->n_outer);
      continue;
    }
    cg_node_stmt(r->c->out, in, g, &g->nodes[node]);
    if (r->caching && r->caching[node])
      cg_line(r->c->out, in, "cache_v%d[i%d] = v%d;\n", v, r->n_outer, v);
  }
}

static void open_inner(red_t *r, int level, const int32_t *need, int32_t extra) {
  open_inner_body(r, level, need, extra, true);
}

static void close_inner(red_t *r, int level) {
  for (int d = r->n_inner - 1; d >= 0; d--) cg_line(r->c->out, level + d, "}\n");
}

/* Folds with at least this many elements per row run in FOLD_LANES
 * interleaved accumulators: a single accumulator is a serial chain the
 * compiler may not vectorize (reassociating floats changes results), while
 * lanes are independent, so the lane loop becomes vector code. */
#define FOLD_LANES 8
#define FOLD_LANES_MIN 32

/* One inner loop (or, without `loops`, its body) folding into acc. */
static void fold_loop(red_t *r, int level, const cg_fold_t *f, bool fl, int x,
                      const char *t, const int32_t *need, const char *acc, bool loops) {
  char v[32];
  snprintf(v, sizeof v, "v%d", x);
  open_inner_body(r, level, need, x, loops);
  cg_line(r->c->out, loops ? level + r->n_inner : level, "%s", "");
  cg_fold_text(r->c->out, fl ? f->f_update : f->i_update, acc, v, "", t);
  cg_printf(r->c->out, ";\n");
  if (loops) close_inner(r, level);
}

/* The lanes over whole blocks of the one (collapsed) inner dim, then the
 * tail in the scalar accumulator, then the lanes folded into it. */
static void fold_lanes(red_t *r, int level, const cg_fold_t *f, bool fl, int out,
                       int x, const char *t, const int32_t *need) {
  cg_buf_t *b = r->c->out;
  int d = r->n_outer;
  int64_t n = r->space.dim[d], blocks = n / FOLD_LANES * FOLD_LANES;
  char acc[32], lane[32], n_text[32], blocks_text[48];
  snprintf(n_text, sizeof n_text, r->runtime ? "n0" : "%lld", (long long)n);
  if (r->runtime) snprintf(blocks_text, sizeof blocks_text, "n0 / %d * %d", FOLD_LANES, FOLD_LANES);
  else snprintf(blocks_text, sizeof blocks_text, "%lld", (long long)blocks);
  snprintf(acc, sizeof acc, "acc%d", out);
  snprintf(lane, sizeof lane, "acc%d_l[l]", out);
  cg_line(b, level, "%s", "");
  cg_fold_text(b, fl ? f->f_type : f->i_type, acc, "", "", t);
  cg_printf(b, " acc%d_l[%d];\n", out, FOLD_LANES);
  cg_line(b, level, "for (int l = 0; l < %d; l++) %s = %s;\n", FOLD_LANES, lane, acc);
  char index[16], block[16];
  snprintf(index, sizeof index, "i%d", d);
  snprintf(block, sizeof block, "b%d", d);
  cg_open_lanes(b, level, index, block, blocks_text, FOLD_LANES);
  fold_loop(r, level + 2, f, fl, x, t, need, lane, false);
  cg_close_lanes(b, level);
  if (blocks < n || r->runtime) {
    cg_line(b, level, "for (int64_t i%d = %s; i%d < %s; i%d++) {\n", d, blocks_text, d,
            n_text, d);
    fold_loop(r, level + 1, f, fl, x, t, need, acc, false);
    cg_line(b, level, "}\n");
  }
  cg_line(b, level, "for (int l = 0; l < %d; l++) ", FOLD_LANES);
  cg_fold_text(b, fl ? f->f_update : f->i_update, acc, lane, "", t);
  cg_printf(b, ";\n");
}

/* The fold at position pos of the group. */
static loom_status_t emit_fold(red_t *r, int level, int pos) {
  const ir_node_t *n = &r->c->g->nodes[r->grp->nodes[pos]];
  const loom_graph_t *g = r->c->g;
  const cg_fold_t *f = cg_fold_of(n->op);
  loom_dtype_t d = g->values[n->out[0]].type.dtype;
  const char *t = cg_local_type(d);
  bool fl = dtype_is_float(g->values[n->in[0]].type.dtype);
  int out = (int)n->out[0], x = (int)n->in[0];
  char acc[32];
  snprintf(acc, sizeof acc, "acc%d", out);
  cg_buf_t *b = r->c->out;
  cg_line(b, level, "%s", "");
  cg_fold_text(b, fl ? f->f_type : f->i_type, acc, "", "", t);
  cg_printf(b, " %s = ", acc);
  cg_fold_text(b, fl ? f->f_init : f->i_init, acc, "", "", t);
  cg_printf(b, ";\n");
  int32_t *need = r->need;
  clear_nodes(r, need);
  mark_cone(r, n->in[0], need);
  plan_cache(r, pos, need, r->later);
  declare_caches(r, level);
  if (r->n_inner == 1 && (r->inner_count >= FOLD_LANES_MIN || r->runtime))
    fold_lanes(r, level, f, fl, out, x, t, need);
  else
    fold_loop(r, level, f, fl, x, t, need, acc, true);
  end_caching(r);
  /* Half precision rounds the result, as the reference's store does. */
  const char *round = d == LOOM_F16 ? "loom_f16_round" : d == LOOM_BF16 ? "loom_bf16_round" : "";
  cg_line(b, level, "const %s v%d = %s(", t, out, round);
  char count[48];
  if (r->runtime)
    snprintf(count, sizeof count, "((double)n0 * %lld)",
             (long long)(r->inner_count / r->space.dim[0]));
  else snprintf(count, sizeof count, "%lld.0", (long long)r->inner_count);
  cg_fold_text(b, fl ? f->f_result : f->i_result, acc, "", count, t);
  cg_printf(b, ");\n");
  return LOOM_OK;
}

static void unravel_outer(red_t *r, int level) {
  int64_t step = 1;
  for (int d = r->n_outer - 1; d >= 0; d--) {
    if (d == r->n_outer - 1 && d == 0) cg_line(r->c->out, level, "const int64_t o0 = o;\n");
    else if (d == 0 && r->space.lead)
      cg_line(r->c->out, level, "const int64_t o0 = o / %lld;\n", (long long)step);
    else cg_line(r->c->out, level, "const int64_t o%d = o / %lld %% %lld;\n", d,
                 (long long)step, (long long)r->space.dim[d]);
    step *= r->space.dim[d];
  }
}

static loom_status_t emit_row(red_t *r) {
  const loom_graph_t *g = r->c->g;
  const fuse_group_t *grp = r->grp;
  cg_buf_t *b = r->c->out;
  int level = 2;
  unravel_outer(r, level);
  for (int i = 0; i < grp->n_inputs; i++)
    if (r->row[grp->inputs[i]]) load(r, level, grp->inputs[i], "i", 0, 0);
  for (int k = 0; k < grp->n_nodes; k++) {
    const ir_node_t *n = &g->nodes[grp->nodes[k]];
    if (cg_fold_of(n->op)) LOOM_TRY(emit_fold(r, level, k));
    else if (r->row[n->out[0]]) cg_node_stmt(b, level, g, n);
    else continue;
    if (acc(r, n->out[0]) >= grp->n_inputs) store(r, level, n->out[0], false);
  }
  int32_t *need = r->need;
  clear_nodes(r, need);
  bool any = false;
  for (int i = 0; i < grp->n_outputs; i++)
    if (!r->row[grp->outputs[i]]) {
      mark_cone(r, grp->outputs[i], need);
      any = true;
    }
  if (!any) return LOOM_OK;
  open_inner(r, level, need, -1);
  for (int i = 0; i < grp->n_outputs; i++)
    if (!r->row[grp->outputs[i]]) store(r, level + r->n_inner, grp->outputs[i], true);
  close_inner(r, level);
  return LOOM_OK;
}

loom_status_t cg_emit_reduction(cg_ctx_t *c, int gi, bool *ok) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  if (grp->n_nodes == 1 && cg_fold_of(c->g->nodes[grp->nodes[0]].op) &&
      cg_keeps_last_dim(c, &c->g->nodes[grp->nodes[0]]))
    return cg_emit_columns(c, gi, &c->g->nodes[grp->nodes[0]], ok);
  for (int k = 0; k < grp->n_nodes && *ok; k++) {
    const ir_node_t *n = &c->g->nodes[grp->nodes[k]];
    *ok = n->n_out == 1 && (cg_fold_of(n->op) ? cg_supports(c->g, grp->nodes[k])
                                           : cg_expr_supported(c->g, n));
  }
  if (!*ok) return LOOM_OK;
  red_t r;
  cg_shape_t full;
  loom_status_t s = red_build(c, gi, &r, &full, ok);
  if (s != LOOM_OK || !*ok) {
    red_free(&r);
    return s;
  }
  cg_buf_t *b = c->out;
  char note[64];
  if (r.runtime) snprintf(note, sizeof note, "one row, its length known at run time");
  else snprintf(note, sizeof note, "folding %lld per row", (long long)r.inner_count);
  cg_group_comment(c, gi, "reduction", &full, note);
  if (r.runtime) {
    cg_function(c, "static void loom_g%d_body(void *const *slots, int64_t n0) {\n", gi);
  } else {
    cg_function(c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", gi);
    cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  }
  for (int i = 0; i < r.n_acc; i++)
    cg_declare_pointer(c, grp, 1, i < grp->n_inputs ? grp->inputs[i] : grp->outputs[i - grp->n_inputs],
                       i >= grp->n_inputs);
  cg_line(b, 1, r.runtime ? "{\n" : "for (int64_t o = begin; o < end; o++) {\n");
  s = emit_row(&r);
  cg_line(b, 1, "}\n}\n\n");
  int64_t rows = 1, work = r.inner_count * cg_group_cost(c->g, grp); /* per row */
  for (int d = 0; d < r.n_outer; d++) rows *= r.space.dim[d];
  cg_group_function(c, gi);
  cg_line(b, 1, "(void)syms;\n");
  if (r.runtime) {
    cg_line(b, 1, "(void)rt;\n");
    cg_line(b, 1, "loom_g%d_body(slots, ", gi);
    cg_lead_extent(b, c->g, &r.space);
    cg_printf(b, ");\n");
  } else if (r.space.lead) {
    /* Rows known at run time: the lead times the other outer dims. */
    char body[32];
    snprintf(body, sizeof body, "loom_g%d_body", gi);
    cg_shape_t outer = r.space;
    outer.dim[0] = rows;
    cg_dynamic_split(b, c->g, &outer, work, body);
  } else if (rows * work > CG_PARALLEL_MIN && rows > 1) {
    int64_t grain = CG_PARALLEL_MIN / 2 / (work ? work : 1);
    cg_line(b, 1, "rt->parallel_for(rt->pool, %lld, %lld, loom_g%d_body, (void *)slots);\n",
            (long long)rows, (long long)(grain > 1 ? grain : 1), gi);
  } else {
    cg_line(b, 1, "(void)rt;\n");
    cg_line(b, 1, "loom_g%d_body((void *)slots, 0, %lld);\n", gi, (long long)rows);
  }
  cg_printf(b, "}\n");
  red_free(&r);
  return s;
}
