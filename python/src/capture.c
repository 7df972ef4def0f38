/* loom.compile: a whole Python function captured into one graph and
 * compiled into one executable (a training step: forward, backward and
 * the optimizer's update), then replayed on every call with the same
 * argument shapes. While a function is captured, ops record into a plain
 * graph instead of the trace: the arguments become its inputs; tensors
 * from outside (weights, buffers, constants) become parameters whose
 * storage the graph borrows (loom_graph_param_borrow, those that require
 * grad) or further inputs bound to the same tensors at every run;
 * random tensors drawn inside the function (rand, dropout's mask) are
 * inputs drawn anew at every run, as the function draws them per call;
 * backward() appends loom_grad's gradients and an optimizer's step()
 * appends its update (loom_optimizer_apply), its learning rate an input.
 * A read of a value inside the function (.numpy(), .item(), bool) has
 * nothing to read yet: it raises GraphBreak, and loom.compile runs the
 * function through the trace instead, with each parameter's .grad as it
 * was before the capture. */
#include "pyloom.h"

#include <string.h>

typedef struct captured {
  PyObject_HEAD
  loom_graph_t *g;
  loom_executable_t *e;
  /* Per graph input, the tensor bound to it (args first); None: lr; a
   * callable: it draws the input's random values anew for every run. */
  PyObject *inputs;
  int n_args;
  int lr_input;          /* -1: none */
  PyObject *optimizer;   /* whose param_groups[0]["lr"] feeds lr_input, or NULL */
  PyObject *params;      /* the tensors whose storage g borrows */
  int n_outputs;         /* the function's own outputs; the new .grad follow */
  PyObject *grad_params; /* the parameters those gradients belong to */
  /* Those whose .grad the function did not set before its backward: their
   * gradients add to the .grad a call finds (None: set), as PyTorch's
   * backward accumulates; the others' .grad the run replaces. */
  PyObject *accumulating;
} captured_t;

static struct {
  bool active;
  loom_graph_t *g;
  PyObject *inputs, *params, *grad_params, *optimizer, *state;
  PyObject *saved_grads; /* [(parameter, its .grad before backward)], for an abort */
  PyObject *grads_set;   /* the tensors whose .grad the function assigned */
  PyObject *accumulating;
  int n_args, lr_input;
} cap;

bool py_capture_active(void) { return cap.active; }
loom_graph_t *py_capture_graph(void) { return cap.g; }

/* Whether list holds o itself (a tensor's == compares elements). */
static bool holds(PyObject *list, PyObject *o) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
    if (PyList_GET_ITEM(list, i) == o) return true;
  return false;
}

int py_capture_note_grad_set(py_tensor_t *t) {
  return holds(cap.grads_set, (PyObject *)t) ? 0 : PyList_Append(cap.grads_set, (PyObject *)t);
}

static void reset(void) {
  loom_graph_destroy(cap.g);
  Py_CLEAR(cap.inputs);
  Py_CLEAR(cap.params);
  Py_CLEAR(cap.grad_params);
  Py_CLEAR(cap.optimizer);
  Py_CLEAR(cap.state);
  Py_CLEAR(cap.saved_grads);
  Py_CLEAR(cap.grads_set);
  Py_CLEAR(cap.accumulating);
  memset(&cap, 0, sizeof cap);
}

static int bind(py_tensor_t *t, loom_value_t v) {
  t->step = py_step_id();
  t->value = v;
  return 0;
}

static int add_input(py_tensor_t *t, PyObject *bound, loom_value_t *out);

static int add_input(py_tensor_t *t, PyObject *bound, loom_value_t *out) {
  loom_status_t s = loom_graph_input(cap.g, NULL, t->dtype, t->rank, t->shape, out);
  if (s != LOOM_OK) {
    py_fail(s);
    return -1;
  }
  return PyList_Append(cap.inputs, bound);
}

