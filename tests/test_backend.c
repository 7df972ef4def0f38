/* The backend seam (src/backend/backend.h): every registered back end runs
 * the same graphs to the interpreter's results (ggml's test-backend-ops in
 * small), "ref" as a target generates nothing, an unknown target fails
 * naming the registered ones, a back end registered here (one that counts
 * its launches) runs graphs through the same interface, and the
 * versioned info struct reports the target to new callers without
 * writing past an old caller's struct. */
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "loom/ops.h"

static loom_value_t param(loom_graph_t *g, const char *name, int rank, const int64_t *shape) {
  loom_tensor_t *init = test_rand_tensor(LOOM_F32, rank, shape, -1, 1);
  loom_value_t v = {0};
  CHECK_OK(loom_graph_param(g, name, LOOM_F32, rank, shape, init, &v));
  loom_tensor_destroy(init);
  return v;
}

/* x (4, 8) @ W (8, 16) + b, relu, softmax over rows: a contraction with
 * an epilogue, then a reduction. */
static loom_graph_t *mlp(loom_tensor_t **in) {
  loom_graph_t *g;
  loom_value_t x, w, b, h;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){4, 8}, &x));
  w = param(g, "w", 2, (int64_t[]){8, 16});
  b = param(g, "b", 1, (int64_t[]){16});
  CHECK_OK(loom_matmul(g, x, w, 0, 0, &h));
  CHECK_OK(loom_add(g, h, b, &h));
  CHECK_OK(loom_relu(g, h, &h));
  CHECK_OK(loom_softmax(g, h, 1, &h));
  CHECK_OK(loom_graph_output(g, h));
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){4, 8}, -2, 2);
  return g;
}

/* layer_norm, tanh, a sum over the last axis: normalization and
 * reduction. */
static loom_graph_t *norm(loom_tensor_t **in) {
  loom_graph_t *g;
  loom_value_t x, h, none = {0};
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){3, 32}, &x));
  CHECK_OK(loom_layer_norm(g, x, 0, none, 0, none, -1, 1e-5, &h));
  CHECK_OK(loom_tanh(g, h, &h));
  CHECK_OK(loom_sum(g, h, 1, (int64_t[]){1}, 0, &h));
  CHECK_OK(loom_graph_output(g, h));
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){3, 32}, -3, 3);
  return g;
}

/* conv2d with a bias, then relu. */
static loom_graph_t *conv(loom_tensor_t **in) {
  loom_graph_t *g;
  loom_value_t x, w, b, h;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 4, (loom_dim_t[]){2, 3, 7, 7}, &x));
  w = param(g, "w", 4, (int64_t[]){4, 3, 3, 3});
  b = param(g, "b", 1, (int64_t[]){4});
  CHECK_OK(loom_conv2d(g, x, w, 1, b, NULL, &h));
  CHECK_OK(loom_relu(g, h, &h));
  CHECK_OK(loom_graph_output(g, h));
  in[0] = test_rand_tensor(LOOM_F32, 4, (int64_t[]){2, 3, 7, 7}, -1, 1);
  return g;
}

/* Rows of a matrix picked by an index input, doubled. */
static loom_graph_t *gather(loom_tensor_t **in) {
  loom_graph_t *g;
  loom_value_t data, idx, h;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_input(g, "data", LOOM_F32, 2, (loom_dim_t[]){5, 4}, &data));
  CHECK_OK(loom_graph_input(g, "idx", LOOM_I64, 1, (loom_dim_t[]){3}, &idx));
  CHECK_OK(loom_gather(g, data, idx, 0, &h));
  CHECK_OK(loom_add(g, h, h, &h));
  CHECK_OK(loom_graph_output(g, h));
  in[0] = test_rand_tensor(LOOM_F32, 2, (int64_t[]){5, 4}, -1, 1);
  in[1] = test_tensor(LOOM_I64, 1, (int64_t[]){3}, (double[]){4, 0, 2});
  return g;
}

typedef loom_graph_t *(*graph_fn)(loom_tensor_t **in);
static const graph_fn GRAPHS[] = {mlp, norm, conv, gather};
static const int GRAPH_INPUTS[] = {1, 1, 1, 2};
enum { N_GRAPHS = sizeof GRAPHS / sizeof *GRAPHS };

