"""Loom's ops in PyTorch's names and argument conventions.

Every function here records ops of the op table (src/ir/ops.def) through
loom._C.op; loom.ops holds the table's ops under their own names. Python
numbers become tensors of the other operand's dtype; tensors of two dtypes
are promoted as PyTorch promotes them (bool < ints < floats)."""
import builtins
import collections
import math
import numbers
import operator
import string
import types

import numpy as np

from . import _C
from . import _dtype
from ._tensor import Tensor

_F32 = _dtype._BY_NAME["float32"]
_I64 = _dtype._BY_NAME["int64"]
_BOOL = _dtype._BY_NAME["bool"]
_I8 = _dtype._BY_NAME["int8"]
_I32 = _dtype._BY_NAME["int32"]  # hit counts: an int8 one wraps to 0 at 256 repeats


def _op(name, *inputs, **attrs):
    return _C.op(name, inputs, attrs or None)


def _on_scalar(fn, x, *tensors):
    """fn over x (and tensors) made 1-d, reshaped back to 0-d: PyTorch's
    dim-taking ops read a 0-d tensor as one element along dim 0 or -1."""
    out = fn(reshape(x, 1), *(reshape(t, 1) if isinstance(t, Tensor) else t for t in tensors))
    if isinstance(out, tuple):
        return type(out)(*(reshape(o, ()) for o in out))
    return reshape(out, ())


def _dim(dim, ndim):
    """dim in [0, ndim), from PyTorch's range [-ndim, ndim) (a 0-d tensor
    takes dims -1 and 0), else IndexError in PyTorch's words."""
    n = builtins.max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {dim})")
    return dim % n


# ---- Python numbers as tensors ----

_scalars = {}


def _scalar(value, dtype):
    """A 0-d real tensor of value in dtype (kept: an immutable constant)."""
    key = (value, type(value), dtype._code)
    if value == 0 and type(value) is builtins.float:  # 0.0 == -0.0, but 1 / x differs
        key += (math.copysign(1.0, value),)
    t = _scalars.get(key)
    if t is None:
        if dtype._numpy is None:  # bfloat16
            return cast(_scalar(value, _F32), dtype)
        with np.errstate(over="ignore"):  # an operand wraps or overflows as the dtype does
            t = _C.from_buffer(np.array(value).astype(dtype._numpy), True)
        if len(_scalars) < 4096:
            _scalars[key] = t
    return t


def _number_dtype(value):
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, numbers.Integral):
        return _I64
    if isinstance(value, numbers.Real):
        return _dtype.default_float()
    raise TypeError(f"expected a loom Tensor or a number, got {type(value).__name__}")


def _category(d):
    return 2 if d.is_floating_point else 0 if d is _BOOL else 1


def promote_types(type1, type2):
    """The dtype two tensors of these dtypes compute in, as torch.promote_types."""
    return _dtype.promote(_dtype.resolve(type1), _dtype.resolve(type2))


def result_type(tensor1, tensor2):
    """The dtype of a binary op on tensor1 and tensor2 (tensors or Python
    numbers), as torch.result_type: _pair's rule."""
    kinds = [isinstance(v, Tensor) for v in (tensor1, tensor2)]
    if builtins.all(kinds):  # (this module's all and any are the reductions)
        a, b = tensor1, tensor2
        if (a.ndim == 0) != (b.ndim == 0):
            zero, other = (a, b) if a.ndim == 0 else (b, a)
            if _category(zero.dtype) <= _category(other.dtype):
                return other.dtype
        return _dtype.promote(a.dtype, b.dtype)
    if not builtins.any(kinds):
        return _dtype.promote(_number_dtype(tensor1), _number_dtype(tensor2))
    t, number = (tensor1, tensor2) if kinds[0] else (tensor2, tensor1)
    nd = _number_dtype(number)
    return nd if _category(nd) > _category(t.dtype) else t.dtype


def can_cast(from_, to):
    """Whether a cast keeps the category (bool < integer < float), as
    torch.can_cast: float to int and int to bool cannot."""
    return _category(_dtype.resolve(from_)) <= _category(_dtype.resolve(to))


def is_floating_point(x):
    return x.dtype.is_floating_point


def _pair(a, b):
    """a and b as tensors of one dtype. A Python number takes the tensor's
    dtype unless it is of a higher category (bool < integer < float), as in
    PyTorch: int32 + 1 is int32, int32 + 0.5 is float32. So does a 0-d
    tensor beside a tensor of dims: float32 + a 0-d float64 is float32."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.dtype is b.dtype:
            return a, b
        if (a.ndim == 0) != (b.ndim == 0):
            zero, other = (a, b) if a.ndim == 0 else (b, a)
            if _category(zero.dtype) <= _category(other.dtype):
                return cast(a, other.dtype), cast(b, other.dtype)
        d = _dtype.promote(a.dtype, b.dtype)
        return cast(a, d), cast(b, d)
    if isinstance(a, Tensor):
        t, number, flip = a, b, False
    elif isinstance(b, Tensor):
        t, number, flip = b, a, True
    else:
        raise TypeError("at least one operand must be a loom Tensor")
    if isinstance(number, np.ndarray):  # a tensor of its dtype, as PyTorch's operators take it
        from . import tensor
        return _pair(*((tensor(number), t) if flip else (t, tensor(number))))
    nd = _number_dtype(number)
    d = nd if _category(nd) > _category(t.dtype) else t.dtype
    pair = (cast(t, d), _scalar(number, d))
    return pair[::-1] if flip else pair


def _binary(name, on_bool=None):
    def fn(a, b):
        a, b = _pair(a, b)
        # two bools: PyTorch's add and maximum are or, mul and minimum and
        # (the ops take numbers only)
        return _op(on_bool if on_bool and a.dtype is _BOOL else name, a, b)
    fn.__name__ = name
    return fn


def _ordering(name):
    """<, <=, >, >=: bools compare as 0 and 1, as in PyTorch (the ops take
    numbers only)."""
    def fn(a, b):
        a, b = _pair(a, b)
        if a.dtype is _BOOL:
            a, b = cast(a, _I8), cast(b, _I8)
        return _op(name, a, b)
    fn.__name__ = name
    return fn


add = _binary("add", "or")
_sub = _binary("sub")


def sub(a, b):
    """a - b; bool operands (tensors, or True and False) are refused, as
    PyTorch refuses them: an inverted mask is ~mask."""
    def is_bool(v):
        return v.dtype is _BOOL if isinstance(v, Tensor) else isinstance(v, builtins.bool)
    if is_bool(a) or is_bool(b):
        two = is_bool(a) and is_bool(b)
        raise RuntimeError(
            f"Subtraction, the `-` operator, with {'two bool tensors' if two else 'a bool tensor'} "
            f"is not supported. " + ("Use the `^` or `logical_xor()` operator instead." if two else
                                     "If you are trying to invert a mask, use the `~` or "
                                     "`logical_not()` operator instead."))
    return _sub(a, b)
mul = _binary("mul", "and")
maximum = _binary("maximum", "or")
minimum = _binary("minimum", "and")
eq = _binary("eq")
ne = _binary("ne")
lt = _ordering("lt")
le = _ordering("le")
gt = _ordering("gt")
ge = _ordering("ge")
bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
bitwise_left_shift = _binary("bitshift_left")
bitwise_right_shift = _binary("bitshift_right")
logical_and = _binary("and")
logical_or = _binary("or")
logical_xor = _binary("xor")
remainder = _binary("mod")
subtract, multiply = sub, mul


def floor_divide(a, b):
    """a / b rounded toward -inf (the op's div floors integers only).
    Floats as Python's // and PyTorch's: the quotient of a - fmod(a, b),
    which is exact, rather than floor(a / b), whose rounded a / b can
    reach the next integer (1. // 0.1 is 9, floor(1 / 0.1) 10) or
    infinity (-5. // inf is -1, inf // 2 nan)."""
    a, b = _pair(a, b)
    if not a.dtype.is_floating_point:
        return _op("div", a, b)
    mod = fmod(a, b)
    q = _op("div", sub(a, mod), b)
    # a remainder of the other sign than b: one less
    q = sub(q, cast(logical_and(ne(mod, 0), ne(lt(b, 0), lt(mod, 0))), q.dtype))
    down = floor(q)
    down = add(down, cast(gt(sub(q, down), 0.5), q.dtype))
    ratio = _op("div", a, b)
    zero = where(_signbit(ratio), -0.0, 0.0)
    return where(eq(b, 0), ratio, where(eq(q, 0), zero, down))


def div(a, b, rounding_mode=None):
    """True division: integers are divided as floats, as in PyTorch;
    rounding_mode "floor" or "trunc" rounds the quotient (integers stay
    integers)."""
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        a, b = _pair(a, b)
        if a.dtype.is_floating_point:
            return trunc(_op("div", a, b))
        # the floored quotient, one more where a remainder of the other sign was left
        return add(_op("div", a, b), cast(ne(fmod(a, b), remainder(a, b)), a.dtype))
    if rounding_mode is not None:
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                         f"but found '{rounding_mode}'")
    # a Python integer divides as the float it is, not wrapped to the
    # tensor's integer dtype first
    a = builtins.float(a) if isinstance(a, numbers.Integral) else a
    b = builtins.float(b) if isinstance(b, numbers.Integral) else b
    a, b = _pair(a, b)
    if not a.dtype.is_floating_point:
        a, b = cast(a, _dtype.default_float()), cast(b, _dtype.default_float())
    return _op("div", a, b)


def fmod(a, b):
    """The remainder of a truncated division, of a's sign (remainder's is
    b's): |a| mod |b| with a's sign, so that no step adds b to a small
    remainder (fmod(-1, 1e8) is -1, fmod(-1, inf) -1, as C's fmod)."""
    a, b = _pair(a, b)
    return mul(sign(a), remainder(abs(a), abs(b)))


true_divide = divide = div


def pow(a, b):
    # as PyTorch, only a Python exponent is checked (a tensor's would be read)
    if isinstance(a, Tensor) and _is_int_number(b) and b < 0 and \
            not a.dtype.is_floating_point:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    a, b = _pair(a, b)
    return _op("pow", a, b)


def _is_int_number(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, builtins.bool)


def cast(x, dtype):
    dtype = _dtype.resolve(dtype)
    if x.dtype is dtype:
        return x
    return _op("cast", x, dtype=dtype._code)


def _unary(name):
    op = _C.op

    def fn(x):
        return op(name, (x,), None)
    fn.__name__ = name
    return fn


_FLOAT_CODES = frozenset(d._code for d in _dtype.DTYPES if d.is_floating_point)


def _float_unary(name):
    """A float-only op that takes integers and bool as the default dtype
    (float32 unless set_default_dtype: torch.tensor([4, 9]).sqrt() is
    float32)."""
    op = _C.op

    def fn(x):
        if getattr(x, "_dtype", None) not in _FLOAT_CODES and isinstance(x, Tensor):
            x = cast(x, _dtype.default_float())
        return op(name, (x,), None)
    fn.__name__ = name
    return fn


def _rounding_unary(name):
    """floor, ceil: an integer tensor is already whole (returned as it is)."""
    op = _C.op

    def fn(x):
        if isinstance(x, Tensor) and not x.dtype.is_floating_point and x.dtype is not _BOOL:
            return x
        return op(name, (x,), None)
    fn.__name__ = name
    return fn


for _name in ("neg", "abs", "relu", "silu", "sign", "isnan", "stop_gradient"):
    globals()[_name] = _unary(_name)
_sign_op = globals()["sign"]


def sign(x):
    """-1, 0 or 1 (a bool is its own sign), as PyTorch's: a float's NaN and
    -0 give +0 (the op table's sign keeps NaN and -0, as ONNX's)."""
    if x.dtype is _BOOL:
        return x
    s = _sign_op(x)
    if not x.dtype.is_floating_point:
        return s
    return where(logical_or(ne(x, x), eq(x, 0)), _scalar(0, x.dtype), s)
for _name in ("exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
              "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
              "atanh", "erf"):
    globals()[_name] = _float_unary(_name)
floor, ceil = _rounding_unary("floor"), _rounding_unary("ceil")
_round_op = _rounding_unary("round")


def round(x, decimals=0):
    """Half to even; decimals rounds at 10^-decimals (as PyTorch: x scaled
    by the power of ten, rounded, scaled back; float16 and bfloat16 in
    float32, where the scaled value does not overflow)."""
    if not decimals or not x.dtype.is_floating_point:
        return _round_op(x)
    if x.dtype.name in ("float16", "bfloat16"):
        return cast(round(cast(x, _F32), decimals), x.dtype)
    scale = 10.0 ** builtins.abs(builtins.int(decimals))
    if decimals > 0:
        return div(_round_op(mul(x, scale)), scale)
    return mul(_round_op(div(x, scale)), scale)


def log2(x):
    return div(log(x), math.log(2.0))


def log10(x):
    return div(log(x), math.log(10.0))


def exp2(x):
    """2^x, as pow(2, x) (exp(x ln 2) would lose bits at large x), in
    float32 for float16 and bfloat16."""
    if x.dtype.name in ("float16", "bfloat16"):
        return cast(exp2(cast(x, _F32)), x.dtype)
    x = x if x.dtype.is_floating_point else cast(x, _dtype.default_float())
    return pow(_scalar(2.0, x.dtype), x)


negative = globals()["neg"]
logical_not = _unary("not")
bitwise_not = _unary("bitwise_not")
_isnan_op = globals()["isnan"]


def isnan(x):
    """NaN test of any dtype (the op takes floats; an integer is never NaN)."""
    return _isnan_op(x) if x.dtype.is_floating_point else ne(x, x)


def isinf(x):
    return eq(abs(x), math.inf) if x.dtype.is_floating_point else ne(x, x)


def isfinite(x):
    return lt(abs(x), math.inf) if x.dtype.is_floating_point else eq(x, x)


# The largest finite value of each float dtype (bfloat16 has no NumPy dtype).
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": float(np.finfo(np.float32).max),
              "float64": float(np.finfo(np.float64).max)}


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """NaN to nan, +-inf to posinf / neginf (the dtype's extremes when None)."""
    if not x.dtype.is_floating_point:
        return x
    big = _FLOAT_MAX[x.dtype.name]
    y = where(isnan(x), float(nan), x)
    y = where(eq(x, math.inf), big if posinf is None else float(posinf), y)
    return where(eq(x, -math.inf), -big if neginf is None else float(neginf), y)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| where the difference is finite (an
    infinity is close only to itself), or equal."""
    a, b = _pair(a, b)
    if a.dtype == _BOOL and b.dtype == _BOOL:
        return eq(a, b)
    diff = sub(a, b)
    near = logical_and(isfinite(diff), le(abs(diff), add(mul(abs(b), rtol), atol)))
    close = logical_or(eq(a, b), near)
    return logical_or(close, logical_and(isnan(a), isnan(b))) if equal_nan else close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element of a is close to b's (a Python bool: a read)."""
    return builtins.bool(all(isclose(a, b, rtol, atol, equal_nan)))


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + e^(beta x)) / beta, and x itself where beta x > threshold
    (F.softplus's arguments)."""
    bx = x if beta == 1 else mul(x, beta)
    soft = _op("softplus", bx)
    return where(gt(bx, threshold), x, soft if beta == 1 else div(soft, beta))


def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    return _op("gelu_tanh" if approximate == "tanh" else "gelu", x)


def _maybe_inplace(x, y, inplace):
    """y, written into x itself when inplace (torch.nn.functional's
    inplace=True: the input tensor takes the result)."""
    return x._inplace(y) if inplace else y


_relu_op, _silu_op = relu, silu  # noqa: F821  (made by the loop above)


def relu(x, inplace=False):
    return _maybe_inplace(x, _relu_op(x), inplace)


def silu(x, inplace=False):
    return _maybe_inplace(x, _silu_op(x), inplace)


def leaky_relu(x, negative_slope=0.01, inplace=False):
    return _maybe_inplace(x, _op("leaky_relu", x, alpha=float(negative_slope)), inplace)


def elu(x, alpha=1.0, inplace=False):
    return _maybe_inplace(x, _op("elu", x, alpha=float(alpha)), inplace)


def clamp(x, min=None, max=None):
    """min(max(x, min), max). Tensor bounds broadcast; the gradient goes to
    x where it is inside the bounds and to the bound that clamps it."""
    if min is None and max is None:  # PyTorch's refusal: a clamp with no bound is a mistake
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    nan_bound = builtins.any(isinstance(b, builtins.float) and math.isnan(b) for b in (min, max))
    if isinstance(min, Tensor) or isinstance(max, Tensor) or nan_bound:
        return _clamp_tensors(x, *(_scalar(b, x.dtype) if isinstance(b, builtins.float) else b
                                   for b in (min, max)))
    for bound in (min, max):  # int x, float bound: a float result, as PyTorch's
        if bound is not None and _category(_number_dtype(bound)) > _category(x.dtype):
            x = cast(x, _number_dtype(bound))
    for bound in (min, max):
        _check_fill(bound, x)
    attrs = {}
    if min is not None:
        attrs["min"] = float(min)
    if max is not None:
        attrs["max"] = float(max)
    return _op("clamp", x, **attrs)


clip = clamp


def _clamp_tensors(x, lo, hi):
    # where, not maximum/minimum: those split the gradient at ties, and
    # PyTorch's clamp gives it all to x there; a NaN bound gives NaN, as
    # PyTorch's
    y = x if lo is None else where(logical_or(lt(x, lo), isnan(lo)), lo, x)
    return y if hi is None else where(logical_or(gt(y, hi), isnan(hi)), hi, y)


def clamp_min(x, min):
    return clamp(x, min=min)


def clamp_max(x, max):
    return clamp(x, max=max)


def _triangle(x, diagonal, upper):
    """x with the elements off its lower (upper) triangle zeroed, over the
    last two dims: a constant mask chosen by where, so gradients follow."""
    if x.ndim < 2:
        raise ValueError("tril/triu: a tensor of two or more dims")
    ones = np.ones(tuple(x.shape[-2:]), np.bool_)
    keep = np.triu(ones, diagonal) if upper else np.tril(ones, diagonal)
    return where(_C.from_buffer(keep, True), x, _scalar(0, x.dtype))


def tril(x, diagonal=0):
    return _triangle(x, diagonal, False)


def triu(x, diagonal=0):
    return _triangle(x, diagonal, True)


def _check_fill(number, other):
    """A Python number that takes other's dtype (where's operand, clamp's
    bound) must fit it, as PyTorch checks."""
    if isinstance(other, Tensor) and isinstance(number, (builtins.int, builtins.float)) \
            and _category(_number_dtype(number)) <= _category(other.dtype):
        _dtype.check_fits(number, other.dtype, fill=True)


def where(cond, a=None, b=None):
    """where(cond, a, b): a where cond, else b; where(cond) alone: the
    indices of cond's nonzero elements, one tensor per dim (a read)."""
    if a is None and b is None:
        return nonzero(cond, as_tuple=True)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):  # two numbers
        da, db = _number_dtype(a), _number_dtype(b)
        a = _scalar(a, da if _category(da) >= _category(db) else db)
    _check_fill(a, b)
    _check_fill(b, a)
    a, b = _pair(a, b)
    if cond.dtype is not _BOOL:
        cond = cast(cond, _BOOL)
    return _op("where", cond, a, b)


