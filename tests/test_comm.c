/* Collectives and data parallelism across ranks. Runs as any number of
 * ranks (the test command runs it alone and under `mpirun -np 2`): every
 * expected value is computed here from the ranks' inputs, which are
 * formulas of rank and index, so each rank knows what every other sent.
 *
 * The data-parallel case trains one MLP two ways in each rank: the ranks
 * each on their share of a batch with gradients averaged by
 * loom_data_parallel_grads, and one graph on the whole batch with no
 * communicator; their parameters must agree after several steps. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "loom/trace.h"

static loom_comm_t *comm;
static int rank, size;

/* Rank r's element i. */
static double x_of(int r, int64_t i) { return (double)((r + 1) * 10) + (double)i * 0.5 - 3.0; }

static void set_elem(loom_tensor_t *t, int64_t i, double v) {
  void *d = loom_tensor_data(t);
  switch (loom_tensor_dtype(t)) {
    case LOOM_F32: ((float *)d)[i] = (float)v; break;
    case LOOM_F64: ((double *)d)[i] = v; break;
    case LOOM_I32: ((int32_t *)d)[i] = (int32_t)v; break;
    case LOOM_I64: ((int64_t *)d)[i] = (int64_t)v; break;
    default: test_fail(__FILE__, __LINE__, "set_elem: dtype %d", (int)loom_tensor_dtype(t));
  }
}

/* Runs g (one input, one output) interpreted and compiled, with x filled
 * by x_of(rank, .), into the two outputs. */
static void run_both(loom_graph_t *g, loom_tensor_t *x, loom_tensor_t **interp,
                     loom_tensor_t **compiled, int rank_out, const int64_t *shape_out,
                     loom_dtype_t dt_out) {
  CHECK_OK(loom_interpret(g, 1, &x, 1, interp));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  loom_executable_t *exe = NULL;
  CHECK_OK(loom_compile(g, &o, &exe));
  CHECK_OK(loom_tensor_create(dt_out, rank_out, shape_out, compiled));
  if (exe) CHECK_OK(loom_executable_run(exe, 1, &x, 1, compiled));
  loom_executable_destroy(exe);
}

static loom_tensor_t *input_of(loom_graph_t *g, loom_dtype_t dt, int r, const int64_t *shape,
                               loom_value_t *v) {
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_graph_input(g, "x", dt, r, shape, v));
  CHECK_OK(loom_tensor_create(dt, r, shape, &t));
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    set_elem(t, i, x_of(rank, i));
  return t;
}

static void check_values(loom_tensor_t *t, const double *want, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double got = 0;
    CHECK_OK(loom_tensor_get_f64(t, i, &got));
    if (got != want[i] && !(fabs(got - want[i]) <= 1e-5 * fabs(want[i]))) {
      test_fail(__FILE__, __LINE__, "%s on rank %d: element %lld is %g, want %g", what, rank,
                (long long)i, got, want[i]);
      return;
    }
  }
}

/* g's output, run interpreted and compiled on in, against want; frees g
 * and in. */
static void check_both(loom_graph_t *g, loom_tensor_t *in, int rank_out,
                       const int64_t *shape_out, loom_dtype_t dt, const double *want,
                       int64_t n, const char *what) {
  loom_tensor_t *a = NULL, *b = NULL;
  char label[96];
  run_both(g, in, &a, &b, rank_out, shape_out, dt);
  snprintf(label, sizeof label, "%s, interpreted", what);
  check_values(a, want, n, label);
  snprintf(label, sizeof label, "%s, compiled", what);
  check_values(b, want, n, label);
  loom_tensor_destroy(a), loom_tensor_destroy(b), loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

static void all_reduce_case(loom_dtype_t dt, loom_comm_reduce_t op) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  int64_t shape[2] = {3, 5};
  loom_tensor_t *in = input_of(g, dt, 2, shape, &x);
  CHECK_OK(loom_all_reduce(g, comm, x, op, &y));
  CHECK_OK(loom_graph_output(g, y));
  double want[15];
  for (int i = 0; i < 15; i++) {
    double s = 0, m = -1e300;
    for (int r = 0; r < size; r++) s += x_of(r, i), m = fmax(m, x_of(r, i));
    want[i] = op == LOOM_COMM_SUM ? s : op == LOOM_COMM_MEAN ? s / size : m;
    if (dt == LOOM_I32 || dt == LOOM_I64) {  /* the inputs were truncated */
      s = 0, m = -1e300;
      for (int r = 0; r < size; r++) s += (double)(int64_t)x_of(r, i), m = fmax(m, (double)(int64_t)x_of(r, i));
      want[i] = op == LOOM_COMM_SUM ? s : m;
    }
  }
  check_both(g, in, 2, shape, dt, want, 15, "all_reduce");
}

static void all_reduce(void) {
  all_reduce_case(LOOM_F32, LOOM_COMM_SUM);
  all_reduce_case(LOOM_F32, LOOM_COMM_MEAN);
  all_reduce_case(LOOM_F32, LOOM_COMM_MAX);
  all_reduce_case(LOOM_F64, LOOM_COMM_MEAN);
  all_reduce_case(LOOM_I32, LOOM_COMM_SUM);
  all_reduce_case(LOOM_I64, LOOM_COMM_MAX);
}

