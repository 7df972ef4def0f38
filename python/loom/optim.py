"""Optimizers as torch.optim's: SGD, Adam, AdamW. step() runs Loom's
optimizer (loom_trace_optimizer_step: the update of every parameter as one
executable, compiled once and replayed) over the step's gradients, then
ends the traced step. The learning rate is an input of that executable:
a schedule that changes it recompiles nothing."""
from . import _C

_SGD, _ADAM, _ADAMW = 0, 1, 2


class Optimizer:
    def __init__(self, params, defaults):
        self.param_groups = [{"params": list(params), **defaults}]
        if not self.param_groups[0]["params"]:
            raise ValueError("optimizer got an empty parameter list")
        for p in self.param_groups[0]["params"]:
            if not p.requires_grad or not p.is_leaf:
                raise ValueError("can't optimize a tensor that is not a leaf requiring grad")

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None if set_to_none else (p.grad * 0 if p.grad is not None else None)

    def _run(self, kind, momentum=0.0, nesterov=False, betas=(0.9, 0.999), eps=1e-8):
        group = self.param_groups[0]
        mine = {id(p) for p in group["params"]}
        for p in _C._step_params():
            if id(p) not in mine:
                raise NotImplementedError(
                    "loom.optim: the step used a parameter this optimizer does not hold; "
                    "one optimizer updates every parameter of a step")
        _C._optimizer_step(kind, float(group["lr"]), float(momentum), bool(nesterov),
                           float(betas[0]), float(betas[1]), float(eps),
                           float(group["weight_decay"]))


class SGD(Optimizer):
    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        if dampening != 0.0:
            raise NotImplementedError("loom.optim.SGD: dampening other than 0")
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum requires a momentum")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def step(self):
        g = self.param_groups[0]
        self._run(_SGD, momentum=g["momentum"], nesterov=g["nesterov"])


class Adam(Optimizer):
    _kind = _ADAM

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def step(self):
        g = self.param_groups[0]
        self._run(self._kind, betas=g["betas"], eps=g["eps"])


class AdamW(Adam):
    _kind = _ADAMW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)
