/* What a rule reads from its node: attributes by name and kind, inputs'
 * types, and the values of inputs that must be constants (shapes, axes,
 * pads), each failure naming the node. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/ir.h"

static const char *node_label(const Onnx__NodeProto *np, char *buf, size_t size) {
  if (np->name && *np->name) snprintf(buf, size, "'%s' ", np->name);
  else buf[0] = 0;
  return buf;
}

loom_status_t ox_fail(const ox_node_t *n, loom_status_t status, const char *fmt, ...) {
  char msg[768], label[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_fail(status, "ONNX node %d %s(%s): %s", n->index,
                   node_label(n->proto, label, sizeof label), n->proto->op_type, msg);
}

const Onnx__AttributeProto *ox_attr(const ox_node_t *n, const char *name) {
  for (size_t i = 0; i < n->proto->n_attribute; i++) {
    const Onnx__AttributeProto *a = n->proto->attribute[i];
    if (a->name && !strcmp(a->name, name)) return a;
  }
  return NULL;
}

int64_t ox_to_i64(double v) {
  if (!(v > -9.2e18)) return INT64_MIN;
  return v < 9.2e18 ? (int64_t)v : INT64_MAX;
}

/* The attribute's type: as declared, or, where an old writer left it
 * undefined, by the field that holds its value. */
static int attr_type(const Onnx__AttributeProto *a) {
  if ((int)a->type != OX_ATTR_UNDEFINED) return (int)a->type;
  if (a->has_f) return OX_ATTR_FLOAT;
  if (a->has_i) return OX_ATTR_INT;
  if (a->has_s) return OX_ATTR_STRING;
  if (a->t) return OX_ATTR_TENSOR;
  if (a->g) return OX_ATTR_GRAPH;
  if (a->n_floats) return OX_ATTR_FLOATS;
  if (a->n_ints) return OX_ATTR_INTS;
  if (a->n_strings) return OX_ATTR_STRINGS;
  if (a->n_tensors) return OX_ATTR_TENSORS;
  if (a->n_graphs) return OX_ATTR_GRAPHS;
  return OX_ATTR_UNDEFINED;
}

static const char *attr_type_name(int type) {
  static const char *const names[] = {"no value", "a FLOAT", "an INT", "a STRING", "a TENSOR",
                                      "a GRAPH", "FLOATS", "INTS", "STRINGS", "TENSORS",
                                      "GRAPHS", "a SPARSE_TENSOR", "SPARSE_TENSORS",
                                      "a TYPE_PROTO", "TYPE_PROTOS"};
  return type >= 0 && type < (int)(sizeof names / sizeof *names) ? names[type] : "an unknown type";
}

const Onnx__AttributeProto *ox_attr_typed(const ox_node_t *n, const char *name, int type) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  if (!a) return NULL;
  int given = attr_type(a);
  /* An empty list written without its type is any list's. */
  int empty_list = given == OX_ATTR_UNDEFINED && type >= OX_ATTR_FLOATS && type <= OX_ATTR_GRAPHS;
  if (given == type || empty_list) return a;
  if (n->attr_error && !n->attr_error[0])
    snprintf(n->attr_error, OX_ATTR_ERROR, "attribute %s is %s where the op takes %s", name,
             attr_type_name(given), attr_type_name(type));
  return NULL;
}

int64_t ox_int(const ox_node_t *n, const char *name, int64_t dflt) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, name, OX_ATTR_INT);
  return a ? a->i : dflt;
}

double ox_float(const ox_node_t *n, const char *name, double dflt) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, name, OX_ATTR_FLOAT);
  return a ? a->f : dflt;
}

const int64_t *ox_ints(const ox_node_t *n, const char *name, int *count) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, name, OX_ATTR_INTS);
  *count = a ? (int)a->n_ints : 0;
  return a && a->n_ints ? a->ints : NULL;
}

const float *ox_floats(const ox_node_t *n, const char *name, int *count) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, name, OX_ATTR_FLOATS);
  *count = a ? (int)a->n_floats : 0;
  return a && a->n_floats ? a->floats : NULL;
}

