/* Reading an ONNX model into a Loom graph: the model and its opsets, the
 * graph's initializers, inputs and outputs, scopes of names, and each
 * node through its rule, folded to constants when its inputs all are.
 * Subgraphs (If, Loop, Scan bodies) import here too, for the rules of
 * rules_control.c: a body into a Loom graph of its own, whose outer
 * values come in as inputs, or a taken branch inline. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/status.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/ir.h"

/* Models over 2 GiB keep their weights in external data files (protobuf's
 * own limit). */

/* ---- Scopes: ONNX names to values ------------------------------------------ */

typedef struct ox_scope {
  loom_graph_t *g;         /* the graph its values belong to */
  struct ox_scope *parent; /* names it does not bind: an enclosing scope of
                              the same graph (an inlined branch), or NULL */
  char **names;
  loom_value_t *values;
  int64_t n, cap; /* cap: a power of two, slots of the open hash */
} ox_scope_t;

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int64_t scope_slot(const ox_scope_t *sc, const char *name) {
  if (!sc->cap) return -1;
  for (uint64_t i = hash_name(name) & (uint64_t)(sc->cap - 1);; i = (i + 1) & (uint64_t)(sc->cap - 1))
    if (!sc->names[i] || !strcmp(sc->names[i], name)) return (int64_t)i;
}

static int scope_get(const ox_scope_t *sc, const char *name, loom_value_t *out) {
  for (; sc; sc = sc->parent) {
    int64_t i = scope_slot(sc, name);
    if (i < 0 || !sc->names[i]) continue;
    *out = sc->values[i];
    return 1;
  }
  return 0;
}

static loom_status_t scope_grow(ox_scope_t *sc) {
  ox_scope_t bigger = {.g = sc->g, .parent = sc->parent, .cap = sc->cap ? sc->cap * 2 : 64};
  bigger.names = core_calloc((size_t)bigger.cap, sizeof *bigger.names);
  bigger.values = core_calloc((size_t)bigger.cap, sizeof *bigger.values);
  if (!bigger.names || !bigger.values) {
    core_free(bigger.names);
    core_free(bigger.values);
    return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  }
  for (int64_t i = 0; i < sc->cap; i++) {
    if (!sc->names[i]) continue;
    int64_t j = scope_slot(&bigger, sc->names[i]);
    bigger.names[j] = sc->names[i];
    bigger.values[j] = sc->values[i];
  }
  bigger.n = sc->n;
  core_free(sc->names);
  core_free(sc->values);
  *sc = bigger;
  return LOOM_OK;
}

/* Binds name to v; a later binding of one name replaces the earlier. */
static loom_status_t scope_set(ox_scope_t *sc, const char *name, loom_value_t v) {
  if ((sc->n + 1) * 2 > sc->cap) LOOM_TRY(scope_grow(sc));
  int64_t i = scope_slot(sc, name);
  if (!sc->names[i]) {
    sc->names[i] = core_strdup(name);
    if (!sc->names[i]) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
    sc->n++;
  }
  sc->values[i] = v;
  return LOOM_OK;
}

static void scope_free(ox_scope_t *sc) {
  for (int64_t i = 0; i < sc->cap; i++) core_free(sc->names[i]);
  core_free(sc->names);
  core_free(sc->values);
}

/* ---- The import ---------------------------------------------------------------- */



#define TRAINING_DOMAIN "ai.onnx.preview.training"

static int is_default_domain(const char *d) { return !d || !*d || !strcmp(d, "ai.onnx"); }

static loom_status_t add_initializer(ox_import_t *imp, ox_scope_t *sc, const Onnx__TensorProto *t) {
  if (!t->name || !*t->name)
    return loom_fail(LOOM_ERR_FORMAT, "ONNX model: an initializer has no name");
  loom_tensor_t *host = NULL;
  loom_status_t st = ox_tensor_from_proto(t, imp->base_dir, &host);
  if (st != LOOM_OK)
    return loom_fail(st, "ONNX initializer '%s': %s", t->name, loom_last_error());
  loom_value_t v;
  loom_dtype_t dt = loom_tensor_dtype(host);
  /* Parameters belong to the model's graph: a body's initializers are constants. */
  if (imp->trainable && sc->g == imp->g && ox_is_float(dt)) {
    int rank = loom_tensor_rank(host);
    int64_t shape[LOOM_MAX_RANK];
    for (int d = 0; d < rank; d++) shape[d] = loom_tensor_dim(host, d);
    st = loom_graph_param(sc->g, t->name, dt, rank, shape, host, &v);
    loom_tensor_destroy(host);
  } else {
    st = ir_graph_constant_adopt(sc->g, host, &v);
  }
  LOOM_TRY(st);
  return scope_set(sc, t->name, v);
}

static int is_initializer(const Onnx__GraphProto *gp, const char *name) {
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name)) return 1;
  return 0;
}

