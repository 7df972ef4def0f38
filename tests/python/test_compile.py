"""loom.compile: a function, a whole training step included, captured into
one executable and replayed; the same results as the uncompiled program
and PyTorch."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

torch = pytest.importorskip("torch")


def mlp(lib):
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    if lib is torch:
        return t
    m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    return m


def data(step):
    rng = np.random.default_rng(step)
    return (rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8))


def run(lib, compiled, steps=6, make_opt=None):
    model = mlp(lib)
    opt = (make_opt or (lambda lib, p: lib.optim.AdamW(p, lr=1e-2)))(lib, model.parameters())
    fnl = lib.nn.functional

    def train_step(x, y):
        opt.zero_grad()
        loss = fnl.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = loom.compile(train_step) if compiled else train_step
    losses = []
    for k in range(steps):
        opt.param_groups[0]["lr"] = 1e-2 / (k + 1)  # a schedule: no recompile
        x, y = data(k)
        losses.append(float(step(lib.from_numpy(x), lib.from_numpy(y))))
    params = [p.detach().numpy().copy() for p in model.parameters()]
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    return losses, params, grads, step


@pytest.mark.parametrize("make_opt", [
    None,
    lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda lib, p: lib.optim.Adam(p, lr=1e-2, weight_decay=0.01),
])
def test_a_compiled_training_step_matches_torch_and_the_trace(make_opt):
    compiled = run(loom, True, make_opt=make_opt)
    traced = run(loom, False, make_opt=make_opt)
    theirs = run(torch, False, make_opt=make_opt)
    for mine in (compiled, traced):
        np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-5)
        for a, b in zip(mine[1] + mine[2], theirs[1] + theirs[2]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert len(compiled[3].entries) == 1  # six calls, one capture, one executable


def test_new_shapes_compile_once_more():
    f = loom.compile(lambda a, b: (a @ b).relu().sum(1))
    for n in (3, 5, 3, 5):
        a, b = np.ones((n, 4), np.float32), np.arange(8, dtype=np.float32).reshape(4, 2)
        np.testing.assert_allclose(f(loom.from_numpy(a), loom.from_numpy(b)).numpy(),
                                   np.maximum(a @ b, 0).sum(1))
    assert len(f.entries) == 2
    assert "steps" in f.explain() or f.explain()


def test_graph_breaks_run_through_the_trace():
    """What cannot be one executable runs uncompiled, with the same results,
    and explain() names the line; fullgraph=True refuses it instead."""
    x, y = loom.tensor([1.0, -2.0]), loom.tensor([3.0, 4.0])

    def reads(a):
        return a * float(a.sum())  # the read

    def branches(a):
        return a * 2 if a.sum() > 0 else -a

    kept = []

    def keeps(a):
        kept.append(a * 2)
        return a + 1

    for fn, want in [(reads, lambda a: a * a.sum()), (branches, lambda a: a * 2 if a.sum() > 0
                                                       else -a),
                     (keeps, lambda a: a + 1)]:
        f = loom.compile(fn)
        for a in (x, y, x):
            np.testing.assert_allclose(f(a).numpy(), want(a.numpy()))
        assert len(f.entries) == 1 and f.entries[next(iter(f.entries))][0].graph_break
        assert "graph break at " + __file__ in f.explain()
        with pytest.raises(loom.GraphBreak):
            loom.compile(fn, fullgraph=True)(x)
    f = loom.compile(reads)
    f(x)  # the break names the line of the read
    assert f"{__file__}:{reads.__code__.co_firstlineno + 1}" in f.explain()
    assert "reads a value" in f.explain()
    # kept: each capture's value (none: the capture stopped), each run's
    assert [k.tolist() for k in kept[1:4]] == [[2.0, -4.0], [6.0, 8.0], [2.0, -4.0]]
    with pytest.raises(RuntimeError, match="kept beyond the capture"):
        kept[0].tolist()
    with pytest.raises(RuntimeError, match="kept beyond the capture"):
        kept[0] + 1
    assert loom.compile(lambda a: 3)(x) == 3
    with pytest.raises(RuntimeError, match="reads a value"):  # GraphBreak is a RuntimeError
        loom.compile(reads, fullgraph=True)(x)
    assert (x * 2).tolist() == [2.0, -4.0]  # tracing goes on after each


def test_a_break_after_backward_leaves_the_gradients_as_they_were():
    """The capture ran backward before the read: its gradients are dropped,
    and the run through the trace accumulates onto the earlier .grad."""
    w = loom.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w * 1.0).sum().backward()  # .grad = [1, 1, 1], kept across calls
    loom.step()

    @loom.compile
    def f(a):
        loss = (w * a).sum()
        loss.backward()
        return a * float(loss)  # a read after backward: a graph break

    out = f(loom.tensor([2.0, 2.0, 2.0]))
    assert out.tolist() == [24.0, 24.0, 24.0]
    assert w.grad.tolist() == [3.0, 3.0, 3.0]


def test_a_parameter_read_after_the_optimizer_step_sees_its_update():
    """Inside one executable a parameter's reads see it before the run's
    update: a read after opt.step() breaks the graph, and the function
    returns the updated value, as PyTorch's does, every call."""
    results = []
    for lib in (loom, torch):
        w = lib.tensor([1.0, -2.0], requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)

        def step(x):
            opt.zero_grad()
            (w * x).sum().backward()
            opt.step()
            return w * 1

        f = loom.compile(step) if lib is loom else step
        results.append([f(lib.tensor([1.0, 3.0])).tolist() for _ in range(3)])
        if lib is loom:
            assert "after the optimizer's step" in f.explain()
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_a_compiled_forward_stays_differentiable():
    """A compiled function whose output requires grad and which runs no
    backward itself is differentiated by its caller, as torch.compile's:
    its gradients reach the parameters (it runs through the trace), alone
    or beside an uncompiled term."""
    def go(lib, compile_fn):
        torch.manual_seed(0)
        tm = torch.nn.Linear(3, 2)
        m = tm if lib is torch else loom.nn.Linear(3, 2)
        if lib is loom:
            m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        fwd = compile_fn(lambda mod, x: mod(x) * mod(x))
        x = lib.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
        y = fwd(m, x)
        assert y.requires_grad
        (y.sum() + (m.weight * 2).sum()).backward()
        leaf = lib.tensor([1.0, 2.0], requires_grad=True)
        compile_fn(lambda a: (a * a).sum())(leaf).backward()
        return m.weight.grad.numpy(), m.bias.grad.numpy(), leaf.grad.numpy()

    ours = go(loom, loom.compile)
    for a, b in zip(ours, go(torch, lambda f: f)):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_gradients_accumulate_over_compiled_calls():
    """A compiled function that runs backward adds to the .grad a call
    finds, as backward does (gradient accumulation over calls); one that
    clears .grad first (zero_grad inside) replaces it; and a step whose
    update follows a backward into a .grad it did not clear runs through
    the trace, its update reading the sum, as PyTorch's."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)

    def go(lib, wrap):
        m = (torch.nn if lib is torch else nn).Linear(4, 3)
        m.load_state_dict({"weight": lib.tensor(w), "bias": lib.zeros(3)})
        opt = lib.optim.SGD(m.parameters(), lr=0.1)

        def accum(x, first, last):
            if first:
                opt.zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            if last:
                opt.step()
            return loss.detach()

        def backward_only(x):
            m(x).pow(2).sum().backward()

        f, b = wrap(accum), wrap(backward_only)
        data = np.random.default_rng(1).standard_normal((8, 2, 4)).astype(np.float32)
        seen = []
        for it in range(6):  # zero_grad every 2nd call, step every 2nd
            f(lib.tensor(data[it]), it % 2 == 0, it % 2 == 1)
            seen.append(m.weight.grad.numpy().copy())
        m.zero_grad()
        b(lib.tensor(data[6]))
        b(lib.tensor(data[7]))  # replayed: adds to the first call's .grad
        seen.append(m.weight.grad.numpy().copy())
        opt.zero_grad()
        for it in range(3):  # zero_grad outside, the step inside
            f(lib.tensor(data[it]), False, True)
        seen.append(m.weight.detach().numpy().copy())
        return seen

    for a, b in zip(go(loom, loom.compile), go(torch, lambda fn: fn)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_explain_leaves_the_generated_code_out_unless_asked():
    m = loom.nn.Linear(4, 2)

    @loom.compile
    def f(x):
        return m(x).relu().sum()

    with loom.no_grad():  # else its output requires grad: the trace runs it
        f(loom.ones(3, 4))
    short, full = f.explain(), f.explain(code=True)
    assert "== fusion groups" in short and "== generated C (" in short
    assert "loom_module_abi_version" not in short and "loom_module_abi_version" in full
    assert len(short.splitlines()) < 40 < len(full.splitlines())


def test_guards_on_the_training_flag_and_the_optimizer():
    """A module switched between train() and eval(), or an optimizer's
    hyperparameter changed, captures once more: a compiled step never
    replays what the Python values no longer say."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.5))
    f = loom.compile(lambda a: model(a))
    x = loom.ones(3, 4)
    want = (x.numpy() @ model[0].weight.detach().numpy().T + model[0].bias.detach().numpy())
    with loom.no_grad():
        model.eval()
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
        model.train()
        dropped = f(x).numpy()
        assert (dropped == 0).mean() > 0.3  # dropout applied in training
        kept = dropped != 0
        np.testing.assert_allclose(dropped[kept], (2 * want)[kept], rtol=1e-6)
        model.eval()
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
    assert sum(len(v) for v in f.entries.values()) == 2
    assert "Dropout.training == False" in f.explain()
    # grad mode is part of the key; with it, the output requires grad
    np.testing.assert_allclose(f(x).detach().numpy(), want, rtol=1e-6)
    assert len(f.entries) == 2

    w = loom.tensor([1.0, 2.0], requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.5)

    @loom.compile
    def step(a):
        opt.zero_grad()
        (w * a).sum().backward()
        opt.step()

    step(loom.tensor([1.0, 1.0]))
    assert w.detach().tolist() == [0.5, 1.5]
    opt.param_groups[0]["weight_decay"] = 1.0  # w - lr * (g + wd * w)
    step(loom.tensor([1.0, 1.0]))
    assert w.detach().tolist() == [-0.25, 0.25]
    assert sum(len(v) for v in step.entries.values()) == 2


