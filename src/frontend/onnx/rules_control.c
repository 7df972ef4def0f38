/* Rules for ONNX's control flow: If, Loop and Scan onto Loom's if and
 * loop ops. An ONNX body reads outer values by name; a Loom body sees
 * only its inputs, so each outer value a body reads (load.c finds them)
 * becomes an extra input of the body, passed in by the op (a loop's
 * invariants), or, when it is a small constant, a constant of the body,
 * so that shape arithmetic in the body still folds when the model loads.
 * An If whose condition is known when the model loads imports only the
 * taken branch, inline; a short Loop of known length is unrolled. */
#include <string.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/ir.h"

/* Constants up to this many elements are copied into a body instead of
 * passed in (a Reshape's shape, a Slice's starts); larger ones, weights,
 * are passed in, so that no body holds a second copy. */
#define COPY_CONST_MAX 4096
/* Scan inputs and outputs (and opset 8's batch) a node may have. */
#define SCAN_MAX 64
/* Loops of a known trip count up to this are unrolled. */
#define UNROLL_MAX 16

/* ---- Types across graphs ------------------------------------------------------- */

/* Dim d of graph `from` as a dim of `to`: symbols by name (as Loom
 * matches a body's types with its owner's), expressions rebuilt. */
static loom_status_t dim_across(loom_graph_t *to, const loom_graph_t *from, loom_dim_t d,
                                loom_dim_t *out) {
  const ir_expr_t *e = ir_dim_is_sym(d) ? ir_dim_expr(from, d) : NULL;
  if (!e || e->kind == IR_EXPR_CONST) {
    *out = e ? e->c : d;
    return LOOM_OK;
  }
  if (e->kind == IR_EXPR_SYM) return ir_dim_symbol(to, e->name, out);
  loom_dim_t a, b;
  LOOM_TRY(dim_across(to, from, e->a, &a));
  LOOM_TRY(dim_across(to, from, e->b, &b));
  if (e->kind == IR_EXPR_ADD) return ir_dim_add(to, a, b, out);
  if (e->kind == IR_EXPR_MUL) return ir_dim_mul(to, a, b, out);
  return ir_dim_floordiv(to, a, b, out);
}

/* Sequences live only while the model loads: a Loom body, run later,
 * cannot take or return one (a loop short enough to unroll can). */
static loom_status_t seq_fail(const ox_node_t *n, const char *name) {
  return ox_fail(n, LOOM_ERR_UNSUPPORTED, "'%s' is a sequence; sequences cannot cross into or "
                 "out of a loop or branch that runs as Loom control flow", name ? name : "");
}

/* An input of body typed as v of n->g, less axis `drop` (-1: none; a
 * scan input's slice drops its scan axis). name: the ONNX name (inputs
 * of a Loom graph have unique names, as ONNX's do), or NULL. */
loom_status_t ox_input_like(ox_node_t *n, loom_graph_t *body, const char *name,
                            loom_value_t v, int drop, loom_value_t *out) {
  loom_dtype_t dt;
  int rank, r = 0;
  loom_dim_t dims[LOOM_MAX_RANK], mine[LOOM_MAX_RANK];
  if (ox_is_seq(v)) return seq_fail(n, name);
  LOOM_TRY(loom_value_type(n->g, v, &dt, &rank, dims));
  for (int d = 0; d < rank; d++)
    if (d != drop) LOOM_TRY(dim_across(body, n->g, dims[d], &mine[r++]));
  return loom_graph_input(body, name, dt, r, mine, out);
}

/* v of graph g as a rank-0 value: a cond or trip count of shape (1) is
 * reshaped, as exporters write them so. */
static loom_status_t as_scalar(const ox_node_t *n, loom_graph_t *g, loom_value_t v,
                               const char *what, loom_value_t *out) {
  int rank = 0;
  loom_dim_t dims[LOOM_MAX_RANK];
  LOOM_TRY(loom_value_type(g, v, NULL, &rank, dims));
  *out = v;
  if (rank == 0) return LOOM_OK;
  if (rank == 1 && dims[0] == 1) return loom_reshape(g, v, 0, NULL, out);
  return ox_fail(n, LOOM_ERR_SHAPE, "%s must hold one value (rank 0), not rank %d", what, rank);
}

