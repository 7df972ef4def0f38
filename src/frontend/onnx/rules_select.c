/* Unique and NonMaxSuppression: ops whose output count depends on the
 * data. Both are compare-everything-with-everything masks over a static
 * number of elements (slices or boxes), then `nonzero` of the mask of what
 * is kept and gathers from tables of the answer for every position; the
 * count is known only when the graph runs (so it runs in the interpreter).
 *   - Unique compares each slice with every other (equal, and
 *     lexicographically less where the first differing element is less);
 *     a slice's rank counts the distinct slices before it: smaller ones
 *     (sorted) or ones first seen earlier (unsorted).
 *   - NonMaxSuppression sorts each class's boxes by score, takes the IoU
 *     of every pair, and runs ONNX Runtime's greedy pass unrolled over the
 *     sorted positions: a box is kept unless a kept box before it overlaps
 *     it by more than the threshold; the first max_output kept stay. */
#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

/* A dense mask of more elements than this is refused rather than made. */
#define MAX_DENSE ((int64_t)1 << 28)
/* NonMaxSuppression unrolls one step per box: more boxes are refused. */
#define MAX_BOXES 4096

static loom_status_t binary_k(ox_node_t *n, loom_status_t (*op)(loom_graph_t *, loom_value_t,
                                                                 loom_value_t, loom_value_t *),
                              loom_value_t a, loom_dtype_t dt, double k, loom_value_t *out) {
  loom_value_t kv;
  LOOM_TRY(ox_scalar(n, dt, k, &kv));
  return op(n->g, a, kv, out);
}

/* Whether any entry along axis is true (bool in, bool out). */
static loom_status_t any(ox_node_t *n, loom_value_t x, int64_t axis, loom_value_t *out) {
  LOOM_TRY(loom_sum(n->g, x, 1, &axis, 0, &x));
  return binary_k(n, loom_gt, x, LOOM_I64, 0, out);
}

/* How many entries along axis are true (i64). */
static loom_status_t count(ox_node_t *n, loom_value_t x, int64_t axis, loom_value_t *out) {
  return loom_sum(n->g, x, 1, &axis, 0, out);
}

/* The positions of mask's true entries (flattened, row-major order), and
 * the entries of table (rows of the same count) there. */
static loom_status_t select_rows(ox_node_t *n, loom_value_t mask, int64_t size,
                                 loom_value_t table, loom_value_t *out) {
  loom_dim_t flat = size;
  int64_t column = 1;
  LOOM_TRY(loom_reshape(n->g, mask, 1, &flat, &mask));
  LOOM_TRY(loom_nonzero(n->g, mask, &mask));
  LOOM_TRY(loom_squeeze(n->g, mask, 1, &column, &mask));
  return loom_gather(n->g, table, mask, 0, out);
}

/* ---- Unique ------------------------------------------------------------- */

typedef struct slices {
  loom_value_t s;   /* (count, len): slice i flattened, row i */
  int64_t count, len;
  loom_value_t src; /* what Y gathers slices from, along axis */
  int64_t axis;
  int unsigned64;   /* ONNX uint64: s holds the bits as i64 */
} slices_t;

/* X as rows of slices along axis (absent: its elements). */
static loom_status_t unique_slices(ox_node_t *n, slices_t *sl) {
  loom_dim_t dx[LOOM_MAX_RANK], shape[2];
  int rank;
  LOOM_TRY(ox_static_dims(n, n->in[0], "X", dx, &rank));
  int64_t total = 1;
  for (int d = 0; d < rank; d++) total *= dx[d];
  sl->src = n->in[0];
  sl->axis = 0;
  if (!ox_attr(n, "axis")) {
    sl->count = total, sl->len = 1;
    shape[0] = total;
    LOOM_TRY(loom_reshape(n->g, sl->src, 1, shape, &sl->src));
  } else {
    LOOM_TRY(ox_axis(n, ox_int(n, "axis", 0), rank, "axis", &sl->axis));
    if (rank == 0) return ox_fail(n, LOOM_ERR_SHAPE, "axis given for a rank-0 X");
    sl->count = dx[sl->axis];
    sl->len = sl->count ? total / sl->count : 0;
  }
  if ((double)sl->count * (double)sl->count * (double)(sl->len ? sl->len : 1) > MAX_DENSE)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%lld slices of %lld elements: too many to compare "
                   "pairwise", (long long)sl->count, (long long)sl->len);
  int64_t perm[LOOM_MAX_RANK];
  perm[0] = sl->axis;
  for (int d = 0, k = 1; d < rank; d++)
    if (d != sl->axis) perm[k++] = d;
  sl->s = n->in[0];
  if (rank > 1) LOOM_TRY(loom_transpose(n->g, sl->s, perm, &sl->s));
  shape[0] = sl->count, shape[1] = sl->len;
  LOOM_TRY(loom_reshape(n->g, sl->s, 2, shape, &sl->s));
  sl->unsigned64 = n->proto->n_input > 0 && ox_declared_type(n, n->proto->input[0]) == 13;
  if (ox_dtype(n, sl->s) == LOOM_BOOL) return loom_cast(n->g, sl->s, LOOM_I32, &sl->s);
  return LOOM_OK;
}

