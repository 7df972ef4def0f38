/* The backward pass of training through traces: the walk over the tape
 * (tape.c) from the loss back, each segment record's backward graph
 * looked up or compiled under its key and run on its saved values, each
 * host callback's backward called, and the parameters' gradients
 * accumulated. Above the cut (segment.c), which materializes the loss. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/isa.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/interp.h"
#include "trace/trace_internal.h"

/* ---- Gradients ------------------------------------------------------------ */

/* a += b over n floats: an RNN's weight gradient is summed here once a
 * cell (64K floats for a 128 x 512 W_hh), so AVX2 is worth a second
 * copy (chosen by a CPU check: target_clones' ifunc resolver runs
 * before ThreadSanitizer's runtime and crashes it). */
__attribute__((target("avx2"))) static void add_f32_avx2(float *restrict a,
                                                          const float *restrict b,
                                                          int64_t n) {
  for (int64_t i = 0; i < n; i++) a[i] += b[i];
}

static void add_f32(float *restrict a, const float *restrict b, int64_t n) {
  if (core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2")) {
    add_f32_avx2(a, b, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) a[i] += b[i];
}

/* acc += g, elementwise. v names the value for messages. */
static loom_status_t add_to(loom_tensor_t *acc, const loom_tensor_t *g, int32_t v) {
  int64_t n = loom_tensor_numel(acc);
  loom_status_t s = LOOM_OK;
  if (loom_tensor_numel(g) != n || g->dtype != acc->dtype)
    s = loom_fail(LOOM_ERR_SHAPE, "trace backward: gradient of %%%d has %lld "
                  "elements, %lld expected", v, (long long)loom_tensor_numel(g),
                  (long long)n);
  else if (acc->dtype == LOOM_F32)
    add_f32((float *)acc->data, (const float *)g->data, n);
  else
    for (int64_t i = 0, es = (int64_t)loom_dtype_size(acc->dtype); i < n; i++) {
      char *a = (char *)acc->data + i * es;
      dtype_store_f64(acc->dtype, a, dtype_load_f64(acc->dtype, a) +
                      dtype_load_f64(g->dtype, (char *)g->data + i * es));
    }
  return s;
}

/* acc += g; g is consumed. */
static loom_status_t add_into(loom_tensor_t *acc, loom_tensor_t *g, int32_t v) {
  loom_status_t s = add_to(acc, g, v);
  loom_tensor_destroy(g);
  return s;
}

/* grads[v] += g (g is consumed). */
static loom_status_t accumulate(loom_trace_t *t, int32_t v, loom_tensor_t *g) {
  if (t->tape.grads[v]) return add_into(t->tape.grads[v], g, v);
  t->tape.grads[v] = g;
  return LOOM_OK;
}

/* Adds v's deferred parts (grad_defer.c) to grads[v]. */
static loom_status_t settle(loom_trace_t *t, int32_t v) {
  for (;;) {
    loom_tensor_t *g = NULL;
    LOOM_TRY(grad_defer_take(t, v, &g));
    if (!g) return LOOM_OK;
    LOOM_TRY(accumulate(t, v, g));
  }
}

/* kept[v] = g (consumed): a retained value's gradient, made once a walk;
 * none where v does not lead to the loss (g is zeros then). */
static loom_status_t keep_grad(loom_trace_t *t, int32_t v, loom_tensor_t *g) {
  if (!t->tape.reach[v]) {
    loom_tensor_destroy(g);
    return LOOM_OK;
  }
  loom_tensor_destroy(t->tape.kept[v]);
  t->tape.kept[v] = g;
  return LOOM_OK;
}

/* tape.reach for loss: the step's nodes walked backwards (they are in
 * topological order), host callbacks' outputs linked to their inputs by
 * their records, until nothing changes. Gradients flow through float
 * values and differentiable ops only (as PyTorch's graph: a parameter
 * read through an argmax or an integer cast alone is not reached). */
static loom_status_t mark_reaching(loom_trace_t *t, int32_t loss) {
  const loom_graph_t *g = t->g;
  uint8_t *reach = core_calloc((size_t)g->n_values + 1, 1);
  if (!reach) return loom_fail(LOOM_ERR_NOMEM, "out of memory for the backward's reach");
  reach[loss] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t i = g->n_nodes - 1; i >= 0; i--) {
      const ir_node_t *n = &g->nodes[i];
      if (ir_op_blocks_gradient(n->op)) continue;
      bool any = false;
      for (int k = 0; k < n->n_out; k++)
        any |= reach[n->out[k]] && dtype_is_float(g->values[n->out[k]].type.dtype);
      for (int k = 0; any && k < n->n_in; k++) reach[n->in[k]] = 1;
    }
    for (int64_t i = 0; i < t->tape.n; i++) {
      const tape_rec_t *r = &t->tape.recs[i];
      bool any = false;
      for (int k = 0; r->kind == TAPE_CALLBACK && k < r->n_out; k++) any |= reach[r->out[k]];
      for (int k = 0; any && k < r->n_in; k++) {
        changed |= !reach[r->in[k]];
        reach[r->in[k]] = 1;
      }
    }
  }
  t->tape.reach = reach;
  return LOOM_OK;
}

