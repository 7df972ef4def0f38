/* The C emitter: generated modules compiled with the system compiler and
 * loaded, their groups run on slots we allocate, compared with the
 * interpreter (the reference kernels) within dtype tolerances. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/codegen/codegen.h"
#include "core/alloc.h"
#include "core/pool.h"
#include "harness.h"
#include "backend/cpu/kernels/gemm.h"
#include "loom/ops.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- The runtime side of the ABI, for tests ------------------------------- */

static void test_parallel_for(void *pool, int64_t n, int64_t grain,
                              loom_abi_body_t body, void *ctx) {
  core_pool_for(pool, n, grain, body, ctx);
}
static void test_gemm(const loom_abi_gemm_t *d, void *pool) { kern_gemm_f32(d, pool); }
static void test_conv(const loom_abi_conv2d_t *d, void *pool) { kern_conv2d_f32(d, KERN_CONV_DEFAULT, pool); }

/* ---- A plan from a node-to-group assignment --------------------------------- */

typedef struct built {
  fuse_plan_t plan;
  int32_t *slot_of_value;
  int n_slots;
} built_t;

static bool value_read_outside(const loom_graph_t *g, const int32_t *grp_of, int gi,
                               int32_t v) {
  for (int64_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  for (int64_t n = 0; n < g->n_nodes; n++)
    for (int k = 0; k < g->nodes[n].n_in; k++)
      if (g->nodes[n].in[k] == v && grp_of[n] != gi) return true;
  return false;
}

static void add_unique(int32_t *list, int *n, int32_t v) {
  for (int i = 0; i < *n; i++)
    if (list[i] == v) return;
  list[(*n)++] = v;
}

/* group_of[n] names node n's group; kinds[k] the kind of group k. */
static void build_plan(const loom_graph_t *g, int n_groups, const fuse_kind_t *kinds,
                       const int32_t *group_of, built_t *b) {
  fuse_plan_t *p = &b->plan;
  p->n_groups = n_groups;
  p->groups = calloc((size_t)n_groups, sizeof *p->groups);
  p->group_of_node = calloc((size_t)g->n_nodes + 1, sizeof(int32_t));
  b->slot_of_value = malloc(sizeof(int32_t) * (size_t)g->n_values);
  for (int64_t v = 0; v < g->n_values; v++) b->slot_of_value[v] = -1;
  memcpy(p->group_of_node, group_of, sizeof(int32_t) * (size_t)g->n_nodes);
  b->n_slots = 0;
  for (int64_t i = 0; i < g->n_inputs; i++) b->slot_of_value[g->inputs[i]] = b->n_slots++;
  for (int gi = 0; gi < n_groups; gi++) {
    fuse_group_t *gr = &p->groups[gi];
    int cap = (int)g->n_values + 1;
    gr->kind = kinds[gi];
    gr->anchor = -1;
    gr->nodes = calloc((size_t)cap, sizeof(int32_t));
    gr->inputs = calloc((size_t)cap, sizeof(int32_t));
    gr->outputs = calloc((size_t)cap, sizeof(int32_t));
    for (int64_t n = 0; n < g->n_nodes; n++) {
      if (group_of[n] != gi) continue;
      const ir_node_t *nd = &g->nodes[n];
      gr->nodes[gr->n_nodes++] = (int32_t)n;
      ir_fusion_class_t cls = ir_ops[nd->op].fusion_class;
      if (gr->anchor < 0 && (cls == IR_CLASS_REDUCE || cls == IR_CLASS_CONTRACT))
        gr->anchor = (int32_t)n;
      for (int k = 0; k < nd->n_in; k++) {
        const ir_value_t *iv = &g->values[nd->in[k]];
        if (iv->kind != IR_VALUE_NODE || group_of[iv->node] != gi)
          add_unique(gr->inputs, &gr->n_inputs, nd->in[k]);
      }
      for (int k = 0; k < nd->n_out; k++)
        if (value_read_outside(g, group_of, gi, nd->out[k])) {
          add_unique(gr->outputs, &gr->n_outputs, nd->out[k]);
          b->slot_of_value[nd->out[k]] = b->n_slots++;
        }
    }
  }
}

static void built_free(built_t *b) {
  for (int i = 0; i < b->plan.n_groups; i++) {
    free(b->plan.groups[i].nodes);
    free(b->plan.groups[i].inputs);
    free(b->plan.groups[i].outputs);
  }
  free(b->plan.groups);
  free(b->plan.group_of_node);
  free(b->slot_of_value);
}

/* ---- Compile, load, run ----------------------------------------------------- */

static core_pool_t *pool;
static int module_count;
/* The module last run wrote blocks of lanes (c_elementwise.c). */
static bool last_blocked;
/* How many loops of that module are kept from unrolling (a lane loop
 * that calls a math function: unrolled whole, its calls went scalar). */
static int last_kept_loops;

/* Writes unit u of module k: the prelude, then every function i with
 * i % 2 == u (source from its cut to the next); appends its path to cmd. */
static bool write_unit(const cg_module_t *m, int k, int u, char *cmd, size_t cap) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/loom_cg_%d_%d_%d.c", (int)getpid(), k, u);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fwrite(m->source, 1, (size_t)m->prelude, f);
  for (int i = u; i < m->n_functions; i += 2) {
    int64_t from = i > 0 ? m->cuts[i] : m->prelude;
    int64_t to = i + 1 < m->n_functions ? m->cuts[i + 1] : m->length;
    fwrite(m->source + from, 1, (size_t)(to - from), f);
  }
  if (m->n_functions == 0) fputs(m->source + m->prelude, f);
  fclose(f);
  size_t used = strlen(cmd);
  return snprintf(cmd + used, cap - used, " %s", path) < (int)(cap - used);
}