/* A sequence or optional input (seqio.c); none: an optional fixed to none. */
static loom_status_t add_seq_input(ox_import_t *imp, ox_scope_t *sc,
                                   const Onnx__ValueInfoProto *vi, int none) {
  ox_node_t n = {.g = imp->g, .imp = imp, .scope = sc, .opset = imp->opset};
  loom_value_t v;
  LOOM_TRY(ox_seqio_input(&n, imp->options, vi, none, &v));
  return scope_set(sc, vi->name ? vi->name : "", v);
}

/* A dim name an exporter made up rather than the model's author chose
 * (tf2onnx's "unk__12"). */
static int anonymous_name(const char *s) {
  if (strncmp(s, "unk__", 5) || !s[5]) return 0;
  for (s += 5; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* The size options.dim_names gives symbol sym, or -1; also under the
 * model's own name for it (alias: tf2onnx's unk__10, imported as dim0),
 * or NULL. */
static int64_t dim_override(ox_import_t *imp, const char *sym, const char *alias) {
  const loom_onnx_options_t *o = imp->options;
  for (int k = 0; k < o->n_dims; k++)
    if (o->dim_names[k] &&
        (!strcmp(o->dim_names[k], sym) || (alias && !strcmp(o->dim_names[k], alias)))) {
      imp->fixed_used[o->n_fixed + k] = 1;
      return o->dim_sizes[k];
    }
  return -1;
}

/* *out = the shape options.shape_names gives input name, or NULL; fails
 * when its rank is not the input's. */
static loom_status_t given_shape(ox_import_t *imp, const char *name, int rank,
                                 const int64_t **out) {
  const loom_onnx_options_t *o = imp->options;
  *out = NULL;
  for (int k = 0; k < o->n_shapes; k++) {
    if (!o->shape_names[k] || strcmp(o->shape_names[k], name)) continue;
    imp->fixed_used[o->n_fixed + o->n_dims + k] = 1;
    if (o->shape_ranks[k] != rank)
      return loom_fail(LOOM_ERR_SHAPE, "loom_onnx_load: input '%s' has rank %d, "
                       "options.shape_ranks gives %d", name, rank, o->shape_ranks[k]);
    *out = o->shape_dims[k];
  }
  return LOOM_OK;
}

static loom_status_t add_input(ox_import_t *imp, ox_scope_t *sc, const Onnx__ValueInfoProto *vi) {
  const char *name = vi->name ? vi->name : "";
  const loom_onnx_options_t *o = imp->options;
  for (int k = 0; k < o->n_fixed; k++) {
    if (!o->fixed_names[k] || strcmp(o->fixed_names[k], name)) continue;
    if (!o->fixed_values[k] && !ox_type_is_optional(vi->type))
      return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: fixed input '%s' has no value (only "
                       "an optional input may be fixed to none)", name);
    if (vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE)
      return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: input '%s' is a sequence, which "
                       "cannot be fixed (its elements are inputs '%s.0', ...)", name, name);
    imp->fixed_used[k] = 1;
    if (!o->fixed_values[k]) return add_seq_input(imp, sc, vi, 1);
    loom_value_t v;
    LOOM_TRY(loom_graph_constant(imp->g, o->fixed_values[k], &v));
    return scope_set(sc, name, v);
  }
  const Onnx__TypeProto *tp = vi->type;
  if (tp && (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE || ox_type_is_optional(tp)))
    return add_seq_input(imp, sc, vi, 0);
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "ONNX input '%s': only tensors, sequences and optionals are supported "
                     "(not maps or sparse tensors)", name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  loom_dtype_t dt;
  if (!tt->has_elem_type || !ox_dtype_from_onnx(tt->elem_type, &dt))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': element type %s is not supported",
                     name, ox_onnx_type_name(tt->has_elem_type ? tt->elem_type : 0));
  if (!tt->shape)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': no shape (its rank is unknown)", name);
  if (tt->shape->n_dim > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': rank %zu is over Loom's %d", name,
                     tt->shape->n_dim, LOOM_MAX_RANK);
  const int64_t *given;
  LOOM_TRY(given_shape(imp, name, (int)tt->shape->n_dim, &given));
  loom_dim_t dims[LOOM_MAX_RANK];
  for (size_t d = 0; d < tt->shape->n_dim; d++) {
    const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dim->dim_value < 0 || dim->dim_value > ((int64_t)1 << 40))
        return loom_fail(LOOM_ERR_FORMAT, "ONNX input '%s': dim %zu is %lld (dims run from 0 to 2^40)", name, d,
                         (long long)dim->dim_value);
      dims[d] = dim->dim_value;
      if (given && given[d] != dims[d])
        return loom_fail(LOOM_ERR_SHAPE, "loom_onnx_load: input '%s' dim %zu is %lld in the "
                         "model, %lld in options.shape_dims", name, d,
                         (long long)dims[d], (long long)given[d]);
    } else {
      char fresh[32];
      const char *sym = dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                                dim->dim_param && *dim->dim_param
                            ? dim->dim_param
                            : NULL, *own = sym;
      if (!sym || anonymous_name(sym)) {
        imp->n_anonymous++;
        if (imp->merge_anonymous) snprintf(fresh, sizeof fresh, "dim%zu", d);
        else if (!sym) snprintf(fresh, sizeof fresh, "unk_%d", imp->n_unnamed++);
        if (imp->merge_anonymous || !sym) sym = fresh;
      }
      /* A size for the dim's name and the input's shape may both be
       * given (`loom run --dim D=5 --input x=x.npy`): they must agree. */
      dims[d] = dim_override(imp, sym, own != sym ? own : NULL);
      if (given && dims[d] >= 0 && dims[d] != given[d])
        return loom_fail(LOOM_ERR_SHAPE, "loom_onnx_load: input '%s' dim %zu ('%s') is %lld in "
                         "options.shape_dims, %lld in options.dim_sizes", name, d, sym,
                         (long long)given[d], (long long)dims[d]);
      if (given) dims[d] = given[d];
      else if (dims[d] < 0) LOOM_TRY(loom_dim_symbol(imp->g, sym, &dims[d]));
    }
  }
  loom_value_t v;
  LOOM_TRY(loom_graph_input(imp->g, name, dt, (int)tt->shape->n_dim, dims, &v));
  return scope_set(sc, name, v);
}

