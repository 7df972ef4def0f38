"""Dtypes, creation, median, formatting and error messages as PyTorch
1.13's: bfloat16 creation and fills, the float16 x bfloat16 promotion,
median's NaN and integer results, format specs, and the errors raised
for wrong dims and wrong layer inputs. Each against torch."""
import numpy as np
import pytest

import loom
import loom.nn as nn

torch = pytest.importorskip("torch")


def _name(dtype):
    return str(dtype).split(".")[-1]


def _same(mine, theirs):
    """One dtype and one value (bfloat16 compared through float32)."""
    assert _name(mine.dtype) == _name(theirs.dtype), (mine.dtype, theirs.dtype)
    a = mine.float().numpy() if _name(mine.dtype) == "bfloat16" else mine.numpy()
    b = theirs.float().numpy() if theirs.dtype == torch.bfloat16 else theirs.numpy()
    np.testing.assert_array_equal(a, b)


# ---- bfloat16 creation and fills ----

@pytest.mark.parametrize("make", [
    lambda lib, bf: lib.ones(2, 3, dtype=bf),
    lambda lib, bf: lib.full((2,), 1.5, dtype=bf),
    lambda lib, bf: lib.full((2,), 3, dtype=bf, requires_grad=False),
    lambda lib, bf: lib.ones_like(lib.zeros(3, dtype=bf)),
    lambda lib, bf: lib.full_like(lib.zeros(3, dtype=bf), 2.25),
    lambda lib, bf: lib.zeros(2, dtype=bf).new_ones(3),
    lambda lib, bf: lib.zeros(2, dtype=bf).new_full((2, 2), -0.75),
    lambda lib, bf: lib.zeros(3, dtype=bf).fill_(2.5),
])
def test_bfloat16_creation_and_fills_match_torch(make):
    _same(make(loom, loom.bfloat16), make(torch, torch.bfloat16))


def test_bfloat16_parameters_initialize_train_and_load():
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2).to(torch.bfloat16)
    mine = nn.Linear(3, 2).to(loom.bfloat16)
    for init in (lambda n, w: n.init.zeros_(w), lambda n, w: n.init.ones_(w),
                 lambda n, w: n.init.constant_(w, 0.3)):
        init(nn, mine.weight), init(torch.nn, theirs.weight)
        _same(mine.weight.detach(), theirs.weight.detach())
    nn.init.normal_(mine.weight)  # draws land in the parameter's memory
    assert mine.weight.dtype is loom.bfloat16 and float(mine.weight.float().abs().sum()) > 0
    mine.load_state_dict({k: v.float().numpy() for k, v in theirs.state_dict().items()})
    _same(mine.bias.detach(), theirs.bias.detach())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = mine(loom.tensor(x).to(loom.bfloat16)).float().sum()
    out.backward()
    tout = theirs(torch.tensor(x).to(torch.bfloat16)).float().sum()
    tout.backward()
    np.testing.assert_allclose(float(out), float(tout), rtol=1e-2)
    _same(mine.bias.grad, theirs.bias.grad)
    w = loom.ones(3, dtype=loom.bfloat16, requires_grad=True)
    (w * w).sum().backward()
    _same(w.grad, torch.full((3,), 2.0, dtype=torch.bfloat16))


# ---- median: NaN, integer dtypes, nanmedian ----

NAN = float("nan")
ROWS = np.array([[1.0, NAN, 3.0, NAN, 0.5], [2.0, 2.0, -5.0, 1.0, 4.0],
                 [NAN, 7.0, 6.0, 5.0, 8.0]], np.float32)


