/* Gradient rules of layout and indexing ops. Each is the op's adjoint
 * written with other layout ops: a slice goes back as a pad with zeros, a
 * pad as slices (plus folded borders for reflect and edge), a gather as a
 * scatter_add into zeros. */
#include <string.h>

#include "core/status.h"
#include "passes/grad.h"

/* ---- Helpers ------------------------------------------------------------- */

/* A copy: emitting nodes may move the graph's value array. */
static ir_type_t input_type(const grad_ctx_t *c, int i) {
  return *grad_type(c, c->node.in[i]);
}

static loom_status_t reshape_to(grad_ctx_t *c, int32_t v, int rank,
                                const ir_dim_t *dims, int32_t *out) {
  const ir_type_t *t = grad_type(c, v);
  if (t->rank == rank && !memcmp(t->dims, dims, sizeof *dims * (size_t)rank)) {
    *out = v; /* already that shape: a reshape would only hide v's producer */
    return LOOM_OK;
  }
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", rank, dims);
  return grad_op(c, IR_OP_RESHAPE, 1, &v, &a, out);
}

static loom_status_t zeros_of(grad_ctx_t *c, ir_type_t t, int32_t *out) {
  int32_t zero;
  LOOM_TRY(grad_scalar(c, 0, t.dtype, &zero));
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "shape", t.rank, t.dims);
  return grad_op(c, IR_OP_EXPAND, 1, &zero, &a, out);
}

/* v[start:end] along axis. */
static loom_status_t slice_axis(grad_ctx_t *c, int32_t v, int axis,
                                int64_t start, int64_t end, int32_t *out) {
  ir_attrs_t a = {0};
  int64_t ax = axis;
  ir_attrs_ints(&a, "starts", 1, &start);
  ir_attrs_ints(&a, "ends", 1, &end);
  ir_attrs_ints(&a, "axes", 1, &ax);
  return grad_op(c, IR_OP_SLICE, 1, &v, &a, out);
}

/* v with zeros before and after along axis. */
static loom_status_t pad_axis(grad_ctx_t *c, int32_t v, int axis,
                              int64_t before, int64_t after, int32_t *out) {
  if (before == 0 && after == 0) {
    *out = v;
    return LOOM_OK;
  }
  int rank = grad_type(c, v)->rank;
  int64_t pads[2 * LOOM_MAX_RANK] = {0};
  pads[axis] = before;
  pads[axis + rank] = after;
  ir_attrs_t a = {0};
  ir_attrs_ints(&a, "pads", 2 * rank, pads);
  return grad_op(c, IR_OP_PAD, 1, &v, &a, out);
}

static loom_status_t flip_axis(grad_ctx_t *c, int32_t v, int axis,
                               int32_t *out) {
  ir_attrs_t a = {0};
  int64_t ax = axis;
  ir_attrs_ints(&a, "axes", 1, &ax);
  return grad_op(c, IR_OP_FLIP, 1, &v, &a, out);
}

/* The sum of v along axis, kept with size 1. */
static loom_status_t sum_axis(grad_ctx_t *c, int32_t v, int axis,
                              int32_t *out) {
  ir_attrs_t a = {0};
  int64_t ax = axis;
  ir_attrs_ints(&a, "axes", 1, &ax);
  ir_attrs_int(&a, "keepdim", 1);
  return grad_op(c, IR_OP_SUM, 1, &v, &a, out);
}

/* Fails naming the op when a rule needs dim d constant. */
static loom_status_t need_const(const grad_ctx_t *c, ir_dim_t d, int axis) {
  if (ir_dim_is_const(d)) return LOOM_OK;
  char buf[64];
  return loom_fail(LOOM_ERR_SHAPE, "gradient of %s: axis %d has symbolic size "
                   "%s; the rule needs a known size there",
                   ir_ops[c->node.op].name, axis,
                   ir_dim_str(c->g, d, buf, sizeof buf));
}

static int norm_axis(int64_t axis, int rank) {
  return (int)(axis < 0 ? axis + rank : axis);
}

/* ---- Reshape, transpose, expand, flip, tile -------------------------------- */

