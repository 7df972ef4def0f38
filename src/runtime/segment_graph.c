/* Segment descriptions and the graphs built from them: the cache's
 * builder callback. A description is self-contained (no pointer into the
 * trace graph), so a worker may build it after the step that made it. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "passes/pad.h"
#include "passes/partition.h"
#include "runtime/trace_internal.h"

void seg_desc_release(seg_desc_t *d) {
  if (!d || --d->refs > 0) return;
  for (int i = 0; i < d->n_nodes; i++) core_free(d->nodes[i].in);
  core_free(d->nodes);
  core_free(d->inputs);
  core_free(d->outputs);
  core_free(d->wrt);
  core_free(d->exprs);
  core_free(d);
}

/* The dim of g that description dim x stands for (see seg_desc_t.exprs). */
static loom_status_t decode_dim(const seg_desc_t *d, loom_graph_t *g,
                                const ir_dim_t *syms, ir_dim_t x,
                                ir_dim_t *out) {
  if (!ir_dim_is_sym(x)) {
    *out = x;
    return LOOM_OK;
  }
  const ir_expr_t *e = &d->exprs[x - IR_DIM_SYM_BASE];
  if (e->kind == IR_EXPR_SYM) {
    *out = syms[e->c];
    return LOOM_OK;
  }
  ir_dim_t a, b;
  LOOM_TRY(decode_dim(d, g, syms, e->a, &a));
  LOOM_TRY(decode_dim(d, g, syms, e->b, &b));
  if (e->kind == IR_EXPR_ADD) return ir_dim_add(g, a, b, out);
  if (e->kind == IR_EXPR_MUL) return ir_dim_mul(g, a, b, out);
  return ir_dim_floordiv(g, a, b, out);
}

/* Node n of d appended to g, its symbolic attribute sizes decoded. */
static loom_status_t add_node(const seg_desc_t *d, loom_graph_t *g,
                              const ir_dim_t *syms, const seg_node_t *n,
                              const int32_t *in) {
  if (!n->sym_attrs) return ir_add_node(g, n->op, n->n_in, in, &n->attrs, NULL, 0);
  ir_attrs_t attrs = n->attrs;
  for (int i = 0; i < attrs.n; i++)
    for (int k = 0; attrs.a[i].kind == IR_ATTR_INTS && k < attrs.a[i].n; k++)
      LOOM_TRY(decode_dim(d, g, syms, attrs.a[i].ints[k], &attrs.a[i].ints[k]));
  return ir_add_node(g, n->op, n->n_in, in, &attrs, NULL, 0);
}

/* The graph input of d's input i. */
static loom_status_t build_input(loom_graph_t *g, const seg_input_t *in, int i,
                                 const ir_dim_t *syms, int32_t *out) {
  loom_dim_t dims[LOOM_MAX_RANK];
  for (int a = 0; a < in->rank; a++)
    dims[a] = in->dims[a].mode == TR_SYMBOLIC ? syms[in->dims[a].sym]
                                              : in->dims[a].size;
  char name[24];
  snprintf(name, sizeof name, "in%d", i);
  loom_value_t v;
  LOOM_TRY(loom_graph_input(g, name, in->dtype, in->rank, dims, &v));
  *out = v.id;
  return LOOM_OK;
}

/* The value of operand r in g, given the graph ids of the inputs and of
 * each description node's first output. */
static int32_t operand(const loom_graph_t *g, const int32_t *input_ids,
                       const int64_t *node_ids, seg_ref_t r) {
  if (r.node < 0) return input_ids[r.index];
  return g->nodes[node_ids[r.node]].out[r.index];
}

/* The plain graph of d: its inputs, nodes and outputs. */
static loom_status_t build_plain(const seg_desc_t *d, loom_graph_t *g) {
  ir_dim_t syms[d->n_syms > 0 ? d->n_syms : 1];
  for (int k = 0; k < d->n_syms; k++) {
    char name[24];
    snprintf(name, sizeof name, "s%d", k);
    LOOM_TRY(ir_dim_symbol(g, name, &syms[k]));
  }
  int32_t input_ids[d->n_inputs > 0 ? d->n_inputs : 1];
  for (int i = 0; i < d->n_inputs; i++)
    LOOM_TRY(build_input(g, &d->inputs[i], i, syms, &input_ids[i]));
  int64_t *node_ids = core_malloc(sizeof *node_ids * (size_t)(d->n_nodes + 1));
  if (!node_ids) return loom_fail(LOOM_ERR_NOMEM, "out of memory building a segment");
  loom_status_t s = LOOM_OK;
  for (int j = 0; j < d->n_nodes && s == LOOM_OK; j++) {
    const seg_node_t *n = &d->nodes[j];
    int32_t in[n->n_in > 0 ? n->n_in : 1];
    for (int i = 0; i < n->n_in; i++) in[i] = operand(g, input_ids, node_ids, n->in[i]);
    s = add_node(d, g, syms, n, in);
    node_ids[j] = g->n_nodes - 1;
  }
  for (int k = 0; k < d->n_outputs && s == LOOM_OK; k++) {
    loom_value_t v = {operand(g, input_ids, node_ids, d->outputs[k])};
    s = loom_graph_output(g, v);
  }
  core_free(node_ids);
  return s;
}

/* Replaces *g by its padded form (pass_mask_padding over the bucketed
 * dims, one group per bucket symbol). */
static loom_status_t pad_graph(const seg_desc_t *d, loom_graph_t **g) {
  pad_dim_t dims[d->n_inputs * LOOM_MAX_RANK + 1];
  int n = 0;
  for (int i = 0; i < d->n_inputs; i++)
    for (int a = 0; a < d->inputs[i].rank; a++)
      if (d->inputs[i].dims[a].mode == TR_BUCKET)
        dims[n++] = (pad_dim_t){.input = i, .axis = a,
                                .group = d->inputs[i].dims[a].sym};
  pad_result_t r;
  memset(&r, 0, sizeof r);
  LOOM_TRY(pass_mask_padding(*g, n, dims, &r));
  loom_graph_destroy(*g);
  *g = r.graph;
  r.graph = NULL;
  pad_result_free(&r);
  return LOOM_OK;
}

/* Replaces *g by the forward (part 1) or backward (part 2) half. */
static loom_status_t split_graph(const seg_desc_t *d, loom_graph_t **g) {
  partition_t p;
  memset(&p, 0, sizeof p);
  LOOM_TRY(pass_partition(*g, d->n_wrt, d->wrt, &p));
  loom_graph_t *keep = d->part == 1 ? p.forward : p.backward;
  if (d->part == 1) p.forward = NULL;
  else p.backward = NULL;
  partition_free(&p);
  loom_graph_destroy(*g);
  *g = keep;
  return LOOM_OK;
}

loom_status_t seg_desc_build(void *ctx, loom_graph_t **graph,
                             loom_compile_options_t *options) {
  const seg_desc_t *d = ctx;
  loom_graph_t *g = NULL;
  LOOM_TRY(loom_graph_create(&g));
  loom_status_t s = build_plain(d, g);
  if (s == LOOM_OK && d->bucket) s = pad_graph(d, &g);
  if (s == LOOM_OK && d->part) s = split_graph(d, &g);
  if (s != LOOM_OK) {
    loom_graph_destroy(g);
    return s;
  }
  *graph = g;
  if (options) {
    loom_compile_options_init(options);
    options->num_threads = d->num_threads;
    options->dynamic_symbols = d->n_syms > 0;
  }
  return LOOM_OK;
}
