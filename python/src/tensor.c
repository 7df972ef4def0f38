/* loom._C.Tensor: real data or a lazy value of the step, shared with
 * NumPy through the buffer protocol both ways without copies. */
#include "pyloom.h"

#include <string.h>

/* The buffer-protocol format of each dtype (bf16 has none). */
static const char *dtype_format(loom_dtype_t d) {
  switch (d) {
    case LOOM_F32: return "f";
    case LOOM_F64: return "d";
    case LOOM_F16: return "e";
    case LOOM_I8: return "b";
    case LOOM_I32: return "i";
    case LOOM_I64: return "q";
    case LOOM_BOOL: return "?";
    default: return NULL;
  }
}

/* The dtype of a buffer format with its itemsize; -1 when none fits. */
static int format_dtype(const char *f, Py_ssize_t itemsize) {
  if (!f) f = "B";
  if (*f == '<' || *f == '@' || *f == '=') f++;
  if (f[0] == '\0' || f[1] != '\0') return -1;
  switch (f[0]) {
    case 'f': return itemsize == 4 ? LOOM_F32 : -1;
    case 'd': return itemsize == 8 ? LOOM_F64 : -1;
    case 'e': return itemsize == 2 ? LOOM_F16 : -1;
    case 'b': return itemsize == 1 ? LOOM_I8 : -1;
    case 'i': case 'l': case 'q':
      return itemsize == 4 ? LOOM_I32 : itemsize == 8 ? LOOM_I64 : -1;
    case '?': return itemsize == 1 ? LOOM_BOOL : -1;
    default: return -1;
  }
}

/* The class C makes tensors of: loom.Tensor once the package has set it
 * (a subclass that adds Python's operators), else the base. */
static PyTypeObject *tensor_class = &py_tensor_type;

/* Nearly every tensor is of tensor_class: that test first, before the
 * walk of a subclass's bases. */
bool py_tensor_check(PyObject *o) {
  return Py_IS_TYPE(o, tensor_class) || PyObject_TypeCheck(o, &py_tensor_type);
}

static PyObject *set_tensor_class(PyObject *self, PyObject *cls) {
  (void)self;
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &py_tensor_type)) {
    PyErr_SetString(PyExc_TypeError, "the tensor class must derive from TensorBase");
    return NULL;
  }
  Py_INCREF(cls); /* kept for the life of the process */
  tensor_class = (PyTypeObject *)cls;
  Py_RETURN_NONE;
}

/* A zeroed tensor (tp_alloc zero-fills and tracks it). */
static py_tensor_t *tensor_alloc(void) {
  py_tensor_t *t = (py_tensor_t *)tensor_class->tp_alloc(tensor_class, 0);
  if (!t) return NULL;
  t->is_leaf = true;
  for (int i = 0; i < LOOM_MAX_RANK; i++) t->policy[i] = -1;
  return t;
}

static void take_shape(py_tensor_t *t) {
  t->dtype = loom_tensor_dtype(t->data);
  t->rank = loom_tensor_rank(t->data);
  for (int i = 0; i < t->rank; i++) t->shape[i] = loom_tensor_dim(t->data, i);
}

PyObject *py_tensor_wrap(loom_tensor_t *data) {
  py_tensor_t *t = tensor_alloc();
  if (!t) {
    loom_tensor_destroy(data);
    return NULL;
  }
  t->data = data;
  take_shape(t);
  return (PyObject *)t;
}

/* A lazy tensor of value v, for step.c, which links it. */
PyObject *py_step_lazy(loom_value_t v, bool requires_grad) {
  loom_graph_t *g = py_step_graph();
  if (!g) return NULL;
  py_tensor_t *t = tensor_alloc();
  if (!t) return NULL;
  t->step = py_step_id();
  t->value = v;
  t->requires_grad = requires_grad;
  t->is_leaf = !requires_grad;
  loom_status_t s;
  if (py_capture_active()) { /* a captured graph's dims are the arguments' sizes */
    s = loom_value_type(g, v, &t->dtype, &t->rank, t->shape);
  } else {
    s = loom_value_type(g, v, &t->dtype, &t->rank, NULL);
    if (s == LOOM_OK) s = loom_trace_shape(py_step_trace(), v, &t->rank, t->shape);
  }
  if (s != LOOM_OK) {
    Py_DECREF(t);
    return py_fail(s);
  }
  py_step_link(t);
  return (PyObject *)t;
}

