/* bench dist: the training step across ranks (issue 21), one program run
 * alone or under mpirun; bench/dist.py runs it every way and compares.
 *
 *   bench_dist step MODEL [--threads N] [--data-parallel] [--zero]
 *     the step of bench/train.c (train_step.c), each rank on its own batch
 *     of the model's size, the gradients averaged across ranks with
 *     --data-parallel; rank 0 prints {"bench":"dist_step","model",
 *     "ranks","threads","step_ms","items_per_s"}: the median step over
 *     blocks of steps after warm-up, items = batch x ranks a step, and
 *     "state_bytes": the bytes of AdamW's moments on this rank. --zero:
 *     ZeRO-1, AdamW's state split across the ranks.
 *   bench_dist allreduce MODEL
 *     under mpirun: what Loom's bucketed all_reduce of the model's
 *     gradients (loom_data_parallel_grads) adds to a step's tail, against
 *     what one MPI_Allreduce of the same bytes, placed by hand in the same
 *     tail, adds to it (allreduce() below); rank 0 prints
 *     {"bench":"allreduce","model","bytes","loom_ms","mpi_ms","overhead",
 *     "mpi_alone_ms"} (medians; the last: MPI_Allreduce back to back).
 *   bench_dist layout MODEL
 *     {"bench":"grad_layout","model","grad_bytes":[...]}: each parameter's
 *     gradient bytes in parameter order (bench/dist_sim.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/alloc.h"
#include "train_step.h"

#ifdef LOOM_HAVE_MPI
#include <mpi.h>
#endif

enum { WARMUP = 5, ROUNDS = 7, BLOCK_MS = 300, REPS = 30 };

static loom_comm_t *comm;

/* Every rank at this point before any goes on. */
static void barrier(void) {
  if (!comm) return;
  int64_t one = 1;
  loom_tensor_t *t = NULL;
  BENCH_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &one, sizeof one, &t));
  BENCH_TRY(loom_comm_all_reduce_tensor(comm, t, LOOM_COMM_SUM));
  loom_tensor_destroy(t);
}

typedef struct run {
  loom_executable_t *e;
  int n_in, n_out;
  loom_tensor_t **in, **out;
} run_t;

static void run_once(void *arg) {
  run_t *r = arg;
  BENCH_TRY(loom_executable_run(r->e, r->n_in, r->in, r->n_out, r->out));
}

/* Median ms of r over ROUNDS blocks, every rank running the same count. */
static double median_ms(run_t *r) {
  for (int i = 0; i < WARMUP; i++) run_once(r);
  barrier();
  double t0 = bench_now_ns();
  run_once(r);
  double once = (bench_now_ns() - t0) / 1e6;
  /* rank 0's count for all: the ranks must run the same collectives */
  int64_t reps = once > 0 ? (int64_t)(BLOCK_MS / once) + 1 : 1;
  if (reps > REPS) reps = REPS;
  loom_tensor_t *t = NULL;
  BENCH_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &reps, sizeof reps, &t));
  if (comm) BENCH_TRY(loom_comm_broadcast_tensor(comm, t, 0));
  reps = *(int64_t *)loom_tensor_data(t);
  loom_tensor_destroy(t);
  double ms[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    barrier();
    double s = bench_now_ns();
    for (int k = 0; k < reps; k++) run_once(r);
    barrier();
    ms[i] = (bench_now_ns() - s) / 1e6 / (double)reps;
  }
  return bench_median(ms, ROUNDS);
}

static int rank0(void) { return !comm || loom_comm_rank(comm) == 0; }

/* Bytes of g's optimizer moments (parameters named "*.m", "*.v"). */
static double moment_bytes(loom_graph_t *g) {
  double bytes = 0;
  for (int i = 0; i < loom_graph_num_params(g); i++) {
    const char *name = loom_graph_param_name(g, i);
    size_t n = strlen(name);
    if (n < 2 || name[n - 2] != '.' || (name[n - 1] != 'm' && name[n - 1] != 'v')) continue;
    loom_value_t v;
    loom_tensor_t *t;
    BENCH_TRY(loom_graph_param_value(g, i, &v));
    BENCH_TRY(loom_graph_param_tensor(g, v, &t));
    bytes += (double)loom_tensor_numel(t) * (double)loom_dtype_size(loom_tensor_dtype(t));
  }
  return bytes;
}

