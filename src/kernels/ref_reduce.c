/* Reductions, scans and top-k: reference kernels. A reduction walks, for
 * each output element, the input elements that fold into it. */
#include <math.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "kernels/ref.h"

/* ---- Which input elements each output element reads ---------------------- */

/* Output element o reads input elements kept(o) + red(j), j < n_red, where
 * kept and red map a row-major position over the kept and the reduced
 * dims to an offset in the (contiguous) input. */
typedef struct reduce_plan {
  int n_kept, n_red_dims;
  int64_t kept_shape[LOOM_MAX_RANK], kept_stride[LOOM_MAX_RANK];
  int64_t red_shape[LOOM_MAX_RANK], red_stride[LOOM_MAX_RANK];
  int64_t n_out, n_red;
} reduce_plan_t;

static void plan_init(const loom_tensor_t *x, const bool *red,
                      reduce_plan_t *p) {
  int64_t stride[LOOM_MAX_RANK], step = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    stride[d] = step;
    step *= x->shape[d];
  }
  p->n_kept = p->n_red_dims = 0;
  p->n_out = p->n_red = 1;
  for (int d = 0; d < x->rank; d++) {
    if (red[d]) {
      p->red_shape[p->n_red_dims] = x->shape[d];
      p->red_stride[p->n_red_dims++] = stride[d];
      p->n_red *= x->shape[d];
    } else {
      p->kept_shape[p->n_kept] = x->shape[d];
      p->kept_stride[p->n_kept++] = stride[d];
      p->n_out *= x->shape[d];
    }
  }
}

/* Offset of row-major position i over shape, laid out by stride. Only
 * called with i < the shape's element count, so no dim is 0. */
static int64_t strided_offset(int rank, const int64_t *shape,
                              const int64_t *stride, int64_t i) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; d--) {
    off += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
  return off;
}

/* The input elements folding into one output element. */
typedef struct slice {
  const loom_tensor_t *x;
  const reduce_plan_t *p;
  int64_t base; /* offset of the output element's first input element */
  const ir_attrs_t *attrs;
} slice_t;

static int64_t slice_at(const slice_t *s, int64_t j) {
  return s->base + strided_offset(s->p->n_red_dims, s->p->red_shape,
                                  s->p->red_stride, j);
}
static double slice_get(const slice_t *s, int64_t j) {
  return ref_get(s->x, slice_at(s, j));
}
static int64_t slice_geti(const slice_t *s, int64_t j) {
  return ref_geti(s->x, slice_at(s, j));
}

/* Axes named by attribute "axes" (all when absent); the shape rule has
 * checked them. A scalar has no dims to mark. */
