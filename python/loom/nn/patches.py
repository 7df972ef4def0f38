"""torch.nn.functional's sliding-window views and the pools and norms
built from windows: unfold (each window's pixels as a column), fold (the
columns summed back into an image), channel_shuffle, local_response_norm
and lp_pool1d/2d, adaptive_max_pool1d/3d, max_unpool1d/2d/3d. Windows are strided slices of
the padded input, one per tap, so that the copies are exact and the
gradients those of slices and pads."""
import math

from .. import functional as _F
from . import functional as F


def _four(kernel_size, dilation, padding, stride):
    return [F._pair_of(v) for v in (kernel_size, dilation, padding, stride)]


def _out_size(size, k, d, p, s):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C, H, W) -> (N, C * kh * kw, L), or unbatched (C, H, W) -> (C * kh
    * kw, L): column l holds window l's pixels,
    channel-major, then row, then column within the window (PyTorch's
    im2col order); L = out_h * out_w windows in row-major order."""
    if input.ndim == 3:  # unbatched (C, H, W) -> (C * kh * kw, L)
        return unfold(input.unsqueeze(0), kernel_size, dilation, padding, stride).squeeze(0)
    if input.ndim != 4:
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported "
                                  f"(got {input.ndim}D)")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _four(kernel_size, dilation, padding, stride)
    n, c, h, w = input.shape
    oh, ow = _out_size(h, kh, dh, ph, sh), _out_size(w, kw, dw, pw, sw)
    if oh < 1 or ow < 1:
        raise RuntimeError(f"unfold: the input's spatial size {(h, w)} with padding "
                           f"{(ph, pw)} is smaller than the kernel {(kh, kw)} with "
                           f"dilation {(dh, dw)}")
    x = _F.pad(input, (pw, pw, ph, ph)) if ph or pw else input
    taps = [x[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]
    return _F.stack(taps, 2).reshape(n, c * kh * kw, oh * ow)


def _spread(t, step, dim):
    """t with step - 1 zeros after each entry along dim, the last ones cut."""
    if step == 1:
        return t
    shape = list(t.shape)
    gaps = list(shape)
    gaps.insert(dim + 1, step - 1)
    from .. import zeros
    both = _F.cat([t.unsqueeze(dim + 1), zeros(*gaps, dtype=t.dtype)], dim + 1)
    shape[dim] *= step
    return _F.narrow(both.reshape(*shape), dim, 0, shape[dim] - step + 1)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C * kh * kw, L) -> (N, C, H, W), unfold's adjoint: each column's
    pixels added at its window's positions (overlaps summed)."""
    if input.ndim == 2:  # unbatched (C * kh * kw, L) -> (C, H, W)
        return fold(input.unsqueeze(0), output_size, kernel_size, dilation, padding,
                    stride).squeeze(0)
    if input.ndim != 3:
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input "
                                  f"Tensors are supported (got {input.ndim}D)")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _four(kernel_size, dilation, padding, stride)
    h, w = F._pair_of(output_size)
    n, ck, length = input.shape
    if ck % (kh * kw):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the "
                           f"product of kernel_size, but got input.size(1)={ck} and "
                           f"kernel_size={(kh, kw)}")
    oh, ow = _out_size(h, kh, dh, ph, sh), _out_size(w, kw, dw, pw, sw)
    if oh < 1 or ow < 1 or oh * ow != length:
        raise RuntimeError(f"Given output_size={(h, w)}, kernel_size={(kh, kw)}, "
                           f"dilation={(dh, dw)}, padding={(ph, pw)}, stride={(sh, sw)}, "
                           f"expected size of input's dimension 2 to match the calculated "
                           f"number of sliding blocks {oh} * {ow} = {oh * ow}, but got "
                           f"input.size(2)={length}.")
    c = ck // (kh * kw)
    cols = input.reshape(n, c, kh * kw, oh, ow)
    hp, wp = h + 2 * ph, w + 2 * pw
    total = None
    for i in range(kh):
        for j in range(kw):
            tap = _spread(_spread(cols[:, :, i * kw + j], sh, 2), sw, 3)
            top, left = i * dh, j * dw
            tap = _F.pad(tap, (left, wp - left - tap.shape[3], top, hp - top - tap.shape[2]))
            total = tap if total is None else total + tap
    return total[:, :, ph:ph + h, pw:pw + w]