def _grads(fn, x):
    """fn's result (a tensor or its values) and the gradient of its sum,
    for loom and torch on the same array."""
    out = []
    for lib in (loom, torch):
        t = lib.tensor(x, requires_grad=True)
        r = fn(lib, t)
        v = r if isinstance(r, (loom.Tensor, torch.Tensor)) else r[0]
        lib.where(lib.isnan(v), lib.zeros_like(v), v).sum().backward()
        out.append((r, t.grad))
    return out


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_of_values_with_nan_matches_torch(name):
    for x in (ROWS, ROWS[1:], ROWS[:, 1:], ROWS[1]):
        (mine, mgrad), (theirs, tgrad) = _grads(lambda lib, t: getattr(lib, name)(t), x)
        np.testing.assert_array_equal(mine.detach().numpy(), theirs.detach().numpy())
        np.testing.assert_array_equal(mgrad.numpy(), tgrad.numpy())
        for dim in (0, -1) if x.ndim == 2 else (0,):
            for keepdim in (False, True):
                (mine, mgrad), (theirs, tgrad) = _grads(
                    lambda lib, t: getattr(t, name)(dim, keepdim), x)
                np.testing.assert_array_equal(mine.values.detach().numpy(),
                                              theirs.values.detach().numpy())
                np.testing.assert_array_equal(mine.indices.numpy(), theirs.indices.numpy())
                np.testing.assert_array_equal(mgrad.numpy(), tgrad.numpy())


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_median_of_integers_keeps_their_dtype(dtype):
    x = np.array([[3, 1, 2, 9], [-4, 8, 8, 0]], dtype)
    for name in ("median", "nanmedian"):
        _same(getattr(loom, name)(loom.tensor(x)), getattr(torch, name)(torch.tensor(x)))
        for dim in (0, 1):
            mine, theirs = getattr(loom, name)(loom.tensor(x), dim), \
                getattr(torch, name)(torch.tensor(x), dim)
            _same(mine.values, theirs.values)
            _same(mine.indices, theirs.indices)


# ---- promotion ----

HALF_VALUES = [1.0009765625, 3.140625, 1000.5, -0.0]  # exact in float16, not bfloat16


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "atan2"])
def test_float16_with_bfloat16_is_float32(op):
    ones = [1.0, 2.0, 1.0, 4.0]
    mine = getattr(loom, op)(loom.tensor(HALF_VALUES, dtype=loom.float16),
                             loom.tensor(ones, dtype=loom.bfloat16))
    theirs = getattr(torch, op)(torch.tensor(HALF_VALUES, dtype=torch.float16).float()
                                if op == "atan2" else  # torch 1.13 has no float16 atan2
                                torch.tensor(HALF_VALUES, dtype=torch.float16),
                                torch.tensor(ones, dtype=torch.bfloat16).float()
                                if op == "atan2" else torch.tensor(ones, dtype=torch.bfloat16))
    assert mine.dtype is loom.float32
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6)
    both = loom.cat([loom.ones(1, dtype=loom.float16), loom.ones(1, dtype=loom.bfloat16)])
    assert both.dtype is loom.float32


def test_atan2_keeps_bfloat16():
    y = [1.0, -0.0, float("inf"), float("-inf"), 0.0, 2.0]
    x = [1.0, -1.0, float("-inf"), float("-inf"), -0.0, -3.0]
    for name in ("bfloat16", "float32", "float64"):
        _same(loom.atan2(loom.tensor(y, dtype=getattr(loom, name)),
                         loom.tensor(x, dtype=getattr(loom, name))),
              torch.atan2(torch.tensor(y, dtype=getattr(torch, name)),
                          torch.tensor(x, dtype=getattr(torch, name))))


def test_zero_and_negative_zero_are_different_constants():
    x = [1.0, -2.0]
    for s in (0.0, -0.0, 0.0, -0.0):
        _same(1.0 / (loom.tensor(x) * s), 1.0 / (torch.tensor(x) * s))
        _same(loom.tensor(x).mul(s).reciprocal(), torch.tensor(x).mul(s).reciprocal())
        _same(1.0 / loom.full((2,), s), 1.0 / torch.full((2,), s))


# ---- format specs, bool of no values, NumPy operands ----

def test_format_spec_of_a_zero_dim_tensor_formats_its_value():
    for spec in (".4f", ">10.2f", "e", "", "g"):
        assert format((loom.tensor([1.23456, 2.0]) * 2).mean(), spec) == \
            format((torch.tensor([1.23456, 2.0]) * 2).mean(), spec)
    assert f"{loom.tensor(3):d} {loom.tensor(True):d} {loom.tensor(7):>4}" == \
        f"{torch.tensor(3):d} {torch.tensor(True):d} {torch.tensor(7):>4}"
    assert f"{loom.tensor([1.5, 2.0])}" == "tensor([1.5000, 2.0000])"
    for t in (loom.tensor([1.5]), nn.Parameter(loom.tensor(1.5))):
        with pytest.raises(TypeError, match="unsupported format string"):
            format(t, ".2f")


def test_bool_of_no_values_says_so():
    for lib in (loom, torch):
        with pytest.raises(RuntimeError, match="Tensor with no values is ambiguous"):
            bool(lib.ones(0))
        with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
            bool(lib.ones(2))