static void broadcast(void) {
  int root = size - 1;
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  int64_t shape[1] = {7};
  loom_tensor_t *in = input_of(g, LOOM_F32, 1, shape, &x);
  CHECK_OK(loom_broadcast(g, comm, x, root, &y));
  CHECK_OK(loom_graph_output(g, y));
  double want[7];
  for (int i = 0; i < 7; i++) want[i] = x_of(root, i);
  check_both(g, in, 1, shape, LOOM_F32, want, 7, "broadcast");
}

static void all_gather(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  int64_t shape[2] = {2, 3}, out_shape[2] = {2 * size, 3};
  loom_tensor_t *in = input_of(g, LOOM_F32, 2, shape, &x);
  CHECK_OK(loom_all_gather(g, comm, x, &y));
  CHECK_OK(loom_graph_output(g, y));
  int64_t ty[LOOM_MAX_RANK];
  int ry;
  CHECK_OK(loom_value_type(g, y, NULL, &ry, ty));
  CHECK(ry == 2 && ty[0] == 2 * size && ty[1] == 3);
  double *want = malloc(sizeof(double) * 6 * (size_t)size);
  for (int r = 0; r < size; r++)
    for (int i = 0; i < 6; i++) want[r * 6 + i] = x_of(r, i);
  check_both(g, in, 2, out_shape, LOOM_F32, want, 6 * size, "all_gather");
  free(want);
}

static void reduce_scatter_case(loom_comm_reduce_t op) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, y;
  int64_t shape[2] = {2 * size, 3}, out_shape[2] = {2, 3};
  loom_tensor_t *in = input_of(g, LOOM_F64, 2, shape, &x);
  CHECK_OK(loom_reduce_scatter(g, comm, x, op, &y));
  CHECK_OK(loom_graph_output(g, y));
  double want[6];
  for (int i = 0; i < 6; i++) {
    double s = 0;
    for (int r = 0; r < size; r++) s += x_of(r, rank * 6 + i);
    want[i] = op == LOOM_COMM_MEAN ? s / size : s;
  }
  check_both(g, in, 2, out_shape, LOOM_F64, want, 6, "reduce_scatter");
}

static void reduce_scatter(void) {
  reduce_scatter_case(LOOM_COMM_SUM);
  reduce_scatter_case(LOOM_COMM_MEAN);
}

/* loss = sum(w_r * collective(x)) on each rank, the total loss the sum
 * over ranks; d total / d x_r by hand. */
typedef enum { G_ALL_REDUCE, G_BROADCAST, G_ALL_GATHER, G_REDUCE_SCATTER } gcase_t;

static double w_of(int r, int64_t i) { return (double)(r + 1) - 0.25 * (double)i; }

static void gradient_case(gcase_t k) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t n = 2 * size, out_n = k == G_ALL_GATHER ? n * size : k == G_REDUCE_SCATTER ? 2 : n;
  loom_value_t x, y, w, prod, loss, dx;
  loom_tensor_t *in = input_of(g, LOOM_F32, 1, &n, &x);
  loom_tensor_t *wt = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, &out_n, &wt));
  for (int64_t i = 0; i < out_n; i++) set_elem(wt, i, w_of(rank, i));
  CHECK_OK(loom_graph_constant(g, wt, &w));
  switch (k) {
    case G_ALL_REDUCE: CHECK_OK(loom_all_reduce(g, comm, x, LOOM_COMM_SUM, &y)); break;
    case G_BROADCAST: CHECK_OK(loom_broadcast(g, comm, x, 0, &y)); break;
    case G_ALL_GATHER: CHECK_OK(loom_all_gather(g, comm, x, &y)); break;
    case G_REDUCE_SCATTER: CHECK_OK(loom_reduce_scatter(g, comm, x, LOOM_COMM_MEAN, &y)); break;
  }
  CHECK_OK(loom_mul(g, y, w, &prod));
  CHECK_OK(loom_sum(g, prod, 0, NULL, 0, &loss));
  CHECK_OK(loom_grad(g, loss, 1, &x, &dx));
  CHECK_OK(loom_graph_output(g, dx));
  double want[64];
  for (int64_t i = 0; i < n; i++) {
    double s = 0;
    for (int r = 0; r < size; r++) {
      if (k == G_ALL_REDUCE) s += w_of(r, i);
      if (k == G_BROADCAST) s += rank == 0 ? w_of(r, i) : 0;
      if (k == G_ALL_GATHER) s += w_of(r, rank * n + i);
    }
    /* reduce_scatter mean: element i of x lands in part i / 2 (of rank
     * i / 2), at i % 2, scaled by 1 / size */
    if (k == G_REDUCE_SCATTER) s = w_of((int)(i / 2), i % 2) / size;
    want[i] = s;
  }
  static const char *names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter"};
  char what[64];
  snprintf(what, sizeof what, "%s's gradient", names[k]);
  check_both(g, in, 1, &n, LOOM_F32, want, n, what);
  loom_tensor_destroy(wt);
}

