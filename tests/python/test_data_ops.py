"""unique, unique_consecutive, bincount, searchsorted, bucketize, histc,
multinomial, kthvalue, mode, nansum, nanmean, count_nonzero, argwhere and
isin against PyTorch: values, result dtypes, gradients, zero-size inputs,
NaN, refusals; which of them stay lazy (no graph break); multinomial's
frequencies against the expected ones."""
import math

import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")

NAN = float("nan")
R = np.random.default_rng(7)


def both(a, dtype=None, requires_grad=False):
    a = np.asarray(a) if dtype is None else np.asarray(a, dtype)
    return (loom.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def same(mine, theirs):
    """Equal values (NaN where NaN), shapes and dtypes, item by item."""
    if isinstance(theirs, (tuple, list)):
        assert isinstance(mine, tuple) and len(mine) == len(theirs)
        for m, t in zip(mine, theirs):
            same(m, t)
        return
    assert isinstance(mine, loom.Tensor)
    t = theirs.detach()
    assert mine.dtype.name == str(t.dtype).replace("torch.", ""), (mine.dtype, t.dtype)
    assert tuple(mine.shape) == tuple(t.shape)
    np.testing.assert_allclose(mine.detach().numpy(), t.numpy(), rtol=1e-6, atol=1e-6)


def raises_as_torch(mine, theirs):
    """mine raises the exception type theirs raises, with torch's message."""
    with pytest.raises(Exception) as t:
        theirs()
    with pytest.raises(type(t.value)) as m:
        mine()
    assert str(m.value) == str(t.value)


def breaks(fn, *args):
    """The graph breaks fn(*args) makes (a lazy result stays lazy)."""
    return loom.explain(fn, *args).breaks


# ---- unique, unique_consecutive ----

SMALL_INTS = R.integers(0, 4, (5, 6))

UNIQUE_CASES = [
    (SMALL_INTS, {}), (SMALL_INTS.astype(np.float32), {"return_inverse": True}),
    (SMALL_INTS, {"return_counts": True}),
    (SMALL_INTS, {"return_inverse": True, "return_counts": True}),
    (SMALL_INTS % 2, {"dim": 0, "return_inverse": True, "return_counts": True}),
    (SMALL_INTS % 2, {"dim": 1, "return_inverse": True, "return_counts": True}),
    (SMALL_INTS.astype(np.float64), {"dim": -1, "return_counts": True}),
    (SMALL_INTS > 1, {"return_inverse": True}), (np.float32(2.5), {"return_inverse": True}),
    (np.zeros(0, np.float32), {"return_inverse": True, "return_counts": True}),
    (np.zeros((0, 3), np.float32), {"dim": 0, "return_inverse": True, "return_counts": True}),
    (np.array([-0.0, 0.0, 1.5, -2.0], np.float32), {"return_counts": True}),
]


@pytest.mark.parametrize("k", range(len(UNIQUE_CASES)))
def test_unique_matches_torch(k):
    a, kw = UNIQUE_CASES[k]
    x, tx = both(a)
    same(loom.unique(x, **kw), torch.unique(tx, **kw))
    same(x.unique(**kw), tx.unique(**kw))


@pytest.mark.parametrize("k", range(len(UNIQUE_CASES)))
def test_unique_consecutive_matches_torch(k):
    a, kw = UNIQUE_CASES[k]
    a = np.sort(a, axis=None).reshape(np.shape(a)) if k % 2 else a  # runs, and none
    x, tx = both(a)
    same(loom.unique_consecutive(x, **kw), torch.unique_consecutive(tx, **kw))
    same(x.unique_consecutive(**kw), tx.unique_consecutive(**kw))


def test_unique_unsorted_has_the_same_values():
    x, tx = both([3, 1, 2, 3, 1])
    assert sorted(loom.unique(x, sorted=False).tolist()) == \
        sorted(torch.unique(tx, sorted=False).tolist())


def test_unique_nan_is_a_value_of_its_own():
    x, tx = both(np.array([1.0, NAN, 2.0, NAN, 1.0], np.float32))
    values, inverse, counts = loom.unique(x, return_inverse=True, return_counts=True)
    same(values, torch.unique(tx))
    # each element's value, NaN its own (torch's inverse and counts of NaN differ)
    np.testing.assert_array_equal(values.numpy()[inverse.numpy()], x.numpy())
    assert counts.tolist() == [2, 1, 1, 1]
    same(loom.unique_consecutive(x), torch.unique_consecutive(tx))


def test_unique_of_a_lazy_value_and_its_inverse_rebuilds_it():
    a = R.integers(-3, 3, (4, 5))
    x = loom.tensor(a) * 2  # lazy: read at the call
    values, inverse = loom.unique(x, return_inverse=True)
    np.testing.assert_array_equal(values.numpy()[inverse.numpy()], 2 * a)
    rows, inverse = loom.unique(x, dim=1, return_inverse=True)
    np.testing.assert_array_equal(rows.numpy()[:, inverse.numpy()], 2 * a)


def test_unique_refusals_match_torch():
    for a, kw in [(np.zeros((2, 0)), {"dim": 0}), (np.zeros((0, 0)), {"dim": 0}),
                  (np.zeros((2, 3)), {"dim": 2}), (np.zeros((2, 3)), {"dim": -3}),
                  (np.float32(5.0), {"dim": 0})]:
        x, tx = both(a)
        raises_as_torch(lambda: loom.unique(x, **kw), lambda: torch.unique(tx, **kw))
        raises_as_torch(lambda: loom.unique_consecutive(x, **kw),
                        lambda: torch.unique_consecutive(tx, **kw))
    with pytest.raises(TypeError):
        loom.unique([1, 2])


# ---- bincount ----

BINCOUNT_CASES = [
    ([1, 3, 1], np.int64, None, 0), ([1, 3, 1], np.int32, None, 6), ([1, 3, 1], np.int8, None, 2),
    ([1, 3, 1], np.int64, np.array([0.5, 1.0, 2.0], np.float32), 0),
    ([1, 3, 1], np.int64, np.array([0.5, 1.0, 2.0], np.float64), 5),
    ([1, 3, 1], np.int64, np.array([1, 2, 3]), 0),
    ([1, 3, 1], np.int64, np.array([True, False, True]), 0),
    ([], np.int64, None, 0), ([], np.int64, None, 3), ([], np.int64, np.zeros(0, np.float32), 2),
    (list(R.integers(0, 50, 300)), np.int64, R.random(300).astype(np.float32), 10),
]


@pytest.mark.parametrize("k", range(len(BINCOUNT_CASES)))
def test_bincount_matches_torch(k):
    a, dtype, w, minlength = BINCOUNT_CASES[k]
    x, tx = both(a, dtype)
    wl, wt = (None, None) if w is None else both(w)
    same(loom.bincount(x, wl, minlength), torch.bincount(tx, wt, minlength))
    same(x.bincount(wl, minlength=minlength), tx.bincount(wt, minlength=minlength))


def test_bincount_refusals_match_torch():
    for a, kw in [([1, -3, 1], {}), ([1.0, 3.0], {}), ([[1, 3]], {}), ([True, False], {}),
                  ([1, 3], {"minlength": -1}), ([1, 3], {"weights": [1.0]})]:
        x, tx = both(a)
        if "weights" in kw:
            w = kw["weights"]
            kw, tkw = {"weights": loom.tensor(w)}, {"weights": torch.tensor(w)}
        else:
            tkw = kw
        raises_as_torch(lambda: loom.bincount(x, **kw), lambda: torch.bincount(tx, **tkw))


# ---- searchsorted, bucketize ----

SEQ = np.sort(R.integers(0, 10, 12)).astype(np.float32)  # with repeats
VALUES = np.array([[-1, 0, 3, 3.5, 9, 10], [NAN, math.inf, -math.inf, 5, 2, 7]], np.float32)


@pytest.mark.parametrize("kw", [{}, {"right": True}, {"side": "right"}, {"side": "left"},
                                {"out_int32": True}, {"right": True, "side": "right"}])
def test_searchsorted_matches_torch(kw):
    s, ts = both(SEQ)
    v, tv = both(VALUES)
    same(loom.searchsorted(s, v, **kw), torch.searchsorted(ts, tv, **kw))
    same(loom.searchsorted(s, 3, **kw), torch.searchsorted(ts, 3, **kw))
    same(loom.searchsorted(s, 3.5, **kw), torch.searchsorted(ts, 3.5, **kw))


def test_searchsorted_batched_sorter_and_mixed_dtypes_match_torch():
    seq = np.sort(R.integers(0, 10, (2, 3, 7)), axis=-1)
    values = R.integers(-1, 11, (2, 3, 4))
    s, ts = both(seq)
    v, tv = both(values)
    for right in (False, True):
        same(loom.searchsorted(s, v, right=right), torch.searchsorted(ts, tv, right=right))
        same(loom.searchsorted(s, v.float()), torch.searchsorted(ts, tv.float()))
    shuffled = np.array([5.0, 1.0, 3.0, 3.0, 0.0], np.float32)
    order = np.argsort(shuffled, kind="stable")
    s, ts = both(shuffled)
    o, to = both(order)
    v, tv = both(np.array([3.0, 0.5, 6.0, -1.0], np.float32))
    for side in ("left", "right"):
        same(loom.searchsorted(s, v, side=side, sorter=o),
             torch.searchsorted(ts, tv, side=side, sorter=to))


def test_searchsorted_zero_size():
    for seq, values in [(np.zeros(0, np.float32), [3.0, 1.0]),
                        (SEQ, np.zeros(0, np.float32)),
                        (np.zeros((0, 4), np.float32), np.zeros((0, 2), np.float32))]:
        s, ts = both(seq)
        v, tv = both(values, np.float32)
        same(loom.searchsorted(s, v), torch.searchsorted(ts, tv))


def test_searchsorted_refusals_match_torch():
    s1, t1 = both([1.0, 3.0, 5.0])
    s2, t2 = both([[1.0, 3.0], [2.0, 4.0]])
    v1, u1 = both([3.0, 1.0])
    v2, u2 = both([[3.0]])
    cases = [
        (lambda: loom.searchsorted(s1, v1, side="right", right=False), None),
        (lambda: loom.searchsorted(s1, v1, side="left", right=True),
         lambda: torch.searchsorted(t1, u1, side="left", right=True)),
        (lambda: loom.searchsorted(s1, v1, side="middle"),
         lambda: torch.searchsorted(t1, u1, side="middle")),
        (lambda: loom.searchsorted(s2, v2), lambda: torch.searchsorted(t2, u2)),
        (lambda: loom.searchsorted(s2, v1), lambda: torch.searchsorted(t2, u1)),
        (lambda: loom.searchsorted(s2, 3.0), lambda: torch.searchsorted(t2, 3.0)),
        (lambda: loom.searchsorted(loom.tensor(1.0), v1),
         lambda: torch.searchsorted(torch.tensor(1.0), u1)),
        (lambda: loom.searchsorted(s1, v1, sorter=loom.tensor([1, 2])),
         lambda: torch.searchsorted(t1, u1, sorter=torch.tensor([1, 2]))),
        (lambda: loom.searchsorted(s1, v1, sorter=loom.tensor([1.0, 2.0, 0.0])),
         lambda: torch.searchsorted(t1, u1, sorter=torch.tensor([1.0, 2.0, 0.0]))),
        (lambda: loom.bucketize(v1, s2), lambda: torch.bucketize(u1, t2)),
    ]
    for mine, theirs in cases:
        if theirs is None:
            mine()  # side="right", right=False agree: no error
        else:
            raises_as_torch(mine, theirs)
    with pytest.raises(RuntimeError, match="sorter index out of range"):
        loom.searchsorted(s1, v1, sorter=loom.tensor([1, 2, 5]))
    with pytest.raises(TypeError):
        loom.searchsorted([1.0, 2.0], v1)
    with pytest.raises(TypeError):
        loom.searchsorted(s1, [1.0])


@pytest.mark.parametrize("kw", [{}, {"right": True}, {"out_int32": True}])
def test_bucketize_matches_torch(kw):
    b, tb = both(SEQ)
    v, tv = both(VALUES)
    same(loom.bucketize(v, b, **kw), torch.bucketize(tv, tb, **kw))
    same(loom.bucketize(3.0, b, **kw), torch.bucketize(3.0, tb, **kw))
    same(loom.bucketize(loom.tensor(3), b, **kw), torch.bucketize(torch.tensor(3), tb, **kw))


def test_searchsorted_stays_lazy():
    s = loom.tensor(SEQ)
    v = loom.tensor(VALUES)

    def fn():
        out = loom.searchsorted(s * 1, v + 0, right=True)
        assert out._lazy
        return loom.bucketize(v * 2, s)
    assert breaks(fn) == []


# ---- histc ----

HISTC_CASES = [
    (R.normal(size=200).astype(np.float32), {"bins": 10}),
    (R.normal(size=200), {"bins": 7, "min": -1, "max": 1}),
    (R.uniform(0, 1, (4, 25)).astype(np.float32), {"bins": 5, "min": 0.0, "max": 1.0}),
    (np.array([0.1, 0.2, 0.3, 0.7, 1.0], np.float32), {"bins": 10, "min": 0.1, "max": 1.0}),
    (np.array([1, 2, 1, 4], np.float32), {"bins": 4}),
    (np.array([2, 2], np.float32), {"bins": 4}),
    (np.array([1, 2], np.float32), {"bins": 3, "min": 2, "max": 2}),
    (np.zeros(0, np.float32), {"bins": 4}),
    (np.array([1, 2, NAN, -1, 9], np.float32), {"bins": 4, "min": 0, "max": 3}),
    (R.integers(-3, 4, 50).astype(np.float32), {"bins": 6, "min": -3, "max": 3}),
]


@pytest.mark.parametrize("k", range(len(HISTC_CASES)))
def test_histc_matches_torch(k):
    a, kw = HISTC_CASES[k]
    x, tx = both(a)
    same(loom.histc(x, **kw), torch.histc(tx, **kw))
    same(x.histc(**kw), tx.histc(**kw))


def test_histc_refusals_match_torch():
    for a, kw in [([1, 2], {}), ([1.0, 2.0, math.inf], {}), ([1.0, 2.0], {"bins": 0}),
                  ([1.0, 2.0], {"min": 3, "max": 1}), ([1.0, 2.0], {"min": NAN, "max": 2}),
                  ([1.0, 2.0], {"min": 0, "max": math.inf})]:
        x, tx = both(a)
        raises_as_torch(lambda: loom.histc(x, **kw), lambda: torch.histc(tx, **kw))


def test_histc_with_a_range_stays_lazy():
    x = loom.tensor(R.normal(size=50).astype(np.float32))
    assert breaks(lambda: loom.histc(x * 2, bins=5, min=-1, max=1)) == []


# ---- multinomial ----

P = np.array([0.1, 0.2, 0.0, 0.3, 0.4])


def frequencies(samples, n):
    return np.bincount(samples.reshape(-1), minlength=n) / samples.size


def test_multinomial_with_replacement_frequencies():
    loom.manual_seed(11)
    draws = loom.multinomial(loom.tensor(P * 3, dtype=loom.float32), 20000, replacement=True)
    assert draws.dtype is loom.int64 and tuple(draws.shape) == (20000,)
    f = frequencies(draws.numpy(), 5)
    assert f[2] == 0  # weight 0: never drawn
    # about 6 standard deviations (at most 0.0035): fails for a wrong law
    np.testing.assert_allclose(f, P, atol=0.02)


def test_multinomial_without_replacement_frequencies():
    """Two draws without replacement: the first as P, the second
    P(j) = sum over i != j of P(i) P(j) / (1 - P(i))."""
    loom.manual_seed(12)
    rows = loom.tensor(np.tile(P, (10000, 1)), dtype=loom.float32)
    draws = loom.multinomial(rows, 2).numpy()
    assert draws.shape == (10000, 2) and np.all(draws[:, 0] != draws[:, 1])
    second = np.array([sum(P[i] * P[j] / (1 - P[i]) for i in range(5) if i != j)
                       for j in range(5)])
    np.testing.assert_allclose(frequencies(draws[:, 0], 5), P, atol=0.025)
    np.testing.assert_allclose(frequencies(draws[:, 1], 5), second, atol=0.025)
    # every category once: the zero weight last
    full = loom.multinomial(loom.tensor(P, dtype=loom.float32), 5).numpy()
    assert sorted(full.tolist()) == [0, 1, 2, 3, 4] and full[-1] == 2



def test_multinomial_rows_seed_and_generator():
    p = loom.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert loom.multinomial(p, 3, True).tolist() == [[1, 1, 1], [0, 0, 0]]
    assert p.multinomial(1).tolist() == [[1], [0]]
    w = loom.tensor(R.random(8).astype(np.float32))
    loom.manual_seed(5)
    first = loom.multinomial(w, 6).tolist()
    loom.manual_seed(5)
    assert loom.multinomial(w, 6).tolist() == first
    g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
    assert loom.multinomial(w, 4, True, generator=g1).tolist() == \
        loom.multinomial(w, 4, True, generator=g2).tolist()
    with pytest.raises(TypeError, match="generator"):
        loom.multinomial(w, 2, generator=9)
    same(loom.multinomial(loom.ones(0, 3), 2), torch.multinomial(torch.ones(0, 3), 2))


def test_multinomial_refusals_match_torch():
    cases = [([1.0, 2.0, 0.0], (4,)), ([1.0, 2.0, 0.0], (0,)), ([1.0, 2.0, 0.0], (-1,)),
             ([1, 2, 0], (1,)), ([1.0, -2.0, 0.0], (1,)), ([1.0, -2.0, 0.0], (2, True)),
             ([1.0, NAN, 0.0], (1,)), ([1.0, NAN, 0.0], (2, True)),
             ([1.0, math.inf, 0.0], (2, True)), ([0.0, 0.0], (1,)), ([0.0, 0.0], (2, True)),
             ([[0.0, 0.0], [1.0, 1.0]], (2, True)), (1.0, (1,)), (np.ones((2, 2, 2)), (1,)),
             (np.ones((2, 0)), (1,)), ([1.0, 1.0], (1.0,))]
    for a, args in cases:
        x, tx = both(a)
        if x.dtype is loom.float64:
            x, tx = x.float(), tx.float()
        raises_as_torch(lambda: loom.multinomial(x, *args), lambda: torch.multinomial(tx, *args))


# ---- kthvalue, mode ----

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False)])
def test_kthvalue_matches_torch(dtype, dim, keepdim):
    a = R.permutation(60).reshape(3, 4, 5).astype(dtype)  # distinct: one answer
    x, tx = both(a)
    for k in (1, 3):
        same(loom.kthvalue(x, k, dim, keepdim), torch.kthvalue(tx, k, dim, keepdim))
        same(x.kthvalue(k, dim=dim, keepdim=keepdim), tx.kthvalue(k, dim=dim, keepdim=keepdim))


