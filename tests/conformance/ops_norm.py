"""Pooling and normalization."""
import numpy as np

from conform import Arg, Case, noncontig, op, rand_axis, rand_shape
from dtypes import FLOAT, random_values
from loomlib import PoolParams

N_CASES = 24


def pool_params(kernel, stride, pads, dil=(1, 1), include_pad=0):
    p = PoolParams()
    p.kernel[:] = list(kernel)
    p.stride[:] = list(stride)
    p.pads[:] = list(pads)
    p.dilation[:] = list(dil)
    p.count_include_pad = include_pad
    return p


def windows(xp, k, s, d, oh, ow):
    """The (kh*kw) taps of every window: array (taps, N, C, oh, ow)."""
    taps = []
    for i in range(k[0]):
        for j in range(k[1]):
            r0, c0 = i * d[0], j * d[1]
            taps.append(xp[:, :, r0:r0 + s[0] * (oh - 1) + 1:s[0],
                           c0:c0 + s[1] * (ow - 1) + 1:s[1]])
    return np.stack(taps)


def pool_ref(x, kind, k, s, pads, d, include_pad):
    h, w = x.shape[2:]
    oh = (h + pads[0] + pads[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + pads[1] + pads[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    widths = ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3]))
    if kind == "max":
        xp = np.pad(x, widths, constant_values=-np.inf)
        return windows(xp, k, s, d, oh, ow).max(axis=0)
    xp = np.pad(x, widths)
    total = windows(xp, k, s, d, oh, ow).sum(axis=0)
    if include_pad:
        return total / (k[0] * k[1])
    ones = np.pad(np.ones_like(x), widths)
    return total / windows(ones, k, s, d, oh, ow).sum(axis=0)


@op("max_pool2d", "avg_pool2d")
def gen_pool(name, rng):
    kind = name[:3]
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        k = tuple(int(v) for v in rng.integers(1, 4, size=2))
        d = tuple(int(v) for v in rng.integers(1, 3, size=2)) if kind == "max" else (1, 1)
        s = tuple(int(v) for v in rng.integers(1, 3, size=2))
        # Pads of at most half the kernel, as PyTorch requires.
        pads = tuple(int(rng.integers(0, k[j % 2] // 2 + 1)) for j in range(4))
        eff = [d[j] * (k[j] - 1) + 1 for j in range(2)]
        h = int(rng.integers(max(eff[0] - pads[0] - pads[2], 1), 8))
        w = int(rng.integers(max(eff[1] - pads[1] - pads[3], 1), 8))
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), h, w)
        x = random_values(rng, dtype, shape)
        inc = int(rng.integers(0, 2)) if kind == "avg" else 0
        default_stride = i % 4 == 0
        p = pool_params(k, (0, 0) if default_stride else s, pads, d, inc)
        want = pool_ref(x, kind, k, k if default_stride else s, pads, d, inc)
        yield Case("%s %s k=%s s=%s p=%s d=%s include_pad=%d" % (
            name, dtype, k, "default" if default_stride else s, pads, d, inc),
            [Arg(x, dtype, noncontig(rng))],
            lambda G, v, p=p: G.op(name, v, p), want=[(want, dtype)])
    yield Case("%s of rank 3" % name, [Arg(np.zeros((1, 4, 4)), "f32")],
               lambda G, v: G.op(name, v, pool_params((2, 2), (1, 1), (0,) * 4)),
               error="LOOM_ERR_SHAPE")


@op("global_avg_pool")
def gen_global_avg_pool(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        shape = rand_shape(rng, rank=4, lo=1)
        x = random_values(rng, dtype, shape)
        yield Case("global_avg_pool %s" % dtype, [Arg(x, dtype, noncontig(rng))],
                   lambda G, v: G.op(name, v),
                   want=[(x.mean(axis=(2, 3), keepdims=True), dtype)])


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@op("softmax", "log_softmax")
def gen_softmax(name, rng):
    ref = softmax if name == "softmax" else log_softmax
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        shape = rand_shape(rng, lo_rank=1, lo=1)
        x = random_values(rng, dtype, shape, -10, 10)
        axis = rand_axis(rng, len(shape)) if i % 3 else -1
        yield Case("%s %s axis=%d" % (name, dtype, axis), [Arg(x, dtype, noncontig(rng))],
                   lambda G, v, a=axis: G.op(name, v, a), want=[(ref(x, axis), dtype)])
    # Large inputs: only a stable formula survives.
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]])
    yield Case("%s f64 large" % name, [Arg(x, "f64")],
               lambda G, v: G.op(name, v, -1), want=[(ref(x, -1), "f64")])
    yield Case("%s axis 2 of rank 2" % name, [Arg(np.zeros((2, 3)), "f32")],
               lambda G, v: G.op(name, v, 2), error="LOOM_ERR_AXIS")


