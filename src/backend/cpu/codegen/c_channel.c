/* Per-channel groups over (N, C, ...) tensors: reductions over every dim
 * but the channel (batch norm's statistics and gradients, a conv bias's
 * gradient) and batch normalization itself. Both split the channels over
 * the pool. */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

/* ---- Per-channel reductions --------------------------------------------------
 * A sum or mean over every dim of (N, C, ...) but the channel (batch
 * norm's statistics and gradients, a conv bias's gradient), with the
 * elementwise nodes that produce its input over the full space (dy *
 * xhat) folded in as a prologue. Channels are split over the pool; each
 * sums its (N, ...) elements in double, in the reference kernel's order
 * of magnitude of error, and stores every full-space value the group
 * exports on the way. */

typedef struct channel_emit {
  cg_ctx_t *c;
  int gi;
  const fuse_group_t *grp;
  const ir_node_t *anchor;
  cg_shape_t space;                /* the reduction's input: (N, C, ...) */
  int64_t (*stride)[LOOM_MAX_RANK]; /* per group input, into space */
} channel_emit_t;

/* Whether the anchor reduces exactly dims 0, 2, 3, ... of a rank >= 3
 * input (the reduction rule of support.c admits only these). */
static bool is_channel_reduction(const loom_graph_t *g, const ir_node_t *n) {
  if (n->op != IR_OP_SUM && n->op != IR_OP_MEAN) return false;
  int rank = g->values[n->in[0]].type.rank;
  const int64_t *axes;
  int na = ir_attr_ints(n->attrs, "axes", &axes);
  if (rank < 3 || na != rank - 1) return false;
  bool red[LOOM_MAX_RANK] = {false};
  for (int i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank) return false;
    red[a] = true;
  }
  for (int d = 0; d < rank; d++)
    if (red[d] != (d != 1)) return false;
  return true;
}

bool cg_is_channel_reduction(const loom_graph_t *g, const ir_node_t *n) {
  return is_channel_reduction(g, n);
}

/* The anchor last; the other nodes f32 expressions over the full space;
 * the outputs that space or the anchor's. */
static bool channel_fits(channel_emit_t *k) {
  const loom_graph_t *g = k->c->g;
  int last = k->grp->n_nodes - 1;
  if (k->grp->nodes[last] != k->grp->anchor) return false;
  for (int i = 0; i < k->grp->n_nodes; i++) {
    const ir_node_t *n = &g->nodes[k->grp->nodes[i]];
    for (int j = 0; j < n->n_in; j++)
      if (g->values[n->in[j]].type.dtype != LOOM_F32) return false;
    if (g->values[n->out[0]].type.dtype != LOOM_F32 || n->n_out != 1) return false;
    if (i == last) continue;
    cg_shape_t s;
    if (!cg_expr_supported(g, n) || !cg_value_shape(k->c, n->out[0], &s) ||
        cg_numel(&s) != cg_numel(&k->space) || s.rank != k->space.rank)
      return false;
  }
  for (int i = 0; i < k->grp->n_outputs; i++)
    if (cg_slot(k->c, k->grp->outputs[i]) < 0) return false;
  for (int i = 0; i < k->grp->n_inputs; i++) {
    cg_shape_t s;
    if (cg_slot(k->c, k->grp->inputs[i]) < 0 || !cg_value_shape(k->c, k->grp->inputs[i], &s) ||
        !cg_broadcast_strides(&s, &k->space, k->stride[i]))
      return false;
  }
  return true;
}

/* Lanes of the per-channel sum over the merged inner dims: a single double
 * accumulator is a serial chain of adds (ResNet-18's 8x64x32x32 sums ran
 * at 6 GB/s), independent lanes become vector code. */
enum { CHANNEL_LANES = 16 };

/* The body's loops: over dim 0, then over the inner dims, merged into one
 * (dim 2 of a rank-3 view) when every access walks them as one, and then
 * folded in CHANNEL_LANES lanes. stride: per input, then the outputs'
 * dense layout, over that view. */
