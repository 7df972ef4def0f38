"""Gradients through the Python API against torch.autograd."""
import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")

rng = np.random.default_rng(11)


def pair(*shape):
    a = rng.standard_normal(shape).astype(np.float32)
    return (loom.tensor(a, requires_grad=True),
            torch.tensor(a, requires_grad=True))


def close(mine, theirs, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


def test_mlp_gradients_against_torch():
    x = rng.standard_normal((8, 5)).astype(np.float32)
    (w1, tw1), (b1, tb1), (w2, tw2) = pair(5, 7), pair(7), pair(7, 3)
    loss = ((loom.from_numpy(x) @ w1 + b1).tanh() @ w2).softmax(-1).log().mean()
    tloss = ((torch.from_numpy(x) @ tw1 + tb1).tanh() @ tw2).softmax(-1).log().mean()
    loss.backward()
    tloss.backward()
    close(loss.detach(), tloss)
    for mine, theirs in [(w1, tw1), (b1, tb1), (w2, tw2)]:
        close(mine.grad, theirs.grad)


@pytest.mark.parametrize("fn", [
    lambda m, x: (x.exp() * x.sigmoid()).sum(),
    lambda m, x: (x.relu() + x.abs() * 0.5 - x.clamp(-0.3, 0.3)).mean(),
    lambda m, x: m.logsumexp(x.reshape(3, 4), 1).sum(),
    lambda m, x: (x.reshape(3, 4).transpose(0, 1)[1:] ** 2).sum(),
    lambda m, x: m.cat([x, x * x], 0).max(),
    lambda m, x: (x[:, None] * x[None, :]).sum(),
    lambda m, x: m.where(x > 0, x, x * 0.1).sum(),
])
def test_elementwise_and_layout_gradients(fn):
    x, tx = pair(12)
    fn(loom, x).backward()
    fn(torch, tx).backward()
    close(x.grad, tx.grad)


def test_gradients_accumulate_until_zeroed():
    w, tw = pair(4)
    for _ in range(2):
        (w * w).sum().backward()
        loom.step()
        (tw * tw).sum().backward()
    close(w.grad, tw.grad)
    w.grad = None
    (w * 3).sum().backward()
    assert w.grad.tolist() == [3.0] * 4


def test_backwards_within_one_step_accumulate_once_each():
    """Two backwards in one step (two losses, no step between): .grad holds
    each call's gradient once, also when cleared between them, and an
    optimizer steps on the sum."""
    (w, tw), (v, tv) = pair(3), pair(3)
    for lib, a, b in ((loom, w, v), (torch, tw, tv)):
        (a * 10).sum().backward()
        ((a * a).sum() + (b * a).sum()).backward()
    close(w.grad, tw.grad)
    close(v.grad, tv.grad)
    w.grad = tw.grad = None
    for a, b in ((w, v), (tw, tv)):
        (a * b).sum().backward()
    close(w.grad, tw.grad)
    close(v.grad, tv.grad)
    loom.step()
    mine, theirs = pair(3)
    opts = loom.optim.SGD([mine], lr=0.1), torch.optim.SGD([theirs], lr=0.1)
    for _ in range(3):
        for p, opt in ((mine, opts[0]), (theirs, opts[1])):
            opt.zero_grad()
            (p * 10).sum().backward()
            (p * p).sum().backward()
            opt.step()
    close(mine.detach(), theirs)


def test_no_grad_and_detach_cut_the_gradient():
    w, _ = pair(3)
    with loom.no_grad():
        assert not loom.is_grad_enabled()
        y = w * 2
    assert loom.is_grad_enabled() and not y.requires_grad
    z = (w * w.detach()).sum()
    z.backward()
    np.testing.assert_allclose(w.grad.numpy(), w.detach().numpy(), rtol=1e-6)


def test_backward_errors():
    x = loom.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        x.sum().backward()
    with pytest.raises(RuntimeError, match="leaf"):
        (loom.ones(2, requires_grad=True) * 2).requires_grad = False
    with pytest.raises(RuntimeError, match="floating point"):
        loom.tensor([1, 2]).requires_grad = True
    with pytest.raises(RuntimeError, match="grad"):
        loom.ones(2, requires_grad=True).numpy()


def test_functional_grad_against_torch():
    x = rng.standard_normal(5).astype(np.float32)
    w = rng.standard_normal(5).astype(np.float32)

    def f(lib):
        return lambda a, b: (a.tanh() * b).sum() + (a * a).sum()

    mine = loom.grad(f(loom), argnums=(0, 1))(loom.tensor(x), loom.tensor(w))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    f(torch)(tx, tw).backward()
    np.testing.assert_allclose(mine[0].numpy(), tx.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(mine[1].numpy(), tw.grad.numpy(), rtol=1e-5)
    p = loom.ones(5, requires_grad=True)
    g = loom.grad(lambda a: (a * p).sum())(loom.tensor(x))
    assert g.tolist() == [1.0] * 5 and p.grad is None


def test_a_numpy_round_trip_inside_a_computation():
    w, tw = pair(4)
    h = (w * 2).tanh()
    host = np.sort(h.detach().numpy())[::-1].copy()  # arbitrary Python on the values
    loss = (h * loom.from_numpy(host)).sum()
    loss.backward()
    th = (tw * 2).tanh()
    (th * torch.from_numpy(np.sort(th.detach().numpy())[::-1].copy())).sum().backward()
    close(w.grad, tw.grad)


def test_each_branch_compiles_once():
    loom.set_compile_mode("wait")
    try:
        x = loom.tensor([1.0, 2.0, 3.0])
        before = loom.stats()["compiles"]
        seen = []
        for i in range(20):
            s = (x * (1 if i % 2 else -1)).sum()
            y = x.exp() if s > 0 else x.neg()
            np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()) if i % 2 else -x.numpy())
            seen.append(loom.stats()["compiles"] - before)
        # the condition's segment (one per sign of the factor) and each
        # branch's, plus, in the first step, the read of s when the read of y
        # ends the step (the condition's segment keeps s from then on)
        assert seen[1] <= 5 and seen[-1] == seen[1]
    finally:
        loom.set_compile_mode("tiered")