/* Also squeeze and unsqueeze: only the shape changes. */
loom_status_t grad_reshape(grad_ctx_t *c) {
  ir_type_t x = input_type(c, 0);
  return reshape_to(c, c->dout[0], x.rank, x.dims, &c->din[0]);
}

loom_status_t grad_transpose(grad_ctx_t *c) {
  const int64_t *perm;
  int n = ir_attr_ints(c->node.attrs, "perm", &perm);
  ir_attrs_t a = {0};
  if (n >= 0) {
    int64_t inv[LOOM_MAX_RANK];
    for (int i = 0; i < n; i++) inv[norm_axis(perm[i], n)] = i;
    ir_attrs_ints(&a, "perm", n, inv);
  }
  return grad_op(c, IR_OP_TRANSPOSE, 1, &c->dout[0], &a, &c->din[0]);
}

loom_status_t grad_expand(grad_ctx_t *c) {
  ir_type_t x = input_type(c, 0);
  return grad_unbroadcast(c, c->dout[0], &x, &c->din[0]);
}

loom_status_t grad_flip(grad_ctx_t *c) {
  return grad_op(c, IR_OP_FLIP, 1, &c->dout[0], c->node.attrs, &c->din[0]);
}

/* Tiling repeats x whole, so along a tiled axis the output is (rep, dim)
 * laid out rep-major: sum over rep, one axis at a time. */
loom_status_t grad_tile(grad_ctx_t *c) {
  ir_type_t x = input_type(c, 0);
  const int64_t *reps;
  ir_attr_ints(c->node.attrs, "repeats", &reps);
  int32_t g = c->dout[0];
  for (int d = 0; d < x.rank; d++) {
    if (reps[d] == 1) continue;
    ir_type_t t = *grad_type(c, g);
    ir_dim_t split[LOOM_MAX_RANK + 1];
    memcpy(split, t.dims, sizeof(ir_dim_t) * (size_t)d);
    split[d] = reps[d];
    split[d + 1] = x.dims[d];
    memcpy(split + d + 2, t.dims + d + 1, sizeof(ir_dim_t) * (size_t)(t.rank - d - 1));
    if (t.rank + 1 > LOOM_MAX_RANK)
      return loom_fail(LOOM_ERR_SHAPE, "gradient of tile: rank %d leaves no "
                       "room to split a tiled axis (at most %d)", t.rank,
                       LOOM_MAX_RANK);
    int32_t r, s;
    LOOM_TRY(reshape_to(c, g, t.rank + 1, split, &r));
    int64_t ax = d;
    ir_attrs_t a = {0};
    ir_attrs_ints(&a, "axes", 1, &ax);
    LOOM_TRY(grad_op(c, IR_OP_SUM, 1, &r, &a, &s));
    g = s;
  }
  c->din[0] = g;
  return LOOM_OK;
}

/* ---- Slice --------------------------------------------------------------- */

/* The adjoint along one axis of a slice that took `count` entries from
 * `first` every `step`: spread g's entries `step` apart, then pad with
 * zeros to the input's size. */
static loom_status_t unslice_axis(grad_ctx_t *c, int32_t g, int axis,
                                  ir_dim_t dim, int64_t start, int64_t end,
                                  int64_t step, int32_t *out) {
  if (ir_dim_is_sym(dim)) { /* a whole axis: the shape rule allows no other */
    if (step < 0) return flip_axis(c, g, axis, out);
    *out = g;
    return LOOM_OK;
  }
  int64_t first, count;
  ir_slice_range(dim, start, end, step, &first, &count);
  if (count == 0) return pad_axis(c, g, axis, dim, 0, out);
  if (step < 0) {
    LOOM_TRY(flip_axis(c, g, axis, &g));
    first += (count - 1) * step;
    step = -step;
  }
  if (step > 1 && count > 1) {
    ir_type_t t = *grad_type(c, g);
    if (t.rank + 1 > LOOM_MAX_RANK)
      return loom_fail(LOOM_ERR_SHAPE, "gradient of slice: rank %d leaves no "
                       "room to spread a strided axis (at most %d)", t.rank,
                       LOOM_MAX_RANK);
    ir_dim_t dims[LOOM_MAX_RANK + 1];
    memcpy(dims, t.dims, sizeof(ir_dim_t) * (size_t)(axis + 1));
    dims[axis + 1] = 1;
    memcpy(dims + axis + 2, t.dims + axis + 1,
           sizeof(ir_dim_t) * (size_t)(t.rank - axis - 1));
    int32_t r, p, m;
    LOOM_TRY(reshape_to(c, g, t.rank + 1, dims, &r));
    LOOM_TRY(pad_axis(c, r, axis + 1, 0, step - 1, &p));
    t.dims[axis] = count * step;
    LOOM_TRY(reshape_to(c, p, t.rank, t.dims, &m));
    LOOM_TRY(slice_axis(c, m, axis, 0, (count - 1) * step + 1, &g));
  }
  int64_t span = (count - 1) * step + 1;
  return pad_axis(c, g, axis, first, dim - first - span, out);
}