static void gradients(void) {
  gradient_case(G_ALL_REDUCE);
  gradient_case(G_BROADCAST);
  gradient_case(G_ALL_GATHER);
  gradient_case(G_REDUCE_SCATTER);
}

/* ---- Data parallelism --------------------------------------------------------- */

enum { BATCH = 8, DIN = 6, HID = 16, DOUT = 3, STEPS = 5 };

static double data_x(int64_t row, int64_t j) { return sin(0.7 * (double)row + 0.3 * (double)j); }
static double data_y(int64_t row, int64_t j) { return cos(0.5 * (double)row - 0.2 * (double)j); }

typedef struct mlp {
  loom_graph_t *g;
  loom_value_t params[4];
  loom_executable_t *exe;
  loom_tensor_t *x, *y, *loss;
  double clip; /* > 0: the gradient clipped to this norm (set before mlp_build) */
} mlp_t;

/* An MLP trained with Adam on rows [first, first + rows) of the batch;
 * with a communicator its gradients are averaged across ranks. */
/* c null: one process, Adam; else the mean of the ranks' gradients
 * through loom_data_parallel_step (ZeRO-1 when shard). */
static void mlp_build(mlp_t *m, int64_t first, int64_t rows, loom_comm_t *c, int64_t bucket,
                      int shard, uint64_t seed) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  m->g = g;
  loom_value_t x, y, lr, h, o, loss, grads[4];
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 2, (loom_dim_t[]){rows, DIN}, &x));
  CHECK_OK(loom_graph_input(g, "y", LOOM_F32, 2, (loom_dim_t[]){rows, DOUT}, &y));
  const int64_t shapes[4][2] = {{DIN, HID}, {1, HID}, {HID, DOUT}, {1, DOUT}};
  const char *names[4] = {"w1", "b1", "w2", "b2"};
  for (int i = 0; i < 4; i++) {
    loom_tensor_t *t;
    CHECK_OK(loom_graph_param(g, names[i], LOOM_F32, 2, shapes[i], NULL, &m->params[i]));
    CHECK_OK(loom_graph_param_tensor(g, m->params[i], &t));
    CHECK_OK(loom_init_normal(t, seed + (uint64_t)i, 0.0, 0.4));
  }
  CHECK_OK(loom_matmul(g, x, m->params[0], 0, 0, &h));
  CHECK_OK(loom_add(g, h, m->params[1], &h));
  CHECK_OK(loom_tanh(g, h, &h));
  CHECK_OK(loom_matmul(g, h, m->params[2], 0, 0, &o));
  CHECK_OK(loom_add(g, o, m->params[3], &o));
  CHECK_OK(loom_mse(g, o, y, LOOM_REDUCTION_MEAN, &loss));
  CHECK_OK(loom_grad(g, loss, 4, m->params, grads));
  CHECK_OK(loom_full(g, 0, NULL, 0.05, LOOM_F32, &lr));
  if (c) {
    loom_data_parallel_options_t dp;
    loom_optimizer_t adam;
    CHECK_OK(loom_data_parallel_options_init(&dp));
    CHECK_OK(loom_optimizer_init(&adam, LOOM_OPTIMIZER_ADAM));
    dp.bucket_bytes = bucket;
    dp.shard_optimizer_state = shard;
    dp.max_grad_norm = m->clip;
    CHECK_OK(loom_data_parallel_step(g, c, &adam, 4, m->params, grads, lr, &dp));
  } else {
    if (m->clip > 0) CHECK_OK(loom_clip_grad_norm(g, 4, grads, m->clip, grads, NULL));
    CHECK_OK(loom_adam(g, 4, m->params, grads, lr, 0.9, 0.999, 1e-8, 0.0));
  }
  CHECK_OK(loom_graph_output(g, loss));
  if (c) CHECK_OK(loom_comm_broadcast_params(c, g, 0));
  loom_compile_options_t o2;
  loom_compile_options_init(&o2);
  CHECK_OK(loom_compile(g, &o2, &m->exe));
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, (int64_t[]){rows, DIN}, &m->x));
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, (int64_t[]){rows, DOUT}, &m->y));
  CHECK_OK(loom_tensor_create(LOOM_F32, 0, NULL, &m->loss));
  for (int64_t r = 0; r < rows; r++) {
    for (int j = 0; j < DIN; j++) set_elem(m->x, r * DIN + j, data_x(first + r, j));
    for (int j = 0; j < DOUT; j++) set_elem(m->y, r * DOUT + j, data_y(first + r, j));
  }
}

static void mlp_free(mlp_t *m) {
  loom_executable_destroy(m->exe);
  loom_tensor_destroy(m->x), loom_tensor_destroy(m->y), loom_tensor_destroy(m->loss);
  loom_graph_destroy(m->g);
}

