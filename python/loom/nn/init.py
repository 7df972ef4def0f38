"""torch.nn.init's in-place initializers, drawing from loom's generator."""
import math

import numpy as np


def _gen():
    from .. import _generator_now
    return _generator_now()


def _fill(t, values):
    np.asarray(t)[...] = values.astype(np.asarray(t).dtype)
    return t


def uniform_(t, a=0.0, b=1.0):
    return _fill(t, _gen().uniform(a, b, t.shape))


def normal_(t, mean=0.0, std=1.0):
    return _fill(t, _gen().normal(mean, std, t.shape))


def zeros_(t):
    np.asarray(t)[...] = 0
    return t


def ones_(t):
    np.asarray(t)[...] = 1
    return t


def constant_(t, value):
    np.asarray(t)[...] = value
    return t


def _fans(t):
    receptive = int(np.prod(t.shape[2:])) if len(t.shape) > 2 else 1
    return t.shape[1] * receptive, t.shape[0] * receptive


def xavier_uniform_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a)


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan = _fans(t)[0 if mode == "fan_in" else 1]
    gain = math.sqrt(2.0 / (1 + a * a)) if nonlinearity == "leaky_relu" else math.sqrt(2.0)
    bound = gain * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound)
