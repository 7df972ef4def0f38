"""Optimizers as torch.optim's: SGD, Adam, AdamW, RMSprop, Adagrad, with
param groups.

step() applies each parameter's .grad, then ends the traced step. When
every .grad is exactly the gradient this step's backward gave (the common
loop: zero_grad, backward, step), the update runs as Loom's optimizer
step (loom_trace_optimizer_step: every parameter's update in one
executable, compiled once and replayed; the learning rate is an input of
it, so a schedule recompiles nothing). When a .grad was changed
(clip_grad_norm_, gradients accumulated over several steps, a second
optimizer over other parameters of the step, several param groups), the
same update runs as traced ops on the .grad values, with its state kept
here. A step on the other path than the last starts from the state the
last left (read from the trace's step, or handed to it), so a program
that switches mid-training (a gradient zeroed instead of set to None, a
clipped step among plain ones) updates as one path would.

state_dict() and load_state_dict() speak torch.optim's form: {"state":
{index: {"momentum_buffer"} or {"step", "exp_avg", "exp_avg_sq"}},
"param_groups": [{..., "params": [indices]}]}, the parameters numbered
in the groups' order. The state is read from where the last step kept
it; a loaded one is where the next step starts, on either path.

optimizer.state maps each parameter to the same state, read the same way.

Variants the trace's optimizer step has no update for (SGD with
dampening, Adam and AdamW with amsgrad, maximize=True, RMSprop, Adagrad)
always update on the .grad values; under loom.compile their step is a
graph break."""
import copy
import math
import sys
import weakref
from collections.abc import Mapping

import numpy as np

from . import _C, _compile
from . import lr_scheduler

# loom.optim.lr_scheduler, as torch.optim.lr_scheduler (import ... from it too)
sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler

_SGD, _ADAM, _ADAMW = 0, 1, 2

# The optimizer whose step the trace's optimizer step made last (a weak
# reference): that step keeps the state of one update rule at a time.
_trace_owner = None


class _Required:
    """The default of a hyperparameter every group must give (SGD's lr), as
    torch.optim.optimizer.required."""

    def __repr__(self):
        return "<required parameter>"


required = _Required()


def _check(defaults):
    """torch.optim's checks of the hyperparameters, with its messages."""
    checks = [("lr", "learning rate"), ("momentum", "momentum value"), ("eps", "epsilon value"),
              ("weight_decay", "weight_decay value"), ("alpha", "alpha value"),
              ("lr_decay", "lr_decay value"),
              ("initial_accumulator_value", "initial_accumulator_value value")]
    for key, what in checks:
        if key in defaults and defaults[key] is not required and not 0.0 <= defaults[key]:
            raise ValueError(f"Invalid {what}: {defaults[key]}")
    for i, b in enumerate(defaults.get("betas", ())):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b}")


def _zero_grads(params, set_to_none):
    """zero_grad of optimizers and modules: .grad None, or zeroed in place
    (as torch's, so that a reference held to it reads zeros)."""
    from . import no_grad
    for p in params:
        g = p.grad
        if not set_to_none and g is not None:
            with no_grad():
                g.detach_()
                g.zero_()
        # assigned even when None: a loom.compile capture notes that the
        # function clears the .grad (its replays replace it, not add to it)
        p.grad = None if set_to_none else g


def _implementation(foreach=None, differentiable=False, fused=None, capturable=False):
    """torch.optim's choices of how a step runs (a loop or grouped kernels,
    CUDA graphs) are taken: Loom's step is its own compiled one. A step
    autograd differentiates through, and PyTorch's fused CUDA kernels, are
    not there."""
    if differentiable:
        raise NotImplementedError("optimizer: differentiable=True (a step autograd "
                                  "differentiates through) is not supported")
    if fused:
        raise NotImplementedError("optimizer: fused=True (PyTorch's fused CUDA kernels) is not "
                                  "supported; Loom compiles the step itself")


