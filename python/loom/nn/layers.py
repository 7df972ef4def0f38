"""Layers of torch.nn with PyTorch's parameter names and initializations."""
import math

from .. import functional as _F
from . import functional as F
from . import init
from .module import Module, ModuleList, Parameter


def _on_device(module, device, dtype):
    """PyTorch's factory arguments of a layer: the host's device (cpu), and
    the parameters' dtype."""
    if device is not None:
        from .._tensor import _check_device
        _check_device(device)
    if dtype is not None:
        module.to(dtype)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        if device is not None:
            _on_device(self, device, None)
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


def _table(module, num_embeddings, embedding_dim, padding_idx, weight, dtype):
    """An Embedding's or EmbeddingBag's table: weight as given, or drawn
    from N(0, 1) with padding_idx's row zero."""
    from .. import empty
    if padding_idx is not None:
        if not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError("Padding_idx must be within num_embeddings")
        padding_idx %= num_embeddings
    module.num_embeddings, module.embedding_dim = num_embeddings, embedding_dim
    module.padding_idx = padding_idx
    if weight is not None:
        module.weight = Parameter(weight)
        return
    module.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype))
    init.normal_(module.weight)
    if padding_idx is not None:
        import numpy as np
        np.asarray(module.weight)[padding_idx] = 0


class Embedding(Module):
    """torch.nn.Embedding: padding_idx's row starts at zero and gets no
    gradient; max_norm renormalizes the rows looked up, in place
    (scale_grad_by_freq is not supported)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 device=None, dtype=None):
        super().__init__()
        _on_device(self, device, None)
        if scale_grad_by_freq:
            raise NotImplementedError("loom Embedding: scale_grad_by_freq")
        self.max_norm, self.norm_type = max_norm, norm_type
        _table(self, num_embeddings, embedding_dim, padding_idx, _weight, dtype)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """An Embedding whose weight is embeddings' memory (its rows as they
        are, padding_idx's too), trained unless freeze, as PyTorch's."""
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        module = cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                     _weight=embeddings.detach())
        module.weight.requires_grad = not freeze
        return module

    def forward(self, index):
        return F.embedding(index, self.weight, self.padding_idx, self.max_norm, self.norm_type)


class EmbeddingBag(Module):
    """torch.nn.EmbeddingBag: the sum, mean or max of each bag's rows
    (F.embedding_bag); weight drawn from N(0, 1), padding_idx's row zero."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="mean", sparse=False, _weight=None,
                 include_last_offset=False, padding_idx=None, device=None, dtype=None):
        super().__init__()
        _on_device(self, device, None)
        self.max_norm, self.norm_type, self.mode = max_norm, norm_type, mode
        self.scale_grad_by_freq, self.include_last_offset = scale_grad_by_freq, include_last_offset
        _table(self, num_embeddings, embedding_dim, padding_idx, _weight, dtype)

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, False, per_sample_weights,
                               self.include_last_offset, self.padding_idx)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        from .. import ones, zeros
        _on_device(self, device, None)
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype))
            self.bias = Parameter(zeros(*self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Dropout(Module):
    _function = staticmethod(F.dropout)

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        F._check_dropout(p)
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return self._function(x, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Channels dropped whole, as torch.nn.Dropout1d ((N, C, L) or (C, L))."""
    _function = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    """Channels dropped whole, as torch.nn.Dropout2d ((N, C, H, W))."""
    _function = staticmethod(F.dropout2d)


class Dropout3d(Dropout):
    """Channels dropped whole, as torch.nn.Dropout3d ((N, C, D, H, W) or (C, D, H, W))."""
    _function = staticmethod(F.dropout3d)


class AlphaDropout(Dropout):
    """torch.nn.AlphaDropout: dropout that keeps a SELU network's mean and
    variance (F.alpha_dropout)."""
    _function = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(Dropout):
    """torch.nn.FeatureAlphaDropout: alpha dropout of whole channels."""
    _function = staticmethod(F.feature_alpha_dropout)


class RReLU(Module):
    """torch.nn.RReLU: negative slopes drawn from [lower, upper) per element
    in training, their mean in eval (F.rrelu)."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, x):
        return F.rrelu(x, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}"


def _activation(name, fn):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x)})
    cls.__doc__ = f"{name}: {fn.__name__} as a module."
    return cls


