"""Differences an outside comparison with PyTorch 1.13 found, each checked
against PyTorch on the same program: containers, Parameter, shared
submodules, dropout, the class-index losses, BatchNorm's batch check,
clip_grad_norm_, Embedding(max_norm), one_hot, the learning rate
schedules, and the optimizers' state, groups, closures and maximize."""
import copy
import math
from collections import OrderedDict

import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def _data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _close(mine, theirs, rtol=1e-5, atol=1e-6, msg=""):
    np.testing.assert_allclose(_np(mine), _np(theirs), rtol=rtol, atol=atol, err_msg=msg)


def _same_weights(mine, theirs):
    """mine takes the PyTorch module's state."""
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})


# ---- containers ----

def _stack(nn):
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2), nn.ReLU())


def test_sequential_and_module_list_slices_are_containers():
    mine, theirs = _stack(loom.nn), _stack(torch.nn)
    _same_weights(mine, theirs)
    for index, width in ((slice(None, -1), 3), (slice(1, None), 4), (slice(None, None, 2), 3)):
        part, tpart = mine[index], theirs[index]
        assert type(part) is loom.nn.Sequential
        assert list(part.state_dict()) == list(tpart.state_dict())  # keys kept
        x = _data(2, width)
        _close(part(loom.tensor(x)), tpart(torch.tensor(x)))
    ml = loom.nn.ModuleList([loom.nn.Linear(1, 1), loom.nn.ReLU(), loom.nn.Tanh()])
    assert type(ml[0:2]) is loom.nn.ModuleList and len(ml[0:2]) == 2
    assert ml[-1] is ml[2]
    with pytest.raises(IndexError):
        ml[3]


SEQUENTIAL_EDITS = [
    lambda s, nn: s.append(nn.Linear(2, 2)),
    lambda s, nn: s.insert(1, nn.Sigmoid()),
    lambda s, nn: s.insert(-2, nn.Linear(4, 4)),
    lambda s, nn: s.extend([nn.Linear(2, 3), nn.Tanh()]),
    lambda s, nn: s.pop(1),
    lambda s, nn: s.__delitem__(slice(2, None)),
    lambda s, nn: s.__delitem__(-1),
]


@pytest.mark.parametrize("edit", range(len(SEQUENTIAL_EDITS)))
def test_sequential_list_methods(edit):
    """The same edit gives the same keys and the same function."""
    theirs, mine = _stack(torch.nn), _stack(loom.nn)
    SEQUENTIAL_EDITS[edit](theirs, torch.nn)
    SEQUENTIAL_EDITS[edit](mine, loom.nn)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    assert [type(m).__name__ for m in mine] == [type(m).__name__ for m in theirs]
    _same_weights(mine, theirs)
    x = _data(2, 3)
    _close(mine(loom.tensor(x)), theirs(torch.tensor(x)))


