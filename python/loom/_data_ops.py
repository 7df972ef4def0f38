"""Ops over counted, sorted or sampled data, in PyTorch's names: unique,
unique_consecutive, bincount, argwhere, mode, multinomial (read on the host),
searchsorted, bucketize, histc, isin, kthvalue, nansum, nanmean,
count_nonzero (traced).

An op whose output shape depends on the data (unique, bincount, argwhere)
reads its input, as loom.nonzero does: a graph break that makes the
values real, after which the results are real tensors. mode and
multinomial read their input too (a sort, a random draw on Loom's NumPy
generator); mode's values are then gathered from the input by traced ops,
so that they carry its gradient. The ops whose shape is known are made of
traced ops: they stay lazy, and differentiable where PyTorch's are."""
import builtins
import collections
import numbers

import numpy as np

from . import _C
from . import _dtype
from . import functional as _F
from ._tensor import Tensor

_I64 = _dtype._BY_NAME["int64"]
_I32 = _dtype._BY_NAME["int32"]
_F32 = _dtype._BY_NAME["float32"]
_F64 = _dtype._BY_NAME["float64"]
_BOOL = _dtype._BY_NAME["bool"]

# PyTorch's ScalarType names, as its messages spell dtypes
_TORCH_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half",
               "bfloat16": "BFloat16", "int8": "Char", "int32": "Int", "int64": "Long",
               "bool": "Bool"}

_F.return_types.mode = collections.namedtuple("mode", "values indices")


# ---- host side: reading a tensor, making one ----

def _tensor_arg(x, op, name="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")
    return x


def _read(x):
    """x's values as a NumPy array (a read: a graph break when x is lazy);
    bfloat16, which NumPy lacks, as float32."""
    x = x.detach()
    if x.dtype._numpy is None:
        x = _F.cast(x, _F32)
    return np.asarray(x)


def _real(a, dtype):
    """A real tensor of a's values in dtype."""
    if dtype._numpy is None:
        return _F.cast(_real(a, _F32), dtype)
    return _C.from_buffer(np.array(a, dtype._numpy), True)  # a 0-d array stays 0-d


def _int_arg(v, op, name, position):
    if not isinstance(v, numbers.Integral) or isinstance(v, builtins.bool):
        raise TypeError(f"{op}(): argument '{name}' (position {position}) must be int, "
                        f"not {type(v).__name__}")
    return builtins.int(v)


# ---- unique, unique_consecutive ----

def _runs(rows):
    """Runs of equal rows of a 2-d array: the first row of each run, the
    run of each row, each run's length. NaN equals nothing, as in PyTorch."""
    n = rows.shape[0]
    starts = np.ones(n, np.bool_)
    if n > 1:
        starts[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    run = np.cumsum(starts) - 1
    counts = np.diff(np.append(np.flatnonzero(starts), n))
    return rows[starts], run.astype(np.int64), counts.astype(np.int64)


def _as_rows(a, dim):
    """a as a 2-d array with one row per slice along dim (every element a
    row when dim is None), and how to shape the rows back."""
    if dim is None:
        return a.reshape(-1, 1), None
    if a.size == 0:
        if list(a.shape).count(0) != 1:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique "
                               "cannot be applied ")
        if a.shape[dim] != 0:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so "
                               "unique cannot be applied")
    moved = np.moveaxis(a, dim, 0)
    return moved.reshape(moved.shape[0], int(np.prod(moved.shape[1:]))), moved.shape[1:]


def _unique_results(x, rows, rest, dim, order, return_inverse, return_counts):
    """The (values[, inverse][, counts]) of unique or unique_consecutive
    from the runs of rows taken in order (None: as they are)."""
    values, run, counts = _runs(rows if order is None else rows[order])
    if order is not None:
        run[order] = run.copy()  # each row's run, in the rows' own order
    if rest is None:
        out = _real(values.reshape(-1), x.dtype)
        inverse = run.reshape(tuple(x.shape))
    else:
        out = _real(np.moveaxis(values.reshape((-1,) + rest), 0, dim), x.dtype)
        inverse = run
    results = (out,)
    if return_inverse:
        results += (_real(inverse, _I64),)
    if return_counts:
        results += (_real(counts, _I64),)
    return results if len(results) > 1 else out


