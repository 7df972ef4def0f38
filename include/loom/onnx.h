/* Loom: ONNX models in.
 *
 * loom_onnx_load reads an ONNX model (IR version 3 and up, the default
 * domain) into a new graph: the model's inputs become
 * the graph's inputs in their order and with their names (inputs that an
 * initializer gives a default are constants, not inputs), its outputs the
 * graph's outputs with their names, its initializers constants (or
 * parameters, see below), and each node the Loom ops that compute it.
 * Dims named in the model (dim_param) become symbols of that name;
 * unnamed dynamic dims get fresh symbols ("unk_0", ...). Integer types
 * Loom does not have widen: uint8, int16 and uint16 to i32, uint32 and
 * uint64 to i64 (arithmetic that would wrap in the narrow type does not).
 * Models of opsets before 7 import too (their broadcast attributes and
 * older attribute forms are read). Values computed
 * from constants only (shape arithmetic, weight transposes) are folded to
 * constants at load time. The graph is an ordinary Loom graph: compile it,
 * interpret it, differentiate it. `loom onnx-ops` lists the ONNX ops the
 * importer has and, for the others, why not. */
#ifndef LOOM_ONNX_H
#define LOOM_ONNX_H

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_onnx_options {
  size_t size; /* sizeof(loom_onnx_options_t): init sets it */
  /* 1: the float initializers become parameters named as in the model,
   * which loom_grad and the optimizers can train (integer initializers,
   * shapes and indices, stay constants); 0: constants (inference). */
  int trainable;
  /* Where external data files are looked up: NULL is the model file's
   * folder for loom_onnx_load and the working folder for _memory. */
  const char *base_dir;
  /* Inputs of the model fixed to values: each becomes a constant, so that
   * shapes, axes or sizes the model reads from it at run time (Reshape's
   * shape, Slice's starts, TopK's K, ...) are known when it loads and the
   * graph is specialized to them. The graph then has the model's other
   * inputs only. Names that no input of the model has fail with
   * LOOM_ERR_INVALID. */
  int n_fixed;
  const char *const *fixed_names;
  const loom_tensor_t *const *fixed_values;
  /* ---- Sequence and optional values at the model's edges ----
   * Loom's values are tensors, so a sequence input NAME of the model
   * becomes the graph's tensor inputs "NAME.0" .. "NAME.(k-1)", its length
   * k given here (a sequence input not listed fails with LOOM_ERR_INVALID).
   * Each element has the model's declared element type (dims it names
   * become symbols of that name, as a tensor input's do) unless
   * elem_shapes gives its shape. A sequence output NAME of length k (known
   * when the model loads) becomes the outputs "NAME.0" .. "NAME.(k-1)"
   * (none for an empty one). An optional input is present unless fixed to
   * NULL above (n_fixed entry with fixed_values[k] NULL: it is none); when
   * present, it is an input like its element type's (a tensor NAME, or a
   * sequence NAME.i). An optional output is its element's outputs when
   * present, and no output at all when none (nor when it is an empty
   * sequence: only the graph's output names tell). */
  int n_seqs;
  const char *const *seq_names;
  const int *seq_lengths;
  /* Shapes of sequence elements, by element input name ("NAME.i"): the
   * model often declares none, or one dim name for elements of different
   * sizes. elem_ranks[k] dims elem_dims[k][0..rank). */
  int n_elem_shapes;
  const char *const *elem_names;
  const int *elem_ranks;
  const int64_t *const *elem_dims;
  /* Sizes for symbolic input dims, as ONNX Runtime's free dimension
   * overrides: an input dim named dim_names[k] (its dim_param, or "unk_0",
   * ... for an unnamed one) is dim_sizes[k]; and the dims of input
   * shape_names[k] are shape_dims[k][0..shape_ranks[k]) (its static dims
   * must agree). The graph is specialized to them, so that ops Loom
   * imports only over static dims (ScatterElements' data, a Slice to a
   * size computed from one) take the model. A name no input has fails
   * with LOOM_ERR_INVALID. */
  int n_dims;
  const char *const *dim_names;
  const int64_t *dim_sizes;
  int n_shapes;
  const char *const *shape_names;
  const int *shape_ranks;
  const int64_t *const *shape_dims;
} loom_onnx_options_t;

LOOM_API loom_status_t loom_onnx_options_init_sized(loom_onnx_options_t *o, size_t size);
#define loom_onnx_options_init(o) loom_onnx_options_init_sized((o), sizeof *(o))

/* A new graph from the model at path (options NULL: defaults). A malformed,
 * truncated or unsupported model fails with LOOM_ERR_FORMAT or
 * LOOM_ERR_UNSUPPORTED, naming the node (its name, or its op and position)
 * and what is wrong. */
LOOM_API loom_status_t loom_onnx_load(const char *path, const loom_onnx_options_t *o,
                                      loom_graph_t **out);
/* The same from the model's bytes in memory. */
LOOM_API loom_status_t loom_onnx_load_memory(const void *data, size_t size,
                                             const loom_onnx_options_t *o,
                                             loom_graph_t **out);
/* What the model at path holds, read without importing it: its producer,
 * the opsets it imports, its inputs with their dims (symbolic ones by
 * name), the ops of its graph and subgraphs with their counts, and every
 * op the importer lacks with the reason. Lines of text in a string the
 * caller frees with loom_free. */
LOOM_API loom_status_t loom_onnx_describe(const char *path, char **text);
/* A tensor from a serialized ONNX TensorProto (the input_0.pb files of
 * ONNX's test data). Integer types Loom does not have are widened: uint8,
 * int16 and uint16 to i32, uint32 and uint64 to i64 (see loom_onnx_load). */
LOOM_API loom_status_t loom_onnx_load_tensor(const char *path, loom_tensor_t **out);
/* The same from a serialized TensorProto's bytes (a SequenceProto's or
 * OptionalProto's elements; no external data). */
LOOM_API loom_status_t loom_onnx_load_tensor_memory(const void *data, size_t size,
                                                    loom_tensor_t **out);

/* Whether the importer has the ONNX op `op_type` (of the default domain or
 * ai.onnx.preview.training, whose names do not clash): 1 with
 * *reason NULL, or 0 with *reason saying why not (a string with the
 * library's lifetime). */
LOOM_API int loom_onnx_op_supported(const char *op_type, const char **reason);

#ifdef __cplusplus
}
#endif

#endif
