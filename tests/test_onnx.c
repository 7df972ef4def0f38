/* The ONNX importer through the public API: a model built here with
 * protobuf-c (Gemm then Relu, a symbolic batch dim), loaded from memory,
 * run and checked against values computed by hand; names of inputs and
 * outputs; fixed inputs; fine-tuning the imported weights until the loss
 * falls; a model that computes its shapes from symbolic dims, compiled
 * once for two sizes; the bit ops on unsigned types; and bad models (truncated,
 * corrupt bytes, an unknown op, a cycle, a missing value) failing with
 * messages that name what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnx.pb-c.h>

#include "harness.h"
#include "loom/loom.h"

/* A model: y = relu(x @ W + B), x (batch, 3), W (3, 2), B (2). */
static const float W[6] = {1, -1, 0.5f, 2, -2, 0.25f};
static const float B[2] = {2.0f, -1.5f};

typedef struct built {
  uint8_t *bytes;
  size_t size;
} built_t;

/* op2: the second node's op ("Relu"); order 1: the nodes listed in reverse
 * (the Relu first, reading a value no node has made yet). */
static built_t build(const char *op2, int reverse) {
  Onnx__TensorProto w = ONNX__TENSOR_PROTO__INIT, b = ONNX__TENSOR_PROTO__INIT;
  int64_t wd[2] = {3, 2}, bd[1] = {2};
  w.name = "W";
  w.n_dims = 2;
  w.dims = wd;
  w.has_data_type = 1;
  w.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  w.n_float_data = 6;
  w.float_data = (float *)W;
  b.name = "B";
  b.n_dims = 1;
  b.dims = bd;
  b.has_data_type = 1;
  b.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  b.n_float_data = 2;
  b.float_data = (float *)B;
  Onnx__TensorProto *inits[2] = {&w, &b};

  Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                    d1 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
  d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  d0.dim_param = "batch";
  d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  d1.dim_value = 3;
  Onnx__TensorShapeProto__Dimension *dims[2] = {&d0, &d1};
  Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
  shape.n_dim = 2;
  shape.dim = dims;
  Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
  tt.has_elem_type = 1;
  tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  tt.shape = &shape;
  Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
  type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  type.tensor_type = &tt;
  Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = ONNX__VALUE_INFO_PROTO__INIT;
  x.name = "x";
  x.type = &type;
  y.name = "y:out";
  Onnx__ValueInfoProto *ins[1] = {&x}, *outs[1] = {&y};

  char *gemm_in[3] = {"x", "W", "B"}, *gemm_out[1] = {"h"};
  char *relu_in[1] = {"h"}, *relu_out[1] = {"y:out"};
  Onnx__NodeProto gemm = ONNX__NODE_PROTO__INIT, relu = ONNX__NODE_PROTO__INIT;
  gemm.op_type = "Gemm";
  gemm.n_input = 3;
  gemm.input = gemm_in;
  gemm.n_output = 1;
  gemm.output = gemm_out;
  relu.op_type = (char *)op2;
  relu.name = "act";
  relu.n_input = 1;
  relu.input = relu_in;
  relu.n_output = 1;
  relu.output = relu_out;
  Onnx__NodeProto *nodes[2] = {&gemm, &relu};
  if (reverse) {
    nodes[0] = &relu;
    nodes[1] = &gemm;
  }
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  graph.name = "tiny";
  graph.n_node = 2;
  graph.node = nodes;
  graph.n_initializer = 2;
  graph.initializer = inits;
  graph.n_input = 1;
  graph.input = ins;
  graph.n_output = 1;
  graph.output = outs;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  opset.domain = "";
  opset.has_version = 1;
  opset.version = 13;
  Onnx__OperatorSetIdProto *opsets[1] = {&opset};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1;
  m.ir_version = 7;
  m.n_opset_import = 1;
  m.opset_import = opsets;
  m.graph = &graph;
  built_t out = {.size = onnx__model_proto__get_packed_size(&m)};
  out.bytes = malloc(out.size);
  onnx__model_proto__pack(&m, out.bytes);
  return out;
}

/* relu(x @ W + B) by hand, x (n, 3). */
static void expected(const float *x, int n, double *y) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < 2; j++) {
      double s = B[j];
      for (int k = 0; k < 3; k++) s += (double)x[i * 3 + k] * W[k * 2 + j];
      y[i * 2 + j] = s > 0 ? s : 0;
    }
}