/* Whether the values n's rule made in scratch are small enough to fold
 * into constants: a model's shape arithmetic and weight transforms are,
 * while ConstantOfShape or Expand to a huge shape would fill memory at load
 * for a value better computed when the model runs. Every value counts,
 * not only the outputs: a rule's nodes may pass through a large one. */
enum { FOLD_MAX_ELEMENTS = 1 << 24 };
static int small_results(const loom_graph_t *scratch) {
  for (int64_t v = 0; v < scratch->n_values; v++) {
    const ir_type_t *t = &scratch->values[v].type;
    int64_t count = 1;
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d] < 0 || __builtin_mul_overflow(count, t->dims[d], &count) ||
          count > FOLD_MAX_ELEMENTS)
        return 0;
  }
  return 1;
}

/* Runs the node's rule on constants in a graph of its own and adds its
 * outputs to the model's graph as constants: shape arithmetic and weight
 * transforms cost nothing when the model runs. */
static loom_status_t fold_node(ox_node_t *n, ox_rule_fn rule) {
  loom_graph_t *model = n->g, *scratch = NULL;
  loom_value_t *model_in = n->in;
  loom_value_t *in = core_calloc((size_t)n->n_in + 1, sizeof *in);
  loom_tensor_t **results = core_calloc((size_t)n->n_out + 1, sizeof *results);
  loom_status_t st = in && results ? loom_graph_create(&scratch)
                                   : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  for (int i = 0; st == LOOM_OK && i < n->n_in; i++) {
    in[i] = model_in[i];
    if (in[i].id >= 0) st = loom_graph_constant(scratch, ox_const(n, model_in[i]), &in[i]);
  }
  if (st == LOOM_OK) {
    n->g = scratch;
    n->in = in;
    st = rule(n);
    n->g = model;
    n->in = model_in;
  }
  if (st == LOOM_OK && !small_results(scratch)) {
    /* Too large to hold as a constant: computed when the model runs. */
    core_free(results);
    core_free(in);
    loom_graph_destroy(scratch);
    for (int k = 0; k < n->n_out; k++) n->out[k].id = -1;
    return rule(n);
  }
  int n_res = 0;
  for (int k = 0; st == LOOM_OK && k < n->n_out; k++)
    if (n->out[k].id >= 0) {
      st = loom_graph_output(scratch, n->out[k]);
      n_res++;
    }
  if (st == LOOM_OK) st = loom_interpret(scratch, 0, NULL, n_res, results);
  for (int k = 0, r = 0; st == LOOM_OK && k < n->n_out; k++)
    if (n->out[k].id >= 0) st = loom_graph_constant(model, results[r++], &n->out[k]);
  for (int r = 0; r < n_res; r++) loom_tensor_destroy(results[r]);
  core_free(results);
  core_free(in);
  loom_graph_destroy(scratch);
  return st;
}

/* Whether node np has a subgraph attribute (If, Loop, Scan). */
static int has_subgraph(const Onnx__NodeProto *np) {
  for (size_t i = 0; i < np->n_attribute; i++)
    if (np->attribute[i]->g || np->attribute[i]->n_graphs) return 1;
  return 0;
}

/* Whether node np makes a sequence value or an optional (a list the
 * import holds). */
static int makes_sequence(const Onnx__NodeProto *np) {
  return !strncmp(np->op_type, "Sequence", 8) || !strcmp(np->op_type, "SplitToSequence") ||
         !strcmp(np->op_type, "Optional") || !strcmp(np->op_type, "OptionalGetElement");
}