static void axes_mask(const ir_attrs_t *a, int rank, bool *red) {
  const int64_t *axes = NULL;
  int n = ir_attr_ints(a, "axes", &axes);
  for (int d = 0; d < LOOM_MAX_RANK; d++) red[d] = n < 0 && d < rank;
  for (int i = 0; i < n && rank > 0; i++)
    red[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
}

/* ---- Folds --------------------------------------------------------------- */

typedef double (*fold_f)(const slice_t *s);
typedef int64_t (*fold_i)(const slice_t *s);

typedef struct reducer {
  fold_f f;
  fold_i i;      /* NULL: the op has no integer outputs */
  bool nonempty; /* zero elements have no answer */
} reducer_t;

static double sum_f(const slice_t *s) {
  double acc = 0;
  for (int64_t j = 0; j < s->p->n_red; j++) acc += slice_get(s, j);
  return acc;
}

/* Integer sums and products wrap: unsigned arithmetic, like the dtype. */
static int64_t sum_i(const slice_t *s) {
  uint64_t acc = 0;
  for (int64_t j = 0; j < s->p->n_red; j++) acc += (uint64_t)slice_geti(s, j);
  return (int64_t)acc;
}

static double prod_f(const slice_t *s) {
  double acc = 1;
  for (int64_t j = 0; j < s->p->n_red; j++) acc *= slice_get(s, j);
  return acc;
}

static int64_t prod_i(const slice_t *s) {
  uint64_t acc = 1;
  for (int64_t j = 0; j < s->p->n_red; j++) acc *= (uint64_t)slice_geti(s, j);
  return (int64_t)acc;
}

static double mean_f(const slice_t *s) {
  /* Zero elements: 0/0, NaN. */
  return sum_f(s) / (double)s->p->n_red;
}

/* max and min propagate NaN, like torch. */
static double extreme_f(const slice_t *s, bool want_max) {
  if (s->p->n_red == 0) return want_max ? -INFINITY : INFINITY; /* max's empty_ok */
  double best = slice_get(s, 0);
  for (int64_t j = 1; j < s->p->n_red && !isnan(best); j++) {
    double v = slice_get(s, j);
    if (isnan(v) || (want_max ? v > best : v < best)) best = v;
  }
  return best;
}

static int64_t extreme_i(const slice_t *s, bool want_max) {
  if (s->p->n_red == 0) return want_max ? INT64_MIN : INT64_MAX; /* max's empty_ok */
  int64_t best = slice_geti(s, 0);
  for (int64_t j = 1; j < s->p->n_red; j++) {
    int64_t v = slice_geti(s, j);
    if (want_max ? v > best : v < best) best = v;
  }
  return best;
}

static double max_f(const slice_t *s) { return extreme_f(s, true); }
static double min_f(const slice_t *s) { return extreme_f(s, false); }
static int64_t max_i(const slice_t *s) { return extreme_i(s, true); }
static int64_t min_i(const slice_t *s) { return extreme_i(s, false); }

/* m + log(sum e^(x-m)) with m the maximum never overflows; an infinite or
 * NaN m is the answer itself (all -inf gives -inf, as does nothing). */
static double logsumexp_f(const slice_t *s) {
  double m = -INFINITY;
  for (int64_t j = 0; j < s->p->n_red; j++) {
    double v = slice_get(s, j);
    if (isnan(v)) return v;
    if (v > m) m = v;
  }
  if (isinf(m)) return m;
  double acc = 0;
  for (int64_t j = 0; j < s->p->n_red; j++) acc += exp(slice_get(s, j) - m);
  return m + log(acc);
}

/* Two passes (mean first) rather than sum of squares, which cancels. A
 * correction of n or more divides by 0, giving inf or NaN, like torch. */
static double variance_f(const slice_t *s) {
  double mean = mean_f(s), acc = 0;
  for (int64_t j = 0; j < s->p->n_red; j++) {
    double d = slice_get(s, j) - mean;
    acc += d * d;
  }
  double n = (double)s->p->n_red;
  double correction = (double)ir_op_int(IR_OP_VARIANCE, s->attrs, "correction");
  return acc / fmax(n - correction, 0.0);
}

static loom_status_t run_reduce(ref_call_t *c, bool *red, const reducer_t *r,
                                const char *what) {
  const loom_tensor_t *x = c->in[0];
  loom_tensor_t *y = c->out[0];
  reduce_plan_t p;
  plan_init(x, red, &p);
  if (r->nonempty && p.n_red == 0 && !ir_attr_int(c->attrs, "empty_ok", 0))
    return loom_fail(LOOM_ERR_VALUE, "%s: reduces zero elements, which have no %s",
                     ref_name(c), what);
  /* Folds compute in the output's domain: int64 for integer outputs
   * (integer inputs, or argmax's indices), double for float ones. */
  bool ints = !dtype_is_float(y->dtype) && r->i;
  for (int64_t o = 0; o < p.n_out; o++) {
    slice_t s = {.x = x, .p = &p, .attrs = c->attrs,
                 .base = strided_offset(p.n_kept, p.kept_shape, p.kept_stride, o)};
    if (ints) ref_seti(y, o, r->i(&s));
    else ref_set(y, o, r->f(&s));
  }
  return LOOM_OK;
}

#define REDUCE_KERNEL(name, float_fold, int_fold, nonempty, what)            \
  loom_status_t ref_##name(ref_call_t *c) {                                  \
    static const reducer_t r = {float_fold, int_fold, nonempty};             \
    bool red[LOOM_MAX_RANK];                                                 \
    axes_mask(c->attrs, c->in[0]->rank, red);                                \
    return run_reduce(c, red, &r, what);                                     \
  }

REDUCE_KERNEL(sum, sum_f, sum_i, false, "")
REDUCE_KERNEL(prod, prod_f, prod_i, false, "")
REDUCE_KERNEL(mean, mean_f, NULL, false, "")
REDUCE_KERNEL(max, max_f, max_i, true, "maximum")
REDUCE_KERNEL(min, min_f, min_i, true, "minimum")
REDUCE_KERNEL(logsumexp, logsumexp_f, NULL, false, "")
REDUCE_KERNEL(variance, variance_f, NULL, false, "")

