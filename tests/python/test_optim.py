"""Optimizers over several steps against torch.optim with the same
hyperparameters, and a plain Python training loop's compiles."""
import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")


def train(lib, make_opt, steps=6):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    w0 = rng.standard_normal((6, 2)).astype(np.float32)
    b0 = rng.standard_normal(2).astype(np.float32)
    w = lib.tensor(w0, requires_grad=True)
    b = lib.tensor(b0, requires_grad=True)
    opt = make_opt(lib, [w, b])
    X, Y = lib.tensor(x), lib.tensor(y)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((X @ w + b - Y) ** 2).mean()
        loss.backward()
        opt.step()
    return w.detach().numpy().copy(), b.detach().numpy().copy()


@pytest.mark.parametrize("make_opt", [
    lambda lib, p: lib.optim.SGD(p, lr=0.1),
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda lib, p: lib.optim.Adam(p, lr=0.01),
    lambda lib, p: lib.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
    lambda lib, p: lib.optim.AdamW(p, lr=0.01, weight_decay=0.1),
])
@pytest.mark.parametrize("mode", ["tiered", "interpret", "wait"])
def test_optimizers_against_torch(make_opt, mode):
    """In each compile mode: an update computed without its graph (a
    tiered or interpreted trace's step, train/optim_eager.c) and the
    compiled graph's."""
    loom.set_compile_mode(mode)
    try:
        mine = train(loom, make_opt)
    finally:
        loom.set_compile_mode("tiered")
    for got, theirs in zip(mine, train(torch, make_opt)):
        np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5)