int py_capture_enter(py_tensor_t *t, loom_value_t *out) {
  if (!t->data) {
    PyErr_SetString(PyExc_RuntimeError, "loom.compile: a tensor of an ended step was used");
    return -1;
  }
  /* The graph's reads of a parameter see it as it was before the run (its
   * update lands when the run ends): a read after the optimizer's step
   * would see the old value. */
  for (Py_ssize_t i = 0; cap.lr_input >= 0 && i < PyList_GET_SIZE(cap.params); i++)
    if (PyList_GET_ITEM(cap.params, i) == (PyObject *)t) {
      PyErr_SetString(py_graph_break, "loom.compile: a parameter read after the "
                      "optimizer's step inside the function (one executable's reads see "
                      "it before its update)");
      return -1;
    }
  if ((t->requires_grad && t->is_leaf) || t->is_state) {
    loom_status_t s = loom_graph_param_borrow(cap.g, NULL, t->data, out);
    if (s != LOOM_OK) {
      py_fail(s);
      return -1;
    }
    t->borrowed = true;
    if (PyList_Append(t->is_state && !t->requires_grad ? cap.state : cap.params,
                      (PyObject *)t) < 0)
      return -1;
  } else if (add_input(t, (PyObject *)t, out) < 0) {
    return -1;
  }
  return bind(t, *out);
}

int py_capture_refuse_read(void) {
  PyErr_SetString(py_graph_break,
                  "loom.compile: the function reads a value it computed (.numpy(), "
                  ".item(), float(), bool(), print); one executable has no reads "
                  "inside it");
  return -1;
}

/* Keeps p's .grad as it was before the capture's first backward. */
static int save_grad(py_tensor_t *p) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cap.saved_grads); i++)
    if (PyTuple_GET_ITEM(PyList_GET_ITEM(cap.saved_grads, i), 0) == (PyObject *)p) return 0;
  PyObject *row = PyTuple_Pack(2, (PyObject *)p, p->grad ? p->grad : Py_None);
  int r = row ? PyList_Append(cap.saved_grads, row) : -1;
  Py_XDECREF(row);
  return r;
}

/* backward(loss) while capturing: loom_grad over the parameters so far,
 * each gradient added to the parameter's .grad (PyTorch's accumulation). */
PyObject *py_capture_backward(py_tensor_t *loss) {
  Py_ssize_t n = PyList_GET_SIZE(cap.params);
  loom_value_t *wrt = PyMem_Calloc((size_t)n + 1, sizeof *wrt);
  loom_value_t *grads = PyMem_Calloc((size_t)n + 1, sizeof *grads);
  int *reached = PyMem_Calloc((size_t)n + 1, sizeof *reached);
  PyObject *r = NULL;
  if (!wrt || !grads || !reached) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(cap.params, i), *g = (py_tensor_t *)p->grad;
    /* A .grad from before the call (gradients accumulated over calls):
     * one executable would add to the .grad its capture saw, at every
     * run; the trace adds to the .grad of each call. */
    if (g && (g->data || g->step != py_step_id())) {
      PyErr_SetString(py_graph_break, "loom.compile: backward adds to a .grad from before the "
                      "call (gradients accumulated over calls); one executable would add to "
                      "the .grad its capture saw");
      goto done;
    }
    wrt[i] = p->value;
  }
  loom_status_t s = loom_grad_reaches(cap.g, loss->value, (int)n, wrt, reached);
  if (s == LOOM_OK) s = loom_grad(cap.g, loss->value, (int)n, wrt, grads);
  if (s != LOOM_OK) {
    py_fail(s);
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(cap.params, i);
    if (!reached[i]) continue; /* .grad stays None, as PyTorch leaves it */
    if (save_grad(p) < 0) goto done;
    PyObject *g = py_step_lazy(grads[i], false);
    if (!g) goto done;
    if (p->grad) {
      PyObject *sum = PyNumber_Add(p->grad, g);
      Py_DECREF(g);
      if (!sum) goto done;
      g = sum;
    }
    Py_XSETREF(p->grad, g);
  }
  r = Py_NewRef(Py_None);
done:
  PyMem_Free(wrt);
  PyMem_Free(grads);
  PyMem_Free(reached);
  return r;
}

/* An optimizer's step while capturing: its update of every parameter with
 * a .grad, appended to the graph; the learning rate an input. */
