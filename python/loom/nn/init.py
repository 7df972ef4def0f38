"""torch.nn.init's in-place initializers, drawing from loom's generator."""
import math

import numpy as np


def _gen():
    from .. import _generator_now
    return _generator_now()


def _fill(t, values):
    return t._write(values)


def uniform_(tensor, a=0.0, b=1.0):
    from .. import _check_random_dtype
    _check_random_dtype(tensor.dtype, "check_uniform_bounds")
    return _fill(tensor, _gen().uniform(a, b, tensor.shape))


def normal_(tensor, mean=0.0, std=1.0):
    from .. import _check_random_dtype
    _check_random_dtype(tensor.dtype, "normal_kernel_cpu")
    return _fill(tensor, _gen().normal(mean, std, tensor.shape))


def zeros_(tensor):
    return tensor._write(0)


def ones_(tensor):
    return tensor._write(1)


def constant_(tensor, val):
    return tensor._write(val)


def _fans(t):
    if len(t.shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer "
                         "than 2 dimensions")
    receptive = int(np.prod(t.shape[2:])) if len(t.shape) > 2 else 1
    return t.shape[1] * receptive, t.shape[0] * receptive


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """The gain torch.nn.init recommends for a nonlinearity (its table)."""
    if nonlinearity in _LINEAR:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(t, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan = _fans(t)[0 if mode == "fan_in" else 1]
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal values redrawn until they fall in [a, b] (the truncated
    normal PyTorch draws by its inverse CDF); clamped after 100 rounds."""
    values = _gen().normal(mean, std, tensor.shape)
    for _ in range(100):
        outside = (values < a) | (values > b)
        if not outside.any():
            break
        values[outside] = _gen().normal(mean, std, int(outside.sum()))
    return _fill(tensor, np.clip(values, a, b))


def eye_(tensor):
    """The identity in a 2-d tensor (ones on the diagonal)."""
    if len(tensor.shape) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*tensor.shape))


def dirac_(tensor, groups=1):
    """A convolution weight (out, in, *kernel) that passes its input
    through: in each of groups, output channel i takes input channel i at
    the kernel's center."""
    dims = len(tensor.shape)
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out = tensor.shape[0]
    if out % groups:
        raise ValueError("dim 0 must be divisible by groups")
    per = out // groups
    least = min(per, tensor.shape[1])
    values = np.zeros(tensor.shape)
    center = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(least):
            values[(g * per + d, d) + center] = 1
    return _fill(tensor, values)


def orthogonal_(tensor, gain=1.0):
    """A (semi-)orthogonal matrix over the first dim and the rest
    flattened, from the QR decomposition of a normal draw (the signs of
    R's diagonal folded into Q, as PyTorch's), times gain."""
    if len(tensor.shape) < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = int(np.prod(tensor.shape)) // rows if rows else 0
    if rows == 0 or cols == 0:
        return tensor
    flat = _gen().normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).reshape(tensor.shape))


def sparse_(tensor, sparsity, std=0.01):
    """A 2-d tensor drawn from N(0, std), then in each column
    ceil(sparsity * rows) entries, chosen at random, set to 0."""
    if len(tensor.shape) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = int(math.ceil(sparsity * rows))
    values = _gen().normal(0.0, std, (rows, cols))
    for c in range(cols):
        values[_gen().permutation(rows)[:zeros], c] = 0
    return _fill(tensor, values)
