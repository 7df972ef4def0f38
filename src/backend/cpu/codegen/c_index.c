/* Index groups: gather, index_select and embedding (slices of data
 * picked by an index), scatter_add (src added into a copy of self at the
 * rows an index names along an axis) and one_hot, each with, optionally,
 * the elementwise ops and expands that compute its index (a prologue,
 * folded in by fuse.c: the index is computed where it is read and never
 * stored). Extents may be runtime symbols (a trace's node and edge
 * counts), so each body computes them from syms[]; the group function
 * passes slots, syms and rt to the body through a small context struct.
 * An index out of range stops the body and is reported through
 * rt->index_error, which fails the run with the reference kernel's
 * message (the lowest position reported wins, so the message names the
 * entry the reference would). */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/dtype.h"

/* ---- Extents -------------------------------------------------------------- */

/* The value of d when the compile-time symbols decide it. */
static bool dim_value(const cg_ctx_t *c, ir_dim_t d, int64_t *out) {
  if (ir_dim_is_const(d)) return *out = d, true;
  const ir_expr_t *e = ir_dim_expr(c->g, d);
  int64_t a, b;
  if (!e) return false;
  switch (e->kind) {
    case IR_EXPR_CONST: return *out = e->c, true;
    case IR_EXPR_SYM:
      return c->sym_values && c->sym_values[e->c] >= 0 && (*out = c->sym_values[e->c], true);
    case IR_EXPR_ADD:
      return dim_value(c, e->a, &a) && dim_value(c, e->b, &b) && (*out = a + b, true);
    case IR_EXPR_MUL:
      return dim_value(c, e->a, &a) && dim_value(c, e->b, &b) && (*out = a * b, true);
    case IR_EXPR_FLOORDIV:
      if (!dim_value(c, e->a, &a) || !dim_value(c, e->b, &b) || b <= 0) return false;
      *out = a >= 0 ? a / b : -((-a + b - 1) / b);
      return true;
  }
  return false;
}

/* Writes d as C: a literal, or sums and products over runtime symbols. */
static bool dim_write(const cg_ctx_t *c, ir_dim_t d, cg_buf_t *b) {
  int64_t v;
  if (dim_value(c, d, &v)) {
    cg_printf(b, "%lld", (long long)v);
    return true;
  }
  const ir_expr_t *e = ir_dim_expr(c->g, d);
  if (!e) return false;
  if (e->kind == IR_EXPR_SYM) {
    if (!c->sym_values || c->sym_values[e->c] != CG_SYM_RUNTIME) return false;
    cg_printf(b, "syms[%lld]", (long long)e->c);
    return true;
  }
  if (e->kind != IR_EXPR_ADD && e->kind != IR_EXPR_MUL) return false;
  cg_printf(b, "(");
  bool ok = dim_write(c, e->a, b);
  cg_printf(b, e->kind == IR_EXPR_ADD ? " + " : " * ");
  ok = ok && dim_write(c, e->b, b);
  cg_printf(b, ")");
  return ok;
}

/* "const int64_t name = <product of t's dims [lo, hi)>;" */
static bool extent(const cg_ctx_t *c, const char *name, const ir_type_t *t, int lo,
                   int hi) {
  int64_t k = 1, v;
  for (int d = lo; d < hi; d++)
    if (dim_value(c, t->dims[d], &v)) k *= v;
  cg_line(c->out, 1, "const int64_t %s = (int64_t)%lld", name, (long long)k);
  for (int d = lo; d < hi; d++) {
    if (dim_value(c, t->dims[d], &v)) continue;
    cg_printf(c->out, " * ");
    if (!dim_write(c, t->dims[d], c->out)) return false;
  }
  cg_printf(c->out, ";\n");
  return true;
}

/* Whether two dims are the same size at every run. */
static bool same_dim(const cg_ctx_t *c, ir_dim_t a, ir_dim_t b) {
  int64_t x, y;
  return a == b || (dim_value(c, a, &x) && dim_value(c, b, &y) && x == y);
}

static const ir_type_t *type_of(const cg_ctx_t *c, int32_t v) {
  return &c->g->values[v].type;
}

static int norm_axis(int64_t axis, int rank) {
  return (int)(axis < 0 ? axis + rank : axis);
}

static const char *uint_type(size_t size) {
  return size == 1 ? "uint8_t" : size == 2 ? "uint16_t" : size == 4 ? "uint32_t" : "uint64_t";
}

/* ---- Shared text ------------------------------------------------------------ */

