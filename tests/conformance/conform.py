"""Cases and the code that runs one: build a graph over wrapped NumPy
inputs, interpret it, compare each output with NumPy's answer."""
import os
import re

import numpy as np

from dtypes import ALL, FLOAT, INT, NUMERIC, compare, exact, from_storage, \
    to_storage
from loomlib import Graph, LoomError, Value

OPS_DEF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "src", "ir", "ops.def")
DT_CLASSES = {"DT_FLOAT": FLOAT, "DT_INT": INT, "DT_NUMERIC": NUMERIC, "DT_ALL": ALL,
              "DT_COMM": ["f32", "f64", "i8", "i32", "i64"],
              "DT_BOOL": ["bool"], "DT_COND": ["bool"] + INT, "DT_INTEGRAL": INT + ["bool"]}


def read_accepted(path=OPS_DEF):
    """{op name: dtypes its input 0 accepts}, from the op table."""
    rows = re.findall(r'LOOM_OP\(\w+,\s*(\w+),\s*\w+,\s*-?\d+,\s*-?\d+,'
                      r'\s*-?\d+,\s*(DT_\w+)', open(path).read())
    return {name: DT_CLASSES[dt] for name, dt in rows}


ACCEPTED = read_accepted()

# op name -> generator of cases: gen(name, rng) yields Case.
GENERATORS = {}


def op(*names):
    def register(gen):
        for n in names:
            GENERATORS[n] = gen
        return gen
    return register


class Arg:
    """A graph input: exact values in a dtype, optionally passed to Loom as
    a non-contiguous view."""

    def __init__(self, values, dtype, noncontig=False):
        self.values = np.asarray(values)
        self.dtype = dtype
        self.noncontig = noncontig
        self.stride0 = False  # dim 0 passed with stride 0 (values repeat)


def stride0_arg(rng, values, dtype, p=0.15):
    """An Arg that is, with probability p, a stride-0 broadcast along dim 0
    (its values then repeat the first row); otherwise maybe non-contiguous."""
    values = np.asarray(values)
    if values.ndim and values.shape[0] > 1 and rng.random() < p:
        a = Arg(np.broadcast_to(values[:1], values.shape).copy(), dtype)
        a.stride0 = True
        return a
    return Arg(values, dtype, noncontig(rng))


class Case:
    """build(G, *input values) -> output value(s). Then either want, a list
    of (ideal values, dtype) per output, rounded to dtype before comparing;
    or check(outs) -> (err, ok, message) over [(dtype, exact values)]; or
    error, the status name the build or run must fail with."""

    def __init__(self, desc, args, build, want=None, check=None, error=None,
                 custom=None, dtype=None):
        self.desc, self.args, self.build = desc, args, build
        # The dtype under test: input 0's unless given.
        self.dtype = dtype or (args[0].dtype if args else None)
        self.want, self.check, self.error = want, check, error
        self.custom = custom  # custom(L) -> (err, ok, message): runs itself
        self.symbolic = False  # declare the inputs' dims >1 as symbols


def storage_view(arg):
    """arg's storage array; for a non-contiguous arg, a strided view with
    the same values (transposed memory, or every other element)."""
    s = np.asarray(to_storage(arg.values, arg.dtype))
    if arg.stride0:
        return np.broadcast_to(s[:1], s.shape)
    if not arg.noncontig or s.ndim == 0:
        return s
    if s.ndim >= 2:
        base = np.ascontiguousarray(np.swapaxes(s, -1, -2))
        return np.swapaxes(base, -1, -2)
    base = np.zeros(s.shape[:-1] + (2 * s.shape[-1],), dtype=s.dtype)
    view = base[..., ::2]
    view[...] = s
    return view


def shape_str(a):
    return "(" + ",".join(str(d) for d in np.shape(a)) + ")"


def describe(case):
    ins = " ".join("%s%s%s" % (a.dtype, shape_str(a.values), "/nc" if a.noncontig else
                                "/stride0" if a.stride0 else "")
                   for a in case.args)
    return "%s [%s]" % (case.desc, ins)


