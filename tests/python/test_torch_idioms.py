"""PyTorch idioms that loom spells as PyTorch does (tensor methods, result
tuples, creation and test functions, einsum, losses, modules, learning
rate schedules), each against PyTorch on the same inputs: values, and
gradients of a weighted sum of the result."""
import math

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(7)


def _data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _close(mine, theirs, rtol=1e-5, atol=1e-6, msg=""):
    mine = mine.detach().numpy() if isinstance(mine, loom.Tensor) else np.asarray(mine)
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol, err_msg=msg)


def check(mine_fn, torch_fn, *arrays, grad=True, rtol=1e-5, atol=1e-6):
    """mine_fn and torch_fn on the same arrays give the same value and, for
    float inputs, the same gradients of the value weighted at random."""
    grads = [grad and a.dtype.kind == "f" for a in arrays]
    ours = [loom.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    theirs = [torch.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    out, tout = mine_fn(*ours), torch_fn(*theirs)
    _close(out, tout, rtol, atol)
    if not any(grads):
        return
    w = _data(*tout.shape)
    (out * loom.tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if grads[i]:
            _close(a.grad, b.grad, rtol, atol, msg=f"gradient of input {i}")


# ---- tensor methods ----

def test_device_methods_and_to():
    x = loom.tensor(_data(2, 3))
    assert x.cpu() is x and x.to("cpu") is x and x.to(device="cpu") is x
    assert x.to(torch.device("cpu")) is x
    assert x.to("cpu", loom.float64).dtype is loom.float64
    assert x.to(device="cpu", dtype=loom.int32).dtype is loom.int32
    assert x.to(loom.tensor([1])).dtype is loom.int64
    with pytest.raises(RuntimeError, match="cuda"):
        x.to("cuda")
    with pytest.raises(RuntimeError, match="cuda"):
        x.to(device=torch.device("cuda", 0))
    m = nn.Linear(2, 2)
    assert m.to("cpu") is m and m.to(torch.device("cpu")).weight.dtype is loom.float32


def test_contiguous_copies_only_a_strided_view():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = loom.from_numpy(a)
    assert x.is_contiguous() and x.contiguous() is x
    t = loom.from_numpy(a.T)
    assert not t.is_contiguous()
    c = t.contiguous()
    np.testing.assert_array_equal(c.numpy(), a.T)
    assert c.numpy().flags["C_CONTIGUOUS"]


def test_data_shares_memory_without_grad():
    p = loom.tensor(_data(3), requires_grad=True)
    before = p.detach().numpy().copy()
    d = p.data
    assert not d.requires_grad
    d.mul_(2.0)  # PyTorch's p.data.mul_: p changes
    np.testing.assert_allclose(p.detach().numpy(), 2 * before)
    p.data = loom.zeros(3)
    np.testing.assert_array_equal(p.detach().numpy(), np.zeros(3))
    assert p.requires_grad and p.is_leaf


@pytest.mark.parametrize("data,dtype", [
    ([1.5, 2.0], "float32"), ([1.0, -2.0], "float32"), ([1, 2, 30], "int64"),
    ([True, False], "bool"), ([[1.25, -2.0], [3.0, 4.5]], "float32"), ([[1, 2], [30, 4]], "int32"),
    (3.25, "float32"), (7, "int64"), (True, "bool"), ([0.5, 2.0], "float64"),
    ([1e-5, 3.0], "float32"), (np.arange(24).reshape(2, 3, 4) / 7, "float32"),
    (np.arange(30) / 7, "float64"), (np.arange(2000).reshape(40, 50), "int64"), ([], "float32"),
])
def test_repr_matches_torch(data, dtype):
    a = np.asarray(data)
    mine = loom.tensor(a, dtype=getattr(loom, dtype))
    theirs = torch.tensor(a, dtype=getattr(torch, dtype))
    assert repr(mine) == repr(theirs).replace("torch.", "loom.")
    assert str(mine) == str(theirs).replace("torch.", "loom.")
    if dtype.startswith("float") and a.size:
        grad = repr(loom.tensor(a, dtype=getattr(loom, dtype), requires_grad=True))
        assert grad == repr(torch.tensor(a, dtype=getattr(torch, dtype),
                                         requires_grad=True)).replace("torch.", "loom.")


def test_sort_argsort_kthvalue_match_torch():
    a = _data(3, 5)
    for dim, desc in ((-1, False), (0, True), (1, True)):
        check(lambda x: x.sort(dim, desc).values, lambda x: x.sort(dim, desc).values, a)
        check(lambda x: loom.sort(x, dim=dim, descending=desc)[1],
              lambda x: torch.sort(x, dim=dim, descending=desc)[1], a, grad=False)
        check(lambda x: x.argsort(dim, desc), lambda x: x.argsort(dim, desc), a, grad=False)
    check(lambda x: loom.argsort(x), lambda x: torch.argsort(x), a, grad=False)
    for keepdim in (False, True):
        check(lambda x: x.kthvalue(2, 1, keepdim).values,
              lambda x: x.kthvalue(2, 1, keepdim).values, a)
        check(lambda x: loom.kthvalue(x, 3, 0, keepdim).indices,
              lambda x: torch.kthvalue(x, 3, 0, keepdim).indices, a, grad=False)


def test_results_name_values_and_indices():
    a = _data(4, 6)
    x, t = loom.tensor(a), torch.tensor(a)
    for mine, theirs in ((x.max(1), t.max(1)), (loom.min(x, 0, True), torch.min(t, 0, True)),
                         (x.topk(2), t.topk(2)), (x.sort(), t.sort()),
                         (x.kthvalue(3), t.kthvalue(3))):
        values, indices = mine
        assert type(mine).__name__ == type(theirs).__name__
        assert values is mine.values and indices is mine.indices and len(mine) == 2
        _close(mine.values, theirs.values)
        _close(mine.indices, theirs.indices)


def test_gather_method_matches_torch():
    a = _data(3, 4)
    idx = RNG.integers(0, 4, (3, 2))
    check(lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i), a, idx)


@pytest.mark.parametrize("p", ["fro", 2, 1, 3, 0.5, math.inf, -math.inf])
def test_norm_matches_torch(p):
    a = _data(3, 4)
    check(lambda x: x.norm(p), lambda x: x.norm(p), a, rtol=1e-4)
    check(lambda x: loom.norm(x, p, dim=1, keepdim=True),
          lambda x: torch.norm(x, p, dim=1, keepdim=True), a, rtol=1e-4)


def test_norm_of_zeros_has_zero_gradient():
    check(lambda x: x.norm(dim=1), lambda x: x.norm(dim=1), np.zeros((2, 3), np.float32))
    check(lambda x: x.norm(0), lambda x: x.norm(0), np.array([0, 1.5, -2], np.float32),
          grad=False)


def test_gradients_at_ties_and_bounds_match_torch():
    """max/min along a dim give a tie's gradient to the index they return,
    median() shares it among the tied elements, hardtanh and relu6 pass
    none at their bounds, std of equal values has gradient 0."""
    ties = np.array([[1, 3, 3, 0], [2, 2, -1, 2], [5, 5, 5, 5]], np.float32)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            check(lambda x: x.max(dim, keepdim).values, lambda x: x.max(dim, keepdim).values,
                  ties)
            check(lambda x: loom.min(x, dim, keepdim)[0], lambda x: torch.min(x, dim, keepdim)[0],
                  ties)
    check(lambda x: x.median().reshape(1), lambda x: x.median().reshape(1), ties)
    check(lambda x: x.median(), lambda x: x.median(), np.array([4, 1, 2, 3], np.float32))
    bounds = np.array([-2, -1, 0, 0.5, 1, 6, 7], np.float32)
    check(lambda x: F.hardtanh(x), lambda x: TF.hardtanh(x), bounds)
    check(lambda x: F.hardtanh(x, 0.0, 0.5), lambda x: TF.hardtanh(x, 0.0, 0.5), bounds)
    check(lambda x: F.relu6(x), lambda x: TF.relu6(x), bounds)
    check(lambda x: nn.ReLU6()(x), lambda x: torch.nn.ReLU6()(x), bounds)
    same = np.array([[2, 2, 2], [1, 2, 4]], np.float32)
    check(lambda x: x.std(1), lambda x: x.std(1), same)
    check(lambda x: x.std(1, keepdim=True), lambda x: x.std(1, keepdim=True), same)
    check(lambda x: x[0].std().reshape(1), lambda x: x[0].std().reshape(1), same)


def test_promotion_of_0_d_tensors_and_clamp_bounds():
    """A 0-d tensor takes a tensor of dims' dtype unless of a higher
    category; a float bound makes clamp of integers a float, as PyTorch's."""
    cases = [(np.array([1.5, 2], np.float32), np.array(3.25, np.float64)),
             (np.array([1, 2], np.int32), np.array(3, np.int64)),
             (np.array([1, 2], np.int64), np.array(0.5, np.float64)),
             (np.array([True, False]), np.array(3, np.int64)),
             (np.array(2.5, np.float64), np.array([1, 2], np.float16)),
             (np.array(2.5, np.float64), np.array(1.5, np.float32))]
    for a, b in cases:
        for op in ("add", "mul", "maximum", "where"):
            if op == "where":
                mine = loom.where(loom.tensor([True, False]), loom.tensor(a), loom.tensor(b))
                theirs = torch.where(torch.tensor([True, False]), torch.tensor(a),
                                     torch.tensor(b))
            else:
                mine = getattr(loom, op)(loom.tensor(a), loom.tensor(b))
                theirs = getattr(torch, op)(torch.tensor(a), torch.tensor(b))
            assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], (a, b, op)
            _close(mine, theirs)
    i = np.array([-3, 1, 2, 9])
    for lo, hi in ((1.5, None), (None, 2.5), (0, 4), (-1.5, 4)):
        mine, theirs = loom.tensor(i).clamp(lo, hi), torch.tensor(i).clamp(lo, hi)
        assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], (lo, hi)
        _close(mine, theirs)


