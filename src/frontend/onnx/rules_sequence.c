/* Rules for ONNX's sequence ops. A sequence exists only while the model
 * loads: a list of Loom values the import holds, made and read by these
 * rules, so that a model that builds a list of tensors and takes them
 * apart again (positions known when it loads) imports as plain tensor
 * ops. Sequences are never changed: Insert and Erase make new lists.
 * An ONNX optional is, while the model loads, either its value or none,
 * an entry of these lists too; SequenceMap imports its body once per
 * element. */
#include <string.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

/* The sequence input i names; fails unless it is one. */
static loom_status_t seq_input(ox_node_t *n, int i, const ox_seq_t **out) {
  LOOM_TRY(ox_need(n, i));
  *out = ox_seq_get(n, n->in[i]);
  if (!*out) return ox_fail(n, LOOM_ERR_FORMAT, "input %d is not a sequence", i);
  if ((*out)->none) return ox_fail(n, LOOM_ERR_FORMAT, "input %d is an optional that is none", i);
  return LOOM_OK;
}

/* Fails unless v can join sequence q (one dtype for all its elements). */
static loom_status_t seq_check_item(ox_node_t *n, const ox_seq_t *q, loom_value_t v) {
  if (ox_is_seq(v)) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "a sequence of sequences");
  if (q && q->n && ox_dtype(n, v) != q->dtype)
    return ox_fail(n, LOOM_ERR_DTYPE, "a %s tensor in a sequence of %s",
                   loom_dtype_name(ox_dtype(n, v)), loom_dtype_name(q->dtype));
  return LOOM_OK;
}

/* Constant position input i into [0, len - 1 + end], counted from the
 * back when negative; dflt when absent. end: 1 where a position may
 * point past the last element (Insert). */
static loom_status_t seq_position(ox_node_t *n, int i, int len, int end, int dflt, int *out) {
  *out = dflt;
  if (!ox_has(n, i)) return LOOM_OK;
  int64_t p;
  int count;
  LOOM_TRY(ox_const_ints(n, i, "position", &p, 1, &count));
  if (count != 1) return ox_fail(n, LOOM_ERR_SHAPE, "position has %d values", count);
  if (p < -len || p > len - 1 + end)
    return ox_fail(n, LOOM_ERR_FORMAT, "position %lld is out of range for a sequence of %d",
                   (long long)p, len);
  *out = (int)(p < 0 ? p + len : p);
  return LOOM_OK;
}

loom_status_t ox_sequence_empty(ox_node_t *n) {
  loom_dtype_t dt = LOOM_F32;
  if (ox_attr(n, "dtype") && !ox_dtype_from_onnx((int32_t)ox_int(n, "dtype", 1), &dt))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "dtype %s",
                   ox_onnx_type_name((int32_t)ox_int(n, "dtype", 1)));
  return ox_seq_new(n, 0, NULL, dt, &n->out[0]);
}

loom_status_t ox_sequence_construct(ox_node_t *n) {
  for (int i = 0; i < n->n_in; i++) LOOM_TRY(ox_need(n, i));
  for (int i = 0; i < n->n_in; i++) LOOM_TRY(seq_check_item(n, NULL, n->in[i]));
  for (int i = 1; i < n->n_in; i++)
    if (ox_dtype(n, n->in[i]) != ox_dtype(n, n->in[0]))
      return ox_fail(n, LOOM_ERR_DTYPE, "input %d is %s, input 0 %s", i,
                     loom_dtype_name(ox_dtype(n, n->in[i])),
                     loom_dtype_name(ox_dtype(n, n->in[0])));
  return ox_seq_new(n, n->n_in, n->in, LOOM_F32, &n->out[0]);
}

loom_status_t ox_sequence_insert(ox_node_t *n) {
  const ox_seq_t *q = NULL;
  LOOM_TRY(seq_input(n, 0, &q));
  LOOM_TRY(ox_need(n, 1));
  LOOM_TRY(seq_check_item(n, q, n->in[1]));
  int at;
  LOOM_TRY(seq_position(n, 2, q->n, 1, q->n, &at));
  loom_value_t *items = core_calloc((size_t)q->n + 2, sizeof *items);
  if (!items) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  ox_copy(items, q->items, sizeof *items * (size_t)at);
  items[at] = n->in[1];
  ox_copy(items + at + 1, q->items + at, sizeof *items * (size_t)(q->n - at));
  loom_status_t st = ox_seq_new(n, q->n + 1, items, q->dtype, &n->out[0]);
  core_free(items);
  return st;
}