static loom_compile_options_t for_target(const char *target) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.target = target;
  return o;
}

/* Graph k compiled for target and run once, against the interpreter. */
static void check_graph(int k, const char *target, loom_executable_info_t *info) {
  test_seed(100 + (uint64_t)k);
  loom_tensor_t *in[2] = {0}, *want = NULL, *got = NULL;
  loom_graph_t *g = GRAPHS[k](in);
  int n_in = GRAPH_INPUTS[k];
  CHECK_OK(loom_interpret(g, n_in, in, 1, &want));
  loom_compile_options_t o = for_target(target);
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  if (e && want) {
    CHECK_OK(loom_executable_new_output(e, 0, &got));
    CHECK_OK(loom_executable_run(e, n_in, in, 1, &got));
    int64_t n = loom_tensor_numel(want);
    double values[n > 0 ? n : 1];
    for (int64_t i = 0; i < n; i++) values[i] = test_get(want, i);
    CHECK(loom_tensor_numel(got) == n);
    CHECK_TENSOR(got, values, n, 1e-5, 1e-4);
    info->size = sizeof *info;
    CHECK_OK(loom_executable_info(e, info));
  }
  loom_executable_destroy(e);
  loom_tensor_destroy(got);
  loom_tensor_destroy(want);
  for (int i = 0; i < n_in; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

static void every_backend_matches_the_interpreter(void) {
  int n;
  const be_backend_t *const *list = be_list(&n);
  CHECK(n >= 2);
  for (int b = 0; b < n; b++)
    for (int k = 0; k < N_GRAPHS; k++) {
      loom_executable_info_t info = {0};
      check_graph(k, list[b]->name, &info);
      CHECK(info.target && !strcmp(info.target, list[b]->name));
      CHECK(info.device == list[b]->device);
      CHECK(!info.interpreted);
    }
}

/* The default target is "cpu", which generates code (where a C compiler
 * is, which every other compiled test assumes too). */
static void default_target_is_cpu(void) {
  loom_executable_info_t info = {0};
  check_graph(0, NULL, &info);
  CHECK(info.target && !strcmp(info.target, "cpu"));
  if (info.fallback == LOOM_FALLBACK_NONE) CHECK(info.n_generated > 0);
}

/* "ref": every node a step of its own, running its reference kernel. */
static void ref_target_generates_nothing(void) {
  for (int k = 0; k < N_GRAPHS; k++) {
    loom_executable_info_t info = {0};
    check_graph(k, "ref", &info);
    CHECK(info.n_generated == 0 && info.n_kernels == 0);
    CHECK(info.n_reference > 0);
    CHECK(info.fallback == LOOM_FALLBACK_NONE);
  }
}

static void unknown_target_fails_naming_the_registered(void) {
  loom_tensor_t *in[1];
  loom_graph_t *g = mlp(in);
  loom_compile_options_t o = for_target("tpu");
  static char dummy;
  loom_executable_t *e = (loom_executable_t *)(void *)&dummy; /* must be cleared */
  CHECK_ERR(loom_compile(g, &o, &e), LOOM_ERR_INVALID, "target 'tpu'");
  CHECK(strstr(loom_last_error(), "registered: cpu, ref") != NULL);
  CHECK(e == NULL);
  loom_tensor_destroy(in[0]);
  loom_graph_destroy(g);
}

/* An index out of range fails the run with the interpreter's message on
 * every back end (the CPU's generated code reports it through launch). */
static void index_errors_come_back_through_launch(void) {
  int n;
  const be_backend_t *const *list = be_list(&n);
  for (int b = 0; b < n; b++) {
    loom_tensor_t *in[2], *out = NULL, *tmp = NULL;
    loom_graph_t *g = gather(in);
    ((int64_t *)(void *)loom_tensor_data(in[1]))[1] = 7;
    CHECK(loom_interpret(g, 2, in, 1, &tmp) == LOOM_ERR_VALUE);
    char want[512];
    snprintf(want, sizeof want, "%s", loom_last_error());
    loom_compile_options_t o = for_target(list[b]->name);
    loom_executable_t *e = NULL;
    CHECK_OK(loom_compile(g, &o, &e));
    if (e) CHECK_OK(loom_executable_new_output(e, 0, &out));
    if (e) CHECK_ERR(loom_executable_run(e, 2, in, 1, &out), LOOM_ERR_VALUE, want);
    loom_executable_destroy(e);
    loom_tensor_destroy(out);
    loom_tensor_destroy(tmp);
    for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
    loom_graph_destroy(g);
  }
}

/* ---- A back end registered by the test ----------------------------------
 * The reference back end's functions behind a table of its own, counting
 * what the runtime asks: it proves that a back end is a table registered
 * by name, launched through the interface alone. */

static atomic_int launches, runs_made, builds;
static be_backend_t counting;

static loom_status_t counting_build(const be_request_t *req, be_result_t *res,
                                    be_program_t **out) {
  if (!req->trial) atomic_fetch_add(&builds, 1);
  return be_reference()->build(req, res, out);
}

static loom_status_t counting_run_new(be_program_t *p, be_run_t **out) {
  atomic_fetch_add(&runs_made, 1);
  return be_reference()->run_new(p, out);
}

static loom_status_t counting_launch(be_program_t *p, int32_t group, void *const *slots,
                                     const int64_t *syms, be_run_t *run) {
  atomic_fetch_add(&launches, 1);
  return be_reference()->launch(p, group, slots, syms, run);
}

static void a_registered_backend_runs_graphs(void) {
  counting = *be_reference();
  counting.name = "counting";
  counting.build = counting_build;
  counting.run_new = counting_run_new;
  counting.launch = counting_launch;
  CHECK_OK(be_register(&counting));
  CHECK_ERR(be_register(&counting), LOOM_ERR_INVALID, "'counting' is registered");
  CHECK(be_find("counting") == &counting);
  for (int k = 0; k < N_GRAPHS; k++) {
    atomic_store(&launches, 0);
    atomic_store(&builds, 0);
    atomic_store(&runs_made, 0);
    loom_executable_info_t info = {0};
    check_graph(k, "counting", &info);
    CHECK(!strcmp(info.target, "counting"));
    /* One build; one run state (the executable's own); every kernel step
     * of the one run launched through it (none left to "ref"). */
    CHECK(atomic_load(&builds) == 1);
    CHECK(atomic_load(&runs_made) == 1);
    CHECK(info.n_reference == 0 && info.n_generated > 0);
    CHECK(atomic_load(&launches) == info.n_generated);
  }
  be_unregister(&counting);
  CHECK(be_find("counting") == NULL);
}

/* A caller built before target and device existed gets the fields it
 * knows, and nothing past them. */
static void old_info_struct_is_not_overrun(void) {
  loom_tensor_t *in[1];
  loom_graph_t *g = mlp(in);
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, NULL, &e));
  size_t old = offsetof(loom_executable_info_t, target);
  union {
    loom_executable_info_t info;
    unsigned char bytes[sizeof(loom_executable_info_t)];
  } u;
  memset(&u, 0xab, sizeof u);
  u.info.size = old;
  if (e) CHECK_OK(loom_executable_info(e, &u.info));
  CHECK(u.info.size == old && u.info.n_nodes > 0);
  bool untouched = true;
  for (size_t i = old; i < sizeof u; i++) untouched &= u.bytes[i] == 0xab;
  CHECK(untouched);
  loom_executable_destroy(e);
  loom_tensor_destroy(in[0]);
  loom_graph_destroy(g);
}

