"""PyTorch functions that are compositions of loom.functional's ops, with
no op of their own in the op table: elementwise forms (erfc, sinc,
logaddexp...), products (kron, tensordot, cross...), shapes (block_diag,
cartesian_prod, broadcast_tensors...), differences and statistics (diff,
trapezoid, cov, corrcoef). Their gradients are the ops'. Exported by
loom.functional, which lists them among its own (and loom's namespace)."""
import itertools
import math

import numpy as np

from . import functional as F
from ._tensor import Tensor


def _float(x):
    """x, or x cast to the default float dtype when it is not a float."""
    if x.dtype.is_floating_point:
        return x
    from ._dtype import default_float
    return F.cast(x, default_float())


# ---- elementwise ----

def erfc(x):
    return 1.0 - F.erf(_float(x))


def deg2rad(x):
    return _float(x) * (math.pi / 180.0)


def rad2deg(x):
    return _float(x) * (180.0 / math.pi)


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (its limit; the gradient there 0)."""
    x = _float(x)
    zero = F.eq(x, 0)
    safe = F.where(zero, 1.0, x) * math.pi
    return F.where(zero, 1.0, F.sin(safe) / safe)


def signbit(x):
    """Whether the sign bit is set: below 0, or -0.0 (whose reciprocal is
    -inf); a NaN's as a positive one's (False)."""
    if not x.dtype.is_floating_point:
        return F.lt(x, 0)
    negative_zero = F.logical_and(F.eq(x, 0), F.lt(F.reciprocal(x), 0))
    return F.logical_or(F.lt(x, 0), negative_zero)


def isposinf(x):
    return F.eq(x, float("inf")) if x.dtype.is_floating_point else F.ne(x, x)


def isneginf(x):
    return F.eq(x, float("-inf")) if x.dtype.is_floating_point else F.ne(x, x)


def isreal(x):
    """Every element of a real tensor is real."""
    return F.logical_or(F.eq(x, x), F.ne(x, x))


def heaviside(input, values):
    """0 where x < 0, 1 where x > 0, values where x == 0."""
    if input.dtype is not values.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different "
                           f"dtypes: {input.dtype} and {values.dtype}")
    one, zero = F._scalar(1, input.dtype), F._scalar(0, input.dtype)
    return F.where(F.eq(input, 0), values, F.where(F.gt(input, 0), one, zero))


def logaddexp(a, b):
    """log(e^a + e^b), by the larger: m + log1p(e^-|a - b|)."""
    a, b = _float(a), _float(b)
    top = F.maximum(a, b)
    return top + F.log1p(F.exp(-F.abs(a - b)))


def logaddexp2(a, b):
    """log2(2^a + 2^b)."""
    a, b = _float(a), _float(b)
    top = F.maximum(a, b)
    return top + F.log1p(F.exp2(-F.abs(a - b))) / math.log(2.0)


def float_power(input, exponent):
    """input ** exponent in float64, as PyTorch's."""
    from . import float64
    a = F.cast(input, float64) if isinstance(input, Tensor) else float(input)
    b = F.cast(exponent, float64) if isinstance(exponent, Tensor) else float(exponent)
    return F.pow(a, b)


# ---- products ----

def inner(a, b):
    """The sum over the last dims of a and b, every other dim kept."""
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, ([-1], [-1]))


def vdot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    return F.dot(a, b)


def mv(mat, vec):
    if mat.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {mat.ndim}, {vec.ndim}")
    return F.matmul(mat, vec)


def tensordot(a, b, dims=2):
    """The sum over dims of a paired with dims of b (an int n: a's last n
    with b's first n), as one matmul of the two reshaped."""
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da = [d % a.ndim for d in da] if a.ndim else da
    db = [d % b.ndim for d in db] if b.ndim else db
    if len(da) != len(db) or any(a.shape[i] != b.shape[j] for i, j in zip(da, db)):
        raise RuntimeError(f"contracted dimensions need to match, but first has size "
                           f"{[a.shape[i] for i in da]} and second has size "
                           f"{[b.shape[j] for j in db]}")
    free_a = [d for d in range(a.ndim) if d not in da]
    free_b = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    ma = F.permute(a, free_a + da).reshape(math.prod(a.shape[d] for d in free_a), k)
    mb = F.permute(b, db + free_b).reshape(k, math.prod(b.shape[d] for d in free_b))
    return F.matmul(ma, mb).reshape(*[a.shape[d] for d in free_a],
                                    *[b.shape[d] for d in free_b])