/* The exception just set, kept as t's: a value whose segment failed
 * fails every read the same way (and the step goes on without it). */
static int keep_error(py_tensor_t *t) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value) {
    Py_XSETREF(t->error, Py_NewRef(value));
    py_step_read_failed(value);
  }
  PyErr_Restore(type, value, tb);
  return -1;
}

int py_tensor_realize(py_tensor_t *t) {
  if (t->data) return 0;
  if (t->error) {
    PyErr_SetObject((PyObject *)Py_TYPE(t->error), t->error);
    return -1;
  }
  if (py_capture_active()) return py_capture_refuse_read();
  if (t->step != py_step_id()) {
    /* Only a capture's steps end with their lazy tensors unmade. */
    PyErr_SetString(PyExc_RuntimeError,
                    "loom: a tensor computed inside a function that loom.compile captured, "
                    "kept beyond the capture: it has no value (return it instead)");
    return -1;
  }
  const loom_tensor_t *real;
  loom_tensor_t *copy = NULL;
  loom_status_t s = loom_trace_read(py_step_trace(), t->value, &real);
  if (s == LOOM_OK) s = loom_tensor_create(t->dtype, t->rank, t->shape, &copy);
  if (s == LOOM_OK)
    s = loom_tensor_read(real, loom_tensor_data(copy),
                         (size_t)loom_tensor_numel(copy) * loom_dtype_size(t->dtype));
  if (s != LOOM_OK) {
    loom_tensor_destroy(copy);
    py_fail(s);
    return keep_error(t);
  }
  t->data = copy;
  py_step_realized(t);
  return 0;
}

/* A read of a lazy tensor from Python: a graph break loom.explain lists. */
static int read_break(py_tensor_t *t, const char *reason) {
  return t->data ? 0 : py_step_break(reason);
}

/* ---- the type ---- */

static int tensor_traverse(py_tensor_t *t, visitproc visit, void *arg) {
  Py_VISIT(t->grad);
  Py_VISIT(t->trace_grad);
  Py_VISIT(t->error);
  Py_VISIT(t->view.obj);
  Py_VISIT(t->policy_names);
  return 0;
}

static int tensor_clear(py_tensor_t *t) {
  Py_CLEAR(t->grad);
  Py_CLEAR(t->trace_grad);
  Py_CLEAR(t->error);
  Py_CLEAR(t->policy_names);
  return 0;
}

static void tensor_dealloc(py_tensor_t *t) {
  PyObject_GC_UnTrack(t);
  if (t->weakrefs) PyObject_ClearWeakRefs((PyObject *)t);
  py_step_unlink(t);
  tensor_clear(t);
  loom_tensor_destroy(t->data);
  if (t->view.obj) PyBuffer_Release(&t->view);
  Py_TYPE(t)->tp_free((PyObject *)t);
}