/* Whether node np may read a sequence or optional: their ops, Identity,
 * and the ops with bodies (an inlined or unrolled body may read one). */
static int takes_sequence(const Onnx__NodeProto *np) {
  return strstr(np->op_type, "Sequence") || !strncmp(np->op_type, "Optional", 8) ||
         !strcmp(np->op_type, "Identity") || has_subgraph(np);
}

/* A node with a subgraph is never folded: its bodies read outer values
 * of the model's graph, which a scratch graph does not have; nor is
 * Gradient, which reads its y by name from that graph; nor one that makes
 * a sequence, which is no value of a graph. */
static int foldable(const ox_node_t *n) {
  if (has_subgraph(n->proto) || makes_sequence(n->proto) || !strcmp(n->proto->op_type, "Gradient"))
    return 0;
  int any = 0;
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i].id < 0) continue;
    if (!ox_const(n, n->in[i])) return 0;
    any = 1;
  }
  return any || n->n_in == 0;
}

loom_status_t ox_lookup(const ox_node_t *n, const char *name, loom_value_t *out) {
  if (name && *name && scope_get(n->scope, name, out) && !ox_is_seq(*out)) return LOOM_OK;
  return ox_fail(n, LOOM_ERR_FORMAT, "'%s' is no tensor computed before the node",
                 name ? name : "");
}

/* The node's op, of a domain the importer reads and the model imports an
 * opset of; n->opset is set to that opset. */
static loom_status_t node_op(const ox_import_t *imp, ox_node_t *n, const ox_op_t **op) {
  const char *dom = n->proto->domain;
  int dflt = is_default_domain(dom);
  if (!dflt && strcmp(dom, TRAINING_DOMAIN))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "domain '%s' is not supported (only the default "
                   "domain, ai.onnx, and " TRAINING_DOMAIN ")", dom);
  *op = ox_op_find(n->proto->op_type);
  if (!*op) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "not an ONNX op Loom knows");
  if (dflt != !*(*op)->domain)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%s is an op of domain %s, not of %s",
                   n->proto->op_type, *(*op)->domain ? (*op)->domain : "ai.onnx",
                   dflt ? "ai.onnx" : dom);
  if (!(*op)->rule) return ox_fail(n, LOOM_ERR_UNSUPPORTED, "not supported: %s", (*op)->reason);
  n->opset = dflt ? imp->opset : imp->training_opset;
  if (n->opset < 1)
    return ox_fail(n, LOOM_ERR_FORMAT, "the model imports no opset of domain %s",
                   dflt ? "ai.onnx" : dom);
  return LOOM_OK;
}

static loom_status_t import_node(ox_import_t *imp, ox_scope_t *sc, const Onnx__GraphProto *gp,
                                 const Onnx__NodeProto *np, int index) {
  char attr_error[OX_ATTR_ERROR] = "";
  ox_node_t n = {.g = sc->g, .proto = np, .graph = gp, .index = index,
                 .n_in = (int)np->n_input, .n_out = (int)np->n_output, .imp = imp, .scope = sc,
                 .attr_error = attr_error};
  if (!np->op_type || !*np->op_type)
    return loom_fail(LOOM_ERR_FORMAT, "ONNX node %d has no op_type", index);
  const ox_op_t *op = NULL;
  LOOM_TRY(node_op(imp, &n, &op));
  n.in = core_calloc((size_t)n.n_in + 1, sizeof *n.in);
  n.out = core_calloc((size_t)n.n_out + 1, sizeof *n.out);
  loom_status_t st = n.in && n.out ? LOOM_OK : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  for (int i = 0; st == LOOM_OK && i < n.n_in; i++) {
    n.in[i].id = -1;
    const char *name = np->input[i];
    if (name && *name && !scope_get(sc, name, &n.in[i]))
      st = ox_fail(&n, LOOM_ERR_FORMAT, "input %d '%s' is not computed before the node "
                   "(a cycle, nodes out of order, or a missing value)", i, name);
    else if (ox_is_seq(n.in[i]) && !takes_sequence(np))
      st = ox_fail(&n, LOOM_ERR_UNSUPPORTED, "input %d '%s' is a sequence or optional; the "
                   "op takes tensors", i, name);
  }
  for (int k = 0; st == LOOM_OK && k < n.n_out; k++) n.out[k].id = -1;
  int done = 0; /* by ox_shape_node, on shape values */
  if (st == LOOM_OK) st = ox_shape_node(&n, &done);
  if (st == LOOM_OK && !done) st = foldable(&n) ? fold_node(&n, op->rule) : op->rule(&n);
  /* A rule that read a wrong-typed attribute went on with its default. */
  if (attr_error[0] && st != LOOM_ERR_NOMEM) st = ox_fail(&n, LOOM_ERR_FORMAT, "%s", attr_error);
  if (st != LOOM_OK && st != LOOM_ERR_NOMEM && strncmp(loom_last_error(), "ONNX node ", 10)) {
    /* an op builder's error ("add: cannot broadcast ..."): which node */
    char msg[768];
    snprintf(msg, sizeof msg, "%s", loom_last_error());
    st = ox_fail(&n, st, "%s", msg);
  }
  for (int k = 0; st == LOOM_OK && k < n.n_out; k++) {
    const char *name = np->output[k];
    if (!name || !*name) continue;
    int64_t at = scope_slot(sc, name);
    if (n.out[k].id < 0)
      st = ox_fail(&n, LOOM_ERR_UNSUPPORTED, "output %d '%s' is not supported", k, name);
    else if (at >= 0 && sc->names[at])
      st = ox_fail(&n, LOOM_ERR_FORMAT, "output %d '%s' is defined already (by an input, an "
                   "initializer or an earlier node of its graph): a name is given one value",
                   k, name);
    else
      st = scope_set(sc, name, n.out[k]);
  }
  core_free(n.in);
  core_free(n.out);
  return st;
}

