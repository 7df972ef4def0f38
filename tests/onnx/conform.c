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
      if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        snprintf(why, size, "%s '%s' is not a tensor (sequence, map or optional)",
                 side ? "output" : "input", vis[i]->name);
        return;
      }
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
    snprintf(why, size, "shape (%s), expected (%s)", a, b);
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

static int32_t elem_type(const Onnx__ValueInfoProto *vi) {
  return vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE
             ? vi->type->tensor_type->elem_type
             : 0;
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

/* Runs one test_data_set_N folder; 1 when its outputs match. Without fix,
 * every input of the model is an input of the graph; with fix, its shape
 * tensors are fixed to this set's values when the model loads (Loom
 * specializes a graph to the values it reads sizes from). */
static int run_set(const char *model, const model_io_t *io, int fix, const char *dir, char *why,
                   size_t size) {
  const Onnx__GraphProto *mg = io->m->graph;
  loom_tensor_t *given[64] = {0}, *in[64] = {0}, *out[64] = {0}, *want = NULL;
  const char *fixed_names[64];
  const loom_tensor_t *fixed_values[64];
  int n_fixed = 0, n_in = 0, ok = 0;
  loom_graph_t *g = NULL;
  loom_executable_t *e = NULL;
  char path[8400];
  for (int i = 0; i < io->n_in; i++) {
    snprintf(path, sizeof path, "%s/input_%d.pb", dir, i);
    if (loom_onnx_load_tensor(path, &given[i]) != LOOM_OK) {
      snprintf(why, size, "input %d: %s", i, loom_last_error());
      goto done;
    }
    if (elem_type(io->in[i]) == 16) bits_as_bf16(&given[i]);
    if (fix && shape_tensor(given[i])) {
      fixed_names[n_fixed] = io->in[i]->name;
      fixed_values[n_fixed++] = given[i];
    } else {
      in[n_in++] = given[i];
    }
  }
  loom_onnx_options_t lo;
  loom_onnx_options_init(&lo);
  lo.n_fixed = n_fixed;
  lo.fixed_names = fixed_names;
  lo.fixed_values = fixed_values;
  if (loom_onnx_load(model, &lo, &g) != LOOM_OK) {
    snprintf(why, size, "load: %s", loom_last_error());
    goto done;
  }
  int n_out = loom_graph_num_outputs(g);
  if (n_out > 64 || loom_graph_num_inputs(g) != n_in) {
    snprintf(why, size, "%d outputs, %d inputs for %d given", n_out, loom_graph_num_inputs(g), n_in);
    goto done;
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
        st = loom_executable_new_output_for(e, n_in, in, k, &out[k]);
      }
      if (st == LOOM_OK) st = loom_executable_run(e, n_in, in, n_out, out);
    } else {
      st = loom_interpret(g, n_in, in, n_out, out);
    }
    if (st != LOOM_OK) {
      snprintf(why, size, "%s: %s", pass ? "run" : "interpret", loom_last_error());
      goto done;
    }
    for (int k = 0; k < n_out; k++) {
      snprintf(path, sizeof path, "%s/output_%d.pb", dir, k);
      if (loom_onnx_load_tensor(path, &want) != LOOM_OK) {
        snprintf(why, size, "expected output %d: %s", k, loom_last_error());
        goto done;
      }
      if (k < (int)mg->n_output && elem_type(mg->output[k]) == 16) bits_as_bf16(&want);
      char detail[256];
      if (!close_enough(out[k], want, detail, sizeof detail)) {
        snprintf(why, size, "output %d '%s'%s: %s", k, loom_graph_output_name(g, k),
                 pass ? " (compiled)" : "", detail);
        goto done;
      }
      loom_tensor_destroy(want);
      want = NULL;
    }
  }
  ok = 1;
done:
  loom_tensor_destroy(want);
  for (int i = 0; i < 64; i++) {
    loom_tensor_destroy(given[i]);
    loom_tensor_destroy(out[i]);
  }
  loom_executable_destroy(e);
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
  loom_graph_t *g = NULL;
  int fix = loom_onnx_load(model, NULL, &g) != LOOM_OK;
  loom_graph_destroy(g);
  int ok = 1, sets = 0;
  for (int k = 0; ok; k++, sets++) {
    struct stat st;
    snprintf(path, sizeof path, "%s/test_data_set_%d", dir, k);
    if (stat(path, &st) != 0) break;
    ok = run_set(model, &io, fix, path, why, size);
  }
  if (ok && sets == 0) {
    snprintf(why, size, "no test_data_set_0");
    ok = 0;
  }
  return ok;
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
