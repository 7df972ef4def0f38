/* The constants of ONNX's signal ops, computed in double when the model
 * loads, as their sizes must be known then: the window functions
 * (HannWindow, HammingWindow, BlackmanWindow), generalized cosine windows
 *   w[k] = a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N),
 * N the size (periodic) or size - 1 (symmetric), and MelWeightMatrix. */
#include <math.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

/* Windows longer than this are refused rather than made constants. */
#define MAX_WINDOW ((int64_t)1 << 26)

static loom_status_t cosine_window(ox_node_t *n, double a0, double a1, double a2) {
  double size_d;
  int c;
  LOOM_TRY(ox_const_doubles(n, 0, "size", &size_d, 1, &c));
  int64_t size = (int64_t)size_d;
  if (size < 0 || size > MAX_WINDOW || (double)size != size_d)
    return ox_fail(n, LOOM_ERR_VALUE, "size %g (a whole number, 0..%lld)", size_d,
                   (long long)MAX_WINDOW);
  int32_t onnx_type = (int32_t)ox_int(n, "output_datatype", 1);
  loom_dtype_t dt;
  if (!ox_dtype_from_onnx(onnx_type, &dt))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "output_datatype %s", ox_onnx_type_name(onnx_type));
  double *w = core_calloc((size_t)size + 1, sizeof *w);
  if (!w) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory for a window of %lld", (long long)size);
  double period = (double)(ox_int(n, "periodic", 1) ? size : size - 1);
  const double tau = 6.283185307179586476925;
  for (int64_t k = 0; k < size; k++)
    /* A symmetric window of one entry is 1, as NumPy's and SciPy's are. */
    w[k] = period > 0 ? a0 - a1 * cos(tau * (double)k / period) +
                            a2 * cos(2 * tau * (double)k / period)
                      : 1.0;
  loom_tensor_t *t = NULL;
  loom_value_t v;
  loom_status_t st = loom_tensor_from_data(LOOM_F64, 1, &size, w, sizeof *w * (size_t)size, &t);
  if (st == LOOM_OK) st = loom_graph_constant(n->g, t, &v);
  loom_tensor_destroy(t);
  core_free(w);
  LOOM_TRY(st);
  return loom_cast(n->g, v, dt, &n->out[0]);
}

loom_status_t ox_hann_window(ox_node_t *n) { return cosine_window(n, 0.5, 0.5, 0); }
/* ONNX's Hamming coefficients are 25/46 and 21/46, not 0.54 and 0.46. */
loom_status_t ox_hamming_window(ox_node_t *n) { return cosine_window(n, 25.0 / 46, 21.0 / 46, 0); }
loom_status_t ox_blackman_window(ox_node_t *n) { return cosine_window(n, 0.42, 0.5, 0.08); }

/* ---- MelWeightMatrix ---------------------------------------------------------- */

/* The triangle of mel band i (its edges bins lo, mid, hi) into column i
 * of w (rows by bins), as ONNX's reference: rising from lo to mid, a
 * single 1 at mid when lo == mid, falling from mid to hi. */
static void mel_band(double *w, int64_t bins, int64_t i, int64_t lo, int64_t mid, int64_t hi) {
  if (mid == lo) w[mid * bins + i] = 1;
  for (int64_t j = lo; mid > lo && j <= mid; j++)
    w[j * bins + i] = (double)(j - lo) / (double)(mid - lo);
  for (int64_t j = mid; j < hi; j++) w[j * bins + i] = (double)(hi - j) / (double)(hi - mid);
}

/* Band edge k of n_edges evenly spaced in mel from lo_hz to hi_hz, as a
 * spectrogram bin: floor((dft_length + 1) hz / sample_rate). The mel ends
 * are float arithmetic, as ONNX's reference computes them from its float
 * inputs. */
static int64_t mel_edge(int64_t k, int64_t n_edges, double lo_hz, double hi_hz, int64_t dft,
                        int64_t rate) {
  float lo_mel = 2595.0f * log10f(1.0f + (float)lo_hz / 700.0f);
  float hi_mel = 2595.0f * log10f(1.0f + (float)hi_hz / 700.0f);
  float step = (hi_mel - lo_mel) / (float)n_edges;
  double mel = (double)k * (double)step + (double)lo_mel;
  double hz = 700.0 * (pow(10.0, mel / 2595.0) - 1.0);
  return ox_to_i64(floor((double)(dft + 1) * hz / (double)rate));
}

/* Weights (dft_length / 2 + 1, num_mel_bins) mapping a spectrogram's bins
 * to triangular mel bands, computed when the model loads (its inputs
 * must be known then). */
loom_status_t ox_mel_weight_matrix(ox_node_t *n) {
  double v[5];
  int c;
  static const char *const what[5] = {"num_mel_bins", "dft_length", "sample_rate",
                                      "lower_edge_hertz", "upper_edge_hertz"};
  for (int i = 0; i < 5; i++) LOOM_TRY(ox_const_doubles(n, i, what[i], &v[i], 1, &c));
  int64_t mels = ox_to_i64(v[0]), dft = ox_to_i64(v[1]), rate = ox_to_i64(v[2]);
  if (mels < 1 || dft < 1 || rate < 1 || mels > MAX_WINDOW || dft > MAX_WINDOW)
    return ox_fail(n, LOOM_ERR_VALUE, "num_mel_bins %lld, dft_length %lld and sample_rate %lld "
                   "must be positive (sizes up to %lld)", (long long)mels, (long long)dft,
                   (long long)rate, (long long)MAX_WINDOW);
  int64_t rows = dft / 2 + 1, edge[3];
  if (rows * mels > MAX_WINDOW)
    return ox_fail(n, LOOM_ERR_VALUE, "%lld x %lld weights (at most %lld)", (long long)rows,
                   (long long)mels, (long long)MAX_WINDOW);
  int32_t onnx_type = (int32_t)ox_int(n, "output_datatype", 1);
  loom_dtype_t dt;
  if (!ox_dtype_from_onnx(onnx_type, &dt))
    return ox_fail(n, LOOM_ERR_UNSUPPORTED, "output_datatype %s", ox_onnx_type_name(onnx_type));
  double *w = core_calloc((size_t)(rows * mels) + 1, sizeof *w);
  if (!w) return ox_fail(n, LOOM_ERR_NOMEM, "out of memory for %lld weights", (long long)(rows * mels));
  loom_status_t st = LOOM_OK;
  for (int64_t i = 0; st == LOOM_OK && i < mels; i++) {
    for (int k = 0; k < 3; k++) edge[k] = mel_edge(i + k, mels + 2, v[3], v[4], dft, rate);
    if (edge[0] < 0 || edge[0] > edge[1] || edge[1] > edge[2] || edge[2] >= rows)
      st = ox_fail(n, LOOM_ERR_VALUE, "mel band %lld spans bins %lld..%lld, outside 0..%lld "
                   "(edges outside 0..sample_rate / 2?)", (long long)i, (long long)edge[0],
                   (long long)edge[2], (long long)rows - 1);
    else
      mel_band(w, mels, i, edge[0], edge[1], edge[2]);
  }
  loom_tensor_t *t = NULL;
  loom_value_t out;
  int64_t shape[2] = {rows, mels};
  if (st == LOOM_OK)
    st = loom_tensor_from_data(LOOM_F64, 2, shape, w, sizeof *w * (size_t)(rows * mels), &t);
  if (st == LOOM_OK) st = loom_graph_constant(n->g, t, &out);
  loom_tensor_destroy(t);
  core_free(w);
  LOOM_TRY(st);
  return loom_cast(n->g, out, dt, &n->out[0]);
}
