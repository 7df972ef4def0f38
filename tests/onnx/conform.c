/* The ONNX conformance runner: every case of ONNX's test data (a model and
 * test_data_set_N/{input,output}_K.pb) loaded with loom_onnx_load, run,
 * and compared with the expected outputs, with ONNX's backend-test
 * tolerance (rtol 1e-3, atol 1e-7) for floats and exactly otherwise.
 *
 *   onnx_conform [--compile] [--cc] [--filter TEXT] [--excluded FILE] [-q] DIR...
 *
 * Each DIR holds case folders (Debian's libonnx-testdata has node,
 * pytorch-converted, pytorch-operator and simple). One line per case:
 * pass, fail with the error, or skip with the reason (an op the importer
 * lists as unsupported, a dtype Loom does not have, or a line of the
 * excluded file); then a summary per op and in total. Exit status 1 when
 * any case fails. --compile runs each case through loom_compile (the pass
 * pipeline, fusion and the memory plan; reference kernels) besides the
 * interpreter; --cc also generates and compiles C. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <onnx.pb-c.h>

#include "loom/loom.h"

enum { PASS, FAIL, SKIP };

typedef struct op_count {
  char name[64];
  int n[3];
} op_count_t;

static op_count_t ops[512];
static int n_ops;
static int compile_mode, use_cc, quiet;
static const char *filter;
static char *excluded_text;

static op_count_t *op_entry(const char *name) {
  for (int i = 0; i < n_ops; i++)
    if (!strcmp(ops[i].name, name)) return &ops[i];
  if (n_ops == 512) return NULL;
  snprintf(ops[n_ops].name, sizeof ops[n_ops].name, "%s", name);
  return &ops[n_ops++];
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_op(const void *a, const void *b) {
  return strcmp(((const op_count_t *)a)->name, ((const op_count_t *)b)->name);
}

static Onnx__ModelProto *read_model(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)size + 1);
  Onnx__ModelProto *m = NULL;
  if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size)
    m = onnx__model_proto__unpack(NULL, (size_t)size, buf);
  free(buf);
  fclose(f);
  return m;
}

/* Why the case is skipped ("" when it is not): an unsupported op, or a
 * value of a type Loom does not have. */
static void skip_reason(const Onnx__ModelProto *m, char *why, size_t size) {
  why[0] = 0;
  const Onnx__GraphProto *g = m->graph;
  for (size_t i = 0; g && i < g->n_node; i++) {
    const char *reason;
    const char *dom = g->node[i]->domain;
    /* The importer reads the default domain and the training ops'. */
    if (dom && *dom && strcmp(dom, "ai.onnx") && strcmp(dom, "ai.onnx.preview.training")) {
      snprintf(why, size, "op %s of domain %s", g->node[i]->op_type, dom);
      return;
    }
    if (!loom_onnx_op_supported(g->node[i]->op_type, &reason)) {
      snprintf(why, size, "op %s: %s", g->node[i]->op_type, reason);
      return;
    }
  }
  for (int side = 0; g && side < 2; side++) {
    size_t count = side ? g->n_output : g->n_input;
    Onnx__ValueInfoProto **vis = side ? g->output : g->input;
    for (size_t i = 0; i < count; i++) {
      const Onnx__TypeProto *tp = vis[i]->type;
      if (!tp) continue;
      if (tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE ||
          tp->value_case == ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE) {
        snprintf(why, size, "%s '%s' is a map or sparse tensor", side ? "output" : "input",
                 vis[i]->name);
        return;
      }
      if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) continue;
      int32_t t = tp->tensor_type->elem_type;
      if (t == 8 || t == 14 || t == 15) {
        snprintf(why, size, "dtype %s", t == 8 ? "string" : "complex");
        return;
      }
    }
  }
}