static loom_status_t graph_attr(const ox_node_t *n, const char *name,
                                const Onnx__GraphProto **out) {
  const Onnx__AttributeProto *a = ox_attr_typed(n, name, OX_ATTR_GRAPH);
  if (!a || !a->g) return ox_fail(n, LOOM_ERR_FORMAT, "graph attribute %s is missing", name);
  *out = a->g;
  return LOOM_OK;
}

/* ---- Bodies -------------------------------------------------------------------- */

typedef struct body {
  loom_graph_t *g;     /* the Loom body; NULL once loom_if or loom_loop has it */
  loom_value_t *inner; /* the captures as values of g */
  loom_value_t *pass;  /* outer values of g's capture inputs, in their order */
  int n_pass;
  loom_value_t *out;   /* the ONNX body's outputs, values of g */
} body_t;

static loom_status_t body_new(const ox_captures_t *c, int n_out, body_t *b) {
  *b = (body_t){0};
  b->inner = core_calloc((size_t)c->n + 1, sizeof *b->inner);
  b->pass = core_calloc((size_t)c->n + 1, sizeof *b->pass);
  b->out = core_calloc((size_t)n_out + 1, sizeof *b->out);
  if (!b->inner || !b->pass || !b->out)
    return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  return loom_graph_create(&b->g);
}

static void body_free(body_t *b) {
  loom_graph_destroy(b->g);
  core_free(b->inner);
  core_free(b->pass);
  core_free(b->out);
  *b = (body_t){0};
}

/* Each capture of c as a value of b->g: a copy of a small constant, or
 * an input of b->g (after the inputs the rule made) whose outer value
 * the op passes in. */
static loom_status_t captures_into(ox_node_t *n, const ox_captures_t *c, body_t *b) {
  b->n_pass = 0;
  for (int i = 0; i < c->n; i++) {
    const loom_tensor_t *t = ox_const(n, c->values[i]);
    if (t && loom_tensor_numel(t) <= COPY_CONST_MAX) {
      LOOM_TRY(loom_graph_constant(b->g, t, &b->inner[i]));
      continue;
    }
    LOOM_TRY(ox_input_like(n, b->g, c->names[i], c->values[i], -1, &b->inner[i]));
    b->pass[b->n_pass++] = c->values[i];
  }
  return LOOM_OK;
}

/* Imports gp into b->g, whose inputs for gp's n_formal inputs the rule
 * made; the captures follow them. */
static loom_status_t body_import(ox_node_t *n, const Onnx__GraphProto *gp,
                                 const ox_captures_t *c, int n_formal,
                                 const loom_value_t *formal, int n_out, body_t *b) {
  LOOM_TRY(captures_into(n, c, b));
  return ox_subgraph_import(n, gp, b->g, n_formal, formal, c, b->inner, n_out, b->out);
}

static loom_status_t body_outputs(const ox_node_t *n, body_t *b, int count,
                                  const loom_value_t *v) {
  for (int k = 0; k < count; k++) {
    if (ox_is_seq(v[k])) return seq_fail(n, NULL);
    LOOM_TRY(loom_graph_output(b->g, v[k]));
  }
  return LOOM_OK;
}

/* ---- If -------------------------------------------------------------------------- */

/* The condition is known now: the taken branch's nodes join n's graph. */
static loom_status_t if_taken(ox_node_t *n, const Onnx__GraphProto *const *br,
                              const loom_tensor_t *cond) {
  if (loom_tensor_numel(cond) != 1)
    return ox_fail(n, LOOM_ERR_SHAPE, "cond has %lld elements (one is needed)",
                   (long long)loom_tensor_numel(cond));
  double v = 0;
  loom_tensor_get_f64(cond, 0, &v);
  return ox_subgraph_import(n, br[v != 0 ? 0 : 1], n->g, 0, NULL, NULL, NULL, n->n_out, n->out);
}