def test_manual_update_in_place_under_no_grad():
    """The hand-written SGD of PyTorch's tutorials: p -= lr * p.grad under
    no_grad changes each parameter itself (the module's too), and
    zero_grad(set_to_none=False) leaves zeros."""
    results = []
    for lib in (loom, torch):
        lib.manual_seed(0)
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        orig = w
        m = lib.nn.Linear(3, 2)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
            m.bias.zero_()
        for _ in range(3):
            ((w * w).sum() + m(lib.ones(4, 3)).pow(2).sum()).backward()
            with lib.no_grad():
                w -= 0.1 * w.grad
                for p in m.parameters():
                    p -= 0.01 * p.grad
            w.grad = None
            m.zero_grad(set_to_none=False)
        assert w is orig and w.requires_grad
        assert m.bias.grad.tolist() == [0.0, 0.0]
        results.append([w.tolist(), m.weight.tolist(), m.bias.tolist()])
    np.testing.assert_allclose(np.concatenate([np.ravel(r) for r in results[0]]),
                               np.concatenate([np.ravel(r) for r in results[1]]), rtol=1e-5)
    w = loom.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w += 1


def test_tensor_of_an_ended_step_warns():
    """A result that required grad, used after its step ended (a GAN's fake
    batch after the discriminator's optimizer step): gradients cannot flow
    back through it, and a warning naming the user's line says so; a
    detached one is quiet."""
    import warnings
    g = loom.tensor([1.0, 2.0], requires_grad=True)
    d = loom.tensor([0.5, 0.5], requires_grad=True)
    fake = g * 3
    (fake.detach() * d).sum().backward()
    loom.step()
    with pytest.warns(UserWarning, match="computed before the step ended") as seen:
        (fake * d).sum().backward()
    assert seen[0].filename == __file__
    loom.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (fake.detach() * d).sum().backward()
    loom.step()


