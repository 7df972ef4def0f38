/* The window functions of ONNX's signal ops (HannWindow, HammingWindow,
 * BlackmanWindow): generalized cosine windows
 *   w[k] = a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N),
 * N the size (periodic) or size - 1 (symmetric), computed in double when
 * the model loads, as the size must be known then. */
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