@pytest.mark.parametrize("array", [np.ones(2, np.float32), np.arange(1.0, 3.0),
                                   np.array(2.5), np.full((3, 2), 0.5, np.float32)],
                         ids=["float32", "float64", "0-d", "broadcast"])
def test_operators_take_a_numpy_array_as_a_tensor(array):
    x = np.array([1.0, 2.0], np.float32)
    for op in (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
               lambda a, b: a / b, lambda a, b: a ** b, lambda a, b: a // b):
        _same(op(loom.tensor(x), array), op(torch.tensor(x), array))
    _same(loom.tensor(x) @ np.ones(2), torch.tensor(x) @ np.ones(2))


# ---- errors: dims out of range, layer inputs ----

@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax",
                                  "argmin", "logsumexp", "var", "std", "any", "all", "cumsum",
                                  "softmax", "log_softmax", "sort", "argsort", "var_mean"])
def test_a_reduction_over_a_dim_out_of_range_raises_index_error(name):
    for dim in (3, -3):
        errors = []
        for lib in (loom, torch):
            with pytest.raises(IndexError) as e:
                getattr(lib, name)(lib.ones(2, 3), dim)
            errors.append(str(e.value))
        assert errors[0] == errors[1]
    with pytest.raises(IndexError, match=r"range of \[-2, 1\], but got 2"):
        loom.topk(loom.ones(2, 3), 1, 2)
    if name in ("sum", "mean", "amax"):
        with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
            getattr(loom, name)(loom.ones(2, 3), (0, -2))


def _raises_as_torch(mine, theirs, mine_type=None):
    """mine() raises theirs()'s message (its type, or mine_type where
    PyTorch asserts), before any op is built."""
    with pytest.raises(Exception) as t:
        theirs()
    with pytest.raises(mine_type or t.type) as m:
        mine()
    assert str(m.value) == str(t.value).replace("torch.Size([", "(").replace("])", ")")


def test_layers_name_the_wrong_input():
    x = np.ones((2, 4, 3), np.float32)
    _raises_as_torch(lambda: nn.GroupNorm(2, 6)(loom.tensor(x)),
                     lambda: torch.nn.GroupNorm(2, 6)(torch.tensor(x)))
    _raises_as_torch(lambda: nn.GroupNorm(3, 6)(loom.tensor(x)),
                     lambda: torch.nn.GroupNorm(3, 6)(torch.tensor(x)))
    _raises_as_torch(lambda: nn.LSTM(4, 3)(loom.ones(0, 2, 4)),
                     lambda: torch.nn.LSTM(4, 3)(torch.ones(0, 2, 4)))
    _raises_as_torch(lambda: nn.GRU(4, 3, batch_first=True)(loom.ones(2, 0, 4)),
                     lambda: torch.nn.GRU(4, 3, batch_first=True)(torch.ones(2, 0, 4)))
    q = np.random.default_rng(0).standard_normal((3, 2, 8)).astype(np.float32)
    torch.manual_seed(0)
    for batch_first in (False, True):
        mine, theirs = nn.MultiheadAttention(8, 2, batch_first=batch_first), \
            torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
        for args, kwargs in [
            ((q, q, q), {"key_padding_mask": np.zeros((3, 3), bool)}),
            ((q, q, q), {"key_padding_mask": np.zeros((2, 3, 1), bool)}),
            ((q, np.ones((4, 2, 8), np.float32), np.ones((5, 2, 8), np.float32)), {}),
            ((q, q[0], q[0]), {}),
            ((q, q, q), {"attn_mask": np.zeros((3, 2), bool)}),
            ((q, q, q), {"attn_mask": np.zeros((2, 3, 3), bool)}),
            ((q[..., :4], q[..., :4], q[..., :4]), {}),
        ]:
            _raises_as_torch(
                lambda: mine(*map(loom.tensor, args),
                             **{k: loom.tensor(v) for k, v in kwargs.items()}),
                lambda: theirs(*map(torch.tensor, args),
                               **{k: torch.tensor(v) for k, v in kwargs.items()}),
                ValueError if "attn_mask" not in kwargs else None)


@pytest.mark.parametrize("dt", ["int8", "int32", "bool"])
def test_sum_and_prod_in_an_integer_dtype_give_that_dtype(dt):
    # [100, 100, 7]: 207 and 70000 wrap in int8 (-49, 112), as PyTorch's
    for op in ("sum", "prod"):
        mine = getattr(loom.tensor([100, 100, 7]), op)(dtype=getattr(loom, dt))
        theirs = getattr(torch.tensor([100, 100, 7]), op)(dtype=getattr(torch, dt))
        _same(mine, theirs)


