/* Layout groups: each op is one or more strided copies ("moves"): a loop
 * nest over a box of the output whose source offset is linear in the
 * loop indices (transpose permutes strides, expand zeroes them, slice
 * scales them, flip negates them, tile wraps them with a modulo), plus a
 * fill for pad's border and one move per input for concat. Elements are
 * copied as unsigned integers of their size, so every dtype is exact. */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"

typedef struct move {
  cg_shape_t box;                       /* loop dims */
  int64_t stride[2][LOOM_MAX_RANK];     /* 0: output, 1: source */
  int64_t mod[LOOM_MAX_RANK];           /* source index wraps (tile); 0: no */
  int64_t base[2];                      /* first output and source element */
  int32_t src;                          /* source value; -1: fill */
} move_t;

typedef struct layout {
  cg_ctx_t *c;
  const ir_node_t *n;
  cg_shape_t x, y;
  int64_t xs[LOOM_MAX_RANK], ys[LOOM_MAX_RANK]; /* contiguous strides */
  int n_moves;
  move_t *moves; /* a concat's: one per input; others' at most 2 */
  uint64_t fill;
} layout_t;

static void contiguous(const cg_shape_t *s, int64_t *st) {
  int64_t step = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    st[d] = step;
    step *= s->dim[d];
  }
}

/* A move over the whole output, reading input 0. */
static move_t *whole(layout_t *l) {
  move_t *m = &l->moves[l->n_moves++];
  *m = (move_t){.box = l->y, .src = l->n->in[0]};
  memcpy(m->stride[0], l->ys, sizeof l->ys);
  return m;
}

/* ---- Per op: the moves ---------------------------------------------------------- */

typedef bool (*plan_fn)(layout_t *l);

static bool plan_reshape(layout_t *l) {
  move_t *m = whole(l);
  m->box.rank = 1;
  m->box.dim[0] = cg_numel(&l->y); /* times the runtime lead, if any */
  m->stride[0][0] = m->stride[1][0] = 1;
  return true;
}

static bool plan_transpose(layout_t *l) {
  move_t *m = whole(l);
  const int64_t *perm;
  bool given = ir_attr_ints(l->n->attrs, "perm", &perm) >= 0;
  int r = l->x.rank;
  for (int i = 0; i < r; i++) {
    int64_t p = given ? (perm[i] < 0 ? perm[i] + r : perm[i]) : r - 1 - i;
    /* A runtime leading dim stays leading, so every stride is known. */
    if ((i == 0 || p == 0) && p != i && (l->x.lead || l->y.lead)) return false;
    m->stride[1][i] = l->xs[p];
  }
  return true;
}

static bool plan_expand(layout_t *l) {
  return cg_broadcast_strides(&l->x, &l->y, whole(l)->stride[1]);
}

static bool plan_slice(layout_t *l) {
  move_t *m = whole(l);
  memcpy(m->stride[1], l->xs, sizeof l->xs);
  const int64_t *starts, *ends, *axes, *steps;
  int n = ir_attr_ints(l->n->attrs, "starts", &starts);
  ir_attr_ints(l->n->attrs, "ends", &ends);
  bool has_axes = ir_attr_ints(l->n->attrs, "axes", &axes) >= 0;
  bool has_steps = ir_attr_ints(l->n->attrs, "steps", &steps) >= 0;
  for (int i = 0; i < n; i++) {
    int64_t a = has_axes ? axes[i] : i;
    int d = (int)(a < 0 ? a + l->x.rank : a);
    int64_t step = has_steps ? steps[i] : 1, first, count;
    if (d == 0 && l->x.lead) return false;
    ir_slice_range(l->x.dim[d], starts[i], ends[i], step, &first, &count);
    if (count != l->y.dim[d]) return false;
    m->base[1] += first * l->xs[d];
    m->stride[1][d] = step * l->xs[d];
  }
  return true;
}

static bool plan_flip(layout_t *l) {
  move_t *m = whole(l);
  memcpy(m->stride[1], l->xs, sizeof l->xs);
  const int64_t *axes;
  int n = ir_attr_ints(l->n->attrs, "axes", &axes);
  bool flip[LOOM_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) flip[axes[i] < 0 ? axes[i] + l->x.rank : axes[i]] = true;
  if (flip[0] && l->x.lead) return false;
  for (int d = 0; d < l->x.rank; d++)
    if (flip[d] && l->x.dim[d] > 0) {
      m->base[1] += (l->x.dim[d] - 1) * l->xs[d];
      m->stride[1][d] = -l->xs[d];
    }
  return true;
}

