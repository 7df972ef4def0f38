/* Module assembly: the ABI text, the expression helpers, one function per
 * generated group's code (groups whose code is the same up to names share
 * the first one's: c_dedup.c), each group's slot map, and the ABI version
 * the runtime checks on load. */
#include <assert.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
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
  cg_group_function(c, gi);
  cg_line(c->out, 1, "(void)syms;\n");
  cg_line(c->out, 1, "(void)rt;\n");
  cg_printf(c->out, "}\n");
}

/* Over runtime sizes, the emitters handle elementwise groups, folds over
 * trailing axes, matmuls, convolutions over a runtime batch and simple
 * layout moves (cg_shape_t.lead); pools and channel reductions keep their
 * reference steps. */
static bool handles_runtime_dims(const cg_ctx_t *c, int gi) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  if (grp->kind != FUSE_REDUCTION && grp->kind != FUSE_CONTRACTION) return true;
  if (grp->anchor < 0) return false;
  const ir_node_t *anchor = &c->g->nodes[grp->anchor];
  if (grp->kind == FUSE_REDUCTION && cg_is_channel_reduction(c->g, anchor)) return false;
  return grp->kind == FUSE_CONTRACTION || !ir_op_has(anchor->op, F_WINDOW);
}

/* The start of group gi's function: its slots gathered from the step's
 * map, now that the code has named them all. */
static void insert_gather(cg_ctx_t *c) {
  const cg_locals_t *l = c->locals;
  cg_buf_t g = {0};
  if (l->n == 0) {
    cg_line(&g, 1, "void *const *const slots = slot_table;\n");
    cg_line(&g, 1, "(void)slots;\n");
    cg_line(&g, 1, "(void)map;\n");
  } else {
    cg_line(&g, 1, "void *const slots[%d] = {", l->n);
    for (int k = 0; k < l->n; k++)
      cg_printf(&g, "%sslot_table[map[%d]]", k == 0 ? "" : k % 4 ? ", " : ",\n    ", k);
    cg_printf(&g, "};\n");
  }
  if (g.failed) c->out->failed = true;
  else cg_insert(c->out, l->gather_at, g.s, g.len);
  core_free(g.s);
}

