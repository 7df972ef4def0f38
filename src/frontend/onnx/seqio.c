/* Sequence and optional values at a model's edges. Loom's graph inputs
 * and outputs are tensors, and a sequence is a list the import holds
 * (rules_sequence.c), so a sequence input NAME of length k (the caller
 * gives k) is the tensor inputs NAME.0 .. NAME.(k-1), a sequence output
 * the outputs NAME.0 ..; an optional is its element, or nothing when it
 * is none. The options say lengths, element shapes and which optionals
 * are none (include/loom/onnx.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "frontend/onnx/onnx_import.h"

/* Most elements a sequence input may have. */
#define SEQ_MAX 4096

static const char *type_kind(const Onnx__TypeProto *tp) {
  switch (tp ? tp->value_case : 0) {
  case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: return "tensor";
  case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: return "sequence";
  case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: return "map";
  case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: return "optional";
  case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: return "sparse tensor";
  default: return "untyped";
  }
}

int ox_type_is_optional(const Onnx__TypeProto *tp) {
  return tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type;
}

/* The sequence type tp is, or the one an optional tp holds; NULL if none. */
static const Onnx__TypeProto__Sequence *seq_type(const Onnx__TypeProto *tp) {
  if (ox_type_is_optional(tp)) tp = tp->optional_type->elem_type;
  return tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? tp->sequence_type : NULL;
}

/* Index of name in the count names (NULL entries skipped), or -1. */
static int find_name(int count, const char *const *names, const char *name) {
  for (int k = 0; names && k < count; k++)
    if (names[k] && !strcmp(names[k], name)) return k;
  return -1;
}

/* Fails unless the given shape fits the one the model declares (if
 * any): its rank, and the sizes it fixes. */
static loom_status_t shape_fits(const char *name, const Onnx__TypeProto__Tensor *tt,
                                const loom_dim_t *dims, int rank) {
  if (!tt->shape) return LOOM_OK;
  int ok = (int)tt->shape->n_dim == rank;
  for (int d = 0; ok && d < rank; d++)
    ok = tt->shape->dim[d]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
         tt->shape->dim[d]->dim_value == dims[d];
  return ok ? LOOM_OK : loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: the shape given for '%s' "
                                  "does not fit the model's (rank %zu)", name, tt->shape->n_dim);
}

/* Dims of the graph input `name` of tensor type tt: the options' shape
 * for it, or what the model declares (dim names as symbols, unnamed
 * dims a symbol of the input's name). */
static loom_status_t input_dims(loom_graph_t *g, const loom_onnx_options_t *o, const char *name,
                                const Onnx__TypeProto__Tensor *tt, loom_dim_t *dims, int *rank) {
  int k = find_name(o->n_elem_shapes, o->elem_names, name);
  if (k >= 0) {
    *rank = o->elem_ranks[k];
    if (*rank < 0 || *rank > LOOM_MAX_RANK || (*rank && !o->elem_dims[k]))
      return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: elem_names entry '%s' has rank %d",
                       name, *rank);
    for (int d = 0; d < *rank; d++) {
      if (o->elem_dims[k][d] < 0)
        return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: elem_names entry '%s' has dim %d "
                         "of %lld", name, d, (long long)o->elem_dims[k][d]);
      dims[d] = o->elem_dims[k][d];
    }
    return shape_fits(name, tt, dims, *rank);
  }
  if (!tt->shape)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': the model declares no shape for it "
                     "(give one in the options' elem_names, elem_ranks and elem_dims)", name);
  if (tt->shape->n_dim > LOOM_MAX_RANK)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': rank %zu is over Loom's %d", name,
                     tt->shape->n_dim, LOOM_MAX_RANK);
  *rank = (int)tt->shape->n_dim;
  for (int d = 0; d < *rank; d++) {
    const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
    char fresh[320];
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dim->dim_value < 0 || dim->dim_value > ((int64_t)1 << 40))
        return loom_fail(LOOM_ERR_FORMAT, "ONNX input '%s': dim %d is %lld (dims run from 0 to 2^40)", name, d,
                         (long long)dim->dim_value);
      dims[d] = dim->dim_value;
      continue;
    }
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
        dim->dim_param && *dim->dim_param)
      snprintf(fresh, sizeof fresh, "%s", dim->dim_param);
    else
      snprintf(fresh, sizeof fresh, "%s.d%d", name, d);
    LOOM_TRY(loom_dim_symbol(g, fresh, &dims[d]));
  }
  return LOOM_OK;
}

/* The graph input `name` of the tensor type tp. */
static loom_status_t tensor_input(ox_node_t *n, const loom_onnx_options_t *o, const char *name,
                                  const Onnx__TypeProto *tp, loom_value_t *out) {
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': a %s (Loom's inputs are tensors, "
                     "sequences of tensors and optionals of those)", name, type_kind(tp));
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  loom_dtype_t dt;
  if (!tt->has_elem_type || !ox_dtype_from_onnx(tt->elem_type, &dt))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': element type %s is not supported",
                     name, ox_onnx_type_name(tt->has_elem_type ? tt->elem_type : 0));
  loom_dim_t dims[LOOM_MAX_RANK];
  int rank = 0;
  LOOM_TRY(input_dims(n->g, o, name, tt, dims, &rank));
  return loom_graph_input(n->g, name, dt, rank, dims, out);
}

