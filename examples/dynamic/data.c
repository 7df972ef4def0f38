/* Data streams shared with bench/peers/torch_dynamic.py. */
#include <math.h>
#include <stdarg.h>

#include "dynamic.h"
#include "models.h"

int64_t dyn_randint(const char *name, int64_t i, int64_t lo, int64_t hi) {
  double u = model_init_value(name, i, 1.0);
  int64_t k = (int64_t)floor((u + 1.0) * 0.5 * (double)(hi - lo + 1));
  return lo + (k < hi - lo ? k : hi - lo);
}

loom_status_t dyn_values(const char *name, double bound, int rank,
                         const int64_t *shape, loom_tensor_t **out) {
  loom_status_t s = loom_tensor_create(LOOM_F32, rank, shape, out);
  if (s != LOOM_OK) return s;
  float *p = loom_tensor_data(*out);
  int64_t n = loom_tensor_numel(*out);
  for (int64_t i = 0; i < n; i++) p[i] = model_init_value(name, i, bound);
  return LOOM_OK;
}

const char *dyn_name(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return buf;
}

loom_status_t dyn_copy_params(const dyn_config_t *c, int n,
                              loom_tensor_t *const *params, dyn_result_t *out) {
  out->n_params = 0;
  if (!c->params) return LOOM_OK;
  for (int i = 0; i < n; i++) {
    int64_t k = loom_tensor_numel(params[i]);
    if (out->n_params + k > c->params_cap)
      return loom_set_error(LOOM_ERR_INVALID, "dyn_copy_params: %lld floats do not fit "
                            "in params_cap %lld", (long long)(out->n_params + k),
                            (long long)c->params_cap);
    DYN_TRY(loom_tensor_read(params[i], c->params + out->n_params,
                             (size_t)k * sizeof(float)));
    out->n_params += k;
  }
  return LOOM_OK;
}

void dyn_print_stats(FILE *f, const char *what, const dyn_result_t *r) {
  const loom_trace_stats_t *s = &r->stats;
  fprintf(f,
          "%s: %.1f items/s; loss %.4f -> %.4f; segments %lld, hits %lld "
          "(replayed %lld), misses %lld, compiles %lld (%.0f ms), interpreted %lld, "
          "breaks %lld, weight-gradient parts deferred %lld (in %lld products)\n",
          what, r->items_per_s, r->first_loss, r->last_loss, (long long)s->segments,
          (long long)s->hits, (long long)s->replayed, (long long)s->misses,
          (long long)s->cache.compiles, s->cache.compile_ms, (long long)s->interpreted,
          (long long)s->breaks, (long long)s->deferred_grads,
          (long long)s->deferred_products);
}
