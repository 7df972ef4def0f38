/* Parameters updated in place: see inplace.h. A group G computing v may
 * write into parameter p's storage when
 *   - p is assigned once, v only there and in later reads (v is not a
 *     graph output with a slot of its own), and no graph output views p;
 *   - every other group reading p, or a view of p, runs before G;
 *   - G reads p itself at v's own index only: an elementwise group over
 *     p's shape, or the epilogue of a contraction that does not take p
 *     (nor a view of it) as an operand and whose product is not v. */
#include "compiler/inplace.h"

#include "core/alloc.h"
#include "core/status.h"

/* The value whose storage each value shares: reshape-like groups view
 * their input (the arena planner gives them its slot). */
static void storage_roots(const loom_executable_t *e, int32_t *root) {
  for (int64_t v = 0; v < e->graph->n_values; v++) root[v] = (int32_t)v;
  for (int k = 0; k < e->plan.n_groups; k++) {
    const fuse_group_t *grp = &e->plan.groups[e->order[k]];
    if (grp->kind != FUSE_ALIAS) continue;
    for (int o = 0; o < grp->n_outputs; o++) root[grp->outputs[o]] = root[grp->inputs[0]];
  }
}

bool rt_is_assign_group(const loom_graph_t *g, const fuse_group_t *grp) {
  return grp->n_nodes == 1 && g->nodes[grp->nodes[0]].op == IR_OP_ASSIGN;
}

typedef struct ctx {
  const loom_executable_t *e;
  const int32_t *root, *pos;
  /* Per value, found once for every assign (see find_readers): */
  int32_t (*latest)[2]; /* as a storage root: the two last groups reading it */
  int32_t *assigns;     /* as a parameter: the assigns writing it */
  bool *viewed_out;     /* as a storage root: a graph output views it */
} ctx_t;

/* Notes that group h reads storage root p: latest[p] keeps the two last
 * in the schedule, without repeats. */
static void note_reader(ctx_t *c, int32_t p, int32_t h) {
  int32_t *late = c->latest[p];
  if (late[0] == h || late[1] == h) return;
  if (late[0] < 0 || c->pos[h] > c->pos[late[0]]) {
    late[1] = late[0];
    late[0] = h;
  } else if (late[1] < 0 || c->pos[h] > c->pos[late[1]]) {
    late[1] = h;
  }
}

/* The readers, assigns and outputs of every value, in one pass over the
 * groups instead of one per assign. */
static void find_readers(ctx_t *c) {
  const loom_executable_t *e = c->e;
  const loom_graph_t *g = e->graph;
  for (int64_t v = 0; v < g->n_values; v++) {
    c->latest[v][0] = c->latest[v][1] = -1;
    c->assigns[v] = 0;
    c->viewed_out[v] = false;
  }
  for (int64_t i = 0; i < g->n_outputs; i++) c->viewed_out[c->root[g->outputs[i]]] = true;
  for (int h = 0; h < e->plan.n_groups; h++) {
    const fuse_group_t *grp = &e->plan.groups[h];
    if (grp->kind == FUSE_ALIAS) continue;
    if (rt_is_assign_group(g, grp)) c->assigns[g->nodes[grp->nodes[0]].in[0]]++;
    for (int i = 0; i < grp->n_inputs; i++) note_reader(c, c->root[grp->inputs[i]], h);
  }
}

/* Whether G reads p only at the index where it writes v. */
static bool reads_in_step(const ctx_t *c, const fuse_group_t *grp, int32_t p, int32_t v) {
  const loom_graph_t *g = c->e->graph;
  for (int i = 0; i < grp->n_inputs; i++)
    if (c->root[grp->inputs[i]] == p && grp->inputs[i] != p) return false; /* a view */
  int64_t numel = 1;
  for (int d = 0; d < g->values[p].type.rank; d++) numel *= g->values[p].type.dims[d];
  if (grp->kind == FUSE_ELEMENTWISE) {
    for (int o = 0; o < grp->n_outputs; o++) {
      const ir_type_t *t = &g->values[grp->outputs[o]].type;
      int64_t n = 1;
      for (int d = 0; d < t->rank; d++) n *= t->dims[d];
      if (n != numel) return false;
    }
    return true;
  }
  if (grp->kind != FUSE_CONTRACTION || grp->anchor < 0) return false;
  const ir_node_t *anchor = &g->nodes[grp->anchor];
  for (int j = 0; j < anchor->n_in; j++)
    if (c->root[anchor->in[j]] == p) return false;
  return anchor->out[0] != v;
}

