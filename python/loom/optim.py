"""Optimizers as torch.optim's: SGD, Adam, AdamW, with param groups.

step() applies each parameter's .grad, then ends the traced step. When
every .grad is exactly the gradient this step's backward gave (the common
loop: zero_grad, backward, step), the update runs as Loom's optimizer
step (loom_trace_optimizer_step: every parameter's update in one
executable, compiled once and replayed; the learning rate is an input of
it, so a schedule recompiles nothing). When a .grad was changed
(clip_grad_norm_, gradients accumulated over several steps, a second
optimizer over other parameters of the step, several param groups), the
same update runs as traced ops on the .grad values, with its state kept
here. The two keep separate state: a program that switches between them
mid-training restarts the moments."""
import math
import sys

from . import _C, _compile
from . import lr_scheduler

# loom.optim.lr_scheduler, as torch.optim.lr_scheduler (import ... from it too)
sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler

_SGD, _ADAM, _ADAMW = 0, 1, 2


class Optimizer:
    _kind = None

    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for g in groups:
            group = {**defaults, **g, "params": list(g["params"])}
            for p in group["params"]:
                if not p.requires_grad or not p.is_leaf:
                    raise ValueError("can't optimize a tensor that is not a leaf requiring grad")
            self.param_groups.append(group)
        self.defaults = defaults
        self.state = {}  # id(p) -> state of the update in Python

    def _hyperparameters(self):
        """What a compiled step fixes at capture: all but the learning rate
        (and a schedule's initial_lr)."""
        return tuple((k, v) for g in self.param_groups for k, v in sorted(g.items())
                     if k not in ("lr", "initial_lr", "params"))

    def zero_grad(self, set_to_none=True):
        from . import zeros_like
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else zeros_like(p.grad)

    def step(self):
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
        mine = {id(p) for p in params}
        if (len(self.param_groups) == 1 and _C._trace_grads_current(params)
                and all(id(p) in mine for p in _C._step_params())):
            g = self.param_groups[0]
            _C._optimizer_step(self._kind, float(g["lr"]), float(g.get("momentum", 0.0)),
                               bool(g.get("nesterov", False)),
                               float(g.get("betas", (0.9, 0.999))[0]),
                               float(g.get("betas", (0.9, 0.999))[1]),
                               float(g.get("eps", 1e-8)), float(g["weight_decay"]))
            return
        self._step_from_grads()

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
                        updates.append((p, self._update(p, p.grad, group)))
        step()  # makes the new values and the state real
        for p, new in updates:
            _C._copy_into(p, new)


class SGD(Optimizer):
    _kind = _SGD

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        if dampening != 0.0:
            raise NotImplementedError("loom.optim.SGD: dampening other than 0")
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum requires a momentum")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def _update(self, p, g, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        if group["momentum"]:
            s = self.state.setdefault(id(p), {})
            buf = s["momentum_buffer"] = (g if "momentum_buffer" not in s
                                          else group["momentum"] * s["momentum_buffer"] + g)
            g = g + group["momentum"] * buf if group["nesterov"] else buf
        return p - group["lr"] * g


class Adam(Optimizer):
    _kind = _ADAM

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def _update(self, p, g, group):
        from . import zeros_like
        b1, b2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        s = self.state.setdefault(id(p), {"step": 0})
        if self._kind == _ADAMW:
            p = p * (1 - lr * wd)
        elif wd:
            g = g + wd * p
        if "exp_avg" not in s:
            s["exp_avg"], s["exp_avg_sq"] = zeros_like(g), zeros_like(g)
        s["step"] += 1
        s["exp_avg"] = b1 * s["exp_avg"] + (1 - b1) * g
        s["exp_avg_sq"] = b2 * s["exp_avg_sq"] + (1 - b2) * g * g
        t = s["step"]
        denom = (s["exp_avg_sq"] / (1 - b2 ** t)).sqrt() + eps
        return p - (lr / (1 - b1 ** t)) * s["exp_avg"] / denom


class AdamW(Adam):
    _kind = _ADAMW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)
