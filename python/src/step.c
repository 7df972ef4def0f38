/* The step: the process's one trace, the tensors it has entered (it
 * borrows their data until the step ends), and the op results of the
 * step. A step ends at loom.step() (an optimizer's step() calls it) or by
 * itself once nothing could still use its values: no lazy tensor alive,
 * no value alive that a backward could start from, no gradients waiting
 * for an optimizer. Ending makes every result still alive real. */
#include "pyloom.h"

static struct {
  loom_trace_t *trace;
  int threads;       /* of the next trace made (0: LOOM_NUM_THREADS) */
  int compile_mode;  /* of the next trace: 0 tiered, 1 wait for compiles, 2 interpret */
  uint64_t id;       /* the current step (from 1) */
  bool open;         /* something entered or recorded since the last end */
  py_tensor_t *results; /* the step's op results: lazy or made real */
  Py_ssize_t lazy, grad_values; /* of those: lazy ones; ones requiring grad */
  PyObject *entered; /* tensors entered: kept alive until the end */
  /* Every parameter the trace holds: it borrows their data (and keeps
   * their optimizer state) until one is referenced by this list alone,
   * when release_dropped hands it back (loom_trace_param_forget). */
  PyObject *params;
  bool backward_ran; /* gradients wait for the optimizer */
  /* A read (py_step_idle) found values alive that require grad: the step
   * ends at the next op recorded once none is (py_step_before_record). */
  bool read_waiting;
  int no_grad;       /* depth of loom.no_grad() */
  PyObject *read_errors; /* texts of the errors reads raised in the step */
} st = {.id = 1};

uint64_t py_step_id(void) { return st.id; }

void py_step_read_failed(PyObject *error) {
  PyObject *text = PyObject_Str(error);
  if (text && (st.read_errors || (st.read_errors = PySet_New(NULL))))
    PySet_Add(st.read_errors, text);
  Py_XDECREF(text);
  PyErr_Clear();
}

/* Whether the error set now is one a read of the step raised already
 * (another value of a failed segment), which the step's end does not
 * raise again. */
static bool seen_read_error(void) {
  if (!st.read_errors) return false;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *text = value ? PyObject_Str(value) : NULL;
  int seen = text ? PySet_Contains(st.read_errors, text) : 0;
  Py_XDECREF(text);
  if (seen != 1) PyErr_Clear();
  PyErr_Restore(type, value, tb);
  return seen == 1;
}

/* loom.explain's callback, called with the reason of each graph break the
 * program causes (NULL: none, and no cost). */
static PyObject *break_hook;

int py_step_break(const char *reason) {
  if (!break_hook) return 0;
  PyObject *r = PyObject_CallFunction(break_hook, "s", reason);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static PyObject *fn_set_break_hook(PyObject *self, PyObject *hook) {
  (void)self;
  Py_XSETREF(break_hook, hook == Py_None ? NULL : Py_NewRef(hook));
  Py_RETURN_NONE;
}

bool py_step_grad_enabled(void) { return st.no_grad == 0; }

/* ---- A thread that ends with the step open --------------------------------
 * A worker thread that recorded ops and handed its result over holds the
 * trace (include/loom/trace.h) until it exits, and Thread.join returns
 * before that, once the thread's state is cleared. So each other thread
 * that records keeps in its thread-state dict an object whose deallocation,
 * as that dict is cleared, releases the trace: the step goes on in the
 * thread that joined it. */
static _Thread_local bool release_armed;
static unsigned long main_thread;

static void release_dealloc(PyObject *self) {
  if (st.trace) loom_trace_release(st.trace);
  Py_TYPE(self)->tp_free(self);
}

static PyTypeObject release_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._C._TraceRelease",
    .tp_basicsize = sizeof(PyObject),
    .tp_dealloc = release_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

int py_step_init(void) {
  main_thread = PyThread_get_thread_ident();
  return PyType_Ready(&release_type);
}

static void arm_release(void) {
  release_armed = true;
  PyObject *dict = PyThreadState_GetDict();
  if (PyThread_get_thread_ident() == main_thread || !dict) return;
  PyObject *o = PyObject_New(PyObject, &release_type);
  if (!o || PyDict_SetItemString(dict, "loom._C.trace_release", o) < 0)
    PyErr_Clear(); /* the thread keeps the trace until it exits, as in C */
  Py_XDECREF(o);
}

loom_trace_t *py_step_trace(void) {
  if (!release_armed) arm_release();
  if (st.trace) return st.trace;
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.num_threads = st.threads;
  o.tiered = st.compile_mode == 0;
  o.compile = st.compile_mode != 2;
  loom_status_t s = loom_trace_create(&o, &st.trace);
  if (s == LOOM_OK && py_dist_averaging()) s = loom_trace_data_parallel(st.trace, py_dist_averaging());
  if (s != LOOM_OK) {
    loom_trace_destroy(st.trace);
    st.trace = NULL;
    py_fail(s);
    return NULL;
  }
  if (py_dist_averaging() && py_dist_enter_params() < 0) return NULL;
  return st.trace;
}

loom_graph_t *py_step_graph(void) {
  if (py_capture_active()) return py_capture_graph();
  loom_trace_t *tr = py_step_trace();
  return tr ? loom_trace_graph(tr) : NULL;
}

int py_step_threads(void) { return st.threads; }

void py_step_link(py_tensor_t *t) {
  t->prev = NULL;
  t->next = st.results;
  if (st.results) st.results->prev = t;
  st.results = t;
  st.lazy += t->data == NULL;
  st.grad_values += t->requires_grad;
  st.open = true;
}

static bool linked(const py_tensor_t *t) { return t->prev || t->next || st.results == t; }

void py_step_unlink(py_tensor_t *t) {
  if (!linked(t) || t->step != st.id) return;
  if (t->prev) t->prev->next = t->next;
  else st.results = t->next;
  if (t->next) t->next->prev = t->prev;
  t->prev = t->next = NULL;
  st.lazy -= t->data == NULL;
  st.grad_values -= t->requires_grad;
}

/* A lazy tensor made real stays on the list (a backward may still start
 * from it) but no longer counts as lazy. */
void py_step_realized(py_tensor_t *t) {
  if (linked(t) && t->step == st.id) st.lazy--;
}

int py_step_take_value(py_tensor_t *dst, py_tensor_t *src, bool reshape) {
  if (src->data || src->step != st.id || dst->dtype != src->dtype ||
      (!reshape && (dst->rank != src->rank ||
                    memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->rank))))
    return 0;
  if (!dst->data && dst->step != st.id) return 0;
  if (dst->data) {
    /* Its memory goes: refused while anything else can see it. */
    if (dst->wrapped || dst->exports > 0 || dst->borrowed || dst->held ||
        (dst->requires_grad && dst->is_leaf) || py_capture_active())
      return 0;
    py_step_unlink(dst);
    if (dst->step_input && dst->step == st.id) { /* the step reads it: kept to its end */
      if (!st.entered && !(st.entered = PyList_New(0))) return -1;
      PyObject *old = py_tensor_wrap(dst->data);
      if (!old || PyList_Append(st.entered, old) < 0) {
        if (old) ((py_tensor_t *)old)->data = NULL; /* still dst's */
        Py_XDECREF(old);
        return -1;
      }
      Py_DECREF(old);
    } else {
      loom_tensor_destroy(dst->data);
    }
    dst->data = NULL;
    dst->step_input = false;
    dst->step_copy = NULL;
  } else {
    py_step_unlink(dst);
  }
  if (dst->rank != src->rank || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->rank)) {
    dst->rank = src->rank; /* an in-place layout change (unsqueeze_) */
    memcpy(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->rank);
    for (int d = 0; d < LOOM_MAX_RANK; d++) dst->policy[d] = -1;
    Py_CLEAR(dst->policy_names);
  }
  dst->version++;
  dst->step = st.id;
  dst->value = src->value;
  dst->requires_grad = src->requires_grad;
  dst->is_leaf = src->is_leaf;
  Py_CLEAR(dst->error);
  py_step_link(dst);
  return 1;
}