/* A sequence input: the options' length of tensor inputs NAME.i. */
static loom_status_t sequence_input(ox_node_t *n, const loom_onnx_options_t *o, const char *name,
                                    const Onnx__TypeProto__Sequence *st, loom_value_t *out) {
  int k = find_name(o->n_seqs, o->seq_names, name);
  if (k < 0)
    return loom_fail(LOOM_ERR_INVALID, "ONNX input '%s' is a sequence: its length must be given "
                     "when the model loads (the options' seq_names and seq_lengths)", name);
  int len = o->seq_lengths[k];
  if (len < 0 || len > SEQ_MAX)
    return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: sequence '%s' has length %d (0 to %d)",
                     name, len, SEQ_MAX);
  loom_dtype_t dt = LOOM_F32;
  const Onnx__TypeProto *et = st->elem_type;
  if (et && et->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && et->tensor_type &&
      et->tensor_type->has_elem_type && !ox_dtype_from_onnx(et->tensor_type->elem_type, &dt))
    return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX input '%s': element type %s is not supported",
                     name, ox_onnx_type_name(et->tensor_type->elem_type));
  loom_value_t *items = core_calloc((size_t)len + 1, sizeof *items);
  if (!items) return loom_fail(LOOM_ERR_NOMEM, "loom_onnx_load: out of memory");
  loom_status_t s = LOOM_OK;
  for (int i = 0; s == LOOM_OK && i < len; i++) {
    char elem[300];
    snprintf(elem, sizeof elem, "%s.%d", name, i);
    s = tensor_input(n, o, elem, et, &items[i]);
  }
  if (s == LOOM_OK) s = ox_seq_new(n, len, items, dt, out);
  core_free(items);
  return s;
}

loom_status_t ox_seqio_input(ox_node_t *n, const loom_onnx_options_t *o,
                             const Onnx__ValueInfoProto *vi, int none, loom_value_t *out) {
  const char *name = vi->name ? vi->name : "";
  const Onnx__TypeProto *tp = vi->type;
  if (ox_type_is_optional(tp)) {
    if (none) return ox_seq_none(n, out);
    tp = tp->optional_type->elem_type;
  }
  const Onnx__TypeProto__Sequence *st =
      tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? tp->sequence_type : NULL;
  return st ? sequence_input(n, o, name, st, out) : tensor_input(n, o, name, tp, out);
}

loom_status_t ox_seqio_output(ox_node_t *n, const char *name, loom_value_t v) {
  int count = 0, is_none = 0;
  const loom_value_t *items = NULL;
  LOOM_TRY(ox_seq_items(n, v, &count, &items, &is_none));
  for (int i = 0; i < count; i++) {
    char elem[300];
    snprintf(elem, sizeof elem, "%s.%d", name, i);
    if (ox_is_seq(items[i]))
      return loom_fail(LOOM_ERR_UNSUPPORTED, "ONNX output '%s': a sequence of sequences", name);
    LOOM_TRY(loom_graph_output_named(n->g, elem, items[i]));
  }
  return LOOM_OK;
}

/* Whether elem names element i < the listed length of a listed sequence. */
static int elem_listed(const loom_onnx_options_t *o, const char *elem) {
  const char *dot = strrchr(elem, '.');
  if (!dot || !dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1)) return 0;
  for (int k = 0; k < o->n_seqs; k++)
    if (o->seq_names[k] && strlen(o->seq_names[k]) == (size_t)(dot - elem) &&
        !strncmp(o->seq_names[k], elem, (size_t)(dot - elem)))
      return atoi(dot + 1) < o->seq_lengths[k];
  return 0;
}

loom_status_t ox_seqio_check(const Onnx__GraphProto *gp, const loom_onnx_options_t *o) {
  if (o->n_seqs < 0 || (o->n_seqs > 0 && (!o->seq_names || !o->seq_lengths)))
    return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: n_seqs is %d with seq_names or "
                     "seq_lengths null", o->n_seqs);
  if (o->n_elem_shapes < 0 ||
      (o->n_elem_shapes > 0 && (!o->elem_names || !o->elem_ranks || !o->elem_dims)))
    return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: n_elem_shapes is %d with elem_names, "
                     "elem_ranks or elem_dims null", o->n_elem_shapes);
  for (int k = 0; k < o->n_seqs; k++) {
    const char *name = o->seq_names[k] ? o->seq_names[k] : "(null)";
    size_t i = 0;
    while (i < gp->n_input && (!gp->input[i]->name || strcmp(gp->input[i]->name, name))) i++;
    if (i == gp->n_input || !seq_type(gp->input[i]->type))
      return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: the model has no sequence input '%s'",
                       name);
  }
  for (int k = 0; k < o->n_elem_shapes; k++)
    if (!o->elem_names[k] || !elem_listed(o, o->elem_names[k]))
      return loom_fail(LOOM_ERR_INVALID, "loom_onnx_load: elem_names names '%s', no element "
                       "of a sequence input the options give a length", 
                       o->elem_names[k] ? o->elem_names[k] : "(null)");
  return LOOM_OK;
}

loom_status_t loom_onnx_load_tensor_memory(const void *data, size_t size, loom_tensor_t **out) {
  LOOM_CHECK_ARG(data);
  LOOM_CHECK_ARG(out);
  *out = NULL;
  Onnx__TensorProto *p = onnx__tensor_proto__unpack(NULL, size, data);
  if (!p) return loom_fail(LOOM_ERR_FORMAT, "loom_onnx_load_tensor_memory: not a valid ONNX "
                           "TensorProto (%zu bytes)", size);
  loom_status_t st = ox_tensor_from_proto(p, ".", out);
  onnx__tensor_proto__free_unpacked(p, NULL);
  LOOM_TRY(st);
  loom_clear_error();
  return LOOM_OK;
}