/* Before r's backward: the gradients of r's retained outputs that its
 * backward does not return (retained after the cut that made them, with
 * no reads inside that segment; or outputs of a host callback) are
 * whole already, all their reads being later records'. */
static loom_status_t keep_incoming(loom_trace_t *t, const tape_rec_t *r) {
  for (int k = 0; k < r->n_out; k++) {
    int32_t v = r->out[k];
    if (!t->vals[v].retain) continue;
    bool returned = false;
    for (int i = 0; r->kind == TAPE_SEGMENT && i < r->bwd->n_wrt; i++)
      returned |= r->bwd->wrt[i] == r->n_in + k;
    if (returned) continue;
    LOOM_TRY(settle(t, v));
    if (!t->tape.grads[v]) continue;
    loom_tensor_t *copy = NULL;
    LOOM_TRY(loom_tensor_copy(t->tape.grads[v], &copy));
    LOOM_TRY(keep_grad(t, v, copy));
  }
  return LOOM_OK;
}

/* grads[v], or a new zero tensor of v's type. */
static loom_status_t grad_or_zeros(loom_trace_t *t, int32_t v,
                                   loom_tensor_t **out, bool *made) {
  *made = false;
  LOOM_TRY(settle(t, v));
  *made = !t->tape.grads[v];
  if (!*made) {
    *out = t->tape.grads[v];
    return LOOM_OK;
  }
  const loom_tensor_t *x = t->vals[v].t;
  return tensor_new(x->dtype, x->rank, x->shape, out);
}

/* The value wrt entry i of r's backward is the gradient of: an input,
 * or past them an output whose gradient is retained (collect_wrt). */
static int32_t wrt_value(const tape_rec_t *r, int i) {
  int k = r->bwd->wrt[i];
  return k < r->n_in ? r->in[k] : r->out[k - r->n_in];
}

/* The backward of r: a ready cache entry (compiled under the forward's
 * key with another structure), else its eager entry (the graph, for the
 * fallback interpreter). */
static loom_status_t backward_entry(loom_trace_t *t, tape_rec_t *r, rt_entry_t **e) {
  rt_get_result_t res = RT_FAILED;
  *e = NULL;
  if (t->opt.compile && !r->eager_only) {
    *e = rt_cache_lookup(t->cache, &r->key);
    res = RT_READY;
    if (!*e) {
      r->bwd->refs++;
      rt_builder_t b = {seg_desc_build, (void (*)(void *))seg_desc_release, r->bwd};
      LOOM_TRY(rt_cache_get(t->cache, &r->key, &b, !t->opt.tiered,
                            t->opt.recompile_limit, &res, e));
    }
  }
  if (res == RT_READY && *e) return LOOM_OK;
  *e = NULL;
  t->stats.interpreted++;
  return seg_backward_eager(t, &r->key, r->bwd, e);
}

