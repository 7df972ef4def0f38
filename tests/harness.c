#include "harness.h"

#include "core/alloc.h"
#include "core/log.h"
#include "core/tensor.h"
#include "ir/ir.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int test_failures;
int test_checks;

void test_fail(const char *file, int line, const char *fmt, ...) {
  test_failures++;
  if (test_failures > 50) return; /* the first ones tell the story */
  fprintf(stderr, "%s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void test_check_err(loom_status_t got, loom_status_t want, const char *text,
                    const char *expr, const char *file, int line) {
  test_checks++;
  if (got != want)
    test_fail(file, line, "%s returned %s, expected %s (message: %s)", expr,
              loom_status_name(got), loom_status_name(want), loom_last_error());
  else if (text && !strstr(loom_last_error(), text))
    test_fail(file, line, "%s: message \"%s\" does not mention \"%s\"", expr,
              loom_last_error(), text);
}

static int near(double a, double b, double atol, double rtol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= atol + rtol * fabs(b);
}

void test_check_near(double a, double b, double atol, double rtol,
                     const char *expr, const char *file, int line) {
  test_checks++;
  if (!near(a, b, atol, rtol))
    test_fail(file, line, "%s = %.17g, expected %.17g", expr, a, b);
}

void test_check_floats(const float *got, const float *want, int64_t n, double atol,
                       double rtol, const char *file, int line) {
  int misses = 0;
  test_checks++;
  for (int64_t i = 0; i < n; i++) {
    if (near(got[i], want[i], atol, rtol)) continue;
    if (misses++ < 5)
      test_fail(file, line, "element %lld = %.9g, expected %.9g", (long long)i, got[i],
                want[i]);
  }
}

loom_value_t test_constant(loom_graph_t *g, loom_dtype_t dtype, int rank, const int64_t *shape,
                           const double *values) {
  loom_tensor_t *t = test_tensor(dtype, rank, shape, values);
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_constant(g, t, &v));
  loom_tensor_destroy(t);
  return v;
}

double test_get(const loom_tensor_t *t, int64_t i) {
  double v = NAN;
  if (loom_tensor_get_f64(t, i, &v) != LOOM_OK) return NAN;
  return v;
}

void test_check_tensor(const loom_tensor_t *t, const double *want, int64_t n,
                       double atol, double rtol, const char *file, int line) {
  test_checks++;
  if (!t) {
    test_fail(file, line, "tensor is null");
    return;
  }
  if (loom_tensor_numel(t) != n) {
    test_fail(file, line, "tensor has %lld elements, expected %lld",
              (long long)loom_tensor_numel(t), (long long)n);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double v = test_get(t, i);
    if (!near(v, want[i], atol, rtol)) {
      test_fail(file, line, "element %lld = %.17g, expected %.17g", (long long)i,
                v, want[i]);
      return;
    }
  }
}

double test_rtol(loom_dtype_t dtype, double scale) {
  switch (dtype) {
    case LOOM_F32: return 2e-7 * scale;
    case LOOM_F64: return 1e-15 * scale;
    case LOOM_F16: return 1e-3 * scale;
    case LOOM_BF16: return 8e-3 * scale;
    default: return 0;
  }
}

static uint64_t rng_state = 1;

void test_seed(uint64_t seed) { rng_state = seed; }

uint64_t test_rand_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double test_rand_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(test_rand_u64() >> 11) / 9007199254740992.0);
}

int64_t test_rand_int(int64_t lo, int64_t hi) {
  return lo + (int64_t)(test_rand_u64() % (uint64_t)(hi - lo + 1));
}