def test_fmod_and_rounded_division_match_torch():
    a = np.array([-7, -6, -1, 0, 1, 5, 7, 8])
    b = np.array([2, -4, 3, -3, -2, 3, -2, 4])
    for x, y in ((a, b), (a + 0.5, b.astype(np.float32)), (a.astype(np.int32), 3),
                 (a.astype(np.float32) - 0.25, -2.5)):
        mx, tx = loom.tensor(x), torch.tensor(x)
        my = loom.tensor(y) if isinstance(y, np.ndarray) else y
        ty = torch.tensor(y) if isinstance(y, np.ndarray) else y
        pairs = [(loom.fmod(mx, my), torch.fmod(tx, ty)), (mx.fmod(my), tx.fmod(ty)),
                 (loom.div(mx, my, rounding_mode="floor"), torch.div(tx, ty, rounding_mode="floor")),
                 (mx.div(my, rounding_mode="trunc"), tx.div(ty, rounding_mode="trunc")),
                 (mx.clone().div_(my, rounding_mode="trunc"),
                  tx.clone().div_(ty, rounding_mode="trunc"))]
        if isinstance(y, np.ndarray):  # a Python number on the left
            pairs += [(7 // my, 7 // ty), (-7 % my, -7 % ty), (7.5 // my, 7.5 // ty)]
        for mine, theirs in pairs:
            assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
            _close(mine, theirs)
    c = _data(2, 5)
    check(lambda x, y: loom.fmod(x * 3, y), lambda x, y: torch.fmod(x * 3, y), c, _data(2, 5))


def test_masked_fill_index_put_detach_in_place_as_torch():
    def fn(lib):
        def f(x, v):
            y = x * 2
            y.masked_fill_(y < 0, 0.5)
            y.index_put_((lib.tensor([0, 2, 0]), lib.tensor([1, 1, 1])), v * v,
                         accumulate=True)
            y.index_put_((lib.tensor([1]),), lib.tensor(9.0))
            z = (y * 3).detach_()
            assert not z.requires_grad
            return y + z
        return f
    check(fn(loom), fn(torch), _data(3, 4), _data(3))
    mine, theirs = loom.zeros(5), torch.zeros(5)
    for t, lib in ((mine, loom), (theirs, torch)):
        t.index_put_((lib.tensor([0, 2, 0]),), lib.tensor([1.0, 2.0, 3.0]), accumulate=True)
        t.masked_fill_(t == 2, -1.0)
    _close(mine, theirs)
    assert loom.index_put(loom.zeros(3), (loom.tensor([1]),), loom.tensor(4.0)).tolist() == \
        [0.0, 4.0, 0.0]


def test_clip_grad_value_as_torch():
    a, g = _data(3, 4), _data(3, 4)
    grads = []
    for lib in (loom, torch):
        p = lib.tensor(a, requires_grad=True)
        (p * lib.tensor(g) * 3).sum().backward()
        lib.nn.utils.clip_grad_value_([p], clip_value=1.5)
        lib.nn.utils.clip_grad_value_(p, 2.0)
        grads.append(p.grad)
    _close(*grads)


def test_bool_add_mul_maximum_as_logical():
    """PyTorch adds bools as or, multiplies them as and, also with the
    operators + and * on two bool tensors."""
    b, c = np.array([True, False, True, False]), np.array([True, True, False, False])
    for name in ("add", "mul", "maximum", "minimum"):
        mine = getattr(loom, name)(loom.tensor(b), loom.tensor(c))
        theirs = getattr(torch, name)(torch.tensor(b), torch.tensor(c))
        assert mine.dtype is loom.bool and mine.tolist() == theirs.tolist(), name
    assert (loom.tensor(b) + True).tolist() == (torch.tensor(b) + True).tolist()
    assert (loom.tensor(b) * False).tolist() == (torch.tensor(b) * False).tolist()
    assert (loom.tensor(b) + loom.tensor(c)).tolist() == (torch.tensor(b) + torch.tensor(c)).tolist()
    assert (loom.tensor(b) * loom.tensor(c)).tolist() == (torch.tensor(b) * torch.tensor(c)).tolist()


@pytest.mark.parametrize("name", ["sign", "floor", "ceil", "round", "trunc"])
def test_rounding_ops_have_zero_gradients_as_torch(name):
    """Their outputs require grad where the input does; the gradient
    through them is zero (not None, not an error)."""
    v = [-1.5, 0.0, 2.3, 0.5]
    x, t = loom.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    y, ty = getattr(x, name)(), getattr(t, name)()
    assert y.requires_grad == ty.requires_grad
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())
    x.grad = t.grad = None
    (getattr(x, name)() * x).sum().backward()
    (getattr(t, name)() * t).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_new_tensors_take_the_dtype():
    x = loom.tensor([1.0, 2.0], dtype=loom.float64)
    assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros((2,)).dtype is loom.float64
    np.testing.assert_array_equal(x.new_ones(2).numpy(), np.ones(2))
    np.testing.assert_array_equal(x.new_full((2, 2), 7).numpy(), np.full((2, 2), 7.0))
    y = x.new_tensor([[1, 2]])
    assert y.dtype is loom.float64 and y.tolist() == [[1.0, 2.0]]
    assert x.new_zeros(1, dtype=loom.int32).dtype is loom.int32


def test_unbind_clamp_min_max_tril_triu():
    a = _data(3, 4)
    for dim in (0, 1, -1):
        mine = loom.tensor(a).unbind(dim)
        theirs = torch.tensor(a).unbind(dim)
        assert len(mine) == len(theirs)
        for u, v in zip(mine, theirs):
            _close(u, v)
    check(lambda x: sum(x.unbind(1)[1:3]) * 2, lambda x: sum(x.unbind(1)[1:3]) * 2, a)
    check(lambda x: x.clamp_min(0.1), lambda x: x.clamp_min(0.1), a)
    check(lambda x: loom.clamp_max(x, -0.2), lambda x: torch.clamp_max(x, -0.2), a)
    b = _data(2, 3, 4)
    for k in (0, 1, -1, 3):
        check(lambda x: loom.tril(x, k), lambda x: torch.tril(x, k), b)
        check(lambda x: x.triu(diagonal=k), lambda x: x.triu(diagonal=k), b)
    check(lambda x: loom.triu(x), lambda x: torch.triu(x), np.arange(9).reshape(3, 3))


# ---- top-level functions ----

def test_linspace_and_random_likes():
    _close(loom.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
    _close(loom.linspace(0, 1, 1), torch.linspace(0, 1, 1))
    assert loom.linspace(0, 4, 5, dtype=loom.float64).dtype is loom.float64
    x = loom.zeros(300, 4, dtype=loom.float64)
    r, u = loom.randn_like(x), loom.rand_like(x)
    assert r.shape == u.shape == (300, 4) and r.dtype is u.dtype is loom.float64
    assert abs(float(r.mean())) < 0.2 and 0.9 < float(r.std()) < 1.1
    assert 0 <= float(u.min()) and float(u.max()) < 1 and 0.45 < float(u.mean()) < 0.55


def test_inf_nan_tests_and_nan_to_num():
    a = np.array([1.0, -np.inf, np.inf, np.nan, 0.0, -2.5], np.float32)
    for name in ("isinf", "isfinite", "isnan"):
        check(getattr(loom, name), getattr(torch, name), a, grad=False)
        check(getattr(loom, name), getattr(torch, name), np.array([1, -3]), grad=False)
    check(loom.nan_to_num, torch.nan_to_num, a, grad=False)
    check(lambda x: x.nan_to_num(nan=1.0, posinf=9.0), lambda x: x.nan_to_num(1.0, 9.0), a,
          grad=False)
    check(lambda x: loom.nan_to_num(x, neginf=-7.0).double(),
          lambda x: torch.nan_to_num(x, neginf=-7.0).double(), a.astype(np.float64),
          grad=False)
    finite = np.array([1.0, -2.0, 3.0], np.float32)
    check(lambda x: loom.nan_to_num(x * 2), lambda x: torch.nan_to_num(x * 2), finite)


def test_allclose_and_isclose():
    a = np.array([1.0, 2.0, np.inf, np.nan], np.float32)
    for b in (a, a + 1e-6, a + 1e-3):
        for equal_nan in (False, True):
            args = dict(rtol=1e-5, atol=1e-8, equal_nan=equal_nan)
            ta, tb = torch.tensor(a), torch.tensor(b)
            assert loom.allclose(loom.tensor(a), loom.tensor(b), **args) == \
                torch.allclose(ta, tb, **args)
            _close(loom.isclose(loom.tensor(a), loom.tensor(b), **args),
                   torch.isclose(ta, tb, **args))
    assert loom.tensor([1.0, 2.0]).allclose(loom.tensor([1.0, 2.0 + 1e-7]))


def test_grad_mode_contexts():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    with loom.no_grad():
        assert not (x * 2).requires_grad
        with loom.enable_grad():
            assert loom.is_grad_enabled() and (x * 2).requires_grad
        assert not loom.is_grad_enabled()
    with loom.inference_mode():
        assert not (x * 2).requires_grad
    with loom.inference_mode(False):
        assert (x * 2).requires_grad
    with loom.set_grad_enabled(False):
        assert not loom.is_grad_enabled()
    assert loom.is_grad_enabled()

    @loom.enable_grad()
    def doubled(v, depth):
        return doubled(v, depth - 1) if depth else v * 2

    @loom.inference_mode()
    def frozen(v):
        return doubled(v, 2), (v * 2).requires_grad
    with_grad, inside = frozen(x)
    assert with_grad.requires_grad and not inside and loom.is_grad_enabled()
    loom.set_grad_enabled(False)
    assert not loom.is_grad_enabled()
    loom.set_grad_enabled(True)
    assert loom.is_grad_enabled()


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(5,), (5,)]),
    ("ij,kj", [(3, 4), (5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ijk,ik->j", [(2, 1, 3), (2, 3)]),
    ("iij,j->i", [(3, 3, 2), (2,)]),
])
def test_einsum_matches_torch(equation, shapes):
    arrays = [_data(*s) for s in shapes]
    check(lambda *xs: loom.einsum(equation, *xs), lambda *xs: torch.einsum(equation, *xs),
          *arrays, rtol=1e-4, atol=1e-5)
    check(lambda *xs: loom.einsum(equation, list(xs)),
          lambda *xs: torch.einsum(equation, list(xs)), *arrays, grad=False, rtol=1e-4,
          atol=1e-5)


def test_einsum_errors():
    x = loom.zeros(2, 3)
    with pytest.raises(ValueError):
        loom.einsum("ijk->i", x)
    with pytest.raises(ValueError):
        loom.einsum("ij,jk->ik", x)
    with pytest.raises(ValueError):
        loom.einsum("ij->iz", x)


# ---- loom.nn.functional ----

@pytest.mark.parametrize("p,dim", [(2, 1), (1, 0), (3, -1)])
def test_normalize(p, dim):
    a = _data(3, 4)
    check(lambda x: F.normalize(x, p, dim), lambda x: TF.normalize(x, p, dim), a, rtol=1e-4)
    a[1] = 0
    check(lambda x: F.normalize(x), lambda x: TF.normalize(x), a, rtol=1e-4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_and_probability_losses(reduction):
    a, b = _data(4, 3), _data(4, 3)
    for beta in (1.0, 0.5, 0.0):
        check(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=beta),
              lambda x, y: TF.smooth_l1_loss(x, y, reduction=reduction, beta=beta), a, b)
    for delta in (1.0, 0.3):
        check(lambda x, y: F.huber_loss(x, y, reduction, delta),
              lambda x, y: TF.huber_loss(x, y, reduction, delta), a, b)
    prob = 1 / (1 + np.exp(-a))
    target = (RNG.random((4, 3)) > 0.5).astype(np.float32)
    w = RNG.random(3).astype(np.float32)
    check(lambda x, y: F.binary_cross_entropy(x, y, reduction=reduction),
          lambda x, y: TF.binary_cross_entropy(x, y, reduction=reduction), prob, target,
          rtol=1e-4)
    check(lambda x, y: F.binary_cross_entropy(x, y, loom.tensor(w), reduction=reduction),
          lambda x, y: TF.binary_cross_entropy(x, y, torch.tensor(w), reduction=reduction),
          prob, RNG.random((4, 3)).astype(np.float32), rtol=1e-4)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum", "none"])
def test_kl_div(reduction):
    logp = np.log(np.exp(_data(4, 5)) / np.exp(_data(4, 5)).sum(1, keepdims=True))
    q = RNG.random((4, 5)).astype(np.float32) + 0.01
    check(lambda x, t: F.kl_div(x, t, reduction=reduction),
          lambda x, t: TF.kl_div(x, t, reduction=reduction), logp.astype(np.float32), q,
          rtol=1e-4)
    q[0, 1] = 0  # a target of 0 adds 0 (PyTorch 1.13's target gradient there is NaN)
    check(lambda x: F.kl_div(x, loom.tensor(q), reduction=reduction),
          lambda x: TF.kl_div(x, torch.tensor(q), reduction=reduction),
          logp.astype(np.float32), rtol=1e-4)
    check(lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=True),
          lambda x, t: TF.kl_div(x, t, reduction=reduction, log_target=True),
          logp.astype(np.float32), np.log(q + 0.1), rtol=1e-4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_with_class_weights(reduction, smoothing):
    logits = _data(6, 4)
    target = np.array([0, 3, 1, -100, 2, 3])
    weight = (RNG.random(4) + 0.5).astype(np.float32)
    check(lambda x, y: F.cross_entropy(x, y, loom.tensor(weight), ignore_index=-100,
                                       reduction=reduction, label_smoothing=smoothing),
          lambda x, y: TF.cross_entropy(x, y, torch.tensor(weight), ignore_index=-100,
                                        reduction=reduction, label_smoothing=smoothing),
          logits, target, rtol=1e-4)
    check(lambda x, y: nn.CrossEntropyLoss(loom.tensor(weight), reduction=reduction,
                                           label_smoothing=smoothing)(x, y),
          lambda x, y: torch.nn.CrossEntropyLoss(torch.tensor(weight), reduction=reduction,
                                                 label_smoothing=smoothing)(x, y),
          logits, target, rtol=1e-4)
    check(lambda x, y: F.nll_loss(x, y, loom.tensor(weight), reduction=reduction),
          lambda x, y: TF.nll_loss(x, y, torch.tensor(weight), reduction=reduction),
          logits, np.array([0, 3, 1, 1, 2, 3]), rtol=1e-4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2), (4,)])
