/* Origins: a node that a public call built as part of a composition (a
 * loss made of log_softmax, one_hot and sums) carries an "origin"
 * attribute naming an entry of this table, so that its run-time errors
 * speak of the call and its argument, not of an op the user never called.
 * An attribute travels with its node through every copy, rewrite and
 * segment, so the origin reaches the interpreter and generated code alike. */
#include "core/status.h"
#include "ir/ir.h"

static const ir_origin_info_t origins[IR_ORIGIN_COUNT] = {
    [IR_ORIGIN_CROSS_ENTROPY_LABELS] = {"loom_cross_entropy", "label", "classes"},
};

const ir_origin_info_t *ir_origin_info(int64_t origin) {
  if (origin <= IR_ORIGIN_NONE || origin >= IR_ORIGIN_COUNT) return NULL;
  return &origins[origin];
}

const ir_origin_info_t *ir_node_origin(const ir_node_t *n) {
  return ir_origin_info(ir_attr_int(n->attrs, IR_ORIGIN_ATTR, IR_ORIGIN_NONE));
}

loom_status_t ir_index_error(const ir_node_t *n, int64_t value, int64_t position,
                             int64_t size) {
  const ir_origin_info_t *o = ir_node_origin(n);
  if (!o)
    return loom_fail(LOOM_ERR_VALUE,
                     "%s: index %lld (at position %lld) is out of range for a dim of size %lld",
                     ir_ops[n->op].name, (long long)value, (long long)position,
                     (long long)size);
  return loom_fail(LOOM_ERR_VALUE, "%s: %s %lld (at position %lld) is out of range for %lld %s "
                   "(0 to %lld)", o->call, o->index, (long long)value, (long long)position,
                   (long long)size, o->range, (long long)size - 1);
}