/* A named extent: the product of t's dims [lo, hi). */
typedef struct span {
  const char *name;
  const ir_type_t *t;
  int lo, hi;
} span_t;

enum { MAX_SPANS = 5 };

typedef struct index_fn {
  cg_ctx_t *c;
  int gi;
  const ir_node_t *n;  /* the index node */
  bool prologue;       /* its index is computed by the group's other nodes */
  bool by_row;         /* ... from values that do not vary along a row */
  const ir_node_t *take; /* scatter_add: the index_select (or 1-D gather)
                            picking its src rows in the group, or NULL */
  const ir_node_t *scale; /* ... and the mul scaling those rows into src,
                             or NULL */
  int32_t w;              /* the mul's other operand: (n, 1) or (n, inner) */
  int n_spans;
  span_t spans[MAX_SPANS];
} index_fn_t;

static void span(index_fn_t *f, const char *name, const ir_type_t *t, int lo, int hi) {
  f->spans[f->n_spans++] = (span_t){name, t, lo, hi};
}

/* The extents, at the top of the body and of the group function. */
static bool extents(const index_fn_t *f) {
  for (int i = 0; i < f->n_spans; i++) {
    const span_t *s = &f->spans[i];
    if (!extent(f->c, s->name, s->t, s->lo, s->hi)) return false;
    cg_line(f->c->out, 1, "(void)%s;\n", s->name);
  }
  return true;
}

/* The context struct, and the start of the body up to its pointers. */
static bool body_begin(const index_fn_t *f) {
  cg_buf_t *b = f->c->out;
  int gi = f->gi;
  cg_printf(b, "typedef struct {\n");
  cg_line(b, 1, "void *const *slots;\n");
  cg_line(b, 1, "const int64_t *syms;\n");
  cg_line(b, 1, "const loom_abi_t *rt;\n");
  cg_line(b, 1, "int64_t chunk; /* scatter_add: columns per unit of work */\n");
  cg_printf(b, "} loom_g%d_ctx;\n\n", gi);
  cg_function(f->c, "static void loom_g%d_body(void *arg, int64_t begin, int64_t end) {\n", gi);
  cg_line(b, 1, "const loom_g%d_ctx *x = (const loom_g%d_ctx *)arg;\n", gi, gi);
  cg_line(b, 1, "void *const *slots = x->slots;\n");
  cg_line(b, 1, "const int64_t *syms = x->syms;\n");
  cg_line(b, 1, "(void)syms;\n");
  return extents(f);
}

static void pointer(const index_fn_t *f, const char *name, const char *type, int32_t v,
                    bool write) {
  cg_line(f->c->out, 1, "%s%s *restrict %s = (%s%s *)slots[%d];\n", write ? "" : "const ",
          type, name, write ? "" : "const ", type, (int)cg_slot(f->c, v));
}

/* "index entry (row r, column q)" as C, the index viewed as rows of its
 * last dim (cols columns): read, or computed by the prologue. */
static void entry(const index_fn_t *f, char *buf, size_t size, const char *r,
                  const char *q, const char *cols) {
  if (f->prologue)
    snprintf(buf, size, "loom_g%d_index(slots, syms, %s, %s)", f->gi, r, q);
  else
    snprintf(buf, size, "(int64_t)ind[(%s) * %s + %s]", r, cols, q);
}

/* The report of entry k of node's index at position pos; the body stops
 * there. */
static void report_of(const index_fn_t *f, int32_t node, int level, const char *pos,
                      const char *size) {
  cg_line(f->c->out, level, "x->rt->index_error(x->rt, %d, %s, k, %s);\n",
          cg_node_position(f->c, f->gi, node), pos, size);
  cg_line(f->c->out, level, "return;\n");
}

static void report(const index_fn_t *f, int level, const char *pos, const char *size) {
  report_of(f, (int32_t)(f->n - f->c->g->nodes), level, pos, size);
}

/* The end of the body, and the group function: extents, `setup` (which
 * defines `units` and `work`, the elements per unit), then the body over
 * [0, units), split over the pool when the work repays a wake-up. */
