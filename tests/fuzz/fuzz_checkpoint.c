/* Fuzz target for the checkpoint (safetensors) loader: any bytes must
 * load into the graph's parameters or fail with a status and a message,
 * and a failed load must leave every parameter as it was (checkpoint.h);
 * never crash, leak or read out of bounds (run it under ASan and UBSan).
 * Each input is loaded twice: strictly, and with missing and unexpected
 * tensors allowed. Works with libFuzzer (clang -fsanitize=fuzzer) and
 * with a driver that calls LLVMFuzzerTestOneInput in a loop.
 *
 * The loader takes a path, so the bytes go to an in-memory file (memfd),
 * read back through /proc/self/fd: no disk, no temporary name. The seed
 * corpus (corpus/checkpoint/) holds files for the parameters below. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/checkpoint.h"
#include "loom/loom.h"

#define REQUIRE(cond)                                                              \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "fuzz_checkpoint: %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
      abort();                                                                     \
    }                                                                              \
  } while (0)

/* The parameters the inputs load into: one per dtype family, with a
 * scalar and an empty shape among them. */
static const struct {
  const char *name;
  loom_dtype_t dtype;
  int rank;
  int64_t shape[2];
} params[] = {
    {"a", LOOM_F32, 2, {2, 3}}, {"b", LOOM_I64, 1, {4}},  {"c", LOOM_BOOL, 1, {3}},
    {"d", LOOM_F16, 0, {0}},    {"e", LOOM_BF16, 2, {0, 2}},
};
#define N_PARAMS (sizeof params / sizeof params[0])

static loom_graph_t *graph;
static loom_tensor_t *storage[N_PARAMS]; /* the parameters' tensors */
static unsigned char *before[N_PARAMS];  /* their bytes before a load */
static int input_fd = -1;
static char input_path[64];

static size_t param_bytes(size_t i) {
  return (size_t)loom_tensor_numel(storage[i]) * loom_dtype_size(params[i].dtype);
}

static void setup(void) {
  REQUIRE(loom_graph_create(&graph) == LOOM_OK);
  for (size_t i = 0; i < N_PARAMS; i++) {
    loom_value_t v;
    REQUIRE(loom_graph_param(graph, params[i].name, params[i].dtype, params[i].rank,
                             params[i].shape, NULL, &v) == LOOM_OK);
    REQUIRE(loom_graph_param_tensor(graph, v, &storage[i]) == LOOM_OK);
    before[i] = malloc(param_bytes(i) + 1);
    REQUIRE(before[i]);
  }
  input_fd = memfd_create("fuzz_checkpoint", MFD_CLOEXEC);
  REQUIRE(input_fd >= 0);
  snprintf(input_path, sizeof input_path, "/proc/self/fd/%d", input_fd);
}

static void put_input(const uint8_t *data, size_t size) {
  REQUIRE(ftruncate(input_fd, 0) == 0);
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(input_fd, data + done, size - done, (off_t)done);
    REQUIRE(n > 0);
    done += (size_t)n;
  }
}

/* Loads the input with options o; checks what a load promises. */
static void load(const loom_checkpoint_options_t *o) {
  for (size_t i = 0; i < N_PARAMS; i++)
    memcpy(before[i], loom_tensor_data(storage[i]), param_bytes(i));
  loom_status_t s = loom_checkpoint_load_ex(graph, input_path, o);
  for (size_t i = 0; i < N_PARAMS; i++) {
    REQUIRE(loom_tensor_numel(storage[i]) * (int64_t)loom_dtype_size(params[i].dtype) ==
            (int64_t)param_bytes(i));
    const unsigned char *now = loom_tensor_data(storage[i]);
    if (s != LOOM_OK) REQUIRE(memcmp(now, before[i], param_bytes(i)) == 0);
    if (params[i].dtype == LOOM_BOOL)
      for (size_t k = 0; k < param_bytes(i); k++) REQUIRE(now[k] <= 1);
  }
  if (s != LOOM_OK) REQUIRE(loom_last_error()[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!graph) setup();
  put_input(data, size);
  loom_checkpoint_options_t strict = {.size = sizeof strict},
                            lax = {.size = sizeof lax, .allow_missing = 1, .allow_unexpected = 1};
  load(&strict);
  load(&lax);
  return 0;
}