def _retained(m, x, w, order):
    """h = x @ w retained before its first use or after it (same segment),
    b a retained result of a later op, the loss retained too."""
    h = x @ w
    if order == "before":
        h.retain_grad()
    a = h.relu()
    if order == "after_use":
        h.retain_grad()
    b = (a * h).sum(1)
    b.retain_grad()
    loss = (b * b).mean() + h.sum()
    loss.retain_grad()
    loss.backward()
    return h, b, loss


@pytest.mark.parametrize("order", ["before", "after_use"])
def test_retain_grad_against_torch(order):
    x = rng.standard_normal((5, 4)).astype(np.float32)
    w, tw = pair(4, 3)
    mine = _retained(loom, loom.from_numpy(x), w, order)
    theirs = _retained(torch, torch.from_numpy(x), tw, order)
    for m, t in zip(mine, theirs):
        assert m.retains_grad and m.grad is not None
        close(m.grad, t.grad)
    close(w.grad, tw.grad)


def test_retained_gradient_across_a_read_and_two_backwards():
    """A read between the uses (a segment boundary) and a second backward,
    whose gradient adds to .grad, as torch's with retain_graph."""
    x = rng.standard_normal((5, 4)).astype(np.float32)
    w, tw = pair(4, 3)
    out = []
    for m, xx, ww in ((loom, loom.from_numpy(x), w), (torch, torch.from_numpy(x), tw)):
        h = xx @ ww
        h.retain_grad()
        a = h * 2
        float(a.sum())  # runs what is recorded so far
        loss = (a * h.tanh()).sum()
        loss.backward(retain_graph=True)
        (h * 3).sum().backward()
        out.append(h.grad)
    close(*out)


def test_retain_grad_cases_as_torch():
    leaf = loom.tensor([1.0, 2.0], requires_grad=True)
    leaf.retain_grad()  # a leaf's .grad is filled anyway
    (leaf * leaf).sum().backward()
    assert leaf.grad.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        loom.ones(2).retain_grad()
    w, _ = pair(3)
    h = w * 2
    with pytest.warns(UserWarning, match="not a leaf"):
        assert h.grad is None
    h.retain_grad()
    (w * w).sum().backward()  # does not reach h
    assert h.grad is None
    h2 = w * 3
    float((h2 * h2).sum())  # h2 read and run inside that part of the step
    with pytest.raises(RuntimeError, match="before using the tensor"):
        h2.retain_grad()


def test_backward_with_a_gradient_against_torch():
    x = rng.standard_normal((5, 4)).astype(np.float32)
    g = rng.standard_normal((5, 3)).astype(np.float32)
    w, tw = pair(4, 3)
    (loom.from_numpy(x) @ w).tanh().backward(loom.from_numpy(g))
    (torch.from_numpy(x) @ tw).tanh().backward(torch.from_numpy(g))
    close(w.grad, tw.grad)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        (w * 2).backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (w * 2).backward(loom.ones(4))


def test_backward_of_a_sum_over_a_batch_that_varies():
    """(h * 3).sum() keeps no forward value, yet its backward spreads the
    gradient over h's batch, a symbolic size once batches vary: that
    segment saves h for its size (the backward once failed: symbol 's0'
    has no value)."""
    rng2 = np.random.default_rng(3)
    w0 = rng2.standard_normal((4, 3)).astype(np.float32)
    w, tw = loom.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    for n in (5, 6, 7, 9):
        x = rng2.standard_normal((n, 4)).astype(np.float32)
        for m, ww in ((loom, w), (torch, tw)):
            h = m.from_numpy(x) @ ww
            float(h.sum())
            (h * 3).sum().backward()
        close(w.grad, tw.grad)
        loom.step()


