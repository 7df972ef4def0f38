/* Symbolic dims: interned expressions over symbols and constants, with
 * the simplifications that keep equal shapes equal (constant folding,
 * identities, canonical operand order). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "ir/ir.h"

static ir_dim_t handle(int64_t expr_id) { return IR_DIM_SYM_BASE + expr_id; }

const ir_expr_t *ir_dim_expr(const loom_graph_t *g, ir_dim_t d) {
  if (!ir_dim_is_sym(d)) return NULL;
  int64_t id = d - IR_DIM_SYM_BASE;
  return id < g->n_exprs ? &g->exprs[id] : NULL;
}

int ir_num_symbols(const loom_graph_t *g) { return g->n_symbols; }

/* The handle of an existing equal expression, or of a new one. */
static loom_status_t intern(loom_graph_t *g, ir_expr_t e, ir_dim_t *out) {
  LOOM_TRY(ir_before_change(g, "a symbolic dim"));
  for (int64_t i = 0; i < g->n_exprs; i++) {
    const ir_expr_t *x = &g->exprs[i];
    if (x->kind == e.kind && x->a == e.a && x->b == e.b &&
        (e.kind == IR_EXPR_SYM ? strcmp(x->name, e.name) == 0 : x->c == e.c)) {
      *out = handle(i);
      return LOOM_OK;
    }
  }
  LOOM_TRY(core_grow((void **)&g->exprs, &g->cap_exprs, g->n_exprs + 1,
                     sizeof *g->exprs));
  if (e.kind == IR_EXPR_SYM) {
    e.name = core_strdup(e.name);
    if (!e.name) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a symbol");
    e.c = g->n_symbols++;
  }
  g->exprs[g->n_exprs] = e;
  *out = handle(g->n_exprs++);
  return LOOM_OK;
}

loom_status_t ir_dim_symbol(loom_graph_t *g, const char *name, ir_dim_t *out) {
  if (!name || !name[0])
    return loom_fail(LOOM_ERR_INVALID, "a symbol needs a non-empty name");
  for (int64_t i = 0; i < g->n_exprs; i++)
    if (g->exprs[i].kind == IR_EXPR_SYM && !strcmp(g->exprs[i].name, name)) {
      *out = handle(i);
      return LOOM_OK;
    }
  ir_expr_t e = {.kind = IR_EXPR_SYM, .name = (char *)name};
  return intern(g, e, out);
}

const ir_expr_t *ir_symbol_find(const loom_graph_t *g, const char *name) {
  for (int64_t i = 0; name && i < g->n_exprs; i++)
    if (g->exprs[i].kind == IR_EXPR_SYM && !strcmp(g->exprs[i].name, name))
      return &g->exprs[i];
  return NULL;
}

const char *ir_symbols_str(const loom_graph_t *g, char *buf, size_t size) {
  size_t at = 0;
  buf[0] = '\0';
  for (int64_t i = 0; i < g->n_exprs && at < size; i++) {
    if (g->exprs[i].kind != IR_EXPR_SYM) continue;
    int n = snprintf(buf + at, size - at, "%s'%s'", at ? ", " : "", g->exprs[i].name);
    at = n < 0 ? size : at + (size_t)n;
  }
  if (at >= size && size > 4) strcpy(buf + size - 4, "...");
  return buf;
}

loom_status_t ir_dim_fresh_symbol(loom_graph_t *g, const char *prefix,
                                  ir_dim_t *out) {
  /* Skips names the user took, so that a fresh symbol is never merged
   * with an existing one. */
  char name[64];
  for (;;) {
    snprintf(name, sizeof name, "%s%d", prefix, g->n_fresh++);
    bool taken = false;
    for (int64_t i = 0; i < g->n_exprs && !taken; i++)
      taken = g->exprs[i].kind == IR_EXPR_SYM && !strcmp(g->exprs[i].name, name);
    if (!taken) return ir_dim_symbol(g, name, out);
  }
}

/* a + b and a * b of constants, failing where the result would overflow
 * or reach the range of symbolic handles. */
static loom_status_t const_result(bool overflow, int64_t v, ir_dim_t *out) {
  if (overflow || !ir_dim_is_const(v))
    return loom_fail(LOOM_ERR_SHAPE, "a dim overflows the int64 range");
  *out = v;
  return LOOM_OK;
}

static loom_status_t const_add(int64_t a, int64_t b, ir_dim_t *out) {
  int64_t v = 0;
  bool overflow = __builtin_add_overflow(a, b, &v);
  return const_result(overflow, v, out);
}

static loom_status_t const_mul(int64_t a, int64_t b, ir_dim_t *out) {
  int64_t v = 0;
  bool overflow = __builtin_mul_overflow(a, b, &v);
  return const_result(overflow, v, out);
}

/* d as (sym part, constant) when d is "x + c" or a constant. */
static void split_offset(const loom_graph_t *g, ir_dim_t d, ir_dim_t *x,
                         int64_t *c) {
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (ir_dim_is_const(d)) {
    *x = 0;
    *c = d;
  } else if (e->kind == IR_EXPR_ADD && ir_dim_is_const(e->b)) {
    *x = e->a;
    *c = e->b;
  } else {
    *x = d;
    *c = 0;
  }
}

