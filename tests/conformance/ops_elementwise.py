"""Elementwise ops: unary, binary (broadcasting), compare, where, cast."""
import math

import numpy as np

from conform import Arg, Case, broadcast_partner, noncontig, op, rand_shape, \
    stride0_arg
from dtypes import ALL, FLOAT, INT, LOOM, NUMERIC, exact, is_float, random_values, \
    saturate_to_int

N_CASES = 16
erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# name -> (reference on exact values, float input range)
UNARY_FLOAT = {
    "exp": (np.exp, (-5, 5)),
    "log": (np.log, (0.01, 10)),
    "log1p": (np.log1p, (-0.99, 10)),
    "expm1": (np.expm1, (-5, 5)),
    "sqrt": (np.sqrt, (0, 10)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), (0.01, 10)),
    "reciprocal": (lambda x: 1.0 / x, (-5, 5)),
    "tanh": (np.tanh, (-6, 6)),
    "sigmoid": (sigmoid, (-12, 12)),
    "gelu": (lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))), (-6, 6)),
    "gelu_tanh": (lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) *
                                                      (x + 0.044715 * x ** 3))),
                  (-6, 6)),
    "silu": (lambda x: x * sigmoid(x), (-12, 12)),
    "softplus": (lambda x: np.logaddexp(0.0, x), (-30, 30)),
    "sin": (np.sin, (-7, 7)),
    "cos": (np.cos, (-7, 7)),
    "tan": (np.tan, (-1.5, 1.5)),
    "asin": (np.arcsin, (-1, 1)),
    "acos": (np.arccos, (-1, 1)),
    "atan": (np.arctan, (-20, 20)),
    "sinh": (np.sinh, (-8, 8)),
    "cosh": (np.cosh, (-8, 8)),
    "asinh": (np.arcsinh, (-20, 20)),
    "acosh": (np.arccosh, (1, 20)),
    "atanh": (np.arctanh, (-0.99, 0.99)),
    "erf": (erf, (-4, 4)),
    "floor": (np.floor, (-5, 5)),
    "ceil": (np.ceil, (-5, 5)),
    "round": (np.round, (-5, 5)),
}

# name -> reference on exact values (float64 or int64).
UNARY_NUMERIC = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, 0),  # NaN stays NaN
    "sign": np.sign,
}


def unary_input(rng, name, dtype, rng_range=(-3, 3)):
    shape = rand_shape(rng)
    if dtype in INT and rng.random() < 0.3:
        return random_values(rng, dtype, shape, ilo=-128, ihi=127), shape
    x = random_values(rng, dtype, shape, *rng_range)
    if is_float(dtype) and rng.random() < 0.25:
        # IEEE specials: NaN propagates, infinities give the limits.
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
        x = np.where(rng.random(shape) < 0.3, rng.choice(specials, size=shape), x)
    if name == "round" and is_float(dtype):
        # Ties must round to even.
        halves = exact(rng.integers(-10, 11, size=shape) / 2.0, dtype)
        x = np.where(rng.random(shape) < 0.5, halves, x)
    return x, shape


def unary_case(rng, name, dtype, ref, rng_range, build=None, out_dtype=None):
    x, shape = unary_input(rng, name, dtype, rng_range)
    fn = build or (lambda G, v: G.op(name, v))
    arg = stride0_arg(rng, x, dtype)
    return Case("%s %s" % (name, dtype), [arg], fn,
                want=[(ref(arg.values), out_dtype or dtype)])


def reject_case(name, dtype, n_in=1, extra=()):
    """An op given a dtype it does not accept must fail with LOOM_ERR_DTYPE."""
    args = [Arg(np.zeros((2,), dtype=np.int64 if dtype != "bool" else bool), dtype)
            for _ in range(n_in)]
    return Case("%s rejects %s" % (name, dtype), args,
                lambda G, *v: G.op(name, *v, *extra), error="LOOM_ERR_DTYPE")


@op(*UNARY_FLOAT)
def gen_unary_float(name, rng):
    ref, r = UNARY_FLOAT[name]
    for i in range(N_CASES):
        yield unary_case(rng, name, FLOAT[i % 4], ref, r)
    yield reject_case(name, "i32")


@op(*UNARY_NUMERIC)
def gen_unary_numeric(name, rng):
    ref = UNARY_NUMERIC[name]
    for i in range(4 * len(NUMERIC)):
        yield unary_case(rng, name, NUMERIC[i % len(NUMERIC)], ref, (-3, 3))
    yield reject_case(name, "bool")