def test_batch_norm_buffers_update_in_place_under_compile():
    x = np.random.default_rng(1).standard_normal((4, 3, 5, 5)).astype(np.float32)
    ours, eager = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    torch_bn = torch.nn.BatchNorm2d(3)
    f = loom.compile(lambda a: ours(a))
    for _ in range(3):
        with loom.no_grad():  # one executable (with grad, its output would need the trace)
            y = f(loom.from_numpy(x))
        eager(loom.from_numpy(x))
        ty = torch_bn(torch.from_numpy(x))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        want = getattr(torch_bn, name).numpy()
        np.testing.assert_allclose(getattr(ours, name).numpy(), want, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(getattr(eager, name).numpy(), want, rtol=1e-5, err_msg=name)


def test_a_compiled_evaluation_reads_statistics_trained_through_the_trace():
    """BatchNorm trained outside loom.compile names new tensors for its
    statistics; an evaluation compiled before reads their values (not
    those of the tensors it borrowed at its capture), as PyTorch's."""
    def go(lib, compiled):
        torch.manual_seed(0)
        tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        if lib is torch:
            m = tm
        else:
            m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
            m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        opt = lib.optim.SGD(m.parameters(), lr=0.1)

        def evaluate(x):
            with lib.no_grad():
                return m(x)
        evaluate = loom.compile(evaluate) if compiled else evaluate
        x = lib.tensor(np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32))
        outs = []
        for _ in range(3):
            m.train()
            opt.zero_grad()
            (m(x) ** 2).mean().backward()
            opt.step()
            m.eval()
            outs.append(evaluate(x).numpy().copy())
        m.train()
        m(x)  # the module trains on through the trace after the compiled calls
        m.eval()
        outs.append(evaluate(x).numpy().copy())
        return outs, m[1].running_mean.numpy().copy()

    theirs, their_mean = go(torch, False)
    for compiled in (False, True):
        ours, our_mean = go(loom, compiled)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(our_mean, their_mean, rtol=1e-5, atol=1e-6)