static void data_parallel_case(int64_t bucket, int shard, double clip) {
  int64_t rows = BATCH / size;
  mlp_t dp = {.clip = clip}, whole = {.clip = clip};
  /* Each rank's own initial weights: broadcast_params must replace them
   * with rank 0's, which the whole-batch model starts from. */
  mlp_build(&dp, rank * rows, rows, comm, bucket, shard, 100 + 17 * (uint64_t)rank);
  mlp_build(&whole, 0, BATCH, NULL, 0, 0, 100);
  for (int s = 0; s < STEPS; s++) {
    loom_tensor_t *in_dp[2] = {dp.x, dp.y}, *in_whole[2] = {whole.x, whole.y};
    CHECK_OK(loom_executable_run(dp.exe, 2, in_dp, 1, &dp.loss));
    CHECK_OK(loom_executable_run(whole.exe, 2, in_whole, 1, &whole.loss));
  }
  for (int i = 0; i < 4; i++) {
    loom_tensor_t *a, *b;
    CHECK_OK(loom_graph_param_tensor(dp.g, dp.params[i], &a));
    CHECK_OK(loom_graph_param_tensor(whole.g, whole.params[i], &b));
    CHECK_FLOATS(loom_tensor_data(a), loom_tensor_data(b), loom_tensor_numel(a), 1e-5, 1e-4);
  }
  mlp_free(&dp);
  mlp_free(&whole);
}

/* A checkpoint moves between rank counts and between whole and split
 * optimizer state: written by the ranks (rank 0's state; or the whole
 * state gathered from ZeRO-1's parts) and read by one process on the
 * whole batch, or the reverse; either way the next steps give the
 * parameters the run that did not stop gives. */
typedef struct ckpt_way {
  int from_ranks, from_shard, to_ranks, to_shard;
} ckpt_way_t;

static void mlp_for(mlp_t *m, int ranks, int shard, uint64_t seed) {
  int64_t rows = BATCH / size;
  if (ranks) mlp_build(m, rank * rows, rows, comm, 200, shard, seed);
  else mlp_build(m, 0, BATCH, NULL, 0, 0, seed);
}

static void mlp_steps(mlp_t *m, int steps) {
  loom_tensor_t *in[2] = {m->x, m->y};
  for (int s = 0; s < steps; s++) CHECK_OK(loom_executable_run(m->exe, 2, in, 1, &m->loss));
}

static void checkpoint_case(ckpt_way_t w, const char *path, loom_tensor_t *barrier) {
  mlp_t from = {0}, to = {0};
  mlp_for(&from, w.from_ranks, w.from_shard, 100);
  mlp_steps(&from, 3);
  if (w.from_shard) {
    CHECK_ERR(loom_checkpoint_save(from.g, path), LOOM_ERR_INVALID, "loom_comm_checkpoint_save");
    CHECK_OK(loom_comm_checkpoint_save(comm, from.g, path));
  } else if (rank == 0) {
    CHECK_OK(loom_checkpoint_save(from.g, path));
  }
  CHECK_OK(loom_comm_all_reduce_tensor(comm, barrier, LOOM_COMM_MAX));
  mlp_for(&to, w.to_ranks, w.to_shard, 999);
  if (w.to_shard) CHECK_OK(loom_comm_checkpoint_load(comm, to.g, path));
  else CHECK_OK(loom_checkpoint_load(to.g, path));
  mlp_steps(&from, 2);
  mlp_steps(&to, 2);
  for (int i = 0; i < 4; i++) {
    loom_tensor_t *a, *b;
    CHECK_OK(loom_graph_param_tensor(to.g, to.params[i], &a));
    CHECK_OK(loom_graph_param_tensor(from.g, from.params[i], &b));
    CHECK_FLOATS(loom_tensor_data(a), loom_tensor_data(b), loom_tensor_numel(a), 1e-5, 1e-4);
  }
  CHECK_OK(loom_comm_all_reduce_tensor(comm, barrier, LOOM_COMM_MAX)); /* read before rewritten */
  mlp_free(&from), mlp_free(&to);
}

