/* Graphs: values (inputs, parameters, constants, node outputs), nodes in
 * execution order, and outputs. Nodes are appended after their inputs
 * exist, so a graph built through this file is topologically ordered. */
#include <stdatomic.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sanitize.h"
#include "core/status.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "ir/ir.h"

loom_status_t loom_graph_create(loom_graph_t **out) {
  LOOM_CHECK_ARG(out);
  *out = core_calloc(1, sizeof **out);
  if (!*out) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a graph");
  return LOOM_OK;
}

/* ---- The nodes' id arrays ----------------------------------------------
 * A node's in and out arrays are carved from blocks the graph keeps: two
 * allocations a node, and two frees at each reset, were a fifth of what
 * recording a node in a trace cost. A reset keeps one block of the
 * step's total size, so that a trace refilled every step allocates none.
 * Under AddressSanitizer every array is an allocation of its own. */

typedef struct ir_id_block {
  struct ir_id_block *next; /* older */
  int64_t used, cap;        /* ids */
  int32_t ids[];
} ir_id_block_t;

/* The first block's ids (a graph of a few nodes, as many are, keeps
 * little); each next block doubles. */
enum { ID_BLOCK_IDS = 64 };

/* Room for n ids (at least one), or NULL. */
static int32_t *ids_take(loom_graph_t *g, int n) {
  int64_t need = n > 0 ? n : 1;
  if (CORE_ASAN) return core_malloc(sizeof(int32_t) * (size_t)need);
  ir_id_block_t *b = g->id_blocks;
  if (!b || b->cap - b->used < need) {
    int64_t cap = need > ID_BLOCK_IDS ? need : ID_BLOCK_IDS;
    if (b && 2 * b->cap > cap) cap = 2 * b->cap;
    ir_id_block_t *nb = core_malloc(sizeof *nb + sizeof(int32_t) * (size_t)cap);
    if (!nb) return NULL;
    *nb = (ir_id_block_t){.next = b, .cap = cap};
    g->id_blocks = b = nb;
  }
  int32_t *p = b->ids + b->used;
  b->used += need;
  return p;
}

/* Gives back p, n ids that ids_take made last (for a node that was
 * not added); one that is not at the end of the newest block stays
 * carved until the reset. */
static void ids_give_back(loom_graph_t *g, int32_t *p, int n) {
  int64_t need = n > 0 ? n : 1;
  ir_id_block_t *b = g->id_blocks;
  if (CORE_ASAN) core_free(p);
  else if (p && b && p == b->ids + b->used - need) b->used -= need;
}

/* A node's attributes: the count and n entries, carved from the id
 * blocks at an 8-byte boundary (an entry holds int64s and a double). */
static int attrs_ids(int n) {
  return (int)((ir_attrs_bytes(n) + 7) / 8 * 2);
}

static ir_attrs_t *attrs_take(loom_graph_t *g, int n) {
  int need = attrs_ids(n);
  if (CORE_ASAN) return core_malloc(sizeof(int32_t) * (size_t)need);
  ir_id_block_t *b = g->id_blocks;
  if (b && b->used % 2) b->used++; /* an odd id left over stays unused */
  int32_t *p = ids_take(g, need);
  /* a block's ids start 8-byte aligned (its header is 24 bytes), and a
   * new block starts at 0 */
  return p ? (ir_attrs_t *)(void *)p : NULL;
}

static void attrs_give_back(loom_graph_t *g, ir_attrs_t *a, int n) {
  ids_give_back(g, (int32_t *)(void *)a, attrs_ids(n));
}

static void ids_free_all(loom_graph_t *g) {
  for (ir_id_block_t *b = g->id_blocks, *next; b; b = next) {
    next = b->next;
    core_free(b);
  }
  g->id_blocks = NULL;
}

/* Empties the blocks, keeping one as large as they were together (none
 * if that allocation fails: the next node makes one). */
static void ids_empty(loom_graph_t *g) {
  ir_id_block_t *b = g->id_blocks;
  if (!b) return;
  if (!b->next) {
    b->used = 0;
    return;
  }
  int64_t total = 0;
  for (; b; b = b->next) total += b->cap;
  ids_free_all(g);
  ir_id_block_t *nb = core_malloc(sizeof *nb + sizeof(int32_t) * (size_t)total);
  if (nb) *nb = (ir_id_block_t){.cap = total};
  g->id_blocks = nb;
}

