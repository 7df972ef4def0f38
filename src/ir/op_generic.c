/* loom_graph_add_op: any op of the table built from its name, inputs and
 * named attributes, checked against the op's row (its schema names the
 * attributes and their kinds), then added by ir_add_node as the builders
 * of ops.h add theirs. */
#include <string.h>

#include "core/status.h"
#include "ir/ir.h"

_Static_assert(IR_MAX_ATTR_INTS == LOOM_MAX_ATTR_INTS, "attribute lists: one bound");

/* Arrays sized by the caller's counts sit on the stack: beyond these the
 * call is surely a mistake. */
#define MAX_COUNT 4096

/* Whether attrs[k] is a subgraph that no earlier attribute passes too. */
static bool first_graph(const loom_attr_t *attrs, int k) {
  if (attrs[k].kind != LOOM_ATTR_GRAPH || !attrs[k].graph) return false;
  for (int j = 0; j < k; j++)
    if (attrs[j].kind == LOOM_ATTR_GRAPH && attrs[j].graph == attrs[k].graph) return false;
  return true;
}

/* The subgraphs of attrs are the caller's no longer: the call failed
 * before adopting them. */
static void drop_graphs(loom_graph_t *g, int n, const loom_attr_t *attrs) {
  for (int k = 0; attrs && k < n; k++)
    if (first_graph(attrs, k)) ir_graph_drop_unowned(g, attrs[k].graph);
}

/* Checks attribute k against op's schema; no side effects. */
static loom_status_t check_attr(ir_op_t op, const loom_attr_t *attrs, int k) {
  const char *opname = ir_ops[op].name, *name = attrs[k].name;
  if (!name) return loom_fail(LOOM_ERR_INVALID, "%s: attribute %d has no name", opname, k);
  const ir_attr_spec_t *spec = ir_op_attr_spec(op, name);
  if (!spec)
    return loom_fail(LOOM_ERR_INVALID, "%s: unknown attribute '%s' (takes: %s)", opname,
                     name, ir_ops[op].attrs[0] ? ir_ops[op].attrs : "none");
  for (int j = 0; j < k; j++)
    if (attrs[j].name && !strcmp(attrs[j].name, name))
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' is given twice", opname, name);
  if (attrs[k].kind != spec->kind)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' must be %s, not %s", opname,
                     name, ir_attr_kind_name(spec->kind), ir_attr_kind_name(attrs[k].kind));
  if (spec->kind == LOOM_ATTR_INTS &&
      (attrs[k].n < 0 || attrs[k].n > LOOM_MAX_ATTR_INTS || (attrs[k].n > 0 && !attrs[k].ints)))
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' has %d entries%s (0..%d)", opname,
                     name, attrs[k].n, attrs[k].n > 0 && !attrs[k].ints ? " at NULL" : "",
                     LOOM_MAX_ATTR_INTS);
  if (spec->kind == LOOM_ATTR_GRAPH && (!attrs[k].graph || !first_graph(attrs, k)))
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' is %s", opname, name,
                     attrs[k].graph ? "a subgraph another attribute passes too" : "null");
  return LOOM_OK;
}

static loom_status_t check_call(loom_graph_t *g, int i, int n_in, const loom_value_t *in,
                                int n_attrs, const loom_attr_t *attrs, int out_cap,
                                const loom_value_t *out, ir_op_t *op) {
  if (!g) return loom_fail(LOOM_ERR_INVALID, "loom_graph_add_op: the graph is null");
  LOOM_TRY(ir_op_check("loom_graph_add_op_index", i));
  *op = (ir_op_t)i;
  const char *op_name = ir_ops[i].name;
  if (n_in < 0 || n_in > MAX_COUNT || (n_in > 0 && !in))
    return loom_fail(LOOM_ERR_INVALID, "%s: %d inputs%s", op_name, n_in, in ? "" : " at NULL");
  if (n_attrs < 0 || n_attrs > IR_MAX_ATTRS || (n_attrs > 0 && !attrs))
    return loom_fail(LOOM_ERR_INVALID, "%s: %d attributes%s (0..%d)", op_name, n_attrs,
                     attrs ? "" : " at NULL", IR_MAX_ATTRS);
  if (out_cap < 0 || (out_cap > 0 && !out))
    return loom_fail(LOOM_ERR_INVALID, "%s: room for %d outputs%s", op_name, out_cap,
                     out ? "" : " at NULL");
  for (int k = 0; k < n_attrs; k++) LOOM_TRY(check_attr(*op, attrs, k));
  return LOOM_OK;
}

