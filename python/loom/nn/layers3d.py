"""torch.nn's 3-d layers over (N, C, D, H, W) volumes: convolution and
pooling by nn.volume's functions, normalization by the 2-d layers' code
(the batch and instance norms normalize over every dim but the channel)."""
from . import functional as F
from . import layers, volume


class Conv3d(layers._ConvNd):
    """torch.nn.Conv3d: weight (out, in / groups, kd, kh, kw), bias (out,);
    padding_mode other than 'zeros' pads the input by F.pad's mode first.
    A (C, D, H, W) input gives an unbatched result."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, volume._triple(kernel_size, "kernel_size"),
                         stride, padding, dilation, groups, bias, padding_mode)
        layers._on_device(self, device, dtype)

    def forward(self, x):
        if self.padding_mode == "zeros" or self.padding == "valid":
            return F.conv3d(x, self.weight, self.bias, self.stride, self.padding,
                            self.dilation, self.groups)
        if isinstance(self.padding, str):  # 'same': each side's share of the window
            total = [d * (k - 1) for d, k in zip(volume._triple(self.dilation, "dilation"),
                                                  self.kernel_size)]
            sides = [(t // 2, t - t // 2) for t in total]
        else:
            sides = [(p, p) for p in volume._triple(self.padding, "padding")]
        pads = sides[2] + sides[1] + sides[0]  # F.pad's order: W, H, then D
        return F.conv3d(F.pad(x, pads, mode=self.padding_mode), self.weight, self.bias,
                        self.stride, 0, self.dilation, self.groups)


class MaxPool3d(layers.MaxPool2d):
    def forward(self, x):
        return F.max_pool3d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool3d(layers.AvgPool2d):
    def forward(self, x):
        return F.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool3d(layers.AdaptiveAvgPool2d):
    def forward(self, x):
        return F.adaptive_avg_pool3d(x, self.output_size)


class BatchNorm3d(layers.BatchNorm2d):
    def _check_input_dim(self, x):
        if x.ndim != 5:
            raise ValueError(f"expected 5D input (got {x.ndim}D input)")


class InstanceNorm3d(layers._InstanceNorm):
    dims = 3



class ConvTranspose3d(layers.ConvTranspose2d):
    """torch.nn.ConvTranspose3d: weight (in, out / groups, kd, kh, kw);
    forward's output_size picks the output_padding that gives it."""
    dims = 3

    def forward(self, x, output_size=None):
        return F.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)
