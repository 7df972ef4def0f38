/* Generated code for nodes that read one value at several operand
 * positions: batch_norm(x, c, c, c, c), add(a, a), concat(x, x, x),
 * scatter_add(t, t, t). Every op of the op table is built with all of its
 * same-typed inputs aliased to one value, compiled, and must run its
 * generated code wherever the code generator has a rule for the node
 * (no fallback to reference kernels after a failed compile) and agree
 * with the interpreter.
 *
 * Two ways to alias: the value itself passed twice (passes off, so that
 * the node reaches the code generator as built), and identical constants
 * that the pass pipeline's CSE merges into one value. All ops go into one
 * graph per way, compiled once (the compiler runs twice, not a hundred
 * times; ops that may keep a graph in the interpreter, nonzero, loop and
 * assign, get graphs of their own); when that graph's module fails, each
 * op is compiled alone to name the culprits. The op table's codegen
 * column is checked against the generator on the way. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/codegen/codegen.h"
#include "core/status.h"
#include "harness.h"
#include "ir/ir.h"
#include "runtime/executable.h"

/* ---- Values ---------------------------------------------------------------- */

/* The typed values recipes take: inputs naming the same one are aliased. */
typedef struct arg {
  loom_dtype_t dtype;
  int rank;
  int64_t shape[4];
  double lo, hi; /* the data's range: positive floats suit log, sqrt, pow, div */
} arg_t;

enum {
  F34,   /* f32 (3, 4) */
  F4,    /* f32 (4) */
  B34,   /* bool (3, 4) */
  X2344, /* batch_norm's x */
  C3,    /* its per-channel vectors */
  C2,    /* a conv2d bias */
  I33,   /* i64 (3, 3) in [0, 2]: data and indices at once */
  I3,    /* i64 (3) in [0, 2] */
  D33,   /* i64 (3, 3) in [1, 5]: divisors */
  S,     /* an i64 scalar: a seed, an offset */
  SB,    /* a bool scalar that is true */
  T,     /* an i64 scalar trip count */
  W2233, /* conv2d's x and weight at once */
  P1244, /* a pool's x and dy at once */
  Q314,  /* f32 (3, 1, 4), for squeeze */
  E14,   /* f32 (1, 4), for expand */
  U34,   /* f32 (3, 4) in (-1, 1): asin, acos, atanh */
  ARG_COUNT
};

static const arg_t args[ARG_COUNT] = {
    [F34] = {LOOM_F32, 2, {3, 4}, 0.5, 2},       [F4] = {LOOM_F32, 1, {4}, 0.5, 2},
    [B34] = {LOOM_BOOL, 2, {3, 4}, 0, 1},        [X2344] = {LOOM_F32, 4, {2, 3, 4, 4}, -2, 2},
    [C3] = {LOOM_F32, 1, {3}, 0.5, 2},           [C2] = {LOOM_F32, 1, {2}, -1, 1},
    [I33] = {LOOM_I64, 2, {3, 3}, 0, 2},         [I3] = {LOOM_I64, 1, {3}, 0, 2},
    [D33] = {LOOM_I64, 2, {3, 3}, 1, 5},         [S] = {LOOM_I64, 0, {0}, 1, 9},
    [SB] = {LOOM_BOOL, 0, {0}, 1, 1},            [T] = {LOOM_I64, 0, {0}, 3, 3},
    [W2233] = {LOOM_F32, 4, {2, 2, 3, 3}, -1, 1}, [P1244] = {LOOM_F32, 4, {1, 2, 4, 4}, -2, 2},
    [Q314] = {LOOM_F32, 3, {3, 1, 4}, -2, 2},     [E14] = {LOOM_F32, 2, {1, 4}, -2, 2},
    [U34] = {LOOM_F32, 2, {3, 4}, -0.9, 0.9},
};

/* The data of arg a: the same numbers every time, so that constants made
 * for two inputs naming a are identical (and CSE merges them). */
static loom_tensor_t *arg_data(int a) {
  const arg_t *x = &args[a];
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) n *= x->shape[d];
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  test_seed(1000 + (uint64_t)a);
  for (int64_t i = 0; i < n; i++)
    v[i] = dtype_is_float(x->dtype) ? test_rand_uniform(x->lo, x->hi)
                                    : (double)test_rand_int((int64_t)x->lo, (int64_t)x->hi);
  loom_tensor_t *t = test_tensor(x->dtype, x->rank, x->shape, v);
  free(v);
  return t;
}

