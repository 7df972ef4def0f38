/* Pooling groups: one max_pool2d or avg_pool2d over NCHW (the anchor),
 * with an elementwise prologue over its input space (a relu before the
 * pool, recomputed at each tap: cheaper than a buffer between them) and
 * an elementwise epilogue over its output space.
 *
 * Work is a list of output rows (plane, oh), split over the pool. A row
 * keeps its accumulators in a local array; for each kernel tap (kh, kw)
 * one loop over the output columns folds in x[ih][ow*stride + kw*dil -
 * pad]. The columns whose tap falls inside the image are a range known
 * when the code is generated (lo[kw], hi[kw]), so the inner loop has no
 * test and vectorizes; padding is never read. Taps are folded in the
 * reference kernel's order (kh, then kw), so max pooling matches it
 * exactly, NaN and signed zeros included. */
#include <stdio.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

/* Output columns per accumulator block: the block lives on the stack of
 * a pool thread. */
#define POOL_COLS 1024

typedef struct pool_geom {
  cg_shape_t in, out;          /* (N, C, H, W) and (N, C, Ho, Wo) */
  int64_t kernel[2], stride[2], pads[4], dilation[2];
  bool avg, include_pad;
} pool_geom_t;

typedef struct pool_emit {
  cg_ctx_t *c;
  int gi;
  const fuse_group_t *grp;
  const ir_node_t *anchor;
  pool_geom_t geo;
  loom_dtype_t dtype;
  int32_t x, y;                /* the anchor's input and output */
  /* Per group input: whether it is read over the input space (by the
   * prologue or the anchor) and over the output space (by the
   * epilogue), and its strides there. */
  bool *in_read, *out_read;
  int64_t (*in_stride)[LOOM_MAX_RANK];
  int64_t (*out_stride)[LOOM_MAX_RANK];
} pool_emit_t;

static bool is_pool_op(ir_op_t op) { return ir_op_has(op, F_WINDOW); }

/* ---- Geometry ---------------------------------------------------------------- */

static void read_ints(const ir_node_t *n, const char *name, int count, int64_t *dst) {
  const int64_t *v;
  if (ir_attr_ints(n->attrs, name, &v) == count)
    for (int i = 0; i < count; i++) dst[i] = v[i];
}

/* The attributes with the reference kernel's defaults. */
static bool read_geom(pool_emit_t *p) {
  pool_geom_t *g = &p->geo;
  const ir_node_t *n = p->anchor;
  *g = (pool_geom_t){.dilation = {1, 1}};
  read_ints(n, "kernel", 2, g->kernel);
  g->stride[0] = g->kernel[0];
  g->stride[1] = g->kernel[1];
  read_ints(n, "stride", 2, g->stride);
  read_ints(n, "pads", 4, g->pads);
  read_ints(n, "dilation", 2, g->dilation);
  g->avg = n->op == IR_OP_AVG_POOL2D;
  g->include_pad = ir_attr_int(n->attrs, "count_include_pad", 0) != 0;
  return cg_value_shape(p->c, p->x, &g->in) && cg_value_shape(p->c, p->y, &g->out) &&
         g->in.rank == 4 && g->out.rank == 4 && g->stride[0] > 0 && g->stride[1] > 0;
}

/* First and one-past-last output column whose tap kw lies in [0, W). */
static void column_range(const pool_geom_t *g, int64_t kw, int64_t *lo, int64_t *hi) {
  int64_t off = kw * g->dilation[1] - g->pads[1], w = g->in.dim[3], s = g->stride[1];
  int64_t first = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t last = w - 1 - off < 0 ? -1 : (w - 1 - off) / s;
  *lo = first;
  *hi = last + 1 < first ? first : last + 1;
  if (*hi > g->out.dim[3]) *hi = g->out.dim[3];
  if (*lo > *hi) *lo = *hi;
}

/* ---- What the group holds ------------------------------------------------------ */

