/* Contraction groups: a matmul (through rt->gemm_f32, one call per run
 * of batch items the strides can express), a conv2d (rt->conv2d_f32),
 * conv2d's weight gradient (rt->conv2d_weight_grad_f32) or a
 * conv_transpose2d, which is conv2d's input gradient
 * (rt->conv2d_input_grad_f32),
 * with the group's elementwise nodes applied by a generated epilogue to
 * each finished tile while it is in cache. The epilogue sees the output
 * as batch items of rows x cols: matmul's (batch..., m, n), conv2d's
 * (image, channel, position) (conv_transpose2d's too), the weight
 * gradient's (o, c*kh*kw). */
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

typedef struct contract {
  cg_ctx_t *c;
  int gi;
  const fuse_group_t *grp;
  const ir_node_t *anchor;
  int32_t y;        /* the anchor's output */
  int32_t c_value;  /* the value whose slot the kernel writes */
  cg_shape_t space; /* epilogue space: batch dims..., rows, cols */
  int n_batch;
  int n_acc;
  bool fold_rows;   /* matmul: the batch runs as rows of one GEMM */
  ir_view_t view[2]; /* matmul: how A and B are read (c_view.c) */
  ir_view_t out;     /* matmul: where the product is written */
  int32_t *val;     /* epilogue inputs, then outputs other than c_value */
  int64_t (*stride)[LOOM_MAX_RANK];
} contract_t;

static void contract_free(contract_t *k) {
  core_free(k->val);
  core_free(k->stride);
}

/* Whether the anchor writes NCHW images whose (H, W) the epilogue walks
 * as one run of positions. */
static bool is_image_conv(const ir_node_t *anchor) {
  return anchor->op == IR_OP_CONV2D || anchor->op == IR_OP_CONV_TRANSPOSE2D;
}

/* The output shape as epilogue space; conv2d's (H, W) become one dim of
 * positions, which every access must walk as one. */
static void epilogue_space(contract_t *k, const cg_shape_t *y) {
  k->space = *y;
  if (is_image_conv(k->anchor)) {
    k->space.rank = 3;
    k->space.dim[2] = y->dim[2] * y->dim[3];
  } else if (k->anchor->op == IR_OP_CONV2D_WEIGHT_GRAD) {
    k->space.rank = 2;
    k->space.dim[1] = y->dim[1] * y->dim[2] * y->dim[3];
  }
  k->n_batch = k->space.rank - 2;
}

/* The weight gradient's (c, kh, kw) are one run of columns: a value must
 * walk them as one (size-1 dims aside), else the group is declined. */
static bool wgrad_columns(const cg_shape_t *y, int64_t *st) {
  int64_t col = 0, expect = 0;
  bool seen = false;
  for (int d = 3; d >= 1; d--) {
    if (y->dim[d] == 1) continue;
    if (seen && st[d] != expect) return false;
    if (!seen) col = st[d];
    seen = true;
    expect = st[d] * y->dim[d];
  }
  st[1] = col;
  return true;
}

static bool access_strides(contract_t *k, const cg_shape_t *y, int32_t v, int64_t *st) {
  cg_shape_t s;
  if (!cg_value_shape(k->c, v, &s) || !cg_broadcast_strides(&s, y, st)) return false;
  if (k->anchor->op == IR_OP_CONV2D_WEIGHT_GRAD) return wgrad_columns(y, st);
  if (!is_image_conv(k->anchor)) return true;
  if (st[2] != st[3] * y->dim[3]) return false;
  st[2] = st[3];
  return true;
}

/* The kernel writes the anchor's slot when the anchor is needed outside;
 * else the slot of the last full-size output, which the epilogue then
 * overwrites in place. */
static int32_t pick_c(const contract_t *k, const cg_shape_t *y) {
  if (cg_is_output(k->grp, k->y)) return k->y;
  int32_t best = -1;
  for (int i = 0; i < k->grp->n_outputs; i++) {
    cg_shape_t s;
    int32_t v = k->grp->outputs[i];
    if (!cg_value_shape(k->c, v, &s) || cg_numel(&s) != cg_numel(y) || s.lead != y->lead ||
        k->c->g->values[v].type.dtype != LOOM_F32)
      continue;
    if (best < 0 || k->c->g->values[v].node > k->c->g->values[best].node) best = v;
  }
  return best;
}