def _inplace_activation(name, fn):
    """An activation whose torch.nn class takes inplace: the input tensor
    then takes the result, as PyTorch's."""
    cls = _activation(name, fn)

    def __init__(self, inplace=False):
        Module.__init__(self)
        self.inplace = inplace

    def forward(self, x):
        y = fn(x)
        return x._inplace(y) if self.inplace else y
    cls.__init__, cls.forward = __init__, forward
    cls.extra_repr = lambda self: "inplace=True" if self.inplace else ""
    return cls


ReLU = _inplace_activation("ReLU", _F.relu)
Tanh = _activation("Tanh", _F.tanh)
Sigmoid = _activation("Sigmoid", _F.sigmoid)
SiLU = _inplace_activation("SiLU", _F.silu)
ReLU6 = _inplace_activation("ReLU6", F.relu6)
Mish = _inplace_activation("Mish", F.mish)
LogSigmoid = _activation("LogSigmoid", F.logsigmoid)


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.glu(x, self.dim)


class PReLU(Module):
    """x where x > 0, else weight x: one learned slope, or one per channel."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        from .. import full
        _on_device(self, device, None)
        self.num_parameters = num_parameters
        self.weight = Parameter(full((num_parameters,), float(init), dtype=dtype))

    def forward(self, x):
        return F.prelu(x, self.weight)


class Identity(Module):
    def __init__(self, *args, **kwargs):  # as PyTorch's: arguments are ignored
        super().__init__()

    def forward(self, x):
        return x


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _F.gelu(x, self.approximate)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope, self.inplace)


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x):
        return F.elu(x, self.alpha, self.inplace)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be above min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x):
        return F.hardtanh(x, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"


def _softmax_dim(x, dim):
    """PyTorch's dim when none is given (a legacy): 0 for 0, 1 and 3 dims."""
    return dim if dim is not None else 0 if x.ndim in (0, 1, 3) else 1


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _F.softmax(x, _softmax_dim(x, self.dim))


class LogSoftmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _F.log_softmax(x, _softmax_dim(x, self.dim))


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        return _F.unflatten(x, self.dim, self.unflattened_size)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return _F.flatten(x, self.start_dim, self.end_dim)


def _ntuple(v, n):
    """An int repeated n times, or a sequence as a tuple."""
    return (v,) * n if isinstance(v, int) else tuple(v)


def _uniform_params(module, fan_in, *names_shapes):
    from .. import empty
    bound = 1 / math.sqrt(fan_in) if fan_in else 0
    for name, shape in names_shapes:
        t = Parameter(empty(*shape))
        init.uniform_(t, -bound, bound)
        setattr(module, name, t)


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _check_conv_padding(padding, padding_mode, stride):
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                         f"padding_mode={padding_mode!r}")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"['valid', 'same']")
        if padding == "same" and any(s != 1 for s in F._pair_of(stride)):
            raise ValueError("padding='same' is not supported for strided convolutions")


def _mode_padded(x, pads, mode):
    """x padded by F.pad's mode; pads (top, left, bottom, right) as the
    conv op's (top and bottom ignored for a 3-d, 1-d convolution input)."""
    top, left, bottom, right = pads
    return _F.pad(x, (left, right) if x.ndim == 3 else (left, right, top, bottom), mode=mode)


def _check_groups(in_channels, out_channels, groups):
    """PyTorch's checks at construction, not at the first forward."""
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")


