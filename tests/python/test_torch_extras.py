"""PyTorch idioms beyond the basics, against torch 1.13: more optimizers and
their options, tensor and module hooks, keyword arguments of compiled
functions, grad_fn, and checkpoints of nested Python values."""
import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")


# ---- optimizers ----

def _train(lib, make_opt, steps=10, groups=False):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    w = lib.tensor(rng.standard_normal((6, 2)).astype(np.float32), requires_grad=True)
    b = lib.tensor(rng.standard_normal(2).astype(np.float32), requires_grad=True)
    params = [{"params": [w]}, {"params": [b], "lr": 0.003}] if groups else [w, b]
    opt = make_opt(lib, params)
    X, Y = lib.tensor(x), lib.tensor(y)
    for _ in range(steps):
        opt.zero_grad()
        ((X @ w + b - Y) ** 2).mean().backward()
        opt.step()
    return opt, [w.detach().numpy().copy(), b.detach().numpy().copy()]


OPTIMIZERS = [
    lambda lib, p: lib.optim.Adam(p, lr=0.02, amsgrad=True),
    lambda lib, p: lib.optim.Adam(p, lr=0.02, amsgrad=True, weight_decay=0.1),
    lambda lib, p: lib.optim.AdamW(p, lr=0.02, amsgrad=True, weight_decay=0.1),
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.3),
    lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.5, weight_decay=0.01),
    lambda lib, p: lib.optim.RMSprop(p, lr=0.01),
    lambda lib, p: lib.optim.RMSprop(p, lr=0.01, alpha=0.9, weight_decay=0.1),
    lambda lib, p: lib.optim.RMSprop(p, lr=0.01, momentum=0.8, centered=True),
    lambda lib, p: lib.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True, weight_decay=0.05),
    lambda lib, p: lib.optim.Adagrad(p, lr=0.1),
    lambda lib, p: lib.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.1,
                                     initial_accumulator_value=0.5, eps=1e-6),
]


def _same_state(mine, theirs):
    """An optimizer's state_dict equal to torch's: keys, values, groups."""
    assert sorted(mine["state"]) == sorted(theirs["state"])
    for i, s in theirs["state"].items():
        assert list(mine["state"][i]) == list(s)
        for k, v in s.items():
            m = mine["state"][i][k]
            if isinstance(v, torch.Tensor):
                np.testing.assert_allclose(np.asarray(m), v.numpy(), rtol=1e-4, atol=1e-6)
            else:
                assert m == v
    for mg, tg in zip(mine["param_groups"], theirs["param_groups"]):
        for k, v in mg.items():
            assert tg[k] == v, k


@pytest.mark.parametrize("groups", [False, True])
@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_optimizer_variants_against_torch(make_opt, groups):
    mine_opt, mine = _train(loom, make_opt, groups=groups)
    their_opt, theirs = _train(torch, make_opt, groups=groups)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t, rtol=1e-4, atol=1e-5)
    _same_state(mine_opt.state_dict(), their_opt.state_dict())


@pytest.mark.parametrize("make_opt", OPTIMIZERS[::2])
def test_optimizer_state_goes_from_torch_to_loom_and_back(make_opt):
    """5 steps in torch, its state_dict loaded into loom, 5 more steps
    match 10 in torch; loom's state_dict then loads into torch."""
    their_opt, _ = _train(torch, make_opt, steps=5)
    _, ten = _train(torch, make_opt, steps=10)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    ws = [p.detach().numpy().copy() for g in their_opt.param_groups for p in g["params"]]
    w, b = (loom.tensor(a, requires_grad=True) for a in ws)
    opt = make_opt(loom, [w, b])
    opt.load_state_dict(their_opt.state_dict())
    for _ in range(5):
        opt.zero_grad()
        ((loom.tensor(x) @ w + b - loom.tensor(y)) ** 2).mean().backward()
        opt.step()
    for m, t in zip((w, b), ten):
        np.testing.assert_allclose(m.detach().numpy(), t, rtol=1e-4, atol=1e-5)
    back = make_opt(torch, [torch.zeros(6, 2, requires_grad=True),
                            torch.zeros(2, requires_grad=True)])
    sd = opt.state_dict()
    sd["state"] = {i: {k: torch.tensor(np.asarray(v)) if isinstance(v, loom.Tensor) else v
                       for k, v in s.items()} for i, s in sd["state"].items()}
    back.load_state_dict(sd)
    _same_state(opt.state_dict(), back.state_dict())