/* The shape of g's value v with r's symbol sizes (bucketed records). */
static loom_status_t bucket_shape(const tape_rec_t *r, const loom_graph_t *g,
                                  int32_t v, int64_t *shape) {
  int n = ir_num_symbols(g), have = r->bwd->n_syms + r->bwd->n_groups;
  int64_t syms[n + 1];
  for (int k = 0; k < n; k++) syms[k] = k < have ? r->sizes[k] : -1;
  const ir_type_t *ty = &g->values[v].type;
  for (int a = 0; a < ty->rank; a++) LOOM_TRY(ir_dim_eval(g, ty->dims[a], syms, &shape[a]));
  return LOOM_OK;
}

/* Replaces *x (owned) by its copy padded or sliced to shape, if it
 * differs. */
static loom_status_t reshape_copy(loom_tensor_t **x, const int64_t *shape,
                                  bool pad) {
  if (!memcmp((*x)->shape, shape, sizeof *shape * (size_t)(*x)->rank)) return LOOM_OK;
  loom_tensor_t *y = NULL;
  loom_status_t s = pad ? seg_pad_copy(*x, shape, &y)
                        : seg_slice_copy(*x, (*x)->rank, shape, &y);
  loom_tensor_destroy(*x);
  *x = y;
  return s;
}

/* The backward's inputs: the saved values, the outputs' gradients (zeros
 * where none came; padded to their buckets when bucketed), and the real
 * sizes of the bucket groups the backward masks. made[i]: ins[i] is
 * this call's. */
static loom_status_t backward_inputs(loom_trace_t *t, tape_rec_t *r,
                                     const loom_graph_t *bg, loom_tensor_t **ins,
                                     bool *made) {
  const seg_desc_t *d = r->bwd;
  for (int i = 0; i < r->n_saved; i++) ins[i] = r->saved[i];
  int j = r->n_saved;
  for (int k = 0; k < r->n_out; k++) {
    if (!dtype_is_float(t->g->values[r->out[k]].type.dtype)) continue;
    LOOM_TRY(grad_or_zeros(t, r->out[k], &ins[j], &made[j]));
    if (r->sizes) {
      int64_t shape[LOOM_MAX_RANK];
      LOOM_TRY(bucket_shape(r, bg, bg->inputs[j], shape));
      if (!made[j]) { /* the accumulator stays as it is */
        LOOM_TRY(seg_pad_copy(ins[j], shape, &ins[j]));
        made[j] = true;
      } else {
        LOOM_TRY(reshape_copy(&ins[j], shape, true));
      }
    }
    j++;
  }
  int groups[32];
  int n_groups = r->sizes ? seg_groups_present(d, bg, j, groups) : 0;
  if (j + n_groups != bg->n_inputs)
    return loom_fail(LOOM_ERR_GRAPH, "internal: trace backward: %lld inputs, "
                     "%d expected", (long long)bg->n_inputs, j + n_groups);
  for (int k = 0; k < n_groups; k++, j++) {
    const int64_t *real = &r->sizes[d->n_syms + d->n_groups + groups[k]];
    LOOM_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, real, sizeof *real, &ins[j]));
    made[j] = true;
  }
  return LOOM_OK;
}

/* bg's symbols (-1 where unbound), bound by the sizes of its inputs ins;
 * n: bg's symbol count. */
static void bind_symbols(const loom_graph_t *bg, loom_tensor_t *const *ins, int n,
                         int64_t *syms) {
  for (int k = 0; k < n; k++) syms[k] = -1;
  for (int j = 0; j < (int)bg->n_inputs; j++) {
    const ir_type_t *ty = &bg->values[bg->inputs[j]].type;
    for (int a = 0; a < ty->rank; a++) {
      if (!ir_dim_is_sym(ty->dims[a])) continue;
      const ir_expr_t *x = &bg->exprs[ty->dims[a] - IR_DIM_SYM_BASE];
      if (x->kind == IR_EXPR_SYM && x->c < n) syms[x->c] = ins[j]->shape[a];
    }
  }
}

