#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/storage.h"

int64_t shape_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

bool shape_size(int rank, const int64_t *shape, size_t elem_size,
                int64_t *numel, int64_t *bytes) {
  int64_t nonzero = 1, es = (int64_t)elem_size, b;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) return false;
    if (shape[i] == 0) empty = true;
    else if (__builtin_mul_overflow(nonzero, shape[i], &nonzero)) return false;
  }
  if (__builtin_mul_overflow(nonzero, es, &b)) return false;
  if (numel) *numel = empty ? 0 : nonzero;
  if (bytes) *bytes = empty ? 0 : b;
  return true;
}

const char *shape_size_why(int rank, const int64_t *shape, size_t elem_size,
                           char *buf, size_t size) {
  double n = 1;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) {
      snprintf(buf, size, "dim %d is negative (%lld)", i, (long long)shape[i]);
      return buf;
    }
    if (shape[i] == 0) empty = true;
    else n *= (double)shape[i];
  }
  snprintf(buf, size, "%s%.3g elements of %zu bytes: too large, more bytes than int64 counts",
           empty ? "its nonzero dims make " : "", n, elem_size);
  return buf;
}

const char *shape_str(int rank, const int64_t *shape, char *buf,
                      size_t size) {
  size_t used = (size_t)snprintf(buf, size, "(");
  for (int i = 0; i < rank && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld",
                             i ? ", " : "", (long long)shape[i]);
  if (used < size) snprintf(buf + used, size - used, ")");
  return buf;
}

loom_status_t tensor_check_shape(const char *what, loom_dtype_t dtype,
                                 int rank, const int64_t *shape) {
  if (!dtype_valid(dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s: invalid dtype %d", what, (int)dtype);
  if (rank < 0 || rank > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_SHAPE, "%s: rank %d is outside 0..%d", what,
                     rank, LOOM_MAX_RANK);
  if (rank > 0 && !shape)
    return loom_fail(LOOM_ERR_INVALID, "%s: shape is null for rank %d", what,
                     rank);
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0)
      return loom_fail(LOOM_ERR_SHAPE, "%s: dim %d is negative (%lld)", what,
                       i, (long long)shape[i]);
  size_t es = loom_dtype_size(dtype);
  if (!shape_size(rank, shape, es, NULL, NULL)) {
    char sh[160], why[128];
    return loom_fail(LOOM_ERR_SHAPE, "%s: %s %s: %s", what, loom_dtype_name(dtype),
                     shape_str(rank, shape, sh, sizeof sh),
                     shape_size_why(rank, shape, es, why, sizeof why));
  }
  return LOOM_OK;
}

static void set_contiguous_strides(loom_tensor_t *t) {
  int64_t stride = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    t->strides[i] = stride;
    stride *= t->shape[i];
  }
}

void tensor_view_init(loom_tensor_t *t, loom_dtype_t dtype, int rank,
                      const int64_t *shape, void *data) {
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  set_contiguous_strides(t);
  t->data = data;
}

void tensor_reshape_in_place(loom_tensor_t *t, int rank, const int64_t *shape) {
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  set_contiguous_strides(t);
}

static loom_status_t new_tensor(loom_dtype_t dtype, int rank, const int64_t *shape,
                               bool zero, loom_tensor_t **out) {
  LOOM_TRY(tensor_check_shape("tensor", dtype, rank, shape));
  loom_tensor_t *t = core_calloc(1, sizeof *t);
  if (!t) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a tensor");
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  set_contiguous_strides(t);
  size_t bytes = (size_t)shape_numel(rank, shape) * loom_dtype_size(dtype);
  t->data = core_storage_alloc(bytes, zero);
  if (!t->data) {
    core_free(t);
    char buf[160];
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a %s tensor %s (%zu bytes)",
                     loom_dtype_name(dtype), shape_str(rank, shape, buf, sizeof buf),
                     bytes);
  }
  t->owns_data = true;
  *out = t;
  return LOOM_OK;
}