def test_a_dropped_model_leaves_the_trace_and_the_next_trains_as_torch():
    """A model dropped with its optimizer is freed (its parameters leave
    the trace's optimizer step), and the next model's Adam steps match
    torch's from a fresh state, also when the new model reuses the
    dropped one's shapes."""
    import gc
    import weakref
    make = lambda lib, p: lib.optim.Adam(p, lr=0.01)  # noqa: E731
    w0 = loom.tensor(np.ones((6, 2), np.float32), requires_grad=True)
    b0 = loom.tensor(np.zeros(2, np.float32), requires_grad=True)
    opt0 = make(loom, [w0, b0])
    for _ in range(3):
        opt0.zero_grad()
        ((loom.ones(5, 6) @ w0 + b0) ** 2).mean().backward()
        opt0.step()
    dropped = weakref.ref(w0)
    del w0, b0, opt0
    gc.collect()
    for mine, theirs in zip(train(loom, make), train(torch, make)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    gc.collect()
    assert dropped() is None


def test_a_learning_rate_schedule_recompiles_nothing():
    w = loom.ones(4, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1)
    for i in range(30):
        opt.param_groups[0]["lr"] = 0.1 / (i + 1)
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    expect = np.ones(4)
    for i in range(30):
        expect -= 0.1 / (i + 1) * 2 * expect
    np.testing.assert_allclose(w.detach().numpy(), expect, rtol=1e-5)


def test_a_training_loop_compiles_each_segment_once():
    loom.manual_seed(1)
    x, y = loom.randn(32, 8), loom.randn(32, 1)
    w1 = loom.randn(8, 16, requires_grad=True)
    w2 = loom.randn(16, 1, requires_grad=True)
    opt = loom.optim.Adam([w1, w2], lr=1e-3)
    # a new trace that compiles before it runs: no compile of an earlier
    # test still in flight is counted here
    loom.set_compile_mode("wait")
    try:
        before = loom.stats()
        for _ in range(100):
            opt.zero_grad()
            loss = ((x @ w1).relu() @ w2 - y).pow(2).mean()
            loss.backward()
            opt.step()
        after = loom.stats()
    finally:
        loom.set_compile_mode("tiered")
    assert after["steps"] - before["steps"] == 100
    # one forward-and-loss segment, its backward, the optimizer: a few
    # compiles at most, however many steps
    assert after["compiles"] - before["compiles"] <= 4
    assert float(loss) < float(((x @ loom.randn(8, 16)).relu().sum()) ** 2)


def clipped_schedule(lib, make_opt, steps):
    rng = np.random.default_rng(3)
    x = lib.tensor(rng.standard_normal((16, 6)).astype(np.float32))
    y = lib.tensor(rng.standard_normal((16, 1)).astype(np.float32))
    w = lib.tensor(rng.standard_normal((6, 1)).astype(np.float32), requires_grad=True)
    opt = make_opt(lib, [w])
    compiles = []
    for i in range(steps):
        opt.param_groups[0]["lr"] = 0.05 / (1 + i)
        opt.zero_grad()
        ((x @ w - y) ** 2).mean().backward()
        lib.nn.utils.clip_grad_norm_([w], 0.5)
        opt.step()
        if lib is loom:
            compiles.append(loom.stats()["compiles"])
    return w.detach().numpy().copy(), compiles


@pytest.mark.parametrize("make_opt", [
    lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda lib, p: lib.optim.Adam(p, lr=0.05),
    lambda lib, p: lib.optim.AdamW(p, lr=0.05, weight_decay=0.1),
])
def test_the_update_from_grad_compiles_once(make_opt):
    """The update from .grad (here after clip_grad_norm_) under a learning
    rate schedule: the rate and Adam's bias corrections change every
    step, and the update's graph must not (each step a recompile would
    reach the recompile limit and run interpreted from then on)."""
    loom.set_compile_mode("wait")
    try:
        mine, compiles = clipped_schedule(loom, make_opt, 40)
    finally:
        loom.set_compile_mode("tiered")
    theirs, _ = clipped_schedule(torch, make_opt, 40)
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    assert compiles[-1] == compiles[4], compiles


def test_an_empty_optimizer_is_refused():
    with pytest.raises(ValueError, match="empty"):
        loom.optim.SGD([], lr=0.1)


def train_clipped(lib, make_opt, steps=5, accumulate=1):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 5)).astype(np.float32) * 3
    y = rng.standard_normal((8, 1)).astype(np.float32)
    w = lib.tensor(rng.standard_normal((5, 1)).astype(np.float32), requires_grad=True)
    opt = make_opt(lib, [w])
    norms = []
    for _ in range(steps):
        opt.zero_grad()
        for k in range(accumulate):
            part = slice(k * 8 // accumulate, (k + 1) * 8 // accumulate)
            loss = ((lib.tensor(x[part]) @ w - lib.tensor(y[part])) ** 2).mean()
            loss.backward()
            if lib is loom and accumulate > 1:
                loom.step()  # each micro-batch a step of its own
        norms.append(float(lib.nn.utils.clip_grad_norm_([w], 1.0)))
        opt.step()
    return w.detach().numpy().copy(), norms


@pytest.mark.parametrize("make_opt", [
    lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda lib, p: lib.optim.Adam(p, lr=0.05),
    lambda lib, p: lib.optim.AdamW(p, lr=0.05, weight_decay=0.1),
])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_clipped_and_accumulated_gradients_against_torch(make_opt, accumulate):
    mine, my_norms = train_clipped(loom, make_opt, accumulate=accumulate)
    theirs, their_norms = train_clipped(torch, make_opt, accumulate=accumulate)
    np.testing.assert_allclose(my_norms, their_norms, rtol=1e-4)
    assert max(their_norms) > 1.0  # the clipping did something
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


def test_param_groups_and_two_optimizers():
    def run(lib):
        rng = np.random.default_rng(2)
        a = lib.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
        b = lib.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
        c = lib.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
        grouped = lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
        other = lib.optim.Adam([c], lr=0.1)
        for _ in range(3):
            grouped.zero_grad(), other.zero_grad()
            ((a * b).sum() + (c * c * b).sum()).backward()
            grouped.step()
            other.step()
        return [t.detach().numpy().copy() for t in (a, b, c)]
    for mine, theirs in zip(run(loom), run(torch)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def train_switching(lib, make_opt, steps=8):
    """Steps that alternate between the trace's optimizer step (.grad as
    backward left it) and the update on .grad (a gradient zeroed instead of
    set to None, or clipped): the moments go on across the switches."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    w = lib.tensor(rng.standard_normal((6, 2)).astype(np.float32), requires_grad=True)
    b = lib.tensor(rng.standard_normal(2).astype(np.float32), requires_grad=True)
    opt = make_opt(lib, [w, b])
    X, Y = lib.tensor(x), lib.tensor(y)
    for i in range(steps):
        opt.zero_grad(set_to_none=i % 3 != 1)
        ((X @ w + b - Y) ** 2).mean().backward()
        if i % 4 == 2:
            (torch.nn if lib is torch else lib.nn).utils.clip_grad_norm_([w, b], 0.5)
        opt.step()
    return w.detach().numpy().copy(), b.detach().numpy().copy()


@pytest.mark.parametrize("make_opt", [
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda lib, p: lib.optim.Adam(p, lr=0.01),
    lambda lib, p: lib.optim.AdamW(p, lr=0.01, weight_decay=0.1),
])
def test_switching_update_paths_keeps_the_state_as_torch(make_opt):
    for mine, theirs in zip(train_switching(loom, make_opt), train_switching(torch, make_opt)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda lib, p: lib.optim.SGD(p, lr=-1),
    lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=-0.5),
    lambda lib, p: lib.optim.Adam(p, lr=-1e-3),
    lambda lib, p: lib.optim.Adam(p, betas=(0.9, 1.0)),
    lambda lib, p: lib.optim.AdamW(p, eps=-1.0),
    lambda lib, p: lib.optim.AdamW(p, weight_decay=-0.1),
])
def test_bad_hyperparameters_are_refused_as_torch(make):
    with pytest.raises(ValueError) as theirs:
        make(torch, [torch.zeros(2, requires_grad=True)])
    with pytest.raises(ValueError, match=str(theirs.value).split(":")[0]):
        make(loom, [loom.zeros(2, requires_grad=True)])


@pytest.mark.parametrize("owner", ["optimizer", "module"])
def test_zero_grad_keeping_tensors_zeroes_a_held_grad_in_place(owner):
    """zero_grad(set_to_none=False) zeroes .grad in place, as torch's: a
    reference held to it reads zeros, then the next backward's sum."""
    seen = []
    for lib in (loom, torch):
        m = lib.nn.Linear(3, 1, bias=False)
        with lib.no_grad():
            m.weight.fill_(1.0)
        opt = lib.optim.SGD(m.parameters(), lr=0.1)
        m(lib.ones(2, 3)).sum().backward()
        g = m.weight.grad
        (opt if owner == "optimizer" else m).zero_grad(set_to_none=False)
        zeroed = g.numpy().copy()
        (m(lib.ones(2, 3)) * 5).sum().backward()
        seen.append((zeroed, g.numpy().copy(), m.weight.grad is g))
    (lz, lg, lsame), (tz, tg, tsame) = seen
    np.testing.assert_array_equal(lz, tz)
    np.testing.assert_array_equal(lg, tg)
    assert lsame and tsame


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_values_of_a_step_read_after_its_update_are_from_before_it(kind):
    """y and the logits, computed before opt.step() and read after it, hold
    the values the forward computed (PyTorch's), in the first step too,
    where the trace had computed only the loss the backward started from:
    computed later they would read the updated weights."""
    rng = np.random.default_rng(4)
    wn = rng.standard_normal((3, 5)).astype(np.float32)
    xs = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]

    def run(lib):
        w = lib.tensor(wn.copy(), requires_grad=True)
        opt = lib.optim.Adam([w], lr=0.1) if kind == "adam" else lib.optim.SGD([w], lr=0.1)
        seen = []
        for xn in xs:
            opt.zero_grad()
            logits = lib.tensor(xn) @ w.t()
            y = logits.sum()
            (y * y).backward()
            opt.step()
            seen.append((float(y), logits.detach().numpy().copy()))
        return seen

    for (ly, ll), (ty, tl) in zip(run(loom), run(torch)):
        assert ly == pytest.approx(ty, rel=1e-5, abs=1e-5)
        np.testing.assert_allclose(ll, tl, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kinds", [("adam", "sgd"), ("momentum", "sgd"), ("sgd", "momentum"),
                                   ("adam", "momentum")])
