/* conv2d's entry points, forward and input gradient: the layer's
 * algorithm chosen, then run.
 *
 * A layer's candidates are the implicit GEMM, which takes every layer,
 * and those of the direct, polyphase direct and depthwise kernels, the batched GEMM
 * and Winograd's F(2x2) and F(4x4) that take it under the mode (Winograd
 * only within its error bound unless the mode is FAST). Which is fastest depends on the ISA,
 * the caches and the thread count, which fixed rules written on one
 * machine get wrong on another; so the first call with a new geometry
 * (or the packing of a frozen executable's weights) times each candidate
 * on this machine, on the pool the layer runs on, and the fastest is kept
 * for the rest of the process. The timings run on buffers of their own:
 * the caller's output is written once, by the chosen algorithm.
 * LOOM_CONV_CHOICE=rules takes the fixed rules instead, for the same bits
 * on every run (a choice by timings can differ between runs on a noisy
 * machine, and algorithms round differently). */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm_impl.h"
#include "core/clock.h"
#include "core/alloc.h"
#include "core/env.h"
#include "core/log.h"

const char *kern_conv_algo_name(kern_conv_algo_t algo, kern_conv_pass_t pass) {
  switch (algo) {
    case KERN_CONV_IMPLICIT: return pass == KERN_CONV_FORWARD ? "implicit GEMM" : "GEMM + col2im";
    case KERN_CONV_BATCHED: return "batched GEMM";
    case KERN_CONV_DIRECT: return "direct";
    case KERN_CONV_POLYPHASE: return "polyphase direct";
    case KERN_CONV_WINOGRAD2: return "Winograd F(2x2)";
    case KERN_CONV_WINOGRAD4: return "Winograd F(4x4)";
    case KERN_CONV_DEPTHWISE: return "depthwise direct";
    default: return "?";
  }
}

/* ---- Candidates and rules ------------------------------------------------ */

static kern_conv_algo_t winograd_algo(int m) {
  return m == 4 ? KERN_CONV_WINOGRAD4 : KERN_CONV_WINOGRAD2;
}

/* The Winograd tiles mode allows for d: the rule's (F(2x2) too where the
 * rule's is F(4x4)); both under FAST. */
static int winograd_tiles(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                          kern_conv_pass_t pass, int tiles[2]) {
  int m = pass == KERN_CONV_FORWARD ? kern_conv2d_winograd_tile(d, mode)
                                    : kern_conv2d_input_grad_winograd_tile(d, mode);
  if (!m) return 0;
  tiles[0] = 2;
  tiles[1] = 4;
  return m == 4 || mode == KERN_CONV_FAST ? 2 : 1;
}

int kern_conv2d_candidates(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                           kern_conv_pass_t pass, kern_conv_algo_t *out) {
  int n = 0, tiles[2];
  out[n++] = KERN_CONV_IMPLICIT;
  if (pass == KERN_CONV_FORWARD && kern_conv2d_direct_suits(d)) out[n++] = KERN_CONV_DIRECT;
  if (pass == KERN_CONV_FORWARD && kern_conv2d_polyphase_suits(d))
    out[n++] = KERN_CONV_POLYPHASE;
  if (pass == KERN_CONV_FORWARD && kern_conv2d_batched_suits(d)) out[n++] = KERN_CONV_BATCHED;
  if (pass == KERN_CONV_FORWARD && kern_conv2d_depthwise_suits(d)) out[n++] = KERN_CONV_DEPTHWISE;
  for (int i = 0, k = winograd_tiles(d, mode, pass, tiles); i < k; i++)
    out[n++] = winograd_algo(tiles[i]);
  return n;
}

kern_conv_algo_t kern_conv2d_algo_by_rules(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                           kern_conv_pass_t pass, int packed) {
  if (pass == KERN_CONV_INPUT_GRAD) {
    int m = kern_conv2d_input_grad_winograd_tile(d, mode);
    return m && kern_conv2d_input_grad_winograd_takes(d, m) ? winograd_algo(m)
                                                             : KERN_CONV_IMPLICIT;
  }
  if (kern_conv2d_direct_suits(d)) return KERN_CONV_DIRECT;
  if (kern_conv2d_depthwise_suits(d)) return KERN_CONV_DEPTHWISE;
  /* A strided stem's GEMM spends a quarter of its time gathering B. */
  if (kern_conv2d_polyphase_suits(d) && (d->stride[0] > 1 || d->stride[1] > 1))
    return KERN_CONV_POLYPHASE;
  int m = kern_conv2d_winograd_tile(d, mode);
  /* Weights about to be packed are packed for the tile the rule picks. */
  if (m && (packed || kern_conv2d_winograd_takes(d, m))) return winograd_algo(m);
  return kern_conv2d_batched_suits(d) ? KERN_CONV_BATCHED : KERN_CONV_IMPLICIT;
}