/* The shape of bg's output i at symbol values syms. */
static loom_status_t output_shape(const loom_graph_t *bg, const int64_t *syms, int i,
                                  int64_t *shape) {
  const ir_type_t *ty = &bg->values[bg->outputs[i]].type;
  for (int a = 0; a < ty->rank; a++) LOOM_TRY(ir_dim_eval(bg, ty->dims[a], syms, &shape[a]));
  return LOOM_OK;
}

/* The output tensors of a compiled backward: the wrt inputs' gradients
 * (at their buckets when bucketed) and, where deferred, views of the
 * rows their products' operands take in the value's stacks. */
static loom_status_t compiled_outputs(loom_trace_t *t, tape_rec_t *r, loom_graph_t *bg,
                                      loom_tensor_t **ins, loom_tensor_t **outs) {
  const seg_desc_t *d = r->bwd;
  int n_syms = d->defer ? ir_num_symbols(bg) : 0;
  int64_t syms[n_syms + 1];
  if (d->defer) bind_symbols(bg, ins, n_syms, syms);
  for (int i = 0, extra = d->n_wrt; i < d->n_wrt; i++) {
    const loom_tensor_t *x = t->vals[wrt_value(r, i)].t;
    int64_t shape[LOOM_MAX_RANK], b_shape[LOOM_MAX_RANK];
    if (seg_deferred(d->defer, i)) {
      LOOM_TRY(output_shape(bg, syms, i, shape));
      LOOM_TRY(output_shape(bg, syms, extra, b_shape));
      LOOM_TRY(grad_defer_reserve(t, wrt_value(r, i), x->dtype, shape[0], shape[1],
                                  b_shape[1], &outs[i], &outs[extra++]));
      continue;
    }
    memcpy(shape, x->shape, sizeof *shape * (size_t)x->rank);
    if (r->sizes) LOOM_TRY(bucket_shape(r, bg, bg->outputs[i], shape));
    /* the run writes every element */
    LOOM_TRY(tensor_new_uninit(x->dtype, x->rank, shape, &outs[i]));
  }
  return LOOM_OK;
}

/* Runs the backward into outs (the wrt inputs' gradients, sliced back
 * to their real shapes when bucketed, or where deferred the operands of
 * their products, the first in the gradient's place and the second after
 * the gradients). */
static loom_status_t run_backward(loom_trace_t *t, tape_rec_t *r, rt_entry_t *e,
                                  loom_graph_t *bg, loom_tensor_t **ins,
                                  loom_tensor_t **outs) {
  const seg_desc_t *d = r->bwd;
  int n_in = (int)bg->n_inputs, n_out = (int)bg->n_outputs;
  loom_status_t s = LOOM_OK;
  if (!rt_entry_executable(e)) {
    s = rt_interpret(bg, n_in, ins, n_out, outs, be_find(NULL), tr_fallback_pool(t));
  } else {
    s = compiled_outputs(t, r, bg, ins, outs);
    if (s == LOOM_OK) s = seg_entry_run(t, e, n_in, ins, n_out, outs, false);
  }
  for (int i = 0; i < d->n_wrt && s == LOOM_OK && r->sizes; i++)
    s = reshape_copy(&outs[i], t->vals[wrt_value(r, i)].t->shape, false);
  return s;
}

/* Takes outs, the backward's (run_backward), into the gradients: each
 * wrt input's added to its accumulator, or its deferred part counted in
 * (compiled: the rows the run wrote, given back if it failed) or copied
 * into the value's stacks (interpreted); a retained output's kept. */
