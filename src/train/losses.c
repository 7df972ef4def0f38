/* Losses as graph builders: compositions of existing ops, so that fusion
 * fuses them (a loss is a reduction with an elementwise prologue) and
 * autodiff differentiates them with the ops' own rules. */
#include "core/dtype.h"
#include "core/status.h"
#include "ir/ir.h"
#include "loom/train.h"

/* A rank-0 value of dtype holding v (broadcasts in binary ops). */
static loom_status_t scalar(loom_graph_t *g, double v, loom_dtype_t dtype,
                            loom_value_t *out) {
  return loom_full(g, 0, NULL, v, dtype, out);
}

static loom_status_t check_reduction(const char *fn, loom_reduction_t r) {
  if (r != LOOM_REDUCTION_MEAN && r != LOOM_REDUCTION_SUM &&
      r != LOOM_REDUCTION_NONE)
    return loom_fail(LOOM_ERR_INVALID, "%s: reduction %d is not one of "
                     "LOOM_REDUCTION_MEAN, _SUM, _NONE", fn, (int)r);
  return LOOM_OK;
}

/* Per-item losses reduced as asked. */
static loom_status_t reduce(loom_graph_t *g, loom_value_t items,
                            loom_reduction_t r, loom_value_t *out) {
  if (r == LOOM_REDUCTION_MEAN) return loom_mean(g, items, 0, NULL, 0, out);
  if (r == LOOM_REDUCTION_SUM) return loom_sum(g, items, 0, NULL, 0, out);
  *out = items;
  return LOOM_OK;
}

static loom_status_t value_type(const char *fn, const char *what,
                                const loom_graph_t *g, loom_value_t v,
                                const ir_type_t **out) {
  if (!ir_value_valid(g, v.id))
    return loom_fail(LOOM_ERR_GRAPH, "%s: %s (value %d) is not a value of the "
                     "graph", fn, what, v.id);
  *out = &g->values[v.id].type;
  return LOOM_OK;
}

/* Both operands of one float dtype and one shape (no broadcasting: a
 * silently broadcast (N, 1) against (N) is a classic loss bug). */
static loom_status_t check_pair(const char *fn, loom_graph_t *g,
                                loom_value_t a, loom_value_t b) {
  const ir_type_t *ta = NULL, *tb = NULL;
  LOOM_TRY(value_type(fn, "input", g, a, &ta));
  LOOM_TRY(value_type(fn, "target", g, b, &tb));
  if (!dtype_is_float(ta->dtype) || ta->dtype != tb->dtype)
    return loom_fail(LOOM_ERR_DTYPE, "%s: input is %s and target %s; both "
                     "must have one float dtype", fn,
                     loom_dtype_name(ta->dtype), loom_dtype_name(tb->dtype));
  bool same = ta->rank == tb->rank;
  for (int i = 0; same && i < ta->rank; i++) {
    ir_dim_t da = ta->dims[i], db = tb->dims[i];
    if (da != db) ir_specialize(g, &da, &db);
    same = da == db;
  }
  if (!same) {
    char sa[96], sb[96];
    return loom_fail(LOOM_ERR_SHAPE, "%s: input %s and target %s must have the "
                     "same shape", fn, ir_type_str(g, ta, sa, sizeof sa),
                     ir_type_str(g, tb, sb, sizeof sb));
  }
  return LOOM_OK;
}

loom_status_t loom_mse(loom_graph_t *g, loom_value_t pred, loom_value_t target,
                       loom_reduction_t reduction, loom_value_t *loss) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(loss);
  LOOM_TRY(check_reduction(__func__, reduction));
  LOOM_TRY(check_pair(__func__, g, pred, target));
  loom_value_t d, sq;
  LOOM_TRY(loom_sub(g, pred, target, &d));
  LOOM_TRY(loom_mul(g, d, d, &sq));
  return reduce(g, sq, reduction, loss);
}

loom_status_t loom_bce_with_logits(loom_graph_t *g, loom_value_t logits,
                                   loom_value_t targets,
                                   loom_reduction_t reduction,
                                   loom_value_t *loss) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(loss);
  LOOM_TRY(check_reduction(__func__, reduction));
  LOOM_TRY(check_pair(__func__, g, logits, targets));
  /* softplus(x) - x*t: softplus computes max(x, 0) + log(1 + e^-|x|),
   * with no exp of a positive number, so no overflow for large |x|. One
   * op and not that sum of relu and abs, whose gradients at x = 0 (0 and
   * 0) would miss sigmoid(0) = 1/2: its gradient is sigmoid(x) - t
   * everywhere, as PyTorch's. */
  loom_value_t sp, xt, items;
  LOOM_TRY(loom_softplus(g, logits, &sp));
  LOOM_TRY(loom_mul(g, logits, targets, &xt));
  LOOM_TRY(loom_sub(g, sp, xt, &items));
  return reduce(g, items, reduction, loss);
}

/* ---- Cross-entropy ---------------------------------------------------------- */