/* Options of an old caller (no target field) compile for "cpu". */
static void old_options_struct_compiles_for_cpu(void) {
  loom_tensor_t *in[1];
  loom_graph_t *g = mlp(in);
  loom_compile_options_t o;
  CHECK_OK(loom_compile_options_init_sized(&o, offsetof(loom_compile_options_t, target)));
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &o, &e));
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (e) CHECK_OK(loom_executable_info(e, &info));
  CHECK(info.target && !strcmp(info.target, "cpu"));
  loom_executable_destroy(e);
  loom_tensor_destroy(in[0]);
  loom_graph_destroy(g);
}

static void tensors_are_on_the_cpu(void) {
  loom_tensor_t *t = test_rand_tensor(LOOM_F32, 1, (int64_t[]){3}, 0, 1);
  CHECK(loom_tensor_device(t) == LOOM_DEVICE_CPU);
  CHECK(loom_tensor_device(NULL) == LOOM_DEVICE_CPU);
  loom_tensor_destroy(t);
}

/* Each back end's memory calls: alloc gives zeroes, from_host and
 * to_host copy both ways. */
static void backend_memory_round_trips(void) {
  int n;
  const be_backend_t *const *list = be_list(&n);
  for (int b = 0; b < n; b++) {
    float host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = (float)i * 0.5f;
    void *dev = list[b]->alloc(sizeof host);
    CHECK(dev != NULL);
    if (!dev) continue;
    CHECK_OK(list[b]->to_host(back, dev, sizeof back));
    bool zero = true;
    for (int i = 0; i < 64; i++) zero &= back[i] == 0;
    CHECK(zero);
    CHECK_OK(list[b]->from_host(dev, host, sizeof host));
    CHECK_OK(list[b]->to_host(back, dev, sizeof back));
    CHECK(memcmp(host, back, sizeof host) == 0);
    list[b]->free(dev);
  }
}