PyObject *py_capture_optimizer(const loom_optimizer_t *o, PyObject *optimizer) {
  if (cap.lr_input >= 0) {
    PyErr_SetString(py_graph_break, "loom.compile: one optimizer step per compiled function");
    return NULL;
  }
  Py_ssize_t n = PyList_GET_SIZE(cap.params), k = 0;
  loom_value_t *params = PyMem_Calloc((size_t)n + 1, sizeof *params);
  loom_value_t *grads = PyMem_Calloc((size_t)n + 1, sizeof *grads);
  PyObject *r = NULL;
  if (!params || !grads) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(cap.params, i);
    if (!p->grad) continue;
    params[k] = p->value;
    if (py_step_value((py_tensor_t *)p->grad, &grads[k]) < 0) goto done;
    k++;
  }
  loom_value_t lr;
  loom_status_t s = loom_graph_input(cap.g, "lr", LOOM_F64, 0, NULL, &lr);
  if (s == LOOM_OK) {
    cap.lr_input = (int)PyList_GET_SIZE(cap.inputs);
    if (PyList_Append(cap.inputs, Py_None) < 0) goto done;
    loom_comm_t *comm = py_dist_averaging();
    if (comm) s = loom_data_parallel_step(cap.g, comm, o, (int)k, params, grads, lr, NULL);
    else s = loom_optimizer_apply(cap.g, o, (int)k, params, grads, lr);
  }
  if (s != LOOM_OK) {
    py_fail(s);
    goto done;
  }
  Py_XSETREF(cap.optimizer, Py_NewRef(optimizer));
  for (Py_ssize_t i = 0; i < n; i++) { /* updated: a later read enters again, and breaks */
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(cap.params, i);
    if (p->grad) p->step = 0;
  }
  r = Py_NewRef(Py_None);
done:
  PyMem_Free(params);
  PyMem_Free(grads);
  return r;
}

/* ---- functions of the module ---- */

static PyObject *fn_capture_begin(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (cap.active) {
    PyErr_SetString(PyExc_RuntimeError, "loom.compile: a compiled function called itself");
    return NULL;
  }
  if (py_step_end() < 0) return NULL;
  loom_status_t s = loom_graph_create(&cap.g);
  if (s != LOOM_OK) return py_fail(s);
  cap.inputs = PyList_New(0);
  cap.params = PyList_New(0);
  cap.grad_params = PyList_New(0);
  cap.state = PyList_New(0);
  cap.saved_grads = PyList_New(0);
  cap.grads_set = PyList_New(0);
  cap.accumulating = PyList_New(0);
  if (!cap.inputs || !cap.params || !cap.grad_params || !cap.state || !cap.saved_grads ||
      !cap.grads_set || !cap.accumulating) {
    reset();
    return NULL;
  }
  cap.lr_input = -1;
  cap.active = true;
  Py_RETURN_NONE;
}

/* _capture_arg(t): the function's next tensor argument, its next input. */
static PyObject *fn_capture_arg(PyObject *self, PyObject *arg) {
  (void)self;
  if (!cap.active || !py_tensor_check(arg)) {
    PyErr_SetString(PyExc_RuntimeError, "_capture_arg: a tensor, while capturing");
    return NULL;
  }
  py_tensor_t *t = (py_tensor_t *)arg;
  if (!t->data) {
    PyErr_SetString(PyExc_RuntimeError, "loom.compile: an argument has no data");
    return NULL;
  }
  loom_value_t v;
  if (add_input(t, (PyObject *)t, &v) < 0) return NULL;
  bind(t, v);
  cap.n_args++;
  Py_RETURN_NONE;
}

static PyObject *fn_capture_abort(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (cap.active) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cap.saved_grads); i++) {
      PyObject *row = PyList_GET_ITEM(cap.saved_grads, i);
      py_tensor_t *p = (py_tensor_t *)PyTuple_GET_ITEM(row, 0);
      PyObject *g = PyTuple_GET_ITEM(row, 1);
      Py_XSETREF(p->grad, g == Py_None ? NULL : Py_NewRef(g));
    }
    cap.active = false;
    py_step_forget();
    reset();
  }
  Py_RETURN_NONE;
}

extern PyTypeObject py_captured_type;