static loom_status_t take_outputs(loom_trace_t *t, const tape_rec_t *r, bool compiled,
                                  loom_tensor_t **outs, loom_status_t s) {
  const seg_desc_t *d = r->bwd;
  for (int i = 0, extra = d->n_wrt; i < d->n_wrt; i++) {
    int32_t v = wrt_value(r, i);
    bool deferred = seg_deferred(d->defer, i);
    loom_tensor_t *b = deferred ? outs[extra++] : NULL;
    bool due = false;
    if (d->wrt[i] >= r->n_in) { /* a retained output's whole gradient */
      if (s == LOOM_OK) s = keep_grad(t, v, outs[i]);
      else loom_tensor_destroy(outs[i]);
      continue;
    }
    if (deferred && compiled) { /* views of reserved rows, if reserving got that far */
      /* a failed run gives its rows back; a reservation never made has
       * nothing to give (and must not replace the run's error) */
      loom_status_t c = b ? grad_defer_commit(t, v, s == LOOM_OK, &due) : LOOM_OK;
      if (s == LOOM_OK) s = c;
      loom_tensor_destroy(outs[i]);
      loom_tensor_destroy(b);
    } else if (s != LOOM_OK) {
      loom_tensor_destroy(outs[i]);
      loom_tensor_destroy(b);
    } else if (b) {
      s = grad_defer_push(t, v, outs[i], b, &due);
    } else {
      s = accumulate(t, v, outs[i]);
    }
    if (s == LOOM_OK && due && !grad_defer_submit(t, v)) s = settle(t, v);
  }
  return s;
}

/* Whether record i saved a view of a parameter that the optimizer step
 * has changed since (segment_run.c keeps a forward's saved inputs as
 * views of their storage). */
static bool saved_param_changed(const loom_trace_t *t, int64_t i) {
  const tape_rec_t *r = &t->tape.recs[i];
  for (int k = 0; i < t->tape.stale && k < r->n_saved; k++)
    for (int64_t p = 0; p < t->n_params && !r->saved[k]->owns_data; p++)
      if (r->saved[k]->data == t->params[p].t->data) return true;
  return false;
}

static loom_status_t backward_segment(loom_trace_t *t, int64_t i) {
  tape_rec_t *r = &t->tape.recs[i];
  if (saved_param_changed(t, i))
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_backward: a segment of this step "
                     "read parameters that the optimizer step (loom_trace_optimizer_step) "
                     "has updated since; call backward before the optimizer step");
  rt_entry_t *e = NULL;
  LOOM_TRY(backward_entry(t, r, &e));
  loom_graph_t *bg = rt_entry_graph(e);
  int n_in = (int)bg->n_inputs, n_out = (int)bg->n_outputs;
  loom_tensor_t *ins[n_in + 1], *outs[n_out + 1];
  bool made[n_in + 1];
  memset(ins, 0, sizeof ins);
  memset(made, 0, sizeof made);
  memset(outs, 0, sizeof outs);
  loom_status_t s = backward_inputs(t, r, bg, ins, made);
  if (s == LOOM_OK) s = run_backward(t, r, e, bg, ins, outs);
  for (int i = 0; i < n_in; i++)
    if (made[i]) loom_tensor_destroy(ins[i]);
  bool compiled = rt_entry_executable(e) != NULL;
  rt_entry_release(t->cache, e);
  return take_outputs(t, r, compiled, outs, s);
}

static loom_status_t backward_callback(loom_trace_t *t, tape_rec_t *r) {
  int n = r->n_in + r->n_out;
  const loom_tensor_t *ins[n + 1];
  loom_tensor_t *grads[r->n_in + 1], *made[r->n_out + 1];
  memset(grads, 0, sizeof grads);
  memset(made, 0, sizeof made);
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < r->n_in; i++) ins[i] = t->vals[r->in[i]].t;
  for (int k = 0; k < r->n_out && s == LOOM_OK; k++) {
    bool fresh;
    loom_tensor_t *g = NULL;
    s = grad_or_zeros(t, r->out[k], &g, &fresh);
    ins[r->n_in + k] = g;
    if (fresh) made[k] = g;
  }
  for (int i = 0; i < r->n_in && s == LOOM_OK; i++) {
    const loom_tensor_t *x = ins[i];
    s = tensor_new(x->dtype, x->rank, x->shape, &grads[i]);
  }
  if (s == LOOM_OK) {
    loom_clear_error();
    s = r->op.backward(r->op.user, n, ins, r->n_in, grads);
    if (s != LOOM_OK) {
      char said[256]; /* the callback's own message, if it set one */
      snprintf(said, sizeof said, "%s", loom_last_error());
      loom_fail(s, "backward of host callback '%s' failed (%s)%s%s", r->op.name,
                loom_status_name(s), said[0] ? ": " : "", said);
    }
  }
  for (int k = 0; k < r->n_out; k++) loom_tensor_destroy(made[k]);
  for (int i = 0; i < r->n_in; i++) {
    if (s == LOOM_OK && t->vals[r->in[i]].grad) s = accumulate(t, r->in[i], grads[i]);
    else loom_tensor_destroy(grads[i]);
  }
  return s;
}