/* ---- Recipes: one node of an op, with its inputs and attributes ----------- */

typedef struct recipe recipe_t;
/* Builds the node over value ids in[] into g; its outputs into out[]. */
typedef loom_status_t (*build_fn)(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                  int32_t *out, int *n_out);

struct recipe {
  const char *op;    /* its name in the op table */
  const char *attrs; /* "name=value ..." (ints: "1,2"); kinds from the op's schema */
  int n_in;
  int arg[5];     /* the value of each input: equal entries are aliased */
  build_fn build; /* NULL: ir_add_node with op and attrs */
};

static loom_comm_t *comm; /* the collectives' (main) */

static loom_status_t build_if(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                              int32_t *out, int *n_out);
static loom_status_t build_loop(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                int32_t *out, int *n_out);
static loom_status_t build_assign(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                  int32_t *out, int *n_out);
static loom_status_t build_nonzero(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                   int32_t *out, int *n_out);
static loom_status_t build_all_reduce_halves(loom_graph_t *g, const recipe_t *r,
                                             const int32_t *in, int32_t *out, int *n_out);

#define UNARY(name) {name, "", 1, {F34}, NULL}
#define BINARY(name) {name, "", 2, {F34, F34}, NULL}

static const recipe_t recipes[] = {
    UNARY("neg"), UNARY("abs"), UNARY("exp"), UNARY("log"), UNARY("log1p"), UNARY("expm1"), UNARY("sqrt"), UNARY("rsqrt"),
    UNARY("reciprocal"), UNARY("tanh"), UNARY("sigmoid"), UNARY("relu"),
    {"leaky_relu", "alpha=0.1", 1, {F34}, NULL}, {"elu", "alpha=0.5", 1, {F34}, NULL},
    UNARY("gelu"), UNARY("gelu_tanh"), UNARY("silu"), UNARY("softplus"), UNARY("sin"),
    UNARY("cos"), UNARY("tan"), UNARY("atan"), UNARY("sinh"), UNARY("cosh"), UNARY("asinh"),
    UNARY("acosh"), {"asin", "", 1, {U34}, NULL}, {"acos", "", 1, {U34}, NULL},
    {"atanh", "", 1, {U34}, NULL}, UNARY("erf"), UNARY("floor"), UNARY("ceil"), UNARY("round"), UNARY("sign"),
    UNARY("not"), {"bitwise_not", "", 1, {I33}, NULL}, UNARY("isnan"), UNARY("identity"), UNARY("stop_gradient"),
    {"cast", "dtype=1", 1, {F34}, NULL}, {"clamp", "min=0.7 max=1.5", 1, {F34}, NULL},
    BINARY("add"), BINARY("sub"), BINARY("mul"), BINARY("div"), BINARY("pow"),
    BINARY("maximum"), BINARY("minimum"), BINARY("mod"), BINARY("eq"), BINARY("ne"),
    BINARY("lt"), BINARY("le"), BINARY("gt"), BINARY("ge"), BINARY("and"), BINARY("or"),
    BINARY("xor"), {"bitwise_and", "", 2, {I33, I33}, NULL},
    {"bitwise_or", "", 2, {B34, B34}, NULL}, {"bitwise_xor", "", 2, {I33, I33}, NULL},
    {"bitshift_left", "", 2, {I33, I33}, NULL}, {"bitshift_right", "", 2, {D33, D33}, NULL},
    {"div", "", 2, {D33, D33}, NULL}, {"mod", "", 2, {D33, D33}, NULL},
    {"where", "", 3, {B34, F34, F34}, NULL},
    {"sum", "axes=1", 1, {F34}, NULL}, {"sum", "axes=0", 1, {F34}, NULL},
    {"mean", "axes=1", 1, {F34}, NULL}, {"max", "axes=1", 1, {F34}, NULL},
    {"min", "axes=1", 1, {F34}, NULL}, {"prod", "axes=1", 1, {F34}, NULL},
    {"logsumexp", "axes=1", 1, {F34}, NULL}, {"variance", "axes=1", 1, {F34}, NULL},
    {"argmax", "axis=1", 1, {F34}, NULL}, {"argmin", "axis=1", 1, {F34}, NULL},
    {"cumsum", "axis=1", 1, {F34}, NULL}, {"topk", "k=2 axis=1", 1, {F34}, NULL},
    {"matmul", "trans_b=1", 2, {F34, F34}, NULL},
    {"conv2d", "", 2, {W2233, W2233}, NULL}, {"conv2d", "", 3, {W2233, W2233, C2}, NULL},
    {"conv_transpose2d", "", 2, {W2233, W2233}, NULL},
    {"conv2d_weight_grad", "kernel=1,1", 2, {W2233, W2233}, NULL},
    {"max_pool2d", "kernel=2,2 stride=2,2", 1, {P1244}, NULL},
    {"avg_pool2d", "kernel=2,2 stride=2,2", 1, {P1244}, NULL},
    {"global_avg_pool", "", 1, {P1244}, NULL},
    {"max_pool2d_grad", "kernel=1,1", 2, {P1244, P1244}, NULL},
    {"avg_pool2d_grad", "kernel=1,1", 2, {P1244, P1244}, NULL},
    {"softmax", "axis=1", 1, {F34}, NULL}, {"log_softmax", "axis=1", 1, {F34}, NULL},
    {"layer_norm", "axis=0", 3, {F4, F4, F4}, NULL}, {"rms_norm", "axis=0", 2, {F4, F4}, NULL},
    {"batch_norm", "training=1", 5, {X2344, C3, C3, C3, C3}, NULL},
    {"batch_norm", "training=0", 5, {X2344, C3, C3, C3, C3}, NULL},
    {"reshape", "shape=4,3", 1, {F34}, NULL}, UNARY("transpose"),
    {"expand", "shape=3,4", 1, {E14}, NULL}, {"squeeze", "", 1, {Q314}, NULL},
    {"unsqueeze", "axes=0", 1, {F34}, NULL},
    {"slice", "starts=1 ends=3 axes=1", 1, {F34}, NULL},
    {"concat", "axis=0", 3, {F34, F34, F34}, NULL},
    {"split", "axis=0 sizes=1,2", 1, {F34}, NULL},
    {"pad", "pads=1,0,0,2", 1, {F34}, NULL}, {"flip", "axes=0", 1, {F34}, NULL},
    {"tile", "repeats=2,1", 1, {F34}, NULL},
    {"gather", "axis=0", 2, {I33, I33}, NULL}, {"index_select", "axis=0", 2, {I3, I3}, NULL},
    {"scatter_add", "axis=0", 3, {I33, I33, I33}, NULL}, {"embedding", "", 2, {I33, I33}, NULL},
    {"one_hot", "depth=3", 1, {I3}, NULL},
    {"arange", "limit=5", 0, {0}, NULL}, {"full", "shape=3,4 value=2", 0, {0}, NULL},
    {"random_uniform", "shape=3,4", 2, {S, S}, NULL},
    {"random_normal", "shape=3,4", 2, {S, S}, NULL},
    {"dropout", "p=0.5", 3, {F34, S, S}, NULL}, {"nonzero", "", 1, {F34}, build_nonzero},
    {"if", "", 3, {SB, F34, F34}, build_if}, {"loop", "", 3, {T, F34, F34}, build_loop},
    {"assign", "", 2, {F34, F34}, build_assign},
    /* last: left out in a build without MPI (n_recipes) */
    {"all_reduce", "comm=1 ranks=1 reduce=1", 1, {F34}, NULL},
    {"broadcast", "comm=1 ranks=1", 1, {F34}, NULL},
    {"all_gather", "comm=1 ranks=1", 1, {F34}, NULL},
    {"reduce_scatter", "comm=1 ranks=1", 1, {F34}, NULL},
    {"all_reduce_start", "", 1, {F34}, build_all_reduce_halves},
    {"all_reduce_wait", "", 1, {F34}, build_all_reduce_halves},
};
enum { N_RECIPES = sizeof recipes / sizeof *recipes, N_COLLECTIVES = 6 };
/* The recipes this build runs; the collectives run on a communicator of
 * this process alone (id 1). */