loom_tensor_t *test_tensor(loom_dtype_t dtype, int rank, const int64_t *shape,
                           const double *values) {
  loom_tensor_t *t = NULL;
  if (loom_tensor_create(LOOM_F64, rank, shape, &t) != LOOM_OK) {
    test_fail(__FILE__, __LINE__, "test_tensor: %s", loom_last_error());
    return NULL;
  }
  int64_t n = loom_tensor_numel(t);
  memcpy(loom_tensor_data(t), values, sizeof(double) * (size_t)n);
  if (dtype == LOOM_F64) return t;
  /* Convert through a one-node graph so that the harness needs nothing
   * private; the cast kernel is tested on its own. */
  loom_graph_t *g;
  loom_value_t x, y;
  loom_tensor_t *out = NULL;
  loom_graph_create(&g);
  int64_t dims[LOOM_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = shape[i];
  loom_graph_input(g, "x", LOOM_F64, rank, dims, &x);
  loom_cast(g, x, dtype, &y);
  loom_graph_output(g, y);
  if (loom_interpret(g, 1, &t, 1, &out) != LOOM_OK)
    test_fail(__FILE__, __LINE__, "test_tensor cast: %s", loom_last_error());
  loom_graph_destroy(g);
  loom_tensor_destroy(t);
  return out;
}

loom_tensor_t *test_rand_tensor(loom_dtype_t dtype, int rank,
                                const int64_t *shape, double lo, double hi) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    double x = test_rand_uniform(lo, hi);
    if (dtype == LOOM_BOOL) x = x > (lo + hi) / 2;
    else if (dtype == LOOM_I8 || dtype == LOOM_I32 || dtype == LOOM_I64) x = round(x);
    v[i] = x;
  }
  loom_tensor_t *t = test_tensor(dtype, rank, shape, v);
  free(v);
  return t;
}

/* The tolerance of compiled code against the reference kernels: generated
 * f32 code computes in float, the reference in double. */
static double compiled_atol(loom_dtype_t d, double scale) {
  switch (d) {
    case LOOM_F32: return 1e-5 * scale;
    case LOOM_F64: return 1e-12 * scale;
    case LOOM_F16: return 2e-3 * scale;
    case LOOM_BF16: return 1.6e-2 * scale;
    default: return 0;
  }
}

/* Whether a graph writes state (a second run would see new values) or
 * has data-dependent shapes (which only the interpreter runs). */
static int skip_compiled(const loom_graph_t *g) {
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == IR_OP_ASSIGN || (ir_ops[g->nodes[i].op].flags & F_DATA_SHAPE))
      return 1;
  return 0;
}

void test_check_no_lost_code(const loom_executable_t *e) {
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  test_checks++;
  if (loom_executable_info(e, &info) != LOOM_OK) return;
  if (info.fallback == LOOM_FALLBACK_CC_FAILED || info.fallback == LOOM_FALLBACK_NO_MODULE)
    test_fail(__FILE__, __LINE__, "generated code lost (%s): %s",
              loom_fallback_name(info.fallback), info.fallback_reason);
}

/* What a failure names: the graph's last op and its output dtype. */
static void graph_label(const loom_graph_t *g, char *buf, size_t size) {
  const char *op = g->n_nodes ? ir_ops[g->nodes[g->n_nodes - 1].op].name : "(no node)";
  const ir_type_t *t = g->n_outputs ? &g->values[g->outputs[0]].type : NULL;
  snprintf(buf, size, "%s -> %s", op, t ? loom_dtype_name(t->dtype) : "?");
}

/* Whether got matches the interpreter's want within the compiled-code
 * tolerance; the first miss is reported under `label`. */
static void compare_compiled(const loom_tensor_t *got, const loom_tensor_t *want,
                             const char *label) {
  double scale = 1;
  for (int64_t i = 0; i < loom_tensor_numel(want); i++)
    if (isfinite(test_get(want, i)) && fabs(test_get(want, i)) > scale)
      scale = fabs(test_get(want, i));
  loom_dtype_t dt = loom_tensor_dtype(want);
  for (int64_t i = 0; i < loom_tensor_numel(want); i++)
    if (!near(test_get(got, i), test_get(want, i), compiled_atol(dt, scale), 0)) {
      test_fail(__FILE__, __LINE__,
                "%s: compiled element %lld = %.9g, the interpreter gives %.9g", label,
                (long long)i, test_get(got, i), test_get(want, i));
      return;
    }
}