/* Hands the parameters' gradients of this walk to their accumulators
 * (a parameter's part kept apart when its accumulator held one already),
 * and frees the others. */
static loom_status_t collect_grads(loom_trace_t *t) {
  loom_status_t s = LOOM_OK;
  for (int64_t i = 0; i < t->n_params && s == LOOM_OK; i++)
    if (t->params[i].value >= 0) s = settle(t, t->params[i].value);
  grad_defer_clear(t);
  for (int64_t i = 0; i < t->n_params; i++) {
    tr_param_t *q = &t->params[i];
    int32_t v = q->value;
    loom_tensor_destroy(q->last);
    q->last = NULL;
    q->last_reached = false;
    /* A segment's backward gives every input of it a gradient, zeros
     * where the loss does not depend on it: that is no gradient. One
     * reached through roundings alone (floor, sign) has zeros. */
    if (v < 0 || !t->tape.reach[v]) continue;
    loom_tensor_t *g = t->tape.grads[v];
    t->tape.grads[v] = NULL;
    if (!g && s == LOOM_OK) s = tensor_new(q->t->dtype, q->t->rank, q->t->shape, &g);
    if (!g) continue;
    q->got_grad = q->last_reached = true;
    if (!q->grad) {
      q->grad = g;
      continue;
    }
    if (s == LOOM_OK) s = add_to(q->grad, g, v);
    q->last = g;
  }
  for (int64_t v = 0; v < t->tape.cap_grads; v++) {
    loom_tensor_destroy(t->tape.grads[v]);
    t->tape.grads[v] = NULL;
  }
  return s;
}

loom_status_t loom_trace_backward(loom_trace_t *t, loom_value_t loss) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  if (!ir_value_valid(t->g, loss.id))
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_backward: %%%d is not a "
                     "value of this step", loss.id);
  const ir_type_t *ty = &t->g->values[loss.id].type;
  if (ty->rank != 0 || !dtype_is_float(ty->dtype))
    return loom_fail(LOOM_ERR_SHAPE, "loom_trace_backward: the loss must be a "
                     "float scalar (rank 0), not rank %d %s", ty->rank,
                     loom_dtype_name(ty->dtype));
  static const tr_reason_t why = {"loom_trace_backward of %%%lld", NULL, 0};
  tr_reason_t r = why;
  r.num = loss.id;
  if (!tr_tensor(t, loss.id)) LOOM_TRY(seg_cut(t, 1, &loss.id, &r));
  if (t->g->n_values > t->tape.cap_grads) {
    int64_t old = t->tape.cap_grads;
    LOOM_TRY(core_grow((void **)&t->tape.grads, &t->tape.cap_grads, t->g->n_values,
                       sizeof *t->tape.grads));
    memset(t->tape.grads + old, 0, sizeof *t->tape.grads * (size_t)(t->tape.cap_grads - old));
  }
  if (t->g->n_values > t->tape.cap_kept) {
    int64_t old = t->tape.cap_kept;
    LOOM_TRY(core_grow((void **)&t->tape.kept, &t->tape.cap_kept, t->g->n_values,
                       sizeof *t->tape.kept));
    memset(t->tape.kept + old, 0, sizeof *t->tape.kept * (size_t)(t->tape.cap_kept - old));
  }
  tape_clear_kept(t); /* each walk's own */
  LOOM_TRY(mark_reaching(t, loss.id));
  loom_tensor_t *seed;
  loom_status_t s = tensor_new(ty->dtype, 0, NULL, &seed);
  if (s != LOOM_OK) {
    core_free(t->tape.reach);
    t->tape.reach = NULL;
    return s;
  }
  dtype_store_f64(ty->dtype, seed->data, 1.0);
  t->tape.grads[loss.id] = seed;
  for (int64_t i = t->tape.n - 1; i >= 0 && s == LOOM_OK; i--) {
    tape_rec_t *r = &t->tape.recs[i];
    bool reached = false; /* skip records no gradient reaches */
    for (int k = 0; k < r->n_out; k++)
      reached |= t->tape.grads[r->out[k]] != NULL || grad_defer_pending(t, r->out[k]);
    if (!reached) continue;
    if (t->retains) s = keep_incoming(t, r);
    if (s == LOOM_OK)
      s = r->kind == TAPE_SEGMENT ? backward_segment(t, i) : backward_callback(t, r);
  }
  loom_status_t c = collect_grads(t);
  if (s == LOOM_OK) s = c;
  core_free(t->tape.reach);
  t->tape.reach = NULL;
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