/* The epilogue's inputs and the outputs it stores, with their strides. */
static bool collect_accesses(contract_t *k, const cg_shape_t *y) {
  cg_ctx_t *c = k->c;
  const fuse_group_t *grp = k->grp;
  bool ok = true;
  for (int i = 0; i < grp->n_inputs + grp->n_outputs && ok; i++) {
    int32_t v = i < grp->n_inputs ? grp->inputs[i] : grp->outputs[i - grp->n_inputs];
    bool anchor_in = false;
    for (int j = 0; j < k->anchor->n_in; j++) anchor_in |= k->anchor->in[j] == v;
    if (v == k->c_value || v == k->y || (anchor_in && i < grp->n_inputs)) continue;
    ok = cg_slot(c, v) >= 0 && access_strides(k, y, v, k->stride[k->n_acc]);
    k->val[k->n_acc++] = v;
  }
  /* The kernel writes c before the epilogue reads its inputs, so no input
   * may share c's storage (an in-place plan would need another buffer). */
  for (int i = 0; i < grp->n_inputs && ok; i++)
    ok = cg_slot(c, grp->inputs[i]) != cg_slot(c, k->c_value);
  /* An anchor input also read by the epilogue is accessed like any other. */
  for (int i = 0; i < grp->n_nodes && ok; i++) {
    if (&c->g->nodes[grp->nodes[i]] == k->anchor) continue;
    const ir_node_t *n = &c->g->nodes[grp->nodes[i]];
    for (int j = 0; j < n->n_in && ok; j++) {
      int32_t v = n->in[j];
      bool known = v == k->y || cg_in_group(c, k->gi, v);
      for (int q = 0; q < k->n_acc; q++) known |= k->val[q] == v;
      if (known) continue;
      ok = access_strides(k, y, v, k->stride[k->n_acc]);
      k->val[k->n_acc++] = v;
    }
  }
  return ok;
}

/* ---- Matmul operands read through views (c_view.c) ---------------------------- */

/* The stored matrix of view v as the kernel takes it: rows `*ld` apart
 * with op `*trans` (the node's trans attribute, flipped when v's columns
 * rather than its rows are one element apart). */
static void view_matrix(const ir_view_t *v, int trans, int *out_trans, int64_t *ld) {
  int r = v->rank - 2, col = v->rank - 1;
  if (v->stride[col] == 1 || v->dim[col] == 1) {
    *out_trans = trans;
    *ld = v->dim[r] > 1 ? v->stride[r] : v->dim[col];
  } else {
    *out_trans = !trans;
    *ld = v->dim[col] > 1 ? v->stride[col] : v->dim[r];
  }
}

/* Batch strides of operand i, its batch dims aligned with the output's
 * nb from the right; 0 where it broadcasts. */
static void operand_batch(const contract_t *k, int i, const cg_shape_t *y, int nb,
                          int64_t *st) {
  const ir_view_t *v = &k->view[i];
  if (v->root != k->anchor->in[i]) { /* a view: constant dims */
    for (int d = 0; d < nb; d++) {
      int e = d - (nb - (v->rank - 2));
      st[d] = e < 0 || v->dim[e] == 1 ? 0 : v->stride[e];
    }
    return;
  }
  cg_shape_t s, yb = *y;
  cg_value_shape(k->c, v->root, &s);
  int64_t mat = s.dim[s.rank - 1] * s.dim[s.rank - 2];
  s.rank -= 2;
  yb.rank = nb;
  cg_broadcast_strides(&s, &yb, st);
  for (int d = 0; d < nb; d++) st[d] *= mat;
}

