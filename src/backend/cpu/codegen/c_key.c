/* The emitter's inputs as bytes for a hash (cg_key_update in codegen.h):
 * what the emitted text and its products (generated, function, maps)
 * depend on, so that equal hashes mean an equal module. Left out is what
 * no emitter reads: value names, and the bytes of constants of more than
 * one element (only single-element f32/f64 constants are written into
 * the code as literals: shape.c; larger ones are read through slots).
 * Symbols are named by number, as the code names them (syms[k]). */
#include <string.h>

#include "backend/cpu/codegen/codegen.h"
#include "core/dtype.h"
#include "core/tensor.h"

/* Bytes gathered before they go to the hash, which is slow per call. */
typedef struct keybuf {
  core_sha256_t *h;
  size_t n;
  uint8_t b[4096];
} keybuf_t;

static void put(keybuf_t *k, const void *p, size_t n) {
  if (n == 0) return;
  if (k->n + n > sizeof k->b) {
    core_sha256_update(k->h, k->b, k->n);
    k->n = 0;
  }
  if (n > sizeof k->b) {
    core_sha256_update(k->h, p, n);
    return;
  }
  memcpy(k->b + k->n, p, n);
  k->n += n;
}

static void put_i64(keybuf_t *k, int64_t v) { put(k, &v, sizeof v); }

static void put_i32s(keybuf_t *k, const int32_t *v, int64_t n) {
  put_i64(k, n);
  if (n > 0) put(k, v, sizeof *v * (size_t)n);
}

static void put_type(keybuf_t *k, const ir_type_t *t) {
  put_i64(k, t->dtype);
  put_i64(k, t->rank);
  put(k, t->dims, sizeof *t->dims * (size_t)t->rank);
}

static void put_value(keybuf_t *k, const ir_value_t *x) {
  int64_t w[3] = {x->kind, x->node, x->index};
  put(k, w, sizeof w);
  put_type(k, &x->type);
  if (x->kind != IR_VALUE_CONST || !x->data || loom_tensor_numel(x->data) != 1) return;
  put(k, loom_tensor_data(x->data), loom_dtype_size(x->type.dtype));
}

static void put_node(keybuf_t *k, const loom_graph_t *g, const ir_node_t *n) {
  int64_t w[3] = {n->op, n->n_in, n->n_out};
  put(k, w, sizeof w);
  put(k, n->in, sizeof *n->in * (size_t)n->n_in);
  put(k, n->out, sizeof *n->out * (size_t)n->n_out);
  const char *subs[2];
  int n_subs = ir_subgraph_attrs(n->op, subs);
  put_i64(k, n->attrs->n);
  for (int i = 0; i < n->attrs->n; i++) {
    const ir_attr_t *a = &n->attrs->a[i];
    put(k, a->name, strnlen(a->name, IR_ATTR_NAME) + 1);
    int count = a->kind == IR_ATTR_INT ? 1 : a->kind == IR_ATTR_INTS ? a->n : 0;
    put_i64(k, a->kind);
    put_i64(k, count);
    if (a->kind == IR_ATTR_FLOAT) put(k, &a->f, sizeof a->f);
    put(k, a->ints, sizeof *a->ints * (size_t)count);
    for (int s = 0; s < n_subs; s++) {
      if (strcmp(a->name, subs[s])) continue;
      const loom_graph_t *body = ir_attrs_subgraph(g, n->attrs, a->name);
      put_i64(k, body ? (int64_t)ir_graph_hash(body) : 0);
    }
  }
}

static void put_graph(keybuf_t *k, const loom_graph_t *g) {
  put_i64(k, g->n_values);
  for (int64_t v = 0; v < g->n_values; v++) put_value(k, &g->values[v]);
  put_i64(k, g->n_exprs);
  put_i64(k, g->n_symbols);
  for (int64_t i = 0; i < g->n_exprs; i++) {
    const ir_expr_t *e = &g->exprs[i];
    int64_t w[4] = {e->kind, e->c, e->a, e->b};
    put(k, w, sizeof w);
  }
  put_i64(k, g->n_nodes);
  for (int64_t i = 0; i < g->n_nodes; i++) put_node(k, g, &g->nodes[i]);
  put_i32s(k, g->inputs, g->n_inputs);
  put_i32s(k, g->params, g->n_params);
  put_i32s(k, g->outputs, g->n_outputs);
}

static void put_plan(keybuf_t *k, const fuse_plan_t *plan) {
  put_i64(k, plan->n_groups);
  for (int i = 0; i < plan->n_groups; i++) {
    const fuse_group_t *grp = &plan->groups[i];
    int64_t w[4] = {grp->kind, grp->anchor, grp->strided, grp->into};
    put(k, w, sizeof w);
    put_i32s(k, grp->nodes, grp->n_nodes);
    put_i32s(k, grp->inputs, grp->n_inputs);
    put_i32s(k, grp->outputs, grp->n_outputs);
  }
}

void cg_key_update(core_sha256_t *h, const loom_graph_t *g, const fuse_plan_t *plan,
                   const int32_t *slot_of_value, const int64_t *sym_values) {
  keybuf_t k = {.h = h};
  put_graph(&k, g);
  put_plan(&k, plan);
  put_i32s(&k, slot_of_value, g->n_values);
  put_i64(&k, g->n_symbols);
  if (g->n_symbols > 0) put(&k, sym_values, sizeof *sym_values * (size_t)g->n_symbols);
  core_sha256_update(h, k.b, k.n);
}
