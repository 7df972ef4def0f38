/* The training examples' shared layers, step, data and loop. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EX_PI 3.14159265358979323846

loom_status_t ex_model_init(ex_model_t *m, loom_dtype_t dtype, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->dtype = dtype;
  m->seed = seed;
  return loom_graph_create(&m->g);
}

void ex_model_free(ex_model_t *m) {
  loom_graph_destroy(m->g);
  m->g = NULL;
}

static loom_status_t fill(loom_tensor_t *t, uint64_t seed, ex_init_t init) {
  switch (init) {
  case EX_INIT_KAIMING: return loom_init_kaiming_uniform(t, seed, sqrt(5.0), LOOM_FAN_IN);
  case EX_INIT_ONES: return loom_init_ones(t);
  case EX_INIT_SMALL: return loom_init_normal(t, seed, 0.0, 0.02);
  default: return loom_init_zeros(t);
  }
}

static loom_status_t new_param(ex_model_t *m, const char *name, int rank,
                               const int64_t *shape, ex_init_t init,
                               loom_value_t *out) {
  loom_tensor_t *t = NULL;
  EX_TRY(loom_graph_param(m->g, name, m->dtype, rank, shape, NULL, out));
  EX_TRY(loom_graph_param_tensor(m->g, *out, &t));
  return fill(t, m->seed++, init);
}

loom_status_t ex_param(ex_model_t *m, const char *name, int rank,
                       const int64_t *shape, ex_init_t init, loom_value_t *out) {
  if (m->n_params == EX_MAX_PARAMS) return LOOM_ERR_INVALID;
  EX_TRY(new_param(m, name, rank, shape, init, out));
  m->params[m->n_params++] = *out;
  return LOOM_OK;
}

static void join(char *buf, size_t n, const char *a, const char *b) {
  snprintf(buf, n, "%s.%s", a, b);
}

loom_status_t ex_linear(ex_model_t *m, const char *name, loom_value_t x,
                        int64_t in, int64_t out, loom_value_t *y) {
  char n[128];
  int64_t ws[2] = {out, in};
  loom_value_t w, b, xw;
  join(n, sizeof n, name, "weight");
  EX_TRY(ex_param(m, n, 2, ws, EX_INIT_KAIMING, &w));
  join(n, sizeof n, name, "bias");
  EX_TRY(ex_param(m, n, 1, &out, EX_INIT_ZEROS, &b));
  EX_TRY(loom_matmul(m->g, x, w, 0, 1, &xw));
  return loom_add(m->g, xw, b, y);
}

loom_status_t ex_conv(ex_model_t *m, const char *name, loom_value_t x,
                      int64_t in, int64_t out, int64_t kernel, int64_t stride,
                      int64_t pad, int has_bias, loom_value_t *y) {
  char n[128];
  int64_t ws[4] = {out, in, kernel, kernel};
  loom_value_t w, b;
  join(n, sizeof n, name, "weight");
  EX_TRY(ex_param(m, n, 4, ws, EX_INIT_KAIMING, &w));
  b = w;
  if (has_bias) {
    join(n, sizeof n, name, "bias");
    EX_TRY(ex_param(m, n, 1, &out, EX_INIT_ZEROS, &b));
  }
  loom_conv_params_t p = {.stride = {stride, stride}, .pads = {pad, pad, pad, pad}};
  return loom_conv2d(m->g, x, w, has_bias, b, &p, y);
}

loom_status_t ex_batch_norm(ex_model_t *m, const char *name, loom_value_t x,
                            int64_t channels, loom_value_t *y) {
  char n[128];
  loom_value_t scale, bias, mean, var, new_mean, new_var;
  join(n, sizeof n, name, "weight");
  EX_TRY(ex_param(m, n, 1, &channels, EX_INIT_ONES, &scale));
  join(n, sizeof n, name, "bias");
  EX_TRY(ex_param(m, n, 1, &channels, EX_INIT_ZEROS, &bias));
  join(n, sizeof n, name, "running_mean");
  EX_TRY(new_param(m, n, 1, &channels, EX_INIT_ZEROS, &mean));
  join(n, sizeof n, name, "running_var");
  EX_TRY(new_param(m, n, 1, &channels, EX_INIT_ONES, &var));
  EX_TRY(loom_batch_norm(m->g, x, scale, bias, mean, var, 1e-5, 0.1, 1, y,
                         &new_mean, &new_var));
  EX_TRY(loom_assign(m->g, mean, new_mean));
  return loom_assign(m->g, var, new_var);
}

loom_status_t ex_layer_norm(ex_model_t *m, const char *name, loom_value_t x,
                            int64_t dim, loom_value_t *y) {
  char n[128];
  loom_value_t scale, bias;
  join(n, sizeof n, name, "weight");
  EX_TRY(ex_param(m, n, 1, &dim, EX_INIT_ONES, &scale));
  join(n, sizeof n, name, "bias");
  EX_TRY(ex_param(m, n, 1, &dim, EX_INIT_ZEROS, &bias));
  return loom_layer_norm(m->g, x, 1, scale, 1, bias, -1, 1e-5, y);
}

static loom_status_t i64_scalar(ex_model_t *m, int64_t v, loom_value_t *out) {
  loom_tensor_t *t;
  EX_TRY(loom_tensor_from_data(LOOM_I64, 0, NULL, &v, sizeof v, &t));
  loom_status_t s = loom_graph_constant(m->g, t, out);
  loom_tensor_destroy(t);
  return s;
}

loom_status_t ex_dropout(ex_model_t *m, loom_value_t x, double p, loom_value_t *y) {
  if (p <= 0) {
    *y = x;
    return LOOM_OK;
  }
  if (!m->has_offset) {
    EX_TRY(loom_graph_param(m->g, "dropout.offset", LOOM_I64, 0, NULL, NULL, &m->offset));
    m->has_offset = 1;
  }
  loom_value_t seed, mask;
  EX_TRY(i64_scalar(m, 1000 + m->n_dropouts++, &seed));
  return loom_dropout(m->g, x, seed, m->offset, p, y, &mask);
}

loom_status_t ex_input(ex_model_t *m, int rank, const int64_t *shape) {
  return loom_graph_input(m->g, "x", m->dtype, rank, shape, &m->x);
}

loom_status_t ex_scalar(ex_model_t *m, double value, loom_value_t *out) {
  return loom_full(m->g, 0, NULL, value, m->dtype, out);
}

loom_status_t ex_loss(ex_model_t *m, loom_value_t logits, int64_t batch,
                      loom_value_t *loss) {
  loom_value_t y;
  EX_TRY(loom_graph_input(m->g, "y", LOOM_I64, 1, &batch, &y));
  return loom_cross_entropy(m->g, logits, y, LOOM_NO_IGNORE_INDEX, 0.0,
                            LOOM_REDUCTION_MEAN, loss);
}

/* Each step draws new dropout masks: the generator's offset moves on by
 * one stream per step (Philox counters are per offset). */