def test_kthvalue_gradient_nan_and_edges_match_torch():
    a = R.permutation(20).reshape(4, 5).astype(np.float32)
    x, tx = both(a, requires_grad=True)
    w = R.normal(size=4).astype(np.float32)
    (loom.kthvalue(x, 2, 1).values * loom.tensor(w)).sum().backward()
    (torch.kthvalue(tx, 2, 1).values * torch.tensor(w)).sum().backward()
    same(x.grad, tx.grad)
    assert not loom.kthvalue(x, 2).indices.requires_grad
    x, tx = both(np.array([1.0, NAN, 0.0, 2.0], np.float32))
    for k in (1, 3, 4):  # NaN is the largest
        same(loom.kthvalue(x, k), torch.kthvalue(tx, k))
    x, tx = both(np.float32(3.0))
    same(loom.kthvalue(x, 1), torch.kthvalue(tx, 1))
    x, tx = both(np.zeros((2, 0), np.float32))
    same(loom.kthvalue(x, 1, 0), torch.kthvalue(tx, 1, 0))


def test_kthvalue_refusals_match_torch():
    x, tx = both([3.0, 1.0, 2.0])
    for k, kw in [(0, {}), (4, {}), (1, {"dim": 1}), (1.5, {})]:
        raises_as_torch(lambda: loom.kthvalue(x, k, **kw), lambda: torch.kthvalue(tx, k, **kw))
    e, te = both(np.zeros(0, np.float32))
    raises_as_torch(lambda: loom.kthvalue(e, 1), lambda: torch.kthvalue(te, 1))
    b, tb = both([True, False])
    raises_as_torch(lambda: loom.kthvalue(b, 1), lambda: torch.kthvalue(tb, 1))