def _aux_model(lib):
    """A head the loss reads and an auxiliary head it does not (the aux
    head's output is computed in the step, then left unused)."""
    lib.manual_seed(3)
    w1 = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), requires_grad=True)
    w2 = lib.tensor(np.linspace(1, 2, 12, dtype=np.float32).reshape(4, 3), requires_grad=True)
    return w1, w2


@pytest.mark.parametrize("compiled", [False, True])
def test_a_parameter_the_loss_does_not_reach_keeps_no_grad_and_is_not_updated(compiled):
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    result = {}
    for lib in (torch, loom):
        w1, w2 = _aux_model(lib)
        opt = lib.optim.AdamW([w1, w2], lr=0.1, weight_decay=0.5)

        def step(xb):
            aux = (xb @ w2).relu()  # computed, never part of the loss
            loss = ((xb @ w1) ** 2).sum() + 0 * aux.detach().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        if compiled and lib is loom:
            step = loom.compile(step)
        for _ in range(2):
            step(lib.tensor(x))
        result[lib.__name__] = (w1.detach().numpy().copy(), w2.detach().numpy().copy(), w2.grad)
    (a1, a2, ag), (b1, b2, bg) = result["loom"], result["torch"]
    assert ag is None and bg is None
    np.testing.assert_array_equal(a2, b2)
    np.testing.assert_allclose(a1, b1, rtol=1e-5, atol=1e-6)


def test_through_an_integer_cast_or_argmax_alone_a_parameter_is_not_reached():
    w = loom.tensor([0.5, -1.0, 2.0], requires_grad=True)
    v = loom.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (v * w.long().float()).sum() + v[w.argmax()]
    loss.backward()
    assert w.grad is None
    np.testing.assert_array_equal(v.grad.numpy(), [0, -1 + 0, 2 + 1])


