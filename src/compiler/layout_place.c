/* Layout ops without a copy: see layout_place.h. */
#include "compiler/layout_place.h"

#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "ir/view.h"

/* v's bytes under e's symbol values; false if unknown. */
static bool value_bytes(const loom_executable_t *e, int32_t v, int64_t *shape, int64_t *bytes) {
  if (rt_value_shape(e, v, shape) == LOOM_OK &&
      ir_value_bytes(e->graph, "loom_compile", v, shape, bytes) == LOOM_OK)
    return true;
  loom_clear_error();
  return false;
}

/* The request that holds v whole, in order: v made by a group that
 * writes it contiguously, through reshape-like aliases only, the request
 * holding nothing else but what the flags `may_hold` allow; -1 if none. */
static int32_t own_request(const loom_executable_t *e, const mem_request_t *req,
                           const int32_t *req_of_slot, const uint8_t *holds, int32_t v,
                           uint8_t may_hold) {
  const loom_graph_t *g = e->graph;
  int64_t shape[LOOM_MAX_RANK], bytes;
  int32_t s = e->slot_of_value[v], r = s >= 0 ? req_of_slot[s] : -1;
  if (r < 0 || (holds[r] & ~may_hold) ||
      !value_bytes(e, v, shape, &bytes) || bytes != req[r].bytes)
    return -1;
  for (;;) {
    if (g->values[v].kind != IR_VALUE_NODE) return -1;
    const fuse_group_t *grp = &e->plan.groups[e->plan.group_of_node[g->values[v].node]];
    if (grp->strided || grp->into) return -1;
    if (grp->kind != FUSE_ALIAS) return r;
    v = grp->inputs[0];
  }
}

/* The one node of a layout group of op `op`, or NULL. */
static const ir_node_t *layout_node(const loom_executable_t *e, const fuse_group_t *grp,
                                    ir_op_t op) {
  if (grp->kind != FUSE_LAYOUT || grp->n_nodes != 1) return NULL;
  const ir_node_t *n = &e->graph->nodes[grp->nodes[0]];
  return n->op == op ? n : NULL;
}

/* Concat node n, run at step k: placed if its result has a request of its
 * own, the dims before the axis are 1, and each operand has a request of
 * its own (own_request), read last here. at[i]: operand i's first byte in
 * the result; stamp: per slot, the step that last took it. */
static bool place_concat(loom_executable_t *e, const ir_node_t *n, int k, mem_request_t *req,
                         int32_t *req_of_slot, rt_inside_t *inside, uint8_t *holds,
                         int32_t *stamp, int64_t *at) {
  int64_t shape[LOOM_MAX_RANK], bytes;
  int32_t ro = own_request(e, req, req_of_slot, holds, n->out[0], 0);
  if (ro < 0 || !value_bytes(e, n->out[0], shape, &bytes)) return false;
  int64_t axis = ir_attr_int(n->attrs, "axis", 0);
  if (axis < 0) axis += e->graph->values[n->out[0]].type.rank;
  for (int d = 0; d < axis; d++)
    if (shape[d] != 1) return false;
  int64_t sum = 0;
  for (int i = 0; i < n->n_in; i++) {
    int32_t s = e->slot_of_value[n->in[i]];
    int32_t ri = own_request(e, req, req_of_slot, holds, n->in[i], 0);
    if (ri < 0 || ri == ro || stamp[s] == k || req[ri].last != k) return false;
    stamp[s] = k; /* each request once */
    at[i] = sum;
    sum += req[ri].bytes;
  }
  if (sum != req[ro].bytes) return false;
  for (int i = 0; i < n->n_in; i++) {
    int32_t s = e->slot_of_value[n->in[i]], ri = req_of_slot[s];
    if (req[ri].first < req[ro].first) req[ro].first = req[ri].first;
    req[ri].bytes = 0;
    req_of_slot[s] = -1;
    inside[s] = (rt_inside_t){.request = ro, .at = at[i]};
  }
  holds[ro] |= RT_HOLDS_OPERANDS;
  return true;
}

static bool only_node(const void *ctx, int32_t node) { return node == *(const int32_t *)ctx; }

/* Slice node n (the one node of its group): placed if its input has a
 * request of its own (views of it besides), its result too, and the
 * slice is one contiguous block of the input. */
static bool place_slice(loom_executable_t *e, const ir_node_t *n, mem_request_t *req,
                        int32_t *req_of_slot, rt_inside_t *inside, uint8_t *holds) {
  const loom_graph_t *g = e->graph;
  int32_t x = n->in[0], y = n->out[0], node = g->values[y].node;
  int32_t rx = own_request(e, req, req_of_slot, holds, x, RT_HOLDS_OPERANDS | RT_HOLDS_VIEWS);
  int32_t ry = rx >= 0 ? own_request(e, req, req_of_slot, holds, y, 0) : -1;
  ir_view_t v;
  if (ry < 0 || !ir_view_of(g, y, only_node, &node, &v) || v.root != x) return false;
  int64_t dense = 1; /* the stride a dense layout has at each dim */
  for (int d = v.rank - 1; d >= 0; d--) {
    if (v.dim[d] != 1 && v.stride[d] != dense) return false;
    dense *= v.dim[d];
  }
  if (req[rx].last < req[ry].last) req[rx].last = req[ry].last;
  int32_t sy = e->slot_of_value[y];
  req[ry].bytes = 0;
  req_of_slot[sy] = -1;
  inside[sy] = (rt_inside_t){
      .request = rx, .at = v.offset * (int64_t)loom_dtype_size(g->values[y].type.dtype)};
  holds[rx] |= RT_HOLDS_VIEWS;
  return true;
}

int rt_place_layouts(loom_executable_t *e, mem_request_t *req, int32_t *req_of_slot,
                     rt_inside_t *inside, uint8_t *holds) {
  for (int s = 0; s < e->n_slots; s++) {
    inside[s] = (rt_inside_t){.request = -1};
    holds[s] = 0;
  }
  if (e->dyn) return 0;
  int max_in = 0;
  for (int k = 0; k < e->plan.n_groups; k++) {
    const ir_node_t *n = layout_node(e, &e->plan.groups[e->order[k]], IR_OP_CONCAT);
    if (n && n->n_in > max_in) max_in = n->n_in;
  }
  int32_t *stamp = core_malloc(sizeof(int32_t) * (size_t)(e->n_slots + 1));
  int64_t *at = core_malloc(sizeof(int64_t) * (size_t)(max_in + 1));
  int placed = 0;
  for (int s = 0; stamp && s < e->n_slots; s++) stamp[s] = -1;
  for (int k = 0; stamp && at && k < e->plan.n_groups; k++) {
    int32_t gi = e->order[k];
    const fuse_group_t *grp = &e->plan.groups[gi];
    const ir_node_t *c = layout_node(e, grp, IR_OP_CONCAT), *s = layout_node(e, grp, IR_OP_SLICE);
    if ((c && place_concat(e, c, k, req, req_of_slot, inside, holds, stamp, at)) ||
        (s && place_slice(e, s, req, req_of_slot, inside, holds))) {
      e->in_place_groups[gi] = true;
      placed++;
      core_log(LOG_MEMORY, "g%d %s in place: no copy", gi, c ? "concat" : "slice");
    }
  }
  core_free(stamp); /* without room to look, every layout op copies */
  core_free(at);
  return placed;
}
