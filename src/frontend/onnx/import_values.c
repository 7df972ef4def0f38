/* The values that live only while a model loads: the lists that ONNX
 * sequences and optionals are (rules_sequence.c makes and reads them,
 * seqio.c binds them to the model's inputs and outputs), numbered from
 * OX_SEQ_BASE. */
#include <string.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

struct ox_seqs {
  int n, cap;
  ox_seq_t *list;
};

void ox_seqs_free(struct ox_seqs *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) core_free(s->list[i].items);
  core_free(s->list);
  core_free(s);
}

loom_status_t ox_seq_new(ox_node_t *n, int count, const loom_value_t *items, loom_dtype_t dtype,
                         loom_value_t *out) {
  struct ox_seqs **store = ox_seq_store(n);
  if (!*store && !(*store = core_calloc(1, sizeof **store)))
    return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  struct ox_seqs *s = *store;
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 16;
    ox_seq_t *list = core_realloc(s->list, sizeof *list * (size_t)cap);
    if (!list) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
    s->list = list;
    s->cap = cap;
  }
  ox_seq_t *q = &s->list[s->n];
  q->items = core_calloc((size_t)count + 1, sizeof *q->items);
  if (!q->items) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  if (count) ox_copy(q->items, items, sizeof *items * (size_t)count);
  q->n = count;
  q->dtype = count ? ox_dtype(n, items[0]) : dtype;
  q->none = 0;
  out->id = OX_SEQ_BASE + s->n++;
  return LOOM_OK;
}

loom_status_t ox_seq_none(ox_node_t *n, loom_value_t *out) {
  LOOM_TRY(ox_seq_new(n, 0, NULL, LOOM_F32, out));
  (*ox_seq_store(n))->list[out->id - OX_SEQ_BASE].none = 1;
  return LOOM_OK;
}

const ox_seq_t *ox_seq_get(ox_node_t *n, loom_value_t v) {
  struct ox_seqs *s = *ox_seq_store(n);
  int k = v.id - OX_SEQ_BASE;
  return ox_is_seq(v) && s && k < s->n ? &s->list[k] : NULL;
}

loom_status_t ox_seq_items(ox_node_t *n, loom_value_t v, int *count, const loom_value_t **items,
                           int *none) {
  const ox_seq_t *q = ox_seq_get(n, v);
  if (!q) return loom_fail(LOOM_ERR_FORMAT, "ONNX import: value %d is not a sequence", v.id);
  *count = q->n;
  *items = q->items;
  *none = q->none;
  return LOOM_OK;
}