class Optimizer:
    _kind = None
    _STEP_AS_TENSOR = True  # torch.optim keeps "step" as a tensor (RMSprop: an int)

    def __init__(self, params, defaults):
        _check(defaults)
        from . import Tensor
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got a loom Tensor")
        self._step_count = 0  # schedulers check that the optimizer stepped first
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        self.defaults = defaults
        self.param_groups = []
        for g in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(g)
        self._state = {}  # id(p) -> state of the update in Python
        self._loaded = {}  # id(p) -> state loaded for the trace's next step
        self._in_trace = False  # whether the last step ran in the trace
        # The loom.compile entry whose executable made the last step (its
        # state is there; kept alive with this optimizer).
        self._compiled_last = None

    def add_param_group(self, param_group):
        """A group of parameters (and its hyperparameters, the defaults
        otherwise), as torch.optim's: a parameter in one group only."""
        from . import Tensor
        params = param_group["params"]
        if isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:  # a frozen one (requires_grad=False) waits for a .grad
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params "
                                f"is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        others = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in others for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
        self.param_groups.append({**self.defaults, **param_group, "params": params})

    @property
    def state(self):
        """Each parameter's state in torch.optim's names and current values
        (read from where the last step kept it), keyed by parameter."""
        return _StateView(self)

    def _hyperparameters(self):
        """What a compiled step fixes at capture: all but the learning rate
        (and a schedule's initial_lr)."""
        return tuple((k, v) for g in self.param_groups for k, v in sorted(g.items())
                     if k not in ("lr", "initial_lr", "params"))

    def zero_grad(self, set_to_none=True):
        _zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def _in_trace_supported(self):
        """Whether the trace's optimizer step has this update."""
        return self._kind is not None and not any(g.get("maximize") for g in self.param_groups)

    def step(self, closure=None):
        """One update; closure (which computes the loss and its gradients)
        runs first with gradients on, and its loss is returned, as
        torch.optim's."""
        loss = None
        if closure is not None:
            from . import enable_grad
            with enable_grad():
                loss = closure()
        self._step()
        self._step_count += 1
        return loss

    def _step(self):
        if _C._capturing() and not self._in_trace_supported():
            raise _C.GraphBreak(f"loom.compile: {type(self).__name__} with these options "
                                "updates on .grad, outside the captured graph")
        if _C._capturing():  # inside loom.compile: the update joins the graph
            if len(self.param_groups) != 1:
                raise _C.GraphBreak("loom.compile: an optimizer of several param groups")
            _compile.guard((id(self), "hyper"), f"{type(self).__name__} hyperparameters",
                           self._hyperparameters)
            g = self.param_groups[0]
            b1, b2 = g.get("betas", (0.9, 0.999))
            _C._capture_optimizer(self._kind, float(g.get("momentum", 0.0)),
                                  bool(g.get("nesterov", False)), float(b1), float(b2),
                                  float(g.get("eps", 1e-8)), float(g["weight_decay"]), self)
            return
        params = [p for g in self.param_groups for p in g["params"]]
        self._leave_compiled(params)
        mine = {id(p) for p in params}
        if (len(self.param_groups) == 1 and self._in_trace_supported()
                and _C._trace_grads_current(params)
                and all(id(p) in mine for p in _C._step_params())):
            self._own_trace_step()
            if not self._in_trace:  # from the Python path: its state goes on
                self._loaded.update({id(p): self._trace_state(p) for p in params
                                     if self._state.get(id(p))})
            self._restore_in_trace(params)
            self._in_trace = True
            g = self.param_groups[0]
            _C._optimizer_step(self._kind, float(g["lr"]), float(g.get("momentum", 0.0)),
                               bool(g.get("nesterov", False)),
                               float(g.get("betas", (0.9, 0.999))[0]),
                               float(g.get("betas", (0.9, 0.999))[1]),
                               float(g.get("eps", 1e-8)), float(g["weight_decay"]))
            return
        self._leave_trace()
        self._step_from_grads()

    def _leave_trace(self):
        """After steps in the trace, the state goes on here (read from the
        trace's step; self._state holds what was loaded)."""
        if self._in_trace:
            for p in self._params():
                if id(p) not in self._loaded:
                    self._pull(p, _C._optimizer_state)
        self._loaded, self._in_trace = {}, False

    def _trace_keeps(self):
        """The names of the state the trace's step keeps for this update."""
        return tuple(self._TRACE_NAMES.values())

    def _own_trace_step(self):
        """Another optimizer's step in the trace (over other parameters: a
        second model's) rebuilds the trace's step for its own update rule,
        which keeps only the state of that rule's names: an SGD step would
        drop Adam's moments. The optimizer that stepped there last, when it
        keeps other state, first takes its state out; its next step hands
        it back (as from the Python path)."""
        global _trace_owner
        last = _trace_owner() if _trace_owner is not None else None
        if last is not None and last is not self and last._trace_keeps() != self._trace_keeps():
            last._leave_trace()
        _trace_owner = weakref.ref(self)

    # ---- checkpoints, in torch.optim's form ----
    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self):
        """The state by parameter index, and the groups with indices for
        parameters. Values are copies, as loom tensors."""
        state = {}
        for i, p in enumerate(self._params()):
            s = self._state_of(p)
            if s:
                state[i] = s
        groups, first = [], 0
        for g in self.param_groups:
            n = len(g["params"])
            groups.append({**{k: v for k, v in g.items() if k != "params"},
                           "params": list(range(first, first + n))})
            first += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Takes a state_dict() of an optimizer of this kind over
        parameters of the same shapes, as torch.optim's (a PyTorch one
        too): the groups' hyperparameters, and the state the next step
        starts from."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(self.param_groups, groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        self.param_groups = [{**{k: v for k, v in s.items() if k != "params"},
                              "params": g["params"]} for g, s in zip(self.param_groups, groups)]
        params = self._params()
        self._state, self._loaded, self._in_trace = {}, {}, False
        self._compiled_last = None
        for i, saved in state_dict["state"].items():
            if not 0 <= int(i) < len(params):
                continue  # of no parameter of these groups (torch.optim ignores it too)
            p = params[int(i)]
            s = {k: (int(float(v)) if k == "step" else _state_tensor(v, p.dtype))
                 for k, v in saved.items() if v is not None}
            missing = [k for k in self._TRACE_NAMES if k not in s]
            if s and missing and "step" in s:
                raise KeyError(f"loaded optimizer state of parameter {i} has no "
                               f"{', '.join(repr(k) for k in missing)}")
            self._state[id(p)] = s
            self._loaded[id(p)] = {self._TRACE_NAMES[k]: _trace_state(k, v, p.dtype)
                                   for k, v in s.items() if k in self._TRACE_NAMES}
        # A parameter the state dict gives no state starts afresh, as in a
        # new optimizer: the trace's step and a compiled step may hold some.
        for p in params:
            fresh = {k: (0 if k == "step" else _state_tensor(np.zeros(tuple(p.shape)), p.dtype))
                     for k in self._TRACE_NAMES}
            loaded = self._loaded.setdefault(id(p), {})
            for k, v in fresh.items():
                if self._TRACE_NAMES[k] not in loaded:
                    loaded[self._TRACE_NAMES[k]] = _trace_state(k, v, p.dtype)

    def _trace_state(self, p):
        """p's state here in the trace's names and dtypes."""
        return {self._TRACE_NAMES[k]: _trace_state(k, v, p.dtype)
                for k, v in self._state[id(p)].items() if k in self._TRACE_NAMES}

    def _pull(self, p, read):
        """p's state from where a step kept it (read(p, name): the trace's
        optimizer step, or a compiled step's executable) into self._state;
        none there (p took no step in it): what is here stays."""
        s = {k: read(p, name) for k, name in self._TRACE_NAMES.items()}
        if any(v is None for v in s.values()) or ("step" in s and int(s["step"]) == 0):
            return
        self._state[id(p)] = {k: int(v) if k == "step" else v.to(p.dtype)
                             for k, v in s.items()}

    def _last_compiled(self):
        return self._compiled_last

    def _leave_compiled(self, params):
        """After a compiled step, one on the trace's paths starts from its
        executable's state."""
        last = self._last_compiled()
        if last is not None:
            for p in params:
                self._pull(p, last.captured.state)
            self._loaded, self._in_trace = {}, False
        self._compiled_last = None

    def _before_compiled_step(self, entry):
        """A step compiled by loom.compile keeps the state in its executable,
        one per captured shape: an executable that did not make the last
        step starts from the state that one left (another shape's
        executable, the trace's step, a loaded state dict), so that a last
        batch of another size goes on with the same moments."""
        last = self._last_compiled()
        if last is not entry:
            params = self._params()
            if last is not None:
                for p in params:
                    self._pull(p, last.captured.state)
            elif self._in_trace:
                for p in params:
                    if id(p) not in self._loaded:
                        self._pull(p, _C._optimizer_state)
            for p in params:
                if self._state.get(id(p)):
                    for name, value in self._trace_state(p).items():
                        entry.captured.set_state(p, name, value)
        self._compiled_last = entry
        self._loaded, self._in_trace = {}, False

    def _restore_in_trace(self, params):
        """The loaded state of the parameters this step updates (those with
        a .grad, which the trace holds now) into the trace's optimizer
        step; the others' waits for a step that updates them."""
        for p in params:
            if p.grad is not None and id(p) in self._loaded:
                for name, value in self._loaded.pop(id(p)).items():
                    _C._optimizer_state_set(p, name, value)

    def _state_of(self, p):
        """p's state in torch.optim's names, from where it is now."""
        last = self._last_compiled()
        if last is not None:
            s = {k: last.captured.state(p, name) for k, name in self._TRACE_NAMES.items()}
            if any(v is None for v in s.values()) or ("step" in s and int(s["step"]) == 0):
                return {}
        elif id(p) in self._loaded or not self._in_trace:
            s = self._state.get(id(p), {})
        else:
            s = {k: _C._optimizer_state(p, name) for k, name in self._TRACE_NAMES.items()}
            if any(v is None for v in s.values()) or ("step" in s and int(s["step"]) == 0):
                return {}  # no step made it (or p took none)
        return {k: self._step_value(v) if k == "step" else v.detach() for k, v in s.items()}

    def _step_value(self, v):
        from . import float32, tensor
        return tensor(float(v), dtype=float32) if self._STEP_AS_TENSOR else int(v)

    def _step_from_grads(self):
        """The update as traced ops on .grad; the step then ends and the new
        values are written into the parameters. Under
        DistributedDataParallel the .grad are averaged across the ranks
        first."""
        from . import distributed, no_grad, step
        distributed._average_grads([p for g in self.param_groups for p in g["params"]])
        updates = []
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        g = -p.grad if group.get("maximize") else p.grad
                        updates.append((p, self._update(p, g, group)))
        step()  # makes the new values and the state real
        for p, new in updates:
            _C._copy_into(p, new)