/* Exports the data: the wrapped buffer's own layout, or row-major. */
static int tensor_getbuffer(py_tensor_t *t, Py_buffer *view, int flags) {
  if (read_break(t, "the data read (.numpy(), .tolist(), print)") < 0 ||
      py_tensor_realize(t) < 0 || py_step_idle() < 0 || py_step_export(t) < 0)
    return -1;
  const char *format = dtype_format(t->dtype);
  if (!format) {
    PyErr_Format(PyExc_BufferError, "loom: %s has no NumPy dtype; convert it first (t.float())",
                 loom_dtype_name(t->dtype));
    return -1;
  }
  view->obj = Py_NewRef(t);
  view->buf = loom_tensor_data(t->data);
  view->itemsize = (Py_ssize_t)loom_dtype_size(t->dtype);
  view->len = (Py_ssize_t)loom_tensor_numel(t->data) * view->itemsize;
  view->readonly = 0;
  view->ndim = t->rank;
  view->format = (flags & PyBUF_FORMAT) ? (char *)format : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  /* Shape and strides live in a block of their own, freed at release. */
  Py_ssize_t *dims = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(t->rank ? t->rank : 1));
  if (!dims) {
    Py_CLEAR(view->obj);
    PyErr_NoMemory();
    return -1;
  }
  view->internal = dims;
  view->shape = dims;
  view->strides = dims + t->rank;
  Py_ssize_t stride = view->itemsize;
  bool contiguous = true;
  for (int i = t->rank - 1; i >= 0; i--) {
    dims[i] = (Py_ssize_t)t->shape[i];
    dims[t->rank + i] = t->wrapped ? (Py_ssize_t)t->strides[i] * view->itemsize : stride;
    contiguous &= dims[i] <= 1 || dims[t->rank + i] == stride;
    stride *= dims[i];
  }
  /* Row-major data is Fortran-ordered only when it has at most one dim
   * larger than 1; a request for that is refused otherwise. */
  int big = 0;
  for (int i = 0; i < t->rank; i++) big += t->shape[i] > 1;
  bool wants_c = (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS;
  bool wants_f = (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS;
  bool wants_any = (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS;
  if (((wants_c || wants_any) && !contiguous) || (wants_f && (!contiguous || big > 1))) {
    PyMem_Free(dims);
    Py_CLEAR(view->obj);
    PyErr_SetString(PyExc_BufferError, "loom: the tensor's layout is not the one asked for");
    return -1;
  }
  if (!(flags & PyBUF_STRIDES)) view->strides = NULL;
  if (!(flags & PyBUF_ND)) view->shape = NULL;
  t->exports++;
  return 0;
}

static void tensor_releasebuffer(py_tensor_t *t, Py_buffer *view) {
  t->exports--;
  PyMem_Free(view->internal);
}

static PyBufferProcs tensor_buffer = {(getbufferproc)tensor_getbuffer,
                                      (releasebufferproc)tensor_releasebuffer};

static PyObject *get_shape(py_tensor_t *t, void *closure) {
  (void)closure;
  /* A captured op's output size that its input's data decides (nonzero,
   * a boolean mask's selection) is a symbol until the executable runs:
   * Python code that reads it breaks the capture, and the function runs
   * through the trace, whose eager run knows the size. */
  for (int i = 0; i < t->rank; i++)
    if (t->shape[i] < 0) {
      PyErr_SetString(py_graph_break, "loom.compile: a size that depends on the data "
                      "(nonzero, a boolean mask's selection) read while capturing");
      return NULL;
    }
  PyObject *s = PyTuple_New(t->rank);
  for (int i = 0; s && i < t->rank; i++)
    PyTuple_SET_ITEM(s, i, PyLong_FromLongLong(t->shape[i]));
  return s;
}

static PyObject *get_ndim(py_tensor_t *t, void *closure) {
  (void)closure;
  return PyLong_FromLong(t->rank);
}

static PyObject *get_dtype(py_tensor_t *t, void *closure) {
  (void)closure;
  return PyLong_FromLong(t->dtype);
}

/* Whether loom.dynamic marked a dim of t with a policy other than exact:
 * loom.compile runs such arguments through the trace, whose policies
 * read the marks, instead of capturing their sizes. */
static PyObject *get_marked_dynamic(py_tensor_t *t, void *closure) {
  (void)closure;
  for (int d = 0; d < t->rank; d++)
    if (t->policy[d] > LOOM_DIM_EXACT) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

static PyObject *get_lazy(py_tensor_t *t, void *closure) {
  (void)closure;
  return PyBool_FromLong(t->data == NULL);
}

static PyObject *get_requires_grad(py_tensor_t *t, void *closure) {
  (void)closure;
  return PyBool_FromLong(t->requires_grad);
}

static int set_requires_grad(py_tensor_t *t, PyObject *v, void *closure) {
  (void)closure;
  int on = v ? PyObject_IsTrue(v) : -1;
  if (on < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "requires_grad cannot be deleted");
    return -1;
  }
  if (!t->is_leaf) {
    PyErr_SetString(PyExc_RuntimeError,
                    "you can only change requires_grad flags of leaf variables");
    return -1;
  }
  if (on && t->dtype != LOOM_F32 && t->dtype != LOOM_F64 && t->dtype != LOOM_F16 &&
      t->dtype != LOOM_BF16) {
    PyErr_Format(PyExc_RuntimeError, "only tensors of floating point dtype can require "
                 "gradients (this one is %s)", loom_dtype_name(t->dtype));
    return -1;
  }
  if (t->step == py_step_id() && (bool)on != t->requires_grad) {
    /* Turned on, the step so far was recorded without its gradient: it
     * ends first, as a read ends it (its values become real), so that
     * earlier uses stay constants. Turned off, the step goes on, as
     * PyTorch's graph does: a backward skips the leaf (its flag is read
     * then) and still reaches the others. */
    if (py_capture_active()) {
      PyErr_SetString(PyExc_RuntimeError, "loom.compile: requires_grad of a tensor the "
                      "function used cannot change inside it");
      return -1;
    }
    if (on && py_step_end() < 0) return -1;
  }
  t->requires_grad = on;
  return 0;
}

static PyObject *get_is_leaf(py_tensor_t *t, void *closure) {
  (void)closure;
  return PyBool_FromLong(t->is_leaf);
}

static PyObject *get_grad(py_tensor_t *t, void *closure) {
  (void)closure;
  if (!t->grad && t->requires_grad && !t->is_leaf && !t->retains_grad &&
      PyErr_WarnEx(PyExc_UserWarning,
                   "The .grad attribute of a Tensor that is not a leaf Tensor is being "
                   "accessed. Its .grad attribute won't be populated during backward(). "
                   "If you indeed want the .grad field to be populated for a non-leaf "
                   "Tensor, use .retain_grad() on the non-leaf Tensor.", 1) < 0)
    return NULL;
  return Py_NewRef(t->grad ? t->grad : Py_None);
}

static PyObject *get_retains_grad(py_tensor_t *t, void *closure) {
  (void)closure;
  return PyBool_FromLong(t->retains_grad);
}

/* PyTorch's retain_grad: a leaf's .grad is filled anyway. */
static PyObject *tensor_retain_grad(py_tensor_t *t, PyObject *unused) {
  (void)unused;
  if (!t->requires_grad) {
    PyErr_SetString(PyExc_RuntimeError,
                    "can't retain_grad on Tensor that has requires_grad=False");
    return NULL;
  }
  if (t->is_leaf || t->retains_grad) Py_RETURN_NONE;
  if (py_step_retain_grad(t) < 0) return NULL;
  Py_RETURN_NONE;
}

static int set_grad(py_tensor_t *t, PyObject *v, void *closure) {
  (void)closure;
  if (v && v != Py_None && !py_tensor_check(v)) {
    PyErr_SetString(PyExc_TypeError, "assigned grad must be a loom Tensor or None");
    return -1;
  }
  if (v && v != Py_None) { /* the optimizer reads it as the tensor's own gradient */
    const py_tensor_t *g = (const py_tensor_t *)v;
    bool same_size = g->rank == t->rank;
    for (int d = 0; same_size && d < t->rank; d++) same_size = g->shape[d] == t->shape[d];
    if (!same_size || g->dtype != t->dtype) {
      PyErr_SetString(PyExc_RuntimeError, same_size ? "assigned grad has data of a different type"
                                                    : "assigned grad has data of a different size");
      return -1;
    }
  }
  if (py_capture_active() && py_capture_note_grad_set(t) < 0) return -1;
  Py_XSETREF(t->grad, v && v != Py_None ? Py_NewRef(v) : NULL);
  return 0;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)get_shape, NULL, "the sizes of the dims, a tuple", NULL},
    {"_dtype", (getter)get_dtype, NULL, "the loom_dtype_t number", NULL},
    {"_lazy", (getter)get_lazy, NULL, "True while the tensor is a value of the step", NULL},
    {"_marked_dynamic", (getter)get_marked_dynamic, NULL,
     "True when loom.dynamic gave a dim a policy other than exact", NULL},
    {"_ndim", (getter)get_ndim, NULL, "the number of dims", NULL},
    {"requires_grad", (getter)get_requires_grad, (setter)set_requires_grad, NULL, NULL},
    {"is_leaf", (getter)get_is_leaf, NULL, NULL, NULL},
    {"grad", (getter)get_grad, (setter)set_grad, NULL, NULL},
    {"retains_grad", (getter)get_retains_grad, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyObject *tensor_realize_method(py_tensor_t *t, PyObject *unused) {
  (void)unused;
  if (read_break(t, "a value read") < 0 || py_tensor_realize(t) < 0 || py_step_idle() < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *item_of(py_tensor_t *t);

/* The one element as a Python bool, int or float. */
static PyObject *tensor_item(py_tensor_t *t, PyObject *unused) {
  (void)unused;
  PyObject *r = item_of(t);
  if (r && py_step_idle() < 0) Py_CLEAR(r);
  return r;
}

static PyObject *item_of(py_tensor_t *t) {
  if (read_break(t, ".item() (or float(), int())") < 0 || py_tensor_realize(t) < 0) return NULL;
  if (loom_tensor_numel(t->data) != 1) {
    PyErr_Format(PyExc_ValueError, "a Tensor with %lld elements cannot be converted to Scalar",
                 (long long)loom_tensor_numel(t->data));
    return NULL;
  }
  const void *p = loom_tensor_data(t->data);
  switch (t->dtype) {
    case LOOM_BOOL: return PyBool_FromLong(*(const unsigned char *)p != 0);
    case LOOM_I8: return PyLong_FromLong(*(const signed char *)p);
    case LOOM_I32: return PyLong_FromLong(*(const int32_t *)p);
    case LOOM_I64: return PyLong_FromLongLong(*(const int64_t *)p);
    default: {
      double v;
      loom_status_t s = loom_tensor_get_f64(t->data, 0, &v);
      return s == LOOM_OK ? PyFloat_FromDouble(v) : py_fail(s);
    }
  }
}

/* loom.dynamic's record: dim `dim` enters traces under policy kind, as
 * the symbol `name` (None: its own). */
static PyObject *tensor_set_policy(py_tensor_t *t, PyObject *args) {
  int dim, kind;
  PyObject *name = Py_None;
  if (!PyArg_ParseTuple(args, "ii|O", &dim, &kind, &name)) return NULL;
  if (name != Py_None && !PyUnicode_Check(name)) {
    PyErr_SetString(PyExc_TypeError, "dynamic: name must be a str or None");
    return NULL;
  }
  if (dim < 0) dim += t->rank;
  if (dim < 0 || dim >= t->rank) {
    PyErr_Format(PyExc_IndexError, "dim out of range for a tensor of %d dims", t->rank);
    return NULL;
  }
  if (kind < -1 || kind > LOOM_DIM_AUTO) {
    PyErr_SetString(PyExc_ValueError, "unknown shape policy");
    return NULL;
  }
  if (name != Py_None && !t->policy_names) {
    t->policy_names = PyList_New(LOOM_MAX_RANK);
    if (!t->policy_names) return NULL;
    for (int d = 0; d < LOOM_MAX_RANK; d++) PyList_SET_ITEM(t->policy_names, d, Py_NewRef(Py_None));
  }
  if (t->policy_names && PyList_SetItem(t->policy_names, dim, Py_NewRef(name)) < 0) return NULL;
  t->policy[dim] = kind;
  Py_RETURN_NONE;
}

static PyObject *tensor_set_state(py_tensor_t *t, PyObject *unused) {
  (void)unused;
  t->is_state = true;
  Py_RETURN_NONE;
}

static PyMethodDef tensor_methods[] = {
    {"_set_state", (PyCFunction)tensor_set_state, METH_NOARGS, "marks a module's buffer"},
    {"_realize", (PyCFunction)tensor_realize_method, METH_NOARGS, "make the data real"},
    {"retain_grad", (PyCFunction)tensor_retain_grad, METH_NOARGS,
     "backward() fills this non-leaf tensor's .grad too"},
    {"item", (PyCFunction)tensor_item, METH_NOARGS, "the one element as a Python number"},
    {"_set_policy", (PyCFunction)tensor_set_policy, METH_VARARGS, "dim, policy kind[, name]"},
    {"__dlpack__", (PyCFunction)(void (*)(void))py_tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "a DLPack capsule over the tensor's memory"},
    {"__dlpack_device__", py_tensor_dlpack_device, METH_NOARGS, "(1, 0): the CPU"},
    {NULL, NULL, 0, NULL}};

static Py_hash_t tensor_hash(PyObject *self) { return _Py_HashPointer(self); }

PyTypeObject py_tensor_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._C.TensorBase",
    .tp_basicsize = sizeof(py_tensor_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Loom's tensor: real data or a lazy value of the traced step",
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_traverse = (traverseproc)tensor_traverse,
    .tp_clear = (inquiry)tensor_clear,
    .tp_as_buffer = &tensor_buffer,
    .tp_as_number = &py_tensor_number,
    .tp_getset = tensor_getset,
    .tp_hash = tensor_hash, /* by identity, as PyTorch's: == records an op */
    .tp_methods = tensor_methods,
    .tp_weaklistoffset = offsetof(py_tensor_t, weakrefs),
};

/* ---- functions of the module ---- */

static int shape_arg(PyObject *seq, int *rank, int64_t *shape) {
  PyObject *fast = PySequence_Fast(seq, "a shape is a sequence of ints");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > LOOM_MAX_RANK) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "loom: at most %d dims (got %zd)", LOOM_MAX_RANK, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
    if (v < 0) {
      Py_DECREF(fast);
      PyErr_Format(PyExc_ValueError, "loom: negative dimension %lld", v);
      return -1;
    }
    shape[i] = v;
  }
  *rank = (int)n;
  Py_DECREF(fast);
  return 0;
}

/* _copy_into(dst, src): src's elements written into dst's memory (one
 * dtype and shape; dst real): an optimizer's update of a parameter. */
static PyObject *fn_copy_into(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "O!O!", &py_tensor_type, &a, &py_tensor_type, &b)) return NULL;
  py_tensor_t *dst = (py_tensor_t *)a, *src = (py_tensor_t *)b;
  if (!dst->data || dst->dtype != src->dtype || dst->rank != src->rank ||
      memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->rank)) {
    PyErr_SetString(PyExc_ValueError, "_copy_into: a real tensor of the same dtype and shape");
    return NULL;
  }
  if (py_tensor_realize(src) < 0) return NULL;
  size_t n = (size_t)loom_tensor_numel(src->data) * loom_dtype_size(src->dtype);
  void *tmp = PyMem_RawMalloc(n ? n : 1);
  if (!tmp) return PyErr_NoMemory();
  loom_status_t s = loom_tensor_read(src->data, tmp, n);
  if (s == LOOM_OK) s = loom_tensor_write(dst->data, tmp, n);
  PyMem_RawFree(tmp);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_NONE;
}

