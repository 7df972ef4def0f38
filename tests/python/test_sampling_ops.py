"""Resampling, pooling, padding and selection ops against PyTorch 1.13:
forward values, and gradients of a random upstream gradient through
backward against torch.autograd; wrong arguments raise clear errors."""
import numpy as np
import pytest

import loom
import loom.nn.functional as lF

torch = pytest.importorskip("torch")
tF = torch.nn.functional

RTOL, ATOL = 1e-4, 1e-5


def _outputs(y):
    return list(y) if isinstance(y, tuple) else [y]


def check(loom_fn, torch_fn, *arrays, grad=True, seed=0):
    """loom_fn(*loom tensors) against torch_fn(*torch tensors): each output's
    values, then the float inputs' gradients of sum(out0 * g)."""
    lx = [loom.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    tx = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    ly, ty = _outputs(loom_fn(*lx)), _outputs(torch_fn(*tx))
    assert len(ly) == len(ty)
    for a, b in zip(ly, ty):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), RTOL, ATOL)
    if not grad or not ty[0].dtype.is_floating_point:
        return
    g = np.asarray(np.random.default_rng(seed).standard_normal(tuple(ty[0].shape)), np.float32)
    (ly[0] * loom.tensor(g)).sum().backward()
    (ty[0] * torch.tensor(g)).sum().backward()
    for a, b in zip(lx, tx):
        if b.requires_grad:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), RTOL, ATOL)


def randn(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- interpolate ----

SCALES = [1.5, 0.5, 2, 3, 1.7, 0.6]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "area"])
@pytest.mark.parametrize("scale", SCALES)
def test_interpolate_nearest_and_area(mode, scale):
    x = randn(2, 3, 5, 7)
    check(lambda t: lF.interpolate(t, scale_factor=scale, mode=mode),
          lambda t: tF.interpolate(t, scale_factor=scale, mode=mode), x)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("align_corners", [True, False])
def test_interpolate_bilinear_bicubic(mode, scale, align_corners):
    x = randn(2, 3, 5, 7)
    kw = dict(scale_factor=scale, mode=mode, align_corners=align_corners)
    check(lambda t: lF.interpolate(t, **kw), lambda t: tF.interpolate(t, **kw), x)


@pytest.mark.parametrize("kw", [
    dict(size=(4, 11), mode="nearest"), dict(size=9, mode="nearest-exact"),
    dict(size=(3, 13), mode="bilinear"), dict(size=(8, 1), mode="bilinear", align_corners=True),
    dict(size=(6, 9), mode="bicubic", align_corners=False), dict(size=(2, 3), mode="area"),
    dict(scale_factor=(1.5, 0.5), mode="bilinear"),
    dict(scale_factor=1.5, mode="nearest", recompute_scale_factor=True),
    dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
    dict(size=(5, 7), mode="bilinear"),
], ids=str)
def test_interpolate_sizes(kw):
    x = randn(2, 3, 5, 7)
    check(lambda t: lF.interpolate(t, **kw), lambda t: tF.interpolate(t, **kw), x)


@pytest.mark.parametrize("kw", [
    dict(scale_factor=1.5, mode="linear"), dict(scale_factor=0.5, mode="linear",
                                                align_corners=True),
    dict(size=11, mode="linear"), dict(scale_factor=2, mode="nearest"),
    dict(size=4, mode="area"),
], ids=str)
def test_interpolate_1d(kw):
    check(lambda t: lF.interpolate(t, **kw), lambda t: tF.interpolate(t, **kw), randn(2, 3, 9))


def test_interpolate_float64():
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 6))
    for kw in (dict(scale_factor=1.5, mode="bicubic"), dict(size=(3, 9), mode="bilinear")):
        check(lambda t: lF.interpolate(t, **kw), lambda t: tF.interpolate(t, **kw), x)


def test_interpolate_3d_and_integers():
    kw = dict(scale_factor=(1.5, 2, 0.5), mode="trilinear")
    check(lambda t: lF.interpolate(t, **kw), lambda t: tF.interpolate(t, **kw),
          randn(1, 2, 3, 4, 6))
    ints = np.arange(2 * 3 * 4 * 5, dtype=np.int64).reshape(2, 3, 4, 5)
    check(lambda t: lF.interpolate(t, scale_factor=1.5),  # PyTorch's takes no int64
          lambda t: tF.interpolate(t.double(), scale_factor=1.5).long(), ints, grad=False)