static loom_status_t add_initializers(ox_import_t *imp, ox_scope_t *sc,
                                      const Onnx__GraphProto *gp) {
  for (size_t i = 0; i < gp->n_initializer; i++)
    LOOM_TRY(add_initializer(imp, sc, gp->initializer[i]));
  if (gp->n_sparse_initializer)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX model: sparse initializers are not supported");
  return LOOM_OK;
}

static loom_status_t import_graph(ox_import_t *imp, const Onnx__GraphProto *gp) {
  ox_scope_t sc = {.g = imp->g};
  loom_status_t st = ox_seqio_check(gp, imp->options);
  if (st == LOOM_OK) st = add_initializers(imp, &sc, gp);
  for (size_t i = 0; st == LOOM_OK && i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (vi->name && is_initializer(gp, vi->name)) continue; /* a default */
    st = add_input(imp, &sc, vi);
  }
  for (size_t i = 0; st == LOOM_OK && i < gp->n_node; i++)
    st = import_node(imp, &sc, gp, gp->node[i], (int)i);
  for (size_t i = 0; st == LOOM_OK && i < gp->n_output; i++) {
    const char *name = gp->output[i]->name ? gp->output[i]->name : "";
    loom_value_t v;
    if (!scope_get(&sc, name, &v))
      st = loom_fail(LOOM_ERR_FORMAT, "ONNX model: output '%s' is computed by no node", name);
    else if (ox_is_seq(v)) {
      ox_node_t n = {.g = imp->g, .imp = imp, .scope = &sc, .opset = imp->opset};
      st = ox_seqio_output(&n, name, v);
    } else {
      ox_node_t n = {.g = imp->g, .imp = imp, .scope = &sc, .opset = imp->opset};
      if (ox_is_shape(v)) st = ox_shape_tensor(&n, v, &v);
      if (st == LOOM_OK) st = loom_graph_output_named(imp->g, name, v);
    }
  }
  scope_free(&sc);
  return st;
}

/* ---- Subgraphs ------------------------------------------------------------------ */

/* Notes that a subgraph reads name: a capture unless a graph between it
 * and the captures' root defines it (def, chained) or it is listed. */
static loom_status_t note_use(ox_scope_t *def, ox_scope_t *listed, ox_captures_t *c,
                              const char *name) {
  loom_value_t v = {-1};
  if (!name || !*name || scope_get(def, name, &v) || scope_get(listed, name, &v)) return LOOM_OK;
  LOOM_TRY(scope_set(listed, name, v));
  char **names = core_realloc(c->names, sizeof *names * (size_t)(c->n + 1));
  if (!names) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  c->names = names;
  c->names[c->n] = core_strdup(name);
  if (!c->names[c->n]) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  c->n++;
  return LOOM_OK;
}

static loom_status_t collect_free(const Onnx__GraphProto *gp, ox_scope_t *outer_def,
                                  ox_scope_t *listed, ox_captures_t *c);

static loom_status_t collect_node_free(const Onnx__NodeProto *np, ox_scope_t *def,
                                       ox_scope_t *listed, ox_captures_t *c) {
  for (size_t i = 0; i < np->n_input; i++) LOOM_TRY(note_use(def, listed, c, np->input[i]));
  for (size_t a = 0; a < np->n_attribute; a++) {
    const Onnx__AttributeProto *at = np->attribute[a];
    if (at->g) LOOM_TRY(collect_free(at->g, def, listed, c));
    for (size_t k = 0; k < at->n_graphs; k++) LOOM_TRY(collect_free(at->graphs[k], def, listed, c));
  }
  return LOOM_OK;
}

