"""loom.optim.lr_scheduler: torch.optim.lr_scheduler's schedules.

A schedule writes each param group's "lr"; Loom's optimizers read it at
every step (an input of the compiled update), so a new rate recompiles
nothing. The rules are PyTorch's chainable ones, step by step, so that the
sequences match its own."""
import math
import warnings
from bisect import bisect_right
from collections import Counter


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1, verbose=False):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        self.verbose = verbose
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                               f"when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self._step_count = 0
        self._step_at(None)

    def get_lr(self):
        raise NotImplementedError

    def _lrs(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def _per_group(self, name, value):
        """value for each param group: one for all, or a list of one each."""
        n = len(self.optimizer.param_groups)
        if not isinstance(value, (list, tuple)):
            return [value] * n
        if len(value) != n:
            raise ValueError(f"expected {n} values for {name}, got {len(value)}")
        return list(value)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "get_lr" in cls.__dict__:  # a read outside step() warns, as PyTorch's
            inner = cls.__dict__["get_lr"]

            def get_lr(self):
                if not getattr(self, "_in_step", False):
                    warnings.warn("To get the last learning rate computed by the scheduler, "
                                  "use get_last_lr()", UserWarning, stacklevel=2)
                return inner(self)
            cls.get_lr = get_lr

    def step(self, epoch=None):
        """The next epoch's rates; at a given epoch (deprecated, as in
        PyTorch), the closed form where there is one."""
        if epoch is not None:
            warnings.warn("The epoch argument of scheduler.step() is deprecated: call step() "
                          "without it (with it, the closed form is used where there is one)",
                          UserWarning, stacklevel=2)
        if self._step_count == 1 and getattr(self.optimizer, "_step_count", 1) < 1:
            warnings.warn("lr_scheduler.step() was called before optimizer.step(): since "
                          "PyTorch 1.1 the optimizer steps first, else the schedule's first "
                          "value is skipped", UserWarning, stacklevel=2)
        self._step_at(epoch)

    def _step_at(self, epoch):
        self._step_count += 1
        self._in_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                lrs = self.get_lr()
            else:
                self.last_epoch = epoch
                lrs = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") \
                    else self.get_lr()
        finally:
            self._in_step = False
        for i, (group, lr) in enumerate(zip(self.optimizer.param_groups, lrs)):
            group["lr"] = lr
            if self.verbose:
                print(f"Adjusting learning rate of group {i} to {lr:.4e}.")
        self._last_lr = self._lrs()

    def get_last_lr(self):
        return self._last_lr

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


_LRScheduler = LRScheduler


class LambdaLR(LRScheduler):
    """lr = initial lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose=False):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) \
            else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"Expected {n} lr_lambdas, but got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        return [base * f(self.last_epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self):  # functions are not state
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}


class MultiplicativeLR(LambdaLR):
    """lr times lr_lambda(epoch) at each epoch after the first."""

    def get_lr(self):
        if self.last_epoch == 0:
            return self._lrs()
        return [lr * f(self.last_epoch) for lr, f in zip(self._lrs(), self.lr_lambdas)]


class StepLR(LRScheduler):
    """lr times gamma every step_size epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr times gamma at each milestone (a repeated one: gamma to its count)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

    def _get_closed_form_lr(self):
        n = bisect_right(sorted(self.milestones.elements()), self.last_epoch)
        return [base * self.gamma ** n for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr times factor until epoch total_iters, then the initial lr."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1, verbose=False):
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        done = self.last_epoch >= self.total_iters
        return [base * (self.factor + done * (1 - self.factor)) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma, last_epoch=-1, verbose=False):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch == 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr from the initial one down to eta_min over T_max epochs along half
    a cosine (and back up after, as PyTorch's recurrence does)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1, verbose=False):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        e, t, lo = self.last_epoch, self.T_max, self.eta_min
        if e == 0:
            return self._lrs()
        if self._step_count == 1 and e > 0:  # made to resume at epoch e: the closed form
            return [lo + (base - lo) * (1 + math.cos(math.pi * e / t)) / 2
                    for base in self.base_lrs]
        if (e - 1 - t) % (2 * t) == 0:
            return [lr + (base - lo) * (1 - math.cos(math.pi / t)) / 2
                    for base, lr in zip(self.base_lrs, self._lrs())]
        ratio = (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
        return [ratio * (lr - lo) + lo for lr in self._lrs()]

    def _get_closed_form_lr(self):
        lo = self.eta_min
        return [lo + (base - lo) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr times a factor going linearly from start_factor to end_factor over
    total_iters epochs."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1, verbose=False):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("start_factor in (0, 1] and end_factor in [0, 1], as PyTorch's")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        e, a, b, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
        if e == 0:
            return [lr * a for lr in self._lrs()]
        if e > n:
            return self._lrs()
        return [lr * (1.0 + (b - a) / (n * a + (e - 1) * (b - a))) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        a, b, n = self.start_factor, self.end_factor, self.total_iters
        return [base * (a + (b - a) * min(n, self.last_epoch) / n) for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr times (1 - epoch / total_iters) ** power, held after total_iters
    epochs."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1, verbose=False):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        e, n = self.last_epoch, self.total_iters
        if e == 0 or e > n:
            return self._lrs()
        factor = ((1.0 - e / n) / (1.0 - (e - 1) / n)) ** self.power
        return [lr * factor for lr in self._lrs()]

    def _get_closed_form_lr(self):
        left = 1.0 - min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * left ** self.power for base in self.base_lrs]


class _Composite(LRScheduler):
    """A schedule made of others over one optimizer; its state holds theirs."""

    def _check_optimizer(self, schedulers, optimizer):
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise ValueError(f"{type(self).__name__} expects all schedulers to belong to "
                                 f"the same optimizer, but got schedulers at index {i} to be "
                                 f"different than the optimizer passed in.")

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        for s, saved in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(saved)
        self.__dict__.update(state)


class SequentialLR(_Composite):
    """schedulers one after another: the i-th from milestones[i-1] on,
    restarted there at its epoch 0."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1, verbose=False):
        self._check_optimizer(schedulers, optimizer)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"Sequential Schedulers expects number of schedulers provided to "
                             f"be one more than the number of milestone points, but got number "
                             f"of schedulers {len(schedulers)} and the number of milestones to "
                             f"be equal to {len(milestones)}")
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        for group in optimizer.param_groups:  # undo the schedulers' own first steps
            group["lr"] = group["initial_lr"]
        for s in schedulers:
            s.last_epoch -= 1
        schedulers[0]._initial_step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self):
        self.last_epoch += 1
        i = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler._step_at(0)  # restarted at its epoch 0 (no deprecation warning)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Every scheduler's step at each step, in order."""

    def __init__(self, schedulers):
        self.optimizer = schedulers[0].optimizer
        self._check_optimizer(schedulers, self.optimizer)
        self._schedulers = list(schedulers)
        self._last_lr = self._lrs()

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = self._lrs()


class CosineAnnealingWarmRestarts(LRScheduler):
    """Half a cosine from the initial lr to eta_min over T_i epochs, then a
    restart, T_i growing by T_mult (SGDR); step(epoch) takes fractional
    epochs, as PyTorch's."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0, last_epoch=-1, verbose=False):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        lo = self.eta_min
        return [lo + (base - lo) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch=None):
        """step(epoch) with a fractional epoch is this schedule's own use
        (within an epoch's batches), not deprecated."""
        self._step_at(epoch)

    def _step_at(self, epoch):
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur, self.T_i = self.T_cur - self.T_i, self.T_i * self.T_mult
        else:
            self._seek(epoch)
        self.last_epoch = math.floor(epoch)
        self._in_step = True
        try:
            lrs = self.get_lr()
        finally:
            self._in_step = False
        for i, (group, lr) in enumerate(zip(self.optimizer.param_groups, lrs)):
            group["lr"] = lr
            if self.verbose:
                print(f"Adjusting learning rate of group {i} to {lr:.4e}.")
        self._last_lr = self._lrs()

    def _seek(self, epoch):
        """T_cur and T_i at a given epoch."""
        if epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        if epoch < self.T_0:
            self.T_i, self.T_cur = self.T_0, epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:
            n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult ** n


class OneCycleLR(LRScheduler):
    """The 1cycle policy, per batch: lr from max_lr/div_factor up to max_lr
    over pct_start of total_steps, then down to initial/final_div_factor
    (three_phase: back to the initial lr first); momentum (or Adam's beta1)
    cycles the other way, as PyTorch's."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True,
                 base_momentum=0.85, max_momentum=0.95, div_factor=25.0,
                 final_div_factor=1e4, three_phase=False, last_epoch=-1, verbose=False):
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        self._schedule_phases = _one_cycle_phases(float(pct_start * self.total_steps),
                                                  self.total_steps, three_phase)
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must by one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self.anneal_strategy = anneal_strategy
        if last_epoch == -1:
            for group, top in zip(optimizer.param_groups, self._per_group("max_lr", max_lr)):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._init_momentum(max_momentum, base_momentum, last_epoch)
        super().__init__(optimizer, last_epoch, verbose)

    def _init_momentum(self, max_momentum, base_momentum, last_epoch):
        defaults = self.optimizer.defaults
        if "momentum" not in defaults and "betas" not in defaults:
            raise ValueError("optimizer must support momentum with `cycle_momentum` option "
                             "enabled")
        self.use_beta1 = "betas" in defaults
        if last_epoch != -1:
            return
        for group, top, low in zip(self.optimizer.param_groups,
                                   self._per_group("max_momentum", max_momentum),
                                   self._per_group("base_momentum", base_momentum)):
            self._set_momentum(group, top)
            group["max_momentum"], group["base_momentum"] = top, low

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step + 1} times. The specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            phase, pct = self._phase(step)
            lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct))
            if self.cycle_momentum:
                self._set_momentum(group, self._anneal(group[phase["start_momentum"]],
                                                       group[phase["end_momentum"]], pct))
        return lrs

    def _phase(self, step):
        """The phase step is in, and how far along it."""
        start = 0
        for i, phase in enumerate(self._schedule_phases):
            end = phase["end_step"]
            if step <= end or i == len(self._schedule_phases) - 1:
                return phase, (step - start) / (end - start)
            start = end


class CyclicLR(LRScheduler):
    """lr cycling between base_lr and max_lr, step_size_up batches up and
    step_size_down down (mode "triangular", "triangular2": the height halved
    each cycle, "exp_range": scaled by gamma ** iteration, or scale_fn over
    scale_mode "cycle" or "iterations"); momentum (an optimizer's
    "momentum") cycles the other way, as PyTorch 1.13's."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle",
                 cycle_momentum=True, base_momentum=0.8, max_momentum=0.9, last_epoch=-1,
                 verbose=False):
        self.optimizer = optimizer
        base_lrs = self._per_group("base_lr", base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = self._per_group("max_lr", max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else \
            "iterations" if mode == "exp_range" else "cycle"
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum with `cycle_momentum` "
                                 "option enabled")
            if last_epoch == -1:
                for m, group in zip(self._per_group("base_momentum", base_momentum),
                                    optimizer.param_groups):
                    group["momentum"] = m
            self.base_momentums = [g["momentum"] for g in optimizer.param_groups]
            self.max_momentums = self._per_group("max_momentum", max_momentum)
        super().__init__(optimizer, last_epoch, verbose)
        self.base_lrs = base_lrs

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * scale_factor * scale
               for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, low, top in zip(self.optimizer.param_groups, self.base_momentums,
                                       self.max_momentums):
                group["momentum"] = top - (top - low) * scale_factor * scale
        return lrs

    def state_dict(self):  # a function is not state
        return {k: v for k, v in self.__dict__.items()
                if k not in ("optimizer", "_scale_fn_custom")}


def _total_steps(total_steps, epochs, steps_per_epoch):
    """OneCycleLR's length: total_steps, or epochs * steps_per_epoch."""
    if total_steps is None and epochs is None and steps_per_epoch is None:
        raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
    if total_steps is not None:
        if total_steps <= 0 or not isinstance(total_steps, int):
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        return total_steps
    if epochs <= 0 or not isinstance(epochs, int):
        raise ValueError(f"Expected positive integer epochs, but got {epochs}")
    if steps_per_epoch <= 0 or not isinstance(steps_per_epoch, int):
        raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
    return epochs * steps_per_epoch


def _one_cycle_phases(warm, total, three_phase):
    """OneCycleLR's phases: where each ends, and the group keys of its ends."""
    def phase(end, lr, momentum):
        return {"end_step": end, "start_lr": lr[0], "end_lr": lr[1],
                "start_momentum": momentum[0], "end_momentum": momentum[1]}
    up = phase(warm - 1, ("initial_lr", "max_lr"), ("max_momentum", "base_momentum"))
    if not three_phase:
        return [up, phase(total - 1, ("max_lr", "min_lr"), ("base_momentum", "max_momentum"))]
    return [up, phase(2 * warm - 2, ("max_lr", "initial_lr"), ("base_momentum", "max_momentum")),
            phase(total - 1, ("initial_lr", "min_lr"), ("max_momentum", "max_momentum"))]


class ReduceLROnPlateau:
    """lr times factor once a metric (step(metric)) has not improved for
    patience epochs, then cooldown epochs without counting, as PyTorch's."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8, verbose=False):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.optimizer, self.factor = optimizer, factor
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError(f"expected {n} min_lrs, got {len(min_lr)}")
            self.min_lrs = list(min_lr)
        else:
            self.min_lrs = [min_lr] * n
        self.patience, self.cooldown, self.eps, self.verbose = patience, cooldown, eps, verbose
        self.last_epoch = 0
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _init_is_better(self, mode, threshold, threshold_mode):
        if mode not in ("min", "max"):
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.mode_worse = math.inf if mode == "min" else -math.inf

    def _reset(self):
        self.best, self.cooldown_counter, self.num_bad_epochs = self.mode_worse, 0, 0

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def is_better(self, a, best):
        rel, t = self.threshold_mode == "rel", self.threshold
        if self.mode == "min":
            return a < best * (1.0 - t) if rel else a < best - t
        return a > best * (t + 1.0) if rel else a > best + t

    def step(self, metrics, epoch=None):
        current = float(metrics)  # a 0-d tensor: a read
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _reduce_lr(self):
        for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, floor)
            if old - new > self.eps:
                group["lr"] = new

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)
