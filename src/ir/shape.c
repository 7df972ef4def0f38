/* Helpers shared by the shape rules: broadcasting on symbolic dims, axis
 * normalization, dtype checks, and error messages that name the op. */
#include <stdarg.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"

loom_status_t ir_shape_fail(ir_infer_t *c, const char *fmt, ...) {
  char msg[512], types[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t used = 0;
  types[0] = '\0';
  for (int i = 0; i < c->n_in && used < sizeof types; i++) {
    char t[160];
    used += (size_t)snprintf(types + used, sizeof types - used, "%s%s",
                             i ? ", " : "", ir_type_str(c->g, c->in[i], t, sizeof t));
  }
  return loom_fail(LOOM_ERR_SHAPE, "%s: %s (inputs: %s)", ir_ops[c->op].name,
                   msg, types);
}

bool ir_pin_dim(loom_graph_t *g, ir_dim_t *d) {
  if (!ir_dim_is_sym(*d)) return true;
  int64_t v;
  if (!g->hook.pin_dim || !g->hook.pin_dim(g->hook.ctx, g, *d, &v)) return false;
  *d = v;
  return true;
}

bool ir_specialize(loom_graph_t *g, ir_dim_t *a, ir_dim_t *b) {
  if (ir_dim_is_const(*a) && ir_dim_is_const(*b)) return false;
  ir_dim_t pa = *a, pb = *b;
  if (!ir_pin_dim(g, &pa) || !ir_pin_dim(g, &pb)) return false;
  *a = pa;
  *b = pb;
  return true;
}

loom_status_t ir_broadcast(ir_infer_t *c, const ir_type_t *a,
                           const ir_type_t *b, ir_type_t *out) {
  int rank = a->rank > b->rank ? a->rank : b->rank;
  out->rank = rank;
  for (int i = 0; i < rank; i++) {
    int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
    ir_dim_t da = ia >= 0 ? a->dims[ia] : 1;
    ir_dim_t db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) ir_specialize(c->g, &da, &db);
    if (da == db || db == 1) out->dims[i] = da;
    else if (da == 1) out->dims[i] = db;
    else {
      char sa[64], sb[64], ta[160], tb[160];
      return ir_shape_fail(c, "cannot broadcast dim %s of %s with dim %s of %s",
                           ir_dim_str(c->g, da, sa, sizeof sa),
                           ir_type_str(c->g, a, ta, sizeof ta),
                           ir_dim_str(c->g, db, sb, sizeof sb),
                           ir_type_str(c->g, b, tb, sizeof tb));
    }
  }
  return LOOM_OK;
}

loom_status_t ir_axis(ir_infer_t *c, int64_t axis, int rank, int *out) {
  /* A scalar has one pseudo-axis, addressed as 0 or -1 (as NumPy does). */
  bool bad = rank == 0 ? (axis != 0 && axis != -1) : (axis < -rank || axis >= rank);
  if (bad)
    return loom_fail(LOOM_ERR_AXIS, "%s: axis %lld is out of range for rank %d",
                     ir_ops[c->op].name, (long long)axis, rank);
  *out = rank == 0 ? 0 : (int)(axis < 0 ? axis + rank : axis);
  return LOOM_OK;
}

loom_status_t ir_check_dtype(ir_infer_t *c, int i, uint32_t mask,
                             const char *what) {
  if (!(mask & DT_BIT(c->in[i]->dtype)))
    return loom_fail(LOOM_ERR_DTYPE, "%s: %s (input %d) has dtype %s, which it does not accept",
                     ir_ops[c->op].name, what, i, loom_dtype_name(c->in[i]->dtype));
  return LOOM_OK;
}

/* ---- Sizes ----------------------------------------------------------------- */

bool ir_type_size_ok(const ir_type_t *t, char *why, size_t size) {
  int64_t dims[LOOM_MAX_RANK];
  int n = 0;
  for (int i = 0; i < t->rank; i++) {
    if (!ir_dim_is_const(t->dims[i])) continue;
    if (t->dims[i] < 0) {
      snprintf(why, size, "dim %d is negative (%lld)", i, (long long)t->dims[i]);
      return false;
    }
    dims[n++] = t->dims[i];
  }
  size_t es = loom_dtype_size(t->dtype);
  if (shape_size(n, dims, es, NULL, NULL)) return true;
  int used = n < t->rank ? snprintf(why, size, "its constant dims: ") : 0;
  if (used < 0 || (size_t)used >= size) used = 0;
  shape_size_why(n, dims, es, why + used, size - (size_t)used);
  return false;
}

/* Whether t is the type of one of c's inputs, whose size was checked when
 * it was made (an elementwise op on operands of one shape). */
static bool an_input_type(const ir_infer_t *c, const ir_type_t *t) {
  for (int j = 0; j < c->n_in; j++)
    if (ir_type_equal(c->in[j], t)) return true;
  return false;
}

loom_status_t ir_check_output_sizes(ir_infer_t *c) {
  for (int i = 0; i < c->n_out; i++) {
    char why[160], t[160];
    if (an_input_type(c, &c->out[i])) continue;
    if (!ir_type_size_ok(&c->out[i], why, sizeof why))
      return ir_shape_fail(c, "output %d would be %s: %s", i,
                           ir_type_str(c->g, &c->out[i], t, sizeof t), why);
  }
  return LOOM_OK;
}

const char *ir_value_desc(const loom_graph_t *g, int32_t v, char *buf, size_t size) {
  char name[64];
  const ir_value_t *x = &g->values[v];
  ir_value_str(g, v, name, sizeof name);
  if (x->kind == IR_VALUE_NODE && x->node >= 0)
    snprintf(buf, size, "value %s (made by %s)", name, ir_ops[g->nodes[x->node].op].name);
  else snprintf(buf, size, "value %s", name);
  return buf;
}

loom_status_t ir_value_bytes(const loom_graph_t *g, const char *what, int32_t v,
                             const int64_t *shape, int64_t *bytes) {
  const ir_type_t *t = &g->values[v].type;
  size_t es = loom_dtype_size(t->dtype);
  if (shape_size(t->rank, shape, es, NULL, bytes)) return LOOM_OK;
  char desc[128], sh[160], why[160];
  return loom_fail(LOOM_ERR_SHAPE, "%s: %s would be %s %s: %s", what,
                   ir_value_desc(g, v, desc, sizeof desc), loom_dtype_name(t->dtype),
                   shape_str(t->rank, shape, sh, sizeof sh),
                   shape_size_why(t->rank, shape, es, why, sizeof why));
}

loom_status_t ir_check_window_output(const loom_graph_t *g, const char *what, int32_t v,
                                     const int64_t *shape) {
  const ir_value_t *val = &g->values[v];
  if (val->kind != IR_VALUE_NODE || val->node < 0) return LOOM_OK;
  const ir_node_t *n = &g->nodes[val->node];
  if (n->op != IR_OP_CONV2D) return LOOM_OK; /* the pools' kernels check their inputs */
  for (int d = 2; d < val->type.rank; d++)
    if (shape[d] <= 0)
      return loom_fail(LOOM_ERR_SHAPE, "%s: %s: the input is too small for the kernel, "
                       "padding and dilation: output dim %d would be %lld", what,
                       ir_ops[n->op].name, d, (long long)shape[d]);
  return LOOM_OK;
}