def test_kthvalue_stays_lazy():
    x = loom.tensor(R.normal(size=(3, 4)).astype(np.float32))
    assert breaks(lambda: loom.kthvalue(x * 2, 2, 0)) == []


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False)])
def test_mode_matches_torch(dtype, dim, keepdim):
    # short rows of many ties: PyTorch's index is then the last occurrence
    a = R.integers(0, 3, (4, 6, 5)).astype(dtype)
    x, tx = both(a)
    same(loom.mode(x, dim, keepdim), torch.mode(tx, dim, keepdim))
    same(x.mode(dim, keepdim), tx.mode(dim, keepdim))


def test_mode_gradient_and_edges_match_torch():
    a = R.integers(0, 3, (3, 7)).astype(np.float32)
    x, tx = both(a, requires_grad=True)
    w = R.normal(size=3).astype(np.float32)
    (loom.mode(x * 2).values * loom.tensor(w)).sum().backward()
    (torch.mode(tx * 2).values * torch.tensor(w)).sum().backward()
    same(x.grad, tx.grad)
    for a, dim in [(np.float32(3.0), 0), (np.zeros((2, 0), np.float32), 0),
                   (np.zeros((0, 2), np.float32), 1)]:
        x, tx = both(a)
        same(loom.mode(x, dim), torch.mode(tx, dim))
    e, te = both(np.zeros(0, np.float32))
    raises_as_torch(lambda: loom.mode(e), lambda: torch.mode(te))
    x, tx = both([1.0, 2.0])
    raises_as_torch(lambda: loom.mode(x, 1), lambda: torch.mode(tx, 1))