/* ---- argmax, argmin ------------------------------------------------------ */

/* Whether element j beats the best so far; NaN beats everything and the
 * first NaN stays (numpy). Ties keep the earlier index. */
static bool arg_beats(const slice_t *s, int64_t j, int64_t best,
                      bool want_max) {
  if (!dtype_is_float(s->x->dtype)) {
    int64_t a = slice_geti(s, j), b = slice_geti(s, best);
    return want_max ? a > b : a < b;
  }
  double a = slice_get(s, j), b = slice_get(s, best);
  if (isnan(b)) return false;
  if (isnan(a)) return true;
  return want_max ? a > b : a < b;
}

/* The position j within the slice is the index asked for: along the axis,
 * or into the flattened tensor when every dim is reduced. */
static int64_t arg_extreme(const slice_t *s, bool want_max) {
  int64_t best = 0;
  for (int64_t j = 1; j < s->p->n_red; j++)
    if (arg_beats(s, j, best, want_max)) best = j;
  return best;
}

static int64_t argmax_i(const slice_t *s) { return arg_extreme(s, true); }
static int64_t argmin_i(const slice_t *s) { return arg_extreme(s, false); }

static void arg_mask(const ir_attrs_t *a, int rank, bool *red) {
  bool all = !ir_attrs_find(a, "axis");
  int64_t axis = ir_attr_int(a, "axis", 0);
  for (int d = 0; d < LOOM_MAX_RANK; d++)
    red[d] = d < rank && (all || d == (axis < 0 ? axis + rank : axis));
}

/* The output is i64 whatever the input: only an integer fold. */
#define ARG_KERNEL(name, what)                                               \
  loom_status_t ref_##name(ref_call_t *c) {                                  \
    static const reducer_t r = {NULL, name##_i, true};                       \
    bool red[LOOM_MAX_RANK];                                                 \
    arg_mask(c->attrs, c->in[0]->rank, red);                                 \
    return run_reduce(c, red, &r, what);                                     \
  }

ARG_KERNEL(argmax, "maximum")
ARG_KERNEL(argmin, "minimum")

/* ---- Lines along one axis (cumsum, topk) --------------------------------- */

/* x seen as (outer, n, inner) around axis: element t of line l sits at
 * line_at(&lines, l, t). */
typedef struct lines {
  int64_t outer, n, inner;
} lines_t;

static lines_t lines_of(const loom_tensor_t *x, int64_t axis) {
  lines_t L = {1, 1, 1};
  if (x->rank == 0) return L;
  int a = (int)(axis < 0 ? axis + x->rank : axis);
  for (int d = 0; d < x->rank; d++) {
    if (d < a) L.outer *= x->shape[d];
    else if (d == a) L.n = x->shape[d];
    else L.inner *= x->shape[d];
  }
  return L;
}

static int64_t line_at(const lines_t *L, int64_t n, int64_t l, int64_t t) {
  return (l / L->inner * n + t) * L->inner + l % L->inner;
}

/* ---- cumsum -------------------------------------------------------------- */

/* An exclusive scan writes the sum before adding the element. */
static void scan_f(const loom_tensor_t *x, loom_tensor_t *y, const lines_t *L,
                   int64_t l, bool exclusive, bool reverse) {
  double acc = 0;
  for (int64_t t = 0; t < L->n; t++) {
    int64_t at = line_at(L, L->n, l, reverse ? L->n - 1 - t : t);
    double v = ref_get(x, at);
    if (!exclusive) acc += v;
    ref_set(y, at, acc);
    if (exclusive) acc += v;
  }
}

static void scan_i(const loom_tensor_t *x, loom_tensor_t *y, const lines_t *L,
                   int64_t l, bool exclusive, bool reverse) {
  uint64_t acc = 0;
  for (int64_t t = 0; t < L->n; t++) {
    int64_t at = line_at(L, L->n, l, reverse ? L->n - 1 - t : t);
    uint64_t v = (uint64_t)ref_geti(x, at);
    if (!exclusive) acc += v;
    ref_seti(y, at, (int64_t)acc);
    if (exclusive) acc += v;
  }
}