static bool plan_tile(layout_t *l) {
  if (l->x.lead || l->y.lead) return false;
  move_t *m = whole(l);
  memcpy(m->stride[1], l->xs, sizeof l->xs);
  for (int d = 0; d < l->x.rank; d++)
    if (l->x.dim[d] != l->y.dim[d]) m->mod[d] = l->x.dim[d];
  return true;
}

static bool plan_concat(layout_t *l) {
  int r = l->y.rank;
  int64_t a = ir_attr_int(l->n->attrs, "axis", 0), at = 0;
  int axis = (int)(a < 0 ? a + r : a);
  if (axis == 0 && l->y.lead) return false;
  for (int i = 0; i < l->n->n_in; i++) {
    move_t *m = &l->moves[l->n_moves++];
    *m = (move_t){.src = l->n->in[i]};
    if (!cg_value_shape(l->c, l->n->in[i], &m->box)) return false;
    memcpy(m->stride[0], l->ys, sizeof l->ys);
    contiguous(&m->box, m->stride[1]);
    m->base[0] = at * l->ys[axis];
    at += m->box.dim[axis];
  }
  return true;
}

/* The border first (the whole output, simplest; none for a crop), then
 * the input inside: output index o along a dim reads input o - begin, for
 * o in [max(0, begin), min(out, n + begin)) (a negative pad crops). */
static bool plan_pad(layout_t *l) {
  if (l->x.lead || l->y.lead) return false;
  const int64_t *pads;
  ir_attr_ints(l->n->attrs, "pads", &pads);
  bool border = false;
  for (int d = 0; d < 2 * l->x.rank; d++) border |= pads[d] > 0;
  if (border) {
    char bytes[8] = {0};
    dtype_store_f64(l->c->g->values[l->n->out[0]].type.dtype, bytes,
                    ir_op_float(l->n->op, l->n->attrs, "value"));
    memcpy(&l->fill, bytes, sizeof bytes);
    whole(l)->src = -1;
  }
  move_t m = {.box = l->x, .src = l->n->in[0]};
  memcpy(m.stride[0], l->ys, sizeof l->ys);
  memcpy(m.stride[1], l->xs, sizeof l->xs);
  for (int d = 0; d < l->x.rank; d++) {
    int64_t begin = pads[d], lo = begin > 0 ? begin : 0;
    int64_t hi = l->x.dim[d] + begin < l->y.dim[d] ? l->x.dim[d] + begin : l->y.dim[d];
    if (hi <= lo) return true; /* no input element shows */
    m.box.dim[d] = hi - lo;
    m.base[0] += lo * l->ys[d];
    m.base[1] += (lo - begin) * l->xs[d];
  }
  l->moves[l->n_moves++] = m;
  return true;
}

static const struct {
  ir_op_t op;
  plan_fn plan;
} plans[] = {
    {IR_OP_RESHAPE, plan_reshape},     {IR_OP_SQUEEZE, plan_reshape},
    {IR_OP_UNSQUEEZE, plan_reshape},   {IR_OP_IDENTITY, plan_reshape},
    {IR_OP_TRANSPOSE, plan_transpose}, {IR_OP_EXPAND, plan_expand},
    {IR_OP_SLICE, plan_slice},         {IR_OP_FLIP, plan_flip},
    {IR_OP_TILE, plan_tile},           {IR_OP_CONCAT, plan_concat},
    {IR_OP_PAD, plan_pad},
};

static plan_fn plan_of(ir_op_t op) {
  for (size_t i = 0; i < sizeof plans / sizeof *plans; i++)
    if (plans[i].op == op) return plans[i].plan;
  return NULL;
}

/* ---- Text ---------------------------------------------------------------------- */

static const char *elem_type(size_t size) {
  return size == 1 ? "uint8_t" : size == 2 ? "uint16_t" : size == 4 ? "uint32_t" : "uint64_t";
}

static void src_offset(cg_buf_t *b, const move_t *m) {
  cg_printf(b, "%lld", (long long)m->base[1]);
  for (int d = 0; d < m->box.rank; d++) {
    int64_t s = m->stride[1][d];
    if (s == 0) continue;
    if (m->mod[d]) cg_printf(b, " + i%d %% %lld * %lld", d, (long long)m->mod[d], (long long)s);
    else cg_printf(b, " + i%d * %lld", d, (long long)s);
  }
}

