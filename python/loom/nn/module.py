"""nn.Module as PyTorch's: parameters, buffers and submodules registered
by attribute, named_parameters, train/eval, state_dict with PyTorch's key
names, and containers (Sequential, ModuleList, ModuleDict, ParameterList,
ParameterDict)."""
import itertools
import operator
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import numpy as np

from .. import _compile
from .._tensor import RemovableHandle, Tensor


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter (a leaf requiring
    grad), as torch.nn.Parameter: data itself, retyped, when it is a real
    leaf; else (the result of ops) a new leaf holding its values."""
    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        from .. import _C, empty
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError("Parameter: a loom Tensor is needed")
        if data._lazy or not data.is_leaf:
            data = _C.from_bytes(data._dtype, data.shape, _C.to_bytes(data.detach()))
        if data.requires_grad != requires_grad:
            try:
                data.requires_grad = requires_grad
            except RuntimeError:  # used in the step in progress: end it first
                from .. import step
                step()
                data.requires_grad = requires_grad
        data.__class__ = cls  # the same object: the C side knows its memory
        return data

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


def _as_parameter(t):
    """t, registered as a module's parameter: a Parameter from now on, as
    isinstance(m.weight, nn.Parameter) expects."""
    if not isinstance(t, Parameter):
        t.__class__ = Parameter
    return t


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
        is_param = isinstance(value, Parameter) or (isinstance(value, Tensor) and
                                                    value.requires_grad and value.is_leaf)
        if name in self._parameters and not is_param and value is not None:
            # it would leave parameters() and state_dict(), and the optimizer
            raise TypeError(f"cannot assign '{type(value).__module__}.{type(value).__name__}' "
                            f"as parameter '{name}' (loom.nn.Parameter or None expected)")
        # a name that stays a parameter (or module) keeps its place in the order
        keep = self._parameters if is_param else self._modules if isinstance(value, Module) \
            else None
        for d in (self._parameters, self._buffers, self._modules):
            if d is not keep:
                d.pop(name, None)
        if isinstance(value, Module):
            self.__dict__.pop(name, None)  # self.x = None before: x is a module now
            self._modules[name] = value
        elif is_param:
            self.__dict__.pop(name, None)
            self._parameters[name] = _as_parameter(value)
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
        else:  # a Parameter as it is (a frozen one stays frozen)
            self._parameters[name] = param if isinstance(param, Parameter) else Parameter(param)

    def add_module(self, name, module):
        self._modules[name] = module

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        if _compile.guards is not None:  # loom.compile: the capture depends on the mode
            _compile.guard((id(self), "training"), f"{type(self).__name__}.training",
                           lambda: self.training)
            # and on which tensors its parameters are (m.weight = Parameter(...)
            # replaces one; the old one stays alive in the executable)
            _compile.guard((id(self), "parameters"), f"{type(self).__name__}'s parameters",
                           lambda: tuple(id(p) for p in self._parameters.values()))
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
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """Every module of the tree, once (a submodule registered under two
        names: under its first), as PyTorch's memo walk."""
        memo = set() if memo is None else memo
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                           remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for n, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield n, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def get_submodule(self, target):
        """The module at a dotted path ("" is self), with PyTorch's errors."""
        mod = self
        for item in target.split(".") if target else ():
            if not hasattr(mod, item):
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target):
        return self._get_tensor(target, "_parameters", "an nn.Parameter")

    def get_buffer(self, target):
        return self._get_tensor(target, "_buffers", "a buffer")

    def _get_tensor(self, target, store, what):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(f"{type(mod).__name__} has no attribute `{name}`")
        if name not in getattr(mod, store):
            raise AttributeError(f"`{name}` is not {what}")
        return getattr(mod, name)

    def named_parameters(self, prefix="", recurse=True):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield mp + ("." if mp else "") + n, p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix=""):
        for mp, m in self.named_modules(prefix=prefix):
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
        from ..optim import _zero_grads
        _zero_grads(self.parameters(), set_to_none)

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
        if not d.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got "
                            f"desired dtype={d!r}")
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for n, t in list(store.items()):
                    if t is not None and t.dtype.is_floating_point and t.dtype is not d:
                        new = t.detach().to(d)
                        new._realize()
                        if t.requires_grad:
                            new.requires_grad = True
                        store[n] = _as_parameter(new) if isinstance(t, Parameter) else new
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
        for mp, m in self.named_modules(remove_duplicate=False):  # PyTorch's keys: every name
            skip = m.__dict__.get("_non_persistent", ())
            for n, t in list(m._parameters.items()) + list(m._buffers.items()):
                if t is not None and n not in skip:
                    out[mp + ("." if mp else "") + n] = t
        return out

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """Parameters and buffers by name, detached unless keep_vars, each
        name led by prefix, into destination (an OrderedDict) when given;
        PyTorch's positional (destination, prefix, keep_vars) too."""
        if len(args) > 3:
            raise TypeError(f"state_dict() takes at most 3 positional arguments, got "
                            f"{len(args)}")
        if args:
            destination, prefix, keep_vars = args + (destination, prefix, keep_vars)[len(args):]
        out = OrderedDict() if destination is None else destination
        for k, t in self._named_tensors().items():
            out[prefix + k] = t if keep_vars else t.detach()
        return out

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
            v = state_dict[k]
            if isinstance(v, Tensor) and v.dtype.name == "bfloat16":
                v = v.float()  # NumPy has no bfloat16
            v = np.asarray(v)
            if tuple(v.shape) != t.shape:
                raise RuntimeError(f"size mismatch for {k}: copying a param with shape "
                                   f"{tuple(v.shape)}, the shape in current model is {t.shape}")
            t._write(v)
        return _IncompatibleKeys(missing, unexpected)

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for n, m in self._modules.items():
            lines.append(f"  ({n}): " + repr(m).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"

    def extra_repr(self):
        return ""


def _checked_index(i, n):
    """Index i of n items as 0..n-1, with PyTorch's IndexError."""
    i = operator.index(i)
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of range")
    return i % n


def _pop(self, key):
    """The containers' pop: the item at key, removed."""
    value = self[key]
    del self[key]
    return value


def _pairs(values, sort_dict=False):
    """(key, value) pairs of a mapping or of an iterable of pairs; a plain
    dict's sorted when sort_dict (PyTorch 1.13's ParameterDict.update)."""
    if isinstance(values, (OrderedDict, ModuleDict, ParameterDict)):
        return list(values.items())
    if isinstance(values, Mapping):
        return sorted(values.items()) if sort_dict else list(values.items())
    return values


class _Sequence(Module):
    """Submodules in order under the keys "0", "1", ...: PyTorch's list
    methods; a slice is a container of the same kind."""

    def _key(self, i):
        return list(self._modules)[_checked_index(i, len(self._modules))]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._slice(i)
        return self._modules[self._key(i)]

    def __setitem__(self, i, module):
        setattr(self, self._key(i), module)

    def __delitem__(self, i):
        for k in list(self._modules)[i] if isinstance(i, slice) else [self._key(i)]:
            del self._modules[k]
        self._renumber(list(self._modules.values()))

    def _renumber(self, modules):
        """modules under the keys 0..n-1, as PyTorch's after a deletion."""
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._renumber(modules)
        return self

    pop = _pop


class Sequential(_Sequence):
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for n, m in modules[0].items():
                self.add_module(n, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def _slice(self, i):  # the keys stay, as PyTorch's
        return type(self)(OrderedDict(list(self._modules.items())[i]))

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_Sequence):
    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def _slice(self, i):
        return type(self)(list(self._modules.values())[i])

    def __add__(self, other):
        return ModuleList(itertools.chain(self, other))

    def __iadd__(self, modules):
        return self.extend(modules)


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self.add_module(k, m)

    def __delitem__(self, k):
        del self._modules[k]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, k):
        return k in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
        for k, m in _pairs(modules):
            self[k] = m

    def clear(self):
        self._modules.clear()

    pop = _pop