/* Frees what values, nodes and expressions own, leaving the arrays. */
static void release_contents(loom_graph_t *g) {
  for (int64_t i = 0; i < g->n_values; i++) {
    core_free(g->values[i].name);
    if (!g->values[i].borrowed) loom_tensor_destroy(g->values[i].data);
  }
  for (int64_t i = 0; CORE_ASAN && i < g->n_nodes; i++) {
    core_free(g->nodes[i].in);
    core_free(g->nodes[i].out);
    core_free((void *)g->nodes[i].attrs);
  }
  for (int64_t i = 0; i < g->n_exprs; i++) core_free(g->exprs[i].name);
  for (int64_t i = 0; i < g->n_output_names; i++) core_free(g->output_names[i]);
  g->n_output_names = 0;
  for (int64_t i = 0; i < g->n_subgraphs; i++) {
    g->subgraphs[i]->owner = NULL; /* let go, so that destroy frees it */
    loom_graph_destroy(g->subgraphs[i]);
  }
}

void ir_graph_reset(loom_graph_t *g) {
  release_contents(g);
  ids_empty(g);
  g->n_values = g->n_nodes = g->n_inputs = g->n_params = g->n_outputs = 0;
  g->n_exprs = 0;
  g->n_symbols = g->n_fresh = 0;
  g->n_subgraphs = 0;
  g->n_shards = 0;
  ir_names_forget(g);
}

/* Frees g and its arrays, after release_contents. */
static void free_arrays(loom_graph_t *g) {
  ids_free_all(g);
  core_free(g->values);
  core_free(g->nodes);
  core_free(g->inputs);
  core_free(g->params);
  core_free(g->outputs);
  core_free(g->output_names);
  core_free(g->exprs);
  core_free(g->subgraphs);
  core_free(g->names);
  core_free(g->shards);
  core_free(g);
}

/* One reference less to g, freeing it after the last: holds counts those
 * beyond the creator's, so the count falls below zero only once. */
static void drop(loom_graph_t *g) {
  if (atomic_fetch_sub_explicit(&g->holds, 1, memory_order_acq_rel) > 0) return;
  release_contents(g);
  free_arrays(g);
}

static loom_graph_t *root_of(loom_graph_t *g) {
  while (g->owner) g = g->owner;
  return g;
}

void ir_graph_hold(loom_graph_t *g) {
  atomic_fetch_add_explicit(&root_of(g)->holds, 1, memory_order_relaxed);
}

void ir_graph_let_go(loom_graph_t *g) { drop(root_of(g)); }

void loom_graph_destroy(loom_graph_t *g) {
  /* A subgraph goes with the graph that owns it. */
  if (!g || g->owner) return;
  drop(g);
}

/* The arrays ir_graph_recycle kept on this thread. */
static _Thread_local struct {
  ir_node_t *nodes;
  ir_value_t *values;
  int64_t cap_nodes, cap_values;
} spare;

void ir_graph_free_spare(void) {
  core_free(spare.nodes);
  core_free(spare.values);
  spare.nodes = NULL;
  spare.values = NULL;
  spare.cap_nodes = spare.cap_values = 0;
}

void ir_graph_recycle(loom_graph_t *g) {
  if (!g || g->owner) return;
  if (atomic_load_explicit(&g->holds, memory_order_acquire) > 0) {
    drop(g); /* an executable still reads it: its arrays stay */
    return;
  }
  release_contents(g);
  ir_graph_free_spare();
  spare.nodes = g->nodes;
  spare.values = g->values;
  spare.cap_nodes = g->cap_nodes;
  spare.cap_values = g->cap_values;
  g->nodes = NULL;
  g->values = NULL;
  free_arrays(g);
}