# ---- nansum, nanmean, count_nonzero ----

NAN_DATA = np.array([[1.0, NAN, 2.0, -4.0], [NAN, 3.0, 0.5, NAN], [2.0, 1.0, 0.0, 7.0]],
                    np.float32)


@pytest.mark.parametrize("op", ["nansum", "nanmean"])
@pytest.mark.parametrize("kw", [{}, {"dim": 0}, {"dim": 1, "keepdim": True}, {"dim": (0, 1)},
                                {"dtype": torch.float64}])
def test_nan_reductions_match_torch(op, kw):
    x, tx = both(NAN_DATA, requires_grad=True)
    mine_kw = dict(kw, dtype=loom.float64) if "dtype" in kw else kw
    out, tout = getattr(loom, op)(x, **mine_kw), getattr(torch, op)(tx, **kw)
    same(out, tout)
    same(getattr(x, op)(**mine_kw), getattr(tx, op)(**kw))
    out.sum().backward()
    tout.sum().backward()
    same(x.grad, tx.grad)


def test_nan_reductions_of_other_dtypes_and_sizes_match_torch():
    for a in (np.array([1, 2], np.int64), np.array([1, 2], np.int32), np.array([True, True]),
              np.zeros(0, np.float32), np.array([NAN, NAN], np.float32)):
        x, tx = both(a)
        same(loom.nansum(x), torch.nansum(tx))
        if a.dtype.kind == "f":
            same(loom.nanmean(x), torch.nanmean(tx))
    x, tx = both([1, 2])
    raises_as_torch(lambda: loom.nanmean(x), lambda: torch.nanmean(tx))
    f, tf = both(NAN_DATA)
    for op in ("nansum", "nanmean"):
        for dim in (2, (0, 0)):
            raises_as_torch(lambda: getattr(loom, op)(f, dim), lambda: getattr(torch, op)(tf, dim))
    same(loom.nansum(x, dtype=loom.float32), torch.nansum(tx, dtype=torch.float32))