static int close_enough(const loom_tensor_t *got, const loom_tensor_t *want, char *why,
                        size_t size) {
  loom_dtype_t gd = loom_tensor_dtype(got), wd = loom_tensor_dtype(want);
  if (gd != wd) {
    snprintf(why, size, "dtype %s, expected %s", loom_dtype_name(gd), loom_dtype_name(wd));
    return 0;
  }
  int rank = loom_tensor_rank(got);
  int same = rank == loom_tensor_rank(want);
  for (int d = 0; same && d < rank; d++) same = loom_tensor_dim(got, d) == loom_tensor_dim(want, d);
  if (!same) {
    char a[128] = "", b[128] = "";
    for (int d = 0; d < loom_tensor_rank(got); d++)
      snprintf(a + strlen(a), sizeof a - strlen(a), "%lld,", (long long)loom_tensor_dim(got, d));
    for (int d = 0; d < loom_tensor_rank(want); d++)
      snprintf(b + strlen(b), sizeof b - strlen(b), "%lld,", (long long)loom_tensor_dim(want, d));
    snprintf(why, size, "shape (%.100s), expected (%.100s)", a, b);
    return 0;
  }
  int exact = !(gd == LOOM_F32 || gd == LOOM_F64 || gd == LOOM_F16 || gd == LOOM_BF16);
  int64_t n = loom_tensor_numel(got);
  for (int64_t i = 0; i < n; i++) {
    double a, b;
    loom_tensor_get_f64(got, i, &a);
    loom_tensor_get_f64(want, i, &b);
    if (isnan(a) && isnan(b)) continue;
    if (exact ? a == b : (a == b || fabs(a - b) <= 1e-7 + 1e-3 * fabs(b))) continue;
    snprintf(why, size, "element %lld is %.9g, expected %.9g", (long long)i, a, b);
    return 0;
  }
  return 1;
}

/* ONNX's test data stores bfloat16 tensors as uint16 (NumPy has no
 * bfloat16): the bits, which Loom reads widened to i32. */
static void bits_as_bf16(loom_tensor_t **t) {
  if (loom_tensor_dtype(*t) != LOOM_I32) return;
  int rank = loom_tensor_rank(*t);
  int64_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < rank; d++) shape[d] = loom_tensor_dim(*t, d);
  loom_tensor_t *b = NULL;
  if (loom_tensor_create(LOOM_BF16, rank, shape, &b) != LOOM_OK) return;
  const int32_t *src = loom_tensor_data(*t);
  uint16_t *dst = loom_tensor_data(b);
  for (int64_t i = 0; i < loom_tensor_numel(*t); i++) dst[i] = (uint16_t)src[i];
  loom_tensor_destroy(*t);
  *t = b;
}

/* A value of the test data as the graph's tensors: a tensor is one,
 * named as the model's value; a sequence NAME its elements NAME.0 ..; an
 * optional its value's, or none. */
typedef struct value {
  int kind; /* ONNX__TYPE_PROTO__VALUE_*: tensor, sequence, or optional */
  int none; /* an optional that is none */
  int n;    /* tensors */
  char names[64][300];
  loom_tensor_t *t[64];
} value_t;

static void value_free(value_t *v) {
  for (int i = 0; i < v->n; i++) loom_tensor_destroy(v->t[i]);
  v->n = 0;
}

static int read_bytes(const char *path, uint8_t **buf, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  *buf = malloc((size_t)len + 1);
  int ok = *buf && fread(*buf, 1, (size_t)len, f) == (size_t)len;
  fclose(f);
  *size = (size_t)len;
  return ok;
}

/* ONNX's SequenceProto and OptionalProto are in onnx-data.proto, which
 * Debian does not ship: their few fields are read off the protobuf wire
 * format here. Field f's next length-delimited payload from [*p, end):
 * 1 with it in *data, *len; 0 at the end or on malformed bytes. */
static int next_field(const uint8_t **p, const uint8_t *end, uint32_t *field,
                      const uint8_t **data, uint64_t *len) {
  while (*p < end) {
    uint64_t key = 0, v = 0;
    for (int sh = 0; *p < end && sh < 64; sh += 7) {
      key |= (uint64_t)(**p & 0x7f) << sh;
      if (!(*(*p)++ & 0x80)) break;
    }
    int wire = (int)(key & 7);
    if (wire == 0 || wire == 2) {
      for (int sh = 0; *p < end && sh < 64; sh += 7) {
        v |= (uint64_t)(**p & 0x7f) << sh;
        if (!(*(*p)++ & 0x80)) break;
      }
    }
    if (wire == 1) *p += 8;
    if (wire == 5) *p += 4;
    if (wire == 2) {
      if (v > (uint64_t)(end - *p)) return 0;
      *field = (uint32_t)(key >> 3);
      *data = *p;
      *len = v;
      *p += v;
      return 1;
    }
    if (wire != 0 && wire != 1 && wire != 5) return 0;
  }
  return 0;
}

