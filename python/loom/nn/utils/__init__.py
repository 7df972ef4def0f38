"""torch.nn.utils: gradient helpers, and rnn (packed sequences)."""
from . import rnn  # noqa: F401


def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
    """Scales the .grad of parameters so that their global L2 norm is at
    most max_norm; returns the norm before clipping (a tensor), as
    PyTorch's. The optimizer then applies the clipped .grad."""
    from ... import no_grad, stack
    if norm_type != 2.0:
        raise NotImplementedError("clip_grad_norm_: the L2 norm only")
    params = [p for p in ([parameters] if hasattr(parameters, "grad") else parameters)
              if p.grad is not None]
    if not params:
        from ... import tensor
        return tensor(0.0)
    with no_grad():
        total = stack([(p.grad * p.grad).sum() for p in params]).sum().sqrt()
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad = p.grad * coef
    return total


def clip_grad_value_(parameters, clip_value):
    """Clamps each .grad of parameters to [-clip_value, clip_value] in
    place, as PyTorch's."""
    from ... import no_grad
    clip_value = float(clip_value)
    with no_grad():
        for p in ([parameters] if hasattr(parameters, "grad") else parameters):
            if p.grad is not None:
                p.grad = p.grad.clamp(-clip_value, clip_value)