/* Compiles g specialized to the inputs' shapes (its symbols bound from
 * them), runs it and checks its n_out outputs against want[]. */
static void compile_and_compare(loom_graph_t *g, int n_in, loom_tensor_t *const *in,
                                int n_out, loom_tensor_t *const *want) {
  const char *names[LOOM_MAX_RANK * 8];
  int64_t values[LOOM_MAX_RANK * 8];
  int n_syms = 0;
  for (int i = 0; i < n_in && i < (int)g->n_inputs; i++) {
    const ir_type_t *t = &g->values[g->inputs[i]].type;
    for (int d = 0; d < t->rank && n_syms < LOOM_MAX_RANK * 8; d++) {
      const ir_expr_t *x = ir_dim_expr(g, t->dims[d]);
      if (!x || x->kind != IR_EXPR_SYM) continue;
      names[n_syms] = x->name;
      values[n_syms++] = loom_tensor_dim(in[i], d);
    }
  }
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.n_symbols = n_syms;
  o.symbol_names = names;
  o.symbol_values = values;
  char label[96];
  graph_label(g, label, sizeof label);
  loom_executable_t *e = NULL;
  loom_tensor_t **got = calloc((size_t)n_out, sizeof *got);
  loom_status_t s = got ? loom_compile(g, &o, &e) : LOOM_ERR_NOMEM;
  if (s == LOOM_OK) test_check_no_lost_code(e);
  for (int k = 0; k < n_out && s == LOOM_OK; k++)
    s = loom_executable_new_output(e, k, &got[k]);
  if (s == LOOM_OK) s = loom_executable_run(e, n_in, in, n_out, got);
  if (s != LOOM_OK)
    test_fail(__FILE__, __LINE__, "%s: compiled run: %s: %s", label,
              loom_status_name(s), loom_last_error());
  for (int k = 0; k < n_out && s == LOOM_OK; k++) compare_compiled(got[k], want[k], label);
  for (int k = 0; got && k < n_out; k++) loom_tensor_destroy(got[k]);
  free(got);
  loom_executable_destroy(e);
}

/* ---- Batched compile checks ----------------------------------------------
 * A C compiler run costs about 0.2 s whatever the module's size, and an op
 * test checks hundreds of one-node graphs. Graphs that need nothing of
 * their own (no symbols, no subgraphs, contiguous inputs) are therefore
 * copied aside and compiled together, as one graph with one output per
 * case, when a TEST_RUN ends or BATCH_MAX cases wait. A batch that does
 * not compile or run is checked again case by case, so that a failure
 * names its case; a wrong output is reported under its own case. */

#define BATCH_MAX 64

typedef struct pending_case {
  loom_graph_t *g; /* a copy owning its data */
  int n_in;
  loom_tensor_t **in; /* contiguous copies */
  loom_tensor_t *want;
} pending_case_t;

static pending_case_t batch[BATCH_MAX];
static int batch_n;

static int batchable(const loom_graph_t *g, int n_in, loom_tensor_t *const *in) {
  if (g->n_symbols || g->n_subgraphs || g->n_outputs != 1 || n_in != (int)g->n_inputs)
    return 0;
  for (int i = 0; i < n_in; i++)
    if (!tensor_is_contiguous(in[i])) return 0;
  return 1;
}

static void pending_free(pending_case_t *p) {
  for (int i = 0; i < p->n_in; i++) loom_tensor_destroy(p->in[i]);
  free(p->in);
  loom_tensor_destroy(p->want);
  loom_graph_destroy(p->g);
  memset(p, 0, sizeof *p);
}

/* Appends case k's graph to dst: inputs renamed apart, parameters and
 * constants copied, nodes rebuilt through ir_add_node, its output made
 * one of dst's. */
