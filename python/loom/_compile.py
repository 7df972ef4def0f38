"""loom.compile: a whole function captured into one graph, compiled into
one executable per argument signature and guard set, replayed on every
call that matches; a function that cannot be one executable runs through
the trace instead (a graph break, as torch.compile's)."""
import os
import sys
import threading

from . import _C
from ._tensor import Tensor

# While a function is captured: [(key, what, read, value)], the Python
# values it depended on besides its arguments (a module's training flag,
# an optimizer's hyperparameters); each call checks them again.
guards = None
# While a function is captured: {(id(module), name): (module, name, tensor)},
# the buffers of the modules it called, whose storage its executable may
# borrow (see _Entry.adopt_buffers).
buffers = None
# While a function is captured: {id(g): (g, its state before the capture's
# first draw)}, the random generators it drew from; a capture that ends in
# a graph break rewinds them, so that the calls through the trace draw
# what the plain function's calls would.
drawn_from = None
_PACKAGE_DIR = os.path.dirname(__file__)
# Captures kept per argument signature (torch.compile's cache_size_limit).
CAPTURE_LIMIT = 8
# Argument sizes captured per signature without sizes (the dtypes, ranks
# and values of a call): a call at a third new set of sizes runs through
# the trace, whose shape policies compile once per policy rather than once
# per size (torch.compile's automatic dynamic shapes).
SIZE_CAPTURES = 2
# Captures of one function over all its argument signatures (a new Python
# number or input size each call would otherwise capture and keep one
# executable per call, as torch.compile's cache_size_limit bounds).
TOTAL_CAPTURE_LIMIT = 64

# Calls of compiled functions take turns across threads: a capture records
# into the process's one trace and fills this module's guards, and a call
# may add entries and move an entry's buffers and optimizer state (the
# runs themselves hold the GIL). Re-entrant, so that a compiled function
# called inside a capture reaches the capture's own check.
_calls = threading.RLock()


def in_package(code):
    """Whether code is the package's own (not the user's)."""
    return code.co_filename.startswith(_PACKAGE_DIR)


def guard(key, what, read):
    """Notes, while capturing, that the captured graph depends on read()
    (what names it in explain(); key tells one guard from another)."""
    if guards is not None and not any(k == key for k, _, _, _ in guards):
        guards.append((key, what, read, read()))


def note_generator(g):
    """Notes, while capturing, that the function draws from generator g."""
    if drawn_from is not None and id(g) not in drawn_from:
        drawn_from[id(g)] = (g, g.bit_generator.state)


def _rewind_generators():
    for g, state in drawn_from.values():
        g.bit_generator.state = state


def note_buffers(module):
    """Notes, while capturing, the buffers module holds now."""
    if buffers is not None:
        for name, t in module._buffers.items():
            if t is not None:
                buffers.setdefault((id(module), name), (module, name, t))


