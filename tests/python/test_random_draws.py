"""The random draws beyond rand/randn/randint: bernoulli, normal, poisson,
randint_like, the in-place fills (bernoulli_, exponential_, geometric_,
cauchy_, log_normal_, random_), the generator's state and seeds, checked
by their definitions and statistics (10^5 draws: bounds of about five
standard errors)."""
import numpy as np
import pytest

import loom

N = 100000


def test_state_and_seeds_replay_draws():
    loom.manual_seed(7)
    assert loom.initial_seed() == 7
    first = loom.rand(5).tolist()
    state = loom.get_rng_state()
    second = loom.rand(5).tolist()
    loom.set_rng_state(state)
    assert loom.rand(5).tolist() == second
    loom.manual_seed(7)
    assert loom.rand(5).tolist() == first
    s = loom.seed()
    assert loom.initial_seed() == s
    g = loom.Generator().manual_seed(3)
    assert g.initial_seed() == 3
    a = loom.randn(4, generator=g).tolist()
    assert loom.randn(4, generator=loom.Generator().manual_seed(3)).tolist() == a


def test_bernoulli_normal_poisson():
    loom.manual_seed(0)
    p = loom.full((N,), 0.3)
    b = loom.bernoulli(p)
    assert b.dtype == p.dtype and set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(float(b.mean()) - 0.3) < 5 * (0.3 * 0.7 / N) ** 0.5
    assert float(loom.bernoulli(loom.zeros(10), p=1.0).sum()) == 10
    x = loom.normal(loom.full((N,), 1.5), loom.full((N,), 2.0))
    assert abs(float(x.mean()) - 1.5) < 5 * 2 / N ** 0.5
    assert abs(float(x.std()) - 2.0) < 0.05
    assert loom.normal(0.0, 1.0, (2, 3)).shape == (2, 3)
    with pytest.raises(TypeError, match="need a size"):
        loom.normal(0.0, 1.0)
    mean = loom.zeros(3, requires_grad=True)
    assert not loom.normal(mean, 1.0).requires_grad  # as PyTorch's: no gradient
    k = loom.poisson(loom.full((N,), 4.0))
    assert (k.numpy() == np.round(k.numpy())).all() and (k.numpy() >= 0).all()
    assert abs(float(k.mean()) - 4.0) < 5 * (4.0 / N) ** 0.5
    r = loom.randint_like(loom.zeros(2, 3, dtype=loom.int64), 2, 5)
    assert r.dtype == loom.int64 and r.shape == (2, 3)
    assert set(np.unique(r.numpy())) <= {2, 3, 4}


def test_in_place_fills():
    loom.manual_seed(1)
    t = loom.zeros(N)
    assert t.exponential_(2.0) is t
    assert abs(float(t.mean()) - 0.5) < 5 * 0.5 / N ** 0.5 and float(t.min()) >= 0
    t.bernoulli_(0.25)
    assert abs(float(t.mean()) - 0.25) < 5 * (0.25 * 0.75 / N) ** 0.5
    t.geometric_(0.5)
    assert float(t.min()) >= 1 and abs(float(t.mean()) - 2.0) < 0.05
    t.log_normal_(0.0, 0.25)
    assert abs(float(t.log().mean())) < 5 * 0.25 / N ** 0.5
    t.cauchy_(3.0, 0.5)
    assert abs(float(t.median()) - 3.0) < 0.02
    i = loom.zeros(N, dtype=loom.int64)
    i.random_(3, 7)
    assert set(np.unique(i.numpy())) == {3, 4, 5, 6}
    i.random_(4)
    assert set(np.unique(i.numpy())) == {0, 1, 2, 3}


def test_inference_mode_is_reported():
    assert not loom.is_inference_mode_enabled()
    with loom.inference_mode():
        assert loom.is_inference_mode_enabled() and not loom.is_grad_enabled()
        with loom.inference_mode(False):
            assert loom.is_inference_mode_enabled()
    assert not loom.is_inference_mode_enabled()
