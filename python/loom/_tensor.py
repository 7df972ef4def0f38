"""loom.Tensor: PyTorch's tensor idiom over Loom's lazy, traced values.

A tensor is real (its data in memory, shared with NumPy without copies)
or lazy (a value of the step being traced). Ops record; a value becomes
real where Python needs it: .numpy(), .item(), float(), int(), bool(),
print, .tolist(). Each of those cuts a segment that Loom looks up by
GraphKey and replays (or compiles once)."""
import builtins
import itertools
import weakref
from collections import OrderedDict

import numpy as np

from . import _C
from . import _dtype
from . import _format


_BOOL_CODE = _dtype._BY_NAME["bool"]._code
_base_lt, _base_le = _C.TensorBase.__lt__, _C.TensorBase.__le__
_base_gt, _base_ge = _C.TensorBase.__gt__, _C.TensorBase.__ge__


# PyTorch's tensor type names (torch.FloatTensor), by dtype
_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half",
               "bfloat16": "BFloat16", "int8": "Char", "int32": "Int", "int64": "Long",
               "bool": "Bool"}
_base_shape = _C.TensorBase.shape.__get__


class Size(tuple):
    """A tensor's shape: a tuple of its dims' sizes, with torch.Size's
    numel()."""
    __slots__ = ()

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n