static int anchor_index(const fuse_group_t *grp, const loom_graph_t *g) {
  int at = -1;
  for (int k = 0; k < grp->n_nodes; k++)
    if (is_pool_op(g->nodes[grp->nodes[k]].op)) {
      if (at >= 0) return -1;
      at = k;
    }
  return at;
}

static bool same_dims(const cg_shape_t *a, const cg_shape_t *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dim[d] != b->dim[d]) return false;
  return true;
}

/* Prologue nodes (before the anchor) produce values over the input space
 * that only the group reads; epilogue nodes (after it) produce values
 * over the output space, where every output of the group lies. */
static bool nodes_fit(pool_emit_t *p, int at) {
  const loom_graph_t *g = p->c->g;
  for (int k = 0; k < p->grp->n_nodes; k++) {
    if (k == at) continue;
    const ir_node_t *n = &g->nodes[p->grp->nodes[k]];
    if (n->n_out != 1 || !cg_expr_supported(g, n)) return false;
    if (k < at && cg_is_output(p->grp, n->out[0])) return false;
    cg_shape_t s;
    if (k > at && (!cg_value_shape(p->c, n->out[0], &s) || !same_dims(&s, &p->geo.out)))
      return false;
  }
  for (int i = 0; i < p->grp->n_outputs; i++) {
    cg_shape_t s;
    if (cg_slot(p->c, p->grp->outputs[i]) < 0 ||
        !cg_value_shape(p->c, p->grp->outputs[i], &s) || !same_dims(&s, &p->geo.out))
      return false;
  }
  return true;
}

static bool reads(const ir_node_t *n, int32_t v) {
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] == v) return true;
  return false;
}

/* Where each group input is read, and its strides there. */
static bool inputs_fit(pool_emit_t *p, int at) {
  const loom_graph_t *g = p->c->g;
  for (int i = 0; i < p->grp->n_inputs; i++) {
    int32_t v = p->grp->inputs[i];
    p->in_read[i] = p->out_read[i] = false;
    for (int k = 0; k < p->grp->n_nodes; k++)
      if (reads(&g->nodes[p->grp->nodes[k]], v)) {
        if (k <= at) p->in_read[i] = true;
        else p->out_read[i] = true;
      }
    cg_shape_t s;
    if (cg_slot(p->c, v) < 0 || !cg_value_shape(p->c, v, &s)) return false;
    if (p->in_read[i] && !cg_broadcast_strides(&s, &p->geo.in, p->in_stride[i])) return false;
    if (p->out_read[i] && !cg_broadcast_strides(&s, &p->geo.out, p->out_stride[i]))
      return false;
  }
  return true;
}

static void pool_free(pool_emit_t *p) {
  core_free(p->in_read);
  core_free(p->out_read);
  core_free(p->in_stride);
  core_free(p->out_stride);
}

/* *ok false: the group is not one this emitter handles. */
static loom_status_t pool_build(cg_ctx_t *c, int gi, pool_emit_t *p, bool *ok) {
  *p = (pool_emit_t){.c = c, .gi = gi, .grp = &c->plan->groups[gi]};
  int at = anchor_index(p->grp, c->g);
  *ok = at >= 0;
  if (!*ok) return LOOM_OK;
  size_t n = (size_t)p->grp->n_inputs + 1;
  p->in_read = core_calloc(n, sizeof *p->in_read);
  p->out_read = core_calloc(n, sizeof *p->out_read);
  p->in_stride = core_calloc(n, sizeof *p->in_stride);
  p->out_stride = core_calloc(n, sizeof *p->out_stride);
  if (!p->in_read || !p->out_read || !p->in_stride || !p->out_stride)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  p->anchor = &c->g->nodes[p->grp->nodes[at]];
  p->x = p->anchor->in[0];
  p->y = p->anchor->out[0];
  p->dtype = c->g->values[p->x].type.dtype;
  *ok = dtype_is_float(p->dtype) && read_geom(p) && nodes_fit(p, at) && inputs_fit(p, at);
  return LOOM_OK;
}

/* ---- Text ---------------------------------------------------------------------- */