def test_nan_reductions_and_count_nonzero_stay_lazy():
    x = loom.tensor(NAN_DATA)
    assert breaks(lambda: loom.nanmean(x + 1, 1)) == []
    assert breaks(lambda: loom.nansum(x + 1)) == []
    assert breaks(lambda: loom.count_nonzero(x + 1, 0)) == []


@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 1), ()])
def test_count_nonzero_matches_torch(dim):
    for a in (NAN_DATA, np.array([[0, 3], [0, 0]]), np.array([[True, False]]),
              np.zeros((0, 3), np.float32)):
        x, tx = both(a)
        same(loom.count_nonzero(x, dim), torch.count_nonzero(tx, dim))
        same(x.count_nonzero(dim), tx.count_nonzero(dim))


def test_count_nonzero_refusals_match_torch():
    x, tx = both(NAN_DATA)
    for dim in ((0, 0), 2, (1, -1)):
        raises_as_torch(lambda: loom.count_nonzero(x, dim), lambda: torch.count_nonzero(tx, dim))


# ---- argwhere, isin ----

@pytest.mark.parametrize("a", [NAN_DATA, np.array([[0, 3], [5, 0]]), np.float32(1.0),
                               np.float32(0.0), np.zeros((0, 3)), np.array([True, False])])
def test_argwhere_matches_torch(a):
    x, tx = both(a)
    same(loom.argwhere(x), torch.argwhere(tx))
    same(x.argwhere(), tx.argwhere())