static int n_recipes = N_RECIPES - N_COLLECTIVES;

static int op_of(const char *name) {
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (!strcmp(ir_ops[i].name, name)) return i;
  return -1;
}

/* The kind of attribute name (len bytes) in op's schema; false when it
 * has none of that name. */
static bool attr_kind(int op, const char *name, size_t len, loom_attr_kind_t *kind) {
  char buf[IR_ATTR_NAME];
  snprintf(buf, sizeof buf, "%.*s", (int)len, name);
  const ir_attr_spec_t *spec = ir_op_attr_spec((ir_op_t)op, buf);
  if (spec) *kind = spec->kind;
  return spec != NULL;
}

/* "axes=1 keepdim=0 kernel=2,2" into attrs, typed by the schema. */
static bool parse_attrs(int op, const char *text, ir_attrs_t *a) {
  *a = (ir_attrs_t){0};
  for (const char *p = text; *p;) {
    size_t len = strcspn(p, "=");
    const char *v = p + len + 1;
    loom_attr_kind_t kind;
    if (!attr_kind(op, p, len, &kind) || !p[len]) return false;
    char name[IR_ATTR_NAME];
    snprintf(name, sizeof name, "%.*s", (int)len, p);
    if (kind == LOOM_ATTR_INTS) {
      int64_t ints[IR_MAX_ATTR_INTS];
      int n = 0;
      for (char *end; n < IR_MAX_ATTR_INTS; v = end + 1) {
        ints[n++] = strtoll(v, &end, 10);
        if (*end != ',') break;
      }
      ir_attrs_ints(a, name, n, ints);
    } else if (kind != LOOM_ATTR_FLOAT) {
      ir_attrs_int(a, name, strtoll(v, NULL, 10));
    } else {
      ir_attrs_float(a, name, strtod(v, NULL));
    }
    p = v + strcspn(v, " ");
    p += *p == ' ';
  }
  return true;
}

