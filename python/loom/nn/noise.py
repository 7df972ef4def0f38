"""torch.nn.functional's functions that draw random numbers besides
dropout: alpha_dropout and feature_alpha_dropout (dropout that keeps a
SELU network's mean and variance), rrelu (a leaky ReLU whose negative
slope is drawn per element in training) and gumbel_softmax, each in
PyTorch's formula, drawing from loom's generator (loom.manual_seed)."""
from .. import functional as _F
from . import functional as F

_SELU_ALPHA = 1.7580993408473766  # SELU's scale times its alpha: -its limit below


def _alpha_dropout(x, p, training, inplace, feature):
    F._check_dropout(p)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return F._result(x, x * 0.0, inplace)
    from .. import rand
    shape = (tuple(x.shape[:2]) + (1,) * (x.ndim - 2)) if feature else tuple(x.shape)
    if feature and x.ndim < 2:
        raise ValueError(f"feature_alpha_dropout: expected an input of at least 2 dims "
                         f"(N, C, ...), got {x.ndim}")
    keep = _F.cast(rand(*shape) >= p, x.dtype)
    a = 1.0 / ((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p)) ** 0.5
    # kept: a x + b; dropped: the value SELU takes at -inf, moved as the kept
    b = (keep - 1.0) * (_SELU_ALPHA * a) + _SELU_ALPHA * a * p
    return F._result(x, x * (keep * a) + b, inplace)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Elements dropped with probability p to SELU's lower limit, then all
    scaled and shifted so that mean and variance stay (PyTorch's a, b)."""
    return _alpha_dropout(input, p, training, inplace, False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels: one draw per (sample, channel)."""
    return _alpha_dropout(input, p, training, inplace, True)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """x where x > 0, else x times a slope: drawn uniformly from [lower,
    upper) per element in training, (lower + upper) / 2 in eval."""
    if not training:
        return F._result(input, _F.leaky_relu(input, (lower + upper) / 2), inplace)
    from .. import rand
    slope = _F.cast(rand(*input.shape), input.dtype) * (upper - lower) + lower
    return F._result(input, _F.where(input > 0, input, input * slope), inplace)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, inplace=True)


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) along dim, g Gumbel noise; hard: the
    one-hot of its argmax, with the soft sample's gradient (straight
    through)."""
    from .. import rand
    uniform = _F.cast(rand(*logits.shape), logits.dtype)
    # -log of an exponential draw, kept above 0 (a uniform draw of 0)
    gumbels = -_F.log(_F.clamp_min(-_F.log1p(-uniform), 1e-30))
    soft = F.softmax((logits + gumbels) / tau, dim)
    if not hard:
        return soft
    index = soft.max(dim, keepdim=True)[1]
    from .. import zeros_like
    one_hot = _F.scatter(zeros_like(logits), dim, index, value=1.0)
    return one_hot - soft.detach() + soft
