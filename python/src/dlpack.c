/* DLPack exchange (the __dlpack__ protocol of the array API): a tensor's
 * memory lent to PyTorch, NumPy or any consumer, and theirs taken, both
 * without copies. The structs below are DLPack's C ABI (version 0.8),
 * which a consumer reads by layout. */
#include "pyloom.h"

#include <string.h>

typedef struct {
  int32_t device_type; /* 1: CPU */
  int32_t device_id;
} dl_device_t;

typedef struct {
  uint8_t code; /* 0 int, 1 uint, 2 float, 4 bfloat, 6 bool */
  uint8_t bits;
  uint16_t lanes;
} dl_dtype_t;

typedef struct {
  void *data;
  dl_device_t device;
  int32_t ndim;
  dl_dtype_t dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL: row-major */
  uint64_t byte_offset;
} dl_tensor_t;

typedef struct dl_managed {
  dl_tensor_t dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *self);
} dl_managed_t;

enum { DL_CPU = 1, DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

static dl_dtype_t to_dl(loom_dtype_t d) {
  switch (d) {
    case LOOM_F32: return (dl_dtype_t){DL_FLOAT, 32, 1};
    case LOOM_F64: return (dl_dtype_t){DL_FLOAT, 64, 1};
    case LOOM_F16: return (dl_dtype_t){DL_FLOAT, 16, 1};
    case LOOM_BF16: return (dl_dtype_t){DL_BFLOAT, 16, 1};
    case LOOM_I8: return (dl_dtype_t){DL_INT, 8, 1};
    case LOOM_I32: return (dl_dtype_t){DL_INT, 32, 1};
    case LOOM_I64: return (dl_dtype_t){DL_INT, 64, 1};
    default: return (dl_dtype_t){DL_BOOL, 8, 1};
  }
}

static int from_dl(dl_dtype_t t) {
  if (t.lanes != 1) return -1;
  for (int d = 0; d < LOOM_DTYPE_COUNT; d++) {
    dl_dtype_t x = to_dl((loom_dtype_t)d);
    if (x.code == t.code && x.bits == t.bits) return d;
  }
  return -1;
}

/* What an exported tensor carries: the managed struct, its dims, and the
 * tensor it keeps alive. */
typedef struct export {
  dl_managed_t managed;
  int64_t dims[2 * LOOM_MAX_RANK];
} export_t;

static void export_delete(dl_managed_t *m) {
  PyGILState_STATE g = PyGILState_Ensure(); /* a consumer may free it off the GIL */
  if (m->manager_ctx) ((py_tensor_t *)m->manager_ctx)->exports--;
  Py_XDECREF((PyObject *)m->manager_ctx);
  PyMem_RawFree(m);
  PyGILState_Release(g);
}

/* A capsule never consumed frees what it holds. */
static void capsule_delete(PyObject *capsule) {
  if (PyCapsule_IsValid(capsule, "used_dltensor")) return;
  dl_managed_t *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (m && m->deleter) m->deleter(m);
  PyErr_Clear();
}

/* t.__dlpack__(stream=None): a "dltensor" capsule over t's memory. */
PyObject *py_tensor_dlpack(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kw[] = {"stream", NULL};
  PyObject *stream = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", kw, &stream)) return NULL;
  if (stream != Py_None) {
    PyErr_SetString(PyExc_ValueError, "loom: a CPU tensor takes no stream");
    return NULL;
  }
  py_tensor_t *t = (py_tensor_t *)self;
  /* The consumer may write the memory: the step in progress keeps the
   * values it read, and the memory stays t's while the export lives. */
  if (py_tensor_realize(t) < 0 || py_step_export(t) < 0) return NULL;
  export_t *e = PyMem_RawCalloc(1, sizeof *e);
  if (!e) return PyErr_NoMemory();
  dl_tensor_t *d = &e->managed.dl_tensor;
  d->data = loom_tensor_data(t->data);
  d->device = (dl_device_t){DL_CPU, 0};
  d->ndim = t->rank;
  d->dtype = to_dl(t->dtype);
  d->shape = e->dims;
  d->strides = e->dims + LOOM_MAX_RANK;
  int64_t stride = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    e->dims[i] = t->shape[i];
    e->dims[LOOM_MAX_RANK + i] = t->wrapped ? t->strides[i] : stride;
    stride *= t->shape[i];
  }
  e->managed.manager_ctx = Py_NewRef(self);
  e->managed.deleter = export_delete;
  t->exports++;
  PyObject *capsule = PyCapsule_New(&e->managed, "dltensor", capsule_delete);
  if (!capsule) export_delete(&e->managed);
  return capsule;
}

PyObject *py_tensor_dlpack_device(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return Py_BuildValue("(ii)", DL_CPU, 0);
}

/* The consumed capsule's owner: its deleter runs when the tensor that
 * wraps its memory dies. */
typedef struct dl_owner {
  PyObject_HEAD
  dl_managed_t *managed;
} dl_owner_t;

static void owner_dealloc(dl_owner_t *o) {
  if (o->managed && o->managed->deleter) o->managed->deleter(o->managed);
  PyObject_Free(o);
}

static PyTypeObject owner_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._C.DLPackOwner",
    .tp_basicsize = sizeof(dl_owner_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)owner_dealloc,
};

/* from_dlpack(obj): a tensor over the memory obj.__dlpack__() lends. */
static PyObject *fn_from_dlpack(PyObject *self, PyObject *obj) {
  (void)self;
  if (PyType_Ready(&owner_type) < 0) return NULL;
  PyObject *capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
  if (!capsule) return NULL;
  dl_managed_t *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (!m) {
    Py_DECREF(capsule);
    return NULL;
  }
  dl_tensor_t *d = &m->dl_tensor;
  int dtype = from_dl(d->dtype);
  const char *why = d->device.device_type != DL_CPU ? "the tensor is not in CPU memory"
                    : dtype < 0                      ? "Loom has no dtype for its elements"
                    : d->ndim > LOOM_MAX_RANK        ? "it has too many dims"
                                                     : NULL;
  if (why) {
    Py_DECREF(capsule); /* not consumed: the capsule frees it */
    PyErr_Format(PyExc_TypeError, "loom.from_dlpack: %s", why);
    return NULL;
  }
  loom_tensor_t *t;
  loom_status_t s = loom_tensor_wrap((loom_dtype_t)dtype, d->ndim, d->shape, d->strides,
                                     (char *)d->data + d->byte_offset, &t);
  if (s != LOOM_OK) {
    Py_DECREF(capsule);
    return py_fail(s);
  }
  dl_owner_t *owner = PyObject_New(dl_owner_t, &owner_type);
  if (!owner) {
    loom_tensor_destroy(t);
    Py_DECREF(capsule);
    return NULL;
  }
  owner->managed = m;
  PyCapsule_SetName(capsule, "used_dltensor");
  Py_DECREF(capsule);
  PyObject *result = py_tensor_wrap(t);
  if (!result) {
    Py_DECREF(owner);
    return NULL;
  }
  /* The owner rides in the tensor's buffer slot: released with it. */
  py_tensor_t *pt = (py_tensor_t *)result;
  pt->view.obj = (PyObject *)owner;
  pt->wrapped = true;
  int64_t stride = 1;
  for (int i = d->ndim - 1; i >= 0; i--) {
    pt->strides[i] = d->strides ? d->strides[i] : stride;
    stride *= d->shape[i];
  }
  return result;
}

PyMethodDef py_dlpack_functions[] = {
    {"from_dlpack", fn_from_dlpack, METH_O, "a tensor over another library's memory"},
    {NULL, NULL, 0, NULL}};
