"""Contractions: matmul, conv2d, conv_transpose2d (convolutions written
out in NumPy, one kernel tap at a time)."""
import numpy as np

from conform import Arg, Case, noncontig, op, rand_shape
from dtypes import FLOAT, NUMERIC, random_values
from loomlib import ConvParams

N_CASES = 30


def matmul_shapes(rng):
    """(shape a, shape b) that matmul accepts, batch dims broadcasting."""
    m, k, n = (int(v) for v in rng.integers(0, 6, size=3))
    ra, rb = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    batch = rand_shape(rng, rank=max(ra, rb) - 2 if max(ra, rb) > 2 else 0, lo=1, hi=4)
    sa = (m, k) if ra > 1 else (k,)
    sb = (k, n) if rb > 1 else (k,)
    ba = [1 if rng.random() < 0.3 else d for d in batch][len(batch) - max(ra - 2, 0):]
    bb = [1 if rng.random() < 0.3 else d for d in batch][len(batch) - max(rb - 2, 0):]
    return tuple(ba) + sa, tuple(bb) + sb


@op("matmul")
def gen_matmul(name, rng):
    for i in range(2 * len(NUMERIC)):
        dtype = NUMERIC[i % len(NUMERIC)]
        sa, sb = matmul_shapes(rng)
        a = random_values(rng, dtype, sa)
        b = random_values(rng, dtype, sb)
        ta = int(len(sa) > 1 and rng.random() < 0.3)
        tb = int(len(sb) > 1 and rng.random() < 0.3)
        # Loom gets the transposed operands with trans flags set.
        la = np.swapaxes(a, -1, -2) if ta else a
        lb = np.swapaxes(b, -1, -2) if tb else b
        want = np.matmul(a, b)
        yield Case("matmul %s trans_a=%d trans_b=%d" % (dtype, ta, tb),
                   [Arg(la, dtype, noncontig(rng)), Arg(lb, dtype, noncontig(rng))],
                   lambda G, x, y, ta=ta, tb=tb: G.op("matmul", x, y, ta, tb),
                   want=[(want, dtype)])
    yield Case("matmul (2,3)@(4,5)", [Arg(np.zeros((2, 3)), "f32"), Arg(np.zeros((4, 5)), "f32")],
               lambda G, x, y: G.op("matmul", x, y, 0, 0), error="LOOM_ERR_SHAPE")
    yield Case("matmul f32@f64", [Arg(np.zeros((2, 3)), "f32"), Arg(np.zeros((3, 5)), "f64")],
               lambda G, x, y: G.op("matmul", x, y, 0, 0), error="LOOM_ERR_DTYPE")


