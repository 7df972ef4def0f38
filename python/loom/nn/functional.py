"""torch.nn.functional's names over Loom's ops."""
import functools
import math
import numbers
import types

import numpy as np

from .. import _C
from .. import functional as _F
from .._tensor import Tensor
from ..functional import (relu, gelu, silu, leaky_relu, elu, softplus, softmax,  # noqa: F401
                          log_softmax, sigmoid, tanh, pad, embedding, one_hot, _maybe_inplace)


def linear(x, weight, bias=None):
    y = _F._op("matmul", x, weight, trans_b=1)
    return y if bias is None else y + bias


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _warn_broadcast(input, target):
    """PyTorch's warning where a regression loss broadcasts a target of
    another size (an (N,) target against (N, 1) outputs: an (N, N) loss)."""
    if isinstance(target, Tensor) and tuple(target.shape) != tuple(input.shape):
        import warnings
        warnings.warn(f"Using a target size ({tuple(target.shape)}) that is different to the "
                      f"input size ({tuple(input.shape)}). This will likely lead to incorrect "
                      f"results due to broadcasting. Please ensure they have the same size.",
                      stacklevel=3)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _warn_broadcast(input, target)
    return _reduce((input - target) ** 2, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _warn_broadcast(input, target)
    return _reduce((input - target).abs(), reduction)


def _legacy_reduction(size_average, reduce, reduction):
    """PyTorch's deprecated size_average and reduce, read as it reads them."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _check_targets(target, n_classes, ignore_index):
    """IndexError for a class index outside [0, n_classes), as PyTorch's;
    checked on the host when target is real (a lazy one is not read)."""
    if target._lazy or not target.numel():
        return
    import numpy as np
    t = np.asarray(target)
    bad = t[(t != ignore_index) & ((t < 0) | (t >= n_classes))]
    if bad.size:
        raise IndexError(f"Target {bad.flat[0]} is out of bounds.")


def _none_ignored(target, n_classes, ignore_index):
    """Whether target is real, not empty, and has no ignore_index (its
    classes checked as _check_targets does)."""
    if target._lazy or not target.numel():
        return False
    _check_targets(target, n_classes, ignore_index)
    return not (np.asarray(target) == ignore_index).any()


def _class_weights(weight, target, keep):
    """Each target's class weight (1 without weight), 0 where ignored."""
    w = keep.float()
    return w if weight is None else w * _F.index_select(weight, 0, target)


def _flat_classes(input, target):
    """input (C), (N, C) or (N, C, d...) and target (), (N) or (N, d...)
    as (M, C) and (M): the classes on dim 1 moved last, as PyTorch's."""
    expected = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
    if target.shape != expected:
        raise ValueError(f"Expected target size {list(expected)}, got {list(target.shape)} "
                         f"(input of size {list(input.shape)})")
    if input.ndim == 2:
        return input, target
    if input.ndim > 2:
        input = _F.permute(input, 0, *range(2, input.ndim), 1)
    return input.reshape(-1, input.shape[-1]), target.reshape(-1)


def _nll_terms(logp, target, weight, ignore_index):
    """logp (M, C), target (M): each item's -weight * logp at its class,
    and its weight (0 where ignored)."""
    _check_targets(target, logp.shape[1], ignore_index)
    keep = target != ignore_index
    safe = _F.where(keep, target, 0)
    w = _class_weights(weight, safe, keep)
    return -(logp * one_hot(safe, logp.shape[1]).float()).sum(1) * w, w, keep


def _weighted_reduce(loss, w, reduction, shape):
    """The mean over the items' weights, as PyTorch's: NaN when they sum
    to 0 (every target ignored), with a gradient of 0, not NaN (the
    division by the weights only where they are not 0); 'none' of the
    target's shape."""
    if reduction != "mean":
        return _reduce(loss.reshape(shape), reduction)
    total = w.sum()
    empty = total == 0
    return _F.where(empty, float("nan"), loss.sum() / _F.where(empty, 1.0, total))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """input (N, C) logits, target (N,) class indices, as PyTorch's (or
    (N, C, d...) and (N, d...), or (C) and ()): with class weights, the
    mean is over the targets' weights (those not ignore_index); label
    smoothing weighs each class's term by its weight. A float target is
    class probabilities instead (below)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if label_smoothing > 1.0:  # PyTorch 1.13 checks the top only (a negative one applies)
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    _check_class_weight(input, weight)
    if target.dtype.is_floating_point:
        if ignore_index != -100:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    x, t = _flat_classes(input, target)
    logp = log_softmax(x, 1)
    if weight is None and label_smoothing == 0 and reduction == "mean" and \
            _none_ignored(t, x.shape[1], ignore_index):
        # every item counts once: the mean without the masks' ops
        return -(logp * one_hot(t, x.shape[1]).float()).sum() / t.numel()
    loss, w, keep = _nll_terms(logp, t, weight, ignore_index)
    if label_smoothing > 0:  # PyTorch 1.13 applies a positive one only
        every = logp if weight is None else logp * weight
        smooth = -every.sum(1) * keep.float() / x.shape[1]
        loss = (1 - label_smoothing) * loss + label_smoothing * smooth
    return _weighted_reduce(loss, w, reduction, target.shape)


def _check_class_weight(input, weight):
    classes = input.shape[1] if input.ndim > 1 else input.shape[0]
    if weight is not None and tuple(weight.shape) != (classes,):
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes "
                           f"or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")


def _cross_entropy_probs(input, target, weight, reduction, label_smoothing):
    """target: class probabilities of input's shape ((C), (N, C) or (N, C,
    d...), classes on dim 1 when batched), as PyTorch 1.13's:
    loss = -sum_c weight_c y_c log_softmax(input)_c, y smoothed toward the
    uniform distribution; the mean is over the items, not their weights."""
    if target.shape != input.shape:
        raise ValueError(f"loom cross_entropy: probability targets of the input's shape "
                         f"{list(input.shape)} (got {list(target.shape)})")
    dim = 1 if input.ndim > 1 else 0
    n_classes = input.shape[dim]
    if label_smoothing > 0:  # PyTorch 1.13 applies a positive one only
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    term = log_softmax(input, dim) * target
    if weight is not None:
        term = term * weight.reshape(n_classes, *[1] * (input.ndim - dim - 1))
    return _reduce(-term.sum(dim), reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """input log-probabilities of cross_entropy's shapes (classes on dim 1)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if target.dtype.is_floating_point or target.dtype.name == "bool":
        raise RuntimeError(f"nll_loss: expected class indices (an integer target), found "
                           f"{target.dtype.name}")
    _check_class_weight(input, weight)
    x, t = _flat_classes(input, target)
    loss, w, _ = _nll_terms(x, t, weight, ignore_index)
    return _weighted_reduce(loss, w, reduction, target.shape)


