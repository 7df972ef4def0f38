/* Module assembly: the ABI text, the expression helpers, one function per
 * generated group, and the ABI version the runtime checks on load. */
#include <string.h>

#include "codegen/cg.h"
#include "core/alloc.h"
#include "core/status.h"

typedef loom_status_t (*group_emitter_t)(cg_ctx_t *c, int gi, bool *ok);

static loom_status_t emit_reduction_or_pool(cg_ctx_t *c, int gi, bool *ok) {
  int32_t anchor = c->plan->groups[gi].anchor;
  ir_op_t op = anchor >= 0 ? c->g->nodes[anchor].op : IR_OP_COUNT;
  if (op != IR_OP_COUNT && ir_op_has(op, F_WINDOW)) return cg_emit_pool(c, gi, ok);
  if (anchor >= 0 && cg_is_channel_reduction(c->g, &c->g->nodes[anchor]))
    return cg_emit_channel_reduction(c, gi, ok);
  if (op == IR_OP_BATCH_NORM) return cg_emit_batch_norm(c, gi, ok);
  if (op == IR_OP_MAX_POOL2D_GRAD) return cg_emit_max_pool_grad(c, gi, ok);
  return cg_emit_reduction(c, gi, ok);
}

/* Index ops are layout groups with an emitter of their own. */
static loom_status_t emit_layout_or_index(cg_ctx_t *c, int gi, bool *ok) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  if (cg_is_index_op(c->g->nodes[grp->nodes[grp->n_nodes - 1]].op))
    return cg_emit_index(c, gi, ok);
  return cg_emit_layout(c, gi, ok);
}

/* The emitter of each kind of group; aliases and reference steps have
 * no code. */
static const group_emitter_t emitters[] = {
    [FUSE_ELEMENTWISE] = cg_emit_elementwise,
    [FUSE_REDUCTION] = emit_reduction_or_pool,
    [FUSE_CONTRACTION] = cg_emit_contraction,
    [FUSE_LAYOUT] = emit_layout_or_index,
    [FUSE_ALIAS] = NULL,
    [FUSE_REFERENCE] = NULL,
};

/* A group none of whose values is read (no dead-code pass ran) has
 * nothing to compute; a function that does nothing keeps it a step. */
static void emit_dead(cg_ctx_t *c, int gi) {
  cg_group_comment(c, gi, "dead, no output is read", NULL, NULL);
  cg_function(c, "void loom_group_%d(void *const *slots, const int64_t *syms, "
                 "const loom_abi_t *rt) {\n", gi);
  cg_line(c->out, 1, "(void)slots;\n");
  cg_line(c->out, 1, "(void)syms;\n");
  cg_line(c->out, 1, "(void)rt;\n");
  cg_printf(c->out, "}\n");
}

/* Over runtime sizes, the emitters handle elementwise groups, folds over
 * trailing axes, matmuls and simple layout moves (cg_shape_t.lead);
 * convolutions, pools and channel reductions keep their reference
 * kernels. */
static bool handles_runtime_dims(const cg_ctx_t *c, int gi) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  if (grp->kind != FUSE_REDUCTION && grp->kind != FUSE_CONTRACTION) return true;
  if (grp->anchor < 0) return false;
  const ir_node_t *anchor = &c->g->nodes[grp->anchor];
  if (grp->kind == FUSE_REDUCTION && cg_is_channel_reduction(c->g, anchor)) return false;
  return anchor->op == IR_OP_MATMUL ||
         (grp->kind == FUSE_REDUCTION && !ir_op_has(anchor->op, F_WINDOW));
}

/* A group whose emitter declines it leaves no text behind. */
static loom_status_t emit_group(cg_ctx_t *c, int gi, bool *generated) {
  fuse_kind_t kind = c->plan->groups[gi].kind;
  *generated = false;
  if ((unsigned)kind >= sizeof emitters / sizeof *emitters || !emitters[kind])
    return LOOM_OK;
  if (!handles_runtime_dims(c, gi) && cg_group_is_dynamic(c, gi)) return LOOM_OK;
  if (c->plan->groups[gi].n_outputs == 0) {
    emit_dead(c, gi);
    *generated = true;
    return LOOM_OK;
  }
  int64_t mark = c->out->len;
  bool ok = true;
  c->function++; /* no declaration carries over from another group */
  LOOM_TRY(emitters[kind](c, gi, &ok));
  if (!ok && !c->out->failed) {
    c->out->len = mark;
    c->out->s[mark] = '\0';
  }
  *generated = ok;
  return LOOM_OK;
}

static void marks_free(cg_marks_t *m) {
  for (int i = 0; i < CG_NODE_MARKS; i++) core_free(m->node[i]);
  for (int i = 0; i < CG_VALUE_MARKS; i++) core_free(m->value[i]);
  *m = (cg_marks_t){0};
}

static loom_status_t marks_alloc(const loom_graph_t *g, cg_marks_t *m) {
  *m = (cg_marks_t){0};
  bool ok = true;
  for (int i = 0; i < CG_NODE_MARKS; i++)
    ok &= (m->node[i] = core_calloc((size_t)g->n_nodes + 1, sizeof(int32_t))) != NULL;
  for (int i = 0; i < CG_VALUE_MARKS; i++)
    ok &= (m->value[i] = core_calloc((size_t)g->n_values + 1, sizeof(int32_t))) != NULL;
  if (ok) return LOOM_OK;
  marks_free(m);
  return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
}

loom_status_t cg_emit_module(const loom_graph_t *g, const fuse_plan_t *plan,
                             const int32_t *slot_of_value,
                             const int64_t *sym_values, cg_module_t *out) {
  *out = (cg_module_t){0};
  out->generated = core_calloc((size_t)plan->n_groups + 1, sizeof(bool));
  int32_t *declared_in = core_malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  cg_buf_t b = {0};
  if (!out->generated || !declared_in) {
    core_free(declared_in);
    cg_module_free(out);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  }
  for (int64_t v = 0; v < g->n_values; v++) declared_in[v] = -1;
  cg_ctx_t c = {.g = g, .plan = plan, .slot_of_value = slot_of_value,
                .sym_values = sym_values, .out = &b, .declared_in = declared_in};
  loom_status_t s = marks_alloc(g, &c.marks);
  if (s == LOOM_OK) {
    cg_printf(&b, "%s", cg_abi_text);
    cg_expr_helpers(&b);
  }
  for (int gi = 0; gi < plan->n_groups && s == LOOM_OK; gi++)
    s = emit_group(&c, gi, &out->generated[gi]);
  marks_free(&c.marks);
  if (s != LOOM_OK) {
    core_free(b.s);
    core_free(declared_in);
    cg_module_free(out);
    return s;
  }
  core_free(declared_in);
  cg_printf(&b, "\nconst int loom_module_abi_version = LOOM_ABI_VERSION;\n");
  if (b.failed) {
    core_free(b.s);
    cg_module_free(out);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  }
  out->source = b.s;
  out->length = b.len;
  return LOOM_OK;
}

void cg_module_free(cg_module_t *m) {
  core_free(m->source);
  core_free(m->generated);
  m->source = NULL;
  m->generated = NULL;
  m->length = 0;
}