def _unique_input(x, dim, op, position):
    _tensor_arg(x, op)
    if dim is not None:
        dim = _int_arg(dim, op, "dim", position)
        if x.ndim == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        dim = _F._dim(dim, x.ndim)
    return _read(x), dim


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values (slices along dim) of input, in ascending order
    (also for sorted=False: PyTorch leaves that order unspecified), with
    the index of each element's value (return_inverse) and each value's
    count (return_counts). Each NaN is a value of its own. Reads input."""
    a, dim = _unique_input(input, dim, "unique", 5)
    rows, rest = _as_rows(a, dim)
    # lexsort keys: last key first; NaN sorts last, as PyTorch's sort
    order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(rows.shape[0])
    return _unique_results(input, rows, rest, dim, order, return_inverse, return_counts)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """unique of each run of equal consecutive values (slices along dim),
    in their order. Reads input."""
    a, dim = _unique_input(input, dim, "unique_consecutive", 4)
    rows, rest = _as_rows(a, dim)
    return _unique_results(input, rows, rest, dim, None, return_inverse, return_counts)


# ---- bincount, argwhere ----

def bincount(input, weights=None, minlength=0):
    """Counts of each value of a 1-d non-negative integer tensor (int64),
    or sums of weights at them (float32 weights: float32, else float64);
    of length max(input) + 1, at least minlength. Reads input."""
    _tensor_arg(input, "bincount")
    if input.dtype.is_floating_point or input.dtype is _BOOL:
        raise RuntimeError(f'"bincount_cpu" not implemented for '
                           f"'{_TORCH_TYPE[input.dtype.name]}'")
    minlength = _int_arg(minlength, "bincount", "minlength", 3)
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if input.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None:
        _tensor_arg(weights, "bincount", "weights")
        if weights.ndim != 1 or weights.shape[0] != input.shape[0]:
            raise RuntimeError("weights should be 1-d and have the same length as input")
    a = _read(input)
    if a.size == 0:  # as PyTorch: int64 zeros, weights or not
        return _real(np.zeros(minlength, np.int64), _I64)
    if a.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        return _real(np.bincount(a, minlength=minlength), _I64)
    out = _F32 if weights.dtype is _F32 else _F64
    return _real(np.bincount(a, _read(weights).astype(np.float64), minlength), out)


def argwhere(input):
    """The indices of input's nonzero elements, (count, ndim) int64, as
    nonzero (a data-dependent shape: a graph break)."""
    return _F.nonzero(_tensor_arg(input, "argwhere"))


# ---- mode, kthvalue ----

def _reduction_dim(x, dim, op):
    """dim in [0, ndim) of a dim of nonzero size, in PyTorch's words."""
    _tensor_arg(x, op)
    dim = _F._dim(_int_arg(dim, op, "dim", 3), x.ndim)
    if x.ndim and x.shape[dim] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {dim} to have non-zero size.")
    return dim


def _mode_indices(rows):
    """For each row of a 2-d array, the index of the last occurrence of
    its most frequent value (the smallest such value on a tie, as
    PyTorch's CPU kernel)."""
    n = rows.shape[1]
    order = np.argsort(rows, axis=1, kind="stable")
    s = np.take_along_axis(rows, order, axis=1)
    step = np.ones(rows.shape, np.bool_)
    step[:, 1:] = s[:, 1:] != s[:, :-1]  # where a run of equal values starts
    at = np.arange(n)
    start = np.maximum.accumulate(np.where(step, at, 0), axis=1)
    last = np.ones(rows.shape, np.bool_)
    last[:, :-1] = step[:, 1:]
    length = np.where(last, at - start + 1, 0)
    pos = np.argmax(length, axis=1)  # the first longest run: the smallest value
    return order[np.arange(rows.shape[0]), pos]


def mode(input, dim=-1, keepdim=False):
    """(values, indices): the most frequent value along dim and the index
    of its last occurrence. The indices are found on the host (a read);
    the values are gathered from input, so they carry its gradient."""
    dim = _reduction_dim(input, dim, "mode")
    x = _F.reshape(input, 1) if input.ndim == 0 else input
    a = np.moveaxis(_read(x), dim, -1)
    rows = a.reshape(-1, a.shape[-1])
    idx = _mode_indices(rows) if rows.size else np.zeros(rows.shape[0], np.int64)
    idx = _real(idx.reshape(a.shape[:-1]), _I64)
    values = _F.squeeze(_F.gather(x, dim, _F.unsqueeze(idx, dim)), dim)
    if keepdim and input.ndim:
        values, idx = _F.unsqueeze(values, dim), _F.unsqueeze(idx, dim)
    return _F.return_types.mode(values, idx)