loom_status_t grad_slice(grad_ctx_t *c) {
  ir_type_t x = input_type(c, 0);
  const int64_t *starts, *ends, *axes, *steps;
  int n = ir_attr_ints(c->node.attrs, "starts", &starts);
  ir_attr_ints(c->node.attrs, "ends", &ends);
  bool has_axes = ir_attr_ints(c->node.attrs, "axes", &axes) >= 0;
  bool has_steps = ir_attr_ints(c->node.attrs, "steps", &steps) >= 0;
  int32_t g = c->dout[0];
  for (int i = 0; i < n; i++) {
    int axis = has_axes ? norm_axis(axes[i], x.rank) : i;
    LOOM_TRY(unslice_axis(c, g, axis, x.dims[axis], starts[i], ends[i],
                          has_steps ? steps[i] : 1, &g));
  }
  c->din[0] = g;
  return LOOM_OK;
}

/* ---- Concat and split ------------------------------------------------------ */

loom_status_t grad_concat(grad_ctx_t *c) {
  int rank = input_type(c, 0).rank;
  int axis = norm_axis(ir_attr_int(c->node.attrs, "axis", 0), rank);
  if (c->node.n_in == 1) {
    c->din[0] = c->dout[0];
    return LOOM_OK;
  }
  int64_t at = 0;
  for (int i = 0; i < c->node.n_in; i++) {
    ir_dim_t size = input_type(c, i).dims[axis];
    LOOM_TRY(need_const(c, size, axis));
    LOOM_TRY(slice_axis(c, c->dout[0], axis, at, at + size, &c->din[i]));
    at += size;
  }
  return LOOM_OK;
}

/* Pieces that got no gradient contribute zeros. */
loom_status_t grad_split(grad_ctx_t *c) {
  int32_t parts[IR_MAX_ATTR_INTS];
  for (int k = 0; k < c->node.n_out; k++) {
    parts[k] = c->dout[k];
    if (parts[k] < 0)
      LOOM_TRY(zeros_of(c, *grad_type(c, c->node.out[k]), &parts[k]));
  }
  if (c->node.n_out == 1) {
    c->din[0] = parts[0];
    return LOOM_OK;
  }
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", ir_attr_int(c->node.attrs, "axis", 0));
  return grad_op(c, IR_OP_CONCAT, c->node.n_out, parts, &a, &c->din[0]);
}

/* ---- Pad -------------------------------------------------------------------- */

/* Reflect: the border entries came from x[1..b] and x[dim-1-e..dim-2],
 * mirrored; fold them back onto those places. */
static loom_status_t unpad_reflect(grad_ctx_t *c, int32_t g, int axis,
                                   int64_t dim, int64_t b, int64_t e,
                                   int32_t *acc) {
  int32_t part, flipped, placed;
  if (b > 0) {
    LOOM_TRY(slice_axis(c, g, axis, 0, b, &part));
    LOOM_TRY(flip_axis(c, part, axis, &flipped));
    LOOM_TRY(pad_axis(c, flipped, axis, 1, dim - 1 - b, &placed));
    LOOM_TRY(grad_binary(c, IR_OP_ADD, *acc, placed, acc));
  }
  if (e > 0) {
    LOOM_TRY(slice_axis(c, g, axis, b + dim, b + dim + e, &part));
    LOOM_TRY(flip_axis(c, part, axis, &flipped));
    LOOM_TRY(pad_axis(c, flipped, axis, dim - 1 - e, 1, &placed));
    LOOM_TRY(grad_binary(c, IR_OP_ADD, *acc, placed, acc));
  }
  return LOOM_OK;
}