const char *ox_string(const ox_node_t *n, const char *name, const char *dflt, char *buf,
                      size_t size) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, name, OX_ATTR_STRING);
  if (!a) return dflt;
  /* a STRING declared without its bytes reads as "" */
  size_t len = !a->s.data ? 0 : a->s.len < size - 1 ? a->s.len : size - 1;
  if (len) memcpy(buf, a->s.data, len);
  buf[len] = 0;
  return buf;
}

int ox_string_is(const ox_node_t *n, const char *name, const char *dflt, const char *value) {
  char buf[64];
  return !strcmp(ox_string(n, name, dflt, buf, sizeof buf), value);
}

loom_status_t ox_need(const ox_node_t *n, int i) {
  if (ox_has(n, i)) return LOOM_OK;
  return ox_fail(n, LOOM_ERR_FORMAT, "input %d is missing", i);
}

loom_dtype_t ox_dtype(const ox_node_t *n, loom_value_t v) {
  loom_dtype_t dt = LOOM_F32;
  loom_value_type(n->g, v, &dt, NULL, NULL);
  return dt;
}

int ox_rank(const ox_node_t *n, loom_value_t v) {
  int rank = 0;
  loom_value_type(n->g, v, NULL, &rank, NULL);
  return rank;
}

loom_dim_t ox_dim(const ox_node_t *n, loom_value_t v, int d) {
  loom_dim_t dims[LOOM_MAX_RANK] = {0};
  loom_value_type(n->g, v, NULL, NULL, dims);
  return d >= 0 && d < LOOM_MAX_RANK ? dims[d] : 0;
}

loom_status_t ox_dims(const ox_node_t *n, loom_value_t v, loom_dim_t *dims, int *rank) {
  return loom_value_type(n->g, v, NULL, rank, dims);
}

loom_status_t ox_like(ox_node_t *n, loom_value_t x, double value, loom_value_t *out) {
  return ox_scalar(n, ox_dtype(n, x), value, out);
}

int ox_is_float(loom_dtype_t dt) {
  return dt == LOOM_F32 || dt == LOOM_F64 || dt == LOOM_F16 || dt == LOOM_BF16;
}

const loom_tensor_t *ox_const(const ox_node_t *n, loom_value_t v) {
  if (v.id < 0 || v.id >= n->g->n_values) return NULL;
  const ir_value_t *val = &n->g->values[v.id];
  return val->kind == IR_VALUE_CONST ? val->data : NULL;
}

static loom_status_t const_input(const ox_node_t *n, int i, const char *what,
                                 const loom_tensor_t **t, int cap) {
  LOOM_TRY(ox_need(n, i));
  *t = ox_const(n, n->in[i]);
  if (!*t)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s (input %d) must be known when the model loads "
                   "(a constant, or computed from constants and static shapes)", what, i);
  if (loom_tensor_numel(*t) > cap)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s has %lld entries (at most %d)", what,
                   (long long)loom_tensor_numel(*t), cap);
  return LOOM_OK;
}

loom_status_t ox_const_ints(const ox_node_t *n, int i, const char *what, int64_t *out, int cap,
                            int *count) {
  const loom_tensor_t *t;
  LOOM_TRY(const_input(n, i, what, &t, cap));
  loom_dtype_t dt = loom_tensor_dtype(t);
  if (dt != LOOM_I64 && dt != LOOM_I32 && dt != LOOM_I8)
    return ox_fail(n, LOOM_ERR_DTYPE, "%s must be integers, not %s", what, loom_dtype_name(dt));
  *count = (int)loom_tensor_numel(t);
  for (int k = 0; k < *count; k++) {
    double v;
    loom_tensor_get_f64(t, k, &v);
    out[k] = dt == LOOM_I64 ? ((const int64_t *)loom_tensor_data(t))[k] : ox_to_i64(v);
  }
  return LOOM_OK;
}

loom_status_t ox_const_doubles(const ox_node_t *n, int i, const char *what, double *out, int cap,
                               int *count) {
  const loom_tensor_t *t;
  LOOM_TRY(const_input(n, i, what, &t, cap));
  *count = (int)loom_tensor_numel(t);
  for (int k = 0; k < *count; k++) loom_tensor_get_f64(t, k, &out[k]);
  return LOOM_OK;
}

