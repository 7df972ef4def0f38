"""torch.nn.functional's 3-d convolution and pooling, over (N, C, D, H, W)
volumes, as the 2-d ops over the depth taps: tap k of the depth window
is a strided slice of the volume along D, and the 2-d op runs on every
output depth at once (the output depths folded into the batch, or into
the channels where channels are independent). The 2-d kernels are the
tuned ones, and the gradients those of slices, reshapes and the 2-d ops."""
import numpy as np

from .. import functional as _F
from . import functional as F


def _triple(v, name):
    t = (v,) * 3 if isinstance(v, int) else tuple(v)
    if len(t) != 3:
        raise ValueError(f"{name}: expected an int or 3 ints, got {v!r}")
    return t


def _batched(x, name):
    """x as (N, C, D, H, W) and whether it came unbatched (C, D, H, W)."""
    if x.ndim not in (4, 5):
        raise ValueError(f"Expected 4D (unbatched) or 5D (batched) input to {name}, but got "
                         f"input of size: {list(x.shape)}")
    return (x.unsqueeze(0), True) if x.ndim == 4 else (x, False)


def _depth_taps(x, kd, stride, dilation, front, back, value, out):
    """The kd slices x[:, :, k * dilation :: stride] (out depths each) of x
    padded along D by front and back planes of value."""
    if front or back:
        x = _F.pad(x, (0, 0, 0, 0, front, back), value=value)
    return [x[:, :, k * dilation:k * dilation + stride * (out - 1) + 1:stride]
            for k in range(kd)]