def test_module_list_and_dict_methods():
    def edits(nn):
        ml = nn.ModuleList([nn.Linear(1, 2)])
        ml.insert(0, nn.Linear(2, 1))
        ml += [nn.Linear(3, 3)]
        both = ml + nn.ModuleList([nn.Linear(4, 1)])
        md = nn.ModuleDict({"x": nn.Linear(1, 1)})
        md.update({"y": nn.Linear(2, 2)})
        md.update([("z", nn.Linear(3, 1))])
        popped = md.pop("x")
        return ml, both, md, popped
    for mine, theirs in zip(edits(loom.nn), edits(torch.nn)):
        assert type(mine).__name__ == type(theirs).__name__
        assert [(k, tuple(v.shape)) for k, v in mine.state_dict().items()] == \
            [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    md = edits(loom.nn)[2]
    assert "y" in md and "x" not in md and list(md.keys()) == ["y", "z"]


def _with_parameter_containers(lib):
    nn = lib.nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.plist = nn.ParameterList([nn.Parameter(lib.tensor(_w(2))), lib.tensor(_w(3))])
            self.plist.append(nn.Parameter(lib.tensor(_w(1))))
            self.pdict = nn.ParameterDict({"b": nn.Parameter(lib.tensor(_w(2))),
                                           "a": lib.tensor(_w(3))})
            self.pdict.update([("c", nn.Parameter(lib.tensor(_w(1))))])

        def forward(self):
            return sum((p * p).sum() for p in self.plist) + \
                sum((p ** 3).sum() for p in self.pdict.values())
    return M()


def _w(n):
    return np.arange(1, n + 1, dtype=np.float32) / (n + 1)


def test_parameter_list_and_dict_register_parameters():
    mine, theirs = _with_parameter_containers(loom), _with_parameter_containers(torch)
    names = [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in mine.named_parameters()] == names
    assert list(mine.state_dict()) == list(theirs.state_dict())
    assert all(isinstance(p, loom.nn.Parameter) for p in mine.plist)
    assert len(mine.plist) == 3 and len(mine.plist[1:]) == 2 and "a" in mine.pdict
    mine().backward()
    theirs().backward()
    for (n, p), (_, q) in zip(mine.named_parameters(), theirs.named_parameters()):
        _close(p.grad, q.grad, msg=n)
    assert mine.pdict.pop("a") is not None and list(mine.pdict) == ["b", "c"]
    with pytest.raises(RuntimeError):
        mine.plist()


# ---- Parameter ----

def test_parameters_are_instances_of_parameter():
    m = loom.nn.BatchNorm1d(3)
    for p in (m.weight, m.bias, loom.nn.Linear(2, 2).weight):
        assert isinstance(p, loom.nn.Parameter) and isinstance(p, loom.Tensor)
    y = m(loom.tensor(_data(4, 3)))
    for t in (m.running_mean, y, loom.ones(2, requires_grad=True)):
        assert not isinstance(t, loom.nn.Parameter)
    p = loom.nn.Parameter(loom.ones(2) * 3)
    assert isinstance(p, loom.nn.Parameter) and p.requires_grad and p.is_leaf
    assert p.detach().tolist() == [3.0, 3.0]
    assert type(copy.deepcopy(loom.nn.Linear(2, 2)).weight) is loom.nn.Parameter
    assert "Parameter containing" in repr(p)


def test_frozen_parameter_is_registered():
    """A Parameter that does not require grad is a module's parameter all
    the same, as PyTorch's."""
    for lib in (loom, torch):
        m = lib.nn.Module()
        m.frozen = lib.nn.Parameter(lib.ones(2), requires_grad=False)
        assert [n for n, _ in m.named_parameters()] == ["frozen"]
        assert not m.frozen.requires_grad


# ---- a submodule under two names ----

def _shared(nn):
    shared = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec, self.head = shared, shared, nn.Linear(2, 1)
    return M()


def test_shared_submodule_is_visited_once():
    mine, theirs = _shared(loom.nn), _shared(torch.nn)
    assert [n for n, _ in mine.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in mine.named_children()] == [n for n, _ in theirs.named_children()]
    assert len(list(mine.children())) == len(list(theirs.children()))
    assert len(list(mine.modules())) == len(list(theirs.modules()))
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert len(list(mine.parameters())) == len(list(theirs.parameters()))
    assert [n for n, _ in mine.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert list(mine.state_dict()) == list(theirs.state_dict())  # every name, as PyTorch's
    visits, tvisits = [], []
    mine.apply(lambda m: visits.append(type(m).__name__))
    theirs.apply(lambda m: tvisits.append(type(m).__name__))
    assert visits == tvisits


def test_get_submodule_parameter_buffer():
    def model(nn):
        return nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.BatchNorm1d(2)))
    mine, theirs = model(loom.nn), model(torch.nn)
    assert mine.get_submodule("") is mine
    assert mine.get_submodule("1.0") is mine[1][0]
    assert mine.get_parameter("0.weight") is mine[0].weight
    assert mine.get_buffer("1.0.running_mean") is mine[1][0].running_mean
    for call in (lambda m: m.get_submodule("2"), lambda m: m.get_submodule("0.weight"),
                 lambda m: m.get_parameter("1.0.running_mean"),
                 lambda m: m.get_parameter("0.nothing"), lambda m: m.get_buffer("0.weight")):
        with pytest.raises(AttributeError) as theirs_error:
            call(theirs)
        with pytest.raises(AttributeError) as mine_error:
            call(mine)
        assert str(mine_error.value) == str(theirs_error.value)


# ---- dropout ----

def test_dropout_of_probability_one_is_zeros():
    x = loom.tensor(_data(2, 3), requires_grad=True)
    y = loom.nn.Dropout(1.0)(x)
    assert y.detach().tolist() == [[0.0] * 3] * 2
    y.sum().backward()
    assert x.grad.tolist() == [[0.0] * 3] * 2
    assert loom.nn.functional.dropout(loom.ones(2), 1.0, training=True).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_probability_outside_0_1_raises(p):
    for lib in (torch, loom):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            lib.nn.Dropout(p)
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            lib.nn.functional.dropout(lib.ones(2), p)


# ---- class-index losses ----

def _loss_and_grad(lib, fn, x, target, log_softmax=False, **kw):
    xs = lib.tensor(x, requires_grad=True)
    inp = lib.nn.functional.log_softmax(xs, dim=1 if x.ndim > 1 else 0) if log_softmax else xs
    loss = fn(lib)(inp, lib.tensor(target), **kw)
    w = np.linspace(0.5, 1.5, max(1, int(np.prod(tuple(loss.shape))))).astype(np.float32)
    (loss * lib.tensor(w.reshape(tuple(loss.shape)))).sum().backward()
    return loss, xs.grad


