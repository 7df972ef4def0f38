"""Loom: an AI compiler and runtime, from Python in PyTorch's idiom.

Ops on loom tensors are recorded into a trace, not run one by one; a value
is computed where Python needs it (.numpy(), .item(), print, bool), by
segments that Loom compiles once per GraphKey and replays. See
docs/python.md."""
import atexit as _atexit
import builtins as _builtins
import contextlib
import functools
import inspect
import math as _math

import numpy as np

from . import _C
from ._dtype import DTYPES as _DTYPES, dtype, finfo, iinfo  # noqa: F401
from ._tensor import Size, Tensor
from . import functional
from .functional import *  # noqa: F401,F403  (the functions, under PyTorch's names)
from .functional import max, min, sum, pow, abs, round  # noqa: F401  (shadow builtins)
from .functional import return_types  # noqa: F401
from ._data_ops import *  # noqa: F401,F403  (unique, bincount, histc, ...)
from . import ops
from . import optim
from . import _compile
from ._compile import compile, Compiled  # noqa: F401
from . import nn
from . import distributed
from . import utils
from .serialization import save, load
from ._format import set_printoptions  # noqa: F401

GraphBreak = _C.GraphBreak
# At exit the compiles queued or running finish, so that the next run of
# the program finds them in the module cache: for at most
# LOOM_EXIT_COMPILE_SECONDS (10 by default; negative: no bound).


def _at_exit():
    import os
    try:
        seconds = _builtins.float(os.environ.get("LOOM_EXIT_COMPILE_SECONDS", "10"))
    except ValueError:
        import warnings
        warnings.warn("loom: LOOM_EXIT_COMPILE_SECONDS=%r is not a number of seconds; "
                      "waiting at most 10" % os.environ["LOOM_EXIT_COMPILE_SECONDS"])
        seconds = 10.0
    _C._at_exit(seconds)


_atexit.register(_at_exit)

for _d in _DTYPES:
    globals()[_d.name] = _d
float = globals()["float32"]
double = globals()["float64"]
half = globals()["float16"]
long = globals()["int64"]
int = globals()["int32"]
bool = globals()["bool"]
del _d

_PY_FLOAT = __builtins__["float"] if isinstance(__builtins__, dict) else __builtins__.float
_PY_BOOL = __builtins__["bool"] if isinstance(__builtins__, dict) else __builtins__.bool
_PY_INT = __builtins__["int"] if isinstance(__builtins__, dict) else __builtins__.int


def _default_dtype(a, data):
    """PyTorch's choice for data given as Python values: floats as the
    default dtype, unless a NumPy float64 (a scalar or an array) is among
    them."""
    if a.dtype == np.float64 and not _has_numpy_float64(data):
        return get_default_dtype()
    return None


def _has_numpy_float64(data):
    if isinstance(data, (np.ndarray, np.generic)):
        return data.dtype == np.float64
    if isinstance(data, (list, tuple)):
        return _builtins.any(_has_numpy_float64(v) for v in data)
    return False


def tensor(data, dtype=None, requires_grad=False):
    """A new tensor holding a copy of data (nested lists, numbers, arrays)."""
    if isinstance(data, Tensor):
        a = np.array(data.detach())
    elif isinstance(data, (np.ndarray, np.generic)):
        a = np.array(data)
        if dtype is None:
            from ._dtype import from_numpy_dtype
            from_numpy_dtype(a.dtype)  # a TypeError naming the dtypes Loom has
    else:
        a = _python_data(data, dtype)
        if dtype is None:
            dtype = _default_dtype(a, data)
        else:
            from ._dtype import check_fits, resolve
            check_fits(a, resolve(dtype), fill=False)
    if dtype is not None:
        from ._dtype import resolve
        d = resolve(dtype)
        if d._numpy is None:
            t = _C.from_buffer(a.astype(np.float32), True).to(d)
            t.requires_grad = requires_grad
            return t
        with np.errstate(over="ignore"):  # a float past float16's range is inf, as PyTorch's
            a = a.astype(d._numpy)
    t = _C.from_buffer(a, True)  # copied row-major (ascontiguousarray makes 0-d 1-d)
    t.requires_grad = requires_grad
    return t