# ---- reductions ----

def _axes(dim):
    """None: every axis; also for dim=() or [], as PyTorch's sum and mean."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    return list(dim) if isinstance(dim, (tuple, list)) else [dim]


def _checked_axes(dim, ndim):
    """_axes(dim), each in [0, ndim) (IndexError in PyTorch's words) and
    named once."""
    axes = _axes(dim)
    if axes is None:
        return None
    axes = [_dim(d, ndim) for d in axes]
    if len(set(axes)) != len(axes):
        twice = next(d for d in axes if axes.count(d) > 1)
        raise RuntimeError(f"dim {twice} appears multiple times in the list of dims")
    return axes


def _reduce(name, x, dim, keepdim):
    axes = _checked_axes(dim, x.ndim)
    if axes is None:
        return _op(name, x, keepdim=int(keepdim))
    return _op(name, x, axes=axes, keepdim=int(keepdim))


def sum(x, dim=None, keepdim=False, dtype=None):
    if dtype is None:
        return _reduce("sum", x, dim, keepdim)
    # the op sums integers as int64; the result is cast back, as it wraps in dtype
    return cast(_reduce("sum", cast(x, dtype), dim, keepdim), dtype)


def mean(x, dim=None, keepdim=False, dtype=None):
    return _reduce("mean", x if dtype is None else cast(x, dtype), dim, keepdim)


def prod(x, dim=None, keepdim=False, dtype=None):
    if dtype is None:
        return _reduce("prod", x, dim, keepdim)
    return cast(_reduce("prod", cast(x, dtype), dim, keepdim), dtype)


def logsumexp(x, dim, keepdim=False):
    return _reduce("logsumexp", x, dim, keepdim)


def var(x, dim=None, unbiased=True, keepdim=False, correction=None):
    dim, unbiased, correction = _var_args(dim, unbiased, correction)
    c = correction if correction is not None else int(unbiased)
    axes = _checked_axes(dim, x.ndim)
    attrs = {"correction": int(c), "keepdim": int(keepdim)}
    if axes is not None:
        attrs["axes"] = axes
    return _op("variance", x, **attrs)


def std(x, dim=None, unbiased=True, keepdim=False, correction=None):
    dim, unbiased, correction = _var_args(dim, unbiased, correction)
    if x.dtype.name in ("float16", "bfloat16"):  # computed in float32, as PyTorch's
        return cast(std(cast(x, _F32), dim, unbiased, keepdim, correction), x.dtype)
    v = var(x, dim, unbiased, keepdim, correction)
    # no spread: the gradient is 0, as PyTorch's (sqrt's at 0 would be 0 * inf)
    zero = eq(v, 0)
    return where(zero, 0.0, sqrt(where(zero, 1.0, v)))


def _results(*names):
    return types.SimpleNamespace(**{n: collections.namedtuple(n, "values indices")
                                    for n in names})


# torch.return_types: results that unpack as (values, indices) and name
# their parts (out.values, out.indices)
return_types = _results("max", "min", "topk", "sort", "kthvalue", "median", "nanmedian",
                        "cummax", "cummin")


def _ordered(x):
    """x as the ordering ops take it: bools as int8 0 and 1 (the ops take
    numbers only; PyTorch orders False below True)."""
    return cast(x, _I8) if x.dtype is _BOOL else x


def _reduce_ordered(name, x, dim, keepdim):
    out = _reduce(name, _ordered(x), dim, keepdim)
    return cast(out, _BOOL) if x.dtype is _BOOL else out


def _extreme(name, arg_name, x, dim, keepdim):
    if dim is None:
        return _reduce_ordered(name, x, None, False)
    dim = _dim(dim, x.ndim)
    if x.ndim == 0:
        return getattr(return_types, name)(
            _reduce_ordered(name, x, dim, keepdim),
            _op(arg_name, _ordered(x), axis=int(dim), keepdim=int(keepdim)))
    # the values gathered at the indices: at ties the gradient goes to that
    # one element, as PyTorch's (the reduction's would split it)
    index = _op(arg_name, _ordered(x), axis=int(dim), keepdim=1)
    values = gather(x, dim, index)
    if not keepdim:
        values, index = squeeze(values, dim), squeeze(index, dim)
    return getattr(return_types, name)(values, index)


def max(x, dim=None, keepdim=False):
    """max(x): the largest element; max(x, dim): (values, indices)."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    return _extreme("max", "argmax", x, dim, keepdim)


def min(x, dim=None, keepdim=False):
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    return _extreme("min", "argmin", x, dim, keepdim)


def amax(x, dim=None, keepdim=False):
    return _reduce_ordered("max", x, dim, keepdim)


def amin(x, dim=None, keepdim=False):
    return _reduce_ordered("min", x, dim, keepdim)


def argmax(x, dim=None, keepdim=False):
    if dim is None:
        return _op("argmax", x)
    return _op("argmax", x, axis=_dim(dim, x.ndim), keepdim=int(keepdim))


def argmin(x, dim=None, keepdim=False):
    if dim is None:
        return _op("argmin", x)
    return _op("argmin", x, axis=_dim(dim, x.ndim), keepdim=int(keepdim))


def cumsum(x, dim, dtype=None):
    """Sums of x's prefixes along dim (in dtype, x cast first)."""
    if dtype is not None:
        dtype = _dtype.resolve(dtype)
        return cast(cumsum(cast(x, dtype), dim), dtype)  # the op sums integers as int64
    return _op("cumsum", x, axis=_dim(dim, x.ndim))


def topk(x, k, dim=-1, largest=True, sorted=True):
    # checked on the tensor's size now: over a symbolic axis the graph can
    # check it only when the segment runs
    dim = _dim(dim, x.ndim)
    size = x.shape[dim] if x.ndim else 1
    if not 0 <= int(k) <= size:
        raise RuntimeError(f"selected index k out of range: k {int(k)}, dim {int(dim)} of "
                           f"size {size}")
    if x.ndim == 0 and k == 1:
        return _on_scalar(lambda y: topk(y, 1, 0, largest, sorted), x)
    return return_types.topk(*_op("topk", x, k=int(k), axis=int(dim), largest=int(largest)))


def sort(x, dim=-1, descending=False, stable=False):
    """(values, indices) along dim: a topk of every element, which keeps
    equal elements in their order (stable, whatever `stable` says; NaN
    sorts above every number, as PyTorch's)."""
    dim = _dim(dim, x.ndim)
    if x.ndim == 0:
        return return_types.sort(x, _scalar(0, _I64))
    v, i = _op("topk", _ordered(x), k=x.shape[dim], axis=int(dim), largest=int(descending))
    return return_types.sort(cast(v, x.dtype), i)


def argsort(x, dim=-1, descending=False, stable=False):
    return sort(x, dim, descending, stable).indices


def kthvalue(x, k, dim=-1, keepdim=False):
    """The k-th smallest element along dim (k from 1) and its index: the
    one implementation, with its argument checks, is _data_ops's."""
    from ._data_ops import kthvalue as checked  # _data_ops builds on this module
    return checked(x, k, dim, keepdim)


def norm(x, p="fro", dim=None, keepdim=False):
    """torch.norm over dim (every element when None): p of 'fro' (2), 1,
    inf, -inf, 0 or another number. The 2-norm of zeros has gradient 0,
    as PyTorch's (a sqrt of 0 would give NaN)."""
    if p in ("fro", 2):
        s = sum(mul(x, x), dim, keepdim)
        zero = eq(s, 0)  # not "s > 0": a NaN is no zero, and its norm is NaN
        return where(zero, 0.0, sqrt(where(zero, 1.0, s)))
    if p == 1:
        return sum(abs(x), dim, keepdim)
    if p == math.inf:
        return amax(abs(x), dim, keepdim)
    if p == -math.inf:
        return amin(abs(x), dim, keepdim)
    if p == 0:
        return sum(cast(ne(x, 0), x.dtype), dim, keepdim)
    if isinstance(p, str):
        raise NotImplementedError(f"loom norm: p={p!r}")
    return pow(sum(pow(abs(x), float(p)), dim, keepdim), 1.0 / p)


def softmax(x, dim=-1, dtype=None):
    """dtype: x cast to it first (a float16 model's softmax in float32)."""
    x = x if dtype is None else cast(x, dtype)
    return _op("softmax", x, axis=_dim(dim, x.ndim))


def log_softmax(x, dim=-1, dtype=None):
    x = x if dtype is None else cast(x, dtype)
    return _op("log_softmax", x, axis=_dim(dim, x.ndim))


# ---- contractions ----

def matmul(a, b):
    """a @ b of one dtype: PyTorch's matmul does not promote (int64 @
    float32 is its error), so neither does this."""
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype.name} != {b.dtype.name}")
    a, b = _pair(a, b)
    return _op("matmul", a, b)