def _user_line(tb, fn):
    """file:line of the user's code where the capture stopped: the last
    frame of the traceback outside the package, else fn's definition."""
    where = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not in_package(code):
            where = f"{code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where is None:
        code = getattr(fn, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code else "?"
    return where


class _Entry:
    """One capture: its guards, and its executable or the graph break
    that sends its calls through the trace."""

    def __init__(self, guards, captured=None, shape=None, graph_break=None, buffers=(),
                 aliases=()):
        self.guards = guards
        self.buffers = list(buffers)  # [(module, name, tensor at capture)]
        self.captured, self.shape = captured, shape
        self.graph_break = graph_break  # (reason, "file:line") or None
        # per output: None, ("arg", j) for the tensor argument j itself, or
        # ("out", k) for output k again: a call returns those objects, as
        # the function itself does
        self.aliases = tuple(aliases)

    def results(self, outs, args):
        if not any(self.aliases):
            return outs
        done = []
        for i, alias in enumerate(self.aliases):
            done.append(outs[i] if alias is None else
                        args[alias[1]] if alias[0] == "arg" else done[alias[1]])
        return done

    def holds(self):
        return all(read() == value for _, _, read, value in self.guards) and \
            all(_same_type(m._buffers.get(n), t) for m, n, t in self.buffers)

    def adopt_buffers(self):
        """The executable borrowed the storage of the buffers its modules
        held at capture, but a module run outside it (BatchNorm trained
        through the trace) names new tensors: their values are written into
        the borrowed ones, which the module takes back, so that the run
        reads the current statistics and its updates are the module's."""
        stale = [(m, n, t) for m, n, t in self.buffers if m._buffers.get(n) is not t]
        if stale:
            _C.step()  # the new values become real; the run ends the step anyway
        for m, n, t in stale:
            _C._copy_into(t, m._buffers[n].detach())
            m._buffers[n] = t


def _same_type(cur, t):
    return cur is t or (cur is not None and cur.shape == t.shape and cur.dtype is t.dtype)


def _signature(a, sized=True):
    """What a capture depends on in argument a: a tensor's shape (its rank
    when not sized), dtype and requires_grad; a list's, tuple's or dict's
    type and structure, each element's signature inside; any other value
    its type and value, since 2, 2.0 and True are equal in Python but not
    to an op (a float by its bits: 0.0 and -0.0 differ, a NaN matches a
    NaN)."""
    if isinstance(a, Tensor):
        return ("tensor", tuple(a.shape) if sized else a.ndim, a._dtype, a.requires_grad)
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(_signature(x, sized) for x in a))
    if isinstance(a, dict):
        if any(isinstance(k, Tensor) for k in a):
            raise TypeError("loom.compile: a dict argument keyed by tensors; key it by "
                            "Python values")
        return (type(a), tuple((_signature(k, sized), _signature(v, sized))
                               for k, v in a.items()))
    if type(a) is float:
        return (float, a.hex())
    try:
        hash(a)
    except TypeError:
        raise TypeError(f"loom.compile: an argument of type {type(a).__name__} cannot be "
                        "told apart from another call's; pass tensors, Python numbers, "
                        "strings, None, hashable objects, or lists, tuples and dicts "
                        "of them") from None
    return (type(a), a)


def _alias(out, args, earlier):
    """What output out is besides a new tensor (see _Entry.aliases)."""
    for kind, among in (("arg", args), ("out", earlier)):
        for j, t in enumerate(among):
            if t is out:
                return (kind, j)
    return None


def _collect_tensors(a, found):
    """Appends the tensors in a to found, in _signature's order."""
    if isinstance(a, Tensor):
        found.append(a)
    elif isinstance(a, (list, tuple)):
        for x in a:
            _collect_tensors(x, found)
    elif isinstance(a, dict):
        for v in a.values():
            _collect_tensors(v, found)