/* Edge: every border entry repeats x[0] or x[dim-1]. */
static loom_status_t unpad_edge(grad_ctx_t *c, int32_t g, int axis,
                                int64_t dim, int64_t b, int64_t e,
                                int32_t *acc) {
  int32_t part, sum, placed;
  if (b > 0) {
    LOOM_TRY(slice_axis(c, g, axis, 0, b, &part));
    LOOM_TRY(sum_axis(c, part, axis, &sum));
    LOOM_TRY(pad_axis(c, sum, axis, 0, dim - 1, &placed));
    LOOM_TRY(grad_binary(c, IR_OP_ADD, *acc, placed, acc));
  }
  if (e > 0) {
    LOOM_TRY(slice_axis(c, g, axis, b + dim, b + dim + e, &part));
    LOOM_TRY(sum_axis(c, part, axis, &sum));
    LOOM_TRY(pad_axis(c, sum, axis, dim - 1, 0, &placed));
    LOOM_TRY(grad_binary(c, IR_OP_ADD, *acc, placed, acc));
  }
  return LOOM_OK;
}

/* Padding maps each axis on its own, so its adjoint undoes one axis at a
 * time: the crops (negative pads, made after the positive ones) given
 * back as zeros, then the middle, plus the borders folded back for
 * reflect and edge. */
static loom_status_t unpad_axis(grad_ctx_t *c, int32_t g, int axis,
                                ir_dim_t dim, int64_t b, int64_t e,
                                int64_t mode, int32_t *out) {
  if (b < 0 || e < 0) {
    LOOM_TRY(pad_axis(c, g, axis, b < 0 ? -b : 0, e < 0 ? -e : 0, &g));
    b = b < 0 ? 0 : b;
    e = e < 0 ? 0 : e;
  }
  if (b == 0 && e == 0) {
    *out = g;
    return LOOM_OK;
  }
  LOOM_TRY(need_const(c, dim, axis));
  LOOM_TRY(slice_axis(c, g, axis, b, b + dim, out));
  if (mode == LOOM_PAD_REFLECT) return unpad_reflect(c, g, axis, dim, b, e, out);
  if (mode == LOOM_PAD_EDGE) return unpad_edge(c, g, axis, dim, b, e, out);
  return LOOM_OK;
}

loom_status_t grad_pad(grad_ctx_t *c) {
  ir_type_t x = input_type(c, 0);
  const int64_t *pads;
  ir_attr_ints(c->node.attrs, "pads", &pads);
  int64_t mode = ir_attr_int(c->node.attrs, "mode", LOOM_PAD_CONSTANT);
  int32_t g = c->dout[0];
  for (int d = 0; d < x.rank; d++)
    LOOM_TRY(unpad_axis(c, g, d, x.dims[d], pads[d], pads[d + x.rank], mode,
                        &g));
  c->din[0] = g;
  return LOOM_OK;
}

/* ---- Gather, index_select, embedding, scatter_add ---------------------------- */

/* The product of dims[lo..hi). */
static loom_status_t dims_product(grad_ctx_t *c, const ir_dim_t *dims, int lo,
                                  int hi, ir_dim_t *out) {
  *out = 1;
  for (int d = lo; d < hi; d++) LOOM_TRY(ir_dim_mul(c->g, *out, dims[d], out));
  return LOOM_OK;
}