/* _capture_end(outputs): the captured function compiled: a Captured. */
static PyObject *fn_capture_end(PyObject *self, PyObject *outputs) {
  (void)self;
  if (!cap.active || !PyTuple_Check(outputs)) {
    PyErr_SetString(PyExc_RuntimeError, "_capture_end: a tuple, while capturing");
    return NULL;
  }
  Py_ssize_t n_out = PyTuple_GET_SIZE(outputs);
  loom_status_t s = LOOM_OK;
  for (Py_ssize_t i = 0; s == LOOM_OK && i < n_out; i++) {
    PyObject *o = PyTuple_GET_ITEM(outputs, i);
    loom_value_t v;
    if (!py_tensor_check(o)) {
      PyErr_SetString(PyExc_TypeError, "loom.compile: the function returns tensors only "
                      "(one, a tuple of them, or None)");
      return NULL;
    }
    /* One executable runs forward only: outputs that gradients must flow
     * back through (no backward inside the function, its result to be
     * differentiated by the caller) need the trace's autograd. */
    if (((py_tensor_t *)o)->requires_grad && PyList_GET_SIZE(cap.saved_grads) == 0) {
      PyErr_SetString(py_graph_break, "loom.compile: an output requires grad and the function "
                      "runs no backward: one executable's outputs carry no backward, the "
                      "trace's differentiate");
      return NULL;
    }
    if (py_step_value((py_tensor_t *)o, &v) < 0) return NULL;
    s = loom_graph_output(cap.g, v);
  }
  /* The parameters' new gradients: outputs, set as .grad after each run. */
  Py_ssize_t n_params = PyList_GET_SIZE(cap.params);
  for (Py_ssize_t i = 0; s == LOOM_OK && i < n_params; i++) {
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(cap.params, i);
    if (!p->grad || ((py_tensor_t *)p->grad)->step != py_step_id()) continue;
    s = loom_graph_output(cap.g, ((py_tensor_t *)p->grad)->value);
    if (s == LOOM_OK && PyList_Append(cap.grad_params, (PyObject *)p) < 0) return NULL;
    if (s == LOOM_OK && !holds(cap.grads_set, (PyObject *)p) &&
        PyList_Append(cap.accumulating, (PyObject *)p) < 0)
      return NULL;
  }
  if (s != LOOM_OK) return py_fail(s);
  if (cap.lr_input >= 0 && PyList_GET_SIZE(cap.accumulating) > 0) {
    /* Its update would read the gradient of the call alone, where a .grad
     * found at the call (no zero_grad inside) adds to it first. */
    PyErr_SetString(py_graph_break, "loom.compile: the optimizer's step inside follows a "
                    "backward into .grad the function did not clear (zero_grad outside it): "
                    "gradients may add to a .grad from before the call");
    return NULL;
  }
  Py_ssize_t kept = py_step_results_besides(outputs, cap.grad_params);
  /* the run that follows adds their gradients to the .grad found before
   * the capture's backward, which was none */
  for (Py_ssize_t i = 0; kept == 0 && i < PyList_GET_SIZE(cap.accumulating); i++)
    Py_CLEAR(((py_tensor_t *)PyList_GET_ITEM(cap.accumulating, i))->grad);
  if (kept > 0) {
    PyErr_Format(py_graph_break,
                 "loom.compile: the function keeps %zd tensor%s computed inside it beyond "
                 "the call (in an attribute, a list, a closure); one executable's values "
                 "end with its run", kept, kept == 1 ? "" : "s");
    return NULL;
  }
  captured_t *c = PyObject_GC_New(captured_t, &py_captured_type);
  if (!c) return NULL;
  c->inputs = c->params = c->grad_params = c->optimizer = c->accumulating = NULL;
  c->g = NULL;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = py_step_threads();
  c->e = NULL;
  /* A data-parallel step starts every rank from rank 0's parameters and
   * optimizer state (borrowed: the Python tensors change too). */
  s = cap.lr_input >= 0 && py_dist_averaging()
          ? loom_comm_broadcast_params(py_dist_averaging(), cap.g, 0) : LOOM_OK;
  if (s == LOOM_OK) s = loom_compile(cap.g, &o, &c->e);
  c->g = cap.g;
  cap.g = NULL;
  c->inputs = cap.inputs;
  if (PyList_SetSlice(cap.params, PyList_GET_SIZE(cap.params), PyList_GET_SIZE(cap.params),
                      cap.state) < 0) { /* the borrowed buffers live as long */
    loom_executable_destroy(c->e);
    c->e = NULL;
    s = LOOM_ERR_NOMEM;
  }
  c->params = cap.params;
  c->grad_params = cap.grad_params;
  c->accumulating = cap.accumulating;
  c->optimizer = cap.optimizer;
  c->n_args = cap.n_args;
  c->lr_input = cap.lr_input;
  c->n_outputs = (int)n_out;
  cap.inputs = cap.params = cap.grad_params = cap.optimizer = cap.accumulating = NULL;
  cap.active = false;
  py_step_forget();
  reset();
  if (s != LOOM_OK) {
    Py_DECREF(c);
    return py_fail(s);
  }
  PyObject_GC_Track(c);
  return (PyObject *)c;
}