/* The public list of back ends and what each generates (loom ops prints
 * it): the reference back end generates nothing; the CPU's answer is the
 * default's, and for ops known by hand (add has a C expression,
 * stop_gradient none). */
static void each_backend_says_what_it_generates(void) {
  int n = loom_target_count();
  bool cpu = false, ref = false;
  for (int t = 0; t < n; t++) {
    cpu |= strcmp(loom_target_name(t), "cpu") == 0;
    ref |= strcmp(loom_target_name(t), "ref") == 0;
  }
  CHECK(n >= 2 && cpu && ref);
  CHECK(loom_target_name(-1) == NULL && loom_target_name(n) == NULL);
  for (int op = 0; op < loom_op_count(); op++) {
    int on_ref = -1, on_cpu = -1, on_default = -1;
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    CHECK_OK(loom_op_get_info(op, &info));
    CHECK_OK(loom_op_generated(op, "ref", &on_ref));
    CHECK_OK(loom_op_generated(op, "cpu", &on_cpu));
    CHECK_OK(loom_op_generated(op, NULL, &on_default));
    CHECK(on_ref == 0);
    CHECK(on_cpu == on_default && on_cpu == (info.has_codegen ? 1 : 0));
  }
  int add, stop, gen = -1;
  CHECK_OK(loom_op_find("add", &add));
  CHECK_OK(loom_op_find("stop_gradient", &stop));
  CHECK_OK(loom_op_generated(add, "cpu", &gen));
  CHECK(gen == 1);
  CHECK_OK(loom_op_generated(stop, "cpu", &gen));
  CHECK(gen == 0);
  CHECK(loom_op_generated(add, "tpu", &gen) == LOOM_ERR_INVALID);
  CHECK(strstr(loom_last_error(), "'tpu'") && strstr(loom_last_error(), "cpu"));
  CHECK(loom_op_generated(loom_op_count(), "cpu", &gen) == LOOM_ERR_INVALID);
  CHECK(loom_op_generated(add, "cpu", NULL) == LOOM_ERR_INVALID);
}

int main(void) {
  TEST_RUN(every_backend_matches_the_interpreter);
  TEST_RUN(each_backend_says_what_it_generates);
  TEST_RUN(default_target_is_cpu);
  TEST_RUN(ref_target_generates_nothing);
  TEST_RUN(unknown_target_fails_naming_the_registered);
  TEST_RUN(index_errors_come_back_through_launch);
  TEST_RUN(a_registered_backend_runs_graphs);
  TEST_RUN(old_info_struct_is_not_overrun);
  TEST_RUN(old_options_struct_compiles_for_cpu);
  TEST_RUN(tensors_are_on_the_cpu);
  TEST_RUN(backend_memory_round_trips);
  return test_summary();
}
