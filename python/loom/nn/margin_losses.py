"""torch.nn.functional's margin and multi-label losses, in PyTorch's
definitions (ATen's Loss.cpp and LossMultiMargin/MultiLabelMargin): each
per-sample loss is composed of elementwise ops and sums, so that its
gradient is theirs."""
from .. import functional as _F
from . import functional as F


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """x where target is not -1, plus max(0, margin - x) where it is not 1
    (PyTorch's: a target of neither value takes both terms)."""
    reduction = F._legacy_reduction(size_average, reduce, reduction)
    loss = _F.where(target != 1, _F.clamp_min(margin - input, 0.0), 0.0) + \
        _F.where(target != -1, input, 0.0)
    return F._reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + e^(-target x)), as softplus (finite where e^(-target x)
    overflows)."""
    reduction = F._legacy_reduction(size_average, reduce, reduction)
    return F._reduce(_F.softplus(-target * input), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """-(y log sigmoid(x) + (1 - y) log sigmoid(-x)), times weight, averaged
    over the classes (the last dim), then reduced over the samples."""
    reduction = F._legacy_reduction(size_average, reduce, reduction)
    loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return F._reduce(loss.sum(input.ndim - 1) / input.shape[-1], reduction)


def _class_rows(input, name):
    """input as (N, C), and whether it was one sample (C,)."""
    if input.ndim not in (1, 2):
        raise ValueError(f"{name}: expected a 1-d (C) or 2-d (N, C) input, got "
                         f"{list(input.shape)}")
    return (input.unsqueeze(0), True) if input.ndim == 1 else (input, False)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """Per sample: the sum over the classes j other than the target y of
    max(0, margin - x[y] + x[j])^p (times weight[y]), over the number of
    classes; p is 1 or 2."""
    reduction = F._legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    x, single = _class_rows(input, "multi_margin_loss")
    y = target.reshape(1) if single and target.numel() == 1 else target
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"multi_margin_loss: inconsistent target size {list(target.shape)} "
                         f"for input of size {list(input.shape)}")
    c = x.shape[1]
    others = 1 - F.one_hot(y, c).to(x.dtype)
    z = _F.clamp_min(margin - _F.gather(x, 1, y.unsqueeze(1)) + x, 0.0)
    z = (z * z if p == 2 else z) * others
    if weight is not None:
        z = z * _F.index_select(weight, 0, y).unsqueeze(1)
    loss = z.sum(1) / c
    return F._reduce(loss.squeeze(0) if single else loss, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Per sample: target holds class indices, ended by the first -1; the
    sum over its entries j and the classes k not among them of
    max(0, 1 - (x[j] - x[k])), over the number of classes."""
    reduction = F._legacy_reduction(size_average, reduce, reduction)
    x, single = _class_rows(input, "multilabel_margin_loss")
    y = target.unsqueeze(0) if single and target.ndim == 1 else target
    if y.shape != x.shape:
        raise ValueError(f"multilabel_margin_loss: inconsistent target size "
                         f"{list(target.shape)} for input of size {list(input.shape)}")
    c = x.shape[1]
    listed = _F.cumsum((y < 0).to(x.dtype), 1) == 0  # entries before the first -1
    hits = F.one_hot(_F.where(listed, y, 0), c).to(x.dtype) * listed.to(x.dtype).unsqueeze(2)
    count = hits.sum(1)  # (N, C): how often the list names each class
    pairs = count.unsqueeze(2) * (count == 0).to(x.dtype).unsqueeze(1)
    hinge = _F.clamp_min(1.0 - (x.unsqueeze(2) - x.unsqueeze(1)), 0.0)
    loss = (hinge * pairs).sum((1, 2)) / c
    return F._reduce(loss.squeeze(0) if single else loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """max(0, margin + d(a, p) - d(a, n)), d the pairwise distance unless
    given; swap takes d(p, n) for d(a, n) where it is smaller."""
    if margin <= 0:
        raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater "
                         f"than 0, got {margin} instead")
    d = distance_function if distance_function is not None else F.pairwise_distance
    d_pos, d_neg = d(anchor, positive), d(anchor, negative)
    if swap:
        d_neg = _F.minimum(d_neg, d(positive, negative))
    return F._reduce(_F.clamp_min(margin + d_pos - d_neg, 0.0), reduction)
