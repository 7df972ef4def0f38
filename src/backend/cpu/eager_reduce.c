/* The CPU back end's eager reductions (eager.h): sum and mean of f32 over
 * axes that are adjacent (size-1 dims aside). Viewed as (outer, n,
 * inner) reduced to (outer, inner), each output adds its n elements in
 * order into a double from 0 and rounds once (mean: divides by n first),
 * as the reference does, so the bits are the same. Softmax and
 * log_softmax of f32 along an axis compute each line in double as the
 * reference does (its maximum, the sum of e^(x - max) in order, then
 * each element), e^x once per element and the log once per line. */
#include <math.h>

#include "backend/cpu/eager.h"
#include "core/alloc.h"

/* Outputs summed at once: a block of inner's, their sums in registers
 * or L1 while the n rows stream past. */
enum { BLOCK = 256 };

static int64_t prod(int from, int to, const int64_t *shape) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= shape[d];
  return n;
}

/* Reduces n rows of inner elements starting at x into y[0 .. inner),
 * a block of outputs at a time through the ISA's row loops (scatter_add's:
 * each element one conversion or one double add, so the order and the
 * bits are the loop's over j). */
static void reduce_rows(float *y, const float *x, int64_t n, int64_t inner, bool mean,
                        const cpu_eager_sum_rows_t *rows) {
  if (inner == 1) { /* a line: its sum in a register */
    double acc = 0;
    for (int64_t j = 0; j < n; j++) acc += x[j];
    y[0] = (float)(mean ? acc / (double)n : acc);
    return;
  }
  double acc[BLOCK];
  for (int64_t q0 = 0; q0 < inner; q0 += BLOCK) {
    int64_t m = inner - q0 < BLOCK ? inner - q0 : BLOCK;
    for (int64_t q = 0; q < m; q++) acc[q] = 0; /* not the first row: 0 + -0 is +0 */
    for (int64_t j = 0; j < n; j++) rows->add(acc, x + j * inner + q0, m);
    if (mean)
      for (int64_t q = 0; q < m; q++) acc[q] /= (double)n;
    rows->narrow(y + q0, acc, m);
  }
}

bool cpu_eager_reduce(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  if (x->dtype != LOOM_F32 || y->dtype != LOOM_F32) return false;
  /* the axes (all when absent), as the reference reads them */
  bool red[LOOM_MAX_RANK] = {false};
  const int64_t *axes = NULL;
  int n_axes = ir_attr_ints(c->attrs, "axes", &axes);
  for (int d = 0; d < x->rank; d++) red[d] = n_axes < 0;
  for (int i = 0; i < n_axes && x->rank > 0; i++)
    red[axes[i] < 0 ? axes[i] + x->rank : axes[i]] = true;
  int first = x->rank, last = -1;
  for (int d = 0; d < x->rank; d++)
    if (red[d] && x->shape[d] != 1) {
      first = d < first ? d : first;
      last = d;
    }
  for (int d = first + 1; d < last; d++)
    if (!red[d] && x->shape[d] != 1) return false;
  if (last < 0) first = last = x->rank; /* nothing of size above 1 reduced */
  else last++;
  int64_t outer = prod(0, first, x->shape), n = prod(first, last, x->shape);
  int64_t inner = prod(last, x->rank, x->shape);
  const float *from = x->data;
  float *to = y->data;
  const cpu_eager_sum_rows_t *rows = cpu_eager_sum_rows_isa(cpu_eager_isa());
  for (int64_t o = 0; o < outer; o++)
    reduce_rows(to + o * inner, from + o * n * inner, n, inner, c->node->op == IR_OP_MEAN, rows);
  *status = LOOM_OK;
  return true;
}

/* softmax (log_form: log_softmax) of the line of n elements at x, `step`
 * apart; e holds n doubles. */
static void softmax_line(float *y, const float *x, int64_t n, int64_t step, bool log_form,
                         double *e) {
  double max = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; j++) max = fmax(max, (double)x[j * step]);
  for (int64_t j = 0; j < n; j++) sum += e[j] = exp((double)x[j * step] - max);
  if (log_form) {
    double log_sum = log(sum);
    for (int64_t j = 0; j < n; j++) y[j * step] = (float)(((double)x[j * step] - max) - log_sum);
  } else {
    for (int64_t j = 0; j < n; j++) y[j * step] = (float)(e[j] / sum);
  }
}

bool cpu_eager_softmax(ref_call_t *c, loom_status_t *status) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  if (x->dtype != LOOM_F32 || y->dtype != LOOM_F32 || x->rank == 0) return false;
  int64_t axis = ir_op_int(c->node->op, c->attrs, "axis");
  if (axis < 0) axis += x->rank;
  int64_t outer = prod(0, (int)axis, x->shape), n = x->shape[axis];
  int64_t inner = prod((int)axis + 1, x->rank, x->shape);
  double *e = core_malloc(sizeof *e * (size_t)(n ? n : 1));
  if (!e) return false; /* the reference's, which needs no scratch */
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      softmax_line((float *)y->data + o * n * inner + i, (const float *)x->data + o * n * inner + i,
                   n, inner, c->node->op == IR_OP_LOG_SOFTMAX, e);
  core_free(e);
  *status = LOOM_OK;
  return true;
}