static void loads_runs_and_names(void) {
  built_t m = build("Relu", 0);
  loom_graph_t *g = NULL;
  CHECK_OK(loom_onnx_load_memory(m.bytes, m.size, NULL, &g));
  CHECK(loom_graph_num_inputs(g) == 1 && loom_graph_num_outputs(g) == 1);
  CHECK(!strcmp(loom_graph_input_name(g, 0), "x"));
  CHECK(!strcmp(loom_graph_output_name(g, 0), "y:out"));
  loom_value_t in;
  loom_dim_t dims[2];
  CHECK_OK(loom_graph_input_value(g, 0, &in));
  CHECK_OK(loom_value_type(g, in, NULL, NULL, dims));
  char text[32];
  CHECK_OK(loom_dim_format(g, dims[0], text, sizeof text));
  CHECK(!strcmp(text, "batch") && dims[1] == 3);
  for (int n = 1; n <= 4; n += 3) { /* two sizes of the symbolic batch */
    float xs[12];
    for (int i = 0; i < 3 * n; i++) xs[i] = (float)((i * 7) % 5) - 2.0f;
    int64_t shape[2] = {n, 3};
    loom_tensor_t *x = NULL, *y = NULL;
    CHECK_OK(loom_tensor_from_data(LOOM_F32, 2, shape, xs, sizeof(float) * 3 * (size_t)n, &x));
    CHECK_OK(loom_interpret(g, 1, &x, 1, &y));
    double want[8];
    expected(xs, n, want);
    CHECK_TENSOR(y, want, 2 * n, 1e-6, 1e-6);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
  }
  loom_graph_destroy(g);
  free(m.bytes);
}

/* The batch fixed to a value: the input becomes a constant, the graph has
 * none, and the whole model folds at load time. */
static void fixed_inputs_become_constants(void) {
  built_t m = build("Relu", 0);
  float xs[3] = {1, 2, 3};
  int64_t shape[2] = {1, 3};
  loom_tensor_t *x = NULL, *y = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 2, shape, xs, sizeof xs, &x));
  loom_onnx_options_t o;
  loom_onnx_options_init(&o);
  const char *names[1] = {"x"};
  const loom_tensor_t *values[1] = {x};
  o.n_fixed = 1;
  o.fixed_names = names;
  o.fixed_values = values;
  loom_graph_t *g = NULL;
  CHECK_OK(loom_onnx_load_memory(m.bytes, m.size, &o, &g));
  CHECK(loom_graph_num_inputs(g) == 0);
  CHECK(loom_graph_num_nodes(g) == 0);
  CHECK_OK(loom_interpret(g, 0, NULL, 1, &y));
  double want[2];
  expected(xs, 1, want);
  CHECK_TENSOR(y, want, 2, 1e-6, 1e-6);
  loom_tensor_destroy(y);
  loom_graph_destroy(g);
  names[0] = "z";
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_INVALID, "no input 'z'");
  CHECK(g == NULL);
  loom_tensor_destroy(x);
  free(m.bytes);
}

/* The input's input dim of the graph m loads with options o, or -1. */
static loom_dim_t loaded_dim(const built_t *m, const loom_onnx_options_t *o, int d) {
  loom_graph_t *g = NULL;
  CHECK_OK(loom_onnx_load_memory(m->bytes, m->size, o, &g));
  loom_value_t x;
  loom_dtype_t dt;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK] = {-1};
  CHECK_OK(loom_graph_input_value(g, 0, &x));
  CHECK_OK(loom_value_type(g, x, &dt, &rank, dims));
  loom_graph_destroy(g);
  return dims[d];
}

/* Sizes for symbolic dims (ONNX Runtime's free dimension overrides), by
 * the dim's name or by the input's: the batch is static, 4; names no
 * input has, a rank or a static dim the model contradicts, fail. */