static loom_status_t advance_offset(ex_model_t *m) {
  if (!m->has_offset) return LOOM_OK;
  loom_value_t one, next;
  EX_TRY(i64_scalar(m, 1, &one));
  EX_TRY(loom_add(m->g, m->offset, one, &next));
  return loom_assign(m->g, m->offset, next);
}

/* The gradients averaged across the ranks, clipped, and AdamW: its
 * state whole on every rank, or split across them. */
static loom_status_t data_parallel_update(ex_model_t *m, const loom_value_t *grads,
                                          loom_value_t lr, double wd) {
  loom_optimizer_t adamw;
  loom_data_parallel_options_t o;
  EX_TRY(loom_optimizer_init(&adamw, LOOM_OPTIMIZER_ADAMW));
  adamw.weight_decay = wd;
  EX_TRY(loom_data_parallel_options_init(&o));
  o.shard_optimizer_state = m->shard_optimizer_state;
  o.max_grad_norm = 1.0;
  return loom_data_parallel_step(m->g, m->comm, &adamw, m->n_params, m->params, grads, lr, &o);
}

loom_status_t ex_train_step(ex_model_t *m, loom_value_t logits, int64_t batch,
                            double wd) {
  loom_value_t loss, lr, grads[EX_MAX_PARAMS], clipped[EX_MAX_PARAMS];
  EX_TRY(ex_loss(m, logits, batch, &loss));
  EX_TRY(loom_graph_input(m->g, "lr", LOOM_F32, 0, NULL, &lr));
  EX_TRY(loom_graph_output(m->g, loss));
  EX_TRY(loom_graph_output(m->g, logits));
  EX_TRY(loom_grad(m->g, loss, m->n_params, m->params, grads));
  if (m->comm) {
    EX_TRY(data_parallel_update(m, grads, lr, wd));
  } else {
    EX_TRY(loom_clip_grad_norm(m->g, m->n_params, grads, 1.0, clipped, NULL));
    EX_TRY(loom_adamw(m->g, m->n_params, m->params, clipped, lr, 0.9, 0.999, 1e-8, wd));
  }
  return advance_offset(m);
}

