"""loom.nn: modules and losses in torch.nn's names."""
from . import functional, init  # noqa: F401
from .layers import (CrossEntropyLoss, Dropout, Embedding, Flatten, GELU, Identity,  # noqa: F401
                     LayerNorm, Linear, MSELoss, ReLU, Sigmoid, SiLU, Tanh)
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential  # noqa: F401