def mm(a, b):
    """a @ b of two matrices (matmul's rules, without its broadcasting)."""
    for name, x in (("self", a), ("mat2", b)):
        if isinstance(x, Tensor) and x.ndim != 2:
            raise RuntimeError(f"{name} must be a matrix")
    return matmul(a, b)


def bmm(a, b):
    """Batched a @ b: two 3-D tensors of one batch size."""
    for name, x in (("batch1", a), ("batch2", b)):
        if isinstance(x, Tensor) and x.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return matmul(a, b)


def einsum(equation, *operands):
    """torch.einsum: '...' and repeated labels (diagonals) included. The
    operands are contracted left to right, each pair as one batched matmul
    after permutes and sums; labels no later operand or the output needs
    are summed out first."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, output = _einsum_parse(equation.replace(" ", ""), operands)
    pairs = [_einsum_diagonal(x, s) for x, s in zip(operands, terms)]
    x, s = pairs[0]
    for k in range(1, len(pairs)):
        later = set(output).union(*(t for _, t in pairs[k + 1:]))
        x, s = _einsum_pair(x, s, *pairs[k], later)
    x, s = _einsum_sum(x, s, set(output))
    return x if s == output else permute(x, [s.index(c) for c in output])


def _einsum_parse(equation, operands):
    """The labels of each operand and of the output, '...' spelled out as
    letters the equation does not use (right-aligned, as broadcasting)."""
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: {len(terms)} terms in {equation!r}, {len(operands)} operands")
    widths = [x.ndim - len(t) + 3 for t, x in zip(terms, operands) if "..." in t]
    free = [c for c in string.ascii_letters if c not in equation][:builtins.max(widths, default=0)]
    spelled = []
    for t, x in zip(terms, operands):
        if "..." in t:
            t = t.replace("...", "".join(free[len(free) - (x.ndim - len(t) + 3):]))
        if len(t) != x.ndim or not t.isalpha():
            raise ValueError(f"einsum: term {t!r} for an operand of {x.ndim} dims")
        spelled.append(t)
    if arrow:
        out = out.replace("...", "".join(free))
    else:
        once = [c for c in set("".join(spelled)) if "".join(spelled).count(c) == 1]
        out = "".join(free) + "".join(sorted(c for c in once if c not in free))
    if builtins.any(c not in "".join(spelled) for c in out) or len(set(out)) != len(out):
        raise ValueError(f"einsum: output {out!r} of {equation!r}")
    return spelled, out


def _einsum_diagonal(x, s):
    """x with each label once: a repeated label keeps the diagonal (x times
    the identity over the two dims, summed over one)."""
    while len(set(s)) < len(s):
        c = next(c for c in s if s.count(c) > 1)
        i, j = s.index(c), s.index(c, s.index(c) + 1)
        shape = [1] * x.ndim
        shape[i] = shape[j] = x.shape[i]
        eye = np.eye(x.shape[i], dtype=np.float32).reshape(shape)
        x, s = sum(mul(x, cast(_C.from_buffer(eye, True), x.dtype)), j), s[:j] + s[j + 1:]
    return x, s


def _einsum_sum(x, s, keep):
    axes = [k for k, c in enumerate(s) if c not in keep]
    if not axes:
        return x, s
    return sum(x, axes), "".join(c for c in s if c in keep)


def _einsum_pair(x, s, y, t, later):
    """x (labels s) and y (labels t) contracted: labels in both that later
    needs are the batch of one matmul, the others in both its inner dim."""
    x, s = _einsum_sum(x, s, set(t) | later)
    y, t = _einsum_sum(y, t, set(s) | later)
    size = {c: builtins.max(x.shape[s.index(c)] if c in s else 1,
                            y.shape[t.index(c)] if c in t else 1) for c in s + t}
    batch = [c for c in s if c in t and c in later]
    inner = [c for c in s if c in t and c not in later]
    left, right = [c for c in s if c not in t], [c for c in t if c not in s]

    def arranged(v, labels, order):
        v = permute(v, [labels.index(c) for c in order]) if len(order) > 1 else v
        want = [size[c] for c in order]
        return expand(v, *want) if list(v.shape) != want else v

    def count(labels):
        return builtins.int(np.prod([size[c] for c in labels]))
    a = reshape(arranged(x, s, batch + left + inner), count(batch), count(left), count(inner))
    b = reshape(arranged(y, t, batch + inner + right), count(batch), count(inner), count(right))
    out = batch + left + right
    return reshape(matmul(a, b), [size[c] for c in out]), "".join(out)


# ---- layout ----

def _size(s, what="size"):
    """s as a size or dim: an int or what has __index__ (a NumPy integer,
    a one-element integer tensor), never a float, as PyTorch's."""
    try:
        return operator.index(s)
    except TypeError:
        raise TypeError(f"{what} must be a tuple of ints, but found element of type "
                        f"{type(s).__name__}") from None


def _sizes(args, what="size"):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return [_size(s, what) for s in args]


def reshape(x, *shape):
    return _op("reshape", x, shape=_sizes(shape))


def flatten(x, start_dim=0, end_dim=-1):
    n = x.ndim
    if n == 0:
        return reshape(x, 1)
    s, e = _dim(start_dim, n), _dim(end_dim, n)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return x
    dims = _C._ir_dims(x)
    return reshape(x, list(dims[:s]) + [-1] + list(dims[e + 1:]))


def permute(x, *dims):
    if not dims:
        raise TypeError("permute() missing 1 required positional argument: 'dims'")
    dims = _sizes(dims, "dims")
    if len(dims) != x.ndim:
        raise RuntimeError(f"permute: {len(dims)} dims given for a tensor of {x.ndim} dims")
    return _op("transpose", x, perm=[_dim(d, x.ndim) for d in dims])


def transpose(x, dim0, dim1):
    dim0, dim1 = _dim(dim0, x.ndim), _dim(dim1, x.ndim)
    if x.ndim == 0:
        return x
    perm = list(range(x.ndim))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    return _op("transpose", x, perm=perm)


swapaxes = transpose


def t(x):
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return x if x.ndim < 2 else transpose(x, 0, 1)


def unsqueeze(x, dim):
    return _op("unsqueeze", x, axes=[_dim(dim, x.ndim + 1)])


def squeeze(x, dim=None):
    if dim is None:
        return _op("squeeze", x)
    axes = [d for d in (_dim(d, x.ndim) for d in _axes(dim) or []) if x.ndim and x.shape[d] == 1]
    return _op("squeeze", x, axes=axes) if axes else x


def expand(x, *sizes):
    sizes = _sizes(sizes)
    lead = len(sizes) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)]
    return _op("expand", x, shape=shape)


def broadcast_to(x, size):
    """x expanded to size, as torch.broadcast_to (expand's -1 too)."""
    return expand(x, *size)


def clone(x, memory_format=None):
    """A copy of x (memory_format is accepted: tensors are row-major)."""
    return _op("identity", x)


def atleast_1d(*tensors):
    return _atleast(tensors, lambda t: reshape(t, 1) if t.ndim == 0 else t)


def atleast_2d(*tensors):
    return _atleast(tensors, lambda t: reshape(t, 1, -1) if t.ndim < 2 else t)


def atleast_3d(*tensors):
    """0-d to (1, 1, 1), (n,) to (1, n, 1), (m, n) to (m, n, 1), as PyTorch's."""
    def up(t):
        if t.ndim == 0:
            return reshape(t, 1, 1, 1)
        if t.ndim == 1:
            return reshape(t, 1, -1, 1)
        return unsqueeze(t, -1) if t.ndim == 2 else t
    return _atleast(tensors, up)


def _atleast(tensors, up):
    """torch.atleast_*d: one tensor gives one, several (or a sequence) a tuple."""
    if len(tensors) == 1 and isinstance(tensors[0], Tensor):
        return up(tensors[0])
    if len(tensors) == 1:
        tensors = tensors[0]
    return tuple(up(t) for t in tensors)


def hstack(tensors):
    """cat along dim 1 (dim 0 for 1-d tensors), 0-d ones as 1-d."""
    tensors = atleast_1d(list(tensors))
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    """cat along dim 0, tensors of fewer than 2 dims as rows."""
    return cat(atleast_2d(list(tensors)), 0)


def dstack(tensors):
    """cat along dim 2, tensors of fewer than 3 dims as atleast_3d makes them."""
    return cat(atleast_3d(list(tensors)), 2)


def column_stack(tensors):
    """hstack with 0-d and 1-d tensors as columns."""
    return hstack([reshape(t, -1, 1) if t.ndim < 2 else t for t in tensors])


row_stack = vstack


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    d = tensors[0].dtype
    for u in tensors[1:]:
        d = _dtype.promote(d, u.dtype)
    # PyTorch's legacy rule: an empty 1-d tensor is skipped beside others
    kept = [u for u in tensors if u.shape != (0,)] or tensors[:1]
    if kept[0].ndim == 0:
        raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
    dim = _dim(dim, kept[0].ndim)
    return _C.op("concat", tuple(cast(u, d) for u in kept), {"axis": int(dim)})


concat = concatenate = cat


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    dim = _dim(dim, tensors[0].ndim + 1)
    return cat([unsqueeze(u, dim) for u in tensors], dim)


def split(x, split_size_or_sections, dim=0):
    """Pieces of split_size along dim (the last one shorter), or of the
    given sizes; an empty dim is one empty piece, as in PyTorch."""
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        if s < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
        if s == 0 and n:
            raise RuntimeError("split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {n}")
        sizes = [s] * (n // s) + ([n % s] if n % s else []) if n else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if builtins.sum(sizes) != n or builtins.any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {dim}), but got "
                               f"split_sizes={sizes}")
    return _split_op(x, dim, sizes)