def _python_data(data, dtype=None):
    """data (numbers, nested lists) as an array. An int beyond int64 is
    refused as PyTorch refuses it (NumPy would make it uint64 or object),
    unless a float beside it or a float dtype makes the data floats."""
    try:
        a = np.array(data)
    except OverflowError:
        a = None
    if a is None or a.dtype.kind == "u" or a.dtype == object:
        from ._dtype import resolve
        floats = dtype is not None and resolve(dtype).is_floating_point
        if a is not None and a.dtype == object:
            floats |= _builtins.any(isinstance(v, _PY_FLOAT) for v in a.reshape(-1))
        if floats:
            return np.array(data, dtype=np.float64)
        if a is None or a.dtype.kind == "u" or _builtins.any(
                isinstance(v, _PY_INT) for v in a.reshape(-1)):
            raise RuntimeError("Overflow when unpacking long")
    return a


def from_numpy(a):
    """A tensor sharing a's memory (no copy), as torch.from_numpy."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(a).__name__})")
    if a.dtype.byteorder not in ("=", "|", "<"):
        raise TypeError("loom.from_numpy: big-endian arrays are not supported")
    from ._dtype import from_numpy_dtype
    from_numpy_dtype(a.dtype)  # a TypeError naming the dtypes Loom has
    return _C.from_buffer(a, False)


def from_dlpack(obj):
    """A tensor over the memory of obj (a PyTorch tensor, a NumPy array, any
    object with __dlpack__), without a copy, as torch.from_dlpack."""
    return _C.from_dlpack(obj)


def as_tensor(data, dtype=None):
    if isinstance(data, Tensor) and dtype is None:
        return data
    if isinstance(data, np.ndarray) and dtype is None:
        return from_numpy(data)
    return tensor(data, dtype)


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(functional._size(s) for s in size)


def _filled(size, value, dtype, requires_grad):
    from ._dtype import check_fits, resolve
    d = resolve(dtype) if dtype is not None else get_default_dtype()
    check_fits(value, d, fill=True)
    if d._numpy is None:  # bfloat16, which NumPy lacks: filled as float32, then cast
        t = _filled(size, value, float32, False).to(d)
        t.requires_grad = requires_grad
        return t
    t = _C.zeros(d._code, _shape(size))
    if value != 0 or _math.copysign(1.0, value) < 0:  # -0.0 too
        np.asarray(t)[...] = value
    t.requires_grad = requires_grad
    return t


def zeros(*size, dtype=None, requires_grad=False):
    return _filled(size, 0, dtype, requires_grad)


def ones(*size, dtype=None, requires_grad=False):
    return _filled(size, 1, dtype, requires_grad)


def full(size, fill_value, dtype=None, requires_grad=False):
    """As torch.full: without dtype, a bool fill gives bool, an int int64,
    a float the default dtype."""
    if isinstance(fill_value, Tensor):  # a one-element tensor: its number (a read)
        fill_value = fill_value.item()
    if dtype is None:
        dtype = functional._number_dtype(fill_value)
    return _filled(tuple(size), fill_value, dtype, requires_grad)


def zeros_like(x, dtype=None):
    return zeros(x.shape, dtype=dtype or x.dtype)


def empty_like(x, dtype=None, requires_grad=False):
    """A tensor of x's shape (zeros: Loom has no uninitialized memory)."""
    return empty(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def ones_like(x, dtype=None):
    return ones(x.shape, dtype=dtype or x.dtype)


def full_like(x, fill_value, dtype=None):
    return full(x.shape, fill_value, dtype=dtype or x.dtype)


def arange(start, end=None, step=1, dtype=None):
    """As torch.arange: an integer dtype takes start, end and step cut to
    integers first (arange(0, 2.5, dtype=int64) is [0, 1])."""
    if end is None:
        start, end = 0, start
    if dtype is not None:
        from ._dtype import resolve
        d = resolve(dtype)
        if d.name == "bool":
            raise RuntimeError("arange: a Bool range is refused, as PyTorch refuses it "
                               "(give an integer or float dtype)")
        if not d.is_floating_point:
            start, end, step = _PY_INT(start), _PY_INT(end), _PY_INT(step)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    a = np.arange(start, end, step)
    if dtype is None and a.dtype == np.float64:
        dtype = get_default_dtype()
    return tensor(a, dtype=dtype)


def eye(n, m=None, dtype=None):
    return tensor(np.eye(n, m), dtype=dtype or get_default_dtype())


def linspace(start, end, steps, dtype=None, requires_grad=False):
    return tensor(np.linspace(start, end, steps), dtype=dtype or get_default_dtype(),
                  requires_grad=requires_grad)


# Random numbers: a NumPy generator that manual_seed resets.
_generator = np.random.default_rng(0)


_seed = 0  # the seed manual_seed gave last (initial_seed)


def manual_seed(seed):
    global _generator, _seed
    _seed = _builtins.int(seed)
    _generator = np.random.default_rng(seed)


def initial_seed():
    return _seed


def seed():
    """Seeds loom's generator from the system's entropy; the seed."""
    fresh = _builtins.int(np.random.SeedSequence().entropy % (1 << 63))
    manual_seed(fresh)
    return fresh


def get_rng_state():
    """loom's generator's state (NumPy's bit generator state, a dict; not
    PyTorch's byte tensor), for set_rng_state."""
    return _generator.bit_generator.state


def set_rng_state(new_state):
    _generator.bit_generator.state = new_state


def _generator_now():
    return _generator


class Generator:
    """torch.Generator: a random number generator of its own, for the
    generator= arguments (randn, rand, randint, randperm, DataLoader's
    shuffle, random_split). manual_seed(s) restarts it (and returns it, as
    PyTorch's); it draws as a NumPy generator does."""

    def __init__(self, device="cpu"):
        self.device = device
        self._seed = _builtins.int(np.random.SeedSequence().entropy % (1 << 63))
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed):
        self._seed = _builtins.int(seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def initial_seed(self):
        return self._seed

    def seed(self):
        fresh = _builtins.int(np.random.SeedSequence().entropy % (1 << 63))
        return self.manual_seed(fresh)._seed

    def get_state(self):
        return dict(self._rng.bit_generator.state)

    def set_state(self, state):
        self._rng.bit_generator.state = state
        return self

    def __getattr__(self, name):  # the draws: standard_normal, random, integers...
        return getattr(self.__dict__["_rng"], name)


def empty(*size, dtype=None, requires_grad=False):
    return _filled(size, 0, dtype, requires_grad)


def _check_random_dtype(dtype, kernel):
    """PyTorch's refusal of an integer or bool dtype for normal and uniform
    draws (NumPy's floats would be cast to zeros); kernel names its kernel."""
    if dtype is None:
        return
    from ._dtype import resolve
    from ._data_ops import _TORCH_TYPE
    d = resolve(dtype)
    if not d.is_floating_point:
        raise RuntimeError(f'"{kernel}" not implemented for \'{_TORCH_TYPE[d.name]}\'')


def _drawn(draw, dtype, generator, requires_grad=False):
    """A tensor of draw(g)'s values from generator (None: loom's). Inside
    loom.compile it is an input that each call draws anew, as the function
    draws it per call (the values drawn here feed the first call)."""
    def source():  # loom's generator as it is at each draw (manual_seed replaces it)
        return generator if generator is not None else _generator

    _compile.note_generator(source())
    t = tensor(draw(source()), dtype=dtype, requires_grad=requires_grad)
    if _C._capturing() and not requires_grad:
        first = [t]
        _C._capture_drawn(t, lambda: first.pop() if first else
                          tensor(draw(source()), dtype=dtype))
    return t


def randn(*size, dtype=None, requires_grad=False, generator=None):
    _check_random_dtype(dtype, "normal_kernel_cpu")
    shape = _shape(size)
    return _drawn(lambda g: g.standard_normal(shape), dtype or get_default_dtype(), generator,
                  requires_grad)


def rand(*size, dtype=None, requires_grad=False, generator=None):
    _check_random_dtype(dtype, "check_uniform_bounds")
    shape = _shape(size)
    return _drawn(lambda g: g.random(shape), dtype or get_default_dtype(), generator,
                  requires_grad)


def randn_like(x, dtype=None, requires_grad=False):
    return randn(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def rand_like(x, dtype=None, requires_grad=False):
    return rand(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def randperm(n, generator=None, dtype=None, requires_grad=False):
    """A random permutation of 0 .. n - 1 (int64 unless dtype)."""
    if _builtins.int(n) < 0:
        raise RuntimeError(f"randperm: n must be non-negative, got {_builtins.int(n)}")
    return _drawn(lambda g: g.permutation(_builtins.int(n)), dtype or int64, generator,
                  requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, requires_grad=False):
    """randint over input's shape (its dtype unless dtype); one bound is
    high."""
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype)


def bernoulli(input, p=None, *, generator=None):
    """1 where a uniform draw falls below input's probability (or p), else
    0, in input's dtype."""
    probs = p if p is not None else input
    if isinstance(probs, Tensor):
        probs = probs.detach()
    draw = rand(*input.shape, dtype=double, generator=generator)
    return functional.cast(functional.lt(draw, probs), input.dtype)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None):
    """Draws of N(mean, std): tensors of them (broadcast together), or two
    numbers and a size. As PyTorch's, no gradient reaches mean or std."""
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    if not tensors:
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: two "
                            "numbers need a size")
        z = randn(*size, dtype=dtype, generator=generator)
        return z * _builtins.float(std) + _builtins.float(mean)
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in tensors])
    z = randn(*shape, dtype=tensors[0].dtype, generator=generator)
    m = mean.detach() if isinstance(mean, Tensor) else mean
    s = std.detach() if isinstance(std, Tensor) else std
    return z * s + m


