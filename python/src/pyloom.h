/* The extension module loom._C: Loom's public C API seen from Python.
 *
 * A Tensor is real (it holds a loom_tensor_t) or lazy (a value of the
 * step the process is tracing). Ops record into that step's trace; a
 * value becomes real where Python needs its data, and every lazy tensor
 * still alive when the step ends is made real then, so that a tensor
 * outlives the step that made it. One trace serves the process: the GIL
 * orders Python's calls, and the trace refuses a step that another OS
 * thread began. This file is the binding's one shared header. */
#ifndef PYLOOM_H
#define PYLOOM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include "loom/loom.h"
#include "loom/op_table.h"
#include "loom/trace.h"
#include "loom/train.h"

typedef struct py_tensor {
  PyObject_HEAD
  loom_tensor_t *data;        /* real data (owned), or NULL while lazy */
  Py_buffer view;             /* the buffer data wraps (view.obj NULL: none) */
  bool wrapped;               /* data is another's memory, laid out by strides */
  int64_t strides[LOOM_MAX_RANK]; /* in elements, when wrapped */
  uint64_t step;              /* the step `value` belongs to (0: none) */
  loom_value_t value;
  loom_dtype_t dtype;
  int rank;
  int64_t shape[LOOM_MAX_RANK];
  bool requires_grad;
  bool is_leaf;               /* made by the user, not by an op */
  bool held;                  /* a parameter the trace keeps (step.c) */
  bool is_state;              /* a module's buffer: loom.compile borrows it */
  bool borrowed;              /* an executable of loom.compile uses data in place */
  bool retains_grad;          /* retain_grad(): backward fills .grad (step.c) */
  bool step_input;            /* the step `step` borrows data as an input (step.c) */
  loom_tensor_t *step_copy;   /* the copy of data that others may write which
                                 step `step` reads (held by the step), or NULL */
  Py_ssize_t exports;         /* buffers handed out and not released (NumPy views) */
  PyObject *grad;             /* a Tensor, or NULL for None */
  PyObject *error;            /* the exception its read failed with, raised
                                 again at every read; or NULL */
  PyObject *trace_grad;       /* the grad backward made in step
                                 trace_grad_step (compared with grad) */
  uint64_t trace_grad_step;
  uint64_t version;           /* bumped when its value may change: an in-place
                                 op's new value, its memory handed out */
  uint64_t trace_grad_version; /* trace_grad's version when backward made it */
  /* A dim policy per dim set by loom.dynamic (kind -1: the default), and
   * the symbols' names it gave (NULL, or a list of str or None per dim):
   * dims of one name are one symbol of the trace. */
  int policy[LOOM_MAX_RANK];
  PyObject *policy_names;
  struct py_tensor *prev, *next; /* in the step's list of lazy tensors */
  PyObject *weakrefs;
} py_tensor_t;

extern PyTypeObject py_tensor_type;

/* ---- errors (module.c) ---- */
/* Sets the Python exception of a failed call: its type from the status,
 * its text loom_last_error()'s. Returns NULL for `return py_fail(s);`. */
PyObject *py_fail(loom_status_t s);

/* ---- tensors (tensor.c) ---- */
/* A new real tensor that takes over data. */
PyObject *py_tensor_wrap(loom_tensor_t *data);
/* Makes t real (reads its value from the trace); 0, or -1 with an
 * exception set. */
int py_tensor_realize(py_tensor_t *t);
bool py_tensor_check(PyObject *o);
extern PyMethodDef py_tensor_functions[];

/* ---- the step (step.c) ---- */
/* The trace, created on first use; NULL with an exception set. */
loom_trace_t *py_step_trace(void);
/* At import: the main thread, and the type that releases the trace when
 * another thread's state is cleared. */
int py_step_init(void);
uint64_t py_step_id(void);
/* The value of t in this step: entered as an input or a parameter when
 * it has none yet. */
int py_step_value(py_tensor_t *t, loom_value_t *out);
/* A new lazy tensor for value v of this step. */
PyObject *py_step_lazy(loom_value_t v, bool requires_grad);
/* Lazy tensors join and leave the step's list. */
void py_step_link(py_tensor_t *t);
void py_step_unlink(py_tensor_t *t);
/* A read of the step failed with this error (the step's end raises it
 * again for no other value). */
