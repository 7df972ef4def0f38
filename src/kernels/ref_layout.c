/* Layout ops: reshape, permute, slice, concat, pad and friends: reference
 * kernels. They move elements without changing them, so they copy element
 * bytes, exact for every dtype; only pad's fill value is converted. */
#include <string.h>

#include "kernels/ref.h"

/* What a kernel needs to find each output element's source. */
typedef struct move {
  const ref_call_t *c;
  int axis;                     /* concat, split */
  int64_t perm[LOOM_MAX_RANK];  /* transpose: output dim i is input dim perm[i] */
  int64_t first[LOOM_MAX_RANK]; /* slice: first index; pad: pad before */
  int64_t step[LOOM_MAX_RANK];  /* slice */
  bool flip[LOOM_MAX_RANK];     /* flip: reversed dims */
  int64_t mode;                 /* pad */
  double fill;                  /* pad: the constant */
} move_t;

/* Turns idx, the multi-index of an element of output k, into that of its
 * source in input *src; false when the element is padding. */
typedef bool (*locate_fn)(const move_t *m, int k, int64_t *idx, int *src);

static int64_t ravel(const loom_tensor_t *t, const int64_t *idx) {
  int64_t flat = 0;
  for (int d = 0; d < t->rank; d++) flat = flat * t->shape[d] + idx[d];
  return flat;
}

static loom_status_t move_elements(const move_t *m, locate_fn locate) {
  const ref_call_t *c = m->c;
  int64_t idx[LOOM_MAX_RANK], pos[LOOM_MAX_RANK];
  for (int k = 0; k < c->n_out; k++) {
    loom_tensor_t *y = c->out[k];
    int64_t n = loom_tensor_numel(y);
    for (int d = 0; d < LOOM_MAX_RANK; d++) pos[d] = 0;
    for (int64_t i = 0; i < n; i++) {
      /* pos: element i's multi-index, stepped in row-major order */
      if (i > 0)
        for (int d = y->rank - 1; d >= 0 && ++pos[d] == y->shape[d]; d--) pos[d] = 0;
      memcpy(idx, pos, sizeof idx); /* fixed size: inlined */
      int src = 0;
      if (!locate(m, k, idx, &src)) ref_set(y, i, m->fill);
      else if (y->dtype == LOOM_F32 || y->dtype == LOOM_I32) /* fixed size: inlined */
        memcpy((char *)y->data + i * 4,
               (const char *)c->in[src]->data + ravel(c->in[src], idx) * 4, 4);
      else if (y->dtype == LOOM_F64 || y->dtype == LOOM_I64)
        memcpy((char *)y->data + i * 8,
               (const char *)c->in[src]->data + ravel(c->in[src], idx) * 8, 8);
      else ref_copy_elem(y, i, c->in[src], ravel(c->in[src], idx));
    }
  }
  return LOOM_OK;
}