def test_adagrad_has_state_before_any_step_as_torch():
    mine = loom.optim.Adagrad([loom.zeros(3, requires_grad=True)], initial_accumulator_value=0.2)
    theirs = torch.optim.Adagrad([torch.zeros(3, requires_grad=True)],
                                 initial_accumulator_value=0.2)
    _same_state(mine.state_dict(), theirs.state_dict())


def test_a_compiled_step_of_a_python_path_optimizer_matches_torch():
    """Under loom.compile such a step is a graph break and runs as the plain loop."""
    def run(lib, compiled):
        _, params = _train(lib, lambda lib, p: lib.optim.RMSprop(p, lr=0.01), steps=0)
        w, b = (lib.tensor(a, requires_grad=True) for a in params)
        opt = lib.optim.RMSprop([w, b], lr=0.01, momentum=0.5)
        x = lib.ones(4, 6)

        def step(x):
            opt.zero_grad()
            loss = ((x @ w + b) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        f = loom.compile(step) if compiled else step
        for _ in range(4):
            f(x)
        return w.detach().numpy().copy()
    np.testing.assert_allclose(run(loom, True), run(torch, False), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
    lambda lib, p: lib.optim.RMSprop(p, alpha=-0.1),
    lambda lib, p: lib.optim.RMSprop(p, momentum=-0.1),
    lambda lib, p: lib.optim.Adagrad(p, lr_decay=-1.0),
    lambda lib, p: lib.optim.Adagrad(p, initial_accumulator_value=-1.0),
    lambda lib, p: lib.optim.Adam(p, betas=(1.0, 0.9), amsgrad=True),
])
def test_bad_options_are_refused_as_torch(make):
    with pytest.raises(ValueError) as theirs:
        make(torch, [torch.zeros(2, requires_grad=True)])
    with pytest.raises(ValueError, match=str(theirs.value).split(":")[0]):
        make(loom, [loom.zeros(2, requires_grad=True)])


# ---- tensor hooks ----

@pytest.mark.parametrize("retain_first", [True, False])
def test_retain_grad_keeps_the_gradient_the_earlier_hooks_made(retain_first):
    """As torch 1.13: .grad of a computed tensor is its gradient as the
    hooks registered before retain_grad() left it."""
    def run(lib):
        p = lib.tensor([1.0, 2.0], requires_grad=True)
        h = p * 2
        if retain_first:
            h.retain_grad()
        h.register_hook(lambda g: g * 3)
        if not retain_first:
            h.retain_grad()
        (h * h).sum().backward()
        return h.grad.numpy().copy(), p.grad.numpy().copy(), h.retains_grad
    mine, theirs = run(loom), run(torch)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t)


def _hooked_backward(lib):
    """Hooks on a leaf and on two computed tensors on one path, reading
    and replacing gradients; with retain_grad on one of them."""
    p = lib.tensor([1.0, 2.0, -0.5], requires_grad=True)
    q = lib.tensor([3.0, -1.0, 0.25], requires_grad=True)
    seen = []
    h = p * 2
    h.retain_grad()
    h.register_hook(lambda g: seen.append(g.detach().clone()) or g * 3)
    p.register_hook(lambda g: g + 1)
    k = h * q
    k.register_hook(lambda g: g * 2)
    k.register_hook(lambda g: seen.append(g.detach().clone()))
    (k * k).sum().backward()
    return [t.detach().numpy().copy() for t in [p.grad, q.grad, h.grad] + seen]


def test_tensor_hooks_change_the_gradients_as_torch():
    for m, t in zip(_hooked_backward(loom), _hooked_backward(torch)):
        np.testing.assert_allclose(m, t, rtol=1e-5)


def test_a_read_only_hook_on_a_computed_tensor_keeps_its_grad_empty():
    for lib in (loom, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x.exp()
        got = []
        h.register_hook(lambda g: got.append(g.detach().numpy().copy()))
        (h * h).sum().backward()
        np.testing.assert_allclose(got[0], 2 * np.exp(np.array([1.0, 2.0])), rtol=1e-5)
        assert not h.retains_grad
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * np.array([1.0, 2.0])),
                                   rtol=1e-5)


