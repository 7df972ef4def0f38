/* The folds (sum, mean, prod, max, min) as C text: an accumulator's type,
 * start, update and result, for float and for integer inputs. Reduction
 * groups (c_reduce.c) and column reductions (c_columns.c) both write
 * them. */
#include "backend/cpu/codegen/cg.h"

static const cg_fold_t folds[] = {
    {IR_OP_SUM, "double", "0", "$a += $v", "($T)$a",
     "uint64_t", "0", "$a += (uint64_t)$v", "($T)(int64_t)$a"},
    {IR_OP_MEAN, "double", "0", "$a += $v", "($T)($a / $n)", NULL, NULL, NULL, NULL},
    {IR_OP_PROD, "double", "1", "$a *= $v", "($T)$a",
     "uint64_t", "1", "$a *= (uint64_t)$v", "($T)(int64_t)$a"},
    /* NaN propagates: once the accumulator is NaN no comparison replaces it. */
    {IR_OP_MAX, "$T", "-INFINITY", "$a = LOOM_MAXIMUM($v, $a)", "$a",
     "int64_t", "INT64_MIN", "$a = $v > $a ? $v : $a", "($T)$a"},
    {IR_OP_MIN, "$T", "INFINITY", "$a = LOOM_MINIMUM($v, $a)", "$a",
     "int64_t", "INT64_MAX", "$a = $v < $a ? $v : $a", "($T)$a"},
};

const cg_fold_t *cg_fold_of(ir_op_t op) {
  for (size_t i = 0; i < sizeof folds / sizeof *folds; i++)
    if (folds[i].op == op) return &folds[i];
  return NULL;
}

void cg_fold_text(cg_buf_t *b, const char *t, const char *acc, const char *v,
                      const char *n, const char *type) {
  for (const char *p = t; *p; p++) {
    if (*p != '$') {
      cg_printf(b, "%c", *p);
      continue;
    }
    char k = *++p;
    if (k == 'a') cg_printf(b, "%s", acc);
    else if (k == 'v') cg_printf(b, "%s", v);
    else if (k == 'n') cg_printf(b, "%s", n);
    else if (k == 'T') cg_printf(b, "%s", type);
  }
}
