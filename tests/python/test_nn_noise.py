"""The nn functions that draw random numbers besides dropout
(alpha_dropout, feature_alpha_dropout, rrelu, gumbel_softmax) checked by
their definitions and their statistics, their eval forms against
PyTorch's; pdist against PyTorch's."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
ALPHA = 1.7580993408473766


def test_alpha_dropout_drops_to_one_value_and_keeps_mean_and_variance():
    loom.manual_seed(0)
    x = loom.randn(200, 500)
    p = 0.2
    y = F.alpha_dropout(x, p, training=True).numpy()
    a = 1 / np.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    dropped_value = -ALPHA * a + ALPHA * a * p
    kept = np.isclose(y, a * x.numpy() + ALPHA * a * p, atol=1e-5)
    dropped = np.isclose(y, dropped_value, atol=1e-6)
    assert (kept | dropped).all()
    assert abs(dropped.mean() - p) < 0.01
    assert abs(y.mean()) < 0.02 and abs(y.var() - 1) < 0.03  # N(0, 1) in, N(0, 1) out
    assert F.alpha_dropout(x, p) is x  # training=False, PyTorch's default
    m = nn.AlphaDropout(p).eval()
    assert m(x) is x


def test_feature_alpha_dropout_drops_whole_channels():
    loom.manual_seed(1)
    x = loom.ones(8, 16, 5, 5)
    y = nn.FeatureAlphaDropout(0.5)(x).numpy()
    per_channel = y.reshape(8, 16, 25)
    assert (per_channel == per_channel[:, :, :1]).all()
    assert len(np.unique(per_channel[:, :, 0].round(5))) == 2


def test_rrelu_slopes_in_training_and_eval():
    loom.manual_seed(2)
    x = loom.tensor(np.linspace(-3, 3, 601, dtype=np.float32), requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    y.sum().backward()
    xs, ys, g = x.detach().numpy(), y.detach().numpy(), x.grad.numpy()
    neg = xs < 0
    slope = ys[neg] / xs[neg]
    assert ((slope >= 0.1) & (slope < 0.3)).all() and slope.std() > 0.03
    np.testing.assert_allclose(g[neg], slope, rtol=1e-5)
    pos = xs > 0  # at 0 PyTorch's gradient is the drawn slope too
    assert (ys[~neg] == xs[~neg]).all() and (g[pos] == 1).all()
    ev = nn.RReLU(0.1, 0.3).eval()(loom.tensor(xs)).numpy()
    np.testing.assert_allclose(ev, TF.rrelu(torch.tensor(xs), 0.1, 0.3).numpy(), rtol=1e-6)


def test_gumbel_softmax_samples_the_softmax_and_is_straight_through_when_hard():
    loom.manual_seed(3)
    logits = np.array([0.0, 1.0, 2.0, -1.0], dtype=np.float32)
    x = loom.tensor(np.tile(logits, (20000, 1)))
    y = F.gumbel_softmax(x, tau=0.5).numpy()
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-5)
    freq = np.bincount(y.argmax(1), minlength=4) / 20000  # the Gumbel-max trick
    want = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(freq, want, atol=0.015)
    w = loom.tensor(np.array([[0.5, -0.2, 1.0, 0.3]], dtype=np.float32), requires_grad=True)
    hard = F.gumbel_softmax(w, hard=True)
    assert sorted(hard.detach().numpy().ravel().tolist()) == [0.0, 0.0, 0.0, 1.0]
    (hard * loom.tensor(np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32))).sum().backward()
    assert np.abs(w.grad.numpy()).sum() > 0  # the soft sample's gradient


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_pdist(p):
    x = np.random.default_rng(4).standard_normal((6, 5)).astype(np.float32)
    x[4] = x[1]  # equal rows: distance 0, gradient 0
    mine, theirs = loom.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = F.pdist(mine, p), TF.pdist(theirs, p)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