/* The stack level of the innermost frame outside the loom package, for
 * a warning that names the user's line. */
static int user_stacklevel(void) {
  static char pkg[4096];
  if (!pkg[0]) {
    PyObject *m = PyImport_ImportModule("loom"), *file = m ? PyObject_GetAttrString(m, "__file__") : NULL;
    const char *f = file ? PyUnicode_AsUTF8(file) : NULL;
    const char *slash = f ? strrchr(f, '/') : NULL;
    if (slash && (size_t)(slash - f) < sizeof pkg - 1) memcpy(pkg, f, (size_t)(slash - f + 1));
    Py_XDECREF(file);
    Py_XDECREF(m);
    PyErr_Clear();
    if (!pkg[0]) return 1;
  }
  int level = 1;
  PyFrameObject *f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f) {
    PyCodeObject *code = PyFrame_GetCode(f);
    PyObject *name = PyObject_GetAttrString((PyObject *)code, "co_filename");
    const char *file = name ? PyUnicode_AsUTF8(name) : NULL;
    bool ours = file && !strncmp(file, pkg, strlen(pkg));
    Py_XDECREF(name);
    Py_DECREF(code);
    PyErr_Clear();
    if (!ours) break;
    PyFrameObject *back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
    level++;
  }
  Py_XDECREF(f);
  return level;
}

/* The data a step reads for input t: t's own, or for memory that others
 * may write (a NumPy array's, from_numpy; t's own while a NumPy view of
 * it lives) a copy kept to the step's end:
 * ops read their inputs when a segment runs, and a program that refills
 * its batch array after recording ops on it must get what eager ops
 * would have computed. NULL with an exception set. */
static loom_tensor_t *input_data(py_tensor_t *t) {
  if (!t->wrapped && t->exports == 0) return t->data;
  loom_tensor_t *copy = NULL;
  loom_status_t s = loom_tensor_copy(t->data, &copy);
  if (s != LOOM_OK) {
    py_fail(s);
    return NULL;
  }
  PyObject *held = py_tensor_wrap(copy);
  if (!held) return NULL;
  int r = PyList_Append(st.entered, held);
  Py_DECREF(held);
  return r < 0 ? NULL : copy;
}

int py_step_export(py_tensor_t *t) {
  if (py_step_before_export(t) < 0) return -1;
  /* A value this step computed: the next use reads the exported memory,
   * which the consumer may write, not the trace's value (one that carries
   * a gradient keeps its place in the step). */
  if (t->step == st.id && !t->step_input && !t->requires_grad && t->data &&
      !py_capture_active()) {
    py_step_unlink(t);
    t->step = 0;
  }
  return 0;
}