static loom_status_t if_op(ox_node_t *n, const Onnx__GraphProto *const *br) {
  loom_value_t cond;
  LOOM_TRY(as_scalar(n, n->g, n->in[0], "cond", &cond));
  ox_captures_t c;
  LOOM_TRY(ox_captures_find(n, 2, br, &c));
  body_t b[2] = {{0}};
  loom_status_t st = LOOM_OK;
  for (int k = 0; st == LOOM_OK && k < 2; k++) {
    st = body_new(&c, n->n_out, &b[k]);
    if (st == LOOM_OK) st = body_import(n, br[k], &c, 0, NULL, n->n_out, &b[k]);
    if (st == LOOM_OK) st = body_outputs(n, &b[k], n->n_out, b[k].out);
  }
  if (st == LOOM_OK) {
    loom_graph_t *then_g = b[0].g, *else_g = b[1].g;
    b[0].g = b[1].g = NULL;
    st = loom_if(n->g, cond, then_g, else_g, b[0].n_pass, b[0].pass, n->n_out, n->out);
    if (st != LOOM_OK) st = ox_fail(n, st, "%s", loom_last_error());
  }
  body_free(&b[0]);
  body_free(&b[1]);
  ox_captures_free(&c);
  return st;
}

loom_status_t ox_if(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  const Onnx__GraphProto *br[2] = {NULL, NULL};
  LOOM_TRY(graph_attr(n, "then_branch", &br[0]));
  LOOM_TRY(graph_attr(n, "else_branch", &br[1]));
  const loom_tensor_t *cond = ox_const(n, n->in[0]);
  return cond ? if_taken(n, br, cond) : if_op(n, br);
}

/* ---- Loop ------------------------------------------------------------------------ */

/* Whether the body's condition cannot stop the loop: the loop starts with
 * a constant true and the body passes its cond input on unchanged (or
 * returns a constant true). Dropping it lets Loom know the trip count
 * (and the scan outputs' length) from a constant max_trip. */
static int cond_idle(ox_node_t *n, loom_value_t cond, const body_t *b, loom_value_t cond_in) {
  const loom_tensor_t *t = ox_const(n, cond);
  double v = 0;
  if (!t || loom_tensor_numel(t) != 1 || loom_tensor_get_f64(t, 0, &v) != LOOM_OK || v == 0)
    return 0;
  if (b->out[0].id == cond_in.id) return 1;
  ox_node_t in_body = *n;
  in_body.g = b->g;
  t = ox_const(&in_body, b->out[0]);
  return t && loom_tensor_numel(t) == 1 && loom_tensor_get_f64(t, 0, &v) == LOOM_OK && v != 0;
}

/* The body's inputs: iteration, cond, then one per carried value. */
static loom_status_t loop_formals(ox_node_t *n, const Onnx__GraphProto *gp, int n_carried,
                                  body_t *b, loom_value_t *formal) {
  const char *names[2] = {NULL, NULL};
  for (size_t i = 0; i < 2 && i < gp->n_input; i++) names[i] = gp->input[i]->name;
  LOOM_TRY(loom_graph_input(b->g, names[0], LOOM_I64, 0, NULL, &formal[0]));
  LOOM_TRY(loom_graph_input(b->g, names[1], LOOM_BOOL, 0, NULL, &formal[1]));
  for (int i = 0; i < n_carried; i++) {
    const char *name = (size_t)(2 + i) < gp->n_input ? gp->input[2 + i]->name : NULL;
    LOOM_TRY(ox_input_like(n, b->g, name, n->in[2 + i], -1, &formal[2 + i]));
  }
  return LOOM_OK;
}

/* Builds the loop once the body is imported; res gets every result. */
static loom_status_t loop_build(ox_node_t *n, const Onnx__GraphProto *gp, body_t *b,
                                loom_value_t *formal, int n_carried, int n_res,
                                loom_value_t *res) {
  loom_value_t max_trip = LOOM_NO_VALUE, cond = LOOM_NO_VALUE;
  if (ox_has(n, 0)) LOOM_TRY(as_scalar(n, n->g, n->in[0], "M (the trip count)", &max_trip));
  if (ox_has(n, 1)) LOOM_TRY(as_scalar(n, n->g, n->in[1], "cond", &cond));
  LOOM_TRY(as_scalar(n, b->g, b->out[0], "the body's cond output", &b->out[0]));
  if (cond.id >= 0 && cond_idle(n, cond, b, formal[1])) cond = LOOM_NO_VALUE;
  LOOM_TRY(body_outputs(n, b, (int)gp->n_output, b->out));
  loom_graph_t *body = b->g;
  b->g = NULL;
  loom_status_t st = loom_loop(n->g, max_trip, cond, body, n_carried, &n->in[2], b->n_pass,
                               b->pass, n_res, res);
  return st == LOOM_OK ? st : ox_fail(n, st, "%s", loom_last_error());
}

