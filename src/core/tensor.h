/* Tensors: the internal layout behind loom_tensor_t. */
#ifndef LOOM_CORE_TENSOR_H
#define LOOM_CORE_TENSOR_H

#include <stdbool.h>

#include "loom/loom.h"

struct loom_tensor {
  loom_dtype_t dtype;
  int rank;
  int64_t shape[LOOM_MAX_RANK];
  int64_t strides[LOOM_MAX_RANK]; /* in elements; 0 broadcasts a dim */
  void *data;                     /* element 0 */
  bool owns_data;                 /* data was allocated by Loom */
  loom_device_t device;           /* where data lives: 0, the host, today */
};

/* A new zero-filled contiguous tensor (internal: no error clearing). */
loom_status_t tensor_new(loom_dtype_t dtype, int rank, const int64_t *shape,
                         loom_tensor_t **out);
/* tensor_new with the elements left unset, for a producer that writes
 * every one. */
loom_status_t tensor_new_uninit(loom_dtype_t dtype, int rank, const int64_t *shape,
                                loom_tensor_t **out);
/* Fills *t as a contiguous view of data (no allocation). */
void tensor_view_init(loom_tensor_t *t, loom_dtype_t dtype, int rank,
                      const int64_t *shape, void *data);
/* Gives a contiguous tensor a new shape of as many elements (its data
 * unchanged): the tensor of a reshape that takes over its input. */
void tensor_reshape_in_place(loom_tensor_t *t, int rank, const int64_t *shape);
/* Checks a dtype, rank and shape given by a caller; names `what`. */
loom_status_t tensor_check_shape(const char *what, loom_dtype_t dtype,
                                 int rank, const int64_t *shape);
/* Elements of a shape whose size was checked (shape_size, or a tensor). */
int64_t shape_numel(int rank, const int64_t *shape);
/* Elements and bytes (elem_size each) of a shape into *numel and *bytes
 * (either may be NULL); false when a dim is negative or when the product
 * of the nonzero dims, or its bytes, overflows int64: such a shape has no
 * strides or byte offsets, even when a zero dim leaves it empty. */
bool shape_size(int rank, const int64_t *shape, size_t elem_size,
                int64_t *numel, int64_t *bytes);
/* Why shape_size refused a shape, for messages: "[its nonzero dims make]
 * 1.84e+19 elements of 4 bytes: too large, more bytes than int64 counts". */
const char *shape_size_why(int rank, const int64_t *shape, size_t elem_size,
                           char *buf, size_t size);
bool tensor_is_contiguous(const loom_tensor_t *t);
/* A contiguous copy of t. */
loom_status_t tensor_contiguous_copy(const loom_tensor_t *t,
                                     loom_tensor_t **out);
/* Byte offset of row-major element i, following the strides. */
int64_t tensor_offset(const loom_tensor_t *t, int64_t i);
/* Formats a shape as "(2, 3, 4)" into buf. */
const char *shape_str(int rank, const int64_t *shape, char *buf, size_t size);

#endif