/* The names gp (and the subgraphs in it) read without defining them. */
static loom_status_t collect_free(const Onnx__GraphProto *gp, ox_scope_t *outer_def,
                                  ox_scope_t *listed, ox_captures_t *c) {
  ox_scope_t def = {.parent = outer_def};
  loom_value_t none = {-1};
  loom_status_t st = LOOM_OK;
  for (size_t i = 0; st == LOOM_OK && i < gp->n_input; i++)
    if (gp->input[i]->name) st = scope_set(&def, gp->input[i]->name, none);
  for (size_t i = 0; st == LOOM_OK && i < gp->n_initializer; i++)
    if (gp->initializer[i]->name) st = scope_set(&def, gp->initializer[i]->name, none);
  for (size_t i = 0; i < gp->n_node; i++)
    for (size_t k = 0; st == LOOM_OK && k < gp->node[i]->n_output; k++)
      if (*gp->node[i]->output[k]) st = scope_set(&def, gp->node[i]->output[k], none);
  for (size_t i = 0; st == LOOM_OK && i < gp->n_node; i++)
    st = collect_node_free(gp->node[i], &def, listed, c);
  for (size_t i = 0; st == LOOM_OK && i < gp->n_output; i++)
    st = note_use(&def, listed, c, gp->output[i]->name);
  scope_free(&def);
  return st;
}

void ox_captures_free(ox_captures_t *c) {
  for (int i = 0; i < c->n; i++) core_free(c->names[i]);
  core_free(c->names);
  core_free(c->values);
  *c = (ox_captures_t){0};
}

loom_status_t ox_captures_find(ox_node_t *n, int n_graphs, const Onnx__GraphProto *const *gps,
                               ox_captures_t *out) {
  *out = (ox_captures_t){0};
  ox_scope_t listed = {0};
  loom_status_t st = LOOM_OK;
  for (int i = 0; st == LOOM_OK && i < n_graphs; i++) st = collect_free(gps[i], NULL, &listed, out);
  scope_free(&listed);
  if (st == LOOM_OK) {
    out->values = core_calloc((size_t)out->n + 1, sizeof *out->values);
    if (!out->values) st = loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  }
  for (int i = 0; st == LOOM_OK && i < out->n; i++)
    if (!scope_get(n->scope, out->names[i], &out->values[i]))
      st = ox_fail(n, LOOM_ERR_FORMAT, "a subgraph reads '%s', which no enclosing graph "
                   "computes before the node", out->names[i]);
  if (st != LOOM_OK) ox_captures_free(out);
  return st;
}

static loom_status_t bind_subgraph(ox_scope_t *sc, const Onnx__GraphProto *gp, int n_formal,
                                   const loom_value_t *formal, const ox_captures_t *c,
                                   const loom_value_t *inner) {
  for (int i = 0; c && i < c->n; i++) LOOM_TRY(scope_set(sc, c->names[i], inner[i]));
  for (int i = 0; i < n_formal; i++)
    if (gp->input[i]->name && *gp->input[i]->name)
      LOOM_TRY(scope_set(sc, gp->input[i]->name, formal[i]));
  return LOOM_OK;
}

loom_status_t ox_subgraph_import(ox_node_t *n, const Onnx__GraphProto *gp, loom_graph_t *g,
                                 int n_formal, const loom_value_t *formal,
                                 const ox_captures_t *c, const loom_value_t *inner, int n_out,
                                 loom_value_t *out) {
  if ((int)gp->n_input != n_formal)
    return ox_fail(n, LOOM_ERR_FORMAT, "subgraph '%s' takes %zu inputs, the op gives it %d",
                   gp->name ? gp->name : "", gp->n_input, n_formal);
  if ((int)gp->n_output != n_out)
    return ox_fail(n, LOOM_ERR_FORMAT, "subgraph '%s' returns %zu outputs, the op needs %d",
                   gp->name ? gp->name : "", gp->n_output, n_out);
  ox_scope_t sc = {.g = g, .parent = g == n->g ? n->scope : NULL};
  loom_status_t st = bind_subgraph(&sc, gp, n_formal, formal, c, inner);
  if (st == LOOM_OK) st = add_initializers(n->imp, &sc, gp);
  for (size_t i = 0; st == LOOM_OK && i < gp->n_node; i++)
    st = import_node(n->imp, &sc, gp, gp->node[i], (int)i);
  if (st != LOOM_OK)
    st = ox_fail(n, st, "subgraph '%s': %s", gp->name ? gp->name : "", loom_last_error());
  for (int k = 0; st == LOOM_OK && k < n_out; k++) {
    const char *name = gp->output[k]->name ? gp->output[k]->name : "";
    if (!scope_get(&sc, name, &out[k]))
      st = ox_fail(n, LOOM_ERR_FORMAT, "subgraph '%s': output '%s' is computed by no node",
                   gp->name ? gp->name : "", name);
  }
  scope_free(&sc);
  return st;
}