def test_leaf_hooks_apply_before_accumulation_and_remove():
    def run(lib):
        w = lib.tensor([1.0, -2.0], requires_grad=True)
        calls = []
        handle = w.register_hook(lambda g: calls.append(1) or g * 10)
        (w * w).sum().backward()
        (w * 3).sum().backward()  # the hook gets this backward's part only
        first = w.grad.numpy().copy()
        handle.remove()
        (w * 3).sum().backward()
        return first, w.grad.numpy().copy(), len(calls)
    mine, theirs = run(loom), run(torch)
    np.testing.assert_allclose(mine[0], theirs[0])
    np.testing.assert_allclose(mine[1], theirs[1])
    assert mine[2] == theirs[2] == 2


def test_a_gradient_hook_in_a_training_loop_matches_torch():
    """A hook that clamps a parameter's gradient and one that scales a
    hidden activation's gradient, over 5 SGD steps."""
    def run(lib):
        rng = np.random.default_rng(3)
        w1 = lib.tensor(rng.standard_normal((4, 8)).astype(np.float32), requires_grad=True)
        w2 = lib.tensor(rng.standard_normal((8, 1)).astype(np.float32), requires_grad=True)
        x = lib.tensor(rng.standard_normal((6, 4)).astype(np.float32))
        w1.register_hook(lambda g: g.clamp(-0.1, 0.1))
        opt = lib.optim.SGD([w1, w2], lr=0.1, momentum=0.9)
        for _ in range(5):
            opt.zero_grad()
            h = (x @ w1).tanh()
            h.register_hook(lambda g: g * 0.5)
            (h @ w2).pow(2).mean().backward()
            opt.step()
        return w1.detach().numpy().copy(), w2.detach().numpy().copy()
    for m, t in zip(run(loom), run(torch)):
        np.testing.assert_allclose(m, t, rtol=1e-4, atol=1e-6)


def test_hook_errors_are_clear():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        loom.ones(2).register_hook(lambda g: g)
    w = loom.ones(2, requires_grad=True)
    w.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="changed the size"):
        (w * 2).sum().backward()
    x = loom.ones(2, requires_grad=True)
    h = x * 2
    float(h.sum())  # its segment has run: its gradient can no longer be kept
    with pytest.raises(RuntimeError, match="register_hook"):
        h.register_hook(lambda g: g)


# ---- module hooks ----

def _module_hooks(lib):
    lib.manual_seed(0)
    lin = lib.nn.Linear(3, 2)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 10))
        lin.bias.copy_(lib.tensor([0.5, -0.5]))
    log = []
    pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    post = lin.register_forward_hook(lambda m, args, out: out + 1)
    lin.register_forward_hook(lambda m, args, out: log.append(
        (type(m).__name__, args[0].detach().numpy().copy(), out.detach().numpy().copy())))
    x = lib.tensor([[1.0, 2.0, 3.0]])
    first = lin(x).detach().numpy().copy()
    pre.remove()
    post.remove()
    second = lin(x).detach().numpy().copy()
    return [first, second] + [a for entry in log for a in entry[1:]] + [len(log)]


def test_module_forward_hooks_as_torch():
    for m, t in zip(_module_hooks(loom), _module_hooks(torch)):
        np.testing.assert_allclose(m, t, rtol=1e-6)


def test_a_pre_hook_returning_one_value_replaces_the_input():
    for lib in (loom, torch):
        seq = lib.nn.Sequential(lib.nn.ReLU())
        with seq.register_forward_pre_hook(lambda m, args: -args[0]):
            np.testing.assert_allclose(seq(lib.tensor([1.0, -2.0])).numpy(), [0.0, 2.0])
        np.testing.assert_allclose(seq(lib.tensor([1.0, -2.0])).numpy(), [1.0, 0.0])


# ---- loom.compile with keyword arguments ----

def test_compiled_step_with_keyword_arguments_matches_torch():
    import gc
    gc.collect()  # no tensor of another test with hooks left (its backward would break)

    def run(lib, compile_):
        rng = np.random.default_rng(4)
        w = lib.tensor(rng.standard_normal((5, 2)).astype(np.float32), requires_grad=True)
        opt = lib.optim.Adam([w], lr=0.05)

        def step(x, y=None, scale=1.0):
            opt.zero_grad()
            loss = ((x @ w - y) ** 2).mean() * scale
            loss.backward()
            opt.step()
            return loss
        f = loom.compile(step) if compile_ else step
        losses = []
        for i in range(6):
            x = lib.tensor(rng.standard_normal((8, 5)).astype(np.float32))
            y = lib.tensor(rng.standard_normal((8, 2)).astype(np.float32))
            losses.append(float(f(x, y=y, scale=2.0) if i % 2 else f(x, scale=2.0, y=y)))
        return f, losses, w.detach().numpy().copy()
    f, mine, w = run(loom, True)
    _, theirs, tw = run(torch, False)
    np.testing.assert_allclose(mine, theirs, rtol=1e-4)
    np.testing.assert_allclose(w, tw, rtol=1e-4, atol=1e-6)
    assert "graph break" not in f.explain()
    assert len(f.entries) == 1  # keyword order does not matter


