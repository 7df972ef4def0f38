"""Collectives on a communicator of this process alone (one rank): each
returns its input (a sum, mean or maximum over one rank, a broadcast from
it, a gather of it, its only part), which checks the kernels' plumbing in
every dtype, strided inputs and symbolic dims. tests/test_comm.c checks the
values across two ranks."""
import ctypes as C

import numpy as np

from conform import Arg, Case, noncontig, op, rand_shape
from dtypes import ALL, random_values

REDUCIBLE = ["f32", "f64", "i8", "i32", "i64"]
_COMM = []


def comm(L):
    """The process's communicator, made on first use (kept to the end)."""
    if not _COMM:
        c = C.c_void_p()
        L.check(L.c.loom_comm_world(C.byref(c)), "loom_comm_world")
        _COMM.append(c.value)
    return _COMM[0]


def same(name, dtype, shape, rng, extra):
    x = random_values(rng, dtype, shape)
    return Case("%s %s %s %s" % (name, dtype, shape, extra),
                [Arg(x, dtype, noncontig(rng))],
                lambda G, v: G.op(name, comm(G.L), v, *extra), want=[(x, dtype)])


@op("all_reduce")
def gen_all_reduce(name, rng):
    for dtype in REDUCIBLE:
        for reduce in (0, 1, 2) if dtype[0] == "f" else (0, 2):
            yield same(name, dtype, rand_shape(rng), rng, (reduce,))
    yield Case("all_reduce of bool", [Arg(np.ones(3, bool), "bool")],
               lambda G, v: G.op(name, comm(G.L), v, 0), error="LOOM_ERR_DTYPE")
    yield Case("the mean of i32", [Arg(np.ones(3), "i32")],
               lambda G, v: G.op(name, comm(G.L), v, 1), error="LOOM_ERR_DTYPE")


@op("broadcast")
def gen_broadcast(name, rng):
    for dtype in ALL:
        yield same(name, dtype, rand_shape(rng), rng, (0,))
    yield Case("broadcast from rank 1 of 1", [Arg(np.ones(3), "f32")],
               lambda G, v: G.op(name, comm(G.L), v, 1), error="LOOM_ERR_SHAPE")


@op("all_gather")
def gen_all_gather(name, rng):
    for dtype in ALL:
        yield same(name, dtype, rand_shape(rng, lo_rank=1), rng, ())
    yield Case("all_gather of a scalar", [Arg(np.float32(1), "f32")],
               lambda G, v: G.op(name, comm(G.L), v), error="LOOM_ERR_SHAPE")


@op("reduce_scatter")
def gen_reduce_scatter(name, rng):
    for dtype in REDUCIBLE:
        yield same(name, dtype, rand_shape(rng, lo_rank=1), rng, (0,))


def halves(dtype, shape, rng, reduce):
    x = random_values(rng, dtype, shape)

    def build(G, v):
        started = G.op("all_reduce_start", comm(G.L), v, reduce)
        return G.op("all_reduce_wait", comm(G.L), started)
    return Case("all_reduce_start/wait %s %s %d" % (dtype, shape, reduce),
                [Arg(x, dtype, noncontig(rng))], build, want=[(x, dtype)])


@op("all_reduce_start", "all_reduce_wait")
def gen_all_reduce_halves(name, rng):
    for dtype in REDUCIBLE:
        for reduce in (0, 1, 2) if dtype[0] == "f" else (0, 2):
            yield halves(dtype, rand_shape(rng), rng, reduce)
    if name == "all_reduce_wait":
        yield Case("a wait on a buffer no start began", [Arg(np.ones(3), "f32")],
                   lambda G, v: G.op(name, comm(G.L), v), error="LOOM_ERR_INVALID")
