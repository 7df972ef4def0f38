"""Generators, random numbers, nonzero and assign.

Random ops are checked by their documented distribution (range, mean,
spread), determinism (same seed and offset: same numbers) and freshness
(another offset: other numbers), not value by value."""
import math

import numpy as np

from conform import ACCEPTED, Arg, Case, execute, noncontig, op, rand_shape
from dtypes import ALL, FLOAT, INT, LOOM, compare, exact, from_storage, \
    random_values, saturate_to_int, to_storage
from loomlib import Graph

N_CASES = 24


@op("arange")
def gen_arange(name, rng):
    for i in range(N_CASES):
        dtype = ["f32", "f64", "f16", "bf16", "i32", "i64", "i8"][i % 7]
        if dtype in INT:
            start, delta = float(rng.integers(-5, 5)), float(rng.choice([1, 2, 3, -1, -2]))
            limit = start + delta * float(rng.integers(0, 8)) + float(rng.choice([0, 0.5]))
        else:
            start, delta = float(rng.uniform(-3, 3)), float(rng.choice([0.5, 0.25, 1.5, -0.75]))
            limit = start + delta * float(rng.uniform(0, 10))
        n = max(int(math.ceil((limit - start) / delta)), 0)
        vals = start + np.arange(n) * delta
        want = vals.astype(np.int64) if dtype in INT else vals
        yield Case("arange %s %g,%g,%g" % (dtype, start, limit, delta), [],
                   lambda G, s=start, l=limit, d=delta, t=dtype: G.op("arange", s, l, d, LOOM[t]),
                   want=[(want, dtype)])
    yield Case("arange delta 0", [], lambda G: G.op("arange", 0.0, 1.0, 0.0, LOOM["f32"]),
               error="LOOM_ERR_INVALID")


@op("full")
def gen_full(name, rng):
    for i, dtype in enumerate(ALL + ALL):
        shape = rand_shape(rng)
        value = float(rng.integers(-3, 4)) + (0.5 if dtype in FLOAT else 0.0)
        if dtype == "bool":
            value = float(rng.integers(0, 2))
        want = np.full(shape, value)
        if dtype in INT:
            want = want.astype(np.int64)
        yield Case("full %s %s value=%g" % (dtype, shape, value), [],
                   lambda G, s=shape, v=value, t=dtype: G.op("full", len(s), list(s), v, LOOM[t]),
                   want=[(want, dtype)])


def scalar(v):
    return Arg(np.array(v, dtype=np.int64), "i64")


def random_case(name, dtype, shape, a, b, seed, offsets):
    """Runs three draws: two with offsets[0] (must agree), one with
    offsets[1] (must differ); checks the first against the distribution."""
    def build(G, s, o1, o2):
        f = lambda o: G.op(name, s, o, len(shape), list(shape), a, b, LOOM[dtype])
        return [f(o1), f(o1), f(o2)]

    def custom(L):
        case = Case("", [scalar(seed), scalar(offsets[0]), scalar(offsets[1])], build)
        outs = execute(L, case)
        (dt, r1), (_, r2), (_, r3) = outs
        if dt != dtype or r1.shape != tuple(shape):
            return math.inf, False, "got %s%s, want %s%s" % (dt, r1.shape, dtype, tuple(shape))
        if not np.array_equal(r1, r2, equal_nan=True):
            return math.inf, False, "same seed and offset gave different numbers"
        if r1.size >= 16 and np.array_equal(r1, r3):
            return math.inf, False, "another offset gave the same numbers"
        return distribution_error(name, dtype, r1, a, b)
    return Case("%s %s %s (%g, %g) seed=%d offsets=%s" % (name, dtype, shape, a, b, seed, offsets),
                [], None, custom=custom)


def distribution_error(name, dtype, r, a, b):
    n = r.size
    if n == 0:
        return 0.0, True, ""
    if name == "random_uniform":
        # Bounds as the dtype holds them: rounding may reach either one.
        lo, hi = exact(a, dtype), exact(b, dtype)
        hi_ok = r < hi if dtype == "f64" else r <= hi
        if not np.all((r >= lo) & hi_ok):
            return math.inf, False, "values outside [%g, %g): %s" % (a, b, r[~((r >= a) & hi_ok)][:8])
        mu, sd = (a + b) / 2, (b - a) / math.sqrt(12)
    else:
        mu, sd = a, b
    # Both statistics within 6 standard errors of the truth.
    err_mean = abs(r.mean() - mu) / (sd / math.sqrt(n))
    err_sd = abs(r.std() - sd) / (sd / math.sqrt(2 * n))
    err = max(err_mean, err_sd)
    if err > 6:
        return err, False, "mean %.5g std %.5g, want %.5g and %.5g" % (r.mean(), r.std(), mu, sd)
    if name == "random_normal":
        # The share within one std of the mean: 68.27% for a normal.
        share = np.mean(np.abs(r - mu) < sd)
        if abs(share - 0.6827) > 6 * math.sqrt(0.6827 * 0.3173 / n):
            return err, False, "%.4f within one std, want 0.6827" % share
    return err / 6 * 1e-9, True, ""