def _same_size(input, target):
    """The binary losses take a target of the input's size, as PyTorch's."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """input probabilities; the logs are clamped at -100, as PyTorch's, so
    that a probability of 0 or 1 gives a finite loss, and so is the
    gradient: (p - y) / max(p (1 - p), 1e-12) for the input (the clamped
    logs' own would be 0 * inf there), their difference for the target."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _same_size(input, target)
    log_p, log_q = _F.clamp(input.log(), min=-100), _F.clamp((1 - input).log(), min=-100)
    value = -(target * log_p + (1 - target) * log_q)
    d_input = (input - target) / _F.clamp(input * (1 - input), min=1e-12)
    stop = _F.stop_gradient
    # value, with the gradients above: each (x - stop(x)) is 0 and carries x's gradient
    loss = stop(value) + (input - stop(input)) * stop(d_input) \
        + (target - stop(target)) * stop(log_q - log_p)
    return _reduce(loss if weight is None else loss * weight, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _warn_broadcast(input, target)
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(_F.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)."""
    _warn_broadcast(input, target)
    d = (input - target).abs()
    return _reduce(_F.where(d <= delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """input log-probabilities; target probabilities (log ones with
    log_target): target (log target - input), 0 where target is 0.
    'batchmean' divides the sum by the batch size (the true KL divergence)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0  # where target is 0: no loss, no gradient, as PyTorch's
        safe = _F.where(positive, target, 1.0)
        loss = _F.where(positive, target * (safe.log() - input), 0.0)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(its p-norm along dim, eps)."""
    return input / _F.clamp_min(_F.norm(input, p, dim, keepdim=True), eps)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """clamp, but the gradient passes strictly inside the bounds, as
    PyTorch's (clamp's passes at them too: relu6 at 0 would pass it)."""
    y = _F.clamp(input, min_val, max_val)
    inside = _F.logical_and(_F.gt(input, min_val), _F.lt(input, max_val))
    return _maybe_inplace(input, _F.where(inside, y, y.detach()), inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x), x itself far below zero."""
    return -softplus(-input)


def mish(input, inplace=False):
    return _maybe_inplace(input, input * tanh(softplus(input)), inplace)


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the halves of input along dim."""
    size = input.shape[_F._dim(dim, input.ndim)]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {size}")
    a, b = _F.chunk(input, 2, dim)
    return a * sigmoid(b)


def prelu(input, weight):
    """x where x > 0, else weight x; weight is one value or one per channel
    (dim 1)."""
    if weight.numel() > 1 and input.ndim > 1:
        weight = weight.reshape(weight.shape[0], *[1] * (input.ndim - 2))
    return _F.where(input > 0, input, weight * input)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / |x1| * x2 / |x2|) along dim, each norm at least eps (as
    PyTorch 1.13, which divides by the norms first)."""
    n1 = _F.clamp_min(_F.norm(x1, 2, dim, keepdim=True), eps)
    n2 = _F.clamp_min(_F.norm(x2, 2, dim, keepdim=True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """input (N, C, *) normalized over each group of C / num_groups
    channels (and the rest of its dims), then scaled per channel."""
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of "
                               f"channels in input, but got {name} of shape "
                               f"{list(t.shape)} and input of shape {list(input.shape)}")
    grouped = input.reshape(n, num_groups, -1)
    mean = grouped.mean(2, keepdim=True)
    var = _F.var(grouped, 2, unbiased=False, keepdim=True)
    y = ((grouped - mean) * _F.rsqrt(var + eps)).reshape(*input.shape)
    channel = [c] + [1] * (input.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(*channel)
    if bias is not None:
        y = y + bias.reshape(*channel)
    return y


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """-(pos_weight y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))) * weight,
    as PyTorch's: pos_weight (one per class, the last dim) weighs the
    positive term."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _same_size(input, target)
    # -log sigmoid(x) = log(1 + e^-|x|) + max(-x, 0): stable for large |x|
    neg_log_sig = (-(input.abs())).exp().log1p() + (-input).relu()
    scale = neg_log_sig if pos_weight is None else (1 + (pos_weight - 1) * target) * neg_log_sig
    loss = (1 - target) * input + scale
    return _reduce(loss if weight is None else loss * weight, reduction)


def _check_dropout(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(x, p=0.5, training=True, inplace=False):
    _check_dropout(p)
    if not training or p == 0.0:
        return x
    if p == 1.0:  # every element dropped, as PyTorch's x * 0 (no 1 / (1 - p))
        return _result(x, x * 0.0, inplace)
    from .. import rand
    keep = rand(*x.shape) >= p
    return _result(x, _F.where(keep, x * (1.0 / (1.0 - p)), 0.0), inplace)


def _result(x, y, inplace):
    """y, or x holding y's values when inplace (the in-place spelling)."""
    return x._inplace(y) if inplace else y


def _feature_dropout(x, p, training, inplace):
    """Whole channels dropped: one draw per (sample, channel), the first two
    dims of x, the kept ones scaled by 1 / (1 - p), as PyTorch's
    feature_dropout."""
    _check_dropout(p)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return _result(x, x * 0.0, inplace)
    from .. import rand
    keep = rand(*x.shape[:2], *[1] * (x.ndim - 2)) >= p
    return _result(x, x * (_F.cast(keep, x.dtype) * (1.0 / (1.0 - p))), inplace)


def _channel_dropout(x, p, training, inplace, spatial):
    """dropout1d/3d: (N, C, *spatial) or, unbatched, (C, *spatial)."""
    name = f"dropout{spatial}d"
    if x.ndim not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"{name}: Expected {spatial + 1}D or {spatial + 2}D input, but "
                           f"received a {x.ndim}D input")
    _check_dropout(p)
    if x.ndim == spatial + 2 or not training or p == 0.0:
        return _feature_dropout(x, p, training, inplace)
    y = _F.squeeze(_feature_dropout(_F.unsqueeze(x, 0), p, training, False), 0)
    return _result(x, y, inplace)


def dropout1d(x, p=0.5, training=True, inplace=False):
    """Channels of (N, C, L) or (C, L) dropped whole."""
    return _channel_dropout(x, p, training, inplace, 1)


def dropout2d(x, p=0.5, training=True, inplace=False):
    """Channels dropped whole: the first two dims of x are (N, C), a 3-d
    input too (PyTorch 1.13 reads it as (N, C, L), not unbatched)."""
    return _feature_dropout(x, p, training, inplace)


def dropout3d(x, p=0.5, training=True, inplace=False):
    """Channels of (N, C, D, H, W) or (C, D, H, W) dropped whole."""
    return _channel_dropout(x, p, training, inplace, 3)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axis = x.ndim - len(tuple(normalized_shape))
    if weight is None or bias is None:
        from .. import ones, zeros
        weight = weight if weight is not None else ones(*normalized_shape, dtype=x.dtype)
        bias = bias if bias is not None else zeros(*normalized_shape, dtype=x.dtype)
    return _F._op("layer_norm", x, weight, bias, axis=axis, eps=float(eps))


__all__ = [n for n, v in list(globals().items())
           if not n.startswith("_") and callable(v) and v is not Tensor]


# ---- convolutions, pooling, normalization, attention ----

def _pair_of(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_pads(padding, kernel, dilation, stride):
    if padding == "valid":
        return [0, 0, 0, 0]
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return [total[0] // 2, total[1] // 2, total[0] - total[0] // 2, total[1] - total[1] // 2]
    if isinstance(padding, str):
        raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                         f"['valid', 'same']")
    ph, pw = _pair_of(padding)
    return [ph, pw, ph, pw]


def _unbatched(x, batched_rank, name):
    """Whether x is an unbatched input (one rank below batched_rank), as
    PyTorch's convolutions take it; ValueError for any other rank."""
    if x.ndim not in (batched_rank - 1, batched_rank):
        raise ValueError(f"Expected {batched_rank - 1}D (unbatched) or {batched_rank}D "
                         f"(batched) input to {name}, but got input of size: "
                         f"{list(x.shape)}")
    return x.ndim == batched_rank - 1


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """x (N, C, H, W), or (C, H, W) unbatched (so is the result)."""
    if _unbatched(x, 4, "conv2d"):
        return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation,
                      groups).squeeze(0)
    stride, dilation = _pair_of(stride), _pair_of(dilation)
    pads = _conv_pads(padding, weight.shape[2:], dilation, stride)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return _C.op("conv2d", inputs, {"stride": list(stride), "pads": pads,
                                       "dilation": list(dilation), "groups": int(groups)})


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """x (N, C, L) or unbatched (C, L), weight (out, C / groups, k): conv2d
    over a unit height."""
    if _unbatched(x, 3, "conv1d"):
        return conv1d(x.unsqueeze(0), weight, bias, stride, padding, dilation,
                      groups).squeeze(0)
    def width(v):
        return v if isinstance(v, str) else (1, v if isinstance(v, int) else v[0])
    pads = padding if isinstance(padding, str) else (0, width(padding)[1])
    y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, width(stride), pads,
               width(dilation), groups)
    return y.squeeze(2)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """x (N, C, H, W), or (C, H, W) unbatched (so is the result)."""
    if _unbatched(x, 4, "conv_transpose2d"):
        return conv_transpose2d(x.unsqueeze(0), weight, bias, stride, padding, output_padding,
                                groups, dilation).squeeze(0)
    ph, pw = _pair_of(padding)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return _C.op("conv_transpose2d", inputs, {
        "stride": list(_pair_of(stride)), "pads": [ph, pw, ph, pw],
        "dilation": list(_pair_of(dilation)), "groups": int(groups),
        "output_padding": list(_pair_of(output_padding))})


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """As PyTorch's, (N, C, H, W) or (C, H, W); ceil_mode pads the ends
    with -inf so that the op's floor-mode windows cover PyTorch's;
    return_indices also gives each maximum's flat index in its H x W plane."""
    if x.ndim == 3:
        out = max_pool2d(x.unsqueeze(0), kernel_size, stride, padding, dilation, ceil_mode,
                         return_indices)
        return tuple(o.squeeze(0) for o in out) if return_indices else out.squeeze(0)
    g = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    if any(g.extra):
        x = _F.pad(x, (g.pad[1], g.pad[1] + g.extra[1], g.pad[0], g.pad[0] + g.extra[0]),
                   value=float("-inf"))
        pads = [0, 0, 0, 0]
    else:
        pads = list(g.pad) * 2
    y = _C.op("max_pool2d", (x,), {"kernel": list(g.kernel), "stride": list(g.stride),
                                   "pads": pads, "dilation": list(g.dilation)})
    return (y, _max_pool_indices(x, g, pads)) if return_indices else y


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode):
    """Kernel, stride, padding, dilation, input and output sizes of a 2-d
    pooling (PyTorch's output size), and the end padding each spatial dim
    needs beyond padding to give that size in floor mode."""
    if x.ndim != 4:
        raise ValueError(f"pool2d: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got "
                         f"{x.ndim}-d")
    k, d = _pair_of(kernel_size), _pair_of(dilation)
    s = k if stride is None or (not isinstance(stride, int) and not stride) else _pair_of(stride)
    p = _pair_of(padding)
    if min(k) <= 0 or min(s) <= 0 or min(d) <= 0 or min(p) < 0:
        raise ValueError(f"pool2d: kernel_size {k}, stride {s} and dilation {d} must be "
                         f"positive, padding {p} at least 0")
    span = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
    if any(pi > sp // 2 for pi, sp in zip(p, span)):
        raise ValueError(f"pool2d: padding {p} should be at most half of the kernel size "
                         f"{k} (with dilation {d})")
    size, out, extra = tuple(x.shape[2:]), [], []
    for n, sp, si, pi in zip(size, span, s, p):
        o = (n + 2 * pi - sp + (si - 1 if ceil_mode else 0)) // si + 1
        if ceil_mode and (o - 1) * si >= n + pi:  # the last window starts in the padding
            o -= 1
        if o < 1:
            raise ValueError(f"pool2d: input of spatial size {size} is too small for "
                             f"kernel {k} (dilation {d}, padding {p})")
        out.append(o)
        extra.append(max(0, (o - 1) * si + sp - (n + 2 * pi)))
    return types.SimpleNamespace(kernel=k, stride=s, pad=p, dilation=d, size=size, out=out,
                           extra=extra)


def _max_pool_indices(xp, g, pads):
    """The flat (h * W + w) input index of each window's first maximum: an
    argmax over the window's taps gathered from xp (x padded), mapped
    through a table of each tap's input index."""
    n, c = xp.shape[0], xp.shape[1]
    hp, wp = xp.shape[2] + pads[0] + pads[2], xp.shape[3] + pads[1] + pads[3]
    if any(pads):
        xp = _F.pad(xp, (pads[1], pads[3], pads[0], pads[2]), value=float("-inf"))
    (oh, ow), (sh, sw), (dh, dw), (kh, kw) = g.out, g.stride, g.dilation, g.kernel
    rows = (np.arange(oh)[:, None, None, None] * sh + np.arange(kh)[None, None, :, None] * dh)
    cols = (np.arange(ow)[None, :, None, None] * sw + np.arange(kw)[None, None, None, :] * dw)
    taps = (rows * wp + cols).reshape(-1)
    r, q = rows - g.pad[0], cols - g.pad[1]
    source = np.broadcast_to(r * g.size[1] + q, (oh, ow, kh, kw)).reshape(-1)
    patches = _F.index_select(_F.stop_gradient(xp).reshape(n, c, hp * wp), 2, _F._const(taps))
    best = _F.argmax(patches.reshape(n, c, oh * ow, kh * kw), -1)
    flat = best + _F._const(np.arange(oh * ow, dtype=np.int64) * (kh * kw))
    return _F._op("gather", _F._const(source.astype(np.int64)), flat, axis=0).reshape(
        n, c, oh, ow)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """As PyTorch's. With ceil_mode or divisor_override: the mean over the
    whole kernel of x zero-padded, rescaled per output position to
    PyTorch's divisor (windows past the padding count only what they
    cover of it)."""
    if x.ndim == 3:
        return avg_pool2d(x.unsqueeze(0), kernel_size, stride, padding, ceil_mode,
                          count_include_pad, divisor_override).squeeze(0)
    g = _pool_geometry(x, kernel_size, stride, padding, 1, ceil_mode)
    attrs = {"kernel": list(g.kernel), "stride": list(g.stride)}
    if not ceil_mode and divisor_override is None:
        attrs.update(pads=list(g.pad) * 2, count_include_pad=int(count_include_pad))
        return _C.op("avg_pool2d", (x,), attrs)
    if divisor_override is not None and int(divisor_override) == 0:
        raise ValueError("avg_pool2d: divisor_override must not be zero")
    (ph, pw), (eh, ew) = g.pad, g.extra
    padded = _F.pad(x, (pw, pw + ew, ph, ph + eh))
    mean = _C.op("avg_pool2d", (padded,), dict(attrs, pads=[0, 0, 0, 0], count_include_pad=1))
    scale = _avg_pool_scale(g, count_include_pad, divisor_override)
    return mean * _F.cast(_F._const(scale), x.dtype)


def _avg_pool_scale(g, count_include_pad, divisor_override):
    """kh * kw / PyTorch's divisor, per output position (oh, ow)."""
    counts = []
    for n, o, k, s, p in zip(g.size, g.out, g.kernel, g.stride, g.pad):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        counts.append((end - start, np.minimum(end, n) - np.maximum(start, 0)))
    (padded_h, valid_h), (padded_w, valid_w) = counts
    if divisor_override is not None:
        divisor = np.full((g.out[0], g.out[1]), float(divisor_override))
    elif count_include_pad:
        divisor = np.outer(padded_h, padded_w).astype(np.float64)
    else:
        divisor = np.outer(valid_h, valid_w).astype(np.float64)
    return (g.kernel[0] * g.kernel[1] / divisor).astype(np.float32)


def _adaptive_sizes(output_size, size, name):
    """output_size as one size per spatial dim of size; an int is repeated
    and None keeps the input's size, as PyTorch's."""
    sizes = [output_size] * len(size) if output_size is None or \
        isinstance(output_size, numbers.Integral) else list(output_size)
    if len(sizes) != len(size):
        raise ValueError(f"{name}: output_size must be {len(size)}, got {output_size!r}")
    return [n if o is None else int(o) for o, n in zip(sizes, size)]


def _adaptive_pool_matrix(n_in, n_out, dtype, transposed=False):
    """(n_out, n_in) (or its transpose), a constant of dtype: row i averages
    PyTorch's adaptive window of output i, inputs floor(i n_in / n_out) ..
    ceil((i + 1) n_in / n_out) - 1."""
    i = np.arange(n_out)
    start, end = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
    j = np.arange(n_in)
    m = ((j >= start[:, None]) & (j < end[:, None])) / (end - start)[:, None]
    m = m.T if transposed else m
    return _F.cast(_F._const(m.astype(np.float64 if dtype.name == "float64" else np.float32)),
                   dtype)


def adaptive_avg_pool2d(x, output_size):
    """As PyTorch's, (N, C, H, W) or (C, H, W), any output size (None
    entries keep the input's): sizes that divide the input's are an
    avg_pool2d; others two matmuls with constant pooling matrices,
    P_h x P_w^T, each row of P averaging one output cell's window."""
    if x.ndim not in (3, 4):
        raise ValueError(f"adaptive_avg_pool2d: expected a 3-d (C, H, W) or 4-d "
                         f"(N, C, H, W) input, got {x.ndim}-d")
    if x.ndim == 3:
        return adaptive_avg_pool2d(x.unsqueeze(0), output_size).squeeze(0)
    h, w = x.shape[-2:]
    oh, ow = _adaptive_sizes(output_size, (h, w), "adaptive_avg_pool2d")
    if min(h, w) <= 0:
        raise ValueError(f"adaptive_avg_pool2d(): Expected input to have non-zero size for "
                         f"non-batch dimensions, but input has sizes {list(x.shape)}")
    if (oh, ow) == (1, 1):
        return _C.op("global_avg_pool", (x,), None)
    if oh > 0 and ow > 0 and not (h % oh or w % ow):
        return avg_pool2d(x, (h // oh, w // ow))
    y = x
    if oh != h:
        y = _adaptive_pool_matrix(h, oh, x.dtype) @ y
    if ow != w:
        y = y @ _adaptive_pool_matrix(w, ow, x.dtype, transposed=True)
    return y


def adaptive_avg_pool1d(x, output_size):
    """As PyTorch's, (N, C, L) or (C, L): adaptive_avg_pool2d over a unit
    height."""
    if x.ndim not in (2, 3):
        raise ValueError(f"adaptive_avg_pool1d: expected a 2-d (C, L) or 3-d (N, C, L) "
                         f"input, got {x.ndim}-d")
    (o,) = _adaptive_sizes(output_size, x.shape[-1:], "adaptive_avg_pool1d")
    return adaptive_avg_pool2d(x.unsqueeze(-2), (1, o)).squeeze(-2)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Returns y; in training, running_mean and running_var (when given)
    take their new values in place, as PyTorch's: as lazy values of the
    step when nothing else sees their memory, else read here (a graph
    break); inside loom.compile, assigned at each run when they are a
    module's buffers."""
    y, mean, var = _batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
                               eps)
    if training:
        _set_running(((running_mean, mean), (running_var, var)))
    return y


def _set_running(pairs):
    """Each (buffer, new value) of running statistics: the buffer takes the
    value in place (see batch_norm)."""
    for buf, new in pairs:
        if buf is None:
            continue
        if _C._capturing():
            _C._assign(buf, new.detach())
        elif not _C._take_value(buf, new.detach()):
            _C._copy_into(buf, new.detach())


def _check_batch_stats(x):
    """PyTorch's ValueError, raised here rather than when the op runs:
    statistics of one value per channel are not a batch's."""
    if x.shape[0] * math.prod(x.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {tuple(x.shape)}")


def _batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    from .. import ones, zeros
    c = x.shape[1]
    if training:
        _check_batch_stats(x)
    if running_mean is None or running_var is None:
        if not training:
            raise ValueError("batch_norm: running_mean and running_var are needed in eval")
        running_mean, running_var = zeros(c, dtype=x.dtype), ones(c, dtype=x.dtype)
    weight = weight if weight is not None else ones(c, dtype=x.dtype)
    bias = bias if bias is not None else zeros(c, dtype=x.dtype)
    return _C.op("batch_norm", (x, weight, bias, running_mean, running_var),
                    {"eps": float(eps), "momentum": float(momentum),
                     "training": int(bool(training))})


def _causal_mask(lq, lk):
    from .. import tensor
    return tensor(np.triu(np.full((lq, lk), -np.inf, np.float32), 1))


def _attention(q, k, v, mask, dropout_p, scale):
    """softmax(q k^T * scale + mask) (dropped out at dropout_p) v, and the
    weights. mask: additive (float) or None."""
    scores = _C.op("matmul", (q, k), {"trans_b": 1}) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores + mask
    weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ v, weights


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None):
    """As PyTorch's: a bool attn_mask marks the keys each query may attend
    to (True: attend), a float one is added to the scores."""
    mask = None
    if is_causal:
        mask = _causal_mask(q.shape[-2], k.shape[-2])
    if attn_mask is not None:
        if attn_mask.dtype.name == "bool":
            attn_mask = _F.where(attn_mask, 0.0, float("-inf"))
        mask = attn_mask if mask is None else mask + attn_mask
    return _attention(q, k, v, mask, dropout_p, scale)[0]


# ---- resampling ----

_SPATIAL_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_INTERP_MODES = ("nearest", "nearest-exact", "area") + tuple(_SPATIAL_DIMS)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate of (N, C, *spatial) inputs, 1 to 3
    spatial dims, one dim at a time: each output element a weighted sum of
    taps read by index_select, at the source indices and weights PyTorch's
    kernels compute (so gradients are index_select's: scattered back)."""
    _check_interpolate(input, mode, align_corners, antialias)
    sizes, scales = _interp_sizes(input, size, scale_factor, recompute_scale_factor)
    y = input
    for axis, (n_out, scale) in enumerate(zip(sizes, scales), 2):
        taps = _interp_taps(mode, input.shape[axis], n_out, scale, bool(align_corners),
                            input.dtype.name == "float64")
        y = _resample(y, axis, taps)
    return y


def _check_interpolate(input, mode, align_corners, antialias):
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: input must be a loom Tensor, got "
                        f"{type(input).__name__}")
    if mode not in _INTERP_MODES:
        raise ValueError(f"interpolate: mode {mode!r} is not one of {list(_INTERP_MODES)}")
    if input.ndim not in (3, 4, 5):
        raise ValueError(f"interpolate: expected a 3-d, 4-d or 5-d input (N, C, *spatial), "
                         f"got {input.ndim}-d")
    need = _SPATIAL_DIMS.get(mode)
    if need is not None and input.ndim != need + 2:
        raise ValueError(f"interpolate: got {input.ndim}D input, but {mode} mode needs "
                         f"{need + 2}D input")
    if align_corners is not None and need is None:
        raise ValueError("align_corners option can only be set with the interpolating "
                         "modes: linear | bilinear | bicubic | trilinear")
    if antialias:
        raise NotImplementedError("loom interpolate: antialias=True")
    if mode not in ("nearest", "nearest-exact") and not input.dtype.is_floating_point:
        raise TypeError(f"interpolate: mode {mode!r} needs a floating point input, got "
                        f"{input.dtype.name}")


def _per_dim(value, n, what):
    """value as a list of n numbers (one number is repeated)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise ValueError(f"interpolate: input has {n} spatial dims, but {what} has "
                         f"{len(values)} entries: {value!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"interpolate: {what} must hold numbers, got {value!r}")
    return values


def _interp_sizes(input, size, scale_factor, recompute_scale_factor):
    """Output sizes and the scale factors the kernels use (None: in / out),
    as PyTorch 1.13: sizes floor(in * scale); recompute_scale_factor
    drops the given scales for in / out."""
    n = input.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = [int(v) for v in _per_dim(size, n, "size")]
        scales = [None] * n
    else:
        scales = [float(v) for v in _per_dim(scale_factor, n, "scale_factor")]
        sizes = [math.floor(float(m) * s) for m, s in zip(input.shape[2:], scales)]
        if recompute_scale_factor:
            scales = [None] * n
    if min(sizes) <= 0 or min(input.shape[2:]) <= 0:
        raise ValueError(f"interpolate: input and output sizes should be greater than 0 "
                         f"(input {list(input.shape[2:])}, output {sizes})")
    return sizes, scales


def _resample(x, axis, taps):
    """sum over taps of x's entries at idx along axis times weight (None: 1)."""
    n_in = x.shape[axis]
    if len(taps) == 1 and taps[0][1] is None and np.array_equal(taps[0][0], np.arange(n_in)):
        return x
    out = None
    for idx, w in taps:
        part = _F._op("index_select", x, _F._const(idx.astype(np.int64)), axis=axis)
        if w is not None:
            w = w.reshape([-1] + [1] * (x.ndim - axis - 1))
            part = part * _F.cast(_F._const(w), x.dtype)
        out = part if out is None else out + part
    return out


def _interp_taps(mode, n_in, n_out, scale, align_corners, double):
    """[(source indices, weights or None)] of one spatial dim: PyTorch's
    index and weight arithmetic, in float32 unless the input is float64
    (as its kernels compute for float inputs)."""
    ft = np.float64 if double else np.float32
    if mode in ("nearest", "nearest-exact"):
        return [(_nearest_index(mode, n_in, n_out, scale), None)]
    if mode == "area":
        return _area_taps(n_in, n_out, ft)
    d = np.arange(n_out).astype(ft)
    if align_corners:
        s = ft(n_in - 1) / ft(n_out - 1) if n_out > 1 else ft(0)
        real = s * d
    else:
        s = ft(1.0 / scale) if scale is not None and scale > 0 else ft(n_in) / ft(n_out)
        real = s * (d + ft(0.5)) - ft(0.5)
    if mode == "bicubic":
        return _cubic_taps(real, n_in, ft)
    real = np.maximum(real, ft(0))
    i0 = real.astype(np.int64)
    l1 = (real - i0.astype(ft)).astype(ft)
    i1 = i0 + (i0 < n_in - 1)
    return _drop_zero_taps([(i0, (ft(1) - l1).astype(ft)), (i1, l1)])


def _nearest_index(mode, n_in, n_out, scale):
    """PyTorch's nearest_idx / nearest_exact_idx: float32 arithmetic, and
    nearest's shortcuts for sizes kept and doubled."""
    d = np.arange(n_out)
    if mode == "nearest" and n_out == n_in:
        return d
    if mode == "nearest" and n_out == 2 * n_in:
        return d >> 1
    f32 = np.float32
    s = f32(1.0 / scale) if scale is not None and scale > 0 else f32(n_in) / f32(n_out)
    if mode == "nearest":
        src = d.astype(f32) * s
    else:
        src = ((d + 0.5) * np.float64(s)).astype(f32)
    return np.minimum(np.floor(src).astype(np.int64), n_in - 1)


def _cubic_taps(real, n_in, ft):
    """Four taps around floor(real), indices clamped to the edge, weights
    of the cubic convolution with A = -0.75 (PyTorch's)."""
    a = ft(-0.75)
    i = np.floor(real).astype(np.int64)
    t = (real - i.astype(ft)).astype(ft)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    weights = (far(t + 1), near(t), near(1 - t), far(2 - t))
    return _drop_zero_taps([(np.clip(i - 1 + j, 0, n_in - 1), w.astype(ft))
                            for j, w in enumerate(weights)])


def _area_taps(n_in, n_out, ft):
    """Adaptive average pooling's windows [floor(i in / out), ceil((i + 1)
    in / out)), as taps of weight 1 / window length (0 past its end)."""
    i = np.arange(n_out)
    start, end = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
    length = end - start
    taps = []
    for k in range(int(length.max())):
        inside = start + k < end
        taps.append((np.minimum(start + k, end - 1),
                     np.where(inside, ft(1) / length.astype(ft), ft(0)).astype(ft)))
    return taps


def _drop_zero_taps(taps):
    """taps less those of weight 0 everywhere; a lone tap of weight 1
    everywhere needs no multiply."""
    kept = [(i, w) for i, w in taps if np.any(w != 0)] or taps[:1]
    if len(kept) == 1 and np.all(kept[0][1] == 1):
        return [(kept[0][0], None)]
    return kept


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """The deprecated name of interpolate."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Bilinear with align_corners=True, as PyTorch's."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- more activations ----

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """scale * elu(x, alpha) with the self-normalizing constants."""
    return _maybe_inplace(input, elu(input, _SELU_ALPHA) * _SELU_SCALE, inplace)


def celu(input, alpha=1.0, inplace=False):
    """max(0, x) + min(0, alpha (e^(x / alpha) - 1)): elu of x / alpha, scaled."""
    return _maybe_inplace(input, elu(input / alpha, 1.0) * alpha, inplace)


def hardsigmoid(input, inplace=False):
    """relu6(x + 3) / 6 (the gradient 1/6 strictly inside (-3, 3))."""
    return _maybe_inplace(input, hardtanh(input + 3.0, 0.0, 6.0) / 6.0, inplace)


def hardswish(input, inplace=False):
    return _maybe_inplace(input, input * hardsigmoid(input), inplace)


def softsign(input):
    return input / (input.abs() + 1.0)


def tanhshrink(input):
    return input - tanh(input)


def threshold(input, threshold, value, inplace=False):
    """x where x > threshold, else value (its gradient 0 there)."""
    return _maybe_inplace(input, _F.where(_F.gt(input, threshold), input, value), inplace)


def hardshrink(input, lambd=0.5):
    """x where |x| > lambd, else 0."""
    return _F.where(_F.gt(_F.abs(input), lambd), input, 0.0)


def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, else 0."""
    return _F.where(_F.gt(input, lambd), input - lambd,
                    _F.where(_F.lt(input, -lambd), input + lambd, 0.0))


def relu_(input):
    return relu(input, inplace=True)


def threshold_(input, threshold_value, value):
    return threshold(input, threshold_value, value, inplace=True)


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)


def selu_(input):
    return selu(input, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """input (N, C, *) normalized per image and channel over the other
    dims (group_norm with a group a channel); with use_input_stats=False
    by running_mean and running_var instead, which otherwise (when given)
    take the batch's statistics in place, as batch_norm's."""
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input of 3 or more dims (N, C, ...), got "
                         f"{input.ndim}")
    c = input.shape[1]
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and "
                             "running_var")
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    if running_mean is not None and running_var is not None:
        # PyTorch's: each image's statistics, averaged over the batch
        flat = input.detach().reshape(input.shape[0], c, -1)
        mean = flat.mean(2).mean(0)
        var = flat.var(2, unbiased=flat.shape[2] > 1).mean(0)
        _set_running(((running_mean, running_mean * (1 - momentum) + mean * momentum),
                      (running_var, running_var * (1 - momentum) + var * momentum)))
    return group_norm(input, c, weight, bias, eps)