static loom_status_t contract_build(cg_ctx_t *c, int gi, contract_t *k, cg_shape_t *y,
                                    bool *ok) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  *k = (contract_t){.c = c, .gi = gi, .grp = grp};
  int32_t a = grp->anchor >= 0 ? grp->anchor : grp->nodes[0];
  k->anchor = &c->g->nodes[a];
  k->y = k->anchor->out[0];
  /* Nodes before the anchor (in graph order) are epilogue nodes that do
   * not read the product (an optimizer's m * beta1 beside the gradient). */
  *ok = cg_in_group(c, gi, k->y) && cg_supports(c->g, a) && cg_value_shape(c, k->y, y);
  /* Operands with a runtime dim other than the leading one are declined. */
  for (int i = 0; i < k->anchor->n_in && *ok; i++) {
    cg_shape_t s;
    *ok = cg_value_shape(c, k->anchor->in[i], &s);
  }
  for (int i = 0; i < grp->n_nodes && *ok; i++)
    *ok = grp->nodes[i] == a || cg_expr_supported(c->g, &c->g->nodes[grp->nodes[i]]);
  if (!*ok) return LOOM_OK;
  for (int i = 0; i < 2 && *ok && k->anchor->op == IR_OP_MATMUL; i++)
    *ok = cg_operand_view(c, k->anchor->in[i], &k->view[i]);
  /* A product written through strides: the matmul alone, no epilogue. */
  if (*ok && grp->strided)
    *ok = k->anchor->op == IR_OP_MATMUL && grp->n_nodes == 1 && cg_product_view(c, k->y, &k->out);
  if (!*ok) return LOOM_OK;
  epilogue_space(k, y);
  k->c_value = pick_c(k, y);
  int n = grp->n_inputs + grp->n_outputs;
  k->val = core_calloc((size_t)n + 1, sizeof *k->val);
  k->stride = core_calloc((size_t)n + 2, sizeof *k->stride);
  if (!k->val || !k->stride) return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  *ok = k->c_value >= 0 && cg_slot(c, k->c_value) >= 0 && collect_accesses(k, y) &&
        (!grp->strided || k->c_value == k->y);
  return LOOM_OK;
}

/* ---- The epilogue ------------------------------------------------------------- */

static bool is_input(const contract_t *k, int32_t v) {
  return !cg_in_group(k->c, k->gi, v);
}

static void epilogue_offset(cg_buf_t *b, const contract_t *k, const int64_t *st) {
  int r = k->n_batch;
  bool any = false;
  const char *pos[2] = {"row", "col"};
  for (int d = 0; d < r + 2; d++) {
    if (!st[d]) continue;
    cg_printf(b, any ? " + " : "");
    if (d < r) cg_printf(b, "b%d", d);
    else cg_printf(b, "%s", pos[d - r]);
    if (st[d] != 1) cg_printf(b, " * %lld", (long long)st[d]);
    any = true;
  }
  if (!any) cg_printf(b, "0");
}

/* Whether an access reads one element for the whole output. */
static bool is_scalar_access(const contract_t *k, const int64_t *st) {
  for (int d = 0; d < k->n_batch + 2; d++)
    if (st[d]) return false;
  return true;
}