def norm_setup(rng, i):
    dtype = FLOAT[i % 4]
    shape = rand_shape(rng, lo_rank=1, lo=1)
    axis = rand_axis(rng, len(shape))
    tail = shape[axis % len(shape):]
    return dtype, shape, axis, tail


@op("layer_norm")
def gen_layer_norm(name, rng):
    for i in range(N_CASES):
        dtype, shape, axis, tail = norm_setup(rng, i)
        x = random_values(rng, dtype, shape, -5, 5)
        scale = random_values(rng, dtype, tail)
        bias = random_values(rng, dtype, tail)
        eps = float(rng.choice([1e-5, 1e-3, 0.1]))
        hs, hb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        red = tuple(range(axis % len(shape), len(shape)))
        y = (x - x.mean(axis=red, keepdims=True)) / np.sqrt(x.var(axis=red, keepdims=True) + eps)
        y = y * (scale if hs else 1) + (bias if hb else 0)
        yield Case("layer_norm %s axis=%d eps=%g scale=%d bias=%d" % (dtype, axis, eps, hs, hb),
                   [Arg(x, dtype, noncontig(rng)), Arg(scale, dtype), Arg(bias, dtype)],
                   lambda G, v, s, b, hs=hs, hb=hb, a=axis, e=eps:
                   G.op("layer_norm", v, hs, s, hb, b, a, e), want=[(y, dtype)])
    yield Case("layer_norm scale shape",
               [Arg(np.zeros((2, 3)), "f32"), Arg(np.zeros(2), "f32"), Arg(np.zeros(3), "f32")],
               lambda G, v, s, b: G.op("layer_norm", v, 1, s, 0, b, -1, 1e-5),
               error="LOOM_ERR_SHAPE")


@op("rms_norm")
def gen_rms_norm(name, rng):
    for i in range(N_CASES):
        dtype, shape, axis, tail = norm_setup(rng, i)
        x = random_values(rng, dtype, shape, -5, 5)
        scale = random_values(rng, dtype, tail)
        eps = float(rng.choice([1e-5, 1e-3, 0.1]))
        hs = int(rng.integers(0, 2))
        red = tuple(range(axis % len(shape), len(shape)))
        y = x / np.sqrt((x * x).mean(axis=red, keepdims=True) + eps) * (scale if hs else 1)
        yield Case("rms_norm %s axis=%d eps=%g scale=%d" % (dtype, axis, eps, hs),
                   [Arg(x, dtype, noncontig(rng)), Arg(scale, dtype)],
                   lambda G, v, s, hs=hs, a=axis, e=eps: G.op("rms_norm", v, hs, s, a, e),
                   want=[(y, dtype)])