static void symbolic_dims_given_sizes(void) {
  built_t m = build("Relu", 0);
  loom_onnx_options_t o;
  loom_onnx_options_init(&o);
  CHECK(loaded_dim(&m, &o, 0) < 0); /* symbolic as the model says */
  const char *dim_names[1] = {"batch"};
  int64_t sizes[1] = {4};
  o.n_dims = 1, o.dim_names = dim_names, o.dim_sizes = sizes;
  CHECK(loaded_dim(&m, &o, 0) == 4);
  CHECK(loaded_dim(&m, &o, 1) == 3);
  loom_graph_t *g = NULL;
  dim_names[0] = "seq";
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_INVALID, "'seq'");
  sizes[0] = -2;
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_INVALID, "dim_sizes[0]");
  o.n_dims = 0;
  const char *shape_names[1] = {"x"};
  int ranks[1] = {2};
  int64_t shape[2] = {5, 3};
  const int64_t *shapes[1] = {shape};
  o.n_shapes = 1, o.shape_names = shape_names, o.shape_ranks = ranks, o.shape_dims = shapes;
  CHECK(loaded_dim(&m, &o, 0) == 5);
  shape[1] = 4;
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_SHAPE, "dim 1 is 3");
  ranks[0] = 1;
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_SHAPE, "rank 2");
  ranks[0] = 2, shape[1] = 3, shape_names[0] = "z";
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_INVALID, "no input 'z'");
  o.shape_dims = NULL;
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, &o, &g), LOOM_ERR_INVALID, "n_shapes");
  CHECK(g == NULL);
  free(m.bytes);
}

/* trainable: W and B become parameters; SGD on the imported graph through
 * loom_grad and loom_sgd, compiled, lowers a squared error. */
static void fine_tunes_imported_weights(void) {
  built_t m = build("Relu", 0);
  loom_onnx_options_t o;
  loom_onnx_options_init(&o);
  o.trainable = 1;
  loom_graph_t *g = NULL;
  CHECK_OK(loom_onnx_load_memory(m.bytes, m.size, &o, &g));
  CHECK(loom_graph_num_params(g) == 2);
  CHECK(!strcmp(loom_graph_param_name(g, 0), "W") && !strcmp(loom_graph_param_name(g, 1), "B"));
  loom_value_t params[2], grads[2], y, target, lr, loss;
  for (int i = 0; i < 2; i++) CHECK_OK(loom_graph_param_value(g, i, &params[i]));
  CHECK_OK(loom_graph_output_value(g, 0, &y));
  loom_dim_t td[2] = {0, 2};
  CHECK_OK(loom_dim_symbol(g, "batch", &td[0]));
  CHECK_OK(loom_graph_input(g, "target", LOOM_F32, 2, td, &target));
  CHECK_OK(loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr));
  CHECK_OK(loom_mse(g, y, target, LOOM_REDUCTION_MEAN, &loss));
  CHECK_OK(loom_graph_output(g, loss));
  CHECK_OK(loom_grad(g, loss, 2, params, grads));
  CHECK_OK(loom_sgd(g, 2, params, grads, lr, 0.0, 0, 0.0));
  loom_compile_options_t co;
  loom_compile_options_init(&co);
  co.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &co, &e));
  float xs[12], ts[8], rate = 0.2f;
  for (int i = 0; i < 12; i++) xs[i] = (float)((i * 5) % 7) / 7.0f;
  for (int i = 0; i < 8; i++) ts[i] = 2.0f + (float)(i % 3);
  int64_t xshape[2] = {4, 3}, tshape[2] = {4, 2};
  loom_tensor_t *x = NULL, *t = NULL, *r = NULL, *outs[2] = {NULL, NULL};
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 2, xshape, xs, sizeof xs, &x));
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 2, tshape, ts, sizeof ts, &t));
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 0, NULL, &rate, sizeof rate, &r));
  loom_tensor_t *in[3] = {x, t, r};
  for (int k = 0; k < 2; k++) CHECK_OK(loom_executable_new_output_for(e, 3, in, k, &outs[k]));
  double first = 0, last = 0;
  for (int step = 0; step < 200; step++) {
    CHECK_OK(loom_executable_run(e, 3, in, 2, outs));
    CHECK_OK(loom_tensor_get_f64(outs[1], 0, step ? &last : &first));
  }
  if (!(last < 0.5 * first)) fprintf(stderr, "loss %g -> %g\n", first, last);
  CHECK(last < 0.5 * first);
  for (int k = 0; k < 2; k++) loom_tensor_destroy(outs[k]);
  loom_tensor_destroy(x);
  loom_tensor_destroy(t);
  loom_tensor_destroy(r);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  free(m.bytes);
}

