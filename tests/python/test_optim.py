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
def test_optimizers_against_torch(make_opt):
    for mine, theirs in zip(train(loom, make_opt), train(torch, make_opt)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


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
    before = loom.stats()
    for _ in range(100):
        opt.zero_grad()
        loss = ((x @ w1).relu() @ w2 - y).pow(2).mean()
        loss.backward()
        opt.step()
    after = loom.stats()
    assert after["steps"] - before["steps"] == 100
    # one forward-and-loss segment, its backward, the optimizer: a few
    # compiles at most, however many steps
    assert after["compiles"] - before["compiles"] <= 4
    assert float(loss) < float(((x @ loom.randn(8, 16)).relu().sum()) ** 2)


def test_one_optimizer_per_step():
    a = loom.ones(2, requires_grad=True)
    b = loom.ones(2, requires_grad=True)
    opt = loom.optim.SGD([a], lr=0.1)
    (a * b).sum().backward()
    with pytest.raises(NotImplementedError, match="one optimizer"):
        opt.step()
    with pytest.raises(ValueError, match="empty"):
        loom.optim.SGD([], lr=0.1)
