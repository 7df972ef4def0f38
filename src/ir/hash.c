/* A structural hash of a graph (ir_graph_hash in ir.h): what the tracer
 * keys a control op's subgraphs by, where the node carries only the
 * subgraph's index, which changes from step to step. */
#include <string.h>

#include "core/tensor.h"
#include "ir/ir.h"

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    memcpy(&w, b + i, n - i < 8 ? n - i : 8);
    h = mix(h, w);
  }
  return h;
}

/* A dim: its size, or its expression with symbols by name (a subgraph's
 * symbols match its outer graph's by name). */
static uint64_t mix_dim(uint64_t h, const loom_graph_t *g, ir_dim_t d) {
  const ir_expr_t *e = ir_dim_is_sym(d) ? ir_dim_expr(g, d) : NULL;
  if (!e) return mix(h, (uint64_t)d);
  h = mix(h, 0x5100 + (uint64_t)e->kind);
  if (e->kind == IR_EXPR_CONST) return mix(h, (uint64_t)e->c);
  if (e->kind == IR_EXPR_SYM) return mix_bytes(h, e->name, e->name ? strlen(e->name) : 0);
  return mix_dim(mix_dim(h, g, e->a), g, e->b);
}

static uint64_t mix_type(uint64_t h, const loom_graph_t *g, const ir_type_t *t) {
  h = mix(h, (uint64_t)t->dtype | (uint64_t)t->rank << 8);
  for (int d = 0; d < t->rank; d++) h = mix_dim(h, g, t->dims[d]);
  return h;
}

static uint64_t mix_node(uint64_t h, const loom_graph_t *g, const ir_node_t *n) {
  const char *subs[2];
  int n_subs = ir_subgraph_attrs(n->op, subs);
  h = mix(h, (uint64_t)n->op | (uint64_t)n->n_in << 16 | (uint64_t)n->n_out << 32);
  for (int i = 0; i < n->n_in; i++) h = mix(h, (uint64_t)n->in[i]);
  for (int i = 0; i < n->attrs->n; i++) {
    const ir_attr_t *a = &n->attrs->a[i];
    h = mix_bytes(h, a->name, strnlen(a->name, IR_ATTR_NAME));
    bool sub = false;
    for (int k = 0; k < n_subs; k++) sub |= !strcmp(a->name, subs[k]);
    if (sub) {
      const loom_graph_t *s = ir_attrs_subgraph(g, n->attrs, a->name);
      h = mix(h, s ? ir_graph_hash(s) : 0);
    } else if (a->kind == IR_ATTR_FLOAT) {
      h = mix_bytes(h, &a->f, sizeof a->f);
    } else {
      int count = a->kind == IR_ATTR_INT ? 1 : a->n;
      for (int k = 0; k < count; k++) h = mix_dim(h, g, a->ints[k]);
    }
  }
  return h;
}

uint64_t ir_graph_hash(const loom_graph_t *g) {
  uint64_t h = mix(0x6a09e667f3bcc908ull, (uint64_t)g->n_values);
  for (int64_t i = 0; i < g->n_inputs; i++)
    h = mix_type(mix(h, (uint64_t)g->inputs[i]), g, &g->values[g->inputs[i]].type);
  for (int64_t v = 0; v < g->n_values; v++) {
    const ir_value_t *x = &g->values[v];
    if (x->kind != IR_VALUE_CONST && x->kind != IR_VALUE_PARAM) continue;
    h = mix_type(mix(h, (uint64_t)v << 8 | (uint64_t)x->kind), g, &x->type);
    if (x->kind == IR_VALUE_CONST && x->data)
      h = mix_bytes(h, x->data->data,
                    (size_t)loom_tensor_numel(x->data) * loom_dtype_size(x->type.dtype));
  }
  for (int64_t i = 0; i < g->n_nodes; i++) h = mix_node(h, g, &g->nodes[i]);
  for (int64_t i = 0; i < g->n_outputs; i++) h = mix(h, (uint64_t)g->outputs[i]);
  return h;
}