/* Appends varint v at out[*n]. */
static void put_varint(uint8_t *out, size_t *n, uint64_t v) {
  do {
    out[(*n)++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
}

/* A model of `depth` If nodes, each holding the next in its attribute g,
 * written inside out into buf (room for 40 bytes a level); its size. */
static size_t nested_ifs(uint8_t *buf, size_t cap, int depth) {
  uint8_t *a = malloc(cap), *b = malloc(cap);
  size_t n = 0;
  for (int level = 0; level < depth; level++) {
    size_t m = 0; /* attribute: name "g", type GRAPH (5), g = the graph so far */
    a[m++] = 0x0a, a[m++] = 1, a[m++] = 'g';
    put_varint(a, &m, 20 << 3);
    a[m++] = 5, a[m++] = 6 << 3 | 2;
    put_varint(a, &m, n);
    memcpy(a + m, b, n), m += n;
    size_t k = 0; /* node: op_type "If", attribute */
    uint8_t *node = malloc(m + 16);
    node[k++] = 4 << 3 | 2, node[k++] = 2, node[k++] = 'I', node[k++] = 'f', node[k++] = 5 << 3 | 2;
    put_varint(node, &k, m);
    memcpy(node + k, a, m), k += m;
    n = 0; /* graph: node */
    b[n++] = 1 << 3 | 2;
    put_varint(b, &n, k);
    memcpy(b + n, node, k), n += k;
    free(node);
  }
  size_t m = 0; /* model: ir_version 8, graph, opset 13 */
  buf[m++] = 1 << 3, buf[m++] = 8, buf[m++] = 7 << 3 | 2;
  put_varint(buf, &m, n);
  memcpy(buf + m, b, n), m += n;
  buf[m++] = 8 << 3 | 2, buf[m++] = 2, buf[m++] = 2 << 3, buf[m++] = 13;
  free(a);
  free(b);
  CHECK(m <= cap);
  return m;
}

static void bad_models_fail_clearly(void) {
  /* Subgraphs nested past what protobuf-c's recursive unpacking takes on
   * a thread's stack: an error, not a stack overflow. */
  size_t cap = 40 * 5000 + 64;
  uint8_t *deep = malloc(cap);
  loom_graph_t *dg = NULL;
  CHECK_ERR(loom_onnx_load_memory(deep, nested_ifs(deep, cap, 5000), NULL, &dg), LOOM_ERR_FORMAT,
            "nested more than");
  free(deep);

  built_t m = build("Relu", 0);
  loom_graph_t *g = NULL;
  /* Every truncation: an error, never a crash (most are not a protobuf). */
  for (size_t n = 0; n < m.size; n++) {
    loom_status_t st = loom_onnx_load_memory(m.bytes, n, NULL, &g);
    CHECK(st != LOOM_OK || g != NULL);
    loom_graph_destroy(g);
    g = NULL;
  }
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size / 2, NULL, &g), LOOM_ERR_FORMAT, "ONNX model");
  /* Flipped bytes: errors or valid models, never a crash. */
  uint8_t *copy = malloc(m.size);
  for (size_t i = 0; i < m.size; i++) {
    memcpy(copy, m.bytes, m.size);
    copy[i] ^= 0x5a;
    if (loom_onnx_load_memory(copy, m.size, NULL, &g) == LOOM_OK) loom_graph_destroy(g);
    g = NULL;
  }
  free(copy);
  free(m.bytes);

  m = build("Frobnicate", 0);
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, NULL, &g), LOOM_ERR_UNSUPPORTED,
            "node 1 'act' (Frobnicate)");
  free(m.bytes);
  m = build("StringNormalizer", 0);
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, NULL, &g), LOOM_ERR_UNSUPPORTED,
            "not supported");
  free(m.bytes);
  /* A recurrent layer reading one input of its three. */
  m = build("LSTM", 0);
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, NULL, &g), LOOM_ERR_FORMAT,
            "node 1 'act' (LSTM): input 1 is missing");
  free(m.bytes);
  m = build("Relu", 1);
  CHECK_ERR(loom_onnx_load_memory(m.bytes, m.size, NULL, &g), LOOM_ERR_FORMAT,
            "input 0 'h' is not computed before");
  free(m.bytes);
  CHECK_ERR(loom_onnx_load("/nonexistent/model.onnx", NULL, &g), LOOM_ERR_IO, "nonexistent");
  CHECK_ERR(loom_onnx_load(NULL, NULL, &g), LOOM_ERR_INVALID, "path");
  const char *reason = NULL;
  CHECK(loom_onnx_op_supported("Conv", &reason) && reason == NULL);
  CHECK(!loom_onnx_op_supported("StringNormalizer", &reason) && strstr(reason, "string"));
  CHECK(!loom_onnx_op_supported("NoSuchOp", &reason) && reason != NULL);
}

