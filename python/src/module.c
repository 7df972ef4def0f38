/* The module loom._C: its type, its functions, and the mapping of Loom's
 * status codes to Python's exceptions. */
#include "pyloom.h"

PyObject *py_fail(loom_status_t s) {
  PyObject *type;
  switch (s) {
    case LOOM_ERR_SHAPE:
    case LOOM_ERR_DTYPE:
    case LOOM_ERR_AXIS:
    case LOOM_ERR_BINDING:
    case LOOM_ERR_VALUE:
    case LOOM_ERR_INVALID:
    case LOOM_ERR_FORMAT: type = PyExc_ValueError; break;
    case LOOM_ERR_NOMEM: type = PyExc_MemoryError; break;
    case LOOM_ERR_IO: type = PyExc_OSError; break;
    case LOOM_ERR_UNSUPPORTED: type = PyExc_NotImplementedError; break;
    default: type = PyExc_RuntimeError; break;
  }
  const char *msg = loom_last_error();
  PyErr_SetString(type, msg && *msg ? msg : loom_status_name(s));
  return NULL;
}

static PyObject *fn_dtype_names(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  PyObject *t = PyTuple_New(LOOM_DTYPE_COUNT);
  for (int d = 0; t && d < LOOM_DTYPE_COUNT; d++) {
    PyObject *row = Py_BuildValue("(sn)", loom_dtype_name((loom_dtype_t)d),
                                  (Py_ssize_t)loom_dtype_size((loom_dtype_t)d));
    if (!row) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, d, row);
  }
  return t;
}

static PyMethodDef module_methods[] = {
    {"dtypes", fn_dtype_names, METH_NOARGS, "(name, itemsize) of each loom_dtype_t"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "loom._C", "Loom's C API for the loom package", -1, module_methods,
    NULL, NULL, NULL, NULL};

PyObject *py_graph_break;

PyMODINIT_FUNC PyInit__C(void) {
  py_tensor_type.tp_richcompare = py_tensor_richcompare;
  if (PyType_Ready(&py_tensor_type) < 0 || PyType_Ready(&py_captured_type) < 0 ||
      py_step_init() < 0)
    return NULL;
  if (!py_graph_break &&
      !(py_graph_break = PyErr_NewExceptionWithDoc(
            "loom.GraphBreak",
            "what stops loom.compile's capture of a function (a read of a computed value, "
            "a tensor kept beyond the call) but not the program: the function runs through "
            "the trace instead",
            PyExc_RuntimeError, NULL)))
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  if (PyModule_AddFunctions(m, py_tensor_functions) < 0 ||
      PyModule_AddFunctions(m, py_step_methods) < 0 ||
      PyModule_AddFunctions(m, py_op_methods) < 0 ||
      PyModule_AddFunctions(m, py_dlpack_functions) < 0 ||
      PyModule_AddFunctions(m, py_capture_functions) < 0 ||
      PyModule_AddFunctions(m, py_dist_functions) < 0 ||
      PyModule_AddObjectRef(m, "TensorBase", (PyObject *)&py_tensor_type) < 0 ||
      PyModule_AddObjectRef(m, "GraphBreak", py_graph_break) < 0 ||
      PyModule_AddIntConstant(m, "MAX_RANK", LOOM_MAX_RANK) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