@pytest.mark.parametrize("make", [
    lambda L: L.tensor([300], dtype=L.int8),
    lambda L: L.tensor([[1, 2], [3, -129]], dtype=L.int8),
    lambda L: L.tensor([2**40], dtype=L.int32),
    lambda L: L.tensor([1e10], dtype=L.int32),
    lambda L: L.tensor([127.5], dtype=L.int8),
    lambda L: L.tensor([float("nan")], dtype=L.int64),
    lambda L: L.full((2,), 300, dtype=L.int8),
    lambda L: L.zeros(2, dtype=L.int8).fill_(300),
    lambda L: L.zeros(2, dtype=L.int8).new_full((2,), 300),
    lambda L: L.zeros(2, dtype=L.int8).masked_fill(L.tensor([True, False]), 1000),
    lambda L: L.full((2,), 1e9, dtype=L.float16),
])
def test_python_values_that_overflow_their_dtype_are_refused(make):
    with pytest.raises(RuntimeError) as theirs:
        make(torch)
    with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
        make(loom)
    assert "without overflow" in str(theirs.value)


def test_values_that_fit_and_arithmetic_wrap_as_in_pytorch():
    x = loom.zeros(2, dtype=loom.int8)
    x[0] = 127
    _same(x, torch.tensor([127, 0], dtype=torch.int8))
    _same(loom.tensor([2.7, -128.0], dtype=loom.int8), torch.tensor([2.7, -128.0], dtype=torch.int8))
    _same(loom.zeros(2, dtype=loom.int8) + 300, torch.zeros(2, dtype=torch.int8) + 300)
    _same(loom.tensor([1e39], dtype=loom.float16), torch.tensor([1e39], dtype=torch.float16))
    _same(loom.full((1,), float("-inf"), dtype=loom.float16),
          torch.full((1,), float("-inf"), dtype=torch.float16))


def test_large_python_ints_become_floats_beside_a_float_or_a_float_dtype():
    for data, kw in (([2**63], {"dtype": "float32"}), ([2**70, 1.5], {}),
                     (2**64, {"dtype": "float64"})):
        mine = loom.tensor(data, **{k: getattr(loom, v) for k, v in kw.items()})
        theirs = torch.tensor(data, **{k: getattr(torch, v) for k, v in kw.items()})
        _same(mine, theirs)
    with pytest.raises(RuntimeError, match="Overflow"):
        loom.tensor([2**64])


def test_python_float_as_a_dtype_is_float64():
    assert loom.zeros(2, dtype=float).dtype is loom.float64
    assert loom.ones(2).to(float).dtype is loom.float64
    assert (loom.tensor([1 + 1e-12], dtype=float) - 1).item() == \
        (torch.tensor([1 + 1e-12], dtype=float) - 1).item()


def test_bfloat16_tolist():
    assert loom.tensor([1.5, 2.5], dtype=loom.bfloat16).tolist() == \
        torch.tensor([1.5, 2.5], dtype=torch.bfloat16).tolist()


@pytest.mark.parametrize("op", ["//=", "%=", "**=", "&=", "|=", "^=", "<<=", ">>="])
def test_augmented_assignments_change_the_tensor_itself(op):
    def run(lib):
        x = lib.tensor([4, 6, 8])
        alias = x
        exec(f"x {op} 2", {}, {"x": x})
        return alias
    _same(run(loom), run(torch))


def test_integer_results_do_not_require_grad():
    x = loom.tensor([1.7, -2.2, 3.1], requires_grad=True)
    for y in (x.long(), x.int(), x.bool(), x.to(loom.int8), x > 1, x.sort().indices,
              x.topk(2).indices, x.argsort()):
        assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x.long().float() * 2).sum().backward()


def _both_raise(fn, exc, words):
    with pytest.raises(exc) as theirs:
        fn(torch)
    with pytest.raises(exc) as mine:
        fn(loom)
    for w in words:
        assert w in str(theirs.value) and w in str(mine.value), (theirs.value, mine.value)