static void emit_tables(pool_emit_t *p, int level) {
  cg_buf_t *b = p->c->out;
  const pool_geom_t *g = &p->geo;
  cg_line(b, level, "/* Output columns whose tap kw lies inside the image: [lo, hi). */\n");
  for (int upper = 0; upper < 2; upper++) {
    cg_line(b, level, "static const int64_t %s[%lld] = {", upper ? "hi" : "lo",
            (long long)g->kernel[1]);
    for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
      int64_t lo, hi;
      column_range(g, kw, &lo, &hi);
      cg_printf(b, "%s%lld", kw ? ", " : "", (long long)(upper ? hi : lo));
    }
    cg_printf(b, "};\n");
  }
}

/* Node k of the group for k in [from, to), in order. */
static void emit_nodes(pool_emit_t *p, int level, int from, int to) {
  for (int k = from; k < to; k++)
    cg_node_stmt(p->c->out, level, p->c->g, &p->c->g->nodes[p->grp->nodes[k]]);
}

static void load_inputs(pool_emit_t *p, int level, bool input_space) {
  cg_buf_t *b = p->c->out;
  for (int i = 0; i < p->grp->n_inputs; i++) {
    if (!(input_space ? p->in_read[i] : p->out_read[i])) continue;
    int32_t v = p->grp->inputs[i];
    cg_load_begin(b, level, p->c->g, v);
    cg_offset(b, "i", 0, 4, input_space ? p->in_stride[i] : p->out_stride[i]);
    cg_load_end(b, p->c->g, v);
  }
}

/* The fold of one tap into acc[ow - c0]; max keeps a NaN once it has one. */
static void emit_fold(pool_emit_t *p, int level) {
  const char *acc = "acc[ow - c0]";
  if (p->geo.avg)
    cg_line(p->c->out, level, "%s += v%d;\n", acc, (int)p->x);
  else
    cg_line(p->c->out, level, "%s = LOOM_MAXIMUM(v%d, %s);\n", acc, (int)p->x, acc);
}

/* "const int64_t <var> = <out> * stride + <tap> * dilation - pad;"
 * without the terms that do nothing. */
static void emit_index(cg_buf_t *b, int level, const char *var, const char *out,
                       const char *tap, int64_t stride, int64_t dilation, int64_t pad) {
  cg_line(b, level, "const int64_t %s = %s", var, out);
  if (stride != 1) cg_printf(b, " * %lld", (long long)stride);
  cg_printf(b, " + %s", tap);
  if (dilation != 1) cg_printf(b, " * %lld", (long long)dilation);
  if (pad) cg_printf(b, " - %lld", (long long)pad);
  cg_printf(b, ";\n");
}

/* The columns where every tap kw lies inside the image: [lo, hi) of all
 * kw at once (empty when some tap's range is). */
static void interior_range(const pool_geom_t *g, int64_t *lo, int64_t *hi) {
  *lo = 0;
  *hi = g->out.dim[3];
  for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
    int64_t a, z;
    column_range(g, kw, &a, &z);
    *lo = a > *lo ? a : *lo;
    *hi = z < *hi ? z : *hi;
  }
  if (*hi < *lo) *hi = *lo;
}

/* Widest kernel whose row of taps the interior loop folds unrolled. */
enum { UNROLLED_TAPS = 8 };

/* One tap (kh, kw) folded at column ow, in a block of its own. */
static void emit_tap(pool_emit_t *p, int level, int at, const char *kw) {
  cg_buf_t *b = p->c->out;
  const pool_geom_t *g = &p->geo;
  cg_line(b, level, "{\n");
  emit_index(b, level + 1, "i3", "ow", kw, g->stride[1], g->dilation[1], g->pads[1]);
  cg_line(b, level + 1, "(void)i3;\n");
  load_inputs(p, level + 1, true);
  emit_nodes(p, level + 1, 0, at);
  emit_fold(p, level + 1);
  cg_line(b, level, "}\n");
}