static int add_tensor_bytes(value_t *v, const char *name, int index, const uint8_t *data,
                            uint64_t len) {
  if (v->n == 64 || loom_onnx_load_tensor_memory(data, (size_t)len, &v->t[v->n]) != LOOM_OK)
    return 0;
  if (index < 0) snprintf(v->names[v->n], sizeof v->names[0], "%s", name);
  else snprintf(v->names[v->n], sizeof v->names[0], "%s.%d", name, index);
  v->n++;
  return 1;
}

/* A SequenceProto: its tensor_values (field 3). */
static int add_sequence(value_t *v, const char *name, const uint8_t *p, const uint8_t *end) {
  v->kind = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  const uint8_t *data;
  uint64_t len;
  uint32_t field;
  for (int i = 0; next_field(&p, end, &field, &data, &len);)
    if (field == 3 && !add_tensor_bytes(v, name, i++, data, len)) return 0;
  return 1;
}

/* An OptionalProto: tensor_value (field 3), sequence_value (5), or none. */
static int add_optional(value_t *v, const char *name, const uint8_t *p, const uint8_t *end) {
  const uint8_t *data;
  uint64_t len;
  uint32_t field;
  v->none = 1;
  while (next_field(&p, end, &field, &data, &len)) {
    if (field == 3) {
      v->none = 0;
      if (!add_tensor_bytes(v, name, -1, data, len)) return 0;
    } else if (field == 5) {
      v->none = 0;
      if (!add_sequence(v, name, data, data + len)) return 0;
    }
  }
  return 1;
}

/* Reads the .pb file at path as the model's value vi: 1 when it could. */
static int read_value(const char *path, const Onnx__ValueInfoProto *vi, value_t *v) {
  const Onnx__TypeProto *tp = vi->type;
  *v = (value_t){.kind = tp ? (int)tp->value_case : ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE};
  if (v->kind == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
    snprintf(v->names[0], sizeof v->names[0], "%s", vi->name);
    if (loom_onnx_load_tensor(path, &v->t[0]) != LOOM_OK) return 0;
    v->n = 1;
    if (tp && tp->tensor_type->elem_type == 16) bits_as_bf16(&v->t[0]);
    return 1;
  }
  snprintf(v->names[0], sizeof v->names[0], "%s", vi->name); /* a none's */
  uint8_t *buf = NULL;
  size_t size = 0;
  int ok = read_bytes(path, &buf, &size);
  if (ok && v->kind == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE)
    ok = add_sequence(v, vi->name, buf, buf + size);
  else if (ok && v->kind == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE)
    ok = add_optional(v, vi->name, buf, buf + size);
  else
    ok = 0;
  free(buf);
  return ok;
}

static int is_initializer(const Onnx__GraphProto *g, const char *name) {
  for (size_t i = 0; i < g->n_initializer; i++)
    if (!strcmp(g->initializer[i]->name, name)) return 1;
  return 0;
}

/* Whether the model input is a shape tensor: at most one dim of at most
 * 64 (what Reshape, Slice, TopK, Range, OneHot, Pad ... read sizes, axes
 * and scalars from). */
static int shape_tensor(const loom_tensor_t *t) {
  return loom_tensor_rank(t) <= 1 && loom_tensor_numel(t) <= 64;
}

typedef struct model_io {
  const Onnx__ModelProto *m;
  const Onnx__ValueInfoProto *in[64];
  int n_in;
} model_io_t;

/* The options of one set's inputs: which are fixed (its shape tensors,
 * with fix; its optionals that are none), the lengths and element shapes
 * of its sequences. */
typedef struct set_inputs {
  value_t vals[64];
  int n_vals;
  const char *fixed_names[64], *seq_names[64], *elem_names[64];
  const loom_tensor_t *fixed_values[64];
  int n_fixed, n_seqs, n_elems, seq_lengths[64], elem_ranks[64];
  int64_t elem_shape[64][LOOM_MAX_RANK];
  const int64_t *elem_dims[64];
  loom_tensor_t *in[64]; /* the graph's inputs, in order */
  int n_in;
} set_inputs_t;

