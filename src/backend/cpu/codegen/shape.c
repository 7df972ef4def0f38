/* Concrete shapes, broadcast strides and the small pieces of text that
 * every group emitter writes: pointers to slots, offsets, comments. */
#include <string.h>

#include "backend/cpu/codegen/cg.h"

/* Whether d evaluates given the symbols known at compile time. */
static bool dim_known(const loom_graph_t *g, ir_dim_t d, const int64_t *syms) {
  if (ir_dim_is_const(d)) return true;
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e) return false;
  if (e->kind == IR_EXPR_CONST) return true;
  if (e->kind == IR_EXPR_SYM) return syms && syms[e->c] >= 0;
  return dim_known(g, e->a, syms) && dim_known(g, e->b, syms);
}

/* Whether cg_dim_expr can write d for the run: sums and products of
 * constants and symbols that are known or runtime symbols. */
static bool dim_writable(const loom_graph_t *g, ir_dim_t d, const int64_t *syms) {
  if (ir_dim_is_const(d)) return true;
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e || e->kind == IR_EXPR_FLOORDIV) return false;
  if (e->kind == IR_EXPR_CONST) return true;
  if (e->kind == IR_EXPR_SYM)
    return syms && (syms[e->c] >= 0 || syms[e->c] == CG_SYM_RUNTIME);
  return dim_writable(g, e->a, syms) && dim_writable(g, e->b, syms);
}

bool cg_value_shape(const cg_ctx_t *c, int32_t v, cg_shape_t *s) {
  const ir_type_t *t = &c->g->values[v].type;
  s->rank = t->rank;
  s->lead = 0;
  for (int d = 0; d < t->rank; d++) {
    if (ir_dim_is_const(t->dims[d])) {
      s->dim[d] = t->dims[d];
    } else if (d == 0 && !dim_known(c->g, t->dims[d], c->sym_values)) {
      if (!dim_writable(c->g, t->dims[d], c->sym_values)) return false;
      s->lead = t->dims[d];
      s->dim[d] = 1;
    } else if (!c->sym_values ||
               ir_dim_eval(c->g, t->dims[d], c->sym_values, &s->dim[d]) != LOOM_OK) {
      return false;
    }
  }
  return true;
}

int64_t cg_numel(const cg_shape_t *s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++) n *= s->dim[d];
  return n;
}

static ir_dim_t lead_of(const cg_shape_t *s, int d) {
  return d == 0 && s->rank > 0 ? s->lead : 0;
}

bool cg_same_dim(const cg_shape_t *a, int d, const cg_shape_t *b, int e) {
  return a->dim[d] == b->dim[e] && lead_of(a, d) == lead_of(b, e);
}

bool cg_broadcast_strides(const cg_shape_t *s, const cg_shape_t *space,
                          int64_t *stride) {
  if (s->rank > space->rank) return false;
  int lead = space->rank - s->rank;
  int64_t step = 1;
  for (int d = space->rank - 1; d >= 0; d--) {
    if (d < lead) {
      stride[d] = 0;
      continue;
    }
    int64_t n = s->dim[d - lead];
    bool one = n == 1 && !lead_of(s, d - lead);
    if (!one && !cg_same_dim(s, d - lead, space, d)) return false;
    stride[d] = one ? 0 : step;
    step *= n;
  }
  return true;
}

bool cg_group_is_dynamic(const cg_ctx_t *c, int gi) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  for (int k = 0; k < grp->n_nodes; k++) {
    const ir_node_t *n = &c->g->nodes[grp->nodes[k]];
    for (int i = 0; i < n->n_in + n->n_out; i++) {
      int32_t v = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
      const ir_type_t *t = &c->g->values[v].type;
      for (int d = 0; d < t->rank; d++)
        if (!dim_known(c->g, t->dims[d], c->sym_values)) return true;
    }
  }
  return false;
}

void cg_dim_expr(cg_buf_t *b, const loom_graph_t *g, ir_dim_t d) {
  const ir_expr_t *e = ir_dim_expr(g, d);
  if (!e || e->kind == IR_EXPR_CONST) {
    cg_printf(b, "%lld", (long long)(e ? e->c : d));
    return;
  }
  if (e->kind == IR_EXPR_SYM) {
    cg_printf(b, "syms[%lld]", (long long)e->c);
    return;
  }
  cg_printf(b, "(");
  cg_dim_expr(b, g, e->a);
  cg_printf(b, e->kind == IR_EXPR_ADD ? " + " : " * ");
  cg_dim_expr(b, g, e->b);
  cg_printf(b, ")");
}

void cg_lead_extent(cg_buf_t *b, const loom_graph_t *g, const cg_shape_t *s) {
  if (!s->lead) {
    cg_printf(b, "%lld", (long long)(s->rank ? s->dim[0] : 1));
    return;
  }
  if (s->dim[0] != 1) cg_printf(b, "(int64_t)%lld * ", (long long)s->dim[0]);
  cg_dim_expr(b, g, s->lead);
}

