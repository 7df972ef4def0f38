/* The optimizer updates of train/optim.c computed directly, one pass over
 * each f32 parameter, for a step that runs before its graph is compiled
 * (a tiered trace's first steps): interpreted, the graph's dozen
 * elementwise nodes per parameter cost a dispatch per node and per block,
 * ten times the pass itself on a model of many small parameters. Each
 * element takes the graph's operations in the graph's order, in f32, with
 * its constants rounded to f32 as the graph's are. */
#include <math.h>
#include <stdbool.h>

#include "core/isa.h"
#include "core/pool.h"
#include "core/status.h"
#include "train/optim.h"

enum { GRAIN = 1 << 14 }; /* elements per chunk of the pool's loop */

typedef struct {
  const loom_optimizer_t *h;
  float *p, *a, *b; /* a, b: Adam's m and v, or SGD's momentum buffer (a) */
  const float *g;
  float lr, inv1, inv2; /* Adam's bias corrections' reciprocals */
} pass_t;

/* Each pass over [begin, end) is written once and instantiated per ISA
 * below (the base build targets x86-64's SSE2). Adam's decay is its L2
 * term, folded into the gradient (0 for AdamW, whose keep shrinks p
 * instead). */
static inline __attribute__((always_inline)) void adam_pass(const pass_t *c, int64_t begin,
                                                            int64_t end) {
  const loom_optimizer_t *h = c->h;
  bool w = h->kind == LOOM_OPTIMIZER_ADAMW;
  const float wd = (float)h->weight_decay, b1 = (float)h->beta1, c1 = (float)(1.0 - h->beta1),
              b2 = (float)h->beta2, c2 = (float)(1.0 - h->beta2), eps = (float)h->eps;
  const float lr = c->lr, inv1 = c->inv1, inv2 = c->inv2;
  const float keep = w ? 1.0f - lr * wd : 1.0f, decay = w ? 0.0f : wd;
  float *restrict p = c->p, *restrict m = c->a, *restrict v = c->b;
  const float *restrict g = c->g;
  for (int64_t i = begin; i < end; i++) {
    float d = decay != 0 ? g[i] * 1.0f + p[i] * decay : g[i];
    float m2 = m[i] * b1 + d * c1, v2 = v[i] * b2 + d * d * c2;
    m[i] = m2, v[i] = v2;
    p[i] = p[i] * keep - m2 * inv1 / (sqrtf(v2) * inv2 + eps) * lr;
  }
}

static inline __attribute__((always_inline)) void sgd_pass(const pass_t *c, int64_t begin,
                                                           int64_t end) {
  const loom_optimizer_t *h = c->h;
  const float wd = (float)h->weight_decay, mom = (float)h->momentum, lr = c->lr;
  float *restrict p = c->p, *restrict buf = c->a;
  const float *restrict g = c->g;
  for (int64_t i = begin; i < end; i++) {
    float d = wd != 0 ? g[i] * 1.0f + p[i] * wd : g[i];
    float dir = d;
    if (mom != 0) {
      float next = buf[i] * mom + d * 1.0f;
      buf[i] = next;
      dir = h->nesterov ? d * 1.0f + next * mom : next;
    }
    p[i] = p[i] - dir * lr;
  }
}

#define PER_ISA(pass)                                                                     \
  __attribute__((target("avx512f,fma"))) static void pass##_avx512(void *c, int64_t b,    \
                                                                   int64_t e) {           \
    pass(c, b, e);                                                                        \
  }                                                                                       \
  __attribute__((target("avx2,fma"))) static void pass##_avx2(void *c, int64_t b,         \
                                                              int64_t e) {                \
    pass(c, b, e);                                                                        \
  }                                                                                       \
  static void pass##_base(void *c, int64_t b, int64_t e) { pass(c, b, e); }
PER_ISA(adam_pass)
PER_ISA(sgd_pass)

/* The widest instance of a pass that the CPU and LOOM_CPU_ISA allow. */
static core_pool_fn widest(core_pool_fn avx512, core_pool_fn avx2, core_pool_fn base) {
  if (core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f")) return avx512;
  if (core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2")) return avx2;
  return base;
}

/* 1 - beta^t as the graph computes it: -expm1(f32(t) * f32(log beta)). */
static float correction(double beta, int64_t t) {
  if (beta == 0) return 1.0f;
  return -expm1f((float)t * (float)log(beta));
}

loom_status_t train_optimizer_eager(const loom_optimizer_t *h, double lr, int64_t numel,
                                    float *p, const float *grad, float *state_a, float *state_b,
                                    int64_t *step, struct core_pool *pool) {
  pass_t c = {.h = h, .p = p, .a = state_a, .b = state_b, .g = grad, .lr = (float)lr};
  bool adam = h->kind != LOOM_OPTIMIZER_SGD;
  if (adam && (!state_a || !state_b || !step))
    return loom_fail(LOOM_ERR_INVALID, "optimizer step: Adam's moments or step counter missing");
  if (!adam && h->momentum != 0 && !state_a)
    return loom_fail(LOOM_ERR_INVALID, "optimizer step: SGD's momentum buffer missing");
  if (adam) {
    int64_t t = ++*step;
    c.inv1 = 1.0f / correction(h->beta1, t);
    c.inv2 = 1.0f / sqrtf(correction(h->beta2, t));
  }
  core_pool_fn fn = adam ? widest(adam_pass_avx512, adam_pass_avx2, adam_pass_base)
                        : widest(sgd_pass_avx512, sgd_pass_avx2, sgd_pass_base);
  if (pool && numel >= 2 * GRAIN) core_pool_for(pool, numel, GRAIN, fn, &c);
  else fn(&c, 0, numel);
  return LOOM_OK;
}
