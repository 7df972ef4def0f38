/* The ONNX importer's inside: a node being imported, the helpers its rule
 * reads attributes and inputs with, and the rules (one per ONNX op, listed
 * in onnx_ops.def). A rule appends the Loom ops that compute its node to
 * n->g and sets n->out; it never sees protobuf memory management, scopes
 * or folding (load.c). */
#ifndef LOOM_FRONTEND_ONNX_IMPORT_H
#define LOOM_FRONTEND_ONNX_IMPORT_H

#include <onnx.pb-c.h>

#include "core/status.h"
#include "loom/loom.h"

/* A node being imported. in[i].id is -1 for an absent optional input. */
typedef struct ox_node {
  loom_graph_t *g; /* where its ops go: the model's graph, or a scratch
                      graph when its inputs are all constants (folding) */
  const Onnx__NodeProto *proto;
  int index;       /* position in its graph, for messages */
  int64_t opset;   /* the model's default-domain opset */
  int n_in, n_out;
  loom_value_t *in;
  loom_value_t *out; /* set by the rule; outputs it leaves at -1 are an error
                        if the model uses them */
  struct ox_import *imp; /* the import, for subgraph bodies */
  struct ox_scope *scope;
} ox_node_t;

typedef loom_status_t (*ox_rule_fn)(ox_node_t *n);

/* ---- Errors: "ONNX node 3 'conv1' (Conv): ..." ------------------------- */
loom_status_t ox_fail(const ox_node_t *n, loom_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- Attributes ---------------------------------------------------------- */
const Onnx__AttributeProto *ox_attr(const ox_node_t *n, const char *name);
int64_t ox_int(const ox_node_t *n, const char *name, int64_t dflt);
double ox_float(const ox_node_t *n, const char *name, double dflt);
/* The ints of attribute name, their count in *count; NULL (count 0) when
 * absent. */
const int64_t *ox_ints(const ox_node_t *n, const char *name, int *count);
const float *ox_floats(const ox_node_t *n, const char *name, int *count);
/* Whether string attribute name (dflt when absent) equals value. */
int ox_string_is(const ox_node_t *n, const char *name, const char *dflt, const char *value);
/* The string attribute copied into buf (dflt when absent). */
const char *ox_string(const ox_node_t *n, const char *name, const char *dflt, char *buf,
                      size_t size);

/* ---- Inputs -------------------------------------------------------------- */
static inline int ox_has(const ox_node_t *n, int i) { return i < n->n_in && n->in[i].id >= 0; }
/* Fails naming input i unless it is present. */
loom_status_t ox_need(const ox_node_t *n, int i);
loom_dtype_t ox_dtype(const ox_node_t *n, loom_value_t v);
int ox_rank(const ox_node_t *n, loom_value_t v);
/* Dim d of v (constant, or a symbol's handle). */
loom_dim_t ox_dim(const ox_node_t *n, loom_value_t v, int d);
/* v's dims and rank. */
loom_status_t ox_dims(const ox_node_t *n, loom_value_t v, loom_dim_t *dims, int *rank);
/* A rank-0 constant of x's dtype holding value. */
loom_status_t ox_like(ox_node_t *n, loom_value_t x, double value, loom_value_t *out);
int ox_is_float(loom_dtype_t dt);
/* v's value when it is a constant of n->g, else NULL. */
const loom_tensor_t *ox_const(const ox_node_t *n, loom_value_t v);
/* The elements of constant integer input i (at most cap) into out, their
 * count into *count; fails naming `what` when input i is not a constant
 * known when the model loads. */
loom_status_t ox_const_ints(const ox_node_t *n, int i, const char *what, int64_t *out, int cap,
                            int *count);
/* The same for a float (or integer) constant input, converted to double. */
loom_status_t ox_const_doubles(const ox_node_t *n, int i, const char *what, double *out,
                               int cap, int *count);
/* A rank-0 or rank-1 constant of dtype holding the n values. */
loom_status_t ox_scalar(ox_node_t *n, loom_dtype_t dtype, double value, loom_value_t *out);
loom_status_t ox_vector_i64(ox_node_t *n, int count, const int64_t *values, loom_value_t *out);
/* Sets output k; fails naming the node when k is out of its outputs. */
loom_status_t ox_set(ox_node_t *n, int k, loom_value_t v);
/* Axis a of a rank-r value, negatives counted from the end; fails naming
 * `what` when out of range. */
loom_status_t ox_axis(const ox_node_t *n, int64_t a, int rank, const char *what, int64_t *out);

/* ---- Types ---------------------------------------------------------------- */
/* The Loom dtype an ONNX TensorProto data type imports as (narrow unsigned
 * and 16-bit integers widen); 0 when Loom has none (string, complex). */
int ox_dtype_from_onnx(int32_t onnx_type, loom_dtype_t *out);
const char *ox_onnx_type_name(int32_t onnx_type);
/* A tensor from a TensorProto; external data is read from base_dir. */
loom_status_t ox_tensor_from_proto(const Onnx__TensorProto *t, const char *base_dir,
                                   loom_tensor_t **out);

/* ---- Parts of rules in other files ------------------------------------------ */
/* rules_conv3d.c: the rank-5 (3-D) Conv, ConvTranspose and pools, and
 * MaxPool with its Indices output (any rank), for rules_nn.c's rules. */
loom_status_t ox_conv3d(ox_node_t *n);
loom_status_t ox_conv_transpose3d(ox_node_t *n);
loom_status_t ox_pool3d(ox_node_t *n, int max);
loom_status_t ox_max_pool_indices(ox_node_t *n);

/* ---- Rules (onnx_ops.def) ------------------------------------------------- */
typedef struct ox_op {
  const char *name;
  ox_rule_fn rule;     /* NULL: not supported */
  const char *reason;  /* why not, for rule NULL */
} ox_op_t;
const ox_op_t *ox_op_find(const char *op_type);
extern const ox_op_t ox_ops[];
extern const int ox_n_ops;

#define OX_RULE(name, fn) loom_status_t fn(ox_node_t *n);
#define OX_UNARY(name, builder)
#define OX_BINARY(name, builder)
#define OX_NOT(name, reason)
#include "frontend/onnx/onnx_ops.def"
#undef OX_RULE
#undef OX_UNARY
#undef OX_BINARY
#undef OX_NOT

#endif