static loom_status_t check_model(const Onnx__ModelProto *m, ox_import_t *imp) {
  if (!m->has_ir_version || m->ir_version < 3)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX model: IR version %lld is not supported "
                     "(3 and up are)", (long long)m->ir_version);
  if (!m->graph) return loom_fail(LOOM_ERR_FORMAT, "ONNX model: no graph");
  if (m->graph->n_output == 0)
    return loom_fail(LOOM_ERR_FORMAT, "ONNX model: the graph has no outputs");
  /* A model of training ops alone may import no default-domain opset: a
   * node of a domain the model imports none of fails (node_op). */
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    int64_t *opset = is_default_domain(o->domain) ? &imp->opset
                     : !strcmp(o->domain, TRAINING_DOMAIN) ? &imp->training_opset
                                                          : NULL;
    if (!opset) continue;
    if (o->version < 1)
      return loom_fail(LOOM_ERR_FORMAT, "ONNX model: opset %lld of domain %s",
                       (long long)o->version,
                       is_default_domain(o->domain) ? "ai.onnx" : o->domain);
    *opset = o->version;
  }
  if (m->n_opset_import == 0)
    return loom_fail(LOOM_ERR_FORMAT, "ONNX model: no opset is imported");
  return LOOM_OK;
}

/* to_free (the file's bytes, or NULL) is freed as soon as they are unpacked:
 * a large model's weights are then held once less while it imports. */
/* One import of m into a new graph, imp->g (NULL when it fails). */
static loom_status_t import_once(const Onnx__ModelProto *m, ox_import_t *imp) {
  const loom_onnx_options_t *o = imp->options;
  imp->fixed_used = core_calloc((size_t)(o->n_fixed + o->n_dims + o->n_shapes) + 1, sizeof(int));
  loom_status_t st = imp->fixed_used ? check_model(m, imp)
                                     : loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  if (st == LOOM_OK) st = loom_graph_create(&imp->g);
  if (st == LOOM_OK) st = import_graph(imp, m->graph);
  for (int k = 0; st == LOOM_OK && k < o->n_fixed; k++)
    if (!imp->fixed_used[k])
      st = loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: the model has no input '%s' to fix",
                     o->fixed_names[k] ? o->fixed_names[k] : "(null)");
  for (int k = 0; st == LOOM_OK && k < o->n_dims; k++)
    if (!imp->fixed_used[o->n_fixed + k])
      st = loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: no input has a symbolic dim named "
                     "'%s' (options.dim_names)", o->dim_names[k] ? o->dim_names[k] : "(null)");
  for (int k = 0; st == LOOM_OK && k < o->n_shapes; k++)
    if (!imp->fixed_used[o->n_fixed + o->n_dims + k])
      st = loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: the model has no input '%s' "
                     "(options.shape_names)", o->shape_names[k] ? o->shape_names[k] : "(null)");
  core_free(imp->fixed_used);
  imp->fixed_used = NULL;
  ox_seqs_free(imp->seqs);
  ox_shapes_free(imp->shapes);
  imp->seqs = NULL;
  imp->shapes = NULL;
  if (st == LOOM_OK) st = loom_graph_verify(imp->g);
  if (st != LOOM_OK) {
    loom_graph_destroy(imp->g);
    imp->g = NULL;
  }
  return st;
}

static loom_status_t load_model(const void *data, size_t size, void *to_free,
                                const loom_onnx_options_t *o, const char *base_dir,
                                loom_graph_t **out) {
  if (size == 0) {
    core_free(to_free);
    return loom_fail(LOOM_ERR_FORMAT, "ONNX model: the file is empty (0 bytes)");
  }
  loom_status_t nested = ox_check_nesting(data, size);
  Onnx__ModelProto *m = nested == LOOM_OK ? onnx__model_proto__unpack(NULL, size, data) : NULL;
  core_free(to_free);
  if (nested != LOOM_OK) return nested;
  if (!m)
    return loom_fail(LOOM_ERR_FORMAT, "ONNX model: not a valid ModelProto (%zu bytes: truncated, "
                     "corrupt, or not an ONNX file)", size);
  ox_import_t imp = {.trainable = o->trainable, .options = o,
                     .base_dir = o->base_dir ? o->base_dir : base_dir};
  loom_status_t st = import_once(m, &imp);
  if (st != LOOM_OK && st != LOOM_ERR_NOMEM && imp.n_anonymous > 1) {
    /* Exporters name each input's batch apart (tf2onnx's unk__10 and
     * unk__11) or not at all (skl2onnx), so two inputs' batches are
     * different symbols and an op joining the inputs cannot prove them
     * equal: a second try gives the anonymous dims at each position one
     * symbol (dim0, dim1, ...); the first try's error stands if it fails
     * too. A run whose sizes differ there fails binding them. */
    char first[1024];
    snprintf(first, sizeof first, "%s", loom_last_error());
    ox_import_t again = {.trainable = o->trainable, .options = o, .base_dir = imp.base_dir,
                         .merge_anonymous = 1};
    if (import_once(m, &again) == LOOM_OK) imp = again, st = LOOM_OK;
    else loom_fail(st, "%s", first);
  }
  onnx__model_proto__free_unpacked(m, NULL);
  if (st == LOOM_OK) *out = imp.g;
  return st;
}