static void emit_epilogue(contract_t *k) {
  cg_ctx_t *c = k->c;
  cg_buf_t *b = c->out;
  const fuse_group_t *grp = k->grp;
  cg_printf(b, "typedef struct loom_g%d_ctx {\n  void *const *slots;\n  int64_t batch0;\n"
               "} loom_g%d_ctx_t;\n\n", k->gi, k->gi);
  /* c is restrict: no other value of the group lives in its slot (see
   * collect_accesses), and the loop vectorizes only if GCC knows it. */
  cg_function(c, "static void loom_g%d_epilogue(void *ctx, int64_t batch, float *restrict c, "
                 "int64_t ldc, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {\n",
            k->gi);
  cg_line(b, 1, "const loom_g%d_ctx_t *e = (const loom_g%d_ctx_t *)ctx;\n", k->gi, k->gi);
  cg_line(b, 1, "void *const *slots = e->slots;\n");
  for (int i = 0; i < k->n_acc; i++)
    cg_declare_pointer(c, grp, 1, k->val[i], !is_input(k, k->val[i]));
  /* The item's index along each batch dim that some access walks. */
  bool used[LOOM_MAX_RANK] = {false}, any = false;
  for (int d = 0; d < k->n_batch; d++)
    for (int i = 0; i < k->n_acc; i++) used[d] |= k->stride[i][d] != 0;
  for (int d = 0; d < k->n_batch; d++) any |= used[d];
  if (any) cg_line(b, 1, "const int64_t item = e->batch0 + batch;\n");
  else cg_line(b, 1, "(void)batch;\n");
  int64_t step = 1;
  for (int d = k->n_batch - 1; d >= 0; d--) {
    if (used[d] && d == 0 && k->space.lead) /* a runtime count: no wrap */
      cg_line(b, 1, "const int64_t b0 = item / %lld;\n", (long long)step);
    else if (used[d])
      cg_line(b, 1, "const int64_t b%d = item / %lld %% %lld;\n", d, (long long)step,
              (long long)k->space.dim[d]);
    step *= k->space.dim[d];
  }
  bool row = false, col = false;
  for (int i = 0; i < k->n_acc; i++) {
    row |= k->stride[i][k->n_batch] != 0;
    col |= k->stride[i][k->n_batch + 1] != 0;
  }
  if (!row) cg_line(b, 1, "(void)row0;\n");
  if (!col) cg_line(b, 1, "(void)col0;\n");
  /* Scalars are loaded once, before the loops: a load inside them that
   * might alias a store keeps GCC from vectorizing. */
  for (int i = 0; i < k->n_acc; i++) {
    if (!is_input(k, k->val[i]) || !is_scalar_access(k, k->stride[i])) continue;
    cg_load_begin(b, 1, c->g, k->val[i]);
    cg_printf(b, "0");
    cg_load_end(b, c->g, k->val[i]);
  }
  cg_line(b, 1, "for (int64_t r = 0; r < rows; r++) {\n");
  if (row) cg_line(b, 2, "const int64_t row = row0 + r;\n");
  cg_ivdep(c, 2);
  cg_line(b, 2, "for (int64_t j = 0; j < cols; j++) {\n");
  if (col) cg_line(b, 3, "const int64_t col = col0 + j;\n");
  cg_line(b, 3, "const float v%d = c[r * ldc + j];\n", (int)k->y);
  for (int i = 0; i < k->n_acc; i++) {
    if (!is_input(k, k->val[i]) || is_scalar_access(k, k->stride[i])) continue;
    cg_load_begin(b, 3, c->g, k->val[i]);
    epilogue_offset(b, k, k->stride[i]);
    cg_load_end(b, c->g, k->val[i]);
  }
  for (int i = 0; i < grp->n_nodes; i++)
    if (&c->g->nodes[grp->nodes[i]] != k->anchor)
      cg_node_stmt(b, 3, c->g, &c->g->nodes[grp->nodes[i]]);
  if (k->c_value != k->y) cg_line(b, 3, "c[r * ldc + j] = v%d;\n", (int)k->c_value);
  for (int i = 0; i < k->n_acc; i++) {
    if (is_input(k, k->val[i])) continue;
    cg_store_begin(b, 3, k->val[i]);
    epilogue_offset(b, k, k->stride[i]);
    cg_store_end(b, c->g, k->val[i]);
  }
  cg_line(b, 2, "}\n");
  cg_line(b, 1, "}\n}\n\n");
}

/* ---- The kernel calls ------------------------------------------------------------ */

static void epilogue_fields(cg_buf_t *b, int gi, bool epi) {
  if (epi) cg_printf(b, ".epilogue = loom_g%d_epilogue, .epilogue_ctx = &e};\n", gi);
  else cg_printf(b, ".epilogue = NULL, .epilogue_ctx = NULL};\n");
}

/* The first line of the descriptor when a size is known only at run
 * time: M (y's leading dim), K (a transposed A's leading dim) or the
 * batch count (the collapsed batch's leading dim). */
static void emit_gemm_sizes(const cg_ctx_t *c, const cg_shape_t *y, const cg_shape_t *sa,
                            const cg_shape_t *batch, int rb, int trans_a) {
  cg_buf_t *b = c->out;
  int nb = y->rank - 2;
  cg_line(b, 1, "loom_abi_gemm_t d = {.m = ");
  if (nb == 0) cg_lead_extent(b, c->g, y);
  else cg_printf(b, "%lld", (long long)y->dim[nb]);
  cg_printf(b, ", .n = %lld, .k = ", (long long)y->dim[nb + 1]);
  if (trans_a && sa->rank == 2) cg_lead_extent(b, c->g, sa);
  else cg_printf(b, "%lld", (long long)sa->dim[sa->rank - (trans_a ? 2 : 1)]);
  cg_printf(b, ", .batch = ");
  if (rb == 1) cg_lead_extent(b, c->g, batch);
  else cg_printf(b, "%lld", (long long)batch->dim[rb - 1]);
  cg_printf(b, ",\n");
}

/* A rank-2 B shared by every item of a batched row-major A whose items
 * follow each other (x @ W over a batch of sequences) is one GEMM of
 * batch*m rows: B is packed once, not once per item. The epilogue then
 * sees the items' rows as one dim, which every access must walk as one. */