def test_cross_entropy_with_probability_targets(reduction, smoothing, shape):
    logits = _data(*shape)
    probs = RNG.random(shape).astype(np.float32)
    probs /= probs.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)
    weight = (RNG.random(4) + 0.5).astype(np.float32)
    for w in (None, weight):
        mw, tw = (None, None) if w is None else (loom.tensor(w), torch.tensor(w))
        check(lambda x, y: F.cross_entropy(x, y, mw, reduction=reduction,
                                           label_smoothing=smoothing),
              lambda x, y: TF.cross_entropy(x, y, tw, reduction=reduction,
                                            label_smoothing=smoothing),
              logits, probs, rtol=1e-4, atol=1e-5)
        check(lambda x, y: nn.CrossEntropyLoss(mw, reduction=reduction,
                                               label_smoothing=smoothing)(x, y),
              lambda x, y: torch.nn.CrossEntropyLoss(tw, reduction=reduction,
                                                     label_smoothing=smoothing)(x, y),
              logits, probs, rtol=1e-4, atol=1e-5)


def _loss_module_cases(reduction):
    """(make(lib) -> the module of loom or torch, its input arrays)."""
    a, b = _data(4, 3), _data(4, 3)
    prob, soft = 1 / (1 + np.exp(-a)), RNG.random((4, 3)).astype(np.float32)
    w, pw = (RNG.random(3) + 0.5).astype(np.float32), (RNG.random(3) * 3).astype(np.float32)
    logp = a - np.log(np.exp(a).sum(1, keepdims=True))
    labels = np.array([2, -100, 0, 1])
    return [
        (lambda lib: lib.nn.L1Loss(reduction=reduction), a, b),
        (lambda lib: lib.nn.SmoothL1Loss(reduction=reduction, beta=0.5), a, b),
        (lambda lib: lib.nn.HuberLoss(reduction=reduction, delta=0.3), a, b),
        (lambda lib: lib.nn.BCELoss(reduction=reduction), prob, soft),
        (lambda lib: lib.nn.BCELoss(lib.tensor(w), reduction=reduction), prob, soft),
        (lambda lib: lib.nn.BCEWithLogitsLoss(reduction=reduction), a * 3, soft),
        (lambda lib: lib.nn.BCEWithLogitsLoss(lib.tensor(w), reduction=reduction,
                                              pos_weight=lib.tensor(pw)), a * 3, soft),
        (lambda lib: lib.nn.NLLLoss(reduction=reduction), logp, labels),
        (lambda lib: lib.nn.NLLLoss(lib.tensor(w), reduction=reduction), logp, labels),
        (lambda lib: lib.nn.KLDivLoss(reduction=reduction), logp, soft + 0.01),
        (lambda lib: lib.nn.KLDivLoss(reduction=reduction, log_target=True), logp, logp[::-1]),
    ]


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", range(11))
def test_loss_modules_match_torch(reduction, case):
    make, *arrays = _loss_module_cases(reduction)[case]
    check(make(loom), make(torch), *[np.ascontiguousarray(a) for a in arrays], rtol=1e-4,
          atol=1e-5)