static loom_status_t build_node(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                int32_t *out, int *n_out) {
  int op = op_of(r->op);
  ir_attrs_t a;
  if (op < 0 || !parse_attrs(op, r->attrs, &a))
    return loom_fail(LOOM_ERR_INVALID, "recipe %s: bad op or attributes '%s'", r->op, r->attrs);
  LOOM_TRY(ir_add_node(g, (ir_op_t)op, r->n_in, in, &a, out, 8));
  *n_out = g->nodes[g->n_nodes - 1].n_out;
  return LOOM_OK;
}

/* A subgraph of two (3, 4) f32 inputs (after `lead` scalars) returning
 * their sum and product, and, for a loop body, the cond first. */
static loom_status_t pair_body(loom_graph_t **out, int lead) {
  loom_graph_t *b;
  LOOM_TRY(loom_graph_create(&b));
  loom_value_t in[4], sum, prod;
  static const loom_dtype_t lead_dtypes[2] = {LOOM_I64, LOOM_BOOL};
  loom_status_t s = LOOM_OK;
  for (int i = 0; i < lead && s == LOOM_OK; i++)
    s = loom_graph_input(b, i ? "cond" : "iter", lead_dtypes[i], 0, NULL, &in[i]);
  for (int i = 0; i < 2 && s == LOOM_OK; i++)
    s = loom_graph_input(b, i ? "y" : "x", LOOM_F32, 2, args[F34].shape, &in[lead + i]);
  if (s == LOOM_OK) s = loom_add(b, in[lead], in[lead + 1], &sum);
  if (s == LOOM_OK) s = loom_mul(b, in[lead], in[lead + 1], &prod);
  if (s == LOOM_OK && lead) s = loom_graph_output(b, in[1]);
  if (s == LOOM_OK) s = loom_graph_output(b, sum);
  if (s == LOOM_OK) s = loom_graph_output(b, prod);
  if (s != LOOM_OK) loom_graph_destroy(b);
  *out = s == LOOM_OK ? b : NULL;
  return s;
}

static loom_status_t build_if(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                              int32_t *out, int *n_out) {
  (void)r;
  loom_graph_t *then_g, *else_g;
  LOOM_TRY(pair_body(&then_g, 0));
  loom_status_t s = pair_body(&else_g, 0);
  if (s != LOOM_OK) {
    loom_graph_destroy(then_g);
    return s;
  }
  loom_value_t x[2] = {{in[1]}, {in[2]}}, y[2];
  LOOM_TRY(loom_if(g, (loom_value_t){in[0]}, then_g, else_g, 2, x, 2, y));
  out[0] = y[0].id, out[1] = y[1].id, *n_out = 2;
  return LOOM_OK;
}

static loom_status_t build_loop(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                int32_t *out, int *n_out) {
  (void)r;
  loom_graph_t *body;
  LOOM_TRY(pair_body(&body, 2));
  loom_value_t init[2] = {{in[1]}, {in[2]}}, y[2];
  LOOM_TRY(loom_loop(g, (loom_value_t){in[0]}, LOOM_NO_VALUE, body, 2, init, 0, NULL, 2, y));
  out[0] = y[0].id, out[1] = y[1].id, *n_out = 2;
  return LOOM_OK;
}

