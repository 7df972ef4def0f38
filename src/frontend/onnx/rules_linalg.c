/* Rules for ONNX's linear algebra beyond MatMul and Gemm: Einsum, lowered
 * for any equation to diagonals (gather), sums, transposes, reshapes and
 * batched matmuls; and Det, by Gaussian elimination unrolled over a static
 * matrix size. */
#include <string.h>

#include "frontend/onnx/onnx_import.h"

/* ---- Einsum ------------------------------------------------------------------
 * Each operand is a value with one label per dim: letters, and for the dims
 * an ellipsis covers, the digits '0'.. aligned right across operands (so
 * that they broadcast as NumPy's do). */

#define MAX_TERMS 16

typedef struct term {
  loom_value_t v;
  char labels[LOOM_MAX_RANK + 1];
} term_t;

static int count_of(const char *s, char c) {
  int k = 0;
  for (; *s; s++) k += *s == c;
  return k;
}

/* One operand's subscript (spaces removed) with its ellipsis expanded to
 * the last `dots` of the `width` ellipsis labels. */
static loom_status_t expand_term(const ox_node_t *n, const char *sub, int rank, int width,
                                 char *out) {
  const char *dots = strstr(sub, "...");
  int letters = (int)strlen(sub) - (dots ? 3 : 0);
  int ell = dots ? rank - letters : 0;
  if (ell < 0 || (!dots && letters != rank) || ell > width || rank > LOOM_MAX_RANK)
    return ox_fail(n, LOOM_ERR_SHAPE, "subscript '%s' does not fit an operand of rank %d", sub,
                   rank);
  int k = 0;
  for (const char *p = sub; *p; p++) {
    if (p == dots) {
      for (int e = 0; e < ell; e++) out[k++] = (char)('0' + width - ell + e);
      p += 2;
    } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
      out[k++] = *p;
    } else {
      return ox_fail(n, LOOM_ERR_FORMAT, "subscript '%s' has '%c'", sub, *p);
    }
  }
  out[k] = 0;
  return LOOM_OK;
}

/* ONNX's implicit output: the ellipsis, then the letters used once, sorted. */
static void implicit_output(const term_t *t, int n_terms, int width, char *out) {
  int k = 0;
  for (int e = 0; e < width; e++) out[k++] = (char)('0' + e);
  for (char c = 'A'; c <= 'z'; c++) {
    int uses = 0;
    for (int i = 0; i < n_terms; i++) uses += count_of(t[i].labels, c);
    if (uses == 1 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) out[k++] = c;
  }
  out[k] = 0;
}

/* The diagonal over t's two dims labelled c: both moved last, flattened,
 * and every (size + 1)-th entry gathered. */
static loom_status_t take_diagonal(ox_node_t *n, term_t *t, char c) {
  int rank = (int)strlen(t->labels), p = -1, q = -1;
  for (int d = 0; d < rank; d++)
    if (t->labels[d] == c) *(p < 0 ? &p : &q) = d;
  loom_dim_t dims[LOOM_MAX_RANK];
  LOOM_TRY(ox_dims(n, t->v, dims, &rank));
  if (dims[p] < 0 || dims[p] != dims[q])
    return ox_fail(n, LOOM_ERR_SHAPE, "the dims labelled '%c' differ or are symbolic", c);
  int64_t perm[LOOM_MAX_RANK], size = dims[p];
  loom_dim_t shape[LOOM_MAX_RANK];
  char labels[LOOM_MAX_RANK + 1];
  int k = 0;
  for (int d = 0; d < rank; d++)
    if (d != p && d != q) {
      labels[k] = t->labels[d];
      shape[k] = dims[d];
      perm[k++] = d;
    }
  perm[k] = p;
  perm[k + 1] = q;
  labels[k] = c;
  labels[k + 1] = 0;
  shape[k] = size * size;
  loom_value_t v, at;
  LOOM_TRY(loom_transpose(n->g, t->v, perm, &v));
  LOOM_TRY(loom_reshape(n->g, v, k + 1, shape, &v));
  LOOM_TRY(loom_arange(n->g, 0, (double)(size * size), (double)(size + 1), LOOM_I64, &at));
  LOOM_TRY(loom_gather(n->g, v, at, k, &t->v));
  ox_copy(t->labels, labels, sizeof labels);
  return LOOM_OK;
}

/* Sums t over the labels `keep` does not hold; integers stay in their dtype. */
static loom_status_t sum_unneeded(ox_node_t *n, term_t *t, const char *keep) {
  int64_t axes[LOOM_MAX_RANK];
  int na = 0, k = 0;
  for (int d = 0; t->labels[d]; d++)
    if (strchr(keep, t->labels[d])) t->labels[k++] = t->labels[d];
    else axes[na++] = d;
  t->labels[k] = 0;
  if (!na) return LOOM_OK;
  loom_dtype_t dt = ox_dtype(n, t->v);
  LOOM_TRY(loom_sum(n->g, t->v, na, axes, 0, &t->v));
  return ox_dtype(n, t->v) == dt ? LOOM_OK : loom_cast(n->g, t->v, dt, &t->v);
}

