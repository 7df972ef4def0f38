/* loom._C.op: any op of the op table, recorded into the step, by name
 * with named attributes, through loom_graph_add_op_index. The Python package
 * builds its functions from this one entry and the table's rows
 * (op_table), so that there is no second list of ops. */
#include "pyloom.h"

#include <string.h>

enum { MAX_INPUTS = 64, MAX_OUTPUTS = 64, MAX_ATTRS = 16 };

/* Storage for the ints lists of one call's attributes. */
typedef struct attr_ints {
  int64_t v[MAX_ATTRS][LOOM_MAX_ATTR_INTS];
} attr_ints_t;

/* The op's name in the table, for messages. */
static const char *op_name(int op) {
  loom_op_info_t info = LOOM_OP_INFO_INIT;
  return loom_op_get_info(op, &info) == LOOM_OK ? info.name : "op";
}

static int attr_value(int op, PyObject *key, PyObject *value,
                      loom_attr_t *a, int64_t *ints) {
  const char *name = PyUnicode_AsUTF8(key);
  if (!name) return -1;
  loom_attr_info_t info = LOOM_ATTR_INFO_INIT;
  int n = loom_op_attr_count(op), k = 0;
  for (; k < n; k++) {
    if (loom_op_get_attr(op, k, &info) != LOOM_OK) {
      py_fail(LOOM_ERR_INVALID);
      return -1;
    }
    if (!strcmp(info.name, name)) break;
  }
  if (k == n) {
    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", op_name(op), name);
    return -1;
  }
  a->name = info.name; /* the table's string outlives the call */
  a->kind = info.kind;
  switch (info.kind) {
    case LOOM_ATTR_INT:
    case LOOM_ATTR_DTYPE:
      a->i = PyLong_AsLongLong(value);
      return a->i == -1 && PyErr_Occurred() ? -1 : 0;
    case LOOM_ATTR_FLOAT:
      a->f = PyFloat_AsDouble(value);
      return a->f == -1.0 && PyErr_Occurred() ? -1 : 0;
    case LOOM_ATTR_INTS: {
      PyObject *fast = PySequence_Fast(value, "an ints attribute is a sequence of ints");
      if (!fast) return -1;
      Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
      if (m > LOOM_MAX_ATTR_INTS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: attribute %s takes at most %d ints (got %zd)",
                     op_name(op), name, LOOM_MAX_ATTR_INTS, m);
        return -1;
      }
      for (Py_ssize_t i = 0; i < m; i++) {
        ints[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (ints[i] == -1 && PyErr_Occurred()) {
          Py_DECREF(fast);
          return -1;
        }
      }
      Py_DECREF(fast);
      a->n = (int)m;
      a->ints = ints;
      return 0;
    }
    default:
      PyErr_Format(PyExc_TypeError, "%s: attribute %s (a subgraph) cannot be given from Python",
                   op_name(op), name);
      return -1;
  }
}

/* The value of input i: under no_grad, a value that requires grad is cut
 * from the gradient (stop_gradient), as PyTorch's no_grad records
 * nothing. */
static int input_value(loom_graph_t *g, PyObject *o, bool grad, loom_value_t *v,
                       bool *requires_grad) {
  if (!py_tensor_check(o)) {
    PyErr_Format(PyExc_TypeError, "expected a loom Tensor, got %s", Py_TYPE(o)->tp_name);
    return -1;
  }
  py_tensor_t *t = (py_tensor_t *)o;
  if (py_step_value(t, v) < 0) return -1;
  if (!t->requires_grad) return 0;
  if (grad) {
    *requires_grad = true;
    return 0;
  }
  loom_status_t s = loom_graph_add_op(g, "stop_gradient", 1, v, 0, NULL, 1, v, NULL);
  return s == LOOM_OK ? 0 : (py_fail(s), -1);
}

/* Whether a gradient flows through op, asked of the table once per op. */
static bool differentiable(int op) {
  static signed char known[1024]; /* 0 unknown, 1 yes, -1 no */
  if (op < 0 || op >= 1024) return false;
  if (!known[op]) {
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    known[op] = loom_op_get_info(op, &info) == LOOM_OK && info.has_gradient &&
                        !info.not_differentiable ? 1 : -1;
  }
  return known[op] > 0;
}

/* Whether op rounds (floor, ceil, round, sign): its float output requires
 * grad where its input does, as PyTorch's, its gradient zero (the op
 * table's ZERO rule) rather than none. */
static bool rounds(int op) {
  static const char *const names[] = {"floor", "ceil", "round", "sign"};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    int found = -1;
    if (loom_op_find(names[k], &found) == LOOM_OK && op == found) return true;
  }
  return false;
}

/* Whether v holds floats: only those carry gradients (a cast to an
 * integer, sort's indices do not, as in PyTorch). */