/* Compiles the module in two translation units, the even functions in
 * one and the odd in the other, each after the prelude, as the toolchain
 * may cut it (parts.h): a function that needed its neighbour's text
 * fails to compile here. The handle of the loaded object. */
static void *load_module(const cg_module_t *m) {
  char so_path[128], cmd[1024];
  int k = module_count++;
  snprintf(so_path, sizeof so_path, "/tmp/loom_cg_%d_%d.so", (int)getpid(), k);
  snprintf(cmd, sizeof cmd, "cc -O2 -fopenmp-simd -shared -fPIC -Wall -Werror -o %s", so_path);
  int units = m->n_functions > 1 ? 2 : 1;
  bool ok = true;
  for (int u = 0; u < units && ok; u++) ok = write_unit(m, k, u, cmd, sizeof cmd);
  size_t used = strlen(cmd);
  snprintf(cmd + used, sizeof cmd - used, " -lm");
  int rc = ok ? system(cmd) : -1;
  void *h = rc == 0 ? dlopen(so_path, RTLD_NOW | RTLD_LOCAL) : NULL;
  for (int u = 0; rc == 0 && u < units && !getenv("LOOM_KEEP_TEST_MODULES"); u++) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/loom_cg_%d_%d_%d.c", (int)getpid(), k, u);
    unlink(path);
  }
  unlink(so_path);
  if (rc != 0)
    test_fail(__FILE__, __LINE__, "cc failed on /tmp/loom_cg_%d_%d_*.c", (int)getpid(), k);
  return h;
}

/* Runs every generated group of the plan in order over slots bound to
 * the inputs and to fresh outputs; outputs[i] receives graph output i. */
static void run_plan(loom_graph_t *g, built_t *b, loom_tensor_t *const *in,
                     loom_tensor_t **out) {
  cg_module_t m;
  CHECK_OK(cg_emit_module(g, &b->plan, b->slot_of_value, NULL, &m));
  last_blocked = strstr(m.source + m.prelude, "LOOM_LANES(") != NULL;
  last_kept_loops = 0;
  for (const char *at = m.source + m.prelude; (at = strstr(at, "#pragma GCC unroll 1")); at++)
    last_kept_loops++;
  for (int gi = 0; gi < b->plan.n_groups; gi++) {
    test_checks++;
    if (!m.generated[gi]) test_fail(__FILE__, __LINE__, "group %d not generated", gi);
  }
  void *h = load_module(&m);
  void **slots = calloc((size_t)b->n_slots + 1, sizeof(void *));
  loom_tensor_t **temps = calloc((size_t)g->n_values + 1, sizeof(loom_tensor_t *));
  for (int64_t v = 0; v < g->n_values; v++) {
    int32_t s = b->slot_of_value[v];
    const ir_value_t *val = &g->values[v];
    if (s < 0) continue;
    if (val->kind == IR_VALUE_INPUT) {
      slots[s] = loom_tensor_data(in[val->index]);
      continue;
    }
    CHECK_OK(loom_tensor_create(val->type.dtype, val->type.rank, val->type.dims, &temps[v]));
    slots[s] = loom_tensor_data(temps[v]);
  }
  loom_abi_t rt = {.version = LOOM_ABI_VERSION, .threads = core_pool_threads(pool),
                   .pool = pool, .parallel_for = test_parallel_for,
                   .gemm_f32 = test_gemm, .conv2d_f32 = test_conv};
  for (int gi = 0; h && gi < b->plan.n_groups; gi++) {
    char name[32];
    snprintf(name, sizeof name, "loom_group_%d", m.function[gi]);
    loom_abi_group_t fn;
    void *sym = dlsym(h, name);
    memcpy(&fn, &sym, sizeof fn);
    if (fn) fn(slots, m.maps + m.map_at[gi], NULL, &rt);
  }
  for (int64_t i = 0; i < g->n_outputs; i++) {
    out[i] = temps[g->outputs[i]];
    temps[g->outputs[i]] = NULL;
  }
  for (int64_t v = 0; v < g->n_values; v++) loom_tensor_destroy(temps[v]);
  free(temps);
  free(slots);
  if (h) dlclose(h);
  cg_module_free(&m);
}

/* Generated f32 code computes in float where the reference uses double;
 * f16 and bf16 in float, rounded after each op like the reference. */
