/* The ONNX importer's inside: a node being imported, the helpers its rule
 * reads attributes and inputs with, and the rules (one per ONNX op, listed
 * in onnx_ops.def). A rule appends the Loom ops that compute its node to
 * n->g and sets n->out; it never sees protobuf memory management, scopes
 * or folding (load.c). */
#ifndef LOOM_FRONTEND_ONNX_IMPORT_H
#define LOOM_FRONTEND_ONNX_IMPORT_H

#include <onnx.pb-c.h>

#include <string.h>

#include "core/status.h"
#include "loom/loom.h"
#include "loom/onnx.h"

/* A node being imported. in[i].id is -1 for an absent optional input. */
typedef struct ox_node {
  loom_graph_t *g; /* where its ops go: the model's graph, or a scratch
                      graph when its inputs are all constants (folding) */
  const Onnx__NodeProto *proto;
  const Onnx__GraphProto *graph; /* the graph it is in: declared value types */
  int index;       /* position in its graph, for messages */
  int64_t opset;   /* the opset the model imports for the node's domain */
  int n_in, n_out;
  loom_value_t *in;
  loom_value_t *out; /* set by the rule; outputs it leaves at -1 are an error
                        if the model uses them */
  struct ox_import *imp; /* the import, for subgraph bodies */
  struct ox_scope *scope;
  /* OX_ATTR_ERROR chars where the attribute readers note the first
   * attribute of a type other than the op's (the import then fails with
   * it), or NULL. */
  char *attr_error;
} ox_node_t;

enum { OX_ATTR_ERROR = 256 };

/* ONNX's attribute types (AttributeProto.type), as ox_attr_typed takes them. */
enum {
  OX_ATTR_UNDEFINED = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED,
  OX_ATTR_FLOAT = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT,
  OX_ATTR_INT = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT,
  OX_ATTR_STRING = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING,
  OX_ATTR_TENSOR = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR,
  OX_ATTR_GRAPH = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH,
  OX_ATTR_FLOATS = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS,
  OX_ATTR_INTS = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS,
  OX_ATTR_STRINGS = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS,
  OX_ATTR_TENSORS = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS,
  OX_ATTR_GRAPHS = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS,
};

typedef loom_status_t (*ox_rule_fn)(ox_node_t *n);

/* LOOM_ERR_FORMAT when the model's messages nest deeper than protobuf-c's
 * unpacking, which recurses per level, may safely go (nesting.c). */
loom_status_t ox_check_nesting(const void *data, size_t size);

