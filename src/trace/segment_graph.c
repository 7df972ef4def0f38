/* Segment descriptions and the graphs built from them: the cache's
 * builder callback. A description is self-contained (no pointer into the
 * trace graph), so a worker may build it after the step that made it.
 * It calls no other file of the tracer (trace_internal.h lists the
 * layers). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "ir/rewrite.h"
#include "passes/pad.h"
#include "passes/partition.h"
#include "trace/trace_internal.h"

void seg_desc_release(seg_desc_t *d) {
  if (!d || --d->refs > 0) return;
  for (int i = 0; i < d->n_nodes; i++) {
    core_free(d->nodes[i].in);
    core_free(d->nodes[i].attrs);
  }
  core_free(d->nodes);
  core_free(d->inputs);
  core_free(d->outputs);
  core_free(d->wrt);
  core_free(d->exprs);
  for (int i = 0; i < d->n_subgraphs; i++) loom_graph_destroy(d->subgraphs[i]);
  core_free(d->subgraphs);
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
  if (!n->sym_attrs) return ir_add_node(g, n->op, n->n_in, in, n->attrs, NULL, 0);
  ir_attrs_t attrs;
  ir_attrs_copy(&attrs, n->attrs);
  for (int i = 0; i < attrs.n; i++)
    for (int k = 0; attrs.a[i].kind == IR_ATTR_INTS && k < attrs.a[i].n; k++)
      LOOM_TRY(decode_dim(d, g, syms, attrs.a[i].ints[k], &attrs.a[i].ints[k]));
  return ir_add_node(g, n->op, n->n_in, in, &attrs, NULL, 0);
}

/* Whether d's graph keeps its buckets as symbols (the training halves). */
static bool bucket_symbols(const seg_desc_t *d) { return d->bucket && d->part; }