static bool fold_batch_rows(contract_t *k, const cg_shape_t *y) {
  const ir_node_t *n = k->anchor;
  cg_shape_t sa, sb;
  if (n->op != IR_OP_MATMUL || k->n_batch == 0 || y->lead ||
      ir_attr_int(n->attrs, "trans_a", 0) || !cg_value_shape(k->c, n->in[0], &sa) ||
      !cg_value_shape(k->c, n->in[1], &sb) || sa.lead || sb.rank != 2 || sa.rank != y->rank ||
      !ir_view_is_plain(&k->view[0]) || !ir_view_is_plain(&k->view[1]) || k->grp->strided)
    return false;
  for (int d = 0; d < k->n_batch; d++)
    if (sa.dim[d] != y->dim[d]) return false;
  cg_shape_t space = k->space;
  size_t bytes = sizeof *k->stride * (size_t)(k->n_acc + 1);
  int64_t(*st)[LOOM_MAX_RANK] = core_malloc(bytes);
  if (!st) return false;
  memcpy(st, k->stride, bytes);
  bool ok = cg_collapse(&space, 0, k->n_batch + 1, k->n_acc, st) == 1;
  if (ok) {
    k->space = space;
    memcpy(k->stride, st, bytes);
    k->n_batch = 0;
    k->fold_rows = true;
  }
  core_free(st);
  return ok;
}

/* A rank-2 B that the executable holds (a parameter or constant) may
 * have been packed at compile time: rt->packed_b (frozen weights); one
 * that is an input, by the caller for this run (a traced segment's
 * weights, frozen within a training step: segment_pack.c). */
static void emit_b_packed(const contract_t *k) {
  const ir_node_t *n = k->anchor;
  ir_value_kind_t kind = k->c->g->values[n->in[1]].kind;
  if ((kind != IR_VALUE_PARAM && kind != IR_VALUE_CONST && kind != IR_VALUE_INPUT) ||
      k->c->g->values[n->in[1]].type.rank != 2)
    return;
  cg_line(k->c->out, 1, "d.b_packed = rt->packed_b ? rt->packed_b[2 * map[%d] + %d] : NULL;\n",
          (int)cg_slot(k->c, n->in[1]), (int)ir_attr_int(n->attrs, "trans_b", 0));
}

/* The folded GEMM: y's rows over all items, one call. */
static void emit_matmul_rows(contract_t *k, bool epi) {
  cg_ctx_t *c = k->c;
  cg_buf_t *b = c->out;
  const ir_node_t *n = k->anchor;
  cg_shape_t sb;
  cg_value_shape(c, n->in[1], &sb);
  int tb = (int)ir_attr_int(n->attrs, "trans_b", 0);
  int64_t m = k->space.dim[0], nn = k->space.dim[1], kk = sb.dim[tb ? 1 : 0];
  cg_line(b, 1, "loom_abi_gemm_t d = {.m = %lld, .n = %lld, .k = %lld, .batch = 1,\n",
          (long long)m, (long long)nn, (long long)kk);
  cg_line(b, 1, "    .lda = %lld, .trans_a = 0, .ldb = %lld, .trans_b = %d, .ldc = %lld,\n",
          (long long)kk, (long long)sb.dim[1], tb, (long long)nn);
  cg_line(b, 1, "    .a = (const float *)slots[%d], .b = (const float *)slots[%d],\n",
          (int)cg_slot(c, n->in[0]), (int)cg_slot(c, n->in[1]));
  cg_line(b, 1, "    .c = (float *)slots[%d], ", (int)cg_slot(c, k->c_value));
  epilogue_fields(b, k->gi, epi);
  emit_b_packed(k);
  cg_line(b, 1, "rt->gemm_f32(&d, rt->pool);\n");
}

/* A matmul call's operands: A, B and C's batch strides collapsed to rb
 * levels of `batch`, leading dims, trans flags and offsets. */
typedef struct gemm_call {
  int64_t kk, st[3][LOOM_MAX_RANK], ld[3], off[3];
  int trans[2], rb;
  cg_shape_t batch;
} gemm_call_t;

