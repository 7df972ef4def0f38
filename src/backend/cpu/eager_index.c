/* The CPU back end's eager indexing kernels (eager.h): gather,
 * index_select and embedding copy rows, scatter_add adds them, with i64
 * or i32 indices. An index out of range leaves the node to the
 * reference kernel, which reports it. */
#include <string.h>

#include "backend/cpu/eager.h"
#include "core/storage.h"
#include "core/tensor.h"

static int64_t prod(int from, int to, const int64_t *shape) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= shape[d];
  return n;
}

static bool index_dtype(const loom_tensor_t *t) {
  return t->dtype == LOOM_I64 || t->dtype == LOOM_I32;
}

/* Entry i of an i64 or i32 tensor. */
static inline int64_t index_at(const loom_tensor_t *t, int64_t i) {
  return t->dtype == LOOM_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Whether every entry of ind lies in [lo, size): v - lo below size - lo,
 * unsigned, so that the loops have no branch. */
static bool in_range(const loom_tensor_t *ind, int64_t lo, int64_t size) {
  int64_t n = loom_tensor_numel(ind);
  uint64_t span = (uint64_t)size - (uint64_t)lo, out = 0;
  if (ind->dtype == LOOM_I64) {
    const int64_t *v = ind->data;
    for (int64_t i = 0; i < n; i++) out |= (uint64_t)v[i] - (uint64_t)lo >= span;
  } else {
    const int32_t *v = ind->data;
    for (int64_t i = 0; i < n; i++) out |= (uint64_t)(int64_t)v[i] - (uint64_t)lo >= span;
  }
  return !out;
}

/* ---- gather, index_select, embedding --------------------------------------- */

/* Copies n rows of row bytes: row j of to is row ind[j] of from (size
 * rows, negative entries counting from the end). Inlined with row 4 and
 * 8, so that a row of one element is a load and a store. */
static inline void take_rows(char *to, const char *from, const loom_tensor_t *ind, int64_t n,
                             int64_t size, size_t row) {
  for (int64_t j = 0; j < n; j++) {
    int64_t k = index_at(ind, j);
    k += k < 0 ? size : 0;
    memcpy(to + j * (int64_t)row, from + k * (int64_t)row, row);
  }
}

/* data viewed as (outer, size, inner), the output as (outer, n, inner)
 * with n the number of indices: block o of the output is take_rows of
 * block o of data. */
static bool take(ref_call_t *c, int axis, bool negative, loom_status_t *status) {
  const loom_tensor_t *data = c->in[0], *ind = c->in[1];
  loom_tensor_t *y = c->out[0];
  int64_t size = data->shape[axis];
  if (!index_dtype(ind) || y->dtype != data->dtype || !in_range(ind, negative ? -size : 0, size))
    return false;
  int64_t outer = prod(0, axis, data->shape), n = loom_tensor_numel(ind);
  size_t row = (size_t)prod(axis + 1, data->rank, data->shape) * loom_dtype_size(data->dtype);
  *status = LOOM_OK;
  for (int64_t o = 0; o < outer && n > 0 && row > 0; o++) {
    char *to = (char *)y->data + o * n * (int64_t)row;
    const char *from = (const char *)data->data + o * size * (int64_t)row;
    if (row == 4) take_rows(to, from, ind, n, size, 4);
    else if (row == 8) take_rows(to, from, ind, n, size, 8);
    else take_rows(to, from, ind, n, size, row);
  }
  return true;
}

bool cpu_eager_take(ref_call_t *c, loom_status_t *status) {
  ir_op_t op = c->node->op;
  /* PyTorch's embedding rejects negative indices; gather takes them. */
  if (op == IR_OP_EMBEDDING) return take(c, 0, false, status);
  int64_t axis = ir_op_int(op, c->attrs, "axis");
  return take(c, (int)(axis < 0 ? axis + c->in[0]->rank : axis), true, status);
}

/* ---- scatter_add ------------------------------------------------------------ */

/* scatter_add's row loops, one template instanced per ISA (each element
 * one conversion or one double add: the same bits in every instance). */
#define SUM_ROWS(isa, target)                                                          \
  target static void widen_##isa(double *restrict d, const float *restrict s,         \
                                 int64_t n) {                                         \
    for (int64_t i = 0; i < n; i++) d[i] = s[i];                                      \
  }                                                                                   \
  target static void add_##isa(double *restrict d, const float *restrict s,           \
                               int64_t n) {                                           \
    for (int64_t i = 0; i < n; i++) d[i] += (double)s[i];                             \
  }                                                                                   \
  target static void narrow_##isa(float *restrict d, const double *restrict s,        \
                                  int64_t n) {                                        \
    for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];                               \
  }                                                                                   \
  static const cpu_eager_sum_rows_t sum_rows_##isa = {widen_##isa, add_##isa, narrow_##isa};

