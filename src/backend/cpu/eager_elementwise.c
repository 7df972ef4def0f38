/* The CPU back end's eager elementwise kernels (eager.h): plain loops
 * over the output, each operand read at its broadcast stride. Results
 * equal the reference's but for exp, tanh and sigmoid, which compute as
 * compiled code does (eager_math.c): f32 add, sub, mul and div are exact
 * roundings of the double results the reference rounds, the other unary
 * ops are those whose f32 form rounds the same (neg, abs, relu, sqrt) or
 * compute in double as the reference does (log), comparisons are exact,
 * i64 bitwise ops and shifts are the reference's, and where copies bits. */
#include <math.h>
#include <string.h>

#include "backend/cpu/eager.h"

enum { EW_MAX_IN = 3 }; /* where's condition and its two sides */

/* The output's dims with each operand's element stride along them (0
 * where it broadcasts), adjacent dims merged where every operand steps
 * through them as one. */
typedef struct ew_shape {
  int rank;
  int64_t dims[LOOM_MAX_RANK];
  int64_t stride[EW_MAX_IN][LOOM_MAX_RANK];
} ew_shape_t;

static void ew_shape(const loom_tensor_t *y, int n_in, const loom_tensor_t *const *in,
                     ew_shape_t *s) {
  int r = y->rank;
  int64_t st[EW_MAX_IN][LOOM_MAX_RANK] = {{0}};
  memset(s, 0, sizeof *s);
  for (int k = 0; k < n_in; k++) {
    int64_t step = 1;
    for (int d = r - 1; d >= 0; d--) {
      int da = d - (r - in[k]->rank);
      int64_t size = da >= 0 ? in[k]->shape[da] : 1;
      st[k][d] = size == 1 ? 0 : step;
      step *= size;
    }
  }
  s->rank = 0;
  for (int d = 0; d < r; d++) {
    if (y->shape[d] == 1) continue;
    /* Merged into the dim before when, for every operand, that dim steps
     * over this one whole (or neither moves). */
    int q = s->rank - 1;
    bool merge = q >= 0;
    for (int k = 0; k < n_in && merge; k++)
      merge = s->stride[k][q] == st[k][d] * y->shape[d];
    if (merge) {
      s->dims[q] *= y->shape[d];
      for (int k = 0; k < n_in; k++) s->stride[k][q] = st[k][d];
    } else {
      s->dims[s->rank] = y->shape[d];
      for (int k = 0; k < n_in; k++) s->stride[k][s->rank] = st[k][d];
      s->rank++;
    }
  }
  if (s->rank == 0) { /* a single element */
    s->rank = 1;
    s->dims[0] = 1;
    for (int k = 0; k < n_in; k++) s->stride[k][0] = 0;
  }
}

/* Runs an op over n elements: y[i] = op(in[0][i * step[0]], ...), steps
 * 0 or 1 (eager.h). */
typedef cpu_eager_run_fn ew_run_fn;

/* Calls run over the innermost dim of s for every index of the others;
 * y's elements are es_y bytes, operand k's es[k]. */
static void ew_loop(const ew_shape_t *s, int64_t es_y, const int64_t *es, int n_in,
                    void *y, const void *const *in, ew_run_fn run) {
  int inner = s->rank - 1;
  int64_t len = s->dims[inner], outer = 1, idx[LOOM_MAX_RANK] = {0};
  int64_t step[EW_MAX_IN];
  for (int d = 0; d < inner; d++) outer *= s->dims[d];
  for (int k = 0; k < n_in; k++) step[k] = s->stride[k][inner];
  for (int64_t o = 0; o < outer; o++) {
    const void *at[EW_MAX_IN];
    for (int k = 0; k < n_in; k++) {
      int64_t off = 0;
      for (int d = 0; d < inner; d++) off += idx[d] * s->stride[k][d];
      at[k] = (const char *)in[k] + off * es[k];
    }
    run((char *)y + o * len * es_y, at, step, len);
    for (int d = inner - 1; d >= 0 && ++idx[d] == s->dims[d]; d--) idx[d] = 0;
  }
}

/* A binary op's run (T operands, R results) in its layouts (both
 * operands stepping, or one of them broadcast along the run), each a loop
 * of its own, so that it vectorizes; target: the instance's ISA. */