typedef struct channel_view {
  cg_shape_t space;
  int64_t (*stride)[LOOM_MAX_RANK];
  bool lanes;
} channel_view_t;

static void channel_element(channel_emit_t *k, const channel_view_t *v, int level,
                            const char *acc) {
  cg_buf_t *b = k->c->out;
  const loom_graph_t *g = k->c->g;
  int rank = v->space.rank, n_in = k->grp->n_inputs;
  int32_t in = k->anchor->in[0], out = k->anchor->out[0];
  for (int i = 0; i < n_in; i++) {
    cg_load_begin(b, level, g, k->grp->inputs[i]);
    cg_offset(b, "i", 0, rank, v->stride[i]);
    cg_load_end(b, g, k->grp->inputs[i]);
  }
  for (int i = 0; i + 1 < k->grp->n_nodes; i++)
    cg_node_stmt(b, level, g, &g->nodes[k->grp->nodes[i]]);
  for (int i = 0; i < k->grp->n_outputs; i++) {
    int32_t o = k->grp->outputs[i];
    if (o == out) continue;
    cg_store_begin(b, level, o);
    cg_offset(b, "i", 0, rank, v->stride[n_in]);
    cg_store_end(b, g, o);
  }
  cg_line(b, level, "%s += (double)v%d;\n", acc, (int)in);
}