int py_step_before_export(py_tensor_t *t) {
  t->version++; /* the memory may be written through the export */
  if (!t->step_input || t->step != st.id || !t->data || t->wrapped || t->exports > 0)
    return 0; /* the step reads a copy (input_data) */
  /* The step keeps the old data alive in a tensor of its own. */
  loom_tensor_t *copy = NULL;
  loom_status_t s = loom_tensor_copy(t->data, &copy);
  if (s != LOOM_OK) {
    py_fail(s);
    return -1;
  }
  PyObject *old = py_tensor_wrap(t->data);
  if (!old || PyList_Append(st.entered, old) < 0) {
    if (old) ((py_tensor_t *)old)->data = NULL; /* still t's: freed once */
    Py_XDECREF(old);
    loom_tensor_destroy(copy);
    return -1;
  }
  Py_DECREF(old);
  t->data = copy;
  t->step_input = false;
  t->step = 0; /* the next use enters the new data */
  return 0;
}

static int enter(py_tensor_t *t, loom_value_t *out) {
  if (py_capture_active()) return py_capture_enter(t, out);
  loom_trace_t *tr = py_step_trace();
  if (!tr) return -1;
  if (!t->data) {
    PyErr_SetString(PyExc_RuntimeError,
                    "loom: a tensor computed inside a function that loom.compile captured, "
                    "kept beyond the capture: it has no value (return it instead)");
    return -1;
  }
  if (!st.entered && !(st.entered = PyList_New(0))) return -1;
  loom_status_t s;
  if (t->requires_grad && t->is_leaf) { /* under no_grad too: ops cut it (ops.c) */
    t->step_input = false;
    t->step_copy = NULL;
    s = loom_trace_param(tr, t->data, out);
    if (s == LOOM_OK && !t->held) {
      if (!st.params && !(st.params = PyList_New(0))) return -1;
      if (PyList_Append(st.params, (PyObject *)t) < 0) return -1;
      t->held = true;
    }
  } else {
    /* A result of an ended step that required grad: its history ended
     * with that step, so no gradient reaches what it was made from (a
     * GAN's fake image used after the discriminator's optimizer step). */
    if (t->requires_grad && !t->is_leaf && !st.no_grad &&
        PyErr_WarnEx(PyExc_UserWarning,
                     "loom: a tensor computed before the step ended (optimizer.step() or "
                     "loom.step()) is used in a new step: gradients do not flow back through "
                     "it into what it was computed from. Compute it again in this step, or "
                     "detach() it.", user_stacklevel()) < 0)
      return -1;
    loom_dim_policy_t pol[LOOM_MAX_RANK];
    bool any = false;
    for (int i = 0; i < t->rank; i++) {
      pol[i] = (loom_dim_policy_t){.kind = t->policy[i] < 0 ? LOOM_DIM_AUTO
                                                          : (loom_dim_policy_kind_t)t->policy[i]};
      PyObject *name = t->policy_names ? PyList_GET_ITEM(t->policy_names, i) : Py_None;
      if (name != Py_None && !(pol[i].name = PyUnicode_AsUTF8(name))) return -1;
      any |= t->policy[i] >= 0;
    }
    loom_tensor_t *data = input_data(t);
    if (!data) return -1;
    s = loom_trace_input(tr, data, any ? pol : NULL, out);
    t->step_input = s == LOOM_OK;
    t->step_copy = data != t->data ? data : NULL;
  }
  if (s != LOOM_OK) {
    py_fail(s);
    return -1;
  }
  if (PyList_Append(st.entered, (PyObject *)t) < 0) return -1;
  t->step = st.id;
  t->value = *out;
  st.open = true;
  return 0;
}

/* Whether memory others may write (t's, read by the step through
 * t->step_copy) was written since the step copied it. */
static bool input_changed(const py_tensor_t *t) {
  const char *now = loom_tensor_data(t->data), *then = loom_tensor_data(t->step_copy);
  size_t item = loom_dtype_size(t->dtype);
  int64_t n = loom_tensor_numel(t->step_copy), row = 1;
  if (n == 0) return false;
  bool dense = true;
  for (int d = t->rank - 1; d >= 0 && t->wrapped; d--) {
    dense &= t->shape[d] == 1 || t->strides[d] == row;
    row *= t->shape[d];
  }
  if (dense) return memcmp(now, then, (size_t)n * item) != 0;
  int64_t at[LOOM_MAX_RANK] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) off += at[d] * t->strides[d];
    if (memcmp(now + off * (int64_t)item, then + k * (int64_t)item, item)) return true;
    for (int d = t->rank - 1; d >= 0 && ++at[d] == t->shape[d]; d--) at[d] = 0;
  }
  return false;
}

int py_step_value(py_tensor_t *t, loom_value_t *out) {
  /* An op reads the value its input has when it is recorded: a batch
   * array refilled within the step enters again. */
  if (t->step == st.id && !(t->step_input && t->step_copy && input_changed(t))) {
    *out = t->value;
    return 0;
  }
  return enter(t, out);
}

/* Parameters the program no longer references (a model dropped, its
 * optimizer with it) leave the trace, with their optimizer state, and are
 * freed: else every model a process trains stays in the optimizer step
 * of the next, and in memory. One the current step uses stays. */
static int release_dropped(void) {
  for (Py_ssize_t i = st.params ? PyList_GET_SIZE(st.params) - 1 : -1; i >= 0; i--) {
    py_tensor_t *t = (py_tensor_t *)PyList_GET_ITEM(st.params, i);
    if (Py_REFCNT(t) != 1 || !st.trace || loom_trace_param_forget(st.trace, t->data) != LOOM_OK)
      continue;
    t->held = false;
    if (PyList_SetSlice(st.params, i, i + 1, NULL) < 0) return -1; /* frees t */
  }
  return 0;
}

