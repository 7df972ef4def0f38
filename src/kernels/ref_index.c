/* Indexing ops: gather, scatter, embedding, one-hot: reference kernels. */
#include <string.h>

#include "kernels/ref.h"

static int64_t prod(int from, int to, const int64_t *shape) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= shape[d];
  return n;
}

/* Entry i of indices as a position in [0, size); negative entries count
 * from the end when allowed. */
static loom_status_t index_at(const ref_call_t *c, const loom_tensor_t *ind,
                              int64_t i, int64_t size, bool negative,
                              int64_t *out) {
  int64_t v = ind->dtype == LOOM_I64 ? ((const int64_t *)ind->data)[i] : ref_geti(ind, i);
  int64_t lo = negative ? -size : 0;
  *out = 0;
  if (v < lo || v >= size) return ir_index_error(c->node, v, i, size);
  *out = v < 0 ? v + size : v;
  return LOOM_OK;
}

/* Copies data's slices along axis, picked by indices, into out; viewed as
 * (outer, size, inner), out is (outer, n_indices, inner). */
static loom_status_t take(ref_call_t *c, int axis, bool negative) {
  const loom_tensor_t *data = c->in[0], *ind = c->in[1];
  loom_tensor_t *out = c->out[0];
  int64_t size = data->shape[axis];
  int64_t outer = prod(0, axis, data->shape);
  int64_t inner = prod(axis + 1, data->rank, data->shape);
  int64_t n_ind = loom_tensor_numel(ind);
  /* Every index is checked, even when the result is empty. */
  for (int64_t j = 0; j < n_ind; j++) {
    int64_t k;
    LOOM_TRY(index_at(c, ind, j, size, negative, &k));
  }
  size_t es = loom_dtype_size(data->dtype); /* out has data's dtype */
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n_ind; j++) {
      int64_t k;
      LOOM_TRY(index_at(c, ind, j, size, negative, &k));
      if (inner == 1 && es == 4) /* one element: a fixed-size copy, inlined */
        memcpy((char *)out->data + (o * n_ind + j) * 4,
               (const char *)data->data + (o * size + k) * 4, 4);
      else if (inner > 0) /* one slice: contiguous in both */
        memcpy((char *)out->data + (o * n_ind + j) * inner * (int64_t)es,
               (const char *)data->data + (o * size + k) * inner * (int64_t)es,
               (size_t)inner * es);
    }
  return LOOM_OK;
}

loom_status_t ref_gather(ref_call_t *c) {
  int64_t axis = ir_op_int(c->node->op, c->attrs, "axis");
  int rank = c->in[0]->rank;
  return take(c, (int)(axis < 0 ? axis + rank : axis), true);
}

/* PyTorch's embedding rejects negative indices. */
loom_status_t ref_embedding(ref_call_t *c) { return take(c, 0, false); }

loom_status_t ref_one_hot(ref_call_t *c) {
  const loom_tensor_t *ind = c->in[0];
  loom_tensor_t *out = c->out[0];
  int64_t depth = ir_attr_int(c->attrs, "depth", 0);
  int64_t n = loom_tensor_numel(ind);
  for (int64_t i = 0; i < n; i++) {
    int64_t k;
    LOOM_TRY(index_at(c, ind, i, depth, false, &k));
    ref_seti(out, i * depth + k, 1);
  }
  return LOOM_OK;
}

/* ---- scatter_add ----------------------------------------------------------- */

/* Flat position of multi-index idx in shape. */
static int64_t ravel(int rank, const int64_t *shape, const int64_t *idx) {
  int64_t flat = 0;
  for (int d = 0; d < rank; d++) flat = flat * shape[d] + idx[d];
  return flat;
}

static loom_status_t index_too_big(const ref_call_t *c, int d, const char *what,
                                   int64_t size) {
  return loom_fail(LOOM_ERR_SHAPE, "%s: dim %d of index (%lld) exceeds dim %d of %s (%lld)",
                   ref_name(c), d, (long long)c->in[1]->shape[d], d, what,
                   (long long)size);
}

/* The shape rule leaves symbolic dims to the run: check them here. */
static loom_status_t check_scatter_shapes(const ref_call_t *c, int axis) {
  const loom_tensor_t *self = c->in[0], *index = c->in[1], *src = c->in[2];
  for (int d = 0; d < self->rank; d++) {
    if (index->shape[d] > src->shape[d])
      return index_too_big(c, d, "src", src->shape[d]);
    if (d != axis && index->shape[d] > self->shape[d])
      return index_too_big(c, d, "self", self->shape[d]);
  }
  return LOOM_OK;
}

