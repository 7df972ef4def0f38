/* loom_api_describe, the listing of the public API that bindings read:
 * struct layouts agree with offsets and sizes computed by hand from the
 * declarations (x86-64 / LP64), enums and functions are listed with their
 * headers, and a null argument fails naming it. The whole listing is
 * checked against the headers and the exported symbols by
 * tests/conformance/check_api.py; this test also runs under the
 * sanitizers, which that one cannot. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Whether text holds needle, reporting it when not. */
static int holds(const char *text, const char *needle) {
  if (strstr(text, needle)) return 1;
  fprintf(stderr, "  the listing lacks: %s\n", needle);
  return 0;
}

static char *listing(void) {
  char *json = NULL;
  CHECK_OK(loom_api_describe(&json));
  CHECK(json != NULL);
  return json;
}

/* Five int64_t arrays and scalars, no padding: offsets by hand. */
static void test_conv_params_layout(void) {
  char *json = listing();
  if (!json) return;
  CHECK(holds(json, "{\"name\": \"loom_conv_params_t\", \"header\": \"ops.h\", \"size\": 88, "
                    "\"align\": 8, \"fields\": ["));
  CHECK(holds(json, "{\"name\": \"stride\", \"type\": \"int64_t\", \"offset\": 0, \"size\": 16, "
                    "\"count\": 2}"));
  CHECK(holds(json, "{\"name\": \"pads\", \"type\": \"int64_t\", \"offset\": 16, \"size\": 32, "
                    "\"count\": 4}"));
  CHECK(holds(json, "{\"name\": \"output_padding\", \"type\": \"int64_t\", \"offset\": 64, "
                    "\"size\": 16, \"count\": 2}"));
  CHECK(holds(json, "{\"name\": \"groups\", \"type\": \"int64_t\", \"offset\": 80, \"size\": 8, "
                    "\"count\": 1}"));
  loom_free(json);
}

/* An int after 80 bytes of int64_t: 4 bytes of tail padding to 88. */
static void test_pool_params_padding(void) {
  char *json = listing();
  if (!json) return;
  CHECK(holds(json, "{\"name\": \"loom_pool_params_t\", \"header\": \"ops.h\", \"size\": 88, "
                    "\"align\": 8, \"fields\": ["));
  CHECK(holds(json, "{\"name\": \"count_include_pad\", \"type\": \"int\", \"offset\": 80, "
                    "\"size\": 4, \"count\": 1}"));
  loom_free(json);
}

/* Pointers are 8 bytes: the op-info struct's strings follow its size. */
static void test_op_info_strings(void) {
  char *json = listing();
  if (!json) return;
  CHECK(holds(json, "{\"name\": \"size\", \"type\": \"size_t\", \"offset\": 0, \"size\": 8, "
                    "\"count\": 1}"));
  CHECK(holds(json, "{\"name\": \"name\", \"type\": \"const char *\", \"offset\": 8, \"size\": 8, "
                    "\"count\": 1}"));
  loom_free(json);
}

static void test_functions_and_enums(void) {
  char *json = listing();
  if (!json) return;
  CHECK(holds(json, "{\"name\": \"loom_graph_create\", \"header\": \"loom.h\", \"decl\": "
                    "\"loom_status_t loom_graph_create(loom_graph_t **out);\"}"));
  CHECK(holds(json, "{\"name\": \"loom_api_describe\", \"header\": \"loom.h\""));
  CHECK(holds(json, "{\"name\": \"LOOM_OK\", \"value\": 0}"));
  CHECK(holds(json, "{\"name\": \"LOOM_MAX_RANK\", \"value\": 8}"));
  /* An opaque handle has no size a binding could allocate. */
  CHECK(holds(json, "{\"name\": \"loom_graph_t\", \"header\": \"loom.h\", \"decl\": "
                    "\"struct loom_graph loom_graph_t\", \"size\": 0}"));
  loom_free(json);
}

static void test_null_argument(void) {
  CHECK_ERR(loom_api_describe(NULL), LOOM_ERR_INVALID, "argument 'out' is null");
}

int main(void) {
  TEST_RUN(test_conv_params_layout);
  TEST_RUN(test_pool_params_padding);
  TEST_RUN(test_op_info_strings);
  TEST_RUN(test_functions_and_enums);
  TEST_RUN(test_null_argument);
  return test_summary();
}
