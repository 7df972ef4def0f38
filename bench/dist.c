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
 *     under mpirun: Loom's bucketed all_reduce of the model's gradients (a
 *     compiled graph of the gradients as inputs, loom_data_parallel_grads,
 *     the averages as outputs) against one MPI_Allreduce of the same bytes
 *     in place, the engine's own speed; rank 0 prints {"bench":"allreduce",
 *     "model","bytes","loom_ms","mpi_ms","overhead"} (medians).
 *   bench_dist layout MODEL
 *     {"bench":"grad_layout","model","grad_bytes":[...]}: each parameter's
 *     gradient bytes in parameter order (bench/dist_sim.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
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
static double mpi_ms(int64_t count) {
  float *buf = calloc((size_t)count, sizeof *buf);
  double ms[ROUNDS];
  for (int i = 0; i < WARMUP; i++)
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < ROUNDS; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double s = bench_now_ns();
    for (int k = 0; k < REPS; k++)
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ms[i] = (bench_now_ns() - s) / 1e6 / REPS;
  }
  free(buf);
  return bench_median(ms, ROUNDS);
}
#endif

static void allreduce(const train_model_t *m) {
#ifdef LOOM_HAVE_MPI
  model_params_t *p = calloc(1, sizeof *p);
  loom_graph_t *model = NULL, *g = NULL;
  BENCH_TRY(loom_graph_create(&model));
  BENCH_TRY(train_build_step(model, m, p, NULL, 0));
  BENCH_TRY(loom_graph_create(&g));
  loom_value_t *grads = calloc((size_t)p->n, sizeof *grads);
  loom_tensor_t **in = calloc((size_t)p->n, sizeof *in), **out = calloc((size_t)p->n, sizeof *out);
  int64_t count = 0;
  for (int i = 0; i < p->n; i++) {
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    BENCH_TRY(loom_value_type(model, p->v[i], &dt, &rank, dims));
    BENCH_TRY(loom_graph_input(g, NULL, dt, rank, dims, &grads[i]));
    BENCH_TRY(loom_tensor_create(dt, rank, dims, &in[i]));
    count += loom_tensor_numel(in[i]);
  }
  BENCH_TRY(loom_data_parallel_grads(g, comm, p->n, grads, NULL, grads));
  for (int i = 0; i < p->n; i++) BENCH_TRY(loom_graph_output(g, grads[i]));
  loom_compile_options_t o = bench_options(1, 1);
  run_t r = {.n_in = p->n, .n_out = p->n, .in = in, .out = out};
  BENCH_TRY(loom_compile(g, &o, &r.e));
  for (int i = 0; i < p->n; i++) BENCH_TRY(loom_executable_new_output(r.e, i, &out[i]));
  double loom = median_ms(&r);
  /* the engine thread is idle between collectives: MPI is this thread's */
  double mpi = mpi_ms(count);
  if (rank0()) {
    bench_json_t j;
    bench_json_begin(&j, "allreduce");
    bench_json_str(&j, "model", m->name);
    bench_json_num(&j, "bytes", (double)count * 4);
    bench_json_num(&j, "loom_ms", loom);
    bench_json_num(&j, "mpi_ms", mpi);
    bench_json_num(&j, "overhead", loom / mpi - 1);
    bench_json_end(&j);
  }
  for (int i = 0; i < p->n; i++) loom_tensor_destroy(in[i]), loom_tensor_destroy(out[i]);
  loom_executable_destroy(r.e);
  loom_graph_destroy(g);
  loom_graph_destroy(model);
  free(in), free(out), free(grads), free(p);
#else
  (void)m;
  fprintf(stderr, "bench dist: this build has no MPI\n");
  exit(1);
#endif
}

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