/* ---- Captured ---- */

/* Collected with its optimizer: the optimizer holds the entry whose
 * executable made its last step (optim.py), which holds the optimizer. */
static int captured_traverse(captured_t *c, visitproc visit, void *arg) {
  Py_VISIT(c->inputs);
  Py_VISIT(c->params);
  Py_VISIT(c->grad_params);
  Py_VISIT(c->accumulating);
  Py_VISIT(c->optimizer);
  return 0;
}

static int captured_clear(captured_t *c) {
  Py_CLEAR(c->inputs);
  Py_CLEAR(c->params);
  Py_CLEAR(c->grad_params);
  Py_CLEAR(c->accumulating);
  Py_CLEAR(c->optimizer);
  return 0;
}

static void captured_dealloc(captured_t *c) {
  PyObject_GC_UnTrack(c);
  /* the executable and graph first: they borrow the parameters' memory */
  loom_executable_destroy(c->e);
  loom_graph_destroy(c->g);
  captured_clear(c);
  PyObject_GC_Del(c);
}

/* Input i's values for a run, from draw(): a new tensor of the input's
 * dtype and shape. */
static PyObject *drawn(loom_graph_t *g, int i, PyObject *draw) {
  PyObject *t = PyObject_CallNoArgs(draw);
  loom_value_t v;
  loom_dtype_t dtype;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
  if (!t || loom_graph_input_value(g, i, &v) != LOOM_OK ||
      loom_value_type(g, v, &dtype, &rank, dims) != LOOM_OK)
    return t;
  const py_tensor_t *x = (const py_tensor_t *)t;
  if (!py_tensor_check(t) || x->dtype != dtype || x->rank != rank ||
      memcmp(x->shape, dims, sizeof(int64_t) * (size_t)rank)) {
    Py_DECREF(t);
    PyErr_SetString(PyExc_RuntimeError, "run: a random input drawn in another shape or dtype");
    return NULL;
  }
  return t;
}

/* run(args): one run on these arguments (of the captured shapes): the
 * function's outputs, a tuple; the parameters' .grad set. */
