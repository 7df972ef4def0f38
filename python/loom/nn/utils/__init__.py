"""torch.nn.utils: gradient helpers, and rnn (packed sequences)."""
import math

from . import rnn  # noqa: F401


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales the .grad of parameters so that their global p-norm (the
    norm of the gradients' norms; inf: the largest magnitude) is at most
    max_norm; returns the norm before clipping (a tensor), as PyTorch's.
    error_if_nonfinite reads the norm. The optimizer then applies the
    clipped .grad."""
    from ... import functional as _F
    from ... import no_grad, stack, tensor
    norm_type = float(norm_type)
    params = [p for p in ([parameters] if hasattr(parameters, "grad") else parameters)
              if p.grad is not None]
    if not params:
        return tensor(0.0)
    with no_grad():
        total = _F.norm(stack([_F.norm(p.grad, norm_type) for p in params]), norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                               "`parameters` is non-finite, so it cannot be clipped. To disable "
                               "this error and scale the gradients by the non-finite norm "
                               "anyway, set `error_if_nonfinite=False`")
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