static bool float_value(const loom_graph_t *g, loom_value_t v) {
  loom_dtype_t dt;
  if (loom_value_type(g, v, &dt, NULL, NULL) != LOOM_OK) return true;
  return dt == LOOM_F32 || dt == LOOM_F64 || dt == LOOM_F16 || dt == LOOM_BF16;
}

/* Records op number op on inputs in[0..n_in-1] with attributes
 * attrs (a dict, or NULL): the outputs, a Tensor or a tuple. */
static PyObject *record(int op, PyObject *const *inputs, Py_ssize_t n_in,
                        PyObject *attr_dict) {
  if (py_step_before_record() < 0) return NULL;
  loom_graph_t *g = py_step_graph();
  if (!g) return NULL;
  if (n_in > MAX_INPUTS) {
    PyErr_Format(PyExc_ValueError, "%s: at most %d inputs", op_name(op), MAX_INPUTS);
    return NULL;
  }
  loom_value_t in[MAX_INPUTS], out[MAX_OUTPUTS];
  bool grad = py_step_grad_enabled(), requires_grad = false;
  for (Py_ssize_t i = 0; i < n_in; i++)
    if (input_value(g, inputs[i], grad, &in[i], &requires_grad) < 0) return NULL;
  loom_attr_t attrs[MAX_ATTRS];
  static attr_ints_t ints; /* the GIL serializes calls */
  int n_attrs = 0;
  if (attr_dict) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(attr_dict, &pos, &key, &value)) {
      if (n_attrs == MAX_ATTRS) {
        PyErr_Format(PyExc_ValueError, "%s: too many attributes", op_name(op));
        return NULL;
      }
      if (attr_value(op, key, value, &attrs[n_attrs], ints.v[n_attrs]) < 0) return NULL;
      n_attrs++;
    }
  }
  int n_out = 0;
  loom_status_t s =
      loom_graph_add_op_index(g, op, (int)n_in, in, n_attrs, attrs, MAX_OUTPUTS, out, &n_out);
  if (s != LOOM_OK) return py_fail(s);
  requires_grad = requires_grad && (differentiable(op) || rounds(op));
  if (n_out == 1) return py_step_lazy(out[0], requires_grad && float_value(g, out[0]));
  PyObject *result = PyTuple_New(n_out);
  for (int i = 0; result && i < n_out; i++) {
    PyObject *t = py_step_lazy(out[i], requires_grad && float_value(g, out[i]));
    if (!t) Py_CLEAR(result);
    else PyTuple_SET_ITEM(result, i, t);
  }
  return result;
}

/* Whether op's output shape depends on its input data (nonzero). */
static bool data_shaped(int op) {
  static signed char known[1024];
  if (op < 0 || op >= 1024) return false;
  if (!known[op]) {
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    known[op] = loom_op_get_info(op, &info) == LOOM_OK && info.data_dependent_shape ? 1 : -1;
  }
  return known[op] > 0;
}

/* The op called name, a str object: the names loom.functional passes are
 * the same few interned constants call after call, so a small table keyed
 * by the object (held, so that its address is not reused) skips the
 * lookup by text. */
static int op_of(PyObject *name, int *op) {
  enum { SLOTS = 256 };
  static PyObject *key[SLOTS];
  static int value[SLOTS];
  size_t k = ((uintptr_t)name >> 4) % SLOTS;
  if (key[k] == name) {
    *op = value[k];
    return 0;
  }
  const char *text = PyUnicode_AsUTF8(name);
  if (!text) return -1;
  if (loom_op_find(text, op) != LOOM_OK) {
    py_fail(LOOM_ERR_INVALID);
    return -1;
  }
  Py_INCREF(name);
  Py_XSETREF(key[k], name);
  value[k] = *op;
  return 0;
}

/* op(name, inputs, attrs): the op's outputs, a Tensor or a tuple. */
static PyObject *fn_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1]) ||
      (args[2] != Py_None && !PyDict_Check(args[2]))) {
    PyErr_SetString(PyExc_TypeError, "op(name, inputs: tuple, attrs: dict or None)");
    return NULL;
  }
  int op;
  if (op_of(args[0], &op) < 0) return NULL;
  if (data_shaped(op) && py_step_break("an output shape that depends on data") < 0)
    return NULL;
  return record(op, &PyTuple_GET_ITEM(args[1], 0), PyTuple_GET_SIZE(args[1]),
                args[2] == Py_None ? NULL : args[2]);
}

/* ---- Python's operators on tensors ----
 * Two tensors of one dtype record their op at once; anything else (a
 * Python number, two dtypes to promote, integer true division) goes to the
 * package's function of the same meaning (loom.functional), which
 * _set_operator_fallbacks hands over. */

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MATMUL, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
       OP_NEG, N_OPERATORS };