/* A label's size in t, or 0 when t has no such label. */
static loom_dim_t label_dim(const ox_node_t *n, const term_t *t, char c) {
  const char *at = strchr(t->labels, c);
  return at ? ox_dim(n, t->v, (int)(at - t->labels)) : 0;
}

/* Broadcasts a's and b's dims of one label where one of them is 1. */
static loom_status_t match_dims(ox_node_t *n, term_t *a, term_t *b) {
  for (int pass = 0; pass < 2; pass++) {
    term_t *x = pass ? b : a, *y = pass ? a : b;
    loom_dim_t dims[LOOM_MAX_RANK];
    int rank, grow = 0;
    LOOM_TRY(ox_dims(n, x->v, dims, &rank));
    for (int d = 0; d < rank; d++) {
      loom_dim_t other = label_dim(n, y, x->labels[d]);
      if (!other || other == dims[d] || other == 1) continue;
      if (dims[d] != 1)
        return ox_fail(n, LOOM_ERR_SHAPE, "the dims labelled '%c' do not broadcast", x->labels[d]);
      dims[d] = other;
      grow = 1;
    }
    if (grow) LOOM_TRY(loom_expand(n->g, x->v, rank, dims, &x->v));
  }
  return LOOM_OK;
}

/* t transposed to the labels of groups g[0..n_groups-1] in turn and
 * reshaped to one dim per group (the product of its dims). */
static loom_status_t group_dims(ox_node_t *n, const term_t *t, const char *const *groups,
                                int n_groups, loom_value_t *out) {
  int64_t perm[LOOM_MAX_RANK];
  loom_dim_t shape[3];
  int k = 0;
  for (int i = 0; i < n_groups; i++) {
    shape[i] = 1;
    for (const char *c = groups[i]; *c; c++) {
      perm[k] = strchr(t->labels, *c) - t->labels;
      LOOM_TRY(loom_dim_mul(n->g, shape[i], ox_dim(n, t->v, (int)perm[k]), &shape[i]));
      k++;
    }
  }
  loom_value_t v;
  LOOM_TRY(loom_transpose(n->g, t->v, perm, &v));
  return loom_reshape(n->g, v, n_groups, shape, out);
}

/* a and b contracted over the labels they share that `keep` does not
 * hold, as (batch, M, K) @ (batch, K, N); the result is labelled batch,
 * then a's own labels, then b's. */
static loom_status_t contract(ox_node_t *n, term_t *a, const term_t *b_in, const char *keep) {
  term_t b = *b_in;
  char batch[LOOM_MAX_RANK + 1] = "", sum[LOOM_MAX_RANK + 1] = "";
  char own_a[LOOM_MAX_RANK + 1] = "", own_b[LOOM_MAX_RANK + 1] = "";
  for (const char *c = a->labels; *c; c++) {
    char *into = !strchr(b.labels, *c) ? own_a : strchr(keep, *c) ? batch : sum;
    into[strlen(into)] = *c;
  }
  for (const char *c = b.labels; *c; c++)
    if (!strchr(a->labels, *c)) own_b[strlen(own_b)] = *c;
  LOOM_TRY(match_dims(n, a, &b));
  loom_dim_t out_dims[LOOM_MAX_RANK];
  char labels[LOOM_MAX_RANK + 1];
  int rank = (int)(strlen(batch) + strlen(own_a) + strlen(own_b));
  if (rank > LOOM_MAX_RANK) return ox_fail(n, LOOM_ERR_SHAPE, "an intermediate of rank %d", rank);
  strcat(strcat(strcpy(labels, batch), own_a), own_b);
  for (int d = 0; d < rank; d++) {
    term_t *from = strchr(a->labels, labels[d]) ? a : &b;
    out_dims[d] = label_dim(n, from, labels[d]);
  }
  const char *ga[3] = {batch, own_a, sum}, *gb[3] = {batch, sum, own_b};
  loom_value_t x, y, z;
  LOOM_TRY(group_dims(n, a, ga, 3, &x));
  LOOM_TRY(group_dims(n, &b, gb, 3, &y));
  LOOM_TRY(loom_matmul(n->g, x, y, 0, 0, &z));
  LOOM_TRY(loom_reshape(n->g, z, rank, out_dims, &a->v));
  ox_copy(a->labels, labels, sizeof labels);
  return LOOM_OK;
}

