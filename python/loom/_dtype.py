"""Loom's dtypes as Python objects, with their NumPy twins."""
import math

import numpy as np

from . import _C


class dtype:
    """A Loom dtype: loom.float32, loom.int64, ... (torch.dtype's role)."""

    __slots__ = ("_code", "name", "itemsize", "is_floating_point", "_numpy")

    def __init__(self, code, name, itemsize, numpy_dtype):
        self._code = code
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = name in ("float32", "float64", "float16", "bfloat16")
        self._numpy = numpy_dtype

    def __repr__(self):
        return "loom." + self.name

    @property
    def is_signed(self):
        return self.name != "bool"  # Loom has no unsigned integer dtype

    def __reduce__(self):
        return (_by_name, (self.name,))


# loom_dtype_t's names (f32, ...) mapped to PyTorch's.
_TORCH_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
                "i8": "int8", "i32": "int32", "i64": "int64", "bool": "bool"}
_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
          "bfloat16": None, "int8": np.int8, "int32": np.int32, "int64": np.int64,
          "bool": np.bool_}

DTYPES = tuple(dtype(code, _TORCH_NAMES[name], size, _NUMPY[_TORCH_NAMES[name]])
               for code, (name, size) in enumerate(_C.dtypes()))
_BY_NAME = {d.name: d for d in DTYPES}
_BY_NUMPY = {np.dtype(d._numpy): d for d in DTYPES if d._numpy is not None}


def _by_name(name):
    return _BY_NAME[name]


# The dtype of float data given as Python numbers, of float creation and of
# float ops on integers: float32 unless set_default_dtype changed it.
_default_float = _BY_NAME["float32"]


def default_float():
    return _default_float


def set_default_float(d):
    """As torch.set_default_dtype: a floating dtype, else TypeError."""
    global _default_float
    d = resolve(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, "
                        f"got {d}")
    _default_float = d


def from_code(code):
    return DTYPES[code]


def from_numpy_dtype(np_dtype):
    d = _BY_NUMPY.get(np.dtype(np_dtype).newbyteorder("="))
    if d is None:
        names = ", ".join(str(np.dtype(n)) for n in _BY_NUMPY)
        raise TypeError(f"loom has no dtype for NumPy's {np.dtype(np_dtype)} "
                        f"(NumPy dtypes Loom takes: {names})")
    return d


def resolve(d):
    """A dtype from a loom.dtype, a NumPy dtype or a Python type."""
    if isinstance(d, dtype):
        return d
    if isinstance(d, str) and d in _BY_NAME:
        return _BY_NAME[d]
    if d is float:  # Python's float is a double (PyTorch's float64)
        return _BY_NAME["float64"]
    if d is int:
        return _BY_NAME["int64"]
    if d is bool:
        return _BY_NAME["bool"]
    return from_numpy_dtype(d)


# Promotion order of binary ops (PyTorch's category order: bool, ints, floats).
_RANK = {"bool": 0, "int8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5,
         "float32": 6, "float64": 7}


def promote(a, b):
    if {a.name, b.name} == {"float16", "bfloat16"}:
        return _BY_NAME["float32"]  # neither holds the other's values (PyTorch's rule)
    return a if _RANK[a.name] >= _RANK[b.name] else b


_INT_RANGE = {"int8": (-2**7, 2**7 - 1), "int32": (-2**31, 2**31 - 1),
              "int64": (-2**63, 2**63 - 1)}
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": 3.4028234663852886e38}


def check_fits(values, d, fill):
    """PyTorch's check of Python numbers converted to d: an integer dtype
    takes finite values whose whole part it holds (a list's values too);
    a fill (full, fill_, masked_fill, x[i] = v) into a float dtype takes
    what does not overflow it (inf itself does not)."""
    if isinstance(values, (bool, int, float)):  # a Python number: no NumPy (zeros() each step)
        _check_number(values, d, fill)
        return
    a = np.asarray(values)
    if d.name in _INT_RANGE:
        lo, hi = _INT_RANGE[d.name]
        if a.dtype == object:
            fits = all(lo <= int(v) <= hi for v in a.reshape(-1))
        elif a.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                top = (a <= hi) if float(hi) == hi else (a < float(hi))  # int64: 2**63 is out
                fits = bool(np.all(np.isfinite(a) & (a >= lo) & top))
        else:
            fits = a.dtype.kind == "b" or bool(np.all((a >= lo) & (a <= hi)))
    elif fill and d.name in _FLOAT_MAX and a.dtype.kind in "fiu":
        with np.errstate(invalid="ignore"):
            fits = not np.any(np.isfinite(a) & (np.abs(a.astype(np.float64)) > _FLOAT_MAX[d.name]))
    else:
        fits = True
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {d.name} without overflow")


def _check_number(v, d, fill):
    inf_or_nan = isinstance(v, float) and not math.isfinite(v)
    if d.name in _INT_RANGE:
        lo, hi = _INT_RANGE[d.name]
        fits = not inf_or_nan and lo <= v <= hi
    elif fill and d.name in _FLOAT_MAX:
        fits = inf_or_nan or abs(v) <= _FLOAT_MAX[d.name]
    else:
        fits = True
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {d.name} without overflow")


class finfo:
    """The limits of a float dtype, as torch.finfo (bits, eps, max, min,
    tiny, smallest_normal, resolution, dtype)."""

    def __init__(self, d=None):
        d = resolve(d) if d is not None else _BY_NAME["float32"]
        if not d.is_floating_point:
            raise TypeError(f"finfo: {d!r} is not a floating point dtype (iinfo takes integers)")
        if d.name == "bfloat16":  # 8 exponent bits as float32's, 7 of mantissa
            self.bits, self.eps, self.max = 16, 2.0**-7, float.fromhex("0x1.fep127")
            self.tiny, self.resolution = 2.0**-126, 0.01
        else:
            f = np.finfo(d._numpy)
            self.bits, self.eps, self.max = f.bits, float(f.eps), float(f.max)
            self.tiny, self.resolution = float(f.tiny), 10.0 ** -f.precision
        self.min, self.smallest_normal, self.dtype = -self.max, self.tiny, d.name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.tiny:g}, tiny={self.tiny:g}, "
                f"dtype={self.dtype})")


class iinfo:
    """The limits of an integer dtype, as torch.iinfo (bits, min, max, dtype)."""

    def __init__(self, d):
        d = resolve(d)
        if d.is_floating_point or d.name == "bool":
            raise TypeError(f"iinfo: {d!r} is not an integer dtype (finfo takes floats)")
        self.bits = 8 * d.itemsize
        self.min, self.max = _INT_RANGE[d.name]
        self.dtype = d.name

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