/* a < b for ONNX's uint64, which Loom holds as the i64 of the same bits:
 * the signed order, reversed where exactly one of them is past 2^63. */
static loom_status_t less_u64(ox_node_t *n, loom_value_t a, loom_value_t b, loom_value_t *out) {
  loom_value_t na, nb;
  LOOM_TRY(binary_k(n, loom_lt, a, LOOM_I64, 0, &na));
  LOOM_TRY(binary_k(n, loom_lt, b, LOOM_I64, 0, &nb));
  LOOM_TRY(loom_xor(n->g, na, nb, &na));
  LOOM_TRY(loom_lt(n->g, a, b, out));
  return loom_xor(n->g, *out, na, out);
}

/* eq[i][j]: slices i and j are equal; less[i][j]: slice i comes before
 * slice j (at their first differing element, i's is less). */
static loom_status_t compare_slices(ox_node_t *n, const slices_t *sl, loom_value_t *eq,
                                    loom_value_t *less) {
  loom_dim_t si[3] = {sl->count, 1, sl->len}, sj[3] = {1, sl->count, sl->len};
  loom_value_t a, b, ne, before, first, lt;
  LOOM_TRY(loom_reshape(n->g, sl->s, 3, si, &a));
  LOOM_TRY(loom_reshape(n->g, sl->s, 3, sj, &b));
  LOOM_TRY(loom_ne(n->g, a, b, &ne));
  LOOM_TRY(any(n, ne, 2, eq));
  LOOM_TRY(loom_not(n->g, *eq, eq));
  LOOM_TRY(loom_cumsum(n->g, ne, 2, 1, 0, &before));
  LOOM_TRY(binary_k(n, loom_eq, before, LOOM_I64, 0, &before));
  LOOM_TRY(loom_and(n->g, before, ne, &first));
  LOOM_TRY(sl->unsigned64 ? less_u64(n, a, b, &lt) : loom_lt(n->g, a, b, &lt));
  LOOM_TRY(loom_and(n->g, first, lt, &lt));
  return any(n, lt, 2, less);
}

/* Each slice's position among the distinct slices (i64, per slice), and
 * whether it is the first of its equals. */
static loom_status_t unique_rank(ox_node_t *n, const slices_t *sl, loom_value_t *rank,
                                 loom_value_t *is_first, loom_value_t *eq) {
  loom_value_t less, ii, jj, earlier, prior, first_row, first_col;
  LOOM_TRY(compare_slices(n, sl, eq, &less));
  LOOM_TRY(ox_iota(n, sl->count, 0, 2, &ii));
  LOOM_TRY(ox_iota(n, sl->count, 1, 2, &jj));
  LOOM_TRY(loom_lt(n->g, jj, ii, &earlier));
  LOOM_TRY(loom_and(n->g, *eq, earlier, &prior));
  LOOM_TRY(any(n, prior, 1, is_first));
  LOOM_TRY(loom_not(n->g, *is_first, is_first));
  if (ox_int(n, "sorted", 1)) {
    /* distinct slices j less than slice i */
    loom_dim_t col[2] = {sl->count, 1};
    LOOM_TRY(loom_reshape(n->g, *is_first, 2, col, &first_col));
    LOOM_TRY(loom_and(n->g, less, first_col, &prior));
    return count(n, prior, 0, rank);
  }
  /* distinct slices first seen before slice i's first occurrence */
  loom_value_t first_at, eq_i;
  loom_dim_t row[2] = {1, sl->count};
  LOOM_TRY(loom_cast(n->g, *eq, LOOM_I64, &eq_i));
  LOOM_TRY(loom_argmax(n->g, eq_i, 1, 1, 1, &first_at));
  LOOM_TRY(loom_reshape(n->g, *is_first, 2, row, &first_row));
  LOOM_TRY(loom_lt(n->g, jj, first_at, &earlier));
  LOOM_TRY(loom_and(n->g, earlier, first_row, &prior));
  return count(n, prior, 1, rank);
}