/* The graph input of d's input i. */
static loom_status_t build_input(const seg_desc_t *d, loom_graph_t *g, int i,
                                 const ir_dim_t *syms, int32_t *out) {
  const seg_input_t *in = &d->inputs[i];
  loom_dim_t dims[LOOM_MAX_RANK];
  for (int a = 0; a < in->rank; a++) {
    const seg_dim_t *x = &in->dims[a];
    dims[a] = x->mode == TR_SYMBOLIC ? syms[x->sym]
              : x->mode == TR_BUCKET && bucket_symbols(d) ? syms[d->n_syms + x->sym]
                                                          : x->size;
  }
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
  int n_syms = d->n_syms + (bucket_symbols(d) ? d->n_groups : 0);
  ir_dim_t syms[n_syms > 0 ? n_syms : 1];
  for (int k = 0; k < n_syms; k++) { /* numbered in this order */
    char name[24];
    if (k < d->n_syms) snprintf(name, sizeof name, "s%d", k);
    else snprintf(name, sizeof name, "b%d", k - d->n_syms);
    LOOM_TRY(ir_dim_symbol(g, name, &syms[k]));
  }
  for (int i = 0; i < d->n_subgraphs; i++) { /* at the indices the nodes name */
    loom_graph_t *sub;
    int64_t index;
    LOOM_TRY(ir_graph_clone(d->subgraphs[i], &sub));
    LOOM_TRY(ir_graph_adopt(g, sub, &index));
  }
  int32_t input_ids[d->n_inputs > 0 ? d->n_inputs : 1];
  for (int i = 0; i < d->n_inputs; i++)
    LOOM_TRY(build_input(d, g, i, syms, &input_ids[i]));
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

/* The bucket group whose symbol dim x is in a graph built from d, or -1. */
static int group_of_dim(const seg_desc_t *d, const loom_graph_t *g, ir_dim_t x) {
  const ir_expr_t *e = ir_dim_is_sym(x) ? ir_dim_expr(g, x) : NULL;
  if (!e || e->kind != IR_EXPR_SYM || e->c < d->n_syms ||
      e->c >= d->n_syms + d->n_groups)
    return -1;
  return (int)e->c - d->n_syms;
}

int seg_groups_present(const seg_desc_t *d, const loom_graph_t *g, int n_in,
                       int *groups) {
  bool seen[32] = {false};
  for (int i = 0; i < n_in && i < g->n_inputs; i++) {
    const ir_type_t *ty = &g->values[g->inputs[i]].type;
    for (int a = 0; a < ty->rank; a++) {
      int k = group_of_dim(d, g, ty->dims[a]);
      if (k >= 0) seen[k] = true;
    }
  }
  int n = 0;
  for (int k = 0; k < d->n_groups; k++)
    if (seen[k]) groups[n++] = k;
  return n;
}

/* Replaces *g by its masked form (pass_mask_padding over dims). */
static loom_status_t mask_graph(loom_graph_t **g, int n, const pad_dim_t *dims) {
  pad_result_t r;
  memset(&r, 0, sizeof r);
  LOOM_TRY(pass_mask_padding(*g, n, dims, &r));
  loom_graph_destroy(*g);
  *g = r.graph;
  r.graph = NULL;
  pad_result_free(&r);
  return LOOM_OK;
}

/* Masks *g over the segment's bucketed input dims (one group per bucket
 * symbol): the plain graph, or the forward half, whose inputs are the
 * segment's. */
static loom_status_t pad_graph(const seg_desc_t *d, loom_graph_t **g) {
  pad_dim_t dims[d->n_inputs * LOOM_MAX_RANK + 1];
  int n = 0;
  for (int i = 0; i < d->n_inputs; i++)
    for (int a = 0; a < d->inputs[i].rank; a++)
      if (d->inputs[i].dims[a].mode == TR_BUCKET)
        dims[n++] = (pad_dim_t){.input = i, .axis = a,
                                .group = d->inputs[i].dims[a].sym};
  return mask_graph(g, n, dims);
}

/* Masks the backward half: its inputs (saved values, output gradients)
 * are padded where their dims are bucket symbols, which is where the
 * forward's masking tagged them (its checks fail on an axis sized from a
 * padded symbol that it does not track), so the backward's sums over the
 * padding (a weight gradient over tokens) are masked. The groups present
 * are renumbered 0.. in ascending order (seg_groups_present). */
static loom_status_t pad_backward(const seg_desc_t *d, loom_graph_t **g) {
  int groups[32], compact[32];
  int n_in = (int)(*g)->n_inputs;
  int n_groups = seg_groups_present(d, *g, n_in, groups);
  for (int j = 0; j < n_groups; j++) compact[groups[j]] = j;
  pad_dim_t dims[n_in * LOOM_MAX_RANK + 1];
  int n = 0;
  for (int i = 0; i < n_in; i++) {
    const ir_type_t *ty = &(*g)->values[(*g)->inputs[i]].type;
    for (int a = 0; a < ty->rank; a++) {
      int k = group_of_dim(d, *g, ty->dims[a]);
      if (k >= 0) dims[n++] = (pad_dim_t){.input = i, .axis = a, .group = compact[k]};
    }
  }
  return mask_graph(g, n, dims);
}

/* Replaces *g by the forward (part 1) or backward (part 2) half. When
 * bucketed, both halves are masked whichever is kept: a backward that
 * cannot be masked fails the forward's build, so the segment runs exact
 * before any invocation of it reaches the tape. */
static loom_status_t split_graph(const seg_desc_t *d, loom_graph_t **g, loom_graph_t **other) {
  partition_t p;
  memset(&p, 0, sizeof p);
  LOOM_TRY(pass_partition(*g, d->n_wrt, d->wrt, &p));
  loom_status_t s = LOOM_OK;
  if (d->bucket) s = pad_graph(d, &p.forward);
  if (d->bucket && s == LOOM_OK) s = pad_backward(d, &p.backward);
  if (s == LOOM_OK) s = seg_defer_graph(d, &p.backward);
  if (s != LOOM_OK) {
    partition_free(&p);
    return s;
  }
  loom_graph_t *keep = d->part == 1 ? p.forward : p.backward;
  if (d->part == 1) p.forward = NULL;
  else p.backward = NULL;
  if (other) { /* the caller keeps the other half */
    *other = d->part == 1 ? p.backward : p.forward;
    p.forward = p.backward = NULL;
  }
  partition_free(&p);
  loom_graph_destroy(*g);
  *g = keep;
  return LOOM_OK;
}

static const char *const bucket_names[32] = {
    "b0",  "b1",  "b2",  "b3",  "b4",  "b5",  "b6",  "b7",  "b8",  "b9",  "b10",
    "b11", "b12", "b13", "b14", "b15", "b16", "b17", "b18", "b19", "b20", "b21",
    "b22", "b23", "b24", "b25", "b26", "b27", "b28", "b29", "b30", "b31"};

static loom_status_t build(const seg_desc_t *d, loom_graph_t **graph, loom_graph_t **other) {
  loom_graph_t *g = NULL;
  LOOM_TRY(loom_graph_create(&g));
  loom_status_t s = build_plain(d, g);
  if (s == LOOM_OK && d->bucket && !d->part) s = pad_graph(d, &g);
  if (s == LOOM_OK && d->part) s = split_graph(d, &g, other);
  if (s != LOOM_OK) {
    loom_graph_destroy(g);
    return s;
  }
  *graph = g;
  return LOOM_OK;
}

loom_status_t seg_desc_build_both(const seg_desc_t *d, loom_graph_t **graph,
                                  loom_graph_t **other) {
  *other = NULL;
  return build(d, graph, other);
}

loom_status_t seg_desc_build(void *ctx, loom_graph_t **graph,
                             loom_compile_options_t *options) {
  const seg_desc_t *d = ctx;
  LOOM_TRY(build(d, graph, NULL));
  if (options) {
    loom_compile_options_init(options);
    options->num_threads = d->num_threads;
    options->dynamic_symbols = d->n_syms > 0;
    if (bucket_symbols(d)) { /* specialized to the buckets */
      options->n_symbols = d->n_groups;
      options->symbol_names = bucket_names;
      options->symbol_values = d->group_bucket;
    }
  }
  return LOOM_OK;
}