@op("leaky_relu", "elu")
def gen_alpha(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        # Every third case: the documented default alpha.
        a = float(rng.uniform(0, 2)) if i % 3 else (0.01 if name == "leaky_relu" else 1.0)
        if name == "leaky_relu":
            ref = lambda x, a=a: np.where(x > 0, x, a * x)
        else:
            ref = lambda x, a=a: np.where(x > 0, x, a * np.expm1(x))
        yield unary_case(rng, name, dtype, ref, (-5, 5),
                         build=lambda G, v, a=a: G.op(name, v, a))


@op("isnan")
def gen_isnan(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        shape = rand_shape(rng)
        x = random_values(rng, dtype, shape)
        pick = rng.random(shape)
        x = np.where(pick < 0.3, np.nan, np.where(pick > 0.85, np.inf, x))
        yield Case("isnan %s" % dtype, [Arg(x, dtype, noncontig(rng))],
                   lambda G, v: G.op("isnan", v), want=[(np.isnan(x), "bool")])
    yield reject_case(name, "i8")


@op("not", "identity", "stop_gradient")
def gen_not_identity(name, rng):
    for i in range(4 * len(ALL)):
        dtype = ALL[i % len(ALL)]
        shape = rand_shape(rng)
        x = random_values(rng, dtype, shape)
        if dtype != "bool":
            x = np.where(rng.random(shape) < 0.3, np.zeros_like(x), x)
        want = (x == 0, "bool") if name == "not" else (x, dtype)
        yield Case("%s %s" % (name, dtype), [Arg(x, dtype, noncontig(rng))],
                   lambda G, v: G.op(name, v), want=[want])


def cast_ref(x, src, dst):
    if dst == "bool":
        return x != 0
    if dst in INT and src in FLOAT:
        return saturate_to_int(x, dst)
    if dst in INT:
        return x.astype(np.int64)
    return x.astype(np.float64)


@op("cast")
def gen_cast(name, rng):
    for src in ALL:
        for dst in ALL:
            shape = rand_shape(rng)
            # Floats stay inside every integer range: the doc says only
            # that float to int truncates.
            x = random_values(rng, src, shape, -100, 100, -100, 100)
            yield Case("cast %s->%s" % (src, dst), [Arg(x, src, noncontig(rng))],
                       lambda G, v, dst=dst: G.op("cast", v, LOOM[dst]),
                       want=[(cast_ref(x, src, dst), dst)])


@op("clamp")
def gen_clamp(name, rng):
    for i in range(4 * len(NUMERIC)):
        dtype = NUMERIC[i % len(NUMERIC)]
        lo, hi = sorted(int(v) for v in rng.integers(-4, 5, size=2))
        if is_float(dtype):
            lo, hi = lo + float(rng.uniform(0, 0.9)), hi + float(rng.uniform(0, 0.9))
            lo, hi = min(lo, hi), max(lo, hi)
        if i % 7 == 3:
            lo, hi = hi + 1, lo  # lo > hi: min(max(x, lo), hi) is hi
        if i % 5 == 1:
            lo = -math.inf
        if i % 5 == 2:
            hi = math.inf
        ref = lambda x, lo=lo, hi=hi: _clamp_ref(x, lo, hi)
        yield unary_case(rng, "clamp", dtype, ref, (-5, 5),
                         build=lambda G, v, lo=lo, hi=hi: G.op("clamp", v, lo, hi))
    yield reject_case(name, "bool", extra=(0.0, 1.0))


def _clamp_ref(x, lo, hi):
    if x.dtype.kind == "f":
        return np.minimum(np.maximum(x, lo), hi)
    lo_i = -2**63 if lo == -math.inf else int(lo)
    hi_i = 2**63 - 1 if hi == math.inf else int(hi)
    return np.minimum(np.maximum(x, lo_i), hi_i)


# ---- binary ----------------------------------------------------------------

def floor_div(a, b):
    if a.dtype.kind == "f":
        return a / b
    return np.floor_divide(a, b)


def int_pow(a, b):
    out = np.ones(np.broadcast(a, b).shape, dtype=np.int64)
    base = np.broadcast_to(a, out.shape).copy()
    e = np.broadcast_to(b, out.shape).copy()
    while np.any(e > 0):
        out = np.where(e & 1, out * base, out)
        base = base * base
        e = e >> 1
    return out


BINARY = {
    "add": (np.add, NUMERIC),
    "sub": (np.subtract, NUMERIC),
    "mul": (np.multiply, NUMERIC),
    "div": (floor_div, NUMERIC),
    "pow": (lambda a, b: np.power(a, b) if a.dtype.kind == "f" else int_pow(a, b),
            NUMERIC),
    "maximum": (np.maximum, NUMERIC),
    "minimum": (np.minimum, NUMERIC),
    "mod": (np.mod, NUMERIC),
    "eq": (np.equal, ALL),
    "ne": (np.not_equal, ALL),
    "lt": (np.less, NUMERIC),
    "le": (np.less_equal, NUMERIC),
    "gt": (np.greater, NUMERIC),
    "ge": (np.greater_equal, NUMERIC),
    "and": (np.logical_and, ALL),
    "or": (np.logical_or, ALL),
    "xor": (np.logical_xor, ALL),
}
BOOL_RESULT = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}


def binary_inputs(rng, name, dtype):
    sa = rand_shape(rng)
    sb = broadcast_partner(rng, sa)
    if rng.random() < 0.5:
        sa, sb = sb, sa
    wide = dtype in INT and name in ("add", "sub", "mul") and rng.random() < 0.4
    a = random_values(rng, dtype, sa, ilo=-128 if wide else -5, ihi=127 if wide else 5)
    b = random_values(rng, dtype, sb, ilo=-128 if wide else -5, ihi=127 if wide else 5)
    if name == "pow":
        if is_float(dtype):
            a = random_values(rng, dtype, sa, 0.1, 3)
        else:
            b = random_values(rng, dtype, sb, ilo=0, ihi=5)
    if name in ("div", "mod"):
        b = np.where(b == 0, np.ones_like(b), b)
    if name in BOOL_RESULT and dtype != "bool":
        # Equal pairs matter for comparisons: draw b from a's values.
        if a.size and rng.random() < 0.5:
            b = np.where(rng.random(sb) < 0.5, rng.choice(a.ravel(), size=sb), b)
    if name in ("maximum", "minimum") and is_float(dtype):
        a = np.where(rng.random(sa) < 0.15, np.nan, a)
    return a, b


@op(*BINARY)
def gen_binary(name, rng):
    ref, dtypes = BINARY[name]
    for i in range(4 * len(dtypes)):
        dtype = dtypes[i % len(dtypes)]
        a, b = binary_inputs(rng, name, dtype)
        out_dt = "bool" if name in BOOL_RESULT else dtype
        yield Case("%s %s" % (name, dtype),
                   [Arg(a, dtype, noncontig(rng)), Arg(b, dtype, noncontig(rng))],
                   lambda G, x, y: G.op(name, x, y), want=[(ref(a, b), out_dt)])
    yield Case("%s f32,f64" % name, [Arg(np.zeros(2), "f32"), Arg(np.zeros(2), "f64")],
               lambda G, x, y: G.op(name, x, y), error="LOOM_ERR_DTYPE")
    yield Case("%s (2,3),(4,)" % name,
               [Arg(np.zeros((2, 3)), "f32"), Arg(np.zeros(4), "f32")],
               lambda G, x, y: G.op(name, x, y), error="LOOM_ERR_SHAPE")
    if name in ("div", "mod"):
        yield Case("%s i32 by zero" % name,
                   [Arg(np.array([3, 4]), "i32"), Arg(np.array([1, 0]), "i32")],
                   lambda G, x, y: G.op(name, x, y), error="LOOM_ERR_VALUE")
    if "bool" not in dtypes:
        yield reject_case(name, "bool", 2)


# ---- bitwise ---------------------------------------------------------------

INTEGRAL = INT + ["bool"]
BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
           "bitwise_xor": np.bitwise_xor}