def test_a_gradient_held_elsewhere_is_not_overwritten():
    w = loom.ones(3, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1)

    @loom.compile
    def step(x):
        opt.zero_grad()
        (w * x).sum().backward()
        opt.step()

    step(loom.tensor([1.0, 2.0, 3.0]))
    held = w.grad  # the user keeps the first step's gradient
    step(loom.tensor([5.0, 5.0, 5.0]))
    assert held.tolist() == [1.0, 2.0, 3.0] and w.grad.tolist() == [5.0, 5.0, 5.0]
    step(loom.tensor([7.0, 7.0, 7.0]))  # .grad alone holds it now: updated in place
    assert w.grad.tolist() == [7.0, 7.0, 7.0]
    np.testing.assert_allclose(w.detach().numpy(), 1 - 0.1 * np.array([13.0, 14.0, 15.0]),
                               rtol=1e-6)


@pytest.mark.parametrize("policy,most", [("symbolic", 1), ("bucket", 6), ("exact", 6)])
def test_shape_policies_bound_compiles(policy, most):
    """Six lengths 5..60 through one program: symbolic compiles one
    executable for all, bucket one per power-of-two bucket seen (8, 16, 32
    and 64 hold them) and the speculative compiles of the next bucket up,
    exact one per length."""
    loom.set_compile_mode("wait")
    try:
        w = loom.randn(4, 4)
        before = loom.stats()["compiles"]
        for n in (5, 7, 12, 20, 33, 60):
            x = loom.dynamic(loom.randn(n, 4), 0, policy)
            y = (x @ w).tanh().sum(1)
            np.testing.assert_allclose(y.numpy(), np.tanh(x.numpy() @ w.numpy()).sum(1),
                                       rtol=1e-5, atol=1e-6)
        compiles = loom.stats()["compiles"] - before
        assert compiles <= most, compiles
        if policy == "exact":
            assert compiles >= 5  # the policy is what bounds the others
    finally:
        loom.set_compile_mode("tiered")