/* The listed axes of attribute name, made non-negative, as flags. */
static void axis_flags(const ref_call_t *c, const char *name, bool *flags) {
  const int64_t *axes;
  int n = ir_attr_ints(c->attrs, name, &axes);
  int rank = c->in[0]->rank;
  for (int i = 0; i < n; i++) flags[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
}

static int attr_axis(const ref_call_t *c) {
  int64_t axis = ir_attr_int(c->attrs, "axis", 0);
  return (int)(axis < 0 ? axis + c->in[0]->rank : axis);
}

/* ---- reshape (also squeeze and unsqueeze) -------------------------------- */

/* Row-major order is unchanged, so the data is copied as is. */
loom_status_t ref_reshape(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(x);
  if (n != loom_tensor_numel(y))
    return loom_fail(LOOM_ERR_VALUE, "%s: input has %lld elements, output %lld",
                     ref_name(c), (long long)n, (long long)loom_tensor_numel(y));
  if (n > 0) memcpy(y->data, x->data, (size_t)n * loom_dtype_size(x->dtype));
  return LOOM_OK;
}

/* ---- transpose ------------------------------------------------------------ */

static bool from_transpose(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  (void)src;
  int rank = m->c->in[0]->rank;
  int64_t in[LOOM_MAX_RANK];
  for (int i = 0; i < rank; i++) in[m->perm[i]] = idx[i];
  memcpy(idx, in, sizeof(int64_t) * (size_t)rank);
  return true;
}

loom_status_t ref_transpose(ref_call_t *c) {
  move_t m = {.c = c};
  int rank = c->in[0]->rank;
  const int64_t *perm;
  if (ir_attr_ints(c->attrs, "perm", &perm) < 0)
    for (int i = 0; i < rank; i++) m.perm[i] = rank - 1 - i;
  else
    for (int i = 0; i < rank; i++) m.perm[i] = perm[i] < 0 ? perm[i] + rank : perm[i];
  return move_elements(&m, from_transpose);
}

/* ---- expand, tile, flip ----------------------------------------------------- */

/* The input's dims align with the output's last ones; size-1 dims repeat. */
static bool from_expand(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  (void)src;
  const loom_tensor_t *x = m->c->in[0];
  int offset = m->c->out[0]->rank - x->rank;
  for (int d = 0; d < x->rank; d++) idx[d] = x->shape[d] == 1 ? 0 : idx[d + offset];
  return true;
}

/* Expand by strides, a row at a time: each output dim reads the input at
 * a stride, 0 where the input's dim is 1 or missing; the innermost dim is
 * then a copied row (stride 1) or one repeated element (stride 0). */
static void expand_rows(const loom_tensor_t *x, loom_tensor_t *y) {
  size_t es = loom_dtype_size(x->dtype);
  int off = y->rank - x->rank, last = y->rank - 1;
  int64_t stride[LOOM_MAX_RANK] = {0}, pos[LOOM_MAX_RANK] = {0}, s = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    stride[d + off] = x->shape[d] == 1 ? 0 : s;
    s *= x->shape[d];
  }
  int64_t len = y->shape[last], rows = loom_tensor_numel(y) / len, from = 0;
  char *out = y->data;
  for (int64_t r = 0; r < rows; r++, out += len * (int64_t)es) {
    const char *in = (const char *)x->data + from * (int64_t)es;
    if (stride[last]) memcpy(out, in, (size_t)len * es);
    else if (es == 8) /* fixed sizes: inlined copies */
      for (int64_t j = 0; j < len; j++) memcpy(out + j * 8, in, 8);
    else if (es == 4)
      for (int64_t j = 0; j < len; j++) memcpy(out + j * 4, in, 4);
    else
      for (int64_t j = 0; j < len; j++) memcpy(out + j * (int64_t)es, in, es);
    for (int d = last - 1; d >= 0; d--) { /* the next row's position */
      from += stride[d];
      if (++pos[d] < y->shape[d]) break;
      from -= stride[d] * y->shape[d];
      pos[d] = 0;
    }
  }
}

loom_status_t ref_expand(ref_call_t *c) {
  if (c->out[0]->rank >= 1 && loom_tensor_numel(c->out[0]) > 0) {
    expand_rows(c->in[0], c->out[0]);
    return LOOM_OK;
  }
  move_t m = {.c = c};
  return move_elements(&m, from_expand);
}

static bool from_tile(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  (void)src;
  const loom_tensor_t *x = m->c->in[0];
  for (int d = 0; d < x->rank; d++) idx[d] %= x->shape[d];
  return true;
}

loom_status_t ref_tile(ref_call_t *c) {
  move_t m = {.c = c};
  return move_elements(&m, from_tile);
}

static bool from_flip(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  (void)src;
  const loom_tensor_t *x = m->c->in[0];
  for (int d = 0; d < x->rank; d++)
    if (m->flip[d]) idx[d] = x->shape[d] - 1 - idx[d];
  return true;
}

loom_status_t ref_flip(ref_call_t *c) {
  move_t m = {.c = c};
  axis_flags(c, "axes", m.flip);
  return move_elements(&m, from_flip);
}

/* ---- slice ---------------------------------------------------------------- */

static bool from_slice(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  (void)src;
  for (int d = 0; d < m->c->in[0]->rank; d++) idx[d] = m->first[d] + idx[d] * m->step[d];
  return true;
}

