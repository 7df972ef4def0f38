"""Layers of torch.nn with PyTorch's parameter names and initializations."""
import math

from .. import functional as _F
from . import functional as F
from . import init
from .module import Module, Parameter


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, dtype=None):
        super().__init__()
        from .. import empty
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        self.bias = Parameter(empty(out_features, dtype=dtype)) if bias else None
        bound = 1 / math.sqrt(in_features) if in_features else 0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        from .. import empty
        self.weight = Parameter(empty(num_embeddings, embedding_dim))
        init.normal_(self.weight)

    def forward(self, index):
        return F.embedding(index, self.weight)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        from .. import ones, zeros
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = Parameter(ones(*self.normalized_shape))
        self.bias = Parameter(zeros(*self.normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


def _activation(name, fn):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x)})
    cls.__doc__ = f"{name}: {fn.__name__} as a module."
    return cls


ReLU = _activation("ReLU", _F.relu)
Tanh = _activation("Tanh", _F.tanh)
Sigmoid = _activation("Sigmoid", _F.sigmoid)
SiLU = _activation("SiLU", _F.silu)
GELU = _activation("GELU", _F.gelu)
Identity = _activation("Identity", lambda x: x)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return _F.flatten(x, self.start_dim, self.end_dim)


class CrossEntropyLoss(Module):
    def __init__(self, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.ignore_index, self.reduction,
                               self.label_smoothing)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)