/* Operands are constants or handles of g's expressions: a number in the
 * handles' range that names none (a huge negative pad or offset from a
 * model file) fails here instead of being read as an expression. */
static loom_status_t check_operands(const loom_graph_t *g, ir_dim_t a, ir_dim_t b) {
  if ((ir_dim_is_const(a) || ir_dim_expr(g, a)) && (ir_dim_is_const(b) || ir_dim_expr(g, b)))
    return LOOM_OK;
  return loom_fail(LOOM_ERR_SHAPE, "a dim or offset of %lld is out of the range of sizes",
                   (long long)(ir_dim_is_const(a) || ir_dim_expr(g, a) ? b : a));
}

/* Binary expression with constants stored as constant operands. */
static loom_status_t make(loom_graph_t *g, ir_expr_kind_t kind, ir_dim_t a,
                          ir_dim_t b, ir_dim_t *out) {
  ir_expr_t e = {.kind = kind, .a = a, .b = b};
  return intern(g, e, out);
}

loom_status_t ir_dim_add(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                         ir_dim_t *out) {
  LOOM_TRY(check_operands(g, a, b));
  if (ir_dim_is_const(a) && ir_dim_is_const(b)) return const_add(a, b, out);
  if (ir_dim_is_const(a)) { /* constants go right */
    ir_dim_t t = a;
    a = b;
    b = t;
  }
  if (ir_dim_is_const(b)) {
    ir_dim_t x;
    int64_t c;
    split_offset(g, a, &x, &c); /* (x + c) + b = x + (c + b) */
    LOOM_TRY(const_add(c, b, &c));
    if (c == 0) {
      *out = x;
      return LOOM_OK;
    }
    return make(g, IR_EXPR_ADD, x, c, out);
  }
  if (a > b) { /* canonical order of symbolic operands */
    ir_dim_t t = a;
    a = b;
    b = t;
  }
  return make(g, IR_EXPR_ADD, a, b, out);
}

loom_status_t ir_dim_mul(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                         ir_dim_t *out) {
  LOOM_TRY(check_operands(g, a, b));
  if (ir_dim_is_const(a) && ir_dim_is_const(b)) return const_mul(a, b, out);
  if (ir_dim_is_const(a)) {
    ir_dim_t t = a;
    a = b;
    b = t;
  }
  if (ir_dim_is_const(b)) {
    if (b == 0 || b == 1) {
      *out = b == 0 ? 0 : a;
      return LOOM_OK;
    }
    const ir_expr_t *e = ir_dim_expr(g, a); /* (x * c) * b = x * (c * b) */
    if (e->kind == IR_EXPR_MUL && ir_dim_is_const(e->b)) {
      ir_dim_t c = 0;
      LOOM_TRY(const_mul(e->b, b, &c));
      return make(g, IR_EXPR_MUL, e->a, c, out);
    }
    return make(g, IR_EXPR_MUL, a, b, out);
  }
  if (a > b) {
    ir_dim_t t = a;
    a = b;
    b = t;
  }
  return make(g, IR_EXPR_MUL, a, b, out);
}

/* Python's //; callers rule out b == 0 and INT64_MIN // -1. */
static int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

loom_status_t ir_dim_floordiv(loom_graph_t *g, ir_dim_t a, ir_dim_t b,
                              ir_dim_t *out) {
  if (b == 0) return loom_fail(LOOM_ERR_SHAPE, "a dim divided by zero");
  LOOM_TRY(check_operands(g, a, b));
  if (ir_dim_is_const(a) && ir_dim_is_const(b)) {
    if (b == -1) return const_mul(a, -1, out);
    *out = floordiv(a, b);
    return LOOM_OK;
  }
  if (b == 1 || a == 0) {
    *out = a;
    return LOOM_OK;
  }
  if (a == b) {
    *out = 1;
    return LOOM_OK;
  }
  const ir_expr_t *e = ir_dim_expr(g, a); /* (x * b) / b = x */
  if (ir_dim_is_const(b) && b > 0 && e && e->kind == IR_EXPR_MUL &&
      ir_dim_is_const(e->b) && e->b % b == 0)
    return ir_dim_mul(g, e->a, e->b / b, out);
  return make(g, IR_EXPR_FLOORDIV, a, b, out);
}