loom_status_t ir_graph_take_spare(loom_graph_t *g, int64_t nodes, int64_t values) {
  if (!g->nodes && !g->values) {
    g->nodes = spare.nodes;
    g->values = spare.values;
    g->cap_nodes = spare.cap_nodes;
    g->cap_values = spare.cap_values;
    spare.nodes = NULL;
    spare.values = NULL;
    spare.cap_nodes = spare.cap_values = 0;
  }
  LOOM_TRY(core_grow((void **)&g->nodes, &g->cap_nodes, nodes, sizeof *g->nodes));
  return core_grow((void **)&g->values, &g->cap_values, values, sizeof *g->values);
}

/* Appends a value; its id goes to *id. */
static loom_status_t new_value(loom_graph_t *g, ir_value_kind_t kind,
                               const ir_type_t *type, const char *name,
                               int32_t *id) {
  if (g->n_values >= INT32_MAX)
    return loom_fail(LOOM_ERR_GRAPH, "too many values in one graph");
  LOOM_TRY(core_grow((void **)&g->values, &g->cap_values, g->n_values + 1,
                     sizeof *g->values));
  char *copy = NULL;
  if (name && !(copy = core_strdup(name)))
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a name");
  /* field by field: a memset of the whole value compiled to a `rep stos`,
   * whose start-up cost was a tenth of recording an op */
  ir_value_t *v = &g->values[g->n_values];
  v->type = *type;
  v->kind = kind;
  v->node = -1;
  v->index = 0;
  v->name = copy;
  v->data = NULL;
  v->borrowed = false;
  *id = (int32_t)g->n_values++;
  return LOOM_OK;
}

/* Appends id to a list of value ids. */
static loom_status_t push_id(int32_t **list, int64_t *n, int64_t *cap,
                             int32_t id) {
  LOOM_TRY(core_grow((void **)list, cap, *n + 1, sizeof **list));
  (*list)[(*n)++] = id;
  return LOOM_OK;
}

/* A type from public arguments: dtype valid, rank in range, dims either
 * non-negative constants or symbols of g. */
static loom_status_t public_type(const loom_graph_t *g, const char *what,
                                 const char *name, loom_dtype_t dtype,
                                 int rank, const loom_dim_t *dims,
                                 ir_type_t *t) {
  if (!dtype_valid(dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s '%s': invalid dtype %d", what,
                     name ? name : "", (int)dtype);
  if (rank < 0 || rank > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_SHAPE, "%s '%s': rank %d is outside 0..%d", what,
                     name ? name : "", rank, LOOM_MAX_RANK);
  if (rank > 0 && !dims)
    return loom_fail(LOOM_ERR_INVALID, "%s '%s': dims are null", what,
                     name ? name : "");
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) {
    bool ok = ir_dim_is_sym(dims[i]) ? ir_dim_expr(g, dims[i]) != NULL
                                     : dims[i] >= 0;
    if (!ok)
      return loom_fail(LOOM_ERR_SHAPE,
                       "%s '%s': dim %d (%lld) is neither a non-negative "
                       "size nor a symbol of this graph",
                       what, name ? name : "", i, (long long)dims[i]);
    t->dims[i] = dims[i];
  }
  char why[160], text[160];
  if (!ir_type_size_ok(t, why, sizeof why))
    return loom_fail(LOOM_ERR_SHAPE, "%s '%s': %s: %s", what, name ? name : "",
                     ir_type_str(g, t, text, sizeof text), why);
  return LOOM_OK;
}

/* NULL for an unnamed leaf ("" is one too). */
static const char *leaf_name(const char *name) { return name && name[0] ? name : NULL; }

/* Appends an input of type t. */
static loom_status_t add_input(loom_graph_t *g, const char *name, const ir_type_t *t,
                               loom_value_t *out) {
  /* Room in the list first, so that a failure leaves no half-made input. */
  LOOM_TRY(core_grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1,
                     sizeof *g->inputs));
  int32_t id = -1;
  LOOM_TRY(new_value(g, IR_VALUE_INPUT, t, name, &id));
  g->values[id].index = (int32_t)g->n_inputs;
  LOOM_TRY(push_id(&g->inputs, &g->n_inputs, &g->cap_inputs, id));
  out->id = id;
  return LOOM_OK;
}