/* _rebind(dst, src): lazy dst becomes src's value (assignment into a
 * lazy tensor, made functional: the Python object now names the new
 * value). */
static PyObject *fn_rebind(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "O!O!", &py_tensor_type, &a, &py_tensor_type, &b)) return NULL;
  int took =
      ((py_tensor_t *)a)->data ? 0 : py_step_take_value((py_tensor_t *)a, (py_tensor_t *)b, false);
  if (took < 0) return NULL;
  if (!took) {
    PyErr_SetString(PyExc_ValueError, "_rebind: two lazy tensors of the step, of one type");
    return NULL;
  }
  Py_RETURN_NONE;
}

/* _take_value(dst, src, reshape=False): whether dst, real or lazy, took
 * lazy src's value in place, src's shape too when reshape (false: its
 * memory is seen by others, or the types differ). */
static PyObject *fn_take_value(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a, *b;
  int reshape = 0;
  if (!PyArg_ParseTuple(args, "O!O!|p", &py_tensor_type, &a, &py_tensor_type, &b, &reshape))
    return NULL;
  int took = py_step_take_value((py_tensor_t *)a, (py_tensor_t *)b, reshape);
  return took < 0 ? NULL : PyBool_FromLong(took);
}

/* zeros(dtype, shape): a new zero-filled tensor. */
static PyObject *fn_zeros(PyObject *self, PyObject *args) {
  (void)self;
  int dtype, rank;
  PyObject *shape_obj;
  int64_t shape[LOOM_MAX_RANK];
  if (!PyArg_ParseTuple(args, "iO", &dtype, &shape_obj)) return NULL;
  if (shape_arg(shape_obj, &rank, shape) < 0) return NULL;
  loom_tensor_t *t;
  loom_status_t s = loom_tensor_create((loom_dtype_t)dtype, rank, shape, &t);
  return s == LOOM_OK ? py_tensor_wrap(t) : py_fail(s);
}

