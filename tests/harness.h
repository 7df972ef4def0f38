/* The test harness: checks that report and count, tolerances, and
 * deterministic random tensors. A test is a program whose main calls
 * TEST_RUN for each case and returns test_summary(). */
#ifndef LOOM_TESTS_HARNESS_H
#define LOOM_TESTS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/loom.h"

extern int test_failures;
extern int test_checks;

/* Records a failed check with its place and message. */
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK(cond)                                                        \
  do {                                                                     \
    test_checks++;                                                         \
    if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);        \
  } while (0)

/* The call must return LOOM_OK. */
#define CHECK_OK(call)                                                     \
  do {                                                                     \
    test_checks++;                                                         \
    loom_status_t check_s_ = (call);                                       \
    if (check_s_ != LOOM_OK)                                               \
      test_fail(__FILE__, __LINE__, "%s returned %s: %s", #call,           \
                loom_status_name(check_s_), loom_last_error());            \
  } while (0)

/* The call must fail with status, and its message must contain `text`. */
#define CHECK_ERR(call, status, text)                                      \
  test_check_err((call), (status), (text), #call, __FILE__, __LINE__)
void test_check_err(loom_status_t got, loom_status_t want, const char *text,
                    const char *expr, const char *file, int line);

/* |a - b| <= atol + rtol * |b|, NaNs equal, infinities exact. */
#define CHECK_NEAR(a, b, atol, rtol)                                       \
  test_check_near((a), (b), (atol), (rtol), #a, __FILE__, __LINE__)
void test_check_near(double a, double b, double atol, double rtol,
                     const char *expr, const char *file, int line);

/* got[i] near want[i] for every i < n; the first few misses reported. */
#define CHECK_FLOATS(got, want, n, atol, rtol)                             \
  test_check_floats((got), (want), (n), (atol), (rtol), __FILE__, __LINE__)
void test_check_floats(const float *got, const float *want, int64_t n, double atol,
                       double rtol, const char *file, int line);

/* Every element of t (any dtype) near want[i]. */
#define CHECK_TENSOR(t, want, n, atol, rtol)                               \
  test_check_tensor((t), (want), (n), (atol), (rtol), __FILE__, __LINE__)
void test_check_tensor(const loom_tensor_t *t, const double *want, int64_t n,
                       double atol, double rtol, const char *file, int line);

/* Tolerances suited to a dtype: exact for integers, about an ulp or two
 * of the dtype for floats (relative), loosened by `scale`. */
double test_rtol(loom_dtype_t dtype, double scale);

/* Deterministic random numbers (splitmix64), seeded per test. */
void test_seed(uint64_t seed);
uint64_t test_rand_u64(void);
double test_rand_uniform(double lo, double hi);
int64_t test_rand_int(int64_t lo, int64_t hi); /* inclusive */

/* A new tensor of shape filled with uniform values in [lo, hi] (rounded
 * for integer dtypes, 0/1 for bool). */
loom_tensor_t *test_rand_tensor(loom_dtype_t dtype, int rank,
                                const int64_t *shape, double lo, double hi);
/* A new tensor holding values (converted to dtype). */
loom_tensor_t *test_tensor(loom_dtype_t dtype, int rank, const int64_t *shape,
                           const double *values);
/* Element i of t as double. */
double test_get(const loom_tensor_t *t, int64_t i);
/* A constant of g holding values (test_tensor's; rank 0: one value). */
loom_value_t test_constant(loom_graph_t *g, loom_dtype_t dtype, int rank, const int64_t *shape,
                           const double *values);

/* Runs a graph with one output through the interpreter; NULL on failure
 * (recorded as a test failure). Unless LOOM_TEST_COMPILE=0, the graph is
 * also compiled for the inputs' shapes and its compiled output checked
 * against the interpreter's (skipped for graphs that assign state or
 * have data-dependent shapes), at once or, batched with other cases into
 * one module, by the next test_flush_compiled. */
loom_tensor_t *test_run1(loom_graph_t *g, int n_in, loom_tensor_t *const *in);

/* Compiles and checks the graphs test_run1 has queued (TEST_RUN and
 * test_summary call it). */
void test_flush_compiled(void);

/* Generated code that the C compiler rejects (or that cannot be loaded)
 * is a bug in Loom, even though the executable still works on reference
 * kernels: the check fails on LOOM_FALLBACK_CC_FAILED and _NO_MODULE (a
 * missing compiler, LOOM_FALLBACK_NO_CC, passes). test_run1 applies it. */
void test_check_no_lost_code(const loom_executable_t *e);

/* The entries of directory dir whose names start with prefix: how many,
 * and the first one's path in `first` (when not NULL and it fits). A save
 * that must leave no temporary behind is checked with it. */
int test_files_with_prefix(const char *dir, const char *prefix, char *first, size_t size);

/* Runs run(ctx) with allocation n failing, for n = 0, 1, ... until a run
 * succeeds (at most `most` runs): each failing run must fail with
 * LOOM_ERR_NOMEM, and more than `least` runs must fail before one
 * succeeds (so that the runs reach the code under test). */
void test_each_allocation_failing(loom_status_t (*run)(void *ctx), void *ctx, int least,
                                  int most);

/* What the library writes to stderr between test_capture_begin and
 * test_capture_end (one capture at a time): stderr goes to a temporary
 * file; loom_log, when not NULL, is LOOM_LOG meanwhile. end restores
 * both and returns the text (free it; never NULL). */
void test_capture_begin(const char *loom_log);
char *test_capture_end(void);

#define TEST_RUN(fn)                                                       \
  do {                                                                     \
    int before_ = test_failures;                                           \
    fn();                                                                  \
    test_flush_compiled();                                                 \
    printf("%s %s\n", test_failures == before_ ? "ok  " : "FAIL", #fn);    \
  } while (0)

/* Prints the closing line and returns the exit status. */
int test_summary(void);

#endif