@pytest.mark.parametrize("how", ["reshape", "flatten", "unflatten"])
def test_reshapes_that_keep_a_symbolic_batch_compile_once(how):
    """reshape(-1, C), flatten(1) and unflatten(1, ...) of a batch declared
    symbolic keep it symbolic (as PyTorch's dynamic shapes do): one
    executable for every batch size, with PyTorch's values and gradients.
    Sizes taken from x.shape (view(x.shape[0], -1)) are Python ints and
    fix it, as they would without SymInts."""
    loom.set_compile_mode("wait")
    try:
        rng = np.random.default_rng(5)
        wn = rng.standard_normal((8, 3)).astype(np.float32)
        w = loom.tensor(wn, requires_grad=True)
        step = {
            "reshape": lambda x: x.reshape(-1, 8),
            "flatten": lambda x: x.flatten(1).reshape(-1, 8),
            "unflatten": lambda x: x.reshape(-1, 8).unflatten(1, (2, 4)).flatten(1),
        }[how]
        before = loom.stats()["compiles"]
        for b in (2, 3, 5, 4, 7, 6):
            xn = rng.standard_normal((b, 2, 8)).astype(np.float32)
            x = loom.dynamic(loom.tensor(xn), 0)
            loss = (step(x) @ w).tanh().sum()
            loss.backward()
            tw = torch.tensor(wn, requires_grad=True)
            tl = (torch.tensor(xn).reshape(-1, 8) @ tw).tanh().sum()
            tl.backward()
            assert float(loss) == pytest.approx(float(tl), rel=1e-5)
            np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
            w.grad = None
            loom.step()
        # forward and loss, backward: one executable each, whatever b
        assert loom.stats()["compiles"] - before <= 2
    finally:
        loom.set_compile_mode("tiered")