/* Element strides of a buffer, when its byte strides allow them. */
static bool element_strides(const Py_buffer *v, int64_t *out) {
  for (int i = 0; i < v->ndim; i++) {
    Py_ssize_t s = v->strides[i];
    if (v->shape[i] <= 1) s = 0;
    if (s < 0 || s % v->itemsize) return false;
    out[i] = s / v->itemsize;
  }
  return true;
}

/* from_buffer(obj, copy): a tensor over obj's memory (a NumPy array, any
 * buffer), or over a copy of it when copy is true, the buffer is read-only
 * or its strides are not whole elements. */
static PyObject *fn_from_buffer(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *obj;
  int copy;
  if (!PyArg_ParseTuple(args, "Op", &obj, &copy)) return NULL;
  Py_buffer v;
  if (PyObject_GetBuffer(obj, &v, PyBUF_RECORDS) < 0) {
    if (!PyErr_ExceptionMatches(PyExc_BufferError)) return NULL;
    PyErr_Clear();
    if (PyObject_GetBuffer(obj, &v, PyBUF_RECORDS_RO) < 0) return NULL;
    copy = 1;
  }
  int dtype = format_dtype(v.format, v.itemsize);
  int64_t shape[LOOM_MAX_RANK], strides[LOOM_MAX_RANK];
  PyObject *result = NULL;
  loom_tensor_t *t = NULL;
  loom_status_t s = LOOM_OK;
  if (dtype < 0) {
    PyErr_Format(PyExc_TypeError, "loom: no dtype holds buffer format '%s' (itemsize %zd)",
                 v.format ? v.format : "B", v.itemsize);
    goto done;
  }
  if (v.ndim > LOOM_MAX_RANK) {
    PyErr_Format(PyExc_ValueError, "loom: at most %d dims (got %d)", LOOM_MAX_RANK, v.ndim);
    goto done;
  }
  for (int i = 0; i < v.ndim; i++) shape[i] = v.shape[i];
  if (!copy && element_strides(&v, strides)) {
    s = loom_tensor_wrap((loom_dtype_t)dtype, v.ndim, shape, strides, v.buf, &t);
    if (s != LOOM_OK) goto done;
    py_tensor_t *pt = (py_tensor_t *)py_tensor_wrap(t);
    if (pt) {
      pt->view = v; /* released with the tensor */
      pt->wrapped = true;
      memcpy(pt->strides, strides, sizeof strides);
      v.obj = NULL;
    }
    result = (PyObject *)pt;
    goto done;
  }
  s = loom_tensor_create((loom_dtype_t)dtype, v.ndim, shape, &t);
  if (s != LOOM_OK) goto done;
  if (PyBuffer_ToContiguous(loom_tensor_data(t), &v, v.len, 'C') < 0) {
    loom_tensor_destroy(t);
    goto done;
  }
  result = py_tensor_wrap(t);
done:
  if (v.obj) PyBuffer_Release(&v);
  if (s != LOOM_OK) return py_fail(s);
  return result;
}