/* ---- Choices made ---------------------------------------------------------
 * A table of the geometries timed, open addressing by hash: every conv2d
 * call looks its layer up. */

typedef struct choice_key {
  int64_t geometry[18]; /* n c h w o kh kw ho wo, stride, pads, dilation, groups */
  int32_t pass, mode, packed, threads;
  const char *isa, *direct_isa, *winograd_isa; /* the kernels' instances: tests switch them */
} choice_key_t;

typedef struct choice {
  choice_key_t key;
  int used;
  kern_conv_algo_t algo;
} choice_t;

static pthread_mutex_t choices_lock = PTHREAD_MUTEX_INITIALIZER;
static choice_t *choices;
static size_t n_choices, cap_choices; /* cap: 0 or a power of two */

static choice_key_t key_of(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                           kern_conv_pass_t pass, int packed, core_pool_t *pool) {
  choice_key_t k;
  memset(&k, 0, sizeof k); /* padding included: keys compare by bytes */
  int64_t g[18] = {d->n,         d->c,          d->h,           d->w,       d->o,
                   d->kh,        d->kw,         d->ho,          d->wo,      d->stride[0],
                   d->stride[1], d->pads[0],    d->pads[1],     d->pads[2], d->pads[3],
                   d->dilation[0], d->dilation[1], d->groups};
  memcpy(k.geometry, g, sizeof g);
  k.pass = pass;
  k.mode = mode;
  k.packed = packed != 0;
  k.threads = core_pool_threads(pool);
  k.isa = kern_gemm_isa();
  k.direct_isa = kern_conv_direct_isa();
  k.winograd_isa = kern_winograd_isa();
  return k;
}

static size_t hash_key(const choice_key_t *k) {
  const unsigned char *b = (const unsigned char *)k;
  uint64_t h = 1469598103934665603u;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211u;
  return (size_t)h;
}

/* The slot of k (used or the empty one it would take); under the lock,
 * with cap_choices > 0. */
static choice_t *slot_of(const choice_key_t *k) {
  size_t i = hash_key(k) & (cap_choices - 1);
  while (choices[i].used && memcmp(&choices[i].key, k, sizeof *k) != 0)
    i = (i + 1) & (cap_choices - 1);
  return &choices[i];
}

static int lookup(const choice_key_t *k, kern_conv_algo_t *algo) {
  pthread_mutex_lock(&choices_lock);
  choice_t *c = cap_choices ? slot_of(k) : NULL;
  int found = c && c->used;
  if (found) *algo = c->algo;
  pthread_mutex_unlock(&choices_lock);
  return found;
}

/* Keeps k's choice (the first kept wins: two threads may time one layer
 * at once). Without memory for the table the choice is made again next
 * time. */
static kern_conv_algo_t remember(const choice_key_t *k, kern_conv_algo_t algo) {
  pthread_mutex_lock(&choices_lock);
  if (2 * (n_choices + 1) > cap_choices) {
    size_t cap = cap_choices ? 2 * cap_choices : 64;
    choice_t *grown = core_calloc(cap, sizeof *grown), *old = choices;
    size_t old_cap = cap_choices;
    if (grown) {
      choices = grown;
      cap_choices = cap;
      for (size_t i = 0; i < old_cap; i++)
        if (old[i].used) *slot_of(&old[i].key) = old[i];
      core_free(old);
    }
  }
  if (2 * (n_choices + 1) <= cap_choices) {
    choice_t *c = slot_of(k);
    if (c->used) {
      algo = c->algo;
    } else {
      *c = (choice_t){*k, 1, algo};
      n_choices++;
    }
  }
  pthread_mutex_unlock(&choices_lock);
  return algo;
}

/* ---- Timings ---------------------------------------------------------------- */

/* The buffers a timing runs on: the caller's input and weights where it
 * has them, the rest of its own, and per candidate its packed weights. */
typedef struct trial {
  loom_abi_conv2d_t d;
  kern_conv_pass_t pass;
  float *own[3];
  void *packed[KERN_CONV_N_ALGOS];
} trial_t;

static float *filled(int64_t n, float **slot) {
  float *p = core_aligned_alloc((size_t)n * sizeof(float) + 64);
  /* Values in [-1, 1): no zeros, no denormals, for timing only. */
  uint32_t s = 12345;
  for (int64_t i = 0; p && i < n; i++, s = s * 1664525u + 1013904223u)
    p[i] = (float)(int32_t)s * (1.0f / 2147483648.0f);
  return *slot = p;
}

static void trial_free(trial_t *t) {
  for (int i = 0; i < 3; i++) core_free(t->own[i]);
  for (int i = 0; i < KERN_CONV_N_ALGOS; i++) core_free(t->packed[i]);
}