def channel_shuffle(input, groups):
    """(N, C, *) with its channels read as (groups, C / groups), transposed."""
    n, c = input.shape[0], input.shape[1]
    if groups <= 0 or c % groups:
        raise ValueError(f"channel_shuffle: number of channels ({c}) must be divisible by "
                         f"groups ({groups}), a positive number")
    rest = tuple(input.shape[2:])
    return input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(n, c, *rest)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x^2 over the size channels around each)^beta,
    the window zero-padded (size // 2 before, (size - 1) // 2 after), as
    PyTorch's."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.ndim} "
                         f"dimensions)")
    c = input.shape[1]
    sq = input * input
    pads = [0, 0] * (input.ndim - 2) + [size // 2, (size - 1) // 2]
    padded = _F.pad(sq, tuple(pads))
    window = _F.narrow(padded, 1, 0, c)
    for t in range(1, size):
        window = window + _F.narrow(padded, 1, t, c)
    return input / (window * (alpha / size) + k) ** beta


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum of x^p over each window)^(1/p), as PyTorch's: the mean of x^p
    by avg_pool2d, times the window's size, its sign kept."""
    kh, kw = F._pair_of(kernel_size)
    out = F.avg_pool2d(input ** norm_type, (kh, kw), stride, 0, ceil_mode)
    return (_F.sign(out) * F.relu(_F.abs(out)) * (kh * kw)) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    out = F.avg_pool1d(input ** norm_type, kernel_size, stride, 0, ceil_mode)
    return (_F.sign(out) * F.relu(_F.abs(out)) * kernel_size) ** (1.0 / norm_type)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """(N, C, L) or (C, L): adaptive_max_pool2d over a unit height (output
    sizes that divide the input's)."""
    if input.ndim not in (2, 3):
        raise ValueError(f"adaptive_max_pool1d: expected a 2-d (C, L) or 3-d (N, C, L) "
                         f"input, got {input.ndim}-d")
    (o,) = F._adaptive_sizes(output_size, input.shape[-1:], "adaptive_max_pool1d")
    out = F.adaptive_max_pool2d(input.unsqueeze(-2), (1, o), return_indices)
    return tuple(t.squeeze(-2) for t in out) if return_indices else out.squeeze(-2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """(N, C, D, H, W) or (C, D, H, W): output sizes that divide the
    input's, one max_pool3d with the quotients as kernel and stride."""
    if input.ndim not in (4, 5):
        raise ValueError(f"adaptive_max_pool3d: expected a 4-d or 5-d input, got "
                         f"{input.ndim}-d")
    size = tuple(input.shape[-3:])
    out = F._adaptive_sizes(output_size, size, "adaptive_max_pool3d")
    if any(s % o for s, o in zip(size, out)):
        raise NotImplementedError("loom adaptive_max_pool3d: output sizes that divide the "
                                  "input's")
    kernel = tuple(s // o for s, o in zip(size, out))
    return F.max_pool3d(input, kernel, kernel, return_indices=return_indices)


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, dims, name):
    """max_unpoolNd: each value of input written at its index in a zero
    plane of the output's size (max_poolNd's return_indices: flat in each
    plane). Where windows overlap, a position two of them wrote takes the
    value once (their mean: they wrote the same maximum), and each write
    still gets the whole gradient there, as PyTorch's gather."""
    def many(v):
        return (v,) * dims if isinstance(v, int) else tuple(v)
    if input.ndim not in (dims + 1, dims + 2):
        raise ValueError(f"{name}: expected a {dims + 1}-d or {dims + 2}-d input, got "
                         f"{input.ndim}-d")
    if tuple(indices.shape) != tuple(input.shape):
        raise ValueError(f"{name}: expected indices of the input's shape "
                         f"{list(input.shape)}, got {list(indices.shape)}")
    k = many(kernel_size)
    s = k if stride is None else many(stride)
    p = many(padding)
    size = tuple(input.shape[-dims:])
    default = [(n - 1) * si - 2 * pi + ki for n, si, pi, ki in zip(size, s, p, k)]
    out = default if output_size is None else [int(v) for v in list(output_size)[-dims:]]
    for o, d, si in zip(out, default, s):
        if not d - si < o < d + si:
            raise ValueError(f"{name}: invalid output_size {out} (the default is {default}; "
                             f"each size must lie within a stride of it)")
    lead = tuple(input.shape[:-dims])
    from .. import zeros
    plane = zeros(*lead, math.prod(out), dtype=input.dtype)
    axis, index, values = input.ndim - dims, indices.reshape(*lead, -1), input.reshape(*lead, -1)
    added = _F.scatter_add(plane, axis, index, values)  # its gradient: a gather, as PyTorch's
    if all(si >= ki for si, ki in zip(s, k)):  # windows apart: no index twice
        return added.reshape(*lead, *out)
    once = _F.scatter(plane, axis, index, values.detach())
    return (once + (added - added.detach())).reshape(*lead, *out)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1,
                       "max_unpool1d")


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2,
                       "max_unpool2d")


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3,
                       "max_unpool3d")