/* The taps of one block of output columns [c0, c0 + cn), row of taps kh
 * by row: the interior columns fold a row's taps in one pass, unrolled
 * (the accumulator in a register, the strided loads vectorized), the
 * columns near the edges tap by tap over each tap's own range. Each
 * output still folds its taps in the reference's order. */
static void emit_taps(pool_emit_t *p, int level, int at) {
  cg_buf_t *b = p->c->out;
  const pool_geom_t *g = &p->geo;
  int64_t in_lo = 0, in_hi = 0;
  if (g->kernel[1] <= UNROLLED_TAPS) interior_range(g, &in_lo, &in_hi);
  cg_line(b, level, "const int64_t a = %lld > c0 ? %lld : c0;\n", (long long)in_lo,
          (long long)in_lo);
  cg_line(b, level, "const int64_t z = %lld < c0 + cn ? (%lld > a ? %lld : a) : c0 + cn;\n",
          (long long)in_hi, (long long)in_hi, (long long)in_hi);
  cg_line(b, level, "for (int64_t kh = 0; kh < %lld; kh++) {\n", (long long)g->kernel[0]);
  emit_index(b, level + 1, "i2", "oh", "kh", g->stride[0], g->dilation[0], g->pads[0]);
  cg_line(b, level + 1, "if (i2 < 0 || i2 >= %lld) continue;\n", (long long)g->in.dim[2]);
  if (g->avg && !g->include_pad) cg_line(b, level + 1, "rows++;\n");
  if (in_hi > in_lo) {
    cg_line(b, level + 1, "for (int64_t ow = a; ow < z; ow++) {\n");
    for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
      char tap[24];
      snprintf(tap, sizeof tap, "%lld", (long long)kw);
      emit_tap(p, level + 2, at, tap);
    }
    cg_line(b, level + 1, "}\n");
  }
  cg_line(b, level + 1, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (long long)g->kernel[1]);
  cg_line(b, level + 2, "const int64_t lo_kw = lo[kw] > c0 ? lo[kw] : c0;\n");
  cg_line(b, level + 2, "const int64_t hi_kw = hi[kw] < c0 + cn ? hi[kw] : c0 + cn;\n");
  cg_line(b, level + 2, "for (int64_t ow = lo_kw; ow < hi_kw; ow++) {\n");
  cg_line(b, level + 3, "if (ow == a && z > a) ow = z;\n");
  cg_line(b, level + 3, "if (ow >= hi_kw) break;\n");
  emit_tap(p, level + 3, at, "kw");
  cg_line(b, level + 2, "}\n");
  cg_line(b, level + 1, "}\n");
  cg_line(b, level, "}\n");
}

/* The anchor's value at column ow: the maximum, or the sum over the
 * divisor (the kernel's area, or the taps inside the image). */
static void emit_result(pool_emit_t *p, int level) {
  cg_buf_t *b = p->c->out;
  const pool_geom_t *g = &p->geo;
  const char *t = cg_local_type(p->dtype);
  const char *round = p->dtype == LOOM_F16 ? "loom_f16_round"
                      : p->dtype == LOOM_BF16 ? "loom_bf16_round" : "";
  if (!g->avg) {
    cg_line(b, level, "const %s v%d = acc[j];\n", t, (int)p->y);
    return;
  }
  if (g->include_pad) {
    cg_line(b, level, "const %s v%d = %s(acc[j] / (%s)%lld);\n", t, (int)p->y, round, t,
            (long long)(g->kernel[0] * g->kernel[1]));
    return;
  }
  cg_line(b, level, "int64_t cols = 0;\n");
  cg_line(b, level, "for (int64_t kw = 0; kw < %lld; kw++) cols += ow >= lo[kw] && ow < hi[kw];\n",
          (long long)g->kernel[1]);
  cg_line(b, level, "const %s v%d = %s(acc[j] / (%s)(rows * cols));\n", t, (int)p->y, round, t);
}

