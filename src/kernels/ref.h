/* Reference kernels: plain, obviously correct C for every op. They are
 * the interpreter, the fallback and the oracle for every compiled path.
 * They compute in double (float dtypes) or int64 (integer dtypes) and
 * convert on load and store (src/core/dtype.h). */
#ifndef LOOM_KERNELS_REF_H
#define LOOM_KERNELS_REF_H

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"

/* One call of a reference kernel. Inputs are contiguous. Outputs are
 * allocated, contiguous and zero-filled with the node's shapes, except
 * for ops flagged F_DATA_SHAPE, whose kernels create their outputs. */
/* Scratch memory a caller lends to kernel calls: grown as needed and
 * kept, so that a step replayed by an executable allocates only once. */
typedef struct ref_scratch {
  void *data;
  size_t bytes;
} ref_scratch_t;

typedef struct ref_call {
  const loom_graph_t *g;
  const ir_node_t *node;
  const ir_attrs_t *attrs;
  int n_in;
  const loom_tensor_t *const *in;
  int n_out;
  loom_tensor_t **out;
  ref_scratch_t *scratch; /* NULL: kernels allocate scratch per call */
  /* Threads a back end's eager kernel may split its work over (the
   * fallback interpreter's); NULL: the calling thread alone. The
   * reference kernels run on the calling thread. */
  struct core_pool *pool;
} ref_call_t;

typedef loom_status_t (*ref_kernel_fn)(ref_call_t *c);

/* The kernel of each op, indexed by ir_op_t. */
extern const ref_kernel_fn ref_kernels[IR_OP_COUNT];

/* Element access by flat (row-major) index into a contiguous tensor. */
static inline double ref_get(const loom_tensor_t *t, int64_t i) {
  return dtype_load_f64(t->dtype, (const char *)t->data + i * (int64_t)loom_dtype_size(t->dtype));
}
static inline int64_t ref_geti(const loom_tensor_t *t, int64_t i) {
  return dtype_load_i64(t->dtype, (const char *)t->data + i * (int64_t)loom_dtype_size(t->dtype));
}
static inline void ref_set(loom_tensor_t *t, int64_t i, double v) {
  dtype_store_f64(t->dtype, (char *)t->data + i * (int64_t)loom_dtype_size(t->dtype), v);
}
static inline void ref_seti(loom_tensor_t *t, int64_t i, int64_t v) {
  dtype_store_i64(t->dtype, (char *)t->data + i * (int64_t)loom_dtype_size(t->dtype), v);
}
/* Copies element i of src to element j of dst (same dtype). */
void ref_copy_elem(loom_tensor_t *dst, int64_t j, const loom_tensor_t *src,
                   int64_t i);

/* Flat index into a tensor of shape `shape` (rank dims) broadcast to the
 * output index `idx` of rank out_rank (NumPy alignment from the right). */
int64_t ref_broadcast_index(int rank, const int64_t *shape, int out_rank,
                            const int64_t *idx);
/* Multi-index of flat position i in shape. */
void ref_unravel(int rank, const int64_t *shape, int64_t i, int64_t *idx);

/* Zero-filled scratch of `bytes` for this call: the caller's lent buffer,
 * or a fresh allocation when it lends none. NULL when memory runs out.
 * Every ref_scratch is followed by ref_scratch_release. */
void *ref_scratch(ref_call_t *c, size_t bytes);
void ref_scratch_release(ref_call_t *c, void *p);

/* A slice's window in its input: per input dim, the first index and the
 * step, from the node's attributes; fails when the output's shape does
 * not hold what they take. */
loom_status_t ref_slice_window(const ref_call_t *c, int64_t *first, int64_t *step);

/* The op's name, for messages. */
static inline const char *ref_name(const ref_call_t *c) {
  return ir_ops[c->node->op].name;
}

#endif