static void set_input(set_inputs_t *s, const value_t *v, int fix) {
  if (v->none) {
    s->fixed_names[s->n_fixed] = v->names[0];
    s->fixed_values[s->n_fixed++] = NULL;
    return;
  }
  if (v->kind == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && fix && shape_tensor(v->t[0])) {
    s->fixed_names[s->n_fixed] = v->names[0];
    s->fixed_values[s->n_fixed++] = v->t[0];
    return;
  }
  int seq = v->kind == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  for (int i = 0; i < v->n && s->n_in < 64; i++) {
    s->in[s->n_in++] = v->t[i];
    if (!seq || s->n_elems == 64) continue;
    int e = s->n_elems++, rank = loom_tensor_rank(v->t[i]);
    s->elem_names[e] = v->names[i];
    s->elem_ranks[e] = rank;
    for (int d = 0; d < rank; d++) s->elem_shape[e][d] = loom_tensor_dim(v->t[i], d);
    s->elem_dims[e] = s->elem_shape[e];
  }
}

/* Reads a set's inputs; fix: its shape tensors are fixed. */
static int read_inputs(const model_io_t *io, int fix, const char *dir, set_inputs_t *s,
                       char *why, size_t size) {
  char path[8400];
  for (int i = 0; i < io->n_in; i++, s->n_vals++) {
    snprintf(path, sizeof path, "%s/input_%d.pb", dir, i);
    value_t *v = &s->vals[i];
    if (!read_value(path, io->in[i], v)) {
      snprintf(why, size, "input %d: %s", i, loom_last_error());
      return 0;
    }
    if (v->kind == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ||
        (v->kind == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && io->in[i]->type->optional_type &&
         io->in[i]->type->optional_type->elem_type &&
         io->in[i]->type->optional_type->elem_type->value_case ==
             ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && !v->none)) {
      v->kind = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
      s->seq_names[s->n_seqs] = io->in[i]->name;
      s->seq_lengths[s->n_seqs++] = v->n;
    }
    set_input(s, v, fix);
  }
  return 1;
}

/* Compares the graph's outputs with output_K.pb of dir. */
static int check_outputs(loom_graph_t *g, const Onnx__GraphProto *mg, loom_tensor_t **out,
                         int n_out, int compiled, const char *dir, char *why, size_t size) {
  char path[8400];
  int seen = 0, ok = 1;
  for (size_t k = 0; ok && k < mg->n_output; k++) {
    value_t want;
    snprintf(path, sizeof path, "%s/output_%zu.pb", dir, k);
    if (!read_value(path, mg->output[k], &want)) {
      snprintf(why, size, "expected output %zu: %s", k, loom_last_error());
      value_free(&want);
      return 0;
    }
    for (int i = 0; ok && i < want.n; i++, seen++) {
      int j = 0;
      while (j < n_out && strcmp(loom_graph_output_name(g, j), want.names[i])) j++;
      char detail[256] = "no such output";
      if (j == n_out || !close_enough(out[j], want.t[i], detail, sizeof detail)) {
        snprintf(why, size, "output '%s'%s: %s", want.names[i], compiled ? " (compiled)" : "",
                 detail);
        ok = 0;
      }
    }
    value_free(&want);
  }
  if (ok && seen != n_out) {
    snprintf(why, size, "%d outputs, %d expected", n_out, seen);
    ok = 0;
  }
  return ok;
}

