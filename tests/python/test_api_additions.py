"""Functions, methods and modules added after an outside comparison with
PyTorch 1.13: integer and bool inputs of the float ops, scatter and the
other composites of loom.functional, in-place methods, and more of
torch.nn (activations, 1-d pools, pixel shuffles, bilinear, losses).
Each against torch on the same inputs: values, and gradients where the
op is differentiable."""
import math

import numpy as np
import pytest

import loom
import loom.nn.functional as LF

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.detach() if t.requires_grad else t)


def _close(mine, theirs, rtol=1e-5, atol=1e-6):
    if isinstance(theirs, (tuple, list)):
        assert len(mine) == len(theirs)
        for m, t in zip(mine, theirs):
            _close(m, t, rtol, atol)
        return
    a, b = _np(mine), _np(theirs)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert str(a.dtype) == str(b.dtype), (a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


def check(fn, *arrays, grad=True, rtol=1e-5, atol=1e-6, lib_fn=None):
    """fn(lib, *tensors) for loom and torch on the same arrays: values, and
    the gradients of each float input of a weighted sum of the result."""
    lib_fn = lib_fn or fn
    mine_in = [loom.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    mine, theirs = fn(loom, *mine_in), lib_fn(torch, *theirs_in)
    _close(mine, theirs, rtol, atol)
    if not grad or not any(t.requires_grad for t in theirs_in):
        return
    first = lambda r: r[0] if isinstance(r, (tuple, list)) else r  # noqa: E731
    m, t = first(mine), first(theirs)
    w = np.random.default_rng(1).standard_normal(tuple(t.shape)).astype(np.float32)
    (m * loom.tensor(w, dtype=m.dtype)).sum().backward()
    (t * torch.tensor(w, dtype=t.dtype)).sum().backward()
    for a, b in zip(mine_in, theirs_in):
        if b.requires_grad:
            assert (a.grad is None) == (b.grad is None)
            if b.grad is not None:
                _close(a.grad, b.grad, rtol, atol)


def rnd(*shape, seed=0, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


# ---- integer and bool tensors through the float ops ----

FLOAT_OPS = ["sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh",
             "sigmoid", "erf", "reciprocal", "asinh", "atan", "sinh", "cosh", "log2", "log10",
             "exp2", "erfinv"]


@pytest.mark.parametrize("name", FLOAT_OPS)
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_float_ops_take_integers_as_float32(name, dtype):
    data = np.array([0, 1, 4, 9]) if dtype != "bool" else np.array([True, False, True, True])
    if name == "erfinv" and dtype != "bool":
        data = np.array([0, 1, 0, 1])
    mine = getattr(loom, name)(loom.tensor(data.astype(dtype)))
    theirs = getattr(torch, name)(torch.tensor(data.astype(dtype)))
    _close(mine, theirs)
    _close(getattr(loom.tensor(data.astype(dtype)), name)(), theirs)


@pytest.mark.parametrize("name", ["log2", "log10", "exp2"])
def test_log2_log10_exp2(name):
    x = rnd(3, 4, lo=0.1, hi=5.0)
    check(lambda lib, t: getattr(lib, name)(t), x)
    check(lambda lib, t: getattr(t, name)(), x.astype(np.float64))


def test_sqrt_of_ints_example():
    _close(loom.tensor([4, 9]).sqrt(), torch.tensor([2.0, 3.0]))


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc"])
def test_rounding_integers_is_identity(name):
    for dtype in (loom.int64, loom.int32, loom.int8):
        x = loom.tensor([-3, 0, 7], dtype=dtype)
        y = getattr(x, name)()
        assert y.dtype is dtype
        assert y.tolist() == [-3, 0, 7]


def test_bool_comparisons_reductions_and_sort():
    a = np.array([True, False, True, False])
    b = np.array([False, False, True, True])
    la, lb, ta, tb = loom.tensor(a), loom.tensor(b), torch.tensor(a), torch.tensor(b)
    for op in ("__lt__", "__le__", "__gt__", "__ge__"):
        _close(getattr(la, op)(lb), getattr(ta, op)(tb))
        _close(getattr(la, op)(True), getattr(ta, op)(True))
        _close(getattr(la, op)(0), getattr(ta, op)(0))
    _close(loom.lt(la, lb), torch.lt(ta, tb))
    _close(la > loom.tensor([0, 1, 0, 1]), ta > torch.tensor([0, 1, 0, 1]))
    _close(la.max(), ta.max())
    _close(la.min(), ta.min())
    _close(loom.amax(la), torch.amax(ta))
    _close(loom.amin(la), torch.amin(ta))
    m = np.array([[True, False], [False, False]])
    _close(loom.tensor(m).max(1), torch.tensor(m).max(1))
    _close(loom.tensor(m).min(0), torch.tensor(m).min(0))
    _close(la.sort(), ta.sort())
    _close(la.sort(descending=True), ta.sort(descending=True))
    _close(la.argsort(), ta.argsort())
    _close(loom.msort(loom.tensor(m)), torch.msort(torch.tensor(m)))


def test_float_ops_of_ints_compile():
    f = loom.compile(lambda x: (x.sqrt() + x.sigmoid()).sum())
    x = np.array([1, 4, 9])
    for _ in range(2):
        _close(f(loom.tensor(x)), (torch.tensor(x).sqrt() + torch.tensor(x).sigmoid()).sum())


# ---- scatter, take_along_dim, repeat_interleave, tensor_split, movedim ----

IDX = np.array([[0, 1, 2, 0], [2, 0, 1, 1]])


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_src(dim):
    index = IDX if dim == 1 else np.array([[0, 1, 2, 0], [2, 0, 1, 1]])
    index = index[:, :3] if dim == 0 else np.array([[0, 1, 3], [2, 4, 1]])
    check(lambda lib, x, s: lib.scatter(x, dim, lib.tensor(index), s),
          rnd(3, 5), rnd(2, 3, seed=1))
    # a src larger than index: torch 1.13's backward refuses it, so values only
    check(lambda lib, x, s: x.scatter(dim, lib.tensor(index), s), rnd(3, 5), rnd(3, 5, seed=2),
          grad=False)


def test_scatter_value_and_inplace():
    index = np.array([[0, 4], [2, 1]])
    check(lambda lib, x: lib.scatter(x, 1, lib.tensor(index), 2.5), rnd(3, 5))
    check(lambda lib, x: x.scatter(1, lib.tensor(index), value=-1.0), rnd(3, 5))
    for lib in (loom, torch):
        x = lib.zeros(2, 4)
        out = x.scatter_(1, lib.tensor(index[:, :1]), lib.ones(2, 1))
        assert out is x
    _close(loom.zeros(2, 4).scatter_(1, loom.tensor([[3], [0]]), 5.0),
           torch.zeros(2, 4).scatter_(1, torch.tensor([[3], [0]]), 5.0))
    _close(loom.zeros(2, 3, dtype=loom.int64).scatter_(0, loom.tensor([[1, 0, 1]]), 7),
           torch.zeros(2, 3, dtype=torch.int64).scatter_(0, torch.tensor([[1, 0, 1]]), 7))


def test_take_along_dim():
    order = np.argsort(rnd(3, 5), 1)
    check(lambda lib, x: lib.take_along_dim(x, lib.tensor(order), 1), rnd(3, 5))
    check(lambda lib, x: lib.take_along_dim(x, lib.tensor(order[:1]), 1), rnd(3, 5))
    check(lambda lib, x: lib.take_along_dim(x, lib.tensor([[0], [2], [1]]), 1), rnd(3, 5))
    check(lambda lib, x: lib.take_along_dim(x, lib.tensor([14, 0, 3])), rnd(3, 5))
    check(lambda lib, x: x.take_along_dim(lib.tensor([[1, 0, 2, 2, 1]]), 0), rnd(3, 5))


def test_repeat_interleave():
    check(lambda lib, x: lib.repeat_interleave(x, 3), rnd(2, 3))
    check(lambda lib, x: lib.repeat_interleave(x, 2, dim=1), rnd(2, 3))
    check(lambda lib, x: x.repeat_interleave(2, 0), rnd(2, 3))
    check(lambda lib, x: x.repeat_interleave(lib.tensor([2, 0, 1]), dim=1), rnd(2, 3))
    check(lambda lib, x: lib.repeat_interleave(x, lib.tensor([1, 2, 0, 1, 1, 3])), rnd(2, 3))
    _close(loom.repeat_interleave(loom.tensor([2, 0, 3])),
           torch.repeat_interleave(torch.tensor([2, 0, 3])))


def test_tensor_split():
    for spec in (3, 4, [1, 4], [2, 2, 9], (0, -2)):
        check(lambda lib, x: lib.tensor_split(x, spec, 1), rnd(2, 7))
    check(lambda lib, x: x.tensor_split(2), rnd(5, 2))


def test_movedim():
    check(lambda lib, x: lib.movedim(x, 0, -1), rnd(2, 3, 4))
    check(lambda lib, x: lib.moveaxis(x, (0, 2), (1, 0)), rnd(2, 3, 4))
    check(lambda lib, x: x.movedim(-1, 0), rnd(2, 3, 4))


# ---- cumulative ops, sorting, reductions ----

@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin(name):
    for dim in (0, 1, -1):
        check(lambda lib, x: getattr(lib, name)(x, dim), rnd(4, 6))
    ties = np.array([[1, 3, 3, 0, 2, 3, 5], [2, 2, 1, 1, 4, 4, 0]], np.float32)
    check(lambda lib, x: getattr(x, name)(1), ties)
    nans = np.array([1, 3, np.nan, 2, np.nan, 5], np.float32)
    check(lambda lib, x: getattr(lib, name)(x, 0), nans, grad=False)
    ints = np.array([[4, 1, 4, 7, 0], [0, 0, 9, 9, 3]])
    check(lambda lib, x: getattr(lib, name)(x, 1), ints)
    check(lambda lib, x: getattr(lib, name)(x, 0), np.array([True, False, True]))


def test_logcumsumexp():
    check(lambda lib, x: lib.logcumsumexp(x, 1), rnd(3, 6))
    check(lambda lib, x: x.logcumsumexp(0), rnd(3, 6, lo=-60, hi=60), rtol=1e-5, atol=1e-5)


def test_msort_and_trace():
    check(lambda lib, x: lib.msort(x), rnd(4, 3))
    check(lambda lib, x: x.msort(), rnd(5))
    check(lambda lib, x: lib.trace(x), rnd(3, 4))
    # torch 1.13's gradient of a tall matrix's trace is wrong (it marks
    # every (n+1)-th flat element): values only there
    check(lambda lib, x: x.trace(), rnd(4, 2), grad=False)
    check(lambda lib, x: x.trace(), rnd(2, 4))
    _close(loom.trace(loom.tensor([[1, 2], [3, 4]])), torch.trace(torch.tensor([[1, 2], [3, 4]])))


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_std_mean(name):
    x = rnd(3, 5)
    check(lambda lib, x: getattr(lib, name)(x), x)
    check(lambda lib, x: getattr(lib, name)(x, 1), x)
    check(lambda lib, x: getattr(lib, name)(x, 1, False), x)
    check(lambda lib, x: getattr(lib, name)(x, False), x)
    check(lambda lib, x: getattr(lib, name)(x, (0, 1), keepdim=True), x)
    check(lambda lib, x: getattr(lib, name)(x, 0, correction=0, keepdim=True), x)
    check(lambda lib, x: getattr(lib, name)(x, dim=1, unbiased=True), x)


def test_xlogy():
    x = np.array([0.0, 0.0, 1.5, 2.0, 0.0, 3.0], np.float32)
    y = np.array([0.0, np.nan, 3.0, 0.5, 2.0, 7.0], np.float32)
    check(lambda lib, a, b: lib.xlogy(a, b), x, y, grad=False)
    check(lambda lib, a, b: lib.xlogy(a, b), x[2:], y[2:])
    check(lambda lib, a, b: a.xlogy(b), rnd(3, 4, lo=0.1), rnd(3, 4, lo=0.1, seed=2))
    check(lambda lib, a: lib.xlogy(a, 2.0), rnd(3, lo=0.1))
    _close(loom.xlogy(loom.tensor([0, 2]), loom.tensor([0, 3])),
           torch.xlogy(torch.tensor([0, 2]), torch.tensor([0, 3])))


@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_fmax_fmin(name):
    a = np.array([1.0, np.nan, 3.0, np.nan, -1.0], np.float32)
    b = np.array([2.0, 1.0, np.nan, np.nan, -2.0], np.float32)
    check(lambda lib, x, y: getattr(lib, name)(x, y), a, b, grad=False)
    check(lambda lib, x, y: getattr(x, name)(y), rnd(3, 4), rnd(3, 4, seed=3))
    check(lambda lib, x, y: getattr(lib, name)(x, y), rnd(3, 4), rnd(4, seed=4))
    _close(getattr(loom, name)(loom.tensor([1, 5]), loom.tensor([3, 2])),
           getattr(torch, name)(torch.tensor([1, 5]), torch.tensor([3, 2])))


def test_erfinv():
    y = np.linspace(-0.999, 0.999, 401).astype(np.float32)
    check(lambda lib, x: lib.erfinv(x), y, rtol=1e-4, atol=1e-6)  # e^(y^2) grows fast near 1
    check(lambda lib, x: x.erfinv(), np.array([-1.0, 1.0, 1.5, -2.0, 0.0], np.float32),
          grad=False)
    check(lambda lib, x: lib.erfinv(x), rnd(50, lo=-0.9, hi=0.9).astype(np.float64),
          rtol=1e-6)


def test_get_default_dtype():
    assert loom.get_default_dtype() is loom.float32
    assert torch.get_default_dtype() is torch.float32


def test_unfold():
    check(lambda lib, x: x.unfold(1, 3, 2), rnd(2, 7))
    check(lambda lib, x: x.unfold(0, 2, 1), rnd(4, 3))
    check(lambda lib, x: x.unfold(-1, 4, 4), rnd(2, 3, 8))
    check(lambda lib, x: x.unfold(0, 1, 1), rnd(3))


def test_round_decimals():
    x = rnd(20, lo=-50, hi=50)
    for d in (0, 1, 2, -1):
        check(lambda lib, t: lib.round(t, decimals=d), x)
        check(lambda lib, t: t.round(decimals=d), x)


def test_index_fill():
    check(lambda lib, x: x.index_fill(1, lib.tensor([0, 3]), -2.0), rnd(3, 5))
    check(lambda lib, x: lib.index_fill(x, 0, lib.tensor([1]), 7.0), rnd(3, 5))


# ---- in-place methods ----

INPLACE = [("relu_", ()), ("abs_", ()), ("neg_", ()), ("sigmoid_", ()), ("tanh_", ()),
           ("exp_", ()), ("floor_", ()), ("ceil_", ()), ("round_", ()),
           ("clamp_min_", (0.25,)), ("clamp_max_", (-0.5,)), ("sqrt_", ())]


def test_round_inplace_decimals():
    x = rnd(3, 4)
    mine, theirs = loom.tensor(x), torch.tensor(x)
    assert mine.round_(decimals=1) is mine
    theirs.round_(decimals=1)
    _close(mine, theirs)


@pytest.mark.parametrize("name,args", INPLACE)
def test_inplace_methods(name, args):
    x = rnd(3, 4, lo=0.1 if name == "sqrt_" else -2.0)
    for real in (True, False):
        mine = loom.tensor(x)
        if not real:
            mine = mine * 1.0  # a lazy value of the step
        alias = mine
        out = getattr(mine, name)(*args)
        theirs = torch.tensor(x)
        getattr(theirs, name)(*args)
        assert out is mine and alias is mine
        _close(mine, theirs)


def test_inplace_methods_carry_gradients():
    x = rnd(3, 4)
    a, b = loom.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for lib, leaf in ((loom, a), (torch, b)):
        h = leaf * 2.0
        h.neg_()
        h.clamp_min_(-0.5)
        h.abs_()
        h.sigmoid_()
        h.sum().backward()
    _close(a.grad, b.grad)


def test_scatter_and_index_fill_of_one_position_256_times():
    # the positions written are counted: a count that wrapped at 256 would
    # leave the position as it was
    for lib in (loom, torch):
        x = lib.zeros(2, 3).scatter(1, lib.zeros(2, 256, dtype=lib.int64), 2.5)
        y = lib.zeros(4).index_fill(0, lib.ones(256, dtype=lib.int64), 7.0)
        if lib is loom:
            mx, my = x, y
        else:
            _close(mx, x)
            _close(my, y)


def test_index_fill_and_scatter_inplace():
    for lib in (loom, torch):
        x = lib.tensor(rnd(3, 5))
        x.index_fill_(1, lib.tensor([4, 0]), 9.0)
        y = lib.tensor(rnd(3, 5))
        y.scatter_(0, lib.tensor([[2, 1, 0, 0, 1]]), lib.tensor(rnd(1, 5, seed=5)))
        if lib is loom:
            mx, my = x, y
        else:
            _close(mx, x)
            _close(my, y)


def test_layout_inplace_methods():
    x = rnd(3, 3)
    mine, theirs = loom.tensor(x), torch.tensor(x)
    mine.transpose_(0, 1), theirs.transpose_(0, 1)
    _close(mine, theirs)
    mine.t_(), theirs.t_()
    _close(mine, theirs)
    mine.squeeze_(), theirs.squeeze_()  # no dim of size 1: the shape stays
    _close(mine, theirs)
    # shape changes: every reference sees the new shape and values
    x = rnd(2, 1, 3)
    mine, theirs = loom.tensor(x), torch.tensor(x)
    alias = mine
    for m, t in ((mine.squeeze_(1), theirs.squeeze_(1)),
                 (mine.unsqueeze_(0), theirs.unsqueeze_(0)),
                 (mine.transpose_(0, 2), theirs.transpose_(0, 2)),
                 (mine.squeeze_(), theirs.squeeze_())):
        assert m is alias and tuple(m.shape) == tuple(t.shape)
        _close(m, t)
    lazy = loom.tensor(rnd(2, 3)) * 2
    lazy.t_()
    assert tuple(lazy.shape) == (3, 2)
    shared = loom.zeros(2, 3)
    view = shared.numpy()  # noqa: F841 -- its memory is seen by NumPy now
    with pytest.raises(NotImplementedError, match="unsqueeze"):
        shared.unsqueeze_(0)


def test_uniform_and_normal_fill_in_place():
    loom.manual_seed(3)
    x = loom.zeros(200, 50)
    alias = x
    assert x.uniform_(-2.0, 3.0) is alias
    a = x.numpy()
    assert a.shape == (200, 50) and a.min() >= -2.0 and a.max() < 3.0
    assert abs(a.mean() - 0.5) < 0.05
    y = loom.zeros(200, 50, dtype=loom.float64) + 1.0  # lazy
    y.normal_(4.0, 0.5)
    b = y.numpy()
    assert b.dtype == np.float64 and abs(b.mean() - 4.0) < 0.02 and abs(b.std() - 0.5) < 0.02
    p = loom.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        p.uniform_()
    with loom.no_grad():
        p.normal_()
    assert p.requires_grad and np.all(p.detach().numpy() != 0)


# ---- nn.functional and nn modules ----

@pytest.mark.parametrize("name,kwargs", [
    ("selu", {}), ("celu", {}), ("celu", {"alpha": 0.7}), ("hardswish", {}),
    ("hardsigmoid", {}), ("softsign", {}), ("tanhshrink", {})])
def test_activations(name, kwargs):
    x = rnd(4, 6, lo=-5, hi=5)
    check(lambda lib, t: getattr(lib.nn.functional, name)(t, **kwargs), x)
    module = {"selu": "SELU", "celu": "CELU", "hardswish": "Hardswish",
              "hardsigmoid": "Hardsigmoid", "softsign": "Softsign",
              "tanhshrink": "Tanhshrink"}[name]
    check(lambda lib, t: getattr(lib.nn, module)(**kwargs)(t), x)


def test_softmin():
    for dim in (0, 1, -1):
        check(lambda lib, t: lib.nn.functional.softmin(t, dim), rnd(3, 4))
    check(lambda lib, t: lib.nn.Softmin(1)(t), rnd(3, 4))


def test_pools_1d():
    x = rnd(2, 3, 11)
    for k, s, p in ((2, None, 0), (3, 2, 1), (4, 3, 2)):
        check(lambda lib, t: lib.nn.functional.avg_pool1d(t, k, s, p), x)
        check(lambda lib, t: lib.nn.functional.max_pool1d(t, k, s, p), x)
        check(lambda lib, t: lib.nn.AvgPool1d(k, s, p)(t), x)
        check(lambda lib, t: lib.nn.MaxPool1d(k, s, p)(t), x)
    check(lambda lib, t: lib.nn.functional.avg_pool1d(t, 3, 2, 1, ceil_mode=True,
                                                       count_include_pad=False), x)
    check(lambda lib, t: lib.nn.functional.max_pool1d(t, 3, 2, 0, 2, ceil_mode=True), x)
    check(lambda lib, t: lib.nn.functional.max_pool1d(t, 3, return_indices=True), x)
    check(lambda lib, t: lib.nn.functional.max_pool1d(t, 2), x[0])


def test_adaptive_max_pool2d():
    x = rnd(2, 3, 8, 6)
    for size in ((4, 3), 2, (1, 1), (None, 2)):
        check(lambda lib, t: lib.nn.functional.adaptive_max_pool2d(t, size), x)
    check(lambda lib, t: lib.nn.AdaptiveMaxPool2d((2, 3), return_indices=True)(t), x)
    check(lambda lib, t: lib.nn.AdaptiveMaxPool2d(1)(t), x[0])
    with pytest.raises(NotImplementedError):
        LF.adaptive_max_pool2d(loom.tensor(x), (3, 4))


def test_pixel_shuffle():
    check(lambda lib, t: lib.nn.functional.pixel_shuffle(t, 2), rnd(2, 8, 3, 4))
    check(lambda lib, t: lib.nn.PixelShuffle(3)(t), rnd(9, 2, 2))
    check(lambda lib, t: lib.nn.functional.pixel_unshuffle(t, 2), rnd(2, 3, 4, 6))
    check(lambda lib, t: lib.nn.PixelUnshuffle(2)(t), rnd(1, 2, 3, 4, 2))
    x = loom.tensor(rnd(2, 12, 3, 5))
    _close(LF.pixel_unshuffle(LF.pixel_shuffle(x, 2), 2), torch.tensor(_np(x)))


def test_bilinear():
    x1, x2, w, b = rnd(5, 3), rnd(5, 4, seed=1), rnd(6, 3, 4, seed=2), rnd(6, seed=3)
    check(lambda lib, a, c, w, b: lib.nn.functional.bilinear(a, c, w, b), x1, x2, w, b,
          rtol=1e-5, atol=1e-5)
    check(lambda lib, a, c, w: lib.nn.functional.bilinear(a, c, w), rnd(2, 5, 3), rnd(2, 5, 4),
          w, rtol=1e-5, atol=1e-5)
    mine, theirs = loom.nn.Bilinear(3, 4, 6), torch.nn.Bilinear(3, 4, 6)
    assert [tuple(p.shape) for p in mine.parameters()] == \
        [tuple(p.shape) for p in theirs.parameters()]
    assert float(mine.weight.detach().abs().max()) <= 1 / math.sqrt(3)
    mine.load_state_dict({k: loom.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    _close(mine(loom.tensor(x1), loom.tensor(x2)), theirs(torch.tensor(x1), torch.tensor(x2)),
           atol=1e-5)
    assert loom.nn.Bilinear(3, 4, 6, bias=False).bias is None


REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cosine_embedding_loss(reduction):
    target = np.array([1, -1, 1, -1, -1])
    for margin in (0.0, 0.3):
        check(lambda lib, a, b: lib.nn.functional.cosine_embedding_loss(
            a, b, lib.tensor(target), margin, reduction=reduction), rnd(5, 4), rnd(5, 4, seed=1))
        check(lambda lib, a, b: lib.nn.CosineEmbeddingLoss(margin, reduction=reduction)(
            a, b, lib.tensor(target)), rnd(5, 4), rnd(5, 4, seed=1))
    check(lambda lib, a, b: lib.nn.functional.cosine_embedding_loss(
        a, b, lib.tensor(-1), reduction=reduction), rnd(4), rnd(4, seed=1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_ranking_loss(reduction):
    target = np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0], np.float32)
    for margin in (0.0, 0.5):
        check(lambda lib, a, b: lib.nn.functional.margin_ranking_loss(
            a, b, lib.tensor(target), margin, reduction=reduction), rnd(6), rnd(6, seed=1))
        check(lambda lib, a, b: lib.nn.MarginRankingLoss(margin, reduction=reduction)(
            a, b, lib.tensor(target)), rnd(6), rnd(6, seed=1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_triplet_margin_loss(reduction):
    a, p, n = rnd(5, 4), rnd(5, 4, seed=1), rnd(5, 4, seed=2)
    for kw in ({}, {"margin": 0.5, "p": 1}, {"swap": True}, {"p": 3, "eps": 1e-3}):
        check(lambda lib, x, y, z: lib.nn.functional.triplet_margin_loss(
            x, y, z, reduction=reduction, **kw), a, p, n, rtol=1e-5, atol=1e-5)
        check(lambda lib, x, y, z: lib.nn.TripletMarginLoss(reduction=reduction, **kw)(
            x, y, z), a, p, n, rtol=1e-5, atol=1e-5)
    check(lambda lib, x, y: lib.nn.functional.pairwise_distance(x, y), a, p)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_poisson_nll_loss(reduction):
    target = np.random.default_rng(5).poisson(2.0, (4, 5)).astype(np.float32)
    for log_input, full in ((True, False), (True, True), (False, False), (False, True)):
        x = rnd(4, 5, lo=-1, hi=1) if log_input else rnd(4, 5, lo=0.1, hi=3)
        check(lambda lib, a: lib.nn.functional.poisson_nll_loss(
            a, lib.tensor(target), log_input, full, reduction=reduction), x, rtol=1e-5,
            atol=1e-5)
        check(lambda lib, a: lib.nn.PoissonNLLLoss(log_input, full, reduction=reduction)(
            a, lib.tensor(target)), x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gaussian_nll_loss(reduction):
    x, t = rnd(4, 3), rnd(4, 3, seed=1)
    var = rnd(4, 3, lo=0.0, hi=2.0, seed=2)
    var[0, 0] = 1e-8  # clamped to eps in value, not in gradient
    for full in (False, True):
        check(lambda lib, a, b, v: lib.nn.functional.gaussian_nll_loss(
            a, b, v, full, reduction=reduction), x, t, var, rtol=1e-4, atol=1e-5)
        check(lambda lib, a, b, v: lib.nn.GaussianNLLLoss(full=full, reduction=reduction)(
            a, b, v), x, t, var, rtol=1e-4, atol=1e-5)
    check(lambda lib, a, b, v: lib.nn.functional.gaussian_nll_loss(
        a, b, v, reduction=reduction), x, t, var[:, 0].copy(), rtol=1e-4, atol=1e-5)
    check(lambda lib, a, b, v: lib.nn.functional.gaussian_nll_loss(
        a, b, v, reduction=reduction), x, t, var[:, :1].copy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="negative"):
        LF.gaussian_nll_loss(loom.tensor(x), loom.tensor(t), loom.tensor(-var))


def test_additions_compile_and_match():
    """Some of the composites inside loom.compile (fullgraph: no break),
    forward and backward, against torch."""
    index = np.array([[0, 2], [1, 0], [3, 1]])

    def step(lib, x, w):
        h = lib.nn.functional.hardswish(x @ w)
        v, _ = lib.cummax(h, 1)
        s = lib.scatter(h, 1, lib.tensor(index), v[:, :2])
        r = lib.repeat_interleave(s, 2, dim=0).unfold(1, 2, 1).sum(-1)
        loss = lib.logcumsumexp(r, 1).sum() + lib.xlogy(h.abs(), v.abs() + 1).sum() + \
            (lib.nn.functional.softmin(r, 1) * r).sum() + lib.fmax(h, v * 0.5).sum()
        loss.backward()
        return loss

    x, w = rnd(3, 4), rnd(4, 4, seed=1)
    mw = loom.tensor(w, requires_grad=True)
    compiled = loom.compile(lambda x: step(loom, x, mw), fullgraph=True)
    for _ in range(2):
        mw.grad = None
        tw = torch.tensor(w, requires_grad=True)
        mine, theirs = compiled(loom.tensor(x)), step(torch, torch.tensor(x), tw)
        _close(mine, theirs, rtol=1e-5, atol=1e-5)
        _close(mw.grad, tw.grad, rtol=1e-4, atol=1e-5)


# ---- more of PyTorch's API: stacking, fused products, conversions, dropout ----

# 3-d operands of each stacking function: equal but along the dim it joins
JOINED = {"hstack": [(2, 3, 1), (2, 1, 1)], "column_stack": [(2, 3, 1), (2, 1, 1)],
          "vstack": [(2, 3, 1), (1, 3, 1)], "row_stack": [(2, 3, 1), (1, 3, 1)],
          "dstack": [(2, 3, 1), (2, 3, 2)]}


@pytest.mark.parametrize("name", sorted(JOINED))
@pytest.mark.parametrize("shapes", [[(3,), (3,)], [(2, 3), (2, 3)], [(), ()], None], ids=str)
def test_stacking(name, shapes):
    arrays = [rnd(*s, seed=i) for i, s in enumerate(shapes or JOINED[name])]
    check(lambda lib, *ts: getattr(lib, name)(list(ts)), *arrays)
    check(lambda lib, *ts: getattr(lib, name)(ts), *arrays, grad=False)


def test_atleast_and_broadcast_to_and_clone():
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for shape in [(), (3,), (2, 3), (2, 3, 4)]:
            check(lambda lib, x: getattr(lib, name)(x), rnd(*shape))
        check(lambda lib, x, y: getattr(lib, name)(x, y), rnd(3), rnd(), grad=False)
        check(lambda lib, x, y: getattr(lib, name)([x, y]), rnd(3), rnd(2, 2), grad=False)
    check(lambda lib, x: lib.broadcast_to(x, (2, 3)), rnd(3))
    check(lambda lib, x: x.broadcast_to((4, -1, 3)), rnd(2, 1))
    check(lambda lib, x: lib.clone(x) * 2, rnd(2, 3))
    mine = loom.tensor([1.0, 2.0])
    copy = loom.clone(mine)
    copy.add_(1)
    assert mine.tolist() == [1.0, 2.0] and copy.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5)])
def test_fused_products(beta, alpha):
    kw = {"beta": beta, "alpha": alpha}
    nan_if_unread = np.full((3, 4), np.nan, np.float32) if beta == 0 else rnd(3, 4)
    check(lambda lib, i, a, b: lib.addmm(i, a, b, **kw), nan_if_unread, rnd(3, 5, seed=1),
          rnd(5, 4, seed=2), grad=beta != 0)
    check(lambda lib, i, a, b: i.addmm(a, b, **kw), rnd(4), rnd(3, 5, seed=1), rnd(5, 4, seed=2))
    check(lambda lib, i, a, v: lib.addmv(i, a, v, **kw), rnd(3), rnd(3, 5, seed=1), rnd(5, seed=2))
    check(lambda lib, i, a, v: lib.addr(i, a, v, **kw), rnd(3, 4), rnd(3, seed=1), rnd(4, seed=2))
    # PyTorch 1.13's baddbmm with beta=0 can read its output's uninitialized
    # memory (a NaN now and then): the reference there is alpha * bmm
    batched = (lambda lib, i, a, b: alpha * lib.bmm(a, b)) if beta == 0 else None
    summed = (lambda lib, i, a, b: alpha * lib.bmm(a, b).sum(0)) if beta == 0 else None
    check(lambda lib, i, a, b: lib.baddbmm(i, a, b, **kw), rnd(2, 3, 4), rnd(2, 3, 5, seed=1),
          rnd(2, 5, 4, seed=2), lib_fn=batched, grad=beta != 0)
    check(lambda lib, i, a, b: lib.addbmm(i, a, b, **kw), rnd(3, 4), rnd(2, 3, 5, seed=1),
          rnd(2, 5, 4, seed=2), lib_fn=summed, grad=beta != 0)
    check(lambda lib, i, a, b: lib.addmm(i, a, b), np.arange(12).reshape(3, 4),
          np.arange(15).reshape(3, 5), np.arange(20).reshape(5, 4))
    with pytest.raises(RuntimeError, match="must be a 2-D tensor"):
        loom.addmm(loom.ones(3), loom.ones(3), loom.ones(3, 3))


def test_cumulative_ops_take_a_dtype_and_floor_divide_is_a_method():
    ints = np.array([[1, -2, 3], [4, 5, -6]])
    for name in ("cumsum", "cumprod"):
        for dtype in ("float64", "float32", "int32"):
            check(lambda lib, x: getattr(lib, name)(x, 1, dtype=getattr(lib, dtype)), ints)
            check(lambda lib, x: getattr(x, name)(0, dtype=getattr(lib, dtype)), ints)
        check(lambda lib, x: getattr(lib, name)(x, 1, dtype=lib.float64), rnd(2, 3))
    check(lambda lib, x: x.floor_divide(2), ints)
    check(lambda lib, x, y: x.floor_divide(y), rnd(2, 3), rnd(2, 3, seed=1) + 3, grad=False)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_reduce(reduce, dim):
    index = np.random.default_rng(3).integers(0, 3, (3, 2))  # repeats; smaller than x
    check(lambda lib, x, s: x.scatter(dim, lib.tensor(index), s, reduce=reduce),
          rnd(3, 4), rnd(3, 3, seed=1), grad=False)
    check(lambda lib, x: lib.scatter(x, dim, lib.tensor(index), 1.5, reduce=reduce),
          rnd(3, 4), grad=False)
    check(lambda lib, x: x.scatter(dim, lib.tensor(index), lib.tensor(index - 1), reduce=reduce),
          np.arange(12).reshape(3, 4) - 5, grad=False)
    check(lambda lib, x: x.scatter_(dim, lib.tensor(index), 2.0, reduce=reduce), rnd(3, 4),
          grad=False)
    with pytest.raises(RuntimeError, match="either add or multiply"):
        loom.zeros(3).scatter(0, loom.tensor([0]), 1.0, reduce="mean")


def test_conversions_type_and_size():
    x = np.array([[1.5, -2.25, 3.0]], np.float32)
    for name in ("bfloat16", "half", "float", "double", "int", "long", "bool", "char"):
        mine, theirs = getattr(loom.tensor(x), name)(), getattr(torch.tensor(x), name)()
        assert str(mine.dtype).split(".")[1] == str(theirs.dtype).split(".")[1], name
        np.testing.assert_array_equal(mine.float().numpy(), theirs.float().numpy())
        assert mine.type() == theirs.type().replace("torch.", "loom."), name
    assert loom.tensor(x).type("torch.DoubleTensor").dtype is loom.float64
    assert loom.tensor(x).type(loom.int32).dtype is loom.int32
    with pytest.raises(ValueError, match="invalid type"):
        loom.tensor(x).type("torch.QuantumTensor")
    for shape in [(2, 3), (), (4, 0, 2)]:
        assert loom.zeros(shape).shape.numel() == torch.zeros(shape).shape.numel()
        assert loom.zeros(shape).size().numel() == loom.zeros(shape).numel()
        assert isinstance(loom.zeros(shape).shape, loom.Size) and loom.zeros(shape).shape == shape


def test_tensors_and_modules_pickle():
    import pickle
    x = loom.tensor([[1.5, -2.0], [3.0, 4.0]])
    for t in (x, x.bfloat16(), loom.tensor(3), loom.ones(0, 2, dtype=loom.int32), x * 2):
        back = pickle.loads(pickle.dumps(t))
        assert back.dtype is t.dtype and back.shape == t.shape
        np.testing.assert_array_equal(back.float().numpy(), t.float().numpy())
    model = loom.nn.Sequential(loom.nn.Linear(2, 3), loom.nn.Tanh())
    copy = pickle.loads(pickle.dumps(model))
    assert isinstance(copy[0].weight, loom.nn.Parameter) and copy[0].weight.requires_grad
    np.testing.assert_array_equal(copy(x).detach().numpy(), model(x).detach().numpy())
    with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
        pickle.dumps(copy[0].weight * 2)


def test_embedding_from_pretrained():
    rows = rnd(5, 3)
    for freeze in (True, False):
        for padding_idx in (None, 1, -1):
            mine = loom.nn.Embedding.from_pretrained(loom.tensor(rows), freeze, padding_idx)
            theirs = torch.nn.Embedding.from_pretrained(torch.tensor(rows), freeze, padding_idx)
            assert mine.weight.requires_grad is theirs.weight.requires_grad is (not freeze)
            assert mine.padding_idx == theirs.padding_idx
            index = [[0, 1, 4], [4, 4, 2]]
            out, tout = mine(loom.tensor(index)), theirs(torch.tensor(index))
            _close(out, tout)
            if not freeze:
                w = rnd(2, 3, 3, seed=4)
                (out * loom.tensor(w)).sum().backward()
                (tout * torch.tensor(w)).sum().backward()
                _close(mine.weight.grad, theirs.weight.grad)
    with pytest.raises(ValueError, match="2-dimensional"):
        loom.nn.Embedding.from_pretrained(loom.ones(3))


def _dropped_channels(y, x, p):
    """Which (sample, channel) planes were dropped: each plane is all zeros
    or x scaled by 1 / (1 - p) (the check of a random mask)."""
    y = _np(y)
    planes = y.reshape(y.shape[0], y.shape[1], -1) if y.ndim > 2 else y.reshape(1, y.shape[0], -1)
    ref = (x.reshape(planes.shape)) / (1 - p)
    dropped = np.all(planes == 0, axis=-1)
    np.testing.assert_allclose(planes[~dropped], ref[~dropped], rtol=1e-6)
    return dropped


@pytest.mark.filterwarnings("ignore:dropout2d. Received a 3D input")
@pytest.mark.parametrize("name,shape", [("Dropout1d", (4, 8, 5)), ("Dropout1d", (8, 5)),
                                        ("Dropout2d", (4, 8, 3, 3)), ("Dropout2d", (4, 8, 5)),
                                        ("Dropout3d", (2, 8, 2, 2, 2)), ("Dropout3d", (8, 2, 2, 2))])
def test_channel_dropout(name, shape):
    x = rnd(*shape, lo=0.5, hi=1.0)
    mine, theirs = getattr(loom.nn, name)(0.5), getattr(torch.nn, name)(0.5)
    loom.manual_seed(0)
    dropped = _dropped_channels(mine(loom.tensor(x)), x, 0.5)
    assert 0 < dropped.sum() < dropped.size  # some dropped, some kept
    _dropped_channels(theirs(torch.tensor(x)), x, 0.5)  # the same check holds for torch's
    mine.eval(), theirs.eval()
    _close(mine(loom.tensor(x)), theirs(torch.tensor(x)))
    f = getattr(LF, name.lower())
    _close(f(loom.tensor(x), 1.0), getattr(TF, name.lower())(torch.tensor(x), 1.0))
    _close(f(loom.tensor(x), 0.0), getattr(TF, name.lower())(torch.tensor(x), 0.0))
    t = loom.tensor(x)
    assert f(t, 0.5, inplace=True) is t
    _dropped_channels(t, x, 0.5)
    if name != "Dropout2d":
        with pytest.raises(RuntimeError, match="Expected"):
            f(loom.ones(3), 0.5)


def test_dropout_in_place():
    x = rnd(50, lo=0.5, hi=1.0)
    t = loom.tensor(x)
    assert LF.dropout(t, 0.25, inplace=True) is t
    kept = _np(t) != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(_np(t)[kept], x[kept] / 0.75, rtol=1e-6)
    m = loom.nn.Dropout(0.25, inplace=True)
    assert repr(m) == repr(torch.nn.Dropout(0.25, inplace=True))
    u = loom.tensor(x)
    assert m(u) is u
    _close(LF.dropout(loom.tensor(x), 0.3, training=False, inplace=True), torch.tensor(x))


@pytest.mark.parametrize("mode", ["triangular", "triangular2", "exp_range"])
def test_cyclic_lr_matches_torch(mode):
    sequences = []
    for lib in (loom, torch):
        params = [lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(1))]
        opt = lib.optim.SGD([{"params": params[:1]}, {"params": params[1:]}], lr=0.1,
                            momentum=0.9)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, [0.01, 0.02], 0.1, step_size_up=3,
                                                step_size_down=5, mode=mode, gamma=0.9)
        seq = []
        for _ in range(25):
            seq.append([(g["lr"], g["momentum"]) for g in opt.param_groups])
            opt.step()
            sched.step()
        seq.append(sched.get_last_lr())
        sequences.append(seq)
    np.testing.assert_allclose(np.array(sequences[0][:-1]), np.array(sequences[1][:-1]),
                               rtol=1e-12)
    np.testing.assert_allclose(sequences[0][-1], sequences[1][-1], rtol=1e-12)


def test_cyclic_lr_scale_fn_and_refusals():
    sequences = []
    for lib in (loom, torch):
        opt = lib.optim.Adam([lib.nn.Parameter(lib.ones(2))], lr=0.1)
        with pytest.raises(ValueError, match="must support momentum"):
            lib.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1)
        with pytest.raises(ValueError, match="mode is invalid"):
            lib.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, mode="sine", cycle_momentum=False)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2,
                                                scale_fn=lambda x: 1 / (1 + x),
                                                scale_mode="iterations", cycle_momentum=False)
        seq = []
        for _ in range(10):
            opt.step()
            sched.step()
            seq.append(opt.param_groups[0]["lr"])
        sequences.append(seq)
        if lib is loom:  # functions are not state
            assert "_scale_fn_custom" not in sched.state_dict()
    np.testing.assert_allclose(sequences[0], sequences[1], rtol=1e-12)