static void step(const train_model_t *m, int threads, int zero) {
  model_params_t *p = calloc(1, sizeof *p);
  loom_graph_t *g = NULL;
  loom_tensor_t *in[3], *loss = NULL;
  train_make_inputs(m, in);
  BENCH_TRY(loom_graph_create(&g));
  BENCH_TRY(train_build_step(g, m, p, comm, zero));
  if (comm) BENCH_TRY(loom_comm_broadcast_params(comm, g, 0));
  loom_compile_options_t o = bench_options(1, threads);
  run_t r = {.n_in = 3, .n_out = 1, .in = in, .out = &loss};
  BENCH_TRY(loom_compile(g, &o, &r.e));
  BENCH_TRY(loom_executable_new_output(r.e, 0, &loss));
  double ms = median_ms(&r);
  int ranks = comm ? loom_comm_size(comm) : 1;
  if (rank0()) {
    bench_json_t j;
    bench_json_begin(&j, "dist_step");
    bench_json_str(&j, "model", m->name);
    bench_json_num(&j, "ranks", ranks);
    bench_json_num(&j, "threads", threads);
    bench_json_num(&j, "step_ms", ms);
    bench_json_num(&j, "items_per_s", (double)m->shape[0] * ranks / ms * 1e3);
    bench_json_num(&j, "state_bytes", moment_bytes(g));
    bench_json_end(&j);
  }
  loom_tensor_destroy(loss);
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_executable_destroy(r.e);
  loom_graph_destroy(g);
  free(p);
}

#ifdef LOOM_HAVE_MPI
/* The tail of a training step over the model's gradient shapes, whole or
 * in the two halves a hand-made exchange sits between:
 *   TAIL_LOOM     each gradient made in the graph (x * 0.5, as backward
 *                 makes it), averaged across ranks by
 *                 loom_data_parallel_grads, the parameters updated by SGD;
 *   TAIL_PRODUCE  the gradients made as outputs, each into its place in
 *                 one buffer (the bucket);
 *   TAIL_CONSUME  the gradients as inputs from there, over the number of
 *                 ranks, the parameters updated by SGD. */
typedef enum { TAIL_LOOM, TAIL_PRODUCE, TAIL_CONSUME } tail_part_t;

typedef struct tail {
  loom_graph_t *g; /* the executable's parameters */
  run_t r;
} tail_t;

static void build_tail(const model_params_t *mp, loom_graph_t *model, tail_part_t part,
                       loom_tensor_t **x, loom_tensor_t **in_bucket, tail_t *t) {
  loom_graph_t *g = NULL;
  BENCH_TRY(loom_graph_create(&g));
  int n = mp->n;
  loom_value_t *params = calloc((size_t)n, sizeof *params), *grads = calloc((size_t)n, sizeof *grads);
  loom_value_t half, lr;
  BENCH_TRY(loom_full(g, 0, NULL, 0.5, LOOM_F32, &half));
  BENCH_TRY(loom_full(g, 0, NULL, 1e-3, LOOM_F32, &lr));
  for (int i = 0; i < n; i++) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    char name[32];
    BENCH_TRY(loom_value_type(model, mp->v[i], &dt, &rank, dims));
    snprintf(name, sizeof name, "p%d", i);
    BENCH_TRY(loom_graph_param(g, name, dt, rank, dims, NULL, &params[i]));
    loom_value_t xi;
    BENCH_TRY(loom_graph_input(g, NULL, dt, rank, dims, &xi));
    if (part == TAIL_CONSUME) {
      loom_value_t scale;
      BENCH_TRY(loom_full(g, 0, NULL, 1.0 / (comm ? loom_comm_size(comm) : 1), dt, &scale));
      BENCH_TRY(loom_mul(g, xi, scale, &grads[i]));
    } else {
      BENCH_TRY(loom_mul(g, xi, half, &grads[i]));
      if (part == TAIL_PRODUCE) BENCH_TRY(loom_graph_output(g, grads[i]));
    }
  }
  if (part != TAIL_PRODUCE) {
    if (part == TAIL_LOOM) BENCH_TRY(loom_data_parallel_grads(g, comm, n, grads, NULL, grads));
    BENCH_TRY(loom_sgd(g, n, params, grads, lr, 0.0, 0, 0.0));
  }
  loom_compile_options_t o = bench_options(1, 1);
  t->g = g;
  t->r = part == TAIL_CONSUME ? (run_t){.n_in = n, .in = in_bucket}
         : part == TAIL_PRODUCE ? (run_t){.n_in = n, .in = x, .n_out = n, .out = in_bucket}
                                : (run_t){.n_in = n, .in = x};
  BENCH_TRY(loom_compile(g, &o, &t->r.e));
  free(params), free(grads);
}