static void matmul_operands(const contract_t *k, const cg_shape_t *y, const cg_shape_t *sa,
                            gemm_call_t *g) {
  const ir_node_t *n = k->anchor;
  int nb = y->rank - 2, ta = (int)ir_attr_int(n->attrs, "trans_a", 0);
  *g = (gemm_call_t){.kk = ta ? sa->dim[sa->rank - 2] : sa->dim[sa->rank - 1],
                     .off = {k->view[0].offset, k->view[1].offset,
                             k->grp->strided ? k->out.offset : 0}};
  view_matrix(&k->view[0], ta, &g->trans[0], &g->ld[0]);
  view_matrix(&k->view[1], (int)ir_attr_int(n->attrs, "trans_b", 0), &g->trans[1], &g->ld[1]);
  operand_batch(k, 0, y, nb, g->st[0]);
  operand_batch(k, 1, y, nb, g->st[1]);
  int64_t step = y->dim[nb] * y->dim[nb + 1];
  g->ld[2] = k->grp->strided ? k->out.stride[nb] : y->dim[nb + 1];
  for (int d = nb - 1; d >= 0; d--) {
    g->st[2][d] = k->grp->strided ? (y->dim[d] == 1 ? 0 : k->out.stride[d]) : step;
    step *= y->dim[d];
  }
  g->batch = *y;
  g->batch.rank = nb;
  if (nb == 0) g->batch.lead = 0;
  g->rb = cg_collapse(&g->batch, 0, nb, 3, g->st);
  if (g->rb == 0) {
    g->batch.dim[0] = 1;
    g->st[0][0] = g->st[1][0] = g->st[2][0] = 0;
    g->rb = 1;
  }
}

/* The loops over outer batch levels, each pointing d at its items and
 * calling the kernel. */
static void emit_item_loops(contract_t *k, const gemm_call_t *g, int loops, bool epi,
                            int64_t item) {
  cg_buf_t *b = k->c->out;
  const char *names[3] = {"a", "b", "c"};
  for (int d = 0; d < loops; d++) {
    cg_line(b, 1 + d, "for (int64_t i%d = 0; i%d < ", d, d);
    if (d == 0) cg_lead_extent(b, k->c->g, &g->batch);
    else cg_printf(b, "%lld", (long long)g->batch.dim[d]);
    cg_printf(b, "; i%d++) {\n", d);
  }
  int in = loops + 1;
  int32_t vals[3] = {k->anchor->in[0], k->anchor->in[1], k->c_value};
  for (int q = 0; q < 3; q++) {
    cg_line(b, in, "d.%s = (%sfloat *)slots[%d] + %lld + ", names[q], q < 2 ? "const " : "",
            (int)cg_slot(k->c, vals[q]), (long long)g->off[q]);
    cg_offset(b, "i", 0, loops, g->st[q]);
    cg_printf(b, ";\n");
  }
  if (epi) {
    cg_line(b, in, "e.batch0 = (");
    cg_offset(b, "i", 0, loops, g->st[2]);
    cg_printf(b, ") / %lld;\n", (long long)item);
  }
  cg_line(b, in, "rt->gemm_f32(&d, rt->pool);\n");
  for (int d = loops - 1; d >= 0; d--) cg_line(b, 1 + d, "}\n");
}

static void emit_matmul_call(contract_t *k, const cg_shape_t *y, bool epi) {
  if (k->fold_rows) {
    emit_matmul_rows(k, epi);
    return;
  }
  cg_ctx_t *c = k->c;
  cg_buf_t *b = c->out;
  const ir_node_t *n = k->anchor;
  cg_shape_t sa;
  cg_value_shape(c, n->in[0], &sa);
  int nb = y->rank - 2;
  int64_t m = y->dim[nb], nn = y->dim[nb + 1];
  gemm_call_t g;
  matmul_operands(k, y, &sa, &g);
  /* The last two batch levels go to the kernel as groups (one call over
   * attention's (batch, head) items read from a QKV product); outer ones
   * loop. */
  bool dynamic = y->lead || sa.lead;
  int rb = g.rb, lv = rb >= 2 && !dynamic ? 2 : 1, outer = rb - lv;
  if (dynamic) { /* runtime symbols: m, k or batch from syms[] */
    emit_gemm_sizes(c, y, &sa, &g.batch, rb, ir_attr_int(n->attrs, "trans_a", 0));
  } else {
    int64_t items = g.batch.dim[rb - 1] * (lv == 2 ? g.batch.dim[rb - 2] : 1);
    cg_line(b, 1, "loom_abi_gemm_t d = {.m = %lld, .n = %lld, .k = %lld, .batch = %lld,\n",
            (long long)m, (long long)nn, (long long)g.kk, (long long)items);
  }
  const char *names[3] = {"a", "b", "c"};
  for (int q = 0; q < 3; q++) {
    cg_line(b, 1, "                     .ld%s = %lld, .stride_%s = %lld,", names[q],
            (long long)g.ld[q], names[q], (long long)g.st[q][outer]);
    if (q < 2) cg_printf(b, " .trans_%s = %d,", names[q], g.trans[q]);
    cg_printf(b, "\n");
  }
  if (lv == 2) {
    cg_line(b, 1, "                     .groups = %lld,", (long long)g.batch.dim[rb - 1]);
    for (int q = 0; q < 3; q++)
      cg_printf(b, " .inner_%s = %lld,", names[q], (long long)g.st[q][rb - 1]);
    cg_printf(b, "\n");
  }
  if (outer == 0) {
    cg_line(b, 1, "                     .a = (const float *)slots[%d] + %lld, "
            ".b = (const float *)slots[%d] + %lld,\n", (int)cg_slot(c, n->in[0]),
            (long long)g.off[0], (int)cg_slot(c, n->in[1]), (long long)g.off[1]);
    cg_line(b, 1, "                     .c = (float *)slots[%d] + %lld,\n",
            (int)cg_slot(c, k->c_value), (long long)g.off[2]);
  }
  cg_line(b, 1, "%s", "                     ");
  epilogue_fields(b, k->gi, epi);
  if (outer > 0) {
    emit_item_loops(k, &g, outer, epi, m * nn);
    return;
  }
  emit_b_packed(k);
  cg_line(b, 1, "rt->gemm_f32(&d, rt->pool);\n");
}