static loom_status_t append_case(loom_graph_t *dst, int k, const loom_graph_t *src) {
  int32_t *map = malloc(sizeof *map * (size_t)(src->n_values ? src->n_values : 1));
  if (!map) return LOOM_ERR_NOMEM;
  loom_status_t s = LOOM_OK;
  for (int64_t v = 0; v < src->n_values && s == LOOM_OK; v++) {
    const ir_value_t *x = &src->values[v];
    loom_value_t nv = {-1};
    char name[96];
    snprintf(name, sizeof name, "c%d.%s", k, x->name ? x->name : "v");
    if (x->kind == IR_VALUE_INPUT) {
      loom_dim_t dims[LOOM_MAX_RANK];
      for (int d = 0; d < x->type.rank; d++) dims[d] = x->type.dims[d];
      s = loom_graph_input(dst, name, x->type.dtype, x->type.rank, dims, &nv);
    } else if (x->kind == IR_VALUE_PARAM) {
      s = loom_graph_param(dst, name, x->type.dtype, x->data->rank, x->data->shape,
                           x->data, &nv);
    } else if (x->kind == IR_VALUE_CONST) {
      s = loom_graph_constant(dst, x->data, &nv);
    }
    map[v] = nv.id;
  }
  for (int64_t i = 0; i < src->n_nodes && s == LOOM_OK; i++) {
    const ir_node_t *n = &src->nodes[i];
    int32_t in[n->n_in > 0 ? n->n_in : 1], out[n->n_out > 0 ? n->n_out : 1];
    for (int j = 0; j < n->n_in; j++) in[j] = map[n->in[j]];
    s = ir_add_node(dst, n->op, n->n_in, in, n->attrs, out, n->n_out);
    for (int j = 0; j < n->n_out && s == LOOM_OK; j++) map[n->out[j]] = out[j];
  }
  if (s == LOOM_OK) s = loom_graph_output(dst, (loom_value_t){map[src->outputs[0]]});
  free(map);
  return s;
}

static void batch_check_each(void) {
  for (int k = 0; k < batch_n; k++)
    compile_and_compare(batch[k].g, batch[k].n_in, batch[k].in, 1, &batch[k].want);
}

void test_flush_compiled(void) {
  if (batch_n == 0) return;
  loom_graph_t *all = NULL;
  int n_in = 0;
  loom_status_t s = loom_graph_create(&all);
  for (int k = 0; k < batch_n && s == LOOM_OK; k++) {
    s = append_case(all, k, batch[k].g);
    n_in += batch[k].n_in;
  }
  loom_tensor_t **in = s == LOOM_OK ? malloc(sizeof *in * (size_t)(n_in ? n_in : 1)) : NULL;
  loom_tensor_t *want[BATCH_MAX];
  if (in) {
    int at = 0;
    for (int k = 0; k < batch_n; k++) {
      for (int i = 0; i < batch[k].n_in; i++) in[at++] = batch[k].in[i];
      want[k] = batch[k].want;
    }
    int failures = test_failures;
    compile_and_compare(all, n_in, in, batch_n, want);
    /* A batch that failed as a whole is retried case by case, so that
     * the failure names the case. */
    if (test_failures != failures && batch_n > 1) batch_check_each();
  } else {
    batch_check_each();
  }
  free(in);
  loom_graph_destroy(all);
  for (int k = 0; k < batch_n; k++) pending_free(&batch[k]);
  batch_n = 0;
}

/* Queues g's compile check (or runs it at once when g cannot join a
 * batch). Graphs that write state or have data-dependent shapes are not
 * compiled here. */
