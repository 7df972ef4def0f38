"""loom.nn: modules and losses in torch.nn's names."""
from . import functional, init, utils  # noqa: F401
from .layers import (AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d,  # noqa: F401
                     ConvTranspose2d, CrossEntropyLoss, Dropout, Embedding, Flatten, GELU,
                     GRUCell, Identity, LayerNorm, Linear, LSTM, LSTMCell, MaxPool2d, MSELoss,
                     MultiheadAttention, ReLU, Sigmoid, SiLU, Tanh, TransformerEncoder,
                     TransformerEncoderLayer)
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential  # noqa: F401