class _StateView(Mapping):
    """optimizer.state: the parameters that have state, each mapped to it
    as state_dict() gives it (a parameter without state: {}, as
    torch.optim's defaultdict)."""

    def __init__(self, optimizer):
        self._optimizer = optimizer

    def __getitem__(self, p):
        if not any(p is q for q in self._optimizer._params()):
            return {}
        return self._optimizer._state_of(p)

    def _keys(self):
        return [p for p in self._optimizer._params() if self._optimizer._state_of(p)]

    def __iter__(self):
        return iter(self._keys())

    def __len__(self):
        return len(self._keys())

    def __contains__(self, p):
        return bool(self._optimizer._state_of(p))


def _state_tensor(v, dtype):
    """A saved state value (a loom or PyTorch tensor, an array) as a loom
    tensor of the parameter's dtype."""
    from . import Tensor, tensor
    if isinstance(v, Tensor):
        return copy.deepcopy(v.detach().to(dtype))  # real, and not the caller's
    if hasattr(v, "detach"):  # a PyTorch tensor
        v = v.detach().cpu().numpy()
    return tensor(np.asarray(v), dtype=dtype)


def _trace_state(name, v, dtype):
    """A state value in the dtype the trace's optimizer step keeps it: the
    step count i64, the rest in the update's dtype (f32 for 16-bit)."""
    from . import float32, int64, tensor
    if name == "step":
        return tensor(v, dtype=int64)
    return v.to(float32) if dtype.name in ("float16", "bfloat16") else v