class Compiled:
    """A function under loom.compile (see compile)."""

    def __init__(self, fn, fullgraph=False):
        self.fn = fn
        self.fullgraph = fullgraph
        self.entries = {}  # (argument signature) -> [_Entry]
        self.sizes = {}    # (signature without sizes) -> {argument shapes captured}
        self.dynamic = {}  # (signature without sizes) -> why its new sizes run traced
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__name__ = getattr(fn, "__name__", "compiled")
        self.__wrapped__ = fn

    @staticmethod
    def _key(args, kwargs, sized=True):
        """The signature: grad mode, then each argument's (_signature),
        keyword arguments by name."""
        return (_C.is_grad_enabled(),) + tuple(_signature(a, sized) for a in args) + \
            tuple((k, _signature(kwargs[k], sized)) for k in sorted(kwargs))

    def _runs_dynamic(self, args, kwargs):
        """Whether a call that no capture holds runs through the trace
        rather than capturing its sizes: a tensor argument loom.dynamic
        marked (the trace reads its policies), or a signature captured at
        SIZE_CAPTURES sets of sizes already, whose sizes then vary from
        call to call (the trace's auto policy makes a dim that changes
        symbolic, so new sizes compile nothing)."""
        tensors = self._tensors(args, kwargs)
        unsized = self._key(args, kwargs, sized=False)
        if unsized in self.dynamic:
            return True
        if any(t._marked_dynamic for t in tensors):
            why = "an argument with a dim loom.dynamic marked"
        else:
            sizes = self.sizes.setdefault(unsized, set())
            shapes = tuple(tuple(t.shape) for t in tensors)
            if shapes in sizes or len(sizes) < SIZE_CAPTURES:
                sizes.add(shapes)
                return False
            why = f"argument sizes that changed {SIZE_CAPTURES} times"
        self.dynamic[unsized] = why
        if "recompiles" in os.environ.get("LOOM_LOG", "").split(","):
            print(f"loom: {self.__name__} runs through the trace at new sizes: {why}",
                  file=sys.stderr)
        return True

    @staticmethod
    def _tensors(args, kwargs):
        """The tensor arguments in the order the executable takes them:
        positional ones, then keyword ones by name, each container's in
        the order _signature walks it."""
        found = []
        for a in list(args) + [kwargs[k] for k in sorted(kwargs)]:
            _collect_tensors(a, found)
        return tuple(found)

    def __call__(self, *args, **kwargs):
        with _calls:
            return self._call(args, kwargs)

    def _call(self, args, kwargs):
        key = self._key(args, kwargs)
        entries = self.entries.setdefault(key, [])
        entry = next((e for e in entries if e.holds()), None)
        if entry is None and self._captures() >= TOTAL_CAPTURE_LIMIT:
            if not self.__dict__.get("_warned_total"):
                self._warned_total = True
                import warnings
                warnings.warn(f"loom.compile: {self.__name__} was captured "
                              f"{TOTAL_CAPTURE_LIMIT} times (each new argument size, "
                              "dtype or Python value captures again); calls that match "
                              "no capture run through the trace", stacklevel=3)
            return self.fn(*args, **kwargs)
        if entry is None and len(entries) >= CAPTURE_LIMIT:
            # a guard that changes at every call (a momentum a schedule
            # cycles) would capture, and keep, an executable per call
            if len(entries) == CAPTURE_LIMIT:
                entries.append(_Entry([], graph_break=("the capture limit", "")))
                import warnings
                warnings.warn(f"loom.compile: {self.__name__} was captured {CAPTURE_LIMIT} "
                              "times for one argument signature, each with other guard "
                              "values (see loom.explain); calls that match none run through "
                              "the trace", stacklevel=2)
            return self.fn(*args, **kwargs)
        if entry is None and self._runs_dynamic(args, kwargs):
            return self.fn(*args, **kwargs)
        if entry is None:
            try:
                entry = self._capture(args, kwargs)
            except _C.GraphBreak:  # fullgraph=True
                raise
            except Exception:
                # A capture runs nothing: what the function did before it
                # raised (an optimizer's update) happens through the trace,
                # as in PyTorch, up to the same exception; nothing is kept.
                return self.fn(*args, **kwargs)
            entries.append(entry)
            if (entry.graph_break is not None and
                    "breaks" in os.environ.get("LOOM_LOG", "").split(",")):
                reason, where = entry.graph_break
                print(f"loom: graph break in {self.__name__} at {where}: {reason}; "
                      "it runs through the trace", file=sys.stderr)
        if entry.graph_break is not None:
            return self.fn(*args, **kwargs)
        entry.adopt_buffers()
        opt = entry.captured.optimizer
        if opt is not None:
            opt._before_compiled_step(entry)
        tensors = self._tensors(args, kwargs)
        outs = entry.results(entry.captured.run(tensors), tensors)
        if entry.shape == "none":
            return None
        return outs[0] if entry.shape == "one" else tuple(outs)

    def _captures(self):
        return sum(len(v) for v in self.entries.values())

    def _capture(self, args, kwargs):
        global guards, buffers, drawn_from
        if guards is not None:
            raise RuntimeError("loom.compile: a compiled function called another while "
                               "being captured")
        guards, buffers, drawn_from = [], {}, {}
        _C._capture_begin()
        try:
            tensors = self._tensors(args, kwargs)
            for a in tensors:
                _C._capture_arg(a)
            out = self.fn(*args, **kwargs)
            if out is None:
                outs, shape = (), "none"
            elif isinstance(out, Tensor):
                outs, shape = (out,), "one"
            elif isinstance(out, (tuple, list)) and all(isinstance(o, Tensor) for o in out):
                outs, shape = tuple(out), "many"
            else:
                raise _C.GraphBreak("loom.compile: the function returns something other "
                                    "than tensors (one, a tuple of them, or None)")
            del out
            for t in _C._capture_reads():
                guard((id(t), "requires_grad"), f"requires_grad of a {tuple(t.shape)} tensor",
                      lambda t=t: t.requires_grad)
            aliases = [_alias(o, tensors, outs[:i]) for i, o in enumerate(outs)]
            captured = _C._capture_end(outs)
            return _Entry(guards, captured, shape, buffers=buffers.values(), aliases=aliases)
        except _C.GraphBreak as e:
            _C._capture_abort()
            _rewind_generators()
            if self.fullgraph:
                raise
            return _Entry(guards, graph_break=(str(e), _user_line(e.__traceback__, self.fn)))
        except BaseException:
            _C._capture_abort()
            _rewind_generators()
            raise
        finally:
            guards = buffers = drawn_from = None

    @staticmethod
    def _without_code(report):
        """report with each generated program's text left out (its file named)."""
        kept, skipping = [], False
        for line in report.splitlines():
            if line.startswith("== "):
                skipping = line.startswith("== generated C (")
                kept.append(line + (" (f.explain(code=True) shows it)" if skipping else ""))
            elif not skipping:
                kept.append(line)
        return "\n".join(kept)

    def explain(self, code=False):
        """The report of each capture: its executable's (loom_executable_explain;
        the generated C only with code=True), or the graph break that runs
        it through the trace."""
        lines = []
        for entries in self.entries.values():
            for e in entries:
                if e.graph_break is not None:
                    reason, where = e.graph_break
                    lines.append(f"graph break at {where}: {reason}; runs through the trace")
                else:
                    report = e.captured.explain()
                    lines.append(report if code else self._without_code(report))
                if e.guards:
                    lines.append("guards: " + ", ".join(f"{w} == {v!r}" for _, w, _, v in e.guards))
        for why in self.dynamic.values():
            lines.append(f"sizes not captured run through the trace: {why}")
        return "\n".join(lines)