void cg_dynamic_split(cg_buf_t *b, const loom_graph_t *g, const cg_shape_t *s,
                      int64_t inner, const char *body) {
  int64_t grain = CG_PARALLEL_MIN / 2 / (inner ? inner : 1);
  cg_line(b, 1, "const int64_t n0 = ");
  cg_lead_extent(b, g, s);
  cg_printf(b, ";\n");
  cg_line(b, 1, "if (n0 * %lld > %d && n0 > 1)\n", (long long)inner, CG_PARALLEL_MIN);
  cg_line(b, 2, "rt->parallel_for(rt->pool, n0, %lld, %s, (void *)slots);\n",
          (long long)(grain > 1 ? grain : 1), body);
  cg_line(b, 1, "else\n");
  cg_line(b, 2, "%s((void *)slots, 0, n0);\n", body);
}

static void drop_dim(cg_shape_t *space, int d, int n,
                     int64_t (*strides)[LOOM_MAX_RANK]) {
  for (int e = d; e + 1 < space->rank; e++) {
    space->dim[e] = space->dim[e + 1];
    for (int k = 0; k < n; k++) strides[k][e] = strides[k][e + 1];
  }
  space->rank--;
}

static bool mergeable(const cg_shape_t *space, int d, int n,
                      int64_t (*strides)[LOOM_MAX_RANK]) {
  for (int k = 0; k < n; k++)
    if (strides[k][d] != strides[k][d + 1] * space->dim[d + 1]) return false;
  return true;
}

int cg_collapse(cg_shape_t *space, int lo, int hi, int n,
                int64_t (*strides)[LOOM_MAX_RANK]) {
  for (int d = lo; d < hi;) {
    if (space->dim[d] == 1 && hi - lo > 1 && !lead_of(space, d)) {
      drop_dim(space, d, n, strides);
      hi--;
    } else {
      d++;
    }
  }
  for (int d = hi - 2; d >= lo; d--) {
    if (!mergeable(space, d, n, strides)) continue;
    int64_t inner = space->dim[d + 1];
    for (int k = 0; k < n; k++) strides[k][d] = strides[k][d + 1];
    space->dim[d] *= inner;
    drop_dim(space, d + 1, n, strides);
    hi--;
  }
  return hi;
}

void cg_offset(cg_buf_t *b, const char *var, int lo, int hi,
               const int64_t *stride) {
  bool any = false;
  for (int d = lo; d < hi; d++) {
    if (stride[d] == 0) continue;
    cg_printf(b, any ? " + " : "");
    if (stride[d] == 1) cg_printf(b, "%s%d", var, d);
    else cg_printf(b, "%s%d * %lld", var, d, (long long)stride[d]);
    any = true;
  }
  if (!any) cg_printf(b, "0");
}

const char *cg_ctype(loom_dtype_t d) {
  static const char *const names[LOOM_DTYPE_COUNT] = {
      [LOOM_F32] = "float",   [LOOM_F64] = "double", [LOOM_F16] = "uint16_t",
      [LOOM_BF16] = "uint16_t", [LOOM_I8] = "int8_t", [LOOM_I32] = "int32_t",
      [LOOM_I64] = "int64_t", [LOOM_BOOL] = "uint8_t"};
  return (unsigned)d < LOOM_DTYPE_COUNT ? names[d] : "void";
}

const char *cg_local_type(loom_dtype_t d) {
  return d == LOOM_F16 || d == LOOM_BF16 ? "float" : cg_ctype(d);
}

/* Half-precision values live in float locals, converted on load and store. */
static const char *load_fn(loom_dtype_t d) {
  return d == LOOM_F16 ? "loom_f16_to_f32" : d == LOOM_BF16 ? "loom_bf16_to_f32" : NULL;
}
static const char *store_fn(loom_dtype_t d) {
  return d == LOOM_F16 ? "loom_f32_to_f16" : d == LOOM_BF16 ? "loom_f32_to_bf16" : NULL;
}

void cg_load_begin(cg_buf_t *b, int level, const loom_graph_t *g, int32_t v) {
  loom_dtype_t d = g->values[v].type.dtype;
  cg_line(b, level, "const %s v%d = ", cg_local_type(d), (int)v);
  if (load_fn(d)) cg_printf(b, "%s(", load_fn(d));
  cg_printf(b, "p%d[", (int)v);
}

void cg_load_end(cg_buf_t *b, const loom_graph_t *g, int32_t v) {
  cg_printf(b, load_fn(g->values[v].type.dtype) ? "]);\n" : "];\n");
}

void cg_store_begin(cg_buf_t *b, int level, int32_t v) {
  cg_line(b, level, "p%d[", (int)v);
}

void cg_store_end(cg_buf_t *b, const loom_graph_t *g, int32_t v) {
  const char *f = store_fn(g->values[v].type.dtype);
  if (f) cg_printf(b, "] = %s(v%d);\n", f, (int)v);
  else cg_printf(b, "] = v%d;\n", (int)v);
}