/* The anchor's result, the epilogue, and the stores of one block. */
static void emit_finish(pool_emit_t *p, int level, int at) {
  cg_buf_t *b = p->c->out;
  cg_line(b, level, "for (int64_t j = 0; j < cn; j++) {\n");
  cg_line(b, level + 1, "const int64_t ow = c0 + j, i2 = oh, i3 = ow;\n");
  cg_line(b, level + 1, "(void)i2, (void)i3;\n");
  emit_result(p, level + 1);
  load_inputs(p, level + 1, false);
  emit_nodes(p, level + 1, at + 1, p->grp->n_nodes);
  const pool_geom_t *g = &p->geo;
  int64_t stride[4] = {g->out.dim[1] * g->out.dim[2] * g->out.dim[3],
                       g->out.dim[2] * g->out.dim[3], g->out.dim[3], 1};
  for (int i = 0; i < p->grp->n_outputs; i++) {
    cg_store_begin(b, level + 1, p->grp->outputs[i]);
    cg_offset(b, "i", 0, 4, stride);
    cg_store_end(b, p->c->g, p->grp->outputs[i]);
  }
  cg_line(b, level, "}\n");
}

static void emit_body(pool_emit_t *p, int at) {
  cg_buf_t *b = p->c->out;
  const pool_geom_t *g = &p->geo;
  int64_t cols = g->out.dim[3] < POOL_COLS ? g->out.dim[3] : POOL_COLS;
  cg_function(p->c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", p->gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  for (int i = 0; i < p->grp->n_inputs; i++)
    cg_declare_pointer(p->c, p->grp, 1, p->grp->inputs[i], false);
  for (int i = 0; i < p->grp->n_outputs; i++)
    cg_declare_pointer(p->c, p->grp, 1, p->grp->outputs[i], true);
  emit_tables(p, 1);
  cg_line(b, 1, "/* r: output row (n, c, oh). */\n");
  cg_line(b, 1, "for (int64_t r = begin; r < end; r++) {\n");
  cg_line(b, 2, "const int64_t i0 = r / %lld, i1 = r / %lld %% %lld, oh = r %% %lld;\n",
          (long long)(g->out.dim[1] * g->out.dim[2]), (long long)g->out.dim[2],
          (long long)g->out.dim[1], (long long)g->out.dim[2]);
  cg_line(b, 2, "(void)i0, (void)i1;\n");
  cg_line(b, 2, "%s acc[%lld];\n", cg_local_type(p->dtype), (long long)(cols > 0 ? cols : 1));
  /* A row wider than one block is done in blocks of columns [c0, c0 + cn). */
  if (g->out.dim[3] <= POOL_COLS) {
    cg_line(b, 2, "{\n");
    cg_line(b, 3, "const int64_t c0 = 0, cn = %lld;\n", (long long)g->out.dim[3]);
  } else {
    cg_line(b, 2, "for (int64_t c0 = 0; c0 < %lld; c0 += %lld) {\n", (long long)g->out.dim[3],
            (long long)cols);
    cg_line(b, 3, "const int64_t cn = %lld - c0 < %lld ? %lld - c0 : %lld;\n",
            (long long)g->out.dim[3], (long long)cols, (long long)g->out.dim[3], (long long)cols);
  }
  cg_line(b, 3, "for (int64_t j = 0; j < cn; j++) acc[j] = %s;\n", g->avg ? "0" : "-INFINITY");
  if (g->avg && !g->include_pad) cg_line(b, 3, "int64_t rows = 0;\n");
  emit_taps(p, 3, at);
  emit_finish(p, 3, at);
  cg_line(b, 2, "}\n");
  cg_line(b, 1, "}\n");
  cg_printf(b, "}\n\n");
}

static void emit_entry(pool_emit_t *p) {
  cg_buf_t *b = p->c->out;
  const pool_geom_t *g = &p->geo;
  int64_t rows = g->out.dim[0] * g->out.dim[1] * g->out.dim[2];
  int64_t per_row = g->out.dim[3] * g->kernel[0] * g->kernel[1];
  cg_group_function(p->c, p->gi);
  cg_line(b, 1, "(void)syms;\n");
  if (rows * per_row > CG_PARALLEL_MIN && rows > 1) {
    int64_t grain = CG_PARALLEL_MIN / 2 / (per_row ? per_row : 1);
    cg_line(b, 1, "rt->parallel_for(rt->pool, %lld, %lld, loom_g%d_body, (void *)slots);\n",
            (long long)rows, (long long)(grain > 1 ? grain : 1), p->gi);
  } else {
    cg_line(b, 1, "(void)rt;\n");
    cg_line(b, 1, "loom_g%d_body((void *)slots, 0, %lld);\n", p->gi, (long long)rows);
  }
  cg_printf(b, "}\n");
}

static void emit_comment(pool_emit_t *p) {
  const pool_geom_t *g = &p->geo;
  char note[160];
  snprintf(note, sizeof note, "to %lldx%lld, kernel %lldx%lld, stride %lldx%lld, "
           "pads %lld %lld %lld %lld, dilation %lldx%lld%s",
           (long long)g->out.dim[2], (long long)g->out.dim[3], (long long)g->kernel[0],
           (long long)g->kernel[1], (long long)g->stride[0], (long long)g->stride[1],
           (long long)g->pads[0], (long long)g->pads[1], (long long)g->pads[2],
           (long long)g->pads[3], (long long)g->dilation[0], (long long)g->dilation[1],
           g->avg ? (g->include_pad ? ", padding counted" : ", padding not counted") : "");
  cg_group_comment(p->c, p->gi, "pooling", &g->in, note);
}

loom_status_t cg_emit_pool(cg_ctx_t *c, int gi, bool *ok) {
  pool_emit_t p;
  loom_status_t s = pool_build(c, gi, &p, ok);
  if (s == LOOM_OK && *ok) {
    int at = anchor_index(p.grp, c->g);
    emit_comment(&p);
    emit_body(&p, at);
    emit_entry(&p);
  }
  pool_free(&p);
  return s;
}

/* ---- Max pooling's gradient -----------------------------------------------------
 * One max_pool2d_grad node, f32: per (image, channel) plane (split over
 * the pool), dX is zeroed, then each window's dY is added at the first
 * maximum of x in it, or its last NaN (taps in the reference kernel's
 * order), as PyTorch routes it. */

typedef struct mpg_emit {
  cg_ctx_t *c;
  int gi;
  const ir_node_t *n;
  pool_geom_t geo;
} mpg_emit_t;

static bool mpg_fits(mpg_emit_t *k) {
  const loom_graph_t *g = k->c->g;
  pool_geom_t *geo = &k->geo;
  *geo = (pool_geom_t){.dilation = {1, 1}};
  read_ints(k->n, "kernel", 2, geo->kernel);
  geo->stride[0] = geo->kernel[0];
  geo->stride[1] = geo->kernel[1];
  read_ints(k->n, "stride", 2, geo->stride);
  read_ints(k->n, "pads", 4, geo->pads);
  read_ints(k->n, "dilation", 2, geo->dilation);
  for (int i = 0; i < 2; i++)
    if (g->values[k->n->in[i]].type.dtype != LOOM_F32 || cg_slot(k->c, k->n->in[i]) < 0)
      return false;
  return k->c->plan->groups[k->gi].n_nodes == 1 && cg_slot(k->c, k->n->out[0]) >= 0 &&
         cg_value_shape(k->c, k->n->in[0], &geo->in) &&
         cg_value_shape(k->c, k->n->in[1], &geo->out) && geo->in.rank == 4 &&
         geo->out.rank == 4 && !geo->in.lead && !geo->out.lead && geo->kernel[0] > 0 &&
         geo->kernel[1] > 0;
}

/* The argmax of each output's window, one output at a time, then its
 * gradient added at that input (the general form). */
static void mpg_outputs(mpg_emit_t *k) {
  cg_buf_t *b = k->c->out;
  const pool_geom_t *g = &k->geo;
  int64_t h = g->in.dim[2], w = g->in.dim[3], oh = g->out.dim[2], ow = g->out.dim[3];
  cg_line(b, 2, "for (int64_t oy = 0; oy < %lld; oy++)\n", (long long)oh);
  cg_line(b, 3, "for (int64_t ox = 0; ox < %lld; ox++) {\n", (long long)ow);
  cg_line(b, 4, "int64_t best = -1;\n");
  cg_line(b, 4, "float max = -INFINITY;\n");
  cg_line(b, 4, "for (int64_t kh = 0; kh < %lld; kh++) {\n", (long long)g->kernel[0]);
  emit_index(b, 5, "iy", "oy", "kh", g->stride[0], g->dilation[0], g->pads[0]);
  cg_line(b, 5, "if (iy < 0 || iy >= %lld) continue;\n", (long long)h);
  cg_line(b, 5, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (long long)g->kernel[1]);
  emit_index(b, 6, "ix", "ox", "kw", g->stride[1], g->dilation[1], g->pads[1]);
  cg_line(b, 6, "if (ix < 0 || ix >= %lld) continue;\n", (long long)w);
  cg_line(b, 6, "const float v = xp[iy * %lld + ix];\n", (long long)w);
  cg_line(b, 6, "if (best < 0 || v != v || v > max) {\n");
  cg_line(b, 7, "best = iy * %lld + ix;\n", (long long)w);
  cg_line(b, 7, "max = v;\n");
  cg_line(b, 6, "}\n");
  cg_line(b, 5, "}\n");
  cg_line(b, 4, "}\n");
  cg_line(b, 4, "if (best >= 0) dp[best] += gp[oy * %lld + ox];\n", (long long)ow);
  cg_line(b, 3, "}\n");
}

/* Output rows of at most this many columns take the row form. */
enum { MPG_ROW_MAX = 4096 };

/* Whether the row form fits: the row's arrays on the stack, input
 * indices in int32. */
static bool mpg_by_rows(const mpg_emit_t *k) {
  const pool_geom_t *g = &k->geo;
  return g->out.dim[3] <= MPG_ROW_MAX && g->in.dim[2] * g->in.dim[3] < INT32_MAX;
}

/* The row form: a row of outputs at a time, their windows' argmax found
 * tap by tap across the row (loops over output columns that vectorize:
 * each tap's column range inside the image is a constant, so no test
 * per element), then each output's gradient added at its argmax in
 * column order (windows overlap; the adds stay in the general form's
 * order). Every output visits its taps in the general form's order, so
 * ties and NaNs pick the same input. */
static void mpg_rows(mpg_emit_t *k) {
  cg_buf_t *b = k->c->out;
  const pool_geom_t *g = &k->geo;
  int64_t h = g->in.dim[2], w = g->in.dim[3], oh = g->out.dim[2], ow = g->out.dim[3];
  int64_t sx = g->stride[1], dxl = g->dilation[1], px = g->pads[1];
  cg_line(b, 2, "for (int64_t oy = 0; oy < %lld; oy++) {\n", (long long)oh);
  cg_line(b, 3, "int32_t best[%lld];\n", (long long)ow);
  cg_line(b, 3, "float max[%lld];\n", (long long)ow);
  cg_line(b, 3, "for (int64_t ox = 0; ox < %lld; ox++) {\n", (long long)ow);
  cg_line(b, 4, "best[ox] = -1;\n");
  cg_line(b, 4, "max[ox] = -INFINITY;\n");
  cg_line(b, 3, "}\n");
  cg_line(b, 3, "for (int64_t kh = 0; kh < %lld; kh++) {\n", (long long)g->kernel[0]);
  emit_index(b, 4, "iy", "oy", "kh", g->stride[0], g->dilation[0], g->pads[0]);
  cg_line(b, 4, "if (iy < 0 || iy >= %lld) continue;\n", (long long)h);
  cg_line(b, 4, "const float *row = xp + iy * %lld;\n", (long long)w);
  for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
    /* ix = ox * sx + off lies in [0, w) for ox in [lo, hi) */
    int64_t off = kw * dxl - px;
    int64_t lo = off >= 0 ? 0 : (-off + sx - 1) / sx;
    int64_t hi = w - 1 - off < 0 ? 0 : (w - 1 - off) / sx + 1;
    if (hi > ow) hi = ow;
    if (lo >= hi) continue;
    cg_line(b, 4, "for (int64_t ox = %lld; ox < %lld; ox++) {\n", (long long)lo, (long long)hi);
    cg_line(b, 5, "const int32_t ix = (int32_t)(ox * %lld + %lld);\n", (long long)sx,
            (long long)off);
    cg_line(b, 5, "const float v = row[ix];\n");
    cg_line(b, 5, "const int take = best[ox] < 0 || v != v || v > max[ox];\n");
    cg_line(b, 5, "best[ox] = take ? (int32_t)(iy * %lld) + ix : best[ox];\n", (long long)w);
    cg_line(b, 5, "max[ox] = take ? v : max[ox];\n");
    cg_line(b, 4, "}\n");
  }
  cg_line(b, 3, "}\n");
  cg_line(b, 3, "for (int64_t ox = 0; ox < %lld; ox++)\n", (long long)ow);
  cg_line(b, 4, "if (best[ox] >= 0) dp[best[ox]] += gp[oy * %lld + ox];\n", (long long)ow);
  cg_line(b, 2, "}\n");
}

