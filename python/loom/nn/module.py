"""nn.Module as PyTorch's: parameters, buffers and submodules registered
by attribute, named_parameters, train/eval, state_dict with PyTorch's key
names, and containers (Sequential, ModuleList, ModuleDict)."""
from collections import OrderedDict, namedtuple

import numpy as np

from .. import _compile
from .._tensor import RemovableHandle, Tensor


def Parameter(data, requires_grad=True):
    """A tensor that a Module registers as a parameter (a leaf requiring
    grad): data itself, flagged, when it is a real leaf; else (the result
    of ops) a new leaf holding its values."""
    if not isinstance(data, Tensor):
        raise TypeError("Parameter: a loom Tensor is needed")
    if data._lazy or not data.is_leaf:
        from .. import _C
        data = _C.from_bytes(data._dtype, data.shape, _C.to_bytes(data.detach()))
    if data.requires_grad != requires_grad:
        try:
            data.requires_grad = requires_grad
        except RuntimeError:  # used in the step in progress: end it first
            from .. import step
            step()
            data.requires_grad = requires_grad
    return data


_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign before Module.__init__() call")
        if name in self._buffers and (value is None or isinstance(value, Tensor)):
            self._buffers[name] = value  # a buffer stays one (BatchNorm's statistics)
            if value is not None:
                value._set_state()
            return
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        if isinstance(value, Module):
            self.__dict__.pop(name, None)  # self.x = None before: x is a module now
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self.__dict__.pop(name, None)
            self._parameters[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(key)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                return
        object.__delattr__(self, name)

    def register_buffer(self, name, tensor, persistent=True):
        """A buffer: state that is not a parameter; persistent=False keeps
        it out of state_dict(), as PyTorch's."""
        if tensor is not None:
            tensor._set_state()  # loom.compile updates it in place
        self._buffers[name] = tensor
        if persistent:
            self.__dict__.get("_non_persistent", set()).discard(name)
        else:
            self.__dict__.setdefault("_non_persistent", set()).add(name)

    def register_parameter(self, name, param):
        if param is None:
            self._parameters.pop(name, None)
            object.__setattr__(self, name, None)
        else:
            self._parameters[name] = Parameter(param)

    def add_module(self, name, module):
        self._modules[name] = module

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        if _compile.guards is not None:  # loom.compile: the capture depends on the mode
            _compile.guard((id(self), "training"), f"{type(self).__name__}.training",
                           lambda: self.training)
            _compile.note_buffers(self)
        for hook in list(self.__dict__.get("_forward_pre_hooks", {}).values()):
            new = hook(self, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
        out = self.forward(*args, **kwargs)
        for hook in list(self.__dict__.get("_forward_hooks", {}).values()):
            new = hook(self, args, out)
            if new is not None:
                out = new
        return out

    def register_forward_pre_hook(self, hook):
        """hook(module, args) runs before forward; a value it returns (a
        tuple, or one value) replaces the positional arguments."""
        return self._add_hook("_forward_pre_hooks", hook)

    def register_forward_hook(self, hook):
        """hook(module, args, output) runs after forward; a value it
        returns replaces the output."""
        return self._add_hook("_forward_hooks", hook)

    def _add_hook(self, kind, hook):
        hooks = self.__dict__.setdefault(kind, OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    # ---- walking the tree ----
    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        yield from ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_parameters(self, prefix="", recurse=True):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield mp + ("." if mp else "") + n, p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix=""):
        for mp, m in self.named_modules(prefix):
            for n, b in m._buffers.items():
                if b is not None:
                    yield mp + ("." if mp else "") + n, b

    def buffers(self):
        for _, b in self.named_buffers():
            yield b

    # ---- modes ----
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        from .. import zeros_like
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p.grad)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def cpu(self):
        return self

    def to(self, *args, **kwargs):
        """Converts the floating-point parameters and buffers to a dtype
        (Tensor.to's arguments: a device, "cpu" only, changes nothing).
        They become new tensors: make the optimizer after converting."""
        from .._tensor import _to_args
        d, _ = _to_args(args, kwargs)
        if d is None:
            return self
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for n, t in list(store.items()):
                    if t is not None and t.dtype.is_floating_point and t.dtype is not d:
                        new = t.detach().to(d)
                        new._realize()
                        if t.requires_grad:
                            new.requires_grad = True
                        store[n] = new
        return self

    def float(self):
        return self.to("float32")

    def double(self):
        return self.to("float64")

    def half(self):
        return self.to("float16")

    def bfloat16(self):
        return self.to("bfloat16")

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- state ----
    def _named_tensors(self):
        """The parameters and persistent buffers, by state_dict key."""
        out = OrderedDict()
        for mp, m in self.named_modules():
            skip = m.__dict__.get("_non_persistent", ())
            for n, t in list(m._parameters.items()) + list(m._buffers.items()):
                if t is not None and n not in skip:
                    out[mp + ("." if mp else "") + n] = t
        return out

    def state_dict(self):
        return OrderedDict((k, t.detach()) for k, t in self._named_tensors().items())

    def load_state_dict(self, state_dict, strict=True):
        """Copies values (loom tensors, NumPy arrays, or anything np.asarray
        takes: a PyTorch tensor's .numpy()) into this module's tensors."""
        from .. import step
        step()  # the values of a step in progress see the old weights
        own = self._named_tensors()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: "
                               f"missing keys {missing}, unexpected keys {unexpected}")
        for k, t in own.items():
            if k not in state_dict:
                continue
            v = np.asarray(state_dict[k])
            if tuple(v.shape) != t.shape:
                raise RuntimeError(f"size mismatch for {k}: copying a param with shape "
                                   f"{tuple(v.shape)}, the shape in current model is {t.shape}")
            np.asarray(t)[...] = v
        return _IncompatibleKeys(missing, unexpected)

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for n, m in self._modules.items():
            lines.append(f"  ({n}): " + repr(m).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"

    def extra_repr(self):
        return ""


class _Sequence(Module):
    """Submodules in order: indexing, len and iteration."""

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(_Sequence):
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for n, m in modules[0].items():
                self.add_module(n, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_Sequence):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self

    def extend(self, ms):
        for m in ms:
            self.append(m)
        return self


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        for n, m in (modules or {}).items():
            self.add_module(n, m)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self.add_module(k, m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()