def bit_values(rng, dtype, shape):
    """Integers over much of the dtype's range (negatives among them), or
    fair coins for bool."""
    return random_values(rng, dtype, shape, ilo=-2**40, ihi=2**40)


def shift_left(a, b):
    """In int64 (to_storage wraps it to the dtype); a shift by b < 0 or
    b >= 64 gives 0, as the op table says (PyTorch 2's)."""
    out = np.left_shift(a, np.clip(b, 0, 63))
    return np.where((b < 0) | (b >= 64), 0, out)


def shift_right(a, b):
    """Arithmetic; b < 0 or b >= 64 gives the sign (0 or -1)."""
    out = np.right_shift(a, np.clip(b, 0, 63))
    return np.where((b < 0) | (b >= 64), np.where(a < 0, -1, 0), out)


SHIFTS = {"bitshift_left": shift_left, "bitshift_right": shift_right}
WIDTH = {"i8": 8, "i32": 32, "i64": 64}


def broadcast_shapes(rng):
    sa = rand_shape(rng)
    sb = broadcast_partner(rng, sa)
    return (sb, sa) if rng.random() < 0.5 else (sa, sb)


def shape_mismatch(name):
    """A binary integer op on shapes that do not broadcast."""
    return Case("%s (2,3),(4,)" % name,
                [Arg(np.zeros((2, 3), dtype=np.int64), "i32"),
                 Arg(np.zeros(4, dtype=np.int64), "i32")],
                lambda G, x, y: G.op(name, x, y), error="LOOM_ERR_SHAPE")