def _conv_out(size, pads, k, d, s, name, x, weight):
    out = (size + pads - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise ValueError(f"{name}: input of size {list(x.shape)} (padded depth "
                         f"{size + pads}) is smaller than the kernel {list(weight.shape[2:])}")
    return out


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """x (N, C, D, H, W) or (C, D, H, W) unbatched, weight (O, C / groups,
    kd, kh, kw): one conv2d over every output depth, its input the kd depth
    taps side by side as channels (group, tap, channel) and its weight the
    taps' kernels the same way."""
    x, unbatched = _batched(x, "conv3d")
    if weight.ndim != 5:
        raise ValueError(f"conv3d: expected a 5-d weight (out, in / groups, kd, kh, kw), got "
                         f"{list(weight.shape)}")
    n, c, depth = x.shape[:3]
    o, cg, kd, kh, kw = weight.shape
    if groups < 1 or c != cg * groups:
        raise ValueError(f"conv3d: given groups={groups}, weight of size {list(weight.shape)} "
                         f"expects input[{n}, {cg * groups}, ...] to have {cg * groups} "
                         f"channels, but got {c} channels instead")
    (sd, sh, sw), (dd, dh, dw) = _triple(stride, "stride"), _triple(dilation, "dilation")
    if padding == "same" and (sd, sh, sw) != (1, 1, 1):
        raise ValueError("padding='same' is not supported for strided convolutions")
    if isinstance(padding, str) and padding not in ("same", "valid"):
        raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                         f"['valid', 'same']")
    if padding == "same":
        total = [d * (k - 1) for d, k in zip((dd, dh, dw), (kd, kh, kw))]
        front, back = total[0] // 2, total[0] - total[0] // 2
        hw = [total[1] // 2, total[2] // 2, total[1] - total[1] // 2, total[2] - total[2] // 2]
    elif padding == "valid":
        front = back = 0
        hw = [0, 0, 0, 0]
    else:
        pd, ph, pw = _triple(padding, "padding")
        front = back = pd
        hw = [ph, pw, ph, pw]
    out = _conv_out(depth, front + back, kd, dd, sd, "conv3d", x, weight)
    taps = _depth_taps(x, kd, sd, dd, front, back, 0.0, out)
    h, w = x.shape[3:]
    stacked = _F.stack(taps, 2) if kd > 1 else taps[0].unsqueeze(2)  # (N, C, kd, out, H, W)
    planes = stacked.reshape(n, groups, cg, kd, out, h, w).permute(0, 4, 1, 3, 2, 5, 6)
    planes = planes.reshape(n * out, groups * kd * cg, h, w)
    kernels = weight.permute(0, 2, 1, 3, 4).reshape(o, kd * cg, kh, kw)
    y = _F._op("conv2d", planes, kernels, stride=[sh, sw], pads=hw, dilation=[dh, dw],
               groups=int(groups))
    y = y.reshape(n, out, o, y.shape[2], y.shape[3]).permute(0, 2, 1, 3, 4)
    if bias is not None:
        y = y + bias.reshape(1, o, 1, 1, 1)
    return y.squeeze(0) if unbatched else y


def _pool_depth(x, k, s, p, d, ceil_mode, name):
    """The output depth of a pooling and the end padding it needs beyond p
    in floor mode (PyTorch's sizes, as F._pool_geometry's for H and W)."""
    size, span = x.shape[2], d * (k - 1) + 1
    if k <= 0 or s <= 0 or d <= 0 or p < 0:
        raise ValueError(f"{name}: kernel_size, stride and dilation must be positive, "
                         f"padding at least 0")
    if p > span // 2:
        raise ValueError(f"{name}: padding {p} should be at most half of the kernel size {k}")
    out = (size + 2 * p - span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    if out < 1:
        raise ValueError(f"{name}: input of size {list(x.shape)} is too small for kernel "
                         f"{k} along its depth")
    return out, max(0, (out - 1) * s + span - (size + 2 * p))


def _pool_args(kernel_size, stride, padding, dilation):
    k = _triple(kernel_size, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and not stride) else \
        _triple(stride, "stride")
    return k, s, _triple(padding, "padding"), _triple(dilation, "dilation")


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """As PyTorch's: the maximum over the depth taps (padded with -inf),
    then max_pool2d over H and W with the output depths as channels."""
    if return_indices:
        raise NotImplementedError("max_pool3d: return_indices is not supported")
    x, unbatched = _batched(x, "max_pool3d")
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    out, extra = _pool_depth(x, k[0], s[0], p[0], d[0], ceil_mode, "max_pool3d")
    taps = _depth_taps(x, k[0], s[0], d[0], p[0], p[0] + extra, float("-inf"), out)
    deep = _F.stack(taps, 0).max(0)[0] if len(taps) > 1 else taps[0]
    n, c, _, h, w = deep.shape
    y = F.max_pool2d(deep.reshape(n, c * out, h, w), k[1:], s[1:], p[1:], d[1:], ceil_mode)
    y = y.reshape(n, c, out, y.shape[2], y.shape[3])
    return y.squeeze(0) if unbatched else y


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """As PyTorch's: the sum over the depth taps (zero-padded), then
    avg_pool2d over H and W, divided by each output depth's share of
    PyTorch's divisor (its divisor is the product of the three dims'
    counts, with or without the padding)."""
    x, unbatched = _batched(x, "avg_pool3d")
    k, s, p, _ = _pool_args(kernel_size, stride, padding, 1)
    out, extra = _pool_depth(x, k[0], s[0], p[0], 1, ceil_mode, "avg_pool3d")
    taps = _depth_taps(x, k[0], s[0], 1, p[0], p[0] + extra, 0.0, out)
    deep = taps[0]
    for t in taps[1:]:
        deep = deep + t
    n, c, _, h, w = deep.shape
    y = F.avg_pool2d(deep.reshape(n, c * out, h, w), k[1:], s[1:], p[1:], ceil_mode,
                     count_include_pad, divisor_override)
    y = y.reshape(n, c, out, y.shape[2], y.shape[3])
    if divisor_override is None:
        start = np.arange(out) * s[0] - p[0]
        end = np.minimum(start + k[0], x.shape[2] + p[0])
        counts = end - start if count_include_pad else \
            np.minimum(end, x.shape[2]) - np.maximum(start, 0)
        scale = (1.0 / counts).astype(np.float64 if x.dtype.name == "float64" else np.float32)
        y = y * _F.cast(_F._const(scale.reshape(1, 1, out, 1, 1)), x.dtype)
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool3d(x, output_size):
    """As PyTorch's, any output size (None keeps the input's): the depth by
    a constant pooling matrix (F._adaptive_pool_matrix) unless it stays,
    then adaptive_avg_pool2d with the output depths as channels."""
    x, unbatched = _batched(x, "adaptive_avg_pool3d")
    n, c, depth, h, w = x.shape
    if min(depth, h, w) <= 0:
        raise ValueError(f"adaptive_avg_pool3d(): Expected input to have non-zero size for "
                         f"non-batch dimensions, but input has sizes {list(x.shape)}")
    od, oh, ow = F._adaptive_sizes(output_size, (depth, h, w), "adaptive_avg_pool3d")
    if (od, oh, ow) == (1, 1, 1):
        y = x.mean((2, 3, 4), keepdim=True)
    else:
        y = x
        if od != depth:
            y = (F._adaptive_pool_matrix(depth, od, x.dtype) @ y.reshape(n, c, depth, h * w))
        y = F.adaptive_avg_pool2d(y.reshape(n, c * od, h, w), (oh, ow)).reshape(n, c, od, oh, ow)
    return y.squeeze(0) if unbatched else y


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """x (N, C, D, H, W) or (C, D, H, W) unbatched, weight (C, O / groups,
    kd, kh, kw): one conv_transpose2d over every input depth, the kd depth
    taps' kernels side by side as output channels (group, tap, channel);
    tap k's planes then land at depths i * stride + k * dilation (zeros
    between them at strides above 1), summed, and the padding cut off."""
    from .. import zeros
    x, unbatched = _batched(x, "conv_transpose3d")
    if weight.ndim != 5:
        raise ValueError(f"conv_transpose3d: expected a 5-d weight (in, out / groups, kd, kh, "
                         f"kw), got {list(weight.shape)}")
    n, c, depth, h, w = x.shape
    ci, og, kd, kh, kw = weight.shape
    if groups < 1 or c != ci or c % groups:
        raise ValueError(f"conv_transpose3d: given groups={groups}, weight of size "
                         f"{list(weight.shape)} expects input[{n}, {ci}, ...] to have {ci} "
                         f"channels (a multiple of groups), but got {c} channels instead")
    (sd, sh, sw), (dd, dh, dw) = _triple(stride, "stride"), _triple(dilation, "dilation")
    (pd, ph, pw), (od, oh, ow) = _triple(padding, "padding"), \
        _triple(output_padding, "output_padding")
    if any(o >= max(s, d) for o, s, d in zip((od, oh, ow), (sd, sh, sw), (dd, dh, dw))):
        raise ValueError(f"conv_transpose3d: output_padding {(od, oh, ow)} must be smaller "
                         f"than either stride {(sd, sh, sw)} or dilation {(dd, dh, dw)}")
    full = (depth - 1) * sd + dd * (kd - 1) + 1
    out = full - 2 * pd + od
    if out < 1:
        raise ValueError(f"conv_transpose3d: input of size {list(x.shape)} gives an output "
                         f"depth of {out}")
    planes = x.permute(0, 2, 1, 3, 4).reshape(n * depth, c, h, w)
    kernels = weight.permute(0, 2, 1, 3, 4).reshape(ci, kd * og, kh, kw)
    y = _F._op("conv_transpose2d", planes, kernels, stride=[sh, sw], pads=[ph, pw, ph, pw],
               dilation=[dh, dw], groups=int(groups), output_padding=[oh, ow])
    ho, wo = y.shape[2:]
    y = y.reshape(n, depth, groups, kd, og, ho, wo)
    spread = (depth - 1) * sd + 1
    total = None
    for k in range(kd):
        tap = y[:, :, :, k].reshape(n, depth, groups * og, ho, wo)
        if sd > 1:  # zeros between the input depths
            gaps = zeros(n, depth, sd - 1, groups * og, ho, wo, dtype=tap.dtype)
            tap = _F.cat([tap.unsqueeze(2), gaps], 2).reshape(n, depth * sd, groups * og, ho,
                                                             wo)[:, :spread]
        before = k * dd
        tap = _F.pad(tap, (0, 0, 0, 0, 0, 0, before, full + od - spread - before))
        total = tap if total is None else total + tap
    y = total[:, pd:pd + out].permute(0, 2, 1, 3, 4)
    if bias is not None:
        y = y + bias.reshape(1, groups * og, 1, 1, 1)
    return y.squeeze(0) if unbatched else y