def kthvalue(input, k, dim=-1, keepdim=False):
    """(values, indices): the k-th smallest element along dim (k from 1;
    NaN counts as the largest) and its index: a traced topk, so values
    are lazy and carry input's gradient."""
    k = _int_arg(k, "kthvalue", "k", 2)
    dim = _reduction_dim(input, dim, "kthvalue")
    if input.dtype is _BOOL:
        raise RuntimeError("\"kthvalue_cpu\" not implemented for 'Bool'")
    x = _F.reshape(input, 1) if input.ndim == 0 else input
    if not 1 <= k <= x.shape[dim]:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    v, i = _F._op("topk", x, k=k, axis=dim, largest=0)
    v, i = _F.narrow(v, dim, k - 1, 1), _F.narrow(_F.stop_gradient(i), dim, k - 1, 1)
    if not keepdim or input.ndim == 0:
        v, i = _F.squeeze(v, dim), _F.squeeze(i, dim)
    return _F.return_types.kthvalue(v, i)


# ---- searchsorted, bucketize, isin ----

def _side(right, side):
    if side is None:
        return builtins.bool(right)
    if side not in ("left", "right"):
        raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                           f"got {side}")
    if right and side == "left":
        raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                           "got side of left while right was True")
    return side == "right"


def _check_search(seq, values):
    if seq.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive "
                           "dimension, but got 0 dimension")
    if not isinstance(values, Tensor):
        if seq.ndim != 1:
            raise RuntimeError(f"torch.searchsorted(): input value can be a scalar only when "
                               f"boundaries tensor dimension is 1, but we got boundaries "
                               f"tensor dim({seq.ndim}) and input value's dim(0) numel(1)")
        return
    if seq.ndim != 1 and (seq.ndim != values.ndim or seq.shape[:-1] != values.shape[:-1]):
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or "
                           f"the first N-1 dimensions of boundaries tensor and input value "
                           f"tensor must match, but we got boundaries tensor "
                           f"{list(seq.shape)} and input value tensor {list(values.shape)}")


def _sorted_by(seq, sorter):
    """seq in sorter's order along its last dim."""
    if not isinstance(sorter, Tensor) or sorter.dtype is not _I64:
        got = _TORCH_TYPE[sorter.dtype.name] if isinstance(sorter, Tensor) else \
            type(sorter).__name__
        raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but "
                           f"got dtype {got}")
    if sorter.shape != seq.shape:
        raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same "
                           f"size, but got boundary tensor {list(seq.shape)}and got sorter "
                           f"tensor {list(sorter.shape)}")
    n = seq.shape[-1]
    if not sorter._lazy and sorter.numel():
        a = np.asarray(sorter)
        if a.min() < 0 or a.max() >= n:
            raise RuntimeError(f"torch.searchsorted(): sorter index out of range: its "
                               f"values must lie in [0, {n})")
    return _F.gather(seq, seq.ndim - 1, sorter)


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """For each value of input, the index in sorted_sequence's last dim
    where it would be inserted to keep it sorted (the first such index,
    or the last when right / side="right"); sorted_sequence is 1-d or has
    input's leading dims. Traced: the count of the elements before each
    value, so it takes time and memory of len(input) x len(sequence)."""
    seq = _tensor_arg(sorted_sequence, "searchsorted", "sorted_sequence")
    if not isinstance(input, (Tensor, numbers.Number)) or isinstance(input, builtins.bool):
        raise TypeError(f"searchsorted(): argument 'input' must be Tensor or Number, not "
                        f"{type(input).__name__}")
    right = _side(right, side)
    _check_search(seq, input)
    if sorter is not None:
        seq = _sorted_by(seq, sorter)
    seq, values = _F._pair(seq.detach(), input.detach() if isinstance(input, Tensor) else input)
    # NaN values go after everything, as PyTorch's binary search puts them
    s, v = _F.unsqueeze(seq, -2), _F.unsqueeze(values, -1)
    before = _F.logical_not(_F.gt(s, v) if right else _F.ge(s, v))
    count = _F.reshape(_F.sum(before, -1), *values.shape)  # a number gives a 0-d count
    return _F.cast(count, _I32) if out_int32 else count


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The index of the bucket of 1-d boundaries each value of input falls
    in: searchsorted(boundaries, input)."""
    _tensor_arg(boundaries, "bucketize", "boundaries")
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got "
                           f"dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of elements is among test_elements (either may be a
    number), of elements' shape; NaN is in nothing. Traced: compares
    every pair, len(elements) x len(test_elements)."""
    for v in (elements, test_elements):
        if not isinstance(v, (Tensor, numbers.Number)):
            raise TypeError(f"isin(): elements and test_elements must be Tensors or numbers, "
                            f"not {type(v).__name__}")
        if isinstance(v, builtins.bool) or isinstance(v, Tensor) and v.dtype is _BOOL:
            raise RuntimeError("Unsupported input type encountered for isin(): Bool")
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin(): elements or test_elements must be a Tensor")
    e, t = _F._pair(elements, test_elements)
    e, t = e.detach(), t.detach()
    found = _F.any(_F.eq(_F.reshape(e, -1, 1), _F.reshape(t, 1, -1)), 1)
    found = _F.reshape(found, *e.shape)
    return _F.logical_not(found) if invert else found