/* The common case of scatter_into, with the same sums in the same order:
 * f32 src and i64 index of one shape, which equals self's off the axis.
 * Viewed as (outer, n, inner), entry (o, j, q) goes to row index[o, j, q]
 * of self's (outer, size, inner). Returns false when it does not apply. */
static bool scatter_fast(ref_call_t *c, int axis, double *sums, loom_status_t *st) {
  const loom_tensor_t *self = c->in[0], *index = c->in[1], *src = c->in[2];
  if (src->dtype != LOOM_F32 || index->dtype != LOOM_I64) return false;
  for (int d = 0; d < index->rank; d++)
    if (index->shape[d] != src->shape[d] || (d != axis && index->shape[d] != self->shape[d]))
      return false;
  int64_t outer = prod(0, axis, index->shape), n = index->shape[axis];
  int64_t inner = prod(axis + 1, index->rank, index->shape), size = self->shape[axis];
  const int64_t *ind = index->data;
  const float *x = src->data;
  *st = LOOM_OK;
  for (int64_t o = 0, p = 0; o < outer; o++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t q = 0; q < inner; q++, p++) {
        if (ind[p] < 0 || ind[p] >= size) { /* index_at's message */
          int64_t k;
          *st = index_at(c, index, p, size, false, &k);
          return true;
        }
        sums[(o * size + ind[p]) * inner + q] += (double)x[p];
      }
  return true;
}

/* Adds src into acc (f64 or i64, shaped like self) at the positions of
 * index. Integers wrap, as repeated adds in the dtype would. */
static loom_status_t scatter_into(ref_call_t *c, int axis, loom_tensor_t *acc) {
  const loom_tensor_t *self = c->in[0], *index = c->in[1], *src = c->in[2];
  bool ints = !dtype_is_float(self->dtype);
  loom_status_t st;
  if (!ints && scatter_fast(c, axis, (double *)acc->data, &st)) return st;
  int64_t n = loom_tensor_numel(index), idx[LOOM_MAX_RANK] = {0}, at[LOOM_MAX_RANK];
  double *sums = ints ? NULL : (double *)acc->data; /* f64, contiguous */
  for (int64_t p = 0; p < n; p++) {
    /* idx walks index's positions in row-major order */
    if (p > 0)
      for (int d = index->rank - 1; d >= 0 && ++idx[d] == index->shape[d]; d--) idx[d] = 0;
    memcpy(at, idx, sizeof at); /* fixed size: inlined */
    int64_t s = ravel(src->rank, src->shape, at);
    LOOM_TRY(index_at(c, index, p, self->shape[axis], false, &at[axis]));
    int64_t t = ravel(self->rank, self->shape, at);
    if (ints)
      ref_seti(acc, t, (int64_t)((uint64_t)ref_geti(acc, t) + (uint64_t)ref_geti(src, s)));
    else if (src->dtype == LOOM_F32)
      sums[t] += (double)((const float *)src->data)[s];
    else
      sums[t] += ref_get(src, s);
  }
  return LOOM_OK;
}

/* Sums in double (floats) or int64 and rounds once into the result. */
loom_status_t ref_scatter_add(ref_call_t *c) {
  const loom_tensor_t *self = c->in[0];
  loom_tensor_t *out = c->out[0];
  int64_t axis = ir_attr_int(c->attrs, "axis", 0);
  if (axis < 0) axis += self->rank;
  LOOM_TRY(check_scatter_shapes(c, (int)axis));
  bool ints = !dtype_is_float(self->dtype);
  int64_t n = loom_tensor_numel(self);
  loom_tensor_t acc_view, *acc = &acc_view;
  void *data = ref_scratch(c, 8 * (size_t)n);
  if (!data) return loom_fail(LOOM_ERR_NOMEM, "scatter_add: out of memory for %lld sums", (long long)n);
  tensor_view_init(acc, ints ? LOOM_I64 : LOOM_F64, self->rank, self->shape, data);
  bool f32 = self->dtype == LOOM_F32; /* the common case, without dispatch */
  double *sums = data;
  for (int64_t i = 0; i < n; i++) {
    if (f32) sums[i] = ((const float *)self->data)[i];
    else if (ints) ref_seti(acc, i, ref_geti(self, i));
    else ref_set(acc, i, ref_get(self, i));
  }
  loom_status_t s = scatter_into(c, (int)axis, acc);
  for (int64_t i = 0; s == LOOM_OK && i < n; i++) {
    if (f32) ((float *)out->data)[i] = (float)sums[i];
    else if (ints) ref_seti(out, i, ref_geti(acc, i));
    else ref_set(out, i, ref_get(acc, i));
  }
  ref_scratch_release(c, data);
  return s;
}