@op("random_uniform", "random_normal")
def gen_random(name, rng):
    for i in range(8):
        dtype = FLOAT[i % 4]
        shape = [int(rng.integers(40, 80)), int(rng.integers(40, 80))] if i < 6 else \
            rand_shape(rng, hi=3)
        a, b = (float(rng.uniform(-2, 0)), float(rng.uniform(0.5, 3)))
        seed = int(rng.integers(0, 2**40))
        off = int(rng.integers(0, 1000))
        yield random_case(name, dtype, shape, a, b, seed, (off, off + 1 + int(rng.integers(0, 5))))


def dropout_case(dtype, shape, p, seed, rng):
    x = random_values(rng, dtype, shape, 0.5, 3, 1, 5)

    def build(G, xv, s, o1, o2):
        y1, m1 = G.op("dropout", xv, s, o1, p)
        y2, m2 = G.op("dropout", xv, s, o1, p)
        y3, m3 = G.op("dropout", xv, s, o2, p)
        return [y1, m1, y2, m2, m3]

    def custom(L):
        case = Case("", [Arg(x, dtype, noncontig(rng)), scalar(seed), scalar(7), scalar(8)], build)
        (ydt, y), (mdt, m), (_, y2), (_, m2), (_, m3) = execute(L, case)
        if ydt != dtype or mdt != "bool" or y.shape != x.shape or m.shape != x.shape:
            return math.inf, False, "outputs %s%s, %s%s" % (ydt, y.shape, mdt, m.shape)
        if not (np.array_equal(m, m2) and np.array_equal(y, y2)):
            return math.inf, False, "same seed and offset gave different masks"
        if m.size >= 64 and np.array_equal(m, m3) and 0 < p < 1:
            return math.inf, False, "another offset gave the same mask"
        ideal = x * m / (1 - p)
        want = saturate_to_int(ideal, dtype) if dtype in INT else ideal
        err, ok = compare(y, exact(want, dtype), dtype)
        if not ok:
            return err, False, "y != x*mask/(1-p): %s vs %s" % (y.ravel()[:8], want.ravel()[:8])
        keep = m.mean() if m.size else 1 - p
        se = math.sqrt(max(p * (1 - p), 1e-12) / max(m.size, 1))
        if abs(keep - (1 - p)) > 6 * se + 1e-12:
            return math.inf, False, "kept %.4f, want %.4f" % (keep, 1 - p)
        return err, True, ""
    return Case("dropout %s %s p=%g" % (dtype, shape, p), [], None, custom=custom,
                dtype=dtype)


@op("dropout")
def gen_dropout(name, rng):
    # The dtypes the op table lets dropout take.
    for i, dtype in enumerate(d for d in FLOAT + FLOAT + ["i32", "i64"]
                              if d in ACCEPTED["dropout"]):
        shape = [int(rng.integers(20, 60)), int(rng.integers(20, 60))] if i % 3 else \
            list(rand_shape(rng, hi=4))
        p = float(rng.choice([0.0, 0.1, 0.5, 0.9]))
        yield dropout_case(dtype, shape, p, int(rng.integers(0, 2**40)), rng)


@op("nonzero")
def gen_nonzero(name, rng):
    for i in range(2 * len(ALL)):
        dtype = ALL[i % len(ALL)]
        shape = rand_shape(rng, lo_rank=1)
        x = random_values(rng, dtype, shape)
        if dtype != "bool":
            x = np.where(rng.random(shape) < 0.5, np.zeros_like(x), x)
        yield Case("nonzero %s" % dtype, [Arg(x, dtype, noncontig(rng))],
                   lambda G, v: G.op("nonzero", v),
                   want=[(np.argwhere(x).astype(np.int64), "i64")])


def assign_case(dtype, shape, rng):
    vals = [random_values(rng, dtype, shape) for _ in range(2)]

    def custom(L):
        with Graph(L) as G:
            p = G.param(dtype, list(shape))
            v = G.input(dtype, list(shape), "v")
            G.output(G.op("identity", p))
            G.op("assign", p, v)
            seen = []
            for val in vals:
                arr = np.asarray(to_storage(val, dtype))
                t = L.wrap(arr, dtype)
                try:
                    (dt, out), = G.run([t])
                finally:
                    L.c.loom_tensor_destroy(t)
                seen.append(from_storage(out, dt))
                _, held = L.read(G.param_tensor(p))
                held = from_storage(held, dtype)
                if not np.array_equal(held, val):
                    return math.inf, False, "the parameter holds %s, want %s" % (
                        held.ravel()[:8], val.ravel()[:8])
        # Reads during a run see the value from before it.
        zero = np.zeros(shape, dtype=vals[0].dtype)
        if not (np.array_equal(seen[0], zero) and np.array_equal(seen[1], vals[0])):
            return math.inf, False, "reads saw %s then %s" % (seen[0].ravel()[:6], seen[1].ravel()[:6])
        return 0.0, True, ""
    return Case("assign %s %s" % (dtype, shape), [], None, custom=custom, dtype=dtype)


@op("assign")
def gen_assign(name, rng):
    for dtype in ALL:
        yield assign_case(dtype, rand_shape(rng), rng)
    yield Case("assign to an input", [Arg(np.zeros(2), "f32"), Arg(np.zeros(2), "f32")],
               lambda G, a, b: [G.op("assign", a, b)] and [], error="LOOM_ERR_INVALID")