LOSSES = [(lambda lib: lib.nn.functional.cross_entropy, False),
          (lambda lib: lib.nn.functional.nll_loss, True)]


@pytest.mark.parametrize("fn,log_softmax", LOSSES)
@pytest.mark.parametrize("weights", [None, "zero"])
def test_every_target_ignored_gives_nan_loss_and_zero_gradient(fn, log_softmax, weights):
    """reduction='mean' over no weight (every target ignore_index, or every
    class weight 0): NaN, as PyTorch, but a zero gradient, not NaN (PyTorch's
    is 0 for ignored targets, NaN for zero weights)."""
    x = _data(3, 4)
    target = np.array([-100, -100, -100]) if weights is None else np.array([0, 1, 1])
    for reduction in ("mean", "sum", "none"):
        kw = {"reduction": reduction}
        got, want = [_loss_and_grad(lib, fn, x, target, log_softmax, **kw, **(
            {"weight": lib.zeros(4)} if weights else {})) for lib in (loom, torch)]
        _close(got[0], want[0])
        if reduction == "mean":
            assert math.isnan(float(got[0]))
            np.testing.assert_array_equal(np.abs(_np(got[1])), np.zeros((3, 4)))
        else:
            _close(got[1], want[1])


@pytest.mark.parametrize("fn,log_softmax", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_class_losses_of_k_dim_input(fn, log_softmax, reduction):
    """(N, C, d1, d2) input, (N, d1, d2) targets, classes on dim 1; with
    class weights and an ignored target."""
    x = _data(2, 4, 3, 2)
    target = RNG.integers(0, 4, (2, 3, 2))
    target[0, 1, 0] = -100
    weight = np.array([1.0, 0.5, 2.0, 1.5], np.float32)
    got, want = [_loss_and_grad(lib, fn, x, target, log_softmax, reduction=reduction,
                                weight=lib.tensor(weight)) for lib in (loom, torch)]
    assert tuple(got[0].shape) == tuple(want[0].shape)
    _close(got[0], want[0])
    _close(got[1], want[1])


@pytest.mark.parametrize("fn,log_softmax", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_class_losses_of_unbatched_input(fn, log_softmax, reduction):
    x = _data(5)
    got, want = [_loss_and_grad(lib, fn, x, np.array(3), log_softmax, reduction=reduction)
                 for lib in (loom, torch)]
    assert tuple(got[0].shape) == tuple(want[0].shape)
    _close(got[0], want[0])
    _close(got[1], want[1])


def test_cross_entropy_k_dim_label_smoothing_and_probabilities():
    x = _data(2, 3, 4)
    target = RNG.integers(0, 3, (2, 4))
    probs = np.exp(_data(2, 3, 4))
    probs /= probs.sum(1, keepdims=True)
    for t in (target, probs):
        got, want = [_loss_and_grad(lib, lambda lib: lib.nn.functional.cross_entropy, x, t,
                                    label_smoothing=0.1) for lib in (loom, torch)]
        _close(got[0], want[0])
        _close(got[1], want[1])


def test_class_loss_target_of_wrong_shape_raises():
    with pytest.raises(ValueError, match="Expected target size"):
        loom.nn.functional.nll_loss(loom.tensor(_data(2, 4, 3)),
                                    loom.tensor(np.zeros((2, 4), int)))


# ---- BatchNorm's batch of one ----

@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1), (1, 3, 1, 1)])
def test_batch_norm_of_one_value_per_channel_raises_at_the_call(shape):
    for lib in (torch, loom):
        bn = (lib.nn.BatchNorm2d if len(shape) == 4 else lib.nn.BatchNorm1d)(3)
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when "
                                             "training, got input size"):
            bn(lib.ones(*shape))
        assert (lib.tensor([1.0, 2.0]) * 3).tolist() == [3.0, 6.0]  # nothing left pending
        bn.eval()
        assert tuple(bn(lib.ones(*shape)).shape) == shape
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        loom.nn.BatchNorm1d(3, track_running_stats=False).eval()(loom.ones(1, 3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        loom.nn.functional.batch_norm(loom.ones(1, 3), None, None, training=True)


# ---- clip_grad_norm_ ----

def _clipped(lib, norm_type, max_norm=0.5):
    w = lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    b = lib.tensor(np.array([0.3, -0.7], np.float32), requires_grad=True)
    x = lib.tensor(_fixed_x)
    ((x @ w.T + b) ** 3).sum().backward()
    total = lib.nn.utils.clip_grad_norm_([w, b], max_norm, norm_type=norm_type)
    return total, w.grad, b.grad


_fixed_x = _data(4, 3)


@pytest.mark.parametrize("norm_type", [2.0, 1, float("inf"), 3.0, 0.5, "inf"])
def test_clip_grad_norm_of_any_order(norm_type):
    for mine, theirs in zip(_clipped(loom, norm_type), _clipped(torch, norm_type)):
        _close(mine, theirs, rtol=1e-5)


def test_clip_grad_norm_error_if_nonfinite():
    for lib in (torch, loom):
        w = lib.zeros(2, requires_grad=True)
        w.grad = lib.tensor([1.0, float("inf")])
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
            lib.nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True)
        assert math.isinf(float(lib.nn.utils.clip_grad_norm_(w, 1.0)))


# ---- Embedding(max_norm), one_hot ----

@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalizes_rows_looked_up(norm_type):
    w0 = _data(6, 3) * 2
    w0[4] *= 0.01  # a row under max_norm stays
    index = np.array([[0, 2], [2, 4]])
    coef = _data(2, 2, 3)
    results = []
    for lib in (loom, torch):
        emb = lib.nn.Embedding(6, 3, max_norm=1.5, norm_type=norm_type)
        emb.load_state_dict({"weight": lib.tensor(w0)})
        out = emb(lib.tensor(index))
        (out * lib.tensor(coef)).sum().backward()
        results.append((out, emb.weight, emb.weight.grad))
    for mine, theirs in zip(*results):
        _close(mine, theirs, rtol=1e-6)


def test_one_hot_infers_the_number_of_classes():
    x = np.array([[0, 3], [2, 1]])
    for f in (lambda lib, t: lib.nn.functional.one_hot(t),
              lambda lib, t: lib.nn.functional.one_hot(t, -1)):
        mine, theirs = f(loom, loom.tensor(x)), f(torch, torch.tensor(x))
        assert mine.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(_np(mine), _np(theirs))


# ---- learning rate schedules ----

def _schedule(lib, make, epochs=30, metrics=None, optimizer="SGD"):
    """The lr (and momentum) of each param group at each epoch."""
    w, b = lib.zeros(2, requires_grad=True), lib.zeros(1, requires_grad=True)
    groups = [{"params": [w]}, {"params": [b], "lr": 0.05}]
    opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9) if optimizer == "SGD" \
        else lib.optim.Adam(groups, lr=0.1)
    sched = make(lib.optim.lr_scheduler, opt)
    seen = []
    for e in range(epochs):
        seen.append([(g["lr"], g.get("momentum"), g.get("betas")) for g in opt.param_groups])
        opt.step()
        sched.step(metrics[e]) if metrics else sched.step()
    return seen