static bool group_fn(const index_fn_t *f, const char *setup) {
  cg_buf_t *b = f->c->out;
  int gi = f->gi;
  cg_printf(b, "}\n\n");
  cg_group_function(f->c, gi);
  cg_line(b, 1, "loom_g%d_ctx x = {slots, syms, rt, 0};\n", gi);
  if (!extents(f)) return false;
  cg_printf(b, "%s", setup);
  cg_line(b, 1, "const int64_t per = work > 0 ? work : 1;\n");
  cg_line(b, 1, "const int64_t grain = %d / 2 / per > 1 ? %d / 2 / per : 1;\n",
          CG_PARALLEL_MIN, CG_PARALLEL_MIN);
  cg_line(b, 1, "if (units * per > %d && units > 1 && rt->threads > 1)\n", CG_PARALLEL_MIN);
  cg_line(b, 2, "rt->parallel_for(rt->pool, units, grain, loom_g%d_body, &x);\n", gi);
  cg_line(b, 1, "else\n");
  cg_line(b, 2, "loom_g%d_body(&x, 0, units);\n", gi);
  cg_printf(b, "}\n");
  return true;
}

/* ---- gather, index_select, embedding ---------------------------------------- */

/* Rows of consecutive positions (inner == 1, index of rank >= 2): each
 * row of the index's last dim that names a run in range is one copy. */
static void take_rows(const index_fn_t *f, const char *t, const char *lo) {
  cg_buf_t *b = f->c->out;
  cg_line(b, 1, "for (int64_t r = begin; r < end; r++) {\n");
  char e0[96], eq[96];
  entry(f, e0, sizeof e0, "r", "0", "len");
  entry(f, eq, sizeof eq, "r", "q", "len");
  cg_line(b, 2, "const int64_t k0 = %s;\n", e0);
  cg_line(b, 2, "int run = k0 >= 0 && k0 + len <= size;\n");
  cg_line(b, 2, "for (int64_t q = 0; q < len; q++) run &= %s == k0 + q;\n", eq);
  cg_line(b, 2, "for (int64_t o = 0; o < outer; o++) {\n");
  cg_line(b, 3, "%s *restrict to = y + o * n + r * len;\n", t);
  cg_line(b, 3, "const %s *restrict from = d + o * size;\n", t);
  cg_line(b, 3, "if (run) {\n");
  cg_line(b, 4, "for (int64_t q = 0; q < len; q++) to[q] = from[k0 + q];\n");
  cg_line(b, 4, "continue;\n");
  cg_line(b, 3, "}\n");
  cg_line(b, 3, "for (int64_t q = 0; q < len; q++) {\n");
  cg_line(b, 4, "const int64_t k = %s;\n", eq);
  cg_line(b, 4, "if (k < %s || k >= size) {\n", lo);
  report(f, 5, "r * len + q", "size");
  cg_line(b, 4, "}\n");
  cg_line(b, 4, "to[q] = from[k < 0 ? k + size : k];\n");
  cg_line(b, 3, "}\n");
  cg_line(b, 2, "}\n");
  cg_line(b, 1, "}\n");
}

/* One index entry per unit: its slice of every outer item. */
static void take_entries(const index_fn_t *f, const char *t, const char *lo) {
  cg_buf_t *b = f->c->out;
  cg_line(b, 1, "for (int64_t j = begin; j < end; j++) {\n");
  cg_line(b, 2, "const int64_t k = ind[j];\n");
  cg_line(b, 2, "if (k < %s || k >= size) {\n", lo);
  report(f, 3, "j", "size");
  cg_line(b, 2, "}\n");
  cg_line(b, 2, "const int64_t row = k < 0 ? k + size : k;\n");
  cg_line(b, 2, "for (int64_t o = 0; o < outer; o++) {\n");
  cg_line(b, 3, "%s *restrict to = y + (o * n + j) * inner;\n", t);
  cg_line(b, 3, "const %s *restrict from = d + (o * size + row) * inner;\n", t);
  cg_line(b, 3, "for (int64_t q = 0; q < inner; q++) to[q] = from[q];\n");
  cg_line(b, 2, "}\n");
  cg_line(b, 1, "}\n");
}

/* Viewing data as (outer, size, inner) and out as (outer, n, inner), n
 * the number of index entries: out[o, j, :] = data[o, index[j], :].
 * Elements are copied as unsigned integers of their size. */