/* ---- Data ------------------------------------------------------------------ */

static uint64_t next_u64(ex_rng_t *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double ex_uniform(ex_rng_t *r) { return (double)(next_u64(r) >> 11) / 9007199254740992.0; }

double ex_normal(ex_rng_t *r) {
  double u = ex_uniform(r), v = ex_uniform(r);
  return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * EX_PI * v);
}

void ex_data_blobs(ex_rng_t *r, int64_t batch, int64_t dim, int64_t classes,
                   double *x, int64_t *y) {
  for (int64_t i = 0; i < batch; i++) {
    int64_t k = (int64_t)(ex_uniform(r) * (double)classes);
    ex_rng_t centers = {1000003u * (uint64_t)(k + 1)};
    y[i] = k;
    for (int64_t d = 0; d < dim; d++)
      x[i * dim + d] = 0.7 * ex_normal(&centers) + ex_normal(r);
  }
}

void ex_data_stripes(ex_rng_t *r, int64_t batch, int64_t channels,
                     int64_t size, int64_t classes, double *x, int64_t *y) {
  for (int64_t i = 0; i < batch; i++) {
    int64_t k = (int64_t)(ex_uniform(r) * (double)classes);
    double angle = EX_PI * (double)k / (double)classes;
    double freq = 0.6 + 0.6 * ex_uniform(r), phase = 2 * EX_PI * ex_uniform(r);
    double cx = cos(angle) * freq, cy = sin(angle) * freq;
    y[i] = k;
    for (int64_t c = 0; c < channels; c++) {
      double contrast = 0.5 + ex_uniform(r);
      double *img = x + (i * channels + c) * size * size;
      for (int64_t h = 0; h < size; h++)
        for (int64_t w = 0; w < size; w++)
          img[h * size + w] = contrast * sin(cx * (double)w + cy * (double)h + phase) +
                              0.5 * ex_normal(r);
    }
  }
}

loom_status_t ex_write(loom_tensor_t *t, const double *v) {
  int64_t n = loom_tensor_numel(t);
  if (loom_tensor_dtype(t) == LOOM_F64) return loom_tensor_write(t, v, (size_t)n * 8);
  float *f = malloc((size_t)n * sizeof *f);
  if (!f) return LOOM_ERR_NOMEM;
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  loom_status_t s = loom_tensor_write(t, f, (size_t)n * sizeof *f);
  free(f);
  return s;
}