loom_status_t ir_graph_input(loom_graph_t *g, const char *name, loom_dtype_t dtype,
                             int rank, const loom_dim_t *dims, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  ir_type_t t;
  LOOM_TRY(public_type(g, "input", name, dtype, rank, dims, &t));
  return add_input(g, name, &t, out);
}

loom_status_t loom_graph_input(loom_graph_t *g, const char *name,
                               loom_dtype_t dtype, int rank,
                               const loom_dim_t *dims, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_TRY(ir_before_change(g, "loom_graph_input"));
  LOOM_CHECK_ARG(out);
  name = leaf_name(name);
  ir_type_t t;
  LOOM_TRY(public_type(g, "input", name, dtype, rank, dims, &t));
  LOOM_TRY(ir_names_check(g, __func__, name));
  LOOM_TRY(add_input(g, name, &t, out));
  ir_names_add(g, out->id);
  return LOOM_OK;
}

loom_status_t loom_graph_param(loom_graph_t *g, const char *name,
                               loom_dtype_t dtype, int rank,
                               const int64_t *shape, const loom_tensor_t *init,
                               loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_TRY(ir_before_change(g, "loom_graph_param"));
  LOOM_CHECK_ARG(out);
  name = leaf_name(name);
  ir_type_t t;
  LOOM_TRY(public_type(g, "parameter", name, dtype, rank, shape, &t));
  for (int i = 0; i < rank; i++)
    if (ir_dim_is_sym(shape[i]))
      return loom_fail(LOOM_ERR_SHAPE,
                       "parameter '%s': dim %d is symbolic; parameters have "
                       "fixed shapes", name ? name : "", i);
  if (init) {
    char want[160], got[160];
    if (init->dtype != dtype || init->rank != rank ||
        (rank > 0 && memcmp(init->shape, shape, sizeof(int64_t) * (size_t)rank) != 0))
      return loom_fail(LOOM_ERR_SHAPE,
                       "parameter '%s': initial value %s %s does not match "
                       "the declared %s %s", name ? name : "",
                       loom_dtype_name(init->dtype),
                       shape_str(init->rank, init->shape, got, sizeof got),
                       loom_dtype_name(dtype), shape_str(rank, shape, want, sizeof want));
  }
  LOOM_TRY(ir_names_check(g, __func__, name));
  LOOM_TRY(core_grow((void **)&g->params, &g->cap_params, g->n_params + 1,
                     sizeof *g->params));
  loom_tensor_t *storage;
  if (init) LOOM_TRY(tensor_contiguous_copy(init, &storage));
  else LOOM_TRY(tensor_new(dtype, rank, shape, &storage));
  int32_t id = -1;
  loom_status_t s = new_value(g, IR_VALUE_PARAM, &t, name, &id);
  if (s != LOOM_OK) {
    loom_tensor_destroy(storage);
    return s;
  }
  g->values[id].data = storage;
  g->values[id].index = (int32_t)g->n_params;
  LOOM_TRY(push_id(&g->params, &g->n_params, &g->cap_params, id));
  ir_names_add(g, id);
  out->id = id;
  return LOOM_OK;
}

loom_status_t loom_graph_param_borrow(loom_graph_t *g, const char *name,
                                     loom_tensor_t *storage, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(storage);
  LOOM_CHECK_ARG(out);
  if (!tensor_is_contiguous(storage))
    return loom_fail(LOOM_ERR_INVALID, "parameter '%s': borrowed storage must be "
                     "contiguous (row-major, no broadcast dims)", name ? name : "");
  LOOM_TRY(loom_graph_param(g, name, storage->dtype, storage->rank, storage->shape, NULL, out));
  loom_tensor_t *x = g->values[out->id].data;
  if (x->owns_data) core_storage_free(x->data);
  x->data = storage->data;
  x->owns_data = false;
  return LOOM_OK;
}

loom_status_t ir_graph_constant_adopt(loom_graph_t *g, loom_tensor_t *t, loom_value_t *out) {
  loom_status_t s = ir_before_change(g, "loom_graph_constant");
  if (s != LOOM_OK) {
    loom_tensor_destroy(t);
    return s;
  }
  ir_type_t type = {.dtype = t->dtype, .rank = t->rank};
  for (int i = 0; i < t->rank; i++) type.dims[i] = t->shape[i];
  int32_t id = -1;
  s = new_value(g, IR_VALUE_CONST, &type, NULL, &id);
  if (s != LOOM_OK) {
    loom_tensor_destroy(t);
    return s;
  }
  g->values[id].data = t;
  out->id = id;
  return LOOM_OK;
}