def _split_op(x, dim, sizes):
    out = _op("split", x, axis=int(dim), sizes=sizes)
    return out if isinstance(out, tuple) else (out,)


def chunk(x, chunks, dim=0):
    """At most chunks pieces of ceil(size / chunks) along dim (chunks
    empty pieces of an empty dim, as in PyTorch)."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    if n == 0:
        return _split_op(x, dim, [0] * chunks)
    return split(x, -(-n // chunks), dim)


def flip(x, *args, dims=None):
    """x reversed along dims: flip(x, (0, 1)), x.flip(0, 1), flip(x, dims=[0])."""
    axes = [_dim(d, x.ndim) for d in _sizes(args if dims is None else (dims,))]
    return _op("flip", x, axes=axes) if axes and x.ndim else x


def tile(x, dims):
    dims = list(dims)
    if len(dims) < x.ndim:
        dims = [1] * (x.ndim - len(dims)) + dims
    if len(dims) > x.ndim:
        x = reshape(x, [1] * (len(dims) - x.ndim) + list(x.shape))
    return _op("tile", x, repeats=dims)


def repeat(x, *sizes):
    sizes = _sizes(sizes)
    if len(sizes) < x.ndim:  # tile would read them as leading 1s
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than "
                           "number of dimensions of tensor")
    return tile(x, sizes)


def unbind(x, dim=0):
    """The slices of x along dim, that dim removed."""
    if x.shape[_dim(dim, x.ndim)] == 0:
        return ()
    return tuple(squeeze(part, dim) for part in split(x, 1, dim))


def _check_rows(index, size):
    """A real index into size rows, for index_select and embedding:
    IndexError in PyTorch's words where an entry is negative or past the
    end (the op table's index_select would read a negative one from the
    end); a lazy index fails its read when past the end."""
    if isinstance(index, Tensor) and not index._lazy and index.numel() \
            and not index.dtype.is_floating_point and index.dtype is not _BOOL:
        a = np.asarray(memoryview(index))
        if ((a < 0) | (a >= size)).any():
            raise IndexError("index out of range in self")


def index_select(x, dim, index):
    if index.ndim == 0:
        index = reshape(index, 1)
    if x.ndim == 0:
        _dim(dim, 0)
        return _on_scalar(lambda y, i: index_select(y, 0, i), x, index)
    if x.ndim:
        _check_rows(index, x.shape[_dim(dim, x.ndim)])
    return _op("index_select", x, index, axis=int(dim))


def _check_index(index, dim, size):
    """A real index tensor checked now against a dim of size, naming the
    index as PyTorch does; a lazy one fails the read instead (naming its
    flat position)."""
    if index._lazy or not index.numel():
        return
    a = np.asarray(memoryview(index))
    bad = (a < 0) | (a >= size)
    if bad.any():
        raise RuntimeError(f"index {int(a[bad].flat[0])} is out of bounds for dimension "
                           f"{dim} with size {size}")


def gather(x, dim, index):
    """torch.gather: out[i][j] = x[i][index[i][j]] for dim 1 (NumPy's
    take_along_axis): the op table's gather over x flattened, at the flat
    offsets of index's positions. index has x's rank and no dim larger
    than x's but dim; an index outside [0, x.shape[dim]) fails the read."""
    if not isinstance(index, Tensor) or index.dtype.is_floating_point:
        raise TypeError("gather: index must be an integer tensor")
    if x.ndim == 0 and index.ndim == 0:
        _dim(dim, 0)
        return _on_scalar(lambda y, i: gather(y, 0, i), x, index)
    if index.ndim != x.ndim or x.ndim == 0:
        raise ValueError(f"gather: index has {index.ndim} dims, x has {x.ndim} (one or more)")
    dim %= x.ndim
    if builtins.any(i > n for d, (i, n) in enumerate(zip(index.shape, x.shape)) if d != dim):
        raise ValueError(f"gather: index of shape {tuple(index.shape)} is larger than x of "
                         f"shape {tuple(x.shape)} outside dim {dim}")
    _check_index(index, dim, x.shape[dim])
    strides = np.cumprod((1,) + tuple(x.shape[:0:-1]))[::-1]
    others = builtins.sum((c * strides[d] for d, c in enumerate(np.indices(index.shape))
                           if d != dim), np.zeros(index.shape, np.int64))
    i = cast(index, _I64)
    flat = i * builtins.int(strides[dim]) + _C.from_buffer(
        np.ascontiguousarray(others, np.int64), True)
    outside = logical_or(lt(i, 0), ge(i, x.shape[dim]))
    flat = where(outside, x.numel(), flat)  # out of range for the flat gather too
    return _op("gather", reshape(x, -1), flat, axis=0)


def _index_positions(x, index):
    """The flat positions of x[index] in x (as PyTorch reads index)."""
    try:
        view, rest = _numpy_select(np.arange(x.numel(), dtype=np.int64).reshape(tuple(x.shape)),
                                   index)
        return np.asarray(view[rest])
    except IndexError as e:
        raise IndexError(f"loom: assignment at {index!r}: {e}") from None


def index_put(x, indices, values, accumulate=False):
    """torch.index_put: x with values at x[indices] (a tuple of index
    tensors); accumulate adds them there instead, a repeated position
    taking each of its values."""
    if not accumulate:
        return _index_put(x, tuple(indices), values)
    pos = _index_positions(x, tuple(indices))
    if pos.size == 0:
        return x
    values = values if isinstance(values, Tensor) else _scalar(values, x.dtype)
    values = expand(cast(values, x.dtype), *pos.shape)
    added = index_add(reshape(x, -1), 0, _C.from_buffer(pos.reshape(-1), True),
                      reshape(values, -1))
    return reshape(added, *x.shape)


def _index_put(x, index, value):
    """x with x[index] = value, as a new value: assignment into a lazy
    tensor made functional (positions found with NumPy from x's shape,
    the values spread by a gather, chosen by where), so that gradients
    flow to x's other elements and to value. Tensors in index are read."""
    n = x.numel()
    pos = _index_positions(x, index)
    if not isinstance(value, Tensor):
        value = _scalar(value, x.dtype)
    value = cast(value, x.dtype)
    while value.ndim > pos.ndim and value.shape[0] == 1:  # as PyTorch: leading 1s go
        value = reshape(value, *value.shape[1:])
    try:  # checked for an empty selection too, as PyTorch checks it
        np.broadcast_to(np.empty(tuple(value.shape), np.int8), pos.shape)
    except ValueError:
        raise ValueError(f"loom: a value of shape {tuple(value.shape)} cannot be assigned "
                         f"to {pos.shape} elements") from None
    if pos.size == 0:
        return x
    if tuple(value.shape) != pos.shape:
        value = expand(value, *pos.shape)
    flat = pos.reshape(-1)
    inv = np.zeros(n, np.int64)
    inv[flat] = np.arange(flat.size)  # a repeated position takes its last value, as NumPy
    chosen = np.zeros(n, np.bool_)
    chosen[flat] = True
    spread = _op("gather", reshape(value, -1), _C.from_buffer(inv, True), axis=0)
    return where(reshape(_C.from_buffer(chosen, True), *x.shape), reshape(spread, *x.shape), x)


def scatter_add(x, dim, index, src):
    """torch.scatter_add: x with src[i][j] added at x[index[i][j]][j] (dim 0)."""
    return _op("scatter_add", x, index, src, axis=int(dim))


def index_add(x, dim, index, src):
    """torch.index_add: x with row i of src added at row index[i] along dim."""
    dim %= src.ndim
    # index broadcast to src's shape without naming the size along dim
    # (which may be symbolic: a reshape to it would pin it)
    full = cast(index, _I64)
    for i in range(src.ndim):
        if i != dim:
            full = unsqueeze(full, i)
    others = [1 if i == dim else s for i, s in enumerate(src.shape)]
    full = add(full, _zeros_i64(tuple(others)))
    return scatter_add(x, dim, full, src)


def index_copy(x, dim, index, src):
    """torch.index_copy: x with row i of src at row index[i] along dim (a
    repeated index takes its last row)."""
    dim = _dim(dim, x.ndim)
    return _index_put(x, (slice(None),) * dim + (index,), src)


def take(x, index):
    """x's elements at index, x read as one dim (negative from the end)."""
    return reshape(reshape(x, -1)[index], *index.shape)


def equal(a, b):
    """Whether a and b have one shape and the same elements (a Python bool:
    a read)."""
    return tuple(a.shape) == tuple(b.shape) and builtins.bool(all(eq(a, b)))


def _zeros_i64(shape):
    """Zeros recorded as an op (not a tensor fed in), so that the compiler
    sees them: adding them is then a broadcast (an expand), which an index
    op reads without the index stored."""
    return _op("full", shape=tuple(shape), value=0.0, dtype=_I64._code)


def any(x, dim=None, keepdim=False):
    nonzero_ = x if x.dtype is _BOOL else ne(x, 0)  # a cast would truncate 0.5 to 0
    return gt(sum(cast(nonzero_, _I64), dim, keepdim), 0)


def all(x, dim=None, keepdim=False):
    return logical_not(any(logical_not(x), dim, keepdim))


def embedding(index, weight, padding_idx=None, max_norm=None, norm_type=2.0):
    """weight's rows at index (F.embedding); the padding_idx row gets no
    gradient (its value is looked up as it is); max_norm first scales the
    rows looked up in place, as PyTorch's."""
    if max_norm is not None:
        _embedding_renorm_(weight, index, max_norm, norm_type)
    if padding_idx is not None:
        rows = np.arange(weight.shape[0]).reshape(-1, 1) != padding_idx % weight.shape[0]
        weight = where(_C.from_buffer(rows, True), weight, stop_gradient(weight))
    if weight.ndim:
        _check_rows(index, weight.shape[0])
    return _op("embedding", weight, index)


def _embedding_renorm_(weight, index, max_norm, norm_type):
    """PyTorch's embedding_renorm_: each row that index looks up, of a
    norm above max_norm, scaled in place (no gradient) to max_norm. Reads
    index and weight."""
    rows = np.unique(np.asarray(index))
    w = np.asarray(weight)
    norms = np.linalg.norm(w[rows].astype(np.float64), ord=norm_type, axis=1)
    big = norms > max_norm
    if big.any():
        _C.sync()  # what the step recorded so far reads the old rows
        scale = max_norm / (norms[big] + 1e-7)
        w[rows[big]] *= scale.astype(w.dtype)[:, None]


def one_hot(x, num_classes=-1):
    """num_classes -1: the largest class in x plus one (a read), as PyTorch's."""
    if num_classes < 0:
        if not x.numel():
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(amax(x)) + 1
    return _op("one_hot", x, depth=int(num_classes))


def pad(x, pad, mode="constant", value=0.0):
    """F.pad: pad is (last dim begin, last dim end, previous dim begin, ...)."""
    pad = list(pad)
    n = x.ndim
    begins, ends = [0] * n, [0] * n
    for i in range(len(pad) // 2):
        begins[n - 1 - i], ends[n - 1 - i] = pad[2 * i], pad[2 * i + 1]
    modes = {"constant": 0, "reflect": 1, "replicate": 2}
    if mode == "circular":
        return _pad_circular(x, begins, ends)
    if mode not in modes:
        raise ValueError(f"pad mode {mode!r}: one of {sorted(modes) + ['circular']}")
    return _op("pad", x, pads=begins + ends, mode=modes[mode], value=float(value))


def _pad_circular(x, begins, ends):
    """x wrapped around on each padded dim (its end before its start, its
    start after its end) by slices and a concat; negative pads crop."""
    for d, (b, e) in enumerate(zip(begins, ends)):
        n = x.shape[d]
        if b > n or e > n:
            raise ValueError(f"pad: circular pad ({b}, {e}) on dim {d} wraps around more "
                             f"than once (size {n})")
        if b < 0 or e < 0:
            x = narrow(x, d, builtins.max(-b, 0), n - builtins.max(-b, 0) - builtins.max(-e, 0))
            b, e, n = builtins.max(b, 0), builtins.max(e, 0), x.shape[d]
        if b or e:
            x = cat([narrow(x, d, n - b, b), x, narrow(x, d, 0, e)], d)
    return x


def nonzero(x, as_tuple=False):
    """The indices of x's nonzero elements, (count, ndim); as_tuple: one
    1-d tensor per dim (a data-dependent shape: a read)."""
    found = _op("nonzero", x)
    if not as_tuple:
        return found
    if x.ndim == 0:  # as one element along a dim
        return (nonzero(reshape(x, 1))[:, 0],)
    return tuple(found[:, d] for d in range(x.ndim))


def masked_fill(x, mask, value):
    if not isinstance(value, Tensor):
        _dtype.check_fits(value, x.dtype, fill=True)
    return where(mask, _scalar(value, x.dtype), x)


# ---- composites of the ops above (PyTorch's names) ----

def expand_as(x, other):
    return expand(x, *other.shape)


def reshape_as(x, other):
    return reshape(x, *other.shape)


view_as = reshape_as


def type_as(x, other):
    return cast(x, other.dtype)


def ravel(x):
    return reshape(x, -1)


def narrow(x, dim, start, length):
    """x's elements [start, start + length) along dim (start may count
    from the end)."""
    dim = _dim(dim, x.ndim)
    size, start, length = x.shape[dim], builtins.int(start), builtins.int(length)
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], "
                         f"but got {start})")
    start %= size if size else 1
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return _op("slice", x, starts=[start], ends=[start + length], axes=[dim], steps=[1])