@pytest.mark.parametrize("make", [
    lambda nn: nn.Upsample(scale_factor=1.5, mode="bilinear"),
    lambda nn: nn.Upsample(size=(4, 9), mode="bicubic", align_corners=True),
    lambda nn: nn.Upsample(scale_factor=2),
    lambda nn: nn.UpsamplingNearest2d(scale_factor=1.5),
    lambda nn: nn.UpsamplingBilinear2d(size=(7, 4)),
])
def test_upsample_modules(make):
    check(make(loom.nn), make(torch.nn), randn(2, 3, 5, 6))


@pytest.mark.filterwarnings("ignore:nn.functional.upsample")
def test_upsample_functions():
    x = randn(1, 2, 3, 5)
    check(lambda t: lF.upsample_bilinear(t, scale_factor=2),
          lambda t: tF.upsample_bilinear(t, scale_factor=2), x)
    check(lambda t: lF.upsample_nearest(t, size=(4, 4)),
          lambda t: tF.upsample_nearest(t, size=(4, 4)), x)


def test_interpolate_compiled():
    f = loom.compile(lambda t: lF.interpolate(t, scale_factor=1.5, mode="bilinear") * 2)
    x = randn(2, 3, 5, 7)
    want = tF.interpolate(torch.tensor(x), scale_factor=1.5, mode="bilinear") * 2
    np.testing.assert_allclose(f(loom.tensor(x)).numpy(), want.numpy(), RTOL, ATOL)


# ---- pooling ----

@pytest.mark.parametrize("shape", [(2, 3, 7, 8), (3, 6, 5)])
@pytest.mark.parametrize("kw", [
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(2, 1), padding=1, dilation=2, ceil_mode=True),
    dict(kernel_size=2, return_indices=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True),
    dict(kernel_size=(3, 2), stride=2, dilation=(1, 2), return_indices=True),
], ids=str)
def test_max_pool2d(shape, kw):
    check(lambda t: lF.max_pool2d(t, **kw), lambda t: tF.max_pool2d(t, **kw), randn(*shape))


@pytest.mark.parametrize("shape", [(2, 3, 7, 8), (3, 6, 5)])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kw", [
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(3, 2), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, divisor_override=5),
    dict(kernel_size=2, ceil_mode=True, divisor_override=3),
    dict(kernel_size=3, stride=1, padding=1),
], ids=str)
def test_avg_pool2d(shape, count_include_pad, kw):
    kw = dict(kw, count_include_pad=count_include_pad)
    check(lambda t: lF.avg_pool2d(t, **kw), lambda t: tF.avg_pool2d(t, **kw), randn(*shape))


@pytest.mark.parametrize("make", [
    lambda nn: nn.MaxPool2d(3, 2, 1, ceil_mode=True),
    lambda nn: nn.MaxPool2d(2, return_indices=True, ceil_mode=True),
    lambda nn: nn.AvgPool2d(3, 2, 1, True, False),
    lambda nn: nn.AvgPool2d(3, 2, 0, True, True, 4),
])
def test_pool_modules(make):
    check(make(loom.nn), make(torch.nn), randn(2, 3, 7, 6))


# ---- padding and convolution padding modes ----

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(1, 2), (2, 1, 1, 3), (0, 3, 2, 0)], ids=str)
def test_pad_modes(mode, pad):
    x = randn(2, 3, 4, 5)[0] if len(pad) == 2 else randn(2, 3, 4, 5)  # PyTorch's rule
    check(lambda t: lF.pad(t, pad, mode=mode), lambda t: tF.pad(t, pad, mode=mode), x)


def _same_weights(loom_module, torch_module):
    loom_module.load_state_dict({k: loom.tensor(v.detach().numpy())
                                 for k, v in torch_module.state_dict().items()})
    return loom_module


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("kw", [
    dict(kernel_size=3, padding=1), dict(kernel_size=(2, 3), padding="same", dilation=2),
    dict(kernel_size=3, padding="valid"), dict(kernel_size=(3, 2), padding=(1, 2), stride=2),
], ids=str)
def test_conv2d_padding_modes(padding_mode, kw):
    torch.manual_seed(0)
    tm = torch.nn.Conv2d(3, 4, padding_mode=padding_mode, **kw)
    lm = _same_weights(loom.nn.Conv2d(3, 4, padding_mode=padding_mode, **kw), tm)
    check(lm, tm, randn(2, 3, 6, 7))


