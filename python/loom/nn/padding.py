"""torch.nn's padding layers: F.pad with a fixed mode over the last one,
two or three dims."""
from . import functional as F
from .module import Module


def _pads(padding, dims):
    """padding (an int for every side, or a tuple of 2 * dims) as F.pad's
    (last dim begin, last dim end, ...)."""
    if isinstance(padding, int):
        return (padding,) * (2 * dims)
    padding = tuple(padding)
    if len(padding) != 2 * dims:
        raise ValueError(f"padding: expected an int or {2 * dims} ints, got {padding}")
    return padding


class _Pad(Module):
    mode, dims = "constant", 1

    def __init__(self, padding, value=0.0):
        super().__init__()
        self.padding, self.value = _pads(padding, self.dims), value

    def forward(self, x):
        if x.ndim < self.dims + 1:
            raise ValueError(f"{type(self).__name__}: expected an input of {self.dims + 1} or "
                             f"{self.dims + 2} dims, got {x.ndim}")
        return F.pad(x, self.padding, self.mode, self.value)

    def extra_repr(self):
        return f"{self.padding}" + (f", value={self.value}" if self.mode == "constant" else "")


def _pad_class(name, mode, dims, value=None):
    def __init__(self, padding, *args):
        _Pad.__init__(self, padding, *(args if value is None else (value,)))
    body = {"mode": mode, "dims": dims}
    if value is not None or mode != "constant":
        body["__init__"] = __init__
    cls = type(name, (_Pad,), body)
    cls.__doc__ = f"torch.nn.{name}: F.pad in mode {mode!r} over the last {dims} dims."
    return cls


ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1)
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2)
ConstantPad3d = _pad_class("ConstantPad3d", "constant", 3)
ZeroPad2d = _pad_class("ZeroPad2d", "constant", 2, 0.0)
ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1)
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2)
ReflectionPad3d = _pad_class("ReflectionPad3d", "reflect", 3)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2)
ReplicationPad3d = _pad_class("ReplicationPad3d", "replicate", 3)