/* Ends the step. On a failure to make a result real the step still ends
 * (the trace cannot go on from a failed run); the results left lazy are
 * dead and say so when used. */
/* Makes every live result of the step real, unlinking each when unlink;
 * one that fails keeps its error for its reads, and the first new failure
 * is fetched into *type, *value, *tb. */
static void realize_results(bool unlink, PyObject **type, PyObject **value, PyObject **tb) {
  for (py_tensor_t *t = st.results, *next; t; t = next) {
    bool failed_before = t->error != NULL;
    if (!t->data && !failed_before && py_tensor_realize(t) < 0) {
      if (!*type && !seen_read_error()) PyErr_Fetch(type, value, tb);
      else PyErr_Clear();
    }
    next = t->next;
    if (unlink) {
      py_step_unlink(t);
      next = st.results;
    }
  }
}

int py_step_end(void) {
  if (!st.open) return 0;
  PyObject *err_type = NULL, *err_value = NULL, *err_tb = NULL;
  realize_results(true, &err_type, &err_value, &err_tb);
  loom_status_t s = st.trace ? loom_trace_step_end(st.trace) : LOOM_OK;
  st.id++;
  st.open = false;
  st.backward_ran = st.read_waiting = false;
  st.lazy = st.grad_values = 0;
  Py_CLEAR(st.entered);
  Py_CLEAR(st.read_errors);
  int released = s == LOOM_OK ? release_dropped() : 0;
  if (err_type) {
    if (released < 0) PyErr_Clear();
    PyErr_Restore(err_type, err_value, err_tb);
    return -1;
  }
  if (s != LOOM_OK) {
    py_fail(s);
    return -1;
  }
  return released;
}

void py_step_forget(void) {
  while (st.results) {
    py_tensor_t *t = st.results;
    py_step_unlink(t);
  }
  st.id++;
  st.open = false;
  st.backward_ran = st.read_waiting = false;
  st.lazy = st.grad_values = 0;
  Py_CLEAR(st.entered);
  Py_CLEAR(st.read_errors);
}

Py_ssize_t py_step_results_besides(PyObject *outputs, PyObject *params) {
  Py_ssize_t n = 0;
  for (py_tensor_t *t = st.results; t; t = t->next) {
    bool known = false;
    for (Py_ssize_t i = 0; !known && i < PyTuple_GET_SIZE(outputs); i++)
      known = PyTuple_GET_ITEM(outputs, i) == (PyObject *)t;
    for (Py_ssize_t i = 0; !known && i < PyList_GET_SIZE(params); i++)
      known = ((py_tensor_t *)PyList_GET_ITEM(params, i))->grad == (PyObject *)t;
    n += !known && t->step == st.id;
  }
  return n;
}

/* _step_tracks_grad(): whether the step in progress holds values that
 * require grad (a backward may still start from them). */
static PyObject *fn_step_tracks_grad(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyBool_FromLong(st.open && st.grad_values > 0);
}

/* _ir_dims(t): t's dims as the step's graph holds them, symbolic ones as
 * their handles, which a reshape's shape takes as they are: flatten and
 * unflatten keep a symbolic batch symbolic, where t.shape's sizes would
 * fix it. In a capture, whose dims are the arguments' sizes, t.shape. */
static PyObject *fn_ir_dims(PyObject *self, PyObject *arg) {
  (void)self;
  if (!py_tensor_check(arg)) {
    PyErr_SetString(PyExc_TypeError, "_ir_dims: a tensor");
    return NULL;
  }
  py_tensor_t *t = (py_tensor_t *)arg;
  int64_t dims[LOOM_MAX_RANK];
  int rank = t->rank;
  memcpy(dims, t->shape, sizeof(int64_t) * (size_t)rank);
  loom_value_t v;
  if (!py_capture_active()) {
    if (py_step_value(t, &v) < 0) return NULL;
    loom_status_t s = loom_value_type(py_step_graph(), v, NULL, &rank, dims);
    if (s != LOOM_OK) return py_fail(s);
  }
  PyObject *out = PyTuple_New(rank);
  for (int i = 0; out && i < rank; i++) {
    PyObject *d = PyLong_FromLongLong(dims[i]);
    if (!d) Py_CLEAR(out);
    else PyTuple_SET_ITEM(out, i, d);
  }
  return out;
}

/* ---- Reads by the program ----------------------------------------------
 * A read by the program ends a step that no backward or optimizer could
 * still use, even while lazy results of it are alive: they are made real,
 * so that an inference loop that keeps its last output (`out = model(x)`,
 * then a read) ends a step per iteration instead of growing one trace.
 * Reads by loom's own Python modules (an index list, a target's range
 * check, in the middle of an op whose operands must stay lazy) end the
 * step only once nothing lazy is alive. A read is the program's when the
 * innermost Python frame is outside loom's package, or is one of the
 * reading methods (Tensor.numpy, tolist, float, print...) registered by
 * _set_user_reads. */
static PyObject *package_dir;    /* loom's folder, ending in its separator */
static PyObject *reading_codes;  /* a tuple of the reading methods' code */

