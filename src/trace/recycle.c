/* The step's small tensors, kept for the next step. A dynamic program
 * makes the same segment outputs every step (an LSTM's cell states, a
 * TreeLSTM's nodes), and the two allocations of each (the tensor and its
 * elements) cost as much as the rest of a stitched boundary. So tensors
 * the step owned whose elements take at most TR_RECYCLE_BYTES go back here
 * when it ends, by their elements' size, and the next step's outputs of
 * that size take them. A size the step did not make is freed at its end,
 * and no size keeps more tensors than the step made of it: what is kept is
 * at most one step's small tensors. Larger elements are kept by
 * core/storage.c, the process's block cache. Under AddressSanitizer
 * nothing is kept (as there), so that a use after the step shows. Calls no
 * other file of the tracer. */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "trace/trace_internal.h"

/* The elements' bytes of shape, or 0 where they are not kept (too many,
 * a bad shape: tensor_new_uninit names the error). */
static size_t kept_bytes(loom_dtype_t dtype, int rank, const int64_t *shape) {
  if (rank < 0 || rank > LOOM_MAX_RANK || (rank && !shape)) return 0;
  size_t n = loom_dtype_size(dtype);
  for (int a = 0; a < rank && n; a++) {
    if (shape[a] < 0 || shape[a] > TR_RECYCLE_BYTES) return 0;
    n *= (size_t)shape[a];
    if (n > TR_RECYCLE_BYTES) return 0;
  }
  return n;
}

/* The slot of size bytes, or the empty one where it goes (NULL: full). */
static tr_kept_t *slot_of(tr_recycle_t *r, size_t bytes) {
  size_t h = (bytes * 0x9e3779b97f4a7c15ULL) >> 58; /* 6 bits: TR_KEPT */
  for (int probe = 0; probe < TR_KEPT; probe++) {
    tr_kept_t *k = &r->slots[(h + (size_t)probe) & (TR_KEPT - 1)];
    if (k->bytes == bytes || k->bytes == 0) return k;
  }
  return NULL;
}

/* A kept tensor of `bytes` elements' bytes (counted as made), or NULL
 * with *fresh: make one (none kept, or a size not kept). */
static loom_status_t take(loom_trace_t *t, size_t bytes, tr_kept_item_t *it, bool *fresh) {
  tr_kept_t *k = bytes ? slot_of(&t->recycle, bytes) : NULL;
  *fresh = true;
  if (!k) return LOOM_OK;
  k->bytes = bytes;
  k->made++;
  if (k->n == 0) return LOOM_OK;
  if (core_alloc_fault()) /* a kept tensor stands for an allocation */
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a tensor");
  *it = k->items[--k->n];
  *fresh = false;
  return LOOM_OK;
}

/* The kept tensors' headers are rewritten whole: reading one first would
 * wait on memory the step has not touched since the last. */
loom_status_t tr_tensor_new(loom_trace_t *t, loom_dtype_t dtype, int rank,
                            const int64_t *shape, loom_tensor_t **out) {
  tr_kept_item_t it;
  bool fresh;
  LOOM_TRY(take(t, core_storage_reuses() ? kept_bytes(dtype, rank, shape) : 0, &it, &fresh));
  if (fresh) return tensor_new_uninit(dtype, rank, shape, out);
  tensor_view_init(it.x, dtype, rank, shape, it.data);
  it.x->owns_data = true;
  *out = it.x;
  return LOOM_OK;
}

void tr_model_init(tr_model_t *m, loom_dtype_t dtype, int rank, const int64_t *shape) {
  tensor_view_init(&m->header, dtype, rank, shape, NULL);
  m->kept_bytes = core_storage_reuses() ? kept_bytes(dtype, rank, shape) : 0;
}

loom_status_t tr_tensor_like(loom_trace_t *t, const tr_model_t *m, loom_tensor_t **out) {
  tr_kept_item_t it;
  bool fresh;
  LOOM_TRY(take(t, m->kept_bytes, &it, &fresh));
  if (fresh)
    return tensor_new_uninit(m->header.dtype, m->header.rank, m->header.shape, out);
  *it.x = m->header;
  it.x->data = it.data;
  it.x->owns_data = true;
  *out = it.x;
  return LOOM_OK;
}

void tr_tensor_free(loom_trace_t *t, loom_tensor_t *x) {
  if (!x) return;
  /* contiguous: a tensor taken again at its shape keeps its strides */
  size_t bytes = x->owns_data && x->device == LOOM_DEVICE_CPU && tensor_is_contiguous(x)
                     ? kept_bytes(x->dtype, x->rank, x->shape) : 0;
  tr_kept_t *k = bytes ? slot_of(&t->recycle, bytes) : NULL;
  if (!k || k->bytes != bytes || k->n >= k->made ||
      (k->n == k->cap &&
       core_grow((void **)&k->items, &k->cap, k->n + 1, sizeof *k->items) != LOOM_OK)) {
    loom_clear_error();
    loom_tensor_destroy(x);
    return;
  }
  k->items[k->n++] = (tr_kept_item_t){x, x->data};
}

/* Frees slot k's tensors and its list. */
static void drop(tr_kept_t *k) {
  for (int i = 0; i < k->n; i++) loom_tensor_destroy(k->items[i].x);
  core_free(k->items);
  *k = (tr_kept_t){0};
}

void tr_recycle_step_end(loom_trace_t *t) {
  tr_recycle_t *r = &t->recycle;
  bool dropped = false;
  for (int i = 0; i < TR_KEPT; i++) {
    tr_kept_t *k = &r->slots[i];
    if (k->bytes && k->made == 0) drop(k), dropped = true;
    k->made = 0;
  }
  if (!dropped) return;
  /* an emptied slot would end the probes of the sizes placed after it */
  tr_kept_t live[TR_KEPT];
  memcpy(live, r->slots, sizeof live);
  memset(r->slots, 0, sizeof r->slots);
  for (int i = 0; i < TR_KEPT; i++)
    if (live[i].bytes) *slot_of(r, live[i].bytes) = live[i];
}

void tr_recycle_free(loom_trace_t *t) {
  for (int i = 0; i < TR_KEPT; i++) drop(&t->recycle.slots[i]);
}
