"""Control flow: if and loop, whose branches and bodies are subgraphs
built here with the same bindings; NumPy computes what they should
give (the branch taken, the loop run step by step)."""
import ctypes as C

import numpy as np

from conform import Arg, Case, noncontig, op, rand_shape
from dtypes import INT, LOOM, random_values
from loomlib import Graph, Value

N_CASES = 16
NO_VALUE = Value(-1)
DATA = ["f32", "f64", "i32", "i64"]


def subgraph(L, inputs, body):
    """A detached subgraph: inputs [(dtype, shape)], body(S, *values) ->
    output values. The caller hands it to if/loop, which owns it."""
    S = Graph(L)
    vals = [S.input(dt, list(shape), "s%d" % i) for i, (dt, shape) in enumerate(inputs)]
    outs = body(S, *vals)
    for o in outs:
        S.output(o)
    g, S.g = S.g, None  # the outer graph takes it
    return g


def const(S, dtype, value):
    return S.op("full", 0, [], float(value), LOOM[dtype])


def call_if(G, cond, then_g, else_g, ins, n_out):
    fn, _ = G.L.builder("if")
    outs = (Value * max(n_out, 1))()
    G.L.check(fn(G.g, cond, then_g, else_g, len(ins), (Value * max(len(ins), 1))(*ins),
                 n_out, outs), "if")
    return [outs[i] for i in range(n_out)]


def call_loop(G, max_trip, cond, body, carried, invariants, n_out):
    fn, _ = G.L.builder("loop")
    outs = (Value * max(n_out, 1))()
    G.L.check(fn(G.g, max_trip, cond, body, len(carried),
                 (Value * max(len(carried), 1))(*carried), len(invariants),
                 (Value * max(len(invariants), 1))(*invariants), n_out, outs), "loop")
    return [outs[i] for i in range(n_out)]


# ---- if ---------------------------------------------------------------------

def if_build(dt, shape, swap_else_dtype=None):
    """cond ? (x*y, x+y) : (x-y, maximum(x, y)) over inputs x, y."""
    def build(G, c, x, y):
        L = G.L
        ins = [(dt, shape), (dt, shape)]
        then_g = subgraph(L, ins, lambda S, a, b: [S.op("mul", a, b), S.op("add", a, b)])

        def other(S, a, b):
            d = S.op("sub", a, b)
            if swap_else_dtype:
                d = S.op("cast", d, LOOM[swap_else_dtype])
            return [d, S.op("maximum", a, b)]
        else_g = subgraph(L, ins, other)
        return call_if(G, c, then_g, else_g, [x, y], 2)
    return build