SCHEDULES = {
    "MultiplicativeLR": lambda S, o: S.MultiplicativeLR(o, lambda e: 0.95 if e % 3 else 0.8),
    "ConstantLR": lambda S, o: S.ConstantLR(o, factor=0.5, total_iters=4),
    "OneCycleLR": lambda S, o: S.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=31),
    "OneCycleLR3": lambda S, o: S.OneCycleLR(o, max_lr=0.8, epochs=4, steps_per_epoch=8,
                                             anneal_strategy="linear", three_phase=True,
                                             pct_start=0.25),
    "WarmRestarts": lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                               eta_min=0.01),
    "WarmRestarts1": lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=4),
    "SequentialLR": lambda S, o: S.SequentialLR(
        o, [S.LinearLR(o, 0.1, total_iters=2), S.ExponentialLR(o, 0.9)], milestones=[2]),
    "SequentialLR3": lambda S, o: S.SequentialLR(
        o, [S.ConstantLR(o, 0.2, total_iters=3), S.CosineAnnealingLR(o, T_max=8),
            S.MultiStepLR(o, [3, 5, 5], gamma=0.5), S.StepLR(o, 2, 0.7)],
        milestones=[5, 15, 22]),
    "ChainedScheduler": lambda S, o: S.ChainedScheduler(
        [S.ConstantLR(o, factor=0.1, total_iters=2), S.ExponentialLR(o, gamma=0.9)]),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_lr_schedules_as_pytorch(name):
    for optimizer in ("SGD", "Adam"):
        mine = _schedule(loom, SCHEDULES[name], optimizer=optimizer)
        theirs = _schedule(torch, SCHEDULES[name], optimizer=optimizer)
        assert mine == theirs


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kw", [{}, {"patience": 2, "cooldown": 1, "factor": 0.5},
                                {"mode": "max", "threshold_mode": "abs", "threshold": 0.05,
                                 "patience": 1, "min_lr": [0.02, 0.001]}])
def test_reduce_lr_on_plateau_as_pytorch(kw):
    metrics = [1.0, 0.9, 0.95, 0.9, 0.89, 0.9, 0.91, 0.5, 0.6, 0.6] * 3
    mine = _schedule(loom, lambda S, o: S.ReduceLROnPlateau(o, **kw), metrics=metrics)
    theirs = _schedule(torch, lambda S, o: S.ReduceLROnPlateau(o, **kw), metrics=metrics)
    assert mine == theirs
    # a 0-d tensor metric is read
    opt = loom.optim.SGD([loom.zeros(1, requires_grad=True)], lr=1.0)
    s = loom.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    s.step(loom.tensor(1.0))
    s.step(loom.tensor(2.0))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


