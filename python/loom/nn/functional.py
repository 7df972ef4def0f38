"""torch.nn.functional's names over Loom's ops."""
from .. import _C
from .. import functional as _F
from .._tensor import Tensor
from ..functional import (relu, gelu, silu, leaky_relu, elu, softplus, softmax,  # noqa: F401
                          log_softmax, sigmoid, tanh, pad, embedding, one_hot)


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


def mse_loss(input, target, reduction="mean"):
    return _reduce((input - target) ** 2, reduction)


def l1_loss(input, target, reduction="mean"):
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


def _class_weights(weight, target, keep):
    """Each target's class weight (1 without weight), 0 where ignored."""
    w = keep.float()
    return w if weight is None else w * _F.index_select(weight, 0, target)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """input (N, C) logits, target (N,) class indices, as PyTorch's: with
    class weights, the mean is over the targets' weights (those not
    ignore_index); label smoothing weighs each class's term by its weight.
    A float target is class probabilities instead (below)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if target.dtype.is_floating_point:
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    if input.ndim != 2:
        raise ValueError("loom cross_entropy: input of shape (N, C)")
    n_classes = input.shape[1]
    _check_targets(target, n_classes, ignore_index)
    logp = log_softmax(input, 1)
    keep = target != ignore_index
    safe = _F.where(keep, target, 0)
    w = _class_weights(weight, safe, keep)
    loss = -(logp * one_hot(safe, n_classes).float()).sum(1) * w
    if label_smoothing:
        every = logp if weight is None else logp * weight
        smooth = -every.sum(1) * keep.float() / n_classes
        loss = (1 - label_smoothing) * loss + label_smoothing * smooth
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


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
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    term = log_softmax(input, dim) * target
    if weight is not None:
        term = term * weight.reshape(n_classes, *[1] * (input.ndim - dim - 1))
    return _reduce(-term.sum(dim), reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_targets(target, input.shape[1], ignore_index)
    keep = target != ignore_index
    safe = _F.where(keep, target, 0)
    w = _class_weights(weight, safe, keep)
    loss = -(input * one_hot(safe, input.shape[1]).float()).sum(1) * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """input probabilities; the logs are clamped at -100, as PyTorch's, so
    that a probability of 0 or 1 gives a finite loss."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = -(target * _F.clamp(input.log(), min=-100)
             + (1 - target) * _F.clamp((1 - input).log(), min=-100))
    return _reduce(loss if weight is None else loss * weight, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(_F.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)."""
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


def hardtanh(input, min_val=-1.0, max_val=1.0):
    return _F.clamp(input, min_val, max_val)


def relu6(input, inplace=False):
    return _F.clamp(input, 0.0, 6.0)


def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x), x itself far below zero."""
    return -softplus(-input)


def mish(input, inplace=False):
    return input * tanh(softplus(input))


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
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
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
    # -log sigmoid(x) = log(1 + e^-|x|) + max(-x, 0): stable for large |x|
    neg_log_sig = (-(input.abs())).exp().log1p() + (-input).relu()
    scale = neg_log_sig if pos_weight is None else (1 + (pos_weight - 1) * target) * neg_log_sig
    loss = (1 - target) * input + scale
    return _reduce(loss if weight is None else loss * weight, reduction)


def dropout(x, p=0.5, training=True):
    if not training or p == 0.0:
        return x
    from .. import rand
    keep = rand(*x.shape) >= p
    return _F.where(keep, x * (1.0 / (1.0 - p)), 0.0)


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
    ph, pw = _pair_of(padding)
    return [ph, pw, ph, pw]


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    stride, dilation = _pair_of(stride), _pair_of(dilation)
    pads = _conv_pads(padding, weight.shape[2:], dilation, stride)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return _C.op("conv2d", inputs, {"stride": list(stride), "pads": pads,
                                       "dilation": list(dilation), "groups": int(groups)})


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """x (N, C, L), weight (out, C / groups, k): conv2d over a unit height."""
    def width(v):
        return v if isinstance(v, str) else (1, v if isinstance(v, int) else v[0])
    pads = padding if isinstance(padding, str) else (0, width(padding)[1])
    y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, width(stride), pads,
               width(dilation), groups)
    return y.squeeze(2)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    ph, pw = _pair_of(padding)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return _C.op("conv_transpose2d", inputs, {
        "stride": list(_pair_of(stride)), "pads": [ph, pw, ph, pw],
        "dilation": list(_pair_of(dilation)), "groups": int(groups),
        "output_padding": list(_pair_of(output_padding))})


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1):
    ph, pw = _pair_of(padding)
    attrs = {"kernel": list(_pair_of(kernel_size)), "pads": [ph, pw, ph, pw],
             "dilation": list(_pair_of(dilation))}
    if stride is not None:
        attrs["stride"] = list(_pair_of(stride))
    return _C.op("max_pool2d", (x,), attrs)


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    ph, pw = _pair_of(padding)
    attrs = {"kernel": list(_pair_of(kernel_size)), "pads": [ph, pw, ph, pw],
             "count_include_pad": int(count_include_pad)}
    if stride is not None:
        attrs["stride"] = list(_pair_of(stride))
    return _C.op("avg_pool2d", (x,), attrs)


def adaptive_avg_pool2d(x, output_size):
    oh, ow = _pair_of(output_size)
    h, w = x.shape[-2:]
    if (oh, ow) == (1, 1):
        return _C.op("global_avg_pool", (x,), None)
    if h % oh or w % ow:
        raise NotImplementedError("loom adaptive_avg_pool2d: output sizes that divide the "
                                  "input's")
    return avg_pool2d(x, (h // oh, w // ow))


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Returns y; in training, running_mean and running_var (when given)
    take their new values in place, as PyTorch's: the statistics are read
    here (a graph break), or, inside loom.compile, assigned at each run
    when they are a module's buffers."""
    y, mean, var = _batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
                               eps)
    if training:
        for buf, new in ((running_mean, mean), (running_var, var)):
            if buf is None:
                continue
            if _C._capturing():
                _C._assign(buf, new.detach())
            else:
                _C._copy_into(buf, new.detach())
    return y


def _batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    from .. import ones, zeros
    c = x.shape[1]
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
    import numpy as np
    return tensor(np.triu(np.full((lq, lk), -np.inf, np.float32), 1))


def _attention(q, k, v, mask, dropout_p, scale):
    """softmax(q k^T * scale + mask) (dropped out at dropout_p) v, and the
    weights. mask: additive (float) or None."""
    import math
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