/* assign(p, p) of a parameter p, and p as the output (an assign has none). */
static loom_status_t build_assign(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                  int32_t *out, int *n_out) {
  (void)r, (void)in;
  loom_tensor_t *init = arg_data(F34);
  loom_value_t p;
  loom_status_t s = loom_graph_param(g, "p", LOOM_F32, 2, args[F34].shape, init, &p);
  loom_tensor_destroy(init);
  LOOM_TRY(s);
  LOOM_TRY(loom_assign(g, p, p));
  out[0] = p.id, *n_out = 1;
  return LOOM_OK;
}

/* nonzero, summed: compiled graphs take only outputs of known shapes. */
static loom_status_t build_nonzero(loom_graph_t *g, const recipe_t *r, const int32_t *in,
                                   int32_t *out, int *n_out) {
  (void)r;
  loom_value_t idx, total;
  LOOM_TRY(loom_nonzero(g, (loom_value_t){in[0]}, &idx));
  LOOM_TRY(loom_sum(g, idx, 0, NULL, 0, &total));
  out[0] = total.id, *n_out = 1;
  return LOOM_OK;
}

/* A start and its wait: only the wait may read the start's value. */
static loom_status_t build_all_reduce_halves(loom_graph_t *g, const recipe_t *r,
                                             const int32_t *in, int32_t *out, int *n_out) {
  (void)r;
  loom_value_t started, sum;
  LOOM_TRY(loom_all_reduce_start(g, comm, (loom_value_t){in[0]}, LOOM_COMM_MEAN, &started));
  LOOM_TRY(loom_all_reduce_wait(g, comm, started, &sum));
  out[0] = sum.id, *n_out = 1;
  return LOOM_OK;
}

/* Ops whose graph runs in the interpreter by design (a data-dependent
 * shape, state) are built into graphs of their own. */
static bool builds_alone(const recipe_t *r) {
  int op = op_of(r->op);
  return op >= 0 && (ir_ops[op].flags & (F_DATA_SHAPE | F_SIDE_EFFECT));
}

/* ---- A graph of recipes ---------------------------------------------------- */

typedef enum alias_way {
  SAME_VALUE,       /* one graph input passed at each aliased position; passes off */
  MERGED_CONSTANTS, /* identical constants that CSE merges; passes on */
} alias_way_t;

#define MAX_IO 512

typedef struct alias_graph {
  loom_graph_t *g;
  int n_inputs, n_outputs;
  loom_tensor_t *inputs[MAX_IO];
} alias_graph_t;

static void alias_graph_free(alias_graph_t *a) {
  loom_graph_destroy(a->g);
  for (int i = 0; i < a->n_inputs; i++) loom_tensor_destroy(a->inputs[i]);
  *a = (alias_graph_t){0};
}

static loom_status_t new_input(alias_graph_t *a, int arg, int32_t *id) {
  if (a->n_inputs == MAX_IO) return loom_fail(LOOM_ERR_INVALID, "more than %d inputs", MAX_IO);
  char name[32];
  snprintf(name, sizeof name, "in%d", a->n_inputs);
  loom_value_t v;
  LOOM_TRY(loom_graph_input(a->g, name, args[arg].dtype, args[arg].rank, args[arg].shape, &v));
  a->inputs[a->n_inputs++] = arg_data(arg);
  *id = v.id;
  return LOOM_OK;
}

static loom_status_t new_constant(alias_graph_t *a, int arg, int32_t *id) {
  loom_tensor_t *t = arg_data(arg);
  loom_value_t v;
  loom_status_t s = loom_graph_constant(a->g, t, &v);
  loom_tensor_destroy(t);
  *id = v.id;
  return s;
}

/* The values recipe r's inputs take: one graph input per distinct arg;
 * or, merging constants, the first input's arg as a graph input (a node
 * of constants only would be folded away) and a constant of its own for
 * every other position. */
static loom_status_t recipe_inputs(alias_graph_t *a, const recipe_t *r, alias_way_t way,
                                   int32_t *in) {
  for (int i = 0; i < r->n_in; i++) {
    int j = 0;
    while (j < i && r->arg[j] != r->arg[i]) j++;
    bool input = way == SAME_VALUE || r->arg[i] == r->arg[0];
    if (j < i && input) in[i] = in[j];
    else if (input) LOOM_TRY(new_input(a, r->arg[i], &in[i]));
    else LOOM_TRY(new_constant(a, r->arg[i], &in[i]));
  }
  return LOOM_OK;
}