# ---- histc ----

def _histc_range(x, bins, lo, hi):
    """histc's outer edges: [min, max], or the data's extremes when they
    are equal (a read of two numbers), widened by 1 when still equal."""
    if lo == hi and x.numel():
        lo, hi = (_F.amin(x).item(), _F.amax(x).item())
    elif lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
    return (lo - 1, hi + 1) if lo == hi else (lo, hi)


def histc(input, bins=100, min=0, max=0):
    """Counts of input's elements in bins equal-width bins over [min, max]
    (the data's range when min == max), as input's dtype; elements outside
    it are not counted, NaN is (in the first bin), as in PyTorch 1.13.
Traced, but for the data's range (read when min == max)."""
    x = _tensor_arg(input, "histc").detach()
    if not x.dtype.is_floating_point:
        raise RuntimeError(f'"histogram_cpu" not implemented for '
                           f"'{_TORCH_TYPE[x.dtype.name]}'")
    bins = _int_arg(bins, "histc", "bins", 2)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                           f"dimension 0")
    lo, hi = _histc_range(x, bins, builtins.float(min), builtins.float(max))
    x = _F.reshape(x, -1)
    lo_t, hi_t = _F._scalar(lo, x.dtype), _F._scalar(hi, x.dtype)
    # PyTorch's arithmetic, in x's dtype: (x - lo) * bins / (hi - lo)
    pos = _F.cast(_F.div(_F.mul(_F.sub(x, lo_t), builtins.float(bins)), _F.sub(hi_t, lo_t)),
                  _I64)
    pos = _F.where(_F.eq(pos, bins), bins - 1, pos)  # max falls in the last bin
    pos = _F.where(_F.isnan(x), 0, pos)  # NaN passes PyTorch's range test: bin 0
    outside = _F.logical_or(_F.lt(x, lo_t), _F.gt(x, hi_t))
    pos = _F.where(outside, bins, pos)  # a bin past the last, dropped
    ones = _F.expand(_F._scalar(1, x.dtype), *x.shape)
    counts = _F.scatter_add(_F.cast(_F._zeros_i64((bins + 1,)), x.dtype), 0, pos, ones)
    return _F.narrow(counts, 0, 0, bins)


# ---- multinomial ----