def test_dtype_errors_as_pytorch():
    _both_raise(lambda L: L.zeros(3).scatter(0, L.tensor([0.0, 1.0]), L.ones(2)),
                RuntimeError, ["scatter", "Expected dtype int64 for index"])
    _both_raise(lambda L: L.zeros(3).scatter(0, L.tensor([0, 1], dtype=L.int32), L.ones(2)),
                RuntimeError, ["Expected dtype int64 for index"])
    for fn in (lambda L: L.ones(2) - L.tensor([True, False]),
               lambda L: 1 - L.tensor([True, False]),
               lambda L: L.ones(2) - True):
        _both_raise(fn, RuntimeError, ["Subtraction, the `-` operator, with a bool tensor"])
    _both_raise(lambda L: L.tensor([True]) - L.tensor([False]), RuntimeError, ["two bool tensors"])
    _both_raise(lambda L: L.nn.Linear(2, 2).to(L.int64), TypeError,
                ["nn.Module.to only accepts floating point"])
    with pytest.raises(RuntimeError, match="expected class indices"):
        loom.nn.functional.nll_loss(loom.zeros(2, 3), loom.tensor([0.0, 1.0]))
    _same(1 - loom.tensor([1, 0]), 1 - torch.tensor([1, 0]))


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64"])
def test_finfo_as_pytorch(dt):
    mine, theirs = loom.finfo(getattr(loom, dt)), torch.finfo(getattr(torch, dt))
    for k in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(mine, k) == getattr(theirs, k), k


@pytest.mark.parametrize("dt", ["int8", "int32", "int64"])
def test_iinfo_as_pytorch(dt):
    mine, theirs = loom.iinfo(getattr(loom, dt)), torch.iinfo(getattr(torch, dt))
    assert (mine.bits, mine.min, mine.max) == (theirs.bits, theirs.min, theirs.max)
    with pytest.raises(TypeError):
        loom.iinfo(loom.float32)


def test_softmax_in_a_given_dtype():
    x = np.array([[1.0, 2.0, 30.0]], np.float32)
    for name in ("softmax", "log_softmax"):
        mine = getattr(loom.tensor(x, dtype=loom.float16), name)(1, dtype=loom.float32)
        theirs = getattr(torch.tensor(x, dtype=torch.float16), name)(1, dtype=torch.float32)
        assert _name(mine.dtype) == _name(theirs.dtype) == "float32"
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


def test_arange_in_an_integer_dtype_cuts_its_bounds_first():
    for args in ((0, 2.5), (0.5, 3.7), (-2.5, 2), (5,)):
        _same(loom.arange(*args, dtype=loom.int64), torch.arange(*args, dtype=torch.int64))
    _both_raise(lambda L: L.arange(0, 2, 0.5, dtype=L.int64), RuntimeError, ["step must be nonzero"])
    _both_raise(lambda L: L.arange(3, dtype=L.bool), RuntimeError, ["Bool"])


def test_half_precision_std_is_computed_in_float32():
    x = [60000.0, -3.0, 7.0, 60000.0, 5.0, -1.0]
    mine, theirs = loom.tensor(x, dtype=loom.float16).std(), torch.tensor(x, dtype=torch.float16).std()
    assert mine.dtype is loom.float16 and float(mine) == float(theirs)


def test_dtype_utilities_as_pytorch():
    names = ["bool", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in names:
        for b in names:
            ta, tb, la, lb = getattr(torch, a), getattr(torch, b), getattr(loom, a), getattr(loom, b)
            assert _name(loom.promote_types(la, lb)) == _name(torch.promote_types(ta, tb)), (a, b)
            assert loom.can_cast(la, lb) == torch.can_cast(ta, tb), (a, b)
        assert getattr(loom, a).is_signed == getattr(torch, a).is_signed
        assert loom.zeros(2, dtype=getattr(loom, a)).element_size() == \
            torch.zeros(2, dtype=getattr(torch, a)).element_size()
        assert loom.is_floating_point(loom.zeros(1, dtype=getattr(loom, a))) == \
            torch.is_floating_point(torch.zeros(1, dtype=getattr(torch, a)))
    for x, y in ((lambda L: L.ones(2, dtype=L.int32), 2.5), (lambda L: L.ones(2, dtype=L.int32), 7),
                 (lambda L: L.ones(2), lambda L: L.tensor(1.0, dtype=L.float64)),
                 (lambda L: L.ones(2, dtype=L.int8), lambda L: L.ones(2, dtype=L.int32))):
        args = [[v(L) if callable(v) else v for v in (x, y)] for L in (loom, torch)]
        assert _name(loom.result_type(*args[0])) == _name(torch.result_type(*args[1]))