static loom_status_t add_recipe(alias_graph_t *a, const recipe_t *r, alias_way_t way) {
  int32_t in[5], out[8];
  int n_out = 0;
  LOOM_TRY(recipe_inputs(a, r, way, in));
  LOOM_TRY((r->build ? r->build : build_node)(a->g, r, in, out, &n_out));
  if (a->n_outputs + n_out > MAX_IO)
    return loom_fail(LOOM_ERR_INVALID, "more than %d outputs", MAX_IO);
  for (int k = 0; k < n_out; k++) LOOM_TRY(loom_graph_output(a->g, (loom_value_t){out[k]}));
  a->n_outputs += n_out;
  return LOOM_OK;
}

/* A graph of recipes [first, last) that pick(recipe) accepts. */
static loom_status_t build_graph(alias_graph_t *a, int first, int last, alias_way_t way,
                                 bool (*pick)(const recipe_t *)) {
  *a = (alias_graph_t){0};
  LOOM_TRY(loom_graph_create(&a->g));
  for (int i = first; i < last; i++) {
    if (!pick(&recipes[i])) continue;
    loom_status_t s = add_recipe(a, &recipes[i], way);
    if (s != LOOM_OK)
      return loom_fail(s, "recipe %d (%s %s): %s", i, recipes[i].op, recipes[i].attrs,
                       loom_last_error());
  }
  return LOOM_OK;
}

/* ---- Checks ------------------------------------------------------------------ */

static bool near_enough(double got, double want, loom_dtype_t d, double scale) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (isinf(got) || isinf(want)) return got == want;
  double atol = d == LOOM_F32 ? 1e-5 * scale : d == LOOM_F64 ? 1e-12 * scale : 0;
  return fabs(got - want) <= atol;
}

static void check_output(const char *what, int k, const loom_tensor_t *got,
                         const loom_tensor_t *want) {
  test_checks++;
  double scale = 1;
  for (int64_t i = 0; i < loom_tensor_numel(want); i++)
    if (isfinite(test_get(want, i)) && fabs(test_get(want, i)) > scale)
      scale = fabs(test_get(want, i));
  for (int64_t i = 0; i < loom_tensor_numel(want); i++)
    if (!near_enough(test_get(got, i), test_get(want, i), loom_tensor_dtype(want), scale)) {
      test_fail(__FILE__, __LINE__, "%s: output %d element %lld: compiled %.9g, interpreter %.9g",
                what, k, (long long)i, test_get(got, i), test_get(want, i));
      return;
    }
}

/* Steps on reference kernels whose node the code generator has a rule
 * for: each is reported. Returns how many. */
static int misplaced_reference_steps(const char *what, const loom_executable_t *e) {
  int n = 0;
  for (int i = 0; i < e->n_steps; i++) {
    const step_t *st = &e->steps[i];
    if (!rt_step_is_reference(e, st)) continue;
    int32_t node = e->plan.groups[st->group].nodes[0];
    if (!cg_supports(e->graph, node)) continue;
    test_fail(__FILE__, __LINE__, "%s: %s ran its reference kernel, though the code "
              "generator has a rule for it", what, ir_ops[e->graph->nodes[node].op].name);
    n++;
  }
  return n;
}

/* What the generator says it generates per op (cg_op_generated, which
 * loom_op_get_info's has_codegen reports) covers every node it handles. */
static void check_table_says_generated(const loom_graph_t *g) {
  for (int64_t i = 0; i < g->n_nodes; i++) {
    const ir_op_info_t *op = &ir_ops[g->nodes[i].op];
    test_checks++;
    if (cg_supports(g, i) && !cg_op_generated(g->nodes[i].op))
      test_fail(__FILE__, __LINE__, "%s is generated, but cg_op_generated says it is not",
                op->name);
  }
}

typedef enum outcome { GENERATED, NO_COMPILER, FAILED } outcome_t;

/* Compiles a, runs it and compares every output with the interpreter's;
 * the module must compile, and nodes the generator handles must run
 * generated code. */