def _bags(input, offsets, include_last_offset):
    """embedding_bag's layout: (flat, spot, inside): the input's entries,
    and, each (bags, longest), the flat position of each bag's k-th entry
    (0 past its end) and whether there is one. Refused as PyTorch
    refuses it."""
    index = np.asarray(input.detach() if isinstance(input, Tensor) else input)
    if index.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None")
        starts = np.arange(0, index.size, max(index.shape[1], 1))[:index.shape[0]]
    elif index.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        starts = np.asarray(offsets.detach() if isinstance(offsets, Tensor) else offsets)
        if starts.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        if include_last_offset:
            starts = starts[:-1]
        if starts.size and (starts[0] != 0 or (np.diff(starts) < 0).any() or
                            starts[-1] > index.size):
            raise ValueError("embedding_bag: offsets must start at 0, not decrease, and stay "
                             "within the input")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{index.ndim}")
    ends = np.append(starts[1:], index.size) if starts.size else starts
    longest = int((ends - starts).max()) if starts.size else 0
    at = starts[:, None] + np.arange(longest)[None, :]
    inside = at < ends[:, None]
    return index.reshape(-1), np.where(inside, np.minimum(at, max(index.size - 1, 0)), 0), inside


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """The sum, mean or max of each bag's embeddings: the rows of a 2-d
    input, or the runs of a 1-d one that offsets start. The bags' layout is
    read on the host (a graph break when input or offsets are computed):
    they become a (bags, longest) index, padded; padding_idx's entries
    count for nothing; an empty bag gives zeros, as PyTorch's."""
    if scale_grad_by_freq:
        raise NotImplementedError("loom embedding_bag: scale_grad_by_freq")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode {mode!r}: one of 'sum', 'mean', 'max'")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. "
                                  "per_sample_weights is only supported for mode='sum'")
    flat, spot, inside = _bags(input, offsets, include_last_offset)
    picks = flat[spot] if flat.size else np.zeros(spot.shape, np.int64)
    bags, longest = spot.shape
    if padding_idx is not None:
        padding_idx %= weight.shape[0]
        inside &= picks != padding_idx
    rows = embedding(_F._const(picks.astype(np.int64)), weight, None, max_norm, norm_type)
    keep = _F.cast(_F._const(inside.astype(np.float32)), weight.dtype).unsqueeze(-1)
    if mode == "max":
        if not longest:
            from .. import zeros
            return zeros(bags, weight.shape[1], dtype=weight.dtype)
        empty = _F._const(~inside.any(1)).unsqueeze(-1)
        return _F.where(empty, 0.0, _F.where(keep.bool(), rows, -math.inf).amax(1))
    w = keep
    if per_sample_weights is not None:
        w = w * _F.index_select(per_sample_weights.reshape(-1), 0,
                                _F._const(spot.reshape(-1))).reshape(spot.shape + (1,))
    total = (rows * w).sum(1)
    if mode == "sum":
        return total
    count = np.maximum(inside.sum(1, keepdims=True), 1).astype(np.float32)
    return total / _F.cast(_F._const(count), weight.dtype)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """x (N, C, L) or unbatched (C, L), weight (C, out / groups, k):
    conv_transpose2d over a unit height."""
    if _unbatched(x, 3, "conv_transpose1d"):
        return conv_transpose1d(x.unsqueeze(0), weight, bias, stride, padding, output_padding,
                                groups, dilation).squeeze(0)

    def width(v, unit):
        return (unit, v if isinstance(v, int) else v[0])
    y = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, width(stride, 1),
                         width(padding, 0), width(output_padding, 0), groups,
                         width(dilation, 1))
    return y.squeeze(2)


