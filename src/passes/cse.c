/* Common subexpression elimination: a node with the same op, attributes
 * and (rewritten) inputs as one already emitted reuses its outputs. Small
 * constants with the same dtype, shape and bytes merge too. Nodes with
 * side effects never merge; random ops merge only when their seed and
 * offset inputs are the same values, which draws the same numbers. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/rewrite.h"
#include "passes/passes.h"

/* Constants up to this many bytes are compared byte for byte. */
#define CSE_CONST_BYTES 4096

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = mix(h, b[i]);
  return h;
}

static uint64_t hash_attrs(uint64_t h, const ir_attrs_t *a) {
  h = mix(h, (uint64_t)a->n);
  for (int i = 0; i < a->n; i++) {
    const ir_attr_t *x = &a->a[i];
    h = hash_bytes(h, x->name, strlen(x->name));
    h = mix(h, (uint64_t)x->kind);
    if (x->kind == IR_ATTR_FLOAT) h = hash_bytes(h, &x->f, sizeof x->f);
    int n = x->kind == IR_ATTR_INTS ? x->n : x->kind == IR_ATTR_INT;
    for (int k = 0; k < n; k++) h = mix(h, (uint64_t)x->ints[k]);
  }
  return h;
}

static bool attrs_equal(const ir_attrs_t *a, const ir_attrs_t *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++) {
    const ir_attr_t *x = &a->a[i], *y = &b->a[i];
    if (strcmp(x->name, y->name) || x->kind != y->kind) return false;
    if (x->kind == IR_ATTR_FLOAT && memcmp(&x->f, &y->f, sizeof x->f)) return false;
    if (x->kind == IR_ATTR_INT && x->ints[0] != y->ints[0]) return false;
    if (x->kind == IR_ATTR_INTS &&
        (x->n != y->n || memcmp(x->ints, y->ints, sizeof(int64_t) * (size_t)x->n)))
      return false;
  }
  return true;
}

/* An open-addressed set of dst node (or value) ids keyed by a hash. */
typedef struct table {
  int64_t cap;
  uint64_t *hash;
  int64_t *id; /* -1: empty */
} table_t;

static loom_status_t table_init(table_t *t, int64_t n) {
  t->cap = 16;
  while (t->cap < 2 * n) t->cap *= 2;
  t->hash = core_malloc(sizeof *t->hash * (size_t)t->cap);
  t->id = core_malloc(sizeof *t->id * (size_t)t->cap);
  if (!t->hash || !t->id) return loom_fail(LOOM_ERR_NOMEM, "cse: out of memory");
  for (int64_t i = 0; i < t->cap; i++) t->id[i] = -1;
  return LOOM_OK;
}

static void table_free(table_t *t) {
  core_free(t->hash);
  core_free(t->id);
}

typedef bool (*same_fn)(const loom_graph_t *g, int64_t id, const void *key);

/* The id of an entry equal to key, or -1 after inserting `id` for it. */
static int64_t table_find_or_add(table_t *t, uint64_t h, const loom_graph_t *g,
                                 same_fn same, const void *key, int64_t id) {
  int64_t i = (int64_t)(h & (uint64_t)(t->cap - 1));
  for (; t->id[i] >= 0; i = (i + 1) & (t->cap - 1))
    if (t->hash[i] == h && same(g, t->id[i], key)) return t->id[i];
  t->hash[i] = h;
  t->id[i] = id;
  return -1;
}

/* ---- Nodes --------------------------------------------------------------- */

typedef struct node_key {
  ir_op_t op;
  int n_in;
  const int32_t *in; /* dst ids */
  const ir_attrs_t *attrs;
} node_key_t;

static bool same_node(const loom_graph_t *g, int64_t id, const void *key) {
  const node_key_t *k = key;
  const ir_node_t *n = &g->nodes[id];
  return n->op == k->op && n->n_in == k->n_in &&
         !memcmp(n->in, k->in, sizeof(int32_t) * (size_t)k->n_in) &&
         attrs_equal(n->attrs, k->attrs);
}

static loom_status_t cse_node(ir_rewriter_t *rw, table_t *t, int64_t i) {
  const ir_node_t *n = &rw->src->nodes[i];
  if (ir_ops[n->op].flags & (F_SIDE_EFFECT | F_COLLECTIVE)) return ir_rewrite_copy(rw, i);
  int32_t in[n->n_in > 0 ? n->n_in : 1];
  uint64_t h = mix((uint64_t)n->op, (uint64_t)n->n_in);
  for (int k = 0; k < n->n_in; k++) {
    in[k] = ir_rewrite_lookup(rw, n->in[k]);
    h = mix(h, (uint64_t)in[k]);
  }
  h = hash_attrs(h, n->attrs);
  node_key_t key = {n->op, n->n_in, in, n->attrs};
  int64_t before = table_find_or_add(t, h, rw->dst, same_node, &key, rw->dst->n_nodes);
  if (before < 0) return ir_rewrite_copy(rw, i);
  for (int k = 0; k < n->n_out; k++) ir_rewrite_map(rw, n->out[k], rw->dst->nodes[before].out[k]);
  return LOOM_OK;
}

/* ---- Constants ----------------------------------------------------------- */

static size_t const_bytes(const loom_tensor_t *t) {
  return (size_t)shape_numel(t->rank, t->shape) * loom_dtype_size(t->dtype);
}

static bool same_const(const loom_graph_t *g, int64_t id, const void *key) {
  const loom_tensor_t *a = g->values[id].data, *b = key;
  return a->dtype == b->dtype && a->rank == b->rank &&
         !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) &&
         !memcmp(a->data, b->data, const_bytes(a));
}

static void merge_constants(ir_rewriter_t *rw, table_t *t) {
  const loom_graph_t *src = rw->src;
  for (int64_t v = 0; v < src->n_values; v++) {
    const loom_tensor_t *c = src->values[v].data;
    if (src->values[v].kind != IR_VALUE_CONST || const_bytes(c) > CSE_CONST_BYTES) continue;
    uint64_t h = mix((uint64_t)c->dtype, (uint64_t)c->rank);
    h = hash_bytes(h, c->shape, sizeof(int64_t) * (size_t)c->rank);
    h = hash_bytes(h, c->data, const_bytes(c));
    int32_t d = ir_rewrite_lookup(rw, (int32_t)v);
    int64_t before = table_find_or_add(t, h, rw->dst, same_const, c, d);
    if (before >= 0) ir_rewrite_map(rw, (int32_t)v, (int32_t)before);
  }
}

loom_status_t pass_cse(const loom_graph_t *src, loom_graph_t **out) {
  LOOM_CHECK_ARG(src);
  LOOM_CHECK_ARG(out);
  table_t consts = {0}, nodes = {0};
  ir_rewriter_t rw = {0};
  loom_status_t s = table_init(&consts, src->n_values);
  if (s == LOOM_OK) s = table_init(&nodes, src->n_nodes);
  if (s == LOOM_OK) s = ir_rewrite_begin(src, &rw);
  if (s == LOOM_OK) merge_constants(&rw, &consts);
  for (int64_t i = 0; s == LOOM_OK && i < src->n_nodes; i++) s = cse_node(&rw, &nodes, i);
  table_free(&consts);
  table_free(&nodes);
  if (s != LOOM_OK) {
    if (rw.dst) ir_rewrite_abort(&rw);
    return s;
  }
  return ir_rewrite_finish(&rw, out);
}