static double tolerance(loom_dtype_t d) {
  static const double tol[LOOM_DTYPE_COUNT] = {
      [LOOM_F32] = 2e-5, [LOOM_F64] = 1e-12, [LOOM_F16] = 2e-3, [LOOM_BF16] = 1.6e-2};
  return tol[d];
}

/* Every output of the generated code against the interpreter's. */
static void check_against_interp(loom_graph_t *g, built_t *b, int n_in,
                                 loom_tensor_t *const *in) {
  int n_out = (int)g->n_outputs;
  loom_tensor_t **want = calloc((size_t)n_out, sizeof *want);
  loom_tensor_t **got = calloc((size_t)n_out, sizeof *got);
  CHECK_OK(loom_interpret(g, n_in, in, n_out, want));
  run_plan(g, b, in, got);
  for (int i = 0; i < n_out; i++) {
    if (!want[i] || !got[i]) continue;
    int64_t n = loom_tensor_numel(want[i]);
    double *w = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t j = 0; j < n; j++) w[j] = test_get(want[i], j);
    double tol = tolerance(loom_tensor_dtype(want[i]));
    int before = test_failures;
    CHECK_TENSOR(got[i], w, n, tol, tol);
    if (test_failures != before)
      fprintf(stderr, "  output %d (%s of node %d)\n", i,
              ir_ops[g->nodes[g->values[g->outputs[i]].node].op].name,
              (int)g->values[g->outputs[i]].node);
    free(w);
    loom_tensor_destroy(want[i]);
    loom_tensor_destroy(got[i]);
  }
  free(want);
  free(got);
}

/* Each node its own group of the given kind. */
static void check_each_node(loom_graph_t *g, fuse_kind_t kind, int n_in,
                            loom_tensor_t *const *in) {
  int n = (int)g->n_nodes;
  fuse_kind_t *kinds = malloc(sizeof *kinds * (size_t)n);
  int32_t *of = malloc(sizeof *of * (size_t)n);
  for (int i = 0; i < n; i++) {
    kinds[i] = kind;
    of[i] = i;
  }
  built_t b;
  build_plan(g, n, kinds, of, &b);
  check_against_interp(g, &b, n_in, in);
  built_free(&b);
  free(kinds);
  free(of);
}

/* All nodes one group of the given kind. */
static void check_one_group(loom_graph_t *g, fuse_kind_t kind, int n_in,
                            loom_tensor_t *const *in) {
  int32_t *of = calloc((size_t)g->n_nodes + 1, sizeof *of);
  built_t b;
  build_plan(g, 1, &kind, of, &b);
  check_against_interp(g, &b, n_in, in);
  built_free(&b);
  free(of);
}

static loom_value_t input(loom_graph_t *g, const char *name, loom_dtype_t d,
                          int rank, const int64_t *dims) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_input(g, name, d, rank, dims, &v));
  return v;
}

static void out(loom_graph_t *g, loom_status_t s, loom_value_t v) {
  CHECK_OK(s);
  CHECK_OK(loom_graph_output(g, v));
}

/* ---- Elementwise ------------------------------------------------------------ */

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);
typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t,
                                   loom_value_t *);

static const unary_fn float_unary[] = {
    loom_neg, loom_abs, loom_exp, loom_log, loom_sqrt, loom_rsqrt, loom_reciprocal,
    loom_tanh, loom_sigmoid, loom_relu, loom_gelu, loom_gelu_tanh, loom_silu,
    loom_softplus, loom_sin, loom_cos, loom_erf, loom_floor, loom_ceil, loom_round,
    loom_sign, loom_not, loom_isnan, loom_identity};
static const unary_fn int_unary[] = {loom_neg, loom_abs, loom_relu, loom_sign,
                                     loom_not, loom_identity, loom_bitwise_not};
static const binary_fn float_binary[] = {
    loom_add, loom_sub, loom_mul, loom_div, loom_pow, loom_maximum, loom_minimum,
    loom_mod, loom_eq, loom_ne, loom_lt, loom_le, loom_gt, loom_ge,
    loom_and, loom_or, loom_xor};
static const binary_fn int_binary[] = {
    loom_add, loom_sub, loom_mul, loom_pow, loom_maximum, loom_minimum, loom_eq,
    loom_ne, loom_lt, loom_le, loom_gt, loom_ge, loom_and, loom_or, loom_xor,
    loom_bitwise_and, loom_bitwise_or, loom_bitwise_xor, loom_bitshift_left,
    loom_bitshift_right};