#define EW_BINARY_AT(target, name, T, R, expr)                                     \
  target static void name##_run(void *yv, const void *const *in,                   \
                                const int64_t *step, int64_t n) {                  \
    R *restrict y = yv;                                                            \
    const T *restrict a = in[0], *restrict b = in[1];                              \
    if (step[0] && step[1]) {                                                      \
      for (int64_t i = 0; i < n; i++) {                                            \
        T x = a[i], z = b[i];                                                      \
        y[i] = expr;                                                               \
      }                                                                            \
    } else if (step[0]) {                                                          \
      T z = b[0];                                                                  \
      for (int64_t i = 0; i < n; i++) {                                            \
        T x = a[i];                                                                \
        y[i] = expr;                                                               \
      }                                                                            \
    } else if (step[1]) {                                                          \
      T x = a[0];                                                                  \
      for (int64_t i = 0; i < n; i++) {                                            \
        T z = b[i];                                                                \
        y[i] = expr;                                                               \
      }                                                                            \
    } else { /* one element each: an output of one */                              \
      T x = a[0], z = b[0];                                                        \
      for (int64_t i = 0; i < n; i++) y[i] = expr;                                 \
    }                                                                              \
  }

#define EW_BINARY(name, T, R, expr) EW_BINARY_AT(, name, T, R, expr)

/* Python's %: the result takes the divisor's sign; f32 in double, rounded
 * once, as the reference computes it. An i64 divisor of 0 never reaches
 * here (cpu_eager_elementwise leaves it to the reference, which fails). */