static void emit_move(layout_t *l, int gi, int k, const char *t) {
  cg_buf_t *b = l->c->out;
  move_t *m = &l->moves[k];
  bool wrap = false;
  for (int d = 0; d < m->box.rank; d++) wrap |= m->mod[d] != 0;
  if (!wrap) {
    m->box.rank = cg_collapse(&m->box, 0, m->box.rank, 2, m->stride);
  }
  if (m->box.rank == 0) {
    m->box.rank = 1;
    m->box.dim[0] = 1;
    m->stride[0][0] = m->stride[1][0] = 0;
  }
  /* GCC 12 spends seconds in value-range propagation on a strided move
   * (x[64 + i * 65]) once the call's constant bounds unroll it fully:
   * noipa keeps the bounds out of the body. */
  cg_printf(b, "#if defined(__GNUC__) && !defined(__clang__)\n__attribute__((noipa))\n#endif\n");
  cg_function(l->c, "static void loom_g%d_move%d(void *ctx, int64_t begin, int64_t end) {\n",
              gi, k);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  cg_line(b, 1, "%s *restrict y = (%s *)slots[%d] + %lld;\n", t, t,
          (int)cg_slot(l->c, l->n->out[0]), (long long)m->base[0]);
  if (m->src >= 0)
    cg_line(b, 1, "const %s *restrict x = (const %s *)slots[%d];\n", t, t,
            (int)cg_slot(l->c, m->src));
  cg_line(b, 1, "for (int64_t i0 = begin; i0 < end; i0++) {\n");
  for (int d = 1; d < m->box.rank; d++)
    cg_line(b, d + 1, "for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", d, d,
            (long long)m->box.dim[d], d);
  cg_line(b, m->box.rank + 1, "y[");
  cg_offset(b, "i", 0, m->box.rank, m->stride[0]);
  if (m->src < 0) {
    cg_printf(b, "] = (%s)%lluULL;\n", t, (unsigned long long)l->fill);
  } else {
    cg_printf(b, "] = x[");
    src_offset(b, m);
    cg_printf(b, "];\n");
  }
  for (int d = m->box.rank; d >= 1; d--) cg_line(b, d, "}\n");
  cg_printf(b, "}\n\n");
}

static void emit_call(layout_t *l, int gi, int k) {
  cg_buf_t *b = l->c->out;
  const move_t *m = &l->moves[k];
  int64_t rows = m->box.dim[0], inner = cg_numel(&m->box) / (rows ? rows : 1);
  if (m->box.lead) {
    char body[48];
    snprintf(body, sizeof body, "loom_g%d_move%d", gi, k);
    cg_line(b, 1, "{\n");
    cg_dynamic_split(b, l->c->g, &m->box, inner, body);
    cg_line(b, 1, "}\n");
  } else if (cg_numel(&m->box) > CG_PARALLEL_MIN && rows > 1) {
    int64_t grain = CG_PARALLEL_MIN / 2 / (inner ? inner : 1);
    cg_line(b, 1, "rt->parallel_for(rt->pool, %lld, %lld, loom_g%d_move%d, (void *)slots);\n",
            (long long)rows, (long long)(grain > 1 ? grain : 1), gi, k);
  } else {
    cg_line(b, 1, "loom_g%d_move%d((void *)slots, 0, %lld);\n", gi, k, (long long)rows);
  }
}

loom_status_t cg_emit_layout(cg_ctx_t *c, int gi, bool *ok) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  *ok = grp->n_nodes == 1;
  if (!*ok) return LOOM_OK;
  const ir_node_t *n = &c->g->nodes[grp->nodes[0]];
  plan_fn plan = plan_of(n->op);
  layout_t l = {.c = c, .n = n};
  *ok = plan && n->n_out == 1 && cg_supports(c->g, grp->nodes[0]) &&
        cg_value_shape(c, n->in[0], &l.x) && cg_value_shape(c, n->out[0], &l.y) &&
        cg_slot(c, n->out[0]) >= 0;
  for (int i = 0; i < n->n_in && *ok; i++) *ok = cg_slot(c, n->in[i]) >= 0;
  if (!*ok) return LOOM_OK;
  l.moves = core_calloc((size_t)n->n_in + 2, sizeof *l.moves);
  if (!l.moves) return loom_fail(LOOM_ERR_NOMEM, "out of memory generating a layout step");
  contiguous(&l.x, l.xs);
  contiguous(&l.y, l.ys);
  *ok = plan(&l);
  if (!*ok) {
    core_free(l.moves);
    return LOOM_OK;
  }
  const char *t = elem_type(loom_dtype_size(c->g->values[n->out[0]].type.dtype));
  cg_group_comment(c, gi, "layout", &l.y, NULL);
  for (int k = 0; k < l.n_moves; k++) emit_move(&l, gi, k, t);
  cg_group_function(c, gi);
  cg_line(c->out, 1, "(void)syms;\n");
  cg_line(c->out, 1, "(void)rt;\n");
  for (int k = 0; k < l.n_moves; k++) emit_call(&l, gi, k);
  cg_printf(c->out, "}\n");
  core_free(l.moves);
  return LOOM_OK;
}