/* Every op in dtype d, each its own group, with b broadcast along rows. */
static void check_ops_in(loom_dtype_t d, double lo, double hi) {
  bool fl = d == LOOM_F32 || d == LOOM_F64 || d == LOOM_F16 || d == LOOM_BF16;
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sa[2] = {37, 45}, sb[1] = {45};
  loom_value_t a = input(g, "a", d, 2, sa), b = input(g, "b", d, 1, sb), y;
  int nu = fl ? COUNT(float_unary) : COUNT(int_unary);
  int nb = fl ? COUNT(float_binary) : COUNT(int_binary);
  for (int i = 0; i < nu; i++) out(g, (fl ? float_unary : int_unary)[i](g, a, &y), y);
  for (int i = 0; i < nb; i++) out(g, (fl ? float_binary : int_binary)[i](g, a, b, &y), y);
  out(g, loom_clamp(g, a, -1.5, 2.5, &y), y);
  if (fl) {
    out(g, loom_leaky_relu(g, a, 0.1, &y), y);
    out(g, loom_elu(g, a, 0.7, &y), y);
  }
  loom_value_t c;
  CHECK_OK(loom_gt(g, a, b, &c));
  out(g, loom_where(g, c, a, b, &y), y);
  static const loom_dtype_t to[] = {LOOM_F32, LOOM_F64, LOOM_I8, LOOM_I32, LOOM_I64, LOOM_BOOL};
  for (int i = 0; i < COUNT(to); i++) out(g, loom_cast(g, a, to[i], &y), y);
  test_seed(7 + d);
  loom_tensor_t *in[2] = {test_rand_tensor(d, 2, sa, lo, hi),
                          test_rand_tensor(d, 1, sb, lo, hi)};
  check_each_node(g, FUSE_ELEMENTWISE, 2, in);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

static void elementwise_ops_f32(void) { check_ops_in(LOOM_F32, -3, 3); }
static void elementwise_ops_f64(void) { check_ops_in(LOOM_F64, -3, 3); }
static void elementwise_ops_f16(void) { check_ops_in(LOOM_F16, -3, 3); }
static void elementwise_ops_bf16(void) { check_ops_in(LOOM_BF16, -3, 3); }
static void elementwise_ops_i32(void) { check_ops_in(LOOM_I32, -1000, 1000); }
static void elementwise_ops_i8(void) { check_ops_in(LOOM_I8, -100, 100); }
static void elementwise_ops_i64(void) { check_ops_in(LOOM_I64, -1e6, 1e6); }

/* A diamond (x used by two branches that meet again) with broadcasting
 * over three dims, fused into one group, large enough to run parallel. */
static void elementwise_diamond_fused(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[3] = {8, 64, 130}, sb[3] = {8, 1, 130}, sc[2] = {64, 1};
  loom_value_t x = input(g, "x", LOOM_F32, 3, sx), bb = input(g, "b", LOOM_F32, 3, sb),
               cc = input(g, "c", LOOM_F32, 2, sc), t, u, v, y;
  CHECK_OK(loom_add(g, x, bb, &t));
  CHECK_OK(loom_relu(g, t, &u));
  CHECK_OK(loom_mul(g, t, cc, &v));
  CHECK_OK(loom_sub(g, u, v, &y));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, t));
  test_seed(11);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 3, sx, -2, 2),
                          test_rand_tensor(LOOM_F32, 3, sb, -2, 2),
                          test_rand_tensor(LOOM_F32, 2, sc, -2, 2)};
  check_one_group(g, FUSE_ELEMENTWISE, 3, in);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* A long chain (cost 8 and more per element) runs in blocks of lanes
 * (c_elementwise.c): a per-row value stays a scalar (and is an output
 * smaller than the space), an input is read twice, a value is read by
 * later statements and an output again; 200 columns leave a tail after
 * the whole blocks, and so do the 1000 elements of a one-dim space. */
static void elementwise_blocked_chain(void) {
  for (int rank = 1; rank <= 2; rank++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    int64_t sx[2] = {3, 200}, sb[2] = {1, 200}, sc[2] = {3, 1};
    if (rank == 1) sx[0] = sb[0] = 1000, sc[0] = 1;
    loom_value_t x = input(g, "x", LOOM_F32, rank, sx), bb = input(g, "b", LOOM_F32, rank, sb),
                 cc = input(g, "c", LOOM_F32, rank, sc), t, sg, u, v, w, q, y;
    CHECK_OK(loom_add(g, x, bb, &t));
    CHECK_OK(loom_sigmoid(g, cc, &sg));
    CHECK_OK(loom_mul(g, t, sg, &u));
    CHECK_OK(loom_tanh(g, u, &v));
    CHECK_OK(loom_maximum(g, v, t, &w));
    CHECK_OK(loom_mul(g, x, x, &q));
    CHECK_OK(loom_add(g, w, q, &y));
    CHECK_OK(loom_graph_output(g, y));
    CHECK_OK(loom_graph_output(g, u));
    CHECK_OK(loom_graph_output(g, sg));
    test_seed(13);
    loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, rank, sx, -2, 2),
                            test_rand_tensor(LOOM_F32, rank, sb, -2, 2),
                            test_rand_tensor(LOOM_F32, rank, sc, -2, 2)};
    check_one_group(g, FUSE_ELEMENTWISE, 3, in);
    CHECK(last_blocked);
    CHECK(last_kept_loops == 1); /* the tanh's; the sigmoid of c is a scalar */
    for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
    loom_graph_destroy(g);
  }
}

