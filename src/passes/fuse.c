/* Fusion (see fuse.h). First, layout nodes whose outputs only matmuls
 * read become strided views (mark_views), and transposes and reshapes
 * that alone carry a matmul's product onward become aliases the matmul
 * writes through (mark_product_views). Then three steps over working
 * groups:
 *   1. forward, in graph order: each node starts a group or joins the
 *      group of one of its producers (epilogues of contractions and
 *      reductions, elementwise chains, reductions after their prologue);
 *   2. backward: a whole elementwise group whose values are all read by
 *      one other group folds into it (prologues, cheap broadcast values;
 *      a pooling node takes a short prologue, recomputed at each tap; a
 *      contraction's epilogue takes values over its output space; an
 *      index op takes the elementwise ops and expands computing its
 *      index, and a scatter_add the index_select computing its src);
 *   3. the groups are ordered by their dependencies and their inputs and
 *      outputs listed.
 * A join is legal only if no path leaves the group and comes back to it
 * through another group: that keeps the groups a DAG, so step 3 always
 * finds an order. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/text.h"
#include "passes/fuse.h"

/* A group while it is being built. */
typedef struct work_group {
  fuse_kind_t kind;
  int32_t anchor;
  int32_t first;   /* its lowest node id */
  int32_t head, tail; /* its nodes, linked through fuser.next */
  ir_type_t space; /* iteration space: the full space of a reduction */
  int k;           /* reduction: trailing axes reduced; -1: not a suffix */
  bool open;       /* may take more nodes */
  bool mixed;      /* holds nodes over a space that broadcasts into ours */
  bool assign;     /* an assign: placed last */
  bool pool;       /* a pooling anchor; space is its output's */
  bool alive;      /* false once folded into another group */
  int size;        /* its node count */
  int folds;       /* its reductions (sum, max, ...) */
} work_group_t;

typedef struct fuser {
  const loom_graph_t *g;
  const fuse_caps_t *caps; /* what the back end generates and fuses */
  int32_t *use_start; /* value v's consumers: uses[use_start[v]..[v+1]) */
  int32_t *uses;
  bool *is_output;    /* value -> graph output */
  bool *supported;    /* node -> the code generator handles it */
  bool *view;         /* node -> a view of its input, read in place (ir/view.c) */
  bool *into;         /* node -> in the chain a matmul writes its product through */
  bool *writes;       /* matmul node -> writes its product through such a chain */
  int32_t *group;     /* node -> working group */
  int32_t *next;      /* node -> the next node of its group, or -1 */
  work_group_t *groups;
  int n_groups;
  int32_t grouped;    /* nodes below this id have a group (the forward pass) */
  /* While folding backward: a topological number per group, and the
   * numbers a dependency search may pass through (see depends_on). */
  int32_t *topo;
  bool topo_valid;
  int32_t topo_lo, topo_hi;
  int32_t *mark;      /* search stamps, per group: epoch or -epoch */
  int32_t epoch;
  int32_t *stack, *stack2;
  int32_t *listed;    /* value -> 1 + the last group listing it as an input */
  /* The plan's groups' nodes, in graph order: those of working group gi
   * are members[member_start[gi] .. member_start[gi + 1]). */
  int32_t *member_start, *members;
} fuser_t;

/* ---- Shapes ------------------------------------------------------------- */

static bool same_shape(const ir_type_t *a, const ir_type_t *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* NumPy broadcasting of t into s, without changing s. */
static bool broadcasts_into(const ir_type_t *t, const ir_type_t *s) {
  if (t->rank > s->rank) return false;
  for (int i = 1; i <= t->rank; i++) {
    ir_dim_t d = t->dims[t->rank - i];
    if (d != 1 && d != s->dims[s->rank - i]) return false;
  }
  return true;
}

/* The reduced space with keepdim: s with its last k dims set to 1. */
static ir_type_t keepdim_space(const ir_type_t *s, int k) {
  ir_type_t r = *s;
  for (int i = s->rank - k; i < s->rank; i++) r.dims[i] = 1;
  return r;
}

/* The reduced space without keepdim: s without its last k dims. */
static ir_type_t dropped_space(const ir_type_t *s, int k) {
  ir_type_t r = *s;
  r.rank = s->rank - k;
  return r;
}

static const ir_type_t *type_of(const fuser_t *f, int32_t v) {
  return &f->g->values[v].type;
}

/* ---- Ops ---------------------------------------------------------------- */

/* How many trailing axes node n reduces, or -1 when its axes are not a
 * suffix of its input's dims. */
static int reduced_suffix(const fuser_t *f, int32_t n) {
  const ir_node_t *node = &f->g->nodes[n];
  int rank = type_of(f, node->in[0])->rank;
  const int64_t *axes = NULL;
  int count = ir_attr_ints(node->attrs, "axes", &axes);
  /* A scalar accepts axis 0 or -1 and reduces nothing. */
  if (count < 0 || rank == 0) return rank;
  for (int i = 0; i < count; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < rank - count || a >= rank) return -1; /* axes are unique */
  }
  return count;
}

static int32_t producer(const fuser_t *f, int32_t v) {
  const ir_value_t *val = &f->g->values[v];
  return val->kind == IR_VALUE_NODE ? val->node : -1;
}

/* ---- Setup -------------------------------------------------------------- */

static void fuser_free(fuser_t *f) {
  core_free(f->use_start);
  core_free(f->uses);
  core_free(f->is_output);
  core_free(f->supported);
  core_free(f->view);
  core_free(f->into);
  core_free(f->writes);
  core_free(f->group);
  core_free(f->next);
  core_free(f->groups);
  core_free(f->mark);
  core_free(f->stack);
  core_free(f->stack2);
  core_free(f->topo);
  core_free(f->listed);
  core_free(f->member_start);
  core_free(f->members);
}