/* A group whose emitter declines it leaves no text behind. */
static loom_status_t emit_group(cg_ctx_t *c, int gi, bool *generated) {
  fuse_kind_t kind = c->plan->groups[gi].kind;
  *generated = false;
  if ((unsigned)kind >= sizeof emitters / sizeof *emitters || !emitters[kind])
    return LOOM_OK;
  if (!handles_runtime_dims(c, gi) && cg_group_is_dynamic(c, gi)) return LOOM_OK;
  int64_t mark = c->out->len;
  bool ok = true;
  c->function++; /* no declaration carries over from another group */
  c->locals->gather_at = -1;
  if (c->plan->groups[gi].n_outputs == 0) emit_dead(c, gi);
  else LOOM_TRY(emitters[kind](c, gi, &ok));
  /* Every emitter starts its group function with cg_group_function. */
  assert(!ok || c->locals->gather_at >= 0);
  if (ok && c->locals->gather_at < 0) ok = false;
  if (ok) insert_gather(c);
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

/* What writing a module needs besides the text. */
typedef struct module_state {
  cg_ctx_t c;
  cg_buf_t text;
  int32_t *declared_in;
  cg_locals_t locals;
  cg_dedup_t *dedup;
  int64_t maps_cap, cuts_cap;
} module_state_t;

static void state_free(module_state_t *m) {
  marks_free(&m->c.marks);
  core_free(m->text.s);
  core_free(m->declared_in);
  core_free(m->locals.local_of_slot);
  core_free(m->locals.slot);
  cg_dedup_free(m->dedup);
}

static loom_status_t state_init(module_state_t *m, const loom_graph_t *g,
                                const fuse_plan_t *plan, const int32_t *slot_of_value,
                                const int64_t *sym_values, cg_module_t *out) {
  *m = (module_state_t){0};
  int32_t n_slots = 0;
  for (int64_t v = 0; v < g->n_values; v++)
    if (slot_of_value[v] >= n_slots) n_slots = slot_of_value[v] + 1;
  out->generated = core_calloc((size_t)plan->n_groups + 1, sizeof(bool));
  out->function = core_malloc(sizeof(int32_t) * ((size_t)plan->n_groups + 1));
  out->map_at = core_calloc((size_t)plan->n_groups + 1, sizeof(int32_t));
  m->declared_in = core_malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  m->locals.local_of_slot = core_malloc(sizeof(int32_t) * ((size_t)n_slots + 1));
  m->locals.slot = core_malloc(sizeof(int32_t) * ((size_t)n_slots + 1));
  if (!out->generated || !out->function || !out->map_at || !m->declared_in ||
      !m->locals.local_of_slot || !m->locals.slot)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  for (int64_t v = 0; v < g->n_values; v++) m->declared_in[v] = -1;
  for (int32_t s = 0; s < n_slots; s++) m->locals.local_of_slot[s] = -1;
  for (int gi = 0; gi < plan->n_groups; gi++) out->function[gi] = -1;
  m->c = (cg_ctx_t){.g = g, .plan = plan, .slot_of_value = slot_of_value,
                    .sym_values = sym_values, .out = &m->text,
                    .declared_in = m->declared_in, .locals = &m->locals};
  LOOM_TRY(cg_dedup_create(g->n_values, &m->dedup));
  return marks_alloc(g, &m->c.marks);
}

/* Keeps group gi's slots as its map, and its text unless an earlier
 * group's is the same up to names. */
static loom_status_t finish_group(module_state_t *m, int gi, int64_t mark, cg_module_t *out) {
  cg_locals_t *l = &m->locals;
  int32_t at = out->map_at[gi];
  loom_status_t s = core_grow((void **)&out->maps, &m->maps_cap, (int64_t)at + l->n + 1,
                              sizeof *out->maps);
  for (int k = 0; k < l->n && s == LOOM_OK; k++) out->maps[at + k] = l->slot[k];
  out->map_at[gi + 1] = at + (out->generated[gi] ? l->n : 0);
  for (int k = 0; k < l->n; k++) l->local_of_slot[l->slot[k]] = -1;
  l->n = 0;
  LOOM_TRY(s);
  if (!out->generated[gi] || m->text.failed) return LOOM_OK;
  LOOM_TRY(cg_dedup_find(m->dedup, m->text.s + mark, m->text.len - mark, gi,
                         &out->function[gi]));
  if (out->function[gi] == gi) {
    LOOM_TRY(core_grow((void **)&out->cuts, &m->cuts_cap, out->n_functions + 1,
                       sizeof *out->cuts));
    out->cuts[out->n_functions++] = mark;
  } else {
    m->text.len = mark;
    m->text.s[mark] = '\0';
  }
  return LOOM_OK;
}

loom_status_t cg_emit_module(const loom_graph_t *g, const fuse_plan_t *plan,
                             const int32_t *slot_of_value,
                             const int64_t *sym_values, cg_module_t *out) {
  *out = (cg_module_t){0};
  module_state_t m;
  loom_status_t s = state_init(&m, g, plan, slot_of_value, sym_values, out);
  if (s == LOOM_OK) {
    cg_printf(&m.text, "%s", cg_abi_text);
    cg_expr_helpers(&m.text);
    out->prelude = m.text.len;
  }
  for (int gi = 0; gi < plan->n_groups && s == LOOM_OK; gi++) {
    int64_t mark = m.text.len;
    s = emit_group(&m.c, gi, &out->generated[gi]);
    if (s == LOOM_OK) s = finish_group(&m, gi, mark, out);
  }
  cg_printf(&m.text, "\nconst int loom_module_abi_version = LOOM_ABI_VERSION;\n");
  if (s == LOOM_OK && m.text.failed) s = loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  if (s == LOOM_OK) {
    out->source = m.text.s;
    out->length = m.text.len;
    m.text.s = NULL;
  }
  state_free(&m);
  if (s != LOOM_OK) cg_module_free(out);
  return s;
}

void cg_module_free(cg_module_t *m) {
  core_free(m->source);
  core_free(m->generated);
  core_free(m->function);
  core_free(m->map_at);
  core_free(m->maps);
  core_free(m->cuts);
  *m = (cg_module_t){0};
}