double ex_accuracy(const loom_tensor_t *logits, const int64_t *y) {
  int64_t batch = loom_tensor_dim(logits, 0), classes = loom_tensor_dim(logits, 1);
  int64_t right = 0;
  for (int64_t i = 0; i < batch; i++) {
    int64_t best = 0;
    double best_v = -INFINITY, v;
    for (int64_t c = 0; c < classes; c++) {
      loom_tensor_get_f64(logits, i * classes + c, &v);
      if (v > best_v) best_v = v, best = c;
    }
    right += best == y[i];
  }
  return (double)right / (double)batch;
}

/* ---- The command line and the loop ------------------------------------------ */

int ex_parse_args(int argc, char **argv, ex_args_t *a) {
  int data_parallel = 0;
  for (int i = 1; i < argc; i += 2) { /* --flag value pairs */
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--data-parallel")) data_parallel = 1, i--;
    else if (!strcmp(argv[i], "--zero")) data_parallel = a->zero = 1, i--;
    else if (v && !strcmp(argv[i], "--steps")) a->steps = atoi(v);
    else if (v && !strcmp(argv[i], "--threads")) a->threads = atoi(v);
    else if (v && !strcmp(argv[i], "--every")) a->every = atoi(v);
    else if (v && !strcmp(argv[i], "--lr")) a->lr = atof(v);
    else if (v && !strcmp(argv[i], "--checkpoint")) a->checkpoint = v;
    else if (v && !strcmp(argv[i], "--resume")) a->resume = v;
    else {
      fprintf(stderr, "usage: %s [--steps N] [--threads T] [--every K] [--lr X] "
              "[--data-parallel] [--zero] [--checkpoint PATH] [--resume PATH]\n", argv[0]);
      return 1;
    }
  }
  if (a->steps < 1 || a->threads < 0 || a->every < 1 || !(a->lr > 0)) {
    fprintf(stderr, "%s: steps and every must be >= 1, threads >= 0, lr > 0\n", argv[0]);
    return 1;
  }
  if (data_parallel && loom_comm_world(&a->comm) != LOOM_OK) {
    fprintf(stderr, "%s: --data-parallel: %s\n", argv[0], loom_last_error());
    return 1;
  }
  return 0;
}


static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float schedule(const ex_args_t *a, int step) {
  int warm = a->steps / 10 + 1;
  if (step < warm) return (float)(a->lr * (step + 1) / warm);
  double t = (double)(step - warm) / (double)(a->steps - warm + 1);
  return (float)(a->lr * (0.55 + 0.45 * cos(EX_PI * t)));
}

typedef struct loop {
  loom_comm_t *comm;
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *x, *y, *lr, *loss, *logits;
  double *xv;
  int64_t *yv;
} loop_t;

static int rank_of(const loop_t *l) { return l->comm ? loom_comm_rank(l->comm) : 0; }

static void loop_free(loop_t *l) {
  loom_executable_destroy(l->e);
  loom_tensor_destroy(l->x);
  loom_tensor_destroy(l->y);
  loom_tensor_destroy(l->lr);
  loom_tensor_destroy(l->loss);
  loom_tensor_destroy(l->logits);
  free(l->xv);
  free(l->yv);
}

static loom_status_t loop_init(loop_t *l, ex_model_t *m, const ex_args_t *a,
                               int64_t batch) {
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = a->threads;
  l->comm = m->comm;
  l->g = m->g;
  if (m->comm) EX_TRY(loom_comm_broadcast_params(m->comm, m->g, 0));
  if (a->resume && m->comm) EX_TRY(loom_comm_checkpoint_load(m->comm, m->g, a->resume));
  else if (a->resume) EX_TRY(loom_checkpoint_load(m->g, a->resume));
  EX_TRY(loom_compile(m->g, &o, &l->e));
  EX_TRY(loom_executable_new_output(l->e, 0, &l->loss));
  EX_TRY(loom_executable_new_output(l->e, 1, &l->logits));
  loom_dtype_t dt;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
  EX_TRY(loom_value_type(m->g, m->x, &dt, &rank, dims));
  EX_TRY(loom_tensor_create(dt, rank, dims, &l->x));
  EX_TRY(loom_tensor_create(LOOM_I64, 1, &batch, &l->y));
  EX_TRY(loom_tensor_create(LOOM_F32, 0, NULL, &l->lr));
  l->xv = malloc((size_t)loom_tensor_numel(l->x) * sizeof *l->xv);
  l->yv = malloc((size_t)batch * sizeof *l->yv);
  return l->xv && l->yv ? LOOM_OK : LOOM_ERR_NOMEM;
}

