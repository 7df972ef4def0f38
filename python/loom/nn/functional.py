"""torch.nn.functional's names over Loom's ops."""
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


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """input (N, C) logits, target (N,) class indices, as PyTorch's: mean
    over the targets that are not ignore_index, with label smoothing."""
    if input.ndim != 2:
        raise ValueError("loom cross_entropy: input of shape (N, C)")
    n_classes = input.shape[1]
    logp = log_softmax(input, 1)
    keep = target != ignore_index
    safe = _F.where(keep, target, 0)
    picked = (logp * one_hot(safe, n_classes).float()).sum(1)
    loss = -picked
    if label_smoothing:
        loss = (1 - label_smoothing) * loss - label_smoothing * logp.mean(1)
    loss = loss * keep.float()
    if reduction == "mean":
        return loss.sum() / keep.float().sum()
    return _reduce(loss, reduction)


def nll_loss(input, target, ignore_index=-100, reduction="mean"):
    keep = target != ignore_index
    safe = _F.where(keep, target, 0)
    loss = -(input * one_hot(safe, input.shape[1]).float()).sum(1) * keep.float()
    if reduction == "mean":
        return loss.sum() / keep.float().sum()
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, reduction="mean"):
    # max(x, 0) - x*y + log(1 + e^-|x|): stable for large |x|
    loss = input.relu() - input * target + (-(input.abs())).exp().log1p()
    return _reduce(loss, reduction)


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
        weight = weight if weight is not None else ones(*normalized_shape)
        bias = bias if bias is not None else zeros(*normalized_shape)
    return _F._op("layer_norm", x, weight, bias, axis=axis, eps=float(eps))


__all__ = [n for n, v in list(globals().items())
           if not n.startswith("_") and callable(v) and v is not Tensor]