/* The node of gp that computes name, or NULL. */
static const Onnx__NodeProto *producer(const Onnx__GraphProto *gp, const char *name) {
  for (size_t i = 0; i < gp->n_node; i++)
    for (size_t k = 0; k < gp->node[i]->n_output; k++)
      if (!strcmp(gp->node[i]->output[k], name)) return gp->node[i];
  return NULL;
}

/* Whether the body's cond output is its cond input, or a true constant
 * of the enclosing graph (PyTorch's exports: Cast of an outer True),
 * passed on as it is or through Identity and Cast nodes. */
static int body_passes_cond(ox_node_t *n, const Onnx__GraphProto *gp) {
  if (gp->n_input < 2 || gp->n_output < 1 || !gp->input[1]->name) return 0;
  const char *name = gp->output[0]->name;
  for (int hops = 0; name && hops < 64; hops++) {
    if (!strcmp(name, gp->input[1]->name)) return 1;
    const Onnx__NodeProto *np = producer(gp, name);
    if (!np) { /* from outside the body: true for every trip if a true constant */
      loom_value_t v;
      const loom_tensor_t *c = ox_lookup(n, name, &v) == LOOM_OK ? ox_const(n, v) : NULL;
      double go = 0;
      loom_clear_error();
      return c && loom_tensor_numel(c) == 1 && loom_tensor_get_f64(c, 0, &go) == LOOM_OK &&
             go != 0;
    }
    if ((strcmp(np->op_type, "Identity") && strcmp(np->op_type, "Cast")) || np->n_input < 1)
      return 0;
    name = np->input[0];
  }
  return 0;
}

/* The trip count of a loop to unroll, 0 for none: a constant count of
 * 1 to UNROLL_MAX that the condition cannot cut short. */
static int64_t unroll_trips(ox_node_t *n, const Onnx__GraphProto *gp) {
  const loom_tensor_t *m = ox_has(n, 0) ? ox_const(n, n->in[0]) : NULL;
  const loom_tensor_t *c = ox_has(n, 1) ? ox_const(n, n->in[1]) : NULL;
  double trips = 0, go = 1;
  if (!m || loom_tensor_numel(m) != 1 || loom_tensor_get_f64(m, 0, &trips) != LOOM_OK)
    return 0;
  if (ox_has(n, 1) && (!c || loom_tensor_numel(c) != 1 || !body_passes_cond(n, gp) ||
                       loom_tensor_get_f64(c, 0, &go) != LOOM_OK || go == 0))
    return 0;
  return trips >= 1 && trips <= UNROLL_MAX ? (int64_t)trips : 0;
}

/* A rank-0 constant (a full would not fold what reads it). */
static loom_status_t constant_scalar(loom_graph_t *g, loom_dtype_t dtype, int64_t v,
                                     loom_value_t *out) {
  loom_tensor_t *t = NULL;
  uint8_t yes = 1;
  const void *data = dtype == LOOM_BOOL ? (const void *)&yes : (const void *)&v;
  LOOM_TRY(loom_tensor_from_data(dtype, 0, NULL, data, dtype == LOOM_BOOL ? 1 : sizeof v, &t));
  loom_status_t st = loom_graph_constant(g, t, out);
  loom_tensor_destroy(t);
  return st;
}

/* Step i of an unrolled loop: the body inline, its iteration a constant.
 * carried[] moves on; the step's scan values go to scans[j * trips + i]. */