static void checkpoints_move_between_rank_counts(void) {
  if (BATCH % size) return;
  char path[64] = "";
  loom_tensor_t *name = NULL;
  CHECK_OK(loom_tensor_create(LOOM_I8, 1, (int64_t[]){sizeof path}, &name));
  if (rank == 0) {
    char dir[] = "/tmp/loom_comm_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    snprintf(loom_tensor_data(name), sizeof path, "%s/ckpt.safetensors", dir);
  }
  CHECK_OK(loom_comm_broadcast_tensor(comm, name, 0));
  memcpy(path, loom_tensor_data(name), sizeof path);
  path[sizeof path - 1] = '\0';
  const ckpt_way_t ways[] = {
      {1, 0, 0, 0}, /* the ranks write, one process reads */
      {0, 0, 1, 0}, /* the reverse */
      {1, 1, 0, 0}, /* ZeRO-1's parts gathered, read whole */
      {0, 0, 1, 1}, /* whole state split into ZeRO-1's parts */
      {1, 1, 1, 1},
  };
  for (size_t k = 0; k < sizeof ways / sizeof ways[0]; k++) checkpoint_case(ways[k], path, name);
  /* A file no rank can read fails on every rank, and changes nothing. */
  char missing[80];
  snprintf(missing, sizeof missing, "%s.missing", path);
  mlp_t m = {0};
  mlp_for(&m, 1, 1, 100);
  CHECK_ERR(loom_comm_checkpoint_load(comm, m.g, missing), LOOM_ERR_IO, "missing");
  /* A file rank 0 cannot write fails on every rank, naming it. */
  CHECK_ERR(loom_comm_checkpoint_save(comm, m.g, "/nonexistent_loom_dir/ckpt.safetensors"),
            LOOM_ERR_IO, "nonexistent_loom_dir");
  mlp_free(&m);
  if (rank == 0) {
    remove(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
  }
  loom_tensor_destroy(name);
}

/* The compiled data-parallel step starts every bucket's all_reduce before
 * it waits on any, and starts one before the backward pass's last
 * contraction: the exchange overlaps the rest of the backward pass. */
static void buckets_overlap_the_backward_pass(void) {
  mlp_t dp = {0};
  mlp_build(&dp, 0, BATCH / size, comm, 200, 0, 100);
  char *text = NULL;
  CHECK_OK(loom_executable_explain(dp.exe, &text));
  const char *steps = text ? strstr(text, "== steps") : NULL;
  CHECK(steps != NULL);
  int last_start = -1, first_wait = -1, first_start = -1, last_contraction = -1, at = 0;
  for (const char *line = steps; line && *line; at++) {
    const char *end = strchr(line, '\n');
    char one[256];
    snprintf(one, sizeof one, "%.*s", end ? (int)(end - line) : (int)strlen(line), line);
    if (at > 0 && !strncmp(one, "==", 2)) break;
    if (strstr(one, "reference: all_reduce_start")) {
      if (first_start < 0) first_start = at;
      last_start = at;
    }
    if (strstr(one, "reference: all_reduce_wait") && first_wait < 0) first_wait = at;
    if (strstr(one, " contraction: ")) last_contraction = at;
    line = end ? end + 1 : NULL;
  }
  CHECK(first_start >= 0 && first_wait > last_start);
  CHECK(first_start < last_contraction);
  loom_free(text);
  mlp_free(&dp);
}

/* Elements of g's optimizer moments (parameters named "*.m", "*.v"). */
static int64_t moment_elems(loom_graph_t *g) {
  int64_t n = 0;
  for (int i = 0; i < loom_graph_num_params(g); i++) {
    const char *name = loom_graph_param_name(g, i);
    size_t len = strlen(name);
    if (len < 2 || name[len - 2] != '.' || (name[len - 1] != 'm' && name[len - 1] != 'v'))
      continue;
    loom_value_t v;
    loom_tensor_t *t;
    CHECK_OK(loom_graph_param_value(g, i, &v));
    CHECK_OK(loom_graph_param_tensor(g, v, &t));
    n += loom_tensor_numel(t);
  }
  return n;
}

/* ZeRO-1 against plain data parallelism: the same parameters, and each
 * rank's moments are its 1 / size of every parameter (rounded up). */
static void zero_splits_the_optimizer_state(void) {
  if (BATCH % size) return;
  mlp_t plain = {0}, zero = {0};
  mlp_for(&plain, 1, 0, 100);
  mlp_for(&zero, 1, 1, 100);
  mlp_steps(&plain, STEPS);
  mlp_steps(&zero, STEPS);
  for (int i = 0; i < 4; i++) {
    loom_tensor_t *a, *b;
    CHECK_OK(loom_graph_param_tensor(zero.g, zero.params[i], &a));
    CHECK_OK(loom_graph_param_tensor(plain.g, plain.params[i], &b));
    CHECK_FLOATS(loom_tensor_data(a), loom_tensor_data(b), loom_tensor_numel(a), 1e-6, 1e-5);
  }
  const int64_t numels[4] = {DIN * HID, HID, HID * DOUT, DOUT};
  int64_t whole = 0, part = 0;
  for (int i = 0; i < 4; i++) {
    whole += 2 * numels[i];
    part += 2 * ((numels[i] + size - 1) / size);
  }
  CHECK(moment_elems(plain.g) == whole);
  CHECK(moment_elems(zero.g) == part);
  mlp_free(&plain), mlp_free(&zero);
}

static void data_parallel_matches_one_process(void) {
  if (BATCH % size) return;
  for (int shard = 0; shard < 2; shard++) {
    data_parallel_case(25 << 20, shard, 0); /* one bucket */
    data_parallel_case(200, shard, 0);      /* a bucket per gradient or two */
    data_parallel_case(200, shard, 0.05);   /* clipped by the whole gradient's norm */
  }
}

/* ---- Data parallelism through a trace ------------------------------------------ */

enum { TBATCH = 4 }; /* rows a rank */

/* Share r's rows: their sum's sign follows r's parity, so that even
 * ranks take one branch of the model and odd ranks the other. */
static double share_x(int r, int64_t row, int64_t j) {
  return (r % 2 ? -1.0 : 1.0) * (0.3 + fabs(data_x(r * TBATCH + row, j)));
}

typedef struct tmodel {
  loom_tensor_t *p[3]; /* W1 (DIN, HID), A and B (HID, DOUT) */
} tmodel_t;

static void tmodel_init(tmodel_t *m, uint64_t seed) {
  const int64_t shapes[3][2] = {{DIN, HID}, {HID, DOUT}, {HID, DOUT}};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(loom_tensor_create(LOOM_F32, 2, shapes[i], &m->p[i]));
    CHECK_OK(loom_init_normal(m->p[i], seed + (uint64_t)i, 0.0, 0.4));
  }
}