static bool emit_take(index_fn_t *f) {
  cg_ctx_t *c = f->c;
  const ir_node_t *n = f->n;
  const ir_type_t *data = type_of(c, n->in[0]), *ind = type_of(c, n->in[1]);
  int axis = n->op == IR_OP_EMBEDDING
                 ? 0 : norm_axis(ir_attr_int(n->attrs, "axis", 0), data->rank);
  const char *lo = n->op == IR_OP_EMBEDDING ? "0" : "-size"; /* negatives wrap */
  const char *t = uint_type(loom_dtype_size(data->dtype));
  int64_t inner = 1, v;
  for (int d = axis + 1; d < data->rank && inner > 0; d++)
    inner = dim_value(c, data->dims[d], &v) ? inner * v : -1;
  bool rows = ind->rank >= 2 && inner == 1;
  span(f, "outer", data, 0, axis);
  span(f, "size", data, axis, axis + 1);
  span(f, "inner", data, axis + 1, data->rank);
  span(f, "n", ind, 0, ind->rank);
  if (rows) span(f, "len", ind, ind->rank - 1, ind->rank);
  cg_group_comment(c, f->gi, "index", NULL,
                   rows ? "index rows of consecutive positions copied whole" : NULL);
  if (!body_begin(f)) return false;
  pointer(f, "d", t, n->in[0], false);
  if (!f->prologue) pointer(f, "ind", cg_ctype(ind->dtype), n->in[1], false);
  pointer(f, "y", t, n->out[0], true);
  if (rows) take_rows(f, t, lo);
  else take_entries(f, t, lo);
  return group_fn(f, rows ? "  const int64_t units = len > 0 ? n / len : 0, work = outer * len;\n"
                          : "  const int64_t units = n, work = outer * inner;\n");
}

/* ---- scatter_add ---------------------------------------------------------- */

/* The shapes generated: index and src alike, and like self off the axis
 * (the reference kernel's fast case; the others keep the reference). */
static bool scatter_shapes_fit(const cg_ctx_t *c, const ir_node_t *n, int axis) {
  const ir_type_t *self = type_of(c, n->in[0]), *ind = type_of(c, n->in[1]);
  const ir_type_t *src = type_of(c, n->in[2]);
  if (ind->rank != self->rank || src->rank != self->rank) return false;
  for (int d = 0; d < self->rank; d++)
    if (!same_dim(c, ind->dims[d], src->dims[d]) ||
        (d != axis && !same_dim(c, ind->dims[d], self->dims[d])))
      return false;
  return true;
}

/* The body over units of (o, a range of columns). */
static void scatter_body(const index_fn_t *f, const char *t, bool ints) {
  cg_buf_t *b = f->c->out;
  /* Integers wrap, as repeated adds in the dtype would. */
  char row[160], one[160];
  /* a scaled row: src's element is rows * w, rounded as the mul's own
   * kernel rounds it (modules compile without contraction, -std=c11) */
  const char *val = !f->scale ? "srow[q]"
                    : type_of(f->c, f->w)->dims[1] == 1 ? "srow[q] * swj" : "srow[q] * swr[q]";
  if (ints) {
    snprintf(row, sizeof row, "(%s)((uint64_t)to[k0 * inner + q] + (uint64_t)srow[q])", t);
    snprintf(one, sizeof one, "(%s)((uint64_t)to[k * inner + q] + (uint64_t)srow[q])", t);
  } else {
    snprintf(row, sizeof row, "to[k0 * inner + q] + %s", val);
    snprintf(one, sizeof one, "to[k * inner + q] + %s", val);
  }
  cg_line(b, 1, "const int64_t chunk = x->chunk, parts = (inner + chunk - 1) / chunk;\n");
  cg_line(b, 1, "for (int64_t u = begin; u < end; u++) {\n");
  cg_line(b, 2, "const int64_t o = u / parts, q0 = u %% parts * chunk;\n");
  cg_line(b, 2, "const int64_t q1 = q0 + chunk < inner ? q0 + chunk : inner;\n");
  cg_line(b, 2, "%s *restrict to = y + o * size * inner;\n", t);
  cg_line(b, 2, "for (int64_t j = 0; j < n; j++) {\n");
  char e0[96], eq[96];
  entry(f, e0, sizeof e0, "o * n + j", "q0", "inner");
  entry(f, eq, sizeof eq, "o * n + j", "q", "inner");
  cg_line(b, 3, "const int64_t base = (o * n + j) * inner, k0 = %s;\n", e0);
  if (f->take) /* rows checked by the group function first */
    cg_line(b, 3, "const %s *restrict srow = tdata + (tind[j] < 0 ? tind[j] + tsize : "
            "tind[j]) * inner;\n", t);
  if (f->scale && type_of(f->c, f->w)->dims[1] == 1)
    cg_line(b, 3, "const %s swj = sw[o * n + j];\n", t);
  else if (f->scale)
    cg_line(b, 3, "const %s *restrict swr = sw + base;\n", t);
  if (!f->take)
    cg_line(b, 3, "const %s *restrict srow = src + base;\n", t);
  if (f->prologue && f->by_row) {
    /* One target row for the whole row of src (an index broadcast along
     * the features, as index_add's): checked once, added as a vector. */
    cg_line(b, 3, "if (k0 < 0 || k0 >= size) {\n");
    cg_line(b, 4, "const int64_t k = k0;\n");
    report(f, 4, "base + q0", "size");
    cg_line(b, 3, "}\n");
    cg_line(b, 3, "for (int64_t q = q0; q < q1; q++) to[k0 * inner + q] = %s;\n", row);
  } else {
    cg_line(b, 3, "int same = k0 >= 0 && k0 < size;\n");
    cg_line(b, 3, "for (int64_t q = q0; q < q1; q++) same &= %s == k0;\n", eq);
    cg_line(b, 3, "if (same) {\n");
    cg_line(b, 4, "for (int64_t q = q0; q < q1; q++) to[k0 * inner + q] = %s;\n", row);
    cg_line(b, 4, "continue;\n");
    cg_line(b, 3, "}\n");
    cg_line(b, 3, "for (int64_t q = q0; q < q1; q++) {\n");
    cg_line(b, 4, "const int64_t k = %s;\n", eq);
    cg_line(b, 4, "if (k < 0 || k >= size) {\n");
    report(f, 5, "base + q", "size");
    cg_line(b, 4, "}\n");
    cg_line(b, 4, "to[k * inner + q] = %s;\n", one);
    cg_line(b, 3, "}\n");
  }
  cg_line(b, 2, "}\n");
  cg_line(b, 1, "}\n");
}