def test_keyword_tensors_are_guarded_by_shape_and_dtype():
    f = loom.compile(lambda x, y: x * 2 + y)
    a = f(loom.ones(3), y=loom.ones(3))
    b = f(loom.ones(3), y=loom.ones(2, 3))  # another shape: captured again
    c = f(loom.ones(3), y=loom.ones(3, dtype=loom.float64))
    d = f(x=loom.ones(3), y=loom.full((3,), 5.0))
    assert b.shape == (2, 3) and c.dtype is loom.float64
    np.testing.assert_allclose(a.numpy(), [3, 3, 3])
    np.testing.assert_allclose(d.numpy(), [7, 7, 7])
    assert len(f.entries) == 4
    with pytest.raises(TypeError):
        f(loom.ones(3), z=loom.ones(3))


# ---- grad_fn ----

def test_grad_fn_and_repr_of_computed_tensors():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert x.grad_fn is None and loom.ones(2).grad_fn is None
    assert y.grad_fn is not None and y.grad_fn.name().endswith("Backward0")
    assert repr(y) == f"tensor([2., 4.], grad_fn=<{y.grad_fn.name()}>)"
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    with loom.no_grad():
        assert (x * 2).grad_fn is None and repr(x * 2) == "tensor([2., 4.])"
    z = x.double() * 3
    name = z.grad_fn.name()
    assert repr(z) == f"tensor([3., 6.], dtype=loom.float64, grad_fn=<{name}>)"
    tz = torch.tensor([1.0, 2.0], requires_grad=True).double() * 3
    assert repr(tz) == "tensor([3., 6.], dtype=torch.float64, grad_fn=<MulBackward0>)"


# ---- checkpoints of nested values ----

def test_save_and_load_a_nested_checkpoint(tmp_path):
    from collections import OrderedDict
    model = loom.nn.Linear(3, 2)
    opt = loom.optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    model(loom.ones(4, 3)).sum().backward()
    opt.step()
    shared = loom.arange(4)
    ckpt = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3,
            "name": "run", "loss": 0.25, "best": None, "flags": [True, (1, 2.5)],
            "shared": [shared, shared], "nan": float("inf")}
    path = tmp_path / "ckpt.pt"
    loom.save(ckpt, str(path))
    back = loom.load(str(path))
    assert isinstance(back["model"], OrderedDict) and list(back["model"]) == ["weight", "bias"]
    for k, t in model.state_dict().items():
        np.testing.assert_array_equal(back["model"][k].numpy(), t.numpy())
    st = back["optim"]
    assert list(st["state"]) == [0, 1] and set(st["state"][0]) == {
        "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    assert st["param_groups"][0]["betas"] == (0.9, 0.999) and st["param_groups"][0]["amsgrad"]
    assert (back["epoch"], back["name"], back["loss"], back["best"]) == (3, "run", 0.25, None)
    assert back["flags"] == [True, (1, 2.5)] and back["nan"] == float("inf")
    assert back["shared"][0] is back["shared"][1] and back["shared"][0].dtype is loom.int64
    again = loom.optim.Adam(loom.nn.Linear(3, 2).parameters(), amsgrad=True)
    again.load_state_dict(back["optim"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".loom-save")]


def test_saving_an_unsupported_value_fails_and_leaves_the_old_file(tmp_path):
    path = tmp_path / "c.pt"
    loom.save({"epoch": 1}, str(path))
    before = path.read_bytes()
    with pytest.raises(TypeError, match="cannot save a builtins.set"):
        loom.save({"epoch": 2, "bad": {1, 2}}, str(path))
    with pytest.raises(TypeError):
        loom.save([torch.ones(2)], str(path))
    assert path.read_bytes() == before and loom.load(str(path)) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_a_flat_state_dict_stays_a_plain_safetensors_file(tmp_path):
    import json
    import struct
    path = tmp_path / "w.safetensors"
    loom.save({"w": loom.ones(2)}, str(path))
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert "__metadata__" not in json.loads(raw[8:8 + n])
    assert list(loom.load(str(path), map_location="cpu")) == ["w"]
