"""Layout and indexing: data movement, checked exactly in every dtype."""
import numpy as np

from conform import Arg, Case, noncontig, op, rand_axes, rand_axis, rand_shape, \
    stride0_arg
from dtypes import ALL, INT, LOOM, NUMERIC, random_values

N_CASES = 32


def cases_over(dtypes, n=N_CASES):
    return [dtypes[i % len(dtypes)] for i in range(n)]


def layout_case(rng, desc, dtype, x, build, want, out_dtype=None):
    return Case(desc, [Arg(x, dtype, noncontig(rng))], build,
                want=[(want, out_dtype or dtype)])


@op("reshape")
def gen_reshape(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng)
        x = random_values(rng, dtype, shape)
        # A random factorization of the element count into a new shape.
        n = x.size
        new = []
        rest = n
        for _ in range(int(rng.integers(0, 4))):
            divs = [d for d in range(1, 7) if rest % d == 0] if rest else [0, 1, 2]
            d = int(rng.choice(divs))
            new.append(d)
            rest = rest // d if d else 0
        new.append(rest if n else 0)
        rng.shuffle(new)
        arg = list(new)
        if n and rng.random() < 0.5:
            arg[int(rng.integers(0, len(arg)))] = -1
        yield layout_case(rng, "reshape %s -> %s" % (dtype, arg), dtype, x,
                          lambda G, v, arg=arg: G.op("reshape", v, len(arg), arg),
                          x.reshape(new))
    yield Case("reshape 6 -> (4,)", [Arg(np.zeros(6), "f32")],
               lambda G, v: G.op("reshape", v, 1, [4]), error="LOOM_ERR_SHAPE")