def poisson(input, generator=None):
    """Draws of Poisson(rate) for each rate of input (read on the host)."""
    rates = input.detach().numpy()
    return _drawn(lambda g: g.poisson(rates), input.dtype, generator)


def randint(low, high=None, size=(), dtype=None, generator=None):
    """Integers in [low, high); randint(high, size) as PyTorch's."""
    if isinstance(high, (tuple, list)) and size == ():
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    shape = tuple(size)
    return _drawn(lambda g: g.integers(low, high, size=shape), dtype or int64, generator)


def get_default_dtype():
    """The dtype of float data given as Python numbers, of float creation
    (zeros, randn, arange with float bounds...) and of float ops on
    integers: float32 unless set_default_dtype changed it."""
    from ._dtype import default_float
    return default_float()


def set_default_dtype(d):
    """As torch.set_default_dtype: float64 makes new float tensors and
    parameters double; only floating dtypes are taken."""
    from ._dtype import set_default_float
    set_default_float(d)


def is_tensor(x):
    return isinstance(x, Tensor)


# ---- steps, gradients, threads ----

def step():
    """Ends the traced step: runs what is pending and makes every tensor
    still alive real. An optimizer's step() ends the step by itself."""
    _C.step()


def sync():
    """Runs everything recorded so far: a segment boundary (torch_xla's
    mark_step). A loop whose body repeats (an RNN's time step) and calls it
    once per iteration compiles one segment for the body and replays it,
    instead of one segment for the whole unrolled loop."""
    _C.sync()