loom_status_t loom_trace_grad(loom_trace_t *t, const loom_tensor_t *p,
                              const loom_tensor_t **out) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  LOOM_CHECK_ARG(p);
  LOOM_CHECK_ARG(out);
  tr_param_t *q = NULL;
  LOOM_TRY(tr_find_param(t, p, __func__, &q));
  if (!q->grad) LOOM_TRY(tensor_new(p->dtype, p->rank, p->shape, &q->grad));
  *out = q->grad;
  return LOOM_OK;
}

loom_status_t loom_trace_grad_last(loom_trace_t *t, const loom_tensor_t *p,
                                   const loom_tensor_t **out) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  LOOM_CHECK_ARG(p);
  LOOM_CHECK_ARG(out);
  tr_param_t *q = NULL;
  LOOM_TRY(tr_find_param(t, p, __func__, &q));
  if (!q->last_reached) {
    *out = NULL;
    return LOOM_OK;
  }
  *out = q->last ? q->last : q->grad; /* without a part before: all there is */
  return LOOM_OK;
}

/* Whether v is one of this step's parameters. */
static bool is_param(const loom_trace_t *t, int32_t v) {
  for (int64_t i = 0; i < t->n_params; i++)
    if (t->params[i].value == v) return true;
  return false;
}

loom_status_t loom_trace_retain_grad(loom_trace_t *t, loom_value_t v) {
  LOOM_CHECK_ARG(t);
  LOOM_TRY(tr_claim(t, __func__));
  if (!ir_value_valid(t->g, v.id))
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_retain_grad: %%%d is not a value "
                     "of this step", v.id);
  if (is_param(t, v.id)) return LOOM_OK;
  tr_value_t *x = &t->vals[v.id];
  if (!x->grad)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_retain_grad: no gradient flows to "
                     "%%%d (it depends on no parameter, or is not a float value)", v.id);
  if (x->retain) return LOOM_OK;
  int32_t node = t->g->values[v.id].node;
  bool ran = node >= 0 && t->node_ran[node] != 0;
  if ((x->t && x->made_uses > 0) || (!x->t && ran))
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_retain_grad: %%%d was read inside the "
                     "segment that computed it, before it was retained (the segment's "
                     "backward does not return its gradient); retain it before reading it",
                     v.id);
  x->retain = true;
  t->retains++;
  return LOOM_OK;
}

loom_status_t loom_trace_retained_grad(loom_trace_t *t, loom_value_t v,
                                       const loom_tensor_t **out) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(out);
  LOOM_TRY(tr_claim(t, __func__));
  *out = NULL;
  if (!ir_value_valid(t->g, v.id) || !t->vals[v.id].retain)
    return loom_fail(LOOM_ERR_INVALID, "loom_trace_retained_grad: %%%d is not a retained "
                     "value of this step (loom_trace_retain_grad)", v.id);
  if (v.id < t->tape.cap_kept) *out = t->tape.kept[v.id];
  return LOOM_OK;
}