def unflatten(x, dim, sizes):
    dim = _dim(dim, x.ndim)
    dims = _C._ir_dims(x)
    return reshape(x, list(dims[:dim]) + list(sizes) + list(dims[dim + 1:]))


def square(x):
    if x.dtype is _BOOL:  # as PyTorch: bools square as integers
        x = cast(x, _I64)
    return mul(x, x)


def trunc(x):
    """x rounded toward zero (floor above zero, ceil below); gradient 0."""
    if not x.dtype.is_floating_point:
        return x
    return where(lt(x, 0), ceil(x), floor(x))


fix = trunc


def frac(x):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"frac takes a float tensor, not {x.dtype.name}")
    return sub(x, trunc(x))


def logit(x, eps=None):
    """log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given."""
    if eps is not None:
        x = clamp(x, eps, 1.0 - eps)
    return log(div(x, sub(1.0, x)))


def addcmul(x, tensor1, tensor2, value=1):
    prod_ = mul(tensor1, tensor2)
    return add(x, prod_ if value == 1 else mul(prod_, value))


def addcdiv(x, tensor1, tensor2, value=1):
    quot = div(tensor1, tensor2)
    return add(x, quot if value == 1 else mul(quot, value))


def lerp(start, end, weight):
    """start + weight (end - start), of float tensors of one dtype."""
    if not start.dtype.is_floating_point:
        raise RuntimeError(f"lerp takes float tensors, not {start.dtype.name}")
    for name, t in (("end", end), ("weight", weight)):
        if isinstance(t, Tensor) and t.dtype is not start.dtype:
            raise RuntimeError(f"lerp: {name} is {t.dtype.name} where start is "
                               f"{start.dtype.name} (cast it first)")
    return add(start, mul(weight, sub(end, start)))


def hypot(a, b):
    """sqrt(a^2 + b^2) without overflow or underflow in the squares: the
    larger magnitude times sqrt(1 + ratio^2); inf where either is inf."""
    a, b = _pair(a, b)
    if not a.dtype.is_floating_point:
        raise RuntimeError(f"hypot takes float tensors, not {a.dtype.name} (cast them first)")
    big, small = maximum(abs(a), abs(b)), minimum(abs(a), abs(b))
    zero = eq(big, 0)
    ratio = div(small, where(zero, 1.0, big))
    r = mul(big, sqrt(add(mul(ratio, ratio), 1.0)))
    return where(logical_or(isinf(a), isinf(b)), math.inf, where(zero, 0.0, r))


def _signbit(x):
    """x < 0, or x a negative zero (1 / -0 is -inf): the sign atan2 reads."""
    return logical_or(lt(x, 0), logical_and(eq(x, 0), lt(div(1.0, x), 0)))


def atan2(y, x):
    """The angle of (x, y), in [-pi, pi]: atan of the ratio of the smaller
    coordinate to the larger (never a division by zero but at the origin),
    turned into the right quadrant. Signed zeros and infinities as C's
    atan2 (PyTorch's, NumPy's): atan2(-0., -1.) = -pi, atan2(0., -0.) = pi,
    atan2(inf, -inf) = 3 pi / 4."""
    y, x = _pair(y, x)
    if not y.dtype.is_floating_point:
        y, x = cast(y, _dtype.default_float()), cast(x, _dtype.default_float())
    # both infinite: the angle of (sign x, sign y), not inf / inf
    both_inf = logical_and(isinf(x), isinf(y))
    x = where(both_inf, sign(x), x)
    y = where(both_inf, sign(y), y)
    x_wider = ge(abs(x), abs(y))
    # each ratio's divisor is 1 where the other ratio is taken, so that
    # its unused gradient is 0, not 0 * inf
    safe_x = where(logical_and(x_wider, ne(x, 0)), x, 1.0)
    safe_y = where(x_wider, 1.0, y)
    pi, half_pi = _scalar(math.pi, y.dtype), _scalar(math.pi / 2, y.dtype)  # in y's precision
    # y / safe_x keeps y's zero's sign; x's sign (a -0 too) picks the half plane
    y_neg = _signbit(y)
    ratio = atan(div(y, safe_x))  # where x >= 0 as it is, so -0 stays -0 (-0 + 0 is 0)
    near_x = where(_signbit(x), add(ratio, where(y_neg, neg(pi), pi)), ratio)
    near_y = sub(where(y_neg, neg(half_pi), half_pi), atan(div(x, safe_y)))
    return where(x_wider, near_x, near_y)


arctan2 = atan2


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{a.dtype.name} and {b.dtype.name}")
    return cast(sum(mul(a, b)), a.dtype)


def outer(a, b):
    return mul(unsqueeze(a, 1), unsqueeze(b, 0))


ger = outer


def _added_product(x, product, beta, alpha):
    """beta x + alpha product, as torch.addmm and its kin: with beta 0,
    x is not read (its NaNs do not reach the result)."""
    out = product if alpha == 1 else mul(product, alpha)
    if beta == 0:  # x's gradient is zeros, as PyTorch's
        return add(out, where(_scalar(False, _BOOL), x, _scalar(0, x.dtype)))
    return add(x if beta == 1 else mul(x, beta), out)


def _check_ranks(op, **tensors):
    for name, (t, rank) in tensors.items():
        if t.ndim != rank:
            raise RuntimeError(f"{op}: {name} must be a {rank}-D tensor, got {t.ndim}-D")


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta input + alpha (mat1 @ mat2)."""
    _check_ranks("addmm", mat1=(mat1, 2), mat2=(mat2, 2))
    return _added_product(input, matmul(mat1, mat2), beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """beta input + alpha (mat @ vec)."""
    _check_ranks("addmv", mat=(mat, 2), vec=(vec, 1))
    return _added_product(input, matmul(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """beta input + alpha outer(vec1, vec2)."""
    _check_ranks("addr", vec1=(vec1, 1), vec2=(vec2, 1))
    return _added_product(input, outer(vec1, vec2), beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta input + alpha (batch1 @ batch2), batch by batch."""
    _check_ranks("baddbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    return _added_product(input, matmul(batch1, batch2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta input + alpha (the sum over the batch of batch1 @ batch2)."""
    _check_ranks("addbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    return _added_product(input, sum(matmul(batch1, batch2), 0), beta, alpha)


def diag(x, diagonal=0):
    """Of a 1-d x, the square matrix with x on the diagonal'th diagonal; of
    a 2-d x, that diagonal of x as a 1-d tensor."""
    k = builtins.int(diagonal)
    if x.ndim == 1:
        n = x.shape[0]
        on = _C.from_buffer(np.eye(n, dtype=np.bool_), True)
        square_ = where(on, unsqueeze(x, 1), _scalar(0, x.dtype))
        return pad(square_, (k, 0, 0, k) if k >= 0 else (0, -k, -k, 0))
    if x.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
    rows, cols = x.shape
    first = np.arange(builtins.max(0, -k), rows)
    first = first[first + k < cols]
    if not first.size:
        return narrow(reshape(x, -1), 0, 0, 0)
    offsets = np.ascontiguousarray(first * cols + first + k, np.int64)
    return _op("gather", reshape(x, -1), _C.from_buffer(offsets, True), axis=0)


def roll(x, shifts, dims=None):
    """x's elements shifted along dims (every element, flattened, when
    dims is None), those past the end coming in at the start."""
    if dims is None:
        return reshape(roll(reshape(x, -1), shifts, 0), *x.shape)
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims:{len(dims)}")
    for shift, d in zip(shifts, dims):
        d = _dim(d, x.ndim)
        n = x.shape[d]
        s = shift % n if n else 0
        if s:
            x = cat([narrow(x, d, n - s, s), narrow(x, d, 0, n - s)], d)
    return x


def fliplr(x):
    if x.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(x, [1])


def flipud(x):
    if x.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(x, [0])


def rot90(x, k=1, dims=(0, 1)):
    """x turned k quarter turns from dims[0] toward dims[1] (PyTorch's
    flips and transposes)."""
    d0, d1 = (_dim(d, x.ndim) for d in dims)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} "
                           f"and dim1 = {d1}")
    k %= 4
    if k == 1:
        return transpose(flip(x, [d1]), d0, d1)
    if k == 2:
        return flip(x, [d0, d1])
    if k == 3:
        return transpose(flip(x, [d0]), d0, d1)
    return x