/* The group function's start: a fused index_select's index is checked
 * first, whole, as its own step would have been; then self is copied;
 * columns go in chunks of a multiple of 16 so that each thread gets whole
 * vectors. */
static void scatter_setup(const index_fn_t *f, const char *t, char *out, size_t size) {
  const cg_ctx_t *c = f->c;
  const ir_node_t *n = f->n;
  char check[512] = "";
  if (f->take) {
    const char *it = cg_ctype(type_of(c, f->take->in[1])->dtype);
    snprintf(check, sizeof check,
             "  {\n"
             "    const %s *restrict tind = (const %s *)slots[%d];\n"
             "    for (int64_t j = 0; j < n; j++)\n"
             "      if (tind[j] < -tsize || tind[j] >= tsize) {\n"
             "        rt->index_error(rt, %d, j, tind[j], tsize);\n"
             "        return;\n"
             "      }\n"
             "  }\n",
             it, it, (int)cg_slot(c, f->take->in[1]),
             cg_node_position(c, f->gi, (int32_t)(f->take - c->g->nodes)));
  }
  snprintf(out, size,
           "%s"
           "  {\n"
           "    const %s *restrict from = (const %s *)slots[%d];\n"
           "    %s *restrict to = (%s *)slots[%d];\n"
           "    if ((const void *)to != (const void *)from)\n"
           "      for (int64_t i = 0; i < outer * size * inner; i++) to[i] = from[i];\n"
           "  }\n"
           "  const int64_t split = (inner + rt->threads - 1) / rt->threads;\n"
           "  x.chunk = inner < 1 ? 1 : rt->threads > 1 && outer < rt->threads "
           "? (split + 15) / 16 * 16 : inner;\n"
           "  const int64_t units = outer * ((inner + x.chunk - 1) / x.chunk), "
           "work = n * x.chunk;\n",
           check, t, t, (int)cg_slot(c, n->in[0]), t, t, (int)cg_slot(c, n->out[0]));
}

/* out = self, then viewing index and src as (outer, n, inner) and out as
 * (outer, size, inner): out[o, index[o, j, q], q] += src[o, j, q]. A unit
 * of work is one o and a range of columns, so no two threads write one
 * element and each element's sum runs in index order, whatever the
 * threads. An index row whose columns all name one row is a vector add. */