loom_status_t ox_sequence_erase(ox_node_t *n) {
  const ox_seq_t *q = NULL;
  LOOM_TRY(seq_input(n, 0, &q));
  if (!q->n) return ox_fail(n, LOOM_ERR_FORMAT, "the sequence is empty");
  int at;
  LOOM_TRY(seq_position(n, 1, q->n, 0, q->n - 1, &at));
  loom_value_t *items = core_calloc((size_t)q->n, sizeof *items);
  if (!items) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  ox_copy(items, q->items, sizeof *items * (size_t)at);
  ox_copy(items + at, q->items + at + 1, sizeof *items * (size_t)(q->n - at - 1));
  loom_status_t st = ox_seq_new(n, q->n - 1, items, q->dtype, &n->out[0]);
  core_free(items);
  return st;
}

loom_status_t ox_sequence_at(ox_node_t *n) {
  const ox_seq_t *q = NULL;
  LOOM_TRY(seq_input(n, 0, &q));
  LOOM_TRY(ox_need(n, 1));
  if (!q->n) return ox_fail(n, LOOM_ERR_FORMAT, "the sequence is empty");
  int at;
  LOOM_TRY(seq_position(n, 1, q->n, 0, 0, &at));
  n->out[0] = q->items[at];
  return LOOM_OK;
}

loom_status_t ox_sequence_length(ox_node_t *n) {
  const ox_seq_t *q = NULL;
  LOOM_TRY(seq_input(n, 0, &q));
  int64_t len = q->n;
  loom_tensor_t *t = NULL;
  LOOM_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &len, sizeof len, &t));
  loom_status_t st = loom_graph_constant(n->g, t, &n->out[0]);
  loom_tensor_destroy(t);
  return st;
}

/* The sizes SplitToSequence cuts a dim of size dim into: split's entries,
 * or chunks of split's one value (the last smaller), or ones. */
static loom_status_t split_sizes(ox_node_t *n, loom_dim_t dim, int64_t *sizes, int cap,
                                 int *count) {
  int64_t chunk = 1;
  if (ox_has(n, 1)) {
    LOOM_TRY(ox_const_ints(n, 1, "split", sizes, cap, count));
    if (ox_rank(n, n->in[1]) == 1) return LOOM_OK;
    chunk = sizes[0];
  }
  if (dim < 0)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "splitting a dim whose size is known only when the "
                   "model runs into chunks");
  if (chunk < 1) return ox_fail(n, LOOM_ERR_SHAPE, "split is %lld", (long long)chunk);
  *count = (int)((dim + chunk - 1) / chunk);
  if (*count > cap) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d parts (at most %d)", *count, cap);
  for (int k = 0; k < *count; k++) sizes[k] = k < *count - 1 ? chunk : dim - chunk * k;
  return LOOM_OK;
}

loom_status_t ox_split_to_sequence(ox_node_t *n) {
  enum { CAP = 4096 };
  LOOM_TRY(ox_need(n, 0));
  int rank = ox_rank(n, n->in[0]), count = 0;
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &axis));
  int64_t *sizes = core_calloc(CAP, sizeof *sizes);
  loom_value_t *parts = core_calloc(CAP, sizeof *parts);
  loom_status_t st = sizes && parts ? split_sizes(n, ox_dim(n, n->in[0], (int)axis), sizes, CAP,
                                                  &count)
                                    : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  if (st == LOOM_OK) st = loom_split(n->g, n->in[0], axis, count, sizes, parts);
  /* keepdims 0 drops the axis, only where split is not given. */
  int drop = !ox_has(n, 1) && !ox_int(n, "keepdims", 1);
  for (int k = 0; st == LOOM_OK && drop && k < count; k++)
    st = loom_squeeze(n->g, parts[k], 1, &axis, &parts[k]);
  if (st == LOOM_OK) st = ox_seq_new(n, count, parts, ox_dtype(n, n->in[0]), &n->out[0]);
  core_free(sizes);
  core_free(parts);
  return st;
}

loom_status_t ox_concat_from_sequence(ox_node_t *n) {
  const ox_seq_t *q = NULL;
  LOOM_TRY(seq_input(n, 0, &q));
  if (!q->n) return ox_fail(n, LOOM_ERR_SHAPE, "the sequence is empty");
  if (!ox_attr(n, "axis")) return ox_fail(n, LOOM_ERR_FORMAT, "attribute axis is missing");
  int stack = ox_int(n, "new_axis", 0) != 0, rank = ox_rank(n, q->items[0]);
  int64_t axis;
  LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank + stack, "axis", &axis));
  if (!stack) return loom_concat(n->g, q->n, q->items, axis, &n->out[0]);
  loom_value_t *items = core_calloc((size_t)q->n, sizeof *items);
  if (!items) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  loom_status_t st = LOOM_OK;
  for (int k = 0; st == LOOM_OK && k < q->n; k++)
    st = loom_unsqueeze(n->g, q->items[k], 1, &axis, &items[k]);
  if (st == LOOM_OK) st = loom_concat(n->g, q->n, items, axis, &n->out[0]);
  core_free(items);
  return st;
}

/* ---- SequenceMap -------------------------------------------------------------- */

/* The dtype body output k declares (f32 when it declares none): an
 * empty result's. */