/* No slices: Y is X (flattened when axis is absent), the rest empty. */
static loom_status_t unique_empty(ox_node_t *n, const slices_t *sl) {
  int64_t unused = 0;
  n->out[0] = sl->src;
  for (int k = 1; k < 4 && k < n->n_out; k++) LOOM_TRY(ox_vector_i64(n, 0, &unused, &n->out[k]));
  return LOOM_OK;
}

loom_status_t ox_unique(ox_node_t *n) {
  LOOM_TRY(ox_need(n, 0));
  slices_t sl;
  LOOM_TRY(unique_slices(n, &sl));
  if (sl.count == 0) return unique_empty(n, &sl);
  loom_value_t rank, is_first, eq, kk, rank_row, first_row, at, cols, indices, counts;
  LOOM_TRY(unique_rank(n, &sl, &rank, &is_first, &eq));
  /* at[k][i]: slice i is the first of the k-th distinct slice */
  loom_dim_t row[2] = {1, sl.count}, sq[2] = {sl.count, sl.count};
  LOOM_TRY(ox_iota(n, sl.count, 0, 2, &kk));
  LOOM_TRY(loom_reshape(n->g, rank, 2, row, &rank_row));
  LOOM_TRY(loom_reshape(n->g, is_first, 2, row, &first_row));
  LOOM_TRY(loom_eq(n->g, rank_row, kk, &at));
  LOOM_TRY(loom_and(n->g, at, first_row, &at));
  LOOM_TRY(ox_iota(n, sl.count, 1, 2, &cols));
  LOOM_TRY(loom_expand(n->g, cols, 2, sq, &cols));
  LOOM_TRY(loom_reshape(n->g, cols, 1, (loom_dim_t[]){sl.count * sl.count}, &cols));
  LOOM_TRY(select_rows(n, at, sl.count * sl.count, cols, &indices));
  LOOM_TRY(count(n, eq, 1, &counts));
  LOOM_TRY(loom_gather(n->g, counts, indices, 0, &counts));
  LOOM_TRY(loom_gather(n->g, sl.src, indices, sl.axis, &n->out[0]));
  LOOM_TRY(ox_set(n, 1, indices));
  LOOM_TRY(ox_set(n, 2, rank));
  return ox_set(n, 3, counts);
}

/* ---- NonMaxSuppression -------------------------------------------------- */

typedef struct nms {
  int64_t batches, classes, boxes;
  loom_dtype_t dt;
  loom_value_t order;  /* (B, C, N) i64: box of each sorted position */
  loom_value_t sorted; /* (B, C, N, 4): those boxes */
  loom_value_t valid;  /* (B, C, N) bool: score above the threshold */
} nms_t;

/* Optional scalar input i as dtype dt (dflt when absent). */
static loom_status_t scalar_input(ox_node_t *n, int i, loom_dtype_t dt, double dflt,
                                  loom_value_t *out) {
  if (!ox_has(n, i)) return ox_scalar(n, dt, dflt, out);
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank;
  LOOM_TRY(ox_dims(n, n->in[i], dims, &rank));
  if (rank > 1 || (rank == 1 && dims[0] != 1))
    return ox_fail(n, LOOM_ERR_SHAPE, "input %d must hold one value", i);
  LOOM_TRY(loom_reshape(n->g, n->in[i], 0, NULL, out));
  return loom_cast(n->g, *out, dt, out);
}

/* The boxes' and scores' dims and dtype. */
static loom_status_t nms_check(ox_node_t *n, nms_t *s) {
  loom_dim_t db[LOOM_MAX_RANK], ds[LOOM_MAX_RANK];
  int rb, rs;
  LOOM_TRY(ox_static_dims(n, n->in[0], "boxes", db, &rb));
  LOOM_TRY(ox_static_dims(n, n->in[1], "scores", ds, &rs));
  if (rb != 3 || db[2] != 4 || rs != 3 || ds[0] != db[0] || ds[2] != db[1])
    return ox_fail(n, LOOM_ERR_SHAPE, "boxes must be (batches, boxes, 4) and scores "
                   "(batches, classes, boxes)");
  s->batches = db[0], s->classes = ds[1], s->boxes = db[1];
  s->dt = ox_dtype(n, n->in[0]);
  if (!ox_is_float(s->dt) || ox_dtype(n, n->in[1]) != s->dt)
    return ox_fail(n, LOOM_ERR_DTYPE, "boxes and scores must be floats of one type");
  if (s->boxes > MAX_BOXES ||
      s->batches * s->classes * s->boxes * s->boxes > MAX_DENSE)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "%lld boxes: too many (at most %d, and pairwise "
                   "IoUs of at most 2^28 per graph)", (long long)s->boxes, MAX_BOXES);
  return LOOM_OK;
}