ISIN_CASES = [
    ([1, 2, 3], [2, 5], {}), ([[1, 2], [3, 4]], [[2, 3]], {"invert": True}),
    ([1.0, 2.0, NAN], [2.0, NAN], {}), ([1, 2, 3], [2.0, 5.0], {}), ([1.5, 2.0, 3.0], [2, 5], {}),
    ([1, 2], np.zeros(0, np.int64), {}), (np.zeros((0, 2)), [1.0], {}),
    ([1, 2, 3], [3, 2], {"assume_unique": True}),
]


@pytest.mark.parametrize("k", range(len(ISIN_CASES)))
def test_isin_matches_torch(k):
    a, b, kw = ISIN_CASES[k]
    x, tx = both(a)
    y, ty = both(b)
    same(loom.isin(x, y, **kw), torch.isin(tx, ty, **kw))
    same(loom.isin(x, 2, **kw), torch.isin(tx, 2, **kw))
    same(loom.isin(2, y, **kw), torch.isin(2, ty, **kw))


def test_isin_refusals_and_laziness():
    x, tx = both([1, 2])
    b, tb = both([True])
    raises_as_torch(lambda: loom.isin(b, b), lambda: torch.isin(tb, tb))
    raises_as_torch(lambda: loom.isin(x, True), lambda: torch.isin(tx, True))
    for mine, theirs in [(lambda: loom.isin(x, [1]), lambda: torch.isin(tx, [1])),
                         (lambda: loom.isin(2, 3), lambda: torch.isin(2, 3))]:
        with pytest.raises(TypeError):
            theirs()
        with pytest.raises(TypeError):
            mine()
    assert breaks(lambda: loom.isin(x * 2, x + 1)) == []


# ---- names and reads ----

NAMES = ["unique", "unique_consecutive", "bincount", "searchsorted", "bucketize", "histc",
         "multinomial", "kthvalue", "mode", "nanmean", "nansum", "count_nonzero", "argwhere",
         "isin"]


def test_functions_and_methods_are_where_torch_has_them():
    for name in NAMES:
        assert callable(getattr(loom, name)), name
        assert hasattr(loom.Tensor, name) == hasattr(torch.Tensor, name), name


def test_data_dependent_shapes_are_graph_breaks():
    x = loom.tensor(np.array([3, 1, 3, 2]))
    for fn in (lambda: loom.unique(x * 1), lambda: loom.bincount(x + 0),
               lambda: loom.argwhere(x - 1), lambda: loom.unique_consecutive(x * 1)):
        assert len(breaks(fn)) >= 1
    y = loom.unique(x * 1)
    assert not y._lazy and y.tolist() == [1, 2, 3]