loom_status_t loom_graph_constant(loom_graph_t *g, const loom_tensor_t *t,
                                  loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_TRY(ir_before_change(g, "loom_graph_constant"));
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(out);
  loom_tensor_t *copy;
  LOOM_TRY(tensor_contiguous_copy(t, &copy));
  return ir_graph_constant_adopt(g, copy, out);
}

loom_status_t loom_graph_output(loom_graph_t *g, loom_value_t v) {
  LOOM_CHECK_ARG(g);
  LOOM_TRY(ir_before_change(g, "loom_graph_output"));
  if (!ir_value_valid(g, v.id))
    return loom_fail(LOOM_ERR_INVALID, "loom_graph_output: %%%d is not a value of the graph", v.id);
  return push_id(&g->outputs, &g->n_outputs, &g->cap_outputs, v.id);
}

loom_status_t loom_graph_output_named(loom_graph_t *g, const char *name, loom_value_t v) {
  LOOM_CHECK_ARG(g);
  if (!name || !*name) return loom_graph_output(g, v);
  int64_t i = g->n_outputs;
  char **names = core_realloc(g->output_names, sizeof *names * (size_t)(i + 1));
  if (!names) return loom_fail(LOOM_ERR_NOMEM, "loom_graph_output_named: out of memory");
  g->output_names = names;
  for (int64_t k = g->n_output_names; k <= i; k++) names[k] = NULL;
  if (g->n_output_names < i + 1) g->n_output_names = i + 1;
  char *copy = core_strdup(name);
  if (!copy) return loom_fail(LOOM_ERR_NOMEM, "loom_graph_output_named: out of memory");
  loom_status_t st = loom_graph_output(g, v);
  if (st != LOOM_OK) {
    core_free(copy);
    return st;
  }
  core_free(names[i]);
  names[i] = copy;
  return LOOM_OK;
}

const char *loom_graph_input_name(const loom_graph_t *g, int i) {
  if (!g || i < 0 || i >= g->n_inputs) return NULL;
  const char *name = g->values[g->inputs[i]].name;
  return name ? name : "";
}

loom_status_t loom_graph_input_value(const loom_graph_t *g, int i, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  if (i < 0 || i >= g->n_inputs)
    return loom_fail(LOOM_ERR_INVALID, "loom_graph_input_value: no input %d (the graph has %lld)",
                     i, (long long)g->n_inputs);
  out->id = g->inputs[i];
  return LOOM_OK;
}

int loom_graph_num_params(const loom_graph_t *g) { return g ? (int)g->n_params : 0; }

loom_status_t loom_graph_param_value(const loom_graph_t *g, int i, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  if (i < 0 || i >= g->n_params)
    return loom_fail(LOOM_ERR_INVALID, "loom_graph_param_value: no parameter %d (the graph has %lld)",
                     i, (long long)g->n_params);
  out->id = g->params[i];
  return LOOM_OK;
}

const char *loom_graph_param_name(const loom_graph_t *g, int i) {
  if (!g || i < 0 || i >= g->n_params) return NULL;
  const char *name = g->values[g->params[i]].name;
  return name ? name : "";
}

loom_status_t loom_graph_output_value(const loom_graph_t *g, int i, loom_value_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  if (i < 0 || i >= g->n_outputs)
    return loom_fail(LOOM_ERR_INVALID, "loom_graph_output_value: no output %d (the graph has %lld)",
                     i, (long long)g->n_outputs);
  out->id = g->outputs[i];
  return LOOM_OK;
}

const char *loom_graph_output_name(const loom_graph_t *g, int i) {
  if (!g || i < 0 || i >= g->n_outputs) return NULL;
  return i < g->n_output_names && g->output_names[i] ? g->output_names[i] : "";
}