/* 0: out of memory. */
static int trial_init(trial_t *t, const loom_abi_conv2d_t *d, kern_conv_pass_t pass) {
  memset(t, 0, sizeof *t);
  t->d = *d;
  t->pass = pass;
  t->d.bias = NULL;
  t->d.epilogue = NULL;
  t->d.epilogue_ctx = NULL;
  t->d.weight_packed = NULL;
  int64_t in = d->n * d->c * d->h * d->w, out = d->n * d->o * d->ho * d->wo;
  int64_t weights = d->o * (d->c / d->groups) * d->kh * d->kw;
  /* The input gradient reads dY (y) and writes dX (x). */
  int64_t read = pass == KERN_CONV_FORWARD ? in : out, written = pass == KERN_CONV_FORWARD ? out : in;
  const float *src = pass == KERN_CONV_FORWARD ? d->x : d->y;
  if (!src) src = filled(read, &t->own[0]);
  const float *w = d->weight ? d->weight : filled(weights, &t->own[1]);
  float *dst = filled(written, &t->own[2]);
  if (!src || !w || !dst) return 0;
  t->d.weight = w;
  t->d.x = pass == KERN_CONV_FORWARD ? src : dst;
  t->d.y = pass == KERN_CONV_FORWARD ? dst : (float *)src;
  return 1;
}

/* One run of algo in ns; -1 when it did not run. */
static int64_t time_once(trial_t *t, kern_conv_algo_t algo, core_pool_t *pool) {
  t->d.weight_packed = t->packed[algo];
  int64_t t0 = core_now_ns();
  int done = t->pass == KERN_CONV_FORWARD ? kern_conv2d_run(&t->d, algo, pool)
                                          : kern_conv2d_input_grad_run(&t->d, algo, pool);
  return done ? core_now_ns() - t0 : -1;
}

/* The direct kernels read the weights as they are. */
static int ignores_packing(kern_conv_algo_t algo) {
  return algo == KERN_CONV_DIRECT || algo == KERN_CONV_POLYPHASE || algo == KERN_CONV_DEPTHWISE;
}

/* Rounds of timings after the first; one when a round takes this long. */
enum { ROUNDS = 3 };
static const int64_t LONG_ROUND_NS = 100 * 1000 * 1000;

/* The fastest of n candidates (best[i]: its fastest run, -1 when it did
 * not run); the implicit GEMM when none ran. */
static kern_conv_algo_t time_candidates(trial_t *t, int packed, const kern_conv_algo_t *cand,
                                        int n, core_pool_t *pool, int64_t *best) {
  for (int i = 0; i < n; i++) {
    best[i] = -1;
    if (!packed || ignores_packing(cand[i])) continue;
    size_t bytes = kern_conv2d_packed_bytes(&t->d, cand[i]);
    void *buf = core_aligned_alloc(bytes);
    if (buf && !kern_conv2d_pack_weight(&t->d, cand[i], buf)) {
      core_free(buf);
      buf = NULL;
    }
    t->packed[cand[i]] = buf;
  }
  int64_t first = core_now_ns();
  for (int round = 0; round <= ROUNDS; round++) {
    for (int i = 0; i < n; i++) {
      if (packed && !ignores_packing(cand[i]) && !t->packed[cand[i]]) continue;
      if (round > 0 && best[i] < 0) continue; /* did not run */
      int64_t ns = time_once(t, cand[i], pool);
      /* The first round warms caches and scratch; it counts only as a
       * fallback. */
      if (ns >= 0 && (best[i] < 0 || round == 1 || ns < best[i])) best[i] = ns;
    }
    if (round == 0 && core_now_ns() - first > LONG_ROUND_NS) round = ROUNDS - 1;
  }
  int pick = -1;
  for (int i = 0; i < n; i++)
    if (best[i] >= 0 && (pick < 0 || best[i] < best[pick])) pick = i;
  return pick < 0 ? KERN_CONV_IMPLICIT : cand[pick];
}

/* "conv2d 8x64x32x32 -> 64 3x3 stride 1 pads 1 groups 1, 2 threads:
 * Winograd F(2x2) 210.3 GFLOP/s (implicit GEMM 150.2, ...)". GFLOP/s
 * count the direct sum's FLOPs. */