static loom_status_t unroll_step(ox_node_t *n, const Onnx__GraphProto *gp, int64_t i,
                                 int64_t trips, int n_carried, loom_value_t *carried,
                                 loom_value_t *scans, loom_value_t *buf) {
  int n_res = (int)gp->n_output - 1;
  loom_value_t *formal = buf, *outs = buf + n_carried + 2;
  LOOM_TRY(constant_scalar(n->g, LOOM_I64, i, &formal[0]));
  LOOM_TRY(constant_scalar(n->g, LOOM_BOOL, 1, &formal[1]));
  ox_copy(formal + 2, carried, sizeof *carried * (size_t)n_carried);
  LOOM_TRY(ox_subgraph_import(n, gp, n->g, n_carried + 2, formal, NULL, NULL, n_res + 1, outs));
  ox_copy(carried, outs + 1, sizeof *carried * (size_t)n_carried);
  for (int j = 0; j < n_res - n_carried; j++)
    LOOM_TRY(loom_unsqueeze(n->g, outs[1 + n_carried + j], 1, (int64_t[]){0},
                            &scans[j * trips + i]));
  return LOOM_OK;
}

/* A short loop of known length as its body repeated: each copy folds
 * with its iteration number known (a Slice or Gather by it). */
static loom_status_t loop_unroll(ox_node_t *n, const Onnx__GraphProto *gp, int64_t trips) {
  int n_carried = n->n_in - 2, n_res = (int)gp->n_output - 1, n_scan = n_res - n_carried;
  loom_value_t *carried = core_calloc((size_t)n_res + 1, sizeof *carried);
  loom_value_t *scans = core_calloc((size_t)(n_scan * trips) + 1, sizeof *scans);
  loom_value_t *buf = core_calloc((size_t)(n_carried + n_res) + 3, sizeof *buf);
  loom_status_t st = carried && scans && buf
                         ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  if (st == LOOM_OK) ox_copy(carried, n->in + 2, sizeof *carried * (size_t)n_carried);
  for (int64_t i = 0; st == LOOM_OK && i < trips; i++)
    st = unroll_step(n, gp, i, trips, n_carried, carried, scans, buf);
  for (int j = 0; st == LOOM_OK && j < n_scan; j++)
    st = loom_concat(n->g, (int)trips, &scans[j * trips], 0, &carried[n_carried + j]);
  for (int k = 0; st == LOOM_OK && k < n->n_out; k++) n->out[k] = carried[k];
  core_free(carried);
  core_free(scans);
  core_free(buf);
  return st;
}

loom_status_t ox_loop(ox_node_t *n) {
  const Onnx__GraphProto *gp = NULL;
  LOOM_TRY(graph_attr(n, "body", &gp));
  int n_carried = n->n_in - 2, n_res = (int)gp->n_output - 1;
  if (n_carried < 0 || n_res < n_carried || n->n_out > n_res)
    return ox_fail(n, LOOM_ERR_FORMAT, "%d inputs and %d outputs with a body of %zu outputs "
                   "(M, cond, carried.. -> carried.., scans..)", n->n_in, n->n_out, gp->n_output);
  for (int i = 0; i < n_carried; i++) LOOM_TRY(ox_need(n, 2 + i));
  int64_t trips = unroll_trips(n, gp);
  if (trips) return loop_unroll(n, gp, trips);
  ox_captures_t c;
  LOOM_TRY(ox_captures_find(n, 1, &gp, &c));
  body_t b = {0};
  loom_value_t *formal = core_calloc((size_t)n_carried + 2, sizeof *formal);
  loom_value_t *res = core_calloc((size_t)n_res + 1, sizeof *res);
  loom_status_t st = formal && res ? body_new(&c, n_res + 1, &b)
                                   : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  if (st == LOOM_OK) st = loop_formals(n, gp, n_carried, &b, formal);
  if (st == LOOM_OK) st = body_import(n, gp, &c, n_carried + 2, formal, n_res + 1, &b);
  if (st == LOOM_OK) st = loop_build(n, gp, &b, formal, n_carried, n_res, res);
  for (int k = 0; st == LOOM_OK && k < n->n_out; k++) n->out[k] = res[k];
  body_free(&b);
  core_free(formal);
  core_free(res);
  ox_captures_free(&c);
  return st;
}

/* ---- Scan ------------------------------------------------------------------------ */

typedef struct scan_spec {
  int n_state, m, k;       /* state variables, scan inputs, scan outputs */
  int64_t in_axes[SCAN_MAX], in_dirs[SCAN_MAX];
  int64_t out_axes[SCAN_MAX], out_dirs[SCAN_MAX];
} scan_spec_t;