def set_num_threads(n):
    """Threads of the steps that follow (0: LOOM_NUM_THREADS or every CPU).
    Starts a new trace: its cache and the optimizers' state start afresh."""
    _C.set_num_threads(n)


_COMPILE_MODES = {"tiered": 0, "wait": 1, "interpret": 2}


def set_compile_mode(mode):
    """How a step runs a segment seen for the first time: "tiered" (the
    default: the eager fallback runs it while a background worker compiles
    it), "wait" (it is compiled first, so that every run is compiled code),
    "interpret" (nothing is compiled). Starts a new trace, as
    set_num_threads."""
    if mode not in _COMPILE_MODES:
        raise ValueError(f"compile mode {mode!r}: one of {sorted(_COMPILE_MODES)}")
    _C._set_compile_mode(_COMPILE_MODES[mode])


is_grad_enabled = _C.is_grad_enabled


def grad(fn, argnums=0):
    """The functional form: grad(fn)(*args, **kwargs) is the gradient of
    fn's scalar result with respect to args[argnums] (an int or a tuple of
    ints), as torch.func.grad: zeros for an argument the result does not
    depend on; fn's parameters keep their .grad untouched. The call runs
    in a step of its own: the step in progress ends first. Not nested
    (a grad of a grad)."""
    many = isinstance(argnums, tuple)
    nums = argnums if many else (argnums,)

    def wrapped(*args, **kwargs):
        global _in_grad
        if _in_grad:
            raise NotImplementedError("loom.grad: a grad of a grad (higher-order "
                                      "gradients) is not supported")
        args = list(args)
        for k in nums:
            if not isinstance(k, _PY_INT) or not -len(args) <= k < len(args):
                raise RuntimeError(f"loom.grad: argnums {k} names no positional argument "
                                   f"(the function got {len(args)})")
            if not isinstance(args[k], Tensor) or not args[k].dtype.is_floating_point:
                raise TypeError(f"loom.grad: argument {k} must be a float Tensor to take its "
                                f"gradient (got {type(args[k]).__name__})")
        leaves = []
        for k in nums:
            x = args[k]
            leaf = _C.from_bytes(x._dtype, x.shape, _C.to_bytes(x.detach()))
            leaf.requires_grad = True
            args[k] = leaf
            leaves.append(leaf)
        step()  # the leaves enter a step of their own
        kept = {}
        _in_grad = True
        try:
            out = fn(*args, **kwargs)
            if not isinstance(out, Tensor) or out.numel() != 1:
                raise RuntimeError("loom.grad: the function must return a tensor of one "
                                   "element")
            for p in _C._step_params():
                if not _builtins.any(p is leaf for leaf in leaves):
                    kept[id(p)] = (p, p.grad)
                    p.grad = None
            if out.requires_grad:
                out.reshape(()).backward()
        finally:
            _in_grad = False
            for p, g in kept.values():
                p.grad = g
        grads = tuple(leaf.grad if leaf.grad is not None else zeros_like(leaf)
                      for leaf in leaves)
        step()
        return grads if many else grads[0]
    return wrapped


