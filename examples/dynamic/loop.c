/* The training loop every dynamic workload shares: a trace made from the
 * config, then per step the workload's batch (untimed, as the PyTorch
 * twin draws its batches before timing), its forward and loss, and the
 * loss read, backward, AdamW and step end that are the same for all. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dynamic.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

loom_dim_policy_t dyn_policy(loom_dim_policy_kind_t kind, const char *name) {
  /* auto: unnamed, as the trace treats a dim entered with no policy */
  loom_dim_policy_t p = {.kind = kind, .name = kind == LOOM_DIM_AUTO ? NULL : name};
  return p;
}

loom_status_t dyn_trace_create(const dyn_config_t *c,
                               const loom_dim_policy_t *data_dims,
                               loom_trace_t **out) {
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.compile = c->compile;
  if (c->wait_compiles) o.tiered = 0;
  o.num_threads = c->threads;
  if (data_dims) o.data_dims = *data_dims;
  if (c->policy == LOOM_DIM_EXACT) o.input_dims.kind = LOOM_DIM_EXACT; /* all of them */
  /* A site's forward and backward count against one limit: room for both
   * at each power-of-two bucket a workload's sizes reach (up to 2^11). */
  if (c->policy == LOOM_DIM_BUCKET) o.recompile_limit = 24;
  DYN_TRY(loom_trace_create(&o, out));
  loom_status_t s = c->comm ? loom_trace_data_parallel(*out, c->comm) : LOOM_OK;
  if (s != LOOM_OK) {
    loom_trace_destroy(*out);
    *out = NULL;
  }
  return s;
}

/* One step: the forward, then what every workload does with its loss. */
static loom_status_t train_step(loom_trace_t *t, const dyn_model_t *m, int k,
                                double *loss) {
  loom_value_t l;
  DYN_TRY(m->forward(m->self, t, k, &l));
  DYN_TRY(loom_trace_scalar(t, l, loss));
  DYN_TRY(loom_trace_backward(t, l));
  DYN_TRY(loom_trace_adamw(t, DYN_LR, DYN_BETA1, DYN_BETA2, DYN_EPS, DYN_WD));
  return loom_trace_step_end(t);
}

loom_status_t dyn_train(const dyn_config_t *c, loom_trace_t *t,
                        const dyn_model_t *m, int warmup, int steps,
                        dyn_result_t *out) {
  DYN_CHECK_ARG(c);
  DYN_CHECK_ARG(t);
  DYN_CHECK_ARG(m);
  DYN_CHECK_ARG(out);
  if (warmup < 0 || steps < 0 || warmup + steps < 1)
    return loom_set_error(LOOM_ERR_INVALID, "dyn_train: %d warm-up and %d timed "
                          "steps: need at least one step", warmup, steps);
  *out = (dyn_result_t){.stats = LOOM_TRACE_STATS_INIT};
  double elapsed = 0, items = 0;
  int rank = c->comm ? loom_comm_rank(c->comm) : 0, ranks = c->comm ? loom_comm_size(c->comm) : 1;
  for (int k = 0; k < warmup + steps; k++) {
    int64_t n = 0;
    int batch = k * ranks + rank; /* each rank its own batches */
    DYN_TRY(m->batch(m->self, batch, &n));
    double loss = 0, t0 = now_s();
    loom_status_t s = train_step(t, m, batch, &loss);
    double dt = now_s() - t0;
    if (s != LOOM_OK) { /* end the step (the trace stays usable), keep the error */
      char msg[512];
      snprintf(msg, sizeof msg, "%s", loom_last_error());
      loom_trace_step_end(t);
      return loom_set_error(s, "step %d: %s", k, msg);
    }
    if (c->losses) c->losses[k] = loss;
    if (k == 0) out->first_loss = loss;
    out->last_loss = loss;
    out->wall_s += dt;
    if (k >= warmup) elapsed += dt, items += (double)n;
    if (c->every > 0 && c->log && rank == 0 && (k % c->every == 0 || k == warmup + steps - 1))
      fprintf(c->log, "step %d loss %.6f\n", k, loss);
  }
  out->seconds = elapsed;
  out->items_per_s = elapsed > 0 ? items / elapsed : 0;
  return loom_trace_get_stats(t, &out->stats);
}

static int parse_policy(const char *s, loom_dim_policy_kind_t *out) {
  static const char *const names[] = {"exact", "bucket", "symbolic", "auto"};
  static const loom_dim_policy_kind_t kinds[] = {
      LOOM_DIM_EXACT, LOOM_DIM_BUCKET, LOOM_DIM_SYMBOLIC, LOOM_DIM_AUTO};
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) return *out = kinds[i], 1;
  return 0;
}

loom_status_t dyn_parse_args(int argc, char **argv, int with_form,
                             dyn_config_t *c, int *steps) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--interpret")) {
      c->compile = 0;
      continue;
    }
    if (!strcmp(a, "--data-parallel")) {
      if (!c->comm) DYN_TRY(loom_comm_world(&c->comm));
      continue;
    }
    if (!v) return loom_set_error(LOOM_ERR_INVALID, "option '%s' needs a value", a);
    i++;
    if (!strcmp(a, "--steps")) {
      *steps = atoi(v);
    } else if (!strcmp(a, "--threads")) {
      c->threads = atoi(v);
    } else if (!strcmp(a, "--every")) {
      c->every = atoi(v);
    } else if (!strcmp(a, "--policy")) {
      if (!parse_policy(v, &c->policy))
        return loom_set_error(LOOM_ERR_INVALID, "unknown policy '%s' (exact, "
                              "bucket, symbolic or auto)", v);
    } else if (with_form && !strcmp(a, "--form")) {
      if (strcmp(v, "node") && strcmp(v, "level"))
        return loom_set_error(LOOM_ERR_INVALID, "unknown form '%s' (node or level)", v);
      c->form = !strcmp(v, "level");
    } else {
      return loom_set_error(LOOM_ERR_INVALID, "unknown option '%s'", a);
    }
  }
  if (*steps < 1 || c->threads < 0 || c->every < 0)
    return loom_set_error(LOOM_ERR_INVALID, "--steps must be at least 1, --threads "
                          "and --every at least 0");
  return LOOM_OK;
}