# ---- optimizers ----

def _train(lib, make, steps=3, closure=False):
    """make(lib, w, b) -> optimizer; the parameters after some steps."""
    w = lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    b = lib.tensor(np.array([0.3, -0.7], np.float32), requires_grad=True)
    x, y = lib.tensor(_fixed_x), lib.tensor(_fixed_x[:, :2] * 0.5)
    opt = make(lib, w, b)

    def loss_of():
        opt.zero_grad()
        loss = ((x @ w.T + b - y) ** 2).mean()
        loss.backward()
        return loss
    losses = []
    for _ in range(steps):
        if closure:
            losses.append(float(opt.step(loss_of)))
        else:
            loss_of()
            opt.step()
    return opt, w, b, losses


OPTIMIZERS = {
    "SGD": lambda lib, w, b: lib.optim.SGD([w, b], lr=0.1, momentum=0.9),
    "Adam": lambda lib, w, b: lib.optim.Adam([w, b], lr=0.1),
    "AdamW": lambda lib, w, b: lib.optim.AdamW([w, b], lr=0.1, amsgrad=True),
    "RMSprop": lambda lib, w, b: lib.optim.RMSprop([w, b], lr=0.01, momentum=0.5),
    "Adagrad": lambda lib, w, b: lib.optim.Adagrad([w, b], lr=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_state_by_parameter(name):
    """optimizer.state[p] holds PyTorch's keys with PyTorch's values."""
    opt, w, b, _ = _train(loom, OPTIMIZERS[name])
    topt, tw, tb, _ = _train(torch, OPTIMIZERS[name])
    assert len(opt.state) == len(topt.state)
    for p, q in ((w, tw), (b, tb)):
        assert sorted(opt.state[p]) == sorted(topt.state[q])
        for k, v in topt.state[q].items():
            _close(opt.state[p][k], v, rtol=1e-4, atol=1e-6, msg=k)
    assert opt.state[loom.zeros(1)] == {}


def test_optimizer_state_is_empty_before_a_step():
    w = loom.zeros(2, requires_grad=True)
    opt = loom.optim.Adam([w])
    assert len(opt.state) == 0 and opt.state[w] == {} and w not in opt.state


def test_add_param_group_as_pytorch():
    """A group added after two steps gets its own lr; the first group's
    moments go on."""
    def run(lib):
        w = lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                       requires_grad=True)
        b = lib.tensor(np.array([0.3, -0.7], np.float32), requires_grad=True)
        x = lib.tensor(_fixed_x)
        opt = lib.optim.Adam([w], lr=0.05)
        for step in range(5):
            if step == 2:
                opt.add_param_group({"params": b, "lr": 0.2, "betas": (0.5, 0.9)})
            opt.zero_grad()
            ((x @ w.T + b) ** 2).mean().backward()
            opt.step()
        return w, b, len(opt.param_groups), opt.param_groups[1]["eps"]
    mine, theirs = run(loom), run(torch)
    _close(mine[0], theirs[0], rtol=1e-4)
    _close(mine[1], theirs[1], rtol=1e-4)
    assert mine[2:] == theirs[2:]


def test_parameter_in_two_groups_raises():
    for lib in (torch, loom):
        w = lib.nn.Linear(2, 1).weight
        with pytest.raises(ValueError, match="some parameters appear in more than one "
                                             "parameter group"):
            lib.optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)
        opt = lib.optim.SGD([w], lr=0.1)
        with pytest.raises(ValueError, match="more than one parameter group"):
            opt.add_param_group({"params": [w]})


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_step_with_closure(name):
    """step(closure) runs the closure with gradients on (inside no_grad
    too) and returns its loss."""
    opt, w, b, losses = _train(loom, OPTIMIZERS[name], closure=True)
    topt, tw, tb, tlosses = _train(torch, OPTIMIZERS[name], closure=True)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-5)
    _close(w, tw, rtol=1e-4)
    _close(b, tb, rtol=1e-4)
    with loom.no_grad():
        assert isinstance(opt.step(lambda: ((w * w).sum().backward(), w.sum())[1]),
                          loom.Tensor)
    assert opt.step() is None


MAXIMIZE = {
    "SGD": lambda lib, w, b: lib.optim.SGD([w, b], lr=0.1, momentum=0.9, weight_decay=0.1,
                                           maximize=True),
    "SGD-plain": lambda lib, w, b: lib.optim.SGD([w, b], lr=0.1, maximize=True),
    "Adam": lambda lib, w, b: lib.optim.Adam([w, b], lr=0.1, weight_decay=0.1,
                                             maximize=True),
    "AdamW": lambda lib, w, b: lib.optim.AdamW([w, b], lr=0.1, maximize=True),
    "RMSprop": lambda lib, w, b: lib.optim.RMSprop([w, b], lr=0.01, maximize=True),
    "Adagrad": lambda lib, w, b: lib.optim.Adagrad([w, b], lr=0.1, maximize=True),
}