# ---- loom.nn modules ----

@pytest.mark.parametrize("make", [
    lambda m: m.Softmax(dim=0), lambda m: m.Softmax(1), lambda m: m.LogSoftmax(dim=-1),
    lambda m: m.LogSoftmax(), lambda m: m.LeakyReLU(0.2), lambda m: m.LeakyReLU(),
    lambda m: m.ELU(), lambda m: m.ELU(alpha=0.5), lambda m: m.Softplus(),
    lambda m: m.Softplus(beta=2.0, threshold=1.0), lambda m: m.Hardtanh(),
    lambda m: m.Hardtanh(-0.5, 0.25), lambda m: m.GELU(), lambda m: m.GELU(approximate="tanh"),
    lambda m: m.Identity(3, unused=True), lambda m: m.Flatten(), 
    lambda m: (lambda x, f=m.SiLU(inplace=True): f(x * 1)),
])
@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
def test_activation_modules(make):
    a = _data(3, 4, 2) * 2
    check(make(nn), make(torch.nn), a, rtol=1e-4, atol=1e-5)


def test_embedding_padding_row_is_zero_and_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=-1)
    assert emb.padding_idx == 4
    np.testing.assert_array_equal(emb.weight.detach().numpy()[4], np.zeros(3))
    theirs = torch.nn.Embedding(5, 3, padding_idx=4)
    w = _data(5, 3)  # a nonzero padding row: looked up as it is, no gradient
    emb.load_state_dict({"weight": w})
    theirs.load_state_dict({"weight": torch.tensor(w)})
    idx = np.array([[0, 4, 2], [4, 4, 1]])
    out, tout = emb(loom.tensor(idx)), theirs(torch.tensor(idx))
    _close(out, tout)
    g = _data(2, 3, 3)
    (out * loom.tensor(g)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    _close(emb.weight.grad, theirs.weight.grad)
    assert not emb.weight.grad.numpy()[4].any()


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5)])
def test_batchnorm1d_matches_torch(shape):
    mine, theirs = nn.BatchNorm1d(3, momentum=0.2), torch.nn.BatchNorm1d(3, momentum=0.2)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    w, b = _data(3), _data(3)
    mine.load_state_dict({**{k: v.numpy() for k, v in theirs.state_dict().items()},
                          "weight": w, "bias": b})
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(w))
        theirs.bias.copy_(torch.tensor(b))
    a = _data(*shape) * 3 + 1
    check(mine, theirs, a, rtol=1e-4, atol=1e-5)
    for (k, v), (_, tv) in zip(mine.state_dict().items(), theirs.state_dict().items()):
        _close(v, tv.numpy(), rtol=1e-4, atol=1e-5, msg=k)
    for name in ("weight", "bias"):
        _close(getattr(mine, name).grad, getattr(theirs, name).grad, rtol=1e-4, atol=1e-5)
    mine.eval(), theirs.eval()
    check(mine, theirs, a, grad=False, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        mine(loom.zeros(2, 3, 4, 5))


# ---- learning rate schedules ----

@pytest.mark.parametrize("name,kwargs", [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[2, 5, 5, 8], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=4, eta_min=0.01)),
    ("LambdaLR", dict(lr_lambda=lambda e: 1 / (1 + e))),
    ("LinearLR", dict(start_factor=0.25, total_iters=4)),
])
def test_schedulers_follow_torch(name, kwargs):
    p = loom.tensor([1.0, -2.0], requires_grad=True)
    tp = torch.tensor([1.0, -2.0], requires_grad=True)
    opt = loom.optim.SGD([{"params": [p]}], lr=0.1, momentum=0.9)
    topt = torch.optim.SGD([{"params": [tp]}], lr=0.1, momentum=0.9)
    sched = getattr(loom.optim.lr_scheduler, name)(opt, **kwargs)
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    for epoch in range(10):
        assert sched.last_epoch == tsched.last_epoch == epoch
        np.testing.assert_allclose(sched.get_last_lr(), tsched.get_last_lr(), rtol=1e-12)
        (p * p).sum().backward()
        (tp * tp).sum().backward()
        opt.step(), topt.step()
        opt.zero_grad(), topt.zero_grad()
        sched.step(), tsched.step()
    assert opt.param_groups[0]["lr"] == sched.get_last_lr()[0]
    _close(p, tp, rtol=1e-5)  # the updates used the scheduled rates