/* Each class's boxes by descending score (ties: lower index first). */
static loom_status_t nms_sort(ox_node_t *n, nms_t *s) {
  loom_value_t values, thr, base, rows;
  LOOM_TRY(loom_topk(n->g, n->in[1], s->boxes, 2, 1, &values, &s->order));
  if (ox_has(n, 4)) {
    LOOM_TRY(scalar_input(n, 4, s->dt, 0, &thr));
    LOOM_TRY(loom_gt(n->g, values, thr, &s->valid));
  } else {
    loom_dim_t shape[3] = {s->batches, s->classes, s->boxes};
    LOOM_TRY(loom_full(n->g, 3, shape, 1, LOOM_BOOL, &s->valid));
  }
  /* row b * N + box of boxes as (B * N, 4) */
  loom_dim_t flat[2] = {s->batches * s->boxes, 4};
  LOOM_TRY(ox_iota(n, s->batches, 0, 3, &base));
  LOOM_TRY(binary_k(n, loom_mul, base, LOOM_I64, (double)s->boxes, &base));
  LOOM_TRY(loom_add(n->g, s->order, base, &rows));
  LOOM_TRY(loom_reshape(n->g, n->in[0], 2, flat, &s->sorted));
  return loom_gather(n->g, s->sorted, rows, 0, &s->sorted);
}

/* One axis of the sorted boxes (columns a and a + 2: corners, or centre
 * and size): its low and high ends, (B, C, N, 1). */
static loom_status_t box_extent(ox_node_t *n, const nms_t *s, loom_value_t *cols, int a,
                                loom_value_t *lo, loom_value_t *hi) {
  if (!ox_int(n, "center_point_box", 0)) {
    LOOM_TRY(loom_minimum(n->g, cols[a], cols[a + 2], lo));
    return loom_maximum(n->g, cols[a], cols[a + 2], hi);
  }
  loom_value_t half;
  LOOM_TRY(binary_k(n, loom_mul, cols[a + 2], s->dt, 0.5, &half));
  LOOM_TRY(loom_sub(n->g, cols[a], half, lo));
  return loom_add(n->g, cols[a], half, hi);
}

/* over[i][j] (B, C, N, N): sorted boxes i and j overlap by an IoU above
 * the threshold (boxes of no area, or not meeting, never do). */
static loom_status_t nms_overlap(ox_node_t *n, const nms_t *s, loom_value_t *over) {
  loom_value_t cols[4], inter, area, area_t, zero, thr, iou, ok, t;
  loom_dim_t row[4] = {s->batches, s->classes, 1, s->boxes};
  int64_t ones[4] = {1, 1, 1, 1};
  LOOM_TRY(loom_split(n->g, s->sorted, 3, 4, ones, cols));
  LOOM_TRY(ox_scalar(n, s->dt, 0, &zero));
  for (int a = 0; a < 2; a++) {
    loom_value_t lo, hi, lo_t, hi_t, len;
    LOOM_TRY(box_extent(n, s, cols, a, &lo, &hi));
    LOOM_TRY(loom_reshape(n->g, lo, 4, row, &lo_t));
    LOOM_TRY(loom_reshape(n->g, hi, 4, row, &hi_t));
    LOOM_TRY(loom_minimum(n->g, hi, hi_t, &t));
    LOOM_TRY(loom_maximum(n->g, lo, lo_t, &len));
    LOOM_TRY(loom_sub(n->g, t, len, &len));
    LOOM_TRY(loom_maximum(n->g, len, zero, &len));
    LOOM_TRY(loom_sub(n->g, hi, lo, &t));
    if (a == 0) {
      inter = len, area = t;
    } else {
      LOOM_TRY(loom_mul(n->g, inter, len, &inter));
      LOOM_TRY(loom_mul(n->g, area, t, &area));
    }
  }
  LOOM_TRY(loom_reshape(n->g, area, 4, row, &area_t));
  LOOM_TRY(loom_add(n->g, area, area_t, &t));
  LOOM_TRY(loom_sub(n->g, t, inter, &t)); /* union */
  LOOM_TRY(loom_gt(n->g, t, zero, &ok));
  LOOM_TRY(ox_scalar(n, s->dt, 1, &iou));
  LOOM_TRY(loom_where(n->g, ok, t, iou, &t));
  LOOM_TRY(loom_div(n->g, inter, t, &iou));
  LOOM_TRY(scalar_input(n, 3, s->dt, 0, &thr));
  LOOM_TRY(loom_gt(n->g, iou, thr, over));
  LOOM_TRY(loom_and(n->g, *over, ok, over));
  LOOM_TRY(loom_gt(n->g, inter, zero, &ok));
  LOOM_TRY(loom_and(n->g, *over, ok, over));
  LOOM_TRY(loom_gt(n->g, area, zero, &ok));
  LOOM_TRY(loom_and(n->g, *over, ok, over));
  LOOM_TRY(loom_gt(n->g, area_t, zero, &ok));
  return loom_and(n->g, *over, ok, over);
}

