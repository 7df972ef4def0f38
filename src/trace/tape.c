/* The tape of a training step: a record per differentiable piece that
 * ran (a compiled segment with its backward's description and key and
 * the values its backward needs, kept per invocation, or a host
 * callback), pushed by the run (segment_run.c) and by loom_trace_call,
 * walked by the backward pass (backward.c), cleared at the step's end.
 * It calls no other file of the tracer but segment_graph.c (to release
 * descriptions). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "trace/trace_internal.h"

/* ---- Records ------------------------------------------------------------- */

static loom_status_t new_record(loom_trace_t *t, tape_kind_t kind, int n_in,
                                const int32_t *in, int n_out,
                                const int32_t *out, tape_rec_t **rec) {
  LOOM_TRY(core_grow((void **)&t->tape.recs, &t->tape.cap, t->tape.n + 1,
                     sizeof *t->tape.recs));
  tape_rec_t *r = &t->tape.recs[t->tape.n];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->n_in = n_in;
  r->n_out = n_out;
  r->in = core_malloc(sizeof *r->in * (size_t)(n_in + 1));
  r->out = core_malloc(sizeof *r->out * (size_t)(n_out + 1));
  if (!r->in || !r->out) {
    core_free(r->in);
    core_free(r->out);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for the tape");
  }
  if (n_in) memcpy(r->in, in, sizeof *r->in * (size_t)n_in);
  if (n_out) memcpy(r->out, out, sizeof *r->out * (size_t)n_out);
  t->tape.n++;
  *rec = r;
  return LOOM_OK;
}

static void free_record(loom_trace_t *t, tape_rec_t *r) {
  for (int i = 0; i < r->n_saved; i++) tr_tensor_free(t, r->saved[i]);
  core_free(r->saved);
  core_free(r->sizes);
  core_free((void *)r->key.inputs);
  seg_desc_release(r->bwd);
  core_free(r->in);
  core_free(r->out);
}

void tape_backward_key(const rt_key_t *fwd, rt_key_t *out) {
  *out = *fwd;
  out->structure = tr_mix(fwd->structure, 0xbac4);
  out->site = tr_mix(fwd->site, 0xbac4);
  rt_key_finish(out);
}

loom_status_t tape_push_segment(loom_trace_t *t, seg_desc_t *bwd,
                                const rt_key_t *key, int n_in,
                                const int32_t *in, int n_out,
                                const int32_t *out, int n_saved,
                                loom_tensor_t **saved, const int64_t *sizes) {
  tape_rec_t *r = NULL;
  loom_status_t s = new_record(t, TAPE_SEGMENT, n_in, in, n_out, out, &r);
  rt_key_input_t *kin = NULL;
  int n_sizes = sizes ? bwd->n_syms + 2 * bwd->n_groups : 0;
  if (s == LOOM_OK) {
    kin = core_malloc(sizeof *kin * (size_t)(key->n_inputs + 1));
    r->saved = core_malloc(sizeof *r->saved * (size_t)(n_saved + 1));
    r->sizes = sizes ? core_malloc(sizeof *sizes * (size_t)(n_sizes + 1)) : NULL;
    if (!kin || !r->saved || (sizes && !r->sizes))
      s = loom_fail(LOOM_ERR_NOMEM, "out of memory for the tape");
  }
  if (s != LOOM_OK) {
    core_free(kin);
    if (r) { /* off the tape again */
      free_record(t, r);
      t->tape.n--;
    }
    for (int i = 0; i < n_saved; i++) loom_tensor_destroy(saved[i]);
    return s;
  }
  if (key->n_inputs) memcpy(kin, key->inputs, sizeof *kin * (size_t)key->n_inputs);
  tape_backward_key(key, &r->key);
  r->key.inputs = kin;
  r->bwd = bwd;
  bwd->refs++;
  r->n_saved = n_saved;
  if (n_saved) memcpy(r->saved, saved, sizeof *saved * (size_t)n_saved);
  if (n_sizes) memcpy(r->sizes, sizes, sizeof *sizes * (size_t)n_sizes);
  return LOOM_OK;
}

loom_status_t tape_push_callback(loom_trace_t *t, const loom_host_op_t *op,
                                 int n_in, const int32_t *in, int n_out,
                                 const int32_t *out) {
  tape_rec_t *r = NULL;
  LOOM_TRY(new_record(t, TAPE_CALLBACK, n_in, in, n_out, out, &r));
  r->op = *op;
  return LOOM_OK;
}

void tape_clear_kept(loom_trace_t *t) {
  for (int64_t v = 0; v < t->tape.cap_kept; v++) {
    loom_tensor_destroy(t->tape.kept[v]);
    t->tape.kept[v] = NULL;
  }
}

void tape_clear(loom_trace_t *t) {
  tape_clear_kept(t);
  for (int64_t i = 0; i < t->tape.n; i++) free_record(t, &t->tape.recs[i]);
  t->tape.n = 0;
  t->tape.stale = 0;
  for (int64_t i = 0; i < t->n_params; i++) {
    loom_tensor_destroy(t->params[i].grad);
    loom_tensor_destroy(t->params[i].last);
    t->params[i].grad = t->params[i].last = NULL;
    t->params[i].got_grad = t->params[i].last_reached = false;
  }
}

void tape_destroy(loom_trace_t *t) {
  tape_clear(t);
  core_free(t->tape.recs);
  t->tape.recs = NULL;
  for (int64_t v = 0; v < t->tape.cap_grads; v++) loom_tensor_destroy(t->tape.grads[v]);
  core_free(t->tape.grads);
  t->tape.grads = NULL;
  core_free(t->tape.kept);
  t->tape.kept = NULL;
  grad_defer_free(t);
}