def _check_probabilities(p, replacement, num_samples):
    """PyTorch's refusals of a distribution (the row checks by its path:
    the one-draw / no-replacement path or the cumulative one)."""
    if not replacement or num_samples == 1:
        if not np.all(np.isfinite(p) & (p >= 0)):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or "
                               "element < 0")
    else:
        if not np.all(p >= 0):
            raise RuntimeError("invalid multinomial distribution (encountering probability "
                               "entry < 0)")
        if not np.all(np.isfinite(p)):
            raise RuntimeError("invalid multinomial distribution (encountering probability "
                               "entry = infinity or NaN)")
    if np.any(p.sum(axis=1) <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


def _draw(p, num_samples, replacement, g):
    """num_samples category indices per row of p (rows of weights)."""
    if not replacement or num_samples == 1:
        # sequential draws without replacement = the largest p / Exp(1)
        # (PyTorch's algorithm); zero weights come last
        key = p / g.exponential(size=p.shape)
        return np.argsort(-key, axis=1, kind="stable")[:, :num_samples]
    cdf = np.cumsum(p, axis=1)
    cdf /= cdf[:, -1:]  # ends at exactly 1: every draw below it
    u = g.random((p.shape[0], num_samples))
    return np.stack([np.searchsorted(c, r, side="right") for c, r in zip(cdf, u)])


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """num_samples indices of categories drawn from each row of input (1-d
    or 2-d non-negative weights, not necessarily summing to 1), with or
    without replacement, from Loom's generator (loom.manual_seed) or the
    NumPy Generator given. Reads input; the result is real, int64."""
    _tensor_arg(input, "multinomial")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, "
                           f"got: {_TORCH_TYPE[input.dtype.name]}")
    n = _int_arg(num_samples, "multinomial", "num_samples", 2)
    if input.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    categories = input.shape[-1]
    if not replacement and n > categories:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if categories > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    g = _generator(generator)
    p = _read(input).astype(np.float64).reshape(-1, categories)
    if not p.shape[0]:
        return _real(np.zeros((0, n), np.int64), _I64)
    _check_probabilities(p, replacement, n)
    out = _draw(p, n, replacement, g).astype(np.int64)
    return _real(out.reshape(n) if input.ndim == 1 else out, _I64)


def _generator(generator):
    if generator is None:
        from . import _generator_now
        return _generator_now()
    if not isinstance(generator, np.random.Generator):
        raise TypeError(f"multinomial(): generator must be a numpy.random.Generator (Loom's "
                        f"generators), not {type(generator).__name__}")
    return generator


# ---- NaN-ignoring reductions, count_nonzero ----

def _dims(dim, ndim):
    """dim (None, an int or a tuple) as a list of dims in [0, ndim), or
    None for every dim, refused as PyTorch refuses it."""
    if dim is None:
        return None
    dims = [_F._dim(d, ndim) for d in _F._axes(dim) or []]
    for d in dims:
        if dims.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return dims or None  # () reduces every dim, as in PyTorch


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """sum with NaN taken as 0 (its gradient 0 there)."""
    x = _tensor_arg(input, "nansum")
    dim = _dims(dim, x.ndim)
    x = x if dtype is None else _F.cast(x, dtype)
    if x.dtype.is_floating_point:
        x = _F.where(_F.isnan(x), _F._scalar(0, x.dtype), x)
    return _F.sum(x, dim, keepdim)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean of the elements that are not NaN (NaN where all are)."""
    _tensor_arg(input, "nanmean")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got "
                           f"{_TORCH_TYPE[input.dtype.name]}")
    dim = _dims(dim, input.ndim)
    count = _F.sum(_F.logical_not(_F.isnan(input)), dim, keepdim)
    total = nansum(input, dim, keepdim, dtype=dtype)
    return _F.div(total, _F.cast(count, total.dtype))


def count_nonzero(input, dim=None):
    """The number of nonzero elements (NaN included) over dim (an int or
    a tuple; every dim when None), int64."""
    x = _tensor_arg(input, "count_nonzero")
    dim = _dims(dim, x.ndim)
    nonzero_ = x if x.dtype is _BOOL else _F.ne(x, _F._scalar(0, x.dtype))
    return _F.sum(nonzero_, dim)


__all__ = ["unique", "unique_consecutive", "bincount", "argwhere", "mode", "kthvalue",
           "searchsorted", "bucketize", "isin", "histc", "multinomial", "nansum", "nanmean",
           "count_nonzero"]

# The tensor methods PyTorch has (not searchsorted, bucketize, isin).
METHODS = [n for n in __all__ if n not in ("searchsorted", "bucketize", "isin")]
for _name in METHODS:
    setattr(Tensor, _name, globals()[_name])
del _name