static loom_status_t fuser_init(fuser_t *f, const loom_graph_t *g, const fuse_caps_t *caps) {
  memset(f, 0, sizeof *f);
  f->g = g;
  f->caps = caps;
  size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
  int64_t n_uses = 0;
  for (int64_t i = 0; i < g->n_nodes; i++) n_uses += g->nodes[i].n_in;
  f->use_start = core_calloc(nv, sizeof *f->use_start);
  f->uses = core_calloc((size_t)n_uses + 1, sizeof *f->uses);
  f->is_output = core_calloc(nv, sizeof *f->is_output);
  f->supported = core_calloc(nn, sizeof *f->supported);
  f->view = core_calloc(nn, sizeof *f->view);
  f->into = core_calloc(nn, sizeof *f->into);
  f->writes = core_calloc(nn, sizeof *f->writes);
  f->group = core_calloc(nn, sizeof *f->group);
  f->next = core_calloc(nn, sizeof *f->next);
  f->groups = core_calloc(nn, sizeof *f->groups);
  f->mark = core_calloc(nn, sizeof *f->mark);
  f->stack = core_calloc(nn, sizeof *f->stack);
  f->stack2 = core_calloc(nn, sizeof *f->stack2);
  f->topo = core_calloc(nn, sizeof *f->topo);
  f->listed = core_calloc(nv, sizeof *f->listed);
  f->member_start = core_calloc(nn + 1, sizeof *f->member_start);
  f->members = core_calloc(nn, sizeof *f->members);
  if (!f->use_start || !f->uses || !f->is_output || !f->supported || !f->view ||
      !f->into || !f->writes || !f->group || !f->next || !f->groups || !f->mark ||
      !f->stack || !f->stack2 || !f->topo || !f->listed || !f->member_start || !f->members) {
    fuser_free(f);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a fusion plan");
  }
  /* Counting sort of (value, consumer) pairs into use_start/uses. */
  for (int64_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) f->use_start[g->nodes[i].in[k] + 1]++;
  for (int64_t v = 0; v < g->n_values; v++) f->use_start[v + 1] += f->use_start[v];
  for (int64_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      f->uses[f->use_start[g->nodes[i].in[k]]++] = (int32_t)i;
  for (int64_t v = g->n_values; v > 0; v--) f->use_start[v] = f->use_start[v - 1];
  f->use_start[0] = 0;
  for (int64_t i = 0; i < g->n_outputs; i++) f->is_output[g->outputs[i]] = true;
  for (int64_t i = 0; i < g->n_nodes; i++) f->supported[i] = caps->supports(g, i);
  return LOOM_OK;
}

/* ---- Back-end capabilities (a NULL member: the back end cannot) ------- */

static bool reads_view(const fuser_t *f, const ir_node_t *mm, const ir_view_t *v) {
  return f->caps->matmul_reads_view && f->caps->matmul_reads_view(f->g, mm, v);
}

static bool writes_view(const fuser_t *f, const ir_node_t *mm, const ir_view_t *v) {
  return f->caps->matmul_writes_view && f->caps->matmul_writes_view(f->g, mm, v);
}

static bool prologue_ok(const fuser_t *f, const ir_node_t *x) {
  return f->caps->index_prologue_ok && f->caps->index_prologue_ok(f->g, x);
}

static bool prologue_reads(const fuser_t *f, const ir_node_t *x, const ir_type_t *t) {
  return f->caps->index_prologue_reads && f->caps->index_prologue_reads(f->g, x, t);
}

static bool src_fits(const fuser_t *f, const ir_node_t *scatter, const ir_node_t *take) {
  return f->caps->index_src_fits && f->caps->index_src_fits(f->g, scatter, take);
}

/* ---- Strided views ------------------------------------------------------ */

static bool view_shares(const void *ctx, int32_t node) {
  return ((const fuser_t *)ctx)->view[node];
}

/* Whether every reader of node n's output reads it as a view: a view
 * node itself, or a matmul that takes it as an operand through the
 * strides of the whole chain. */
static bool read_as_view(const fuser_t *f, int32_t n) {
  int32_t v = f->g->nodes[n].out[0];
  if (f->is_output[v] || f->use_start[v] == f->use_start[v + 1]) return false;
  for (int32_t u = f->use_start[v]; u < f->use_start[v + 1]; u++) {
    const ir_node_t *user = &f->g->nodes[f->uses[u]];
    if (f->view[f->uses[u]]) continue;
    if (user->op != IR_OP_MATMUL || !f->supported[f->uses[u]]) return false;
    for (int k = 0; k < user->n_in; k++) {
      ir_view_t view;
      if (user->in[k] == v && (k > 1 || !ir_view_of(f->g, v, view_shares, f, &view) ||
                               !reads_view(f, user, &view)))
        return false;
    }
  }
  return true;
}

/* Layout nodes whose outputs only matmuls read (through other such
 * nodes, maybe) become views: no copy runs, the matmul reads the chain's
 * first input in place. Readers are checked consumers first, and a node
 * that fails makes its producers check again, until nothing changes. */
static void mark_views(fuser_t *f) {
  const loom_graph_t *g = f->g;
  for (int32_t n = 0; n < g->n_nodes; n++)
    f->view[n] = f->supported[n] && ir_view_op(g, &g->nodes[n]);
  for (int sweep = 0; sweep < 8; sweep++) {
    bool changed = false;
    for (int32_t n = (int32_t)g->n_nodes - 1; n >= 0; n--)
      if (f->view[n] && !read_as_view(f, n)) {
        f->view[n] = false;
        changed = true;
      }
    if (!changed) return;
  }
  memset(f->view, 0, sizeof *f->view * (size_t)g->n_nodes); /* not settled: none */
}

enum { MAX_PRODUCT_CHAIN = 8 };

/* The transposes and reshapes that matmul m's product alone flows
 * through, each the only reader of the one before: their count, 0 when
 * the product is read otherwise. None writes a graph output, which lives
 * in the caller's tensor, not in the product's storage. */
static int product_chain(const fuser_t *f, int32_t m, const ir_node_t **chain) {
  int n = 0;
  int32_t v = f->g->nodes[m].out[0];
  while (n < MAX_PRODUCT_CHAIN && !f->is_output[v] && f->use_start[v + 1] - f->use_start[v] == 1) {
    int32_t u = f->uses[f->use_start[v]];
    const ir_node_t *node = &f->g->nodes[u];
    if (f->view[u] || !f->supported[u] || node->op == IR_OP_SLICE || !ir_view_op(f->g, node) ||
        f->is_output[node->out[0]])
      break;
    chain[n++] = node;
    v = node->out[0];
  }
  return n;
}

/* Matmuls whose product a chain of transposes and reshapes carries to
 * the next op (attention's heads merged back into rows) write it where
 * the chain's result lies in order; the chain becomes aliases. */
static void mark_product_views(fuser_t *f) {
  const loom_graph_t *g = f->g;
  for (int32_t m = 0; m < g->n_nodes; m++) {
    const ir_node_t *chain[MAX_PRODUCT_CHAIN];
    const ir_node_t *mm = &g->nodes[m];
    if (mm->op != IR_OP_MATMUL || !f->supported[m]) continue;
    int n = product_chain(f, m, chain);
    ir_view_t view;
    if (n == 0 || !ir_view_plain(g, chain[n - 1]->out[0], &view) ||
        !ir_view_back(g, n, chain, &view) || ir_view_is_plain(&view) ||
        !writes_view(f, mm, &view))
      continue;
    f->writes[m] = true;
    for (int i = 0; i < n; i++) f->into[chain[i] - g->nodes] = true;
  }
}

/* Whether node n's output is a view that is not its root's storage in
 * order, so that only generated matmuls may read it. */
static bool strided_view(const fuser_t *f, int32_t n) {
  ir_view_t view;
  return f->view[n] &&
         !(ir_view_of(f->g, f->g->nodes[n].out[0], view_shares, f, &view) &&
           ir_view_is_plain(&view));
}

/* ---- Groups of one node ------------------------------------------------- */

static bool is_alias(const fuser_t *f, int32_t n) {
  const ir_node_t *node = &f->g->nodes[n];
  return ir_op_has(node->op, F_ALIAS) && !f->is_output[node->out[0]];
}

/* The group node n forms alone, as a new working group. */
static void start_group(fuser_t *f, int32_t n) {
  const ir_node_t *node = &f->g->nodes[n];
  ir_fusion_class_t cls = ir_ops[node->op].fusion_class;
  work_group_t *w = &f->groups[f->n_groups];
  memset(w, 0, sizeof *w);
  w->anchor = -1;
  w->first = w->head = w->tail = n;
  f->next[n] = -1;
  w->alive = true;
  w->size = 1;
  w->folds = cls == IR_CLASS_REDUCE;
  w->assign = node->op == IR_OP_ASSIGN;
  f->group[n] = f->n_groups++;
  if (w->assign) w->kind = FUSE_REFERENCE;
  else if (is_alias(f, n) || f->view[n] || f->into[n]) w->kind = FUSE_ALIAS;
  else if (!f->supported[n]) w->kind = FUSE_REFERENCE;
  else if (cls == IR_CLASS_EW) {
    w->kind = FUSE_ELEMENTWISE;
    w->space = *type_of(f, node->out[0]);
    w->open = true;
  } else if (cls == IR_CLASS_REDUCE && ir_op_has(node->op, F_WINDOW)) {
    w->kind = FUSE_REDUCTION;
    w->anchor = n;
    w->pool = w->open = true;
    w->space = *type_of(f, node->out[0]);
    w->k = -1;
  } else if (cls == IR_CLASS_REDUCE) {
    w->kind = FUSE_REDUCTION;
    w->anchor = n;
    w->open = ir_op_has(node->op, F_FOLD);
    if (w->open) {
      w->space = *type_of(f, node->in[0]);
      w->k = reduced_suffix(f, n);
    }
  } else if (cls == IR_CLASS_CONTRACT) {
    w->kind = FUSE_CONTRACTION;
    w->anchor = n;
    w->space = *type_of(f, node->out[0]);
    w->open = true;
  } else w->kind = cls == IR_CLASS_LAYOUT ? FUSE_LAYOUT : FUSE_REFERENCE;
}

/* ---- Dependencies ------------------------------------------------------- */

/* One side of the search: a stack of groups to expand and their mark
 * (the other side's is its negation). */
typedef struct search_side {
  int32_t *stack;
  int top;
  int32_t mark;
} search_side_t;

/* Marks group h for side `me`: true when the other side has seen it,
 * which closes a path from gi to x. */
static bool reach(fuser_t *f, search_side_t *me, int32_t h) {
  if (f->mark[h] == me->mark) return false;
  if (f->topo_valid && (f->topo[h] < f->topo_lo || f->topo[h] > f->topo_hi)) return false;
  if (f->mark[h] == -me->mark) return true;
  f->mark[h] = me->mark;
  me->stack[me->top++] = h;
  return false;
}

/* Expands the group on top of x's side (the groups x waits for). */
static bool step_back(fuser_t *f, search_side_t *me) {
  int32_t y = me->stack[--me->top];
  for (int32_t n = f->groups[y].head; n >= 0; n = f->next[n]) {
    const ir_node_t *node = &f->g->nodes[n];
    for (int k = 0; k < node->n_in; k++) {
      int32_t q = producer(f, node->in[k]);
      if (q >= 0 && reach(f, me, f->group[q])) return true;
    }
  }
  return false;
}

/* Expands the group on top of gi's side (the groups that wait for gi). */
static bool step_forward(fuser_t *f, search_side_t *me) {
  int32_t y = me->stack[--me->top];
  for (int32_t n = f->groups[y].head; n >= 0; n = f->next[n]) {
    const ir_node_t *node = &f->g->nodes[n];
    for (int k = 0; k < node->n_out; k++) {
      int32_t v = node->out[k];
      for (int32_t u = f->use_start[v]; u < f->use_start[v + 1]; u++)
        if (f->uses[u] < f->grouped && reach(f, me, f->group[f->uses[u]])) return true;
    }
  }
  return false;
}

/* Whether group x depends, through any path, on group gi. The search
 * runs over groups, not nodes: a kernel waits for every input of every
 * node in it, so a path may enter a group at one node and leave it at
 * another. It runs both ways at once, back from x and forward from gi
 * (over the nodes grouped so far), a group of each in turn, and ends
 * when the sides meet (a path) or either runs out: it costs about the
 * smaller of x's past and gi's future, where a search back alone cost
 * the whole graph behind x (a sum of many branches, each joined as it is
 * read, searched every branch's whole past). */
static bool depends_on(fuser_t *f, int32_t x, int32_t gi) {
  /* While folding, a path from gi to x runs through groups numbered
   * between theirs, in order. */
  if (f->topo_valid) {
    if (f->topo[x] < f->topo[gi]) return false;
    f->topo_lo = f->topo[gi];
    f->topo_hi = f->topo[x];
  }
  f->epoch++;
  search_side_t back = {f->stack, 0, f->epoch}, fwd = {f->stack2, 0, -f->epoch};
  f->mark[gi] = fwd.mark;
  fwd.stack[fwd.top++] = gi;
  if (reach(f, &back, x)) return true;
  while (back.top > 0 && fwd.top > 0)
    if (step_back(f, &back) || step_forward(f, &fwd)) return true;
  return false;
}

/* Whether n may join group gi: no input of n may come from a group that
 * depends on gi (that would make a cycle of kernels). n's consumers have
 * no group yet, so no path can leave n. */
static bool inputs_independent(fuser_t *f, int32_t n, int32_t gi) {
  const ir_node_t *node = &f->g->nodes[n];
  for (int k = 0; k < node->n_in; k++) {
    int32_t p = producer(f, node->in[k]);
    if (p >= 0 && f->group[p] != gi && depends_on(f, f->group[p], gi))
      return false;
  }
  return true;
}

/* ---- Forward joins ------------------------------------------------------ */

static bool outputs_have_shape(const fuser_t *f, int32_t n, const ir_type_t *s) {
  const ir_node_t *node = &f->g->nodes[n];
  for (int k = 0; k < node->n_out; k++)
    if (!same_shape(type_of(f, node->out[k]), s)) return false;
  return true;
}

static bool in_group(const fuser_t *f, int32_t v, int32_t gi) {
  int32_t p = producer(f, v);
  return p >= 0 && f->group[p] == gi;
}

/* An elementwise node in a reduction group runs over the full space or
 * over the reduced space kept as size-1 dims; it reads reduced values only
 * in that keepdim form. Without keepdim, NumPy would line a reduced value
 * up with the wrong axes (the emitter keeps one row in registers), except
 * when everything is reduced to a scalar. */
static bool ew_fits_reduction(const fuser_t *f, int32_t n, int32_t gi) {
  const work_group_t *w = &f->groups[gi];
  if (w->k < 0) return false;
  ir_type_t keep = keepdim_space(&w->space, w->k);
  ir_type_t drop = dropped_space(&w->space, w->k);
  bool all = w->k == w->space.rank;
  const ir_type_t *o = type_of(f, f->g->nodes[n].out[0]);
  bool full = same_shape(o, &w->space);
  if (!full && !same_shape(o, &keep) && !(all && same_shape(o, &drop)))
    return false;
  if (!outputs_have_shape(f, n, o)) return false;
  const ir_node_t *node = &f->g->nodes[n];
  for (int k = 0; k < node->n_in; k++) {
    if (!in_group(f, node->in[k], gi)) continue;
    const ir_type_t *t = type_of(f, node->in[k]);
    bool reduced = same_shape(t, &keep) || (all && same_shape(t, &drop));
    if (!same_shape(t, o) && !(full && reduced)) return false;
  }
  return true;
}

/* conv2d's epilogue walks each image's (H, W) as one run of positions:
 * a value from outside must broadcast over both or over neither. */
static bool fits_conv_epilogue(const fuser_t *f, int32_t n, int32_t gi) {
  int32_t anchor = f->groups[gi].anchor;
  if (f->g->nodes[anchor].op != IR_OP_CONV2D) return true;
  const ir_node_t *node = &f->g->nodes[n];
  for (int k = 0; k < node->n_in; k++) {
    if (in_group(f, node->in[k], gi)) continue;
    const ir_type_t *t = type_of(f, node->in[k]);
    bool h = t->rank < 2 || t->dims[t->rank - 2] == 1;
    bool w = t->rank < 1 || t->dims[t->rank - 1] == 1;
    if (h != w) return false;
  }
  return true;
}

/* Whether a fusable reduction n may join group gi, and how. */
static bool reduction_fits(const fuser_t *f, int32_t n, int32_t gi) {
  const work_group_t *w = &f->groups[gi];
  const ir_node_t *node = &f->g->nodes[n];
  if (!ir_op_has(node->op, F_FOLD)) return false;
  if (!same_shape(type_of(f, node->in[0]), &w->space)) return false;
  /* A fold that keeps the last dim is generated alone (c_reduce.c). */
  if (w->folds >= FUSE_MAX_FOLDS) return false;
  if (w->kind == FUSE_ELEMENTWISE) return !w->mixed && reduced_suffix(f, n) >= 0;
  return w->kind == FUSE_REDUCTION && w->k >= 0 && reduced_suffix(f, n) == w->k;
}

static bool join_fits(const fuser_t *f, int32_t n, int32_t gi) {
  const work_group_t *w = &f->groups[gi];
  ir_fusion_class_t cls = ir_ops[f->g->nodes[n].op].fusion_class;
  if (!w->alive || !w->open || w->size >= FUSE_MAX_NODES) return false;
  if (w->pool) return cls == IR_CLASS_EW && outputs_have_shape(f, n, &w->space);
  if (cls == IR_CLASS_REDUCE) return reduction_fits(f, n, gi);
  if (cls != IR_CLASS_EW) return false;
  if (w->kind == FUSE_REDUCTION) return ew_fits_reduction(f, n, gi);
  if (w->kind == FUSE_CONTRACTION && !fits_conv_epilogue(f, n, gi)) return false;
  return outputs_have_shape(f, n, &w->space);
}

static void join(fuser_t *f, int32_t n, int32_t gi) {
  work_group_t *w = &f->groups[gi];
  f->group[n] = gi;
  f->next[w->tail] = n;
  f->next[n] = -1;
  w->tail = n;
  w->size++;
  if (ir_ops[f->g->nodes[n].op].fusion_class != IR_CLASS_REDUCE) return;
  w->folds++;
  if (w->kind == FUSE_ELEMENTWISE) {
    w->kind = FUSE_REDUCTION;
    w->anchor = n;
    w->k = reduced_suffix(f, n);
  }
}

/* Contractions first (their epilogue runs while the tile is in cache),
 * then reductions, then the most recent group. */
static int join_rank(const fuser_t *f, int32_t gi) {
  static const int by_kind[] = {[FUSE_CONTRACTION] = 2, [FUSE_REDUCTION] = 1,
                                [FUSE_REFERENCE] = 0};
  return by_kind[f->groups[gi].kind] * (int)(f->n_groups + 1) + gi;
}

/* Node n joins the best group among its producers' that takes it. */
static bool try_join(fuser_t *f, int32_t n) {
  const ir_node_t *node = &f->g->nodes[n];
  int32_t tried[IR_MAX_ATTR_INTS * 4];
  int n_tried = 0;
  for (;;) {
    int32_t best = -1;
    for (int k = 0; k < node->n_in; k++) {
      int32_t p = producer(f, node->in[k]);
      if (p < 0) continue;
      int32_t gi = f->group[p];
      bool seen = false;
      for (int j = 0; j < n_tried; j++) seen |= tried[j] == gi;
      if (!seen && (best < 0 || join_rank(f, gi) > join_rank(f, best))) best = gi;
    }
    if (best < 0 || n_tried == (int)(sizeof tried / sizeof tried[0])) return false;
    tried[n_tried++] = best;
    if (join_fits(f, n, best) && inputs_independent(f, n, best)) {
      join(f, n, best);
      return true;
    }
  }
}

static bool may_join(const fuser_t *f, int32_t n) {
  const ir_node_t *node = &f->g->nodes[n];
  ir_fusion_class_t cls = ir_ops[node->op].fusion_class;
  if (cls != IR_CLASS_EW && !(cls == IR_CLASS_REDUCE &&
                              ir_op_has(node->op, F_FOLD)))
    return false;
  return !is_alias(f, n) && f->supported[n];
}

/* ---- Backward folds ----------------------------------------------------- */

/* The one group other than a that reads a's values, or -1 (none, or
 * several). *has_output: a holds a value that needs a buffer whatever
 * the grouping (a graph output, a value nobody reads, or one an assign
 * stores: assigns run last, from a buffer, whichever group made it, so
 * an optimizer's new moment folds into the update that reads it). */
static int32_t sole_consumer(const fuser_t *f, int32_t a, bool *has_output) {
  int32_t b = -1;
  *has_output = false;
  for (int32_t n = f->groups[a].head; n >= 0; n = f->next[n]) {
    const ir_node_t *node = &f->g->nodes[n];
    for (int k = 0; k < node->n_out; k++) {
      int32_t v = node->out[k];
      *has_output |= f->is_output[v] || f->use_start[v] == f->use_start[v + 1];
      for (int32_t u = f->use_start[v]; u < f->use_start[v + 1]; u++) {
        int32_t c = f->group[f->uses[u]];
        if (c == a) continue;
        if (f->groups[c].assign) {
          *has_output = true;
          continue;
        }
        if (b >= 0 && c != b) return -1;
        b = c;
      }
    }
  }
  return b;
}

/* Whether no value of group a is read outside a except by node n. */
static bool read_only_by(const fuser_t *f, int32_t a, int32_t n) {
  for (int32_t m = f->groups[a].head; m >= 0; m = f->next[m]) {
    const ir_node_t *node = &f->g->nodes[m];
    for (int k = 0; k < node->n_out; k++)
      for (int32_t u = f->use_start[node->out[k]]; u < f->use_start[node->out[k] + 1]; u++)
        if (f->group[f->uses[u]] != a && f->uses[u] != n) return false;
  }
  return true;
}

/* Whether group a's values are read outside a only by index node n of
 * group b or by b's prologue nodes (elementwise ops and expands that
 * compute n's index): an expand of a row index, then `* 64 + j`. */
static bool read_only_by_index(const fuser_t *f, int32_t a, int32_t b, int32_t n) {
  for (int32_t m = f->groups[a].head; m >= 0; m = f->next[m]) {
    const ir_node_t *node = &f->g->nodes[m];
    for (int k = 0; k < node->n_out; k++)
      for (int32_t u = f->use_start[node->out[k]]; u < f->use_start[node->out[k] + 1]; u++) {
        int32_t user = f->uses[u];
        ir_op_t op = f->g->nodes[user].op;
        bool prologue = f->group[user] == b && user != n &&
                        (op == IR_OP_EXPAND || ir_ops[op].fusion_class == IR_CLASS_EW);
        if (f->group[user] != a && user != n && !prologue) return false;
      }
  }
  return true;
}

/* How many windows read an input element, at most (rounded up per dim). */
static int64_t window_overlap(const ir_node_t *pool) {
  const int64_t *kernel, *stride;
  int64_t reads = 1;
  if (ir_attr_ints(pool->attrs, "kernel", &kernel) != 2) return 1;
  if (ir_attr_ints(pool->attrs, "stride", &stride) != 2) stride = kernel;
  for (int i = 0; i < 2; i++) reads *= (kernel[i] + stride[i] - 1) / stride[i];
  return reads;
}

/* A pooling prologue is computed again at every tap that reads it: only
 * a short chain (a relu, a scale) is worth that to save a buffer. */
enum { POOL_PROLOGUE_WORK = 8 };

/* Whether elementwise group a may become the prologue of pooling group b:
 * it feeds only the pooling node, over (a space broadcast into) its
 * input, and is cheap enough to recompute. */
static bool prologue_fits(const fuser_t *f, int32_t a, int32_t b, bool has_output) {
  const work_group_t *wa = &f->groups[a];
  const ir_node_t *pool = &f->g->nodes[f->groups[b].anchor];
  if (has_output || !read_only_by(f, a, f->groups[b].anchor)) return false;
  /* Prologue nodes already folded come before the anchor in graph order. */
  int64_t nodes = 0;
  for (int32_t n = f->groups[b].head; n >= 0; n = f->next[n]) nodes += n < f->groups[b].anchor;
  for (int32_t n = wa->head; n >= 0; n = f->next[n]) {
    nodes++;
    if (!broadcasts_into(type_of(f, f->g->nodes[n].out[0]), type_of(f, pool->in[0])))
      return false;
  }
  return nodes * window_overlap(pool) <= POOL_PROLOGUE_WORK;
}

/* Whether elementwise group a may fold into contraction group b's
 * epilogue (an optimizer's m * beta1 beside the gradient that the update
 * reads): over b's output space exactly and read in b by epilogue nodes
 * only, never by the contraction, so that each element is computed once,
 * while the tile is in cache, instead of in a pass of its own. */
static bool epilogue_input_fits(const fuser_t *f, int32_t a, int32_t b, bool has_output) {
  const work_group_t *wa = &f->groups[a], *wb = &f->groups[b];
  if (has_output || !same_shape(&wa->space, &wb->space)) return false;
  for (int32_t n = wa->head; n >= 0; n = f->next[n]) {
    if (!outputs_have_shape(f, n, &wb->space) || !fits_conv_epilogue(f, n, b)) return false;
    const ir_node_t *node = &f->g->nodes[n];
    for (int k = 0; k < node->n_out; k++)
      for (int32_t u = f->use_start[node->out[k]]; u < f->use_start[node->out[k] + 1]; u++)
        if (f->uses[u] == wb->anchor) return false;
  }
  return true;
}

/* The index node of layout group b when it may take a prologue, or -1. */
static int32_t index_taking_prologue(const fuser_t *f, int32_t b) {
  int32_t last = -1;
  for (int32_t n = f->groups[b].head; n >= 0; n = f->next[n]) last = n > last ? n : last;
  if (last < 0 || !f->supported[last]) return -1;
  return prologue_ok(f, &f->g->nodes[last]) ? last : -1;
}

/* Whether group a, one index_select (or gather by a 1-D index), may
 * pick the rows of the src of scatter_add node x of group b, directly or
 * through a mul of b that scales them (caps->index_src_fits), read by
 * nothing else. */
static bool take_fits(fuser_t *f, int32_t a, int32_t b, int32_t x) {
  int32_t t = f->groups[a].head;
  const ir_node_t *tn = &f->g->nodes[t];
  int32_t src = producer(f, f->g->nodes[x].in[2]);
  int32_t reader = src >= 0 && src != t && f->group[src] == b ? src : x;
  if (!f->supported[t] || !src_fits(f, &f->g->nodes[x], tn) ||
      !read_only_by(f, a, reader))
    return false;
  for (int k = 0; k < tn->n_in; k++) {
    int32_t p = producer(f, tn->in[k]);
    if (p >= 0 && f->group[p] != b && depends_on(f, f->group[p], b)) return false;
  }
  return true;
}

/* Whether a, a group of one mul, scales the rows that another group of
 * one take (index_select, 1-D gather) picks into the src of the
 * scatter_add that ends layout group b: out[dst[e]] += h[src[e]] *
 * norm[e], a GCN's weighted message passing. Returns the take's group,
 * which folds into b with a (take_fits holds for it once a is in b), or
 * -1. */
static int32_t scaled_take(fuser_t *f, int32_t a, int32_t b, bool has_output) {
  const work_group_t *wa = &f->groups[a], *wb = &f->groups[b];
  if (has_output || wa->kind != FUSE_ELEMENTWISE || wa->head != wa->tail ||
      f->g->nodes[wa->head].op != IR_OP_MUL || wb->kind != FUSE_LAYOUT || !wb->alive ||
      wa->size + wb->size + 1 > FUSE_MAX_NODES)
    return -1;
  int32_t x = index_taking_prologue(f, b);
  const ir_node_t *m = &f->g->nodes[wa->head], *xn = x >= 0 ? &f->g->nodes[x] : NULL;
  if (!xn || xn->op != IR_OP_SCATTER_ADD || m->out[0] != xn->in[2] ||
      !f->supported[wa->head] || !read_only_by(f, a, x))
    return -1;
  for (int k = 0; k < 2; k++) {
    int32_t t = producer(f, m->in[k]), w = producer(f, m->in[1 - k]);
    if (t < 0) continue;
    int32_t tg = f->group[t];
    const ir_node_t *tn = &f->g->nodes[t];
    if (tg == a || tg == b || !f->groups[tg].alive || f->groups[tg].head != f->groups[tg].tail ||
        (tn->op != IR_OP_INDEX_SELECT && tn->op != IR_OP_GATHER) || !f->supported[t] ||
        f->is_output[tn->out[0]] || !src_fits(f, xn, tn) || !read_only_by(f, tg, wa->head))
      continue;
    if (w >= 0 && (f->group[w] == b || f->group[w] == tg || depends_on(f, f->group[w], b)))
      continue;
    bool free = true;
    for (int i = 0; i < tn->n_in && free; i++) {
      int32_t p = producer(f, tn->in[i]);
      free = p < 0 || f->group[p] == b || !depends_on(f, f->group[p], b);
    }
    if (free) return tg;
  }
  return -1;
}

/* Whether group a (elementwise, or one expand) may fold into index group
 * b as the prologue that computes its index (c_index.c): a's values are
 * read outside a only as that index, and what a reads from outside lines
 * up with the index's rows and columns. The index then never reaches
 * memory (a GNN's (edges, features) scatter index). */
static bool index_prologue_fits(fuser_t *f, int32_t a, int32_t b, bool has_output) {
  int32_t x = index_taking_prologue(f, b);
  if (has_output || x < 0 || !f->groups[b].alive) return false;
  const ir_node_t *xn = &f->g->nodes[x];
  const work_group_t *wa = &f->groups[a];
  ir_op_t op = f->g->nodes[wa->head].op;
  if (wa->head == wa->tail && (op == IR_OP_INDEX_SELECT || op == IR_OP_GATHER))
    return take_fits(f, a, b, x);
  if (producer(f, xn->in[0]) >= 0 && f->group[producer(f, xn->in[0])] == a) return false;
  if (xn->n_in > 2 && producer(f, xn->in[2]) >= 0 && f->group[producer(f, xn->in[2])] == a)
    return false;
  if (!read_only_by_index(f, a, b, x)) return false;
  for (int32_t n = f->groups[a].head; n >= 0; n = f->next[n]) {
    const ir_node_t *node = &f->g->nodes[n];
    if (node->op != IR_OP_EXPAND && ir_ops[node->op].fusion_class != IR_CLASS_EW) return false;
    for (int k = 0; k < node->n_in; k++) {
      int32_t p = producer(f, node->in[k]);
      if (p >= 0 && f->group[p] == a) continue;
      if (!prologue_reads(f, xn, type_of(f, node->in[k]))) return false;
      if (p >= 0 && f->group[p] != b && depends_on(f, f->group[p], b)) return false;
    }
  }
  return true;
}

/* Whether elementwise group a may fold into group b: its space must fit
 * (broadcast into an elementwise group; the full space of a reduction,
 * reading b's reduced values only as a node of b would), and no path may
 * run from b to a through a third group. */
static bool fold_fits(fuser_t *f, int32_t a, int32_t b, bool has_output) {
  const work_group_t *wa = &f->groups[a], *wb = &f->groups[b];
  if (wa->size + wb->size > FUSE_MAX_NODES || wa->folds + wb->folds > FUSE_MAX_FOLDS)
    return false;
  if (wb->kind == FUSE_LAYOUT || wa->kind != FUSE_ELEMENTWISE)
    return wb->kind == FUSE_LAYOUT && index_prologue_fits(f, a, b, has_output);
  bool same = same_shape(&wa->space, &wb->space);
  if (!wb->alive || !wb->open) return false;
  if (wb->pool && !prologue_fits(f, a, b, has_output)) return false;
  if (has_output && !same) return false;
  if (wb->kind == FUSE_REDUCTION && !wb->pool && (wa->mixed || !same)) return false;
  if (wb->kind == FUSE_ELEMENTWISE && !broadcasts_into(&wa->space, &wb->space))
    return false;
  if (wb->kind == FUSE_CONTRACTION && !epilogue_input_fits(f, a, b, has_output)) return false;
  if (wb->kind != FUSE_ELEMENTWISE && wb->kind != FUSE_REDUCTION && wb->kind != FUSE_CONTRACTION)
    return false;
  for (int32_t n = wa->head; n >= 0; n = f->next[n]) {
    const ir_node_t *node = &f->g->nodes[n];
    if (wb->kind == FUSE_REDUCTION && !wb->pool && !ew_fits_reduction(f, n, b)) return false;
    for (int k = 0; k < node->n_in; k++) {
      int32_t p = producer(f, node->in[k]);
      if (p >= 0 && f->group[p] != a && f->group[p] != b &&
          depends_on(f, f->group[p], b))
        return false;
    }
  }
  return true;
}

static void fold(fuser_t *f, int32_t a, int32_t b) {
  work_group_t *wa = &f->groups[a], *wb = &f->groups[b];
  for (int32_t n = wa->head; n >= 0; n = f->next[n]) f->group[n] = b;
  f->next[wb->tail] = wa->head;
  wb->tail = wa->tail;
  wb->size += wa->size;
  wb->folds += wa->folds;
  wb->mixed |= wa->mixed || !same_shape(&wa->space, &wb->space);
  if (wa->first < wb->first) wb->first = wa->first;
  wa->alive = false;
}

/* One sweep, consumers first so that chains fold in one go; returns
 * whether anything folded. */
static bool fold_sweep(fuser_t *f) {
  bool folded = false;
  for (int32_t a = f->n_groups - 1; a >= 0; a--) {
    const work_group_t *wa = &f->groups[a];
    ir_op_t op = f->g->nodes[wa->head].op;
    bool expand = wa->kind == FUSE_LAYOUT && wa->head == wa->tail &&
                  (op == IR_OP_EXPAND || op == IR_OP_INDEX_SELECT ||
                   op == IR_OP_GATHER); /* index prologues, takes */
    if (!wa->alive || (wa->kind != FUSE_ELEMENTWISE && !expand)) continue;
    bool has_output;
    int32_t b = sole_consumer(f, a, &has_output);
    if (b < 0) continue;
    /* a scale of a take's rows brings the take along */
    int32_t take = scaled_take(f, a, b, has_output);
    if (take < 0 && !fold_fits(f, a, b, has_output)) continue;
    fold(f, a, b);
    if (take >= 0) fold(f, take, b);
    folded = true;
  }
  return folded;
}

/* Numbers the live groups in a topological order of their dependencies
 * (Kahn's algorithm over the nodes' inputs). A fold keeps it one: the
 * group folded (a) has one consumer (b), which keeps its number, so the
 * merged group still comes after a's producers and before b's readers.
 * Searches use it to skip groups that cannot lie on a path. */
static void number_groups(fuser_t *f) {
  int32_t *waits = f->stack2, *queue = f->stack, head = 0, tail = 0, next = 0;
  for (int32_t gi = 0; gi < f->n_groups; gi++) waits[gi] = 0;
  for (int64_t n = 0; n < f->g->n_nodes; n++)
    for (int k = 0; k < f->g->nodes[n].n_in; k++) {
      int32_t p = producer(f, f->g->nodes[n].in[k]);
      if (p >= 0 && f->group[p] != f->group[n]) waits[f->group[n]]++;
    }
  for (int32_t gi = 0; gi < f->n_groups; gi++)
    if (f->groups[gi].alive && waits[gi] == 0) queue[tail++] = gi;
  while (head < tail) {
    int32_t gi = queue[head++];
    f->topo[gi] = next++;
    for (int32_t n = f->groups[gi].head; n >= 0; n = f->next[n])
      for (int k = 0; k < f->g->nodes[n].n_out; k++) {
        int32_t v = f->g->nodes[n].out[k];
        for (int32_t u = f->use_start[v]; u < f->use_start[v + 1]; u++) {
          int32_t c = f->group[f->uses[u]];
          if (c != gi && --waits[c] == 0) queue[tail++] = c;
        }
      }
  }
}

/* A fold can leave another group with one consumer where it had two;
 * a few more sweeps catch most of those. */
static void fold_backward(fuser_t *f) {
  number_groups(f);
  f->topo_valid = true;
  for (int sweep = 0; sweep < 4; sweep++)
    if (!fold_sweep(f)) break;
  f->topo_valid = false;
}

/* ---- The plan ----------------------------------------------------------- */

/* A value gets a buffer when it is a graph output or read by another
 * group. A group of one node lists all its node's outputs: if the emitter
 * declines it, the node's reference kernel writes every output. A value
 * nobody reads (a graph without DCE) is listed too, so that no group is
 * left without an output to size its loops by. */
static bool is_group_output(const fuser_t *f, int32_t v, int32_t gi,
                            bool one_node) {
  if (one_node || f->is_output[v] || f->use_start[v] == f->use_start[v + 1])
    return true;
  for (int32_t u = f->use_start[v]; u < f->use_start[v + 1]; u++)
    if (f->group[f->uses[u]] != gi) return true;
  return false;
}

/* Appends v to group gi's inputs unless already there. */
static void add_input(fuser_t *f, int32_t gi, fuse_group_t *out, int32_t v) {
  if (f->listed[v] == gi + 1) return;
  f->listed[v] = gi + 1;
  out->inputs[out->n_inputs++] = v;
}

/* The nodes of each working group in graph order (a counting sort by
 * group): member_start and members. */
static void list_members(fuser_t *f) {
  int64_t nn = f->g->n_nodes;
  for (int64_t n = 0; n < nn; n++) f->member_start[f->group[n] + 1]++;
  for (int32_t gi = 0; gi < f->n_groups; gi++) f->member_start[gi + 1] += f->member_start[gi];
  for (int64_t n = 0; n < nn; n++) f->members[f->member_start[f->group[n]]++] = (int32_t)n;
  for (int32_t gi = f->n_groups; gi > 0; gi--) f->member_start[gi] = f->member_start[gi - 1];
  f->member_start[0] = 0;
}

/* Fills out's nodes, inputs and outputs from working group gi. */
static loom_status_t fill_group(fuser_t *f, int32_t gi, fuse_group_t *out) {
  const work_group_t *w = &f->groups[gi];
  const int32_t *nodes = f->members + f->member_start[gi];
  int n_nodes = f->member_start[gi + 1] - f->member_start[gi], n_in = 0, n_out = 0;
  for (int i = 0; i < n_nodes; i++) {
    n_in += f->g->nodes[nodes[i]].n_in;
    n_out += f->g->nodes[nodes[i]].n_out;
  }
  out->kind = w->kind;
  out->anchor = w->anchor;
  out->nodes = core_malloc(sizeof(int32_t) * (size_t)(n_nodes + 1));
  out->inputs = core_malloc(sizeof(int32_t) * (size_t)(n_in + 1));
  out->outputs = core_malloc(sizeof(int32_t) * (size_t)(n_out + 1));
  if (!out->nodes || !out->inputs || !out->outputs)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a fusion plan");
  bool one_node = n_nodes == 1;
  for (int i = 0; i < n_nodes; i++) {
    int32_t n = nodes[i];
    const ir_node_t *node = &f->g->nodes[n];
    out->nodes[out->n_nodes++] = n;
    for (int k = 0; k < node->n_in; k++)
      if (!in_group(f, node->in[k], gi)) add_input(f, gi, out, node->in[k]);
    for (int k = 0; k < node->n_out; k++)
      if (is_group_output(f, node->out[k], gi, one_node))
        out->outputs[out->n_outputs++] = node->out[k];
  }
  return LOOM_OK;
}

/* Groups waiting on each group: for every value crossing from one group
 * to another, one count. */
static void count_waits(const fuser_t *f, int32_t *waits) {
  for (int64_t n = 0; n < f->g->n_nodes; n++) {
    const ir_node_t *node = &f->g->nodes[n];
    for (int k = 0; k < node->n_in; k++) {
      int32_t p = producer(f, node->in[k]);
      if (p >= 0 && f->group[p] != f->group[n]) waits[f->group[n]]++;
    }
  }
}

/* A binary min-heap of group keys: the groups ready to run. */
typedef struct ready_heap {
  int32_t *key;
  int n;
} ready_heap_t;

static void heap_push(ready_heap_t *h, int32_t key) {
  int i = h->n++;
  for (; i > 0 && h->key[(i - 1) / 2] > key; i = (i - 1) / 2) h->key[i] = h->key[(i - 1) / 2];
  h->key[i] = key;
}

static int32_t heap_pop(ready_heap_t *h) {
  int32_t top = h->key[0], last = h->key[--h->n];
  int i = 0;
  for (int c; (c = 2 * i + 1) < h->n; i = c) {
    if (c + 1 < h->n && h->key[c + 1] < h->key[c]) c++;
    if (h->key[c] >= last) break;
    h->key[i] = h->key[c];
  }
  h->key[i] = last;
  return top;
}

/* Ready groups run earliest in graph order first, assigns last. */
static int32_t ready_key(const fuser_t *f, int32_t gi) {
  return f->groups[gi].assign ? f->n_groups + gi : gi;
}

/* Counts down the waits of the groups reading gi's values, and queues
 * those left waiting on nothing. */
static void release_consumers(const fuser_t *f, int32_t gi, int32_t *waits,
                              ready_heap_t *ready) {
  for (int32_t i = f->member_start[gi]; i < f->member_start[gi + 1]; i++) {
    const ir_node_t *node = &f->g->nodes[f->members[i]];
    for (int k = 0; k < node->n_out; k++) {
      int32_t v = node->out[k];
      for (int32_t u = f->use_start[v]; u < f->use_start[v + 1]; u++) {
        int32_t c = f->group[f->uses[u]];
        if (c != gi && --waits[c] == 0) heap_push(ready, ready_key(f, c));
      }
    }
  }
}

/* Orders the groups (Kahn's algorithm: among the groups whose inputs are
 * ready, the earliest in graph order, assigns last) into order; returns
 * the count. */
static loom_status_t order_groups(const fuser_t *f, int32_t *order, int *count) {
  int32_t *waits = core_calloc((size_t)f->n_groups + 1, sizeof *waits);
  ready_heap_t ready = {.key = core_calloc((size_t)f->n_groups + 1, sizeof(int32_t))};
  if (!waits || !ready.key) {
    core_free(waits);
    core_free(ready.key);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a fusion plan");
  }
  count_waits(f, waits);
  int alive = 0;
  for (int32_t gi = 0; gi < f->n_groups; gi++) {
    alive += f->groups[gi].alive;
    if (f->groups[gi].alive && waits[gi] == 0) heap_push(&ready, ready_key(f, gi));
  }
  *count = 0;
  while (ready.n > 0) {
    int32_t key = heap_pop(&ready), gi = key >= f->n_groups ? key - f->n_groups : key;
    order[(*count)++] = gi;
    release_consumers(f, gi, waits, &ready);
  }
  core_free(waits);
  core_free(ready.key);
  if (*count != alive)
    return loom_fail(LOOM_ERR_GRAPH, "fusion: groups depend on each other in "
                     "a cycle (%d of %d ordered)", *count, alive);
  return LOOM_OK;
}

static loom_status_t build_plan(fuser_t *f, fuse_plan_t *out) {
  size_t nn = (size_t)f->g->n_nodes + 1;
  int32_t *order = core_calloc((size_t)f->n_groups + 1, sizeof *order);
  out->groups = core_calloc((size_t)f->n_groups + 1, sizeof *out->groups);
  out->group_of_node = core_calloc(nn, sizeof *out->group_of_node);
  if (!order || !out->groups || !out->group_of_node) {
    core_free(order);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a fusion plan");
  }
  int count = 0;
  list_members(f);
  loom_status_t s = order_groups(f, order, &count);
  for (int i = 0; s == LOOM_OK && i < count; i++) {
    out->n_groups = i + 1;
    s = fill_group(f, order[i], &out->groups[i]);
    const work_group_t *w = &f->groups[order[i]];
    if (s == LOOM_OK) {
      out->groups[i].strided = strided_view(f, w->head) || (w->anchor >= 0 && f->writes[w->anchor]);
      out->groups[i].into = f->into[w->head];
    }
    for (int j = 0; j < out->groups[i].n_nodes; j++)
      out->group_of_node[out->groups[i].nodes[j]] = i;
  }
  core_free(order);
  return s;
}

loom_status_t fuse_plan_build(const loom_graph_t *g, const fuse_options_t *o,
                              const fuse_caps_t *caps, fuse_plan_t *out) {
  LOOM_CHECK_ARG(out);
  memset(out, 0, sizeof *out);
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(o);
  LOOM_CHECK_ARG(caps);
  if (!caps->supports)
    return loom_fail(LOOM_ERR_INVALID, "fuse_plan_build: the back end's capabilities name no "
                                       "supports function");
  fuser_t f;
  LOOM_TRY(fuser_init(&f, g, caps));
  if (o->enabled) {
    mark_views(&f);
    mark_product_views(&f);
  }
  for (int32_t n = 0; n < g->n_nodes; n++) {
    f.grouped = n;
    if (!o->enabled || f.view[n] || f.into[n] || !may_join(&f, n) || !try_join(&f, n))
      start_group(&f, n);
  }
  f.grouped = (int32_t)g->n_nodes;
  if (o->enabled) fold_backward(&f);
  loom_status_t s = build_plan(&f, out);
  fuser_free(&f);
  if (s != LOOM_OK) fuse_plan_free(out);
  return s;
}

/* ---- Names and text ----------------------------------------------------- */

const char *fuse_kind_name(fuse_kind_t kind) {
  static const char *const names[] = {"elementwise", "reduction", "contraction",
                                      "layout", "alias", "reference"};
  return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

int fuse_group_name(const loom_graph_t *g, const fuse_plan_t *plan, int gi, const char *note,
                    char *buf, size_t size) {
  const fuse_group_t *grp = &plan->groups[gi];
  int n = snprintf(buf, size, "g%d %s%s [", gi, fuse_kind_name(grp->kind), note);
  for (int k = 0; k < grp->n_nodes && n >= 0 && (size_t)n < size; k++)
    n += snprintf(buf + n, size - (size_t)n, "%s%s", k ? " " : "",
                  ir_ops[g->nodes[grp->nodes[k]].op].name);
  if (n >= 0 && (size_t)n < size) n += snprintf(buf + n, size - (size_t)n, "]");
  return n;
}

void fuse_plan_free(fuse_plan_t *plan) {
  if (!plan) return;
  for (int i = 0; plan->groups && i < plan->n_groups; i++) {
    core_free(plan->groups[i].nodes);
    core_free(plan->groups[i].inputs);
    core_free(plan->groups[i].outputs);
  }
  core_free(plan->groups);
  core_free(plan->group_of_node);
  memset(plan, 0, sizeof *plan);
}

static void put_values(core_text_t *t, const char *label, const int32_t *v, int n) {
  core_text_put(t, " %s:", label);
  if (n == 0) core_text_put(t, " -");
  for (int i = 0; i < n; i++) core_text_put(t, " %%%d", v[i]);
}

loom_status_t fuse_plan_describe(const loom_graph_t *g, const fuse_plan_t *plan,
                                 char **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(plan);
  core_text_t t = {0};
  core_text_put(&t, "%s", "");
  for (int i = 0; i < plan->n_groups; i++) {
    const fuse_group_t *grp = &plan->groups[i];
    core_text_put(&t, "g%d %s%s [", i, fuse_kind_name(grp->kind), grp->strided ? " (view)" : "");
    for (int j = 0; j < grp->n_nodes; j++)
      core_text_put(&t, "%s%s", j ? ", " : "", ir_ops[g->nodes[grp->nodes[j]].op].name);
    core_text_put(&t, "]");
    put_values(&t, "in", grp->inputs, grp->n_inputs);
    put_values(&t, "out", grp->outputs, grp->n_outputs);
    core_text_put(&t, "\n");
  }
  return core_text_take(&t, "describing a fusion plan", out);
}
