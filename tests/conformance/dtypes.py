"""Loom dtypes in NumPy: storage, exact rounding, random values, tolerances.

Values travel as "exact" arrays: float64 for float dtypes (holding numbers
the dtype can represent), int64 for integer dtypes, bool for bool. The
storage array is what Loom's memory holds (bf16 as the top 16 bits of an
f32, in a uint16)."""
import numpy as np

LOOM = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3, "i8": 4, "i32": 5, "i64": 6,
        "bool": 7}
STORAGE = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
           "bf16": np.uint16, "i8": np.int8, "i32": np.int32, "i64": np.int64,
           "bool": np.bool_}

FLOAT = ["f32", "f64", "f16", "bf16"]
INT = ["i8", "i32", "i64"]
NUMERIC = FLOAT + INT
ALL = NUMERIC + ["bool"]

# Allowed |got - want| / (1 + |want|) per output dtype.
TOL = {"f64": 1e-12, "f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}

INT_RANGE = {"i8": (-128, 127), "i32": (-2**31, 2**31 - 1),
             "i64": (-2**63, 2**63 - 1)}


def is_float(dtype):
    return dtype in FLOAT


def f32_to_bf16_bits(f):
    """Rounds f32 values to bf16 (nearest, ties to even): the top 16 bits."""
    f = np.asarray(f, dtype=np.float32)
    u = f.reshape(-1).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    bits = np.where(np.isnan(f.reshape(-1)), (u >> 16) | 0x40, rounded)
    return bits.astype(np.uint16).reshape(f.shape)


def bf16_bits_to_f64(b):
    b = np.asarray(b, dtype=np.uint16)
    u = b.reshape(-1).astype(np.uint32) << 16
    return u.view(np.float32).astype(np.float64).reshape(b.shape)


def to_storage(values, dtype):
    """The storage array of `values` (exact or ideal) in dtype: floats are
    rounded to nearest, integers wrap (two's complement), bool is != 0."""
    v = np.asarray(values)
    if dtype == "bool":
        return np.asarray(v != 0)
    if dtype in INT:
        if v.dtype.kind == "f":
            raise ValueError("float values for an integer dtype")
        return v.astype(np.int64).astype(STORAGE[dtype])
    v = v.astype(np.float64)
    if dtype == "bf16":
        with np.errstate(over="ignore"):
            return f32_to_bf16_bits(v.astype(np.float32))
    with np.errstate(over="ignore"):
        return v.astype(STORAGE[dtype])


def from_storage(arr, dtype):
    """Exact values (float64, int64 or bool) of a storage array."""
    if dtype == "bool":
        return np.asarray(arr, dtype=bool)
    if dtype in INT:
        return np.asarray(arr).astype(np.int64)
    if dtype == "bf16":
        return bf16_bits_to_f64(arr)
    return np.asarray(arr).astype(np.float64)


def exact(values, dtype):
    """values rounded to what dtype holds, as exact values."""
    return from_storage(to_storage(values, dtype), dtype)


def saturate_to_int(values, dtype):
    """Float -> integer as Loom's cast: truncate, saturate, NaN -> 0."""
    lo, hi = INT_RANGE[dtype]
    v = np.nan_to_num(np.trunc(np.asarray(values, dtype=np.float64)), nan=0.0,
                      posinf=float(hi), neginf=float(lo))
    out = np.where(v >= float(hi), hi, np.where(v <= float(lo), lo, 0))
    mid = (v > float(lo)) & (v < float(hi))
    mid_vals = np.where(mid, v, 0).astype(np.int64)
    return np.where(mid, mid_vals, out).astype(np.int64)


def random_values(rng, dtype, shape, lo=-3.0, hi=3.0, ilo=-5, ihi=5):
    """Exact random values of dtype: floats uniform in [lo, hi], integers in
    [ilo, ihi], bool fair coins."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INT:
        a, b = INT_RANGE[dtype]
        return rng.integers(max(ilo, a), min(ihi, b) + 1, size=shape).astype(np.int64)
    return exact(rng.uniform(lo, hi, size=shape), dtype)


def compare(got, want, dtype):
    """(error, ok): the largest |got - want| / (1 + |want|) for floats (NaN
    matches NaN, infinities match exactly), the largest |got - want| for
    integers and bool."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return float("inf"), False
    if got.size == 0:
        return 0.0, True
    if dtype not in FLOAT:
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        err = float(diff.max())
        return err, err == 0
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    same_inf = np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g - w) / (1.0 + np.abs(w))
    err = np.where(both_nan | same_inf, 0.0, err)
    err = np.where(np.isnan(err), np.inf, err)
    e = float(err.max())
    return e, e <= TOL[dtype]