static bool emit_scatter(index_fn_t *f) {
  cg_ctx_t *c = f->c;
  const ir_node_t *n = f->n;
  const ir_type_t *self = type_of(c, n->in[0]), *ind = type_of(c, n->in[1]);
  int axis = norm_axis(ir_attr_int(n->attrs, "axis", 0), self->rank);
  if (!scatter_shapes_fit(c, n, axis)) return false;
  const char *t = cg_ctype(self->dtype);
  span(f, "outer", self, 0, axis);
  span(f, "size", self, axis, axis + 1);
  span(f, "inner", self, axis + 1, self->rank);
  span(f, "n", ind, axis, axis + 1);
  if (f->take) span(f, "tsize", type_of(c, f->take->in[0]), 0, 1);
  cg_group_comment(c, f->gi, "index", NULL,
                   f->scale  ? "src rows picked and scaled in place, columns split over threads"
                   : f->take ? "src rows picked in place, columns split over threads"
                             : "columns split over threads");
  if (!body_begin(f)) return false;
  if (!f->prologue) pointer(f, "ind", cg_ctype(ind->dtype), n->in[1], false);
  if (f->take) {
    pointer(f, "tdata", t, f->take->in[0], false);
    pointer(f, "tind", cg_ctype(type_of(c, f->take->in[1])->dtype), f->take->in[1], false);
    if (f->scale) pointer(f, "sw", t, f->w, false);
  } else {
    pointer(f, "src", t, n->in[2], false);
  }
  pointer(f, "y", t, n->out[0], true);
  scatter_body(f, t, !dtype_is_float(self->dtype));
  char setup[1600];
  scatter_setup(f, t, setup, sizeof setup);
  return group_fn(f, setup);
}

/* ---- one_hot ---------------------------------------------------------------- */

/* out[j, :] = 0 but out[j, index[j]] = 1, in the output dtype's bytes. */
static bool emit_one_hot(index_fn_t *f) {
  cg_ctx_t *c = f->c;
  const ir_node_t *n = f->n;
  const ir_type_t *ind = type_of(c, n->in[0]), *out = type_of(c, n->out[0]);
  const char *t = uint_type(loom_dtype_size(out->dtype));
  uint64_t one = 0;
  char bytes[8] = {0};
  dtype_store_f64(out->dtype, bytes, 1.0);
  memcpy(&one, bytes, sizeof one);
  span(f, "n", ind, 0, ind->rank);
  span(f, "depth", out, out->rank - 1, out->rank);
  cg_group_comment(c, f->gi, "index", NULL, NULL);
  if (!body_begin(f)) return false;
  pointer(f, "ind", cg_ctype(ind->dtype), n->in[0], false);
  pointer(f, "y", t, n->out[0], true);
  cg_buf_t *b = c->out;
  cg_line(b, 1, "for (int64_t j = begin; j < end; j++) {\n");
  cg_line(b, 2, "const int64_t k = ind[j];\n");
  cg_line(b, 2, "if (k < 0 || k >= depth) {\n");
  report(f, 3, "j", "depth");
  cg_line(b, 2, "}\n");
  cg_line(b, 2, "for (int64_t q = 0; q < depth; q++) y[j * depth + q] = 0;\n");
  cg_line(b, 2, "y[j * depth + k] = (%s)%lluULL;\n", t, (unsigned long long)one);
  cg_line(b, 1, "}\n");
  return group_fn(f, "  const int64_t units = n, work = depth;\n");
}

/* ---- Index prologues --------------------------------------------------------- */

/* How a value of type t, read by the nodes that compute an index of type
 * it, lines up with the index viewed as rows by columns (its last dim):
 * *row, whether it varies with the row (its dims before the last are the
 * index's), *col, whether it varies with the column (its last dim is the
 * index's, else 1); false when neither holds for the rows. */
static bool prologue_strides(const ir_type_t *it, const ir_type_t *t, bool *row, bool *col) {
  int ri = it->rank, r = t->rank;
  if (ri < 2 || r > ri) return false;
  *col = r > 0 && t->dims[r - 1] != 1;
  if (*col && t->dims[r - 1] != it->dims[ri - 1]) return false;
  bool ones = true, same = r == ri;
  for (int d = 0; d + 1 < r; d++) {
    ones &= t->dims[d] == 1;
    same &= t->dims[d] == it->dims[d];
  }
  *row = !ones;
  return ones || same;
}

bool cg_index_prologue_ok(const loom_graph_t *g, const ir_node_t *n) {
  if (n->op != IR_OP_GATHER && n->op != IR_OP_SCATTER_ADD) return false;
  const ir_type_t *data = &g->values[n->in[0]].type, *ind = &g->values[n->in[1]].type;
  int rank = data->rank;
  if (n->op == IR_OP_GATHER)
    return ind->rank >= 2 && norm_axis(ir_attr_int(n->attrs, "axis", 0), rank) == rank - 1;
  if (n->op != IR_OP_SCATTER_ADD || rank < 2 ||
      norm_axis(ir_attr_int(n->attrs, "axis", 0), rank) != rank - 2)
    return false;
  const ir_type_t *src = &g->values[n->in[2]].type;
  if (ind->rank != rank || src->rank != rank) return false;
  for (int d = 0; d < rank; d++)
    if (ind->dims[d] != src->dims[d] || (d != rank - 2 && ind->dims[d] != data->dims[d]))
      return false;
  return true;
}