loom_status_t loom_graph_param_tensor(loom_graph_t *g, loom_value_t param,
                                      loom_tensor_t **out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  if (!ir_value_valid(g, param.id) || g->values[param.id].kind != IR_VALUE_PARAM)
    return loom_fail(LOOM_ERR_INVALID, "loom_graph_param_tensor: %%%d is not a parameter", param.id);
  *out = g->values[param.id].data;
  return LOOM_OK;
}

int loom_graph_num_inputs(const loom_graph_t *g) { return g ? (int)g->n_inputs : 0; }
int loom_graph_num_outputs(const loom_graph_t *g) { return g ? (int)g->n_outputs : 0; }
int loom_graph_num_nodes(const loom_graph_t *g) { return g ? (int)g->n_nodes : 0; }

loom_status_t loom_value_type(const loom_graph_t *g, loom_value_t v,
                              loom_dtype_t *dtype, int *rank,
                              loom_dim_t *dims) {
  LOOM_CHECK_ARG(g);
  if (!ir_value_valid(g, v.id))
    return loom_fail(LOOM_ERR_INVALID, "loom_value_type: %%%d is not a value of the graph", v.id);
  const ir_type_t *t = &g->values[v.id].type;
  if (dtype) *dtype = t->dtype;
  if (rank) *rank = t->rank;
  if (dims) memcpy(dims, t->dims, sizeof(ir_dim_t) * (size_t)t->rank);
  return LOOM_OK;
}

/* Number of outputs op makes with attrs a. */
static int output_count(const loom_graph_t *g, ir_op_t op, const ir_attrs_t *a) {
  if (ir_ops[op].n_out >= 0) return ir_ops[op].n_out;
  if (ir_ops[op].n_out == -2) return ir_control_n_out(g, op, a);
  const int64_t *sizes;
  int n = ir_attr_ints(a, "sizes", &sizes);
  return n < 0 ? 0 : n;
}

/* A shape rule's failure, its message led by the op's name: helpers that
 * rules call (symbolic dim arithmetic) do not know the op. */
static loom_status_t named_failure(const char *op, loom_status_t s) {
  if (s == LOOM_OK) return s;
  const char *msg = loom_last_error();
  size_t n = strlen(op);
  if (!strncmp(msg, op, n) && msg[n] == ':') return s;
  char copy[512];
  snprintf(copy, sizeof copy, "%s", msg);
  return loom_fail(s, "%s: %s", op, copy);
}

/* Node inputs beyond this are surely a mistake; their types and ids sit
 * in arrays on the stack while a node is built. */
#define MAX_NODE_INPUTS 4096

/* c's rule again at the sizes its symbolic input dims have now (the
 * graph's hook knows them while a trace records a step): a conv's window
 * past this step's image, a reflect pad wider than its dim, fail here,
 * naming the sizes, instead of at the run that would have read a value of
 * the step. Ops whose output sizes come from their data are left out. */