/* Gather's indices may count from the end; scatter_add's may not. */
static loom_status_t wrap_indices(grad_ctx_t *c, int32_t ind, ir_dim_t size,
                                  int axis, int32_t *out) {
  (void)axis;
  if (c->node.op == IR_OP_EMBEDDING) { /* rejects negative indices itself */
    *out = ind;
    return LOOM_OK;
  }
  /* A symbolic size (a trace's dim): indices are taken as they are; the
   * gradient's scatter_add rejects a negative one at run time. */
  if (!ir_dim_is_const(size)) {
    *out = ind;
    return LOOM_OK;
  }
  int32_t n;
  LOOM_TRY(grad_scalar(c, (double)size, grad_type(c, ind)->dtype, &n));
  return grad_binary(c, IR_OP_MOD, ind, n, out);
}

/* out = data[pre, indices, post]: viewing data as (P, A, Q) and dout as
 * (P, N, Q) with N the number of indices, the gradient is dout added into
 * zeros at rows indices along the middle axis. Embedding is a gather on
 * axis 0 of its weight; there P is 1 and dropped: (A, Q) and (N, Q),
 * the rows form the compiler fuses with what computes dout (a GNN's
 * scaled messages, c_index.c). */
loom_status_t grad_gather(grad_ctx_t *c) {
  ir_type_t data_ = input_type(c, 0), ind_ = input_type(c, 1);
  const ir_type_t *data = &data_, *ind = &ind_;
  int axis = norm_axis(ir_attr_int(c->node.attrs, "axis", 0), data->rank);
  int rank = axis == 0 ? 2 : 3, lead = 3 - rank; /* p3 and n3 from [lead] */
  ir_dim_t p3[3], n3[3], one3[3] = {1, 0, 1};
  LOOM_TRY(dims_product(c, data->dims, 0, axis, &p3[0]));
  LOOM_TRY(dims_product(c, data->dims, axis + 1, data->rank, &p3[2]));
  LOOM_TRY(dims_product(c, ind->dims, 0, ind->rank, &one3[1]));
  p3[1] = data->dims[axis];
  n3[0] = p3[0], n3[1] = one3[1], n3[2] = p3[2];
  int32_t idx, wrapped, spread, src, zeros, sum;
  LOOM_TRY(wrap_indices(c, c->node.in[1], data->dims[axis], axis, &wrapped));
  LOOM_TRY(reshape_to(c, wrapped, rank, one3 + lead, &idx));
  ir_attrs_t e = {0};
  ir_attrs_ints(&e, "shape", rank, n3 + lead);
  LOOM_TRY(grad_op(c, IR_OP_EXPAND, 1, &idx, &e, &spread));
  LOOM_TRY(reshape_to(c, c->dout[0], rank, n3 + lead, &src));
  ir_type_t z = {.dtype = data->dtype, .rank = rank};
  memcpy(z.dims, p3 + lead, sizeof *p3 * (size_t)rank);
  LOOM_TRY(zeros_of(c, z, &zeros));
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", rank - 2);
  int32_t in[3] = {zeros, spread, src};
  LOOM_TRY(grad_op(c, IR_OP_SCATTER_ADD, 3, in, &a, &sum));
  return reshape_to(c, sum, data->rank, data->dims, &c->din[0]);
}

/* The flat position in a tensor of type `into` of every entry of index
 * (entries along axis replaced by index's values): sum over dims of
 * coordinate * stride, coordinates from arange. */
static loom_status_t flat_positions(grad_ctx_t *c, int32_t index, int axis,
                                    const ir_type_t *into, int32_t *out) {
  ir_type_t it_ = *grad_type(c, index), into_ = *into;
  const ir_type_t *it = &it_;
  into = &into_;
  loom_dtype_t dt = it->dtype;
  int64_t stride = 1;
  *out = -1;
  for (int d = it->rank - 1; d >= 0; d--) {
    /* strides need the sizes after dim 0, aranges the index's off axis */
    if (d > 0) LOOM_TRY(need_const(c, into->dims[d], d));
    if (d != axis) LOOM_TRY(need_const(c, it->dims[d], d));
    int32_t coord = index, k, term;
    if (d != axis) {
      ir_attrs_t a = {0};
      ir_attrs_float(&a, "limit", (double)it->dims[d]);
      ir_attrs_int(&a, "dtype", dt);
      LOOM_TRY(grad_op(c, IR_OP_ARANGE, 0, NULL, &a, &coord));
      ir_dim_t shape[LOOM_MAX_RANK];
      for (int j = 0; j < it->rank; j++) shape[j] = j == d ? it->dims[d] : 1;
      LOOM_TRY(reshape_to(c, coord, it->rank, shape, &coord));
    }
    LOOM_TRY(grad_scalar(c, (double)stride, dt, &k));
    LOOM_TRY(grad_binary(c, IR_OP_MUL, coord, k, &term));
    if (*out < 0) *out = term;
    else LOOM_TRY(grad_binary(c, IR_OP_ADD, *out, term, out));
    if (d > 0) stride *= into->dims[d]; /* dim 0's size is never needed */
  }
  if (*out >= 0) return LOOM_OK;
  return grad_scalar(c, 0, dt, out);
}