/* The labels of every operand from `from` on but `skip`, and the output's. */
static void labels_used(const term_t *t, int n_terms, int from, int skip, const char *output,
                        char *out) {
  strcpy(out, output);
  for (int j = from; j < n_terms; j++)
    if (j != skip) strcat(out, t[j].labels);
}

/* The operands split at the commas (an operand may be empty: a scalar)
 * and the output after "->" (NULL when implicit). */
static loom_status_t split_equation(ox_node_t *n, char *eq, char **subs, char **output) {
  char *arrow = strstr(eq, "->");
  *output = NULL;
  if (arrow) {
    *arrow = 0;
    *output = arrow + 2;
  }
  int i = 0;
  for (char *s = eq;; s++) {
    if (i == n->n_in)
      return ox_fail(n, LOOM_ERR_FORMAT, "the equation has more operands than %d inputs", n->n_in);
    subs[i++] = s;
    s = strchr(s, ',');
    if (!s) break;
    *s = 0;
  }
  if (i != n->n_in)
    return ox_fail(n, LOOM_ERR_FORMAT, "the equation has %d operands for %d inputs", i, n->n_in);
  return LOOM_OK;
}

static int ellipsis_rank(const char *sub, int rank) {
  return strstr(sub, "...") ? rank - ((int)strlen(sub) - 3) : 0;
}

static loom_status_t parse_einsum(ox_node_t *n, term_t *t, char *output) {
  char eq[256], buf[256], *subs[MAX_TERMS], *out_sub;
  const char *given = ox_string(n, "equation", "", buf, sizeof buf);
  int k = 0, width = 0;
  for (const char *p = given; *p && k < 255; p++)
    if (*p != ' ') eq[k++] = *p;
  eq[k] = 0;
  LOOM_TRY(split_equation(n, eq, subs, &out_sub));
  for (int i = 0; i < n->n_in; i++) {
    int ell = ellipsis_rank(subs[i], ox_rank(n, n->in[i]));
    if (ell > width) width = ell;
  }
  for (int i = 0; i < n->n_in; i++) {
    t[i].v = n->in[i];
    LOOM_TRY(expand_term(n, subs[i], ox_rank(n, n->in[i]), width, t[i].labels));
  }
  if (!out_sub) {
    implicit_output(t, n->n_in, width, output);
    return LOOM_OK;
  }
  if (width > 0 && !strstr(out_sub, "..."))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "an output without the operands' ellipsis");
  int rank = (int)strlen(out_sub) - (strstr(out_sub, "...") ? 3 : 0) + width;
  return expand_term(n, out_sub, rank, width, output);
}

/* Checks that each output label is in some operand, once. */
static loom_status_t check_output(ox_node_t *n, const term_t *t, const char *output) {
  for (const char *c = output; *c; c++) {
    int found = 0;
    for (int i = 0; i < n->n_in; i++) found |= strchr(t[i].labels, *c) != NULL;
    if (!found || count_of(output, *c) > 1)
      return ox_fail(n, LOOM_ERR_FORMAT, "output label '%c' is %s", *c,
                     found ? "repeated" : "in no operand");
  }
  return LOOM_OK;
}

loom_status_t ox_einsum(ox_node_t *n) {
  if (n->n_in < 1 || n->n_in > MAX_TERMS)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%d operands (1..%d)", n->n_in, MAX_TERMS);
  for (int i = 0; i < n->n_in; i++) LOOM_TRY(ox_need(n, i));
  term_t t[MAX_TERMS];
  char output[LOOM_MAX_RANK + 1], keep[(MAX_TERMS + 1) * LOOM_MAX_RANK + 1];
  LOOM_TRY(parse_einsum(n, t, output));
  LOOM_TRY(check_output(n, t, output));
  /* Each operand alone: its diagonals, and sums over labels used nowhere else. */
  for (int i = 0; i < n->n_in; i++) {
    for (int d = 0; t[i].labels[d];)
      if (count_of(t[i].labels, t[i].labels[d]) > 1) LOOM_TRY(take_diagonal(n, &t[i], t[i].labels[d]));
      else d++;
    labels_used(t, n->n_in, 0, i, output, keep);
    LOOM_TRY(sum_unneeded(n, &t[i], keep));
  }
  /* Then left to right, contracting what no later operand or the output uses. */
  for (int i = 1; i < n->n_in; i++) {
    labels_used(t, n->n_in, i, -1, output, keep);
    LOOM_TRY(sum_unneeded(n, &t[0], keep));
    labels_used(t, n->n_in, i + 1, -1, output, keep);
    LOOM_TRY(contract(n, &t[0], &t[i], keep));
  }
  LOOM_TRY(sum_unneeded(n, &t[0], output));
  int64_t perm[LOOM_MAX_RANK];
  int rank = (int)strlen(output);
  for (int d = 0; d < rank; d++) perm[d] = strchr(t[0].labels, output[d]) - t[0].labels;
  return loom_transpose(n->g, t[0].v, rank ? perm : NULL, &n->out[0]);
}