/* tests/onnx/models/shape_chain.onnx (tests/onnx/make_models.py): x of
 * shape (batch, seq, 64) through the shape computations PyTorch exports;
 * its dims stay symbolic, so one executable compiled with dynamic symbols
 * serves two sizes. y = (x's 16-vectors times W) * 0.5 + position. */
/* tests/onnx/models/name, loaded (tests/onnx/make_models.py writes them). */
static loom_graph_t *load_model(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s", __FILE__);
  char *slash = strrchr(path, '/');
  snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0),
           "onnx/models/%s", name);
  loom_graph_t *g = NULL;
  CHECK_OK(loom_onnx_load(path, NULL, &g));
  return g;
}

static void shape_chain_expected(const float *x, int b, int t, double *y) {
  for (int i = 0; i < b * t * 4; i++)
    for (int j = 0; j < 16; j++) {
      double s = 0;
      for (int k = 0; k < 16; k++) s += (double)x[i * 16 + k] * (((k * 3 + j * 5) % 7 - 3) / 8.0);
      y[i * 16 + j] = s * 0.5 + (double)((i / 4) % t);
    }
}

static void symbolic_shape_chain(void) {
  loom_graph_t *g = load_model("shape_chain.onnx");
  loom_compile_options_t co;
  loom_compile_options_init(&co);
  co.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &co, &e));
  int sizes[2][2] = {{2, 3}, {3, 5}};
  for (int s = 0; s < 2; s++) {
    int b = sizes[s][0], t = sizes[s][1], count = b * t * 64;
    float *xs = malloc(sizeof *xs * (size_t)count);
    double *want = malloc(sizeof *want * (size_t)count);
    for (int i = 0; i < count; i++) xs[i] = (float)((i * 7 + s) % 11) / 4.0f - 1.0f;
    int64_t shape[3] = {b, t, 64};
    loom_tensor_t *x = NULL, *y = NULL;
    CHECK_OK(loom_tensor_from_data(LOOM_F32, 3, shape, xs, sizeof *xs * (size_t)count, &x));
    CHECK_OK(loom_executable_new_output_for(e, 1, &x, 0, &y));
    CHECK_OK(loom_executable_run(e, 1, &x, 1, &y));
    CHECK(loom_tensor_rank(y) == 3 && loom_tensor_dim(y, 0) == b && loom_tensor_dim(y, 1) == t);
    shape_chain_expected(xs, b, t, want);
    CHECK_TENSOR(y, want, count, 1e-5, 1e-5);
    loom_tensor_destroy(x);
    loom_tensor_destroy(y);
    free(xs);
    free(want);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* tests/onnx/models/dynamic_batch.onnx (tests/onnx/make_models.py): a
 * Resize by (1, 1, 2, 2), x[1:] and x[::-1] over a symbolic batch, one
 * executable at batches 1, 2 and 5, against values by hand. */
static void dynamic_batch_resize_and_slices(void) {
  loom_graph_t *g = load_model("dynamic_batch.onnx");
  loom_compile_options_t co;
  loom_compile_options_init(&co);
  co.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &co, &e));
  for (int b = 1; e && b <= 5; b += b < 2 ? 1 : 3) {
    enum { ITEM = 2 * 3 * 4 };
    int count = b * ITEM;
    float xs[5 * ITEM];
    double up[5 * 4 * ITEM], tail[5 * ITEM], back[5 * ITEM];
    for (int i = 0; i < count; i++) xs[i] = (float)((i * 7) % 13) - 6.0f;
    for (int i = 0; i < count * 4; i++) { /* (b, 2, 6, 8) from (b, 2, 3, 4) */
      int col = i % 8, row = (i / 8) % 6, plane = i / 48;
      up[i] = xs[plane * 12 + row / 2 * 4 + col / 2];
    }
    for (int i = 0; i < count - ITEM; i++) tail[i] = xs[ITEM + i];
    for (int i = 0; i < count; i++) back[i] = xs[(b - 1 - i / ITEM) * ITEM + i % ITEM];
    loom_tensor_t *x = NULL, *y[3] = {0};
    CHECK_OK(loom_tensor_from_data(LOOM_F32, 4, (int64_t[]){b, 2, 3, 4}, xs,
                                   sizeof *xs * (size_t)count, &x));
    for (int k = 0; k < 3; k++) CHECK_OK(loom_executable_new_output_for(e, 1, &x, k, &y[k]));
    CHECK_OK(loom_executable_run(e, 1, &x, 3, y));
    CHECK(loom_tensor_dim(y[0], 0) == b && loom_tensor_dim(y[0], 3) == 8);
    CHECK(loom_tensor_dim(y[1], 0) == b - 1 && loom_tensor_dim(y[2], 0) == b);
    CHECK_TENSOR(y[0], up, count * 4, 0, 0);
    if (b > 1) CHECK_TENSOR(y[1], tail, count - ITEM, 0, 0);
    CHECK_TENSOR(y[2], back, count, 0, 0);
    loom_tensor_destroy(x);
    for (int k = 0; k < 3; k++) loom_tensor_destroy(y[k]);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* tests/onnx/models/symbolic_values.onnx (tests/onnx/make_models.py): a
 * symbolic T, computed as PyTorch exports x.size(0), used as a slice's end
 * (pe[:T], pe[1:T + 1:2]), as a tensor (x * float(T), x[T - 1]) and as
 * a Range's start (x[arange(T - 1, -1, -1)]), one
 * executable (and the interpreter) at three (T, B) against values by
 * hand; a T past pe's 10 rows fails the run with an error. */
static void symbolic_values_expected(const float *x, int t, int b, double *pos, double *odd,
                                     double *scaled, double *last, double *back) {
  for (int i = 0; i < t * b * 4; i++) {
    int row = i / (b * 4), col = i % 4;
    pos[i] = (double)x[i] + row / 2.0 - col;
    scaled[i] = (double)x[i] * t;
  }
  for (int i = 0; i < (t + 1) / 2 * 4; i++) odd[i] = (1 + 2 * (i / 4)) / 2.0 - i % 4;
  for (int i = 0; i < b * 4; i++) last[i] = x[(t - 1) * b * 4 + i];
  for (int i = 0; i < t * b * 4; i++) back[i] = x[(t - 1 - i / (b * 4)) * b * 4 + i % (b * 4)];
}

static void symbolic_values(void) {
  loom_graph_t *g = load_model("symbolic_values.onnx");
  loom_compile_options_t co;
  loom_compile_options_init(&co);
  co.dynamic_symbols = 1;
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, &co, &e));
  int sizes[4][2] = {{3, 2}, {10, 1}, {1, 3}, {11, 1}};
  for (int s = 0; e && s < 4; s++) {
    int t = sizes[s][0], b = sizes[s][1], count = t * b * 4;
    float xs[11 * 3 * 4];
    double pos[11 * 3 * 4], odd[6 * 4], scaled[11 * 3 * 4], last[3 * 4], back[11 * 3 * 4];
    for (int i = 0; i < count; i++) xs[i] = (float)((i * 5 + s) % 9) - 4.0f;
    loom_tensor_t *x = NULL, *y[5] = {0};
    CHECK_OK(loom_tensor_from_data(LOOM_F32, 3, (int64_t[]){t, b, 4}, xs,
                                   sizeof *xs * (size_t)count, &x));
    if (t > 10) { /* pe has 10 rows: pe[:11] is past them */
      loom_status_t st = loom_interpret(g, 1, &x, 5, y);
      CHECK(st != LOOM_OK && strstr(loom_last_error(), "gather"));
      for (int k = 0; k < 5; k++) loom_tensor_destroy(y[k]), y[k] = NULL;
      for (int k = 0; k < 5; k++) CHECK_OK(loom_executable_new_output_for(e, 1, &x, k, &y[k]));
      CHECK(loom_executable_run(e, 1, &x, 5, y) != LOOM_OK);
      for (int k = 0; k < 5; k++) loom_tensor_destroy(y[k]);
      loom_tensor_destroy(x);
      continue;
    }
    symbolic_values_expected(xs, t, b, pos, odd, scaled, last, back);
    for (int way = 0; way < 2; way++) {
      if (way == 0) {
        CHECK_OK(loom_interpret(g, 1, &x, 5, y));
      } else {
        for (int k = 0; k < 5; k++) CHECK_OK(loom_executable_new_output_for(e, 1, &x, k, &y[k]));
        CHECK_OK(loom_executable_run(e, 1, &x, 5, y));
      }
      CHECK(y[1] && loom_tensor_dim(y[1], 0) == (t + 1) / 2);
      CHECK(y[3] && loom_tensor_rank(y[3]) == 2 && loom_tensor_dim(y[3], 0) == b);
      CHECK_TENSOR(y[0], pos, count, 0, 0);
      CHECK_TENSOR(y[1], odd, (t + 1) / 2 * 4, 0, 0);
      CHECK_TENSOR(y[2], scaled, count, 0, 0);
      CHECK_TENSOR(y[3], last, b * 4, 0, 0);
      CHECK_TENSOR(y[4], back, count, 0, 0);
      for (int k = 0; k < 5; k++) loom_tensor_destroy(y[k]), y[k] = NULL;
    }
    loom_tensor_destroy(x);
  }
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

