/* The CPU back end's eager elementwise kernels (eager.h): plain loops
 * over the output, each operand read at its broadcast stride. */
#include <math.h>
#include <string.h>

#include "backend/cpu/eager.h"

/* The output's dims with each operand's element stride along them (0
 * where it broadcasts), adjacent dims merged where every operand steps
 * through them as one. */
typedef struct ew_shape {
  int rank;
  int64_t dims[LOOM_MAX_RANK];
  int64_t stride[2][LOOM_MAX_RANK];
} ew_shape_t;

static void ew_shape(const loom_tensor_t *y, int n_in, const loom_tensor_t *const *in,
                     ew_shape_t *s) {
  int r = y->rank;
  int64_t st[2][LOOM_MAX_RANK] = {{0}};
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

/* Runs an op over n elements: y[i] = op(a[i * sa], b[i * sb]), strides
 * 0 or 1, b NULL for a unary op. */
typedef void (*ew_run_fn)(void *y, const void *a, int64_t sa, const void *b, int64_t sb,
                          int64_t n);

/* Calls run over the innermost dim of s for every index of the others,
 * on elements of es bytes. */
static void ew_loop(const ew_shape_t *s, int64_t es, char *y, const char *a, const char *b,
                    ew_run_fn run) {
  int inner = s->rank - 1;
  int64_t len = s->dims[inner], outer = 1, idx[LOOM_MAX_RANK] = {0};
  for (int d = 0; d < inner; d++) outer *= s->dims[d];
  for (int64_t o = 0; o < outer; o++) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < inner; d++) {
      oa += idx[d] * s->stride[0][d];
      ob += idx[d] * s->stride[1][d];
    }
    run(y + o * len * es, a + oa * es, s->stride[0][inner], b ? b + ob * es : NULL,
        s->stride[1][inner], len);
    for (int d = inner - 1; d >= 0 && ++idx[d] == s->dims[d]; d--) idx[d] = 0;
  }
}

/* A binary op's run in its three layouts (both operands stepping, or one
 * of them broadcast along the run), so that each loop vectorizes. */
#define EW_BINARY(name, T, expr)                                                   \
  static void name##_run(void *yv, const void *av, int64_t sa, const void *bv,     \
                         int64_t sb, int64_t n) {                                  \
    T *restrict y = yv;                                                            \
    const T *restrict a = av, *restrict b = bv;                                    \
    if (sa && sb) {                                                                \
      for (int64_t i = 0; i < n; i++) {                                            \
        T x = a[i], z = b[i];                                                      \
        y[i] = expr;                                                               \
      }                                                                            \
    } else if (sa) {                                                               \
      T z = b[0];                                                                  \
      for (int64_t i = 0; i < n; i++) {                                            \
        T x = a[i];                                                                \
        y[i] = expr;                                                               \
      }                                                                            \
    } else {                                                                       \
      T x = a[0];                                                                  \
      for (int64_t i = 0; i < n; i++) {                                            \
        T z = sb ? b[i] : b[0];                                                    \
        y[i] = expr;                                                               \
      }                                                                            \
    }                                                                              \
  }

EW_BINARY(add, float, x + z)
EW_BINARY(sub, float, x - z)
EW_BINARY(mul, float, x * z)
EW_BINARY(div, float, x / z)
/* NaN from either side, as the reference's maximum and minimum. */
EW_BINARY(maximum, float, x != x || z != z ? x + z : (x > z ? x : z))
EW_BINARY(minimum, float, x != x || z != z ? x + z : (x < z ? x : z))
/* i64 wraps (computed unsigned), as the reference does. */
EW_BINARY(add_i64, int64_t, (int64_t)((uint64_t)x + (uint64_t)z))
EW_BINARY(sub_i64, int64_t, (int64_t)((uint64_t)x - (uint64_t)z))
EW_BINARY(mul_i64, int64_t, (int64_t)((uint64_t)x * (uint64_t)z))

/* A unary op's run (sa = 1: the input steps; 0: one element repeated). */
#define EW_UNARY(name, expr)                                                       \
  static void name##_run(void *yv, const void *av, int64_t sa, const void *b,      \
                         int64_t sb, int64_t n) {                                  \
    float *restrict y = yv;                                                        \
    const float *restrict a = av;                                                  \
    (void)b;                                                                       \
    (void)sb;                                                                      \
    for (int64_t i = 0; i < n; i++) {                                              \
      float x = a[sa ? i : 0];                                                     \
      y[i] = expr;                                                                 \
    }                                                                              \
  }

EW_UNARY(neg, -x)
EW_UNARY(abs, fabsf(x))
EW_UNARY(relu, x > 0 ? x : (x != x ? x : 0.0f))
EW_UNARY(sqrt, sqrtf(x))
EW_UNARY(identity, x)
/* In double, rounded once, as the reference computes them. */
EW_UNARY(exp, (float)exp((double)x))
EW_UNARY(log, (float)log((double)x))
EW_UNARY(tanh, (float)tanh((double)x))
EW_UNARY(sigmoid, x >= 0 ? (float)(1.0 / (1.0 + exp(-(double)x)))
                         : (float)(exp((double)x) / (1.0 + exp((double)x))))

static ew_run_fn ew_kernel_f32(ir_op_t op) {
  switch (op) {
    case IR_OP_ADD: return add_run;
    case IR_OP_SUB: return sub_run;
    case IR_OP_MUL: return mul_run;
    case IR_OP_DIV: return div_run;
    case IR_OP_MAXIMUM: return maximum_run;
    case IR_OP_MINIMUM: return minimum_run;
    case IR_OP_NEG: return neg_run;
    case IR_OP_ABS: return abs_run;
    case IR_OP_RELU: return relu_run;
    case IR_OP_SQRT: return sqrt_run;
    case IR_OP_IDENTITY: return identity_run;
    case IR_OP_EXP: return exp_run;
    case IR_OP_LOG: return log_run;
    case IR_OP_TANH: return tanh_run;
    case IR_OP_SIGMOID: return sigmoid_run;
    default: return NULL;
  }
}

static ew_run_fn ew_kernel_i64(ir_op_t op) {
  switch (op) {
    case IR_OP_ADD: return add_i64_run;
    case IR_OP_SUB: return sub_i64_run;
    case IR_OP_MUL: return mul_i64_run;
    default: return NULL;
  }
}

/* An elementwise op whose inputs and output are all f32, or all i64. */
bool cpu_eager_elementwise(ref_call_t *c, loom_status_t *status) {
  loom_tensor_t *y = c->out[0];
  if (c->n_out != 1 || c->n_in < 1 || c->n_in > 2) return false;
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k]->dtype != y->dtype) return false;
  ew_run_fn run = y->dtype == LOOM_F32   ? ew_kernel_f32(c->node->op)
                  : y->dtype == LOOM_I64 ? ew_kernel_i64(c->node->op)
                                         : NULL;
  if (!run) return false;
  *status = LOOM_OK;
  if (loom_tensor_numel(y) == 0) return true;
  ew_shape_t s;
  ew_shape(y, c->n_in, c->in, &s);
  ew_loop(&s, (int64_t)loom_dtype_size(y->dtype), y->data, c->in[0]->data,
          c->n_in > 1 ? c->in[1]->data : NULL, run);
  return true;
}