/* Every rank calls it; rank 0 writes the whole state. */
static loom_status_t save(const loop_t *l, const char *path) {
  return l->comm ? loom_comm_checkpoint_save(l->comm, l->g, path)
                 : loom_checkpoint_save(l->g, path);
}

static loom_status_t loop_run(loop_t *l, const ex_args_t *a,
                              ex_data_fn data, void *ctx) {
  ex_rng_t rng = {42 + 7919 * (uint64_t)rank_of(l)}; /* each rank its own batches */
  double t0 = now_s(), t_last = t0, loss_sum = 0, acc_sum = 0;
  for (int k = 0; k < a->steps; k++) {
    data(&rng, ctx, l->xv, l->yv);
    EX_TRY(ex_write(l->x, l->xv));
    EX_TRY(loom_tensor_write(l->y, l->yv, (size_t)loom_tensor_numel(l->y) * 8));
    float lr = schedule(a, k);
    EX_TRY(loom_tensor_write(l->lr, &lr, sizeof lr));
    loom_tensor_t *in[3] = {l->x, l->y, l->lr}, *out[2] = {l->loss, l->logits};
    EX_TRY(loom_executable_run(l->e, 3, in, 2, out));
    double loss;
    loom_tensor_get_f64(l->loss, 0, &loss);
    loss_sum += loss;
    acc_sum += ex_accuracy(l->logits, l->yv); /* on a batch not yet trained on */
    if (rank_of(l) == 0 && ((k + 1) % a->every == 0 || k + 1 == a->steps)) {
      int n = (k % a->every) + 1;
      double t = now_s();
      printf("step %5d  loss %.4f  accuracy %5.1f%%  lr %.2e  %.1f steps/s\n", k + 1,
             loss_sum / n, 100 * acc_sum / n, lr, n / (t - t_last));
      fflush(stdout);
      t_last = t, loss_sum = 0, acc_sum = 0;
    }
    if (a->checkpoint && ((k + 1) % a->every == 0 || k + 1 == a->steps))
      EX_TRY(save(l, a->checkpoint));
  }
  double total = now_s() - t0;
  int ranks = l->comm ? loom_comm_size(l->comm) : 1;
  if (rank_of(l) == 0)
    printf("%d steps in %.2f s: %.1f steps/s, %.0f items/s over %d rank%s\n", a->steps, total,
           a->steps / total, a->steps * (double)loom_tensor_numel(l->y) * ranks / total, ranks,
           ranks > 1 ? "s" : "");
  return LOOM_OK;
}

int ex_train_main(ex_model_t *m, const ex_args_t *a, int64_t batch,
                  ex_data_fn data, void *ctx) {
  loop_t l = {0};
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  loom_status_t s = loop_init(&l, m, a, batch);
  if (s == LOOM_OK) s = loom_executable_info(l.e, &info);
  if (s == LOOM_OK && rank_of(&l) == 0) {
    printf("%d trainable tensors; compiled in %.0f ms: %d steps (%d generated, %d reference), "
           "arena %.1f MiB, %d threads\n",
           m->n_params, info.compile_ms, info.n_groups, info.n_generated, info.n_reference,
           (double)info.arena_bytes / (1 << 20), info.threads);
  }
  if (s == LOOM_OK) s = loop_run(&l, a, data, ctx);
  if (s != LOOM_OK)
    fprintf(stderr, "error: rank %d: %s: %s\n", rank_of(&l), loom_status_name(s), loom_last_error());
  loop_free(&l);
  loom_comm_destroy(a->comm);
  return s != LOOM_OK;
}