/* The operand of mul node m other than the take's rows, when m scales
 * them into a scatter's src: a float (n, 1) or (n, inner) matrix, the
 * rows' own shape, read once per row or element; else -1. */
static int32_t scale_operand(const loom_graph_t *g, const ir_node_t *m, int32_t rows) {
  if (m->op != IR_OP_MUL || m->n_in != 2 || (m->in[0] == rows) == (m->in[1] == rows))
    return -1;
  int32_t w = m->in[0] == rows ? m->in[1] : m->in[0];
  const ir_type_t *r = &g->values[rows].type, *t = &g->values[w].type,
                  *out = &g->values[m->out[0]].type;
  if (!dtype_is_float(r->dtype) || t->dtype != r->dtype || t->rank != 2 || r->rank != 2 ||
      out->dims[0] != r->dims[0] || out->dims[1] != r->dims[1] || t->dims[0] != r->dims[0] ||
      (t->dims[1] != 1 && t->dims[1] != r->dims[1]))
    return -1;
  return w;
}

bool cg_index_src_fits(const loom_graph_t *g, const ir_node_t *scatter,
                       const ir_node_t *take) {
  int32_t rows = take->out[0];
  bool one_d_gather = take->op == IR_OP_GATHER && g->values[take->in[1]].type.rank == 1;
  if (scatter->op != IR_OP_SCATTER_ADD || (take->op != IR_OP_INDEX_SELECT && !one_d_gather) ||
      scatter->in[0] == rows || scatter->in[1] == rows)
    return false;
  if (scatter->in[2] != rows) { /* rows * w, the mul read by the scatter alone */
    const ir_value_t *src = &g->values[scatter->in[2]];
    if (src->kind != IR_VALUE_NODE || scale_operand(g, &g->nodes[src->node], rows) < 0)
      return false;
  }
  const ir_type_t *data = &g->values[take->in[0]].type, *self = &g->values[scatter->in[0]].type;
  return data->rank == 2 && self->rank == 2 && data->dtype == self->dtype &&
         norm_axis(ir_attr_int(take->attrs, "axis", 0), 2) == 0 &&
         norm_axis(ir_attr_int(scatter->attrs, "axis", 0), 2) == 0 &&
         cg_index_prologue_ok(g, scatter);
}

bool cg_index_prologue_reads(const loom_graph_t *g, const ir_node_t *n, const ir_type_t *t) {
  bool row, col;
  return prologue_strides(&g->values[n->in[1]].type, t, &row, &col);
}

/* Whether input k of the group's i-th node was loaded already, as an
 * input of an earlier prologue node or an earlier input of this one. */
static bool loaded_before(const index_fn_t *f, const fuse_group_t *grp, int i, int k) {
  const loom_graph_t *g = f->c->g;
  int32_t u = g->nodes[grp->nodes[i]].in[k];
  for (int j = 0; j <= i; j++) {
    const ir_node_t *m = &g->nodes[grp->nodes[j]];
    if (m == f->n || m == f->take || m == f->scale) continue;
    for (int q = 0; q < (j < i ? m->n_in : k); q++)
      if (m->in[q] == u) return true;
  }
  return false;
}

/* loom_g<gi>_index(slots, syms, r, q): entry (r, q) of the index, from the
 * prologue nodes (elementwise ops and expands) of the group. */