static PyObject *fn_set_user_reads(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *dir, *codes;
  if (!PyArg_ParseTuple(args, "UO!:_set_user_reads", &dir, &PyTuple_Type, &codes)) return NULL;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(codes); i++)
    if (!PyCode_Check(PyTuple_GET_ITEM(codes, i))) {
      PyErr_SetString(PyExc_TypeError, "_set_user_reads: a tuple of code objects");
      return NULL;
    }
  Py_XSETREF(package_dir, Py_NewRef(dir));
  Py_XSETREF(reading_codes, Py_NewRef(codes));
  Py_RETURN_NONE;
}

static bool read_by_program(void) {
  PyFrameObject *frame = PyEval_GetFrame();
  if (!frame || !package_dir) return true;
  PyCodeObject *code = PyFrame_GetCode(frame);
  bool program = PyUnicode_Tailmatch(code->co_filename, package_dir, 0, PY_SSIZE_T_MAX, -1) != 1;
  for (Py_ssize_t i = 0; !program && i < PyTuple_GET_SIZE(reading_codes); i++)
    program = PyTuple_GET_ITEM(reading_codes, i) == (PyObject *)code;
  Py_DECREF(code);
  return program;
}

/* After a read: ends the step when nothing alive could still use it. A
 * value read while results that require grad are alive (an inference loop
 * without no_grad reads model(x).sum()) ends it at the next op recorded
 * once they have died, so that such a loop does not grow one step. */
int py_step_idle(void) {
  if (py_capture_active() || !st.open || st.backward_ran) return 0;
  if (st.lazy > 0 && !read_by_program()) return 0;
  if (st.grad_values == 0) return py_step_end();
  st.read_waiting = true;
  return 0;
}

int py_step_before_record(void) {
  if (!st.read_waiting || st.grad_values > 0 || st.backward_ran || py_capture_active()) return 0;
  return py_step_end() < 0 ? -1 : 0;
}

int py_step_retain_grad(py_tensor_t *t) {
  if (py_capture_active()) {
    PyErr_SetString(PyExc_NotImplementedError,
                    "retain_grad() inside a function loom.compile captures");
    return -1;
  }
  /* A result of an ended step: no backward can reach it any more, and its
   * .grad stays None, as PyTorch's of a tensor no backward reaches. */
  if (t->step == st.id) {
    loom_status_t s = loom_trace_retain_grad(st.trace, t->value);
    if (s != LOOM_OK) {
      PyErr_Format(PyExc_RuntimeError,
                   "retain_grad(): the tensor was used before, in a part of the step that "
                   "has run already (a read such as .item() or print ran it), whose backward "
                   "does not give the tensor's gradient: call retain_grad() before using the "
                   "tensor (%s)", loom_last_error());
      return -1;
    }
  }
  t->retains_grad = true;
  return 0;
}

/* *slot += grad (grad taken), in place as PyTorch accumulates: whoever
 * holds the old .grad (g = p.grad, a NumPy view of it) sees the sum. A
 * real float .grad of its own memory is added to there, a lazy one takes
 * the sum's value; any other (a NumPy array's memory, another dtype) is
 * replaced by the sum. */
int py_step_accumulate_grad(PyObject **slot, PyObject *grad) {
  py_tensor_t *old = (py_tensor_t *)*slot, *g = (py_tensor_t *)grad;
  if (!old) {
    *slot = grad;
    return 0;
  }
  bool same = old->dtype == g->dtype && old->rank == g->rank &&
              !memcmp(old->shape, g->shape, sizeof(int64_t) * (size_t)old->rank);
  bool f32 = old->dtype == LOOM_F32, f64 = old->dtype == LOOM_F64;
  if (same && old->data && !old->wrapped && g->data && (f32 || f64)) {
    if (py_step_before_export(old) < 0) { /* the step reads the old values */
      Py_DECREF(grad);
      return -1;
    }
    int64_t n = loom_tensor_numel(old->data);
    void *dst = loom_tensor_data(old->data), *src = loom_tensor_data(g->data);
    for (int64_t i = 0; i < n; i++)
      if (f32) ((float *)dst)[i] += ((const float *)src)[i];
      else ((double *)dst)[i] += ((const double *)src)[i];
    Py_DECREF(grad);
    return 0;
  }
  PyObject *sum = PyNumber_Add(*slot, grad);
  Py_DECREF(grad);
  if (!sum) return -1;
  int took = py_step_take_value(old, (py_tensor_t *)sum, false);
  if (took == 1) Py_DECREF(sum);
  else Py_SETREF(*slot, sum);
  return took < 0 ? -1 : 0;
}

/* After a backward: each retained result's .grad gets that backward's
 * gradient, added to what it held. */
static int fill_retained(void) {
  for (py_tensor_t *t = st.results; t; t = t->next) {
    if (!t->retains_grad || t->step != st.id) continue;
    const loom_tensor_t *g = NULL;
    loom_tensor_t *copy = NULL;
    loom_status_t s = loom_trace_retained_grad(st.trace, t->value, &g);
    if (s == LOOM_OK && !g) continue;
    if (s == LOOM_OK) s = loom_tensor_copy(g, &copy);
    if (s != LOOM_OK) {
      py_fail(s);
      return -1;
    }
    PyObject *grad = py_tensor_wrap(copy);
    if (!grad) return -1;
    if (t->grad) { /* a new tensor, as PyTorch's retained .grad (not in place) */
      PyObject *sum = PyNumber_Add(t->grad, grad);
      Py_DECREF(grad);
      if (!sum) return -1;
      grad = sum;
    }
    Py_XSETREF(t->grad, grad);
  }
  return 0;
}