def _as_entry(value):
    """A tensor put in a ParameterList or ParameterDict becomes a Parameter."""
    return Parameter(value) if isinstance(value, Tensor) and \
        not isinstance(value, Parameter) else value


class ParameterList(Module):
    """Parameters in a list, registered under "0", "1", ... as PyTorch's."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)([self[j] for j in range(len(self))[i]])
        return getattr(self, str(_checked_index(i, len(self))))

    def __setitem__(self, i, value):
        setattr(self, str(_checked_index(i, len(self))), _as_entry(value))

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def append(self, value):
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        if isinstance(values, Tensor):  # iterable, but never unpacked here
            raise TypeError("ParameterList.extend should be called with an iterable, "
                            "but got Tensor")
        for v in values:
            self.append(v)
        return self

    def __iadd__(self, values):
        return self.extend(values)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """Parameters by string key, registered under the key, as PyTorch's."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, k):
        return getattr(self, k)

    def __setitem__(self, k, value):
        if not isinstance(k, str):
            raise TypeError(f"Index given to ParameterDict cannot be used as a key as it is "
                            f"not a string (type is '{type(k).__name__}').")
        self._keys[k] = None
        setattr(self, k, _as_entry(value))

    def __delitem__(self, k):
        del self._keys[k]
        delattr(self, k)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __contains__(self, k):
        return k in self._keys

    def keys(self):
        return self._keys.keys()

    def values(self):
        return (self[k] for k in self._keys)

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def get(self, k, default=None):
        return self[k] if k in self else default

    def update(self, parameters):
        for k, v in _pairs(parameters, sort_dict=True):
            self[k] = v

    pop = _pop

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterDict should not be called.")