def execute(L, case):
    """Runs the case's graph: [(dtype, exact values)] per output."""
    with Graph(L) as G:
        vals = [G.input(a.dtype, input_dims(G, a.values.shape, case.symbolic), "x%d" % i)
                for i, a in enumerate(case.args)]
        outs = case.build(G, *vals)
        if isinstance(outs, Value):
            outs = [outs]
        for o in outs:
            G.output(o)
        arrays = [storage_view(a) for a in case.args]
        tensors = []
        try:
            for a, arr in zip(case.args, arrays):
                tensors.append(L.wrap(arr, a.dtype))
            results = G.run(tensors)
        finally:
            for t in tensors:
                L.c.loom_tensor_destroy(t)
    return [(dt, from_storage(arr, dt)) for dt, arr in results]


def input_dims(G, shape, symbolic):
    """shape, or with every dim > 1 a symbol named by its size, so that
    equal dims share a symbol and broadcasting 1s stay constants."""
    if not symbolic:
        return list(shape)
    return [G.symbol("n%d" % d) if d > 1 else d for d in shape]


def run_case(L, case):
    """(err, ok, message) of one case."""
    try:
        if case.custom:
            return case.custom(L)
        results = execute(L, case)
    except LoomError as e:
        if case.error and e.status in (case.error if isinstance(case.error, tuple)
                                       else (case.error,)):
            return 0.0, True, ""
        return float("inf"), False, str(e)
    if case.error:
        return float("inf"), False, "expected %s, the run succeeded" % case.error
    if case.check:
        return case.check(results)
    return compare_outputs(results, case.want)


def compare_outputs(results, want):
    if len(results) != len(want):
        return float("inf"), False, "%d outputs, want %d" % (len(results), len(want))
    worst, msgs = 0.0, []
    for k, ((got_dt, got), (ideal, dt)) in enumerate(zip(results, want)):
        w = exact(ideal, dt)
        if got_dt != dt:
            msgs.append("output %d is %s, want %s" % (k, got_dt, dt))
            worst = float("inf")
            continue
        if got.shape != w.shape:
            msgs.append("output %d has shape %s, want %s" % (k, got.shape, w.shape))
            worst = float("inf")
            continue
        err, ok = compare(got, w, dt)
        worst = max(worst, err)
        if not ok:
            msgs.append("output %d: err %.3g\n      got  %s\n      want %s"
                        % (k, err, summarize(got), summarize(w)))
    return worst, not msgs, "; ".join(msgs)


def summarize(a, limit=24):
    flat = np.asarray(a).ravel()
    s = np.array2string(flat[:limit], precision=6, max_line_width=200)
    return s + (" ... (%d)" % flat.size if flat.size > limit else "")


# ---- random shapes and axes ---------------------------------------------

def rand_shape(rng, rank=None, lo_rank=0, hi_rank=4, lo=0, hi=6):
    if rank is None:
        rank = int(rng.integers(lo_rank, hi_rank + 1))
    return tuple(int(d) for d in rng.integers(lo, hi + 1, size=rank))


def broadcast_partner(rng, shape):
    """A shape that broadcasts with `shape`: a suffix, some dims set to 1."""
    keep = int(rng.integers(0, len(shape) + 1))
    s = list(shape[len(shape) - keep:])
    for i in range(len(s)):
        if rng.random() < 0.3:
            s[i] = 1
    return tuple(s)


def rand_axes(rng, rank, allow_empty=False):
    """Distinct axes of a rank-`rank` tensor, each negative half the time."""
    if rank == 0:
        return []
    n = int(rng.integers(0 if allow_empty else 1, rank + 1))
    axes = [int(a) for a in rng.choice(rank, size=n, replace=False)]
    return [a - rank if rng.random() < 0.5 else a for a in axes]


def rand_axis(rng, rank):
    a = int(rng.integers(0, rank))
    return a - rank if rng.random() < 0.5 else a


def noncontig(rng, p=0.3):
    return bool(rng.random() < p)