/* relu, maximum and minimum keep NaN, as the reference does. */
static void elementwise_nan(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t s[1] = {4};
  loom_value_t a = input(g, "a", LOOM_F32, 1, s), b = input(g, "b", LOOM_F32, 1, s), y;
  out(g, loom_relu(g, a, &y), y);
  out(g, loom_maximum(g, a, b, &y), y);
  out(g, loom_minimum(g, a, b, &y), y);
  out(g, loom_round(g, a, &y), y);
  double va[4] = {NAN, 1, 2.5, -0.5}, vb[4] = {1, NAN, 3.5, 0.5};
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 1, s, va), test_tensor(LOOM_F32, 1, s, vb)};
  check_one_group(g, FUSE_ELEMENTWISE, 2, in);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

/* maximum and minimum against a scalar constant take a shorter form (one
 * test, constant first); clamp tests its bounds only. NaN, infinities and
 * values equal to the constant still match the reference, on either side
 * and for a NaN or infinite constant. */
static void elementwise_nan_against_constants(void) {
  static const loom_dtype_t dtypes[] = {LOOM_F32, LOOM_F64};
  static const double consts[] = {0.5, -INFINITY, NAN};
  for (int di = 0; di < COUNT(dtypes); di++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    int64_t s[1] = {8};
    loom_value_t a = input(g, "a", dtypes[di], 1, s), y;
    for (int ci = 0; ci < COUNT(consts); ci++) {
      loom_value_t c = test_constant(g, dtypes[di], 0, NULL, &consts[ci]);
      out(g, loom_maximum(g, a, c, &y), y);
      out(g, loom_maximum(g, c, a, &y), y);
      out(g, loom_minimum(g, a, c, &y), y);
      out(g, loom_minimum(g, c, a, &y), y);
    }
    out(g, loom_clamp(g, a, -1, 0.5, &y), y);
    out(g, loom_clamp(g, a, NAN, 0.5, &y), y);
    double va[8] = {NAN, 0.5, -INFINITY, INFINITY, -1, 2, 0, -0.25};
    loom_tensor_t *in[1] = {test_tensor(dtypes[di], 1, s, va)};
    loom_tensor_t *want[14] = {0}, *got[14] = {0};
    CHECK_OK(loom_interpret(g, 1, in, 14, want));
    loom_executable_t *ex = NULL;
    CHECK_OK(loom_compile(g, NULL, &ex));
    for (int i = 0; ex && i < 14; i++) CHECK_OK(loom_executable_new_output(ex, i, &got[i]));
    if (ex) {
      CHECK_OK(loom_executable_run(ex, 1, in, 14, got));
      loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
      CHECK_OK(loom_executable_info(ex, &info));
      CHECK(info.n_generated >= 1 && info.n_reference == 0);
    }
    for (int i = 0; i < 14; i++) {
      double w[8];
      for (int j = 0; want[i] && got[i] && j < 8; j++) w[j] = test_get(want[i], j);
      if (want[i] && got[i]) CHECK_TENSOR(got[i], w, 8, 0, 0);
      loom_tensor_destroy(want[i]);
      loom_tensor_destroy(got[i]);
    }
    loom_executable_destroy(ex);
    loom_tensor_destroy(in[0]);
    loom_graph_destroy(g);
  }
}

/* Integer div and mod may divide by zero, which only the reference can
 * report, so the emitter leaves them to it. */
static void supports(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t s[2] = {4, 4};
  loom_value_t i = input(g, "i", LOOM_I32, 2, s), f = input(g, "f", LOOM_F32, 2, s),
               h = input(g, "h", LOOM_F16, 2, s), y;
  CHECK_OK(loom_div(g, i, i, &y));
  CHECK_OK(loom_div(g, f, f, &y));
  CHECK_OK(loom_add(g, h, h, &y));
  CHECK_OK(loom_transpose(g, h, NULL, &y));
  CHECK(!cg_supports(g, 0));
  CHECK(cg_supports(g, 1));
  CHECK(cg_supports(g, 2));
  CHECK(cg_supports(g, 3));
  CHECK(!cg_supports(g, 99));
  CHECK(!cg_supports(NULL, 0));
  loom_graph_destroy(g);
}


/* ---- Reductions ------------------------------------------------------------- */

typedef loom_status_t (*reduce_fn)(loom_graph_t *, loom_value_t, int, const int64_t *,
                                   int, loom_value_t *);

/* sum, max, min, prod (and mean for floats) over the last axis and over
 * the last two, keepdim or not, in dtype d. */