@pytest.mark.parametrize("name", sorted(MAXIMIZE))
def test_maximize_as_pytorch(name):
    _, w, b, _ = _train(loom, MAXIMIZE[name], steps=4)
    _, tw, tb, _ = _train(torch, MAXIMIZE[name], steps=4)
    _close(w, tw, rtol=1e-4)
    _close(b, tb, rtol=1e-4)


def test_sequential_of_ordered_dict_slice_keeps_names():
    s = loom.nn.Sequential(OrderedDict([("a", loom.nn.ReLU()), ("b", loom.nn.Tanh())]))
    assert list(s[1:]._modules) == ["b"]


# ---- gradients accumulate in place ----

def _held_grad_program(lib, lazy_grad):
    """A reference to w.grad taken after one backward, then more backwards
    (and a zero_() through the reference): PyTorch adds into that tensor."""
    w = lib.tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    x = lib.tensor(np.array([0.5, -1.0, 2.0], np.float32))
    (w * x).sum().backward()
    if lazy_grad:  # a .grad that is the value of ops of the step in progress
        w.grad = w.grad * 2
    g = w.grad
    (w * w).sum().backward()
    seen = [_np(g).copy(), g is w.grad]
    g.zero_()
    (w * x).sum().backward()
    seen += [_np(g).copy(), _np(w.grad).copy()]
    return seen


@pytest.mark.parametrize("lazy_grad", [False, True])
def test_held_grad_sees_later_backwards(lazy_grad):
    mine, theirs = _held_grad_program(loom, lazy_grad), _held_grad_program(torch, lazy_grad)
    assert mine[1] and theirs[1]
    for a, b in zip(mine[::2] + mine[3:], theirs[::2] + theirs[3:]):
        _close(a, b)


def test_numpy_view_of_grad_sees_accumulation():
    w = loom.tensor(np.array([1.0, -2.0], np.float64), requires_grad=True)
    (w * 3).sum().backward()
    view = w.grad.numpy()
    (w * w).sum().backward()
    np.testing.assert_allclose(view, [3 + 2 * 1.0, 3 + 2 * -2.0])


def test_held_retained_grad_is_replaced_as_pytorch():
    """A retained (non-leaf) .grad is replaced by the sum, not added to."""
    seen = []
    for lib in (loom, torch):
        w = lib.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
        h = w * 3
        h.retain_grad()
        (h * h).sum().backward(retain_graph=True)
        g = h.grad
        (h * 2).sum().backward()
        seen.append((_np(g).copy(), _np(h.grad).copy(), g is h.grad))
    assert seen[0][2] == seen[1][2] == False  # noqa: E712
    for a, b in zip(seen[0][:2], seen[1][:2]):
        _close(a, b)


def _held_running_stats(lib, steps=3):
    """BatchNorm trained in a plain loop while the caller holds its buffers
    (PyTorch updates them in place), read between steps."""
    lib.manual_seed(0)
    bn = lib.nn.BatchNorm1d(3)
    held = (bn.running_mean, bn.running_var, bn.num_batches_tracked)
    opt = lib.optim.SGD(bn.parameters(), lr=0.1)
    seen = []
    for i in range(steps):
        x = lib.tensor(np.random.default_rng(i).standard_normal((8, 3)).astype(np.float32) + i)
        opt.zero_grad()
        (bn(x) ** 3).sum().backward()
        opt.step()
        seen.append([_np(t).copy() for t in held] + [all(
            a is b for a, b in zip(held, (bn.running_mean, bn.running_var,
                                         bn.num_batches_tracked)))])
    return seen


def test_held_batch_norm_statistics_see_training():
    mine, theirs = _held_running_stats(loom), _held_running_stats(torch)
    for m, t in zip(mine, theirs):
        assert m[3] and t[3]
        for a, b in zip(m[:3], t[:3]):
            _close(a, b, rtol=1e-4, atol=1e-5)


def test_in_place_op_on_real_tensor_is_seen_through_every_reference():
    x = loom.tensor(np.arange(3, dtype=np.float32))
    alias = x
    x += 1
    x.mul_(2)
    assert alias is x
    np.testing.assert_allclose(alias.numpy(), [2, 4, 6])
    view = x.numpy()  # the memory is shared now: written in place
    x.add_(1)
    np.testing.assert_allclose(view, [3, 5, 7])