class Tensor(_C.TensorBase):
    __slots__ = ()
    __array_priority__ = 1000  # NumPy operands defer to the tensor's operators

    # ---- what it is ----
    @property
    def shape(self):
        return Size(_base_shape(self))

    @property
    def dtype(self):
        return _dtype.from_code(self._dtype)

    @property
    def ndim(self):
        return self._ndim

    def dim(self):
        return self._ndim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def element_size(self):
        return self.dtype.itemsize

    # ---- where it lives: host memory, the one device ----
    device = "cpu"
    is_cuda = False

    def cpu(self):
        return self

    def cuda(self, device=None):
        _check_device("cuda")

    def is_contiguous(self):
        """Lazy values are row-major; a real tensor over a NumPy view may
        not be (from_numpy wraps strided memory)."""
        return self._lazy or self.dtype._numpy is None or \
            np.asarray(memoryview(self)).flags["C_CONTIGUOUS"]

    def contiguous(self):
        """self when row-major (every op reads strided memory as it is, so
        contiguity matters only to code that reads the memory itself), else
        a row-major copy."""
        return self if self.is_contiguous() else _F._op("identity", self)

    # ---- making it real ----
    def numpy(self):
        """The data as a NumPy array sharing this tensor's memory."""
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return np.asarray(self)

    def tolist(self):
        if self.dtype.name == "bfloat16":  # NumPy has no bfloat16; float32 holds each exactly
            return np.asarray(_F.cast(self, _dtype._BY_NAME["float32"])).tolist()
        return np.asarray(self).tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point:
            raise TypeError("only integer tensors can be converted to an index")
        return int(self.item())

    def __bool__(self):
        if 0 in self.shape:
            raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
        return _C._cond(self)

    def __format__(self, spec):
        """A 0-d tensor formats its value (f"{loss:.4f}"), as PyTorch's;
        any other tensor takes only an empty spec."""
        if self.ndim == 0 and type(self) is Tensor:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __repr__(self):
        """PyTorch's format: tensor([1.5000, 2.0000], requires_grad=True)."""
        d = self.detach() if self.requires_grad else self
        if d.dtype.name == "bfloat16":
            d = d.float()
        return _format.tensor_repr(self, np.asarray(d))

    def __array__(self, dtype=None):
        a = np.asarray(memoryview(self))
        return a if dtype is None else a.astype(dtype)

    # ---- autograd ----
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """PyTorch's backward: from a scalar, or with gradient (of self's
        shape) from any tensor, as backward of sum(self * gradient). The
        step keeps its graph until it ends, so retain_graph is always so."""
        if create_graph:
            raise NotImplementedError("backward(create_graph=True): gradients of "
                                      "gradients are not traced")
        if inputs is not None:
            raise NotImplementedError("backward(inputs=...): every tensor requiring "
                                      "grad gets its gradient")
        if gradient is not None:
            if not isinstance(gradient, Tensor):
                from . import tensor
                gradient = tensor(gradient, dtype=self.dtype)
            if tuple(gradient.shape) != tuple(self.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of "
                                   f"{tuple(gradient.shape)} and output[0] has a shape of "
                                   f"{tuple(self.shape)}.")
            _backward(_F.sum(self * gradient.detach()))
        elif self.ndim and self.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        else:
            _backward(self if not self.ndim else _F.reshape(self, ()))

    @property
    def grad_fn(self):
        """None for a leaf; for a computed tensor that requires grad, the
        node of its backward (only its name(): the op is not known here)."""
        return _GRAD_FN if self.requires_grad and not self.is_leaf else None

    def register_hook(self, hook):
        """hook(grad) runs when backward reaches this tensor, with its
        gradient; a tensor it returns replaces the gradient: for a leaf,
        what goes into .grad, for a computed tensor, what flows on to the
        tensors it was computed from. Returns a handle whose remove()
        takes the hook away, as PyTorch's."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        if _C._capturing():
            raise _C.GraphBreak("loom.compile: Tensor.register_hook")
        hooks = _hooks.get(id(self))
        if hooks is None:
            hooks = _hooks[id(self)] = _TensorHooks(self)
        handle = RemovableHandle(hooks.fns)
        hooks.fns[handle.id] = hook
        return handle

    def retain_grad(self):
        hooks = _hooks.get(id(self))
        if hooks is not None:
            hooks.retain()
        super().retain_grad()

    @property
    def retains_grad(self):
        hooks = _hooks.get(id(self))
        return _C.TensorBase.retains_grad.__get__(self) and not (hooks and hooks.hidden)

    def detach(self):
        """A tensor that does not require grad: of a real tensor, one over
        its memory (as PyTorch's, in-place updates of either show in the
        other); of a lazy value, the same value cut from the graph."""
        if not self.requires_grad:
            return self
        if not self._lazy and self.dtype._numpy is not None:
            return self.data
        if not self._lazy and not self.is_leaf:  # of an ended step: no warning for this use
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return _F.stop_gradient(self)
        return _F.stop_gradient(self)

    def detach_(self):
        """detach() in place: this tensor no longer requires grad."""
        if self.requires_grad:
            if self._lazy:
                _C._rebind(self, self.detach())
            else:
                self.requires_grad = False
        return self

    def clone(self, memory_format=None):
        return _F._op("identity", self)

    def __deepcopy__(self, memo):
        copy = _C.from_bytes(self._dtype, self.shape, _C.to_bytes(self))
        copy.requires_grad = self.requires_grad and self.is_leaf
        copy.__class__ = type(self)  # a Parameter's copy is one, as PyTorch's
        memo[id(self)] = copy
        return copy

    def __reduce_ex__(self, protocol):
        """pickle: the dtype, shape, bytes (a read) and requires_grad; a
        computed tensor that requires grad is refused, as PyTorch's."""
        if self.requires_grad and not self.is_leaf:
            raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which "
                               "requires_grad, since autograd does not support crossing "
                               "process boundaries.  If you just want to transfer the data, "
                               "call detach() on the tensor before serializing (e.g., "
                               "putting it on the queue).")
        return (_unpickle, (type(self), self._dtype, tuple(self.shape),
                            _C.to_bytes(self.detach()), self.requires_grad))

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    @property
    def data(self):
        """A tensor over this one's memory that does not require grad, as
        PyTorch's .data (p.data.mul_(0.5) changes p); of a lazy value (or a
        bfloat16 one, which NumPy cannot hold), detach()."""
        if not self.requires_grad or self._lazy or self.dtype._numpy is None:
            return self.detach()
        return _C.from_buffer(np.asarray(memoryview(self)), False)

    @data.setter
    def data(self, value):
        """Writes value's elements into this real tensor's memory (of one
        shape: unlike PyTorch, the tensor cannot change its shape)."""
        if self._lazy:
            raise RuntimeError("loom: .data of a lazy value cannot be assigned")
        value = _F.cast(value.detach(), self.dtype)
        if value.shape != self.shape:
            raise ValueError(f"loom: .data of shape {list(self.shape)} cannot take a tensor "
                             f"of shape {list(value.shape)}")
        _C.step()  # values of the step in progress read the old data
        _C._copy_into(self, value)

    def _write(self, values):
        """Writes values (a number, or an array of this shape) into this real
        tensor's memory; a bfloat16 one, which NumPy cannot hold, takes
        them through a float32 copy."""
        if self.dtype._numpy is not None:
            np.asarray(self)[...] = values
            return self
        from . import tensor
        src = tensor(np.broadcast_to(np.asarray(values, np.float32), self.shape))
        value = _F.cast(src, self.dtype)
        _C.step()  # values of the step in progress read the old data
        _C._copy_into(self, value)
        return self

    # ---- new tensors of this one's dtype ----
    def new_zeros(self, *size, dtype=None, requires_grad=False):
        from . import zeros
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, requires_grad=False):
        from . import ones
        return ones(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, requires_grad=False):
        return self.new_zeros(*size, dtype=dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, requires_grad=False):
        from . import full
        return full(size, fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, requires_grad=False):
        from . import tensor
        return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)

    # ---- operators ----
    # +, -, *, /, @, unary - and the comparisons, either way round, are the
    # C type's own (two tensors of one dtype record at once;
    # loom.functional takes the rest).
    def __floordiv__(self, o): return _F.floor_divide(self, o)
    def __mod__(self, o): return _F.remainder(self, o)
    def __rfloordiv__(self, o): return _F.floor_divide(o, self)
    def __rmod__(self, o): return _F.remainder(o, self)
    def __pow__(self, o): return _F.pow(self, o)
    def __rpow__(self, o): return _F.pow(o, self)
    def __pos__(self): return self
    def __abs__(self): return _F.abs(self)
    # bitwise on integers, logical on bool (the same ops), as PyTorch's
    def __invert__(self): return _F.bitwise_not(self)
    def __and__(self, o): return _F.bitwise_and(self, o)
    def __or__(self, o): return _F.bitwise_or(self, o)
    def __xor__(self, o): return _F.bitwise_xor(self, o)
    def __rand__(self, o): return _F.bitwise_and(o, self)
    def __ror__(self, o): return _F.bitwise_or(o, self)
    def __rxor__(self, o): return _F.bitwise_xor(o, self)
    def __lshift__(self, o): return _F.bitwise_left_shift(self, o)
    def __rshift__(self, o): return _F.bitwise_right_shift(self, o)
    def __rlshift__(self, o): return _F.bitwise_left_shift(o, self)
    def __rrshift__(self, o): return _F.bitwise_right_shift(o, self)

    # the C type records <, <=, >, >= of two bools as they are, which the
    # ops refuse: bools go to loom.functional, which orders them as 0 and 1
    def __lt__(self, o): return _F.lt(self, o) if self._dtype == _BOOL_CODE else _base_lt(self, o)
    def __le__(self, o): return _F.le(self, o) if self._dtype == _BOOL_CODE else _base_le(self, o)
    def __gt__(self, o): return _F.gt(self, o) if self._dtype == _BOOL_CODE else _base_gt(self, o)
    def __ge__(self, o): return _F.ge(self, o) if self._dtype == _BOOL_CODE else _base_ge(self, o)

    def __getitem__(self, index):
        return _F._getitem(self, index)

    # ---- in place (x += y, x.add_(y), ...): the tensor itself changes ----
    def _inplace(self, result):
        """self takes result's elements, as PyTorch's in-place ops: of
        self's shape, and of its dtype (a result of a higher kind, float
        into an integer tensor, is refused). The tensor names the new lazy
        value when no other sees its memory; else its memory is written (so
        the tensors that share it see the change): a parameter's too, under
        loom.no_grad()."""
        if result.shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                               f"broadcast shape {list(result.shape)}")
        if result.dtype is not self.dtype:
            if _F._category(result.dtype) > _F._category(self.dtype):
                raise RuntimeError(f"result type {result.dtype.name} can't be cast to the "
                                   f"desired output type {self.dtype.name}")
            result = _F.cast(result, self.dtype)
        if result._lazy and _C._take_value(self, result):
            return self
        if self.dtype._numpy is not None:
            self[...] = result
            return self
        # bfloat16 memory others see: no NumPy view to write it through
        self._check_assignable()
        _C.step()  # values of the step in progress read the old data
        _C._copy_into(self, result)
        return self

    def _check_assignable(self):
        if self.requires_grad and self.is_leaf and _C.is_grad_enabled():
            raise RuntimeError("loom: a leaf tensor that requires grad cannot be assigned "
                               "into (assign under loom.no_grad(), or compute a new tensor)")

    def __iadd__(self, o): return self._inplace(_F.add(self, o))
    def __isub__(self, o): return self._inplace(_F.sub(self, o))
    def __imul__(self, o): return self._inplace(_F.mul(self, o))
    def __itruediv__(self, o): return self._inplace(_F.div(self, o))
    def __ifloordiv__(self, o): return self._inplace(_F.floor_divide(self, o))
    def __imod__(self, o): return self._inplace(_F.remainder(self, o))
    def __ipow__(self, o): return self._inplace(_F.pow(self, o))
    def __iand__(self, o): return self._inplace(_F.bitwise_and(self, o))
    def __ior__(self, o): return self._inplace(_F.bitwise_or(self, o))
    def __ixor__(self, o): return self._inplace(_F.bitwise_xor(self, o))
    def __ilshift__(self, o): return self._inplace(_F.bitwise_left_shift(self, o))
    def __irshift__(self, o): return self._inplace(_F.bitwise_right_shift(self, o))
    def floor_divide_(self, o): return self._inplace(_F.floor_divide(self, o))
    def remainder_(self, o): return self._inplace(_F.remainder(self, o))
    def fmod_(self, o): return self._inplace(_F.fmod(self, o))
    def pow_(self, o): return self._inplace(_F.pow(self, o))
    def bitwise_and_(self, o): return self._inplace(_F.bitwise_and(self, o))
    def bitwise_or_(self, o): return self._inplace(_F.bitwise_or(self, o))
    def bitwise_xor_(self, o): return self._inplace(_F.bitwise_xor(self, o))
    def bitwise_not_(self): return self._inplace(_F.bitwise_not(self))

    def add_(self, o, alpha=1):
        return self._inplace(_F.add(self, o if alpha == 1 else _F.mul(o, alpha)))

    def sub_(self, o, alpha=1):
        return self._inplace(_F.sub(self, o if alpha == 1 else _F.mul(o, alpha)))

    def mul_(self, o): return self._inplace(_F.mul(self, o))
    def div_(self, o, rounding_mode=None): return self._inplace(_F.div(self, o, rounding_mode))
    def masked_fill_(self, mask, value): return self._inplace(_F.masked_fill(self, mask, value))

    def index_put_(self, indices, values, accumulate=False):
        return self._inplace(_F.index_put(self, indices, values, accumulate))
    def clamp_(self, min=None, max=None): return self._inplace(_F.clamp(self, min, max))
    def fill_(self, value):
        from . import full_like
        return self._inplace(full_like(self, value))

    def zero_(self): return self.fill_(0)

    def relu_(self): return self._inplace(_F.relu(self))
    def abs_(self): return self._inplace(_F.abs(self))
    def neg_(self): return self._inplace(_F.neg(self))
    def sqrt_(self): return self._inplace(_F.sqrt(self))
    def exp_(self): return self._inplace(_F.exp(self))
    def sigmoid_(self): return self._inplace(_F.sigmoid(self))
    def tanh_(self): return self._inplace(_F.tanh(self))
    def floor_(self): return self._inplace(_F.floor(self))
    def ceil_(self): return self._inplace(_F.ceil(self))
    def round_(self, decimals=0): return self._inplace(_F.round(self, decimals))
    def clamp_min_(self, min): return self._inplace(_F.clamp_min(self, min))
    def clamp_max_(self, max): return self._inplace(_F.clamp_max(self, max))

    def index_fill_(self, dim, index, value):
        return self._inplace(_F.index_fill(self, dim, index, value))

    def index_add_(self, dim, index, source, alpha=1):
        src = source if alpha == 1 else _F.mul(source, alpha)
        return self._inplace(_F.index_add(self, dim, index, src))

    def index_copy_(self, dim, index, source):
        return self._inplace(_F.index_copy(self, dim, index, source))

    def scatter_add_(self, dim, index, src):
        return self._inplace(_F.scatter_add(self, dim, index, src))

    def lerp_(self, end, weight): return self._inplace(_F.lerp(self, end, weight))

    def stride(self, dim=None):
        """Row-major strides in elements: a Loom tensor's values are laid
        out contiguously (is_contiguous() is True)."""
        strides, step = [], 1
        for size in reversed(self.shape):
            strides.append(step)
            step *= builtins.max(size, 1)
        strides = tuple(reversed(strides))
        return strides if dim is None else strides[_F._dim(dim, self.ndim)]

    def scatter_(self, dim, index, src=None, value=None, reduce=None):
        return self._inplace(_F.scatter(self, dim, index, src, value, reduce))

    # In-place layout changes: the tensor takes the new shape with the new
    # value, where nothing else sees its memory (no NumPy view of it, not
    # a parameter); else refused with the out-of-place spelling.
    def _layout_(self, result, name):
        if result.shape == self.shape:
            return self._inplace(result)
        if not (result._lazy and _C._take_value(self, result, True)):
            raise NotImplementedError(f"loom: {name} of a tensor whose memory is shared (a "
                                      f"NumPy view, a parameter) cannot change its shape; "
                                      f"use x = x.{name[:-1]}(...)")
        return self

    def transpose_(self, dim0, dim1):
        return self._layout_(_F.transpose(self, dim0, dim1), "transpose_")

    def t_(self): return self._layout_(_F.t(self), "t_")
    def squeeze_(self, dim=None): return self._layout_(_F.squeeze(self, dim), "squeeze_")
    def unsqueeze_(self, dim): return self._layout_(_F.unsqueeze(self, dim), "unsqueeze_")

    def uniform_(self, a=0.0, b=1.0, generator=None):
        """Uniform [a, b) values in place, from loom's generator (or the
        numpy.random.Generator given)."""
        return self._random_fill(lambda g: g.uniform(a, b, self.shape), generator)

    def normal_(self, mean=0.0, std=1.0, generator=None):
        return self._random_fill(lambda g: g.normal(mean, std, self.shape), generator)

    def bernoulli_(self, p=0.5, generator=None):
        """1 with probability p (a number, or a tensor of them), else 0."""
        probs = p.detach().numpy() if isinstance(p, Tensor) else p
        return self._random_fill(lambda g: g.random(self.shape) < probs, generator,
                                 any_dtype=True)

    def exponential_(self, lambd=1.0, generator=None):
        return self._random_fill(lambda g: g.exponential(1.0 / lambd, self.shape), generator)

    def geometric_(self, p, generator=None):
        return self._random_fill(lambda g: g.geometric(p, self.shape), generator,
                                 any_dtype=True)

    def cauchy_(self, median=0.0, sigma=1.0, generator=None):
        return self._random_fill(lambda g: median + sigma * g.standard_cauchy(self.shape),
                                 generator)

    def log_normal_(self, mean=1.0, std=2.0, generator=None):
        return self._random_fill(lambda g: g.lognormal(mean, std, self.shape), generator)

    def random_(self, from_=0, to=None, generator=None):
        """Integers in [from_, to), or [0, from_) given one bound; without
        bounds [0, 2^mantissa] for floats, [0, max] for integers (PyTorch's)."""
        if to is None and from_ == 0:
            top = 2 ** (np.finfo(self.dtype._numpy).nmant + 1) if self.dtype.is_floating_point \
                else int(np.iinfo(self.dtype._numpy).max)
            low, high = 0, top + 1 if self.dtype.is_floating_point else top
        else:
            low, high = (0, from_) if to is None else (from_, to)
        return self._random_fill(lambda g: g.integers(low, high, self.shape), generator,
                                 any_dtype=True)

    def _random_fill(self, draw, generator, any_dtype=False):
        if not any_dtype and not self.dtype.is_floating_point:
            raise RuntimeError(f"loom: random fill of a {self.dtype.name} tensor (a float "
                               f"dtype only)")
        from . import _drawn
        values = _drawn(lambda g: np.asarray(draw(g)), self.dtype, generator)
        return self._inplace(_F._op("identity", values))

    def copy_(self, src):
        if not isinstance(src, Tensor):
            from . import tensor
            src = tensor(src, dtype=self.dtype)
        return self._inplace(_F.cast(_F.expand(src, *self.shape), self.dtype))

    def __setitem__(self, index, value):
        """x[index] = value. Into a lazy value (the result of ops in the
        step in progress), functionally: x becomes a new value equal to the
        old one but at index, and gradients flow through it. Into a real
        tensor while gradients are tracked (the value requires grad, or the
        step in progress holds values that do), the same, where nothing
        else sees its memory; else into its memory (NumPy's rules; arrays
        sharing it see the change), which ends the step in progress.
        Slices of a lazy value are new values, not views of its memory:
        assigning into one does not change the tensor it was sliced from.
        A leaf that requires grad is refused, as in PyTorch."""
        self._check_assignable()
        if isinstance(value, (int, float)):
            _dtype.check_fits(value, self.dtype, fill=True)
        if self._lazy:
            _C._rebind(self, _F._index_put(self, index, value))
            return
        if self.requires_grad and not self.is_leaf:
            raise RuntimeError("loom: assignment into a computed tensor that requires grad "
                               "and has been read; compute the new tensor with ops "
                               "(loom.where, loom.cat) instead")
        grad_value = isinstance(value, Tensor) and value.requires_grad
        if _C.is_grad_enabled() and (grad_value or _C._step_tracks_grad()) and \
                _C._take_value(self, _F._index_put(self, index, value)):
            return
        if grad_value and _C.is_grad_enabled() and not _C._capturing():
            import warnings
            warnings.warn("loom: assignment of a value that requires grad into a tensor "
                          "whose memory others see (a NumPy array, a view) writes that "
                          "memory: gradients do not flow back through the value",
                          stacklevel=2)
        view, rest = _F._numpy_select(np.asarray(self), index)
        _C.step()  # values of the step in progress read the old data
        view[rest] = np.asarray(value) if isinstance(value, Tensor) else value

    def float(self): return _F.cast(self, _dtype._BY_NAME["float32"])
    def double(self): return _F.cast(self, _dtype._BY_NAME["float64"])
    def half(self): return _F.cast(self, _dtype._BY_NAME["float16"])
    def bfloat16(self): return _F.cast(self, _dtype._BY_NAME["bfloat16"])
    def char(self): return _F.cast(self, _dtype._BY_NAME["int8"])
    def long(self): return _F.cast(self, _dtype._BY_NAME["int64"])
    def int(self): return _F.cast(self, _dtype._BY_NAME["int32"])
    def bool(self): return _F.cast(self, _dtype._BY_NAME["bool"])

    def to(self, *args, **kwargs):
        """to(dtype), to(device), to(device, dtype), to(other), with device=
        and dtype= keywords as PyTorch's; the only device is "cpu"."""
        dtype, copy = _to_args(args, kwargs)
        out = self if dtype is None else _F.cast(self, dtype)
        return out.clone() if copy and out is self else out

    def type(self, dtype=None):
        """With no dtype, the tensor type's name as PyTorch spells it
        ("loom.FloatTensor"); else self.to(dtype), dtype also such a name
        (a "torch." one too)."""
        if dtype is None:
            return f"loom.{_TYPE_NAMES[self.dtype.name]}Tensor"
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            name = dtype.rsplit(".", 1)[-1][:-len("Tensor")]
            found = [d for d, n in _TYPE_NAMES.items() if n == name]
            if not found:
                raise ValueError(f"invalid type: '{dtype}'")
            dtype = found[0]
        return self.to(dtype)

    def view(self, *shape):
        return _F.reshape(self, *shape)

    @property
    def T(self):
        return _F.permute(self, *reversed(range(self.ndim)))

    @property
    def mT(self):
        return _F.transpose(self, -2, -1)