@op("batch_norm")
def gen_batch_norm(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        rank = int(rng.integers(2, 5))
        shape = (int(rng.integers(2, 4)),) + rand_shape(rng, rank=rank - 1, lo=1, hi=4)
        c = shape[1]
        x = random_values(rng, dtype, shape, -4, 4)
        scale, bias = random_values(rng, dtype, (c,)), random_values(rng, dtype, (c,))
        mean = random_values(rng, dtype, (c,), -1, 1)
        var = random_values(rng, dtype, (c,), 0.5, 2)
        eps, mom, training = 1e-5, float(rng.choice([0.1, 0.3])), i % 2
        red = tuple(j for j in range(rank) if j != 1)
        bc = (1, c) + (1,) * (rank - 2)
        if training:
            bm, bv = x.mean(axis=red), x.var(axis=red)
            n = x.size // c
            use_m, use_v = bm, bv
            new_m = (1 - mom) * mean + mom * bm
            new_v = (1 - mom) * var + mom * bv * n / (n - 1)
        else:
            use_m, use_v, new_m, new_v = mean, var, mean, var
        y = (x - use_m.reshape(bc)) / np.sqrt(use_v.reshape(bc) + eps) * \
            scale.reshape(bc) + bias.reshape(bc)
        yield Case("batch_norm %s rank=%d training=%d momentum=%g" % (dtype, rank, training, mom),
                   [Arg(x, dtype, noncontig(rng)), Arg(scale, dtype), Arg(bias, dtype),
                    Arg(mean, dtype), Arg(var, dtype)],
                   lambda G, *v, e=eps, m=mom, t=training: list(
                       G.op("batch_norm", *v, e, m, t)),
                   want=[(y, dtype), (new_m, dtype), (new_v, dtype)])


def pool_grad_ref(x, dy, kind, k, s, pads, d, include_pad):
    """max: each window's dy added at its first maximum (taps in row-major
    order); avg: dy / divisor added over the window's in-bounds elements."""
    n, c, h, w = x.shape
    dx = np.zeros(x.shape)
    for oh in range(dy.shape[2]):
        for ow in range(dy.shape[3]):
            taps = [(oh * s[0] - pads[0] + i * d[0], ow * s[1] - pads[1] + j * d[1])
                    for i in range(k[0]) for j in range(k[1])]
            taps = [(r, q) for r, q in taps if 0 <= r < h and 0 <= q < w]
            g = dy[:, :, oh, ow]
            if not taps:  # a dilated window may miss the input entirely
                continue
            if kind == "max":
                vals = np.stack([x[:, :, r, q] for r, q in taps])
                first = vals.argmax(axis=0)
                for t, (r, q) in enumerate(taps):
                    dx[:, :, r, q] += np.where(first == t, g, 0)
            else:
                div = k[0] * k[1] if include_pad else len(taps)
                for r, q in taps:
                    dx[:, :, r, q] += g / div
    return dx


@op("max_pool2d_grad", "avg_pool2d_grad")
def gen_pool_grad(name, rng):
    kind = name[:3]
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        k = tuple(int(v) for v in rng.integers(1, 4, size=2))
        d = tuple(int(v) for v in rng.integers(1, 3, size=2)) if kind == "max" else (1, 1)
        s = tuple(int(v) for v in rng.integers(1, 3, size=2))
        pads = tuple(int(rng.integers(0, k[j % 2] // 2 + 1)) for j in range(4))
        eff = [d[j] * (k[j] - 1) + 1 for j in range(2)]
        h = int(rng.integers(max(eff[0] - pads[0] - pads[2], 1), 8))
        w = int(rng.integers(max(eff[1] - pads[1] - pads[3], 1), 8))
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), h, w)
        oh = (h + pads[0] + pads[2] - eff[0]) // s[0] + 1
        ow = (w + pads[1] + pads[3] - eff[1]) // s[1] + 1
        x = random_values(rng, dtype, shape)
        dy = random_values(rng, dtype, shape[:2] + (oh, ow))
        inc = int(rng.integers(0, 2)) if kind == "avg" else 0
        p = pool_params(k, s, pads, d, inc)
        want = pool_grad_ref(x, dy, kind, k, s, pads, d, inc)
        yield Case("%s %s k=%s s=%s p=%s d=%s include_pad=%d" % (name, dtype, k, s, pads, d, inc),
                   [Arg(x, dtype, noncontig(rng)), Arg(dy, dtype, noncontig(rng))],
                   lambda G, v, g, p=p: G.op(name, v, g, p), want=[(want, dtype)])
    yield Case("%s dy of the wrong shape" % name,
               [Arg(np.zeros((1, 1, 4, 4)), "f32"), Arg(np.zeros((1, 1, 3, 3)), "f32")],
               lambda G, v, g: G.op(name, v, g, pool_params((2, 2), (2, 2), (0,) * 4)),
               error="LOOM_ERR_SHAPE")