static void log_choice(const loom_abi_conv2d_t *d, kern_conv_pass_t pass, int threads,
                       const kern_conv_algo_t *cand, int n, const int64_t *best,
                       kern_conv_algo_t pick, int64_t spent_ns) {
  double flops = 2.0 * (double)(d->n * d->o * d->ho * d->wo) *
                 (double)(d->c / d->groups * d->kh * d->kw);
  char others[256] = "";
  int len = 0;
  double rate = 0;
  for (int i = 0; i < n; i++) {
    double r = best[i] > 0 ? flops / (double)best[i] : 0;
    if (cand[i] == pick) {
      rate = r;
      continue;
    }
    if (len >= 0 && (size_t)len < sizeof others)
      len += snprintf(others + len, sizeof others - (size_t)len, "%s%s %.1f", len ? ", " : "",
                      kern_conv_algo_name(cand[i], pass), r);
  }
  core_log(LOG_STEPS,
           "%s %lldx%lldx%lldx%lld -> %lld, %lldx%lld stride %lld pads %lld groups %lld, "
           "%d thread%s: %s %.1f GFLOP/s%s%s%s; timed in %.1f ms",
           pass == KERN_CONV_FORWARD ? "conv2d" : "conv2d input grad", (long long)d->n,
           (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->o, (long long)d->kh,
           (long long)d->kw, (long long)d->stride[0], (long long)d->pads[0],
           (long long)d->groups, threads, threads == 1 ? "" : "s",
           kern_conv_algo_name(pick, pass), rate, len ? " (" : "", others, len ? ")" : "",
           (double)spent_ns / 1e6);
}

static int by_rules(void) {
  const char *v = core_getenv("LOOM_CONV_CHOICE");
  return v && strcmp(v, "rules") == 0;
}

/* kern_conv2d_algo, and when keep is not NULL (a forward layer about to
 * have its weights packed), *keep = the timings' weights packed for the
 * choice, or NULL. */
static kern_conv_algo_t choose(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                               kern_conv_pass_t pass, int packed, core_pool_t *pool,
                               void **keep) {
  if (keep) *keep = NULL;
  if (pass == KERN_CONV_INPUT_GRAD) packed = 0; /* its weights are never packed */
  kern_conv_algo_t cand[KERN_CONV_N_ALGOS];
  int n = kern_conv2d_candidates(d, mode, pass, cand);
  if (n == 1 || by_rules() || d->n * d->o * d->ho * d->wo * d->c == 0)
    return kern_conv2d_algo_by_rules(d, mode, pass, packed);
  choice_key_t key = key_of(d, mode, pass, packed, pool);
  kern_conv_algo_t algo;
  if (lookup(&key, &algo)) return algo;
  trial_t t;
  int64_t best[KERN_CONV_N_ALGOS], start = core_now_ns();
  if (!trial_init(&t, d, pass)) {
    trial_free(&t);
    return kern_conv2d_algo_by_rules(d, mode, pass, packed);
  }
  algo = time_candidates(&t, packed, cand, n, pool, best);
  log_choice(d, pass, key.threads, cand, n, best, algo, core_now_ns() - start);
  algo = remember(&key, algo);
  /* Packed from the caller's weights: packing again would cost as much. */
  if (keep && d->weight && t.packed[algo]) {
    *keep = t.packed[algo];
    t.packed[algo] = NULL;
  }
  trial_free(&t);
  return algo;
}

kern_conv_algo_t kern_conv2d_algo(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                  kern_conv_pass_t pass, int packed, core_pool_t *pool) {
  return choose(d, mode, pass, packed, pool, NULL);
}

kern_conv_algo_t kern_conv2d_algo_packing(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                          core_pool_t *pool, void **packed) {
  return choose(d, mode, KERN_CONV_FORWARD, 1, pool, packed);
}

/* ---- Entry points ----------------------------------------------------------- */

/* Whether d's output has no elements (a batch of 0): nothing to write, and
 * the algorithms' tile and block counts would divide by 0. */
static bool empty_output(const loom_abi_conv2d_t *d) {
  return d->n == 0 || d->o == 0 || d->ho == 0 || d->wo == 0;
}

void kern_conv2d_f32(const loom_abi_conv2d_t *d, kern_conv_mode_t mode, core_pool_t *pool) {
  if (empty_output(d)) return;
  kern_conv_algo_t algo =
      kern_conv2d_algo(d, mode, KERN_CONV_FORWARD, d->weight_packed != NULL, pool);
  if (!kern_conv2d_run(d, algo, pool)) kern_conv2d_run(d, KERN_CONV_IMPLICIT, pool);
}

void kern_conv2d_input_grad_f32(const loom_abi_conv2d_t *d, kern_conv_mode_t mode,
                                core_pool_t *pool) {
  if (d->n == 0 || d->c == 0 || d->h == 0 || d->w == 0) return; /* no input to write */
  kern_conv_algo_t algo = kern_conv2d_algo(d, mode, KERN_CONV_INPUT_GRAD, 0, pool);
  if (!kern_conv2d_input_grad_run(d, algo, pool))
    kern_conv2d_input_grad_run(d, KERN_CONV_IMPLICIT, pool);
}