static PyObject *captured_run(captured_t *c, PyObject *args) {
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != c->n_args) {
    PyErr_Format(PyExc_TypeError, "run: a tuple of the %d tensor arguments", c->n_args);
    return NULL;
  }
  if (py_step_end() < 0) return NULL; /* the trace's values read the old weights */
  Py_ssize_t n_in = PyList_GET_SIZE(c->inputs);
  int n_out = loom_graph_num_outputs(c->g);
  loom_tensor_t **ins = PyMem_Calloc((size_t)n_in + 1, sizeof *ins);
  loom_tensor_t **outs = PyMem_Calloc((size_t)n_out + 1, sizeof *outs);
  loom_tensor_t *lr = NULL;
  PyObject *result = NULL, *keep = PyList_New(0);
  loom_status_t s = LOOM_OK;
  if (!ins || !outs || !keep) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n_in; i++) {
    PyObject *o = i < c->n_args ? PyTuple_GET_ITEM(args, i) : PyList_GET_ITEM(c->inputs, i);
    if (i == c->lr_input) {
      PyObject *groups = PyObject_GetAttrString(c->optimizer, "param_groups");
      PyObject *g0 = groups ? PySequence_GetItem(groups, 0) : NULL;
      PyObject *lr_obj = g0 ? PyObject_GetItem(g0, PyUnicode_FromString("lr")) : NULL;
      Py_XDECREF(groups);
      Py_XDECREF(g0);
      double v = lr_obj ? PyFloat_AsDouble(lr_obj) : -1.0;
      Py_XDECREF(lr_obj);
      if (PyErr_Occurred()) goto done;
      s = loom_tensor_from_data(LOOM_F64, 0, NULL, &v, sizeof v, &lr);
      if (s != LOOM_OK) goto done;
      ins[i] = lr;
      continue;
    }
    if (i >= c->n_args && PyCallable_Check(o)) {
      if (!(o = drawn(c->g, (int)i, o)) || PyList_Append(keep, o) < 0) {
        Py_XDECREF(o);
        goto done;
      }
      Py_DECREF(o); /* keep holds it until the run ends */
    }
    if (!py_tensor_check(o) || py_tensor_realize((py_tensor_t *)o) < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "run: tensors only");
      goto done;
    }
    ins[i] = ((py_tensor_t *)o)->data;
  }
  /* A .grad that nothing but its parameter holds, of the right type, takes
   * the new gradient in place: no new buffer to fill with zeros per run. */
  bool *reused = PyMem_Calloc((size_t)n_out + 1, sizeof *reused);
  if (!reused) {
    PyErr_NoMemory();
    goto done;
  }
  for (int i = 0; s == LOOM_OK && i < n_out; i++) {
    if (i >= c->n_outputs) {
      py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(c->grad_params, i - c->n_outputs);
      py_tensor_t *g = (py_tensor_t *)p->grad;
      bool adds = holds(c->accumulating, (PyObject *)p);
      if (!adds && g && Py_REFCNT(g) == 1 && g->data && !g->wrapped && g->dtype == p->dtype &&
          g->rank == p->rank && !memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->rank)) {
        outs[i] = g->data;
        reused[i] = true;
        continue;
      }
    }
    s = loom_executable_new_output(c->e, i, &outs[i]);
  }
  if (s == LOOM_OK) s = loom_executable_run(c->e, (int)n_in, ins, n_out, outs);
  if (s == LOOM_OK) result = PyTuple_New(c->n_outputs);
  for (int i = 0; result && i < n_out; i++) {
    if (reused[i]) {
      outs[i] = NULL; /* the .grad's own */
      continue;
    }
    PyObject *t = py_tensor_wrap(outs[i]);
    outs[i] = NULL;
    if (!t) {
      Py_CLEAR(result);
      break;
    }
    if (i < c->n_outputs) {
      PyTuple_SET_ITEM(result, i, t);
    } else {
      py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(c->grad_params, i - c->n_outputs);
      if (!holds(c->accumulating, (PyObject *)p)) {
        Py_XSETREF(p->grad, t);
      } else if (py_step_accumulate_grad(&p->grad, t) < 0) {
        Py_CLEAR(result);
        break;
      }
    }
  }
  for (int i = 0; i < n_out; i++)
    if (reused[i]) outs[i] = NULL;
  PyMem_Free(reused);
done:
  if (s != LOOM_OK) py_fail(s);
  for (int i = 0; outs && i < n_out; i++) loom_tensor_destroy(outs[i]);
  loom_tensor_destroy(lr);
  Py_XDECREF(keep);
  PyMem_Free(ins);
  PyMem_Free(outs);
  return result;
}

static PyObject *captured_explain(captured_t *c, PyObject *unused) {
  (void)unused;
  char *text;
  loom_status_t s = loom_executable_explain(c->e, &text);
  if (s != LOOM_OK) return py_fail(s);
  PyObject *r = PyUnicode_FromString(text);
  loom_free(text);
  return r;
}

/* The storage of optimizer state `name` of parameter p in c's graph, as
 * loom_optimizer_apply names it ("param<id>.<name>" after the value id of
 * the unnamed parameter that borrows p's memory; Adam's step count is the call's own,
 * "adam.step" or "adamw.step"), or NULL when it has none. */