static void check_reductions_in(loom_dtype_t d, double lo, double hi) {
  bool fl = d == LOOM_F32 || d == LOOM_F64 || d == LOOM_F16;
  static const reduce_fn fns[] = {loom_sum, loom_max, loom_min, loom_prod, loom_mean};
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[3] = {6, 5, 7}, last[1] = {-1}, two[2] = {1, 2};
  loom_value_t x = input(g, "x", d, 3, sx), y;
  for (int i = 0; i < COUNT(fns) - (fl ? 0 : 1); i++) {
    out(g, fns[i](g, x, 1, last, 1, &y), y);
    out(g, fns[i](g, x, 2, two, 0, &y), y);
    out(g, fns[i](g, x, 0, NULL, 0, &y), y);
  }
  test_seed(3 + d);
  loom_tensor_t *in = test_rand_tensor(d, 3, sx, lo, hi);
  check_each_node(g, FUSE_REDUCTION, 1, &in);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void reduction_ops_f32(void) { check_reductions_in(LOOM_F32, 0.5, 1.5); }
static void reduction_ops_f64(void) { check_reductions_in(LOOM_F64, 0.5, 1.5); }
static void reduction_ops_f16(void) { check_reductions_in(LOOM_F16, 0.5, 1.5); }
static void reduction_ops_i32(void) { check_reductions_in(LOOM_I32, -3, 3); }

/* softmax as max, sub, exp, sum, div over the last axis: one function. */
static void reduction_softmax(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[2] = {300, 129}, last[1] = {-1};
  loom_value_t x = input(g, "x", LOOM_F32, 2, sx), m, t, e, s, y;
  CHECK_OK(loom_max(g, x, 1, last, 1, &m));
  CHECK_OK(loom_sub(g, x, m, &t));
  CHECK_OK(loom_exp(g, t, &e));
  CHECK_OK(loom_sum(g, e, 1, last, 1, &s));
  out(g, loom_div(g, e, s, &y), y);
  test_seed(5);
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 2, sx, -20, 20);
  check_one_group(g, FUSE_REDUCTION, 1, &in);
  /* The rows sum to 1, a truth of its own. */
  loom_tensor_t *got[1] = {NULL};
  built_t b;
  int32_t of[5] = {0};
  fuse_kind_t kind = FUSE_REDUCTION;
  build_plan(g, 1, &kind, of, &b);
  run_plan(g, &b, &in, got);
  for (int r = 0; got[0] && r < 300; r += 37) {
    double acc = 0;
    for (int j = 0; j < 129; j++) acc += test_get(got[0], r * 129 + j);
    CHECK_NEAR(acc, 1.0, 1e-5, 0);
  }
  loom_tensor_destroy(got[0]);
  built_free(&b);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* layer_norm as mean, sub, mul, mean, add, rsqrt, mul, mul scale, add
 * bias over the last two axes, with the mean also an output. */
static void reduction_layer_norm(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[3] = {4, 6, 10}, sw[2] = {6, 10}, axes[2] = {-2, -1}, one[1] = {1};
  loom_value_t x = input(g, "x", LOOM_F32, 3, sx), w = input(g, "w", LOOM_F32, 2, sw),
               bias = input(g, "b", LOOM_F32, 1, sw + 1), eps = input(g, "eps", LOOM_F32, 1, one);
  loom_value_t mu, xc, sq, var, ve, inv, nrm, sc, y;
  CHECK_OK(loom_mean(g, x, 2, axes, 1, &mu));
  CHECK_OK(loom_sub(g, x, mu, &xc));
  CHECK_OK(loom_mul(g, xc, xc, &sq));
  CHECK_OK(loom_mean(g, sq, 2, axes, 1, &var));
  CHECK_OK(loom_add(g, var, eps, &ve));
  CHECK_OK(loom_rsqrt(g, ve, &inv));
  CHECK_OK(loom_mul(g, xc, inv, &nrm));
  CHECK_OK(loom_mul(g, nrm, w, &sc));
  out(g, loom_add(g, sc, bias, &y), y);
  CHECK_OK(loom_graph_output(g, mu));
  CHECK_OK(loom_graph_output(g, inv));
  test_seed(9);
  double e[1] = {1e-5};
  loom_tensor_t *in[4] = {test_rand_tensor(LOOM_F32, 3, sx, -3, 3),
                          test_rand_tensor(LOOM_F32, 2, sw, 0.5, 2),
                          test_rand_tensor(LOOM_F32, 1, sw + 1, -1, 1),
                          test_tensor(LOOM_F32, 1, one, e)};
  check_one_group(g, FUSE_REDUCTION, 4, in);
  for (int i = 0; i < 4; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* ---- Contractions ------------------------------------------------------------- */

/* relu(a @ b + bias): the epilogue writes the output tile in place. */
static void contraction_matmul_bias_relu(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sa[2] = {33, 20}, sb[2] = {20, 17}, sbias[1] = {17};
  loom_value_t a = input(g, "a", LOOM_F32, 2, sa), b = input(g, "b", LOOM_F32, 2, sb),
               bias = input(g, "bias", LOOM_F32, 1, sbias), m, t, y;
  CHECK_OK(loom_matmul(g, a, b, 0, 0, &m));
  CHECK_OK(loom_add(g, m, bias, &t));
  out(g, loom_relu(g, t, &y), y);
  test_seed(21);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 2, sa, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, sb, -1, 1),
                          test_rand_tensor(LOOM_F32, 1, sbias, -1, 1)};
  check_one_group(g, FUSE_CONTRACTION, 3, in);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* Batched, with b broadcast over a's leading batch dim, b transposed, a
 * residual broadcast over rows, and the raw product also an output. */
static void contraction_matmul_batched(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sa[4] = {2, 3, 9, 8}, sb[3] = {3, 7, 8}, sr[3] = {3, 1, 7};
  loom_value_t a = input(g, "a", LOOM_F32, 4, sa), b = input(g, "b", LOOM_F32, 3, sb),
               res = input(g, "res", LOOM_F32, 3, sr), m, y;
  CHECK_OK(loom_matmul(g, a, b, 0, 1, &m));
  out(g, loom_add(g, m, res, &y), y);
  CHECK_OK(loom_graph_output(g, m));
  test_seed(22);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 4, sa, -1, 1),
                          test_rand_tensor(LOOM_F32, 3, sb, -1, 1),
                          test_rand_tensor(LOOM_F32, 3, sr, -1, 1)};
  check_one_group(g, FUSE_CONTRACTION, 3, in);
  /* And without an epilogue: the product alone. */
  loom_graph_t *g2;
  CHECK_OK(loom_graph_create(&g2));
  loom_value_t a2 = input(g2, "a", LOOM_F32, 4, sa), b2 = input(g2, "b", LOOM_F32, 3, sb), m2;
  out(g2, loom_matmul(g2, a2, b2, 0, 1, &m2), m2);
  check_one_group(g2, FUSE_CONTRACTION, 2, in);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
  loom_graph_destroy(g2);
}

