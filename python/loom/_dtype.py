"""Loom's dtypes as Python objects, with their NumPy twins."""
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
    if d is float:
        return _BY_NAME["float32"]
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