static loom_tensor_t *state_storage(const captured_t *c, const py_tensor_t *p,
                                    const char *name) {
  int n = loom_graph_num_params(c->g);
  int32_t id = -1;
  loom_value_t v;
  loom_tensor_t *t;
  for (int i = 0; i < n && id < 0; i++)
    if (loom_graph_param_value(c->g, i, &v) == LOOM_OK &&
        loom_graph_param_tensor(c->g, v, &t) == LOOM_OK &&
        loom_tensor_data(t) == loom_tensor_data(p->data))
      id = v.id;
  if (id < 0) return NULL;
  char own[64];
  snprintf(own, sizeof own, "param%d.%s", (int)id, name);
  bool step = !strcmp(name, "step");
  for (int i = 0; i < n; i++) {
    const char *pn = loom_graph_param_name(c->g, i);
    bool hit = pn && (!strcmp(pn, own) ||
                      (step && (!strcmp(pn, "adam.step") || !strcmp(pn, "adamw.step"))));
    if (hit && loom_graph_param_value(c->g, i, &v) == LOOM_OK &&
        loom_graph_param_tensor(c->g, v, &t) == LOOM_OK)
      return t;
  }
  return NULL;
}

/* state(p, name): a copy of p's optimizer state `name` ("momentum", "m",
 * "v", "step") in this executable, or None. */
static PyObject *captured_state(captured_t *c, PyObject *args) {
  PyObject *p;
  const char *name;
  if (!PyArg_ParseTuple(args, "O!s", &py_tensor_type, &p, &name)) return NULL;
  const loom_tensor_t *t = state_storage(c, (py_tensor_t *)p, name);
  if (!t) Py_RETURN_NONE;
  loom_tensor_t *copy = NULL;
  loom_status_t s = loom_tensor_copy(t, &copy);
  return s == LOOM_OK ? py_tensor_wrap(copy) : py_fail(s);
}

/* set_state(p, name, value): p's optimizer state `name` in this executable
 * takes value's elements (of the state's dtype and size); False when the
 * executable has no such state. */
static PyObject *captured_set_state(captured_t *c, PyObject *args) {
  PyObject *p, *value;
  const char *name;
  if (!PyArg_ParseTuple(args, "O!sO!", &py_tensor_type, &p, &name, &py_tensor_type, &value))
    return NULL;
  loom_tensor_t *t = state_storage(c, (py_tensor_t *)p, name);
  if (!t) Py_RETURN_FALSE;
  py_tensor_t *v = (py_tensor_t *)value;
  if (!v->data && py_tensor_realize(v) < 0) return NULL;
  int64_t n = loom_tensor_numel(t);
  loom_dtype_t dt = loom_tensor_dtype(t);
  if (loom_tensor_numel(v->data) != n || loom_tensor_dtype(v->data) != dt) {
    PyErr_Format(PyExc_ValueError, "optimizer state '%s': %lld elements of %s, %lld of %s "
                 "expected", name, (long long)loom_tensor_numel(v->data),
                 loom_dtype_name(loom_tensor_dtype(v->data)), (long long)n,
                 loom_dtype_name(dt));
    return NULL;
  }
  loom_tensor_t *dense = NULL; /* v may be strided */
  loom_status_t s = loom_tensor_copy(v->data, &dense);
  if (s == LOOM_OK)
    s = loom_tensor_write(t, loom_tensor_data(dense), (size_t)n * loom_dtype_size(dt));
  loom_tensor_destroy(dense);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_TRUE;
}

static PyObject *captured_optimizer(captured_t *c, void *closure) {
  (void)closure;
  return Py_NewRef(c->optimizer ? c->optimizer : Py_None);
}