def _unpickle(cls, dtype_code, shape, data, requires_grad):
    t = _C.from_bytes(dtype_code, shape, data)
    t.requires_grad = requires_grad
    t.__class__ = cls
    return t


def _check_device(device):
    """Refuses any device but the host's (a torch.device, a name, an index)."""
    name = str(getattr(device, "type", device))
    if name.split(":")[0] != "cpu":
        raise RuntimeError(f"loom: device {str(device)!r} is not available: Loom's tensors "
                           f"live in host memory (device 'cpu')")


def _to_args(args, kwargs):
    """The dtype (or None) and copy flag of Tensor.to / Module.to's
    arguments, after checking the device they name."""
    dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    copy = kwargs.pop("copy", False)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, bool):  # non_blocking given by position
            continue
        elif isinstance(a, int) or type(a).__name__ == "device" or \
                (isinstance(a, str) and a not in _dtype._BY_NAME):
            device = a
        else:
            dtype = a
    if device is not None:
        _check_device(device)
    return (None if dtype is None else _dtype.resolve(dtype)), copy


class RemovableHandle:
    """What register_hook and the module hooks return: remove() takes the
    hook away (also at the end of a with block), as torch's."""
    _ids = itertools.count()

    def __init__(self, hooks):
        self.hooks, self.id = hooks, next(RemovableHandle._ids)

    def remove(self):
        self.hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _GradFn:
    """A computed tensor's grad_fn: torch's name() and repr, with a generic
    name, as the binding does not expose which op made the tensor."""

    def name(self):
        return "LoomBackward0"

    def __repr__(self):
        return f"<{self.name()} object>"