def test_dims_named_alike_are_one_symbol():
    """The batch dims of the inputs and the targets, marked symbolic under
    one name, are one symbol: the loss that combines them keeps it
    symbolic, so ten batch sizes compile a couple of executables, where
    two unnamed symbols are fixed to each size (a compile per size)."""
    loom.set_compile_mode("wait")
    try:
        rng = np.random.default_rng(3)
        wn = rng.standard_normal((5, 7)).astype(np.float32)

        def compiles(name):
            loom.set_compile_mode("wait")  # a new trace: sites counted afresh
            w = loom.tensor(wn, requires_grad=True)
            before = loom.stats()["compiles"]
            for b in (2, 4, 3, 5, 6, 7, 9, 11):
                xn = rng.standard_normal((b, 5)).astype(np.float32)
                yn = rng.integers(0, 7, b)
                x = loom.dynamic(loom.tensor(xn), 0, "symbolic", name=name)
                y = loom.dynamic(loom.tensor(yn), 0, "symbolic", name=name)
                loss = loom.nn.functional.cross_entropy(x @ w, y)
                loss.backward()
                tw = torch.tensor(wn, requires_grad=True)
                tl = torch.nn.functional.cross_entropy(torch.tensor(xn) @ tw, torch.tensor(yn))
                tl.backward()
                assert float(loss) == pytest.approx(float(tl), rel=1e-5)
                np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)
                w.grad = None
                loom.step()
            return loom.stats()["compiles"] - before

        assert compiles(None) >= 6  # the name is what keeps the others down
        assert compiles("batch") <= 3
    finally:
        loom.set_compile_mode("tiered")


def test_functional_batch_norm_updates_its_statistics_compiled_or_not():
    """F.batch_norm in training writes running_mean/var in place: a module's
    buffers inside the executable, plain tensors through a graph break."""
    x = np.random.default_rng(2).standard_normal((4, 3, 2, 2))
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    for _ in range(2):
        ty = torch.nn.functional.batch_norm(torch.from_numpy(x), trm, trv, training=True)
    rm, rv = loom.zeros(3, dtype=loom.float64), loom.ones(3, dtype=loom.float64)
    f = loom.compile(lambda a: F.batch_norm(a, rm, rv, training=True))
    for _ in range(2):
        y = f(loom.from_numpy(x))
    assert next(iter(f.entries.values()))[0].graph_break
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-10)
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-10)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-10)
    m = nn.Module()
    m.register_buffer("mean", loom.zeros(3, dtype=loom.float64))
    m.register_buffer("var", loom.ones(3, dtype=loom.float64))
    g = loom.compile(lambda a: F.batch_norm(a, m.mean, m.var, training=True))
    for _ in range(2):
        g(loom.from_numpy(x))
    assert not next(iter(g.entries.values()))[0].graph_break
    np.testing.assert_allclose(m.mean.numpy(), trm.numpy(), rtol=1e-10)
    np.testing.assert_allclose(m.var.numpy(), trv.numpy(), rtol=1e-10)


def _epochs(lib, make_opt, compiled, sizes=(4, 4, 2, 4, 4, 2), plain_at=()):
    """Steps over batches of the given sizes (a last batch smaller, as an
    epoch's), compiled or not; steps listed in plain_at run uncompiled."""
    rng = np.random.default_rng(13)
    X = rng.standard_normal((max(sizes), 6)).astype(np.float32)
    Y = rng.standard_normal((max(sizes), 2)).astype(np.float32)
    net = lib.nn.Linear(6, 2)
    with lib.no_grad():
        net.weight.copy_(lib.from_numpy(rng.standard_normal((2, 6)).astype(np.float32)))
        net.bias.copy_(lib.from_numpy(rng.standard_normal(2).astype(np.float32)))
    opt = make_opt(lib, net.parameters())

    def step(x, y):
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fast = loom.compile(step) if compiled else step
    for i, n in enumerate(sizes):
        x, y = lib.from_numpy(X[:n].copy()), lib.from_numpy(Y[:n].copy())
        (step if i in plain_at else fast)(x, y)
    return net, opt


