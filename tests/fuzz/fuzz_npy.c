/* Fuzz target for the .npy reader (loom_tensor_load_npy): any bytes must
 * load into a tensor that agrees with them, or fail with a status and a
 * message; never crash, leak or read out of bounds (run it under ASan and
 * UBSan). Works with libFuzzer (clang -fsanitize=fuzzer) and with a
 * driver that calls LLVMFuzzerTestOneInput in a loop.
 *
 * The reader takes a path, so the bytes go to an in-memory file
 * (memfd), read back through /proc/self/fd: no disk, no temporary name. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/loom.h"

/* Fails the run loudly: a broken invariant is a finding, like a crash. */
#define REQUIRE(cond)                                                       \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz_npy: %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* The in-memory file holding the current input, and its /proc path. */
static int input_fd = -1;
static char input_path[64];

static void put_input(const uint8_t *data, size_t size) {
  if (input_fd < 0) {
    input_fd = memfd_create("fuzz_npy", MFD_CLOEXEC);
    REQUIRE(input_fd >= 0);
    snprintf(input_path, sizeof input_path, "/proc/self/fd/%d", input_fd);
  }
  REQUIRE(ftruncate(input_fd, 0) == 0);
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(input_fd, data + done, size - done, (off_t)done);
    REQUIRE(n > 0);
    done += (size_t)n;
  }
}

/* A loaded tensor: rank and dims sane, its bytes no more than the file's,
 * bools 0 or 1, and the element accessors in bounds. */
static void check_tensor(const loom_tensor_t *t, size_t file_size) {
  int rank = loom_tensor_rank(t);
  REQUIRE(rank >= 0 && rank <= LOOM_MAX_RANK);
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) {
    REQUIRE(loom_tensor_dim(t, i) >= 0);
    REQUIRE(!__builtin_mul_overflow(numel, loom_tensor_dim(t, i), &numel));
  }
  REQUIRE(numel == loom_tensor_numel(t));
  size_t bytes = (size_t)numel * loom_dtype_size(loom_tensor_dtype(t));
  REQUIRE(bytes <= file_size);
  const unsigned char *p = loom_tensor_data(t);
  if (loom_tensor_dtype(t) == LOOM_BOOL)
    for (size_t i = 0; i < bytes; i++) REQUIRE(p[i] <= 1);
  double x;
  if (numel > 0) {
    REQUIRE(loom_tensor_get_f64(t, 0, &x) == LOOM_OK);
    REQUIRE(loom_tensor_get_f64(t, numel - 1, &x) == LOOM_OK);
  }
  REQUIRE(loom_tensor_get_f64(t, numel, &x) == LOOM_ERR_VALUE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  put_input(data, size);
  loom_tensor_t *t = (loom_tensor_t *)&t;
  loom_status_t s = loom_tensor_load_npy(input_path, &t);
  if (s == LOOM_OK) {
    check_tensor(t, size);
    loom_tensor_destroy(t);
  } else {
    REQUIRE(t == NULL);
    REQUIRE(loom_last_error()[0] != '\0');
  }
  return 0;
}