/* ---- Errors: "ONNX node 3 'conv1' (Conv): ..." ------------------------- */
loom_status_t ox_fail(const ox_node_t *n, loom_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- Attributes ---------------------------------------------------------- */
const Onnx__AttributeProto *ox_attr(const ox_node_t *n, const char *name);
/* Attribute name if it is of type (an ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE),
 * NULL when absent. One of another type reads as absent and is noted in
 * n->attr_error: the readers below all go through it, so that a rule
 * carries on with its default and the node then fails naming the
 * attribute. */
const Onnx__AttributeProto *ox_attr_typed(const ox_node_t *n, const char *name, int type);
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

/* i64 positions 0..size-1 along dim d of a rank-r value (size 1 elsewhere). */
/* A window op's strides, dilations and pads attributes over s spatial
 * dims (NULL when absent), failing when one has the wrong count. */
loom_status_t ox_window_attrs(const ox_node_t *n, int s, const int64_t **strides,
                              const int64_t **dilations, const int64_t **pads);
/* v truncated to an integer, clamped to int64's range (NaN: INT64_MIN), so
 * that a corrupt model's float cannot make a cast undefined. */
int64_t ox_to_i64(double v);
/* An input of body typed as v of n->g, less axis `drop` (-1: none), its
 * symbolic dims the body's symbols of the same names. name: NULL, or
 * unique among body's inputs. */
loom_status_t ox_input_like(ox_node_t *n, loom_graph_t *body, const char *name, loom_value_t v,
                            int drop, loom_value_t *out);
/* 0, 1, ..., size - 1 along axis d of a rank-r i64 (1 elsewhere); a
 * symbolic size counts them when the graph runs. */
loom_status_t ox_iota(ox_node_t *n, loom_dim_t size, int d, int r, loom_value_t *out);
/* ox_dims, failing (naming `what`) when a dim is symbolic. */
loom_status_t ox_static_dims(const ox_node_t *n, loom_value_t v, const char *what,
                             loom_dim_t *dims, int *rank);

/* ---- Types ---------------------------------------------------------------- */
/* The ONNX element type the node's graph declares for value `name` (an
 * input, output, value_info or initializer); 0 when it declares none. Loom
 * widens narrow unsigned types: this tells uint8 from uint16. */
int32_t ox_declared_type(const ox_node_t *n, const char *name);
/* The Loom dtype an ONNX TensorProto data type imports as (narrow unsigned
 * and 16-bit integers widen); 0 when Loom has none (string, complex). */
int ox_dtype_from_onnx(int32_t onnx_type, loom_dtype_t *out);
const char *ox_onnx_type_name(int32_t onnx_type);
/* A tensor from a TensorProto; external data is read from base_dir. */
loom_status_t ox_tensor_from_proto(const Onnx__TensorProto *t, const char *base_dir,
                                   loom_tensor_t **out);

/* The tensor named `name` in n's scope (load.c); fails naming it when none
 * is computed before the node. */
loom_status_t ox_lookup(const ox_node_t *n, const char *name, loom_value_t *out);

/* ---- Subgraphs (load.c; If, Loop and Scan bodies) -------------------------- */
/* The outer values that subgraphs read by name: ONNX bodies may read any
 * value of an enclosing graph, Loom's take them as inputs. */
typedef struct ox_captures {
  int n;
  char **names;
  loom_value_t *values; /* values of n->g, in the order of names */
} ox_captures_t;
/* The names the n_graphs subgraphs (and those nested in them) read
 * without defining, once each, resolved in n's scope. */
loom_status_t ox_captures_find(ox_node_t *n, int n_graphs, const Onnx__GraphProto *const *gps,
                               ox_captures_t *out);
void ox_captures_free(ox_captures_t *c);
/* Imports subgraph gp's nodes into g: its inputs read formal[0..n_formal),
 * the names of c (NULL: none) inner[0..c->n) (values of g), and out[k]
 * receives its output k. g == n->g imports it inline (a taken branch):
 * names it does not bind then resolve in n's scope. */
loom_status_t ox_subgraph_import(ox_node_t *n, const Onnx__GraphProto *gp, loom_graph_t *g,
                                 int n_formal, const loom_value_t *formal,
                                 const ox_captures_t *c, const loom_value_t *inner, int n_out,
                                 loom_value_t *out);

/* ---- The import (load.c) ---------------------------------------------------- */
struct ox_seqs;
struct ox_shapes;
typedef struct ox_import {
  loom_graph_t *g;
  int64_t opset;          /* of the default domain; 0: the model imports none */
  int64_t training_opset; /* of ai.onnx.preview.training; 0: none */
  int trainable;
  const char *base_dir;
  int n_unnamed; /* fresh symbols for unnamed dynamic dims */
  /* Anonymous input dims (unnamed, or tf2onnx's "unk__N") found, and
   * whether they share one symbol per position (load.c's second try). */
  int n_anonymous, merge_anonymous;
  const loom_onnx_options_t *options;
  int *fixed_used; /* per fixed input, then per dim and shape override: whether
                      the model has it */
  struct ox_seqs *seqs; /* the sequence values made so far (import_values.c) */
  struct ox_shapes *shapes; /* the shape values made so far (shape_values.c) */
} ox_import_t;
/* Where the import keeps its sequences and shape values. */
static inline struct ox_seqs **ox_seq_store(ox_node_t *n) { return &n->imp->seqs; }
static inline struct ox_shapes **ox_shape_store(ox_node_t *n) { return &n->imp->shapes; }

/* ---- Sequences (import_values.c; their ops in rules_sequence.c) ------------- */
/* An ONNX sequence lives only while the model loads, as a list of Loom
 * values the import holds (its elements' count and order must be known
 * then); its loom_value_t numbers it from OX_SEQ_BASE, an id no Loom
 * graph has, so that a tensor op given one fails. */
#define OX_SEQ_BASE (1 << 30)
static inline int ox_is_seq(loom_value_t v) { return v.id >= OX_SEQ_BASE; }
typedef struct ox_seq {
  int n;
  loom_value_t *items;
  loom_dtype_t dtype; /* its elements' (SequenceEmpty's dtype when it has none) */
  int none;           /* 1: not a sequence but an optional that is none */
} ox_seq_t;
void ox_seqs_free(struct ox_seqs *s);
/* The list v numbers, or NULL. */
const ox_seq_t *ox_seq_get(ox_node_t *n, loom_value_t v);
/* A new sequence of the count items (dtype: its elements' when it has
 * none), or an optional that is none (a list entry too: like a sequence,
 * it is no value of a graph). */
loom_status_t ox_seq_new(ox_node_t *n, int count, const loom_value_t *items, loom_dtype_t dtype,
                         loom_value_t *out);
loom_status_t ox_seq_none(ox_node_t *n, loom_value_t *out);
/* The items of sequence v (*none 1, count 0: an optional that is none);
 * fails unless v is one of the import's lists. */
loom_status_t ox_seq_items(ox_node_t *n, loom_value_t v, int *count, const loom_value_t **items,
                           int *none);

/* ---- Sequence and optional inputs and outputs of the model (seqio.c) ------- */
int ox_type_is_optional(const Onnx__TypeProto *tp);
/* Checks the options' sequence lengths and element shapes against gp. */
loom_status_t ox_seqio_check(const Onnx__GraphProto *gp, const loom_onnx_options_t *o);
/* Input vi, a sequence or optional (none: an optional fixed to none), as
 * a value of n->g (a list of tensor inputs NAME.i, or a tensor input). */
loom_status_t ox_seqio_input(ox_node_t *n, const loom_onnx_options_t *o,
                             const Onnx__ValueInfoProto *vi, int none, loom_value_t *out);
/* Output `name` holding list v: outputs NAME.i, none for a none. */
loom_status_t ox_seqio_output(ox_node_t *n, const char *name, loom_value_t v);

/* ---- Shape values (shape_values.c) ----------------------------------------- */
/* An integer tensor of dims computed from symbolic dims (Shape of an
 * input with a symbolic batch dim, then Gather, Concat, ...) lives only
 * while the model loads, as a list of Loom dims; its loom_value_t numbers
 * it from OX_SHAPE_BASE (below OX_SEQ_BASE), an id no Loom graph has.
 * One whose entries are all constants is an ordinary constant instead. */
#define OX_SHAPE_BASE (1 << 29)
#define OX_SHAPE_MAX 16 /* entries of one */
static inline int ox_is_shape(loom_value_t v) { return v.id >= OX_SHAPE_BASE && v.id < OX_SEQ_BASE; }
/* Whether d is a symbolic dim (an expression's handle), not a constant. */
int ox_is_dim_sym(loom_dim_t d);
void ox_shapes_free(struct ox_shapes *s);
/* Output *out holding the count dims (rank 0: one dim, as a scalar), an
 * ordinary i64 constant when all are constants. */
loom_status_t ox_shape_make(ox_node_t *n, int count, const loom_dim_t *dims, int rank,
                            loom_value_t *out);
/* The dims input i holds: a shape value's entries (maybe symbolic) or a
 * constant's (as ox_const_ints). */
loom_status_t ox_shape_dims(const ox_node_t *n, int i, const char *what, loom_dim_t *out, int cap,
                            int *count);
/* Imports n when an input is a shape value that its rule does not read
 * and n is shape arithmetic on dims (Gather, Concat, Add, ... over
 * integer constants), *done then 1. For any other op, such inputs become
 * tensors computed when the graph runs (n->in updated, *done 0), for
 * n's own rule. */
loom_status_t ox_shape_node(ox_node_t *n, int *done);
/* Shape value v as a tensor of n's graph, computed when the graph runs
 * (a model output that holds dims). */
loom_status_t ox_shape_tensor(ox_node_t *n, loom_value_t v, loom_value_t *out);
/* Dim d as an i64 scalar of n's graph: a constant, or for a symbolic
 * dim the value it takes when the graph runs. */
loom_status_t ox_dim_tensor(ox_node_t *n, loom_dim_t d, loom_value_t *out);
/* dims[0..count-1] as an i64 vector of n's graph, symbolic entries
 * computed when the graph runs. */
loom_status_t ox_dims_tensor(ox_node_t *n, int count, const loom_dim_t *dims, loom_value_t *out);

/* memcpy for counts that may be 0 with a NULL source (an attribute the
 * node does not have), which memcpy itself must not be given. */
static inline void ox_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
}

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
  const char *domain;  /* "" for the default domain (ai.onnx) */
} ox_op_t;
/* The op named op_type, of whichever domain (names are unique). */
const ox_op_t *ox_op_find(const char *op_type);
/* Whether the importer has op_type of domain ("ai.onnx" for the default
 * one); *reason says why not. */
int ox_op_supported_in(const char *domain, const char *op_type, const char **reason);
/* The largest model file read (protobuf's own limit). */
#define OX_MAX_FILE ((size_t)2 << 30)
extern const ox_op_t ox_ops[];
extern const int ox_n_ops;

#define OX_RULE(name, fn) loom_status_t fn(ox_node_t *n);
#define OX_RULE_DOMAIN(name, fn, domain) loom_status_t fn(ox_node_t *n);
#define OX_UNARY(name, builder)
#define OX_BINARY(name, builder)
#define OX_NOT(name, reason)
#include "frontend/onnx/onnx_ops.def"
#undef OX_RULE
#undef OX_RULE_DOMAIN
#undef OX_UNARY
#undef OX_BINARY
#undef OX_NOT

#endif