/* The loss of share r through the trace: tanh(x W1), then A or B by the
 * sign of the share's sum (a branch the host takes), mean squared error. */
static loom_value_t traced_loss(loom_trace_t *t, const tmodel_t *m, int r,
                                loom_tensor_t **keep) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_tensor_t *x = NULL, *y = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, (int64_t[]){TBATCH, DIN}, &x));
  CHECK_OK(loom_tensor_create(LOOM_F32, 2, (int64_t[]){TBATCH, DOUT}, &y));
  for (int64_t row = 0; row < TBATCH; row++) {
    for (int j = 0; j < DIN; j++) set_elem(x, row * DIN + j, share_x(r, row, j));
    for (int j = 0; j < DOUT; j++) set_elem(y, row * DOUT + j, data_y(r * TBATCH + row, j));
  }
  keep[0] = x, keep[1] = y;
  loom_value_t xv, yv, w[3], h, s, zero, pos, o, loss;
  CHECK_OK(loom_trace_input(t, x, NULL, &xv));
  CHECK_OK(loom_trace_input(t, y, NULL, &yv));
  for (int i = 0; i < 3; i++) CHECK_OK(loom_trace_param(t, m->p[i], &w[i]));
  CHECK_OK(loom_matmul(g, xv, w[0], 0, 0, &h));
  CHECK_OK(loom_tanh(g, h, &h));
  CHECK_OK(loom_sum(g, xv, 0, NULL, 0, &s));
  CHECK_OK(loom_full(g, 0, NULL, 0.0, LOOM_F32, &zero));
  CHECK_OK(loom_gt(g, s, zero, &pos));
  int taken = 0;
  CHECK_OK(loom_trace_cond(t, pos, &taken));
  CHECK_OK(loom_matmul(g, h, w[taken ? 1 : 2], 0, 0, &o));
  CHECK_OK(loom_mse(g, o, yv, LOOM_REDUCTION_MEAN, &loss));
  return loss;
}

static loom_trace_t *plain_trace(void) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  loom_trace_t *t = NULL;
  CHECK_OK(loom_trace_create(&o, &t));
  return t;
}

/* Each rank traces its own share, its branch its own, with the gradients
 * averaged in the optimizer step; one process traces every share's loss
 * and averages the losses. Three Adam steps later the parameters agree,
 * both branches' weights trained on every rank. */
static void traced_data_parallel_matches_one_process(void) {
  tmodel_t dp, one;
  tmodel_init(&dp, 500 + 13 * (uint64_t)rank); /* rank 0's reach the others */
  tmodel_init(&one, 500);
  loom_trace_t *td = plain_trace(), *to = plain_trace();
  CHECK_OK(loom_trace_data_parallel(td, comm));
  for (int step = 0; step < 3; step++) {
    loom_tensor_t *keep[2 * 64];
    loom_value_t l = traced_loss(td, &dp, rank, keep);
    CHECK_OK(loom_trace_backward(td, l));
    CHECK_OK(loom_trace_adamw(td, 0.05, 0.9, 0.999, 1e-8, 0.0));
    CHECK_OK(loom_trace_step_end(td));
    loom_tensor_destroy(keep[0]), loom_tensor_destroy(keep[1]);
    loom_graph_t *g = loom_trace_graph(to);
    loom_value_t total = {-1};
    for (int r = 0; r < size && r < 64; r++) {
      loom_value_t lr = traced_loss(to, &one, r, keep + 2 * r);
      if (total.id < 0) total = lr;
      else CHECK_OK(loom_add(g, total, lr, &total));
    }
    loom_value_t scale;
    CHECK_OK(loom_full(g, 0, NULL, 1.0 / size, LOOM_F32, &scale));
    CHECK_OK(loom_mul(g, total, scale, &total));
    CHECK_OK(loom_trace_backward(to, total));
    CHECK_OK(loom_trace_adamw(to, 0.05, 0.9, 0.999, 1e-8, 0.0));
    CHECK_OK(loom_trace_step_end(to));
    for (int r = 0; r < size && r < 64; r++)
      loom_tensor_destroy(keep[2 * r]), loom_tensor_destroy(keep[2 * r + 1]);
  }
  for (int i = 0; i < 3; i++)
    CHECK_FLOATS(loom_tensor_data(dp.p[i]), loom_tensor_data(one.p[i]),
                 loom_tensor_numel(one.p[i]), 1e-5, 1e-4);
  loom_trace_destroy(td);
  loom_trace_destroy(to);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(dp.p[i]), loom_tensor_destroy(one.p[i]);
}