class _ConvNd(Module):
    """What Conv1d and Conv2d share: the arguments kept as torch keeps them
    and the parameters, weight (out, in / groups, *kernel) and bias (out,),
    uniform in torch's bounds."""

    def __init__(self, in_channels, out_channels, kernel, stride, padding, dilation, groups,
                 bias, padding_mode):
        super().__init__()
        _check_groups(in_channels, out_channels, groups)
        _check_conv_padding(padding, padding_mode, stride)
        self.padding_mode = padding_mode
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        fan_in = in_channels // groups * math.prod(kernel)
        _uniform_params(self, fan_in, ("weight", (out_channels, in_channels // groups) + kernel))
        if bias:
            _uniform_params(self, fan_in, ("bias", (out_channels,)))
        else:
            self.bias = None

    def extra_repr(self):
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
               f"stride={self.stride}"


class Conv2d(_ConvNd):
    """torch.nn.Conv2d; padding_mode other than 'zeros' pads the input by
    F.pad's mode, then convolves it unpadded. An unbatched (C, H, W) input
    gives an unbatched result."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, tuple(F._pair_of(kernel_size)), stride,
                         padding, dilation, groups, bias, padding_mode)
        _on_device(self, device, dtype)

    def forward(self, x):
        if F._unbatched(x, 4, "conv2d"):
            return self.forward(x.unsqueeze(0)).squeeze(0)
        if self.padding_mode != "zeros":
            pads = F._conv_pads(self.padding, self.kernel_size, F._pair_of(self.dilation),
                                F._pair_of(self.stride))
            return F.conv2d(_mode_padded(x, pads, self.padding_mode), self.weight, self.bias,
                            self.stride, 0, self.dilation, self.groups)
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class Conv1d(_ConvNd):
    """torch.nn.Conv1d: weight (out, in / groups, k), bias (out,), run as a
    convolution over a unit height (F.conv1d); (C, L) inputs unbatched."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        k = kernel_size if isinstance(kernel_size, int) else kernel_size[0]
        super().__init__(in_channels, out_channels, (k,), stride, padding, dilation, groups,
                         bias, padding_mode)
        _on_device(self, device, dtype)

    def forward(self, x):
        if F._unbatched(x, 3, "conv1d"):
            return self.forward(x.unsqueeze(0)).squeeze(0)
        if self.padding_mode != "zeros":
            def first(v):
                return v if isinstance(v, int) else v[0]
            padding = self.padding if isinstance(self.padding, str) else first(self.padding)
            pads = F._conv_pads((0, padding) if isinstance(padding, int) else padding,
                                (1,) + self.kernel_size, (1, first(self.dilation)),
                                (1, first(self.stride)))
            return F.conv1d(_mode_padded(x, pads, self.padding_mode), self.weight, self.bias,
                            self.stride, 0, self.dilation, self.groups)
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class ConvTranspose2d(Module):
    """torch.nn.ConvTranspose2d; forward's output_size picks the
    output_padding that gives it, as PyTorch's."""
    dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError('Only "zeros" padding mode is supported for ConvTranspose2d')
        _check_groups(in_channels, out_channels, groups)
        self.kernel_size = _ntuple(kernel_size, self.dims)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        fan_in = out_channels // groups * math.prod(self.kernel_size)  # PyTorch's: weight dim 1
        _uniform_params(self, fan_in,
                        ("weight", (in_channels, out_channels // groups) + self.kernel_size))
        if bias:
            _uniform_params(self, fan_in, ("bias", (out_channels,)))
        else:
            self.bias = None
        _on_device(self, device, dtype)

    def _output_padding(self, x, output_size):
        if output_size is None:
            return self.output_padding
        n = self.dims
        size = list(output_size)[-n:]
        pad, stride, dil = (_ntuple(v, n) for v in (self.padding, self.stride, self.dilation))
        out = []
        for d in range(n):
            least = (x.shape[-n + d] - 1) * stride[d] - 2 * pad[d] + \
                dil[d] * (self.kernel_size[d] - 1) + 1
            if not least <= size[d] < least + stride[d]:
                raise ValueError(f"requested an output size of {size}, but valid sizes range "
                                 f"from {least} to {least + stride[d] - 1} (for an input of "
                                 f"{list(x.shape[-n:])})")
            out.append(size[d] - least)
        return tuple(out)

    def forward(self, x, output_size=None):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)


class ConvTranspose1d(ConvTranspose2d):
    """torch.nn.ConvTranspose1d: ConvTranspose2d over a unit height, with
    weight (in, out / groups, k)."""
    dims = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                         groups, bias, dilation, padding_mode, device, dtype)

    def forward(self, x, output_size=None):
        return F.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)


def _norm_state(module, num_features, eps, momentum, affine, track_running_stats, dtype):
    """A batch or instance norm's settings, weight and bias (affine), and
    running statistics (track_running_stats), in PyTorch's names."""
    from .. import ones, zeros, tensor
    module.num_features, module.eps, module.momentum = num_features, eps, momentum
    module.affine, module.track_running_stats = affine, track_running_stats
    module.weight = Parameter(ones(num_features, dtype=dtype)) if affine else None
    module.bias = Parameter(zeros(num_features, dtype=dtype)) if affine else None
    if track_running_stats:
        module.register_buffer("running_mean", zeros(num_features, dtype=dtype))
        module.register_buffer("running_var", ones(num_features, dtype=dtype))
        module.register_buffer("num_batches_tracked", tensor(0))
    else:
        module.running_mean = module.running_var = module.num_batches_tracked = None


class BatchNorm2d(Module):
    """torch.nn.BatchNorm2d: affine=False has no weight and bias;
    track_running_stats=False keeps no statistics and normalizes by the
    batch's in eval too; momentum=None makes the running statistics the
    cumulative average over the batches seen (num_batches_tracked)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        _norm_state(self, num_features, eps, momentum, affine, track_running_stats, dtype)

    def _check_input_dim(self, x):
        if x.ndim != 4:
            raise ValueError(f"expected 4D input (got {x.ndim}D input)")

    def forward(self, x):
        self._check_input_dim(x)
        return self._normalize(x)

    def _normalize(self, x):
        """x (N, C, H, W) normalized per channel, the statistics updated."""
        if not self.track_running_stats:
            return F._batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)[0]
        # momentum None: the op's momentum 1 gives the batch's statistics,
        # averaged here with weight 1/n (a tensor: no read of n)
        momentum = 1.0 if self.momentum is None else self.momentum
        y, mean, var = F._batch_norm(x, self.running_mean, self.running_var, self.weight,
                                     self.bias, self.training, momentum, self.eps)
        if self.training:
            n = self.num_batches_tracked + 1
            if self.momentum is None:
                mean = self.running_mean + (mean - self.running_mean) / n
                var = self.running_var + (var - self.running_var) / n
            self._update_buffers(mean.detach(), var.detach(), n)
        return y

    def _update_buffers(self, mean, var, n):
        from .. import _C
        if _C._capturing():  # loom.compile: the buffers update in place
            for buf, value in zip((self.running_mean, self.running_var,
                                   self.num_batches_tracked), (mean, var, n)):
                _C._assign(buf, value)
        else:  # in place where no executable borrows them (held references see it)
            for name, value in zip(("running_mean", "running_var", "num_batches_tracked"),
                                   (mean, var, n)):
                if not _C._take_value(self._buffers[name], value):
                    setattr(self, name, value)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, " \
               f"affine={self.affine}, track_running_stats={self.track_running_stats}"


class BatchNorm1d(BatchNorm2d):
    """(N, C) or (N, C, L) inputs, normalized per channel by BatchNorm2d's
    code over (N, C, L, 1)."""

    def _check_input_dim(self, x):
        if x.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {x.ndim}D input)")

    def forward(self, x):
        self._check_input_dim(x)
        if self.training or not self.track_running_stats:  # the error names x's own size
            F._check_batch_stats(x)
        added = [3] if x.ndim == 3 else [2, 3]
        y = self._normalize(_F.unsqueeze(_F.unsqueeze(x, 2), 3) if x.ndim == 2
                            else _F.unsqueeze(x, 3))
        return _F.squeeze(y, added)


class GroupNorm(Module):
    """torch.nn.GroupNorm: channels in num_groups groups, each normalized
    over its channels and the other dims; weight and bias per channel."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None):
        super().__init__()
        from .. import ones, zeros
        _on_device(self, device, None)
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.affine = affine
        self.weight = Parameter(ones(num_channels, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_channels, dtype=dtype)) if affine else None

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class _InstanceNorm(Module):
    """torch.nn.InstanceNorm1d/2d: each image's channel normalized over its
    own positions; affine=True learns a weight and bias per channel;
    track_running_stats keeps running statistics, which eval then uses."""
    dims = 2

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__()
        _on_device(self, device, None)
        _norm_state(self, num_features, eps, momentum, affine, track_running_stats, dtype)

    def forward(self, x):
        if x.ndim == self.dims + 1:  # unbatched
            return self.forward(x.unsqueeze(0)).squeeze(0)
        if x.ndim != self.dims + 2:
            raise ValueError(f"{type(self).__name__}: expected an input of {self.dims + 1} or "
                             f"{self.dims + 2} dims, got {x.ndim}")
        stats = self.training or not self.track_running_stats
        return F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               stats, self.momentum, self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, " \
               f"affine={self.affine}, track_running_stats={self.track_running_stats}"


class InstanceNorm1d(_InstanceNorm):
    dims = 1


class InstanceNorm2d(_InstanceNorm):
    dims = 2


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size, self.padding, self.dilation = kernel_size, padding, dilation
        self.stride = kernel_size if stride is None else stride
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, " \
               f"padding={self.padding}, dilation={self.dilation}, ceil_mode={self.ceil_mode}"


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None else stride
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Any output size; None keeps the input's (F.adaptive_avg_pool2d)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    def forward(self, x):
        return F.adaptive_avg_pool1d(x, self.output_size)


class Upsample(Module):
    """torch.nn.Upsample: F.interpolate with the module's arguments."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self):
        what = f"size={self.size}" if self.size is not None else \
            f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear with align_corners=True, as PyTorch's."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: its parameters (in_proj_weight,
    in_proj_bias, out_proj), arguments and masks (a bool attn_mask or
    key_padding_mask marks what may NOT be attended to, a float one is
    added), and its result (out, the attention weights averaged over the
    heads, per head, or None when need_weights=False). Keys and values of
    the query's width only (kdim, vdim), no add_bias_kv / add_zero_attn.
    is_causal without attn_mask applies the causal mask."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        from .. import zeros
        _on_device(self, device, None)
        if embed_dim % num_heads:
            raise ValueError("embed_dim must be divisible by num_heads")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or \
                vdim not in (None, embed_dim):
            raise NotImplementedError("loom MultiheadAttention: add_bias_kv, add_zero_attn "
                                      "and kdim/vdim other than embed_dim")
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.dropout = dropout
        self.in_proj_weight = Parameter(zeros(3 * embed_dim, embed_dim, dtype=dtype))
        init.xavier_uniform_(self.in_proj_weight)
        self.in_proj_bias = Parameter(zeros(3 * embed_dim, dtype=dtype)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if bias:
            init.zeros_(self.out_proj.bias)

    @staticmethod
    def _additive(mask):
        if mask is None or mask.dtype.name != "bool":
            return mask
        return _F.where(mask, float("-inf"), 0.0)

    def _check_shapes(self, query, key, value, key_padding_mask, attn_mask):
        """PyTorch's checks of the arguments, in its words (ValueError where
        it asserts), before any op is built."""
        if query.ndim not in (2, 3):
            raise ValueError(f"query should be unbatched 2D or batched 3D tensor but received "
                             f"{query.ndim}-D query tensor")
        kind, want = ("batched (3-D)", 3) if query.ndim == 3 else ("unbatched (2-D)", 2)
        if key.ndim != want or value.ndim != want:
            raise ValueError(f"For {kind} `query`, expected `key` and `value` to be {want}-D "
                             f"but found {key.ndim}-D and {value.ndim}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.ndim != want - 1:
            raise ValueError(f"For {kind} `query`, expected `key_padding_mask` to be `None` "
                             f"or {want - 1}-D but found {key_padding_mask.ndim}-D tensor "
                             f"instead")
        # shapes as PyTorch checks them: sequence first
        q, k, v = ((t.shape[1], t.shape[0]) + tuple(t.shape[2:]) if want == 3 and
                   self.batch_first else tuple(t.shape) for t in (query, key, value))
        if q[-1] != self.embed_dim:
            raise ValueError(f"was expecting embedding dimension of {self.embed_dim}, but got "
                             f"{q[-1]}")
        if k != v:
            raise ValueError(f"key shape {k} does not match value shape {v}")
        tgt, src, bsz = q[0], k[0], q[1] if want == 3 else 1
        if key_padding_mask is not None:
            padding = tuple(key_padding_mask.shape) if want == 3 else \
                (1,) + tuple(key_padding_mask.shape)
            if padding != (bsz, src):
                raise ValueError(f"expecting key_padding_mask shape of {(bsz, src)}, but got "
                                 f"{padding}")
        if attn_mask is not None:
            correct = {2: (tgt, src), 3: (bsz * self.num_heads, tgt, src)}.get(attn_mask.ndim)
            if correct is None:
                raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
            if tuple(attn_mask.shape) != correct:
                raise RuntimeError(f"The shape of the {attn_mask.ndim}D attn_mask is "
                                   f"{tuple(attn_mask.shape)}, but should be {correct}.")

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        self._check_shapes(query, key, value, key_padding_mask, attn_mask)
        batched = query.ndim == 3
        if not batched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if not self.batch_first or not batched:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        e, h = self.embed_dim, self.num_heads
        ws = self.in_proj_weight.split(e, 0)
        bs = self.in_proj_bias.split(e, 0) if self.in_proj_bias is not None else (None,) * 3
        q, k, v = (F.linear(t, wi, bi) for t, wi, bi in zip((query, key, value), ws, bs))
        n, lq, lk = q.shape[0], q.shape[1], k.shape[1]
        q = q.reshape(n, lq, h, e // h).transpose(1, 2)
        k = k.reshape(n, lk, h, e // h).transpose(1, 2)
        v = v.reshape(n, lk, h, e // h).transpose(1, 2)
        mask = self._additive(attn_mask)
        if mask is not None and mask.ndim == 3:  # (n * heads, lq, lk)
            mask = mask.reshape(n, h, lq, lk)
        if mask is None and is_causal:
            mask = F._causal_mask(lq, lk)
        pad = self._additive(key_padding_mask)
        if pad is not None:
            pad = pad.reshape(n, 1, 1, lk)
            mask = pad if mask is None else mask + pad
        out, weights = F._attention(q, k, v, mask, self.dropout if self.training else 0.0, None)
        out = self.out_proj(out.transpose(1, 2).reshape(n, lq, e))
        if not self.batch_first or not batched:
            out = out.transpose(0, 1)
        if not batched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, (weights if batched else weights.squeeze(0))


# ---- more activations, 1-d and adaptive max pooling, pixel shuffles, bilinear ----

SELU = _inplace_activation("SELU", F.selu)
Hardswish = _inplace_activation("Hardswish", F.hardswish)
Hardsigmoid = _inplace_activation("Hardsigmoid", F.hardsigmoid)
Softsign = _activation("Softsign", F.softsign)
Tanhshrink = _activation("Tanhshrink", F.tanhshrink)


class Threshold(Module):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, x):
        return F.threshold(x, self.threshold, self.value, self.inplace)


class Hardshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, x):
        return F.hardshrink(x, self.lambd)


class Softshrink(Hardshrink):
    def forward(self, x):
        return F.softshrink(x, self.lambd)


class Softmax2d(Module):
    """softmax over the channels of (N, C, H, W) or (C, H, W)."""

    def forward(self, x):
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected an input of 3 or 4 dims, got {x.ndim}")
        return _F.softmax(x, -3)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x):
        return F.celu(x, self.alpha, self.inplace)


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmin(x, self.dim)


class MaxPool1d(MaxPool2d):
    """MaxPool2d's arguments over (N, C, L) or (C, L) (F.max_pool1d)."""

    def forward(self, x):
        return F.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool1d(AvgPool2d):
    """AvgPool2d's arguments but divisor_override, over (N, C, L) or (C, L)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)

    def forward(self, x):
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AdaptiveMaxPool2d(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x):
        return F.adaptive_max_pool2d(x, self.output_size, self.return_indices)


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return F.pixel_shuffle(x, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return F.pixel_unshuffle(x, self.downscale_factor)


class Bilinear(Module):
    """y = x1^T W x2 + b, weight (out, in1, in2); initialized uniform in
    +-1/sqrt(in1), as torch's."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        from .. import empty
        _on_device(self, device, None)
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features, dtype=dtype))
        self.bias = Parameter(empty(out_features, dtype=dtype)) if bias else None
        bound = 1 / math.sqrt(in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x1, x2):
        return F.bilinear(x1, x2, self.weight, self.bias)
