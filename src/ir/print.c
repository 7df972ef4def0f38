/* The graph as text and as Graphviz DOT, and a value named in messages. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/text.h"
#include "core/tensor.h"
#include "ir/ir.h"

const char *ir_value_str(const loom_graph_t *g, int32_t v, char *buf,
                         size_t size) {
  if (!ir_value_valid(g, v)) snprintf(buf, size, "%%%d (no such value)", v);
  else if (g->values[v].name)
    snprintf(buf, size, "%%%d '%s'", v, g->values[v].name);
  else snprintf(buf, size, "%%%d", v);
  return buf;
}

static void put_value(core_text_t *t, const loom_graph_t *g, int32_t v) {
  core_text_put(t, "%%%d", v);
  if (g->values[v].name) core_text_put(t, "(%s)", g->values[v].name);
}

/* Int lists may hold dims (reshape's shape): symbolic ones print as
 * their expressions. */
static void put_attrs(core_text_t *t, const loom_graph_t *g, const ir_attrs_t *a) {
  for (int i = 0; i < a->n; i++) {
    const ir_attr_t *at = &a->a[i];
    core_text_put(t, "%s%s=", i ? ", " : " {", at->name);
    const ir_origin_info_t *origin = NULL;
    if (at->kind == IR_ATTR_INT && !strcmp(at->name, IR_ORIGIN_ATTR))
      origin = ir_origin_info(at->ints[0]);
    if (origin) core_text_put(t, "%s", origin->call);
    else if (at->kind == IR_ATTR_INT) core_text_put(t, "%lld", (long long)at->ints[0]);
    else if (at->kind == IR_ATTR_FLOAT) core_text_put(t, "%g", at->f);
    else {
      core_text_put(t, "[");
      for (int k = 0; k < at->n && k < IR_MAX_ATTR_INTS; k++) {
        char dim[64];
        if (ir_dim_is_sym(at->ints[k]) && ir_dim_expr(g, at->ints[k]))
          core_text_put(t, "%s%s", k ? ", " : "", ir_dim_str(g, at->ints[k], dim, sizeof dim));
        else core_text_put(t, "%s%lld", k ? ", " : "", (long long)at->ints[k]);
      }
      core_text_put(t, "]");
    }
    if (i == a->n - 1) core_text_put(t, "}");
  }
}

static const char *kind_names[] = {"input", "param", "const", "node"};

static void print_graph(core_text_t *t, const loom_graph_t *g, int indent);

/* The subgraphs of an if or loop node, indented under it. */
static void print_subgraphs(core_text_t *t, const loom_graph_t *g, const ir_node_t *n,
                            int indent) {
  const char *names[2];
  int count = ir_subgraph_attrs(n->op, names);
  for (int k = 0; k < count; k++) {
    const loom_graph_t *sub = ir_node_subgraph(g, n, names[k]);
    core_text_put(t, "%*s%s = ", indent + 4, "", names[k]);
    if (sub) print_graph(t, sub, indent + 4);
    else core_text_put(t, "(missing)\n");
  }
}

static void print_graph(core_text_t *t, const loom_graph_t *g, int indent) {
  char ty[256];
  core_text_put(t, "graph {\n");
  for (int64_t v = 0; v < g->n_values; v++) {
    const ir_value_t *val = &g->values[v];
    if (val->kind == IR_VALUE_NODE) continue;
    core_text_put(t, "%*s  %s ", indent, "", kind_names[val->kind]);
    put_value(t, g, (int32_t)v);
    core_text_put(t, ": %s\n", ir_type_str(g, &val->type, ty, sizeof ty));
  }
  for (int64_t i = 0; i < g->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[i];
    core_text_put(t, "%*s  ", indent, "");
    for (int k = 0; k < n->n_out; k++) {
      core_text_put(t, "%s", k ? ", " : "");
      put_value(t, g, n->out[k]);
      core_text_put(t, ": %s", ir_type_str(g, &g->values[n->out[k]].type, ty, sizeof ty));
    }
    core_text_put(t, "%s%s(", n->n_out ? " = " : "", ir_ops[n->op].name);
    for (int k = 0; k < n->n_in; k++) {
      core_text_put(t, "%s", k ? ", " : "");
      put_value(t, g, n->in[k]);
    }
    core_text_put(t, ")");
    put_attrs(t, g, n->attrs);
    core_text_put(t, "\n");
    print_subgraphs(t, g, n, indent);
  }
  core_text_put(t, "%*s  return", indent, "");
  for (int64_t i = 0; i < g->n_outputs; i++) {
    core_text_put(t, "%s", i ? ", " : " ");
    put_value(t, g, g->outputs[i]);
  }
  core_text_put(t, "\n%*s}\n", indent, "");
}

loom_status_t loom_graph_print(const loom_graph_t *g, char **out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  core_text_t t = {0};
  print_graph(&t, g, 0);
  return core_text_take(&t, "printing a graph", out);
}

loom_status_t loom_graph_dot(const loom_graph_t *g, char **out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  core_text_t t = {0};
  char ty[256];
  core_text_put(&t, "digraph loom {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
  for (int64_t v = 0; v < g->n_values; v++) {
    const ir_value_t *val = &g->values[v];
    if (val->kind == IR_VALUE_NODE) continue;
    core_text_put(&t, "  v%lld [shape=ellipse, label=\"%s %s\\n%s\"];\n", (long long)v,
        kind_names[val->kind], val->name ? val->name : "",
        ir_type_str(g, &val->type, ty, sizeof ty));
  }
  for (int64_t i = 0; i < g->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[i];
    core_text_put(&t, "  n%lld [shape=box, label=\"%s", (long long)i, ir_ops[n->op].name);
    const char *names[2];
    /* Subgraphs are named, not drawn: loom_graph_print shows them. */
    for (int k = 0, c = ir_subgraph_attrs(n->op, names); k < c; k++)
      core_text_put(&t, "\\n%s #%lld", names[k], (long long)ir_attr_int(n->attrs, names[k], -1));
    core_text_put(&t, "\"];\n");
    for (int k = 0; k < n->n_in; k++) {
      const ir_value_t *src = &g->values[n->in[k]];
      if (src->kind == IR_VALUE_NODE)
        core_text_put(&t, "  n%d -> n%lld [label=\"%s\"];\n", src->node, (long long)i,
            ir_type_str(g, &src->type, ty, sizeof ty));
      else core_text_put(&t, "  v%d -> n%lld;\n", n->in[k], (long long)i);
    }
  }
  for (int64_t i = 0; i < g->n_outputs; i++) {
    const ir_value_t *val = &g->values[g->outputs[i]];
    core_text_put(&t, "  out%lld [shape=doublecircle, label=\"out %lld\"];\n", (long long)i, (long long)i);
    if (val->kind == IR_VALUE_NODE) core_text_put(&t, "  n%d -> out%lld;\n", val->node, (long long)i);
    else core_text_put(&t, "  v%d -> out%lld;\n", g->outputs[i], (long long)i);
  }
  core_text_put(&t, "}\n");
  return core_text_take(&t, "printing a graph", out);
}

void loom_free(void *p) { core_free(p); }