/* The column that index repeats along every dim but axis, where the
 * graph makes index so (an expand, or an add of zeros, of a value of
 * index's rank and dtype whose dims are 1 off axis and index's on it):
 * its id, else -1. A graph neural network's edge index spread over the
 * features is one. */
static int32_t repeated_column(const grad_ctx_t *c, int32_t index, int axis) {
  const loom_graph_t *g = c->g;
  if (g->values[index].kind != IR_VALUE_NODE) return -1;
  int32_t col = ir_broadcast_source(g, &g->nodes[g->values[index].node]);
  if (col < 0) return -1;
  const ir_type_t *ct = &g->values[col].type, *it = &g->values[index].type;
  if (ct->rank != it->rank || ct->dtype != it->dtype) return -1;
  for (int d = 0; d < ct->rank; d++)
    if (ct->dims[d] != (d == axis ? it->dims[d] : 1)) return -1;
  return col;
}

/* Whether a and b have the same dims, but for dim skip (-1: none). */
static bool same_dims(const ir_type_t *a, const ir_type_t *b, int skip) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (d != skip && a->dims[d] != b->dims[d]) return false;
  return true;
}

/* out = self + src scattered: self's gradient passes through; src's is
 * dout read back at the same places (torch.gather), zero where index is
 * smaller than src. Where index repeats a column along every dim but
 * axis and has src's shape and self's off axis, that is dout's rows at
 * the column's entries (index_select): no (index-sized) flat positions
 * to compute and gather by. */
loom_status_t grad_scatter_add(grad_ctx_t *c) {
  ir_type_t self_ = input_type(c, 0), index_ = input_type(c, 1);
  ir_type_t src_ = input_type(c, 2);
  const ir_type_t *self = &self_, *index = &index_, *src = &src_;
  int axis = norm_axis(ir_attr_int(c->node.attrs, "axis", 0), self->rank);
  c->din[0] = c->dout[0];
  int32_t col = repeated_column(c, c->node.in[1], axis);
  if (col >= 0 && same_dims(index, src, -1) && same_dims(index, self, axis)) {
    int32_t entries;
    ir_dim_t n = index->dims[axis];
    LOOM_TRY(reshape_to(c, col, 1, &n, &entries));
    ir_attrs_t a = {0};
    ir_attrs_int(&a, "axis", axis);
    int32_t in[2] = {c->dout[0], entries};
    return grad_op(c, IR_OP_INDEX_SELECT, 2, in, &a, &c->din[2]);
  }
  int32_t pos, flat, taken, g;
  LOOM_TRY(flat_positions(c, c->node.in[1], axis, self, &pos));
  ir_dim_t all = -1;
  LOOM_TRY(reshape_to(c, c->dout[0], 1, &all, &flat));
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "axis", 0);
  int32_t in[2] = {flat, pos};
  LOOM_TRY(grad_op(c, IR_OP_GATHER, 2, in, &a, &taken));
  g = taken;
  for (int d = 0; d < src->rank; d++) {
    if (src->dims[d] == index->dims[d]) continue; /* nothing to pad */
    LOOM_TRY(need_const(c, src->dims[d], d));
    LOOM_TRY(pad_axis(c, g, d, 0, src->dims[d] - index->dims[d], &g));
  }
  c->din[2] = g;
  return LOOM_OK;
}