/* Opens the initializer of `d`, a loom_abi_conv2d_t, with the geometry of
 * the forward conv2d behind node n: its input image in = (n, c, h, w), the
 * count n known only at run time where in has a lead, o output channels
 * of kh x kw windows over ho x wo positions, and n's stride, pads,
 * dilation and groups. The caller adds the pointers. */
static void emit_conv_geometry(const cg_ctx_t *c, const ir_node_t *n, const cg_shape_t *in,
                               int64_t o, int64_t kh, int64_t kw, int64_t ho, int64_t wo) {
  cg_buf_t *b = c->out;
  int64_t stride[2], pads[4], dil[2];
  ir_attr_ints_or(n->attrs, "stride", 2, 1, stride);
  ir_attr_ints_or(n->attrs, "pads", 4, 0, pads);
  ir_attr_ints_or(n->attrs, "dilation", 2, 1, dil);
  cg_line(b, 1, "loom_abi_conv2d_t d = {.n = ");
  cg_lead_extent(b, c->g, in);
  cg_printf(b, ", .c = %lld, .h = %lld, .w = %lld,\n", (long long)in->dim[1],
            (long long)in->dim[2], (long long)in->dim[3]);
  cg_line(b, 1, "    .o = %lld, .kh = %lld, .kw = %lld, .ho = %lld, .wo = %lld,\n",
          (long long)o, (long long)kh, (long long)kw, (long long)ho, (long long)wo);
  cg_line(b, 1, "    .stride = {%lld, %lld}, .pads = {%lld, %lld, %lld, %lld},\n",
          (long long)stride[0], (long long)stride[1], (long long)pads[0], (long long)pads[1],
          (long long)pads[2], (long long)pads[3]);
  cg_line(b, 1, "    .dilation = {%lld, %lld}, .groups = %lld,\n", (long long)dil[0],
          (long long)dil[1], (long long)ir_attr_int(n->attrs, "groups", 1));
}

/* .x, .weight and .bias (n's third input, or NULL) from these slots. */
static void emit_conv_inputs(cg_ctx_t *c, const ir_node_t *n, int32_t x, int32_t w) {
  cg_line(c->out, 1, "    .x = (const float *)slots[%d], .weight = (const float *)slots[%d],\n",
          (int)cg_slot(c, x), (int)cg_slot(c, w));
  if (n->n_in > 2)
    cg_line(c->out, 1, "    .bias = (const float *)slots[%d],\n", (int)cg_slot(c, n->in[2]));
  else cg_line(c->out, 1, "    .bias = NULL,\n");
}

