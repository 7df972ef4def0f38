/* Reductions that keep the last dim: a fold over leading or middle axes
 * (a bias gradient sums a (rows, n) matrix down to n), a group of its own
 * (c_reduce.c hands it here). */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"

/* A fold over leading or middle axes (a bias gradient sums a (rows, n)
 * matrix down to n): the kept last dim is the column, folded for a block
 * of columns at once into an array of accumulators, so that every row is
 * read forward, a block wide, and the column loop is vector code. Tasks
 * are the kept dims before it times the column blocks. */
#define COLUMN_BLOCK 64

typedef struct cols {
  cg_shape_t space;             /* collapsed input space */
  int64_t stride[2][LOOM_MAX_RANK]; /* input, output */
  int64_t block, blocks, tasks, count; /* count: elements folded per output */
} cols_t;

/* The collapsed space; false unless its last dim is kept and the only
 * size known at run time is a folded leading dim (a bias gradient over a
 * trace's rows; not a mean, whose count it would change). */
static bool cols_build(cg_ctx_t *c, const ir_node_t *n, cols_t *k) {
  cg_shape_t out;
  if (!cg_value_shape(c, n->in[0], &k->space) || !cg_value_shape(c, n->out[0], &out) ||
      (k->space.lead && n->op == IR_OP_MEAN) || out.lead || k->space.rank == 0)
    return false;
  const int64_t *axes;
  int na = ir_attr_ints(n->attrs, "axes", &axes), rank = k->space.rank;
  if (!dtype_is_float(c->g->values[n->in[0]].type.dtype) && !cg_fold_of(n->op)->i_type)
    return false;
  bool red[LOOM_MAX_RANK] = {false};
  for (int i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
  int64_t step = 1;
  k->count = 1;
  for (int d = rank - 1; d >= 0; d--) {
    k->stride[0][d] = d == rank - 1 ? 1 : k->stride[0][d + 1] * k->space.dim[d + 1];
    k->stride[1][d] = red[d] ? 0 : step;
    if (red[d]) k->count *= k->space.dim[d];
    else step *= k->space.dim[d];
  }
  rank = k->space.rank = cg_collapse(&k->space, 0, rank, 2, k->stride);
  if (rank < 2 || k->stride[1][rank - 1] != 1) return false;
  if (k->space.lead && k->stride[1][0] != 0) return false;
  int64_t cols = k->space.dim[rank - 1];
  k->block = cols < COLUMN_BLOCK ? cols : COLUMN_BLOCK;
  k->blocks = (cols + k->block - 1) / k->block;
  k->tasks = k->blocks;
  for (int d = 0; d < rank - 1; d++)
    if (k->stride[1][d]) k->tasks *= k->space.dim[d];
  return true;
}

/* Loops over the dims of one kind (kept or reduced) but the column. */
static int cols_loops(cg_buf_t *b, const cols_t *k, int level, bool reduced) {
  for (int d = 0; d < k->space.rank - 1; d++) {
    if ((k->stride[1][d] == 0) != reduced) continue;
    if (d == 0 && k->space.lead) { /* the runtime extent, from the context */
      cg_line(b, level++, "for (int64_t i0 = 0; i0 < n0; i0++) {\n");
      continue;
    }
    cg_line(b, level++, "for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", d, d,
            (long long)k->space.dim[d], d);
  }
  return level;
}

/* The task's kept indices: i<d> for kept dims, the column block j0. */
static void cols_unravel(cg_buf_t *b, const cols_t *k) {
  int64_t step = k->blocks;
  cg_line(b, 2, "const int64_t j0 = t %% %lld * %lld;\n", (long long)k->blocks,
          (long long)k->block);
  for (int d = k->space.rank - 2; d >= 0; d--) {
    if (k->stride[1][d] == 0) continue;
    cg_line(b, 2, "const int64_t i%d = t / %lld %% %lld;\n", d, (long long)step,
            (long long)k->space.dim[d]);
    step *= k->space.dim[d];
  }
}

static void cols_offset(cg_buf_t *b, const cols_t *k, int which) {
  int last = k->space.rank - 1;
  cg_offset(b, "i", 0, last, k->stride[which]);
  cg_printf(b, " + j0 + j");
  if (k->stride[which][last] != 1) cg_printf(b, " * %lld", (long long)k->stride[which][last]);
}

static void cols_body(cg_ctx_t *c, const ir_node_t *n, const cols_t *k) {
  cg_buf_t *b = c->out;
  const loom_graph_t *g = c->g;
  const cg_fold_t *f = cg_fold_of(n->op);
  loom_dtype_t d = g->values[n->out[0]].type.dtype;
  const char *t = cg_local_type(d);
  bool fl = dtype_is_float(g->values[n->in[0]].type.dtype);
  int64_t cols = k->space.dim[k->space.rank - 1];
  char v[32];
  snprintf(v, sizeof v, "v%d", (int)n->in[0]);
  cols_unravel(b, k);
  cg_line(b, 2, "const int64_t cols = %lld - j0 < %lld ? %lld - j0 : %lld;\n",
          (long long)cols, (long long)k->block, (long long)cols, (long long)k->block);
  cg_line(b, 2, "%s", "");
  cg_fold_text(b, fl ? f->f_type : f->i_type, "", "", "", t);
  cg_printf(b, " acc[%lld];\n", (long long)k->block);
  cg_line(b, 2, "for (int64_t j = 0; j < cols; j++) acc[j] = ");
  cg_fold_text(b, fl ? f->f_init : f->i_init, "", "", "", t);
  cg_printf(b, ";\n");
  int in = cols_loops(b, k, 2, true);
  cg_line(b, in, "for (int64_t j = 0; j < cols; j++) {\n");
  cg_load_begin(b, in + 1, g, n->in[0]);
  cols_offset(b, k, 0);
  cg_load_end(b, g, n->in[0]);
  cg_line(b, in + 1, "%s", "");
  cg_fold_text(b, fl ? f->f_update : f->i_update, "acc[j]", v, "", t);
  cg_printf(b, ";\n");
  cg_line(b, in, "}\n");
  for (int q = in - 1; q >= 2; q--) cg_line(b, q, "}\n");
  const char *round = d == LOOM_F16 ? "loom_f16_round" : d == LOOM_BF16 ? "loom_bf16_round" : "";
  cg_line(b, 2, "for (int64_t j = 0; j < cols; j++) {\n");
  cg_line(b, 3, "const %s v%d = %s(", t, (int)n->out[0], round);
  char count[32];
  snprintf(count, sizeof count, "%lld.0", (long long)k->count);
  cg_fold_text(b, fl ? f->f_result : f->i_result, "acc[j]", "", count, t);
  cg_printf(b, ");\n");
  cg_store_begin(b, 3, n->out[0]);
  cols_offset(b, k, 1);
  cg_store_end(b, g, n->out[0]);
  cg_line(b, 2, "}\n");
}

/* emit_columns over a folded runtime leading dim: the body reads its
 * extent n0 from a context that the group function fills. */
static loom_status_t emit_columns_runtime(cg_ctx_t *c, int gi, const ir_node_t *n,
                                          const cols_t *k) {
  cg_buf_t *b = c->out;
  const fuse_group_t *grp = &c->plan->groups[gi];
  cg_printf(b, "typedef struct { void *const *slots; int64_t n0; } loom_g%d_ctx;\n\n", gi);
  cg_function(c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", gi);
  cg_line(b, 1, "void *const *slots = ((const loom_g%d_ctx *)ctx)->slots;\n", gi);
  cg_line(b, 1, "const int64_t n0 = ((const loom_g%d_ctx *)ctx)->n0;\n", gi);
  cg_declare_pointer(c, grp, 1, n->in[0], false);
  cg_declare_pointer(c, grp, 1, n->out[0], true);
  cg_line(b, 1, "for (int64_t t = begin; t < end; t++) {\n");
  cols_body(c, n, k);
  cg_line(b, 1, "}\n}\n\n");
  cg_group_function(c, gi);
  cg_line(b, 1, "loom_g%d_ctx x = {slots, ", gi);
  cg_lead_extent(b, c->g, &k->space);
  cg_printf(b, "};\n");
  cg_line(b, 1, "if (%lld > 1 && x.n0 * %lld > %d)\n", (long long)k->tasks,
          (long long)(k->count * k->space.dim[k->space.rank - 1]), CG_PARALLEL_MIN);
  cg_line(b, 2, "rt->parallel_for(rt->pool, %lld, 1, loom_g%d_body, &x);\n",
          (long long)k->tasks, gi);
  cg_line(b, 1, "else\n");
  cg_line(b, 2, "loom_g%d_body(&x, 0, %lld);\n", gi, (long long)k->tasks);
  cg_printf(b, "}\n");
  return LOOM_OK;
}

/* A group of one fold whose reduced axes leave the last dim. */
loom_status_t cg_emit_columns(cg_ctx_t *c, int gi, const ir_node_t *n, bool *ok) {
  cols_t k;
  *ok = cols_build(c, n, &k);
  if (!*ok) return LOOM_OK;
  cg_buf_t *b = c->out;
  const fuse_group_t *grp = &c->plan->groups[gi];
  char note[64];
  snprintf(note, sizeof note, "folding %lld per column", (long long)k.count);
  cg_group_comment(c, gi, "reduction", &k.space, note);
  if (k.space.lead) return emit_columns_runtime(c, gi, n, &k);
  cg_function(c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  cg_declare_pointer(c, grp, 1, n->in[0], false);
  cg_declare_pointer(c, grp, 1, n->out[0], true);
  cg_line(b, 1, "for (int64_t t = begin; t < end; t++) {\n");
  cols_body(c, n, &k);
  cg_line(b, 1, "}\n}\n\n");
  cg_group_function(c, gi);
  cg_line(b, 1, "(void)syms;\n");
  if (k.tasks > 1 && k.count * k.space.dim[k.space.rank - 1] > CG_PARALLEL_MIN) {
    cg_line(b, 1, "rt->parallel_for(rt->pool, %lld, 1, loom_g%d_body, (void *)slots);\n",
            (long long)k.tasks, gi);
  } else {
    cg_line(b, 1, "(void)rt;\n");
    cg_line(b, 1, "loom_g%d_body((void *)slots, 0, %lld);\n", gi, (long long)k.tasks);
  }
  cg_printf(b, "}\n");
  return LOOM_OK;
}

bool cg_keeps_last_dim(const cg_ctx_t *c, const ir_node_t *n) {
  const int64_t *axes;
  int rank = c->g->values[n->in[0]].type.rank;
  int na = ir_attr_ints(n->attrs, "axes", &axes);
  if (na < 0 || rank == 0) return false;
  for (int i = 0; i < na; i++)
    if (axes[i] == -1 || axes[i] == rank - 1) return false;
  return true;
}