static loom_status_t options_check(const loom_onnx_options_t *o, const char *fn) {
  if (o && (o->size < sizeof(size_t) || o->size > LOOM_MAX_STRUCT_SIZE))
    return loom_fail(LOOM_ERR_INVALID, "%s: options.size is %zu (set it with "
                     "loom_onnx_options_init)", fn, o->size);
  return LOOM_OK;
}

static loom_status_t fixed_check(const loom_onnx_options_t *o, const char *fn) {
  if (o->n_fixed < 0 || (o->n_fixed > 0 && (!o->fixed_names || !o->fixed_values)))
    return loom_fail(LOOM_ERR_INVALID, "%s: n_fixed is %d with fixed_names or fixed_values "
                     "null", fn, o->n_fixed);
  if (o->n_dims < 0 || (o->n_dims > 0 && (!o->dim_names || !o->dim_sizes)))
    return loom_fail(LOOM_ERR_INVALID, "%s: n_dims is %d with dim_names or dim_sizes null", fn,
                     o->n_dims);
  for (int k = 0; k < o->n_dims; k++)
    if (o->dim_sizes[k] < 0 || o->dim_sizes[k] > ((int64_t)1 << 40))
      return loom_fail(LOOM_ERR_INVALID, "%s: dim_sizes[%d] is %lld", fn, k,
                       (long long)o->dim_sizes[k]);
  if (o->n_shapes < 0 ||
      (o->n_shapes > 0 && (!o->shape_names || !o->shape_ranks || !o->shape_dims)))
    return loom_fail(LOOM_ERR_INVALID, "%s: n_shapes is %d with shape_names, shape_ranks or "
                     "shape_dims null", fn, o->n_shapes);
  for (int k = 0; k < o->n_shapes; k++) {
    if (o->shape_ranks[k] < 0 || o->shape_ranks[k] > LOOM_MAX_RANK ||
        (o->shape_ranks[k] > 0 && !o->shape_dims[k]))
      return loom_fail(LOOM_ERR_INVALID, "%s: shape_ranks[%d] is %d (or its dims null)", fn, k,
                       o->shape_ranks[k]);
    for (int d = 0; d < o->shape_ranks[k]; d++)
      if (o->shape_dims[k][d] < 0 || o->shape_dims[k][d] > ((int64_t)1 << 40))
        return loom_fail(LOOM_ERR_INVALID, "%s: shape_dims[%d][%d] is %lld", fn, k, d,
                         (long long)o->shape_dims[k][d]);
  }
  return LOOM_OK;
}

loom_status_t loom_onnx_options_init_sized(loom_onnx_options_t *o, size_t size) {
  LOOM_CHECK_ARG(o);
  if (size < sizeof(size_t) || size > LOOM_MAX_STRUCT_SIZE)
    return loom_fail(LOOM_ERR_INVALID, "loom_onnx_options_init: size %zu", size);
  loom_onnx_options_t d = {.size = size < sizeof d ? size : sizeof d};
  memcpy(o, &d, d.size);
  return LOOM_OK;
}

/* Reads the options the caller's struct has; the rest keep defaults. */
static loom_onnx_options_t options_of(const loom_onnx_options_t *o) {
  loom_onnx_options_t d = {.size = sizeof d};
  if (o) memcpy(&d, o, o->size < sizeof d ? o->size : sizeof d);
  return d;
}

loom_status_t loom_onnx_load_memory(const void *data, size_t size, const loom_onnx_options_t *o,
                                    loom_graph_t **out) {
  LOOM_CHECK_ARG(data);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_TRY(options_check(o, "loom_onnx_load_memory"));
  loom_onnx_options_t opts = options_of(o);
  LOOM_TRY(fixed_check(&opts, "loom_onnx_load_memory"));
  LOOM_TRY(load_model(data, size, NULL, &opts, ".", out));
  loom_clear_error();
  return LOOM_OK;
}

loom_status_t loom_onnx_load(const char *path, const loom_onnx_options_t *o, loom_graph_t **out) {
  LOOM_CHECK_ARG(path);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_TRY(options_check(o, "loom_onnx_load"));
  loom_onnx_options_t opts = options_of(o);
  LOOM_TRY(fixed_check(&opts, "loom_onnx_load"));
  void *data = NULL;
  size_t size = 0;
  LOOM_TRY(core_read_file(path, OX_MAX_FILE, &data, &size));
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  loom_status_t st = load_model(data, size, data, &opts, dir, out);
  if (st != LOOM_OK) return loom_fail(st, "%s: %s", path, loom_last_error());
  loom_clear_error();
  return LOOM_OK;
}