@op("if")
def gen_if(name, rng):
    cond_dtypes = ["bool", "i8", "i32", "i64"]
    for i in range(N_CASES):
        cdt, dt = cond_dtypes[i % 4], DATA[(i // 4) % 4]
        shape = rand_shape(rng, lo_rank=0, hi_rank=3, lo=1, hi=4)
        taken = i % 2 == 0
        cval = np.array(bool(taken) if cdt == "bool" else (int(rng.integers(1, 5)) if taken else 0))
        x, y = random_values(rng, dt, shape), random_values(rng, dt, shape)
        want = [(x * y, dt), (x + y, dt)] if taken else [(x - y, dt), (np.maximum(x, y), dt)]
        yield Case("if %s cond=%s data %s%s" % (cdt, cval, dt, shape),
                   [Arg(cval, cdt), Arg(x, dt, noncontig(rng)), Arg(y, dt)],
                   if_build(dt, shape), want=want)
    shape = (2, 3)
    x = random_values(rng, "f32", shape)
    yield Case("if branches return f32 and f64", [Arg(np.array(True), "bool"), Arg(x, "f32"),
                                                  Arg(x, "f32")],
               if_build("f32", shape, swap_else_dtype="f64"), error="LOOM_ERR_SHAPE")
    yield Case("if cond of rank 1", [Arg(np.array([True]), "bool"), Arg(x, "f32"), Arg(x, "f32")],
               if_build("f32", shape), error="LOOM_ERR_SHAPE")
    yield from nested_if_cases(rng)


def nested_if_cases(rng):
    """c1 ? (c2 ? x*x : -x) : x + 1, the inner if in the then branch."""
    def build(G, c1, c2, x):
        L = G.L
        sx = [("f32", (3,))]

        def outer_then(S, c, a):
            t = subgraph(L, sx, lambda T, b: [T.op("mul", b, b)])
            e = subgraph(L, sx, lambda T, b: [T.op("neg", b)])
            return call_if(S, c, t, e, [a], 1)
        t = subgraph(L, [("bool", ()), ("f32", (3,))], outer_then)
        e = subgraph(L, [("bool", ()), ("f32", (3,))],
                     lambda S, c, a: [S.op("add", a, const(S, "f32", 1))])
        return call_if(G, c1, t, e, [c2, x], 1)
    for k in range(4):
        a, b = bool(k & 1), bool(k & 2)
        x = random_values(rng, "f32", (3,))
        want = (x * x if b else -x) if a else x + 1
        yield Case("nested if c1=%d c2=%d" % (a, b),
                   [Arg(np.array(a), "bool"), Arg(np.array(b), "bool"), Arg(x, "f32")],
                   build, want=[(want, "f32")])


# ---- loop -------------------------------------------------------------------

def affine_build(dt, shape):
    """acc = acc * a + b, max_trip times; scan output: each acc."""
    def body_fn(S, i, c, acc, a, b):
        nxt = S.op("add", S.op("mul", acc, a), b)
        return [c, nxt, nxt]

    def build(G, m, acc0, a, b):
        body = subgraph(G.L, [("i64", ()), ("bool", ()), (dt, shape), (dt, shape), (dt, shape)],
                        body_fn)
        return call_loop(G, m, NO_VALUE, body, [acc0], [a, b], 2)
    return build


def affine_want(m, acc, a, b, dt, shape):
    rows = []
    for _ in range(max(int(m), 0)):
        acc = acc * a + b
        rows.append(acc)
    scan = np.stack(rows) if rows else np.zeros((0,) + tuple(shape))
    if dt in INT:
        scan = scan.astype(np.int64)
    return [(acc, dt), (scan, dt)]


def doubling_build(limit):
    """while sum(x) < limit (and i < max_trip): x = 2x; scan: sum(x)."""
    def body_fn(S, i, c, x):
        x2 = S.op("mul", x, const(S, "f64", 2))
        s = S.op("sum", x2, 0, None, 0)
        return [S.op("lt", s, const(S, "f64", limit)), x2, s]

    def build(G, m, x):
        L = G.L
        c = G.op("lt", G.op("sum", x, 0, None, 0), const(G, "f64", limit))
        body = subgraph(L, [("i64", ()), ("bool", ()), ("f64", (3,))], body_fn)
        return call_loop(G, m, c, body, [x], [], 2)
    return build


@op("loop")
def gen_loop(name, rng):
    for i in range(N_CASES):
        mdt, dt = INT[i % 3], DATA[(i // 3) % 4]
        shape = rand_shape(rng, lo_rank=0, hi_rank=2, lo=1, hi=3)
        m = int(rng.integers(-1, 6))
        acc0 = random_values(rng, dt, shape, -1, 1, -2, 2)
        a = random_values(rng, dt, shape, -1.2, 1.2, -2, 2)
        b = random_values(rng, dt, shape, -1, 1, -3, 3)
        yield Case("loop affine max_trip=%d (%s) over %s%s" % (m, mdt, dt, shape),
                   [Arg(np.array(m), mdt), Arg(acc0, dt), Arg(a, dt, noncontig(rng)), Arg(b, dt)],
                   affine_build(dt, shape), want=affine_want(m, acc0, a, b, dt, shape))
    for k in range(4):
        x = np.abs(random_values(rng, "f64", (3,), 0.1, 2))
        limit, m = float(rng.uniform(5, 200)), int(rng.integers(2, 12))
        cur, sums = x, []
        while cur.sum() < limit and len(sums) < m:
            cur = cur * 2
            sums.append(cur.sum())
        yield Case("loop while sum(x) < %.3g, max_trip %d" % (limit, m),
                   [Arg(np.array(m), "i64"), Arg(x, "f64")], doubling_build(limit),
                   want=[(cur, "f64"), (np.array(sums), "f64")])
    x = random_values(rng, "f32", (2,))
    yield Case("loop carried f32 outside, f64 in the body",
               [Arg(np.array(3), "i64"), Arg(x, "f32"), Arg(x, "f32"), Arg(x, "f32")],
               affine_build("f64", (2,)), error="LOOM_ERR_SHAPE")