static void errors(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, b, i, y;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){3}, &x));
  CHECK_OK(loom_graph_input(g, "b", LOOM_BOOL, 1, (loom_dim_t[]){4}, &b));
  CHECK_OK(loom_graph_input(g, "i", LOOM_I32, 1, (loom_dim_t[]){4}, &i));
  CHECK_ERR(loom_all_reduce(g, NULL, x, LOOM_COMM_SUM, &y), LOOM_ERR_INVALID, "communicator");
  CHECK_ERR(loom_all_reduce(g, comm, b, LOOM_COMM_SUM, &y), LOOM_ERR_DTYPE, "all_reduce");
  CHECK_ERR(loom_all_reduce(g, comm, i, LOOM_COMM_MEAN, &y), LOOM_ERR_DTYPE, "mean");
  CHECK_ERR(loom_all_reduce(g, comm, x, (loom_comm_reduce_t)7, &y), LOOM_ERR_SHAPE, "reduce");
  CHECK_ERR(loom_broadcast(g, comm, x, size, &y), LOOM_ERR_SHAPE, "root");
  if (size > 1)
    CHECK_ERR(loom_reduce_scatter(g, comm, x, LOOM_COMM_SUM, &y), LOOM_ERR_SHAPE, "equal parts");
  CHECK_ERR(loom_comm_set_timeout(comm, -1), LOOM_ERR_INVALID, "timeout");
  CHECK_ERR(loom_comm_broadcast_tensor(comm, NULL, 0), LOOM_ERR_INVALID, "null");
  /* graphs that differ between ranks are caught before any bytes move */
  loom_value_t p;
  CHECK_OK(loom_graph_param(g, rank == 0 ? "p" : "q", LOOM_F32, 1, (int64_t[]){2}, NULL, &p));
  if (size > 1) CHECK_ERR(loom_comm_broadcast_params(comm, g, 0), LOOM_ERR_INVALID, "differ");
  loom_graph_destroy(g);
  /* the same parameters, one op different: caught too */
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 1, (int64_t[]){2}, NULL, &p));
  CHECK_OK((rank == 0 ? loom_add : loom_mul)(g, p, p, &y));
  CHECK_OK(loom_graph_output(g, y));
  if (size > 1) CHECK_ERR(loom_comm_broadcast_params(comm, g, 0), LOOM_ERR_INVALID, "differ");
  else CHECK_OK(loom_comm_broadcast_params(comm, g, 0));
  loom_graph_destroy(g);
  CHECK(loom_comm_rank(NULL) == -1 && loom_comm_size(NULL) == -1);
  /* the optimizer step: bad arguments are named, with and without ZeRO-1 */
  CHECK_OK(loom_graph_create(&g));
  loom_value_t w, lr, gw, gx;
  loom_optimizer_t sgd;
  loom_data_parallel_options_t o;
  CHECK_OK(loom_optimizer_init(&sgd, LOOM_OPTIMIZER_SGD));
  CHECK_OK(loom_data_parallel_options_init(&o));
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 1, (int64_t[]){3}, NULL, &w));
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, (loom_dim_t[]){3}, &x));
  CHECK_OK(loom_graph_input(g, "gx", LOOM_F32, 1, (loom_dim_t[]){5}, &gx));
  CHECK_OK(loom_graph_input(g, "i", LOOM_I32, 1, (loom_dim_t[]){3}, &i));
  CHECK_OK(loom_full(g, 0, NULL, 0.1, LOOM_F32, &lr));
  CHECK_OK(loom_mul(g, w, x, &gw));
  CHECK_ERR(loom_data_parallel_step(g, comm, NULL, 1, &w, &gw, lr, &o), LOOM_ERR_INVALID, "opt");
  CHECK_ERR(loom_data_parallel_step(g, comm, &sgd, 0, &w, &gw, lr, &o), LOOM_ERR_INVALID,
            "n = 0");
  CHECK_ERR(loom_data_parallel_step(g, comm, &sgd, 1, &w, &i, lr, &o), LOOM_ERR_DTYPE, "float");
  loom_value_t half_grad;
  CHECK_OK(loom_cast(g, gw, LOOM_BF16, &half_grad));
  CHECK_ERR(loom_data_parallel_grads(g, comm, 1, &half_grad, NULL, &half_grad), LOOM_ERR_DTYPE,
            "master copy in f32");
  o.max_grad_norm = -1;
  CHECK_ERR(loom_data_parallel_step(g, comm, &sgd, 1, &w, &gw, lr, &o), LOOM_ERR_INVALID,
            "max_grad_norm");
  o.max_grad_norm = 0;
  for (o.shard_optimizer_state = 0; o.shard_optimizer_state < 2; o.shard_optimizer_state++) {
    CHECK_ERR(loom_data_parallel_step(g, comm, &sgd, 1, &x, &gw, lr, &o), LOOM_ERR_INVALID,
              "not a parameter");
    CHECK_ERR(loom_data_parallel_step(g, comm, &sgd, 1, &w, &gx, lr, &o), LOOM_ERR_SHAPE,
              "grads[0]");
  }
  loom_graph_destroy(g);
}

/* Host collectives on tensors whose size or dtype differs between ranks
 * fail on every rank before bytes move (a larger root's broadcast wrote
 * past the others' buffers); a graph whose all_reduce_start lacks its
 * wait, or whose start's value another op reads, is refused. */