_in_grad = False


class _GradMode(contextlib.ContextDecorator):
    """A grad mode as a decorator too: around each call, and around each
    resumption of a decorated generator function (PyTorch's rule: a
    sampling loop written as a generator runs its body in the mode)."""

    def __call__(self, func):
        if not inspect.isgeneratorfunction(func):
            return super().__call__(func)

        @functools.wraps(func)
        def generator(*args, **kwargs):
            gen = func(*args, **kwargs)
            try:
                with self._recreate_cm():
                    value = next(gen)
                while True:
                    sent = yield value
                    with self._recreate_cm():
                        value = gen.send(sent)
            except StopIteration as stop:
                return stop.value
            finally:
                gen.close()
        return generator


class no_grad(_GradMode):
    """Ops inside record no gradient, as torch.no_grad()."""

    def __enter__(self):
        _C._no_grad_enter()
        return self

    def __exit__(self, *exc):
        _C._no_grad_exit()
        return False


_inference_depth = 0  # inference_mode blocks open (is_inference_mode_enabled)


class inference_mode(_GradMode):
    """torch.inference_mode: no_grad's semantics (mode=False: no change)."""

    def __init__(self, mode=True):
        self.mode = mode

    def __enter__(self):
        global _inference_depth
        if self.mode:
            _C._no_grad_enter()
            _inference_depth += 1
        return self

    def __exit__(self, *exc):
        global _inference_depth
        if self.mode:
            _C._no_grad_exit()
            _inference_depth -= 1
        return False