/* Attribute name's m entries into out (0s when absent). */
static loom_status_t scan_list(const ox_node_t *n, const char *name, int m, int64_t *out) {
  int count;
  const int64_t *v = ox_ints(n, name, &count);
  if (v && count != m)
    return ox_fail(n, LOOM_ERR_FORMAT, "%s has %d entries for %d values", name, count, m);
  for (int i = 0; i < m; i++) out[i] = v ? v[i] : 0;
  return LOOM_OK;
}

static loom_status_t scan_spec(ox_node_t *n, const Onnx__GraphProto *gp, int first,
                               scan_spec_t *s) {
  if (!ox_attr(n, "num_scan_inputs"))
    return ox_fail(n, LOOM_ERR_FORMAT, "attribute num_scan_inputs is missing");
  int64_t m = ox_int(n, "num_scan_inputs", 0);
  s->n_state = n->n_in - first - (int)m;
  s->k = (int)gp->n_output - s->n_state;
  if (m < 1 || m > SCAN_MAX || s->n_state < 0 || s->k < 0 || s->k > SCAN_MAX ||
      n->n_out > s->n_state + s->k)
    return ox_fail(n, LOOM_ERR_FORMAT, "num_scan_inputs %lld with %d inputs, %d outputs and a "
                   "body of %zu outputs", (long long)m, n->n_in, n->n_out, gp->n_output);
  s->m = (int)m;
  if ((int)gp->n_input != s->n_state + s->m)
    return ox_fail(n, LOOM_ERR_FORMAT, "the body takes %zu inputs, not %d (%d states, %d scan "
                   "inputs)", gp->n_input, s->n_state + s->m, s->n_state, s->m);
  for (int i = first; i < n->n_in; i++) LOOM_TRY(ox_need(n, i));
  if (first) { /* opset 8: one direction per input; axes and outputs plain */
    memset(s->in_axes, 0, sizeof s->in_axes);
    memset(s->out_axes, 0, sizeof s->out_axes);
    memset(s->out_dirs, 0, sizeof s->out_dirs);
    return scan_list(n, "directions", s->m, s->in_dirs);
  }
  LOOM_TRY(scan_list(n, "scan_input_axes", s->m, s->in_axes));
  LOOM_TRY(scan_list(n, "scan_input_directions", s->m, s->in_dirs));
  LOOM_TRY(scan_list(n, "scan_output_axes", s->k, s->out_axes));
  return scan_list(n, "scan_output_directions", s->k, s->out_dirs);
}

/* The scan length: the size of every scan input along its axis (its
 * axis normalized into axes[]); it must be known when the model loads. */
static loom_status_t scan_length(ox_node_t *n, const scan_spec_t *s, const loom_value_t *xs,
                                 int64_t *axes, int64_t *len) {
  for (int j = 0; j < s->m; j++) {
    int rank = ox_rank(n, xs[j]);
    LOOM_TRY(ox_axis(n, s->in_axes[j], rank, "scan_input_axes entry", &axes[j]));
    loom_dim_t d = ox_dim(n, xs[j], (int)axes[j]);
    if (d < 0)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "scan input %d's scan axis has a size known only "
                     "when the model runs", j);
    if (j && d != *len)
      return ox_fail(n, LOOM_ERR_SHAPE, "scan input %d has %lld steps, input 0 %lld", j,
                     (long long)d, (long long)*len);
    *len = d;
  }
  return LOOM_OK;
}

/* The loop body's inputs (iteration, cond, states, whole scan inputs) in
 * loop_in; the ONNX body's (states, this step's slices) in formal. */
static loom_status_t scan_formals(ox_node_t *n, const Onnx__GraphProto *gp,
                                  const scan_spec_t *s, const loom_value_t *init,
                                  const loom_value_t *xs, const int64_t *axes, int64_t len,
                                  body_t *b, loom_value_t *loop_in, loom_value_t *formal) {
  LOOM_TRY(loom_graph_input(b->g, NULL, LOOM_I64, 0, NULL, &loop_in[0]));
  LOOM_TRY(loom_graph_input(b->g, NULL, LOOM_BOOL, 0, NULL, &loop_in[1]));
  for (int i = 0; i < s->n_state; i++)
    LOOM_TRY(ox_input_like(n, b->g, gp->input[i]->name, init[i], -1, &formal[i]));
  loom_value_t back = LOOM_NO_VALUE, last;
  for (int j = 0; j < s->m; j++) {
    loom_value_t whole, step = loop_in[0];
    LOOM_TRY(ox_input_like(n, b->g, gp->input[s->n_state + j]->name, xs[j], -1, &whole));
    if (s->in_dirs[j] && back.id < 0) { /* reverse: step len-1-i */
      LOOM_TRY(loom_full(b->g, 0, NULL, (double)(len - 1), LOOM_I64, &last));
      LOOM_TRY(loom_sub(b->g, last, loop_in[0], &back));
    }
    if (s->in_dirs[j]) step = back;
    LOOM_TRY(loom_gather(b->g, whole, step, axes[j], &formal[s->n_state + j]));
  }
  return LOOM_OK;
}