@op(*BITWISE)
def gen_bitwise(name, rng):
    ref = BITWISE[name]
    for i in range(4 * len(INTEGRAL)):
        dtype = INTEGRAL[i % len(INTEGRAL)]
        sa, sb = broadcast_shapes(rng)
        a, b = bit_values(rng, dtype, sa), bit_values(rng, dtype, sb)
        yield Case("%s %s" % (name, dtype),
                   [Arg(a, dtype, noncontig(rng)), Arg(b, dtype, noncontig(rng))],
                   lambda G, x, y: G.op(name, x, y), want=[(ref(a, b), dtype)])
    yield shape_mismatch(name)
    yield Case("%s i32,i64" % name,
               [Arg(np.zeros(2, dtype=np.int64), "i32"), Arg(np.zeros(2, dtype=np.int64), "i64")],
               lambda G, x, y: G.op(name, x, y), error="LOOM_ERR_DTYPE")


@op("bitwise_not")
def gen_bitwise_not(name, rng):
    for i in range(4 * len(INTEGRAL)):
        dtype = INTEGRAL[i % len(INTEGRAL)]
        x = bit_values(rng, dtype, rand_shape(rng))
        arg = stride0_arg(rng, x, dtype)
        yield Case("%s %s" % (name, dtype), [arg], lambda G, v: G.op(name, v),
                   want=[(np.invert(arg.values), dtype)])


@op(*SHIFTS)
def gen_shift(name, rng):
    ref = SHIFTS[name]
    for i in range(4 * len(INT)):
        dtype = INT[i % len(INT)]
        sa, sb = broadcast_shapes(rng)
        a = bit_values(rng, dtype, sa)
        # Amounts inside the width mostly; negative ones, the width and past it too.
        w = WIDTH[dtype]
        b = random_values(rng, dtype, sb, ilo=0, ihi=w - 1)
        edges = random_values(rng, dtype, sb, ilo=-3, ihi=w + 70)
        b = np.where(rng.random(sb) < 0.3, edges, b)
        yield Case("%s %s" % (name, dtype),
                   [Arg(a, dtype, noncontig(rng)), Arg(b, dtype, noncontig(rng))],
                   lambda G, x, y: G.op(name, x, y), want=[(ref(a, b), dtype)])
    yield shape_mismatch(name)


@op("where")
def gen_where(name, rng):
    for i in range(4 * len(ALL)):
        dtype = ALL[i % len(ALL)]
        shapes = [rand_shape(rng)]
        shapes += [broadcast_partner(rng, shapes[0]) for _ in range(2)]
        rng.shuffle(shapes)
        c = random_values(rng, "bool", shapes[0])
        a = random_values(rng, dtype, shapes[1])
        b = random_values(rng, dtype, shapes[2])
        yield Case("where %s" % dtype,
                   [Arg(c, "bool", noncontig(rng)), Arg(a, dtype, noncontig(rng)),
                    Arg(b, dtype, noncontig(rng))],
                   lambda G, *v: G.op("where", *v), want=[(np.where(c, a, b), dtype)],
                   dtype=dtype)
    yield Case("where f32 condition",
               [Arg(np.zeros(2), "f32"), Arg(np.zeros(2), "f32"), Arg(np.zeros(2), "f32")],
               lambda G, *v: G.op("where", *v), error="LOOM_ERR_DTYPE")
