/* Fuzz target for the ONNX importer (loom_onnx_load_memory): any bytes
 * must import into a graph whose inputs and outputs are named and typed,
 * or fail with a status and a message naming what is wrong; never crash,
 * hang, leak or read out of bounds (run it under ASan and UBSan). The
 * corpus (tests/fuzz/corpus/onnx/) holds small models of the ops and forms
 * the importer handles (initializers, Constant, shape arithmetic that
 * folds, symbolic dims, attributes, subgraphs), named, from
 * make_onnx_seeds.py, and the inputs libFuzzer grew from them that reach
 * code the others do not (named by their hash; a set-cover merge). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/loom.h"

#define REQUIRE(cond)                                                       \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz_onnx: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* Every input and output of an imported graph has a name and a type. */
static void check_graph(const loom_graph_t *g) {
  int n_in = loom_graph_num_inputs(g), n_out = loom_graph_num_outputs(g);
  REQUIRE(n_in >= 0 && n_out >= 1);
  for (int i = 0; i < n_in; i++) {
    REQUIRE(loom_graph_input_name(g, i) != NULL);
    loom_value_t v;
    REQUIRE(loom_graph_input_value(g, i, &v) == LOOM_OK);
  }
  for (int i = 0; i < n_out; i++) {
    REQUIRE(loom_graph_output_name(g, i) != NULL);
    loom_value_t v;
    REQUIRE(loom_graph_output_value(g, i, &v) == LOOM_OK);
  }
  REQUIRE(loom_graph_input_name(g, n_in) == NULL);
  REQUIRE(loom_graph_output_name(g, n_out) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  loom_graph_t *g = (loom_graph_t *)&g;
  loom_status_t s = loom_onnx_load_memory(data, size, NULL, &g);
  if (s == LOOM_OK) {
    check_graph(g);
    loom_graph_destroy(g);
  } else {
    REQUIRE(g == NULL);
    REQUIRE(loom_last_error()[0] != '\0');
  }
  return 0;
}