typedef struct tails {
  tail_t loom, produce, consume;
  loom_tensor_t **parts; /* each gradient's place in buf */
  float *buf; /* allocated as Loom's arena is: MPI's shared-memory
                transport pins each page it copies, and huge pages are fewer */
  int64_t count;
  bool mpi; /* the hand-made exchange runs MPI_Allreduce */
} tails_t;

static void loom_tail(void *arg) { run_once(&((tails_t *)arg)->loom.r); }

static void mpi_only(void *arg) {
  tails_t *t = arg;
  MPI_Allreduce(MPI_IN_PLACE, t->buf, (int)t->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void split_tail(void *arg) {
  tails_t *t = arg;
  run_once(&t->produce.r);
  if (t->mpi) mpi_only(t);
  run_once(&t->consume.r);
}

/* ms of one call of f, the ranks starting together (rank 0's clock). */
static double once_ms(void (*f)(void *), void *arg) {
  MPI_Barrier(MPI_COMM_WORLD);
  double s = bench_now_ns();
  f(arg);
  return (bench_now_ns() - s) / 1e6;
}

enum { TAIL_ROUNDS = 201 };

/* What each exchange adds to the same step tail: Loom's (the tail with
 * loom_data_parallel_grads) and one MPI_Allreduce of all the bytes made
 * by hand between the tail's halves, each less the halves run without an
 * exchange. Every side makes the bucket and reads it back once, as a step
 * does, so the differences hold the exchanges alone, in a step's
 * surroundings (caches just filled, ranks arriving as a step leaves
 * them). The sides run in turn, round after round, so that this
 * machine's drift falls on all; figures are medians of the per-round
 * differences. */
static void allreduce(const train_model_t *m) {
  model_params_t *p = calloc(1, sizeof *p);
  loom_graph_t *model = NULL;
  BENCH_TRY(loom_graph_create(&model));
  BENCH_TRY(train_build_step(model, m, p, NULL, 0));
  loom_tensor_t **x = calloc((size_t)p->n, sizeof *x);
  tails_t t = {0};
  for (int i = 0; i < p->n; i++) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    BENCH_TRY(loom_value_type(model, p->v[i], &dt, &rank, dims));
    BENCH_TRY(loom_tensor_create(dt, rank, dims, &x[i]));
    BENCH_TRY(loom_init_normal(x[i], (uint64_t)i, 0.0, 1.0));
    t.count += loom_tensor_numel(x[i]);
  }
  t.buf = core_aligned_alloc((size_t)t.count * sizeof *t.buf);
  if (!t.buf) {
    fprintf(stderr, "bench dist: out of memory for the MPI buffer\n");
    exit(1);
  }
  memset(t.buf, 0, (size_t)t.count * sizeof *t.buf);
  t.parts = calloc((size_t)p->n, sizeof *t.parts);
  int64_t at = 0;
  for (int i = 0; i < p->n; at += loom_tensor_numel(x[i]), i++) {
    int64_t dims[LOOM_MAX_RANK];
    for (int d = 0; d < loom_tensor_rank(x[i]); d++) dims[d] = loom_tensor_dim(x[i], d);
    BENCH_TRY(loom_tensor_wrap(LOOM_F32, loom_tensor_rank(x[i]), dims, NULL, t.buf + at,
                               &t.parts[i]));
  }
  build_tail(p, model, TAIL_LOOM, x, NULL, &t.loom);
  build_tail(p, model, TAIL_PRODUCE, x, t.parts, &t.produce);
  build_tail(p, model, TAIL_CONSUME, x, t.parts, &t.consume);
  t.mpi = true;
  for (int i = 0; i < WARMUP; i++) loom_tail(&t), split_tail(&t);
  double dp[TAIL_ROUNDS], mpi[TAIL_ROUNDS], alone[TAIL_ROUNDS];
  for (int i = 0; i < TAIL_ROUNDS; i++) {
    t.mpi = false;
    double halves = once_ms(split_tail, &t);
    dp[i] = once_ms(loom_tail, &t) - halves;
    t.mpi = true;
    mpi[i] = once_ms(split_tail, &t) - halves;
    alone[i] = once_ms(mpi_only, &t);
  }
  double loom = bench_median(dp, TAIL_ROUNDS), mpi_ms = bench_median(mpi, TAIL_ROUNDS);
  if (rank0()) {
    bench_json_t j;
    bench_json_begin(&j, "allreduce");
    bench_json_str(&j, "model", m->name);
    bench_json_num(&j, "bytes", (double)t.count * 4);
    bench_json_num(&j, "loom_ms", loom);
    bench_json_num(&j, "mpi_ms", mpi_ms);
    bench_json_num(&j, "overhead", loom / mpi_ms - 1);
    bench_json_num(&j, "mpi_alone_ms", bench_median(alone, TAIL_ROUNDS));
    bench_json_end(&j);
  }
  tail_t *all[] = {&t.loom, &t.produce, &t.consume};
  for (int k = 0; k < 3; k++) loom_executable_destroy(all[k]->r.e), loom_graph_destroy(all[k]->g);
  for (int i = 0; i < p->n; i++) loom_tensor_destroy(x[i]), loom_tensor_destroy(t.parts[i]);
  loom_graph_destroy(model);
  core_free(t.buf);
  free(x), free(t.parts), free(p);
}
#else
static void allreduce(const train_model_t *m) {
  (void)m;
  fprintf(stderr, "bench dist: this build has no MPI\n");
  exit(1);
}
#endif

/* The gradients' bytes in parameter order, for bench/dist_sim.py. */
static void layout(const train_model_t *m) {
  model_params_t *p = calloc(1, sizeof *p);
  loom_graph_t *g = NULL;
  BENCH_TRY(loom_graph_create(&g));
  BENCH_TRY(train_build_step(g, m, p, NULL, 0));
  printf("{\"bench\":\"grad_layout\",\"model\":\"%s\",\"grad_bytes\":[", m->name);
  for (int i = 0; i < p->n; i++) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    BENCH_TRY(loom_value_type(g, p->v[i], &dt, &rank, dims));
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    printf("%s%lld", i ? "," : "", (long long)(n * 4));
  }
  printf("]}\n");
  loom_graph_destroy(g);
  free(p);
}

int main(int argc, char **argv) {
  const char *mode = argc > 2 ? argv[1] : "", *name = argc > 2 ? argv[2] : "";
  const train_model_t *m = train_model_find(name);
  int threads = 1, dp = !strcmp(mode, "allreduce"), zero = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--data-parallel")) dp = 1;
    else if (!strcmp(argv[i], "--zero")) dp = zero = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else m = NULL;
  }
  if (!m || threads < 1 ||
      (strcmp(mode, "step") && strcmp(mode, "allreduce") && strcmp(mode, "layout"))) {
    fprintf(stderr, "usage: bench_dist step|allreduce|layout mlp|resnet18|transformer|vit "
            "[--threads N] [--data-parallel] [--zero]\n");
    return 2;
  }
  if (!strcmp(mode, "layout")) {
    layout(m);
    return 0;
  }
  bench_lock_memory("dist");
  if (dp && loom_comm_world(&comm) != LOOM_OK) {
    fprintf(stderr, "bench dist: %s\n", loom_last_error());
    return 1;
  }
  if (!strcmp(mode, "step")) step(m, threads, zero);
  else allreduce(m);
  loom_comm_destroy(comm);
  return 0;
}
