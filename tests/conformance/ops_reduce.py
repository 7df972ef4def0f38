"""Reductions, arg-reductions, cumsum and topk."""
import numpy as np

from conform import Arg, Case, noncontig, op, rand_axes, rand_axis, rand_shape, \
    stride0_arg
from dtypes import ALL, FLOAT, INT, NUMERIC, compare, exact, is_float, random_values

N_CASES = 30


def logsumexp(x, axis, keepdims):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axis)


def int_prod(x, axis, keepdims):
    # int64 products wrap in NumPy just as Loom's do.
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=np.int64)


def result_dtype(name, dtype):
    """sum, prod and cumsum of integers and bool are i64, as in PyTorch."""
    return "i64" if name in ("sum", "prod", "cumsum") and not is_float(dtype) else dtype


REDUCE = {
    "sum": (lambda x, ax, k: np.sum(x, axis=ax, keepdims=k), ALL, True),
    "mean": (lambda x, ax, k: np.mean(x, axis=ax, keepdims=k), FLOAT, False),
    "max": (lambda x, ax, k: np.max(x, axis=ax, keepdims=k), NUMERIC, False),
    "min": (lambda x, ax, k: np.min(x, axis=ax, keepdims=k), NUMERIC, False),
    "prod": (lambda x, ax, k: np.prod(x, axis=ax, keepdims=k) if x.dtype.kind == "f"
             else int_prod(x, ax, k), ALL, True),
    "logsumexp": (lambda x, ax, k: logsumexp(x, ax, k), FLOAT, False),
}


def reduce_input(rng, name, dtype, empty_ok):
    shape = rand_shape(rng, lo=0 if empty_ok else 1)
    if name == "prod":
        x = random_values(rng, dtype, shape, 0.5, 1.5, -2, 2)
    else:
        x = random_values(rng, dtype, shape)
    return x, shape


def axes_and_keep(rng, rank):
    """(axes argument, numpy axis, keepdim): no axes half the time."""
    keep = int(rng.integers(0, 2))
    if rank == 0 or rng.random() < 0.3:
        return [], None, keep
    axes = rand_axes(rng, rank)
    return axes, tuple(axes), keep


