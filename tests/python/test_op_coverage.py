"""Every public op of loom.functional and loom.nn.functional against PyTorch:
forward values and, for differentiable ops, gradients against torch.autograd.

The table CASES names the op each case covers; test_every_public_op_has_a_case
fails when a public name has neither a case nor an entry in EXCUSED, so a new
op cannot be added without a check here."""
import math
import zlib
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

import loom
import loom.functional as lf
import loom.nn.functional as lF

torch = pytest.importorskip("torch")

LOOM = SimpleNamespace(f=lf, F=lF, lib=loom)
TORCH = SimpleNamespace(f=torch, F=torch.nn.functional, lib=torch)
NN_NAMES = {n for n in dir(lF) if not n.startswith("_") and n != "Tensor"
            and not isinstance(getattr(lF, n), ModuleType)}

# Names with no case of their own: an alias ("alias of NAME", checked to be the
# same function) or an op tested in another file (give the file).
EXCUSED = {n: "tests/python/test_torch_idioms.py" for n in (
    "allclose", "argsort", "binary_cross_entropy", "clamp_max", "clamp_min", "einsum",
    "hardtanh", "huber_loss", "isclose", "isfinite", "isinf", "kl_div", "kthvalue",
    "nan_to_num", "norm", "normalize", "smooth_l1_loss", "sort", "tril", "triu", "unbind",
    "equal")}
EXCUSED.update({n: "tests/python/test_sampling_ops.py" for n in (
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "diagonal",
    "diag_embed", "masked_select", "median", "cdist", "triu_indices", "tril_indices")})
EXCUSED.update({n: "tests/python/test_dtype_parity.py" for n in (
    "nanmedian", "promote_types", "result_type", "can_cast", "is_floating_point")})
EXCUSED.update({n: "tests/python/test_api_additions.py" for n in (
    "adaptive_max_pool2d", "avg_pool1d", "bilinear", "celu", "cosine_embedding_loss", "cummax",
    "cummin", "erfinv", "exp2", "fmax", "fmin", "gaussian_nll_loss", "hardsigmoid", "hardswish",
    "index_fill", "log10", "log2", "logcumsumexp", "margin_ranking_loss", "max_pool1d",
    "moveaxis", "movedim", "msort", "pairwise_distance", "pixel_shuffle", "pixel_unshuffle",
    "poisson_nll_loss", "repeat_interleave", "scatter", "selu", "softmin", "softsign",
    "std_mean", "take_along_dim", "tanhshrink", "tensor_split", "trace", "triplet_margin_loss",
    "var_mean", "xlogy", "addbmm", "addmm", "addmv", "addr", "atleast_1d", "atleast_2d",
    "atleast_3d", "baddbmm", "broadcast_to", "clone", "column_stack", "dropout1d", "dropout2d",
    "dropout3d", "dstack", "hstack", "row_stack", "vstack")})
EXCUSED.update({n: "tests/python/test_nn_layers.py" for n in ("relu_", "threshold_",
                                                               "embedding_bag")})
EXCUSED.update({n: "tests/python/test_nn_volume.py" for n in (
    "conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d")})
EXCUSED.update({n: "tests/python/test_nn_windows_losses.py" for n in (
    "unfold", "fold", "channel_shuffle", "local_response_norm", "lp_pool1d", "lp_pool2d",
    "adaptive_max_pool1d", "adaptive_max_pool3d", "elu_", "celu_", "selu_", "leaky_relu_",
    "hardtanh_", "max_pool1d_with_indices", "max_pool2d_with_indices",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
    "hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "multi_margin_loss", "multilabel_margin_loss", "triplet_margin_with_distance_loss",
    "max_unpool1d", "max_unpool2d", "max_unpool3d")})
EXCUSED.update({n: "tests/python/test_nn_sampling.py" for n in ("affine_grid", "grid_sample")})
EXCUSED.update({"ctc_loss": "tests/python/test_nn_ctc.py"})
EXCUSED.update({n: "tests/python/test_probe_fixes.py" for n in (
    "broadcast_shapes", "is_complex", "is_nonzero", "numel")})
EXCUSED.update({"absolute": "alias of abs", "not_equal": "alias of ne", "sgn": "alias of sign",
                "swapdims": "alias of swapaxes"})
EXCUSED.update({n: "tests/python/test_nn_noise.py" for n in (
    "alpha_dropout", "feature_alpha_dropout", "rrelu", "rrelu_", "gumbel_softmax", "pdist")})
EXCUSED.update({"fix": "alias of trunc", "arctan2": "alias of atan2", "ger": "alias of outer",
                "view_as": "alias of reshape_as"})


# ---- inputs (float64 unless said: loom's kernels take it) ----

def u(r, shape, lo=-2.0, hi=2.0):
    return r.uniform(lo, hi, shape)


def away(r, shape, gap=0.2):
    """Uniform values at least gap from 0 (kinks of abs, relu, sign...)."""
    x = u(r, shape)
    return np.where(x < 0, x - gap, x + gap)


def frac(r, shape):
    """Values whose fraction lies in [0.1, 0.4] or [0.6, 0.9]: away from the
    jumps of floor, ceil, round and from the halves round breaks to even."""
    f = r.uniform(0.1, 0.4, shape) + 0.5 * r.integers(0, 2, shape)
    return r.integers(-3, 3, shape) + f


def ints(r, shape, lo, hi):
    return r.integers(lo, hi, shape)


def mask(r, shape):
    return r.random(shape) > 0.5


@dataclass
class Const:
    """A float input that takes no gradient (running statistics, targets)."""
    a: np.ndarray


def strided(x):
    """A non-contiguous view: a stepped slice, transposed: (13, 6) -> (6, 7)."""
    return x[::2].transpose(0, 1)


# ---- the case table ----

@dataclass
class Case:
    op: str                       # the public name covered
    make: object = None           # rng -> inputs (NumPy arrays become tensors)
    call: object = None           # (m, *tensors) -> output; m is LOOM or TORCH
    theirs: object = None         # torch's call where it differs from `call`
    grad: bool = True             # compare the gradients of the float inputs
    variant: str = ""
    tol: tuple = None             # (rtol, atol) where the defaults don't fit
    check: object = None          # a test of its own (dropout)
    xfail: str = None             # a known loom bug, precisely
    raises: type = None           # the exception that bug raises (AssertionError: a wrong value)
    kw: dict = field(default_factory=dict)

    @property
    def id(self):
        return f"{self.op}-{self.variant}" if self.variant else self.op