def kron(a, b):
    """The Kronecker product: every entry of a times the whole of b, the
    blocks laid out as a's entries (both at the larger rank)."""
    n = max(a.ndim, b.ndim)
    a = a.reshape(*((1,) * (n - a.ndim) + tuple(a.shape)))
    b = b.reshape(*((1,) * (n - b.ndim) + tuple(b.shape)))
    ea = a.reshape(*[v for d in range(n) for v in (a.shape[d], 1)])
    eb = b.reshape(*[v for d in range(n) for v in (1, b.shape[d])])
    return (ea * eb).reshape(*[a.shape[d] * b.shape[d] for d in range(n)])


def cross(input, other, dim=None):
    """The cross product of 3-vectors along dim (None: the first dim of
    size 3, as PyTorch's cross)."""
    a, b = broadcast_tensors(input, other)
    if dim is None:
        dims = [d for d in range(a.ndim) if a.shape[d] == 3]
        if not dims:
            raise RuntimeError("no dimension of size 3 in input")
        dim = dims[0]
    dim = dim % a.ndim
    if a.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{a.shape[dim]} and {b.shape[dim]}")
    ax, ay, az = (F.narrow(a, dim, i, 1) for i in range(3))
    bx, by, bz = (F.narrow(b, dim, i, 1) for i in range(3))
    return F.cat([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], dim)


def matrix_power(x, n):
    """x multiplied by itself n times (n >= 0; 0: the identity), by
    squaring."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise RuntimeError(f"matrix_power: expected a batch of square matrices, got "
                           f"{list(x.shape)}")
    if n < 0:
        raise NotImplementedError("matrix_power: negative powers need an inverse, which "
                                  "loom does not have")
    from . import eye
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else F.matmul(result, base)
        n >>= 1
        if n:
            base = F.matmul(base, base)
    if result is None:
        return F.cast(eye(x.shape[-1]), x.dtype).expand(*x.shape)
    return result


def dist(input, other, p=2):
    """The p-norm of input - other."""
    return F.norm(input - other, p)


# ---- shapes ----

def broadcast_shapes(*shapes):
    """The shape the given shapes broadcast to, as PyTorch's."""
    try:
        return tuple(np.broadcast_shapes(*[(s,) if isinstance(s, int) else tuple(s)
                                           for s in shapes]))
    except ValueError as e:
        raise RuntimeError(f"shape mismatch: objects cannot be broadcast to a single shape "
                           f"({e})") from None


def broadcast_tensors(*tensors):
    """The tensors broadcast to their common shape."""
    shape = broadcast_shapes(*[t.shape for t in tensors])
    return tuple(t if tuple(t.shape) == shape else F.broadcast_to(t, shape) for t in tensors)


def block_diag(*tensors):
    """The tensors (0-, 1- or 2-d) as blocks along a zero matrix's diagonal."""
    from . import zeros
    mats = [t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t
            for t in tensors]
    if any(m.ndim != 2 for m in mats):
        raise RuntimeError("torch.block_diag: Input tensors must have 2 or fewer dimensions")
    if not mats:
        return zeros(1, 0)
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = F.promote_types(dtype, m.dtype)
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        right = cols - left - m.shape[1]
        rows.append(F.pad(F.cast(m, dtype), (left, right)))
        left += m.shape[1]
    return F.cat(rows, 0)


def cartesian_prod(*tensors):
    """Every combination of one entry from each 1-d tensor, as rows (a 1-d
    tensor itself for one input)."""
    if len(tensors) == 1:
        return tensors[0]
    grids = F.meshgrid(*tensors, indexing="ij")
    return F.stack([g.reshape(-1) for g in grids], 1)