static bool can_alias(const ctx_t *c, int32_t assign_group, int32_t p, int32_t v) {
  const loom_executable_t *e = c->e;
  const loom_graph_t *g = e->graph;
  if (g->values[p].kind != IR_VALUE_PARAM || g->values[v].kind != IR_VALUE_NODE ||
      e->slot_of_value[p] < 0 || e->slot_of_value[v] >= 0 ||
      !ir_type_equal(&g->values[p].type, &g->values[v].type))
    return false;
  for (int d = 0; d < g->values[p].type.rank; d++)
    if (!ir_dim_is_const(g->values[p].type.dims[d])) return false;
  if (c->viewed_out[p] || c->assigns[p] > 1) return false; /* assigned twice */
  int32_t gv = e->plan.group_of_node[g->values[v].node];
  if (!reads_in_step(c, &e->plan.groups[gv], p, v)) return false;
  /* No group but the assign reads p (or a view of it) after gv. */
  const int32_t *late = c->latest[p];
  int32_t h = late[0] != assign_group ? late[0] : late[1];
  return h < 0 || c->pos[h] <= c->pos[gv];
}

/* The anchor's product becomes an output of the group, so that the
 * kernel writes it into a buffer of its own. */
static loom_status_t keep_product(loom_executable_t *e, int32_t gi) {
  fuse_group_t *grp = &e->plan.groups[gi];
  int32_t y = e->graph->nodes[grp->anchor].out[0];
  for (int o = 0; o < grp->n_outputs; o++)
    if (grp->outputs[o] == y) return LOOM_OK;
  int32_t *out = core_realloc(grp->outputs, sizeof(int32_t) * (size_t)(grp->n_outputs + 1));
  if (!out) return loom_fail(LOOM_ERR_NOMEM, "out of memory planning in-place updates");
  out[grp->n_outputs++] = y;
  grp->outputs = out;
  return LOOM_OK;
}

loom_status_t rt_alias_assigns(loom_executable_t *e) {
  const loom_graph_t *g = e->graph;
  int n_groups = e->plan.n_groups;
  size_t nv = (size_t)g->n_values + 1;
  int32_t *root = core_malloc(sizeof(int32_t) * nv);
  int32_t *pos = core_malloc(sizeof(int32_t) * (size_t)(n_groups + 1));
  ctx_t c = {e, root, pos, core_malloc(sizeof *c.latest * nv), core_malloc(sizeof(int32_t) * nv),
             core_malloc(sizeof(bool) * nv)};
  loom_status_t s = root && pos && c.latest && c.assigns && c.viewed_out
                        ? LOOM_OK
                        : loom_fail(LOOM_ERR_NOMEM, "out of memory planning in-place updates");
  if (s == LOOM_OK) {
    for (int k = 0; k < n_groups; k++) pos[e->order[k]] = k;
    storage_roots(e, root);
    find_readers(&c);
  }
  for (int gi = 0; s == LOOM_OK && gi < n_groups; gi++) {
    if (!rt_is_assign_group(g, &e->plan.groups[gi])) continue;
    const ir_node_t *a = &g->nodes[e->plan.groups[gi].nodes[0]];
    int32_t p = a->in[0], v = a->in[1];
    if (!can_alias(&c, gi, p, v)) continue;
    int32_t gv = e->plan.group_of_node[g->values[v].node];
    if (e->plan.groups[gv].kind == FUSE_CONTRACTION) s = keep_product(e, gv);
    if (s == LOOM_OK) e->slot_of_value[v] = e->slot_of_value[p];
  }
  core_free(root);
  core_free(pos);
  core_free(c.latest);
  core_free(c.assigns);
  core_free(c.viewed_out);
  return s;
}
