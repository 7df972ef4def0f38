/* The subgraphs of if and loop nodes, looked up: the graph a node's
 * attribute names, which attributes an op has, how many results its
 * bodies give. Below the graph and the control ops that both ask. */
#include "ir/ir.h"

loom_graph_t *ir_attrs_subgraph(const loom_graph_t *g, const ir_attrs_t *a,
                                const char *attr) {
  int64_t i = a ? ir_attr_int(a, attr, -1) : -1;
  return i >= 0 && i < g->n_subgraphs ? g->subgraphs[i] : NULL;
}

loom_graph_t *ir_node_subgraph(const loom_graph_t *g, const ir_node_t *n,
                               const char *attr) {
  return ir_attrs_subgraph(g, n->attrs, attr);
}

int ir_subgraph_attrs(ir_op_t op, const char **names) {
  if (op == IR_OP_IF) {
    names[0] = "then_graph";
    names[1] = "else_graph";
    return 2;
  }
  if (op == IR_OP_LOOP) {
    names[0] = "body";
    return 1;
  }
  return 0;
}

int ir_control_n_out(const loom_graph_t *g, ir_op_t op, const ir_attrs_t *a) {
  const char *names[2];
  if (ir_subgraph_attrs(op, names) == 0) return 0;
  const loom_graph_t *sub = ir_attrs_subgraph(g, a, names[0]);
  if (!sub) return 0;
  /* A loop body's first output is its condition, not a result. */
  int64_t n = sub->n_outputs - (op == IR_OP_LOOP);
  return n < 0 ? 0 : (int)n;
}