def C(op, make=None, call=None, **kw):
    """A case. Without call it runs op(*inputs, **kw) from m.F (loom.nn.functional,
    torch.nn.functional) for the names loom.nn.functional has, else from m.f
    (loom.functional, torch); ns="f"/"F" overrides, view= maps the first input."""
    ns = kw.pop("ns", "F" if op in NN_NAMES else "f")
    view = kw.pop("view", None)
    args = kw.pop("kw", {})
    if call is None:
        def call(m, *xs):
            if view is not None:
                xs = (view(xs[0]),) + xs[1:]
            return getattr(getattr(m, ns), op)(*xs, **args)
    return Case(op, make, call, **kw)


def X(*shape, fn=u, **kw):
    return lambda r: [fn(r, shape, **kw)]


UNARY_13x6 = (13, 6)  # made non-contiguous (6, 7) by strided()


def unary(op, fn=u, grad=True, ns=None, **kw):
    more = {"ns": ns} if ns else {}  # torch.nn.functional.tanh/sigmoid are deprecated
    return C(op, X(*UNARY_13x6, fn=fn, **kw), view=strided, grad=grad, **more)


def binary(op, fn=u, grad=True, **kw):
    # (3, 1, 7) with (4, 1): broadcast both ways to (3, 4, 7)
    return C(op, lambda r: [fn(r, (3, 1, 7), **kw), fn(r, (4, 1), **kw)], grad=grad)


def compare(op):
    # small integers as floats so that ties (eq, le, ge) occur
    return C(op, lambda r: [ints(r, (3, 1, 7), -2, 3).astype(np.float64),
                            ints(r, (4, 1), -2, 3).astype(np.float64)], grad=False)


def int_pair(r):
    """Integers of both signs over nonzero divisors of both signs."""
    return [ints(r, (3, 7), -9, 10), ints(r, (7,), 1, 4) * np.where(mask(r, (7,)), -1, 1)]


def logical(op):
    return C(op, lambda r: [mask(r, (3, 1, 7)), mask(r, (4, 1))], grad=False)


def isnan_input(r, shape):
    x = u(r, shape)
    x.flat[::5] = np.nan
    return x


def sdpa_reference(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """PyTorch's documented math of scaled_dot_product_attention (torch < 2.0
    lacks the function)."""
    scores = q @ k.transpose(-2, -1) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask)
    return torch.softmax(scores, -1) @ v


SDPA = getattr(torch.nn.functional, "scaled_dot_product_attention", sdpa_reference)


def qkv(r):
    return [u(r, (2, 3, 5, 4)), u(r, (2, 3, 7, 4)), u(r, (2, 3, 7, 4))]


def check_dropout(r):
    """p=0 and eval are the identity; with p>0 in training each element is 0
    or x/(1-p), and the gradient is the same mask scaled by 1/(1-p)."""
    a = away(r, (40, 50))
    tx = torch.from_numpy(a)
    for p, training in [(0.0, True), (0.5, False)]:
        y = lF.dropout(loom.from_numpy(a), p, training=training)
        np.testing.assert_array_equal(y.numpy(), torch.nn.functional.dropout(tx, p, training)
                                      .numpy())
    p = 0.3
    x = loom.tensor(a, requires_grad=True)
    y = lF.dropout(x, p, training=True)
    y.sum().backward()
    out = y.detach().numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], a[kept] / (1 - p), rtol=1e-12)
    assert abs(1 - kept.mean() - p) < 0.05, kept.mean()  # 7 standard deviations
    np.testing.assert_allclose(x.grad.numpy(), kept / (1 - p), rtol=1e-12)


def check_batch_norm_running_stats(r):
    """torch's F.batch_norm(training=True) updates the running buffers in place."""
    a, rm, rv = u(r, (4, 3, 5, 5)), u(r, (3,)), u(r, (3,), 0.5, 2.0)
    mine = [loom.tensor(rm), loom.tensor(rv)]
    theirs = [torch.tensor(rm), torch.tensor(rv)]
    lF.batch_norm(loom.tensor(a), *mine, training=True, momentum=0.2).numpy()
    torch.nn.functional.batch_norm(torch.tensor(a), *theirs, training=True, momentum=0.2)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-9)


def with_zeros(r, shape):
    """Uniform values with some exact zeros (cumprod's prefixes through 0)."""
    x = u(r, shape)
    x.flat[::4] = 0.0
    return x


def atan2_inputs(r):
    """Points of every quadrant and on the axes (x or y zero, not both)."""
    y, x = u(r, (5, 7)), u(r, (5, 7))
    y[0, :4], x[0, :4] = [1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.5, -1.5]
    return [y, x]