/* Runs the graph (and its compiled form with --compile) on the set. */
static int run_graph(loom_graph_t *g, const Onnx__GraphProto *mg, set_inputs_t *s,
                     const char *dir, char *why, size_t size) {
  loom_tensor_t *out[64] = {0};
  loom_executable_t *e = NULL;
  int n_in = s->n_in, n_out = loom_graph_num_outputs(g), ok = 0;
  if (n_out > 64 || loom_graph_num_inputs(g) != n_in) {
    snprintf(why, size, "%d outputs, %d inputs for %d given", n_out, loom_graph_num_inputs(g), n_in);
    return 0;
  }
  for (int pass = 0; pass < 1 + compile_mode; pass++) {
    loom_status_t st = LOOM_OK;
    if (pass == 1) {
      loom_compile_options_t o;
      loom_compile_options_init(&o);
      o.use_cc = use_cc;
      o.dynamic_symbols = 1;
      o.num_threads = 1;
      loom_status_t cs = loom_compile(g, &o, &e);
      /* A graph whose outputs' shapes depend on data runs in the
       * interpreter only (loom_compile says so): the pass above. */
      if (cs == LOOM_ERR_UNSUPPORTED && strstr(loom_last_error(), "known only when the graph runs"))
        break;
      if (cs != LOOM_OK) {
        snprintf(why, size, "compile: %s", loom_last_error());
        goto done;
      }
      for (int k = 0; k < n_out && st == LOOM_OK; k++) {
        loom_tensor_destroy(out[k]);
        st = loom_executable_new_output_for(e, n_in, s->in, k, &out[k]);
      }
      if (st == LOOM_OK) st = loom_executable_run(e, n_in, s->in, n_out, out);
    } else {
      st = loom_interpret(g, n_in, s->in, n_out, out);
    }
    if (st != LOOM_OK) {
      snprintf(why, size, "%s: %s", pass ? "run" : "interpret", loom_last_error());
      goto done;
    }
    if (!check_outputs(g, mg, out, n_out, pass, dir, why, size)) goto done;
  }
  ok = 1;
done:
  for (int i = 0; i < 64; i++) loom_tensor_destroy(out[i]);
  loom_executable_destroy(e);
  return ok;
}

/* Runs one test_data_set_N folder: 1 when its outputs match, 0 when they
 * do not, -1 when the model does not load. Without fix, every tensor
 * input of the model is an input of the graph; with fix, its shape
 * tensors are fixed to this set's values when the model loads (Loom
 * specializes a graph to the values it reads sizes from). Sequences are
 * fed as their elements, their lengths and shapes given at load. */
static int run_set(const char *model, const model_io_t *io, int fix, const char *dir, char *why,
                   size_t size) {
  set_inputs_t *s = calloc(1, sizeof *s);
  loom_graph_t *g = NULL;
  int ok = 0;
  if (!s || !read_inputs(io, fix, dir, s, why, size)) goto done;
  loom_onnx_options_t lo;
  loom_onnx_options_init(&lo);
  lo.n_fixed = s->n_fixed;
  lo.fixed_names = s->fixed_names;
  lo.fixed_values = s->fixed_values;
  lo.n_seqs = s->n_seqs;
  lo.seq_names = s->seq_names;
  lo.seq_lengths = s->seq_lengths;
  lo.n_elem_shapes = s->n_elems;
  lo.elem_names = s->elem_names;
  lo.elem_ranks = s->elem_ranks;
  lo.elem_dims = s->elem_dims;
  if (loom_onnx_load(model, &lo, &g) != LOOM_OK) {
    snprintf(why, size, "load: %s", loom_last_error());
    ok = -1;
    goto done;
  }
  ok = run_graph(g, io->m->graph, s, dir, why, size);
done:
  for (int i = 0; s && i < s->n_vals; i++) value_free(&s->vals[i]);
  free(s);
  loom_graph_destroy(g);
  return ok;
}

static int run_case(const char *dir, const Onnx__ModelProto *m, char *why, size_t size) {
  char model[8192], path[8192];
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  model_io_t io = {.m = m};
  for (size_t i = 0; i < m->graph->n_input && io.n_in < 64; i++)
    if (!is_initializer(m->graph, m->graph->input[i]->name)) io.in[io.n_in++] = m->graph->input[i];
  /* Shape tensors are fixed only when the model does not load without. */
  int ok = 1, sets = 0, fix = 0;
  for (int k = 0; ok > 0; k++, sets++) {
    struct stat st;
    snprintf(path, sizeof path, "%s/test_data_set_%d", dir, k);
    if (stat(path, &st) != 0) break;
    ok = run_set(model, &io, fix, path, why, size);
    if (ok < 0 && k == 0 && !fix) ok = run_set(model, &io, fix = 1, path, why, size);
  }
  if (ok > 0) why[0] = 0;
  if (ok > 0 && sets == 0) {
    snprintf(why, size, "no test_data_set_0");
    ok = 0;
  }
  return ok > 0;
}