loom_status_t tensor_new(loom_dtype_t dtype, int rank, const int64_t *shape,
                         loom_tensor_t **out) {
  return new_tensor(dtype, rank, shape, true, out);
}

loom_status_t tensor_new_uninit(loom_dtype_t dtype, int rank, const int64_t *shape,
                                loom_tensor_t **out) {
  return new_tensor(dtype, rank, shape, false, out);
}

loom_status_t loom_tensor_create(loom_dtype_t dtype, int rank,
                                 const int64_t *shape, loom_tensor_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  return tensor_new(dtype, rank, shape, out);
}

/* Whether the farthest element of a strided view, in bytes, fits in
 * int64 (an empty view reaches nothing). */
static bool strides_fit(int rank, const int64_t *shape, const int64_t *strides,
                        size_t elem_size) {
  int64_t reach = 0, step;
  for (int i = 0; i < rank; i++)
    if (shape[i] == 0) return true;
  for (int i = 0; i < rank; i++) {
    if (strides[i] == INT64_MIN) return false;
    int64_t stride = strides[i] < 0 ? -strides[i] : strides[i];
    if (__builtin_mul_overflow(shape[i] - 1, stride, &step) ||
        __builtin_add_overflow(reach, step, &reach))
      return false;
  }
  return !__builtin_mul_overflow(reach, (int64_t)elem_size, &step);
}

loom_status_t loom_tensor_wrap(loom_dtype_t dtype, int rank,
                               const int64_t *shape, const int64_t *strides,
                               void *data, loom_tensor_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_TRY(tensor_check_shape("loom_tensor_wrap", dtype, rank, shape));
  if (!data && shape_numel(rank, shape) > 0)
    return loom_fail(LOOM_ERR_INVALID, "loom_tensor_wrap: data is null");
  if (strides && !strides_fit(rank, shape, strides, loom_dtype_size(dtype))) {
    char sh[160];
    return loom_fail(LOOM_ERR_SHAPE, "loom_tensor_wrap: the strides over shape %s reach "
                     "beyond the byte offsets int64 counts",
                     shape_str(rank, shape, sh, sizeof sh));
  }
  loom_tensor_t *t = core_calloc(1, sizeof *t);
  if (!t) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a tensor");
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  set_contiguous_strides(t);
  if (strides)
    for (int i = 0; i < rank; i++) t->strides[i] = strides[i];
  t->data = data;
  *out = t;
  return LOOM_OK;
}

loom_status_t loom_tensor_from_data(loom_dtype_t dtype, int rank,
                                    const int64_t *shape, const void *data,
                                    size_t bytes, loom_tensor_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  loom_tensor_t *t;
  LOOM_TRY(tensor_new_uninit(dtype, rank, shape, &t)); /* every byte written, or t freed */
  loom_status_t s = loom_tensor_write(t, data, bytes);
  if (s != LOOM_OK) {
    loom_tensor_destroy(t);
    return s;
  }
  *out = t;
  return LOOM_OK;
}

void loom_tensor_destroy(loom_tensor_t *t) {
  if (!t) return;
  if (t->owns_data) core_storage_free(t->data);
  core_free(t);
}

loom_dtype_t loom_tensor_dtype(const loom_tensor_t *t) {
  return t ? t->dtype : LOOM_F32;
}

int loom_tensor_rank(const loom_tensor_t *t) { return t ? t->rank : -1; }

loom_device_t loom_tensor_device(const loom_tensor_t *t) {
  return t ? t->device : LOOM_DEVICE_CPU;
}

int64_t loom_tensor_dim(const loom_tensor_t *t, int i) {
  if (!t || i < 0 || i >= t->rank) return -1;
  return t->shape[i];
}

int64_t loom_tensor_numel(const loom_tensor_t *t) {
  return t ? shape_numel(t->rank, t->shape) : 0;
}