static loom_status_t check_sizes_now(const ir_infer_t *c) {
  loom_graph_t *g = c->g;
  if (!g->hook.size_now || (ir_ops[c->op].flags & (F_DATA_SHAPE | F_SUBGRAPH))) return LOOM_OK;
  bool symbolic = false; /* most nodes have none: no copies for them */
  for (int i = 0; i < c->n_in && !symbolic; i++)
    for (int d = 0; d < c->in[i]->rank; d++) symbolic |= !ir_dim_is_const(c->in[i]->dims[d]);
  if (!symbolic) return LOOM_OK;
  ir_type_t now[c->n_in > 0 ? c->n_in : 1];
  const ir_type_t *in[c->n_in > 0 ? c->n_in : 1];
  bool any = false;
  for (int i = 0; i < c->n_in; i++) {
    now[i] = *c->in[i];
    in[i] = &now[i];
    for (int d = 0; d < now[i].rank; d++) {
      if (ir_dim_is_const(now[i].dims[d])) continue;
      int64_t size;
      if (!g->hook.size_now(g->hook.ctx, g, now[i].dims[d], &size) || size < 0) return LOOM_OK;
      now[i].dims[d] = size;
      any = true;
    }
  }
  if (!any) return LOOM_OK;
  ir_type_t outs[c->n_out > 0 ? c->n_out : 1];
  memset(outs, 0, sizeof outs);
  ir_infer_t k = *c;
  k.in = in;
  k.out = outs;
  /* sizes held in attributes (a reshape's target n*4) at their sizes now;
   * a copy only for a node that has them */
  ir_attrs_t attrs;
  for (int a = 0; c->attrs && a < c->attrs->n; a++) {
    const ir_attr_t *at = &c->attrs->a[a];
    int n = at->kind == IR_ATTR_INTS ? at->n : at->kind == IR_ATTR_INT;
    for (int i = 0; i < n; i++) {
      int64_t size;
      if (!ir_dim_is_sym(at->ints[i])) continue;
      if (!g->hook.size_now(g->hook.ctx, g, at->ints[i], &size) || size < 0) return LOOM_OK;
      if (k.attrs != &attrs) ir_attrs_copy(&attrs, c->attrs);
      k.attrs = &attrs;
      attrs.a[a].ints[i] = size;
    }
  }
  /* a check, not a specialization: no dim is pinned to its size */
  bool (*pin)(void *, loom_graph_t *, ir_dim_t, int64_t *) = g->hook.pin_dim;
  g->hook.pin_dim = NULL;
  loom_status_t s = named_failure(ir_ops[c->op].name, ir_ops[c->op].shape(&k));
  if (s == LOOM_OK) s = ir_check_output_sizes(&k);
  g->hook.pin_dim = pin;
  return s;
}

loom_status_t ir_add_node(loom_graph_t *g, ir_op_t op, int n_in,
                          const int32_t *in, const ir_attrs_t *attrs,
                          int32_t *out, int out_cap) {
  if ((unsigned)op >= IR_OP_COUNT)
    return loom_fail(LOOM_ERR_INVALID, "unknown op %d", (int)op);
  const ir_op_info_t *info = &ir_ops[op];
  LOOM_TRY(ir_before_change(g, info->name));
  if (g->hook.node_check) LOOM_TRY(g->hook.node_check(g->hook.ctx, g, op));
  if (n_in < info->in_min || (info->in_max >= 0 && n_in > info->in_max)) {
    if (info->in_max < 0)
      return loom_fail(LOOM_ERR_INVALID, "%s: takes at least %d inputs, got %d",
                       info->name, info->in_min, n_in);
    return loom_fail(LOOM_ERR_INVALID, "%s: takes %d to %d inputs, got %d",
                     info->name, info->in_min, info->in_max, n_in);
  }
  if (n_in > MAX_NODE_INPUTS)
    return loom_fail(LOOM_ERR_INVALID, "%s: %d inputs is more than %d",
                     info->name, n_in, MAX_NODE_INPUTS);
  if (n_in > 0 && !in)
    return loom_fail(LOOM_ERR_INVALID, "%s: the inputs are null", info->name);
  const ir_type_t *types[n_in > 0 ? n_in : 1];
  for (int i = 0; i < n_in; i++) {
    char buf[64];
    if (!ir_value_valid(g, in[i]))
      return loom_fail(LOOM_ERR_INVALID, "%s: input %d is %s", info->name, i,
                       ir_value_str(g, in[i], buf, sizeof buf));
    types[i] = &g->values[in[i]].type;
  }
  if (n_in > 0 && !(info->dtypes & DT_BIT(types[0]->dtype))) {
    char accepted[96];
    /* As PyTorch's mean of an integer tensor, a float-only op does not
     * pick a float dtype for the user: it says how to. */
    bool cast = !(info->dtypes & ~DT_FLOAT) && !dtype_is_float(types[0]->dtype);
    return loom_fail(LOOM_ERR_DTYPE, "%s: input 0 has dtype %s, which it does not accept (accepts %s)%s",
                     info->name, loom_dtype_name(types[0]->dtype),
                     dtype_mask_str(info->dtypes, accepted, sizeof accepted),
                     cast ? "; cast it to a float dtype first" : "");
  }
  LOOM_TRY(ir_attrs_check(op, attrs));
  int n_out = output_count(g, op, attrs);
  ir_type_t outs[n_out > 0 ? n_out : 1];
  memset(outs, 0, sizeof outs);
  ir_infer_t c = {.g = g, .op = op, .attrs = attrs, .n_in = n_in,
                  .in = types, .in_ids = in, .n_out = n_out, .out = outs};
  LOOM_TRY(named_failure(info->name, info->shape(&c)));
  LOOM_TRY(ir_check_output_sizes(&c));
  LOOM_TRY(check_sizes_now(&c));
  if (out && out_cap < n_out)
    return loom_fail(LOOM_ERR_INVALID, "%s: makes %d outputs, room for %d",
                     info->name, n_out, out_cap);

  LOOM_TRY(core_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1,
                     sizeof *g->nodes));
  /* The node's attributes take the room of those in use alone: a whole
   * ir_attrs_t is 1.3 KB, and nodes that held one cost most of a graph's
   * memory and most of the time of copying it. */
  int n_attrs = attrs ? attrs->n : 0;
  ir_node_t node = {.op = op, .n_in = n_in, .n_out = n_out};
  node.in = ids_take(g, n_in);
  node.out = node.in ? ids_take(g, n_out) : NULL;
  ir_attrs_t *own = node.out ? attrs_take(g, n_attrs) : NULL;
  if (!own) {
    ids_give_back(g, node.out, n_out);
    ids_give_back(g, node.in, n_in);
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for a node", info->name);
  }
  own->n = n_attrs;
  if (n_attrs) memcpy(own->a, attrs->a, sizeof *attrs->a * (size_t)n_attrs);
  node.attrs = own;
  if (n_in) memcpy(node.in, in, sizeof(int32_t) * (size_t)n_in);
  int32_t node_id = (int32_t)g->n_nodes;
  int64_t n_values = g->n_values;
  for (int i = 0; i < n_out; i++) {
    loom_status_t s = new_value(g, IR_VALUE_NODE, &outs[i], NULL, &node.out[i]);
    if (s != LOOM_OK) {
      /* Drop the outputs made so far (they own nothing): a value whose
       * node was never added would dangle. */
      g->n_values = n_values;
      attrs_give_back(g, own, n_attrs);
      ids_give_back(g, node.out, n_out);
      ids_give_back(g, node.in, n_in);
      return s;
    }
    g->values[node.out[i]].node = node_id;
    g->values[node.out[i]].index = i;
  }
  g->nodes[g->n_nodes++] = node;
  if (out) memcpy(out, node.out, sizeof(int32_t) * (size_t)n_out);
  if (g->hook.node_added) return g->hook.node_added(g->hook.ctx, g, node_id);
  return LOOM_OK;
}