/* ---- functions of the module ---- */

static PyObject *fn_step(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (py_step_end() < 0) return NULL;
  Py_RETURN_NONE;
}

/* sync(): runs everything recorded so far (a segment boundary); the
 * tensors stay lazy values of the step. */
static PyObject *fn_sync(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (!st.open || py_capture_active()) Py_RETURN_NONE; /* captured: one graph anyway */
  if (py_step_break("loom.sync()") < 0) return NULL;
  loom_status_t s = loom_trace_sync(st.trace);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_NONE;
}

/* Ends the step and drops the trace, so that the next step makes one
 * with the new settings (its cache and optimizer state start afresh). */
static int renew_trace(void) {
  if (py_step_end() < 0) return -1;
  loom_trace_destroy(st.trace);
  st.trace = NULL;
  Py_ssize_t n_params = st.params ? PyList_GET_SIZE(st.params) : 0;
  for (Py_ssize_t i = 0; i < n_params; i++)
    ((py_tensor_t *)PyList_GET_ITEM(st.params, i))->held = false;
  Py_CLEAR(st.params);
  return 0;
}

static PyObject *fn_set_num_threads(PyObject *self, PyObject *arg) {
  (void)self;
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n < 0 || n > 1024) {
    PyErr_Format(PyExc_ValueError, "loom: threads must be in 0..1024 (got %ld)", n);
    return NULL;
  }
  if (renew_trace() < 0) return NULL;
  st.threads = (int)n;
  Py_RETURN_NONE;
}

/* _at_exit(seconds): the step ends, the compiles it queued finish and
 * reach the module cache on disk for at most seconds (a program that ends
 * before its background compiles would else find none of them on its next
 * run; one that queued minutes of them should not wait for all), and the
 * trace goes. */
static PyObject *fn_at_exit(PyObject *self, PyObject *arg) {
  (void)self;
  double seconds = PyFloat_AsDouble(arg);
  if (seconds == -1.0 && PyErr_Occurred()) return NULL;
  if (!st.trace) Py_RETURN_NONE;
  if (py_step_end() < 0) return NULL;
  loom_status_t s = loom_trace_wait_compiles_for(st.trace, seconds);
  if (s != LOOM_OK) return py_fail(s);
  if (renew_trace() < 0) return NULL;
  Py_RETURN_NONE;
}

/* _set_compile_mode(0 tiered | 1 wait | 2 interpret). */
static PyObject *fn_set_compile_mode(PyObject *self, PyObject *arg) {
  (void)self;
  long mode = PyLong_AsLong(arg);
  if (mode == -1 && PyErr_Occurred()) return NULL;
  if (mode < 0 || mode > 2) {
    PyErr_SetString(PyExc_ValueError, "loom: compile mode 0, 1 or 2");
    return NULL;
  }
  if (renew_trace() < 0) return NULL;
  st.compile_mode = (int)mode;
  Py_RETURN_NONE;
}

static PyObject *fn_no_grad_enter(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  st.no_grad++;
  Py_RETURN_NONE;
}

static PyObject *fn_no_grad_exit(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (st.no_grad > 0) st.no_grad--;
  Py_RETURN_NONE;
}

static PyObject *fn_grad_enabled(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyBool_FromLong(st.no_grad == 0);
}

/* backward(loss): back-propagates through the step, then adds each
 * entered parameter's gradient to its .grad (as PyTorch accumulates). */
static PyObject *fn_backward(PyObject *self, PyObject *arg) {
  (void)self;
  if (!py_tensor_check(arg)) {
    PyErr_SetString(PyExc_TypeError, "backward: a loom Tensor is needed");
    return NULL;
  }
  py_tensor_t *loss = (py_tensor_t *)arg;
  if (!loss->requires_grad) {
    PyErr_SetString(PyExc_RuntimeError,
                    "element 0 of tensors does not require grad and does not have a grad_fn");
    return NULL;
  }
  if (py_capture_active() && loss->step == st.id && !loss->is_leaf)
    return py_capture_backward(loss);
  if (loss->step != st.id || loss->is_leaf) {
    PyErr_SetString(PyExc_RuntimeError,
                    "loom: backward from a tensor of an ended step (call backward before "
                    "loom.step() or an optimizer's step())");
    return NULL;
  }
  if (py_step_break("backward()") < 0) return NULL;
  loom_status_t s = loom_trace_backward(st.trace, loss->value);
  if (s != LOOM_OK) return py_fail(s);
  st.backward_ran = true;
  Py_ssize_t n = st.entered ? PyList_GET_SIZE(st.entered) : 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(st.entered, i);
    if (!p->requires_grad || !p->is_leaf) continue;
    const loom_tensor_t *g;
    loom_tensor_t *copy = NULL;
    /* the trace sums a step's backwards; .grad takes each call's part */
    s = loom_trace_grad_last(st.trace, p->data, &g);
    if (s == LOOM_OK && !g) continue; /* not reached: .grad stays as it is (None) */
    if (s == LOOM_OK) s = loom_tensor_copy(g, &copy);
    if (s != LOOM_OK) return py_fail(s);
    PyObject *grad = py_tensor_wrap(copy);
    /* .grad is the trace's own sum only when it was empty before this
     * step's first backward. */
    bool fresh = !p->grad && p->trace_grad_step != st.id;
    if (!grad || py_step_accumulate_grad(&p->grad, grad) < 0) return NULL;
    /* The optimizer may apply the trace's own gradient only while .grad is
     * that very gradient: not accumulated over steps, not replaced. */
    Py_XSETREF(p->trace_grad, fresh ? Py_NewRef(p->grad) : NULL);
    p->trace_grad_step = st.id;
    p->trace_grad_version = ((py_tensor_t *)p->grad)->version;
  }
  if (fill_retained() < 0) return NULL;
  Py_RETURN_NONE;
}