/* Attribute a as a node holds it; a subgraph is adopted into g. */
static loom_status_t convert_attr(loom_graph_t *g, ir_op_t op, const loom_attr_t *a,
                                  ir_attrs_t *out) {
  if (a->kind == LOOM_ATTR_FLOAT) ir_attrs_float(out, a->name, a->f);
  else if (a->kind == LOOM_ATTR_INTS) ir_attrs_ints(out, a->name, a->n, a->ints);
  else if (a->kind != LOOM_ATTR_GRAPH) ir_attrs_int(out, a->name, a->i);
  if (a->kind != LOOM_ATTR_GRAPH) return LOOM_OK;
  int64_t index;
  loom_status_t s = ir_graph_adopt(g, a->graph, &index);
  if (s != LOOM_OK)
    return loom_fail(s, "%s: attribute '%s': %s", ir_ops[op].name, a->name, loom_last_error());
  ir_attrs_int(out, a->name, index);
  return LOOM_OK;
}

/* attrs into out in the schema's order, so that a node does not depend on
 * the caller's order (nor does its graph's hash). On failure the
 * subgraphs not yet adopted are dropped; a failed adoption has dealt
 * with its own. */
static loom_status_t convert_attrs(loom_graph_t *g, ir_op_t op, int n, const loom_attr_t *attrs,
                                   ir_attrs_t *out) {
  if (n == 0) return LOOM_OK;
  const ir_schema_t *schema = ir_op_schema(op);
  bool tried[IR_MAX_ATTRS] = {0};
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < schema->n && s == LOOM_OK; i++)
    for (int k = 0; k < n && s == LOOM_OK; k++)
      if (!strcmp(attrs[k].name, schema->a[i].name)) {
        tried[k] = true;
        s = convert_attr(g, op, &attrs[k], out);
      }
  for (int k = 0; s != LOOM_OK && k < n; k++)
    if (!tried[k] && first_graph(attrs, k)) ir_graph_drop_unowned(g, attrs[k].graph);
  return s;
}

/* The node itself, its attributes converted; its outputs into out. */
static loom_status_t add_node(loom_graph_t *g, ir_op_t op, int n_in, const loom_value_t *in,
                              const ir_attrs_t *attrs, int out_cap, loom_value_t *out,
                              int *n_out) {
  int cap = out_cap < MAX_COUNT ? out_cap : MAX_COUNT;
  int32_t ids[n_in > 0 ? n_in : 1], res[cap > 0 ? cap : 1];
  for (int i = 0; i < n_in; i++) ids[i] = in[i].id;
  int64_t before = g->n_nodes;
  LOOM_TRY(ir_add_node(g, op, n_in, ids, attrs, res, cap));
  int made = g->n_nodes > before ? g->nodes[before].n_out : 0;
  for (int k = 0; k < made; k++) out[k].id = res[k];
  if (n_out) *n_out = made;
  return LOOM_OK;
}

loom_status_t loom_graph_add_op_index(loom_graph_t *g, int op_index, int n_in,
                                      const loom_value_t *in, int n_attrs,
                                      const loom_attr_t *attrs, int out_cap, loom_value_t *out,
                                      int *n_out) {
  ir_op_t op = IR_OP_COUNT;
  loom_status_t s = check_call(g, op_index, n_in, in, n_attrs, attrs, out_cap, out, &op);
  if (s != LOOM_OK) {
    if (n_attrs > 0 && n_attrs <= IR_MAX_ATTRS) drop_graphs(g, n_attrs, attrs);
    return s;
  }
  ir_attrs_t a;
  a.n = 0; /* only the slots in use are written: the whole is 1.3 KB */
  int64_t n_subgraphs = g->n_subgraphs, n_nodes = g->n_nodes;
  s = convert_attrs(g, op, n_attrs, attrs, &a);
  if (s == LOOM_OK) s = add_node(g, op, n_in, in, &a, out_cap, out, n_out);
  /* Last first: only the last adoption can be taken back. */
  for (int64_t j = g->n_subgraphs - 1; s != LOOM_OK && j >= n_subgraphs; j--)
    ir_graph_drop_adopted(g, j, n_nodes);
  return s;
}

loom_status_t loom_graph_add_op(loom_graph_t *g, const char *op_name, int n_in,
                                const loom_value_t *in, int n_attrs, const loom_attr_t *attrs,
                                int out_cap, loom_value_t *out, int *n_out) {
  int op = -1;
  loom_status_t s = loom_op_find(op_name, &op);
  if (s == LOOM_OK)
    return loom_graph_add_op_index(g, op, n_in, in, n_attrs, attrs, out_cap, out, n_out);
  if (n_attrs > 0 && n_attrs <= IR_MAX_ATTRS) drop_graphs(g, n_attrs, attrs);
  return s;
}