loom_status_t ir_dim_eval(const loom_graph_t *g, ir_dim_t d,
                          const int64_t *sym_values, int64_t *out) {
  if (ir_dim_is_const(d)) {
    *out = d;
    return LOOM_OK;
  }
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e) return loom_fail(LOOM_ERR_GRAPH, "dim %lld is not a symbol of the graph", (long long)d);
  int64_t a, b;
  switch (e->kind) {
    case IR_EXPR_CONST: *out = e->c; return LOOM_OK;
    case IR_EXPR_SYM:
      if (!sym_values || sym_values[e->c] < 0)
        return loom_fail(LOOM_ERR_BINDING, "symbol '%s' has no value", e->name);
      *out = sym_values[e->c];
      return LOOM_OK;
    default: break;
  }
  LOOM_TRY(ir_dim_eval(g, e->a, sym_values, &a));
  LOOM_TRY(ir_dim_eval(g, e->b, sym_values, &b));
  bool overflow = false;
  switch (e->kind) {
    case IR_EXPR_ADD: overflow = __builtin_add_overflow(a, b, out); break;
    case IR_EXPR_MUL: overflow = __builtin_mul_overflow(a, b, out); break;
    default:
      if (b == 0) return loom_fail(LOOM_ERR_VALUE, "a dim divided by zero");
      overflow = b == -1 && a == INT64_MIN;
      if (!overflow) *out = floordiv(a, b);
      break;
  }
  if (overflow) return loom_fail(LOOM_ERR_VALUE, "a dim overflows the int64 range");
  return LOOM_OK;
}

/* Appends the text of d to buf at *used; parenthesizes sums inside
 * products and quotients. */
static void format_dim(const loom_graph_t *g, ir_dim_t d, char *buf,
                       size_t size, size_t *used, bool paren_sum) {
  if (*used >= size) return;
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e) {
    *used += (size_t)snprintf(buf + *used, size - *used, "%lld", (long long)d);
    return;
  }
  if (e->kind == IR_EXPR_CONST) {
    *used += (size_t)snprintf(buf + *used, size - *used, "%lld", (long long)e->c);
    return;
  }
  if (e->kind == IR_EXPR_SYM) {
    *used += (size_t)snprintf(buf + *used, size - *used, "%s", e->name);
    return;
  }
  bool sum = e->kind == IR_EXPR_ADD;
  bool paren = sum && paren_sum;
  if (paren && *used < size) *used += (size_t)snprintf(buf + *used, size - *used, "(");
  format_dim(g, e->a, buf, size, used, !sum);
  if (*used >= size) return;
  if (sum && ir_dim_is_const(e->b) && e->b < 0)
    *used += (size_t)snprintf(buf + *used, size - *used, "-%lld", -(long long)e->b);
  else {
    const char *op = sum ? "+" : e->kind == IR_EXPR_MUL ? "*" : "//";
    *used += (size_t)snprintf(buf + *used, size - *used, "%s", op);
    format_dim(g, e->b, buf, size, used, !sum);
  }
  if (paren && *used < size) *used += (size_t)snprintf(buf + *used, size - *used, ")");
}

const char *ir_dim_str(const loom_graph_t *g, ir_dim_t d, char *buf,
                       size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  format_dim(g, d, buf, size, &used, false);
  return buf;
}

const char *ir_type_str(const loom_graph_t *g, const ir_type_t *t, char *buf,
                        size_t size) {
  size_t used = (size_t)snprintf(buf, size, "%s[", loom_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && used < size; i++) {
    if (i) used += (size_t)snprintf(buf + used, size - used, ", ");
    if (used < size) format_dim(g, t->dims[i], buf, size, &used, false);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

bool ir_type_equal(const ir_type_t *a, const ir_type_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* ---- Public wrappers ---------------------------------------------------- */

#define CHECK_GRAPH_DIM(g, d, name)                                          \
  do {                                                                       \
    if (ir_dim_is_sym(d) ? !ir_dim_expr(g, d) : (d) < 0)                     \
      return loom_fail(LOOM_ERR_INVALID, "%s: dim %s (%lld) is neither a "   \
                       "non-negative constant nor a symbol of the graph",    \
                       __func__, name, (long long)(d));                      \
  } while (0)

loom_status_t loom_dim_symbol(loom_graph_t *g, const char *name,
                              loom_dim_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  return ir_dim_symbol(g, name, out);
}

loom_status_t loom_dim_add(loom_graph_t *g, loom_dim_t a, loom_dim_t b,
                           loom_dim_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  CHECK_GRAPH_DIM(g, a, "a");
  CHECK_GRAPH_DIM(g, b, "b");
  return ir_dim_add(g, a, b, out);
}

loom_status_t loom_dim_mul(loom_graph_t *g, loom_dim_t a, loom_dim_t b,
                           loom_dim_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  CHECK_GRAPH_DIM(g, a, "a");
  CHECK_GRAPH_DIM(g, b, "b");
  return ir_dim_mul(g, a, b, out);
}

loom_status_t loom_dim_floordiv(loom_graph_t *g, loom_dim_t a, loom_dim_t b,
                                loom_dim_t *out) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(out);
  CHECK_GRAPH_DIM(g, a, "a");
  CHECK_GRAPH_DIM(g, b, "b");
  return ir_dim_floordiv(g, a, b, out);
}

loom_status_t loom_dim_format(const loom_graph_t *g, loom_dim_t d, char *buf,
                              size_t size) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(buf);
  if (size == 0) return loom_fail(LOOM_ERR_INVALID, "loom_dim_format: size is 0");
  ir_dim_str(g, d, buf, size);
  return LOOM_OK;
}