@pytest.mark.parametrize("padding_mode", ["reflect", "circular"])
@pytest.mark.parametrize("padding", [2, "same"])
def test_conv1d_padding_modes(padding_mode, padding):
    torch.manual_seed(0)
    tm = torch.nn.Conv1d(3, 4, 4, padding=padding, padding_mode=padding_mode)
    lm = _same_weights(loom.nn.Conv1d(3, 4, 4, padding=padding, padding_mode=padding_mode), tm)
    check(lm, tm, randn(2, 3, 9))


# ---- selections, diagonals, medians, distances ----

@pytest.mark.parametrize("args", [(0, 0, 1), (1, 0, 2), (-2, 2, 1), (2, -1, 0), (9, 0, 1)],
                         ids=str)
def test_diagonal(args):
    check(lambda t: loom.diagonal(t, *args), lambda t: torch.diagonal(t, *args),
          randn(3, 4, 5))
    check(lambda t: t.diagonal(*args), lambda t: t.diagonal(*args), randn(3, 4, 5))


@pytest.mark.parametrize("args", [(), (1,), (-2,), (0, 0, 2), (1, 2, 0)], ids=str)
def test_diag_embed(args):
    check(lambda t: loom.diag_embed(t, *args), lambda t: torch.diag_embed(t, *args),
          randn(2, 3))
    check(lambda t: t.diag_embed(*args[:1]), lambda t: t.diag_embed(*args[:1]), randn(4))


@pytest.mark.parametrize("k", [0, 1, -2])
def test_diag(k):
    check(lambda t: loom.diag(t, k), lambda t: torch.diag(t, k), randn(4))
    check(lambda t: loom.diag(t, k), lambda t: torch.diag(t, k), randn(4, 5))


def test_masked_select():
    x = randn(3, 4)
    check(lambda t: loom.masked_select(t, t > 0.2), lambda t: torch.masked_select(t, t > 0.2), x)
    row = np.array([True, False, True, True])  # broadcast over the rows
    check(lambda t: t.masked_select(loom.tensor(row)),
          lambda t: t.masked_select(torch.tensor(row)), x)
    check(lambda t: loom.masked_select(t[:1], loom.tensor(x > 0)),
          lambda t: torch.masked_select(t[:1], torch.tensor(x > 0)), x)


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 5, 3)], ids=str)
def test_median(shape):
    x = randn(*shape)
    check(loom.median, torch.median, x)
    for dim in range(-len(shape), len(shape)):
        for keepdim in (False, True):
            check(lambda t: loom.median(t, dim, keepdim), lambda t: torch.median(t, dim, keepdim),
                  x)
    check(lambda t: t.median(-1), lambda t: t.median(-1), x)
    out = loom.median(loom.tensor(x), 0)
    assert out.values is out[0] and out.indices is out[1]


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
def test_cdist(p):
    a, b = randn(5, 3), randn(4, 3, seed=2)
    check(lambda x, y: loom.cdist(x, y, p), lambda x, y: torch.cdist(x, y, p), a, b)
    check(lambda x, y: loom.cdist(x, y, p), lambda x, y: torch.cdist(x, y, p),
          randn(2, 5, 3), randn(1, 4, 3, seed=2))


@pytest.mark.parametrize("p", [2.0, 1.0])
def test_cdist_equal_rows(p):
    a = randn(4, 3)
    check(lambda x: loom.cdist(x, x, p), lambda x: torch.cdist(x, x, p), a)


@pytest.mark.parametrize("args", [(3, 3), (3, 4, 1), (4, 3, -1), (2, 5, -3), (0, 3)], ids=str)
def test_triangle_indices(args):
    for name in ("triu_indices", "tril_indices"):
        got, want = getattr(loom, name)(*args), getattr(torch, name)(*args)
        assert got.dtype.name == "int64"
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_flip_and_roll():
    x = randn(3, 4, 5)
    check(lambda t: loom.flip(t, (0, 2)), lambda t: torch.flip(t, (0, 2)), x)
    check(lambda t: t.flip(-1, 0), lambda t: t.flip(-1, 0), x)
    check(lambda t: loom.flip(t, dims=[1]), lambda t: torch.flip(t, dims=[1]), x)
    check(lambda t: loom.roll(t, (2, -1), (0, 2)), lambda t: torch.roll(t, (2, -1), (0, 2)), x)
    check(lambda t: t.roll(3), lambda t: t.roll(3), x)