def combinations(input, r=2, with_replacement=False):
    """The r-element combinations of a 1-d tensor's entries, as rows, in
    itertools' order."""
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    pick = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    index = np.array(list(pick(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if r == 0:
        return input[:0]
    return F.index_select(input, 0, F._const(index.reshape(-1))).reshape(-1, r)


def diagflat(input, offset=0):
    return F.diag(input.reshape(-1), offset)


def select(input, dim, index):
    """input indexed by index along dim, that dim removed."""
    dim = dim % input.ndim
    size = input.shape[dim]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {dim}")
    return F.narrow(input, dim, index % size, 1).squeeze(dim)


def _split_at(input, sections, dim, name, least):
    if input.ndim < least:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {least} "
                           f"dimension, but got a tensor with {input.ndim} dimensions!")
    if isinstance(sections, int) and input.shape[dim] % sections:
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the "
                           f"size of the dimension {input.shape[dim]} is not divisible by "
                           f"the split_size {sections}!")
    return F.tensor_split(input, sections, dim)


def hsplit(input, sections):
    return _split_at(input, sections, 1 if input.ndim > 1 else 0, "hsplit", 1)


def vsplit(input, sections):
    return _split_at(input, sections, 0, "vsplit", 2)


def dsplit(input, sections):
    return _split_at(input, sections, 2, "dsplit", 3)


def select_scatter(input, src, dim, index):
    """input with src in place of its slice index along dim."""
    dim = dim % input.ndim
    size = input.shape[dim]
    index %= size
    parts = [F.narrow(input, dim, 0, index), src.unsqueeze(dim),
             F.narrow(input, dim, index + 1, size - index - 1)]
    return F.cat([F.cast(t, input.dtype) for t in parts], dim)


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """input with src in place of its slice start:end:step along dim."""
    dim = dim % input.ndim
    positions = np.arange(input.shape[dim])[slice(start, end, step)].astype(np.int64)
    if len(positions) != src.shape[dim]:
        raise RuntimeError(f"slice_scatter: src has {src.shape[dim]} entries along dim "
                           f"{dim}, the slice {len(positions)}")
    return F.index_copy(input, dim, F._const(positions), F.cast(src, input.dtype))


def renorm(input, p, dim, maxnorm):
    """Each slice along dim whose p-norm exceeds maxnorm scaled down to it
    (by maxnorm / (norm + 1e-7), as PyTorch's)."""
    dim = dim % input.ndim
    others = [d for d in range(input.ndim) if d != dim]
    norms = F.sum(F.abs(input) ** p, others, keepdim=True) ** (1.0 / p)
    return input * F.where(F.gt(norms, maxnorm), maxnorm / (norms + 1e-7), 1.0)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-d x: columns x^0 .. x^(N-1)
    (decreasing powers unless increasing)."""
    n = x.shape[0] if N is None else N
    powers = np.arange(n, dtype=np.int64)
    if not increasing:
        powers = powers[::-1].copy()
    if n == 0:
        return x.reshape(-1, 1)[:, :0]
    cols = [F.pow(x, int(k)) if k else F.cast(F.eq(x, x) | F.ne(x, x), x.dtype)
            for k in powers]
    return F.stack(cols, 1)


def ldexp(input, other):
    """input times 2 to the power other."""
    return _float(input) * F.exp2(_float(other))


def _quantile_pick(sorted_x, pos, interpolation):
    """Entries of sorted_x (sorted along its last dim) at fractional
    positions pos (one per row), by interpolation."""
    lo, hi = F.floor(pos), F.ceil(pos)
    at = (lambda i: F.gather(sorted_x, -1, F.cast(i, _int64()).unsqueeze(-1)).squeeze(-1))
    if interpolation == "lower":
        return at(lo)
    if interpolation == "higher":
        return at(hi)
    if interpolation == "nearest":
        return at(F.round(pos))  # halves to even, as PyTorch's
    a, b = at(lo), at(hi)
    if interpolation == "midpoint":
        return F.where(F.eq(lo, hi), a, (a + b) * 0.5)
    return a + (b - a) * (pos - lo)


def _int64():
    from . import int64
    return int64


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan, name):
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise ValueError(f"{name}() interpolation must be one of linear, lower, higher, "
                         f"midpoint or nearest. Got {interpolation}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    scalar_q = not isinstance(q, Tensor)
    qs = np.atleast_1d(np.asarray(q.tolist() if isinstance(q, Tensor) else q, np.float64))
    if ((qs < 0) | (qs > 1)).any():
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    x = input.reshape(-1) if dim is None else F.movedim(input, dim, -1)
    srt = F.sort(x, -1)[0]  # NaNs last
    n = x.shape[-1]
    if n == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    nan = F.isnan(x)
    valid = F.sum(F.logical_not(nan), -1) if ignore_nan else None
    outs = []
    for qv in qs.tolist():
        if ignore_nan:
            last = F.clamp_min(F.cast(valid, x.dtype) - 1.0, 0.0)
            pos = last * qv
        else:
            pos = F.cast(F._const(np.full(tuple(srt.shape[:-1]), qv * (n - 1))), x.dtype)
        v = _quantile_pick(srt, pos, interpolation)
        if ignore_nan:  # a row of NaNs only: NaN
            v = F.where(F.eq(valid, 0), float("nan"), v)
        else:  # a NaN anywhere in the row: NaN
            v = F.where(F.any(nan, -1), float("nan"), v)
        if keepdim and dim is not None:
            v = v.unsqueeze(dim % input.ndim)
        elif keepdim:
            v = v.reshape(*([1] * input.ndim))
        outs.append(v)
    return outs[0] if scalar_q else F.stack(outs, 0)


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-th quantiles (a number or a 1-d tensor of them in [0, 1]) over
    dim (None: all of input), by interpolation between the sorted values;
    NaN where a NaN is among them."""
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """quantile over the values that are not NaN (NaN where all are)."""
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


# ---- differences, integrals, statistics ----

def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The n-th forward difference along dim, prepend and append joined
    first."""
    x = input
    if prepend is not None or append is not None:
        x = F.cat([t for t in (prepend, x, append) if t is not None], dim)
    for _ in range(n):
        size = x.shape[dim]
        if size == 0:
            break
        later, earlier = F.narrow(x, dim, 1, size - 1), F.narrow(x, dim, 0, size - 1)
        x = F.ne(later, earlier) if x.dtype.name == "bool" else later - earlier
    return x


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule's integral of y along dim: at spacing dx (1 by
    default), or at the sample points x."""
    n = y.shape[dim]
    if n == 0:
        return F.sum(y, dim)
    later, earlier = F.narrow(y, dim, 1, n - 1), F.narrow(y, dim, 0, n - 1)
    if x is None:
        return F.sum(later + earlier, dim) * (0.5 * (1.0 if dx is None else dx))
    if isinstance(x, Tensor) and x.ndim == 1:
        shape = [1] * y.ndim
        shape[dim] = n - 1
        step = (x[1:] - x[:-1]).reshape(*shape)
    else:
        step = diff(x, dim=dim)
    return F.sum((later + earlier) * step, dim) * 0.5


trapz = trapezoid


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance of the rows' variables over the columns'
    observations (a 1-d input is one variable), weighted as PyTorch's."""
    x = _float(input.reshape(1, -1) if input.ndim == 1 else input)
    if x.ndim != 2:
        raise ValueError(f"cov(): expected input to have two or fewer dimensions but got an "
                         f"input with {input.ndim} dimensions")
    w = None
    if fweights is not None:
        w = F.cast(fweights, x.dtype)
    if aweights is not None:
        w = F.cast(aweights, x.dtype) if w is None else w * F.cast(aweights, x.dtype)
    n_obs = x.shape[1]
    if w is None:
        total = float(n_obs)
        mean = F.mean(x, 1, keepdim=True)
        norm = total - correction
    else:
        total = F.sum(w)
        mean = F.sum(x * w, 1, keepdim=True) / total
        norm = total if correction == 0 else \
            total - correction * (F.sum(w * F.cast(aweights, x.dtype)) / total
                                  if aweights is not None else 1.0)
        norm = F.clamp_min(norm, 0.0)
    if w is None:
        norm = max(norm, 0.0)
    centered = x - mean
    weighted = centered if w is None else centered * w
    c = F.matmul(centered, weighted.transpose(0, 1)) / norm
    return c.reshape(()) if tuple(c.shape) == (1, 1) else c


def corrcoef(input):
    """cov(input) over the outer product of the variables' deviations,
    clipped to [-1, 1] as PyTorch's."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = F.diagonal(c)
    sd = F.sqrt(d)
    return F.clamp(c / sd.reshape(-1, 1) / sd.reshape(1, -1), -1.0, 1.0)


def logspace(start, end, steps, base=10.0, dtype=None, requires_grad=False):
    """base ** linspace(start, end, steps), computed in float64."""
    from . import float64, linspace
    from ._dtype import default_float
    exps = linspace(float(start), float(end), steps, dtype=float64)
    out = F.cast(F.pow(float(base), exps), dtype or default_float())
    return out.requires_grad_(requires_grad) if requires_grad else out


def numel(input):
    return input.numel()


def is_complex(input):
    """False: loom has no complex dtypes."""
    return False


def is_nonzero(input):
    """The truth of a tensor of one element (RuntimeError for any other)."""
    if input.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous"
                           if input.numel() else "Boolean value of Tensor with no values is "
                           "ambiguous")
    return bool(input.reshape(()).item() != 0)


# aliases PyTorch keeps
absolute, not_equal, sgn, swapdims = F.abs, F.ne, F.sign, F.swapaxes


__all__ = sorted(n for n, v in list(globals().items())
                 if not n.startswith("_") and callable(v)
                 and getattr(v, "__module__", None) == __name__)
__all__ += ["absolute", "not_equal", "sgn", "swapdims"]