def softmin(input, dim=None, dtype=None):
    """softmax of -x (dim as softmax's legacy rule when None)."""
    if dtype is not None:
        input = _F.cast(input, dtype)
    dim = dim if dim is not None else 0 if input.ndim in (0, 1, 3) else 1
    return softmax(-input, dim)


# ---- 1-d pooling (the 2-d pools over a unit height), adaptive max pooling ----

def _one_d(v):
    return (1, v if isinstance(v, int) else v[0])


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """(N, C, L) or (C, L): avg_pool2d over (1, kernel_size)."""
    y = avg_pool2d(input.unsqueeze(-2), _one_d(kernel_size),
                   None if stride is None else _one_d(stride), (0, _one_d(padding)[1]),
                   ceil_mode, count_include_pad)
    return y.squeeze(-2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """(N, C, L) or (C, L): max_pool2d over (1, kernel_size); indices
    along L."""
    out = max_pool2d(input.unsqueeze(-2), _one_d(kernel_size),
                     None if stride is None else _one_d(stride), (0, _one_d(padding)[1]),
                     _one_d(dilation), ceil_mode, return_indices)
    if return_indices:
        return tuple(o.squeeze(-2) for o in out)
    return out.squeeze(-2)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """As adaptive_avg_pool2d: output sizes that divide the input's (one
    max_pool2d of the quotient as kernel and stride); None keeps a size."""
    h, w = input.shape[-2:]
    oh, ow = _pair_of(output_size)
    oh, ow = h if oh is None else oh, w if ow is None else ow
    if h % oh or w % ow:
        raise NotImplementedError("loom adaptive_max_pool2d: output sizes that divide the "
                                  "input's")
    return max_pool2d(input, (h // oh, w // ow), return_indices=return_indices)


# ---- pixel shuffles, bilinear ----

def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r): a reshape, permute, reshape."""
    r = int(upscale_factor)
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    n = len(batch)
    y = input.reshape(*batch, c // (r * r), r, r, h, w)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W), pixel_shuffle's inverse."""
    r = int(downscale_factor)
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by "
                           f"downscale_factor, but got {h} x {w} and {r}")
    n = len(batch)
    y = input.reshape(*batch, c, h // r, r, w // r, r)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*batch, c * r * r, h // r, w // r)


def bilinear(input1, input2, weight, bias=None):
    """y_k = x1^T W_k x2 + b_k, weight (out, in1, in2): one matmul of x1
    by W's rows laid side by side, then a product with x2 summed."""
    out, in1, in2 = weight.shape
    flat_w = weight.permute(1, 0, 2).reshape(in1, out * in2)
    t = _F.matmul(input1, flat_w).reshape(*input1.shape[:-1], out, in2)
    y = (t * input2.unsqueeze(-2)).sum(-1)
    return y if bias is None else y + bias


# ---- more losses ----

def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps along the last dim."""
    return _F.norm(x1 - x2 + eps, p, -1, keepdim)


def pdist(input, p=2.0):
    """The p-norm distances of the rows of an (N, M) input, each pair i < j
    once, in row-major order; equal rows are 0 apart with gradient 0, as
    PyTorch's (their norm is taken of ones and dropped, so that no 0 / 0
    reaches the gradient)."""
    if input.ndim != 2:
        raise ValueError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    i, j = (_F._const(k.astype(np.int64)) for k in np.triu_indices(input.shape[0], 1))
    diff = _F.index_select(input, 0, i) - _F.index_select(input, 0, j)
    same = (diff == 0).all(-1, keepdim=True)
    dist = _F.norm(_F.where(same, 1.0, diff), p, -1)
    return _F.where(same.squeeze(-1), 0.0, dist)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is
    -1; cos over the last dim, each squared norm plus 1e-12 as PyTorch's."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    dim = input1.ndim - 1
    dot = (input1 * input2).sum(dim)
    sq1 = (input1 * input1).sum(dim) + 1e-12
    sq2 = (input2 * input2).sum(dim) + 1e-12
    cos = dot / _F.sqrt(sq1 * sq2)
    loss = _F.where(target == 1, 1.0 - cos, 0.0) + \
        _F.where(target == -1, _F.clamp_min(cos - margin, 0.0), 0.0)
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -target (x1 - x2) + margin)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _reduce(_F.clamp_min(-target * (input1 - input2) + margin, 0.0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """max(0, margin + d(a, p) - d(a, n)), d the pairwise distance; swap
    takes d(p, n) for d(a, n) where it is smaller."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = _F.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(_F.clamp_min(d_pos - d_neg + margin, 0.0), reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """e^x - target x (log_input), else x - target log(x + eps); full adds
    Stirling's term where target > 1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = _F.exp(input) - target * input
    else:
        loss = input - target * _F.log(input + eps)
    if full:
        big = target > 1
        t = _F.where(big, target, 1.0)  # a log of 1 where the term is 0
        stirling = t * _F.log(t) - t + 0.5 * _F.log(2 * math.pi * t)
        loss = loss + _F.where(big, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 (log var + (x - target)^2 / var), var clamped to eps in value
    only (the gradient passes as unclamped, as PyTorch's in-place clamp
    under no_grad); full adds 0.5 log(2 pi)."""
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if not var._lazy and (np.asarray(var.detach()) < 0).any():  # a lazy var is not read
        raise ValueError("var has negative entry/entries")
    var = var + (_F.clamp_min(var, eps) - var).detach()
    loss = 0.5 * (_F.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


from .volume import (adaptive_avg_pool3d, avg_pool3d, conv3d,  # noqa: E402,F401
                     conv_transpose3d, max_pool3d)
from .margin_losses import (hinge_embedding_loss, multi_margin_loss,  # noqa: E402,F401
                            multilabel_margin_loss, multilabel_soft_margin_loss,
                            soft_margin_loss, triplet_margin_with_distance_loss)
from .patches import (adaptive_max_pool1d, adaptive_max_pool3d,  # noqa: E402,F401
                      channel_shuffle, fold, local_response_norm, lp_pool1d, lp_pool2d,
                      max_unpool1d, max_unpool2d, max_unpool3d, unfold)


max_pool1d_with_indices = functools.partial(max_pool1d, return_indices=True)
max_pool2d_with_indices = functools.partial(max_pool2d, return_indices=True)
adaptive_max_pool1d_with_indices = functools.partial(adaptive_max_pool1d, return_indices=True)
adaptive_max_pool2d_with_indices = functools.partial(adaptive_max_pool2d, return_indices=True)
from .sampling import affine_grid, grid_sample  # noqa: E402,F401
from .ctc import ctc_loss  # noqa: E402,F401
from .noise import (alpha_dropout, feature_alpha_dropout,  # noqa: E402,F401
                    gumbel_softmax, rrelu, rrelu_)