loom_status_t py_optimizer(int kind, double momentum, int nesterov, double beta1,
                           double beta2, double eps, double weight_decay,
                           loom_optimizer_t *o) {
  loom_status_t s = loom_optimizer_init(o, (loom_optimizer_kind_t)kind);
  o->momentum = momentum;
  o->nesterov = nesterov;
  o->beta1 = beta1;
  o->beta2 = beta2;
  o->eps = eps;
  o->weight_decay = weight_decay;
  return s;
}

/* optimizer_step(kind, lr, momentum, nesterov, beta1, beta2, eps,
 * weight_decay): one step of the C optimizer over the step's parameters
 * and gradients, then the step's end. */
static PyObject *fn_optimizer_step(PyObject *self, PyObject *args) {
  (void)self;
  int kind, nesterov;
  double lr, momentum, beta1, beta2, eps, wd;
  if (!PyArg_ParseTuple(args, "iddpdddd", &kind, &lr, &momentum, &nesterov, &beta1, &beta2,
                        &eps, &wd))
    return NULL;
  if (st.open && st.backward_ran) {
    /* The update writes the parameters in place: what the program still
     * holds of this step is made from their values before it, as eager
     * PyTorch made it (a value the trace had not yet computed would be
     * computed from the updated ones). */
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    realize_results(false, &type, &value, &tb);
    if (type) {
      py_step_end();
      PyErr_Clear();
      PyErr_Restore(type, value, tb);
      return NULL;
    }
    if (release_dropped() < 0) return NULL;
    loom_optimizer_t o;
    loom_status_t s = py_optimizer(kind, momentum, nesterov, beta1, beta2, eps, wd, &o);
    if (s != LOOM_OK) return py_fail(s);
    s = loom_trace_optimizer_step(st.trace, &o, lr);
    if (s != LOOM_OK) {
      py_fail(s); /* the message, before the step's end replaces it */
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      py_step_end();
      PyErr_Clear();
      PyErr_Restore(type, value, tb);
      return NULL;
    }
  }
  if (py_step_end() < 0) return NULL;
  Py_RETURN_NONE;
}

/* The parameter p of _optimizer_state(_set)'s arguments: a tensor the
 * trace holds, or NULL (and no error) when it holds none. */
static py_tensor_t *held_param(PyObject *o) {
  if (!py_tensor_check(o)) {
    PyErr_SetString(PyExc_TypeError, "optimizer state: a loom Tensor is needed");
    return NULL;
  }
  py_tensor_t *p = (py_tensor_t *)o;
  return p->held && st.trace ? p : NULL;
}

/* _optimizer_state(p, name): a copy of the state the trace's optimizer
 * step keeps for p under name ("momentum", "m", "v", "step"), or None. */
static PyObject *fn_optimizer_state(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *o;
  const char *name;
  if (!PyArg_ParseTuple(args, "Os", &o, &name)) return NULL;
  py_tensor_t *p = held_param(o);
  if (!p) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
  }
  const loom_tensor_t *state;
  loom_tensor_t *copy = NULL;
  loom_status_t s = loom_trace_optimizer_state(st.trace, p->data, name, &state);
  if (s == LOOM_OK && !state) Py_RETURN_NONE;
  if (s == LOOM_OK) s = loom_tensor_copy(state, &copy);
  return s == LOOM_OK ? py_tensor_wrap(copy) : py_fail(s);
}

/* _optimizer_state_set(p, name, value): the trace's next optimizer step
 * starts p's state `name` from value (real, of the state's dtype). */
static PyObject *fn_optimizer_state_set(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *o, *value;
  const char *name;
  if (!PyArg_ParseTuple(args, "OsO", &o, &name, &value)) return NULL;
  py_tensor_t *p = held_param(o);
  if (!p) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_RuntimeError, "optimizer state: the tensor is not a parameter "
                                          "of the trace yet");
    return NULL;
  }
  if (!py_tensor_check(value)) {
    PyErr_SetString(PyExc_TypeError, "optimizer state: a loom Tensor is needed");
    return NULL;
  }
  py_tensor_t *v = (py_tensor_t *)value;
  if (!v->data && py_tensor_realize(v) < 0) return NULL;
  loom_status_t s = loom_trace_optimizer_state_set(st.trace, p->data, name, v->data);
  if (s != LOOM_OK) return py_fail(s);
  Py_RETURN_NONE;
}

/* cond(t): bool(t) of a one-element tensor. A lazy one is read through
 * loom_trace_cond, so that the decision joins the path signature and each
 * path compiles once. */