bool cg_scalar_constant(const loom_graph_t *g, int32_t v, double *x) {
  const ir_value_t *val = &g->values[v];
  loom_dtype_t d = val->type.dtype;
  if (val->kind != IR_VALUE_CONST || !val->data || (d != LOOM_F32 && d != LOOM_F64) ||
      loom_tensor_numel(val->data) != 1)
    return false;
  const void *p = loom_tensor_data(val->data);
  *x = d == LOOM_F32 ? (double)*(const float *)p : *(const double *)p;
  return true;
}

int32_t cg_slot(const cg_ctx_t *c, int32_t v) {
  int32_t s = c->slot_of_value[v];
  if (s < 0) return -1;
  cg_locals_t *l = c->locals;
  if (l->local_of_slot[s] < 0) {
    l->local_of_slot[s] = l->n;
    l->slot[l->n++] = s;
  }
  return l->local_of_slot[s];
}

/* restrict only where no other value of the group shares the slot: an
 * elementwise output may be planned in place over one of its inputs. */
static bool slot_shared(const cg_ctx_t *c, const fuse_group_t *grp, int32_t v) {
  const int32_t *slot = c->slot_of_value;
  for (int i = 0; i < grp->n_inputs; i++)
    if (grp->inputs[i] != v && slot[grp->inputs[i]] == slot[v]) return true;
  for (int i = 0; i < grp->n_outputs; i++)
    if (grp->outputs[i] != v && slot[grp->outputs[i]] == slot[v]) return true;
  return false;
}

void cg_ivdep(const cg_ctx_t *c, int level) { cg_line(c->out, level, "#pragma GCC ivdep\n"); }

void cg_open_lanes(cg_buf_t *b, int level, const char *index, const char *block,
                   const char *blocks, int lanes) {
  cg_line(b, level, "for (int64_t %s = 0; %s < %s; %s += %d) {\n", block, block, blocks, block,
          lanes);
  /* Unrolled first, the lane loop would be scalars GCC does not regroup. */
  cg_line(b, level + 1, "#pragma GCC unroll 1\n");
  cg_line(b, level + 1, "for (int l = 0; l < %d; l++) {\n", lanes);
  cg_line(b, level + 2, "const int64_t %s = %s + l;\n", index, block);
}

void cg_close_lanes(cg_buf_t *b, int level) {
  cg_line(b, level + 1, "}\n");
  cg_line(b, level, "}\n");
}

void cg_function(cg_ctx_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cg_vprintf(c->out, fmt, ap);
  va_end(ap);
  c->function++;
}

void cg_group_function(cg_ctx_t *c, int gi) {
  cg_function(c, "void loom_group_%d(void *const *slot_table, const int32_t *map, "
                 "const int64_t *syms, const loom_abi_t *rt) {\n", gi);
  c->locals->gather_at = c->out->len;
}

int cg_node_position(const cg_ctx_t *c, int gi, int32_t node) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  for (int k = 0; k < grp->n_nodes; k++)
    if (grp->nodes[k] == node) return k;
  return -1;
}

void cg_declare_pointer(const cg_ctx_t *c, const fuse_group_t *grp,
                        int level, int32_t v, bool write) {
  if (c->declared_in[v] == c->function) return;
  c->declared_in[v] = c->function;
  const char *t = cg_ctype(c->g->values[v].type.dtype);
  const char *cst = write ? "" : "const ";
  cg_line(c->out, level, "%s%s *%sp%d = (%s%s *)slots[%d];\n", cst, t,
          slot_shared(c, grp, v) ? "" : "restrict ", (int)v, cst, t,
          (int)cg_slot(c, v));
}

void cg_group_comment(const cg_ctx_t *c, int gi, const char *what,
                      const cg_shape_t *space, const char *note) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  cg_printf(c->out, "\n/* g%d: %s: ", gi, what);
  for (int i = 0; i < grp->n_nodes; i++)
    cg_printf(c->out, "%s%s", i ? ", " : "",
              ir_ops[c->g->nodes[grp->nodes[i]].op].name);
  if (!space) {
    cg_printf(c->out, " */\n");
    return;
  }
  cg_printf(c->out, " (");
  for (int d = 0; d < space->rank; d++) {
    char text[64];
    if (!lead_of(space, d))
      cg_printf(c->out, "%s%lld", d ? "x" : "", (long long)space->dim[d]);
    else if (space->dim[d] == 1)
      cg_printf(c->out, "%s", ir_dim_str(c->g, space->lead, text, sizeof text));
    else
      cg_printf(c->out, "%lld*%s", (long long)space->dim[d],
                ir_dim_str(c->g, space->lead, text, sizeof text));
  }
  cg_printf(c->out, "%s%s%s) */\n", space->rank ? "" : "scalar", note ? ", " : "",
            note ? note : "");
}

bool cg_in_group(const cg_ctx_t *c, int gi, int32_t v) {
  const ir_value_t *val = &c->g->values[v];
  return val->kind == IR_VALUE_NODE && c->plan->group_of_node[val->node] == gi;
}

bool cg_is_output(const fuse_group_t *grp, int32_t v) {
  for (int i = 0; i < grp->n_outputs; i++)
    if (grp->outputs[i] == v) return true;
  return false;
}
