/* ONNX TensorProtos as Loom tensors: element types, the data's five
 * encodings (raw little-endian bytes, the typed repeated fields, external
 * files), and the checks that keep a corrupt model from reading past its
 * data. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/status.h"
#include "frontend/onnx/onnx_import.h"

/* ONNX's element type numbers (TensorProto.DataType). */
enum {
  OX_FLOAT = 1, OX_UINT8, OX_INT8, OX_UINT16, OX_INT16, OX_INT32, OX_INT64, OX_STRING, OX_BOOL,
  OX_FLOAT16, OX_DOUBLE, OX_UINT32, OX_UINT64, OX_COMPLEX64, OX_COMPLEX128, OX_BFLOAT16
};

static const char *const type_names[] = {
    "undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool",
    "float16", "double", "uint32", "uint64", "complex64", "complex128", "bfloat16"};

const char *ox_onnx_type_name(int32_t t) {
  return t >= 0 && t <= OX_BFLOAT16 ? type_names[t] : "unknown";
}

int ox_dtype_from_onnx(int32_t t, loom_dtype_t *out) {
  switch (t) {
    case OX_FLOAT: *out = LOOM_F32; return 1;
    case OX_DOUBLE: *out = LOOM_F64; return 1;
    case OX_FLOAT16: *out = LOOM_F16; return 1;
    case OX_BFLOAT16: *out = LOOM_BF16; return 1;
    case OX_INT8: *out = LOOM_I8; return 1;
    case OX_UINT8: case OX_UINT16: case OX_INT16: case OX_INT32: *out = LOOM_I32; return 1;
    case OX_UINT32: case OX_UINT64: case OX_INT64: *out = LOOM_I64; return 1;
    case OX_BOOL: *out = LOOM_BOOL; return 1;
    default: return 0;
  }
}

/* Bytes per element as ONNX stores the type raw. */
static size_t onnx_size(int32_t t) {
  switch (t) {
    case OX_UINT8: case OX_INT8: case OX_BOOL: return 1;
    case OX_UINT16: case OX_INT16: case OX_FLOAT16: case OX_BFLOAT16: return 2;
    case OX_FLOAT: case OX_INT32: case OX_UINT32: return 4;
    default: return 8;
  }
}

/* Element i of raw little-endian data of ONNX type t, stored as dst's type. */
static void put_raw(void *dst, int64_t i, const uint8_t *src, int32_t t) {
  switch (t) {
    case OX_UINT8: ((int32_t *)dst)[i] = src[i]; break;
    case OX_UINT16: { uint16_t v; memcpy(&v, src + 2 * i, 2); ((int32_t *)dst)[i] = v; break; }
    case OX_INT16: { int16_t v; memcpy(&v, src + 2 * i, 2); ((int32_t *)dst)[i] = v; break; }
    case OX_UINT32: { uint32_t v; memcpy(&v, src + 4 * i, 4); ((int64_t *)dst)[i] = v; break; }
    case OX_BOOL: ((uint8_t *)dst)[i] = src[i] != 0; break;
    default: {
      size_t s = onnx_size(t);
      memcpy((uint8_t *)dst + s * (size_t)i, src + s * (size_t)i, s);
    }
  }
}

/* Element i from the typed repeated field that holds type t. */
/* How many values the typed repeated field of type t holds. */
static size_t typed_count(const Onnx__TensorProto *p, int32_t t) {
  switch (t) {
    case OX_FLOAT: return p->n_float_data;
    case OX_DOUBLE: return p->n_double_data;
    case OX_INT64: return p->n_int64_data;
    case OX_UINT32: case OX_UINT64: return p->n_uint64_data;
    default: return p->n_int32_data;
  }
}

static void put_typed(void *dst, int64_t count, const Onnx__TensorProto *p, int32_t t) {
  for (int64_t i = 0; i < count; i++) {
    switch (t) {
      case OX_FLOAT: ((float *)dst)[i] = p->float_data[i]; break;
      case OX_DOUBLE: ((double *)dst)[i] = p->double_data[i]; break;
      case OX_INT64: ((int64_t *)dst)[i] = p->int64_data[i]; break;
      case OX_UINT32: case OX_UINT64: ((int64_t *)dst)[i] = (int64_t)p->uint64_data[i]; break;
      case OX_INT8: ((int8_t *)dst)[i] = (int8_t)p->int32_data[i]; break;
      case OX_BOOL: ((uint8_t *)dst)[i] = p->int32_data[i] != 0; break;
      case OX_FLOAT16: case OX_BFLOAT16: ((uint16_t *)dst)[i] = (uint16_t)p->int32_data[i]; break;
      default: ((int32_t *)dst)[i] = p->int32_data[i]; /* int32, and the widened ones */
    }
  }
}

static const char *external_key(const Onnx__TensorProto *p, const char *key) {
  for (size_t i = 0; i < p->n_external_data; i++)
    if (p->external_data[i]->key && !strcmp(p->external_data[i]->key, key))
      return p->external_data[i]->value;
  return NULL;
}

/* An external-data number (offset, length): decimal digits only. */
static loom_status_t external_number(const Onnx__TensorProto *p, const char *key,
                                     uint64_t dflt, uint64_t *out) {
  const char *s = external_key(p, key);
  *out = dflt;
  if (!s) return LOOM_OK;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || s[0] == '-' || s[0] == '+' || s[0] == ' ')
    return loom_fail(LOOM_ERR_FORMAT, "external data %s '%s' is not a byte count", key, s);
  *out = v;
  return LOOM_OK;
}