/* The greedy pass, one step per sorted position: keep (B, C, N). */
static loom_status_t nms_greedy(ox_node_t *n, const nms_t *s, loom_value_t over,
                                loom_value_t *keep) {
  loom_dim_t shape[3] = {s->batches, s->classes, s->boxes};
  loom_value_t supp, *kept = core_calloc((size_t)s->boxes, sizeof *kept);
  if (!kept) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory");
  loom_status_t st = loom_full(n->g, 3, shape, 0, LOOM_BOOL, &supp);
  int64_t axis2 = 2;
  for (int64_t p = 0; p < s->boxes && st == LOOM_OK; p++) {
    int64_t end = p + 1;
    loom_value_t v, x, r;
    st = loom_slice(n->g, s->valid, 1, &p, &end, &axis2, NULL, &v);
    if (!st) st = loom_slice(n->g, supp, 1, &p, &end, &axis2, NULL, &x);
    if (!st) st = loom_not(n->g, x, &x);
    if (!st) st = loom_and(n->g, v, x, &kept[p]);
    if (st || p + 1 == s->boxes) continue;
    st = loom_slice(n->g, over, 1, &p, &end, &axis2, NULL, &r);
    if (!st) st = loom_reshape(n->g, r, 3, shape, &r);
    if (!st) st = loom_and(n->g, r, kept[p], &r);
    if (!st) st = loom_or(n->g, supp, r, &supp);
  }
  if (!st) st = loom_concat(n->g, (int)s->boxes, kept, 2, keep);
  core_free(kept);
  return st;
}

/* (b, c, box) for every sorted position, as rows (B * C * N, 3). */
static loom_status_t nms_triples(ox_node_t *n, const nms_t *s, loom_value_t *out) {
  loom_dim_t shape[4] = {s->batches, s->classes, s->boxes, 1};
  loom_value_t parts[3];
  LOOM_TRY(ox_iota(n, s->batches, 0, 4, &parts[0]));
  LOOM_TRY(loom_expand(n->g, parts[0], 4, shape, &parts[0]));
  LOOM_TRY(ox_iota(n, s->classes, 1, 4, &parts[1]));
  LOOM_TRY(loom_expand(n->g, parts[1], 4, shape, &parts[1]));
  LOOM_TRY(loom_reshape(n->g, s->order, 4, shape, &parts[2]));
  LOOM_TRY(loom_concat(n->g, 3, parts, 3, out));
  loom_dim_t rows[2] = {s->batches * s->classes * s->boxes, 3};
  return loom_reshape(n->g, *out, 2, rows, out);
}

loom_status_t ox_non_max_suppression(ox_node_t *n) {
  for (int i = 0; i < 2; i++) LOOM_TRY(ox_need(n, i));
  int64_t cpb = ox_int(n, "center_point_box", 0);
  if (cpb != 0 && cpb != 1)
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "center_point_box %lld (0 or 1)", (long long)cpb);
  nms_t s;
  LOOM_TRY(nms_check(n, &s));
  if (s.batches * s.classes * s.boxes == 0) {
    loom_dim_t none[2] = {0, 3};
    return loom_full(n->g, 2, none, 0, LOOM_I64, &n->out[0]);
  }
  LOOM_TRY(nms_sort(n, &s));
  loom_value_t over, keep, limit, taken, triples;
  LOOM_TRY(nms_overlap(n, &s, &over));
  LOOM_TRY(nms_greedy(n, &s, over, &keep));
  /* the first max_output_boxes_per_class kept boxes of each class */
  LOOM_TRY(scalar_input(n, 2, LOOM_I64, 0, &limit));
  LOOM_TRY(loom_cumsum(n->g, keep, 2, 0, 0, &taken));
  LOOM_TRY(loom_le(n->g, taken, limit, &taken));
  LOOM_TRY(loom_and(n->g, keep, taken, &keep));
  LOOM_TRY(nms_triples(n, &s, &triples));
  return select_rows(n, keep, s.batches * s.classes * s.boxes, triples, &n->out[0]);
}