static loom_status_t check_ce(loom_graph_t *g, loom_value_t logits,
                              loom_value_t labels, double smoothing,
                              int64_t *classes) {
  const char *fn = "loom_cross_entropy";
  const ir_type_t *tx = NULL, *ty = NULL;
  LOOM_TRY(value_type(fn, "logits", g, logits, &tx));
  LOOM_TRY(value_type(fn, "labels", g, labels, &ty));
  if (!dtype_is_float(tx->dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s: logits are %s; they must be a float "
                     "dtype", fn, loom_dtype_name(tx->dtype));
  if (ty->dtype != LOOM_I32 && ty->dtype != LOOM_I64)
    return loom_fail(LOOM_ERR_DTYPE, "%s: labels are %s; they must be i32 or "
                     "i64", fn, loom_dtype_name(ty->dtype));
  ir_dim_t n_logits = tx->rank == 2 ? tx->dims[0] : 0, n_labels = ty->rank == 1 ? ty->dims[0] : 0;
  if (n_logits != n_labels) ir_specialize(g, &n_logits, &n_labels);
  if (tx->rank != 2 || ty->rank != 1 || n_logits != n_labels)
    return loom_fail(LOOM_ERR_SHAPE, "%s: logits (rank %d) must be (N, C) and "
                     "labels (rank %d) (N), with one N", fn, tx->rank,
                     ty->rank);
  if (ir_dim_is_sym(tx->dims[1]))
    return loom_fail(LOOM_ERR_SHAPE, "%s: the class dim C of logits is "
                     "symbolic; it must be a constant", fn);
  if (!(smoothing >= 0 && smoothing < 1))
    return loom_fail(LOOM_ERR_INVALID, "%s: label_smoothing %g is not in "
                     "[0, 1)", fn, smoothing);
  *classes = tx->dims[1];
  return LOOM_OK;
}

/* loss_i before masking: (1 - e) * -logp[i, y_i] + e * mean_c -logp[i, c]. */
static loom_status_t ce_items(loom_graph_t *g, loom_value_t logp,
                              loom_value_t labels, int64_t classes,
                              double smoothing, loom_value_t *out) {
  loom_dtype_t dt = g->values[logp.id].type.dtype;
  const int64_t last = -1;
  loom_value_t hot, picked, nll, k;
  /* Built with its origin, so that a label out of range is reported as
   * the loss's, not as the one_hot's (src/ir/origin.c). */
  ir_attrs_t a = {0};
  ir_attrs_int(&a, "depth", classes);
  ir_attrs_int(&a, "dtype", dt);
  ir_attrs_int(&a, IR_ORIGIN_ATTR, IR_ORIGIN_CROSS_ENTROPY_LABELS);
  LOOM_TRY(ir_build1(g, IR_OP_ONE_HOT, 1, &labels, &a, &hot));
  LOOM_TRY(loom_mul(g, hot, logp, &picked));
  LOOM_TRY(loom_sum(g, picked, 1, &last, 0, &nll));
  LOOM_TRY(scalar(g, -(1.0 - smoothing), dt, &k));
  LOOM_TRY(loom_mul(g, nll, k, out));
  if (smoothing == 0) return LOOM_OK;
  loom_value_t avg, ks, smooth, sum;
  LOOM_TRY(loom_mean(g, logp, 1, &last, 0, &avg));
  LOOM_TRY(scalar(g, -smoothing, dt, &ks));
  LOOM_TRY(loom_mul(g, avg, ks, &smooth));
  LOOM_TRY(loom_add(g, *out, smooth, &sum));
  *out = sum;
  return LOOM_OK;
}

/* The labels with ignored ones replaced by class 0 (so one_hot accepts
 * them), and the mask (in the logits' dtype) of the items that count. */
static loom_status_t ce_mask(loom_graph_t *g, loom_value_t labels,
                             int64_t ignore, loom_dtype_t dt,
                             loom_value_t *safe, loom_value_t *mask) {
  loom_dtype_t lt = g->values[labels.id].type.dtype;
  loom_value_t ign, zero, keep;
  LOOM_TRY(scalar(g, (double)ignore, lt, &ign));
  LOOM_TRY(scalar(g, 0, lt, &zero));
  LOOM_TRY(loom_ne(g, labels, ign, &keep));
  LOOM_TRY(loom_where(g, keep, labels, zero, safe));
  return loom_cast(g, keep, dt, mask);
}

static bool ignore_fits(loom_dtype_t lt, int64_t ignore) {
  if (ignore == LOOM_NO_IGNORE_INDEX) return false;
  return lt == LOOM_I64 || (ignore >= INT32_MIN && ignore <= INT32_MAX);
}

loom_status_t loom_cross_entropy(loom_graph_t *g, loom_value_t logits,
                                 loom_value_t labels, int64_t ignore_index,
                                 double label_smoothing,
                                 loom_reduction_t reduction,
                                 loom_value_t *loss) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(loss);
  LOOM_TRY(check_reduction(__func__, reduction));
  int64_t classes = 0;
  LOOM_TRY(check_ce(g, logits, labels, label_smoothing, &classes));
  loom_dtype_t dt = g->values[logits.id].type.dtype;
  loom_value_t logp, items;
  LOOM_TRY(loom_log_softmax(g, logits, -1, &logp));
  /* A label no i32 can hold can never be equal: no item is ignored. */
  if (!ignore_fits(g->values[labels.id].type.dtype, ignore_index)) {
    LOOM_TRY(ce_items(g, logp, labels, classes, label_smoothing, &items));
    return reduce(g, items, reduction, loss);
  }
  loom_value_t safe, mask, masked;
  LOOM_TRY(ce_mask(g, labels, ignore_index, dt, &safe, &mask));
  LOOM_TRY(ce_items(g, logp, safe, classes, label_smoothing, &items));
  LOOM_TRY(loom_mul(g, items, mask, &masked));
  if (reduction != LOOM_REDUCTION_MEAN) return reduce(g, masked, reduction, loss);
  loom_value_t total, count;
  LOOM_TRY(loom_sum(g, masked, 0, NULL, 0, &total));
  LOOM_TRY(loom_sum(g, mask, 0, NULL, 0, &count));
  return loom_div(g, total, count, loss);
}