def test_two_models_whose_optimizers_keep_different_state_as_torch(kinds):
    """Model A's full step, then model B's, each with its own optimizer:
    B's step in the trace must not drop A's moments (an SGD step rebuilds
    the trace's optimizer step without Adam's state)."""
    def make(lib, kind, params):
        if kind == "sgd":
            return lib.optim.SGD(params, lr=0.1)
        if kind == "momentum":
            return lib.optim.SGD(params, lr=0.1, momentum=0.9)
        return lib.optim.Adam(params, lr=0.1)

    def run(lib):
        rng = np.random.default_rng(3)
        x = lib.tensor(rng.standard_normal((4, 3)).astype(np.float32))
        pairs = []
        for kind in kinds:
            w = lib.tensor(rng.standard_normal((3, 2)).astype(np.float32), requires_grad=True)
            pairs.append((w, make(lib, kind, [w])))
        for _ in range(4):
            for w, opt in pairs:
                opt.zero_grad()
                ((x @ w) ** 2).mean().backward()
                opt.step()
        return [w.detach().numpy().copy() for w, _ in pairs]

    for mine, theirs in zip(run(loom), run(torch)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beta2", [0.999, 0.9999])
@pytest.mark.parametrize("compiled", [False, True])
def test_adams_first_step_is_exact(beta2, compiled):
    """Adam's first update is lr * g / (|g| + eps): lr to within float32
    rounding (the bias corrections 1 - beta^t were 1.3e-5 off in float32)."""
    w = loom.nn.Parameter(loom.zeros(4))
    opt = loom.optim.Adam([w], lr=1.0, betas=(0.9, beta2))
    g = loom.tensor(np.array([1.0, 3.0, 10.0, 100.0], np.float32))

    def step():
        opt.zero_grad()
        (w * g).sum().backward()
        opt.step()
        return w.sum()

    (loom.compile(step) if compiled else step)()
    np.testing.assert_allclose(-w.detach().numpy(), 1.0, rtol=3e-7)


def _two_params(lib):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor([3.0, 4.0], requires_grad=True)
    return a, b


@pytest.mark.parametrize("edit", ["none", "mul_", "iadd", "numpy"])
def test_a_grad_set_to_none_or_edited_after_backward_is_what_the_step_applies(edit):
    result = {}
    for lib in (torch, loom):
        a, b = _two_params(lib)
        opt = lib.optim.SGD([a, b], lr=0.1, momentum=0.9)
        for _ in range(2):
            opt.zero_grad()
            ((a * 2).sum() + (b * b).sum()).backward()
            if edit == "none":
                b.grad = None
            elif edit == "mul_":
                b.grad.mul_(2)
            elif edit == "iadd":
                b.grad += 1
            else:
                b.grad.numpy()[0] = 100.0
            opt.step()
        result[lib.__name__] = (a.detach().numpy().copy(), b.detach().numpy().copy())
    for m, t in zip(result["loom"], result["torch"]):
        np.testing.assert_allclose(m, t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_loading_an_empty_state_resets_the_optimizer(kind):
    result = {}
    for lib in (torch, loom):
        a, b = _two_params(lib)
        kw = {"lr": 0.1, "momentum": 0.9} if kind == "SGD" else {"lr": 0.1}
        opt = getattr(lib.optim, kind)([a, b], **kw)
        for _ in range(3):
            opt.zero_grad()
            ((a * a).sum() + (b * b).sum()).backward()
            opt.step()
        opt.load_state_dict(getattr(lib.optim, kind)([a, b], **kw).state_dict())
        before = a.detach().numpy().copy()
        opt.zero_grad()
        ((a * a).sum() + (b * b).sum()).backward()
        opt.step()
        result[lib.__name__] = a.detach().numpy() - before
    np.testing.assert_allclose(result["loom"], result["torch"], rtol=1e-5)


def _rates(opt, schedule, n):
    """The learning rate after each of n steps of opt and its schedule."""
    rates = []
    for _ in range(n):
        opt.step()
        schedule.step()
        rates.append(opt.param_groups[0]["lr"])
    return rates


def test_cosine_annealing_resumes_at_last_epoch():
    lrs = {}
    for lib in (torch, loom):
        p = lib.tensor([1.0], requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        s = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=17, eta_min=0.001)
        for _ in range(37):
            opt.step()
            s.step()
        s2 = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=17, eta_min=0.001, last_epoch=36)
        lrs[lib.__name__] = [opt.param_groups[0]["lr"]] + _rates(opt, s2, 5)
    np.testing.assert_allclose(lrs["loom"], lrs["torch"], rtol=1e-12)


def test_save_and_load_whatever_the_header_length(tmp_path):
    # a header of 128 + 256 k bytes starts its length with 0x80, pickle's mark
    for n in range(1, 40):
        path = tmp_path / f"h{n}.safetensors"
        loom.save({"k" * n: loom.ones(2)}, str(path))
        assert loom.load(str(path))["k" * n].tolist() == [1.0, 1.0]


def test_a_guard_that_changes_every_call_stops_capturing():
    w = loom.tensor([1.0, 2.0], requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1, momentum=0.5)

    @loom.compile
    def step(x):
        opt.zero_grad()
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        return loss

    x = loom.tensor([1.0, 1.0])
    with pytest.warns(UserWarning, match="captured 8 times"):
        for k in range(12):
            opt.param_groups[0]["momentum"] = 0.5 + 0.01 * k
            step(x)
    assert len(next(iter(step.entries.values()))) == 9  # 8 captures and the trace


def test_polynomial_lr_and_verbose_as_pytorch():
    seqs = {}
    for lib in (torch, loom):
        p = lib.tensor([1.0], requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        s = lib.optim.lr_scheduler.PolynomialLR(opt, total_iters=7, power=2.0, verbose=False)
        seqs[lib.__name__] = _rates(opt, s, 10)
    np.testing.assert_allclose(seqs["loom"], seqs["torch"], rtol=1e-12)


def test_scheduler_warnings_and_type_checks():
    p = loom.tensor([1.0], requires_grad=True)
    opt = loom.optim.SGD([p], lr=0.1)
    s = loom.optim.lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="before optimizer.step"):
        s.step()
    with pytest.warns(UserWarning, match="epoch argument"):
        s.step(3)
    with pytest.warns(UserWarning, match="get_last_lr"):
        s.get_lr()
    with pytest.raises(TypeError, match="not an Optimizer"):
        loom.optim.lr_scheduler.StepLR(object(), 2)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        loom.optim.Adam(p)
