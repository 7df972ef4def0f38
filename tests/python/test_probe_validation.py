"""Differences an outside tester found with PyTorch 1.13, each checked
against PyTorch: adaptive average pooling of any output size, random
draws of integer dtypes, BatchNorm's input rank, Conv's groups at
construction, clamp without bounds, unbatched convolutions and atan2 at
signed zeros and infinities."""
import math

import numpy as np
import pytest

import loom
import loom.nn.functional as LF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(23)


def _data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _np(t):
    return t.detach().numpy()


def _close(mine, theirs, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(_np(mine), _np(theirs), rtol=rtol, atol=atol)


def _same_weights(mine, theirs):
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})


def _both(fn_loom, fn_torch, *arrays):
    """fn of each library on the same data, and the gradients of
    sum(out * g) for one fixed g, through .backward()."""
    xs = [loom.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, yt = fn_loom(*xs), fn_torch(*ts)
    assert tuple(y.shape) == tuple(yt.shape)
    g = _data(*yt.shape)
    (y * loom.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    _close(y, yt)
    for x, t in zip(xs, ts):
        _close(x.grad, t.grad)


# ---- 1. adaptive average pooling ----

@pytest.mark.parametrize("h, w, out", [
    (5, 7, (3, 2)), (7, 5, (2, 3)), (4, 4, (3, 3)), (3, 5, (7, 9)), (2, 3, (5, 4)),
    (6, 8, (4, 5)), (5, 7, 3), (5, 7, 1), (5, 7, (1, 4)), (5, 7, (None, 3)),
    (5, 7, (4, None)), (5, 7, (None, None)), (6, 8, (3, 4)), (6, 8, (6, 8)),
    (9, 10, (4, 6)), (1, 1, (3, 2)), (10, 3, (3, 10))])
def test_adaptive_avg_pool2d_any_size(h, w, out):
    x = _data(2, 3, h, w)
    _both(lambda t: LF.adaptive_avg_pool2d(t, out), lambda t: TF.adaptive_avg_pool2d(t, out),
          x)
    _both(lambda t: LF.adaptive_avg_pool2d(t, out), lambda t: TF.adaptive_avg_pool2d(t, out),
          x[0])  # unbatched (C, H, W)
    module = loom.nn.AdaptiveAvgPool2d(out)
    _close(module(loom.tensor(x)), torch.nn.AdaptiveAvgPool2d(out)(torch.tensor(x)))


def test_adaptive_avg_pool2d_float64_and_errors():
    x = RNG.standard_normal((1, 2, 5, 7))
    y = LF.adaptive_avg_pool2d(loom.tensor(x), (3, 4))
    assert y.dtype is loom.float64
    np.testing.assert_allclose(_np(y), _np(TF.adaptive_avg_pool2d(torch.tensor(x), (3, 4))),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="output_size must be 2"):
        LF.adaptive_avg_pool2d(loom.tensor(_data(1, 2, 5, 7)), (2, 2, 2))
    with pytest.raises(RuntimeError):
        TF.adaptive_avg_pool2d(torch.tensor(_data(1, 2, 5, 7)), (2, 2, 2))
    with pytest.raises(ValueError, match="3-d .* or 4-d"):
        LF.adaptive_avg_pool2d(loom.tensor(_data(5, 7)), 2)
    with pytest.raises(RuntimeError, match="Expected 3D or 4D tensor"):
        TF.adaptive_avg_pool2d(torch.tensor(_data(5, 7)), 2)


@pytest.mark.parametrize("length, out", [(7, 3), (7, 1), (4, 6), (8, 4), (5, (2,)),
                                         (5, None)])
def test_adaptive_avg_pool1d(length, out):
    x = _data(2, 3, length)
    _both(lambda t: LF.adaptive_avg_pool1d(t, out), lambda t: TF.adaptive_avg_pool1d(t, out)
          if out is not None else t, x)
    if out is not None:
        _both(lambda t: LF.adaptive_avg_pool1d(t, out),
              lambda t: TF.adaptive_avg_pool1d(t, out), x[0])
        _close(loom.nn.AdaptiveAvgPool1d(out)(loom.tensor(x)),
               torch.nn.AdaptiveAvgPool1d(out)(torch.tensor(x)))


def test_adaptive_avg_pool2d_compiled():
    pool = loom.compile(lambda t: LF.adaptive_avg_pool2d(t, (3, 5)))
    x = _data(2, 3, 7, 9)
    _close(pool(loom.tensor(x)), TF.adaptive_avg_pool2d(torch.tensor(x), (3, 5)))


# ---- 2. random draws of integer dtypes ----

@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_random_float_draws_refuse_integer_dtypes(dtype):
    for name, kernel in (("randn", "normal_kernel_cpu"), ("rand", "check_uniform_bounds")):
        with pytest.raises(RuntimeError):
            getattr(torch, name)(3, dtype=getattr(torch, dtype))
        with pytest.raises(RuntimeError, match=f'"{kernel}" not implemented for'):
            getattr(loom, name)(3, dtype=getattr(loom, dtype))
    z = loom.zeros(3, dtype=getattr(loom, dtype))
    with pytest.raises(RuntimeError, match="normal_kernel_cpu"):
        loom.randn_like(z)
    with pytest.raises(RuntimeError, match="check_uniform_bounds"):
        loom.rand_like(z)
    with pytest.raises(RuntimeError, match="normal_kernel_cpu"):
        loom.nn.init.normal_(z)
    with pytest.raises(RuntimeError, match="check_uniform_bounds"):
        loom.nn.init.uniform_(z)
    with pytest.raises(RuntimeError, match="normal_kernel_cpu"):
        torch.nn.init.normal_(torch.zeros(3, dtype=getattr(torch, dtype)))


def test_random_float_draws_keep_float_dtypes():
    assert loom.randn(3, dtype=loom.float64).dtype is loom.float64
    assert loom.rand(2, 2, dtype=loom.float32).dtype is loom.float32
    assert loom.randint(0, 5, (3,)).dtype is loom.int64
    assert loom.randn_like(loom.zeros(3, dtype=loom.int64), dtype=loom.float32).shape == (3,)


# ---- 3. BatchNorm's input rank ----

@pytest.mark.parametrize("name, rank, message", [
    ("BatchNorm2d", 3, "expected 4D input \\(got 3D input\\)"),
    ("BatchNorm2d", 5, "expected 4D input \\(got 5D input\\)"),
    ("BatchNorm2d", 2, "expected 4D input \\(got 2D input\\)"),
    ("BatchNorm1d", 4, "expected 2D or 3D input \\(got 4D input\\)"),
    ("BatchNorm1d", 1, "expected 2D or 3D input \\(got 1D input\\)")])
def test_batch_norm_input_rank(name, rank, message):
    x = _data(*([2, 3, 4, 5, 6][:rank] if rank > 1 else [3]))
    for train in (True, False):
        theirs = getattr(torch.nn, name)(3).train(train)
        mine = getattr(loom.nn, name)(3).train(train)
        with pytest.raises(ValueError, match=message):
            theirs(torch.tensor(x))
        with pytest.raises(ValueError, match=message):
            mine(loom.tensor(x))


def test_batch_norm_right_ranks_still_match():
    for name, shape in (("BatchNorm2d", (4, 3, 5, 5)), ("BatchNorm1d", (4, 3)),
                        ("BatchNorm1d", (4, 3, 6))):
        theirs, mine = getattr(torch.nn, name)(3), getattr(loom.nn, name)(3)
        x = _data(*shape)
        _close(mine(loom.tensor(x)), theirs(torch.tensor(x)), atol=1e-5)
        _close(mine.running_mean, theirs.running_mean)
        _close(mine.running_var, theirs.running_var)


# ---- 4. groups at construction ----

@pytest.mark.parametrize("name", ["Conv1d", "Conv2d", "ConvTranspose2d"])
@pytest.mark.parametrize("args, message", [
    ((3, 4, 3, 2), "in_channels must be divisible by groups"),
    ((4, 3, 3, 2), "out_channels must be divisible by groups"),
    ((4, 4, 3, 0), "groups must be a positive integer"),
    ((4, 4, 3, -2), "groups must be a positive integer")])
def test_conv_groups_checked_at_construction(name, args, message):
    cin, cout, k, groups = args
    with pytest.raises(ValueError, match=message):
        getattr(torch.nn, name)(cin, cout, k, groups=groups)
    with pytest.raises(ValueError, match=message):
        getattr(loom.nn, name)(cin, cout, k, groups=groups)


def test_conv_groups_that_divide_still_build():
    for name in ("Conv1d", "Conv2d", "ConvTranspose2d"):
        assert tuple(getattr(loom.nn, name)(4, 6, 3, groups=2).weight.shape) == \
            tuple(getattr(torch.nn, name)(4, 6, 3, groups=2).weight.shape)


# ---- 5. clamp without bounds ----

def test_clamp_needs_a_bound():
    message = "At least one of 'min' or 'max' must not be None"
    with pytest.raises(RuntimeError, match=message):
        torch.clamp(torch.ones(2))
    for call in (lambda x: loom.clamp(x), lambda x: x.clamp(), lambda x: x.clamp_(),
                 lambda x: loom.clip(x), lambda x: x.clamp(None, None)):
        with pytest.raises(RuntimeError, match=message):
            call(loom.ones(2))
    x = _data(5)
    _close(loom.clamp(loom.tensor(x), min=0.1), torch.clamp(torch.tensor(x), min=0.1))
    _close(loom.tensor(x).clamp(max=-0.1), torch.tensor(x).clamp(max=-0.1))


# ---- 6. unbatched convolutions ----

def test_unbatched_functional_convolutions():
    _both(lambda x, w, b: LF.conv2d(x, w, b, 1, 1), lambda x, w, b: TF.conv2d(x, w, b, 1, 1),
          _data(3, 6, 5), _data(4, 3, 3, 3), _data(4))
    _both(lambda x, w: LF.conv2d(x, w, None, 2, 0, 1, 3),
          lambda x, w: TF.conv2d(x, w, None, 2, 0, 1, 3), _data(6, 7, 7), _data(3, 2, 3, 3))
    _both(lambda x, w, b: LF.conv1d(x, w, b, 1, 2), lambda x, w, b: TF.conv1d(x, w, b, 1, 2),
          _data(3, 9), _data(5, 3, 3), _data(5))
    _both(lambda x, w, b: LF.conv_transpose2d(x, w, b, 2, 1, 1),
          lambda x, w, b: TF.conv_transpose2d(x, w, b, 2, 1, 1),
          _data(3, 4, 5), _data(3, 2, 3, 3), _data(2))


@pytest.mark.parametrize("mode", ["zeros", "reflect", "circular"])
def test_unbatched_conv_modules(mode):
    for name, shape in (("Conv2d", (3, 6, 7)), ("Conv1d", (3, 8))):
        theirs = getattr(torch.nn, name)(3, 4, 3, padding=1, padding_mode=mode)
        mine = getattr(loom.nn, name)(3, 4, 3, padding=1, padding_mode=mode)
        _same_weights(mine, theirs)
        x = _data(*shape)
        xl, xt = loom.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y = mine(xl)
        # PyTorch 1.13's circular padding refuses unbatched input (F.pad's
        # check): its batched result of one item is the reference there
        yt = theirs(xt) if mode != "circular" else theirs(xt.unsqueeze(0)).squeeze(0)
        assert tuple(y.shape) == tuple(yt.shape)
        _close(y, yt, atol=1e-5)
        y.sum().backward()
        yt.sum().backward()
        _close(xl.grad, xt.grad, atol=1e-5)
        _close(mine.weight.grad, theirs.weight.grad, atol=1e-4)
    theirs, mine = torch.nn.ConvTranspose2d(3, 2, 3, stride=2), loom.nn.ConvTranspose2d(
        3, 2, 3, stride=2)
    _same_weights(mine, theirs)
    x = _data(3, 4, 4)
    _close(mine(loom.tensor(x)), theirs(torch.tensor(x)), atol=1e-5)


def test_conv_input_of_wrong_rank():
    for fn, x, w in ((LF.conv2d, _data(5, 5), _data(4, 3, 3, 3)),
                     (LF.conv1d, _data(5), _data(4, 3, 3)),
                     (LF.conv2d, _data(1, 1, 3, 5, 5), _data(4, 3, 3, 3))):
        name = fn.__name__
        with pytest.raises(RuntimeError, match=f"input to {name}, but got input of size"):
            getattr(TF, name)(torch.tensor(x), torch.tensor(w))
        with pytest.raises(ValueError, match=f"input to {name}, but got input of size"):
            fn(loom.tensor(x), loom.tensor(w))


# ---- 7. atan2 at signed zeros and infinities ----

def test_atan2_signed_zeros_and_infinities():
    inf, nan = math.inf, math.nan
    pairs = [(0., -0.), (-0., -0.), (0., 0.), (-0., 0.), (0., -1.), (-0., -1.), (0., 1.),
             (-0., 1.), (1., 0.), (1., -0.), (-1., 0.), (-1., -0.), (inf, inf), (-inf, inf),
             (inf, -inf), (-inf, -inf), (inf, 1.), (-inf, -1.), (1., inf), (1., -inf),
             (-1., -inf), (nan, 1.), (1., nan), (0., nan), (2., -3.), (-3., 2.), (-5., -5.)]
    for dtype in (np.float32, np.float64):
        y = np.array([p[0] for p in pairs], dtype)
        x = np.array([p[1] for p in pairs], dtype)
        mine = _np(loom.atan2(loom.tensor(y), loom.tensor(x)))
        theirs = _np(torch.atan2(torch.tensor(y), torch.tensor(x)))
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)
        real = ~np.isnan(theirs)  # a NaN's sign bit means nothing
        np.testing.assert_array_equal(np.signbit(mine)[real], np.signbit(theirs)[real])
        np.testing.assert_array_equal(np.signbit(mine)[real], np.signbit(np.arctan2(y, x))[real])


def test_atan2_gradient_and_compiled():
    y, x = _data(6), _data(6)
    y[0], x[1] = 0.0, 0.0
    _both(loom.atan2, torch.atan2, y, x)
    fn = loom.compile(lambda a, b: loom.atan2(a, b))
    y = np.array([0., -0., -0., 0., 1.], np.float32)
    x = np.array([-0., -0., -1., -1., -0.], np.float32)
    mine = _np(fn(loom.tensor(y), loom.tensor(x)))
    np.testing.assert_array_equal(mine, np.arctan2(y, x))
    np.testing.assert_array_equal(np.signbit(mine), np.signbit(np.arctan2(y, x)))


def test_a_window_past_a_symbolic_input_fails_at_the_call():
    """Sizes that varied between calls make the dims symbolic; a conv
    whose kernel is larger than this call's image, or a reflect pad wider
    than its dim, still raises at the call (as PyTorch does), and the
    next, unrelated read is not affected."""
    conv = loom.nn.Conv2d(3, 4, 5)
    for s in (8, 7):
        assert conv(loom.ones(1, 3, s, s)).shape == (1, 4, s - 4, s - 4)
    with pytest.raises(ValueError, match="too small"):
        conv(loom.ones(1, 3, 3, 3))
    assert (loom.tensor([1.0, 2.0]) + 1).tolist() == [2.0, 3.0]
    for s in (8, 7):
        assert LF.pad(loom.ones(1, 1, s), (3, 3), mode="reflect").shape == (1, 1, s + 6)
    with pytest.raises(ValueError, match="reflect pad 3"):
        LF.pad(loom.ones(1, 1, 2), (3, 3), mode="reflect")
    assert (loom.tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]


@pytest.mark.parametrize("call", [
    lambda lib, x: lib.gather(x, 1, lib.tensor([[7]])),
    lambda lib, x: lib.gather(x, 0, lib.tensor([[9, 0]])),
    lambda lib, x: lib.gather(x, 1, lib.tensor([[0, 1], [2, 10]])),
    lambda lib, x: lib.take_along_dim(x, lib.tensor([[7]]), dim=1),
    lambda lib, x: lib.take_along_dim(x, lib.tensor([25])),
])
def test_gather_index_out_of_range_names_it_as_pytorch(call):
    """A real index out of range raises at the call, with the index, the
    dim and its size in PyTorch's words (not a position of x flattened)."""
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    with pytest.raises(RuntimeError) as theirs:
        call(torch, torch.tensor(a))
    with pytest.raises(RuntimeError) as ours:
        call(loom, loom.tensor(a))
    assert str(ours.value) == str(theirs.value)
