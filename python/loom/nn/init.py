"""torch.nn.init's in-place initializers, drawing from loom's generator."""
import math

import numpy as np


def _gen():
    from .. import _generator_now
    return _generator_now()


def _fill(t, values):
    return t._write(values)


def uniform_(t, a=0.0, b=1.0):
    from .. import _check_random_dtype
    _check_random_dtype(t.dtype, "check_uniform_bounds")
    return _fill(t, _gen().uniform(a, b, t.shape))


def normal_(t, mean=0.0, std=1.0):
    from .. import _check_random_dtype
    _check_random_dtype(t.dtype, "normal_kernel_cpu")
    return _fill(t, _gen().normal(mean, std, t.shape))


def zeros_(t):
    return t._write(0)


def ones_(t):
    return t._write(1)


def constant_(t, value):
    return t._write(value)


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


def xavier_uniform_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a)


def xavier_normal_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(t, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan = _fans(t)[0 if mode == "fan_in" else 1]
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(t, a, mode, nonlinearity)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    return normal_(t, 0.0, _kaiming_std(t, a, mode, nonlinearity))


def trunc_normal_(t, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal values redrawn until they fall in [a, b] (the truncated
    normal PyTorch draws by its inverse CDF); clamped after 100 rounds."""
    values = _gen().normal(mean, std, t.shape)
    for _ in range(100):
        outside = (values < a) | (values > b)
        if not outside.any():
            break
        values[outside] = _gen().normal(mean, std, int(outside.sum()))
    return _fill(t, np.clip(values, a, b))