static loom_dtype_t body_out_dtype(const Onnx__GraphProto *gp, int k) {
  const Onnx__TypeProto *tp = gp->output[k]->type;
  if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type)
    tp = tp->sequence_type->elem_type;
  loom_dtype_t dt = LOOM_F32;
  if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type &&
      tp->tensor_type->has_elem_type && ox_dtype_from_onnx(tp->tensor_type->elem_type, &dt))
    return dt;
  return LOOM_F32;
}

/* The sequences' common length; each sequence input must have it. */
static loom_status_t map_length(ox_node_t *n, int *len) {
  const ox_seq_t *q = NULL;
  LOOM_TRY(seq_input(n, 0, &q));
  *len = q->n;
  for (int i = 1; i < n->n_in; i++) {
    LOOM_TRY(ox_need(n, i));
    if (!ox_is_seq(n->in[i])) continue;
    LOOM_TRY(seq_input(n, i, &q));
    if (q->n != *len)
      return ox_fail(n, LOOM_ERR_SHAPE, "input %d has %d elements, input 0 %d", i, q->n, *len);
  }
  return LOOM_OK;
}

/* Element e of the map: the body inline, each sequence input's element e
 * (and each tensor input whole) its inputs; its outputs into res[k * len + e]. */
static loom_status_t map_element(ox_node_t *n, const Onnx__GraphProto *gp, int e, int len,
                                 loom_value_t *formal, loom_value_t *outs, loom_value_t *res) {
  for (int i = 0; i < n->n_in; i++) {
    /* Looked up anew: the body may add lists, which moves them. */
    const ox_seq_t *q = ox_seq_get(n, n->in[i]);
    formal[i] = q ? q->items[e] : n->in[i];
  }
  LOOM_TRY(ox_subgraph_import(n, gp, n->g, n->n_in, formal, NULL, NULL, (int)gp->n_output, outs));
  for (int k = 0; k < n->n_out; k++) {
    if (ox_is_seq(outs[k]))
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "body output %d is a sequence (a sequence of "
                     "sequences)", k);
    res[k * len + e] = outs[k];
  }
  return LOOM_OK;
}

loom_status_t ox_sequence_map(ox_node_t *n) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, "body", OX_ATTR_GRAPH);
  if (!a || !a->g) return ox_fail(n, LOOM_ERR_FORMAT, "graph attribute body is missing");
  const Onnx__GraphProto *gp = a->g;
  if (n->n_out > (int)gp->n_output)
    return ox_fail(n, LOOM_ERR_FORMAT, "%d outputs with a body of %zu", n->n_out, gp->n_output);
  int len = 0;
  LOOM_TRY(map_length(n, &len));
  loom_value_t *formal = core_calloc((size_t)n->n_in + 1, sizeof *formal);
  loom_value_t *outs = core_calloc(gp->n_output + 1, sizeof *outs);
  loom_value_t *res = core_calloc((size_t)(n->n_out * len) + 1, sizeof *res);
  loom_status_t st = formal && outs && res
                         ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  for (int e = 0; st == LOOM_OK && e < len; e++)
    st = map_element(n, gp, e, len, formal, outs, res);
  for (int k = 0; st == LOOM_OK && k < n->n_out; k++)
    st = ox_seq_new(n, len, res + k * len, body_out_dtype(gp, k), &n->out[k]);
  core_free(formal);
  core_free(outs);
  core_free(res);
  return st;
}

/* ---- Optionals: a value, or none -------------------------------------------------- */

/* Whether input i holds a value: present, and not a none. */
static int opt_has(ox_node_t *n, int i) {
  if (!ox_has(n, i)) return 0;
  const ox_seq_t *q = ox_seq_get(n, n->in[i]);
  return !q || !q->none;
}

loom_status_t ox_optional(ox_node_t *n) {
  if (ox_has(n, 0)) {
    n->out[0] = n->in[0];
    return LOOM_OK;
  }
  if (!ox_attr(n, "type"))
    return ox_fail(n, LOOM_ERR_FORMAT, "no input and no type attribute");
  return ox_seq_none(n, &n->out[0]);
}

loom_status_t ox_optional_has_element(ox_node_t *n) {
  if (n->opset < 18) LOOM_TRY(ox_need(n, 0));
  uint8_t has = (uint8_t)opt_has(n, 0);
  loom_tensor_t *t = NULL;
  LOOM_TRY(loom_tensor_from_data(LOOM_BOOL, 0, NULL, &has, 1, &t));
  loom_status_t st = loom_graph_constant(n->g, t, &n->out[0]);
  loom_tensor_destroy(t);
  return st;
}

loom_status_t ox_optional_get_element(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  if (!opt_has(n, 0)) return ox_fail(n, LOOM_ERR_INVALID, "the optional input is none");
  n->out[0] = n->in[0];
  return LOOM_OK;
}
