/* loom.distributed: the process's communicator over the ranks of an MPI
 * job (include/loom/comm.h), collectives on real tensors, and data
 * parallelism: once DistributedDataParallel asks for it, every optimizer
 * step averages the gradients across the ranks, through the trace
 * (loom_trace_data_parallel) and in loom.compile's captured steps
 * (loom_data_parallel_step). */
#include "pyloom.h"

#include "loom/comm.h"

static loom_comm_t *world;  /* init_process_group .. destroy_process_group */
static bool averaging;      /* optimizer steps average the gradients */

loom_comm_t *py_dist_averaging(void) { return averaging ? world : NULL; }

static loom_comm_t *need_world(const char *fn) {
  if (!world)
    PyErr_Format(PyExc_RuntimeError, "loom.distributed.%s: the process group is not "
                 "initialized (loom.distributed.init_process_group() first)", fn);
  return world;
}

static PyObject *fn_init(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (world) {
    PyErr_SetString(PyExc_RuntimeError, "loom.distributed.init_process_group: already "
                    "initialized");
    return NULL;
  }
  loom_status_t s = loom_comm_world(&world);
  if (s != LOOM_OK) {
    world = NULL;
    return py_fail(s);
  }
  return Py_BuildValue("(ii)", loom_comm_rank(world), loom_comm_size(world));
}

static PyObject *fn_destroy(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (!need_world("destroy_process_group")) return NULL;
  if (py_step_end() < 0) return NULL; /* a step open now exchanges with the others first */
  loom_trace_t *tr = averaging ? py_step_trace() : NULL;
  if (tr) loom_trace_data_parallel(tr, NULL);
  averaging = false;
  loom_comm_destroy(world);
  world = NULL;
  Py_RETURN_NONE;
}

static PyObject *fn_rank_size(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (!world) return Py_BuildValue("(ii)", -1, -1);
  return Py_BuildValue("(ii)", loom_comm_rank(world), loom_comm_size(world));
}

/* The real loom tensor of a Python one, for a collective that writes it
 * in place: the step in progress ends first (as an assignment into a
 * tensor's memory does), so that t is real and no value of the step
 * still stands for what it held. */
static loom_tensor_t *real_of(PyObject *o, const char *fn) {
  if (!py_tensor_check(o)) {
    PyErr_Format(PyExc_TypeError, "loom.distributed.%s: a loom Tensor is needed", fn);
    return NULL;
  }
  if (py_capture_active()) return py_capture_refuse_read(), NULL; /* loom.compile: a read */
  py_tensor_t *t = (py_tensor_t *)o;
  if (py_step_end() < 0 || py_tensor_realize(t) < 0) return NULL;
  return t->data;
}

/* _dist_all_reduce(t, op): t reduced in place across the ranks (op 0 sum,
 * 1 mean, 2 max). */
static PyObject *fn_all_reduce(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *o;
  int op;
  if (!PyArg_ParseTuple(args, "Oi", &o, &op)) return NULL;
  loom_comm_t *c = need_world("all_reduce");
  loom_tensor_t *t = c ? real_of(o, "all_reduce") : NULL;
  if (!t) return NULL;
  loom_status_t s = loom_comm_all_reduce_tensor(c, t, (loom_comm_reduce_t)op);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_NONE;
}

/* _dist_broadcast(t, src): t overwritten by rank src's. */
static PyObject *fn_broadcast(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *o;
  int src;
  if (!PyArg_ParseTuple(args, "Oi", &o, &src)) return NULL;
  loom_comm_t *c = need_world("broadcast");
  loom_tensor_t *t = c ? real_of(o, "broadcast") : NULL;
  if (!t) return NULL;
  if (src < 0 || src >= loom_comm_size(c)) {
    PyErr_Format(PyExc_ValueError, "loom.distributed.broadcast: src %d is not a rank of %d",
                 src, loom_comm_size(c));
    return NULL;
  }
  loom_status_t s = loom_comm_broadcast_tensor(c, t, src);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_NONE;
}

/* The parameters of the models wrapped (DistributedDataParallel), in
 * their modules' order: every trace enters them first, so that the ranks
 * hold them in one order whatever path each rank's step takes first
 * (the gradients are averaged in that order, and a parameter a rank's
 * path does not reach still has its place there). */
static PyObject *dp_params;

int py_dist_enter_params(void) {
  Py_ssize_t n = dp_params ? PyList_GET_SIZE(dp_params) : 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    loom_value_t v;
    if (py_step_value((py_tensor_t *)PyList_GET_ITEM(dp_params, i), &v) < 0) return -1;
  }
  return 0;
}

/* _dist_average_gradients(params): from now on every optimizer step
 * averages the gradients across the ranks, params entered first. */
static PyObject *fn_average_gradients(PyObject *self, PyObject *params) {
  (void)self;
  loom_comm_t *c = need_world("DistributedDataParallel");
  if (!c) return NULL;
  PyObject *seq = PySequence_Fast(params, "_dist_average_gradients: a list of tensors");
  if (!seq) return NULL;
  if (!dp_params && !(dp_params = PyList_New(0))) {
    Py_DECREF(seq);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *p = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyObject_TypeCheck(p, &py_tensor_type) || PyList_Append(dp_params, p) < 0) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "_dist_average_gradients: a list of tensors");
      Py_DECREF(seq);
      return NULL;
    }
  }
  Py_DECREF(seq);
  loom_trace_t *tr = py_step_trace(); /* made before averaging: turned on here once */
  if (!tr) return NULL;
  averaging = true;
  loom_status_t s = loom_trace_data_parallel(tr, c);
  if (s != LOOM_OK) return py_fail(s);
  if (py_dist_enter_params() < 0) return NULL;
  Py_RETURN_NONE;
}

PyMethodDef py_dist_functions[] = {
    {"_dist_init", fn_init, METH_NOARGS, "(rank, size) of the new process group"},
    {"_dist_destroy", fn_destroy, METH_NOARGS, NULL},
    {"_dist_rank_size", fn_rank_size, METH_NOARGS, "(rank, size), (-1, -1) when none"},
    {"_dist_all_reduce", fn_all_reduce, METH_VARARGS, NULL},
    {"_dist_broadcast", fn_broadcast, METH_VARARGS, NULL},
    {"_dist_average_gradients", fn_average_gradients, METH_O, NULL},
    {NULL, NULL, 0, NULL}};