static inline double mod_f64(double a, double b) {
  double r = fmod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
static inline int64_t mod_i64(int64_t a, int64_t b) {
  if (b == -1) return 0; /* INT64_MIN % -1 traps */
  int64_t r = a % b;
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
EW_BINARY(mod, float, float, (float)mod_f64(x, z))
/* i64 wraps (computed unsigned), as the reference does. */
EW_BINARY(add_i64, int64_t, int64_t, (int64_t)((uint64_t)x + (uint64_t)z))
EW_BINARY(sub_i64, int64_t, int64_t, (int64_t)((uint64_t)x - (uint64_t)z))
EW_BINARY(mul_i64, int64_t, int64_t, (int64_t)((uint64_t)x * (uint64_t)z))
EW_BINARY(mod_i64, int64_t, int64_t, mod_i64(x, z))
EW_BINARY(bitwise_and_i64, int64_t, int64_t, x & z)
EW_BINARY(bitwise_or_i64, int64_t, int64_t, x | z)
EW_BINARY(bitwise_xor_i64, int64_t, int64_t, x ^ z)
/* Shifts by b < 0 or b >= 64 (undefined in C) shift every bit out, as the
 * reference's; right shifts are arithmetic. */
EW_BINARY(shl_i64, int64_t, int64_t, z < 0 || z >= 64 ? 0 : (int64_t)((uint64_t)x << z))
EW_BINARY(shr_i64, int64_t, int64_t, z < 0 || z >= 64 ? (x < 0 ? -1 : 0) : x >> z)

/* Comparisons give bool (one byte, 0 or 1). An f32 compares as the double
 * the reference converts it to: exactly, NaN unordered. */
#define EW_COMPARE(T, suffix)                           \
  EW_BINARY(eq_##suffix, T, uint8_t, x == z)            \
  EW_BINARY(ne_##suffix, T, uint8_t, x != z)            \
  EW_BINARY(lt_##suffix, T, uint8_t, x < z)             \
  EW_BINARY(le_##suffix, T, uint8_t, x <= z)            \
  EW_BINARY(gt_##suffix, T, uint8_t, x > z)             \
  EW_BINARY(ge_##suffix, T, uint8_t, x >= z)            \
  static ew_run_fn ew_compare_##suffix(ir_op_t op) {    \
    switch (op) {                                       \
      case IR_OP_EQ: return eq_##suffix##_run;          \
      case IR_OP_NE: return ne_##suffix##_run;          \
      case IR_OP_LT: return lt_##suffix##_run;          \
      case IR_OP_LE: return le_##suffix##_run;          \
      case IR_OP_GT: return gt_##suffix##_run;          \
      case IR_OP_GE: return ge_##suffix##_run;          \
      default: return NULL;                             \
    }                                                   \
  }

EW_COMPARE(float, f32)
EW_COMPARE(int64_t, i64)

/* A unary op's run (step 1: the input steps; 0: one element repeated). */
#define EW_UNARY_AT(target, name, expr)                                            \
  target static void name##_run(void *yv, const void *const *in,                   \
                                const int64_t *step, int64_t n) {                  \
    float *restrict y = yv;                                                        \
    const float *restrict a = in[0];                                               \
    if (step[0]) {                                                                 \
      for (int64_t i = 0; i < n; i++) {                                            \
        float x = a[i];                                                            \
        y[i] = expr;                                                               \
      }                                                                            \
    } else {                                                                       \
      float x = a[0];                                                              \
      for (int64_t i = 0; i < n; i++) y[i] = expr;                                 \
    }                                                                              \
  }

/* In double, rounded once, as the reference computes it: one instance
 * (its calls are the time). */
EW_UNARY_AT(, log, (float)log((double)x))

/* The f32 ops whose loops vectorize, one template instanced per ISA as
 * eager_math.c's are: each computes one IEEE operation per element (or
 * selects), so every instance gives the same bits. NaN from either side
 * in maximum and minimum, as the reference's. */
#define EW_F32_RUNS(isa, target)                                                     \
  EW_BINARY_AT(target, add_##isa, float, float, x + z)                              \
  EW_BINARY_AT(target, sub_##isa, float, float, x - z)                              \
  EW_BINARY_AT(target, mul_##isa, float, float, x * z)                              \
  EW_BINARY_AT(target, div_##isa, float, float, x / z)                              \
  EW_BINARY_AT(target, maximum_##isa, float, float,                                 \
               ((x != x) | (z != z)) ? x + z : (x > z ? x : z))                         \
  EW_BINARY_AT(target, minimum_##isa, float, float,                                 \
               ((x != x) | (z != z)) ? x + z : (x < z ? x : z))                         \
  EW_UNARY_AT(target, neg_##isa, -x)                                                \
  EW_UNARY_AT(target, abs_##isa, fabsf(x))                                          \
  EW_UNARY_AT(target, relu_##isa, x > 0 ? x : (x != x ? x : 0.0f))                  \
  EW_UNARY_AT(target, sqrt_##isa, sqrtf(x))                                         \
  EW_UNARY_AT(target, identity_##isa, x)                                            \
  static ew_run_fn ew_f32_##isa(ir_op_t op) {                                       \
    switch (op) {                                                                   \
      case IR_OP_ADD: return add_##isa##_run;                                       \
      case IR_OP_SUB: return sub_##isa##_run;                                       \
      case IR_OP_MUL: return mul_##isa##_run;                                       \
      case IR_OP_DIV: return div_##isa##_run;                                       \
      case IR_OP_MAXIMUM: return maximum_##isa##_run;                               \
      case IR_OP_MINIMUM: return minimum_##isa##_run;                               \
      case IR_OP_NEG: return neg_##isa##_run;                                       \
      case IR_OP_ABS: return abs_##isa##_run;                                       \
      case IR_OP_RELU: return relu_##isa##_run;                                     \
      case IR_OP_SQRT: return sqrt_##isa##_run;                                     \
      case IR_OP_IDENTITY: return identity_##isa##_run;                             \
      default: return NULL;                                                         \
    }                                                                               \
  }

EW_F32_RUNS(avx512, CPU_EAGER_AVX512)
EW_F32_RUNS(avx2, CPU_EAGER_AVX2)
EW_F32_RUNS(portable, )

cpu_eager_run_fn cpu_eager_f32_run_isa(ir_op_t op, core_isa_t isa) {
  if (!cpu_eager_runs(isa)) return NULL;
  switch (isa) {
    case CORE_ISA_AVX512: return ew_f32_avx512(op);
    case CORE_ISA_AVX2: return ew_f32_avx2(op);
    default: return ew_f32_portable(op);
  }
}

static ew_run_fn ew_kernel_f32(ir_op_t op) {
  switch (op) {
    case IR_OP_MOD: return mod_run;
    case IR_OP_LOG: return log_run;
    default: return cpu_eager_f32_run_isa(op, cpu_eager_isa());
  }
}

static ew_run_fn ew_kernel_i64(ir_op_t op) {
  switch (op) {
    case IR_OP_ADD: return add_i64_run;
    case IR_OP_SUB: return sub_i64_run;
    case IR_OP_MUL: return mul_i64_run;
    case IR_OP_MOD: return mod_i64_run;
    case IR_OP_BITWISE_AND: return bitwise_and_i64_run;
    case IR_OP_BITWISE_OR: return bitwise_or_i64_run;
    case IR_OP_BITWISE_XOR: return bitwise_xor_i64_run;
    case IR_OP_BITSHIFT_LEFT: return shl_i64_run;
    case IR_OP_BITSHIFT_RIGHT: return shr_i64_run;
    default: return NULL;
  }
}

/* Whether an i64 tensor holds a 0 (a divisor the reference must report). */
static bool has_zero(const loom_tensor_t *t) {
  const int64_t *v = t->data;
  bool zero = false;
  for (int64_t i = 0, n = loom_tensor_numel(t); i < n; i++) zero |= v[i] == 0;
  return zero;
}

/* The run of op for inputs of dtype in and an output of dtype out. */
static ew_run_fn ew_kernel(ir_op_t op, loom_dtype_t in, loom_dtype_t out) {
  if (out == LOOM_BOOL)
    return in == LOOM_F32 ? ew_compare_f32(op) : in == LOOM_I64 ? ew_compare_i64(op) : NULL;
  if (out != in) return NULL;
  return in == LOOM_F32 ? ew_kernel_f32(op) : in == LOOM_I64 ? ew_kernel_i64(op) : NULL;
}

/* An elementwise op whose inputs are all f32, or all i64: arithmetic of
 * that dtype, or a comparison giving bool. */
bool cpu_eager_elementwise(ref_call_t *c, loom_status_t *status) {
  loom_tensor_t *y = c->out[0];
  if (c->n_out != 1 || c->n_in < 1 || c->n_in > 2) return false;
  loom_dtype_t dt = c->in[0]->dtype;
  for (int k = 1; k < c->n_in; k++)
    if (c->in[k]->dtype != dt) return false;
  cpu_eager_math_fn math = dt == LOOM_F32 && y->dtype == LOOM_F32 ? cpu_eager_math(c->node->op) : NULL;
  if (math) {
    math(y->data, c->in[0]->data, loom_tensor_numel(y));
    *status = LOOM_OK;
    return true;
  }
  ew_run_fn run = ew_kernel(c->node->op, dt, y->dtype);
  if (!run || (c->node->op == IR_OP_MOD && dt == LOOM_I64 && has_zero(c->in[1]))) return false;
  *status = LOOM_OK;
  if (loom_tensor_numel(y) == 0) return true;
  ew_shape_t s;
  ew_shape(y, c->n_in, c->in, &s);
  int64_t es[2] = {(int64_t)loom_dtype_size(dt), (int64_t)loom_dtype_size(dt)};
  const void *in[2] = {c->in[0]->data, c->n_in > 1 ? c->in[1]->data : NULL};
  ew_loop(&s, (int64_t)loom_dtype_size(y->dtype), es, c->n_in, y->data, in, run);
  return true;
}

/* ---- where ---------------------------------------------------------------- */

/* Copies (or, step 0, repeats) elements of T: bits, whatever the dtype. */
#define EW_COPY(T)                                                                 \
  static void copy_##T##_run(void *yv, const void *const *in, const int64_t *step,  \
                             int64_t n) {                                          \
    T *restrict y = yv;                                                            \
    const T *restrict a = in[0];                                                   \
    if (step[0]) memcpy(y, a, (size_t)n * sizeof(T));                              \
    else                                                                           \
      for (int64_t i = 0; i < n; i++) y[i] = a[0];                                 \
  }

/* where's run: in[0] the bool condition, in[1] and in[2] the sides. Where
 * the condition is one element along the run it copies one side. */
#define EW_WHERE(T)                                                                \
  EW_COPY(T)                                                                       \
  static void where_##T##_run(void *yv, const void *const *in, const int64_t *step, \
                              int64_t n) {                                         \
    const uint8_t *restrict c = in[0];                                             \
    if (!step[0]) {                                                                \
      int k = c[0] ? 1 : 2;                                                        \
      copy_##T##_run(yv, &in[k], &step[k], n);                                     \
      return;                                                                      \
    }                                                                              \
    T *restrict y = yv;                                                            \
    const T *restrict a = in[1], *restrict b = in[2];                              \
    int64_t sa = step[1], sb = step[2]; /* locals: the loops unswitch on them */   \
    for (int64_t i = 0; i < n; i++) {                                              \
      T x = a[sa ? i : 0], z = b[sb ? i : 0];                                      \
      y[i] = c[i] ? x : z;                                                         \
    }                                                                              \
  }

EW_WHERE(uint8_t)
EW_WHERE(uint16_t)
EW_WHERE(uint32_t)
EW_WHERE(uint64_t)

/* By element size in bytes. */
static const struct {
  ew_run_fn copy, where;
} where_runs[9] = {
    [1] = {copy_uint8_t_run, where_uint8_t_run},
    [2] = {copy_uint16_t_run, where_uint16_t_run},
    [4] = {copy_uint32_t_run, where_uint32_t_run},
    [8] = {copy_uint64_t_run, where_uint64_t_run},
};

/* where(cond, a, b) for sides of any dtype: elements are copied as bits.
 * A condition of one element copies the side it picks, broadcast. */
bool cpu_eager_where(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *cond = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t es = (int64_t)loom_dtype_size(y->dtype);
  if (cond->dtype != LOOM_BOOL || es > 8 || !where_runs[es].copy ||
      c->in[1]->dtype != y->dtype || c->in[2]->dtype != y->dtype)
    return false;
  *status = LOOM_OK;
  if (loom_tensor_numel(y) == 0) return true;
  ew_shape_t s;
  if (loom_tensor_numel(cond) == 1) {
    const loom_tensor_t *side = c->in[*(const uint8_t *)cond->data ? 1 : 2];
    const void *from = side->data;
    ew_shape(y, 1, &side, &s);
    ew_loop(&s, es, &es, 1, y->data, &from, where_runs[es].copy);
    return true;
  }
  ew_shape(y, 3, c->in, &s);
  int64_t sizes[3] = {1, es, es};
  const void *in[3] = {cond->data, c->in[1]->data, c->in[2]->data};
  ew_loop(&s, es, sizes, 3, y->data, in, where_runs[es].where);
  return true;
}

/* expand: the input broadcast to the output's shape, any dtype, as bits
 * (where's copies). */
bool cpu_eager_expand(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t es = (int64_t)loom_dtype_size(y->dtype);
  if (x->dtype != y->dtype || x->rank > y->rank || es > 8 || !where_runs[es].copy) return false;
  for (int d = 0; d < x->rank; d++) {
    int64_t size = x->shape[x->rank - 1 - d];
    if (size != 1 && size != y->shape[y->rank - 1 - d]) return false; /* the reference says */
  }
  *status = LOOM_OK;
  if (loom_tensor_numel(y) == 0) return true;
  ew_shape_t s;
  const void *from = x->data;
  ew_shape(y, 1, &x, &s);
  ew_loop(&s, es, &es, 1, y->data, &from, where_runs[es].copy);
  return true;
}

/* cast: the common pairs of dtypes as typed loops, each conversion the
 * reference's (integers through int64, floats through double into
 * dtype_store_f64's saturating one); other pairs are the reference's. */
#define CAST_LOOP(from_t, to_t, expr)           \
  do {                                          \
    const from_t *s = x->data;                  \
    to_t *d = y->data;                          \
    for (int64_t i = 0; i < n; i++) {           \
      from_t v = s[i];                          \
      d[i] = (expr);                            \
    }                                           \
  } while (0)

bool cpu_eager_cast(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  int64_t n = loom_tensor_numel(x);
  loom_dtype_t from = x->dtype, to = y->dtype;
  if (from == LOOM_BOOL && to == LOOM_F32) CAST_LOOP(uint8_t, float, v ? 1.0f : 0.0f);
  else if (from == LOOM_I64 && to == LOOM_F32) CAST_LOOP(int64_t, float, (float)(double)v);
  else if (from == LOOM_I32 && to == LOOM_F32) CAST_LOOP(int32_t, float, (float)v);
  else if (from == LOOM_F32 && to == LOOM_I64) CAST_LOOP(float, int64_t, dtype_f64_to_i64(v));
  else if (from == LOOM_F32 && to == LOOM_BOOL) CAST_LOOP(float, uint8_t, v != 0);
  else if (from == LOOM_I64 && to == LOOM_BOOL) CAST_LOOP(int64_t, uint8_t, v != 0);
  else if (from == LOOM_BOOL && to == LOOM_I64) CAST_LOOP(uint8_t, int64_t, v != 0);
  else if (from == LOOM_I32 && to == LOOM_I64) CAST_LOOP(int32_t, int64_t, v);
  else if (from == LOOM_I64 && to == LOOM_I32)
    CAST_LOOP(int64_t, int32_t, (int32_t)(uint32_t)(uint64_t)v);
  else if (from == to && from == LOOM_F32) CAST_LOOP(float, float, (float)(double)v);
  else return false;
  *status = LOOM_OK;
  return true;
}