static void mismatched_sizes_and_unfinished_starts(void) {
  loom_tensor_t *t = NULL, *u = NULL;
  int64_t n = rank == 0 ? 4096 : 4;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, &n, &t));
  int64_t four = 4;
  CHECK_OK(loom_tensor_create(rank == 0 ? LOOM_F32 : LOOM_I32, 1, &four, &u));
  if (size > 1) {
    CHECK_ERR(loom_comm_broadcast_tensor(comm, t, 0), LOOM_ERR_INVALID, "differs");
    CHECK_ERR(loom_comm_all_reduce_tensor(comm, t, LOOM_COMM_SUM), LOOM_ERR_INVALID,
              "differs");
    CHECK_ERR(loom_comm_broadcast_tensor(comm, u, 0), LOOM_ERR_INVALID, "differs");
  }
  CHECK_OK(loom_comm_broadcast_tensor(comm, u, rank)); /* each its own root: size 1 */
  loom_tensor_destroy(t);
  loom_tensor_destroy(u);

  for (int form = 0; form < 2; form++) {
    loom_graph_t *g = NULL;
    loom_value_t x, started, y;
    CHECK_OK(loom_graph_create(&g));
    CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, &four, &x));
    CHECK_OK(loom_all_reduce_start(g, comm, x, LOOM_COMM_SUM, &started));
    if (form == 0) CHECK_OK(loom_relu(g, started, &y));
    else CHECK_OK(loom_relu(g, x, &y));
    CHECK_OK(loom_graph_output(g, y));
    CHECK_ERR(loom_graph_verify(g), LOOM_ERR_GRAPH, form == 0 ? "only its all_reduce_wait"
                                                              : "0 all_reduce_waits");
    loom_executable_t *e = NULL;
    CHECK_ERR(loom_compile(g, NULL, &e), LOOM_ERR_GRAPH, "all_reduce");
    CHECK(e == NULL);
    loom_graph_destroy(g);
  }
}

/* Modes for the failure tests (CMakeLists.txt runs them under mpirun and
 * reads the job's exit status and messages): rank 1 never reaches the
 * collective rank 0 waits in (sleeping, or blocked in a collective on
 * another communicator that rank 0 never joins), or dies by SIGKILL
 * before it. Either way the job must end, with a message, well before
 * the test's own timeout. */
static int failure_mode(const char *mode) {
  float v = 1.0f;
  loom_tensor_t *t = NULL;
  loom_comm_t *other = NULL;
  if (loom_tensor_create(LOOM_F32, 0, NULL, &t) != LOOM_OK) return 1;
  loom_tensor_write(t, &v, sizeof v);
  loom_comm_set_timeout(comm, 2.0);
  if (!strcmp(mode, "--blocked-rank") && loom_comm_world(&other) != LOOM_OK) return 1;
  if (rank == 1 && !strcmp(mode, "--killed-rank")) raise(SIGKILL);
  if (rank == 1 && !strcmp(mode, "--late-rank")) sleep(60);
  if (rank == 1 && other) {
    loom_comm_set_timeout(other, 20.0); /* rank 0's times out first */
    loom_comm_all_reduce_tensor(other, t, LOOM_COMM_SUM);
  }
  loom_status_t s = loom_comm_all_reduce_tensor(comm, t, LOOM_COMM_SUM);
  fprintf(stderr, "test_comm %s: rank %d: the collective returned %s\n", mode, rank,
          loom_status_name(s));
  loom_tensor_destroy(t);
  loom_comm_destroy(comm);
  return 0;
}

int main(int argc, char **argv) {
  loom_status_t s = loom_comm_world(&comm);
  if (s == LOOM_ERR_UNSUPPORTED) {
    printf("test_comm: skipped: %s\n", loom_last_error());
    return 0;
  }
  if (s != LOOM_OK) {
    fprintf(stderr, "test_comm: loom_comm_world: %s\n", loom_last_error());
    return 1;
  }
  rank = loom_comm_rank(comm), size = loom_comm_size(comm);
  if (argc > 1) return failure_mode(argv[1]);
  CHECK_OK(loom_comm_set_timeout(comm, 120));
  TEST_RUN(all_reduce);
  TEST_RUN(broadcast);
  TEST_RUN(all_gather);
  TEST_RUN(reduce_scatter);
  TEST_RUN(gradients);
  TEST_RUN(data_parallel_matches_one_process);
  TEST_RUN(zero_splits_the_optimizer_state);
  TEST_RUN(checkpoints_move_between_rank_counts);
  TEST_RUN(buckets_overlap_the_backward_pass);
  TEST_RUN(traced_data_parallel_matches_one_process);
  TEST_RUN(errors);
  TEST_RUN(mismatched_sizes_and_unfinished_starts);
  loom_comm_destroy(comm);
  /* MPI is finalized with the last communicator, and starts once */
  loom_comm_t *again = NULL;
  CHECK_ERR(loom_comm_world(&again), LOOM_ERR_UNSUPPORTED, "finalized");
  CHECK(again == NULL);
  return test_summary();
}
