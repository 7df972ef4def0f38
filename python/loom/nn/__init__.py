"""loom.nn: modules and losses in torch.nn's names."""
from . import functional, init, utils  # noqa: F401
from .layers import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool2d,  # noqa: F401
                     BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d, Dropout,
                     ELU, Embedding,
                     Flatten, GELU, GLU, GroupNorm, Hardtanh, Identity, LayerNorm,
                     LeakyReLU, Linear, LogSigmoid, LogSoftmax, MaxPool2d,
                     Mish, MultiheadAttention, PReLU, ReLU, ReLU6, Sigmoid, SiLU, Softmax,
                     Softplus, Tanh, Unflatten)
from .layers import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d  # noqa: F401
from .layers import (AdaptiveMaxPool2d, AvgPool1d, Bilinear, CELU, Hardsigmoid,  # noqa: F401
                     Hardswish, MaxPool1d, PixelShuffle, PixelUnshuffle, SELU, Softmin,
                     Softsign, Tanhshrink)
from .layers import (AlphaDropout, Dropout1d, Dropout2d, Dropout3d,  # noqa: F401
                     FeatureAlphaDropout, RReLU)
from .layers import (ConvTranspose1d, CosineSimilarity, EmbeddingBag, Hardshrink,  # noqa: F401
                     InstanceNorm1d, InstanceNorm2d, PairwiseDistance, Softmax2d, Softshrink,
                     Threshold)
from .layers3d import (AdaptiveAvgPool3d, AvgPool3d, BatchNorm3d, Conv3d,  # noqa: F401
                       ConvTranspose3d, InstanceNorm3d, MaxPool3d)
from .transformer import (Transformer, TransformerDecoder,  # noqa: F401
                          TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer)
from .padding import (ConstantPad1d, ConstantPad2d, ConstantPad3d,  # noqa: F401
                      ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d,
                      ReplicationPad2d,
                      ReplicationPad3d, ZeroPad2d)
from .losses import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss,  # noqa: F401
                     KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from .losses import (CosineEmbeddingLoss, GaussianNLLLoss, MarginRankingLoss,  # noqa: F401
                     PoissonNLLLoss, TripletMarginLoss)
from .losses import (CTCLoss, HingeEmbeddingLoss, MultiLabelMarginLoss,  # noqa: F401
                     MultiLabelSoftMarginLoss, MultiMarginLoss, NLLLoss2d, SoftMarginLoss,
                     TripletMarginWithDistanceLoss)
from .patch_layers import (AdaptiveMaxPool1d, AdaptiveMaxPool3d, ChannelShuffle,  # noqa: F401
                           Fold, LocalResponseNorm, LPPool1d, LPPool2d, MaxUnpool1d,
                           MaxUnpool2d, MaxUnpool3d, Unfold)
from .recurrent import (GRU, GRUCell, LSTM, LSTMCell, RNN, RNNBase,  # noqa: F401
                        RNNCell, RNNCellBase)
from .module import (Module, ModuleDict, ModuleList, Parameter, ParameterDict,  # noqa: F401
                     ParameterList, Sequential)