void *loom_tensor_data(const loom_tensor_t *t) { return t ? t->data : NULL; }

bool tensor_is_contiguous(const loom_tensor_t *t) {
  int64_t stride = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != stride) return false;
    stride *= t->shape[i];
  }
  return true;
}

int64_t tensor_offset(const loom_tensor_t *t, int64_t i) {
  int64_t off = 0;
  for (int d = t->rank - 1; d >= 0; d--) {
    int64_t n = t->shape[d];
    off += (i % n) * t->strides[d];
    i /= n;
  }
  return off * (int64_t)loom_dtype_size(t->dtype);
}

/* Copies elements between two tensors of equal dtype and numel, each in
 * row-major order of its own shape. */
static void copy_elements(const loom_tensor_t *src, bool src_dense,
                          void *dst_dense, const loom_tensor_t *dst) {
  size_t es = loom_dtype_size(src->dtype);
  int64_t n = loom_tensor_numel(src ? src : dst);
  for (int64_t i = 0; i < n; i++) {
    const char *from = src_dense ? (const char *)src->data + i * (int64_t)es
                                 : (const char *)src->data + tensor_offset(src, i);
    char *to = dst ? (char *)dst->data + tensor_offset(dst, i)
                   : (char *)dst_dense + i * (int64_t)es;
    memcpy(to, from, es);
  }
}

loom_status_t loom_tensor_read(const loom_tensor_t *t, void *dst,
                               size_t dst_bytes) {
  LOOM_CHECK_ARG(t);
  size_t need = (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype);
  if (need == 0) return LOOM_OK;
  LOOM_CHECK_ARG(dst);
  if (dst_bytes < need)
    return loom_fail(LOOM_ERR_INVALID,
                     "loom_tensor_read: buffer of %zu bytes is smaller than "
                     "the tensor's %zu",
                     dst_bytes, need);
  if (tensor_is_contiguous(t)) memcpy(dst, t->data, need);
  else copy_elements(t, false, dst, NULL);
  return LOOM_OK;
}

loom_status_t loom_tensor_write(loom_tensor_t *t, const void *src,
                                size_t src_bytes) {
  LOOM_CHECK_ARG(t);
  size_t need = (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype);
  if (need == 0) return LOOM_OK;
  LOOM_CHECK_ARG(src);
  if (src_bytes != need)
    return loom_fail(LOOM_ERR_INVALID,
                     "loom_tensor_write: %zu bytes given, the tensor holds %zu",
                     src_bytes, need);
  if (tensor_is_contiguous(t)) {
    memcpy(t->data, src, need);
    return LOOM_OK;
  }
  loom_tensor_t dense = *t;
  dense.data = (void *)src;
  copy_elements(&dense, true, NULL, t);
  return LOOM_OK;
}

loom_status_t loom_tensor_get_f64(const loom_tensor_t *t, int64_t i,
                                  double *out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(out);
  int64_t n = loom_tensor_numel(t);
  if (i < 0 || i >= n)
    return loom_fail(LOOM_ERR_VALUE,
                     "loom_tensor_get_f64: index %lld outside 0..%lld",
                     (long long)i, (long long)n - 1);
  *out = dtype_load_f64(t->dtype, (const char *)t->data + tensor_offset(t, i));
  return LOOM_OK;
}

loom_status_t tensor_contiguous_copy(const loom_tensor_t *t,
                                     loom_tensor_t **out) {
  loom_tensor_t *c;
  LOOM_TRY(tensor_new_uninit(t->dtype, t->rank, t->shape, &c)); /* every element copied */
  if (tensor_is_contiguous(t))
    memcpy(c->data, t->data,
           (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype));
  else copy_elements(t, false, c->data, NULL);
  *out = c;
  return LOOM_OK;
}

loom_status_t loom_tensor_copy(const loom_tensor_t *t, loom_tensor_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_CHECK_ARG(t);
  return tensor_contiguous_copy(t, out);
}