def test_scheduler_import_path_and_state():
    from loom.optim.lr_scheduler import StepLR
    opt = loom.optim.Adam([loom.zeros(2, requires_grad=True)], lr=1.0)
    sched = StepLR(opt, 2)
    opt.step()
    sched.step(), sched.step()
    state = sched.state_dict()
    assert state["last_epoch"] == 2 and "optimizer" not in state
    again = StepLR(opt, 2, last_epoch=1)
    again.load_state_dict(state)
    assert again.last_epoch == 2 and again.get_last_lr() == [0.1]


# ---- optimizer checkpoints ----

def _mlp_loss(lib, params, x, y):
    w1, b1, w2 = params
    return ((lib.tanh(lib.tensor(x) @ w1 + b1) @ w2 - lib.tensor(y)) ** 2).mean()


def _train(lib, params, opt, batches, clip):
    """Steps of opt on batches; clip sends loom's update down the Python
    path (a max_norm that leaves the gradients as they are)."""
    for x, y in batches:
        opt.zero_grad()
        _mlp_loss(lib, params, x, y).backward()
        if clip:
            lib.nn.utils.clip_grad_norm_(params, 1e9)
        opt.step()


def _close_state(mine, theirs):
    assert sorted(mine["state"]) == sorted(theirs["state"])
    for i, s in theirs["state"].items():
        assert sorted(mine["state"][i]) == sorted(s), i
        for k, v in s.items():
            _close(mine["state"][i][k], v.numpy(), rtol=1e-4, atol=1e-6, msg=f"{i} {k}")
    for g, tg in zip(mine["param_groups"], theirs["param_groups"]):
        assert g["params"] == tg["params"] and g["lr"] == tg["lr"]


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("Adam", dict(lr=0.05, weight_decay=0.01)),
    ("AdamW", dict(lr=0.05, betas=(0.8, 0.99))),
])
@pytest.mark.parametrize("clip", [False, True])
def test_optimizer_state_dict_resumes_as_torch(name, kwargs, clip):
    import copy
    w = [_data(4, 5), _data(5), _data(5, 2)]
    batches = [(_data(3, 4), _data(3, 2)) for _ in range(5)]
    ps = [loom.tensor(a, requires_grad=True) for a in w]
    tps = [torch.tensor(a, requires_grad=True) for a in w]
    opt, topt = getattr(loom.optim, name)(ps, **kwargs), getattr(torch.optim, name)(tps, **kwargs)
    _train(loom, ps, opt, batches[:3], clip)
    _train(torch, tps, topt, batches[:3], clip)
    saved, tsaved = copy.deepcopy(opt.state_dict()), copy.deepcopy(topt.state_dict())
    _close_state(saved, tsaved)
    at_save = [p.detach().numpy().copy() for p in ps]
    _train(loom, ps, opt, batches[3:], clip)
    _train(torch, tps, topt, batches[3:], clip)
    _close_state(opt.state_dict(), topt.state_dict())
    # a fresh optimizer over a model of the saved weights, from each one's state dict
    for state in (saved, tsaved):
        again = [loom.tensor(a, requires_grad=True) for a in at_save]
        fresh = getattr(loom.optim, name)(again, lr=1.0)
        fresh.load_state_dict(state)
        assert fresh.param_groups[0]["lr"] == kwargs["lr"]
        _train(loom, again, fresh, batches[3:], clip)
        for p, first, tp in zip(again, ps, tps):
            _close(p, first.detach().numpy(), rtol=1e-5, atol=1e-6)
            _close(p, tp, rtol=1e-4, atol=1e-5)


