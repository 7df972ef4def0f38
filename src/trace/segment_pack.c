/* Weights packed once per step for segment runs. A traced RNN runs its
 * cell's executables once per time step, and each of their GEMMs would
 * pack the same weight as its B operand again (W_hh: 64K floats, in the
 * forward and in the backward, the packing taking as long as the
 * product at 16 rows). A parameter's storage changes only at the
 * optimizer step or between steps, so the trace packs each (storage,
 * layout) once per epoch (a step, or the part of one before
 * loom_trace_optimizer_step) and hands the packed panels to the run through
 * loom_abi_t.packed_b. It calls no other file of the tracer: the run
 * (segment_run.c) and the backward pass (backward.c) call it. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "backend/cpu/kernels/gemm.h"
#include "runtime/executable.h"
#include "trace/trace_internal.h"

void seg_packs_free(loom_trace_t *t) {
  for (int i = 0; i < TR_PACKS; i++) core_free(t->packs.slot[i].buf);
  memset(t->packs.slot, 0, sizeof t->packs.slot);
  core_free(t->packs.packed_b);
  t->packs.packed_b = NULL;
  t->packs.cap_packed_b = 0;
}

/* Whether x's storage is a parameter's (unchanged within an epoch). */
static bool param_storage(const loom_trace_t *t, const loom_tensor_t *x) {
  for (int64_t p = 0; p < t->n_params; p++)
    if (t->params[p].t->data == x->data) return true;
  return false;
}

/* x (k x n, or n x k when tb) packed as a GEMM's B, packed now unless
 * this epoch did it. Fresh packs take the slots round robin: a run
 * takes at most TR_PACKS of them, so none it holds is taken back. */
static loom_status_t packed_of(loom_trace_t *t, const loom_tensor_t *x, int tb, void **out) {
  int64_t k = x->shape[tb], n = x->shape[1 - tb];
  tr_pack_t *p = NULL;
  for (int i = 0; i < TR_PACKS && !p; i++) {
    tr_pack_t *q = &t->packs.slot[i];
    if (q->buf && q->data == x->data && q->k == k && q->n == n && q->trans_b == tb) p = q;
  }
  if (!p) {
    p = &t->packs.slot[t->packs.next];
    t->packs.next = (t->packs.next + 1) % TR_PACKS;
    size_t bytes = kern_gemm_packed_bytes(k, n);
    if (p->bytes < bytes) {
      core_free(p->buf);
      p->buf = core_aligned_alloc(bytes);
      p->bytes = p->buf ? bytes : 0;
      if (!p->buf)
        return loom_fail(LOOM_ERR_NOMEM, "out of memory packing a %lldx%lld weight",
                         (long long)x->shape[0], (long long)x->shape[1]);
    }
    *p = (tr_pack_t){.data = x->data, .k = k, .n = n, .trans_b = tb,
                     .epoch = t->packs.epoch - 1, .buf = p->buf, .bytes = p->bytes};
  }
  if (p->epoch != t->packs.epoch) {
    kern_gemm_pack_b(x->data, x->shape[1], tb, k, n, p->buf);
    p->epoch = t->packs.epoch;
  }
  *out = p->buf;
  return LOOM_OK;
}

/* The input bound to slot, or -1. */
static int input_of_slot(const loom_executable_t *x, int32_t slot) {
  for (int j = 0; j < x->n_inputs; j++)
    if (x->inputs[j].slot == slot) return j;
  return -1;
}

/* The B operand of generated matmul step st when it is a parameter's
 * f32 matrix bound as an input: its slot, layout and tensor. */
static bool packable(const loom_trace_t *t, const loom_executable_t *x, const step_t *st,
                     loom_tensor_t *const *ins, int32_t *slot, int *tb,
                     const loom_tensor_t **w) {
  if (st->kind != STEP_GENERATED) return false;
  const fuse_group_t *grp = &x->plan.groups[st->group];
  if (grp->kind != FUSE_CONTRACTION || grp->anchor < 0) return false;
  const ir_node_t *n = &x->graph->nodes[grp->anchor];
  if (n->op != IR_OP_MATMUL) return false;
  int32_t b = n->in[1];
  const ir_value_t *v = &x->graph->values[b];
  *slot = x->slot_of_value[b];
  int j = v->kind == IR_VALUE_INPUT && *slot >= 0 ? input_of_slot(x, *slot) : -1;
  if (j < 0 || v->type.rank != 2 || v->type.dtype != LOOM_F32) return false;
  *w = ins[j];
  *tb = ir_attr_int(&n->attrs, "trans_b", 0) != 0;
  return (*w)->dtype == LOOM_F32 && (*w)->rank == 2 && tensor_is_contiguous(*w) &&
         (*w)->data && param_storage(t, *w);
}

loom_status_t seg_entry_run(loom_trace_t *t, rt_entry_t *e, int n_in,
                            loom_tensor_t *const *ins, int n_out,
                            loom_tensor_t *const *outs) {
  const loom_executable_t *x = rt_entry_executable(e);
  if (!x || x->interpreted || x->packed_b || !x->graph || t->n_params == 0)
    return rt_entry_run(e, n_in, ins, n_out, outs);
  if (2 * (int64_t)x->n_slots + 1 > t->packs.cap_packed_b) {
    int64_t old = t->packs.cap_packed_b;
    LOOM_TRY(core_grow((void **)&t->packs.packed_b, &t->packs.cap_packed_b,
                       2 * (int64_t)x->n_slots + 1, sizeof *t->packs.packed_b));
    memset(t->packs.packed_b + old, 0,
           sizeof *t->packs.packed_b * (size_t)(t->packs.cap_packed_b - old));
  }
  int set[TR_PACKS], n_set = 0;
  for (int i = 0; i < x->n_steps && n_set < TR_PACKS; i++) {
    int32_t slot;
    int tb;
    const loom_tensor_t *w;
    if (!packable(t, x, &x->steps[i], ins, &slot, &tb, &w) || t->packs.packed_b[2 * slot + tb])
      continue;
    void *buf = NULL;
    loom_status_t s = packed_of(t, w, tb, &buf);
    if (s != LOOM_OK) { /* the GEMM packs for itself */
      loom_clear_error();
      break;
    }
    set[n_set++] = 2 * slot + tb;
    t->packs.packed_b[2 * slot + tb] = buf;
  }
  loom_status_t s = n_set ? rt_entry_run_packed(e, n_in, ins, n_out, outs,
                                                (const void *const *)t->packs.packed_b)
                          : rt_entry_run(e, n_in, ins, n_out, outs);
  for (int i = 0; i < n_set; i++) t->packs.packed_b[set[i]] = NULL;
  return s;
}