/* Scan output v (stacked along a new axis 0) reversed when prepended and
 * its steps' axis moved where scan_output_axes puts it. */
static loom_status_t scan_place(ox_node_t *n, const scan_spec_t *s, int j, loom_value_t v,
                                loom_value_t *out) {
  int rank = ox_rank(n, v);
  int64_t axis, perm[LOOM_MAX_RANK];
  LOOM_TRY(ox_axis(n, s->out_axes[j], rank, "scan_output_axes entry", &axis));
  if (s->out_dirs[j]) LOOM_TRY(loom_flip(n->g, v, 1, (int64_t[]){0}, &v));
  *out = v;
  if (axis == 0) return LOOM_OK;
  for (int d = 0; d < rank; d++) perm[d] = d < axis ? d + 1 : d == axis ? 0 : d;
  return loom_transpose(n->g, v, perm, out);
}

/* One scan (no batch) as a loop of len steps: states carried, scan
 * inputs and captures invariant, each step gathered from them. */
static loom_status_t scan_loop(ox_node_t *n, const Onnx__GraphProto *gp, const scan_spec_t *s,
                               const loom_value_t *init, const loom_value_t *xs,
                               const int64_t *axes, int64_t len, const ox_captures_t *c,
                               body_t *b, loom_value_t *res) {
  int n_body = s->n_state + s->k;
  loom_value_t loop_in[2], formal[SCAN_MAX * 2 + 1], trips;
  if (s->n_state > SCAN_MAX)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d state variables (at most %d)", s->n_state,
                   SCAN_MAX);
  LOOM_TRY(scan_formals(n, gp, s, init, xs, axes, len, b, loop_in, formal));
  LOOM_TRY(body_import(n, gp, c, s->n_state + s->m, formal, n_body, b));
  LOOM_TRY(loom_graph_output(b->g, loop_in[1]));
  LOOM_TRY(body_outputs(n, b, n_body, b->out));
  loom_value_t *all = core_calloc((size_t)(s->m + b->n_pass) + 1, sizeof *all);
  if (!all) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  ox_copy(all, xs, sizeof *xs * (size_t)s->m);
  ox_copy(all + s->m, b->pass, sizeof *all * (size_t)b->n_pass);
  loom_graph_t *body = b->g;
  b->g = NULL;
  loom_status_t st = loom_full(n->g, 0, NULL, (double)len, LOOM_I64, &trips);
  if (st == LOOM_OK)
    st = loom_loop(n->g, trips, LOOM_NO_VALUE, body, s->n_state, init, s->m + b->n_pass, all,
                   n_body, res);
  else
    loom_graph_destroy(body);
  core_free(all);
  if (st != LOOM_OK) return ox_fail(n, st, "%s", loom_last_error());
  for (int j = 0; j < s->k; j++)
    LOOM_TRY(scan_place(n, s, j, res[s->n_state + j], &res[s->n_state + j]));
  return LOOM_OK;
}

/* One scan over inputs xs with states init (no batch); res: the final
 * states, then the scan outputs. */
static loom_status_t scan_once(ox_node_t *n, const Onnx__GraphProto *gp, const scan_spec_t *s,
                               const loom_value_t *init, const loom_value_t *xs,
                               loom_value_t *res) {
  int64_t axes[SCAN_MAX], len = 0;
  LOOM_TRY(scan_length(n, s, xs, axes, &len));
  ox_captures_t c;
  LOOM_TRY(ox_captures_find(n, 1, &gp, &c));
  body_t b = {0};
  loom_status_t st = body_new(&c, s->n_state + s->k, &b);
  if (st == LOOM_OK) st = scan_loop(n, gp, s, init, xs, axes, len, &c, &b, res);
  body_free(&b);
  ox_captures_free(&c);
  return st;
}