def conv_inputs(groups=1, transpose=False):
    def make(r):
        w = (6, 4 // groups, 3, 3) if not transpose else (4, 6 // groups, 3, 3)
        return [u(r, (2, 4, 9, 7)), u(r, w), u(r, (6,))]
    return make


CASES = [
    # -- elementwise, one input: (13, 6) viewed as a strided (6, 7) --
    unary("abs", away), unary("neg"), unary("negative"), unary("exp"),
    unary("log", lo=0.2, hi=3.0), unary("log1p", lo=-0.6, hi=3.0), unary("expm1"),
    unary("sqrt", lo=0.2, hi=3.0), unary("rsqrt", lo=0.2, hi=3.0), unary("reciprocal", away),
    unary("sin"), unary("cos"), unary("tan", lo=-1.2, hi=1.2), unary("asin", lo=-0.9, hi=0.9),
    unary("acos", lo=-0.9, hi=0.9), unary("atan"), unary("sinh"), unary("cosh"), unary("asinh"),
    unary("acosh", lo=1.1, hi=3.0), unary("atanh", lo=-0.9, hi=0.9), unary("erf"), unary("tanh", ns="f"), unary("sigmoid", ns="f"),
    unary("relu", away), unary("silu"), unary("softplus"),
    unary("floor", frac), unary("ceil", frac), unary("round", frac), unary("sign", away),
    unary("isnan", isnan_input, grad=False),
    C("logical_not", lambda r: [mask(r, (5, 7))], grad=False),
    C("logical_not", lambda r: [ints(r, (5, 7), -1, 2)], grad=False, variant="int"),
    C("gelu", X(*UNARY_13x6), view=strided),
    C("gelu", X(5, 7), variant="tanh", kw=dict(approximate="tanh")),
    C("elu", X(*UNARY_13x6, fn=away), view=strided, kw=dict(alpha=0.7)),
    C("leaky_relu", X(*UNARY_13x6, fn=away), view=strided, kw=dict(negative_slope=0.2)),
    C("clamp", X(*UNARY_13x6), view=strided, kw=dict(min=-0.5, max=0.7)),
    C("clamp", X(5, 7), variant="min-only", kw=dict(min=-0.5)),
    C("clip", X(5, 7), kw=dict(max=0.3)),
    # stop_gradient(x) * x: the gradient is stop_gradient(x), nothing through it
    C("stop_gradient", X(5, 7), lambda m, x: m.f.stop_gradient(x) * x,
      theirs=lambda m, x: x.detach() * x),
    C("cast", X(5, 7), lambda m, x: m.f.cast(x, m.lib.float32), variant="float32",
      theirs=lambda m, x: x.to(torch.float32)),
    C("cast", X(5, 7, fn=frac), lambda m, x: m.f.cast(x, m.lib.int32), variant="int32",
      theirs=lambda m, x: x.to(torch.int32), grad=False),

    # -- elementwise, two inputs, broadcast (3, 1, 7) with (4, 1) --
    binary("add"), binary("sub"), binary("subtract"), binary("mul"), binary("multiply"),
    binary("div", away), binary("divide", away), binary("true_divide", away),
    binary("maximum"), binary("minimum"), binary("pow", lo=0.3, hi=2.0),
    # torch has no gradient for floor_divide (its grad_fn is NotImplemented)
    binary("remainder", away), binary("floor_divide", away, grad=False),
    C("remainder", int_pair, variant="int", grad=False),
    C("floor_divide", int_pair, variant="int", grad=False),
    binary("fmod", away), C("fmod", int_pair, variant="int", grad=False),
    C("pow", X(5, 7), lambda m, x: m.f.pow(x, 3), variant="int-exponent"),
    C("pow", X(5, 7), lambda m, x: m.f.pow(2.0, x), variant="number-base"),
    C("add", X(5, 7), lambda m, x: m.f.add(x, 2.5), variant="number"),
    C("mul", lambda r: [ints(r, (5, 7), -3, 4)], lambda m, x: m.f.mul(x, 0.5),
      variant="int-times-float", grad=False),
    C("div", lambda r: [ints(r, (5, 7), -9, 10), ints(r, (7,), 1, 5)], variant="int", grad=False),
    compare("eq"), compare("ne"), compare("lt"), compare("le"), compare("gt"), compare("ge"),
    C("ne", lambda r: [ints(r, (5, 7), -2, 3)], lambda m, x: m.f.ne(x, 1), variant="number",
      grad=False),
    logical("logical_and"), logical("logical_or"), logical("logical_xor"),
    C("bitwise_and", lambda r: [ints(r, (3, 1, 7), -70, 70), ints(r, (4, 1), -9, 9)], grad=False),
    C("bitwise_or", lambda r: [ints(r, (5, 7), -70, 70), ints(r, (7,), -9, 9)], grad=False),
    C("bitwise_xor", lambda r: [ints(r, (5, 7), -70, 70), ints(r, (7,), -9, 9)], grad=False),
    C("bitwise_xor", lambda r: [mask(r, (5, 7)), mask(r, (7,))], grad=False, variant="bool"),
    C("bitwise_not", lambda r: [ints(r, (5, 7), -70, 70)], grad=False),
    C("bitwise_not", lambda r: [mask(r, (5, 7))], grad=False, variant="bool"),
    C("bitwise_left_shift", lambda r: [ints(r, (5, 7), -70, 70), ints(r, (7,), 0, 20)],
      grad=False),
    C("bitwise_right_shift", lambda r: [ints(r, (5, 7), -700, 700), ints(r, (7,), 0, 12)],
      grad=False),
    C("logical_or", lambda r: [ints(r, (5, 7), -1, 2), u(r, (7,))], variant="int-float",
      grad=False),
    C("where", lambda r: [mask(r, (3, 1, 7)), u(r, (4, 1)), u(r, (3, 4, 7))]),
    C("where", lambda r: [mask(r, (5, 7)), u(r, (5, 7))],
      lambda m, c, x: m.f.where(c, x, 0.5), variant="number"),
    C("masked_fill", lambda r: [u(r, (5, 7)), mask(r, (1, 7))],
      lambda m, x, k: m.f.masked_fill(x.transpose(0, 1), k.transpose(0, 1), -1.5)),

    # -- reductions over (3, 5, 7), some through a permuted view --
    C("sum", X(3, 5, 7)),
    C("sum", X(3, 5, 7), variant="dims-keepdim", kw=dict(dim=(0, 2), keepdim=True)),
    C("mean", X(3, 5, 7), lambda m, x: m.f.mean(x.permute(2, 0, 1), dim=1)),
    C("prod", X(3, 5, 7, fn=away), kw=dict(dim=1, keepdim=True)),
    C("prod", X(3, 7, fn=away), variant="all"),
    C("amax", X(3, 5, 7), kw=dict(dim=(0, 2))),
    C("amin", X(3, 5, 7), kw=dict(dim=-1, keepdim=True)),
    C("max", X(3, 5, 7)),
    C("max", X(3, 5, 7), variant="dim-keepdim", kw=dict(dim=1, keepdim=True)),
    C("max", lambda r: [u(r, (3, 1, 7)), u(r, (4, 1))], variant="tensor"),
    C("min", X(3, 5, 7), lambda m, x: m.f.min(x.transpose(0, 2), 1), variant="dim"),
    C("min", X(3, 5, 7)),
    C("argmax", X(3, 5, 7), grad=False),
    C("argmax", X(3, 5, 7), variant="dim-keepdim", kw=dict(dim=1, keepdim=True), grad=False),
    C("argmin", X(3, 5, 7), lambda m, x: m.f.argmin(x.transpose(0, 2), 2), grad=False),
    C("logsumexp", X(3, 5, 7), kw=dict(dim=1, keepdim=True)),
    C("var", X(3, 5, 7), kw=dict(dim=1)),
    C("var", X(3, 5, 7), variant="correction0-keepdim", kw=dict(dim=(0, 2), correction=0,
                                                              keepdim=True)),
    C("std", X(3, 5, 7), kw=dict(dim=(0, 2), unbiased=False)),
    C("std", X(3, 5, 7), variant="all"),
    C("cumsum", X(*UNARY_13x6), view=strided, kw=dict(dim=1)),
    C("softmax", X(3, 5, 7), lambda m, x: m.F.softmax(x.transpose(0, 2), dim=0)),
    C("log_softmax", X(3, 5, 7), kw=dict(dim=1)),
    C("any", lambda r: [mask(r, (3, 5)) & mask(r, (3, 5))], grad=False),
    C("any", lambda r: [mask(r, (3, 5)) & mask(r, (3, 5))], variant="dim-keepdim",
      kw=dict(dim=1, keepdim=True), grad=False),
    C("any", lambda r: [np.array([[0.0, 0.5], [0.0, 0.0]])], variant="float", kw=dict(dim=1),
      grad=False),
    C("all", lambda r: [mask(r, (3, 5)) | mask(r, (3, 5))], grad=False),
    C("all", lambda r: [mask(r, (3, 5)) | mask(r, (3, 5))], variant="dim", kw=dict(dim=0),
      grad=False),
    C("all", lambda r: [np.array([[0.25, 0.5], [0.0, 2.0]])], variant="float", kw=dict(dim=1),
      grad=False),
    C("topk", X(3, 7), kw=dict(k=3, dim=1)),
    C("topk", X(7, 3), lambda m, x: m.f.topk(x.t(), 2, dim=0, largest=False),
      variant="smallest"),

    # -- composites of the ops (PyTorch's names) --
    C("clamp", lambda r: [u(r, (3, 4, 5)), u(r, (4, 1), -1, 0), u(r, (5,), 0, 1)],
      variant="tensor-bounds"),
    C("clamp", lambda r: [u(r, (3, 4, 5)), u(r, (5,))], lambda m, x, lo: m.f.clamp(x, min=lo),
      variant="tensor-min"),
    C("clamp", lambda r: [u(r, (3, 4, 5)), u(r, (4, 1))], lambda m, x, hi: m.f.clamp(x, max=hi),
      variant="tensor-max"),
    C("trunc", X(5, 7, fn=frac)), C("frac", X(5, 7, fn=frac)),
    C("square", X(5, 7)),
    C("square", lambda r: [ints(r, (5, 7), -4, 5)], variant="int", grad=False),
    C("logit", X(5, 7, lo=0.05, hi=0.95)),
    C("logit", X(5, 7, lo=0.01, hi=0.99), variant="eps", kw=dict(eps=0.1)),
    C("addcmul", lambda r: [u(r, (3, 4)), u(r, (4,)), u(r, (3, 1))], kw=dict(value=0.5)),
    C("addcdiv", lambda r: [u(r, (3, 4)), u(r, (4,)), away(r, (3, 1))], kw=dict(value=2)),
    C("lerp", lambda r: [u(r, (3, 4)), u(r, (4,)), u(r, (3, 4), 0, 1)]),
    C("lerp", lambda r: [u(r, (3, 4)), u(r, (4,))], lambda m, a, b: m.f.lerp(a, b, 0.3),
      variant="number"),
    C("hypot", lambda r: [away(r, (3, 1, 7)), u(r, (4, 1))]),
    C("atan2", atan2_inputs),
    C("dot", lambda r: [u(r, (7,)), u(r, (7,))]),
    C("outer", lambda r: [u(r, (3,)), u(r, (4,))]),
    C("diag", X(4)), C("diag", X(4), variant="above", kw=dict(diagonal=2)),
    C("diag", X(3, 5), variant="matrix"),
    C("diag", X(3, 5), variant="matrix-below", kw=dict(diagonal=-1)),
    C("diag", X(3, 5), variant="matrix-above", kw=dict(diagonal=3)),
    C("cumprod", X(3, 6, fn=with_zeros), kw=dict(dim=1)),
    C("cumprod", X(4, 3, fn=with_zeros), variant="dim0", kw=dict(dim=0)),
    C("roll", X(3, 4), kw=dict(shifts=(-1, 5), dims=(1, 0))),
    C("roll", X(3, 4), variant="flat", kw=dict(shifts=3)),
    C("fliplr", X(3, 4)), C("flipud", X(3, 4)),
    C("rot90", X(2, 3, 4), kw=dict(k=1, dims=(1, 2))),
    C("rot90", X(3, 4), variant="k3", kw=dict(k=-1)),
    C("rot90", X(3, 4), variant="k2", kw=dict(k=2)),
    C("meshgrid", lambda r: [u(r, (3,)), u(r, (4,)), u(r, (2,))], kw=dict(indexing="ij")),
    C("meshgrid", lambda r: [u(r, (3,)), u(r, (4,))], variant="xy", kw=dict(indexing="xy")),
    C("narrow", X(3, 5), kw=dict(dim=1, start=-4, length=2)),
    C("ravel", X(3, 4, 5), lambda m, x: m.f.ravel(x.transpose(0, 2))),
    C("unflatten", X(3, 12), lambda m, x: x.unflatten(1, (2, -1, 3))),
    C("expand_as", lambda r: [u(r, (3, 1)), u(r, (2, 3, 4))], lambda m, x, y: x.expand_as(y),
      grad=False),
    C("reshape_as", lambda r: [u(r, (3, 4)), u(r, (2, 6))], lambda m, x, y: x.reshape_as(y),
      grad=False),
    C("type_as", lambda r: [u(r, (3, 4)), ints(r, (2,), 0, 3)], lambda m, x, y: x.type_as(y),
      grad=False),
    C("sum", X(3, 5), lambda m, x: m.f.sum(x, 1, dtype=m.lib.float32), variant="dtype"),
    C("sum", lambda r: [ints(r, (3, 5), -4, 5).astype(np.int32)],
      lambda m, x: x.sum(dtype=m.lib.float64), variant="int-dtype", grad=False),
    C("mean", X(3, 5), lambda m, x: x.mean(0, dtype=m.lib.float32), variant="dtype"),
    C("where", lambda r: [ints(r, (3, 4), -1, 2)], lambda m, c: m.f.where(c), variant="cond",
      grad=False),
    C("nonzero", lambda r: [ints(r, (3, 4), -1, 2)], variant="as-tuple",
      kw=dict(as_tuple=True), grad=False),

    # -- contractions --
    C("matmul", lambda r: [u(r, (2, 1, 5, 7)), u(r, (3, 4, 7))],
      lambda m, a, b: m.f.matmul(a, b.transpose(-1, -2))),
    C("matmul", lambda r: [u(r, (7,)), u(r, (7, 3))], variant="vector-matrix"),
    C("mm", lambda r: [u(r, (7, 5)), u(r, (7, 3))], lambda m, a, b: m.f.mm(a.t(), b)),
    C("bmm", lambda r: [u(r, (2, 5, 7)), u(r, (2, 7, 3))]),

    # -- layout --
    C("reshape", X(3, 4, 5), lambda m, x: m.f.reshape(x.transpose(0, 2), (10, -1))),
    C("flatten", X(2, 3, 4, 5), kw=dict(start_dim=1, end_dim=2)),
    C("permute", X(2, 3, 4), lambda m, x: m.f.permute(x, (2, 0, 1))),
    C("transpose", X(2, 3, 4), lambda m, x: m.f.transpose(x, 0, 2)),
    C("swapaxes", X(2, 3, 4), lambda m, x: m.f.swapaxes(x, -1, 1)),
    C("t", X(*UNARY_13x6), lambda m, x: m.f.t(x[::2])),
    C("unsqueeze", X(3, 7), kw=dict(dim=-1)),
    C("squeeze", X(1, 3, 1, 7)),
    C("squeeze", X(1, 3, 1, 7), variant="dim", kw=dict(dim=2)),
    C("expand", X(3, 1, 7), lambda m, x: m.f.expand(x, 2, 3, 4, -1),
      theirs=lambda m, x: x.expand(2, 3, 4, -1)),
    C("cat", lambda r: [u(r, (2, 3, 4)), u(r, (2, 1, 4)), u(r, (2, 5, 4))],
      lambda m, a, b, c: m.f.cat([a, b, c], 1)),
    C("concat", lambda r: [u(r, (2, 3)), u(r, (2, 3))], lambda m, a, b: m.f.concat([a, b], -1)),
    C("concatenate", lambda r: [u(r, (2, 3)), u(r, (4, 3))],
      lambda m, a, b: m.f.concatenate([a, b])),
    C("stack", lambda r: [u(r, (3, 7)), u(r, (3, 7))],
      lambda m, a, b: m.f.stack([a.t(), b.t()], -1)),
    C("split", X(3, 7), kw=dict(split_size_or_sections=2, dim=1)),
    C("split", X(7, 3), lambda m, x: m.f.split(x, [2, 5]), variant="sections"),
    C("chunk", X(3, 7), kw=dict(chunks=3, dim=1)),
    C("flip", X(3, 4, 5), kw=dict(dims=(0, 2))),
    C("tile", X(3, 4), lambda m, x: m.f.tile(x, (2,))),
    C("tile", X(3, 4), lambda m, x: m.f.tile(x, (2, 1, 3)), variant="more-dims"),
    C("repeat", X(3, 4), lambda m, x: m.f.repeat(x, 2, 1, 3),
      theirs=lambda m, x: x.repeat(2, 1, 3)),
    C("pad", X(3, 4, 5), kw=dict(pad=(1, 2, 0, 3), value=0.5)),
    C("pad", X(2, 4, 5), variant="reflect", kw=dict(pad=(2, 1, 1, 3), mode="reflect")),
    C("pad", X(2, 4, 5), variant="replicate", kw=dict(pad=(2, 1), mode="replicate")),

    # -- indexing --
    C("index_select", lambda r: [u(r, (3, 7)), np.array([6, 0, 6, 2])],
      lambda m, x, i: m.f.index_select(x, 1, i)),
    C("gather", lambda r: [u(r, (3, 7)), ints(r, (3, 4), 0, 7)],
      lambda m, x, i: m.f.gather(x, 1, i)),
    C("gather", lambda r: [u(r, (5, 4, 3)), ints(r, (6, 2, 3), 0, 5)],
      lambda m, x, i: m.f.gather(x, 0, i), variant="dim0"),
    C("scatter_add", lambda r: [u(r, (5, 3)), ints(r, (4, 3), 0, 5), u(r, (4, 3))],
      lambda m, x, i, s: m.f.scatter_add(x, 0, i, s)),
    C("scatter_add", lambda r: [u(r, (3, 5)), ints(r, (3, 4), 0, 5), u(r, (3, 4))],
      lambda m, x, i, s: m.f.scatter_add(x, 1, i, s), variant="dim1"),
    C("index_add", lambda r: [u(r, (5, 3)), np.array([4, 0, 4, 2]), u(r, (4, 3))],
      lambda m, x, i, s: m.f.index_add(x, 0, i, s)),
    C("index_add", lambda r: [u(r, (3, 5)), np.array([1, 1, 4]), u(r, (3, 3))],
      lambda m, x, i, s: m.f.index_add(x, 1, i, s), variant="dim1"),
    C("index_copy", lambda r: [u(r, (5, 3)), np.array([4, 0, 2]), u(r, (3, 3))],
      lambda m, x, i, s: m.f.index_copy(x, 0, i, s)),
    C("index_copy", lambda r: [u(r, (3, 5)), np.array([1, 3]), u(r, (3, 2))],
      lambda m, x, i, s: m.f.index_copy(x, 1, i, s), variant="dim1"),
    C("take", lambda r: [u(r, (3, 4)), np.array([[0, 11], [-1, 5]])],
      lambda m, x, i: m.f.take(x, i)),
    C("index_put", lambda r: [u(r, (5, 3)), np.array([4, 0, 4, 2]), u(r, (4, 3))],
      lambda m, x, i, v: m.f.index_put(x, (i,), v, accumulate=True)),
    C("index_put", lambda r: [u(r, (5, 3)), np.array([4, 0, 2]), np.array([1, 1, 0]),
                              u(r, (3,))],
      lambda m, x, i, j, v: m.f.index_put(x, (i, j), v), variant="unique"),
    C("nonzero", lambda r: [ints(r, (3, 4, 5), -1, 2)], grad=False),
    C("one_hot", lambda r: [ints(r, (3, 5), 0, 6)], kw=dict(num_classes=7), grad=False),
    C("embedding", lambda r: [np.array([[1, 9, 1], [0, 0, 4]]), u(r, (10, 4))]),

    # -- loom.nn.functional --
    C("linear", lambda r: [u(r, (2, 3, 7)), u(r, (5, 7)), u(r, (5,))]),
    C("linear", lambda r: [u(r, (7, 3)), u(r, (5, 7))],
      lambda m, x, w: m.F.linear(x.t(), w), variant="no-bias"),
    C("conv2d", conv_inputs(), kw=dict(stride=2, padding=1)),
    C("conv2d", conv_inputs(groups=2), lambda m, x, w, b: m.F.conv2d(x, w, None, dilation=2,
                                                                  groups=2, padding="same"),
      variant="groups-dilation-same"),
    C("conv_transpose2d", conv_inputs(transpose=True),
      kw=dict(stride=2, padding=1, output_padding=1)),
    C("conv_transpose2d", conv_inputs(groups=2, transpose=True), variant="groups",
      kw=dict(groups=2)),
    C("max_pool2d", X(2, 3, 9, 7), kw=dict(kernel_size=3, stride=2, padding=1)),
    C("max_pool2d", X(2, 3, 9, 7), variant="dilation", kw=dict(kernel_size=2, dilation=2)),
    C("avg_pool2d", X(2, 3, 9, 7), kw=dict(kernel_size=3, stride=2, padding=1,
                                           count_include_pad=False)),
    C("avg_pool2d", X(2, 3, 8, 6), variant="default", kw=dict(kernel_size=2)),
    C("adaptive_avg_pool2d", X(2, 3, 6, 9), kw=dict(output_size=(2, 3))),
    C("adaptive_avg_pool2d", X(2, 3, 5, 7), variant="global", kw=dict(output_size=1)),
    C("adaptive_avg_pool2d", X(2, 3, 5, 7), variant="any-size", kw=dict(output_size=(3, 9))),
    C("adaptive_avg_pool1d", X(2, 3, 7), kw=dict(output_size=3)),
    C("batch_norm", lambda r: [u(r, (4, 3, 5, 5)), Const(u(r, (3,))), Const(u(r, (3,), 0.5, 2)),
                               u(r, (3,)), u(r, (3,))], kw=dict(training=True, momentum=0.2)),
    C("batch_norm", lambda r: [u(r, (4, 3, 5, 5)), Const(u(r, (3,))), Const(u(r, (3,), 0.5, 2)),
                               u(r, (3,)), u(r, (3,))], variant="eval", kw=dict(eps=1e-3)),
    C("batch_norm", lambda r: [u(r, (4, 3, 5, 5)), Const(u(r, (3,))), Const(u(r, (3,), 0.5, 2))],
      variant="no-affine", kw=dict(training=True)),
    Case("batch_norm", variant="running-stats", check=check_batch_norm_running_stats),
    C("layer_norm", lambda r: [u(r, (2, 3, 4, 5)), u(r, (4, 5)), u(r, (4, 5))],
      lambda m, x, w, b: m.F.layer_norm(x, (4, 5), w, b, eps=1e-3)),
    C("layer_norm", X(3, 7), variant="no-affine", kw=dict(normalized_shape=(7,))),
    C("dropout", check=check_dropout),
    C("relu6", X(5, 7, lo=-3, hi=8)), C("mish", X(5, 7)),
    C("logsigmoid", X(5, 7, lo=-30, hi=5), tol=(1e-8, 1e-10)),
    C("glu", X(3, 6, 2), kw=dict(dim=1)),
    C("prelu", lambda r: [u(r, (4, 3, 5)), u(r, (3,), 0, 0.5)]),
    C("prelu", lambda r: [u(r, (4, 3)), u(r, (1,), 0, 0.5)], variant="one-weight"),
    C("cosine_similarity", lambda r: [u(r, (4, 5, 3)), u(r, (1, 5, 3))]),
    C("cosine_similarity", lambda r: [u(r, (4, 5)), u(r, (4, 5))], variant="dim-last",
      kw=dict(dim=-1)),
    C("group_norm", lambda r: [u(r, (2, 6, 3, 4)), u(r, (6,)), u(r, (6,))],
      lambda m, x, w, b: m.F.group_norm(x, 3, w, b, eps=1e-3)),
    C("group_norm", X(2, 4, 5), variant="no-affine", kw=dict(num_groups=2)),
    C("conv1d", lambda r: [u(r, (2, 4, 11)), u(r, (6, 2, 3)), u(r, (6,))],
      kw=dict(stride=2, padding=1, dilation=2, groups=2)),
    C("conv1d", lambda r: [u(r, (2, 4, 9)), u(r, (5, 4, 3))], variant="same",
      kw=dict(padding="same")),
    C("conv_transpose1d", lambda r: [u(r, (2, 4, 7)), u(r, (4, 3, 3)), u(r, (6,))],
      kw=dict(stride=2, padding=1, output_padding=1, groups=2)),
    C("instance_norm", lambda r: [u(r, (2, 3, 4, 5)), u(r, (3,)), u(r, (3,))],
      lambda m, x, w, b: m.F.instance_norm(x, weight=w, bias=b, eps=1e-3)),
    C("threshold", X(5, 7), kw=dict(threshold=0.3, value=-4.0)),
    C("hardshrink", X(5, 7), kw=dict(lambd=0.7)),
    C("softshrink", X(5, 7), kw=dict(lambd=0.7)),
    C("mse_loss", lambda r: [u(r, (3, 7)), u(r, (3, 7))]),
    C("mse_loss", lambda r: [u(r, (3, 7)), u(r, (3, 7))], variant="none",
      kw=dict(reduction="none")),
    C("l1_loss", lambda r: [u(r, (3, 7)), u(r, (3, 7)) + 5.0]),
    C("l1_loss", lambda r: [u(r, (3, 7)), u(r, (3, 7)) + 5.0], variant="sum",
      kw=dict(reduction="sum")),
    C("binary_cross_entropy_with_logits", lambda r: [u(r, (3, 7), -8, 8), u(r, (3, 7), 0, 1)]),
    C("binary_cross_entropy_with_logits", lambda r: [u(r, (3, 7), -8, 8), u(r, (3, 7), 0, 1)],
      variant="none", kw=dict(reduction="none")),
    C("cross_entropy", lambda r: [u(r, (7, 5)), ints(r, (7,), 0, 5)]),
    C("cross_entropy", lambda r: [u(r, (7, 5)), np.array([0, 2, 4, 2, 1, 2, 3])],
      variant="ignore-smoothing", kw=dict(ignore_index=2, label_smoothing=0.1)),
    C("cross_entropy", lambda r: [u(r, (7, 5)), ints(r, (7,), 0, 5)], variant="none",
      kw=dict(reduction="none")),
    C("nll_loss", lambda r: [u(r, (7, 5)), ints(r, (7,), 0, 5)]),
    C("nll_loss", lambda r: [u(r, (7, 5)), np.array([0, 3, 4, 3, 1, 3, 3])],
      variant="ignore-sum", kw=dict(ignore_index=3, reduction="sum")),
    C("scaled_dot_product_attention", qkv, theirs=lambda m, q, k, v: SDPA(q, k, v)),
    C("scaled_dot_product_attention", qkv, variant="causal-scale",
      kw=dict(is_causal=True, scale=0.3),
      theirs=lambda m, q, k, v: SDPA(q, k, v, is_causal=True, scale=0.3)),
    # the diagonal kept: no query row masked whole (its softmax would be NaN)
    C("scaled_dot_product_attention", lambda r: qkv(r) + [mask(r, (5, 7)) | (np.eye(5, 7) > 0)],
      variant="bool-mask", theirs=lambda m, q, k, v, a: SDPA(q, k, v, attn_mask=a),
      call=lambda m, q, k, v, a: m.F.scaled_dot_product_attention(q, k, v, attn_mask=a)),
    C("scaled_dot_product_attention", lambda r: qkv(r) + [Const(u(r, (3, 1, 7)))],
      variant="float-mask", theirs=lambda m, q, k, v, a: SDPA(q, k, v, attn_mask=a),
      call=lambda m, q, k, v, a: m.F.scaled_dot_product_attention(q, k, v, attn_mask=a)),
    *[C("scatter_reduce", lambda r: [u(r, (4, 6)), ints(r, (3, 5), 0, 6), u(r, (3, 5))],
        lambda m, x, i, s, red=red, inc=inc: m.f.scatter_reduce(x, 1, i, s, red,
                                                                include_self=inc),
        variant=f"{red}-{'self' if inc else 'no-self'}", grad=red != "prod")
      for red in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)],
    C("scatter_reduce", lambda r: [ints(r, (5,), -9, 9), ints(r, (7,), 0, 5),
                                   ints(r, (7,), -9, 9)],
      lambda m, x, i, s: m.f.scatter_reduce(x, 0, i, s, "mean"), variant="int-mean",
      grad=False),
    # compositions (loom/_composites.py)
    C("erfc", X(*UNARY_13x6), view=strided),
    C("deg2rad", X(5, 7)), C("rad2deg", X(5, 7)),
    C("sinc", lambda r: [np.concatenate([u(r, (5,)), [0.0, 1.0, -2.0]])]),
    C("signbit", lambda r: [np.array([-0.0, 0.0, -1.5, 2.0, -np.inf, np.inf])], grad=False),
    C("signbit", lambda r: [ints(r, (5, 7), -3, 3)], grad=False, variant="int"),
    C("isposinf", lambda r: [np.array([np.inf, -np.inf, np.nan, 1.0])], grad=False),
    C("isneginf", lambda r: [np.array([np.inf, -np.inf, np.nan, 1.0])], grad=False),
    C("isreal", X(5, 7), grad=False),
    C("heaviside", lambda r: [ints(r, (3, 1, 7), -2, 3).astype(np.float64), u(r, (4, 1))],
      grad=False),
    C("logaddexp", lambda r: [u(r, (3, 1, 7), -30, 30), u(r, (4, 1), -30, 30)]),
    C("logaddexp2", lambda r: [u(r, (3, 1, 7), -30, 30), u(r, (4, 1), -30, 30)]),
    C("float_power", lambda r: [u(r, (5, 7), 0.5, 2).astype(np.float32), u(r, (7,))],
      grad=False),
    C("inner", lambda r: [u(r, (3, 4)), u(r, (2, 5, 4))]),
    C("vdot", lambda r: [u(r, (6,)), u(r, (6,))]),
    C("mv", lambda r: [u(r, (4, 6)), u(r, (6,))]),
    C("tensordot", lambda r: [u(r, (3, 4, 5)), u(r, (4, 5, 2))]),
    C("tensordot", lambda r: [u(r, (3, 4, 5)), u(r, (5, 2, 3))], variant="pairs",
      kw=dict(dims=([0, 2], [2, 0]))),
    C("kron", lambda r: [u(r, (2, 3)), u(r, (4, 1, 2))]),
    C("cross", lambda r: [u(r, (4, 3)), u(r, (4, 3))], kw=dict(dim=1)),
    C("cross", lambda r: [u(r, (2, 3, 5)), u(r, (2, 3, 5))], variant="first-of-size-3"),
    C("matrix_power", X(3, 4, 4), lambda m, x: m.f.matrix_power(x, 5)),
    C("matrix_power", X(4, 4), lambda m, x: m.f.matrix_power(x, 0), variant="zero"),
    C("dist", lambda r: [u(r, (4, 5)), u(r, (5,))], kw=dict(p=3)),
    C("broadcast_tensors", lambda r: [u(r, (3, 1, 7)), u(r, (4, 1))]),
    C("block_diag", lambda r: [u(r, (2, 3)), u(r, (4,)), u(r, ()), u(r, (1, 2))]),
    C("cartesian_prod", lambda r: [u(r, (3,)), u(r, (2,)), u(r, (4,))]),
    C("combinations", X(5), kw=dict(r=3)),
    C("combinations", X(4), variant="replacement", kw=dict(r=2, with_replacement=True)),
    C("diagflat", X(2, 3), kw=dict(offset=-1)),
    C("select", X(4, 5, 6), lambda m, x: m.f.select(x, 1, -2)),
    C("hsplit", X(4, 6), lambda m, x: m.f.hsplit(x, 3)),
    C("vsplit", X(6, 4), lambda m, x: m.f.vsplit(x, [1, 4])),
    C("dsplit", X(2, 3, 6), lambda m, x: m.f.dsplit(x, 2)),
    C("diff", X(4, 6), kw=dict(n=2, dim=1)),
    C("diff", lambda r: [u(r, (4, 6)), u(r, (4, 2)), u(r, (4, 1))], variant="prepend-append",
      call=lambda m, x, p, a: m.f.diff(x, prepend=p, append=a)),
    C("diff", lambda r: [mask(r, (9,))], grad=False, variant="bool"),
    C("trapezoid", X(4, 6), kw=dict(dx=0.5)),
    C("trapezoid", lambda r: [u(r, (4, 6)), np.sort(u(r, (6,)))], variant="points",
      call=lambda m, y, x: m.f.trapezoid(y, x, dim=1)),
    C("trapz", lambda r: [u(r, (3, 5)), np.sort(u(r, (3, 5)), axis=1)]),
    C("cov", X(3, 8)),
    C("cov", lambda r: [u(r, (3, 8)), ints(r, (8,), 1, 4), u(r, (8,), 0.1, 1.0)],
      variant="weights", call=lambda m, x, f, a: m.f.cov(x, fweights=f, aweights=a,
                                                          correction=2)),
    C("corrcoef", X(4, 9)),
    C("logspace", lambda r: [], lambda m: m.lib.logspace(-2, 3, 7, base=2.0), grad=False),
    C("select_scatter", lambda r: [u(r, (3, 4, 5)), u(r, (3, 5))],
      lambda m, x, s: m.f.select_scatter(x, s, 1, -1)),
    C("slice_scatter", lambda r: [u(r, (6, 4)), u(r, (2, 4))],
      lambda m, x, s: m.f.slice_scatter(x, s, 0, 1, 5, 2)),
    C("renorm", X(4, 5), lambda m, x: m.f.renorm(x, 2, 0, 1.5)),
    C("renorm", X(4, 5, 3), lambda m, x: m.f.renorm(x, 1, 1, 3.0), variant="p1-dim1"),
    # (PyTorch 1.13's vander backward fails: an in-place write it saved)
    C("vander", X(5), lambda m, x: m.f.vander(x, 4), grad=False),
    C("vander", X(4), lambda m, x: m.f.vander(x, increasing=True), variant="increasing",
      grad=False),
    C("ldexp", lambda r: [u(r, (3, 1, 7)), ints(r, (4, 1), -3, 4).astype(np.float64)],
      grad=False),
    *[C("quantile", X(4, 9), lambda m, x, i=i: m.f.quantile(x, 0.3, 1, interpolation=i),
        variant=i) for i in ("linear", "lower", "higher", "midpoint", "nearest")],
    C("quantile", X(5, 6), lambda m, x: m.f.quantile(x, m.lib.tensor([0.2, 0.9],
                                                                      dtype=m.lib.float64),
                                                     0, True), variant="many-keepdim"),
    C("nanquantile", lambda r: [np.where(mask(r, (4, 9)), np.nan, u(r, (4, 9)))],
      lambda m, x: m.f.nanquantile(x, 0.6, 1), grad=False),
]