/* relu(conv2d(x, w, bias) + per-channel shift), strided and padded. */
static void contraction_conv2d_bias_relu(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[4] = {2, 3, 9, 8}, sw[4] = {4, 3, 3, 3}, sbias[1] = {4}, ss[3] = {4, 1, 1};
  loom_value_t x = input(g, "x", LOOM_F32, 4, sx), w = input(g, "w", LOOM_F32, 4, sw),
               bias = input(g, "bias", LOOM_F32, 1, sbias),
               shift = input(g, "shift", LOOM_F32, 3, ss), cv, t, y;
  loom_conv_params_t p = {.stride = {2, 1}, .pads = {1, 1, 1, 0}, .dilation = {1, 1}, .groups = 1};
  CHECK_OK(loom_conv2d(g, x, w, 1, bias, &p, &cv));
  CHECK_OK(loom_add(g, cv, shift, &t));
  out(g, loom_relu(g, t, &y), y);
  test_seed(23);
  loom_tensor_t *in[4] = {test_rand_tensor(LOOM_F32, 4, sx, -1, 1),
                          test_rand_tensor(LOOM_F32, 4, sw, -1, 1),
                          test_rand_tensor(LOOM_F32, 1, sbias, -1, 1),
                          test_rand_tensor(LOOM_F32, 3, ss, -1, 1)};
  check_one_group(g, FUSE_CONTRACTION, 4, in);
  for (int i = 0; i < 4; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* ---- Layout ----------------------------------------------------------------- */

/* Every layout op in dtype d, each its own group: element bytes move
 * exactly, so even f16 matches the reference bit for bit. */
static void check_layout_in(loom_dtype_t d) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[3] = {4, 5, 6}, sz[3] = {4, 1, 6}, y_dims[2] = {20, 6};
  loom_value_t x = input(g, "x", d, 3, sx), z = input(g, "z", d, 3, sz), y;
  int64_t perm[3] = {2, 0, 1};
  out(g, loom_transpose(g, x, perm, &y), y);
  out(g, loom_transpose(g, x, NULL, &y), y);
  loom_dim_t ex[4] = {2, 4, 5, 6};
  out(g, loom_expand(g, z, 4, ex, &y), y);
  int64_t st[3] = {1, 4, 0}, en[3] = {4, -6, 6}, ax[3] = {0, 1, 2}, sp[3] = {2, -2, 3};
  out(g, loom_slice(g, x, 3, st, en, ax, sp, &y), y);
  int64_t fl[2] = {0, 2};
  out(g, loom_flip(g, x, 2, fl, &y), y);
  int64_t rep[3] = {2, 1, 3};
  out(g, loom_tile(g, x, rep, &y), y);
  loom_value_t parts[3] = {x, z, x};
  out(g, loom_concat(g, 3, parts, 1, &y), y);
  int64_t pads[6] = {1, 0, 2, 0, 3, 1};
  out(g, loom_pad(g, x, pads, LOOM_PAD_CONSTANT, 7, &y), y);
  int64_t crop_pad[6] = {-1, 2, -3, 0, -1, 1}, crop[6] = {-1, -2, -1, -1, -1, -2};
  out(g, loom_pad(g, x, crop_pad, LOOM_PAD_CONSTANT, 7, &y), y); /* negative pads crop */
  out(g, loom_pad(g, x, crop, LOOM_PAD_CONSTANT, 7, &y), y);
  loom_dim_t rs[2] = {y_dims[0], y_dims[1]};
  out(g, loom_reshape(g, x, 2, rs, &y), y);
  test_seed(31 + d);
  loom_tensor_t *in[2] = {test_rand_tensor(d, 3, sx, -50, 50), test_rand_tensor(d, 3, sz, -50, 50)};
  check_each_node(g, FUSE_LAYOUT, 2, in);
  loom_tensor_destroy(in[0]);
  loom_tensor_destroy(in[1]);
  loom_graph_destroy(g);
}

static void layout_f32(void) { check_layout_in(LOOM_F32); }
static void layout_f16(void) { check_layout_in(LOOM_F16); }
static void layout_i8(void) { check_layout_in(LOOM_I8); }
static void layout_i64(void) { check_layout_in(LOOM_I64); }
static void layout_bool(void) { check_layout_in(LOOM_BOOL); }

/* A large transpose runs split over the pool. */
static void layout_parallel_transpose(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[3] = {64, 33, 40}, perm[3] = {1, 2, 0};
  loom_value_t x = input(g, "x", LOOM_F32, 3, sx), y;
  out(g, loom_transpose(g, x, perm, &y), y);
  test_seed(41);
  loom_tensor_t *in = test_rand_tensor(LOOM_F32, 3, sx, -1, 1);
  check_each_node(g, FUSE_LAYOUT, 1, &in);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* ---- Through loom_compile ------------------------------------------------------- */

/* A small transformer-like block compiled end to end (fusion, memory
 * plan, toolchain, executable) equals the interpreter, with x bound as a
 * transposed (non-contiguous) view; most steps run generated code. */
static void compiled_block_end_to_end(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t sx[2] = {24, 32}, sw[2] = {32, 48}, sb[1] = {48}, last[1] = {-1};
  loom_value_t x = input(g, "x", LOOM_F32, 2, sx), w = input(g, "w", LOOM_F32, 2, sw),
               bias = input(g, "b", LOOM_F32, 1, sb), h, a, m, t, e, s, y, r;
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &h));
  CHECK_OK(loom_add(g, h, bias, &a));
  CHECK_OK(loom_gelu(g, a, &r));
  CHECK_OK(loom_max(g, r, 1, last, 1, &m));
  CHECK_OK(loom_sub(g, r, m, &t));
  CHECK_OK(loom_exp(g, t, &e));
  CHECK_OK(loom_sum(g, e, 1, last, 1, &s));
  CHECK_OK(loom_div(g, e, s, &y));
  int64_t perm[2] = {1, 0};
  loom_value_t yt;
  out(g, loom_transpose(g, y, perm, &yt), yt);
  test_seed(51);
  /* x as the transpose of a stored 32 x 24 matrix. */
  int64_t st[2] = {24, 32};
  loom_tensor_t *stored = test_rand_tensor(LOOM_F32, 2, st, -1, 1), *xv;
  int64_t strides[2] = {1, 24};
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, sx, strides, loom_tensor_data(stored), &xv));
  loom_tensor_t *in[3] = {xv, test_rand_tensor(LOOM_F32, 2, sw, -1, 1),
                          test_rand_tensor(LOOM_F32, 1, sb, -1, 1)};
  loom_tensor_t *want = NULL, *got = NULL;
  CHECK_OK(loom_interpret(g, 3, in, 1, &want));
  loom_executable_t *ex = NULL;
  CHECK_OK(loom_compile(g, NULL, &ex));
  if (ex) {
    CHECK_OK(loom_executable_new_output(ex, 0, &got));
    CHECK_OK(loom_executable_run(ex, 3, in, 1, &got));
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    CHECK_OK(loom_executable_info(ex, &info));
    CHECK(info.n_generated >= 3);
    CHECK(info.n_reference == 0);
  }
  if (want && got) {
    double w_[48 * 24];
    for (int i = 0; i < 48 * 24; i++) w_[i] = test_get(want, i);
    CHECK_TENSOR(got, w_, 48 * 24, 1e-5, 1e-4);
  }
  loom_executable_destroy(ex);
  loom_tensor_destroy(want);
  loom_tensor_destroy(got);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_tensor_destroy(stored);
  loom_graph_destroy(g);
}

