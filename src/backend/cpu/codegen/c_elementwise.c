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

/* ---- Blocks of vectors ----------------------------------------------------
 * A long chain of operations per element is bound by its latency, not by
 * memory: the vectorized loop computes one vector's chain after another
 * and the out-of-order core holds too few of them to hide it. In a block
 * of a few vectors (LOOM_LANES, in the prelude: per ISA), one short loop
 * per statement over arrays the compiler keeps in registers, the block's
 * chains interleave (bench_fusion's 20 adds, muls and maxes per element on
 * AVX2: 6.7-7.8 ms, in blocks 5.4-5.9, memcpy 4.4-5.1). Values that do not
 * vary along the innermost dim stay scalars, computed once per block; the
 * elements past the last whole block run the plain loop. */

enum {
  BLOCK_MIN_COST = 8,     /* cg_group_cost: below it memory bounds the body */
  BLOCK_MIN_EXTENT = 128, /* a blocked innermost dim holds two blocks or more */
  BLOCK_MAX_LIVE = 6      /* arrays live at once: more would spill */
};

typedef struct block {
  bool *varying; /* per input, then per node: varies along the innermost dim */
  int live;      /* arrays live at once, at most */
} block_t;

/* The index of value v among the group's inputs, or n_inputs + the
 * position of the node that writes it. */
static int position_of(const fuse_group_t *grp, const loom_graph_t *g, int32_t v) {
  for (int i = 0; i < grp->n_inputs; i++)
    if (grp->inputs[i] == v) return i;
  for (int k = 0; k < grp->n_nodes; k++)
    if (g->nodes[grp->nodes[k]].out[0] == v) return grp->n_inputs + k;
  return -1;
}

/* Whether a node after position `at` reads value v. */
static bool read_after(const fuse_group_t *grp, const loom_graph_t *g, int at, int32_t v) {
  for (int k = at + 1; k < grp->n_nodes; k++) {
    const ir_node_t *nd = &g->nodes[grp->nodes[k]];
    for (int i = 0; i < nd->n_in; i++)
      if (nd->in[i] == v) return true;
  }
  return false;
}

/* The most arrays live at one node: its own, and those of earlier nodes
 * read after it (its operands' arrays that die at it lend it their
 * registers; inputs are read from memory where used). */
static int max_live(const fuse_group_t *grp, const loom_graph_t *g, const bool *varying) {
  int most = 0;
  for (int at = 0; at < grp->n_nodes; at++) {
    int live = 1;
    for (int j = 0; j < at; j++)
      live += varying[grp->n_inputs + j] && read_after(grp, g, at, g->nodes[grp->nodes[j]].out[0]);
    if (live > most) most = live;
  }
  return most;
}

/* Whether the group runs in blocks: a costly body of f32 values whose
 * innermost dim is long and whose arrays fit the registers. */
static loom_status_t block_plan(const cg_ctx_t *c, const fuse_group_t *grp,
                                const access_t *a, block_t *blk, bool *blocked) {
  const loom_graph_t *g = c->g;
  int k = a->space.rank - 1;
  *blocked = false;
  if (cg_group_cost(g, grp) < BLOCK_MIN_COST) return LOOM_OK;
  if ((k > 0 || !a->space.lead) && a->space.dim[k] < BLOCK_MIN_EXTENT) return LOOM_OK;
  for (int i = 0; i < a->n; i++)
    if (g->values[a->val[i]].type.dtype != LOOM_F32) return LOOM_OK;
  for (int j = 0; j < grp->n_nodes; j++) {
    const ir_node_t *nd = &g->nodes[grp->nodes[j]];
    if (nd->n_out != 1 || g->values[nd->out[0]].type.dtype != LOOM_F32) return LOOM_OK;
  }
  blk->varying = core_calloc((size_t)(grp->n_inputs + grp->n_nodes), sizeof *blk->varying);
  if (!blk->varying) return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  for (int i = 0; i < grp->n_inputs; i++) blk->varying[i] = a->stride[i][k] != 0;
  for (int j = 0; j < grp->n_nodes; j++) {
    const ir_node_t *nd = &g->nodes[grp->nodes[j]];
    for (int i = 0; i < nd->n_in; i++) {
      int at = position_of(grp, g, nd->in[i]);
      if (at < 0) {
        core_free(blk->varying);
        return LOOM_OK;
      }
      blk->varying[grp->n_inputs + j] |= blk->varying[at];
    }
  }
  blk->live = max_live(grp, g, blk->varying);
  *blocked = blk->live <= BLOCK_MAX_LIVE;
  if (!*blocked) core_free(blk->varying);
  return LOOM_OK;
}

static void emit_store(const cg_ctx_t *c, const access_t *a, int32_t v, int level) {
  for (int i = 0; i < a->n; i++)
    if (a->write[i] && a->val[i] == v) {
      cg_store_begin(c->out, level, v);
      cg_offset(c->out, "i", 0, a->space.rank, a->stride[i]);
      cg_store_end(c->out, c->g, v);
    }
}

/* One block: scalars where nothing varies, else a loop over the lanes per
 * statement, which reads its operands from the inputs (read where used:
 * an input copied to an array first was not kept in registers) or from
 * the arrays of earlier statements, and writes its own array. */