OPTIMIZERS = [
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda lib, p: lib.optim.Adam(p, lr=0.01),
    lambda lib, p: lib.optim.AdamW(p, lr=0.01),
]


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
@pytest.mark.parametrize("plain_at", [(), (1, 3)])
def test_a_compiled_step_keeps_its_optimizer_state_across_batch_sizes(make_opt, plain_at):
    """Each batch size is a capture of its own, its executable holding the
    moments: one that did not make the last step starts from the state
    that step left (an executable's, or the trace's for the steps run
    plainly)."""
    mine, opt = _epochs(loom, make_opt, True, plain_at=plain_at)
    theirs, topt = _epochs(torch, make_opt, False)
    for a, b in zip(mine.parameters(), theirs.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)
    ours, want = opt.state_dict()["state"], topt.state_dict()["state"]
    assert sorted(ours) == sorted(want)
    for i in want:
        for k, v in want[i].items():
            np.testing.assert_allclose(np.asarray(ours[i][k], np.float64),
                                       np.asarray(v, np.float64), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_a_loaded_state_dict_starts_the_compiled_step(make_opt):
    mine, opt = _epochs(loom, make_opt, True, sizes=(4, 2))
    theirs, topt = _epochs(torch, make_opt, False, sizes=(4, 2))
    saved = topt.state_dict()  # PyTorch's, into Loom's optimizer
    opt.load_state_dict(saved)
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((3, 6)).astype(np.float32)
    y0 = rng.standard_normal((3, 2)).astype(np.float32)
    for lib, net, o in ((loom, mine, opt), (torch, theirs, topt)):
        def step(x, y):
            o.zero_grad()
            ((net(x) - y) ** 2).mean().backward()
            o.step()
        run = loom.compile(step) if lib is loom else step
        for _ in range(2):
            run(lib.from_numpy(x0.copy()), lib.from_numpy(y0.copy()))
    for a, b in zip(mine.parameters(), theirs.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_python_values_key_by_type_and_value():
    """2, 2.0 and True are equal in Python but give ops other dtypes: each
    captures apart, and each call gives PyTorch's result."""
    xi = np.array([1, 2, 3], np.int64)

    def scale(lib):
        return lambda x, s: x * s

    def divide(lib):
        return lambda x, s: x / s if isinstance(s, float) else x // s

    def flag(lib):
        return lambda x, f: x + 1 if f is True else x - 1

    def signed_zero(lib):
        return lambda x, s: 1.0 / (x * s)

    for make, values in [(scale, [2, 2.5, 2.0, True]), (divide, [2, 2.0]),
                         (flag, [1, True]), (signed_zero, [0.0, -0.0])]:
        f = loom.compile(make(loom))
        for s in values:
            mine, theirs = f(loom.tensor(xi), s), make(torch)(torch.tensor(xi), s)
            assert str(mine.dtype).split(".")[1] == str(theirs.dtype).split(".")[1], (make, s)
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
        assert len(f.entries) == len(values)


def test_lists_tuples_and_dicts_of_tensors_and_values_are_arguments():
    """A container's tensors are inputs of the executable (new tensors of the
    same shapes replay it), its Python values part of the key."""
    def fn(x, ws, state, opts):
        h, (c,) = state
        y = x * ws[0] + ws[1] + h * c
        return y * opts["scale"] if opts["on"] else y

    f = loom.compile(fn)
    rng = np.random.default_rng(0)
    for k in range(4):
        a, h, c = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
        ws, opts = [2.0, 3.0 + (k == 3)], {"scale": 0.5, "on": k != 2}
        mine = f(loom.tensor(a), ws, (loom.tensor(h), [loom.tensor(c)]), opts)
        theirs = fn(torch.tensor(a), ws, (torch.tensor(h), [torch.tensor(c)]), opts)
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6)
    assert len(f.entries) == 3  # calls 0 and 1 share one; 2 and 3 differ in values
    g = loom.compile(lambda xs: xs[0] + xs[1])
    with pytest.raises(TypeError, match="ndarray cannot be told apart"):
        g(np.ones(2))
    with pytest.raises(TypeError, match="keyed by tensors"):
        g({loom.ones(1): 1})


def calls_from_seed(fn, n=4):
    loom.manual_seed(7)
    x = loom.zeros(3)
    with loom.no_grad():
        return np.array([fn(x).numpy().copy() for _ in range(n)])


def test_random_values_are_drawn_anew_at_every_call():
    """rand, randn_like and randint inside a compiled function draw per
    call, from the same stream as the plain function's calls."""
    def f(x):
        return x + loom.rand(3) + loom.randn_like(x) + loom.randint(0, 5, (3,)).float()

    compiled = loom.compile(f)
    mine = calls_from_seed(compiled)
    assert "graph break" not in compiled.explain()
    assert len({tuple(v) for v in mine}) == 4
    np.testing.assert_allclose(mine, calls_from_seed(f), rtol=1e-6)


def test_a_capture_that_breaks_rewinds_the_generator():
    """The draws of a capture that ends in a graph break are drawn again
    by the call through the trace, as the plain function draws them."""
    def f(x):
        return x + loom.rand(3) + loom.empty(3).uniform_(-1.0, 1.0)

    compiled = loom.compile(f)
    mine = calls_from_seed(compiled)
    assert "graph break" in compiled.explain()
    np.testing.assert_allclose(mine, calls_from_seed(f), rtol=1e-6)


def test_dropout_in_a_compiled_training_step_draws_a_mask_per_call():
    loom.manual_seed(1)
    lin = nn.Linear(64, 64)
    drop = nn.Dropout(0.5)
    opt = loom.optim.SGD(lin.parameters(), lr=0.0)

    @loom.compile
    def step(x):
        opt.zero_grad()
        y = drop(lin(x))
        y.sum().backward()
        opt.step()
        return y

    x = loom.ones(4, 64)
    masks = {tuple((step(x).numpy() == 0).ravel()) for _ in range(5)}
    assert len(masks) == 5
    assert len(step.explain().split("guards")) >= 1  # one executable, replayed


def test_returned_arguments_and_repeated_outputs_are_the_same_tensors():
    """A compiled function that returns an argument, or one tensor twice,
    returns those objects, as the function itself does: an in-place change
    of the result reaches the argument (it returned copies)."""
    f = loom.compile(lambda x, y: (x, y * 2, x))
    g = loom.compile(lambda x: (lambda y: (y, y))(x * 2))
    for _ in range(3):  # the capture, then replays
        x, y = loom.tensor([1.0, 2.0]), loom.tensor([3.0, 4.0])
        a, b, c = f(x, y)
        assert a is x and c is x and b.tolist() == [6.0, 8.0]
        a.add_(100)
        assert x.tolist() == [101.0, 102.0]
        p, q = g(loom.tensor([1.0, 2.0]))
        assert p is q and q.tolist() == [2.0, 4.0]


def test_one_compiled_function_called_from_four_threads_at_once():
    # Calls take turns: the first ones capture (each thread may be the one),
    # the rest replay; every result is its own input's, none an error.
    import sys
    import threading
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    xs = [np.random.default_rng(k).standard_normal((4, 8)).astype(np.float32) for k in range(8)]
    W = loom.tensor(w)

    @loom.compile
    def f(a):
        return (a @ W).tanh() * 2 + 1

    errors, wrong = [], []

    def worker(k):
        for i in range(20):
            j = (k + i) % 8
            try:
                got = f(loom.tensor(xs[j])).numpy()
                if not np.allclose(got, np.tanh(xs[j] @ w) * 2 + 1, atol=1e-5):
                    wrong.append(j)
            except Exception as e:  # noqa: BLE001 - collected, asserted empty
                errors.append(repr(e))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside the capture
    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and wrong == []


def test_a_capture_that_raises_after_the_update_keeps_the_update_as_pytorch():
    w0 = np.array([[0.5, -1.0, 2.0]], np.float32)
    x = np.ones((2, 3), np.float32)

    class Stop(Exception):
        pass

    def run(lib, compile_it):
        w = lib.nn.Parameter(lib.tensor(w0.copy()))
        opt = lib.optim.SGD([w], lr=0.1, momentum=0.9)

        def step(x, fail):
            opt.zero_grad()
            (x @ w.t()).sum().backward()
            opt.step()
            if fail:
                raise Stop()  # the call's logging fails after the update
            return w * 1.0

        f = loom.compile(step) if compile_it else step
        with pytest.raises(Stop):
            f(lib.tensor(x), True)
        out = [f(lib.tensor(x), False).detach().numpy().copy() for _ in range(3)]
        return w.detach().numpy().copy(), out

    theirs, theirs_out = run(torch, False)
    for compile_it in (False, True):
        mine, mine_out = run(loom, compile_it)
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)
        np.testing.assert_allclose(np.array(mine_out), np.array(theirs_out), rtol=1e-6)