static PyObject *fn_cond(PyObject *self, PyObject *arg) {
  (void)self;
  if (!py_tensor_check(arg)) {
    PyErr_SetString(PyExc_TypeError, "cond: a loom Tensor is needed");
    return NULL;
  }
  py_tensor_t *t = (py_tensor_t *)arg;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->shape[i];
  if (n != 1) {
    PyErr_SetString(PyExc_RuntimeError,
                    "Boolean value of Tensor with more than one value is ambiguous");
    return NULL;
  }
  if (t->data) {
    double v;
    loom_status_t s = loom_tensor_get_f64(t->data, 0, &v);
    return s == LOOM_OK ? PyBool_FromLong(v != 0) : py_fail(s);
  }
  if (py_capture_active()) return py_capture_refuse_read(), NULL;
  if (py_step_break("bool() of a tensor: the branch joins the path signature") < 0)
    return NULL;
  int taken;
  loom_status_t s = loom_trace_cond(st.trace, t->value, &taken);
  return s == LOOM_OK ? PyBool_FromLong(taken) : py_fail(s);
}

/* _trace_grads_current(params): whether each parameter with a .grad holds
 * exactly the gradient this step's backward gave it, unchanged since (no
 * in-place op, no NumPy view written), and each without one got none from
 * it, so that the trace's optimizer step applies what .grad says. */
static PyObject *fn_trace_grads_current(PyObject *self, PyObject *params) {
  (void)self;
  PyObject *fast = PySequence_Fast(params, "a sequence of tensors");
  if (!fast) return NULL;
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
    if (!py_tensor_check(o)) continue;
    py_tensor_t *p = (py_tensor_t *)o;
    bool given = st.backward_ran && p->trace_grad_step == st.id;
    if (p->grad ? !given || p->grad != p->trace_grad ||
                      ((py_tensor_t *)p->grad)->version != p->trace_grad_version
                : given)
      ok = false;
  }
  Py_DECREF(fast);
  return PyBool_FromLong(ok);
}

/* The leaf tensors requiring grad that the step entered (its parameters). */
static PyObject *fn_step_params(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  PyObject *list = PyList_New(0);
  Py_ssize_t n = st.entered ? PyList_GET_SIZE(st.entered) : 0;
  for (Py_ssize_t i = 0; list && i < n; i++) {
    py_tensor_t *p = (py_tensor_t *)PyList_GET_ITEM(st.entered, i);
    if (p->requires_grad && p->is_leaf && PyList_Append(list, (PyObject *)p) < 0)
      Py_CLEAR(list);
  }
  return list;
}

static PyObject *fn_explain(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  loom_trace_t *tr = py_step_trace();
  if (!tr) return NULL;
  char *text;
  loom_status_t s = loom_trace_explain(tr, &text);
  if (s != LOOM_OK) return py_fail(s);
  PyObject *r = PyUnicode_FromString(text);
  loom_free(text);
  return r;
}

static PyObject *fn_stats(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  loom_trace_t *tr = py_step_trace();
  if (!tr) return NULL;
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  s.cache.size = sizeof s.cache;
  loom_status_t rc = loom_trace_get_stats(tr, &s);
  if (rc != LOOM_OK) return py_fail(rc);
  return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsL}", "recorded_ops", (long long)s.recorded_ops,
                       "segments", (long long)s.segments, "hits", (long long)s.hits,
                       "misses", (long long)s.misses, "interpreted", (long long)s.interpreted,
                       "breaks", (long long)s.breaks, "recompiles", (long long)s.recompiles,
                       "stitched", (long long)s.stitched, "compiles",
                       (long long)s.cache.compiles, "steps", (long long)(st.id - 1));
}

PyMethodDef py_step_methods[] = {
    {"step", fn_step, METH_NOARGS, "ends the step: runs what is pending"},
    {"_step_tracks_grad", fn_step_tracks_grad, METH_NOARGS, NULL},
    {"_ir_dims", fn_ir_dims, METH_O, "t's dims in the step's graph, symbolic ones as handles"},
    {"set_num_threads", fn_set_num_threads, METH_O, "threads of the steps that follow"},
    {"sync", fn_sync, METH_NOARGS, "runs what is recorded: a segment boundary"},
    {"_set_compile_mode", fn_set_compile_mode, METH_O, "0 tiered, 1 wait, 2 interpret"},
    {"_at_exit", fn_at_exit, METH_O, "ends the step; queued compiles finish for at most the seconds given"},
    {"_no_grad_enter", fn_no_grad_enter, METH_NOARGS, NULL},
    {"_no_grad_exit", fn_no_grad_exit, METH_NOARGS, NULL},
    {"is_grad_enabled", fn_grad_enabled, METH_NOARGS, "False inside loom.no_grad()"},
    {"_backward", fn_backward, METH_O, "backward(loss)"},
    {"_optimizer_step", fn_optimizer_step, METH_VARARGS, NULL},
    {"_optimizer_state", fn_optimizer_state, METH_VARARGS, "the trace's optimizer state of p"},
    {"_optimizer_state_set", fn_optimizer_state_set, METH_VARARGS,
     "the state the trace's next optimizer step starts p from"},
    {"_step_params", fn_step_params, METH_NOARGS, "the step's parameters"},
    {"_trace_grads_current", fn_trace_grads_current, METH_O,
     "whether .grad of each is this step's own gradient"},
    {"_cond", fn_cond, METH_O, "bool(t), joining the path signature"},
    {"_explain", fn_explain, METH_NOARGS, "the trace's report"},
    {"_set_break_hook", fn_set_break_hook, METH_O, "loom.explain's callback, or None"},
    {"_set_user_reads", fn_set_user_reads, METH_VARARGS,
     "loom's folder and the code of the methods through which a program reads a value"},
    {"_stats", fn_stats, METH_NOARGS, "the trace's counters"},
    {NULL, NULL, 0, NULL}};