/* Opset 8's sequence_lens: only every sequence at full length. */
static loom_status_t scan8_lengths(ox_node_t *n, int64_t len) {
  if (!ox_has(n, 0)) return LOOM_OK;
  int64_t lens[SCAN_MAX];
  int count;
  LOOM_TRY(ox_const_ints(n, 0, "sequence_lens", lens, SCAN_MAX, &count));
  for (int i = 0; i < count; i++)
    if (lens[i] != len)
      return ox_fail(n, LOOM_ERR_UNSUPPORTED, "sequence_lens entry %d is %lld: only sequences "
                     "of the full length %lld are supported", i, (long long)lens[i],
                     (long long)len);
  return LOOM_OK;
}

/* Element b of v's leading (batch) axis. */
static loom_status_t batch_item(ox_node_t *n, loom_value_t v, int64_t b, loom_value_t *out) {
  loom_value_t idx;
  LOOM_TRY(loom_full(n->g, 0, NULL, (double)b, LOOM_I64, &idx));
  return loom_gather(n->g, v, idx, 0, out);
}

/* Opset 8: states and scan inputs have a leading batch axis, each batch
 * element scanned on its own; one scan per element (the batch must be
 * known when the model loads), results stacked. */
static loom_status_t scan_batched(ox_node_t *n, const Onnx__GraphProto *gp,
                                  const scan_spec_t *s, loom_value_t *out) {
  const loom_value_t *init = &n->in[1], *xs = &n->in[1 + s->n_state];
  loom_dim_t batch = ox_dim(n, xs[0], 0), steps = ox_dim(n, xs[0], 1);
  if (batch < 1 || batch > SCAN_MAX || ox_rank(n, xs[0]) < 2)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "scan input 0 must have a batch axis of 1 to %d "
                   "known when the model loads, then a sequence axis", SCAN_MAX);
  LOOM_TRY(scan8_lengths(n, steps));
  int n_res = s->n_state + s->k;
  loom_value_t st_b[SCAN_MAX], xs_b[SCAN_MAX], res[SCAN_MAX * 2];
  loom_value_t *items = core_calloc((size_t)(n_res * batch) + 1, sizeof *items);
  if (!items) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  loom_status_t st = s->n_state <= SCAN_MAX ? LOOM_OK
      : ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d state variables (at most %d)", s->n_state, SCAN_MAX);
  for (int64_t b = 0; st == LOOM_OK && b < batch; b++) {
    for (int i = 0; st == LOOM_OK && i < s->n_state; i++) st = batch_item(n, init[i], b, &st_b[i]);
    for (int j = 0; st == LOOM_OK && j < s->m; j++) st = batch_item(n, xs[j], b, &xs_b[j]);
    if (st == LOOM_OK) st = scan_once(n, gp, s, st_b, xs_b, res);
    for (int k = 0; st == LOOM_OK && k < n_res; k++)
      st = loom_unsqueeze(n->g, res[k], 1, (int64_t[]){0}, &items[k * batch + b]);
  }
  for (int k = 0; st == LOOM_OK && k < n_res; k++)
    st = loom_concat(n->g, (int)batch, &items[k * batch], 0, &out[k]);
  core_free(items);
  return st;
}

loom_status_t ox_scan(ox_node_t *n) {
  const Onnx__GraphProto *gp = NULL;
  LOOM_TRY(graph_attr(n, "body", &gp));
  int first = n->opset < 9; /* opset 8's sequence_lens */
  scan_spec_t s;
  LOOM_TRY(scan_spec(n, gp, first, &s));
  loom_value_t res[SCAN_MAX * 2];
  if (s.n_state > SCAN_MAX)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d state variables (at most %d)", s.n_state, SCAN_MAX);
  if (first) LOOM_TRY(scan_batched(n, gp, &s, res));
  else LOOM_TRY(scan_once(n, gp, &s, &n->in[0], &n->in[s.n_state], res));
  for (int k = 0; k < n->n_out; k++) n->out[k] = res[k];
  return LOOM_OK;
}