# ---- wrong arguments ----

def _x(*shape):
    return loom.tensor(randn(*shape))


BAD = [
    (lambda: lF.interpolate(_x(1, 2, 4, 4)), ValueError, "exactly one of size"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), size=3, scale_factor=2), ValueError, "exactly one"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), size=(3, 3, 3)), ValueError, "2 spatial dims"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), scale_factor=(2,)), ValueError, "scale_factor"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), size=2, mode="cubic"), ValueError, "not one of"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), size=2, mode="linear"), ValueError, "needs 3D"),
    (lambda: lF.interpolate(_x(1, 2, 4), size=2, mode="bilinear"), ValueError, "needs 4D"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), size=2, align_corners=True), ValueError,
     "align_corners"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), size=2, recompute_scale_factor=True), ValueError,
     "not meaningful"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), scale_factor=0.1), ValueError, "greater than 0"),
    (lambda: lF.interpolate(_x(4, 4), size=2), ValueError, "3-d, 4-d or 5-d"),
    (lambda: lF.interpolate(np.zeros((1, 1, 2, 2)), size=2), TypeError, "loom Tensor"),
    (lambda: lF.interpolate(_x(1, 2, 4, 4), scale_factor="2"), TypeError, "numbers"),
    (lambda: lF.interpolate(loom.tensor(np.zeros((1, 1, 2, 2), np.int64)), size=3,
                            mode="bilinear"), TypeError, "floating point"),
    (lambda: lF.max_pool2d(_x(1, 1, 4, 4), 2, padding=2), ValueError, "at most half"),
    (lambda: lF.max_pool2d(_x(1, 1, 2, 2), 3), ValueError, "too small"),
    (lambda: lF.avg_pool2d(_x(4, 4), 2), ValueError, "4-d"),
    (lambda: lF.avg_pool2d(_x(1, 1, 4, 4), 2, divisor_override=0), ValueError, "zero"),
    (lambda: lF.max_pool2d(_x(1, 1, 4, 4), 0), ValueError, "positive"),
    (lambda: lF.pad(_x(1, 2, 3), (4, 0), mode="circular"), ValueError, "more than once"),
    (lambda: lF.pad(_x(1, 2, 3), (1, 1), mode="wrap"), ValueError, "circular"),
    (lambda: loom.nn.Conv2d(1, 1, 3, padding_mode="mirror"), ValueError, "padding_mode"),
    (lambda: loom.nn.Conv2d(1, 1, 3, padding="full"), ValueError, "padding string"),
    (lambda: loom.nn.Conv2d(1, 1, 3, stride=2, padding="same"), ValueError, "strided"),
    (lambda: loom.diagonal(_x(3)), ValueError, "two or more dims"),
    (lambda: loom.diagonal(_x(3, 3), 0, 1, -1), ValueError, "must differ"),
    (lambda: loom.diag_embed(_x(3), 0, 0, 0), ValueError, "must differ"),
    (lambda: loom.masked_select(_x(3), _x(3)), TypeError, "bool"),
    (lambda: loom.masked_select(_x(3), loom.tensor([True, False])), ValueError, "broadcast"),
    (lambda: loom.median(loom.zeros(0, dtype=loom.int64)), ValueError, "no elements"),
    (lambda: loom.cdist(_x(3, 2), _x(3, 4)), ValueError, "same number of columns"),
    (lambda: loom.cdist(_x(3), _x(3, 4)), ValueError, "two or more dims"),
    (lambda: loom.cdist(_x(3, 2), _x(3, 2), p=-1), ValueError, "at least 0"),
    (lambda: loom.cdist(_x(3, 2), [[1.0, 2.0]]), TypeError, "tensors"),
    (lambda: loom.triu_indices(3, 3.5), TypeError, "int"),
    (lambda: loom.tril_indices(-1, 3), ValueError, "at least 0"),
]


@pytest.mark.parametrize("call,error,words", BAD, ids=[w for _, _, w in BAD])
def test_wrong_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call()