def _fine_tune(lib, name):
    """Layer 0 frozen for three steps, then trained with the rest: the
    optimizer was built over every parameter, as fine-tuning scripts do."""
    lib.manual_seed(0)
    m = lib.nn.Sequential(lib.nn.Linear(4, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2))
    m.load_state_dict({k: lib.tensor(v) for k, v in _FT_WEIGHTS.items()})
    for p in m[0].parameters():
        p.requires_grad = False
    opt = (lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if name == "SGD"
           else lib.optim.Adam(m.parameters(), lr=0.05))
    x = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    for i in range(6):
        if i == 3:
            for p in m[0].parameters():
                p.requires_grad = True
        opt.zero_grad()
        (m(x) ** 2).sum().backward()
        opt.step()
    return {k: _np(v).copy() for k, v in m.state_dict().items()}


_FT_WEIGHTS = {"0.weight": _data(5, 4), "0.bias": _data(5), "2.weight": _data(2, 5),
               "2.bias": _data(2)}


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_optimizer_over_frozen_parameters_as_pytorch(name):
    mine, theirs = _fine_tune(loom, name), _fine_tune(torch, name)
    for k in theirs:
        _close(mine[k], theirs[k], rtol=1e-4, atol=1e-5, msg=k)


def test_optimizer_refuses_non_leaf_and_non_tensor():
    w = loom.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="non-leaf"):
        loom.optim.SGD([w * 2], lr=0.1)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        loom.optim.SGD([1.0], lr=0.1)


# ---- errors over dims that varied between calls (symbolic in the trace) ----

def test_conv_on_input_smaller_than_kernel_raises_after_sizes_varied():
    conv = loom.nn.Conv2d(3, 4, 3)
    for size in (5, 6, 7):  # the trace makes height and width symbolic
        conv(loom.ones(1, 3, size, size)).sum().item()
    with pytest.raises(ValueError, match="too small for the kernel"):
        conv(loom.ones(1, 3, 2, 2)).sum().item()
    loom.step()  # the error is not raised again
    assert conv(loom.ones(1, 3, 4, 4)).shape == (1, 4, 2, 2)
    pool = loom.nn.MaxPool2d(3, stride=1)
    for size in (5, 6, 7):
        pool(loom.ones(1, 1, size, size)).sum().item()
    with pytest.raises(ValueError, match="too small for"):
        pool(loom.ones(1, 1, 1, 1)).sum().item()


def test_topk_beyond_the_axis_raises_at_the_call_after_sizes_varied():
    for n in (4, 5, 7):
        loom.topk(loom.arange(n, dtype=loom.float32)[None], 2, dim=1).values.sum().item()
    with pytest.raises(RuntimeError, match="k out of range"):
        loom.topk(loom.arange(3, dtype=loom.float32)[None], 6, dim=1)
    loom.step()


def test_a_failed_read_is_not_raised_again_by_the_step_end():
    """Other values of a segment whose read failed keep the error for
    their own reads; the step's end does not raise it a second time."""
    x = loom.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    idx = loom.tensor(np.array([[0, 5, 1]])) + 0  # lazy: the read fails, not the call
    g = loom.gather(x, 1, idx)
    kept = g * 2
    with pytest.raises(Exception) as first:
        g.sum().item()
    loom.step()  # ends without raising
    with pytest.raises(type(first.value)):
        kept.numpy()


def test_a_result_a_finished_thread_recorded_is_read_by_the_thread_that_joined_it():
    import threading
    for _ in range(3):
        loom.step()  # this thread's step ends: steps of two threads must not overlap
        out = {}

        def worker():
            x = loom.tensor(np.arange(4, dtype=np.float32))
            out["y"] = x * 2 + 1  # lazy: the worker's step is still open

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert out["y"].tolist() == [1.0, 3.0, 5.0, 7.0]
        assert (loom.tensor([1.0, 2.0]) * 3).sum().item() == 9.0


def test_pytorch_keywords_an_outside_tester_found_refused():
    layer = loom.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    enc = loom.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False, mask_check=False)
    assert enc(loom.randn(2, 3, 8)).shape == (2, 3, 8)
    lin = loom.nn.Linear(3, 2)
    loom.nn.init.constant_(lin.bias, val=0.5)
    assert lin.bias.tolist() == [0.5, 0.5]
    loom.nn.init.uniform_(tensor=lin.weight, a=-0.1, b=0.1)
    sd = lin.state_dict(prefix="head.", keep_vars=True)
    assert list(sd) == ["head.weight", "head.bias"] and sd["head.weight"] is lin.weight
    assert sd["head.weight"].requires_grad
    assert not lin.state_dict()["weight"].requires_grad
    mine = OrderedDict()
    assert lin.state_dict(mine, "m.") is mine and list(mine) == ["m.weight", "m.bias"]
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        loom.optim.SGD(lin.parameters())
    opt = loom.optim.SGD([{"params": [lin.weight], "lr": 0.1}])  # the group gives it
    assert opt.param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        opt.add_param_group({"params": [lin.bias]})