static const char *const operator_ops[N_OPERATORS] = {"add", "sub", "mul", "div", "matmul",
                                                      "eq", "ne", "lt", "le", "gt", "ge",
                                                      "neg"};
static const char *const operator_fallbacks[N_OPERATORS] = {
    "add", "sub", "mul", "div", "matmul", "eq", "ne", "lt", "le", "gt", "ge", "neg"};
static PyObject *fallbacks[N_OPERATORS];
static int operator_op[N_OPERATORS];

static bool is_float(loom_dtype_t d) {
  return d == LOOM_F32 || d == LOOM_F64 || d == LOOM_F16 || d == LOOM_BF16;
}

static PyObject *binary(int which, PyObject *a, PyObject *b) {
  if (py_tensor_check(a) && py_tensor_check(b)) {
    loom_dtype_t da = ((py_tensor_t *)a)->dtype, db = ((py_tensor_t *)b)->dtype;
    /* two bools add and multiply as or and and: the package's functions */
    bool bool_arith = da == LOOM_BOOL && which <= OP_MATMUL;
    if (da == db && !bool_arith && (which != OP_DIV || is_float(da))) {
      PyObject *in[2] = {a, b};
      return record(operator_op[which], in, 2, NULL);
    }
  }
  if (!fallbacks[which]) Py_RETURN_NOTIMPLEMENTED;
  return PyObject_CallFunctionObjArgs(fallbacks[which], a, b, NULL);
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return binary(OP_ADD, a, b); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return binary(OP_SUB, a, b); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return binary(OP_MUL, a, b); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return binary(OP_DIV, a, b); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) { return binary(OP_MATMUL, a, b); }
static PyObject *nb_neg(PyObject *a) {
  return record(operator_op[OP_NEG], &a, 1, NULL);
}

static PyObject *richcompare(PyObject *a, PyObject *b, int how) {
  static const int which[] = {[Py_LT] = OP_LT, [Py_LE] = OP_LE, [Py_EQ] = OP_EQ,
                              [Py_NE] = OP_NE, [Py_GT] = OP_GT, [Py_GE] = OP_GE};
  return binary(which[how], a, b);
}

PyNumberMethods py_tensor_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_true_divide = nb_div,
    .nb_matrix_multiply = nb_matmul,
    .nb_negative = nb_neg,
};
richcmpfunc py_tensor_richcompare = richcompare;

/* _set_operator_fallbacks(module): the functions of loom.functional that
 * the operators call for what they do not record themselves. */
static PyObject *fn_set_operator_fallbacks(PyObject *self, PyObject *module) {
  (void)self;
  for (int i = 0; i < N_OPERATORS; i++) {
    if (loom_op_find(operator_ops[i], &operator_op[i]) != LOOM_OK) return py_fail(LOOM_ERR_INVALID);
    PyObject *f = PyObject_GetAttrString(module, operator_fallbacks[i]);
    if (!f) return NULL;
    Py_XSETREF(fallbacks[i], f);
  }
  Py_RETURN_NONE;
}

/* op_table(): each op as (name, fusion class, doc, in_min, in_max, n_out,
 * differentiable, ((attr name, kind, optional, default text), ...)). */
static PyObject *fn_op_table(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  int n = loom_op_count();
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    if (loom_op_get_info(i, &info) != LOOM_OK) {
      Py_DECREF(list);
      return py_fail(LOOM_ERR_INVALID);
    }
    PyObject *attrs = PyTuple_New(info.n_attrs);
    for (int k = 0; attrs && k < info.n_attrs; k++) {
      loom_attr_info_t a = LOOM_ATTR_INFO_INIT;
      loom_op_get_attr(i, k, &a);
      PyObject *row = Py_BuildValue("(ssis)", a.name, loom_attr_kind_name(a.kind),
                                    a.optional, a.default_text);
      if (!row) Py_CLEAR(attrs);
      else PyTuple_SET_ITEM(attrs, k, row);
    }
    PyObject *row = attrs ? Py_BuildValue("(sssiiiiN)", info.name, info.fusion_class,
                                          info.doc, info.in_min, info.in_max, info.n_out,
                                          info.has_gradient && !info.not_differentiable,
                                          attrs)
                          : NULL;
    if (!row) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, row);
  }
  return list;
}

PyMethodDef py_op_methods[] = {
    {"op", (PyCFunction)(void (*)(void))fn_op, METH_FASTCALL,
     "op(name, inputs, attrs): records op `name` of the op table into the step"},
    {"op_table", fn_op_table, METH_NOARGS, "the op table's rows"},
    {"_set_operator_fallbacks", fn_set_operator_fallbacks, METH_O,
     "the functions the operators call for mixed operands"},
    {NULL, NULL, 0, NULL}};