static void channel_body(channel_emit_t *k, const channel_view_t *v) {
  cg_buf_t *b = k->c->out;
  int rank = v->space.rank;
  int32_t out = k->anchor->out[0];
  cg_function(k->c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", k->gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  for (int i = 0; i < k->grp->n_inputs; i++)
    cg_declare_pointer(k->c, k->grp, 1, k->grp->inputs[i], false);
  for (int i = 0; i < k->grp->n_outputs; i++)
    cg_declare_pointer(k->c, k->grp, 1, k->grp->outputs[i], true);
  cg_line(b, 1, "for (int64_t i1 = begin; i1 < end; i1++) {\n");
  cg_line(b, 2, "double acc = 0.0;\n");
  if (v->lanes) cg_line(b, 2, "double acc_l[%d] = {0};\n", CHANNEL_LANES);
  int level = 2, last = v->lanes ? rank - 1 : rank;
  for (int d = 0; d < last; d++) {
    if (d == 1) continue;
    cg_line(b, level++, "for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", d, d,
            (long long)v->space.dim[d], d);
  }
  if (v->lanes) {
    int d = rank - 1;
    int64_t n = v->space.dim[d], blocks = n / CHANNEL_LANES * CHANNEL_LANES;
    char index[16], block[16], blocks_text[24];
    snprintf(index, sizeof index, "i%d", d);
    snprintf(block, sizeof block, "b%d", d);
    snprintf(blocks_text, sizeof blocks_text, "%lld", (long long)blocks);
    cg_open_lanes(b, level, index, block, blocks_text, CHANNEL_LANES);
    channel_element(k, v, level + 2, "acc_l[l]");
    cg_close_lanes(b, level);
    if (blocks < n) {
      cg_line(b, level, "for (int64_t i%d = %lld; i%d < %lld; i%d++) {\n", d, (long long)blocks,
              d, (long long)n, d);
      channel_element(k, v, level + 1, "acc");
      cg_line(b, level, "}\n");
    }
  } else {
    channel_element(k, v, level, "acc");
  }
  while (--level > 2) cg_line(b, level, "}\n");
  cg_line(b, 2, "}\n");
  if (v->lanes) cg_line(b, 2, "for (int l = 0; l < %d; l++) acc += acc_l[l];\n", CHANNEL_LANES);
  double count = (double)(cg_numel(&k->space) / k->space.dim[1]);
  if (k->anchor->op == IR_OP_MEAN) cg_line(b, 2, "acc /= %.17g;\n", count);
  cg_line(b, 2, "p%d[i1] = (float)acc;\n", (int)out);
  cg_line(b, 1, "}\n");
  cg_printf(b, "}\n\n");
}

/* The space as it is: the inputs' strides and the outputs' dense ones. */
static void plain_view(const channel_emit_t *k, channel_view_t *v) {
  int n = k->grp->n_inputs + 1;
  v->space = k->space;
  v->lanes = false;
  for (int i = 0; i + 1 < n; i++) memcpy(v->stride[i], k->stride[i], sizeof v->stride[i]);
  int64_t step = 1;
  for (int d = k->space.rank - 1; d >= 0; d--) {
    v->stride[n - 1][d] = step;
    step *= k->space.dim[d];
  }
}

/* The view of the space the body loops over (see channel_view_t). */
static loom_status_t channel_view(const channel_emit_t *k, channel_view_t *v) {
  int n = k->grp->n_inputs + 1;
  v->stride = core_calloc((size_t)n, sizeof *v->stride);
  if (!v->stride) return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  plain_view(k, v);
  if (cg_collapse(&v->space, 2, k->space.rank, n, v->stride) == 3) {
    v->space.rank = 3;
    v->lanes = v->space.dim[2] >= CHANNEL_LANES;
  } else {
    plain_view(k, v);
  }
  return LOOM_OK;
}

static void channel_entry(channel_emit_t *k) {
  cg_buf_t *b = k->c->out;
  int64_t channels = k->space.dim[1], per = cg_numel(&k->space) / (channels ? channels : 1);
  cg_group_function(k->c, k->gi);
  cg_line(b, 1, "(void)syms;\n");
  if (channels * per > CG_PARALLEL_MIN && channels > 1) {
    int64_t grain = CG_PARALLEL_MIN / 2 / (per ? per : 1);
    cg_line(b, 1, "rt->parallel_for(rt->pool, %lld, %lld, loom_g%d_body, (void *)slots);\n",
            (long long)channels, (long long)(grain > 1 ? grain : 1), k->gi);
  } else {
    cg_line(b, 1, "(void)rt;\n");
    cg_line(b, 1, "loom_g%d_body((void *)slots, 0, %lld);\n", k->gi, (long long)channels);
  }
  cg_printf(b, "}\n");
}

loom_status_t cg_emit_channel_reduction(cg_ctx_t *c, int gi, bool *ok) {
  channel_emit_t k = {.c = c, .gi = gi, .grp = &c->plan->groups[gi]};
  *ok = k.grp->anchor >= 0;
  if (!*ok) return LOOM_OK;
  k.anchor = &c->g->nodes[k.grp->anchor];
  /* Sizes known only at run time (cg_shape_t.lead) stay with the reference. */
  *ok = is_channel_reduction(c->g, k.anchor) && cg_value_shape(c, k.anchor->in[0], &k.space) &&
        !k.space.lead;
  if (!*ok) return LOOM_OK;
  k.stride = core_calloc((size_t)k.grp->n_inputs + 1, sizeof *k.stride);
  if (!k.stride) return loom_fail(LOOM_ERR_NOMEM, "out of memory generating code");
  *ok = channel_fits(&k);
  if (*ok) {
    channel_view_t v;
    loom_status_t st = channel_view(&k, &v);
    if (st != LOOM_OK) {
      core_free(k.stride);
      return st;
    }
    cg_group_comment(c, gi, "channel reduction", &k.space, "over all dims but 1");
    channel_body(&k, &v);
    channel_entry(&k);
    core_free(v.stride);
  }
  core_free(k.stride);
  return LOOM_OK;
}

/* ---- Batch normalization -------------------------------------------------------
 * One batch_norm node, f32, as the reference kernel computes it: per
 * channel (split over the pool), in training mode the batch mean and the
 * biased variance in two passes in double, the running statistics moved
 * by the momentum (the variance unbiased), then y = (x - mean) * scale /
 * sqrt(var + eps) + bias. A training batch with fewer than 2 values per
 * channel stays with the reference kernel, which reports it. */

typedef struct bn_emit {
  cg_ctx_t *c;
  int gi;
  const ir_node_t *n;
  int64_t batch, channels, inner;
  bool training;
} bn_emit_t;

static bool bn_fits(bn_emit_t *k) {
  const loom_graph_t *g = k->c->g;
  cg_shape_t x;
  if (k->c->plan->groups[k->gi].n_nodes != 1 || k->n->n_in != 5 || k->n->n_out != 3 ||
      !cg_value_shape(k->c, k->n->in[0], &x) || x.rank < 2 || x.lead)
    return false;
  for (int i = 0; i < 5; i++)
    if (g->values[k->n->in[i]].type.dtype != LOOM_F32 || cg_slot(k->c, k->n->in[i]) < 0)
      return false;
  k->batch = x.dim[0];
  k->channels = x.dim[1];
  k->inner = cg_numel(&x) / (x.dim[0] * x.dim[1] > 0 ? x.dim[0] * x.dim[1] : 1);
  k->training = ir_attr_int(k->n->attrs, "training", 0) != 0;
  return !k->training || k->batch * k->inner >= 2;
}

/* acc += term over every (n, i) of channel ch (xr: its row of image n),
 * in CHANNEL_LANES lanes where the rows are long enough (see the
 * per-channel reductions above). */
static void bn_fold(bn_emit_t *k, const char *acc, const char *term) {
  cg_buf_t *b = k->c->out;
  int64_t blocks = k->inner >= CHANNEL_LANES ? k->inner / CHANNEL_LANES * CHANNEL_LANES : 0;
  if (blocks) cg_line(b, 2, "double %s_l[%d] = {0};\n", acc, CHANNEL_LANES);
  cg_line(b, 2, "for (int64_t n = 0; n < %lld; n++) {\n", (long long)k->batch);
  cg_line(b, 3, "const float *xr = p%d + (n * %lld + ch) * %lld;\n", (int)k->n->in[0],
          (long long)k->channels, (long long)k->inner);
  if (blocks) {
    char blocks_text[24];
    snprintf(blocks_text, sizeof blocks_text, "%lld", (long long)blocks);
    cg_open_lanes(b, 3, "i", "b0", blocks_text, CHANNEL_LANES);
    cg_line(b, 5, "%s_l[l] += %s;\n", acc, term);
    cg_close_lanes(b, 3);
  }
  if (blocks < k->inner)
    cg_line(b, 3, "for (int64_t i = %lld; i < %lld; i++) %s += %s;\n", (long long)blocks,
            (long long)k->inner, acc, term);
  cg_line(b, 2, "}\n");
  if (blocks) cg_line(b, 2, "for (int l = 0; l < %d; l++) %s += %s_l[l];\n", CHANNEL_LANES, acc, acc);
}

/* "p<v>[at] = <expr>;" for an output that has storage. */
static void bn_store(bn_emit_t *k, int level, int out, const char *at, const char *expr) {
  int32_t v = k->n->out[out];
  if (cg_slot(k->c, v) >= 0) cg_line(k->c->out, level, "p%d[%s] = (float)(%s);\n", (int)v, at, expr);
}

static void bn_body(bn_emit_t *k) {
  cg_buf_t *b = k->c->out;
  const fuse_group_t *grp = &k->c->plan->groups[k->gi];
  const int32_t *in = k->n->in;
  double eps = ir_op_float(k->n->op, k->n->attrs, "eps");
  double m = ir_op_float(k->n->op, k->n->attrs, "momentum");
  double count = (double)(k->batch * k->inner);
  cg_function(k->c, "static void loom_g%d_body(void *ctx, int64_t begin, int64_t end) {\n", k->gi);
  cg_line(b, 1, "void *const *slots = (void *const *)ctx;\n");
  for (int i = 0; i < 5; i++) cg_declare_pointer(k->c, grp, 1, in[i], false);
  for (int i = 0; i < 3; i++)
    if (cg_slot(k->c, k->n->out[i]) >= 0) cg_declare_pointer(k->c, grp, 1, k->n->out[i], true);
  cg_line(b, 1, "for (int64_t ch = begin; ch < end; ch++) {\n");
  cg_line(b, 2, "double mean = p%d[ch], var = p%d[ch];\n", (int)in[3], (int)in[4]);
  if (k->training) {
    cg_line(b, 2, "double sum = 0.0, sq = 0.0;\n");
    for (int pass = 0; pass < 2; pass++) {
      bn_fold(k, pass == 0 ? "sum" : "sq",
              pass == 0 ? "(double)xr[i]" : "((double)xr[i] - mean) * ((double)xr[i] - mean)");
      if (pass == 0) cg_line(b, 2, "mean = sum / %.17g;\n", count);
    }
    cg_line(b, 2, "var = sq / %.17g;\n", count);
    char moved[160];
    snprintf(moved, sizeof moved, "%.17g * p%d[ch] + %.17g * mean", 1 - m, (int)in[3], m);
    bn_store(k, 2, 1, "ch", moved);
    snprintf(moved, sizeof moved, "%.17g * p%d[ch] + %.17g * var", 1 - m, (int)in[4],
             m * count / (count - 1));
    bn_store(k, 2, 2, "ch", moved);
  } else {
    bn_store(k, 2, 1, "ch", "mean");
    bn_store(k, 2, 2, "ch", "var");
  }
  cg_line(b, 2, "const double k = p%d[ch] / sqrt(var + %.17g), b = p%d[ch];\n", (int)in[1],
          eps, (int)in[2]);
  if (cg_slot(k->c, k->n->out[0]) >= 0) {
    cg_line(b, 2, "for (int64_t n = 0; n < %lld; n++) {\n", (long long)k->batch);
    cg_line(b, 3, "const int64_t at = (n * %lld + ch) * %lld;\n", (long long)k->channels,
            (long long)k->inner);
    cg_line(b, 3, "for (int64_t i = 0; i < %lld; i++)\n", (long long)k->inner);
    cg_line(b, 4, "p%d[at + i] = (float)(((double)p%d[at + i] - mean) * k + b);\n",
            (int)k->n->out[0], (int)in[0]);
    cg_line(b, 2, "}\n");
  } else {
    cg_line(b, 2, "(void)k, (void)b;\n");
  }
  cg_line(b, 1, "}\n");
  cg_printf(b, "}\n\n");
}

loom_status_t cg_emit_batch_norm(cg_ctx_t *c, int gi, bool *ok) {
  int32_t anchor = c->plan->groups[gi].anchor;
  bn_emit_t k = {.c = c, .gi = gi};
  *ok = anchor >= 0 && c->g->nodes[anchor].op == IR_OP_BATCH_NORM;
  if (!*ok) return LOOM_OK;
  k.n = &c->g->nodes[anchor];
  *ok = bn_fits(&k);
  if (!*ok) return LOOM_OK;
  cg_shape_t x;
  cg_value_shape(c, k.n->in[0], &x);
  cg_group_comment(c, gi, "batch norm", &x, k.training ? "training" : "inference");
  bn_body(&k);
  cg_group_function(c, gi);
  cg_line(c->out, 1, "(void)syms;\n");
  if (k.batch * k.channels * k.inner > CG_PARALLEL_MIN && k.channels > 1)
    cg_line(c->out, 1, "rt->parallel_for(rt->pool, %lld, 1, loom_g%d_body, (void *)slots);\n",
            (long long)k.channels, gi);
  else
    cg_line(c->out, 1, "(void)rt;\n  loom_g%d_body((void *)slots, 0, %lld);\n", gi,
            (long long)k.channels);
  cg_printf(c->out, "}\n");
  return LOOM_OK;
}