static PyGetSetDef captured_getset[] = {
    {"optimizer", (getter)captured_optimizer, NULL, "the optimizer whose step it runs", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef captured_methods[] = {
    {"run", (PyCFunction)captured_run, METH_O, "one run on these tensor arguments"},
    {"explain", (PyCFunction)captured_explain, METH_NOARGS, "the executable's report"},
    {"state", (PyCFunction)captured_state, METH_VARARGS, "state(p, name): p's optimizer state"},
    {"set_state", (PyCFunction)captured_set_state, METH_VARARGS,
     "set_state(p, name, value): p's optimizer state starts from value"},
    {NULL, NULL, 0, NULL}};

PyTypeObject py_captured_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._C.Captured",
    .tp_basicsize = sizeof(captured_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "a function compiled by loom.compile: one executable",
    .tp_dealloc = (destructor)captured_dealloc,
    .tp_traverse = (traverseproc)captured_traverse,
    .tp_clear = (inquiry)captured_clear,
    .tp_methods = captured_methods,
    .tp_getset = captured_getset,
};

/* _capture_optimizer(kind, momentum, nesterov, beta1, beta2, eps,
 * weight_decay, optimizer): an optimizer's step() while capturing. */
static PyObject *fn_capture_optimizer(PyObject *self, PyObject *args) {
  (void)self;
  int kind, nesterov;
  double momentum, beta1, beta2, eps, wd;
  PyObject *optimizer;
  if (!PyArg_ParseTuple(args, "idpddddO", &kind, &momentum, &nesterov, &beta1, &beta2, &eps,
                        &wd, &optimizer))
    return NULL;
  loom_optimizer_t o;
  loom_status_t s = py_optimizer(kind, momentum, nesterov, beta1, beta2, eps, wd, &o);
  if (s != LOOM_OK) return py_fail(s);
  return py_capture_optimizer(&o, optimizer);
}

/* _assign(buffer, value): while capturing, the buffer (a module's state,
 * borrowed by the graph) holds value after each run (loom_assign). */
static PyObject *fn_assign(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "O!O!", &py_tensor_type, &a, &py_tensor_type, &b)) return NULL;
  py_tensor_t *buf = (py_tensor_t *)a;
  loom_value_t pv, v;
  if (!cap.active) {
    PyErr_SetString(PyExc_RuntimeError, "_assign: while capturing");
    return NULL;
  }
  if (!buf->is_state) { /* its storage is an input, not borrowed: nothing to write */
    PyErr_SetString(py_graph_break, "loom.compile: the function updates in place a tensor "
                    "that is not a module's buffer");
    return NULL;
  }
  if (py_step_value(buf, &pv) < 0 || py_step_value((py_tensor_t *)b, &v) < 0) return NULL;
  loom_status_t s = loom_assign(cap.g, pv, v);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_NONE;
}

/* _capture_drawn(t, draw): t, a tensor of random values drawn inside the
 * captured function, is an input of the graph, bound at each run to
 * draw()'s new values (t's own at the capture's first). */
static PyObject *fn_capture_drawn(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a, *draw;
  if (!PyArg_ParseTuple(args, "O!O", &py_tensor_type, &a, &draw)) return NULL;
  py_tensor_t *t = (py_tensor_t *)a;
  loom_value_t v;
  if (!cap.active || !t->data || !PyCallable_Check(draw)) {
    PyErr_SetString(PyExc_RuntimeError, "_capture_drawn: a real tensor and a callable, "
                    "while capturing");
    return NULL;
  }
  if (add_input(t, draw, &v) < 0 || bind(t, v) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *fn_capturing(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyBool_FromLong(cap.active);
}

/* _capture_reads(): the tensors the function read besides its arguments
 * (parameters, state, other tensors), whose requires_grad the capture
 * depends on: a parameter frozen or unfrozen later needs another. */
static PyObject *fn_capture_reads(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (!cap.active) {
    PyErr_SetString(PyExc_RuntimeError, "_capture_reads: while capturing");
    return NULL;
  }
  PyObject *reads = PySequence_List(cap.params);
  for (Py_ssize_t i = 0; reads && i < PyList_GET_SIZE(cap.state); i++)
    if (PyList_Append(reads, PyList_GET_ITEM(cap.state, i)) < 0) Py_CLEAR(reads);
  for (Py_ssize_t i = cap.n_args; reads && i < PyList_GET_SIZE(cap.inputs); i++) {
    PyObject *o = PyList_GET_ITEM(cap.inputs, i);
    if (py_tensor_check(o) && PyList_Append(reads, o) < 0) Py_CLEAR(reads);
  }
  return reads;
}

PyMethodDef py_capture_functions[] = {
    {"_capture_reads", fn_capture_reads, METH_NOARGS, NULL},
    {"_capture_optimizer", fn_capture_optimizer, METH_VARARGS, NULL},
    {"_capturing", fn_capturing, METH_NOARGS, "True while loom.compile captures"},
    {"_capture_drawn", fn_capture_drawn, METH_VARARGS, "a random tensor drawn per run"},
    {"_assign", fn_assign, METH_VARARGS, "a buffer's new value, while capturing"},
    {"_capture_begin", fn_capture_begin, METH_NOARGS, NULL},
    {"_capture_arg", fn_capture_arg, METH_O, NULL},
    {"_capture_end", fn_capture_end, METH_O, NULL},
    {"_capture_abort", fn_capture_abort, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};