def test_regression_losses_warn_of_a_broadcast_target_as_pytorch():
    import warnings
    x, y = loom.tensor([[1.0], [2.0], [3.0]]), loom.tensor([1.0, 2.0, 3.0])
    F = loom.nn.functional
    for fn in (F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = float(fn(x, y))
            fn(x, y.reshape(3, 1))
        assert [str(w.message)[:40] for w in caught] == \
            ["Using a target size ((3,)) that is diffe"], fn.__name__
        tx, ty = torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([1.0, 2.0, 3.0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert abs(value - float(getattr(torch.nn.functional, fn.__name__)(tx, ty))) < 1e-6


def test_the_other_initializers():
    w = loom.empty(4, 6)
    loom.nn.init.orthogonal_(w, gain=2.0)
    np.testing.assert_allclose(w.numpy() @ w.numpy().T, 4 * np.eye(4), atol=1e-5)
    tall = loom.empty(6, 2, 2)
    loom.nn.init.orthogonal_(tall)
    flat = tall.numpy().reshape(6, 4)
    np.testing.assert_allclose(flat.T @ flat, np.eye(4), atol=1e-5)
    e = loom.empty(3, 5)
    loom.nn.init.eye_(e)
    assert (e.numpy() == np.eye(3, 5)).all()
    conv = loom.nn.Conv2d(4, 6, 3, padding=1, bias=False)
    with loom.no_grad():
        loom.nn.init.dirac_(conv.weight, groups=2)
    tconv = torch.nn.Conv2d(4, 6, 3, padding=1, bias=False)
    torch.nn.init.dirac_(tconv.weight.data, groups=2)
    np.testing.assert_array_equal(conv.weight.detach().numpy(), tconv.weight.detach().numpy())
    s = loom.empty(10, 7)
    loom.nn.init.sparse_(s, 0.3, std=0.5)
    assert ((s.numpy() == 0).sum(0) == 3).all()
    with pytest.raises(ValueError, match="2 dimensions"):
        loom.nn.init.eye_(loom.empty(2, 2, 2))


def test_optimizers_take_pytorchs_implementation_choices():
    p = [loom.nn.Parameter(loom.ones(3))]
    for make in (lambda: loom.optim.SGD(p, lr=0.1, foreach=False, differentiable=False),
                 lambda: loom.optim.Adam(p, foreach=None, capturable=False, fused=None),
                 lambda: loom.optim.AdamW(p, foreach=True),
                 lambda: loom.optim.RMSprop(p, foreach=False),
                 lambda: loom.optim.Adagrad(p, foreach=False)):
        opt = make()
        p[0].grad = loom.ones(3)
        opt.step()
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        loom.optim.Adam(p, differentiable=True)
    with pytest.raises(TypeError, match="momentun"):
        loom.optim.SGD(p, lr=0.1, momentun=0.9)


def test_sign_of_nan_and_negative_zero_is_pytorchs():
    values = [float("nan"), -0.0, 0.0, 1.5, -2.0, float("inf"), -float("inf")]
    for dtype in (np.float32, np.float64, np.float16):
        x = np.array(values, dtype=dtype)
        got = loom.sign(loom.tensor(x)).numpy()
        want = torch.sign(torch.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want)).all()  # +0, not -0
    assert loom.sign(loom.tensor([-3, 0, 4])).tolist() == [-1, 0, 1]


def test_the_compositions_that_are_not_ops():
    assert loom.broadcast_shapes((3, 1, 7), (4, 1), 7) == torch.broadcast_shapes((3, 1, 7),
                                                                              (4, 1), 7)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        loom.broadcast_shapes((3,), (4,))
    x = loom.ones(2, 3)
    assert loom.numel(x) == 6 and not loom.is_complex(x) and not x.is_complex()
    assert loom.is_nonzero(loom.tensor([2.0])) and not loom.tensor(0).is_nonzero()
    with pytest.raises(RuntimeError, match="more than one value"):
        loom.is_nonzero(x)
    # the methods PyTorch has
    a, b = np.random.default_rng(0).standard_normal((2, 4, 3))
    got = loom.tensor(a).cross(loom.tensor(b), dim=1).numpy()
    np.testing.assert_allclose(got, np.cross(a, b), rtol=1e-12)
    assert loom.tensor([-0.0, 1.0]).signbit().tolist() == [True, False]


def test_set_printoptions_prints_as_pytorch():
    values = [1.23456, 2.5, 300.125, 4.0, 5.5, 6.25]
    try:
        for kw in (dict(precision=2), dict(sci_mode=True), dict(profile="short"),
                   dict(threshold=5, edgeitems=1), dict(profile="default")):
            loom.set_printoptions(**kw)
            torch.set_printoptions(**kw)
            assert repr(loom.tensor(values)) == repr(torch.tensor(values)), kw
        with pytest.raises(ValueError, match="profile"):
            loom.set_printoptions(profile="long")
    finally:
        loom.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