void py_step_read_failed(PyObject *error);
/* A linked tensor was made real. */
void py_step_realized(py_tensor_t *t);
/* dst takes lazy src's value in place: the object names the new value,
 * and whoever holds it sees that. 1 when taken; 0 when dst cannot (of
 * another dtype, or shape unless reshape; memory others see; a
 * parameter); -1 with an exception. */
int py_step_take_value(py_tensor_t *dst, py_tensor_t *src, bool reshape);
/* *slot += grad (grad taken), in place as PyTorch accumulates .grad; 0 or
 * -1 with an exception. */
int py_step_accumulate_grad(PyObject **slot, PyObject *grad);
/* After a read: ends the step when nothing alive could still use its
 * values (lazy results alive count only at reads by loom's own modules). */
int py_step_idle(void);
/* Before an op records: ends the step a read left waiting for its values
 * that require grad to die, once they have; 0, or -1 with an exception. */
int py_step_before_record(void);
/* The graph ops record into: the capture's, else the trace's. */
loom_graph_t *py_step_graph(void);
/* Drops the step's results without reading them (a capture's values,
 * which never run) and moves to the next step number. */
void py_step_forget(void);
/* Results of the step alive besides the tensors of tuple `outputs` and
 * the .grad of the tensors of list `params`. */
Py_ssize_t py_step_results_besides(PyObject *outputs, PyObject *params);
int py_step_threads(void);
bool py_step_grad_enabled(void);
/* Tells loom.explain's callback, when one is set, of a graph break and its
 * reason; -1 when the callback raised. */
int py_step_break(const char *reason);
/* Ends the step if one is open: every lazy tensor alive made real first. */
int py_step_end(void);
/* t.retain_grad() for a non-leaf t that requires grad; -1 with an
 * exception set. */
int py_step_retain_grad(py_tensor_t *t);
/* Before t's memory is handed out writable (the buffer protocol): if the
 * step borrows it as an input, t moves to a copy, so that what the step
 * recorded reads the values it had (as eager ops would have); -1 with an
 * exception set. */
int py_step_before_export(py_tensor_t *t);
/* py_step_before_export for a buffer or DLPack export, after which a
 * value the step computed is read from the exported memory. */
int py_step_export(py_tensor_t *t);
/* An optimizer of kind with these hyperparameters (torch.optim's
 * meanings), for the trace's step or a captured one. */
loom_status_t py_optimizer(int kind, double momentum, int nesterov, double beta1,
                           double beta2, double eps, double weight_decay,
                           loom_optimizer_t *o);
/* The step's functions of the module (loom._C.step_end, ...). */
extern PyMethodDef py_step_methods[];

/* ---- loom.compile (capture.c) ---- */
bool py_capture_active(void);
loom_graph_t *py_capture_graph(void);
/* Notes that the captured function assigned t's .grad (0, or -1 with an
 * exception). */
int py_capture_note_grad_set(py_tensor_t *t);
/* Enters real tensor t into the captured graph (a borrowed parameter or an
 * input); 0 or -1 with an exception. */
int py_capture_enter(py_tensor_t *t, loom_value_t *out);
/* Sets the exception of a read inside a captured function (GraphBreak:
 * loom.compile then runs the function through the trace); -1. */
int py_capture_refuse_read(void);
/* loom.GraphBreak, a RuntimeError: what stops a capture but not the
 * program. */
extern PyObject *py_graph_break;
PyObject *py_capture_backward(py_tensor_t *loss);
PyObject *py_capture_optimizer(const loom_optimizer_t *o, PyObject *optimizer);
extern PyMethodDef py_capture_functions[];
extern PyTypeObject py_captured_type;

/* ---- loom.distributed (distributed.c) ---- */
#include "loom/comm.h"
/* The communicator whose ranks the optimizer steps average gradients
 * over (DistributedDataParallel), or NULL. */
loom_comm_t *py_dist_averaging(void);
/* Enters the wrapped models' parameters into the step, in their order;
 * 0, or -1 with an exception set. */
int py_dist_enter_params(void);
extern PyMethodDef py_dist_functions[];

/* ---- DLPack (dlpack.c) ---- */
PyObject *py_tensor_dlpack(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *py_tensor_dlpack_device(PyObject *self, PyObject *unused);
extern PyMethodDef py_dlpack_functions[];

/* ---- ops (ops.c) ---- */
extern PyMethodDef py_op_methods[];
/* The operators of the tensor type (+, -, *, /, @, unary -, comparisons). */
extern PyNumberMethods py_tensor_number;
extern richcmpfunc py_tensor_richcompare;

#endif