int main(void) {
  if (core_pool_create(2, &pool) != LOOM_OK) return 1;
  TEST_RUN(supports);
  TEST_RUN(elementwise_ops_f32);
  TEST_RUN(elementwise_ops_f64);
  TEST_RUN(elementwise_ops_f16);
  TEST_RUN(elementwise_ops_bf16);
  TEST_RUN(elementwise_ops_i32);
  TEST_RUN(elementwise_ops_i8);
  TEST_RUN(elementwise_ops_i64);
  TEST_RUN(elementwise_diamond_fused);
  TEST_RUN(elementwise_blocked_chain);
  TEST_RUN(elementwise_nan);
  TEST_RUN(elementwise_nan_against_constants);
  TEST_RUN(reduction_ops_f32);
  TEST_RUN(reduction_ops_f64);
  TEST_RUN(reduction_ops_f16);
  TEST_RUN(reduction_ops_i32);
  TEST_RUN(reduction_softmax);
  TEST_RUN(reduction_layer_norm);
  TEST_RUN(contraction_matmul_bias_relu);
  TEST_RUN(contraction_matmul_batched);
  TEST_RUN(contraction_conv2d_bias_relu);
  TEST_RUN(layout_f32);
  TEST_RUN(layout_f16);
  TEST_RUN(layout_i8);
  TEST_RUN(layout_i64);
  TEST_RUN(layout_bool);
  TEST_RUN(layout_parallel_transpose);
  TEST_RUN(compiled_block_end_to_end);
  core_pool_destroy(pool);
  return test_summary();
}