SUM_ROWS(avx512, CPU_EAGER_AVX512)
SUM_ROWS(avx2, CPU_EAGER_AVX2)
SUM_ROWS(portable, )

const cpu_eager_sum_rows_t *cpu_eager_sum_rows_isa(core_isa_t isa) {
  if (!cpu_eager_runs(isa)) return NULL;
  switch (isa) {
    case CORE_ISA_AVX512: return &sum_rows_avx512;
    case CORE_ISA_AVX2: return &sum_rows_avx2;
    default: return &sum_rows_portable;
  }
}

/* Whether entries p .. p + n - 1 of ind all equal k. */
static bool row_of(const loom_tensor_t *ind, int64_t p, int64_t n, int64_t k) {
  uint64_t differ = 0;
  if (ind->dtype == LOOM_I64) {
    const int64_t *v = (const int64_t *)ind->data + p;
    for (int64_t q = 0; q < n; q++) differ |= (uint64_t)(v[q] ^ k);
  } else {
    const int32_t *v = (const int32_t *)ind->data + p;
    for (int64_t q = 0; q < n; q++) differ |= (uint64_t)((int64_t)v[q] ^ k);
  }
  return !differ;
}

/* The column that a strided index repeats along every dim but axis (the
 * fallback interpreter's view of an expanded index, index_view in
 * runtime/interp_node.c): its entries, n of them `step` elements apart, and
 * true; false for any other layout. */
static bool index_column(const loom_tensor_t *index, int axis, int64_t *step) {
  for (int d = 0; d < index->rank; d++)
    if (d != axis && index->shape[d] != 1 && index->strides[d] != 0) return false;
  *step = index->strides[axis];
  return true;
}

/* Whether entries 0, step, .. (n of them) of ind lie in [0, size). */
static bool column_in_range(const loom_tensor_t *ind, int64_t n, int64_t step, int64_t size) {
  uint64_t out = 0;
  for (int64_t j = 0; j < n; j++) out |= (uint64_t)index_at(ind, j * step) >= (uint64_t)size;
  return !out;
}

/* f32 with index and src of one shape, which is self's off the axis (the
 * common use, and gather's gradient): viewed as (outer, n, inner), entry
 * (o, j, q) adds into row index[o, j, q] of self's (outer, size, inner).
 * As the reference does, it sums in double in index's row-major order
 * and rounds once, so the bits are the same; a row of index that holds
 * one value adds src's row at once, and an index that is a column's
 * view (every row one value) is read a value per row. */
bool cpu_eager_scatter_add(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *self = c->in[0], *index = c->in[1], *src = c->in[2];
  loom_tensor_t *y = c->out[0];
  int64_t axis = ir_attr_int(c->attrs, "axis", 0);
  if (axis < 0) axis += self->rank;
  if (self->dtype != LOOM_F32 || src->dtype != LOOM_F32 || !index_dtype(index)) return false;
  for (int d = 0; d < index->rank; d++)
    if (index->shape[d] != src->shape[d] || (d != axis && index->shape[d] != self->shape[d]))
      return false;
  int64_t size = self->shape[axis], total = loom_tensor_numel(self), col = 0;
  bool column = !tensor_is_contiguous(index);
  if (column && !index_column(index, (int)axis, &col)) return false;
  if (column ? !column_in_range(index, index->shape[axis], col, size)
             : !in_range(index, 0, size))
    return false;
  /* from tensor storage, which keeps freed blocks by size class: malloc
   * hands a block this large back to the system, and every call faulted
   * it in again (7% of the GNN's fallback at exact sizes) */
  double *sums = core_storage_alloc(sizeof *sums * (size_t)(total ? total : 1), false);
  if (!sums) return false; /* the reference reports it */
  int64_t outer = prod(0, (int)axis, index->shape), n = index->shape[axis];
  int64_t inner = prod((int)axis + 1, index->rank, index->shape);
  const float *x = src->data;
  const cpu_eager_sum_rows_t *rows = cpu_eager_sum_rows_isa(cpu_eager_isa());
  rows->widen(sums, self->data, total);
  for (int64_t o = 0; o < outer; o++) {
    double *block = sums + o * size * inner;
    for (int64_t j = 0, p = o * n * inner; j < n; j++, p += inner) {
      int64_t k = inner == 0 ? 0 : column ? index_at(index, j * col) : index_at(index, p);
      if (column || row_of(index, p, inner, k)) {
        rows->add(block + k * inner, x + p, inner);
      } else {
        for (int64_t q = 0; q < inner; q++)
          block[index_at(index, p + q) * inner + q] += (double)x[p + q];
      }
    }
  }
  rows->narrow(y->data, sums, total);
  core_storage_free(sums);
  *status = LOOM_OK;
  return true;
}