static void check_compiled(loom_graph_t *g, int n_in, loom_tensor_t *const *in,
                           const loom_tensor_t *want) {
  const char *env = getenv("LOOM_TEST_COMPILE");
  if ((env && !strcmp(env, "0")) || skip_compiled(g)) return;
  if (!batchable(g, n_in, in)) {
    compile_and_compare(g, n_in, in, 1, (loom_tensor_t *const *)&want);
    return;
  }
  pending_case_t *p = &batch[batch_n];
  /* A copy that owns its constants and parameters (the caller destroys g
   * before the batch runs). */
  loom_status_t s = loom_graph_create(&p->g);
  if (s == LOOM_OK) s = append_case(p->g, 0, g);
  p->in = calloc((size_t)(n_in ? n_in : 1), sizeof *p->in);
  if (s == LOOM_OK && !p->in) s = LOOM_ERR_NOMEM;
  for (int i = 0; i < n_in && s == LOOM_OK; i++, p->n_in++)
    s = tensor_contiguous_copy(in[i], &p->in[i]);
  if (s == LOOM_OK) s = tensor_contiguous_copy(want, &p->want);
  if (s != LOOM_OK) {
    test_fail(__FILE__, __LINE__, "queueing a compile check: %s", loom_last_error());
    pending_free(p);
    return;
  }
  if (++batch_n == BATCH_MAX) test_flush_compiled();
}

loom_tensor_t *test_run1(loom_graph_t *g, int n_in, loom_tensor_t *const *in) {
  loom_tensor_t *out = NULL;
  loom_status_t s = loom_interpret(g, n_in, in, 1, &out);
  if (s != LOOM_OK) {
    test_fail(__FILE__, __LINE__, "loom_interpret: %s: %s", loom_status_name(s),
              loom_last_error());
    return NULL;
  }
  check_compiled(g, n_in, in, out);
  return out;
}

int test_summary(void) {
  test_flush_compiled();
  printf("%d passed, %d failed\n", test_checks - test_failures, test_failures);
  return test_failures ? 1 : 0;
}

int test_files_with_prefix(const char *dir, const char *prefix, char *first, size_t size) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && n++ == 0 && first &&
        strlen(dir) + strlen(e->d_name) + 2 <= size) {
      strcpy(first, dir);
      strcat(first, "/");
      strcat(first, e->d_name);
    }
  if (d) closedir(d);
  return n;
}

static struct {
  int fd, saved;
  char path[64];
  bool log;
} capture = {-1, -1, "", false};

void test_capture_begin(const char *loom_log) {
  snprintf(capture.path, sizeof capture.path, "/tmp/loom-test-capture-XXXXXX");
  capture.fd = mkstemp(capture.path);
  CHECK(capture.fd >= 0);
  fflush(stderr);
  capture.saved = dup(2);
  if (capture.fd >= 0) dup2(capture.fd, 2);
  capture.log = loom_log != NULL;
  if (capture.log) {
    setenv("LOOM_LOG", loom_log, 1);
    core_log_reload();
  }
}

char *test_capture_end(void) {
  enum { MAX = 1 << 16 };
  fflush(stderr);
  if (capture.saved >= 0) {
    dup2(capture.saved, 2);
    close(capture.saved);
  }
  if (capture.log) {
    unsetenv("LOOM_LOG");
    core_log_reload();
  }
  char *text = calloc(1, MAX);
  if (capture.fd >= 0) {
    lseek(capture.fd, 0, SEEK_SET);
    ssize_t got = text ? read(capture.fd, text, MAX - 1) : -1;
    if (text && got > 0) text[got] = '\0';
    close(capture.fd);
    unlink(capture.path);
  }
  capture.fd = capture.saved = -1;
  return text;
}

void test_each_allocation_failing(loom_status_t (*run)(void *ctx), void *ctx, int least,
                                  int most) {
  loom_status_t s = LOOM_ERR_NOMEM;
  int n = 0, wrong = 0;
  for (; n < most && s != LOOM_OK; n++) {
    core_alloc_fail_after(n);
    s = run(ctx);
    core_alloc_fail_after(-1);
    if (s != LOOM_OK && s != LOOM_ERR_NOMEM) {
      if (!wrong) printf("allocation %d: %s: %s\n", n, loom_status_name(s), loom_last_error());
      wrong++;
    }
  }
  CHECK(s == LOOM_OK && n > least);
  CHECK(wrong == 0);
}
