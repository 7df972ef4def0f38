/* Loom: the op table, as data, and a builder that makes any op by name.
 *
 * Every op Loom knows is a row of one table (src/ir/ops.def). This header
 * lists the rows, describes each op (arity, dtypes, flags) and its
 * attributes (name, kind, whether optional, default), and builds a node
 * of any op from its name, inputs and named attributes, as ONNX's
 * NodeProto or PyTorch's op schemas do: a binding or an importer needs no
 * code per op. The builders of ops.h are the same ops with C signatures;
 * a graph built either way is the same graph. */
#ifndef LOOM_OP_TABLE_H
#define LOOM_OP_TABLE_H

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Ops ------------------------------------------------------------------ */

/* Number of ops; ops are numbered 0..count-1 in the table's order, which
 * may change between versions: look ops up by name. */
LOOM_API int loom_op_count(void);
/* The number of the op called name ("matmul"); LOOM_ERR_INVALID for a
 * name the table lacks. */
LOOM_API loom_status_t loom_op_find(const char *name, int *op);

/* Flags of loom_op_info_t. */
typedef enum loom_op_flag {
  LOOM_OP_DIFFERENTIABLE = 1 << 0, /* a gradient rule exists (has_gradient) */
  LOOM_OP_RANDOM = 1 << 1,         /* draws random numbers from its seed and
                                      offset inputs */
  LOOM_OP_SIDE_EFFECT = 1 << 2,    /* writes state (assign) */
  LOOM_OP_DATA_SHAPE = 1 << 3,     /* an output's shape depends on input data */
  LOOM_OP_SUBGRAPH = 1 << 4,       /* runs subgraphs given as graph attributes */
  LOOM_OP_COLLECTIVE = 1 << 5,     /* communicates with other ranks (comm.h) */
} loom_op_flag_t;

/* What op i is (a versioned struct: loom.h). */
typedef struct loom_op_info {
  size_t size;              /* sizeof(loom_op_info_t): the caller sets it */
  const char *name;
  /* "elementwise", "reduction", "contraction", "layout", "host" */
  const char *fusion_class;
  const char *doc;          /* one line: what it computes */
  int has_reference;        /* a reference kernel runs it */
  int has_gradient;         /* a gradient rule exists */
  int not_differentiable;   /* no gradient flows through it (argmax, ...) */
  int has_codegen;          /* the CPU code generator has a rule for it
                               (for some dtypes and shapes; asked of it) */
  int data_dependent_shape; /* the same as flags & LOOM_OP_DATA_SHAPE */
  int in_min, in_max;       /* inputs it takes; in_max -1: any number */
  /* Outputs it makes; -1: one per entry of its "sizes" attribute (split);
   * -2: as many as its subgraphs return (if, loop). */
  int n_out;
  /* The dtypes its first input accepts: bit (1u << d) for each
   * loom_dtype_t d (others are checked by its shape rule). */
  uint32_t dtypes;
  uint32_t flags;           /* loom_op_flag_t bits */
  int n_attrs;              /* attributes: loom_op_get_attr(i, 0..n_attrs-1) */
} loom_op_info_t;
#define LOOM_OP_INFO_INIT {.size = sizeof(loom_op_info_t)}
LOOM_API loom_status_t loom_op_get_info(int i, loom_op_info_t *out);

/* ---- Back ends ------------------------------------------------------------ */

/* The back ends Loom compiles for (loom_compile_options_t.target): how
 * many, and the name of the i-th ("cpu", "ref"; NULL when out of range). */
LOOM_API int loom_target_count(void);
LOOM_API const char *loom_target_name(int i);
/* The instruction set back end `target` (NULL: "cpu") runs its kernels
 * with on this machine: "avx512", "avx2" or "portable" for the CPU; NULL
 * for a target with none to name or no such target. */
LOOM_API const char *loom_target_isa(const char *target);
/* Whether back end `target` (NULL: the default, "cpu") generates code for
 * op: *out 1, or 0 when op runs its reference kernel there. Fails on an op
 * index out of range or a target no back end has (naming those there are). */
LOOM_API loom_status_t loom_op_generated(int op, const char *target, int *out);

/* ---- Attributes ----------------------------------------------------------- */

typedef enum loom_attr_kind {
  LOOM_ATTR_INT,   /* an int64_t */
  LOOM_ATTR_FLOAT, /* a double */
  LOOM_ATTR_INTS,  /* a list of at most LOOM_MAX_ATTR_INTS int64_t */
  LOOM_ATTR_DTYPE, /* a loom_dtype_t */
  LOOM_ATTR_GRAPH, /* a loom_graph_t *: a subgraph the op runs (if, loop) */
} loom_attr_kind_t;

#define LOOM_MAX_ATTR_INTS 16

