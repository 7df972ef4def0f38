/* The op table as the public API shows it (loom/op_table.h): ops by name
 * and their attributes with kinds and defaults. */
#include <pthread.h>
#include <string.h>

#include "core/sized.h"
#include "core/status.h"
#include "ir/ir.h"

int loom_op_count(void) { return IR_OP_COUNT; }

/* Names to ops: an open-addressed table built once, so that a binding or
 * an importer that builds every node by name pays one hash and about one
 * compare per node, not a scan of the table. */
enum { NAME_SLOTS = 512 }; /* a power of two, well above the op count */
_Static_assert(IR_OP_COUNT < NAME_SLOTS / 2, "op names: grow NAME_SLOTS");
static int16_t name_slot[NAME_SLOTS]; /* op + 1; 0: empty */
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static void index_names(void) {
  for (int i = 0; i < IR_OP_COUNT; i++) {
    uint32_t k = name_hash(ir_ops[i].name) & (NAME_SLOTS - 1);
    while (name_slot[k]) k = (k + 1) & (NAME_SLOTS - 1);
    name_slot[k] = (int16_t)(i + 1);
  }
}

loom_status_t loom_op_find(const char *name, int *op) {
  LOOM_CHECK_ARG(name);
  LOOM_CHECK_ARG(op);
  pthread_once(&names_once, index_names);
  for (uint32_t k = name_hash(name) & (NAME_SLOTS - 1); name_slot[k];
       k = (k + 1) & (NAME_SLOTS - 1))
    if (!strcmp(ir_ops[name_slot[k] - 1].name, name)) {
      *op = name_slot[k] - 1;
      return LOOM_OK;
    }
  return loom_fail(LOOM_ERR_INVALID, "no op is called '%s' (loom ops lists them)", name);
}

loom_status_t ir_op_check(const char *fn, int i) {
  if (i >= 0 && i < IR_OP_COUNT) return LOOM_OK;
  return loom_fail(LOOM_ERR_INVALID, "%s: op index %d is outside 0..%d", fn, i,
                   IR_OP_COUNT - 1);
}

int loom_op_attr_count(int op) {
  return op >= 0 && op < IR_OP_COUNT ? ir_op_schema((ir_op_t)op)->n : -1;
}

loom_status_t loom_op_get_attr(int op, int k, loom_attr_info_t *out) {
  LOOM_TRY(ir_op_check(__func__, op));
  const ir_schema_t *s = ir_op_schema((ir_op_t)op);
  if (k < 0 || k >= s->n)
    return loom_fail(LOOM_ERR_INVALID, "%s: %s has %d attributes, not one numbered %d",
                     __func__, ir_ops[op].name, s->n, k);
  const ir_attr_spec_t *a = &s->a[k];
  loom_attr_info_t o = {.size = sizeof o,
                        .name = a->name,
                        .kind = a->kind,
                        .optional = a->optional,
                        .has_default = a->has_default,
                        .default_int = a->kind == LOOM_ATTR_INTS ? 0 : a->ints[0],
                        .default_float = a->f,
                        .n_default_ints = a->kind == LOOM_ATTR_INTS ? a->n_ints : 0,
                        .default_text = a->text};
  memcpy(o.default_ints, a->ints, sizeof a->ints);
  if (a->kind != LOOM_ATTR_INTS) memset(o.default_ints, 0, sizeof a->ints);
  return core_sized_write(__func__, "loom_attr_info_t", out, &o, sizeof o);
}

const char *loom_attr_kind_name(loom_attr_kind_t kind) { return ir_attr_kind_name(kind); }