_GRAD_FN = _GradFn()


class _TensorHooks:
    """A tensor's hooks. A computed tensor's gradient is the trace's
    retained one (loom_trace_retain_grad). Its .grad, as PyTorch's, is the
    gradient as the hooks registered before retain_grad() left it
    (retained_after: the last of those handles' ids); hidden: retained for
    the hooks only, so .grad is emptied after each backward."""
    _order = itertools.count()

    def __init__(self, t):
        key = id(t)
        self.ref = weakref.ref(t, lambda _: _hooks.pop(key, None))
        self.fns, self.seq = OrderedDict(), next(_TensorHooks._order)
        self.hidden = not t.is_leaf and not t.retains_grad
        self.retained_after = -1
        if self.hidden:
            try:
                t.retain_grad()
            except RuntimeError as e:
                raise RuntimeError(str(e).replace("retain_grad()", "register_hook()")) from None

    def retain(self):
        """The user's retain_grad(): .grad keeps the gradient from now on."""
        if self.hidden:
            self.hidden = False
            self.retained_after = max(self.fns, default=-1)

    def run(self, grad):
        """The gradient the hooks make of grad, and the one .grad keeps."""
        kept = grad if self.retained_after < 0 else None
        for hid, fn in list(self.fns.items()):
            new = fn(grad)
            if new is not None:
                if tuple(new.shape) != tuple(grad.shape):
                    raise RuntimeError(f"hook '{getattr(fn, '__name__', fn)}' has changed "
                                       f"the size of value")
                grad = new
            if hid == self.retained_after:
                kept = grad
        return grad, (grad if kept is None else kept)