def conv2d_ref(x, w, bias, stride, pads, dil, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for gi in range(groups):
        xs = xp[:, gi * cg:(gi + 1) * cg]
        ws = w[gi * og:(gi + 1) * og]
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dil[0], j * dil[1]
                patch = xs[:, :, r0:r0 + stride[0] * (oh - 1) + 1:stride[0],
                           c0:c0 + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                            ws[:, :, i, j])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def conv_params(stride, pads, dil, groups, out_pad=(0, 0)):
    p = ConvParams()
    p.stride[:] = list(stride)
    p.pads[:] = list(pads)
    p.dilation[:] = list(dil)
    p.output_padding[:] = list(out_pad)
    p.groups = groups
    return p


def conv_setup(rng):
    groups = int(rng.choice([1, 1, 2, 3]))
    cg, og = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    kh, kw = (int(v) for v in rng.integers(1, 4, size=2))
    stride = tuple(int(v) for v in rng.integers(1, 3, size=2))
    dil = tuple(int(v) for v in rng.integers(1, 3, size=2))
    pads = tuple(int(v) for v in rng.integers(0, 3, size=4))
    return groups, cg, og, kh, kw, stride, dil, pads


@op("conv2d")
def gen_conv2d(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        groups, cg, og, kh, kw, stride, dil, pads = conv_setup(rng)
        n = int(rng.integers(1, 3))
        h = int(rng.integers(max(dil[0] * (kh - 1) + 1 - pads[0] - pads[2], 1), 7))
        w_ = int(rng.integers(max(dil[1] * (kw - 1) + 1 - pads[1] - pads[3], 1), 7))
        x = random_values(rng, dtype, (n, cg * groups, h, w_))
        w = random_values(rng, dtype, (og * groups, cg, kh, kw))
        has_bias = i % 2
        bias = random_values(rng, dtype, (og * groups,))
        want = conv2d_ref(x, w, bias if has_bias else None, stride, pads, dil, groups)
        # stride/dilation 0 mean 1: exercise that default sometimes.
        zero = i % 5 == 0
        p = conv_params([0 if zero and s == 1 else s for s in stride], pads,
                        [0 if zero and d == 1 else d for d in dil], 0 if zero and groups == 1 else groups)
        yield Case("conv2d %s g=%d k=%dx%d s=%s d=%s p=%s bias=%d" % (
            dtype, groups, kh, kw, stride, dil, pads, has_bias),
            [Arg(x, dtype, noncontig(rng)), Arg(w, dtype, noncontig(rng)), Arg(bias, dtype)],
            lambda G, xv, wv, bv, hb=has_bias, p=p: G.op("conv2d", xv, wv, hb, bv, p),
            want=[(want, dtype)])
    yield Case("conv2d channels differ",
               [Arg(np.zeros((1, 3, 4, 4)), "f32"), Arg(np.zeros((2, 2, 1, 1)), "f32"),
                Arg(np.zeros(2), "f32")],
               lambda G, x, w, b: G.op("conv2d", x, w, 0, b, conv_params((1, 1), (0,) * 4, (1, 1), 1)),
               error="LOOM_ERR_SHAPE")


def conv_transpose2d_ref(x, w, bias, stride, pads, dil, out_pad, groups):
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    fh = (h - 1) * stride[0] + dil[0] * (kh - 1) + 1
    fw = (wd - 1) * stride[1] + dil[1] * (kw - 1) + 1
    full = np.zeros((n, og * groups, fh + out_pad[0], fw + out_pad[1]))
    for gi in range(groups):
        xs = x[:, gi * cg:(gi + 1) * cg]
        ws = w[gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dil[0], j * dil[1]
                full[:, gi * og:(gi + 1) * og,
                     r0:r0 + stride[0] * (h - 1) + 1:stride[0],
                     c0:c0 + stride[1] * (wd - 1) + 1:stride[1]] += \
                    np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
    oh = fh - pads[0] - pads[2] + out_pad[0]
    ow = fw - pads[1] - pads[3] + out_pad[1]
    out = full[:, :, pads[0]:pads[0] + oh, pads[1]:pads[1] + ow]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out


@op("conv_transpose2d")
def gen_conv_transpose2d(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        groups, cg, og, kh, kw, stride, dil, pads = conv_setup(rng)
        n = int(rng.integers(1, 3))
        h, w_ = (int(v) for v in rng.integers(1, 5, size=2))
        # output_padding must stay below stride or dilation (PyTorch's rule).
        out_pad = tuple(int(rng.integers(0, max(s, d))) for s, d in zip(stride, dil))
        fh = (h - 1) * stride[0] + dil[0] * (kh - 1) + 1
        fw = (w_ - 1) * stride[1] + dil[1] * (kw - 1) + 1
        pads = (min(pads[0], (fh - 1) // 2), min(pads[1], (fw - 1) // 2),
                min(pads[2], (fh - 1) // 2), min(pads[3], (fw - 1) // 2))
        x = random_values(rng, dtype, (n, cg * groups, h, w_))
        w = random_values(rng, dtype, (cg * groups, og, kh, kw))
        has_bias = i % 2
        bias = random_values(rng, dtype, (og * groups,))
        want = conv_transpose2d_ref(x, w, bias if has_bias else None, stride, pads,
                                    dil, out_pad, groups)
        p = conv_params(stride, pads, dil, groups, out_pad)
        yield Case("conv_transpose2d %s g=%d k=%dx%d s=%s d=%s p=%s op=%s bias=%d" % (
            dtype, groups, kh, kw, stride, dil, pads, out_pad, has_bias),
            [Arg(x, dtype, noncontig(rng)), Arg(w, dtype, noncontig(rng)), Arg(bias, dtype)],
            lambda G, xv, wv, bv, hb=has_bias, p=p: G.op("conv_transpose2d", xv, wv, hb, bv, p),
            want=[(want, dtype)])


def conv2d_weight_grad_ref(x, dy, kernel, stride, pads, dil, groups):
    """dw[o, c, i, j] = sum over n, oh, ow of dy[n, o, oh, ow] times the
    input pixel that tap (i, j) met at (oh, ow)."""
    n, c, h, wd = x.shape
    _, o, oh, ow = dy.shape
    cg, og = c // groups, o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    dw = np.zeros((o, cg, kernel[0], kernel[1]))
    for gi in range(groups):
        xs = xp[:, gi * cg:(gi + 1) * cg]
        ds = dy[:, gi * og:(gi + 1) * og]
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                r0, c0 = i * dil[0], j * dil[1]
                patch = xs[:, :, r0:r0 + stride[0] * (oh - 1) + 1:stride[0],
                           c0:c0 + stride[1] * (ow - 1) + 1:stride[1]]
                dw[gi * og:(gi + 1) * og, :, i, j] = np.einsum("nchw,nohw->oc", patch, ds)
    return dw


@op("conv2d_weight_grad")
def gen_conv2d_weight_grad(name, rng):
    for i in range(N_CASES):
        dtype = FLOAT[i % 4]
        groups, cg, og, kh, kw, stride, dil, pads = conv_setup(rng)
        n = int(rng.integers(1, 3))
        h = int(rng.integers(max(dil[0] * (kh - 1) + 1 - pads[0] - pads[2], 1), 7))
        w_ = int(rng.integers(max(dil[1] * (kw - 1) + 1 - pads[1] - pads[3], 1), 7))
        oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w_ + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        x = random_values(rng, dtype, (n, cg * groups, h, w_))
        dy = random_values(rng, dtype, (n, og * groups, oh, ow))
        want = conv2d_weight_grad_ref(x, dy, (kh, kw), stride, pads, dil, groups)
        p = conv_params(stride, pads, dil, groups)
        yield Case("conv2d_weight_grad %s g=%d k=%dx%d s=%s d=%s p=%s" % (
            dtype, groups, kh, kw, stride, dil, pads),
            [Arg(x, dtype, noncontig(rng)), Arg(dy, dtype, noncontig(rng))],
            lambda G, xv, dv, k=(kh, kw), p=p: G.op("conv2d_weight_grad", xv, dv, list(k), p),
            want=[(want, dtype)])
    yield Case("conv2d_weight_grad dy too large",
               [Arg(np.zeros((1, 2, 3, 3)), "f32"), Arg(np.zeros((1, 2, 3, 3)), "f32")],
               lambda G, x, d: G.op("conv2d_weight_grad", x, d, [2, 2],
                                    conv_params((1, 1), (0,) * 4, (1, 1), 1)),
               error="LOOM_ERR_SHAPE")
