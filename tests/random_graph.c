/* The random graph generator and the differential check (see
 * random_graph.h for the error model). */
#include "random_graph.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define RG_MAX_VALUES 320
/* Elements of any value, so that a graph runs in microseconds. */
#define RG_MAX_NUMEL 4096

/* ---- Random numbers (splitmix64) ------------------------------------- */

typedef struct rv {
  loom_value_t v;
  loom_dtype_t dt;
  int rank;
  int64_t sh[LOOM_MAX_RANK];
  int64_t numel;
  double lo, hi; /* every element lies in [lo, hi] */
  double err;    /* bound on the rounding error; 0: bit-exact */
  int uses;
  bool leaf;
} rv_t;

typedef struct gen {
  uint64_t s;
  rg_case_t *c;
  loom_graph_t *g;
  rv_t v[RG_MAX_VALUES];
  int n;
  int n_params;
  bool failed;
} gen_t;

static uint64_t rnd(gen_t *G) {
  uint64_t z = (G->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uni(gen_t *G, double a, double b) {
  return a + (b - a) * (double)(rnd(G) >> 11) * 0x1.0p-53;
}
static int64_t irange(gen_t *G, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rnd(G) % (uint64_t)(hi - lo + 1));
}
static bool chance(gen_t *G, double p) { return uni(G, 0, 1) < p; }

/* ---- Coverage ----------------------------------------------------------- */

static const char *cov_names[128];
static int cov_counts[128];
static int cov_n;

static void cover(const char *name) {
  for (int i = 0; i < cov_n; i++)
    if (!strcmp(cov_names[i], name)) {
      cov_counts[i]++;
      return;
    }
  if (cov_n < 128) {
    cov_names[cov_n] = name;
    cov_counts[cov_n++] = 1;
  }
}

int rg_coverage(const char ***names, const int **counts) {
  *names = cov_names;
  *counts = cov_counts;
  return cov_n;
}

/* ---- Values ------------------------------------------------------------- */

static bool is_float(loom_dtype_t d) { return d == LOOM_F32 || d == LOOM_F64; }
static bool is_int(loom_dtype_t d) { return d == LOOM_I32 || d == LOOM_I64; }
static double mag(const rv_t *x) { return fmax(fabs(x->lo), fabs(x->hi)); }
/* One rounding of the dtype (unit roundoff). */
static double unit(loom_dtype_t d) {
  return d == LOOM_F32 ? 0x1.0p-24 : d == LOOM_F64 ? 0x1.0p-53 : 0;
}

static bool check(gen_t *G, loom_status_t s, const char *what) {
  if (s == LOOM_OK) return true;
  if (!G->failed)
    snprintf(G->c->error, sizeof G->c->error, "%s: %s: %s", what,
             loom_status_name(s), loom_last_error());
  G->failed = true;
  return false;
}

/* Adds v to the pool with its interval and error; -1 on failure. */
static int push(gen_t *G, loom_value_t v, double lo, double hi, double err) {
  if (G->failed || G->n >= RG_MAX_VALUES) {
    G->failed = true;
    return -1;
  }
  rv_t *x = &G->v[G->n];
  memset(x, 0, sizeof *x);
  loom_dim_t dims[LOOM_MAX_RANK];
  if (!check(G, loom_value_type(G->g, v, &x->dt, &x->rank, dims), "value type"))
    return -1;
  x->v = v;
  x->numel = 1;
  for (int i = 0; i < x->rank; i++) {
    x->sh[i] = dims[i];
    x->numel *= dims[i];
  }
  if (x->dt == LOOM_BOOL) {
    lo = fmax(lo, 0);
    hi = fmin(hi, 1);
  }
  x->lo = lo;
  x->hi = hi;
  x->err = is_float(x->dt) ? err : 0;
  return G->n++;
}

/* Element i of a tensor's memory as dtype d. */
static void store(loom_dtype_t d, void *p, int64_t i, double x) {
  switch (d) {
  case LOOM_F32: ((float *)p)[i] = (float)x; break;
  case LOOM_F64: ((double *)p)[i] = x; break;
  case LOOM_I32: ((int32_t *)p)[i] = (int32_t)x; break;
  case LOOM_I64: ((int64_t *)p)[i] = (int64_t)x; break;
  case LOOM_BOOL: ((uint8_t *)p)[i] = x != 0; break;
  default: break;
  }
}

static double draw(gen_t *G, loom_dtype_t d, double lo, double hi) {
  if (is_float(d)) return uni(G, lo, hi);
  return (double)irange(G, (int64_t)ceil(lo), (int64_t)floor(hi));
}

/* A strided view over new memory, the last two dims stored transposed,
 * so that inputs arrive non-contiguous. */
static loom_tensor_t *strided_input(gen_t *G, loom_dtype_t d, int rank,
                                    const int64_t *sh, const double *vals,
                                    int64_t numel, void **mem) {
  int64_t phys[LOOM_MAX_RANK], pst[LOOM_MAX_RANK], st[LOOM_MAX_RANK];
  memcpy(phys, sh, sizeof(int64_t) * (size_t)rank);
  phys[rank - 2] = sh[rank - 1];
  phys[rank - 1] = sh[rank - 2];
  int64_t acc = 1;
  for (int i = rank - 1; i >= 0; i--) {
    pst[i] = acc;
    acc *= phys[i];
  }
  memcpy(st, pst, sizeof st);
  st[rank - 2] = pst[rank - 1];
  st[rank - 1] = pst[rank - 2];
  *mem = calloc((size_t)(numel ? numel : 1), loom_dtype_size(d));
  if (!*mem) return NULL;
  for (int64_t i = 0; i < numel; i++) {
    int64_t rest = i, off = 0;
    for (int k = rank - 1; k >= 0; k--) {
      off += (rest % sh[k]) * st[k];
      rest /= sh[k];
    }
    store(d, *mem, off, vals[i]);
  }
  loom_tensor_t *t = NULL;
  if (!check(G, loom_tensor_wrap(d, rank, sh, st, *mem, &t), "wrap input")) return NULL;
  return t;
}

/* A new input, parameter or constant of random data in [lo, hi]. */
static int leaf(gen_t *G, loom_dtype_t d, int rank, const int64_t *sh, double lo,
                double hi) {
  if (G->failed) return -1;
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= sh[i];
  double *vals = malloc(sizeof(double) * (size_t)(numel ? numel : 1));
  loom_tensor_t *t = NULL;
  if (!vals || !check(G, loom_tensor_create(d, rank, sh, &t), "tensor")) {
    free(vals);
    G->failed = true;
    return -1;
  }
  for (int64_t i = 0; i < numel; i++) {
    vals[i] = draw(G, d, lo, hi);
    store(d, loom_tensor_data(t), i, vals[i]);
  }
  double kind = uni(G, 0, 1);
  loom_value_t v = {0};
  char name[16];
  bool ok;
  if (kind < 0.5 && G->c->n_inputs < RG_MAX_INPUTS) {
    int k = G->c->n_inputs;
    snprintf(name, sizeof name, "x%d", k);
    loom_dim_t dims[LOOM_MAX_RANK];
    for (int i = 0; i < rank; i++) dims[i] = sh[i];
    ok = check(G, loom_graph_input(G->g, name, d, rank, dims, &v), "input");
    if (ok && rank >= 2 && chance(G, 0.3)) {
      loom_tensor_t *view = strided_input(G, d, rank, sh, vals, numel,
                                          &G->c->input_memory[k]);
      loom_tensor_destroy(t);
      t = view;
      ok = view != NULL;
    }
    G->c->inputs[k] = t;
    G->c->n_inputs++;
    t = NULL;
  } else if (kind < 0.75) {
    snprintf(name, sizeof name, "p%d", G->n_params++);
    ok = check(G, loom_graph_param(G->g, name, d, rank, sh, t, &v), "param");
  } else {
    ok = check(G, loom_graph_constant(G->g, t, &v), "constant");
  }
  loom_tensor_destroy(t);
  free(vals);
  if (!ok) return -1;
  int i = push(G, v, lo, hi, 0);
  if (i >= 0) G->v[i].leaf = true;
  return i;
}

static int scalar(gen_t *G, loom_dtype_t d, double x) {
  loom_tensor_t *t = NULL;
  if (!check(G, loom_tensor_create(d, 0, NULL, &t), "scalar")) return -1;
  store(d, loom_tensor_data(t), 0, x);
  loom_value_t v;
  bool ok = check(G, loom_graph_constant(G->g, t, &v), "constant");
  loom_tensor_destroy(t);
  if (!ok) return -1;
  int i = push(G, v, x, x, 0);
  if (i >= 0) G->v[i].leaf = true;
  return i;
}

static const loom_dtype_t value_dtypes[] = {LOOM_F32, LOOM_F32, LOOM_F32, LOOM_F32,
                                            LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64,
                                            LOOM_BOOL};

/* A random interval for new data of dtype d. */
static void rand_interval(gen_t *G, loom_dtype_t d, double *lo, double *hi) {
  static const double f[][2] = {{-2, 2}, {-1, 1}, {0.5, 2}, {-3, 0.5}, {0, 1}, {-4, 4}};
  static const double n[][2] = {{-5, 5}, {1, 6}, {-8, -1}, {0, 3}, {-20, 20}};
  int k = is_float(d) ? (int)irange(G, 0, 5) : (int)irange(G, 0, 4);
  *lo = is_float(d) ? f[k][0] : d == LOOM_BOOL ? 0 : n[k][0];
  *hi = is_float(d) ? f[k][1] : d == LOOM_BOOL ? 1 : n[k][1];
}

static int rand_shape(gen_t *G, int64_t *sh) {
  static const int64_t small[] = {1, 1, 2, 3, 4, 5, 6, 7, 8};
  static const int64_t big[] = {16, 33, 64, 130, 257};
  double r = uni(G, 0, 1);
  int rank = r < 0.05 ? 0 : r < 0.25 ? 1 : r < 0.6 ? 2 : r < 0.85 ? 3 : 4;
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) {
    sh[i] = chance(G, 0.12) ? big[irange(G, 0, 4)] : small[irange(G, 0, 8)];
    while (numel * sh[i] > 2048 && sh[i] > 1) sh[i] /= 2;
    numel *= sh[i];
  }
  return rank;
}

