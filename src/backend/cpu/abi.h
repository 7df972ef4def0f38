/* The ABI between generated modules and the runtime. The C emitter copies
 * this file, verbatim, to the top of every module it writes (CMake embeds
 * it as text), so that both sides see one definition. It includes only
 * <stdint.h> and <stddef.h>.
 *
 * A module exports functions
 *     void loom_group_<g>(void *const *slot_table, const int32_t *map,
 *                         const int64_t *syms, const loom_abi_t *rt);
 * and `const int loom_module_abi_version = LOOM_ABI_VERSION;`.
 * slot_table[s] points at the storage of slot s (an input, an output, a
 * parameter, a constant, or an intermediate in the arena); the function
 * reads its group's k-th slot at slot_table[map[k]], where map, the
 * step's own, lists the slots of the group in the order its code first
 * names them. A function's text thus does not depend on where its
 * group's values are stored, and groups whose code is the same up to
 * names (every layer of a model, every piece of a long chain) run one
 * function, named after the first of them (group g), each with its map.
 * syms holds the values of the graph's symbols (read for runtime
 * sizes). */
#ifndef LOOM_RUNTIME_ABI_H
#define LOOM_RUNTIME_ABI_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_ABI_VERSION 3

/* Runs indices [begin, end) of a parallel loop. */
typedef void (*loom_abi_body_t)(void *ctx, int64_t begin, int64_t end);

/* Applied to a finished tile of a contraction's output while it is still
 * in cache: rows [row0, row0 + rows) and columns [col0, col0 + cols) of
 * batch item `batch`; c points at element (row0, col0) of that item, rows
 * ldc elements apart. Fused bias, activation, residual and dropout live
 * here. */
typedef void (*loom_abi_epilogue_t)(void *ctx, int64_t batch, float *c,
                                    int64_t ldc, int64_t row0, int64_t rows,
                                    int64_t col0, int64_t cols);

/* C[b] = op(A[b]) @ op(B[b]) for b < batch, row-major, f32. op transposes
 * when trans_* is 1: A is m x k (or k x m stored), B is k x n (or n x k).
 * Batch strides are in elements; 0 broadcasts one matrix to every item. */
typedef struct loom_abi_gemm {
  int64_t m, n, k, batch;
  const float *a;
  int64_t lda, stride_a;
  int trans_a;
  const float *b;
  int64_t ldb, stride_b;
  int trans_b;
  float *c;
  int64_t ldc, stride_c;
  loom_abi_epilogue_t epilogue; /* may be NULL */
  void *epilogue_ctx;
  /* B packed ahead of time (a frozen weight, shared by every item), or
   * NULL: the kernel uses it when its layout fits, else packs B itself. */
  const void *b_packed;
  /* Items in two levels: with groups > 1, item t of each operand starts
   * at (t / groups) * stride_* + (t % groups) * inner_* (attention's
   * (batch, head) items read from one QKV product); 0 or 1: one level. */
  int64_t groups, inner_a, inner_b, inner_c;
} loom_abi_gemm_t;

/* y = conv2d(x, w) (+ bias), NCHW, f32, weight (o, c/groups, kh, kw).
 * The epilogue sees each image as a matrix of o rows (channels) by
 * ho*wo columns (positions): batch = image index, ldc = ho*wo. */
typedef struct loom_abi_conv2d {
  int64_t n, c, h, w;      /* input */
  int64_t o, kh, kw;       /* weight */
  int64_t ho, wo;          /* output */
  int64_t stride[2], pads[4], dilation[2], groups;
  const float *x, *weight, *bias; /* bias may be NULL */
  float *y;
  loom_abi_epilogue_t epilogue; /* may be NULL */
  void *epilogue_ctx;
  /* conv2d_f32: the weight packed ahead of time (a frozen weight), or
   * NULL: the kernel uses it when its layout fits, else packs weight. */
  const void *weight_packed;
} loom_abi_conv2d_t;

/* What the runtime offers generated code. */
typedef struct loom_abi {
  int version; /* LOOM_ABI_VERSION */
  int threads; /* threads in the pool, the caller included */
  void *pool;
  /* Calls body over [0, n) in chunks of at least grain, spread over the
   * pool; returns when all are done. One loop at a time. */
  void (*parallel_for)(void *pool, int64_t n, int64_t grain,
                       loom_abi_body_t body, void *ctx);
  void (*gemm_f32)(const loom_abi_gemm_t *d, void *pool);
  void (*conv2d_f32)(const loom_abi_conv2d_t *d, void *pool);
  /* conv2d's weight gradient: x = the forward input, y = dY (read), weight
   * = dW (written, cast from const); the same geometry as conv2d_f32. */
  void (*conv2d_weight_grad_f32)(const loom_abi_conv2d_t *d, void *pool);
  /* Per slot s (of slot_table: map[k]), packed_b[2 * s + trans_b]: that
   * slot's matrix packed as a GEMM's B operand (loom_abi_gemm_t.b_packed),
   * or NULL; may be NULL. */
  const void *const *packed_b;
  /* conv2d's input gradient, i.e. conv_transpose2d(dY, W): x = dX
   * (written, cast from const), y = dY (read), bias per channel of dX (may
   * be NULL); the geometry is the forward conv2d's, dX's image the
   * epilogue's c rows by h*w columns. */
  void (*conv2d_input_grad_f32)(const loom_abi_conv2d_t *d, void *pool);
  /* Per slot s, packed_w[s]: that slot's conv2d weight packed for
   * loom_abi_conv2d_t.weight_packed, or NULL; may be NULL. */
  const void *const *packed_w;
  /* Generated index code met entry `value` at flat position `position`
   * of the index of the group's node number `node` (its position among
   * the group's nodes: the runtime knows the step's group), out of range
   * for a dim of `size`, and stopped: the run fails after the step,
   * naming the earliest node's lowest position reported. index_errors is
   * the runtime's record. */
  void (*index_error)(const struct loom_abi *rt, int node, int64_t position,
                      int64_t value, int64_t size);
  void *index_errors;
} loom_abi_t;

typedef void (*loom_abi_group_t)(void *const *slot_table, const int32_t *map,
                                 const int64_t *syms, const loom_abi_t *rt);

#endif
