/* The table of onnx_ops.def: each ONNX op's rule, or why it has none. */
#include <string.h>

#include "frontend/onnx/onnx_import.h"

static loom_status_t unary(ox_node_t *n,
                           loom_status_t (*fn)(loom_graph_t *, loom_value_t, loom_value_t *)) {
  LOOM_TRY(ox_need(n, 0));
  return fn(n->g, n->in[0], &n->out[0]);
}

/* Before opset 7, b broadcast only with broadcast=1, its dims placed from
 * `axis` of a's (NumPy's trailing alignment without one). */
static loom_status_t legacy_broadcast(ox_node_t *n, loom_value_t *b) {
  if (n->opset >= 7 || !ox_int(n, "broadcast", 0) || !ox_attr(n, "axis")) return LOOM_OK;
  int ra = ox_rank(n, n->in[0]), rb = ox_rank(n, *b);
  int64_t axis = ox_int(n, "axis", 0);
  if (axis < 0) axis += ra;
  int trailing = ra - (int)axis - rb;
  if (trailing < 0) return ox_fail(n, LOOM_ERR_SHAPE, "axis %lld does not fit b", (long long)axis);
  int64_t axes[LOOM_MAX_RANK];
  for (int k = 0; k < trailing; k++) axes[k] = rb + k;
  return trailing ? loom_unsqueeze(n->g, *b, trailing, axes, b) : LOOM_OK;
}

static loom_status_t binary(ox_node_t *n, loom_status_t (*fn)(loom_graph_t *, loom_value_t,
                                                               loom_value_t, loom_value_t *)) {
  LOOM_TRY(ox_need(n, 0));
  LOOM_TRY(ox_need(n, 1));
  loom_value_t b = n->in[1];
  LOOM_TRY(legacy_broadcast(n, &b));
  return fn(n->g, n->in[0], b, &n->out[0]);
}

#define OX_RULE(name, fn)
#define OX_RULE_DOMAIN(name, fn, domain)
#define OX_NOT(name, reason)
#define OX_UNARY(name, builder) \
  static loom_status_t ox_unary_##name(ox_node_t *n) { return unary(n, builder); }
#define OX_BINARY(name, builder) \
  static loom_status_t ox_binary_##name(ox_node_t *n) { return binary(n, builder); }
#include "frontend/onnx/onnx_ops.def"
#undef OX_RULE
#undef OX_RULE_DOMAIN
#undef OX_NOT
#undef OX_UNARY
#undef OX_BINARY

const ox_op_t ox_ops[] = {
#define OX_RULE(name, fn) {#name, fn, NULL, ""},
#define OX_RULE_DOMAIN(name, fn, domain) {#name, fn, NULL, domain},
#define OX_NOT(name, reason) {#name, NULL, reason, ""},
#define OX_UNARY(name, builder) {#name, ox_unary_##name, NULL, ""},
#define OX_BINARY(name, builder) {#name, ox_binary_##name, NULL, ""},
#include "frontend/onnx/onnx_ops.def"
#undef OX_RULE
#undef OX_RULE_DOMAIN
#undef OX_NOT
#undef OX_UNARY
#undef OX_BINARY
};
const int ox_n_ops = (int)(sizeof ox_ops / sizeof ox_ops[0]);

const ox_op_t *ox_op_find(const char *op_type) {
  for (int i = 0; i < ox_n_ops; i++)
    if (!strcmp(ox_ops[i].name, op_type)) return &ox_ops[i];
  return NULL;
}

int ox_op_supported_in(const char *domain, const char *op_type, const char **reason) {
  const ox_op_t *op = ox_op_find(op_type);
  const char *want = op && *op->domain ? op->domain : "ai.onnx";
  if (!op || strcmp(domain, want) != 0) {
    *reason = strcmp(domain, "ai.onnx") && strcmp(domain, "ai.onnx.preview.training")
                  ? "an op of a domain Loom does not import"
                  : "not an ONNX op Loom knows";
    return 0;
  }
  *reason = op->rule ? NULL : op->reason;
  return op->rule != NULL;
}

int loom_onnx_op_supported(const char *op_type, const char **reason) {
  const ox_op_t *op = op_type ? ox_op_find(op_type) : NULL;
  if (reason) *reason = !op ? "not an ONNX op Loom knows" : op->rule ? NULL : op->reason;
  return op && op->rule;
}