def test_sort_is_stable_as_torch_s():
    """Ties keep their order, in both directions, with NaN above numbers."""
    a = np.random.default_rng(3).integers(0, 4, (3, 50)).astype(np.float32)
    a[0, ::7] = np.nan
    for desc in (False, True):
        mine = loom.sort(loom.tensor(a), dim=1, descending=desc, stable=True)
        theirs = torch.sort(torch.tensor(a), dim=1, descending=desc, stable=True)
        np.testing.assert_array_equal(mine.indices.numpy(), theirs.indices.numpy())
        np.testing.assert_array_equal(mine.values.numpy(), theirs.values.numpy())
        np.testing.assert_array_equal(loom.argsort(loom.tensor(a), 1, desc, stable=True).numpy(),
                                      torch.argsort(torch.tensor(a), dim=1, descending=desc,
                                                    stable=True).numpy())


def test_in_place_index_ops_take_equal_and_stride_as_torch():
    """Tensor methods and functions PyTorch programs use that were missing."""
    cases = [
        lambda m: m.ones(3, 2).index_add_(0, m.tensor([0, 2, 0]), m.ones(3, 2), alpha=2),
        lambda m: m.zeros(3, 2).index_copy_(0, m.tensor([2, 0]), m.arange(4.0).reshape(2, 2)),
        lambda m: m.zeros(2, 4).index_copy(1, m.tensor([3, 1]), m.ones(2, 2)),
        lambda m: m.zeros(2, 3).scatter_add_(1, m.tensor([[0, 0], [1, 1]]), m.ones(2, 2)),
        lambda m: m.take(m.arange(6.0).reshape(2, 3), m.tensor([[0, 5], [-1, 2]])),
        lambda m: m.ones(2).lerp_(m.zeros(2), 0.25),
        lambda m: m.full((2,), m.tensor(2.5)),
    ]
    for case in cases:
        assert case(loom).tolist() == case(torch).tolist()
    for m in (loom, torch):
        assert m.equal(m.ones(2), m.ones(2)) and not m.equal(m.ones(2), m.ones(3))
        assert not m.ones(2).equal(m.tensor([1.0, 2.0]))
        assert m.arange(24.0).reshape(2, 3, 4).stride() == (12, 4, 1)
        assert m.arange(24.0).reshape(2, 3, 4).stride(-2) == 4
        assert tuple(m.empty_like(m.zeros(2, 3)).shape) == (2, 3)