loom_status_t ref_slice_window(const ref_call_t *c, int64_t *first, int64_t *step) {
  const loom_tensor_t *x = c->in[0];
  for (int d = 0; d < x->rank; d++) {
    first[d] = 0;
    step[d] = 1;
  }
  ir_slice_bound_t b[IR_MAX_ATTR_INTS];
  int n = ir_slice_bounds(c->attrs, x->rank, b);
  for (int i = 0; i < n; i++) {
    int d = b[i].axis;
    int64_t count;
    step[d] = b[i].step;
    ir_slice_range(x->shape[d], b[i].start, b[i].end, step[d], &first[d], &count);
    if (count != c->out[0]->shape[d])
      return loom_fail(LOOM_ERR_VALUE, "slice: axis %d takes %lld elements, "
                       "the output has %lld", d, (long long)count,
                       (long long)c->out[0]->shape[d]);
  }
  return LOOM_OK;
}

loom_status_t ref_slice(ref_call_t *c) {
  move_t m = {.c = c};
  LOOM_TRY(ref_slice_window(c, m.first, m.step));
  return move_elements(&m, from_slice);
}

/* ---- concat, split -------------------------------------------------------- */

/* The input holding position idx[axis] of the joined axis. */
static bool from_concat(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  const ref_call_t *c = m->c;
  int i = 0;
  while (i < c->n_in - 1 && idx[m->axis] >= c->in[i]->shape[m->axis])
    idx[m->axis] -= c->in[i++]->shape[m->axis];
  *src = i;
  return true;
}

loom_status_t ref_concat(ref_call_t *c) {
  move_t m = {.c = c, .axis = attr_axis(c)};
  return move_elements(&m, from_concat);
}

/* Output k starts where the outputs before it end. */
static bool from_split(const move_t *m, int k, int64_t *idx, int *src) {
  (void)src;
  for (int j = 0; j < k; j++) idx[m->axis] += m->c->out[j]->shape[m->axis];
  return true;
}

loom_status_t ref_split(ref_call_t *c) {
  move_t m = {.c = c, .axis = attr_axis(c)};
  return move_elements(&m, from_split);
}

/* ---- pad -------------------------------------------------------------------- */

/* NumPy 'reflect' mirrors about the edge without repeating it; 'edge'
 * repeats the edge. A negative pad crops: output index i reads the padded
 * input at i - first, as if the positive pads were made first (PyTorch's
 * F.pad). */
static bool from_pad(const move_t *m, int k, int64_t *idx, int *src) {
  (void)k;
  (void)src;
  const loom_tensor_t *x = m->c->in[0];
  for (int d = 0; d < x->rank; d++) {
    int64_t j = idx[d] - m->first[d], n = x->shape[d];
    if (j >= 0 && j < n) idx[d] = j;
    else if (m->mode == LOOM_PAD_CONSTANT) return false;
    else if (m->mode == LOOM_PAD_REFLECT) idx[d] = j < 0 ? -j : 2 * (n - 1) - j;
    else idx[d] = j < 0 ? 0 : n - 1;
  }
  return true;
}

/* Sizes that were symbolic when the shape rule ran are checked here. */
static loom_status_t check_pad_fits(const move_t *m, const int64_t *pads) {
  const loom_tensor_t *x = m->c->in[0];
  for (int d = 0; d < x->rank; d++) {
    int64_t most = pads[d] > pads[d + x->rank] ? pads[d] : pads[d + x->rank];
    if (most <= 0 || m->mode == LOOM_PAD_CONSTANT) continue;
    if (m->mode == LOOM_PAD_REFLECT && most >= x->shape[d])
      return loom_fail(LOOM_ERR_VALUE, "pad: reflect pad %lld on dim %d is too "
                       "large for its size %lld", (long long)most, d,
                       (long long)x->shape[d]);
    if (m->mode == LOOM_PAD_EDGE && x->shape[d] == 0)
      return loom_fail(LOOM_ERR_VALUE, "pad: edge pad on dim %d of size 0", d);
  }
  return LOOM_OK;
}

loom_status_t ref_pad(ref_call_t *c) {
  const int64_t *pads;
  ir_attr_ints(c->attrs, "pads", &pads);
  move_t m = {.c = c,
              .mode = ir_op_int(c->node->op, c->attrs, "mode"),
              .fill = ir_op_float(c->node->op, c->attrs, "value")};
  for (int d = 0; d < c->in[0]->rank; d++) m.first[d] = pads[d];
  LOOM_TRY(check_pad_fits(&m, pads));
  return move_elements(&m, from_pad);
}