static void emit_block(const cg_ctx_t *c, const fuse_group_t *grp, const access_t *a,
                       const block_t *blk, int level) {
  cg_buf_t *b = c->out;
  const loom_graph_t *g = c->g;
  int k = a->space.rank - 1, live = blk->live;
  for (int i = 0; i < grp->n_inputs; i++)
    if (!blk->varying[i]) {
      cg_load_begin(b, level, g, a->val[i]);
      cg_offset(b, "i", 0, a->space.rank, a->stride[i]);
      cg_load_end(b, g, a->val[i]);
    }
  for (int j = 0; j < grp->n_nodes; j++) {
    const ir_node_t *nd = &g->nodes[grp->nodes[j]];
    int32_t out = nd->out[0];
    if (!blk->varying[grp->n_inputs + j]) {
      cg_node_stmt(b, level, g, nd);
      emit_store(c, a, out, level);
      continue;
    }
    bool index = cg_is_output(grp, out);
    for (int i = 0; i < nd->n_in; i++) {
      int at = position_of(grp, g, nd->in[i]);
      index |= at < grp->n_inputs && blk->varying[at];
    }
    bool kept = read_after(grp, g, j, out);
    if (kept) cg_line(b, level, "float v%d_b[LOOM_LANES(%d)];\n", (int)out, live);
    /* A statement that calls a math function (cost 8: loom_expf,
     * loom_tanhf...) stays a loop: unrolled whole (16 lanes on AVX2), its
     * scalars are regrouped into vectors but its calls stay scalar (an
     * LSTM cell's group, 12x the instructions). Plain arithmetic unrolls,
     * which keeps a chain in registers (bench_fusion's chain ran 3.5x
     * slower as loops through the arrays). */
    if (cg_op_cost(nd->op) >= 8) cg_line(b, level, "#pragma GCC unroll 1\n");
    cg_line(b, level, "for (int l = 0; l < LOOM_LANES(%d); l++) {\n", live);
    if (index) cg_line(b, level + 1, "const int64_t i%d = b%d + l;\n", k, k);
    for (int i = 0; i < nd->n_in; i++) {
      int at = position_of(grp, g, nd->in[i]);
      bool repeat = false;
      for (int e = 0; e < i; e++) repeat |= nd->in[e] == nd->in[i];
      if (repeat || !blk->varying[at]) continue;
      if (at < grp->n_inputs) {
        cg_load_begin(b, level + 1, g, nd->in[i]);
        cg_offset(b, "i", 0, a->space.rank, a->stride[at]);
        cg_load_end(b, g, nd->in[i]);
      } else {
        cg_line(b, level + 1, "const float v%d = v%d_b[l];\n", (int)nd->in[i], (int)nd->in[i]);
      }
    }
    cg_node_stmt(b, level + 1, g, nd);
    if (kept) cg_line(b, level + 1, "v%d_b[l] = v%d;\n", (int)out, (int)out);
    emit_store(c, a, out, level + 1);
    cg_line(b, level, "}\n");
  }
}

/* ---- The body ----------------------------------------------------------- */

/* The loops over every dim but the innermost, which runs [lo, hi). */
static void emit_outer_loops(const cg_ctx_t *c, const cg_shape_t *space, char lo[32],
                             char hi[32]) {
  int k = space->rank - 1;
  for (int d = 0; d < k; d++) {
    if (d == 0) cg_line(c->out, 1, "for (int64_t i0 = begin; i0 < end; i0++) {\n");
    else
      cg_line(c->out, d + 1, "for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", d, d,
              (long long)space->dim[d], d);
  }
  snprintf(lo, 32, "%s", k == 0 ? "begin" : "0");
  snprintf(hi, 32, k == 0 ? "end" : "%lld", (long long)space->dim[k]);
}

static void close_loops(cg_buf_t *b, int rank) {
  for (int d = rank; d >= 1; d--) cg_line(b, d, "}\n");
}

static void emit_body_fn(cg_ctx_t *c, int gi, const access_t *a, const block_t *blk) {
  const fuse_group_t *grp = &c->plan->groups[gi];
  cg_buf_t *b = c->out;
  int rank = a->space.rank, k = rank - 1, in = rank + 1;
  char lo[32], hi[32], start[32];
  cg_function(c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  for (int i = 0; i < a->n; i++) cg_declare_pointer(c, grp, 1, a->val[i], a->write[i]);
  emit_outer_loops(c, &a->space, lo, hi);
  snprintf(start, sizeof start, "%s", lo);
  if (blk) {
    cg_line(b, rank, "int64_t b%d = %s;\n", k, lo);
    cg_line(b, rank, "for (; b%d + LOOM_LANES(%d) <= %s; b%d += LOOM_LANES(%d)) {\n", k,
            blk->live, hi, k, blk->live);
    emit_block(c, grp, a, blk, in);
    cg_line(b, rank, "}\n");
    snprintf(start, sizeof start, "b%d", k);
  }
  cg_ivdep(c, rank);
  cg_line(b, rank, "for (int64_t i%d = %s; i%d < %s; i%d++) {\n", k, start, k, hi, k);
  for (int i = 0; i < grp->n_inputs; i++) {
    cg_load_begin(b, in, c->g, a->val[i]);
    cg_offset(b, "i", 0, rank, a->stride[i]);
    cg_load_end(b, c->g, a->val[i]);
  }
  for (int j = 0; j < grp->n_nodes; j++)
    cg_node_stmt(b, in, c->g, &c->g->nodes[grp->nodes[j]]);
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
  block_t blk;
  bool blocked;
  loom_status_t st = block_plan(c, grp, &a, &blk, &blocked);
  if (st != LOOM_OK) {
    access_free(&a);
    return st;
  }
  emit_body_fn(c, gi, &a, blocked ? &blk : NULL);
  if (blocked) core_free(blk.varying);
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