/* The reason a line "suite/case reason" of the excluded file gives, or NULL. */
static const char *excluded(const char *id) {
  if (!excluded_text) return NULL;
  size_t len = strlen(id);
  for (const char *p = excluded_text; *p;) {
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    if (*p != '#' && (size_t)(end - p) > len && !strncmp(p, id, len) && p[len] == ' ') {
      static char reason[512];
      snprintf(reason, sizeof reason, "%.*s", (int)(end - p - len - 1), p + len + 1);
      return reason;
    }
    p = *end ? end + 1 : end;
  }
  return NULL;
}

static void count_ops(const Onnx__ModelProto *m, int result) {
  const Onnx__GraphProto *g = m->graph;
  const char *seen[256];
  int n_seen = 0;
  for (size_t i = 0; g && i < g->n_node && n_seen < 256; i++) {
    int dup = 0;
    for (int k = 0; k < n_seen; k++) dup |= !strcmp(seen[k], g->node[i]->op_type);
    if (dup) continue;
    seen[n_seen++] = g->node[i]->op_type;
    op_count_t *c = op_entry(g->node[i]->op_type);
    if (c) c->n[result]++;
  }
}

int main(int argc, char **argv) {
  int total[3] = {0};
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--compile")) { compile_mode = 1; continue; }
    if (!strcmp(argv[a], "--cc")) { compile_mode = use_cc = 1; continue; }
    if (!strcmp(argv[a], "-q")) { quiet = 1; continue; }
    if (!strcmp(argv[a], "--filter") && a + 1 < argc) { filter = argv[++a]; continue; }
    if (!strcmp(argv[a], "--excluded") && a + 1 < argc) {
      FILE *f = fopen(argv[++a], "rb");
      if (!f) { fprintf(stderr, "onnx_conform: cannot read %s\n", argv[a]); return 2; }
      excluded_text = calloc(1 << 20, 1);
      size_t got = fread(excluded_text, 1, (1 << 20) - 1, f);
      excluded_text[got] = 0;
      fclose(f);
      continue;
    }
    const char *root = argv[a];
    DIR *d = opendir(root);
    if (!d) { fprintf(stderr, "onnx_conform: cannot open %s\n", root); return 2; }
    char *names[4096];
    int n = 0;
    for (struct dirent *ent; (ent = readdir(d)) && n < 4096;)
      if (ent->d_name[0] != '.') names[n++] = strdup(ent->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    const char *suite = strrchr(root, '/') ? strrchr(root, '/') + 1 : root;
    for (int i = 0; i < n; i++) {
      char dir[4096], model[4200], id[512], why[1024] = "";
      snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
      snprintf(model, sizeof model, "%s/model.onnx", dir);
      snprintf(id, sizeof id, "%s/%s", suite, names[i]);
      if (filter && !strstr(id, filter)) { free(names[i]); continue; }
      Onnx__ModelProto *m = read_model(model);
      if (!m) { free(names[i]); continue; }
      int result;
      const char *ex = excluded(id);
      skip_reason(m, why, sizeof why);
      if (why[0]) result = SKIP;
      else if (ex) { snprintf(why, sizeof why, "excluded: %s", ex); result = SKIP; }
      else result = run_case(dir, m, why, sizeof why) ? PASS : FAIL;
      static const char *const words[] = {"pass", "FAIL", "skip"};
      if (!quiet || result == FAIL)
        printf("%s %s%s%s\n", words[result], id, why[0] ? ": " : "", why);
      total[result]++;
      count_ops(m, result);
      onnx__model_proto__free_unpacked(m, NULL);
      free(names[i]);
    }
  }
  qsort(ops, (size_t)n_ops, sizeof *ops, cmp_op);
  printf("\n%-28s %6s %6s %6s\n", "op", "pass", "fail", "skip");
  for (int i = 0; i < n_ops; i++)
    printf("%-28s %6d %6d %6d\n", ops[i].name, ops[i].n[PASS], ops[i].n[FAIL], ops[i].n[SKIP]);
  int all = total[PASS] + total[FAIL] + total[SKIP];
  printf("\nONNX conformance: %d of %d cases pass (%.1f%%), %d fail, %d skipped\n", total[PASS],
         all, all ? 100.0 * total[PASS] / all : 0.0, total[FAIL], total[SKIP]);
  free(excluded_text);
  return total[FAIL] ? 1 : 0;
}
