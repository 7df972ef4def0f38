/* loom_onnx_describe: what a model holds, read without importing it, for
 * `loom explain`: its producer, the opsets it imports, its inputs with
 * their symbolic dims, the ops of its graph and subgraphs with their
 * counts, and every op the importer lacks with the reason (a failed load
 * names only the first). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/status.h"
#include "frontend/onnx/onnx_import.h"

enum { MAX_KINDS = 512 };

typedef struct kind {
  const char *domain, *op; /* the model's strings */
  int count;
} kind_t;

typedef struct text {
  char *buf;
  size_t len, cap;
  int failed;
} text_t;

__attribute__((format(printf, 2, 3))) static void put(text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->failed || n < 0) return;
  if (t->len + (size_t)n + 1 > t->cap) {
    size_t cap = (t->len + (size_t)n + 1) * 2;
    char *grown = core_realloc(t->buf, cap);
    if (!grown) {
      t->failed = 1;
      return;
    }
    t->buf = grown;
    t->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

static const char *domain_name(const char *d) { return d && *d ? d : "ai.onnx"; }

static void count_op(kind_t *kinds, int *n, const Onnx__NodeProto *np) {
  const char *op = np->op_type ? np->op_type : "";
  const char *dom = domain_name(np->domain);
  for (int i = 0; i < *n; i++)
    if (!strcmp(kinds[i].op, op) && !strcmp(kinds[i].domain, dom)) {
      kinds[i].count++;
      return;
    }
  if (*n < MAX_KINDS) kinds[(*n)++] = (kind_t){dom, op, 1};
}

/* The ops of gp and of every subgraph inside it. */
static void count_graph(kind_t *kinds, int *n, const Onnx__GraphProto *gp, int depth) {
  if (!gp || depth > 64) return;
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    count_op(kinds, n, np);
    for (size_t a = 0; a < np->n_attribute; a++) {
      const Onnx__AttributeProto *at = np->attribute[a];
      count_graph(kinds, n, at->g, depth + 1);
      for (size_t k = 0; k < at->n_graphs; k++) count_graph(kinds, n, at->graphs[k], depth + 1);
    }
  }
}

static int by_count(const void *a, const void *b) {
  const kind_t *x = a, *y = b;
  return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

static void put_input(text_t *t, const Onnx__ValueInfoProto *vi) {
  put(t, "  input %s", vi->name ? vi->name : "");
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) {
    put(t, ": not a tensor\n");
    return;
  }
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  put(t, ": %s [", ox_onnx_type_name(tt->elem_type));
  const Onnx__TensorShapeProto *s = tt->shape;
  for (size_t d = 0; s && d < s->n_dim; d++) {
    const Onnx__TensorShapeProto__Dimension *dim = s->dim[d];
    const char *sep = d ? ", " : "";
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
      put(t, "%s%lld", sep, (long long)dim->dim_value);
    else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
      put(t, "%s%s", sep, dim->dim_param);
    else
      put(t, "%s?", sep);
  }
  put(t, "]%s\n", s ? "" : " (rank unknown)");
}

static int is_initializer(const Onnx__GraphProto *gp, const char *name) {
  for (size_t i = 0; name && i < gp->n_initializer; i++)
    if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name)) return 1;
  return 0;
}

static void describe(text_t *t, const Onnx__ModelProto *m) {
  put(t, "ONNX model: IR version %lld", (long long)m->ir_version);
  if (m->producer_name && *m->producer_name)
    put(t, ", from %s %s", m->producer_name, m->producer_version ? m->producer_version : "");
  put(t, "\n  opsets:");
  for (size_t i = 0; i < m->n_opset_import; i++)
    put(t, " %s %lld", domain_name(m->opset_import[i]->domain),
        (long long)m->opset_import[i]->version);
  put(t, "\n");
  const Onnx__GraphProto *gp = m->graph;
  if (!gp) return;
  for (size_t i = 0; i < gp->n_input; i++)
    if (!is_initializer(gp, gp->input[i]->name)) put_input(t, gp->input[i]);
  kind_t *kinds = core_calloc(MAX_KINDS, sizeof *kinds);
  if (!kinds) {
    t->failed = 1;
    return;
  }
  int n = 0, nodes = 0, missing = 0;
  count_graph(kinds, &n, gp, 0);
  qsort(kinds, (size_t)n, sizeof *kinds, by_count);
  for (int i = 0; i < n; i++) nodes += kinds[i].count;
  put(t, "  %d nodes, %d kinds of op, %zu initializers:", nodes, n, gp->n_initializer);
  for (int i = 0; i < n; i++)
    put(t, "%s %s%s%s %d", i ? "," : "", strcmp(kinds[i].domain, "ai.onnx") ? kinds[i].domain : "",
        strcmp(kinds[i].domain, "ai.onnx") ? "." : "", kinds[i].op, kinds[i].count);
  put(t, "\n");
  for (int i = 0; i < n; i++) {
    const char *why = NULL;
    if (!ox_op_supported_in(kinds[i].domain, kinds[i].op, &why)) {
      put(t, "  not supported: %s%s%s (%d): %s\n",
          strcmp(kinds[i].domain, "ai.onnx") ? kinds[i].domain : "",
          strcmp(kinds[i].domain, "ai.onnx") ? "." : "", kinds[i].op, kinds[i].count, why);
      missing++;
    }
  }
  if (!missing) put(t, "  every op is supported\n");
  core_free(kinds);
}

loom_status_t loom_onnx_describe(const char *path, char **out) {
  LOOM_CHECK_ARG(path);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  void *data = NULL;
  size_t size = 0;
  LOOM_TRY(core_read_file(path, OX_MAX_FILE, &data, &size));
  loom_status_t nested = ox_check_nesting(data, size);
  Onnx__ModelProto *m = nested == LOOM_OK ? onnx__model_proto__unpack(NULL, size, data) : NULL;
  core_free(data);
  if (nested != LOOM_OK) return nested;
  if (!m) return loom_fail(LOOM_ERR_FORMAT, "%s: not a valid ONNX model", path);
  text_t t = {0};
  describe(&t, m);
  onnx__model_proto__free_unpacked(m, NULL);
  if (t.failed) {
    core_free(t.buf);
    return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_describe: out of memory");
  }
  *out = t.buf;
  return LOOM_OK;
}