# ---- running a case ----

def to_tensors(inputs, grad):
    """The inputs in both libraries; float arrays take gradients when grad."""
    mine, theirs, leaves = [], [], []
    for a in inputs:
        if isinstance(a, Const):
            mine.append(loom.tensor(a.a)), theirs.append(torch.tensor(a.a))
        elif isinstance(a, np.ndarray):
            g = grad and a.dtype.kind == "f"
            m, t = loom.tensor(a, requires_grad=g), torch.tensor(a, requires_grad=g)
            mine.append(m), theirs.append(t)
            if g:
                leaves.append((m, t))
        else:
            mine.append(a), theirs.append(a)
    return mine, theirs, leaves


def as_list(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


def tolerance(case, dtype):
    if case.tol:
        return case.tol
    return (1e-9, 1e-11) if dtype == np.float64 else (1e-5, 1e-6)


def assert_same(case, mine, theirs, what):
    assert len(mine) == len(theirs), f"{what}: {len(mine)} outputs, torch {len(theirs)}"
    for i, (m, t) in enumerate(zip(mine, theirs)):
        m = np.asarray(m.detach().numpy() if hasattr(m, "detach") else m)
        t = t.detach().numpy()
        msg = f"{case.id} {what} {i}"
        assert m.shape == t.shape, f"{msg}: shape {m.shape}, torch {t.shape}"
        assert m.dtype == t.dtype, f"{msg}: dtype {m.dtype}, torch {t.dtype}"
        if t.dtype.kind == "f":
            rtol, atol = tolerance(case, t.dtype)
            np.testing.assert_allclose(m, t, rtol=rtol, atol=atol, err_msg=msg)
        else:  # indices, masks, counts: exactly
            np.testing.assert_array_equal(m, t, err_msg=msg)


def run_case(case):
    r = np.random.default_rng(zlib.crc32(case.id.encode()))
    if case.check:
        return case.check(r)
    mine_in, theirs_in, leaves = to_tensors(case.make(r), case.grad)
    mine = as_list(case.call(LOOM, *mine_in))
    theirs = as_list((case.theirs or case.call)(TORCH, *theirs_in))
    assert_same(case, mine, theirs, "output")
    if not case.grad:
        return
    # loss = sum over the float outputs of (y * fixed random cotangent)
    loss, tloss = 0.0, 0.0
    for m, t in zip(mine, theirs):
        if t.dtype.is_floating_point:
            c = r.standard_normal(tuple(t.shape)).astype(t.detach().numpy().dtype)
            loss = loss + (m * loom.from_numpy(c)).sum()
            tloss = tloss + (t * torch.from_numpy(c)).sum()
    tloss.backward()
    # An op whose gradient is zero everywhere (floor, sign...) gives loom an
    # output that does not require grad: its gradients are zeros.
    if loss.requires_grad:
        loss.backward()
    grads = [m.grad if m.grad is not None else loom.zeros(m.shape, dtype=m.dtype)
             for m, _ in leaves]
    tgrads = [t.grad if t.grad is not None else torch.zeros_like(t) for _, t in leaves]
    assert_same(case, grads, tgrads, "gradient of input")


def param(case):
    marks = ([pytest.mark.xfail(strict=True, raises=case.raises, reason=case.xfail)]
             if case.xfail else [])
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [param(c) for c in CASES])
def test_op_against_torch(case):
    run_case(case)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_every_public_op_has_a_case():
    public = set(lf.__all__) | NN_NAMES
    # a name in both namespaces is one function (else it needs its own case)
    for name in NN_NAMES & set(lf.__all__):
        assert getattr(lF, name) is getattr(lf, name), name
    covered = {c.op for c in CASES}
    missing = sorted(public - covered - set(EXCUSED))
    assert not missing, f"ops with no case in test_op_coverage.CASES: {missing}"
    assert not sorted(covered - public), "cases of names that are not public ops"
    for name, reason in EXCUSED.items():
        assert name in public and name not in covered, name
        if reason.startswith("alias of "):
            target = reason.split()[2]
            assert getattr(lf, name) is getattr(lf, target) and target in covered, name