@op("transpose")
def gen_transpose(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng)
        x = random_values(rng, dtype, shape)
        perm = None if rng.random() < 0.25 else [int(p) for p in rng.permutation(len(shape))]
        arg = stride0_arg(rng, x, dtype, 0.3)
        yield Case("transpose %s perm=%s" % (dtype, perm), [arg],
                   lambda G, v, p=perm: G.op("transpose", v, p),
                   want=[(np.transpose(arg.values, perm), dtype)])
    yield Case("transpose perm (0,0)", [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op("transpose", v, [0, 0]), error=("LOOM_ERR_AXIS", "LOOM_ERR_INVALID"))


@op("expand")
def gen_expand(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, hi_rank=3)
        target = list(rand_shape(rng, rank=int(rng.integers(0, 3)), lo=0, hi=3)) + \
            [d if d != 1 else int(rng.integers(0, 4)) for d in shape]
        x = random_values(rng, dtype, shape)
        yield layout_case(rng, "expand %s -> %s" % (dtype, target), dtype, x,
                          lambda G, v, t=target: G.op("expand", v, len(t), t),
                          np.broadcast_to(x, target))
    yield Case("expand (2,3) -> (4,3)", [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op("expand", v, 2, [4, 3]), error="LOOM_ERR_SHAPE")


@op("squeeze")
def gen_squeeze(name, rng):
    for dtype in cases_over(ALL):
        shape = tuple(1 if rng.random() < 0.5 else d for d in rand_shape(rng))
        x = random_values(rng, dtype, shape)
        ones = [i for i, d in enumerate(shape) if d == 1]
        if ones and rng.random() < 0.6:
            axes = [int(a) for a in rng.choice(ones, size=int(rng.integers(1, len(ones) + 1)),
                                                replace=False)]
            axes = [a - len(shape) if rng.random() < 0.5 else a for a in axes]
            want = np.squeeze(x, axis=tuple(axes))
        else:
            axes, want = [], np.squeeze(x)
        yield layout_case(rng, "squeeze %s axes=%s" % (dtype, axes), dtype, x,
                          lambda G, v, a=axes: G.op("squeeze", v, len(a), a or None), want)
    yield Case("squeeze a dim of size 3", [Arg(np.zeros((1, 3)), "f32")],
               lambda G, v: G.op("squeeze", v, 1, [1]), error=("LOOM_ERR_SHAPE", "LOOM_ERR_INVALID"))


@op("unsqueeze")
def gen_unsqueeze(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, hi_rank=3)
        x = random_values(rng, dtype, shape)
        out_rank = len(shape) + int(rng.integers(1, 3))
        axes = rand_axes(rng, out_rank)[:out_rank - len(shape)]
        while len(axes) < out_rank - len(shape):
            axes = rand_axes(rng, out_rank)[:out_rank - len(shape)]
        yield layout_case(rng, "unsqueeze %s axes=%s" % (dtype, axes), dtype, x,
                          lambda G, v, a=axes: G.op("unsqueeze", v, len(a), a),
                          np.expand_dims(x, tuple(axes)))
    yield Case("unsqueeze axis 3 of out rank 3", [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op("unsqueeze", v, 1, [3]), error="LOOM_ERR_AXIS")


@op("slice")
def gen_slice(name, rng):
    for dtype in cases_over(ALL, 64):
        shape = rand_shape(rng, lo_rank=1)
        x = random_values(rng, dtype, shape)
        axes = rand_axes(rng, len(shape))
        starts, ends, steps = [], [], []
        for a in axes:
            d = shape[a]
            starts.append(int(rng.choice([int(rng.integers(-d - 2, d + 3)), -100, 100])))
            ends.append(int(rng.choice([int(rng.integers(-d - 2, d + 3)), -100, 100, 2**62])))
            steps.append(int(rng.choice([1, 1, 2, 3, -1, -2])))
        with_steps = any(s != 1 for s in steps) or rng.random() < 0.5
        index = [slice(None)] * len(shape)
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(s, e, st)
        with_axes = rng.random() < 0.8 or axes != list(range(len(axes)))
        yield layout_case(
            rng, "slice %s starts=%s ends=%s axes=%s steps=%s" % (dtype, starts, ends, axes,
                                                                   steps if with_steps else None),
            dtype, x,
            lambda G, v, s=starts, e=ends, a=axes, st=steps, wa=with_axes, ws=with_steps:
            G.op("slice", v, len(s), s, e, a if wa else None, st if ws else None),
            x[tuple(index)])
    # Python's clamping at the edges, both directions, one axis at a time.
    x = np.arange(4).astype(np.float64)
    for s, e, st in [(-100, -100, -1), (-5, -10, -1), (-100, 2, -1), (100, -100, -1),
                     (-100, 100, 1), (100, -100, 1), (3, -5, -2), (-1, -5, -1), (5, 0, -1)]:
        yield Case("slice x=arange(4) [%d:%d:%d]" % (s, e, st), [Arg(x, "f64")],
                   lambda G, v, s=s, e=e, st=st: G.op("slice", v, 1, [s], [e], [0], [st]),
                   want=[(x[s:e:st], "f64")])
    yield Case("slice step 0", [Arg(np.zeros((4,)), "f32")],
               lambda G, v: G.op("slice", v, 1, [0], [4], [0], [0]), error="LOOM_ERR_INVALID")


@op("concat")
def gen_concat(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, lo_rank=1)
        axis = rand_axis(rng, len(shape))
        xs = []
        for _ in range(int(rng.integers(1, 4))):
            s = list(shape)
            s[axis] = int(rng.integers(0, 4))
            xs.append(random_values(rng, dtype, tuple(s)))
        yield Case("concat %s axis=%d n=%d" % (dtype, axis, len(xs)),
                   [Arg(x, dtype, noncontig(rng)) for x in xs],
                   lambda G, *v, a=axis: G.op("concat", len(v), list(v), a),
                   want=[(np.concatenate(xs, axis=axis), dtype)])
    yield Case("concat (2,3),(2,4) axis 0",
               [Arg(np.zeros((2, 3)), "f32"), Arg(np.zeros((2, 4)), "f32")],
               lambda G, *v: G.op("concat", 2, list(v), 0), error="LOOM_ERR_SHAPE")


@op("split")
def gen_split(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, lo_rank=1)
        x = random_values(rng, dtype, shape)
        axis = rand_axis(rng, len(shape))
        d = shape[axis]
        cuts = sorted(int(c) for c in rng.integers(0, d + 1, size=int(rng.integers(0, 3))))
        bounds = [0] + cuts + [d]
        sizes = [b - a for a, b in zip(bounds, bounds[1:])]
        parts = np.split(x, cuts, axis=axis)
        yield Case("split %s axis=%d sizes=%s" % (dtype, axis, sizes),
                   [Arg(x, dtype, noncontig(rng))],
                   lambda G, v, a=axis, s=sizes: G.split(v, a, s),
                   want=[(p, dtype) for p in parts])
    yield Case("split sizes 2+2 of 5", [Arg(np.zeros((5,)), "f32")],
               lambda G, v: G.split(v, 0, [2, 2]), error=("LOOM_ERR_SHAPE", "LOOM_ERR_INVALID"))


def crop_some(rng, shape, before, after):
    """Negative pads (crops, as PyTorch's F.pad) on some dims, keeping each
    dim's size, d + before + after, at 0 or more."""
    for k, d in enumerate(shape):
        if rng.random() < 0.4:
            before[k] = -int(rng.integers(0, d + 1))
        if rng.random() < 0.4:
            after[k] = -int(rng.integers(0, d + 1))
        if d + before[k] + after[k] < 0:
            after[k] = -(d + before[k])


def pad_ref(x, before, after, mode, kw):
    """NumPy's pad with the positive pads, then the negative ones cropped."""
    y = np.pad(x, [(max(b, 0), max(a, 0)) for b, a in zip(before, after)], mode=mode, **kw)
    return y[tuple(slice(-min(b, 0), n + min(a, 0)) for n, b, a in zip(y.shape, before, after))]


@op("pad")
def gen_pad(name, rng):
    modes = ["constant", "reflect", "edge"]
    for i, dtype in enumerate(cases_over(ALL, 64)):
        mode = modes[i % 3]
        lo = 2 if mode == "reflect" else (1 if mode == "edge" else 0)
        shape = rand_shape(rng, lo=lo)
        x = random_values(rng, dtype, shape)
        hi_pad = [max(d - 1, 0) if mode == "reflect" else 3 for d in shape]
        before = [int(rng.integers(0, h + 1)) for h in hi_pad]
        after = [int(rng.integers(0, h + 1)) for h in hi_pad]
        if i % 2:
            crop_some(rng, shape, before, after)
        value = 0.0
        kw = {}
        if mode == "constant":
            value = float(rng.integers(-3, 4)) if dtype != "bool" else float(rng.integers(0, 2))
            if dtype in ("f32", "f64"):
                value += 0.5
            kw = {"constant_values": value}
        want = pad_ref(x, before, after, mode, kw) if x.ndim else x
        yield layout_case(rng, "pad %s %s pads=%s value=%g" % (dtype, mode, before + after, value),
                          dtype, x,
                          lambda G, v, p=before + after, m=i % 3, val=value:
                          G.op("pad", v, p, m, val), want)
    yield Case("pad reflect 3 of dim 3", [Arg(np.zeros((3,)), "f32")],
               lambda G, v: G.op("pad", v, [3, 0], 1, 0.0), error=("LOOM_ERR_SHAPE", "LOOM_ERR_INVALID"))
    yield Case("pad crops 4 of dim 3", [Arg(np.zeros((3,)), "f32")],
               lambda G, v: G.op("pad", v, [-2, -2], 0, 0.0), error="LOOM_ERR_SHAPE")


@op("flip")
def gen_flip(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, lo_rank=1)
        x = random_values(rng, dtype, shape)
        axes = rand_axes(rng, len(shape))
        yield layout_case(rng, "flip %s axes=%s" % (dtype, axes), dtype, x,
                          lambda G, v, a=axes: G.op("flip", v, len(a), a),
                          np.flip(x, tuple(axes)))
    yield Case("flip axis 2 of rank 2", [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op("flip", v, 1, [2]), error="LOOM_ERR_AXIS")


@op("tile")
def gen_tile(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, hi=4)
        x = random_values(rng, dtype, shape)
        reps = [int(r) for r in rng.integers(0, 4, size=len(shape))]
        yield layout_case(rng, "tile %s repeats=%s" % (dtype, reps), dtype, x,
                          lambda G, v, r=reps: G.op("tile", v, r), np.tile(x, reps))


def index_dtype(rng):
    return INT[int(rng.integers(0, 3))]


@op("gather")
def gen_gather(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, lo_rank=1, lo=1)
        x = random_values(rng, dtype, shape)
        axis = rand_axis(rng, len(shape))
        d = shape[axis]
        ishape = rand_shape(rng, hi_rank=2, hi=4)
        # ONNX Gather: indices in [-d, d-1], negative counting from the end.
        idx = rng.integers(-d if rng.random() < 0.4 else 0, d, size=ishape)
        it = index_dtype(rng)
        yield Case("gather %s axis=%d indices %s%s" % (dtype, axis, it, list(idx.ravel()[:8])),
                   [Arg(x, dtype, noncontig(rng)), Arg(idx, it, noncontig(rng))],
                   lambda G, v, iv, a=axis: G.op("gather", v, iv, a),
                   want=[(np.take(x, idx, axis=axis), dtype)])
    yield Case("gather index out of range", [Arg(np.zeros((2, 3)), "f32"), Arg(np.array([3]), "i64")],
               lambda G, v, iv: G.op("gather", v, iv, 1), error="LOOM_ERR_VALUE")
    yield Case("gather float indices", [Arg(np.zeros((2, 3)), "f32"), Arg(np.array([1.0]), "f32")],
               lambda G, v, iv: G.op("gather", v, iv, 1), error="LOOM_ERR_DTYPE")


@op("index_select")
def gen_index_select(name, rng):
    for dtype in cases_over(ALL):
        shape = rand_shape(rng, lo_rank=1, lo=1)
        x = random_values(rng, dtype, shape)
        axis = rand_axis(rng, len(shape))
        idx = rng.integers(0, shape[axis], size=int(rng.integers(0, 6)))
        it = index_dtype(rng)
        yield Case("index_select %s axis=%d index %s%s" % (dtype, axis, it, list(idx)),
                   [Arg(x, dtype, noncontig(rng)), Arg(idx, it)],
                   lambda G, v, iv, a=axis: G.op("index_select", v, iv, a),
                   want=[(np.take(x, idx, axis=axis), dtype)])
    yield Case("index_select 2-D index", [Arg(np.zeros((2, 3)), "f32"),
                                         Arg(np.zeros((1, 1), dtype=np.int64), "i64")],
               lambda G, v, iv: G.op("index_select", v, iv, 1), error="LOOM_ERR_SHAPE")


def scatter_add_ref(self_, index, src, axis):
    out = self_.copy()
    for pos in np.ndindex(*index.shape):
        tgt = list(pos)
        tgt[axis] = index[pos]
        out[tuple(tgt)] += src[pos]
    return out


@op("scatter_add")
def gen_scatter_add(name, rng):
    for dtype in cases_over(NUMERIC):
        shape = rand_shape(rng, lo_rank=1, hi_rank=3, lo=1, hi=4)
        axis = rand_axis(rng, len(shape))
        self_ = random_values(rng, dtype, shape)
        # index no larger than src, and no larger than self off the axis.
        src_shape = tuple(int(rng.integers(1, 5)) if j == axis % len(shape) else d
                          for j, d in enumerate(shape))
        ishape = tuple(int(rng.integers(1, d + 1)) for d in src_shape)
        src = random_values(rng, dtype, src_shape)
        index = rng.integers(0, shape[axis], size=ishape)
        it = index_dtype(rng)
        yield Case("scatter_add %s axis=%d index %s%s" % (dtype, axis, it, ishape),
                   [Arg(self_, dtype, noncontig(rng)), Arg(index, it), Arg(src, dtype)],
                   lambda G, s, i, v, a=axis: G.op("scatter_add", s, i, v, a),
                   want=[(scatter_add_ref(self_, index, src, axis), dtype)])
    yield Case("scatter_add index out of range",
               [Arg(np.zeros((3,)), "f32"), Arg(np.array([3]), "i64"), Arg(np.ones(1), "f32")],
               lambda G, s, i, v: G.op("scatter_add", s, i, v, 0), error="LOOM_ERR_VALUE")


@op("embedding")
def gen_embedding(name, rng):
    for dtype in cases_over(ALL):
        v, d = (int(x) for x in rng.integers(1, 6, size=2))
        w = random_values(rng, dtype, (v, d))
        idx = rng.integers(0, v, size=rand_shape(rng, hi_rank=3, hi=4))
        it = index_dtype(rng)
        yield Case("embedding %s (%d,%d) indices %s%s" % (dtype, v, d, it, idx.shape),
                   [Arg(w, dtype, noncontig(rng)), Arg(idx, it, noncontig(rng))],
                   lambda G, wv, iv: G.op("embedding", wv, iv),
                   want=[(w[idx], dtype)])
    yield Case("embedding index out of range", [Arg(np.zeros((2, 3)), "f32"), Arg(np.array([2]), "i32")],
               lambda G, wv, iv: G.op("embedding", wv, iv), error="LOOM_ERR_VALUE")


@op("one_hot")
def gen_one_hot(name, rng):
    for i in range(N_CASES):
        it = INT[i % 3]
        depth = int(rng.integers(1, 6))
        idx = rng.integers(0, depth, size=rand_shape(rng, hi_rank=3))
        out_dt = ALL[int(rng.integers(0, len(ALL)))] if i % 2 else "i64"
        want = (np.arange(depth) == idx[..., None]).astype(np.int64)
        if out_dt in ("f32", "f64", "f16", "bf16"):
            want = want.astype(np.float64)
        yield Case("one_hot %s depth=%d -> %s" % (it, depth, out_dt),
                   [Arg(idx, it, noncontig(rng))],
                   lambda G, v, d=depth, o=out_dt: G.op("one_hot", v, d, LOOM[o]),
                   want=[(want, out_dt)])
    yield Case("one_hot f32 indices", [Arg(np.zeros(2), "f32")],
               lambda G, v: G.op("one_hot", v, 3, LOOM["i64"]), error="LOOM_ERR_DTYPE")