static void emit_conv_call(contract_t *k, const cg_shape_t *y, bool epi) {
  cg_ctx_t *c = k->c;
  const ir_node_t *n = k->anchor;
  cg_shape_t x, w;
  cg_value_shape(c, n->in[0], &x);
  cg_value_shape(c, n->in[1], &w);
  emit_conv_geometry(c, n, &x, w.dim[0], w.dim[2], w.dim[3], y->dim[2], y->dim[3]);
  emit_conv_inputs(c, n, n->in[0], n->in[1]);
  cg_line(c->out, 1, "    .y = (float *)slots[%d], ", (int)cg_slot(c, k->c_value));
  epilogue_fields(c->out, k->gi, epi);
  /* A weight the executable holds may have been packed at compile time
   * (frozen weights). */
  ir_value_kind_t kind = c->g->values[n->in[1]].kind;
  if (kind == IR_VALUE_PARAM || kind == IR_VALUE_CONST)
    cg_line(c->out, 1, "d.weight_packed = rt->packed_w ? rt->packed_w[map[%d]] : NULL;\n",
            (int)cg_slot(c, n->in[1]));
  cg_line(c->out, 1, "rt->conv2d_f32(&d, rt->pool);\n");
}

/* in[0] = x, in[1] = dy; the output dW is (o, c/groups, kh, kw). */
static void emit_wgrad_call(contract_t *k, const cg_shape_t *dw, bool epi) {
  cg_ctx_t *c = k->c;
  const ir_node_t *n = k->anchor;
  cg_shape_t x, dy;
  cg_value_shape(c, n->in[0], &x);
  cg_value_shape(c, n->in[1], &dy);
  emit_conv_geometry(c, n, &x, dw->dim[0], dw->dim[2], dw->dim[3], dy.dim[2], dy.dim[3]);
  cg_line(c->out, 1, "    .x = (const float *)slots[%d], .weight = (const float *)slots[%d],\n",
          (int)cg_slot(c, n->in[0]), (int)cg_slot(c, k->c_value));
  cg_line(c->out, 1, "    .bias = NULL, .y = (float *)slots[%d], ", (int)cg_slot(c, n->in[1]));
  epilogue_fields(c->out, k->gi, epi);
  cg_line(c->out, 1, "rt->conv2d_weight_grad_f32(&d, rt->pool);\n");
}

/* conv_transpose2d(x, w) is the input gradient of the conv2d that maps
 * its output (n, c, h, w) back to x (n, o, ho, wo) with weight w (o,
 * c/groups, kh, kw): the ABI takes that conv2d's geometry, with x as dY
 * and the output as dX. */
static void emit_convt_call(contract_t *k, const cg_shape_t *y, bool epi) {
  cg_ctx_t *c = k->c;
  const ir_node_t *n = k->anchor;
  cg_shape_t x, w;
  cg_value_shape(c, n->in[0], &x);
  cg_value_shape(c, n->in[1], &w);
  emit_conv_geometry(c, n, y, x.dim[1], w.dim[2], w.dim[3], x.dim[2], x.dim[3]);
  emit_conv_inputs(c, n, k->c_value, n->in[1]);
  cg_line(c->out, 1, "    .y = (float *)slots[%d], ", (int)cg_slot(c, n->in[0]));
  epilogue_fields(c->out, k->gi, epi);
  cg_line(c->out, 1, "rt->conv2d_input_grad_f32(&d, rt->pool);\n");
}

loom_status_t cg_emit_contraction(cg_ctx_t *c, int gi, bool *ok) {
  contract_t k;
  cg_shape_t y;
  loom_status_t s = contract_build(c, gi, &k, &y, ok);
  if (s != LOOM_OK || !*ok) {
    contract_free(&k);
    return s;
  }
  cg_buf_t *b = c->out;
  bool epi = k.grp->n_nodes > 1;
  fold_batch_rows(&k, &y);
  cg_group_comment(c, gi, "contraction", &y, NULL);
  if (epi) emit_epilogue(&k);
  cg_group_function(c, gi);
  cg_line(b, 1, "(void)syms;\n");
  if (epi) cg_line(b, 1, "loom_g%d_ctx_t e = {slots, 0};\n", gi);
  if (k.anchor->op == IR_OP_CONV2D) emit_conv_call(&k, &y, epi);
  else if (k.anchor->op == IR_OP_CONV2D_WEIGHT_GRAD) emit_wgrad_call(&k, &y, epi);
  else if (k.anchor->op == IR_OP_CONV_TRANSPOSE2D) emit_convt_call(&k, &y, epi);
  else emit_matmul_call(&k, &y, epi);
  cg_printf(b, "}\n");
  contract_free(&k);
  return LOOM_OK;
}