static int new_leaf(gen_t *G) {
  int64_t sh[LOOM_MAX_RANK];
  int rank = rand_shape(G, sh);
  if (chance(G, 0.1)) { /* images for conv2d */
    rank = 4;
    sh[0] = irange(G, 1, 2), sh[1] = irange(G, 1, 4);
    sh[2] = irange(G, 3, 9), sh[3] = irange(G, 3, 9);
  }
  loom_dtype_t d = value_dtypes[irange(G, 0, 8)];
  double lo, hi;
  rand_interval(G, d, &lo, &hi);
  return leaf(G, d, rank, sh, lo, hi);
}

/* ---- Choosing values ---------------------------------------------------- */

typedef bool (*pred_t)(const gen_t *G, const rv_t *x, const void *ctx);

/* A random pool value satisfying ok, favouring recent ones (depth); -1. */
static int pick(gen_t *G, pred_t ok, const void *ctx) {
  int cand[RG_MAX_VALUES], n = 0;
  for (int i = 0; i < G->n; i++)
    if (G->v[i].numel > 0 && ok(G, &G->v[i], ctx)) cand[n++] = i;
  if (!n) return -1;
  if (chance(G, 0.6)) return cand[n - 1 - irange(G, 0, n < 6 ? n - 1 : 5)];
  return cand[irange(G, 0, n - 1)];
}

static bool p_float(const gen_t *G, const rv_t *x, const void *c) {
  (void)G, (void)c;
  return is_float(x->dt);
}
static bool p_numeric(const gen_t *G, const rv_t *x, const void *c) {
  (void)G, (void)c;
  return x->dt != LOOM_BOOL;
}
static bool p_any(const gen_t *G, const rv_t *x, const void *c) {
  (void)G, (void)c, (void)x;
  return true;
}
static bool p_exact(const gen_t *G, const rv_t *x, const void *c) {
  (void)G, (void)c;
  return x->err == 0;
}
static bool p_exact_numeric(const gen_t *G, const rv_t *x, const void *c) {
  return p_exact(G, x, c) && x->dt != LOOM_BOOL;
}
static bool p_ranked(const gen_t *G, const rv_t *x, const void *c) {
  (void)G, (void)c;
  return x->rank >= 1;
}
static bool p_float_ranked(const gen_t *G, const rv_t *x, const void *c) {
  return p_float(G, x, c) && x->rank >= 1;
}

/* The broadcast shape of a and b; false if they do not broadcast or the
 * result is too large. */
static bool bcast(const rv_t *a, const rv_t *b, int *rank, int64_t *sh) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  int64_t numel = 1;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->sh[ia] : 1, db = ib >= 0 ? b->sh[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    sh[i] = da == 1 ? db : da;
    numel *= sh[i];
  }
  *rank = r;
  return numel <= RG_MAX_NUMEL;
}

typedef struct partner_ctx {
  const rv_t *a;
  bool exact;
} partner_ctx_t;

static bool p_partner(const gen_t *G, const rv_t *x, const void *c) {
  (void)G;
  const partner_ctx_t *p = c;
  int r;
  int64_t sh[LOOM_MAX_RANK];
  return x->dt == p->a->dt && (!p->exact || x->err == 0) && bcast(p->a, x, &r, sh);
}

/* A shape that broadcasts with a's: dims dropped, set to 1 or grown. */
static int partner_shape(gen_t *G, const rv_t *a, int64_t *sh) {
  int r = a->rank - (int)irange(G, 0, a->rank < 2 ? a->rank : 2);
  bool extra = a->rank < 4 && chance(G, 0.1);
  int k = 0;
  if (extra) sh[k++] = irange(G, 1, 3);
  for (int i = a->rank - r; i < a->rank; i++) {
    int64_t d = a->sh[i];
    if (chance(G, 0.3)) d = 1;
    else if (d == 1 && chance(G, 0.2)) d = irange(G, 2, 4);
    sh[k++] = d;
  }
  return k;
}

/* A value of a's dtype that broadcasts with a, from the pool or new. */
static int partner(gen_t *G, int ia, bool exact) {
  partner_ctx_t ctx = {&G->v[ia], exact};
  int b = chance(G, 0.6) ? pick(G, p_partner, &ctx) : -1;
  if (b >= 0) return b;
  int64_t sh[LOOM_MAX_RANK];
  int r = partner_shape(G, &G->v[ia], sh);
  double lo, hi;
  rand_interval(G, G->v[ia].dt, &lo, &hi);
  b = leaf(G, G->v[ia].dt, r, sh, lo, hi);
  int rr;
  int64_t osh[LOOM_MAX_RANK];
  return b >= 0 && bcast(&G->v[ia], &G->v[b], &rr, osh) ? b : -1;
}

/* ---- Fixers: nodes that bring a value into an op's domain ---------------- */

static int node1(gen_t *G, loom_status_t s, loom_value_t out, const char *name,
                 double lo, double hi, double err) {
  if (!check(G, s, name)) return -1;
  cover(name);
  return push(G, out, lo, hi, err);
}

/* x * 2^-k (exact) so that |x| <= m, for floats. */
static int scale_down(gen_t *G, int i, double m) {
  int k = (int)ceil(log2(mag(&G->v[i]) / m));
  if (k <= 0) return i;
  double f = ldexp(1, -k);
  int c = scalar(G, G->v[i].dt, f);
  if (c < 0) return -1;
  loom_value_t out;
  rv_t x = G->v[i];
  G->v[i].uses++, G->v[c].uses++;
  return node1(G, loom_mul(G->g, x.v, G->v[c].v, &out), out, "mul", x.lo * f,
               x.hi * f, x.err * f);
}

/* Keeps magnitudes where rounding errors stay meaningful. */
static int tame(gen_t *G, int i) {
  if (i < 0) return i;
  rv_t x = G->v[i];
  if (is_float(x.dt) && mag(&x) > 64) return scale_down(G, i, 8);
  if (!is_int(x.dt) || mag(&x) <= 1000) return i;
  int c = scalar(G, x.dt, 97);
  if (c < 0) return -1;
  loom_value_t out;
  G->v[i].uses++, G->v[c].uses++;
  return node1(G, loom_mod(G->g, x.v, G->v[c].v, &out), out, "mod", 0, 96, 0);
}

static int int_range(gen_t *G, int i, int64_t m);

/* |x| <= m, by tanh (m >= 1) or an exact scaling; integers by mod. */
static int bounded(gen_t *G, int i, double m) {
  if (i < 0 || mag(&G->v[i]) <= m) return i;
  if (is_int(G->v[i].dt)) return int_range(G, i, (int64_t)m);
  if (!is_float(G->v[i].dt) || chance(G, 0.5)) return scale_down(G, i, m);
  loom_value_t out;
  rv_t x = G->v[i];
  G->v[i].uses++;
  return node1(G, loom_tanh(G->g, x.v, &out), out, "tanh", tanh(x.lo), tanh(x.hi),
               x.err + 2 * unit(x.dt));
}

/* A value >= 0.5 and <= m + 0.5: |x| + 0.5 (1 for integers). */
static int positive(gen_t *G, int i, double m) {
  i = bounded(G, i, m);
  if (i < 0) return -1;
  rv_t x = G->v[i];
  double off = is_float(x.dt) ? 0.5 : 1;
  if (x.lo >= off && x.hi <= m + off) return i;
  loom_value_t a, out;
  G->v[i].uses++;
  double alo = x.lo >= 0 ? x.lo : x.hi <= 0 ? -x.hi : 0;
  int ia = node1(G, loom_abs(G->g, x.v, &a), a, "abs", alo, mag(&x), x.err);
  int c = scalar(G, x.dt, off);
  if (ia < 0 || c < 0) return -1;
  G->v[ia].uses++, G->v[c].uses++;
  return node1(G, loom_add(G->g, a, G->v[c].v, &out), out, "add", alo + off,
               mag(&x) + off, x.err + 2 * unit(x.dt) * (mag(&x) + off));
}

/* ---- Unary ops with rounding: interval and derivative by sampling -------- */

typedef loom_status_t (*unary_fn)(loom_graph_t *, loom_value_t, loom_value_t *);

typedef struct smooth_op {
  const char *name;
  unary_fn build;
  loom_status_t (*build_alpha)(loom_graph_t *, loom_value_t, double, loom_value_t *);
  double (*f)(double x, double a);
  int domain; /* 0 any, 1 positive, 2 |x| <= 8, 3 |x| >= 0.25 */
  int ulps;   /* roundings a good implementation may spend */
} smooth_op_t;