static bool emit_prologue(index_fn_t *f, const fuse_group_t *grp) {
  cg_ctx_t *c = f->c;
  cg_buf_t *b = c->out;
  const loom_graph_t *g = c->g;
  const ir_type_t *it = type_of(c, f->n->in[1]);
  cg_function(c, "static inline int64_t loom_g%d_index(void *const *slots, const int64_t *syms, "
                 "int64_t r, int64_t q) {\n", f->gi);
  cg_line(b, 1, "(void)syms;\n");
  cg_line(b, 1, "const int64_t cols = ");
  if (!dim_write(c, it->dims[it->rank - 1], b)) return false;
  cg_printf(b, ";\n");
  cg_line(b, 1, "(void)cols;\n");
  f->by_row = true;
  for (int i = 0; i < grp->n_nodes; i++) {
    const ir_node_t *m = &g->nodes[grp->nodes[i]];
    if (m == f->n || m == f->take || m == f->scale) continue;
    for (int k = 0; k < m->n_in; k++) {
      int32_t u = m->in[k];
      bool row, col;
      if (cg_in_group(c, f->gi, u) || loaded_before(f, grp, i, k)) continue;
      if (cg_slot(c, u) < 0 || !prologue_strides(it, type_of(c, u), &row, &col)) return false;
      f->by_row &= !col;
      const char *t = cg_ctype(type_of(c, u)->dtype);
      cg_line(b, 1, "const %s *restrict p%d = (const %s *)slots[%d];\n", t, (int)u, t,
              (int)cg_slot(c, u));
      cg_load_begin(b, 1, g, u);
      cg_printf(b, "r * %s + q * %d", row ? (col ? "cols" : "1") : "0", col ? 1 : 0);
      cg_load_end(b, g, u);
    }
    if (m->op == IR_OP_EXPAND)
      cg_line(b, 1, "const %s v%d = v%d;\n",
              cg_local_type(type_of(c, m->out[0])->dtype), (int)m->out[0], (int)m->in[0]);
    else if (ir_ops[m->op].fusion_class == IR_CLASS_EW && m->n_out == 1 &&
             cg_expr_supported(g, m))
      cg_node_stmt(b, 1, g, m);
    else
      return false;
  }
  cg_line(b, 1, "return (int64_t)v%d;\n", (int)f->n->in[1]);
  cg_printf(b, "}\n\n");
  return true;
}

/* ---- The emitter -------------------------------------------------------------- */

bool cg_is_index_op(ir_op_t op) { return ir_op_has(op, F_INDEX); }

/* The take (and the mul scaling its rows) that computes the scatter's
 * src in the group, from src's producer p. */
static void find_take(index_fn_t *f, const ir_node_t *p) {
  const cg_ctx_t *c = f->c;
  f->take = p;
  if (p->op != IR_OP_MUL) return;
  for (int k = 0; k < 2; k++) {
    const ir_value_t *v = &c->g->values[p->in[k]];
    if (v->kind != IR_VALUE_NODE || !cg_in_group(c, f->gi, p->in[k])) continue;
    f->take = &c->g->nodes[v->node];
    f->scale = p;
    f->w = scale_operand(c->g, p, p->in[k]);
  }
}

/* The index node is the group's last; nodes before it compute its index
 * (fuse.c folds them in when cg_index_prologue_ok holds). */
loom_status_t cg_emit_index(cg_ctx_t *c, int gi, bool *ok) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  int32_t id = grp->nodes[grp->n_nodes - 1];
  const ir_node_t *n = &c->g->nodes[id];
  index_fn_t f = {.c = c, .gi = gi, .n = n,
                  .prologue = n->n_in > 1 && cg_in_group(c, gi, n->in[1])};
  if (n->op == IR_OP_SCATTER_ADD && cg_in_group(c, gi, n->in[2]))
    find_take(&f, &c->g->nodes[c->g->values[n->in[2]].node]);
  *ok = cg_supports(c->g, id) && n->n_out == 1 && cg_slot(c, n->out[0]) >= 0 &&
        (!f.prologue || cg_index_prologue_ok(c->g, n)) &&
        (!f.take || (cg_index_src_fits(c->g, n, f.take) &&
                     cg_slot(c, f.take->in[0]) >= 0 && cg_slot(c, f.take->in[1]) >= 0)) &&
        (!f.scale || (f.w >= 0 && cg_slot(c, f.w) >= 0));
  for (int i = 0; i < n->n_in && *ok; i++)
    *ok = cg_slot(c, n->in[i]) >= 0 || (f.prologue && i == 1) || (f.take && i == 2);
  if (!*ok) return LOOM_OK;
  if (f.prologue) {
    cg_group_comment(c, gi, "index prologue", NULL, NULL);
    *ok = emit_prologue(&f, grp);
    if (!*ok) return LOOM_OK;
  }
  switch (f.n->op) {
    case IR_OP_SCATTER_ADD: *ok = emit_scatter(&f); break;
    case IR_OP_ONE_HOT: *ok = emit_one_hot(&f); break;
    default: *ok = emit_take(&f); break;
  }
  return LOOM_OK;
}