static outcome_t check_graph(const char *what, alias_graph_t *a, alias_way_t way) {
  loom_tensor_t *want[MAX_IO] = {0}, *got[MAX_IO] = {0};
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.passes = way == MERGED_CONSTANTS;
  loom_executable_t *e = NULL;
  int failures = test_failures;
  CHECK_OK(loom_interpret(a->g, a->n_inputs, a->inputs, a->n_outputs, want));
  if (way == SAME_VALUE) check_table_says_generated(a->g);
  CHECK_OK(loom_compile(a->g, &o, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e) CHECK_OK(loom_executable_info(e, &info));
  bool no_cc = info.fallback == LOOM_FALLBACK_NO_CC;
  test_checks++;
  if (e && info.fallback != LOOM_FALLBACK_NONE && !no_cc)
    test_fail(__FILE__, __LINE__, "%s: %s: %s", what, loom_fallback_name(info.fallback),
              info.fallback_reason);
  if (e && !no_cc && info.fallback == LOOM_FALLBACK_NONE) misplaced_reference_steps(what, e);
  if (e && a->n_outputs > 20)
    printf("  %s: %d nodes, %d generated steps, %d on reference kernels (no rule)\n", what,
           info.n_nodes, info.n_generated, info.n_reference);
  for (int k = 0; e && k < a->n_outputs; k++) CHECK_OK(loom_executable_new_output(e, k, &got[k]));
  if (e && test_failures == failures)
    CHECK_OK(loom_executable_run(e, a->n_inputs, a->inputs, a->n_outputs, got));
  for (int k = 0; test_failures == failures && k < a->n_outputs; k++)
    check_output(what, k, got[k], want[k]);
  for (int k = 0; k < a->n_outputs; k++) {
    loom_tensor_destroy(want[k]);
    loom_tensor_destroy(got[k]);
  }
  loom_executable_destroy(e);
  return no_cc ? NO_COMPILER : test_failures == failures ? GENERATED : FAILED;
}

static bool together(const recipe_t *r) { return !builds_alone(r); }
static bool any_recipe(const recipe_t *r) { return r != NULL; }

/* Compiles each recipe alone, so that a failure names its op. */
static void check_each(alias_way_t way) {
  for (int i = 0; i < n_recipes; i++) {
    alias_graph_t a;
    char what[96];
    snprintf(what, sizeof what, "%s %s", recipes[i].op, recipes[i].attrs);
    CHECK_OK(build_graph(&a, i, i + 1, way, any_recipe));
    if (a.g) check_graph(what, &a, way);
    alias_graph_free(&a);
  }
}

static void check_way(alias_way_t way) {
  const char *name = way == SAME_VALUE ? "one value at each position" : "merged constants";
  alias_graph_t a;
  CHECK_OK(build_graph(&a, 0, n_recipes, way, together));
  outcome_t o = a.g ? check_graph(name, &a, way) : FAILED;
  alias_graph_free(&a);
  if (o == NO_COMPILER) {
    printf("  skipped: no C compiler\n");
    return;
  }
  if (o == FAILED) {
    printf("  the graph of all ops failed; each op alone:\n");
    check_each(way);
    return;
  }
  for (int i = 0; i < n_recipes; i++) {
    if (!builds_alone(&recipes[i])) continue;
    CHECK_OK(build_graph(&a, i, i + 1, way, any_recipe));
    if (a.g) check_graph(recipes[i].op, &a, way);
    alias_graph_free(&a);
  }
}

/* Every op of the table has a recipe, and every recipe builds. */
static void every_op_has_a_recipe(void) {
  for (int op = 0; op < IR_OP_COUNT; op++) {
    int found = 0;
    for (int i = 0; i < n_recipes; i++) found += !strcmp(recipes[i].op, ir_ops[op].name);
    if (!comm && (ir_ops[op].flags & F_COLLECTIVE)) continue; /* built without MPI */
    test_checks++;
    if (!found) test_fail(__FILE__, __LINE__, "op %s has no recipe here", ir_ops[op].name);
  }
}

static void aliased_values_compile(void) { check_way(SAME_VALUE); }
static void merged_constants_compile(void) { check_way(MERGED_CONSTANTS); }

int main(void) {
  if (loom_comm_world(&comm) == LOOM_OK) n_recipes = N_RECIPES;
  else printf("no communicator (%s): the collectives are left out\n", loom_last_error());
  TEST_RUN(every_op_has_a_recipe);
  TEST_RUN(aliased_values_compile);
  TEST_RUN(merged_constants_compile);
  loom_comm_destroy(comm);
  return test_summary();
}