/* to_bytes(t): the elements, row-major, as bytes (any dtype, bf16 too). */
static PyObject *fn_to_bytes(PyObject *self, PyObject *arg) {
  (void)self;
  if (!py_tensor_check(arg)) {
    PyErr_SetString(PyExc_TypeError, "to_bytes: a loom Tensor is needed");
    return NULL;
  }
  py_tensor_t *t = (py_tensor_t *)arg;
  if (py_tensor_realize(t) < 0) return NULL;
  Py_ssize_t n = (Py_ssize_t)loom_tensor_numel(t->data) * (Py_ssize_t)loom_dtype_size(t->dtype);
  PyObject *b = PyBytes_FromStringAndSize(NULL, n);
  if (!b) return NULL;
  loom_status_t s = loom_tensor_read(t->data, PyBytes_AS_STRING(b), (size_t)n);
  if (s != LOOM_OK) {
    Py_DECREF(b);
    return py_fail(s);
  }
  return b;
}

/* from_bytes(dtype, shape, data): a new tensor holding a copy of data,
 * which must hold exactly the elements. */
static PyObject *fn_from_bytes(PyObject *self, PyObject *args) {
  (void)self;
  int dtype, rank;
  PyObject *shape_obj;
  Py_buffer data;
  int64_t shape[LOOM_MAX_RANK];
  if (!PyArg_ParseTuple(args, "iOy*", &dtype, &shape_obj, &data)) return NULL;
  PyObject *r = NULL;
  if (shape_arg(shape_obj, &rank, shape) == 0) {
    loom_tensor_t *t;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    size_t want = (size_t)n * loom_dtype_size((loom_dtype_t)dtype);
    if (dtype < 0 || dtype >= LOOM_DTYPE_COUNT) {
      PyErr_Format(PyExc_ValueError, "loom: no dtype numbered %d", dtype);
    } else if ((size_t)data.len != want) {
      PyErr_Format(PyExc_ValueError, "loom: %zd bytes for %lld elements of %s (%zu bytes)",
                   data.len, (long long)n, loom_dtype_name((loom_dtype_t)dtype), want);
    } else {
      loom_status_t s = loom_tensor_from_data((loom_dtype_t)dtype, rank, shape, data.buf,
                                              want, &t);
      r = s == LOOM_OK ? py_tensor_wrap(t) : py_fail(s);
    }
  }
  PyBuffer_Release(&data);
  return r;
}

PyMethodDef py_tensor_functions[] = {
    {"to_bytes", fn_to_bytes, METH_O, "to_bytes(t): the elements as bytes"},
    {"from_bytes", fn_from_bytes, METH_VARARGS, "from_bytes(dtype, shape, data)"},
    {"zeros", fn_zeros, METH_VARARGS, "zeros(dtype, shape): a zero-filled tensor"},
    {"_copy_into", fn_copy_into, METH_VARARGS, "_copy_into(dst, src)"},
    {"_rebind", fn_rebind, METH_VARARGS, "_rebind(dst, src): lazy dst takes src's value"},
    {"_take_value", fn_take_value, METH_VARARGS,
     "_take_value(dst, src): whether dst took lazy src's value in place"},
    {"from_buffer", fn_from_buffer, METH_VARARGS,
     "from_buffer(obj, copy): a tensor over obj's buffer, or a copy of it"},
    {"_set_tensor_class", set_tensor_class, METH_O, "the class C makes tensors of"},
    {NULL, NULL, 0, NULL}};