loom_status_t ir_build1(loom_graph_t *g, ir_op_t op, int n_in,
                        const loom_value_t *in, const ir_attrs_t *attrs,
                        loom_value_t *out) {
  /* the op's name, as the public builder that called (loom_relu: "relu") */
  const char *name = (unsigned)op < IR_OP_COUNT ? ir_ops[op].name : "ir_build1";
  if (!g || !out)
    return loom_fail(LOOM_ERR_INVALID, "%s: %s is null", name, !g ? "the graph" : "out");
  if ((unsigned)op < IR_OP_COUNT && (n_in < 0 || n_in > MAX_NODE_INPUTS))
    return loom_fail(LOOM_ERR_INVALID, "%s: %d inputs", ir_ops[op].name, n_in);
  if (n_in > 0 && !in)
    return loom_fail(LOOM_ERR_INVALID, "%s: the inputs are null", ir_ops[op].name);
  int32_t ids[n_in > 0 ? n_in : 1];
  for (int i = 0; i < n_in; i++) ids[i] = in[i].id;
  int32_t id = -1;
  LOOM_TRY(ir_add_node(g, op, n_in, ids, attrs, &id, 1));
  out->id = id;
  return LOOM_OK;
}

loom_status_t loom_assign(loom_graph_t *g, loom_value_t param,
                          loom_value_t value) {
  LOOM_CHECK_ARG(g);
  int32_t in[2] = {param.id, value.id};
  return ir_add_node(g, IR_OP_ASSIGN, 2, in, NULL, NULL, 0);
}