class SGD(Optimizer):
    _kind = _SGD
    _TRACE_NAMES = {"momentum_buffer": "momentum"}

    def __init__(self, params, lr=required, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False, **implementation):
        _implementation(**implementation)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _in_trace_supported(self):
        return super()._in_trace_supported() and \
            all(not g.get("dampening") for g in self.param_groups)

    def _trace_keeps(self):
        return super()._trace_keeps() if any(g["momentum"] for g in self.param_groups) else ()

    def _update(self, p, g, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        if group["momentum"]:
            s = self._state.setdefault(id(p), {})
            if "momentum_buffer" not in s:  # the first step takes g undamped, as torch
                buf = g
            else:
                buf = group["momentum"] * s["momentum_buffer"] + \
                    (1 - group.get("dampening", 0.0)) * g
            s["momentum_buffer"] = buf
            g = g + group["momentum"] * buf if group["nesterov"] else buf
        return p - group["lr"] * g


class Adam(Optimizer):
    _kind = _ADAM
    _TRACE_NAMES = {"step": "step", "exp_avg": "m", "exp_avg_sq": "v"}

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False, **implementation):
        _implementation(**implementation)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _in_trace_supported(self):
        return super()._in_trace_supported() and \
            all(not g.get("amsgrad") for g in self.param_groups)

    def _update(self, p, g, group):
        from . import maximum, zeros_like
        b1, b2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        s = self._state.setdefault(id(p), {"step": 0})
        if self._kind == _ADAMW:
            p = p * (1 - lr * wd)
        elif wd:
            g = g + wd * p
        if "exp_avg" not in s:
            s["exp_avg"], s["exp_avg_sq"] = zeros_like(g), zeros_like(g)
        s["step"] += 1
        s["exp_avg"] = b1 * s["exp_avg"] + (1 - b1) * g
        s["exp_avg_sq"] = b2 * s["exp_avg_sq"] + (1 - b2) * g * g
        second = s["exp_avg_sq"]
        if group.get("amsgrad"):  # the largest second moment so far
            if "max_exp_avg_sq" not in s:
                s["max_exp_avg_sq"] = zeros_like(g)
            second = s["max_exp_avg_sq"] = maximum(s["max_exp_avg_sq"], second)
        t = s["step"]
        denom = (second / (1 - b2 ** t)).sqrt() + eps
        return p - (lr / (1 - b1 ** t)) * s["exp_avg"] / denom