static double f_exp(double x, double a) { (void)a; return exp(x); }
static double f_log(double x, double a) { (void)a; return log(x); }
static double f_sqrt(double x, double a) { (void)a; return sqrt(x); }
static double f_rsqrt(double x, double a) { (void)a; return 1 / sqrt(x); }
static double f_recip(double x, double a) { (void)a; return 1 / x; }
static double f_tanh(double x, double a) { (void)a; return tanh(x); }
static double f_sigmoid(double x, double a) { (void)a; return 1 / (1 + exp(-x)); }
static double f_leaky(double x, double a) { return x > 0 ? x : a * x; }
static double f_elu(double x, double a) { return x > 0 ? x : a * (exp(x) - 1); }
static double f_gelu(double x, double a) { (void)a; return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double f_gelu_tanh(double x, double a) {
  (void)a;
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double f_silu(double x, double a) { (void)a; return x / (1 + exp(-x)); }
static double f_softplus(double x, double a) { (void)a; return log1p(exp(x)); }
static double f_sin(double x, double a) { (void)a; return sin(x); }
static double f_cos(double x, double a) { (void)a; return cos(x); }
static double f_erf(double x, double a) { (void)a; return erf(x); }

static const smooth_op_t smooth_ops[] = {
    {"exp", loom_exp, NULL, f_exp, 2, 8},
    {"log", loom_log, NULL, f_log, 1, 8},
    {"sqrt", loom_sqrt, NULL, f_sqrt, 1, 2},
    {"rsqrt", loom_rsqrt, NULL, f_rsqrt, 1, 4},
    {"reciprocal", loom_reciprocal, NULL, f_recip, 3, 2},
    {"tanh", loom_tanh, NULL, f_tanh, 0, 8},
    {"sigmoid", loom_sigmoid, NULL, f_sigmoid, 0, 8},
    {"leaky_relu", NULL, loom_leaky_relu, f_leaky, 0, 2},
    {"elu", NULL, loom_elu, f_elu, 0, 8},
    {"gelu", loom_gelu, NULL, f_gelu, 0, 8},
    {"gelu_tanh", loom_gelu_tanh, NULL, f_gelu_tanh, 0, 8},
    {"silu", loom_silu, NULL, f_silu, 0, 8},
    {"softplus", loom_softplus, NULL, f_softplus, 0, 8},
    {"sin", loom_sin, NULL, f_sin, 2, 8},
    {"cos", loom_cos, NULL, f_cos, 2, 8},
    {"erf", loom_erf, NULL, f_erf, 0, 8},
};

/* The image of [lo, hi] under f and a bound on |f'| there, by sampling
 * with a margin for what falls between samples. */
static void image(double (*f)(double, double), double a, double lo, double hi,
                  double *olo, double *ohi, double *dmax) {
  const int n = 512;
  double step = (hi - lo) / n, ymin = INFINITY, ymax = -INFINITY, d = 0, prev = 0;
  for (int i = 0; i <= n; i++) {
    double x = i == n ? hi : lo + step * i, y = f(x, a);
    ymin = fmin(ymin, y), ymax = fmax(ymax, y);
    if (i > 0 && step > 0) d = fmax(d, fabs(y - prev) / step);
    prev = y;
  }
  double h = 1e-6 * (1 + fabs(lo) + fabs(hi));
  d = fmax(d, fabs(f(lo + h, a) - f(lo, a)) / h);
  d = fmax(d, fabs(f(hi, a) - f(hi - h, a)) / h);
  *dmax = 1.5 * d + 1e-9;
  *olo = ymin - *dmax * step;
  *ohi = ymax + *dmax * step;
}

static int into_domain(gen_t *G, int i, int domain) {
  const rv_t *x = &G->v[i];
  if (domain == 1 && (x->lo < 0.1 || x->hi > 16)) return positive(G, i, 8);
  if (domain == 2) return bounded(G, i, 8);
  if (domain == 3 && !(x->lo >= 0.25 || x->hi <= -0.25)) return positive(G, i, 8);
  return i;
}

static bool op_smooth(gen_t *G) {
  int i = pick(G, p_float, NULL);
  if (i < 0) return false;
  const smooth_op_t *op = &smooth_ops[irange(G, 0, sizeof smooth_ops / sizeof *smooth_ops - 1)];
  i = into_domain(G, i, op->domain);
  if (i < 0) return false;
  rv_t x = G->v[i];
  double alpha = (double)irange(G, 1, 8) / 8, lo, hi, d;
  image(op->f, alpha, x.lo, x.hi, &lo, &hi, &d);
  loom_value_t out;
  loom_status_t s = op->build ? op->build(G->g, x.v, &out)
                              : op->build_alpha(G->g, x.v, alpha, &out);
  G->v[i].uses++;
  double m = fmax(fabs(lo), fabs(hi));
  return tame(G, node1(G, s, out, op->name, lo, hi,
                       d * x.err + op->ulps * unit(x.dt) * (m + 1e-30))) >= 0;
}

/* ---- Exact unary ops: no rounding -------------------------------------- */

static double f_floor(double x, double a) { (void)a; return floor(x); }
static double f_ceil(double x, double a) { (void)a; return ceil(x); }
static double f_round(double x, double a) { (void)a; return nearbyint(x); }
static double f_sign(double x, double a) { (void)a; return (x > 0) - (x < 0); }
static double f_relu(double x, double a) { (void)a; return x > 0 ? x : 0; }
static double f_id(double x, double a) { (void)a; return x; }

typedef struct exact_op {
  const char *name;
  unary_fn build;
  double (*f)(double x, double a); /* non-decreasing */
  bool float_only, needs_exact;
} exact_op_t;

static const exact_op_t exact_ops[] = {
    {"relu", loom_relu, f_relu, false, false},
    {"identity", loom_identity, f_id, false, false},
    {"floor", loom_floor, f_floor, true, true},
    {"ceil", loom_ceil, f_ceil, true, true},
    {"round", loom_round, f_round, true, true},
    {"sign", loom_sign, f_sign, false, true},
};

static bool op_exact_unary(gen_t *G) {
  int k = (int)irange(G, 0, sizeof exact_ops / sizeof *exact_ops + 2);
  int i = pick(G, k >= 2 ? p_exact_numeric : p_numeric, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  loom_value_t out;
  int r;
  G->v[i].uses++;
  if (k == 6) { /* neg */
    r = node1(G, loom_neg(G->g, x.v, &out), out, "neg", -x.hi, -x.lo, x.err);
  } else if (k == 7) { /* abs */
    double lo = x.lo >= 0 ? x.lo : x.hi <= 0 ? -x.hi : 0;
    r = node1(G, loom_abs(G->g, x.v, &out), out, "abs", lo, mag(&x), x.err);
  } else if (k == 8) { /* clamp with representable bounds */
    double a = floor(uni(G, x.lo, x.hi) * 4) / 4, b = a + (double)irange(G, 0, 8) / 4;
    if (is_int(x.dt)) a = floor(a), b = ceil(b);
    r = node1(G, loom_clamp(G->g, x.v, a, b, &out), out, "clamp", fmin(fmax(x.lo, a), b),
              fmin(fmax(x.hi, a), b), x.err);
  } else {
    const exact_op_t *op = &exact_ops[k];
    if (op->float_only && !is_float(x.dt)) return false;
    r = node1(G, op->build(G->g, x.v, &out), out, op->name, op->f(x.lo, 0) - 1,
              op->f(x.hi, 0) + 1, x.err);
    if (r >= 0 && (op->f == f_relu || op->f == f_id))
      G->v[r].lo = op->f(x.lo, 0), G->v[r].hi = op->f(x.hi, 0);
    if (r >= 0 && op->f == f_sign) G->v[r].lo = fmax(G->v[r].lo, -1), G->v[r].hi = fmin(G->v[r].hi, 1);
  }
  return r >= 0;
}

/* not, isnan: a bool from any value (exact inputs: x == 0 may flip). */
static bool op_bool_unary(gen_t *G) {
  bool isnan_op = chance(G, 0.3);
  int i = pick(G, isnan_op ? p_float : p_exact, NULL);
  if (i < 0) return false;
  loom_value_t out;
  G->v[i].uses++;
  loom_status_t s = isnan_op ? loom_isnan(G->g, G->v[i].v, &out) : loom_not(G->g, G->v[i].v, &out);
  return node1(G, s, out, isnan_op ? "isnan" : "not", 0, 1, 0) >= 0;
}

/* ---- Binary ops ---------------------------------------------------------- */

typedef loom_status_t (*binary_fn)(loom_graph_t *, loom_value_t, loom_value_t, loom_value_t *);

/* The interval and error of a op b from theirs. */
typedef void (*bin_rule_t)(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err);

static void corners(double (*f)(double, double), const rv_t *a, const rv_t *b,
                    double *lo, double *hi) {
  double c[4] = {f(a->lo, b->lo), f(a->lo, b->hi), f(a->hi, b->lo), f(a->hi, b->hi)};
  *lo = fmin(fmin(c[0], c[1]), fmin(c[2], c[3]));
  *hi = fmax(fmax(c[0], c[1]), fmax(c[2], c[3]));
}
static double f_mul(double a, double b) { return a * b; }
static double f_div(double a, double b) { return a / b; }
static double f_pow(double a, double b) { return pow(a, b); }
static double f_pow_deriv(double a, double b) { return fabs(b * pow(a, b - 1)); }

static double minabs(const rv_t *x) { return x->lo > 0 ? x->lo : -x->hi; }

static void r_add(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  *lo = a->lo + b->lo, *hi = a->hi + b->hi;
  *err = a->err + b->err + 2 * unit(a->dt) * fmax(fabs(*lo), fabs(*hi));
}
static void r_sub(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  *lo = a->lo - b->hi, *hi = a->hi - b->lo;
  *err = a->err + b->err + 2 * unit(a->dt) * fmax(fabs(*lo), fabs(*hi));
}
static void r_mul(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  corners(f_mul, a, b, lo, hi);
  *err = mag(b) * a->err + mag(a) * b->err + 2 * unit(a->dt) * fmax(fabs(*lo), fabs(*hi));
}
static void r_div(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  corners(f_div, a, b, lo, hi);
  if (is_int(a->dt)) *lo = floor(*lo), *hi = floor(*hi);
  double m = minabs(b);
  *err = a->err / m + mag(a) * b->err / (m * m) + 2 * unit(a->dt) * fmax(fabs(*lo), fabs(*hi));
}
static void r_pow(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  if (is_int(a->dt)) {
    double m = pow(mag(a), b->hi);
    *lo = -m, *hi = m, *err = 0;
    return;
  }
  corners(f_pow, a, b, lo, hi);
  double dlo, dhi, la = fmax(fabs(log(a->lo)), fabs(log(a->hi)));
  corners(f_pow_deriv, a, b, &dlo, &dhi);
  *err = dhi * a->err + *hi * la * b->err + 8 * unit(a->dt) * *hi;
}
static void r_maximum(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  *lo = fmax(a->lo, b->lo), *hi = fmax(a->hi, b->hi), *err = fmax(a->err, b->err);
}
static void r_minimum(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  *lo = fmin(a->lo, b->lo), *hi = fmin(a->hi, b->hi), *err = fmax(a->err, b->err);
}
static void r_mod(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  (void)a;
  *lo = b->lo > 0 ? 0 : b->lo, *hi = b->lo > 0 ? b->hi : 0;
  *err = 2 * unit(a->dt) * mag(b);
}
static void r_bool(const rv_t *a, const rv_t *b, double *lo, double *hi, double *err) {
  (void)a, (void)b;
  *lo = 0, *hi = 1, *err = 0;
}

enum { NEED_NONE, NEED_DIVISOR, NEED_POW, NEED_EXACT };

typedef struct binary_op {
  const char *name;
  binary_fn build;
  bin_rule_t rule;
  int need;
  bool numeric; /* refuses bool */
  bool bool_out;
} binary_op_t;

static const binary_op_t binary_ops[] = {
    {"add", loom_add, r_add, NEED_NONE, true, false},
    {"add", loom_add, r_add, NEED_NONE, true, false},
    {"sub", loom_sub, r_sub, NEED_NONE, true, false},
    {"mul", loom_mul, r_mul, NEED_NONE, true, false},
    {"mul", loom_mul, r_mul, NEED_NONE, true, false},
    {"div", loom_div, r_div, NEED_DIVISOR, true, false},
    {"pow", loom_pow, r_pow, NEED_POW, true, false},
    {"maximum", loom_maximum, r_maximum, NEED_NONE, true, false},
    {"minimum", loom_minimum, r_minimum, NEED_NONE, true, false},
    {"mod", loom_mod, r_mod, NEED_DIVISOR, true, false},
    {"eq", loom_eq, r_bool, NEED_EXACT, false, true},
    {"ne", loom_ne, r_bool, NEED_EXACT, false, true},
    {"lt", loom_lt, r_bool, NEED_EXACT, true, true},
    {"le", loom_le, r_bool, NEED_EXACT, true, true},
    {"gt", loom_gt, r_bool, NEED_EXACT, true, true},
    {"ge", loom_ge, r_bool, NEED_EXACT, true, true},
    {"and", loom_and, r_bool, NEED_EXACT, false, true},
    {"or", loom_or, r_bool, NEED_EXACT, false, true},
    {"xor", loom_xor, r_bool, NEED_EXACT, false, true},
};

/* A divisor away from zero: |x| + 0.5 (floats), |x| + 1 (integers). */
static int divisor(gen_t *G, int b) {
  const rv_t *x = &G->v[b];
  double m = is_float(x->dt) ? 0.25 : 1;
  if ((x->lo >= m || x->hi <= -m) && mag(x) <= 64) return b;
  return positive(G, b, 8);
}

/* Integer values in [0, m]: x mod (m + 1). */
static int int_range(gen_t *G, int i, int64_t m) {
  if (G->v[i].lo >= 0 && G->v[i].hi <= (double)m) return i;
  int c = scalar(G, G->v[i].dt, (double)(m + 1));
  if (c < 0) return -1;
  loom_value_t out;
  rv_t x = G->v[i];
  G->v[i].uses++, G->v[c].uses++;
  return node1(G, loom_mod(G->g, x.v, G->v[c].v, &out), out, "mod", 0, (double)m, 0);
}

static bool fix_operands(gen_t *G, const binary_op_t *op, int *a, int *b) {
  loom_dtype_t d = G->v[*a].dt;
  if (op->need == NEED_DIVISOR) {
    if (op->rule == r_mod && is_float(d) && (G->v[*a].err > 0 || G->v[*b].err > 0))
      return false; /* float mod jumps: exact operands only */
    *b = divisor(G, *b);
    if (op->rule == r_div && is_int(d)) *a = tame(G, *a);
  } else if (op->need == NEED_POW && is_float(d)) {
    *a = positive(G, *a, 4);
    *b = *b >= 0 ? bounded(G, *b, 3) : -1;
  } else if (op->need == NEED_POW) {
    *a = bounded(G, *a, 4);
    *b = *b >= 0 ? int_range(G, *b, 3) : -1;
  }
  return *a >= 0 && *b >= 0;
}

static bool op_binary(gen_t *G) {
  const binary_op_t *op = &binary_ops[irange(G, 0, sizeof binary_ops / sizeof *binary_ops - 1)];
  bool exact = op->need == NEED_EXACT;
  pred_t p = exact ? (op->numeric ? p_exact_numeric : p_exact) : op->numeric ? p_numeric : p_any;
  int a = pick(G, p, NULL);
  if (a < 0) return false;
  int b = partner(G, a, exact);
  if (b < 0) return false;
  if (chance(G, 0.3)) { int t = a; a = b; b = t; } /* either side broadcasts */
  if (op->need == NEED_POW && is_int(G->v[a].dt) && G->v[a].dt == LOOM_I32)
    return false; /* i32 pow overflows too easily to bound */
  if (!fix_operands(G, op, &a, &b)) return false;
  rv_t x = G->v[a], y = G->v[b];
  double lo, hi, err;
  op->rule(&x, &y, &lo, &hi, &err);
  if (is_int(x.dt) && fmax(fabs(lo), fabs(hi)) > 1e6) return false;
  loom_value_t out;
  G->v[a].uses++, G->v[b].uses++;
  return tame(G, node1(G, op->build(G->g, x.v, y.v, &out), out, op->name, lo, hi, err)) >= 0;
}

typedef struct bool_ctx {
  const rv_t *a, *b;
} bool_ctx_t;

static bool p_cond(const gen_t *G, const rv_t *x, const void *c) {
  (void)G;
  const bool_ctx_t *k = c;
  int r, r2;
  int64_t sh[LOOM_MAX_RANK] = {0}, sh2[LOOM_MAX_RANK];
  if (x->dt != LOOM_BOOL || !bcast(k->a, k->b, &r, sh)) return false;
  rv_t ab = *k->a;
  ab.rank = r;
  memcpy(ab.sh, sh, sizeof sh);
  return bcast(&ab, x, &r2, sh2);
}

static bool op_where(gen_t *G) {
  int a = pick(G, p_any, NULL);
  if (a < 0) return false;
  int b = partner(G, a, false);
  if (b < 0) return false;
  bool_ctx_t ctx = {&G->v[a], &G->v[b]};
  int c = pick(G, p_cond, &ctx);
  if (c < 0) {
    int64_t sh[LOOM_MAX_RANK];
    int r = partner_shape(G, &G->v[a], sh);
    for (int i = 0; i < r; i++) sh[i] = sh[i] > 1 && chance(G, 0.3) ? 1 : sh[i];
    c = leaf(G, LOOM_BOOL, r, sh, 0, 1);
    if (c < 0 || !p_cond(G, &G->v[c], &ctx)) return false;
  }
  rv_t x = G->v[a], y = G->v[b];
  loom_value_t out;
  G->v[a].uses++, G->v[b].uses++, G->v[c].uses++;
  return node1(G, loom_where(G->g, G->v[c].v, x.v, y.v, &out), out, "where",
               fmin(x.lo, y.lo), fmax(x.hi, y.hi), fmax(x.err, y.err)) >= 0;
}

/* ---- Casts ---------------------------------------------------------------- */

static bool op_cast(gen_t *G) {
  int i = pick(G, p_any, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  loom_dtype_t to = value_dtypes[irange(G, 0, 8)];
  /* Truncation and x != 0 jump: exact inputs only. */
  if (is_float(x.dt) && !is_float(to) && x.err > 0) return false;
  double lo = x.lo, hi = x.hi, err = x.err;
  if (is_int(to)) lo = trunc(lo), hi = trunc(hi);
  if (to == LOOM_BOOL) lo = 0, hi = 1;
  if (to == LOOM_F32 && x.dt == LOOM_F64) err += unit(LOOM_F32) * mag(&x);
  if (to == LOOM_F32 && is_int(x.dt) && mag(&x) > 1 << 24) return false;
  loom_value_t out;
  G->v[i].uses++;
  return node1(G, loom_cast(G->g, x.v, to, &out), out, "cast", lo, hi, err) >= 0;
}

/* ---- Reductions ------------------------------------------------------------ */

/* Random distinct axes of x (sometimes negative, unsorted); n = how many
 * elements each output reduces. Returns the count (0: all axes). */
static int rand_axes(gen_t *G, const rv_t *x, int64_t *axes, int64_t *n) {
  int k = 0;
  *n = 1;
  if (x->rank == 0 || chance(G, 0.15)) {
    *n = x->numel;
    return 0;
  }
  for (int i = 0; i < x->rank; i++)
    if (chance(G, 0.5)) axes[k++] = i;
  if (!k) axes[k++] = irange(G, 0, x->rank - 1);
  for (int i = 0; i < k; i++) *n *= x->sh[axes[i]];
  if (k == 2 && chance(G, 0.3)) { int64_t t = axes[0]; axes[0] = axes[1]; axes[1] = t; }
  for (int i = 0; i < k; i++)
    if (chance(G, 0.3)) axes[i] -= x->rank;
  return k;
}

typedef loom_status_t (*reduce_fn)(loom_graph_t *, loom_value_t, int, const int64_t *, int,
                                   loom_value_t *);

/* Error of a float sum of n terms: a random-walk bound with headroom. */
static double sum_err(double n, double m, loom_dtype_t d) {
  return 2 * unit(d) * n * m * (2 + sqrt(n));
}

static bool op_reduce(gen_t *G) {
  static const char *names[] = {"sum", "mean", "max", "min", "prod", "logsumexp", "variance", "sum"};
  static const reduce_fn fns[] = {loom_sum, loom_mean, loom_max, loom_min, loom_prod,
                                  loom_logsumexp, NULL, loom_sum};
  int k = (int)irange(G, 0, 7);
  int i = pick(G, k == 1 || (k >= 5 && k <= 6) ? p_float : p_numeric, NULL);
  if (i < 0) return false;
  int64_t axes[LOOM_MAX_RANK], n;
  int na = rand_axes(G, &G->v[i], axes, &n);
  if (k == 4) { /* prod: few small factors */
    if (n > 6) return false;
    i = bounded(G, i, 2);
    if (i < 0) return false;
  }
  rv_t x = G->v[i];
  double m = mag(&x), u = unit(x.dt), lo = x.lo, hi = x.hi, err = x.err;
  int correction = (int)irange(G, 0, 1);
  if (k == 0 || k == 7) lo = n * x.lo, hi = n * x.hi, err = n * x.err + sum_err((double)n, m, x.dt);
  if (k == 1) err = x.err + sum_err((double)n, m, x.dt) / (double)n;
  if (k == 4) {
    double p = pow(m, (double)n);
    lo = x.lo >= 0 ? pow(x.lo, (double)n) : -p, hi = p;
    err = n * pow(m, (double)n - 1) * x.err + 2 * u * n * p;
  }
  if (k == 5) hi = x.hi + log((double)n), err = x.err + 8 * u * (m + log((double)n) + 1) * (2 + sqrt((double)n));
  if (k == 6) {
    if (n <= correction) return false;
    double f = (double)n / (double)(n - correction);
    lo = 0, hi = (x.hi - x.lo) * (x.hi - x.lo) * f;
    err = f * (4 * m * x.err + 4 * u * m * m * (2 + sqrt((double)n)));
  }
  if (is_int(x.dt) && fmax(fabs(lo), fabs(hi)) > 1e6) return false;
  int keep = (int)irange(G, 0, 1);
  loom_value_t out;
  loom_status_t s = k == 6 ? loom_variance(G->g, x.v, na, na ? axes : NULL, keep, correction, &out)
                           : fns[k](G->g, x.v, na, na ? axes : NULL, keep, &out);
  G->v[i].uses++;
  return tame(G, node1(G, s, out, names[k], lo, hi, err)) >= 0;
}

static bool op_argreduce(gen_t *G) {
  int i = pick(G, p_exact_numeric, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int has_axis = x.rank > 0 && chance(G, 0.8);
  int64_t axis = has_axis ? irange(G, -x.rank, x.rank - 1) : 0;
  int64_t n = has_axis ? x.sh[axis < 0 ? axis + x.rank : axis] : x.numel;
  int keep = (int)irange(G, 0, 1), is_max = chance(G, 0.5);
  loom_value_t out;
  loom_status_t s = is_max ? loom_argmax(G->g, x.v, has_axis, axis, keep, &out)
                           : loom_argmin(G->g, x.v, has_axis, axis, keep, &out);
  G->v[i].uses++;
  return node1(G, s, out, is_max ? "argmax" : "argmin", 0, (double)(n - 1), 0) >= 0;
}

static bool op_cumsum(gen_t *G) {
  int i = pick(G, p_numeric, NULL);
  if (i < 0 || G->v[i].rank == 0) return false;
  rv_t x = G->v[i];
  int64_t axis = irange(G, -x.rank, x.rank - 1);
  double n = (double)x.sh[axis < 0 ? axis + x.rank : axis];
  double lo = n * fmin(x.lo, 0), hi = n * fmax(x.hi, 0);
  if (is_int(x.dt) && fmax(fabs(lo), fabs(hi)) > 1e6) return false;
  loom_value_t out;
  G->v[i].uses++;
  loom_status_t s = loom_cumsum(G->g, x.v, axis, (int)irange(G, 0, 1), (int)irange(G, 0, 1), &out);
  return tame(G, node1(G, s, out, "cumsum", lo, hi, n * x.err + sum_err(n, mag(&x), x.dt))) >= 0;
}

/* ---- Composites: softmax, log_softmax, layer_norm, rms_norm, batch_norm --- */

static bool op_softmax(gen_t *G) {
  int i = pick(G, p_float_ranked, NULL);
  if (i < 0) return false;
  i = bounded(G, i, 16);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t axis = irange(G, -x.rank, x.rank - 1);
  double n = (double)x.sh[axis < 0 ? axis + x.rank : axis], u = unit(x.dt);
  bool log_form = chance(G, 0.4);
  loom_value_t out;
  G->v[i].uses++;
  if (log_form)
    return node1(G, loom_log_softmax(G->g, x.v, axis, &out), out, "log_softmax",
                 x.lo - x.hi - log(n) - 1e-6, 0,
                 2 * x.err + 8 * u * (2 * mag(&x) + log(n) + 1) * (2 + sqrt(n))) >= 0;
  return node1(G, loom_softmax(G->g, x.v, axis, &out), out, "softmax", 0, 1,
               2 * x.err + 16 * u * (2 + sqrt(n))) >= 0;
}

/* A parameter (or input, constant) shaped like x's dims from `from` on. */
static int trailing_leaf(gen_t *G, const rv_t *x, int from, double lo, double hi) {
  return leaf(G, x->dt, x->rank - from, x->sh + from, lo, hi);
}

static bool op_norm(gen_t *G) {
  int i = pick(G, p_float_ranked, NULL);
  if (i < 0) return false;
  i = bounded(G, i, 16);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t axis = irange(G, 0, x.rank - 1);
  int from = (int)axis;
  if (chance(G, 0.3)) axis -= x.rank;
  double n = 1, u = unit(x.dt), eps = chance(G, 0.5) ? 0.1 : 0.01;
  for (int d = from; d < x.rank; d++) n *= (double)x.sh[d];
  bool rms = chance(G, 0.35);
  int has_scale = chance(G, 0.6), has_bias = !rms && chance(G, 0.6);
  int sc = has_scale ? trailing_leaf(G, &x, from, -2, 2) : -1;
  int bi = has_bias ? trailing_leaf(G, &x, from, -1, 1) : -1;
  if ((has_scale && sc < 0) || (has_bias && bi < 0)) return false;
  loom_value_t none = {0}, out;
  loom_value_t sv = has_scale ? G->v[sc].v : none, bv = has_bias ? G->v[bi].v : none;
  /* |z| <= sqrt(n) and <= 2|x|/sqrt(eps); dz/dx <= 3/sqrt(eps). */
  double zm = fmin(sqrt(n), 2 * mag(&x) / sqrt(eps));
  double ez = (3 * x.err + 8 * u * mag(&x) * (2 + sqrt(n))) / sqrt(eps) + 8 * u * zm;
  double sm = has_scale ? 2 : 1, bm = has_bias ? 1 : 0;
  loom_status_t s = rms ? loom_rms_norm(G->g, x.v, has_scale, sv, axis, eps, &out)
                        : loom_layer_norm(G->g, x.v, has_scale, sv, has_bias, bv, axis, eps, &out);
  G->v[i].uses++;
  if (has_scale) G->v[sc].uses++;
  if (has_bias) G->v[bi].uses++;
  double om = zm * sm + bm;
  return node1(G, s, out, rms ? "rms_norm" : "layer_norm", -om, om,
               ez * sm + 4 * u * om) >= 0;
}

static bool op_batch_norm(gen_t *G) {
  int i = pick(G, p_float_ranked, NULL);
  if (i < 0 || G->v[i].rank < 2) return false;
  i = bounded(G, i, 16);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t c = x.sh[1];
  int sc = leaf(G, x.dt, 1, &c, -2, 2), bi = leaf(G, x.dt, 1, &c, -1, 1);
  int mu = leaf(G, x.dt, 1, &c, -1, 1), var = leaf(G, x.dt, 1, &c, 0.5, 2);
  if (sc < 0 || bi < 0 || mu < 0 || var < 0) return false;
  double eps = 1e-5, u = unit(x.dt), om = (mag(&x) + 1) / sqrt(0.5) * 2 + 1;
  loom_value_t out, nm, nv;
  loom_status_t s = loom_batch_norm(G->g, x.v, G->v[sc].v, G->v[bi].v, G->v[mu].v,
                                    G->v[var].v, eps, 0.1, 0, &out, &nm, &nv);
  G->v[i].uses++, G->v[sc].uses++, G->v[bi].uses++, G->v[mu].uses++, G->v[var].uses++;
  if (node1(G, s, out, "batch_norm", -om, om, x.err * 2 / sqrt(0.5) + 16 * u * om) < 0)
    return false;
  return push(G, nm, -1, 1, 0) >= 0 && push(G, nv, 0.5, 2, 0) >= 0;
}

/* ---- Layout ops: exact, intervals and errors pass through ---------------- */

static int same_as(gen_t *G, int i, loom_status_t s, loom_value_t out, const char *name) {
  G->v[i].uses++;
  rv_t x = G->v[i];
  return node1(G, s, out, name, x.lo, x.hi, x.err);
}

static bool op_reshape(gen_t *G) {
  int i = pick(G, p_any, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  /* Spread the prime factors of numel over 1-4 dims. */
  int rank = (int)irange(G, 1, 4);
  loom_dim_t sh[LOOM_MAX_RANK];
  for (int d = 0; d < rank; d++) sh[d] = 1;
  int64_t rest = x.numel;
  for (int64_t p = 2; rest > 1;) {
    if (rest % p) { p++; continue; }
    sh[irange(G, 0, rank - 1)] *= p;
    rest /= p;
  }
  if (chance(G, 0.3)) sh[irange(G, 0, rank - 1)] = -1;
  loom_value_t out;
  return same_as(G, i, loom_reshape(G->g, x.v, rank, sh, &out), out, "reshape") >= 0;
}

static bool op_transpose(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t perm[LOOM_MAX_RANK];
  for (int d = 0; d < x.rank; d++) perm[d] = d;
  for (int d = x.rank - 1; d > 0; d--) {
    int j = (int)irange(G, 0, d);
    int64_t t = perm[d]; perm[d] = perm[j]; perm[j] = t;
  }
  loom_value_t out;
  return same_as(G, i, loom_transpose(G->g, x.v, chance(G, 0.2) ? NULL : perm, &out), out,
                 "transpose") >= 0;
}

/* Python's slice length for a dim of size n. */
static int64_t slice_len(int64_t n, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (step > 0) {
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < 0 ? 0 : end > n ? n : end;
    return end > start ? (end - start + step - 1) / step : 0;
  }
  start = start < 0 ? -1 : start > n - 1 ? n - 1 : start;
  end = end < -1 ? -1 : end > n - 1 ? n - 1 : end;
  return start > end ? (start - end - step - 1) / -step : 0;
}

static bool op_slice(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int n = (int)irange(G, 1, x.rank < 2 ? 1 : 2);
  int64_t starts[2], ends[2], axes[2], steps[2];
  static const int64_t step_choice[] = {1, 1, 1, 2, -1, -2, 3};
  int64_t first = irange(G, 0, x.rank - 1);
  for (int k = 0; k < n; k++) {
    axes[k] = (first + k) % x.rank;
    int64_t d = x.sh[axes[k]];
    steps[k] = 1, starts[k] = 0, ends[k] = d;
    for (int tries = 0; tries < 8; tries++) {
      int64_t st = step_choice[irange(G, 0, 6)], b = irange(G, -d - 1, d + 1),
              e = irange(G, -d - 1, d + 1);
      if (slice_len(d, b, e, st) < 1) continue;
      steps[k] = st, starts[k] = b, ends[k] = e;
      break;
    }
    if (chance(G, 0.3)) axes[k] -= x.rank;
  }

  loom_value_t out;
  bool unit_steps = steps[0] == 1 && (n == 1 || steps[1] == 1);
  const int64_t *st = unit_steps && chance(G, 0.3) ? NULL : steps;
  return same_as(G, i, loom_slice(G->g, x.v, n, starts, ends, axes, st, &out), out,
                 "slice") >= 0;
}

typedef struct cat_ctx {
  const rv_t *a;
  int axis;
} cat_ctx_t;

static bool p_concat(const gen_t *G, const rv_t *x, const void *c) {
  (void)G;
  const cat_ctx_t *k = c;
  if (x->dt != k->a->dt || x->rank != k->a->rank) return false;
  for (int d = 0; d < x->rank; d++)
    if (d != k->axis && x->sh[d] != k->a->sh[d]) return false;
  return true;
}

static bool op_concat(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  int axis = (int)irange(G, 0, G->v[i].rank - 1), n = (int)irange(G, 2, 3);
  int parts[3] = {i, -1, -1};
  cat_ctx_t ctx = {&G->v[i], axis};
  int64_t total = G->v[i].numel;
  for (int k = 1; k < n; k++) {
    parts[k] = chance(G, 0.5) ? pick(G, p_concat, &ctx) : -1;
    if (parts[k] < 0) {
      rv_t a = G->v[i];
      a.sh[axis] = irange(G, 1, 4);
      double lo, hi;
      rand_interval(G, a.dt, &lo, &hi);
      parts[k] = leaf(G, a.dt, a.rank, a.sh, lo, hi);
      if (parts[k] < 0) return false;
    }
    total += G->v[parts[k]].numel;
  }
  if (total > RG_MAX_NUMEL) return false;
  loom_value_t xs[3], out;
  double lo = INFINITY, hi = -INFINITY, err = 0;
  for (int k = 0; k < n; k++) {
    rv_t *p = &G->v[parts[k]];
    xs[k] = p->v, p->uses++;
    lo = fmin(lo, p->lo), hi = fmax(hi, p->hi), err = fmax(err, p->err);
  }
  int64_t ax = chance(G, 0.3) ? axis - G->v[i].rank : axis;
  return node1(G, loom_concat(G->g, n, xs, ax, &out), out, "concat", lo, hi, err) >= 0;
}

static bool op_expand(gen_t *G) {
  int i = pick(G, p_any, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int extra = x.rank < 4 ? (int)irange(G, 0, 1) : 0, rank = x.rank + extra;
  loom_dim_t sh[LOOM_MAX_RANK];
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) {
    int s = d - extra;
    sh[d] = s < 0 || x.sh[s] == 1 ? irange(G, 1, 4) : x.sh[s];
    numel *= sh[d];
  }
  if (numel > RG_MAX_NUMEL) return false;
  loom_value_t out;
  return same_as(G, i, loom_expand(G->g, x.v, rank, sh, &out), out, "expand") >= 0;
}

static bool op_squeeze(gen_t *G) {
  int i = pick(G, p_any, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t axes[LOOM_MAX_RANK];
  int n = 0;
  for (int d = 0; d < x.rank; d++)
    if (x.sh[d] == 1 && chance(G, 0.7)) axes[n++] = chance(G, 0.3) ? d - x.rank : d;
  loom_value_t out;
  if (n == 0) { /* nothing to drop: unsqueeze instead */
    if (x.rank >= 4) return false;
    int m = x.rank < 3 ? (int)irange(G, 1, 2) : 1;
    for (int k = 0; k < m; k++) axes[k] = irange(G, 0, x.rank + m - 1);
    if (m == 2 && axes[0] == axes[1]) axes[1] = (axes[0] + 1) % (x.rank + 2);
    return same_as(G, i, loom_unsqueeze(G->g, x.v, m, axes, &out), out, "unsqueeze") >= 0;
  }
  return same_as(G, i, loom_squeeze(G->g, x.v, chance(G, 0.2) ? 0 : n, axes, &out), out,
                 "squeeze") >= 0;
}

static bool op_pad(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int mode = (int)irange(G, 0, 2);
  int64_t pads[2 * LOOM_MAX_RANK], numel = 1;
  for (int d = 0; d < x.rank; d++) {
    int64_t most = mode == 1 ? (x.sh[d] - 1 < 2 ? x.sh[d] - 1 : 2) : 2;
    pads[d] = irange(G, 0, most), pads[x.rank + d] = irange(G, 0, most);
    numel *= x.sh[d] + pads[d] + pads[x.rank + d];
  }
  if (numel > RG_MAX_NUMEL) return false;
  double value = x.dt == LOOM_BOOL ? 1 : (double)irange(G, -4, 4) / 2;
  if (is_int(x.dt)) value = round(value);
  loom_value_t out;
  int r = same_as(G, i, loom_pad(G->g, x.v, pads, (loom_pad_mode_t)mode, value, &out), out, "pad");
  if (r >= 0 && mode == 0) G->v[r].lo = fmin(x.lo, value), G->v[r].hi = fmax(x.hi, value);
  return r >= 0;
}

static bool op_flip(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t axes[LOOM_MAX_RANK];
  int n = 0;
  for (int d = 0; d < x.rank; d++)
    if (chance(G, 0.5)) axes[n++] = d;
  if (!n) axes[n++] = x.rank - 1;
  loom_value_t out;
  return same_as(G, i, loom_flip(G->g, x.v, n, axes, &out), out, "flip") >= 0;
}

static bool op_split(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int axis = (int)irange(G, 0, x.rank - 1);
  int64_t d = x.sh[axis];
  if (d < 2) return false;
  int n = d >= 3 && chance(G, 0.5) ? 3 : 2;
  int64_t sizes[3], left = d;
  for (int k = 0; k < n - 1; k++) {
    sizes[k] = irange(G, 1, left - (n - 1 - k));
    left -= sizes[k];
  }
  sizes[n - 1] = left;
  loom_value_t outs[3];
  G->v[i].uses++;
  if (!check(G, loom_split(G->g, x.v, axis, n, sizes, outs), "split")) return false;
  cover("split");
  for (int k = 0; k < n; k++)
    if (push(G, outs[k], x.lo, x.hi, x.err) < 0) return false;
  return true;
}

static bool op_index_select(gen_t *G) {
  int i = pick(G, p_ranked, NULL);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int axis = (int)irange(G, 0, x.rank - 1);
  int64_t len = irange(G, 1, 5);
  int idx = leaf(G, chance(G, 0.5) ? LOOM_I64 : LOOM_I32, 1, &len, 0, (double)(x.sh[axis] - 1));
  if (idx < 0 || x.numel / x.sh[axis] * len > RG_MAX_NUMEL) return false;
  G->v[idx].uses++;
  loom_value_t out;
  return same_as(G, i, loom_index_select(G->g, x.v, G->v[idx].v, axis, &out), out,
                 "index_select") >= 0;
}

/* ---- Contractions ---------------------------------------------------------- */

static bool op_matmul(gen_t *G) {
  int i = pick(G, p_numeric, NULL);
  if (i < 0 || G->v[i].rank == 0 || G->v[i].dt == LOOM_I32) return false;
  i = is_float(G->v[i].dt) ? bounded(G, i, 4) : bounded(G, i, 8);
  if (i < 0) return false;
  rv_t a = G->v[i];
  int ta = a.rank >= 2 && chance(G, 0.3), tb = chance(G, 0.3);
  int64_t k = a.rank == 1 ? a.sh[0] : a.sh[a.rank - (ta ? 2 : 1)];
  int64_t m = a.rank == 1 ? 1 : a.sh[a.rank - (ta ? 1 : 2)], n = irange(G, 1, 9);
  /* b: batch dims that broadcast with a's, then (k, n) or (n, k). */
  int64_t sh[LOOM_MAX_RANK];
  int nb = 0, abatch = a.rank > 2 ? a.rank - 2 : 0;
  int bb = chance(G, 0.5) ? abatch : (int)irange(G, 0, abatch < 2 ? abatch + 1 : 2);
  int64_t batch = 1;
  for (int d = 0; d < bb; d++) {
    int ad = abatch - bb + d;
    sh[nb] = ad >= 0 ? (chance(G, 0.25) ? 1 : a.sh[ad]) : irange(G, 1, 3);
    if (ad >= 0 && a.sh[ad] == 1 && chance(G, 0.3)) sh[nb] = irange(G, 2, 3);
    nb++;
  }
  bool vec = bb == 0 && chance(G, 0.15);
  if (vec) tb = 0, sh[nb++] = k;
  else if (tb) sh[nb++] = n, sh[nb++] = k;
  else sh[nb++] = k, sh[nb++] = n;
  for (int d = 0; d < (abatch > bb ? abatch : bb); d++) batch *= 4;
  if (batch * m * n > RG_MAX_NUMEL * 4) return false;
  double blo = is_float(a.dt) ? -2 : -3, bhi = -blo;
  int b = leaf(G, a.dt, nb, sh, blo, bhi);
  if (b < 0) return false;
  rv_t y = G->v[b];
  double mo = (double)k * mag(&a) * mag(&y), u = unit(a.dt);
  if (is_int(a.dt) && mo > 1e6) return false;
  loom_value_t out;
  G->v[i].uses++, G->v[b].uses++;
  double err = (double)k * (mag(&y) * a.err + mag(&a) * y.err) +
               sum_err((double)k, mag(&a) * mag(&y), a.dt) + 2 * u * mo;
  return tame(G, node1(G, loom_matmul(G->g, a.v, y.v, ta, tb, &out), out, "matmul", -mo,
                       mo, err)) >= 0;
}

static bool p_image(const gen_t *G, const rv_t *x, const void *c) {
  (void)G, (void)c;
  return is_float(x->dt) && x->rank == 4 && x->sh[2] >= 2 && x->sh[3] >= 2 &&
         x->sh[1] <= 8;
}

static bool op_conv2d(gen_t *G) {
  int i = pick(G, p_image, NULL);
  if (i < 0) return false;
  i = bounded(G, i, 4);
  if (i < 0) return false;
  rv_t x = G->v[i];
  int64_t c = x.sh[1], groups = c % 2 == 0 && chance(G, 0.3) ? 2 : 1;
  int64_t o = groups * irange(G, 1, 3), kh = irange(G, 1, 3), kw = irange(G, 1, 3);
  loom_conv_params_t p = {0};
  p.stride[0] = irange(G, 1, 2), p.stride[1] = irange(G, 1, 2);
  p.dilation[0] = irange(G, 1, 2), p.dilation[1] = 1;
  for (int k = 0; k < 4; k++) p.pads[k] = irange(G, 0, 1);
  p.groups = groups;
  if (x.sh[2] + p.pads[0] + p.pads[2] < p.dilation[0] * (kh - 1) + 1 ||
      x.sh[3] + p.pads[1] + p.pads[3] < kw)
    return false;
  int64_t wsh[4] = {o, c / groups, kh, kw};
  int w = leaf(G, x.dt, 4, wsh, -1, 1);
  int has_bias = chance(G, 0.5);
  int bi = has_bias ? leaf(G, x.dt, 1, &o, -1, 1) : -1;
  if (w < 0 || (has_bias && bi < 0)) return false;
  double kk = (double)(c / groups * kh * kw), mo = kk * mag(&x) + (has_bias ? 1 : 0);
  loom_value_t out, none = {0};
  G->v[i].uses++, G->v[w].uses++;
  if (has_bias) G->v[bi].uses++;
  return tame(G, node1(G, loom_conv2d(G->g, x.v, G->v[w].v, has_bias, has_bias ? G->v[bi].v : none, &p, &out),
                       out, "conv2d", -mo, mo, kk * x.err + sum_err(kk, mag(&x), x.dt))) >= 0;
}

/* ---- The generator ---------------------------------------------------------- */

typedef struct op_kind {
  bool (*emit)(gen_t *G);
  int weight;
} op_kind_t;

static bool op_leaf(gen_t *G) { return new_leaf(G) >= 0; }

static const op_kind_t op_kinds[] = {
    {op_smooth, 14},  {op_exact_unary, 8}, {op_bool_unary, 2}, {op_binary, 22},
    {op_where, 3},    {op_cast, 5},        {op_reduce, 10},    {op_argreduce, 2},
    {op_cumsum, 2},   {op_softmax, 4},     {op_norm, 4},       {op_batch_norm, 1},
    {op_reshape, 4},  {op_transpose, 4},   {op_slice, 4},      {op_concat, 3},
    {op_expand, 2},   {op_squeeze, 3},     {op_pad, 3},        {op_flip, 2},
    {op_split, 2},    {op_index_select, 1}, {op_matmul, 5},    {op_conv2d, 2},
    {op_leaf, 4},
};

static const op_kind_t *rand_kind(gen_t *G) {
  int total = 0, n = (int)(sizeof op_kinds / sizeof *op_kinds);
  for (int i = 0; i < n; i++) total += op_kinds[i].weight;
  int64_t r = irange(G, 0, total - 1);
  for (int i = 0; i < n; i++) {
    if (r < op_kinds[i].weight) return &op_kinds[i];
    r -= op_kinds[i].weight;
  }
  return &op_kinds[0];
}

/* Graph outputs: sinks first, sometimes a value also used inside, or a
 * leaf, or the same value twice. */
static bool choose_outputs(gen_t *G) {
  int chosen[RG_MAX_OUTPUTS], n = 0;
  for (int i = G->n - 1; i >= 0 && n < 3; i--)
    if (!G->v[i].leaf && G->v[i].uses == 0 && (n == 0 || chance(G, 0.7))) chosen[n++] = i;
  if (n == 0 || chance(G, 0.2)) {
    int i = pick(G, p_any, NULL);
    if (i >= 0) chosen[n++] = i;
  }
  if (chance(G, 0.03)) chosen[n++] = chosen[0];
  for (int k = 0; k < n; k++) {
    if (!check(G, loom_graph_output(G->g, G->v[chosen[k]].v), "output")) return false;
    G->c->out_err[k] = G->v[chosen[k]].err;
  }
  G->c->n_outputs = n;
  return true;
}

loom_status_t rg_case_build(uint64_t seed, rg_case_t *c) {
  memset(c, 0, sizeof *c);
  c->seed = seed;
  gen_t *G = calloc(1, sizeof *G);
  if (!G) return LOOM_ERR_NOMEM;
  G->s = seed * 0x2545f4914f6cdd1dull + 1;
  G->c = c;
  if (!check(G, loom_graph_create(&G->g), "graph")) {
    free(G);
    return LOOM_ERR_NOMEM;
  }
  c->graph = G->g;
  int target = (int)irange(G, 5, 40);
  for (int k = (int)irange(G, 1, 3); k > 0; k--) new_leaf(G);
  for (int tries = 0; !G->failed && tries < 2000 && loom_graph_num_nodes(G->g) < target; tries++)
    if (G->n > RG_MAX_VALUES - 24) break;
    else rand_kind(G)->emit(G);
  if (!G->failed && loom_graph_num_nodes(G->g) == 0) op_binary(G);
  if (!G->failed) choose_outputs(G);
  if (!G->failed) check(G, loom_graph_verify(G->g), "verify");
  c->n_nodes = loom_graph_num_nodes(G->g);
  bool failed = G->failed;
  free(G);
  return failed ? LOOM_ERR_INVALID : LOOM_OK;
}

void rg_case_free(rg_case_t *c) {
  for (int i = 0; i < c->n_inputs; i++) {
    loom_tensor_destroy(c->inputs[i]);
    free(c->input_memory[i]);
  }
  loom_graph_destroy(c->graph);
  memset(c, 0, sizeof *c);
}

/* ---- The check ----------------------------------------------------------------- */

const char *rg_verdict_name(rg_verdict_t v) {
  static const char *names[] = {"pass",      "MISMATCH",    "COMPILE ERROR",
                                "RUN ERROR", "BUILD ERROR", "CODE LOST"};
  return (unsigned)v < RG_VERDICT_COUNT ? names[v] : "?";
}

static void print_graph(const rg_case_t *c, FILE *log) {
  char *text = NULL;
  if (c->graph && loom_graph_print(c->graph, &text) == LOOM_OK) fprintf(log, "%s", text);
  loom_free(text);
}

static void report(const rg_case_t *c, const rg_config_t *cfg, FILE *log, const char *fmt,
                   const char *a, const char *b) {
  if (!log) return;
  fprintf(log, "difftest seed %llu config %s: ", (unsigned long long)c->seed, cfg->name);
  fprintf(log, fmt, a, b);
  fprintf(log, "\n  reproduce: loom_difftest 1 %llu\n", (unsigned long long)c->seed);
  print_graph(c, log);
}

static double get(const loom_tensor_t *t, int64_t i) {
  double v = NAN;
  loom_tensor_get_f64(t, i, &v);
  return v;
}

/* The first element of got that differs from want beyond tolerance; -1. */
static int64_t first_diff(const loom_tensor_t *want, const loom_tensor_t *got, double err,
                          double *tol) {
  loom_dtype_t d = loom_tensor_dtype(want);
  for (int64_t i = 0; i < loom_tensor_numel(want); i++) {
    double w = get(want, i), g = get(got, i);
    *tol = err > 0 ? 8 * err + 4 * unit(d) * fabs(w) : 0;
    if (isnan(w) && isnan(g)) continue;
    if (!(fabs(g - w) <= *tol)) return i;
  }
  return -1;
}

static bool same_type(const loom_tensor_t *a, const loom_tensor_t *b) {
  if (loom_tensor_dtype(a) != loom_tensor_dtype(b) || loom_tensor_rank(a) != loom_tensor_rank(b))
    return false;
  for (int i = 0; i < loom_tensor_rank(a); i++)
    if (loom_tensor_dim(a, i) != loom_tensor_dim(b, i)) return false;
  return true;
}

static rg_verdict_t compare(const rg_case_t *c, const rg_config_t *cfg, int run,
                            loom_tensor_t **want, loom_tensor_t **got, FILE *log) {
  for (int k = 0; k < c->n_outputs; k++) {
    char what[160], nums[200];
    if (!same_type(want[k], got[k])) {
      snprintf(what, sizeof what, "output %d has the wrong type (run %d)", k, run);
      report(c, cfg, log, "%s%s", what, "");
      return RG_MISMATCH;
    }
    double tol;
    int64_t i = first_diff(want[k], got[k], c->out_err[k], &tol);
    if (i < 0) continue;
    snprintf(what, sizeof what, "output %d (%s, %lld elements) differs at flat index %lld, run %d: ",
             k, loom_dtype_name(loom_tensor_dtype(want[k])), (long long)loom_tensor_numel(want[k]),
             (long long)i, run);
    snprintf(nums, sizeof nums, "expected %.9g, got %.9g, tolerance %.3g", get(want[k], i),
             get(got[k], i), tol);
    report(c, cfg, log, "%s%s", what, nums);
    return RG_MISMATCH;
  }
  return RG_PASS;
}

static void destroy_all(loom_tensor_t **t, int n) {
  for (int i = 0; i < n; i++) {
    loom_tensor_destroy(t[i]);
    t[i] = NULL;
  }
}

/* Whether e lost generated code to a compiler or loader failure (reported);
 * a missing compiler is no loss here (the suite runs without one too). */
static bool code_lost(const rg_case_t *c, const rg_config_t *cfg, const loom_executable_t *e,
                      FILE *log) {
  loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
  if (!cfg->use_cc || loom_executable_info(e, &info) != LOOM_OK) return false;
  if (info.fallback != LOOM_FALLBACK_CC_FAILED && info.fallback != LOOM_FALLBACK_NO_MODULE)
    return false;
  report(c, cfg, log, "generated code lost (%s), steps fell back to reference kernels: %s",
         loom_fallback_name(info.fallback), info.fallback_reason);
  return true;
}

rg_verdict_t rg_case_check(rg_case_t *c, const rg_config_t *cfg, FILE *log) {
  loom_tensor_t *want[RG_MAX_OUTPUTS] = {0}, *got[RG_MAX_OUTPUTS] = {0};
  if (loom_interpret(c->graph, c->n_inputs, c->inputs, c->n_outputs, want) != LOOM_OK) {
    report(c, cfg, log, "the interpreter failed: %s%s", loom_last_error(), "");
    return RG_RUN_ERROR;
  }
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.fusion = cfg->fusion, o.passes = cfg->passes, o.use_cc = cfg->use_cc;
  o.num_threads = cfg->threads;
  loom_executable_t *e = NULL;
  rg_verdict_t v = RG_PASS;
  loom_status_t s = loom_compile(c->graph, &o, &e);
  if (s != LOOM_OK) {
    report(c, cfg, log, "loom_compile failed: %s: %s", loom_status_name(s), loom_last_error());
    v = RG_COMPILE_ERROR;
  }
  bool lost = v == RG_PASS && code_lost(c, cfg, e, log);
  for (int k = 0; v == RG_PASS && k < c->n_outputs; k++)
    if (loom_executable_new_output(e, k, &got[k]) != LOOM_OK) {
      report(c, cfg, log, "loom_executable_new_output failed: %s%s", loom_last_error(), "");
      v = RG_RUN_ERROR;
    }
  /* Twice: a replay must give the same answer as the first run. */
  for (int run = 0; v == RG_PASS && run < 2; run++) {
    s = loom_executable_run(e, c->n_inputs, c->inputs, c->n_outputs, got);
    if (s != LOOM_OK) {
      report(c, cfg, log, "loom_executable_run failed: %s: %s", loom_status_name(s),
             loom_last_error());
      v = RG_RUN_ERROR;
    } else {
      v = compare(c, cfg, run, want, got, log);
    }
  }
  destroy_all(got, c->n_outputs);
  destroy_all(want, c->n_outputs);
  loom_executable_destroy(e);
  return v == RG_PASS && lost ? RG_CODE_LOST : v;
}

int rg_configs_for_seed(uint64_t seed, rg_config_t *out, int max) {
  int n = 0;
  int threads = seed % 3 == 0 ? 1 : 0;
  if (n < max) out[n++] = (rg_config_t){"default", 1, 1, 1, threads};
  if (n < max) out[n++] = (rg_config_t){"reference-steps", 0, 1, 0, 2};
  if (seed % 4 == 1 && n < max) out[n++] = (rg_config_t){"unfused", 0, 1, 1, 2};
  if (seed % 4 == 3 && n < max) out[n++] = (rg_config_t){"no-passes", 1, 0, 1, 0};
  return n;
}

rg_verdict_t rg_run_seed(uint64_t seed, FILE *log) {
  rg_case_t c;
  if (rg_case_build(seed, &c) != LOOM_OK) {
    if (log)
      fprintf(log, "difftest seed %llu: building the graph failed: %s\n",
              (unsigned long long)seed, c.error);
    if (log) print_graph(&c, log);
    rg_case_free(&c);
    return RG_BUILD_ERROR;
  }
  rg_config_t cfg[4];
  int n = rg_configs_for_seed(seed, cfg, 4);
  rg_verdict_t worst = RG_PASS;
  for (int i = 0; i < n; i++) {
    rg_verdict_t v = rg_case_check(&c, &cfg[i], log);
    if (v != RG_PASS && worst == RG_PASS) worst = v;
  }
  rg_case_free(&c);
  return worst;
}