/* tests/onnx/models/bitwise.onnx (tests/onnx/make_models.py): the bit
 * ops of opset 18 on uint8 (held as i32) and a uint64 right shift (held as
 * the i64 of its bits), interpreted and compiled, against values by hand.
 * BitwiseNot and BitShift LEFT stay within 8 bits; the uint64 shift is
 * logical, and 0 from 64 on (2^63 reads as a negative i64). */
static void bitwise_unsigned(void) {
  loom_graph_t *g = load_model("bitwise.onnx");
  if (!g) return;
  int32_t a[4] = {0, 5, 201, 255}, b[4] = {255, 3, 100, 128}, sa[4] = {1, 4, 7, 8};
  int64_t x[5] = {INT64_MIN + 16, -1, 1000, INT64_MIN + 16, -1};
  int64_t s[5] = {4, 63, 1, 64, INT64_MIN};
  int64_t n4[1] = {4}, n5[1] = {5};
  loom_tensor_t *in[5] = {NULL};
  CHECK_OK(loom_tensor_from_data(LOOM_I32, 1, n4, a, sizeof a, &in[0]));
  CHECK_OK(loom_tensor_from_data(LOOM_I32, 1, n4, b, sizeof b, &in[1]));
  CHECK_OK(loom_tensor_from_data(LOOM_I32, 1, n4, sa, sizeof sa, &in[2]));
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, n5, x, sizeof x, &in[3]));
  CHECK_OK(loom_tensor_from_data(LOOM_I64, 1, n5, s, sizeof s, &in[4]));
  static const int32_t want8[5][4] = {
      {0, 1, 64, 128},     /* and */
      {255, 7, 237, 255},  /* or */
      {255, 6, 173, 127},  /* xor */
      {255, 250, 54, 0},   /* not */
      {0, 80, 128, 0},     /* shl: 201 << 7 keeps its low bit; 255 << 8 none */
  };
  /* (2^63 + 16) >> 4 = 2^59 + 1; (2^64 - 1) >> 63 = 1 */
  static const int64_t want64[5] = {576460752303423489LL, 1, 500, 0, 0};
  loom_executable_t *e = NULL;
  CHECK_OK(loom_compile(g, NULL, &e));
  for (int way = 0; way < 2; way++) {
    loom_tensor_t *out[6] = {NULL};
    if (way == 0) CHECK_OK(loom_interpret(g, 5, in, 6, out));
    else {
      for (int k = 0; e && k < 6; k++) CHECK_OK(loom_executable_new_output_for(e, 5, in, k, &out[k]));
      if (e) CHECK_OK(loom_executable_run(e, 5, in, 6, out));
    }
    for (int k = 0; k < 5 && out[k]; k++) {
      CHECK(loom_tensor_dtype(out[k]) == LOOM_I32);
      CHECK(memcmp(loom_tensor_data(out[k]), want8[k], sizeof want8[k]) == 0);
    }
    if (out[5]) {
      CHECK(loom_tensor_dtype(out[5]) == LOOM_I64);
      CHECK(memcmp(loom_tensor_data(out[5]), want64, sizeof want64) == 0);
    }
    for (int k = 0; k < 6; k++) loom_tensor_destroy(out[k]);
  }
  for (int k = 0; k < 5; k++) loom_tensor_destroy(in[k]);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(loads_runs_and_names);
  TEST_RUN(fixed_inputs_become_constants);
  TEST_RUN(symbolic_dims_given_sizes);
  TEST_RUN(fine_tunes_imported_weights);
  TEST_RUN(bad_models_fail_clearly);
  TEST_RUN(symbolic_shape_chain);
  TEST_RUN(dynamic_batch_resize_and_slices);
  TEST_RUN(symbolic_values);
  TEST_RUN(bitwise_unsigned);
  return test_summary();
}