loom_status_t ref_cumsum(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  lines_t L = lines_of(x, ir_attr_int(c->attrs, "axis", 0));
  bool exclusive = ir_op_int(c->node->op, c->attrs, "exclusive") != 0;
  bool reverse = ir_op_int(c->node->op, c->attrs, "reverse") != 0;
  bool ints = !dtype_is_float(x->dtype);
  for (int64_t l = 0; l < L.outer * L.inner; l++) {
    if (ints) scan_i(x, c->out[0], &L, l, exclusive, reverse);
    else scan_f(x, c->out[0], &L, l, exclusive, reverse);
  }
  return LOOM_OK;
}

/* ---- topk ---------------------------------------------------------------- */

/* Sort key of one element: floats in f (i 0); integers in both, f for the
 * coarse order and i exact, since int64 does not fit a double. */
typedef struct topk_item {
  double f;
  int64_t i;
  int64_t pos; /* position along the axis */
} topk_item_t;

/* Ascending value order with NaN above everything, as in argmax. */
static int value_cmp(const topk_item_t *a, const topk_item_t *b) {
  bool na = isnan(a->f), nb = isnan(b->f);
  if (na || nb) return (int)na - (int)nb;
  if (a->f != b->f) return a->f < b->f ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

/* Equal values keep their order along the axis: a stable sort. */
static int pos_cmp(const topk_item_t *a, const topk_item_t *b) {
  return (a->pos > b->pos) - (a->pos < b->pos);
}

static int cmp_descending(const void *pa, const void *pb) {
  int k = value_cmp(pb, pa);
  return k ? k : pos_cmp(pa, pb);
}

static int cmp_ascending(const void *pa, const void *pb) {
  int k = value_cmp(pa, pb);
  return k ? k : pos_cmp(pa, pb);
}

static void topk_line(ref_call_t *c, const lines_t *L, int64_t l, int64_t k, bool largest,
                      topk_item_t *items) {
  const loom_tensor_t *x = c->in[0];
  bool ints = !dtype_is_float(x->dtype);
  for (int64_t t = 0; t < L->n; t++) {
    int64_t at = line_at(L, L->n, l, t);
    items[t].i = ints ? ref_geti(x, at) : 0;
    items[t].f = ints ? (double)items[t].i : ref_get(x, at);
    items[t].pos = t;
  }
  int (*cmp)(const void *, const void *) = largest ? cmp_descending : cmp_ascending;
  if (k > 8) {
    qsort(items, (size_t)L->n, sizeof *items, cmp);
  } else {
    /* The first k of the same order, by selection: a router's top 2 of 8
     * experts per token spent most of its time in qsort's calls. The
     * order is total (positions break ties), so the result is the same. */
    for (int64_t t = 0; t < k; t++) {
      int64_t best = t;
      for (int64_t u = t + 1; u < L->n; u++)
        if (cmp(&items[u], &items[best]) < 0) best = u;
      topk_item_t swap = items[t];
      items[t] = items[best];
      items[best] = swap;
    }
  }
  for (int64_t t = 0; t < k; t++) {
    int64_t out = line_at(L, k, l, t);
    ref_copy_elem(c->out[0], out, x, line_at(L, L->n, l, items[t].pos));
    ref_seti(c->out[1], out, items[t].pos);
  }
}

loom_status_t ref_topk(ref_call_t *c) {
  const loom_tensor_t *x = c->in[0];
  lines_t L = lines_of(x, ir_op_int(c->node->op, c->attrs, "axis"));
  int64_t k = ir_attr_int(c->attrs, "k", 0);
  if (k > L.n)
    return loom_fail(LOOM_ERR_VALUE, "topk: k %lld is larger than the axis (size %lld)",
                     (long long)k, (long long)L.n);
  topk_item_t *items = ref_scratch(c, sizeof *items * (size_t)L.n);
  if (!items) return loom_fail(LOOM_ERR_NOMEM, "topk: out of memory for a line of %lld",
                               (long long)L.n);
  /* Looked up once: a router's top 2 of 8 runs a line per token. */
  bool largest = ir_op_int(c->node->op, c->attrs, "largest") != 0;
  for (int64_t l = 0; l < L.outer * L.inner; l++) topk_line(c, &L, l, k, largest, items);
  ref_scratch_release(c, items);
  return LOOM_OK;
}