loom_status_t ox_scalar(ox_node_t *n, loom_dtype_t dtype, double value, loom_value_t *out) {
  return loom_full(n->g, 0, NULL, value, dtype, out);
}

loom_status_t ox_vector_i64(ox_node_t *n, int count, const int64_t *values, loom_value_t *out) {
  loom_tensor_t *t = NULL;
  int64_t shape[1] = {count};
  LOOM_TRY(loom_tensor_from_data(LOOM_I64, 1, shape, values, sizeof *values * (size_t)count, &t));
  loom_status_t st = loom_graph_constant(n->g, t, out);
  loom_tensor_destroy(t);
  return st;
}

loom_status_t ox_set(ox_node_t *n, int k, loom_value_t v) {
  if (k < n->n_out) n->out[k] = v;
  return LOOM_OK;
}

loom_status_t ox_axis(const ox_node_t *n, int64_t a, int rank, const char *what, int64_t *out) {
  if (a < -rank || a >= (rank ? rank : 1))
    return ox_fail(n, LOOM_ERR_AXIS, "%s %lld is out of range for rank %d", what, (long long)a,
                   rank);
  *out = a < 0 ? a + rank : a;
  return LOOM_OK;
}

loom_status_t ox_static_dims(const ox_node_t *n, loom_value_t v, const char *what,
                             loom_dim_t *dims, int *rank) {
  LOOM_TRY(ox_dims(n, v, dims, rank));
  for (int d = 0; d < *rank; d++)
    if (dims[d] < 0)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s has symbolic dims (give them sizes when "
                     "loading: loom_onnx_options_t's dim_names or shape_names; `loom run` "
                     "does with --dim or --input)", what);
  return LOOM_OK;
}

loom_status_t ox_window_attrs(const ox_node_t *n, int s, const int64_t **strides,
                              const int64_t **dilations, const int64_t **pads) {
  int c;
  *strides = ox_ints(n, "strides", &c);
  if (*strides && c != s) return ox_fail(n, LOOM_ERR_SHAPE, "%d strides for %d dims", c, s);
  *dilations = ox_ints(n, "dilations", &c);
  if (*dilations && c != s) return ox_fail(n, LOOM_ERR_SHAPE, "%d dilations for %d dims", c, s);
  *pads = ox_ints(n, "pads", &c);
  if (*pads && c != 2 * s) return ox_fail(n, LOOM_ERR_SHAPE, "%d pads for %d dims", c, s);
  return LOOM_OK;
}

loom_status_t ox_iota(ox_node_t *n, loom_dim_t size, int d, int r, loom_value_t *out) {
  loom_value_t a;
  loom_dim_t shape[LOOM_MAX_RANK];
  for (int k = 0; k < r; k++) shape[k] = k == d ? size : 1;
  if (ir_dim_is_sym(size)) { /* counted by a running sum of ones when the graph runs */
    LOOM_TRY(loom_full(n->g, r, shape, 1, LOOM_I64, &a));
    return loom_cumsum(n->g, a, d, 1, 0, out);
  }
  LOOM_TRY(loom_arange(n->g, 0, (double)size, 1, LOOM_I64, &a));
  return loom_reshape(n->g, a, r, shape, out);
}

static int32_t info_type(Onnx__ValueInfoProto *const *vis, size_t count, const char *name) {
  for (size_t i = 0; i < count; i++) {
    const Onnx__TypeProto *tp = vis[i]->type;
    if (vis[i]->name && !strcmp(vis[i]->name, name) && tp &&
        tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type)
      return tp->tensor_type->elem_type;
  }
  return 0;
}

int32_t ox_declared_type(const ox_node_t *n, const char *name) {
  const Onnx__GraphProto *gp = n->graph;
  if (!gp || !name || !*name) return 0;
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name))
      return gp->initializer[i]->data_type;
  int32_t t = info_type(gp->input, gp->n_input, name);
  if (!t) t = info_type(gp->output, gp->n_output, name);
  if (!t) t = info_type(gp->value_info, gp->n_value_info, name);
  return t;
}