def test_set_default_dtype_float64_trains_in_double_as_torch():
    x = np.random.default_rng(3).standard_normal((8, 3))
    y = x @ np.array([[1.0], [-2.0], [0.5]]) + 0.1
    results = {}
    for m in (loom, torch):
        m.set_default_dtype(m.float64)
        try:
            assert m.tensor([1.5]).dtype is m.float64 and m.zeros(2).dtype is m.float64
            assert m.arange(0.0, 1.0, 0.5).dtype is m.float64
            assert (m.tensor([1, 2]) / 2).dtype is m.float64
            assert m.tensor([1, 2], dtype=m.float32).dtype is m.float32
            m.manual_seed(0)
            lin = m.nn.Linear(3, 1)
            assert lin.weight.dtype is m.float64
            with m.no_grad():
                lin.weight.copy_(m.tensor([[0.3, 0.2, -0.1]]))
                lin.bias.fill_(0.05)
            opt = m.optim.SGD(lin.parameters(), lr=0.1)
            for _ in range(5):
                opt.zero_grad()
                loss = ((lin(m.tensor(x)) - m.tensor(y)) ** 2).mean()
                loss.backward()
                opt.step()
            results[m.__name__] = lin.weight.detach().numpy().copy()
        finally:
            m.set_default_dtype(m.float32)
    assert results["loom"].dtype == np.float64
    np.testing.assert_allclose(results["loom"], results["torch"], rtol=1e-12, atol=1e-14)
    assert loom.get_default_dtype() is loom.float32 and loom.tensor([1.5]).dtype is loom.float32
    with pytest.raises(TypeError):
        loom.set_default_dtype(loom.int64)