/* Attribute k of an op (a versioned struct: loom.h). An optional
 * attribute left out takes its default when it has one (has_default);
 * one without a default means something of its own when left out, which
 * the op's doc says ("all axes" for a reduction's axes). */
typedef struct loom_attr_info {
  size_t size;           /* sizeof(loom_attr_info_t): the caller sets it */
  const char *name;
  loom_attr_kind_t kind;
  int optional;          /* 1: may be left out */
  int has_default;
  int64_t default_int;   /* LOOM_ATTR_INT and LOOM_ATTR_DTYPE */
  double default_float;  /* LOOM_ATTR_FLOAT */
  int n_default_ints;    /* LOOM_ATTR_INTS: entries of default_ints */
  int64_t default_ints[LOOM_MAX_ATTR_INTS];
  /* The default as the op table writes it ("0.01", "1,1", "i64"); "" when
   * there is none. */
  const char *default_text;
} loom_attr_info_t;
#define LOOM_ATTR_INFO_INIT {.size = sizeof(loom_attr_info_t)}

/* Number of attributes of op, or -1 when op is not an op's number. */
LOOM_API int loom_op_attr_count(int op);
LOOM_API loom_status_t loom_op_get_attr(int op, int k, loom_attr_info_t *out);
/* "int", "float", "ints", "dtype", "graph"; "?" out of range. */
LOOM_API const char *loom_attr_kind_name(loom_attr_kind_t kind);

/* ---- Building any op by name ---------------------------------------------- */

/* A named attribute value for loom_graph_add_op; kind says which field
 * holds it. The helpers below fill one. */
typedef struct loom_attr {
  const char *name;
  loom_attr_kind_t kind;
  int64_t i;            /* LOOM_ATTR_INT; LOOM_ATTR_DTYPE: a loom_dtype_t */
  double f;             /* LOOM_ATTR_FLOAT */
  int n;                /* LOOM_ATTR_INTS: entries of ints */
  const int64_t *ints;  /* LOOM_ATTR_INTS (borrowed during the call) */
  loom_graph_t *graph;  /* LOOM_ATTR_GRAPH */
} loom_attr_t;

static inline loom_attr_t loom_attr_int(const char *name, int64_t v) {
  loom_attr_t a = {name, LOOM_ATTR_INT, v, 0, 0, NULL, NULL};
  return a;
}
static inline loom_attr_t loom_attr_float(const char *name, double v) {
  loom_attr_t a = {name, LOOM_ATTR_FLOAT, 0, v, 0, NULL, NULL};
  return a;
}
static inline loom_attr_t loom_attr_ints(const char *name, int n, const int64_t *v) {
  loom_attr_t a = {name, LOOM_ATTR_INTS, 0, 0, n, v, NULL};
  return a;
}
static inline loom_attr_t loom_attr_dtype(const char *name, loom_dtype_t v) {
  loom_attr_t a = {name, LOOM_ATTR_DTYPE, (int64_t)v, 0, 0, NULL, NULL};
  return a;
}
static inline loom_attr_t loom_attr_graph(const char *name, loom_graph_t *v) {
  loom_attr_t a = {name, LOOM_ATTR_GRAPH, 0, 0, 0, NULL, v};
  return a;
}

/* Appends a node of the op called op_name to g: inputs in[0..n_in-1],
 * attributes attrs[0..n_attrs-1] by name in any order (each of the op's
 * attributes at most once; optional ones may be left out), and writes its
 * outputs into out[0..*n_out-1] (out_cap: room in out, which must hold
 * every output; n_out may be NULL). Arity, dtypes, attribute names and
 * kinds, and shapes are checked as the builders of ops.h check them; a
 * failure names the op and what was wrong.
 * Graph attributes pass subgraphs as loom_if does: g takes them over,
 * also when the call fails (they are destroyed), except one that
 * already belongs to a graph, which is left alone.
 *   loom_attr_t a[] = {loom_attr_ints("axes", 1, (int64_t[]){1}),
 *                      loom_attr_int("keepdim", 1)};
 *   loom_graph_add_op(g, "sum", 1, &x, 2, a, 1, &y, NULL);
 * Calls that build several nodes (train.h's losses and optimizers) are
 * not ops of the table: they have no name here. */
LOOM_API loom_status_t loom_graph_add_op(loom_graph_t *g, const char *op_name, int n_in,
                                         const loom_value_t *in, int n_attrs,
                                         const loom_attr_t *attrs, int out_cap,
                                         loom_value_t *out, int *n_out);
/* The same, the op given by its number (loom_op_find): a binding that
 * looks its ops up once records each node without a name lookup. */
LOOM_API loom_status_t loom_graph_add_op_index(loom_graph_t *g, int op, int n_in,
                                               const loom_value_t *in, int n_attrs,
                                               const loom_attr_t *attrs, int out_cap,
                                               loom_value_t *out, int *n_out);

#ifdef __cplusplus
}
#endif

#endif
