"""torch.nn.functional.ctc_loss: the connectionist temporal classification
loss, -log of the probability of every alignment of each target to its
input frames, by the forward (alpha) recursion in log space over the
target with blanks between and around its labels. The recursion runs
one step per frame over the whole batch, as tensor ops, and the
gradient is autograd's through it."""
import numpy as np

from .. import functional as _F

# Log probability of an alignment prefix that cannot happen: finite, so
# that no gradient through it is 0 * inf; a loss past _IMPOSSIBLE is inf.
_NEVER = -1e30
_IMPOSSIBLE = 1e29


def _lengths(v, n, name):
    """v (a tensor, list or tuple of n ints) as a NumPy array; read on the
    host: the recursion's steps and the targets' layout depend on it."""
    a = np.asarray(v.tolist() if hasattr(v, "tolist") else v, dtype=np.int64).reshape(-1)
    if a.shape != (n,):
        raise ValueError(f"ctc_loss: {name} must hold one length per batch entry ({n}), got "
                         f"{a.shape[0]}")
    return a


def _padded_targets(targets, target_lengths):
    """targets as (N, S): padded ones as they are, concatenated ones (1-d)
    split by target_lengths."""
    if targets.ndim == 2:
        if targets.shape[1] < int(target_lengths.max(initial=0)):
            raise ValueError("ctc_loss: a target length exceeds the targets' second dim")
        return targets
    if targets.ndim != 1 or targets.shape[0] != int(target_lengths.sum()):
        raise ValueError(f"ctc_loss: 1-d targets must hold sum(target_lengths) = "
                         f"{int(target_lengths.sum())} labels, got {list(targets.shape)}")
    s = max(int(target_lengths.max(initial=0)), 1)
    starts = np.concatenate([[0], np.cumsum(target_lengths)[:-1]])
    index = np.minimum(starts[:, None] + np.arange(s)[None, :], max(targets.shape[0] - 1, 0))
    if targets.shape[0] == 0:
        return _F._const(np.zeros(index.shape, dtype=np.int64))
    return _F.index_select(targets, 0, _F._const(index.reshape(-1))).reshape(len(starts), s)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """log_probs (T, N, C) (log_softmax's output; (T, C) unbatched), targets
    (N, S) padded or the targets concatenated (1-d), input_lengths and
    target_lengths one per entry. reduction 'mean' divides each loss by
    its target length, then averages; 'sum'; 'none'. A target no
    alignment fits (longer than its input allows) costs inf, or 0 with
    zero_infinity. Gradients through log_softmax are PyTorch's (its own
    gradient with respect to log_probs adds exp(log_probs), which
    log_softmax's backward cancels)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_probs.ndim == 2:  # unbatched
        return ctc_loss(log_probs.unsqueeze(1), targets.unsqueeze(0) if targets.ndim == 1
                        else targets, [int(_lengths(input_lengths, 1, "input_lengths")[0])],
                        [int(_lengths(target_lengths, 1, "target_lengths")[0])], blank,
                        reduction, zero_infinity)
    if log_probs.ndim != 3:
        raise ValueError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got "
                         f"{list(log_probs.shape)}")
    t_max, n, c = log_probs.shape
    if not 0 <= blank < c:
        raise ValueError(f"ctc_loss: blank {blank} must be a class index below {c}")
    in_len = _lengths(input_lengths, n, "input_lengths")
    tg_len = _lengths(target_lengths, n, "target_lengths")
    if (in_len > t_max).any() or (in_len < 0).any() or (tg_len < 0).any():
        raise ValueError(f"ctc_loss: input lengths must lie in [0, {t_max}] and target "
                         f"lengths be at least 0")
    from .. import int64
    labels = _F.cast(_padded_targets(targets, tg_len), int64)
    s = labels.shape[1]
    width = 2 * s + 1
    # the extended target: blank, l1, blank, l2, ..., blank
    last_blank = _F._const(np.full((n, 1), blank, dtype=np.int64))
    ext = _F.stack([last_blank.expand(n, s), labels], 2).reshape(n, 2 * s)
    ext = _F.cat([ext, last_blank], 1)
    # position p may come from p - 2, skipping a blank: a label unlike the
    # label two back
    skip = None
    if width > 2:
        first = _F._const(np.zeros((n, 2), dtype=bool))
        skip = _F.cat([first, ext[:, 2:] != ext[:, :-2]], 1) & (ext != blank)
    frames = _F.gather(log_probs, 2, ext.unsqueeze(0).expand(t_max, n, width))
    never = _F.cast(_F._const(np.full((n, width), _NEVER, dtype=np.float32)), log_probs.dtype)
    start = np.full((1, width), _NEVER, dtype=np.float32)
    start[0, :min(2, width)] = 0.0
    alpha = frames[0] + _F.cast(_F._const(start), log_probs.dtype) if t_max else never
    for t in range(1, t_max):
        one = _F.pad(alpha[:, :-1], (1, 0), value=_NEVER)
        two = _F.where(skip, _F.pad(alpha[:, :-2], (2, 0), value=_NEVER), never) \
            if width > 2 else never
        top = _F.maximum(_F.maximum(alpha, one), two)
        step = top + _F.log(_F.exp(alpha - top) + _F.exp(one - top) + _F.exp(two - top)) + \
            frames[t]
        live = _F._const((t < in_len).reshape(n, 1))
        alpha = _F.where(live, step, alpha)
    # the paths end at the last label or the blank after it
    last = _F._const((2 * tg_len).reshape(n, 1))
    ends = _F.cat([_F.gather(alpha, 1, last),
                   _F.where(_F._const((tg_len > 0).reshape(n, 1)),
                            _F.gather(alpha, 1, _F.clamp_min(last - 1, 0)), never[:, :1])], 1)
    top = ends.max(1, keepdim=True)[0]
    loss = -(top + _F.log(_F.exp(ends - top).sum(1, keepdim=True))).reshape(n)
    empty = _F._const(in_len == 0)  # no frames: only an empty target, at probability 1
    loss = _F.where(empty, _F.where(_F._const(tg_len == 0), 0.0, _IMPOSSIBLE * 10), loss)
    impossible = loss > _IMPOSSIBLE
    loss = _F.where(impossible, 0.0 if zero_infinity else float("inf"), loss)
    if reduction == "mean":
        lengths = _F.cast(_F._const(np.maximum(tg_len, 1)), loss.dtype)
        return (loss / lengths).mean()
    return loss.sum() if reduction == "sum" else loss
