/* Elementwise groups: one loop nest over the group's iteration space.
 * Dims that every access walks as one are merged, so the innermost loop
 * is as long as possible and contiguous (or broadcast: stride 0); each
 * node is one `const float v12 = ...;` line; outputs are stored to their
 * slots. Large spaces are split over the pool along the outermost dim. */
#include <stdio.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

/* The values a group reads or writes, with their strides in its space. */
typedef struct access {
  cg_shape_t space;
  int n;
  int32_t *val;
  bool *write;
  int64_t (*stride)[LOOM_MAX_RANK];
} access_t;

static void access_free(access_t *a) {
  core_free(a->val);
  core_free(a->write);
  core_free(a->stride);
}

/* The space is that of the group's largest output (one with a runtime
 * leading dim first); every value of the group must broadcast into it. */
static bool pick_space(const cg_ctx_t *c, const fuse_group_t *grp,
                       cg_shape_t *space) {
  int64_t best = -1;
  for (int i = 0; i < grp->n_outputs; i++) {
    cg_shape_t s;
    if (!cg_value_shape(c, grp->outputs[i], &s)) return false;
    if (best >= 0 && (s.lead != 0) != (space->lead != 0)) {
      if (s.lead) best = -1;
      else continue;
    }
    if (cg_numel(&s) > best || (cg_numel(&s) == best && s.rank > space->rank)) {
      best = cg_numel(&s);
      *space = s;
    }
  }
  return best >= 0;
}

static loom_status_t access_build(const cg_ctx_t *c, const fuse_group_t *grp,
                                  access_t *a, bool *ok) {
  *a = (access_t){0};
  *ok = pick_space(c, grp, &a->space);
  if (!*ok) return LOOM_OK;
  int n = grp->n_inputs + grp->n_outputs;
  a->val = core_calloc((size_t)n + 1, sizeof *a->val);
  a->write = core_calloc((size_t)n + 1, sizeof *a->write);
  a->stride = core_calloc((size_t)n + 1, sizeof *a->stride);
  if (!a->val || !a->write || !a->stride) {
    access_free(a);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  }
  for (int i = 0; i < n; i++) {
    bool out = i >= grp->n_inputs;
    int32_t v = out ? grp->outputs[i - grp->n_inputs] : grp->inputs[i];
    cg_shape_t s;
    *ok = cg_slot(c, v) >= 0 && cg_value_shape(c, v, &s) &&
          cg_broadcast_strides(&s, &a->space, a->stride[i]);
    if (!*ok) return LOOM_OK;
    a->val[i] = v;
    a->write[i] = out;
  }
  a->n = n;
  int hi = cg_collapse(&a->space, 0, a->space.rank, n, a->stride);
  a->space.rank = hi;
  /* A scalar space is a loop of one. */
  if (a->space.rank == 0) {
    a->space.rank = 1;
    a->space.dim[0] = 1;
    for (int i = 0; i < n; i++) a->stride[i][0] = 0;
  }
  return LOOM_OK;
}

static void emit_loops(const cg_ctx_t *c, const cg_shape_t *space) {
  cg_buf_t *b = c->out;
  if (space->rank == 1) cg_ivdep(c, 1);
  cg_line(b, 1, "for (int64_t i0 = begin; i0 < end; i0++) {\n");
  for (int d = 1; d < space->rank; d++) {
    if (d == space->rank - 1) cg_ivdep(c, d + 1);
    cg_line(b, d + 1, "for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", d, d,
            (long long)space->dim[d], d);
  }
}

static void close_loops(cg_buf_t *b, int rank) {
  for (int d = rank; d >= 1; d--) cg_line(b, d, "}\n");
}

static void emit_body_fn(cg_ctx_t *c, int gi, const access_t *a) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  cg_buf_t *b = c->out;
  int rank = a->space.rank, in = rank + 1;
  cg_function(c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  for (int i = 0; i < a->n; i++) cg_declare_pointer(c, grp, 1, a->val[i], a->write[i]);
  emit_loops(c, &a->space);
  for (int i = 0; i < grp->n_inputs; i++) {
    cg_load_begin(b, in, c->g, a->val[i]);
    cg_offset(b, "i", 0, rank, a->stride[i]);
    cg_load_end(b, c->g, a->val[i]);
  }
  for (int k = 0; k < grp->n_nodes; k++)
    cg_node_stmt(b, in, c->g, &c->g->nodes[grp->nodes[k]]);
  for (int i = grp->n_inputs; i < a->n; i++) {
    cg_store_begin(b, in, a->val[i]);
    cg_offset(b, "i", 0, rank, a->stride[i]);
    cg_store_end(b, c->g, a->val[i]);
  }
  close_loops(b, rank);
  cg_printf(b, "}\n\n");
}

loom_status_t cg_emit_elementwise(cg_ctx_t *c, int gi, bool *ok) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  for (int k = 0; k < grp->n_nodes && *ok; k++)
    *ok = cg_expr_supported(c->g, &c->g->nodes[grp->nodes[k]]);
  if (!*ok) return LOOM_OK;
  access_t a;
  LOOM_TRY(access_build(c, grp, &a, ok));
  if (!*ok) {
    access_free(&a);
    return LOOM_OK;
  }
  cg_shape_t full;
  pick_space(c, grp, &full);
  cg_group_comment(c, gi, "elementwise", &full, NULL);
  emit_body_fn(c, gi, &a);
  int64_t outer = a.space.dim[0], inner = cg_numel(&a.space) / (outer ? outer : 1);
  int64_t work = inner * cg_group_cost(c->g, grp); /* per row */
  cg_buf_t *b = c->out;
  cg_group_function(c, gi);
  cg_line(b, 1, "(void)syms;\n");
  if (a.space.lead) {
    char body[32];
    snprintf(body, sizeof body, "loom_g%d_body", gi);
    cg_dynamic_split(b, c->g, &a.space, work, body);
  } else if (outer * work > CG_PARALLEL_MIN && outer > 1) {
    int64_t grain = CG_PARALLEL_MIN / 2 / (work ? work : 1);
    cg_line(b, 1, "rt->parallel_for(rt->pool, %lld, %lld, loom_g%d_body, (void *)slots);\n",
            (long long)outer, (long long)(grain > 1 ? grain : 1), gi);
  } else {
    cg_line(b, 1, "(void)rt;\n");
    cg_line(b, 1, "loom_g%d_body((void *)slots, 0, %lld);\n", gi, (long long)outer);
  }
  cg_printf(b, "}\n");
  access_free(&a);
  return LOOM_OK;
}