static void mpg_body(mpg_emit_t *k) {
  cg_buf_t *b = k->c->out;
  const pool_geom_t *g = &k->geo;
  int x = (int)k->n->in[0], dy = (int)k->n->in[1], dx = (int)k->n->out[0];
  const fuse_group_t *grp = &k->c->plan->groups[k->gi];
  int64_t h = g->in.dim[2], w = g->in.dim[3], oh = g->out.dim[2], ow = g->out.dim[3];
  cg_function(k->c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", k->gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  cg_declare_pointer(k->c, grp, 1, k->n->in[0], false);
  cg_declare_pointer(k->c, grp, 1, k->n->in[1], false);
  cg_declare_pointer(k->c, grp, 1, k->n->out[0], true);
  cg_line(b, 1, "for (int64_t plane = begin; plane < end; plane++) {\n");
  cg_line(b, 2, "const float *xp = p%d + plane * %lld, *gp = p%d + plane * %lld;\n", x,
          (long long)(h * w), dy, (long long)(oh * ow));
  cg_line(b, 2, "float *dp = p%d + plane * %lld;\n", dx, (long long)(h * w));
  cg_line(b, 2, "for (int64_t i = 0; i < %lld; i++) dp[i] = 0.0f;\n", (long long)(h * w));
  if (mpg_by_rows(k)) mpg_rows(k);
  else mpg_outputs(k);
  cg_line(b, 1, "}\n");
  cg_printf(b, "}\n\n");
}

loom_status_t cg_emit_max_pool_grad(cg_ctx_t *c, int gi, bool *ok) {
  int32_t anchor = c->plan->groups[gi].anchor;
  mpg_emit_t k = {.c = c, .gi = gi};
  *ok = anchor >= 0 && c->g->nodes[anchor].op == IR_OP_MAX_POOL2D_GRAD;
  if (!*ok) return LOOM_OK;
  k.n = &c->g->nodes[anchor];
  *ok = mpg_fits(&k);
  if (!*ok) return LOOM_OK;
  cg_group_comment(c, gi, "max pool gradient", &k.geo.in, NULL);
  mpg_body(&k);
  int64_t planes = k.geo.in.dim[0] * k.geo.in.dim[1];
  cg_group_function(c, gi);
  cg_line(c->out, 1, "(void)syms;\n");
  if (cg_numel(&k.geo.in) > CG_PARALLEL_MIN && planes > 1)
    cg_line(c->out, 1, "rt->parallel_for(rt->pool, %lld, 1, loom_g%d_body, (void *)slots);\n",
            (long long)planes, gi);
  else
    cg_line(c->out, 1, "(void)rt;\n  loom_g%d_body((void *)slots, 0, %lld);\n", gi,
            (long long)planes);
  cg_printf(c->out, "}\n");
  return LOOM_OK;
}