def meshgrid(*tensors, indexing="ij"):
    """Grids of the 1-d tensors' values, one per tensor, of shape (len of
    each); indexing="xy" swaps the first two dims (NumPy's default)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f'torch.meshgrid: indexing must be one of "xy" or "ij", '
                         f'but received: {indexing}')
    tensors = [reshape(t, -1) for t in tensors]
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        tensors[0], tensors[1] = tensors[1], tensors[0]
    shape = [t.shape[0] for t in tensors]
    grids = []
    for i, t in enumerate(tensors):
        line = [1] * len(shape)
        line[i] = shape[i]
        grids.append(expand(reshape(t, line), *shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cumprod(x, dim, dtype=None):
    """Products of x's prefixes along dim (in dtype, x cast first): each
    prefix a prod over x with the elements after it set to 1 (exact, zeros
    and signs too, with prod's gradient; n^2 elements for a dim of n)."""
    if dtype is not None:
        dtype = _dtype.resolve(dtype)
        return cast(cumprod(cast(x, dtype), dim), dtype)  # prod multiplies integers as int64
    if x.ndim == 0:
        return x
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    last = transpose(x, dim, -1) if dim != x.ndim - 1 else x
    keep = _C.from_buffer(np.tril(np.ones((n, n), np.bool_)), True)
    out = prod(where(keep, unsqueeze(last, -2), _scalar(1, x.dtype)), -1)
    return transpose(out, dim, -1) if dim != x.ndim - 1 else out


# ---- diagonals, selections, medians, distances ----

def _const(a):
    a = np.asarray(a)  # (ascontiguousarray alone makes a 0-d array 1-d)
    return _C.from_buffer(np.ascontiguousarray(a).reshape(a.shape), True)


def _diagonal_offsets(rows, cols, offset):
    """Flat offsets (row * cols + col) of the offset'th diagonal."""
    first = np.arange(builtins.max(0, -offset), rows)
    first = first[first + offset < cols]
    return (first * cols + first + offset).astype(np.int64)


def diagonal(x, offset=0, dim1=0, dim2=1):
    """The offset'th diagonal of the (dim1, dim2) planes of x, as the last
    dim of the result (an index_select over each plane flattened)."""
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise ValueError("diagonal: x must be a tensor of two or more dims")
    d1, d2 = _dim(dim1, x.ndim), _dim(dim2, x.ndim)
    if d1 == d2:
        raise ValueError(f"diagonal: dim1 and dim2 must differ (both are {d1})")
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    order = rest + [d1, d2]
    moved = x if order == list(range(x.ndim)) else permute(x, order)
    rows, cols = x.shape[d1], x.shape[d2]
    flat = reshape(moved, [x.shape[d] for d in rest] + [rows * cols])
    offsets = _diagonal_offsets(rows, cols, builtins.int(offset))
    if not offsets.size:
        return narrow(flat, -1, 0, 0)
    return _op("index_select", flat, _const(offsets), axis=len(rest))


def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """Matrices whose offset'th diagonal (over out dims dim1, dim2) holds
    x's last dim, zeros elsewhere: a where over an identity mask, padded."""
    if not isinstance(x, Tensor) or x.ndim < 1:
        raise ValueError("diag_embed: x must be a tensor of one or more dims")
    nd, n, k = x.ndim + 1, x.shape[-1], builtins.int(offset)
    d1, d2 = _dim(dim1, nd), _dim(dim2, nd)
    if d1 == d2:
        raise ValueError(f"diag_embed: dim1 and dim2 must differ (both are {d1})")
    square_ = where(_const(np.eye(n, dtype=np.bool_)), unsqueeze(x, -1), _scalar(0, x.dtype))
    if k:
        square_ = pad(square_, (k, 0, 0, k) if k > 0 else (0, -k, -k, 0))
    perm, batch = [0] * nd, iter(range(nd - 2))
    for d in range(nd):
        perm[d] = nd - 2 if d == d1 else nd - 1 if d == d2 else next(batch)
    return square_ if perm == list(range(nd)) else permute(square_, perm)


def masked_select(x, mask):
    """x's elements where the bool mask (broadcast with x) is true, 1-d;
    its size depends on mask's values (a read)."""
    if not isinstance(x, Tensor) or not isinstance(mask, Tensor):
        raise TypeError("masked_select: x and mask must be tensors")
    if mask.dtype is not _BOOL:
        raise TypeError(f"masked_select: mask must be a bool tensor (got {mask.dtype.name})")
    try:
        shape = np.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    except ValueError:
        raise ValueError(f"masked_select: mask of shape {tuple(mask.shape)} does not "
                         f"broadcast with x of shape {tuple(x.shape)}") from None
    if tuple(x.shape) != shape:
        x = expand(x, *shape)
    if tuple(mask.shape) != shape:
        mask = expand(mask, *shape)
    where_true = reshape(nonzero(reshape(mask, -1)), -1)
    return _op("gather", reshape(x, -1), where_true, axis=0)


def median(x, dim=None, keepdim=False):
    """The lower median (of n values, the ((n - 1) // 2 + 1)-th smallest),
    as PyTorch's: of every element, or (values, indices) along dim; NaN
    where any value is NaN (along dim, the first NaN and its index), and
    an integer tensor's median of its dtype."""
    return _median(x, dim, keepdim, "median", skip_nan=False)


def nanmedian(x, dim=None, keepdim=False):
    """median of the values that are not NaN (NaN where all are)."""
    return _median(x, dim, keepdim, "nanmedian", skip_nan=True)


def _median(x, dim, keepdim, name, skip_nan):
    if dim is None:
        flat = reshape(x, -1)
        if flat.shape[0] == 0:  # NaN, as PyTorch's (whose integer result is arbitrary)
            if not x.dtype.is_floating_point:
                raise ValueError(f"{name}: x has no elements")
            return cast(_C.from_buffer(np.array(np.nan, np.float32), True), x.dtype)
        v = reshape(_median_along(flat, 0, skip_nan)[0].detach(), ())
        if not x.dtype.is_floating_point:
            return v
        # the gradient shared by the elements equal to the median (NaN: the
        # NaNs), as PyTorch's (the value stays v: the terms added are 0)
        tie = logical_or(eq(flat, v), logical_and(isnan(flat), isnan(v)))
        return add(v, div(sum(where(tie, sub(flat, v), 0.0)), sum(tie)))
    if x.ndim == 0:
        _dim(dim, 0)
        return getattr(return_types, name)(x, _scalar(0, _I64))
    d = _dim(dim, x.ndim)
    if x.shape[d] == 0:
        raise ValueError(f"{name}: dim {dim} of x has no elements")
    v, i = _median_along(x, d, skip_nan)
    if not keepdim:
        v, i = squeeze(v, d), squeeze(i, d)
    return getattr(return_types, name)(v, i)


def _median_along(x, d, skip_nan):
    """(values, indices) of the lower median along dim d, kept as a dim of
    one: the kthvalue, or the first NaN of a row that has one; without
    NaNs (skip_nan), the middle one of the sorted values that are not NaN
    (NaN sorts last). The values are gathered at the indices, so the
    gradient goes to the element chosen, as PyTorch's."""
    n = x.shape[d]
    if not x.dtype.is_floating_point:
        v, i = kthvalue(x, (n - 1) // 2 + 1, d, keepdim=True)
        return v, i
    nan_ = isnan(x)
    if skip_nan:
        count = sum(cast(logical_not(nan_), _I64), d, keepdim=True)
        middle = clamp_min(floor_divide(sub(count, 1), 2), 0)
        i = gather(stop_gradient(sort(x, d).indices), d, middle)
    else:
        i = kthvalue(x, (n - 1) // 2 + 1, d, keepdim=True).indices
        first_nan = argmax(cast(nan_, _I8), d, keepdim=True)
        i = where(any(nan_, d, keepdim=True), first_nan, i)
    return gather(x, d, i), i


def cdist(x1, x2, p=2.0, compute_mode=None):
    """The p-norm distance of each row of x1 (..., P, M) to each of x2
    (..., R, M): (..., P, R), batch dims broadcast; computed from the
    differences, so that equal rows are at distance 0 with gradient 0."""
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        raise TypeError("cdist: x1 and x2 must be tensors")
    if not x1.dtype.is_floating_point or not x2.dtype.is_floating_point:
        raise TypeError(f"cdist: floating point inputs only (got {x1.dtype.name} and "
                        f"{x2.dtype.name})")
    if x1.ndim < 2 or x2.ndim < 2:
        raise ValueError(f"cdist: inputs of two or more dims (got {x1.ndim} and {x2.ndim})")
    if x1.shape[-1] != x2.shape[-1]:
        raise ValueError(f"cdist: x1 and x2 must have the same number of columns "
                         f"(got {x1.shape[-1]} and {x2.shape[-1]})")
    if not isinstance(p, numbers.Real) or p < 0:
        raise ValueError(f"cdist: p must be a number of at least 0 (got {p!r})")
    diff = sub(unsqueeze(x1, -2), unsqueeze(x2, -3))
    return norm(diff, 2 if p == 2 else p, -1)


def _triangle_indices(row, col, offset, dtype, upper):
    for name, v in (("row", row), ("col", col), ("offset", offset)):
        if not _is_int_number(v):
            raise TypeError(f"{name} must be an int (got {type(v).__name__})")
    if row < 0 or col < 0:
        raise ValueError(f"row and col must be at least 0 (got {row}, {col})")
    pick = np.triu_indices if upper else np.tril_indices
    rows, cols = pick(row, offset, col)
    out = _const(np.stack([rows, cols]).astype(np.int64).reshape(2, -1))
    return out if dtype is None else cast(out, dtype)


def triu_indices(row, col, offset=0, dtype=None):
    """(2, N) indices of the upper triangle of a (row, col) matrix, row by row."""
    return _triangle_indices(row, col, offset, dtype, True)


def tril_indices(row, col, offset=0, dtype=None):
    return _triangle_indices(row, col, offset, dtype, False)


# ---- indexing ----

_BAD_INDEX = ("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
              "Variables are valid indices (got {})")
_BAD_INDEX_TENSOR = "tensors used as indices must be long, int or bool tensors"


def _index_tuple(index):
    """index as a tuple, as PyTorch reads it: a list that holds a sequence,
    a slice, None, ... or a tensor is a tuple of indices (its
    treatSequenceAsTuple, for lists shorter than 32); any other list is
    one index tensor."""
    if isinstance(index, list) and len(index) < 32 and builtins.any(
            isinstance(i, (list, tuple, slice, Tensor, np.ndarray)) or i is None or
            i is Ellipsis for i in index):
        return tuple(index)
    return index if isinstance(index, tuple) else (index,)


def _index_item(i):
    """One index as an int, a slice, None, Ellipsis or a tensor: lists and
    arrays become tensors (bools a mask, ints int64); floats are refused,
    as PyTorch refuses them."""
    if i is None or i is Ellipsis or isinstance(i, slice):
        return i
    if isinstance(i, Tensor):
        if i.dtype.is_floating_point:
            raise IndexError(_BAD_INDEX_TENSOR)
        return i
    if isinstance(i, (list, tuple, np.ndarray)):
        a = np.asarray(i)
        if a.dtype != np.bool_ and a.size and a.dtype.kind not in "iu":
            raise IndexError(_BAD_INDEX_TENSOR)
        return _C.from_buffer(a if a.dtype == np.bool_ else a.astype(np.int64), True)
    if isinstance(i, (builtins.bool, np.bool_)):
        if i:
            return None  # x[True] adds a dim, as x[None]
        raise NotImplementedError("loom: indexing with False")
    if isinstance(i, numbers.Integral):
        return builtins.int(i)
    raise IndexError(_BAD_INDEX.format(type(i).__name__))


def _numpy_index(index):
    """index for NumPy's indexing of x's memory (assignment), read as
    PyTorch reads it (_index_tuple), its tensors as arrays."""
    index = tuple(_index_item(i) for i in _index_tuple(index))
    return tuple(np.asarray(i) if isinstance(i, Tensor) else i for i in index)


def _numpy_select(a, index):
    """(view, rest): a[index] as PyTorch reads it is view[rest], view a
    view of a. NumPy counts an int beside an index array as advanced, so
    that x[0, :, idx] would put idx's dim first; PyTorch selects the ints
    first (x[0][:, idx]), as _getitem does."""
    index = _numpy_index(index)
    if not (builtins.any(type(i) is builtins.int for i in index) and
            builtins.any(isinstance(i, np.ndarray) for i in index)):
        return a, index
    used = builtins.sum(i.ndim if isinstance(i, np.ndarray) and i.dtype == np.bool_ else 1
                        for i in index if i is not None and i is not Ellipsis)
    pre = []
    for i in index:
        if i is Ellipsis:
            pre.extend([slice(None)] * (a.ndim - used))
        elif isinstance(i, np.ndarray) and i.dtype == np.bool_:
            pre.extend([slice(None)] * i.ndim)
        elif i is not None:
            pre.append(i if type(i) is builtins.int else slice(None))
    return a[tuple(pre)], tuple(i for i in index if type(i) is not builtins.int)


def _full_slice(i):
    return type(i) is slice and i.start is None and i.stop is None and i.step is None


def _common_index(x, index):
    """x[index] for the forms a model's step uses most, or None: one integer
    tensor (x[rows]), and full slices before one int or None (x[:, 0],
    w[:, None]), with the general path's ops (so the same graphs and cache
    keys) without its walk, which cost a dynamic model's step more than
    its recording."""
    if isinstance(index, Tensor):
        d = index.dtype
        if x.ndim and d is not _BOOL and not d.is_floating_point:
            return _op("gather", x, _checked_index(index, x.shape[0], 0), axis=0)
        return None
    if type(index) is not tuple or not index or len(index) > x.ndim:
        return None
    axis, last = len(index) - 1, index[-1]
    for i in index[:axis]:
        if not _full_slice(i):
            return None
    if last is None:
        return unsqueeze(x, axis)
    if type(last) is not int:
        return None
    size = x.shape[axis]
    if not -size <= last < size:
        return None  # the general path's IndexError
    at = last % size
    y = _op("slice", x, starts=[at], ends=[at + 1], axes=[axis], steps=[1])
    return _op("squeeze", y, axes=[axis])


def _getitem(x, index):
    """x[index]: ints and slices by one slice op (ints then squeezed), None
    by unsqueeze, and tensors (advanced indexing) last, on the dims they
    index in that result: ints select first, as in PyTorch."""
    common = _common_index(x, index)
    if common is not None:
        return common
    index = [_index_item(i) for i in _index_tuple(index)]
    if builtins.sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = builtins.sum(_dims_indexed(i) for i in index if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    expanded = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - used))
        else:
            expanded.append(i)
    starts, ends, steps, axes = [], [], [], []
    squeeze_axes, new_axes, advanced = [], [], []
    axis, out_axis = 0, 0
    for i in expanded:
        if i is None:
            new_axes.append(out_axis)
            out_axis += 1
        elif isinstance(i, Tensor):
            advanced.append((out_axis, i))
            axis += _dims_indexed(i)
            out_axis += _dims_indexed(i)
        elif isinstance(i, slice):
            size = x.shape[axis]
            start, stop, step = i.indices(size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            if (start, stop, step) != (0, size, 1):
                starts.append(start), ends.append(stop), steps.append(step), axes.append(axis)
            axis += 1
            out_axis += 1
        else:
            size = x.shape[axis]
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {axis} "
                                 f"with size {size}")
            starts.append(i % size), ends.append(i % size + 1), steps.append(1)
            axes.append(axis), squeeze_axes.append(axis)
            axis += 1
    y = x
    if axes:
        y = _op("slice", y, starts=starts, ends=ends, axes=axes, steps=steps)
    if squeeze_axes:
        y = _op("squeeze", y, axes=squeeze_axes)
    for a in new_axes:
        y = unsqueeze(y, a)
    return _advanced_index(y, advanced) if advanced else y


def _dims_indexed(i):
    return i.ndim if isinstance(i, Tensor) and i.dtype is _BOOL else 1


def _advanced_index(y, advanced):
    """y indexed by tensors at some of its dims [(dim, tensor)], as NumPy's
    advanced indexing: a mask stands for its nonzero positions; the index
    tensors broadcast together, and their dims replace the indexed ones
    where those are adjacent, else lead. One integer tensor is one gather;
    several, a gather at flat offsets over the indexed dims moved first."""
    if len(advanced) == 1:
        d, idx = advanced[0]
        if idx.dtype is not _BOOL:
            return _op("gather", y, _checked_index(idx, y.shape[d], 0), axis=d)
        if d == 0:
            return _mask_index(y, idx)
    dims, idxs = [], []
    for d, idx in advanced:
        if idx.dtype is _BOOL:
            _check_mask(y, d, idx)
            where_true = nonzero(idx)
            for j in range(idx.ndim):
                dims.append(d + j)
                idxs.append(where_true[:, j])
        else:
            dims.append(d)
            idxs.append(_checked_index(idx, y.shape[d], len(idxs)))
    rest = [k for k in range(y.ndim) if k not in dims]
    moved = permute(y, dims + rest) if dims + rest != list(range(y.ndim)) else y
    flat_y = reshape(moved, _rows_then([y.shape[d] for d in dims], [y.shape[k] for k in rest]))
    flat, stride = None, 1
    for d, idx in reversed(list(zip(dims, idxs))):
        idx = cast(idx, _I64)
        idx = where(lt(idx, 0), add(idx, y.shape[d]), idx)
        term = idx if stride == 1 else mul(idx, stride)
        flat = term if flat is None else add(term, flat)
        stride *= y.shape[d]
    out = _op("gather", flat_y, flat, axis=0)
    first = dims[0]
    if first == 0 or dims != list(range(first, first + len(dims))):
        return out
    lead = out.ndim - len(rest)  # the index's dims, before the rest of y's
    return permute(out, list(range(lead, lead + first)) + list(range(lead)) +
                   list(range(lead + first, out.ndim)))


def _checked_index(idx, size, position):
    """idx, after checking it on the host when it is real (a lazy index is
    not read for it: the gather fails its run instead)."""
    if not idx._lazy and idx.numel():
        a = np.asarray(idx)
        bad = a[(a < -size) | (a >= size)]
        if bad.size:
            raise IndexError(f"index {bad.flat[0]} is out of bounds for dimension "
                             f"{position} with size {size}")
    return idx


def _check_mask(y, d, mask):
    indexed = list(y.shape[d:d + mask.ndim])
    if list(mask.shape) != indexed:
        raise IndexError(f"The shape of the mask {list(mask.shape)} at index {d} does not "
                         f"match the shape of the indexed tensor {indexed} at index {d}")


def _rows_then(indexed, rest):
    """The shape [rows] + rest that folds the indexed dims into one: -1
    keeps a symbolic size, but beside an empty dim it names no size."""
    rows = -1 if builtins.all(rest) else math.prod(indexed)
    return [rows] + list(rest)


def _mask_index(x, mask):
    """x at the positions where mask (over x's leading dims) is true."""
    _check_mask(x, 0, mask)
    flat = reshape(x, _rows_then(x.shape[:mask.ndim], x.shape[mask.ndim:]))
    where_true = reshape(nonzero(reshape(mask, -1)), -1)
    return _op("gather", flat, where_true, axis=0)


# ---- scatters, moves, cumulative extremes, splits (PyTorch's names) ----

def _index_shaped(src, index):
    """src cut to index's shape (torch.scatter reads src only there)."""
    for d, n in enumerate(index.shape):
        if src.shape[d] != n:
            src = narrow(src, d, 0, n)
    return src


def scatter(x, dim, index, src=None, value=None, reduce=None):
    """torch.scatter: x with src[i][j] (or value) written at x[index[i][j]][j]
    (dim 0), where the positions index reaches (a scatter_add of ones) take
    a scatter_add of src into zeros, so that gradients go to src at index
    and to x elsewhere. A position written more than once takes the mean of
    its writes (PyTorch leaves which one wins undefined; ONNX's import does
    the same), so repeated writes of one value give that value, and a
    scalar value is written as it is. reduce="add" or "multiply" adds
    or multiplies each write into x instead."""
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing 'src' or 'value'")
    if not isinstance(index, Tensor) or index.dtype is not _I64:
        got = index.dtype.name if isinstance(index, Tensor) else type(index).__name__
        raise RuntimeError(f"scatter(): Expected dtype int64 for index (got {got})")
    dim = _dim(dim, x.ndim)
    if x.ndim == 0 and index.ndim == 0:
        _dim(dim, 0)
        return _on_scalar(lambda y, i, v: scatter(y, 0, i, v, reduce=reduce), x, index, src)
    if reduce is not None:
        return _scatter_reduce(x, dim, index, src, reduce)
    count = _op("scatter_add", _op("full", shape=tuple(x.shape), value=0.0, dtype=_I32._code),
                index, _op("full", shape=tuple(index.shape), value=1.0, dtype=_I32._code),
                axis=dim)
    hit = ne(count, 0)
    if not isinstance(src, Tensor):
        return where(hit, _scalar(src, x.dtype), x)
    src = cast(_index_shaped(src, index), x.dtype)
    base = x if x.dtype is not _BOOL else cast(x, _I8)
    spread = _op("scatter_add", mul(base, 0), index, cast(src, base.dtype), axis=dim)
    spread = div(spread, cast(maximum(count, 1), base.dtype),
                 rounding_mode=None if base.dtype.is_floating_point else "floor")
    return where(hit, cast(spread, x.dtype), x)


def _scatter_reduce(x, dim, index, src, reduce):
    """scatter with reduce: "add" a scatter_add into x; "multiply" x times,
    at each position along dim, the product of the writes there (a prod
    over a position x write comparison: its memory is x's size times
    index's size along dim)."""
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    base = x if x.dtype is not _BOOL else cast(x, _I8)
    if isinstance(src, Tensor):
        src = cast(_index_shaped(src, index), base.dtype)
    else:
        src = expand(_scalar(src, base.dtype), *index.shape)
    if reduce == "add":
        out = _op("scatter_add", base, index, src, axis=dim)
        return cast(out, x.dtype) if x.dtype is _BOOL else out
    # index and src to x's size in the other dims: -1 matches no position
    # and 1 changes nothing
    grow = [0 if d == dim else x.shape[d] - index.shape[d] for d in range(x.ndim)]
    if builtins.any(grow):
        widths = [w for g in reversed(grow) for w in (0, g)]
        index, src = pad(index, widths, value=-1), pad(src, widths, value=1)
    positions = _const(np.arange(x.shape[dim], dtype=np.int64).reshape(-1, 1))
    hits = eq(unsqueeze(movedim(index, dim, -1), -2), positions)  # (..., n, m)
    writes = where(hits, unsqueeze(movedim(src, dim, -1), -2), _scalar(1, base.dtype))
    out = mul(base, movedim(prod(writes, -1), -1, dim))
    return cast(out, x.dtype) if x.dtype is _BOOL else out


def _scatter_dense(x, dim, index, src, identity, combine):
    """Per position of x along dim, the writes index sends there reduced by
    combine (prod, amax, amin over the last dim), identity where none: a
    comparison of every position with every write, so its memory is x's
    size times index's size along dim."""
    grow = [0 if d == dim else x.shape[d] - index.shape[d] for d in range(x.ndim)]
    if builtins.any(grow):  # to x's size off dim: -1 matches no position
        widths = [w for g in reversed(grow) for w in (0, g)]
        index, src = pad(index, widths, value=-1), pad(src, widths, value=identity)
    positions = _const(np.arange(x.shape[dim], dtype=np.int64).reshape(-1, 1))
    hits = eq(unsqueeze(movedim(index, dim, -1), -2), positions)  # (..., n, m)
    writes = where(hits, unsqueeze(movedim(src, dim, -1), -2), _scalar(identity, src.dtype))
    return movedim(combine(writes, -1), -1, dim)


def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    """torch.scatter_reduce: x with the writes of src that index sends to
    each position reduced into it by reduce ("sum", "prod", "mean",
    "amax", "amin"), x's own value among them unless include_self is
    False; positions no write reaches keep x. An integer mean rounds down,
    as PyTorch's. prod, amax and amin compare every position with every
    write (memory: x's size times index's along dim); equal maxima share
    amax's gradient, as PyTorch's."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    if not isinstance(index, Tensor) or index.dtype is not _I64:
        raise RuntimeError("scatter_reduce(): Expected dtype int64 for index")
    dim = _dim(dim, x.ndim)
    src = cast(_index_shaped(src, index), x.dtype)
    ones = _op("full", shape=tuple(index.shape), value=1.0, dtype=_I32._code)
    count = _op("scatter_add", _op("full", shape=tuple(x.shape), value=0.0, dtype=_I32._code),
                index, ones, axis=dim)
    hit = ne(count, 0)
    base = x if include_self else where(hit, _scalar(0, x.dtype), x)
    if reduce in ("sum", "mean"):
        total = _op("scatter_add", base, index, src, axis=dim)
        if reduce == "sum":
            return total
        n = cast(add(count, 1) if include_self else maximum(count, 1), x.dtype)
        mean = div(total, n, rounding_mode=None if x.dtype.is_floating_point else "floor")
        return where(hit, mean, x)
    if reduce == "prod":
        r = _scatter_dense(x, dim, index, src, 1, prod)
        return where(hit, mul(r, x) if include_self else r, x)
    if x.dtype.is_floating_point:
        identity = float("-inf") if reduce == "amax" else float("inf")
    else:
        limits = np.iinfo(x.dtype._numpy)
        identity = int(limits.min if reduce == "amax" else limits.max)
    r = _scatter_dense(x, dim, index, src, identity, amax if reduce == "amax" else amin)
    if include_self:  # x among the writes: one reduction, so ties share the gradient
        both = stack([x, r], -1)
        r = amax(both, -1) if reduce == "amax" else amin(both, -1)
    return where(hit, r, x)


def index_fill(x, dim, index, value):
    """x with value at the positions index names along dim (a mask made by
    a scatter_add of ones, chosen by where)."""
    dim = _dim(dim, x.ndim)
    n = x.shape[dim] if x.ndim else 1
    index = reshape(cast(index, _I64), -1)
    index = where(lt(index, 0), add(index, n), index)
    hit = _op("scatter_add", _op("full", shape=(n,), value=0.0, dtype=_I32._code), index,
              _op("full", shape=tuple(index.shape), value=1.0, dtype=_I32._code), axis=0)
    shape = [1] * x.ndim
    if x.ndim:
        shape[dim] = n
    value = cast(value, x.dtype) if isinstance(value, Tensor) else _scalar(value, x.dtype)
    return where(reshape(ne(hit, 0), *shape), value, x)


def take_along_dim(x, indices, dim=None):
    """x's elements at indices along dim (x and indices broadcast on the
    other dims); without dim, of x flattened."""
    if dim is None:
        _check_index(indices, 0, x.numel())
        return gather(reshape(x, -1), 0, reshape(indices, -1))
    dim = _dim(dim, x.ndim)
    _check_index(indices, dim, x.shape[dim])
    if indices.ndim != x.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {x.ndim} dimensions for input, and "
                           f"{indices.ndim} dimensions for indices")
    shape = [builtins.max(a, b) for a, b in zip(x.shape, indices.shape)]
    xs, ins = list(shape), list(shape)
    xs[dim], ins[dim] = x.shape[dim], indices.shape[dim]
    x = x if list(x.shape) == xs else expand(x, *xs)
    indices = indices if list(indices.shape) == ins else expand(indices, *ins)
    return gather(x, dim, indices)


def repeat_interleave(x, repeats=None, dim=None, output_size=None):
    """Each element (or slice along dim) repeated: repeats an int, or a
    tensor of one count per element (read: the result's size is its
    sum). repeat_interleave(counts) alone: each index repeated by its count."""
    if repeats is None:
        counts = np.asarray(x).astype(np.int64).reshape(-1)
        return _const(np.repeat(np.arange(counts.size, dtype=np.int64), counts))
    if dim is None:
        x, dim = reshape(x, -1), 0
    dim = _dim(dim, x.ndim)
    if isinstance(repeats, Tensor) and repeats.numel() == 1:
        repeats = builtins.int(repeats.item())
    if _is_int_number(repeats):
        if repeats < 0:
            raise RuntimeError("repeats can not be negative")
        shape = list(x.shape)
        y = unsqueeze(x, dim + 1)
        y = expand(y, *shape[:dim + 1], repeats, *shape[dim + 1:])
        return reshape(y, *shape[:dim], shape[dim] * repeats, *shape[dim + 1:])
    counts = np.asarray(repeats).astype(np.int64).reshape(-1)
    if counts.size != x.shape[dim]:
        raise RuntimeError("repeats must have the same size as input along dim")
    if (counts < 0).any():
        raise RuntimeError("repeats can not be negative")
    taps = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    return _op("index_select", x, _const(taps), axis=dim)


def tensor_split(x, indices_or_sections, dim=0):
    """x cut along dim into n near-equal parts (the first size % n one
    longer), or at the given indices (parts may be empty)."""
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    spec = indices_or_sections
    if isinstance(spec, Tensor):
        spec = spec.item() if spec.ndim == 0 else spec.tolist()
    if _is_int_number(spec):
        if spec <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {spec}")
        q, r = divmod(n, spec)
        bounds = np.cumsum([0] + [q + 1] * r + [q] * (spec - r)).tolist()
    else:
        bounds = [0] + [builtins.min(builtins.max(i if i >= 0 else i + n, 0), n)
                        for i in spec] + [n]
    return tuple(narrow(x, dim, a, builtins.max(b - a, 0))
                 for a, b in zip(bounds[:-1], bounds[1:]))


def movedim(x, source, destination):
    """x with dims source moved to destination, the others in their order."""
    src = [_dim(d, x.ndim) for d in (source if isinstance(source, (list, tuple)) else [source])]
    dst = [_dim(d, x.ndim) for d in
           (destination if isinstance(destination, (list, tuple)) else [destination])]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) "
                           f"should contain the same number of dims as destination ({dst} dims)")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in source or destination")
    if x.ndim == 0:
        return x
    perm = [None] * x.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(d for d in range(x.ndim) if d not in src)
    perm = [next(rest) if p is None else p for p in perm]
    return x if perm == list(range(x.ndim)) else permute(x, perm)


moveaxis = movedim


def _prefix_taps(x, dim):
    """x's dim moved last and each prefix laid out reversed: (..., n, n),
    row j holding x[j], x[j-1], ..., x[0], then padding (the mask says
    where); and the (n, n) offsets j - k of each tap."""
    last = transpose(x, dim, -1) if dim != x.ndim - 1 else x
    n = last.shape[-1]
    j, k = np.indices((n, n))
    valid = k <= j
    taps = np.where(valid, j - k, 0).astype(np.int64)
    rows = index_select(last, last.ndim - 1, _const(taps.reshape(-1)))
    return last, reshape(rows, *last.shape[:-1], n, n), _const(valid), taps


def _cumulative_extreme(name, x, dim):
    """cummax / cummin: for each prefix its extreme and the index of its
    last occurrence (PyTorch's choice at ties), the value gathered there so
    that the gradient goes to that element."""
    if x.ndim == 0:
        return getattr(return_types, name)(x, _scalar(0, _I64))
    dim = _dim(dim, x.ndim)
    if x.numel() == 0:
        return getattr(return_types, name)(x, _zeros_i64(tuple(x.shape)))
    last, rows, valid, _ = _prefix_taps(_ordered(x), dim)
    kind = x.dtype if x.dtype is not _BOOL else _I8
    if kind.is_floating_point:
        pad_value = -math.inf if name == "cummax" else math.inf
    else:
        info = np.iinfo(kind._numpy)
        pad_value = builtins.int(info.min if name == "cummax" else info.max)
    padded = where(valid, rows, _scalar(pad_value, kind))
    # the first tap of the reversed prefix: the last occurrence in x
    first = _op("argmax" if name == "cummax" else "argmin", padded, axis=-1, keepdim=0)
    if kind.is_floating_point:  # a NaN wins, the last one seen, as PyTorch's
        nans = logical_and(valid, isnan(rows))
        first = where(any(nans, -1), argmax(cast(nans, _I8), -1), first)
    index = sub(_const(np.arange(last.shape[-1], dtype=np.int64)), first)
    xl = transpose(x, dim, -1) if dim != x.ndim - 1 else x
    values = gather(xl, xl.ndim - 1, index)
    if dim != x.ndim - 1:
        values, index = transpose(values, dim, -1), transpose(index, dim, -1)
    return getattr(return_types, name)(values, index)


def cummax(x, dim):
    """The running maximum along dim and its index (n^2 elements for a dim of n)."""
    return _cumulative_extreme("cummax", x, dim)


def cummin(x, dim):
    return _cumulative_extreme("cummin", x, dim)


def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) along dim, stable: each prefix a logsumexp over
    x with the elements after it at -inf (n^2 elements for a dim of n)."""
    if x.ndim == 0:
        return x
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    last = transpose(x, dim, -1) if dim != x.ndim - 1 else x
    keep = _const(np.tril(np.ones((n, n), np.bool_)))
    out = logsumexp(where(keep, unsqueeze(last, -2), _scalar(-math.inf, x.dtype)), -1)
    return transpose(out, dim, -1) if dim != x.ndim - 1 else out


def msort(x):
    """x sorted along its first dim."""
    return sort(x, 0).values


def trace(x):
    """The sum of a matrix's main diagonal."""
    if x.ndim != 2:
        raise RuntimeError("trace: expected a matrix")
    return sum(diagonal(x))


def _var_args(dim, unbiased, correction):
    if isinstance(dim, builtins.bool):  # var_mean(x, False): unbiased by position
        return None, dim, correction
    return dim, unbiased, correction


def var_mean(x, dim=None, unbiased=True, keepdim=False, correction=None):
    """(var, mean) over dim, as torch.var_mean (unbiased or correction=)."""
    dim, unbiased, correction = _var_args(dim, unbiased, correction)
    return (var(x, dim, unbiased, keepdim, correction), mean(x, dim, keepdim))


def std_mean(x, dim=None, unbiased=True, keepdim=False, correction=None):
    dim, unbiased, correction = _var_args(dim, unbiased, correction)
    return (std(x, dim, unbiased, keepdim, correction), mean(x, dim, keepdim))


def xlogy(x, y):
    """x * log(y), 0 where x is 0 (unless y is NaN). There x's gradient is
    log(y) where that is finite, else 0, and y's is 0, as PyTorch's: x
    times a log taken without gradient, of 1 where y is not positive and
    finite (so that no 0 * inf reaches the value or the gradients)."""
    x, y = _pair(x, y)
    if not x.dtype.is_floating_point:
        x, y = cast(x, _dtype.default_float()), cast(y, _dtype.default_float())
    zero = logical_and(eq(x, 0), logical_not(isnan(y)))
    finite = logical_and(gt(y, 0), lt(y, math.inf))
    at_zero = mul(x, stop_gradient(log(where(finite, y, 1.0))))
    return where(zero, at_zero, mul(x, log(where(zero, 1.0, y))))


def _nan_ignoring(a, b, keep_a):
    a, b = _pair(a, b)
    return where(logical_or(keep_a(a, b), isnan(b)), a, b)


def fmax(a, b):
    """The larger of a and b, NaN only where both are (the gradient to a
    at ties, as PyTorch's)."""
    return _nan_ignoring(a, b, ge)


def fmin(a, b):
    return _nan_ignoring(a, b, le)


def erfinv(x):
    """The inverse of erf: Giles' polynomial start (single precision) and
    two Newton steps on erf, computed without gradient; the gradient is
    sqrt(pi)/2 e^(y^2), attached by a term that is 0 in value."""
    x = x if x.dtype.is_floating_point else cast(x, _dtype.default_float())
    v = stop_gradient(x)
    w = neg(log(mul(sub(1.0, v), add(1.0, v))))
    small = lt(w, 5.0)
    ws = sub(where(small, w, 5.0), 2.5)
    wl = sub(sqrt(where(small, 5.0, w)), 3.0)
    p_small, p_large = _scalar(2.81022636e-08, x.dtype), _scalar(-0.000200214257, x.dtype)
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p_small = add(c, mul(p_small, ws))
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p_large = add(c, mul(p_large, wl))
    y = mul(where(small, p_small, p_large), v)
    inside = lt(abs(v), 1.0)
    slope = 2.0 / math.sqrt(math.pi)
    for _ in range(2):
        step = div(sub(erf(y), v), mul(slope, exp(neg(mul(y, y)))))
        y = where(inside, sub(y, step), y)
    y = where(eq(abs(v), 1.0), mul(sign(v), math.inf), where(inside, y, math.nan))
    grad = mul(math.sqrt(math.pi) / 2, exp(mul(y, y)))
    return add(y, mul(sub(x, v), where(inside, grad, 0.0)))


def _unfold(x, dimension, size, step):
    """Tensor.unfold: the windows of size elements, step apart, along
    dimension, as a new last dim (one index_select of every window's taps)."""
    dim = _dim(dimension, x.ndim)
    n = x.shape[dim] if x.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {dim} is {n} but size is "
                           f"{size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if x.ndim == 0:
        return reshape(x, 1)
    count = (n - size) // step + 1
    taps = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    y = _op("index_select", x, _const(taps.astype(np.int64)), axis=dim)
    y = reshape(y, *x.shape[:dim], count, size, *x.shape[dim + 1:])
    return movedim(y, dim + 1, -1)


# Functions reachable as tensor methods (x.sum(1), x.reshape(2, -1), ...).
METHODS = {name: globals()[name] for name in (
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
    "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "remainder",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
    "bitwise_right_shift",
    "neg", "abs", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
    "relu", "silu", "softplus", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "erf", "floor", "ceil", "round", "sign",
    "isnan", "clamp", "clip", "sum", "mean", "prod", "logsumexp", "var", "std", "max",
    "min", "amax", "amin", "argmax", "argmin", "cumsum", "topk", "softmax", "log_softmax",
    "matmul", "mm", "bmm", "reshape", "flatten", "permute", "transpose", "swapaxes", "t",
    "unsqueeze", "squeeze", "expand", "split", "chunk", "flip", "tile", "repeat",
    "index_select", "masked_fill", "nonzero", "gelu", "leaky_relu", "elu", "scatter_add",
    "index_add", "any", "all", "gather", "sort", "argsort", "kthvalue", "norm", "unbind",
    "clamp_min", "clamp_max", "tril", "triu", "isinf", "isfinite", "nan_to_num", "isclose",
    "allclose", "expand_as", "view_as", "reshape_as", "type_as", "narrow", "ravel", "square",
    "unflatten", "logit", "trunc", "fix", "frac", "addcmul", "addcdiv", "diag", "outer", "ger",
    "dot", "atan2", "arctan2", "lerp", "hypot", "roll", "fliplr", "flipud", "rot90",
    "cumprod", "diagonal", "diag_embed", "masked_select", "median", "nanmedian", "fmod",
    "index_put",
    "log2", "log10", "exp2", "scatter", "scatter_reduce", "take_along_dim",
    "repeat_interleave", "tensor_split",
    "movedim", "moveaxis", "cummax", "cummin", "logcumsumexp", "msort", "trace", "xlogy",
    "fmax", "fmin", "erfinv", "index_fill", "floor_divide", "broadcast_to", "addmm", "addmv",
    "addr", "baddbmm", "addbmm", "index_copy", "take", "equal", "true_divide", "divide",
    "subtract", "multiply")}
METHODS["unfold"] = _unfold

from ._composites import *  # noqa: E402,F401,F403  (compositions of the ops above)
METHODS.update({n: globals()[n] for n in (  # PyTorch's Tensor methods among the compositions
    "absolute", "not_equal", "sgn", "swapdims", "erfc", "deg2rad", "rad2deg", "sinc",
    "signbit", "isposinf", "isneginf", "isreal", "heaviside", "logaddexp", "logaddexp2",
    "float_power", "inner", "vdot", "mv", "kron", "cross", "matrix_power", "dist", "diagflat",
    "select", "hsplit", "vsplit", "dsplit", "diff", "cov", "corrcoef", "is_complex",
    "is_nonzero", "select_scatter", "slice_scatter", "renorm", "ldexp", "quantile",
    "nanquantile")})

__all__ = sorted(n for n, v in globals().items()
                 if not n.startswith("_") and callable(v) and n not in ("Tensor",)
                 and getattr(v, "__module__", None) in (__name__, "loom._composites"))