@op(*REDUCE)
def gen_reduce(name, rng):
    ref, dtypes, empty_ok = REDUCE[name]
    for i in range(N_CASES):
        dtype = dtypes[i % len(dtypes)]
        x, shape = reduce_input(rng, name, dtype, empty_ok)
        axes, np_axes, keep = axes_and_keep(rng, len(shape))
        arg = stride0_arg(rng, x, dtype)
        want = ref(arg.values, np_axes, bool(keep))
        yield Case("%s %s axes=%s keepdim=%d" % (name, dtype, axes, keep), [arg],
                   lambda G, v, axes=axes, keep=keep:
                   G.op(name, v, len(axes), axes or None, keep),
                   want=[(want, result_dtype(name, dtype))])
    if name == "mean":  # PyTorch refuses the mean of integers and bools too
        for dtype in INT + ["bool"]:
            yield Case("mean of %s" % dtype, [Arg(random_values(rng, dtype, (2, 3)), dtype)],
                       lambda G, v: G.op(name, v, 0, None, 0), error="LOOM_ERR_DTYPE")
    yield Case("%s axis out of range" % name, [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op(name, v, 1, [2], 0), error="LOOM_ERR_AXIS")
    yield Case("%s axis -3 of rank 2" % name, [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op(name, v, 1, [-3], 0), error="LOOM_ERR_AXIS")


@op("variance")
def gen_variance(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        shape = rand_shape(rng, lo=1)
        # An offset mean tests for cancellation in a naive formula.
        x = random_values(rng, dtype, shape, 90, 110 if dtype == "f64" else 96)
        axes, np_axes, keep = axes_and_keep(rng, len(shape))
        n = int(np.prod([shape[a] for a in (np_axes or range(len(shape)))]))
        corr = int(rng.integers(0, 2)) if n > 1 else 0
        want = np.var(x, axis=np_axes, keepdims=bool(keep), ddof=corr)
        yield Case("variance %s axes=%s keepdim=%d correction=%d" % (dtype, axes, keep, corr),
                   [Arg(x, dtype, noncontig(rng))],
                   lambda G, v, axes=axes, keep=keep, corr=corr:
                   G.op("variance", v, len(axes), axes or None, keep, corr),
                   want=[(want, dtype)])


@op("argmax", "argmin")
def gen_arg(name, rng):
    np_fn = np.argmax if name == "argmax" else np.argmin
    for i in range(N_CASES):
        dtype = NUMERIC[i % len(NUMERIC)]
        shape = rand_shape(rng, lo=1)
        x = random_values(rng, dtype, shape, -3, 3, -3, 3)  # ties: first wins
        if is_float(dtype) and x.size:
            x = np.where(rng.random(shape) < 0.3, x.ravel()[0], x)
        has_axis = len(shape) > 0 and rng.random() < 0.7
        keep = int(rng.integers(0, 2)) if has_axis else 0
        if has_axis:
            axis = rand_axis(rng, len(shape))
            want = np_fn(x, axis=axis, keepdims=bool(keep))
        else:
            axis, want = 0, np.asarray(np_fn(x))
        yield Case("%s %s axis=%s keepdim=%d" % (name, dtype, axis if has_axis else None, keep),
                   [Arg(x, dtype, noncontig(rng))],
                   lambda G, v, h=int(has_axis), a=axis, k=keep: G.op(name, v, h, a, k),
                   want=[(want.astype(np.int64), "i64")])
    yield Case("%s axis 2 of rank 2" % name, [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op(name, v, 1, 2, 0), error="LOOM_ERR_AXIS")


def cumsum_ref(x, axis, exclusive, reverse):
    if reverse:
        x = np.flip(x, axis)
    s = np.cumsum(x, axis=axis)
    if exclusive:
        s = s - x
    if reverse:
        s = np.flip(s, axis)
    return s


@op("cumsum")
def gen_cumsum(name, rng):
    for i in range(N_CASES):
        dtype = ALL[i % len(ALL)]
        shape = rand_shape(rng, lo_rank=1)
        # Small integers keep float sums exact, so the exclusive form's
        # subtraction is exact too.
        x = exact(rng.integers(-4, 5, size=shape).astype(np.float64), dtype) \
            if is_float(dtype) else random_values(rng, dtype, shape)
        axis = rand_axis(rng, len(shape))
        excl, rev = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        yield Case("cumsum %s axis=%d exclusive=%d reverse=%d" % (dtype, axis, excl, rev),
                   [Arg(x, dtype, noncontig(rng))],
                   lambda G, v, a=axis, e=excl, r=rev: G.op("cumsum", v, a, e, r),
                   want=[(cumsum_ref(x, axis, excl, rev), result_dtype(name, dtype))])
    for dtype in ("f32", "f64"):
        x = random_values(rng, dtype, (3, 5))
        yield Case("cumsum %s random values" % dtype, [Arg(x, dtype)],
                   lambda G, v: G.op("cumsum", v, 1, 0, 0),
                   want=[(np.cumsum(x, axis=1), dtype)])
    yield Case("cumsum axis 2 of rank 2", [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op("cumsum", v, 2, 0, 0), error="LOOM_ERR_AXIS")


def topk_check(x, k, axis, largest, dtype):
    """Values sorted as NumPy sorts them; indices point at those values."""
    xs = np.moveaxis(x, axis, -1)
    order = np.sort(xs, axis=-1)
    want = (order[..., ::-1] if largest else order)[..., :k]

    def check(outs):
        if len(outs) != 2:
            return float("inf"), False, "%d outputs" % len(outs)
        (vdt, vals), (idt, idx) = outs
        if vdt != dtype or idt != "i64":
            return float("inf"), False, "dtypes %s, %s" % (vdt, idt)
        want_v = np.moveaxis(want, -1, axis)
        if vals.shape != want_v.shape or idx.shape != want_v.shape:
            return float("inf"), False, "shapes %s %s, want %s" % (
                vals.shape, idx.shape, want_v.shape)
        err, ok = compare(vals, exact(want_v, dtype), dtype)
        if not ok:
            return err, False, "values %s, want %s" % (vals.ravel()[:12],
                                                       want_v.ravel()[:12])
        i_last = np.moveaxis(idx, axis, -1)
        n = xs.shape[-1]
        if i_last.size and (i_last.min() < 0 or i_last.max() >= n):
            return float("inf"), False, "index out of range: %s" % idx.ravel()[:12]
        picked = np.take_along_axis(xs, i_last, axis=-1)
        if not np.array_equal(picked, np.moveaxis(vals, axis, -1)):
            return float("inf"), False, "x[indices] != values: %s" % idx.ravel()[:12]
        uniq = np.sort(i_last, axis=-1)
        if k > 1 and np.any(uniq[..., 1:] == uniq[..., :-1]):
            return float("inf"), False, "repeated indices: %s" % idx.ravel()[:12]
        return err, True, ""
    return check


@op("topk")
def gen_topk(name, rng):
    for i in range(N_CASES):
        dtype = NUMERIC[i % len(NUMERIC)]
        shape = rand_shape(rng, lo_rank=1, lo=1)
        x = random_values(rng, dtype, shape)
        axis = rand_axis(rng, len(shape))
        k = int(rng.integers(0, shape[axis] + 1))
        largest = int(rng.integers(0, 2))
        yield Case("topk %s k=%d axis=%d largest=%d" % (dtype, k, axis, largest),
                   [Arg(x, dtype, noncontig(rng))],
                   lambda G, v, k=k, a=axis, l=largest: list(G.op("topk", v, k, a, l)),
                   check=topk_check(x, k, axis, largest, dtype))
    yield Case("topk k > dim", [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: list(G.op("topk", v, 4, 1, 1)), error=("LOOM_ERR_INVALID", "LOOM_ERR_SHAPE"))