def test_a_size_the_data_decides_read_while_capturing_is_a_graph_break():
    x = np.array([1.0, -2.0, 3.0, 4.0], np.float32)

    def routed_mean(t):
        sel = t[t > 0]
        return sel.sum() / sel.shape[0]

    def count_rows(t):
        return t.sum() * 0 + t.nonzero().shape[0] + len(t[t < 0])

    for fn in (routed_mean, count_rows):
        want = fn(torch.tensor(x)).item()
        f = loom.compile(fn)
        assert [f(loom.tensor(x)).item() for _ in range(3)] == pytest.approx([want] * 3)
        assert "depends on the data" in f.explain()
        with pytest.raises(loom.GraphBreak, match="depends on the data"):
            loom.compile(fn, fullgraph=True)(loom.tensor(x))
    # a selection whose size Python never reads is captured whole
    g = loom.compile(lambda t: t[t > 0].sum() * 2)
    assert float(g(loom.tensor(x))) == pytest.approx(16.0)
    assert "graph break" not in g.explain()


def test_sizes_that_keep_changing_run_through_the_trace_with_symbolic_dims():
    """torch.compile's automatic dynamic shapes: two sets of sizes are
    captured, the third new one makes the signature dynamic, and its calls
    run through the trace, whose auto policy compiles a changing dim once
    (symbolic) instead of once per size; a dim loom.dynamic marked is never
    captured by size."""
    from loom import _compile
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    f = loom.compile(lambda t, w: (t @ w).relu().sum(1))
    loom.set_compile_mode("wait")
    try:
        before = loom.stats()["compiles"]
        for n in range(2, 30):
            x = rng.standard_normal((n, 5)).astype(np.float32)
            got = f(loom.from_numpy(x), loom.from_numpy(w)).numpy()
            np.testing.assert_allclose(got, np.maximum(x @ w, 0).sum(1), rtol=1e-5, atol=1e-5)
        compiles = loom.stats()["compiles"] - before
    finally:
        loom.set_compile_mode("tiered")
    assert f._captures() == _compile.SIZE_CAPTURES
    assert compiles <= _compile.SIZE_CAPTURES + 4, compiles
    assert "sizes not captured run through the trace: argument sizes that changed" in f.explain()
    # a size captured before still runs its executable
    x = rng.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(f(loom.from_numpy(x), loom.from_numpy(w)).numpy(),
                               np.maximum(x @ w, 0).sum(1), rtol=1e-5, atol=1e-5)
    assert f._captures() == _compile.SIZE_CAPTURES
    g = loom.compile(lambda t: t * 2)
    for n in (3, 4):
        assert g(loom.dynamic(loom.ones(n, 2), 0)).tolist() == [[2.0, 2.0]] * n
    assert g._captures() == 0
    assert "loom.dynamic marked" in g.explain()


def test_captures_of_one_function_are_bounded_and_a_replaced_parameter_recaptures():
    import warnings
    from loom import _compile
    f = loom.compile(lambda t, k: t * k)
    x = loom.tensor([1.0, 2.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [f(x, 0.5 * k).tolist() for k in range(_compile.TOTAL_CAPTURE_LIMIT + 6)]
    assert got == [[0.5 * k, k * 1.0] for k in range(_compile.TOTAL_CAPTURE_LIMIT + 6)]
    assert f._captures() == _compile.TOTAL_CAPTURE_LIMIT
    assert len([w for w in caught if "captured" in str(w.message)]) == 1
    m = nn.Linear(3, 2, bias=False)
    with loom.no_grad():
        m.weight.copy_(loom.ones(2, 3))
        g = loom.compile(lambda t: m(t))
        assert g(loom.ones(1, 3)).tolist() == [[3.0, 3.0]]
        m.weight = nn.Parameter(loom.full((2, 3), 2.0))
        assert g(loom.ones(1, 3)).tolist() == [[6.0, 6.0]]
