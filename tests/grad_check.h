/* A finite-difference gradient checker for tests of gradient rules.
 *
 * grad_check builds a graph whose inputs hold the given tensors, asks the
 * caller's build function for a scalar loss, appends its gradient with
 * loom_grad, and compares every element of d loss / d x with the central
 * difference (f(x+h) - f(x-h)) / 2h computed by the interpreter. It also
 * compiles the gradient graph and checks the compiled gradients against
 * the interpreter's.
 *
 * Tests link only harness.c, so a test that uses the checker includes
 * grad_check.c once, after this header. */
#ifndef LOOM_TESTS_GRAD_CHECK_H
#define LOOM_TESTS_GRAD_CHECK_H

#include "loom/loom.h"

/* Builds a scalar loss from the graph's inputs x[0..n-1]; it is called
 * twice (the gradient graph and the forward graph), and must build the
 * same thing both times. */
typedef loom_status_t (*grad_check_build_fn)(loom_graph_t *g,
                                             const loom_value_t *x, void *ctx,
                                             loom_value_t *loss);

typedef struct grad_check_opts {
  double h;          /* the difference step */
  double atol, rtol; /* |analytic - numeric| <= atol + rtol * |numeric| */
  int compile;       /* 1: also compile the gradient graph and compare */
} grad_check_opts_t;

/* h 1e-6, atol 1e-6, rtol 1e-5, compile 1 (suits f64 inputs of size ~1). */
void grad_check_opts_init(grad_check_opts_t *o);

/* Checks the gradient with respect to every float input of x (f32 or
 * f64; f64 gives meaningful differences); other inputs (indices, seeds,
 * conditions) are fed as they are. Failures are recorded through the
 * harness, naming `what`, the input and the element. opts NULL: defaults.
 * Returns 1 when every element matched. */
int grad_check(const char *what, int n, loom_tensor_t *const *x,
               grad_check_build_fn build, void *ctx,
               const grad_check_opts_t *opts);

/* sum(y * w) with w a fixed pattern of y's shape (not all equal, so that
 * a rule that mixes up elements fails): a loss that sends a different
 * gradient to each element of y. */
loom_status_t grad_check_weighted_sum(loom_graph_t *g, loom_value_t y,
                                      loom_value_t *loss);

#endif