_hooks = {}  # id(tensor) -> _TensorHooks, while the tensor lives


def _backward(loss):
    """backward from loss, with the tensor hooks: each computed tensor's
    hooks (the last registered first: the reverse of the order the
    forward made them) get its gradient; a replacement's difference is
    back-propagated from that tensor (by linearity, the gradients further
    on become those of the replaced gradient). Then each leaf's hooks
    get its gradient of this backward, before it is added to .grad."""
    hooked = [(h, h.ref()) for h in sorted(_hooks.values(), key=lambda h: h.seq)
              if h.fns and h.ref() is not None]
    if _C._capturing() and any(t.is_leaf or t._lazy for _, t in hooked):
        raise _C.GraphBreak("loom.compile: backward through tensors with hooks")
    if not hooked or _C._capturing():  # a capture reaches no hooked tensor
        return _C._backward(loss)
    before = [(h, t, t.grad) for h, t in hooked]
    for _, t, _ in before:
        t.grad = None  # the hooks get this backward's gradient alone
    try:
        kept = _run_hooks(loss, before)
    except BaseException:
        for _, t, old in before:  # a hook failed: .grad as it was
            t.grad = old
        raise
    for h, t, old in before:
        _set_grad(h, t, old, kept.get(id(t)))


def _run_hooks(loss, before):
    """The backward, then the computed tensors' hooks (each replacement's
    difference back-propagated), then the leaves'; returns, by id, the
    gradient of this backward each .grad takes."""
    _C._backward(loss)
    kept = {}
    for h, t, _ in reversed(before):
        if not t.is_leaf and t.grad is not None:
            g = t.grad
            new, kept[id(t)] = h.run(g)
            if new is not g:
                _C._backward(_F.sum(t * (new - g).detach()))
    for h, t, _ in before:
        if t.is_leaf and t.grad is not None:
            kept[id(t)], _ = h.run(t.grad)
    return kept


def _set_grad(hooks, t, old, g):
    """t's .grad after a backward that gave it g: added to what it held; a
    computed tensor retained for the hooks only keeps none."""
    if hooks.hidden:
        t.grad = None
    elif g is None:
        t.grad = old
    elif old is not None:
        t.grad = old + g
    elif g is not t.grad:  # else .grad stays the trace's own (the optimizer's fast path)
        t.grad = g


_C._set_tensor_class(Tensor)
# The methods through which a program reads a value: a read through them
# ends a step no backward can use, as a read from the program's own code
# does (one inside loom's modules, on the way to an op's result, does not).
_C._set_user_reads(__file__[:-len("_tensor.py")], tuple(
    f.__code__ for f in (Tensor.numpy, Tensor.tolist, Tensor.__float__, Tensor.__int__,
                         Tensor.__index__, Tensor.__format__, Tensor.__repr__,
                         Tensor.__array__)))

from . import functional as _F  # noqa: E402  (functional builds on Tensor)

# The functions of loom that are also methods (x.sum(1), x.reshape(2, -1)).
for _name, _fn in _F.METHODS.items():
    if _name not in Tensor.__dict__:
        setattr(Tensor, _name, _fn)
del _name, _fn
_C._set_operator_fallbacks(_F)