class AdamW(Adam):
    _kind = _ADAMW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, **implementation):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         **implementation)


class RMSprop(Optimizer):
    """torch.optim.RMSprop; updates on .grad (the trace's step has no RMSprop)."""
    _TRACE_NAMES = {}
    _STEP_AS_TENSOR = False

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, maximize=False, **implementation):
        _implementation(**implementation)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      maximize=maximize))

    def _update(self, p, g, group):
        from . import zeros_like
        alpha, eps, momentum = group["alpha"], group["eps"], group["momentum"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        s = self._state.setdefault(id(p), {})
        if not s:  # torch's keys, in its order
            s["step"], s["square_avg"] = 0, zeros_like(g)
            if momentum > 0:
                s["momentum_buffer"] = zeros_like(g)
            if group["centered"]:
                s["grad_avg"] = zeros_like(g)
        s["step"] += 1
        s["square_avg"] = alpha * s["square_avg"] + (1 - alpha) * g * g
        if group["centered"]:
            s["grad_avg"] = alpha * s["grad_avg"] + (1 - alpha) * g
            avg = (s["square_avg"] - s["grad_avg"] * s["grad_avg"]).sqrt() + eps
        else:
            avg = s["square_avg"].sqrt() + eps
        if momentum > 0:
            s["momentum_buffer"] = momentum * s["momentum_buffer"] + g / avg
            return p - group["lr"] * s["momentum_buffer"]
        return p - group["lr"] * g / avg


class Adagrad(Optimizer):
    """torch.optim.Adagrad; updates on .grad (the trace's step has no Adagrad).
    Its state exists from construction, as torch's."""
    _TRACE_NAMES = {}

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, *, maximize=False,
                 **implementation):
        _implementation(**implementation)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      maximize=maximize))
        for group in self.param_groups:
            for p in group["params"]:
                self._fresh_state(p, group)

    def _fresh_state(self, p, group):
        from . import full
        s = self._state[id(p)] = {"step": 0, "sum": full(
            p.shape, group["initial_accumulator_value"], dtype=p.dtype)}
        return s

    def _update(self, p, g, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        s = self._state.get(id(p)) or self._fresh_state(p, group)
        s["step"] += 1
        clr = group["lr"] / (1 + (s["step"] - 1) * group["lr_decay"])
        s["sum"] = s["sum"] + g * g
        return p - clr * g / (s["sum"].sqrt() + group["eps"])