/* ---- Det ---------------------------------------------------------------------- */

/* Matrices larger than this are refused: the elimination is unrolled. */
#define MAX_DET 64

static loom_status_t cut(ox_node_t *n, loom_value_t x, int64_t axis, int64_t from, int64_t to,
                         loom_value_t *out) {
  return loom_slice(n->g, x, 1, &from, &to, &axis, NULL, out);
}

/* One step of Gaussian elimination with partial pivoting on a (.., m, m):
 * det times the pivot (negated when rows swap), and a becomes the (m-1)
 * square left below and right of the pivot. The pivot row is picked by
 * a comparison with argmax's index, so every batch pivots on its own. */
static loom_status_t eliminate(ox_node_t *n, loom_value_t *a, int64_t m, int rank,
                               loom_value_t *det) {
  loom_graph_t *g = n->g;
  loom_value_t col, p, rows, pick, zero, prow, pivot, neg, swapped;
  LOOM_TRY(cut(n, *a, -1, 0, 1, &col));
  LOOM_TRY(loom_abs(g, col, &col));
  LOOM_TRY(loom_argmax(g, col, 1, -2, 1, &p));
  LOOM_TRY(ox_iota(n, m, rank - 2, rank, &rows));
  LOOM_TRY(loom_eq(g, rows, p, &pick));
  LOOM_TRY(ox_like(n, *a, 0, &zero));
  LOOM_TRY(loom_where(g, pick, *a, zero, &prow));
  int64_t row_axis = -2;
  LOOM_TRY(loom_sum(g, prow, 1, &row_axis, 1, &prow));
  LOOM_TRY(cut(n, prow, -1, 0, 1, &pivot));
  LOOM_TRY(loom_mul(g, *det, pivot, det));
  LOOM_TRY(loom_neg(g, *det, &neg));
  LOOM_TRY(ox_scalar(n, LOOM_I64, 0, &swapped));
  LOOM_TRY(loom_ne(g, p, swapped, &swapped));
  LOOM_TRY(loom_where(g, swapped, neg, *det, det));
  if (m == 1) return LOOM_OK;
  /* The other rows, row 0 taking the pivot row's place, less their
   * multiple of the pivot row. A zero pivot (a singular matrix) divides
   * by 1: its column is all zeros, and det is 0 already. */
  loom_value_t first, rest, moved, one, safe, factor, sub;
  LOOM_TRY(cut(n, *a, -2, 0, 1, &first));
  LOOM_TRY(cut(n, *a, -2, 1, m, &rest));
  LOOM_TRY(cut(n, pick, -2, 1, m, &moved));
  LOOM_TRY(loom_where(g, moved, first, rest, &rest));
  LOOM_TRY(ox_like(n, *a, 1, &one));
  LOOM_TRY(loom_eq(g, pivot, zero, &safe));
  LOOM_TRY(loom_where(g, safe, one, pivot, &safe));
  LOOM_TRY(cut(n, rest, -1, 0, 1, &factor));
  LOOM_TRY(loom_div(g, factor, safe, &factor));
  LOOM_TRY(loom_mul(g, factor, prow, &sub));
  LOOM_TRY(loom_sub(g, rest, sub, &rest));
  return cut(n, rest, -1, 1, m, a);
}

loom_status_t ox_det(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[0], dims, &rank));
  if (rank < 2 || dims[rank - 1] != dims[rank - 2] || dims[rank - 1] < 0)
    return ox_fail(n, LOOM_ERR_SHAPE, "needs square matrices of a static size in the last two "
                   "dims (rank %d)", rank);
  if (!ox_is_float(ox_dtype(n, n->in[0])))
    return ox_fail(n, LOOM_ERR_DTYPE, "%s input (float types only)",
                   loom_dtype_name(ox_dtype(n, n->in[0])));
  int64_t size = dims[rank - 1];
  if (size > MAX_DET)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%lld x %lld matrices (at most %d x %d)",
                   (long long)size, (long long)size, MAX_DET, MAX_DET);
  loom_value_t a = n->in[0], det;
  if (size == 0) return loom_full(n->g, rank - 2, dims, 1, ox_dtype(n, a), &n->out[0]);
  LOOM_TRY(ox_like(n, a, 1, &det));
  for (int64_t m = size; m >= 1; m--) LOOM_TRY(eliminate(n, &a, m, rank, &det));
  return loom_reshape(n->g, det, rank - 2, dims, &n->out[0]);
}