def is_inference_mode_enabled():
    return _inference_depth > 0


class set_grad_enabled:
    """Turns gradients on or off at once, or for a with block, as PyTorch's."""

    def __init__(self, mode=True):
        self.lifted = 0  # no_grad levels lifted (no_grad nests: a count)
        self.entered = not mode and _C.is_grad_enabled()
        while mode and not _C.is_grad_enabled():
            _C._no_grad_exit()
            self.lifted += 1
        if self.entered:
            _C._no_grad_enter()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for _ in range(self.lifted):
            _C._no_grad_enter()
        if self.entered:
            _C._no_grad_exit()
        return False


class enable_grad(_GradMode):
    """Gradients on inside, even within no_grad, as torch.enable_grad."""

    def __init__(self):
        self.active = []  # one per nested entry (a decorated function may recurse)

    def __enter__(self):
        self.active.append(set_grad_enabled(True))
        return self

    def __exit__(self, *exc):
        return self.active.pop().__exit__(*exc)


_POLICIES = {"exact": 0, "bucket": 1, "symbolic": 2, "auto": 3}


def dynamic(x, dim=0, policy="symbolic", name=None):
    """Marks dim of x with a shape policy (exact, bucket, symbolic, auto),
    as torch._dynamo.mark_dynamic does; returns x. Dims given one name
    (a batch's in the inputs and in the targets) are one symbol, so ops
    that combine them need not fix their size; unnamed, each dim is its
    own symbol."""
    if policy not in _POLICIES:
        raise ValueError(f"policy {policy!r}: one of {sorted(_POLICIES)}")
    x._set_policy(dim, _POLICIES[policy], name)
    return x


class Explanation:
    """What loom.explain(fn, *args) found: the graph breaks with their
    reasons and source lines, the counters of the run, the trace's report."""

    def __init__(self, breaks, counters, report, result):
        self.breaks = breaks      # [(reason, "file:line"), ...] in order
        self.counters = counters  # segments, hits, misses, compiles, ... of the run
        self.report = report      # loom_trace_explain's text
        self.result = result      # what fn returned

    def __str__(self):
        lines = [f"graph breaks: {len(self.breaks)}"]
        seen = {}
        for b in self.breaks:
            seen[b] = seen.get(b, 0) + 1
        for (reason, where), n in seen.items():
            lines.append(f"  {where}: {reason}" + (f" (x{n})" if n > 1 else ""))
        lines.append("this run: " + ", ".join(f"{k} {v}" for k, v in self.counters.items()))
        lines.append(self.report.rstrip())
        return "\n".join(lines)

    __repr__ = __str__


def explain(fn=None, *args, **kwargs):
    """loom.explain(fn, *args): runs fn(*args, **kwargs) once, then ends the
    step, and returns an Explanation: each graph break (a value read, a
    branch on a tensor, a data-dependent shape, backward, loom.sync) with
    the file:line of the user's code that caused it, the run's counters
    (segments, hits, misses, compiles, recompiles), and the trace's report
    (its keys, recompiles with what differed), as torch._dynamo.explain.
    loom.explain() alone returns that report for everything so far."""
    if fn is None:
        return _C._explain()
    import sys
    breaks = []

    def hook(reason):
        frame = sys._getframe(1)
        while frame is not None and _compile.in_package(frame.f_code):
            frame = frame.f_back
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"
        breaks.append((reason, where))

    before = _C._stats()
    _C._set_break_hook(hook)
    try:
        result = fn(*args, **kwargs)
        step()
    finally:
        _C._set_break_hook(None)
    after = _C._stats()
    counters = {k: after[k] - before[k] for k in ("segments", "hits", "misses", "compiles",
                                                   "recompiles", "recorded_ops")}
    return Explanation(breaks, counters, _C._explain(), result)


def stats():
    """The trace's counters: segments, hits, misses, compiles, steps, ..."""
    return _C._stats()