def test_a_compiled_step_follows_a_parameter_frozen_or_unfrozen_between_calls():
    def run(lib, compiled):
        w = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        b = lib.tensor([0.5, -0.5], requires_grad=True)
        opt = lib.optim.SGD([w, b], lr=0.1)

        def step(x):
            loss = ((x @ w + b) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        if compiled:
            step = loom.compile(step)
        x = lib.tensor([[1.0, -1.0]])
        step(x)
        w.requires_grad_(False)
        step(x)
        frozen = w.detach().numpy().copy()
        step(x)
        w.requires_grad_(True)
        step(x)
        return frozen, w.detach().numpy().copy(), b.detach().numpy().copy()
    want = run(torch, False)
    for got in (run(loom, False), run(loom, True)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_nan_makes_the_two_norm_and_the_clipped_total_nan():
    for lib in (loom, torch):
        x = lib.tensor([[3.0, 4.0], [float("nan"), 1.0]])
        assert np.isnan(float(x.norm())) and np.isnan(x.norm(dim=1).numpy()[1])
        assert np.isnan(lib.nn.functional.normalize(x, dim=1).numpy()[1]).all()
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        (w * lib.tensor([float("nan"), 1.0])).sum().backward()
        with pytest.raises(RuntimeError, match="non-finite"):
            lib.nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True)
    assert float(loom.tensor([0.0, 0.0]).norm()) == 0.0


def test_binary_cross_entropy_gradient_at_saturated_probabilities():
    def grads(lib):
        z = lib.tensor([20.0, -5.0, 0.3], requires_grad=True)
        p = lib.tensor([1.0, 0.0, 0.3], requires_grad=True)
        t = lib.tensor([1.0, 0.0, 0.0])
        F = lib.nn.functional
        loss = F.binary_cross_entropy(z.sigmoid(), t) + F.binary_cross_entropy(p, t)
        loss.backward()
        return float(loss), z.grad.numpy(), p.grad.numpy()
    mine, theirs = grads(loom), grads(torch)
    assert np.isfinite(mine[1]).all() and np.isfinite(mine[2]).all()
    np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-5)
    np.testing.assert_allclose(mine[1], theirs[1], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(mine[2], theirs[2], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fn", ["asin", "acos"])
def test_asin_and_acos_gradients_at_the_ends_of_their_domain(fn):
    def grad(lib):
        x = lib.tensor([1.0, -1.0, 0.5], requires_grad=True)
        getattr(x, fn)().sum().backward()
        return x.grad.numpy()
    np.testing.assert_allclose(grad(loom), grad(torch), rtol=1e-6)


def test_an_assigned_grad_of_another_size_or_dtype_is_refused():
    for lib in (loom, torch):
        w = lib.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="different size"):
            w.grad = lib.zeros(4)
        with pytest.raises(RuntimeError, match="different type"):
            w.grad = lib.zeros(3, dtype=lib.float64)
        w.grad = lib.ones(3)
        assert w.grad.tolist() == [1.0, 1.0, 1.0]


def test_functional_grad_as_functorch():
    from functorch import grad as tgrad
    x0 = [1.0, 2.0, 3.0]
    cases = [
        (lambda L: (lambda x, y: (x * 2).sum()), (0, 1), lambda L: (L.tensor(x0), L.tensor(x0)), {}),
        (lambda L: (lambda x: L.tensor(3.0)), 0, lambda L: (L.tensor(x0),), {}),
        (lambda L: (lambda x, s=1.0: (x * x * s).sum()), 0, lambda L: (L.tensor(x0),), {"s": 3.0}),
    ]
    for make_fn, argnums, make_args, kwargs in cases:
        mine = loom.grad(make_fn(loom), argnums)(*make_args(loom), **kwargs)
        theirs = tgrad(make_fn(torch), argnums)(*make_args(torch), **kwargs)
        for a, b in zip(mine if isinstance(mine, tuple) else (mine,),
                        theirs if isinstance(theirs, tuple) else (theirs,)):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(RuntimeError, match="argnums 2"):
        loom.grad(lambda x, y: (x * y).sum(), argnums=2)(loom.ones(2), loom.ones(2))
    with pytest.raises(TypeError, match="float Tensor"):
        loom.grad(lambda x: x * x)(2.0)
    with pytest.raises(NotImplementedError, match="grad of a grad"):
        loom.grad(loom.grad(lambda x: x ** 3))(loom.tensor(2.0))


def test_no_grad_on_a_generator_function_covers_its_body():
    for lib in (loom, torch):
        w = lib.ones(2, requires_grad=True)

        @lib.no_grad()
        def sample(n):
            for _ in range(n):
                yield lib.is_grad_enabled(), (w * 2).requires_grad

        assert list(sample(2)) == [(False, False), (False, False)]
        assert lib.is_grad_enabled()


def test_a_nan_extreme_sends_its_gradient_to_the_nans():
    # (PyTorch's amax over a dim divides by the count of x == NaN, none: NaN)
    for data, fn in (([1.0, float("nan"), float("nan")], "max"), ([1.0, float("nan"), 0.0], "min"),
                     ([float("nan"), -1.0, 2.0], "relu")):
        def grad(lib):
            x = lib.tensor(data, requires_grad=True)
            y = getattr(x, fn)()
            y.sum().backward()
            return x.grad.numpy()
        np.testing.assert_array_equal(grad(loom), grad(torch))


def test_a_step_with_more_than_64_parameters_trains_as_torch():
    # one backward segment with 71 gradients, the first a matmul's weight
    # whose gradient is deferred: the 65th must not read that choice
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 8)).astype(np.float32)
    biases = [rng.standard_normal(8).astype(np.float32) for _ in range(70)]
    x = rng.standard_normal((4, 8)).astype(np.float32)
    grads = []
    for m in (torch, loom):
        w = m.tensor(weight, requires_grad=True)
        b = [m.tensor(v, requires_grad=True) for v in biases]
        for _ in range(3):
            y = m.tensor(x) @ w
            for v in b:
                y = y + v
            (y * y).sum().backward()
        grads.append([w.grad.numpy()] + [v.grad.numpy() for v in b])
    for theirs, mine in zip(*grads):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-4)