/* The bytes of an external tensor: file `location` under base_dir (and
 * inside it once links are followed), from `offset`, `length` bytes (the
 * rest of the file when absent). */
static loom_status_t read_external(const Onnx__TensorProto *p, const char *base_dir, size_t want,
                                   void **data, size_t *size) {
  const char *loc = external_key(p, "location");
  if (!loc || !*loc) return loom_fail(LOOM_ERR_FORMAT, "external data without a location");
  if (loc[0] == '/' || strstr(loc, ".."))
    return loom_fail(LOOM_ERR_FORMAT, "external data location '%s' leaves the model's folder", loc);
  uint64_t off, len;
  LOOM_TRY(external_number(p, "offset", 0, &off));
  LOOM_TRY(external_number(p, "length", (uint64_t)want, &len));
  char path[PATH_MAX], real_dir[PATH_MAX], real[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", base_dir ? base_dir : ".", loc);
  if (!realpath(base_dir ? base_dir : ".", real_dir))
    return loom_fail(LOOM_ERR_IO, "external data: the model's folder %s: %s",
                     base_dir ? base_dir : ".", strerror(errno));
  if (!realpath(path, real))
    return loom_fail(LOOM_ERR_IO, "external data %s: %s", path, strerror(errno));
  size_t n = strlen(real_dir);
  if (strncmp(real, real_dir, n) || (real[n] != '/' && strcmp(real_dir, "/")))
    return loom_fail(LOOM_ERR_FORMAT, "external data location '%s' leaves the model's folder "
                     "(through a link, to %s)", loc, real);
  return core_read_file_range(real, off, len, data, size);
}

loom_status_t ox_tensor_from_proto(const Onnx__TensorProto *p, const char *base_dir,
                                   loom_tensor_t **out) {
  *out = NULL;
  int32_t t = p->has_data_type ? p->data_type : 0;
  loom_dtype_t dt;
  if (!ox_dtype_from_onnx(t, &dt))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "element type %s is not supported", ox_onnx_type_name(t));
  if (p->n_dims > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "rank %zu is over Loom's %d", p->n_dims, LOOM_MAX_RANK);
  if (p->segment) return loom_fail(LOOM_ERR_UNSUPPORTED, "segmented tensors are not supported");
  int64_t count = 1;
  for (size_t d = 0; d < p->n_dims; d++) {
    if (p->dims[d] < 0 || (p->dims[d] && count > ((int64_t)1 << 40) / p->dims[d]))
      return loom_fail(LOOM_ERR_FORMAT, "dim %zu is %lld: negative, or the tensor's elements "
                       "pass 2^40", d, (long long)p->dims[d]);
    count *= p->dims[d];
  }
  size_t want = (size_t)count * onnx_size(t);
  /* The data's length is checked before the tensor is allocated, so that
   * a corrupt header cannot ask for memory its data does not fill. */
  const uint8_t *raw = NULL;
  size_t raw_size = 0;
  void *external = NULL;
  if (p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    LOOM_TRY(read_external(p, base_dir, want, &external, &raw_size));
    raw = external;
  } else if (p->has_raw_data) {
    raw = p->raw_data.data;
    raw_size = p->raw_data.len;
  }
  loom_status_t st = LOOM_OK;
  if (raw && raw_size != want)
    st = loom_fail(LOOM_ERR_FORMAT, "%zu bytes of data for %lld elements of %s (%zu bytes)",
                   raw_size, (long long)count, ox_onnx_type_name(t), want);
  else if (!raw && (int64_t)typed_count(p, t) != count)
    st = loom_fail(LOOM_ERR_FORMAT, "%zu values for %lld elements", typed_count(p, t),
                   (long long)count);
  loom_tensor_t *x = NULL;
  if (st == LOOM_OK) st = loom_tensor_create(dt, (int)p->n_dims, p->dims, &x);
  if (st == LOOM_OK && raw && t != OX_BOOL && onnx_size(t) == loom_dtype_size(dt))
    memcpy(loom_tensor_data(x), raw, want); /* the same bytes: no widening */
  else if (st == LOOM_OK && raw)
    for (int64_t i = 0; i < count; i++) put_raw(loom_tensor_data(x), i, raw, t);
  else if (st == LOOM_OK)
    put_typed(loom_tensor_data(x), count, p, t);
  core_free(external);
  if (st != LOOM_OK) {
    loom_tensor_destroy(x);
    return st;
  }
  *out = x;
  return LOOM_OK;
}

loom_status_t loom_onnx_load_tensor(const char *path, loom_tensor_t **out) {
  LOOM_CHECK_ARG(path);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  void *data = NULL;
  size_t size = 0;
  LOOM_TRY(core_read_file(path, (size_t)2 << 30, &data, &size));
  Onnx__TensorProto *p = onnx__tensor_proto__unpack(NULL, size, data);
  core_free(data);
  if (!p) return loom_fail(LOOM_ERR_FORMAT, "%s: not a valid ONNX TensorProto", path);
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  loom_status_t st = ox_tensor_from_proto(p, dir, out);
  onnx__tensor_proto__free_unpacked(p, NULL);
  if (st != LOOM_OK) return loom_fail(st, "%s: %s", path, loom_last_error());
  loom_clear_error();
  return LOOM_OK;
}