def compile(fn=None, *, fullgraph=False):
    """loom.compile(fn), also a decorator (@loom.compile or
    @loom.compile(fullgraph=True)): fn captured whole into one graph and
    compiled into one executable on the first call with given argument
    shapes, dtypes, requires_grad, non-tensor argument values (by type
    and value: 2, 2.0 and True apart) and grad mode (keyword arguments
    too, by name: step(x, y=y) as step(x, y); lists, tuples and dicts by
    structure, their tensors inputs as tensor arguments are), then
    replayed on every call that matches them and whose guards hold (the
    training flag of each module it called, its optimizer's
    hyperparameters); another set captures once more, except sizes: a
    signature captured at SIZE_CAPTURES sets of sizes runs new ones
    through the trace (its auto policy compiles a changing dim once, as
    torch.compile's automatic dynamic shapes do), and so does an argument
    with a dim loom.dynamic marked. A training step
    (zero_grad, forward, loss.backward(), optimizer.step()) becomes one
    executable: forward, backward and the update together, the parameters
    updated in place, .grad set after each call, the learning rate read
    from the optimizer at each call. A function that reads a value it
    computed (.numpy(), .item(), bool(): a branch on a tensor), keeps a
    computed tensor beyond the call, or returns other than tensors is a
    graph break: its calls with that signature run through the trace
    (segments compiled per path and cached by GraphKey) with the same
    results, and explain() names the line; with fullgraph=True the break
    raises loom.GraphBreak instead. At a graph break the function's
    Python code has run once in the capture, then runs again. Python
    values fn reads besides its arguments and the guards above are fixed
    at capture. The optimizer's state of a compiled step is the
    executable's own (separate from uncompiled steps'). A call whose
    capture raises runs through the trace instead, its Python code run a
    second time up to the exception, so that what it did before raising
    (an optimizer's update) takes effect as in PyTorch; the next call
    captures again."""
    if fn is None:
        return lambda f: Compiled(f, fullgraph)
    return Compiled(fn, fullgraph)
