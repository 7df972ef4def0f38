"""Ops through the Python API against NumPy and PyTorch (forward), with
broadcasting, odd sizes, views, zero-size dims and NaN/Inf."""
import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")

rng = np.random.default_rng(7)


def both(*shapes, dtype=np.float32, low=-2.0, high=2.0):
    arrays = [rng.uniform(low, high, s).astype(dtype) for s in shapes]
    return [loom.from_numpy(a) for a in arrays], [torch.from_numpy(a.copy()) for a in arrays]


def close(mine, theirs, rtol=1e-5, atol=1e-6):
    theirs = theirs.numpy() if hasattr(theirs, "numpy") else np.asarray(theirs)
    np.testing.assert_allclose(mine.numpy(), theirs, rtol=rtol, atol=atol)


UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "sin", "cos", "erf", "floor",
         "ceil", "sign", "silu", "softplus"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (0, 4), ()])
def test_unary_against_torch(name, shape):
    (x,), (tx,) = both(shape)
    close(getattr(loom, name)(x), getattr(torch, name)(tx) if hasattr(torch, name)
          else getattr(torch.nn.functional, name)(tx))


@pytest.mark.parametrize("name", ["log", "sqrt", "rsqrt", "reciprocal", "log1p"])
def test_unary_of_positive_values(name):
    (x,), (tx,) = both((4, 9), low=0.1, high=3.0)
    close(getattr(loom, name)(x), getattr(torch, name)(tx))


def test_expm1_and_log1p_are_exact_near_zero_as_torch():
    """Where e^x rounds to 1 (log(1 + x) to 0) in f32, the ops keep x's
    digits: PyTorch's values, and expm1's gradient e^x."""
    v = np.array([1e-7, -3e-8, 2e-5, 0.0, 1.5, -4.0], np.float32)
    for name in ("expm1", "log1p"):
        x, t = loom.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, ty = getattr(loom, name)(x), getattr(torch, name)(t)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=0)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)
        assert getattr(x.detach(), name)().numpy()[0] != 0  # not exp(x) - 1


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)),
                                    ((5,), ()), ((0, 3), (1, 3))])
def test_binary_broadcasting_against_torch(op, shapes):
    low = 0.5 if op == "pow" else -2.0
    (a, b), (ta, tb) = both(*shapes, low=low)
    close(getattr(loom, op)(a, b), getattr(torch, op)(ta, tb), rtol=1e-5)


def test_operators_with_python_numbers_follow_torch_promotion():
    (x,), (tx,) = both((3, 4))
    close(2 * x - 1 / (x * x + 1) + x ** 2, 2 * tx - 1 / (tx * tx + 1) + tx ** 2)
    i = loom.tensor([1, 2, 3], dtype=loom.int32)
    assert (i + 1).dtype is loom.int32
    assert (i * 0.5).dtype is loom.float32 and (i * 0.5).tolist() == [0.5, 1.0, 1.5]
    assert (i / 2).tolist() == [0.5, 1.0, 1.5]  # true division
    assert (i // 2).tolist() == [0, 1, 1]
    assert (loom.tensor([-7, 7]) % 3).tolist() == [2, 1]
    f64 = loom.tensor([1.0], dtype=loom.float64)
    assert (f64 + loom.tensor([1.0])).dtype is loom.float64


def test_comparisons_and_where():
    (a, b), (ta, tb) = both((4, 5), (4, 5))
    for name in ["eq", "ne", "lt", "le", "gt", "ge"]:
        np.testing.assert_array_equal(getattr(loom, name)(a, b).numpy(),
                                      getattr(torch, name)(ta, tb).numpy())
    close(loom.where(a > b, a, b * 2), torch.where(ta > tb, ta, tb * 2))
    np.testing.assert_array_equal(((a > 0) & (b > 0)).numpy(), ((ta > 0) & (tb > 0)).numpy())


def test_nan_and_inf_propagate_as_in_torch():
    v = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], dtype=np.float32)
    x, tx = loom.from_numpy(v), torch.from_numpy(v)
    for name in ["exp", "tanh", "relu", "abs", "sigmoid"]:
        close(getattr(loom, name)(x), getattr(torch, name)(tx))
    close(loom.maximum(x, loom.zeros(5)), torch.maximum(tx, torch.zeros(5)))
    np.testing.assert_array_equal(loom.isnan(x).numpy(), torch.isnan(tx).numpy())


@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), ((0, 2), False),
                                         (-1, True)])
def test_reductions_against_torch(dim, keepdim):
    (x,), (tx,) = both((3, 4, 5))
    for name in ["sum", "mean", "amax", "amin", "prod"]:
        mine = getattr(loom, name)(x, dim=dim, keepdim=keepdim)
        if dim is None:
            theirs = getattr(torch, name)(tx) if name not in ("amax", "amin") else \
                getattr(torch, name)(tx, dim=(0, 1, 2))
        elif name == "prod" and isinstance(dim, tuple):  # torch.prod takes one dim
            theirs = np.prod(tx.numpy(), axis=dim, keepdims=keepdim)
        else:
            theirs = getattr(torch, name)(tx, dim=dim, keepdim=keepdim)
        close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_max_with_dim_gives_values_and_indices():
    (x,), (tx,) = both((4, 6))
    v, i = x.max(1)
    tv, ti = tx.max(1)
    close(v, tv)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    close(x.max(), tx.max())
    np.testing.assert_array_equal(x.argmin(0).numpy(), tx.argmin(0).numpy())


def test_softmax_var_std_logsumexp_cumsum():
    (x,), (tx,) = both((3, 7))
    close(loom.softmax(x, 1), torch.softmax(tx, 1))
    close(loom.log_softmax(x, 0), torch.log_softmax(tx, 0))
    close(x.var(1), tx.var(1), rtol=1e-4)
    close(x.std(0, unbiased=False), tx.std(0, unbiased=False), rtol=1e-4)
    close(loom.logsumexp(x, 1), torch.logsumexp(tx, 1))
    close(x.cumsum(1), tx.cumsum(1), rtol=1e-5, atol=1e-5)


def test_matmul_shapes_against_torch():
    for sa, sb in [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 3, 4), (2, 4, 2)),
                   ((5,), (5, 3)), ((1, 7), (7, 1))]:
        (a, b), (ta, tb) = both(sa, sb)
        close(a @ b, ta @ tb, rtol=1e-5, atol=1e-5)


def test_layout_ops_against_torch():
    (x,), (tx,) = both((2, 3, 4))
    close(x.reshape(4, -1), tx.reshape(4, -1))
    close(x.permute(2, 0, 1), tx.permute(2, 0, 1))
    close(x.transpose(0, 2), tx.transpose(0, 2))
    close(x.unsqueeze(1).squeeze(1), tx)
    close(x.flatten(1), tx.flatten(1))
    close(x[:, :1].expand(2, 5, 4), tx[:, :1].expand(2, 5, 4))
    close(loom.cat([x, x * 2], 1), torch.cat([tx, tx * 2], 1))
    close(loom.stack([x, x], -1), torch.stack([tx, tx], -1))
    for mine, theirs in zip(x.split(2, 2), tx.split(2, 2)):
        close(mine, theirs)
    for mine, theirs in zip(x.chunk(2, 1), tx.chunk(2, 1)):
        close(mine, theirs)
    close(x.flip(0), tx.flip(0))
    close(x.repeat(1, 2, 1), tx.repeat(1, 2, 1))
    close(x.T, tx.permute(2, 1, 0))
    close(loom.pad(x, (1, 2)), torch.nn.functional.pad(tx, (1, 2)))
    close(x.clamp(-0.5, 0.5), tx.clamp(-0.5, 0.5))


def test_index_select_embedding_one_hot():
    (w,), (tw,) = both((10, 4))
    idx = np.array([[1, 9], [0, 0]])
    close(loom.embedding(loom.from_numpy(idx), w),
          torch.nn.functional.embedding(torch.from_numpy(idx), tw))
    close(w.index_select(0, loom.tensor([3, 1])), tw.index_select(0, torch.tensor([3, 1])))
    np.testing.assert_array_equal(loom.one_hot(loom.tensor([0, 2]), 3).numpy(),
                                  torch.nn.functional.one_hot(torch.tensor([0, 2]), 3).numpy())


@pytest.mark.parametrize("bad", [-1, 10])
def test_index_select_and_embedding_refuse_rows_outside_as_torch(bad):
    """A negative index or one past the end is PyTorch's IndexError for
    index_select and embedding (gather's negative one is its RuntimeError)."""
    for lib in (loom, torch):
        w = lib.ones(10, 4)
        with pytest.raises(IndexError, match="index out of range in self"):
            w.index_select(0, lib.tensor([1, bad]))
        with pytest.raises(IndexError, match="index out of range in self"):
            lib.nn.functional.embedding(lib.tensor([bad, 0]), w)


def test_matmul_of_two_dtypes_is_an_error_as_torch():
    """PyTorch's matmul does not promote: int64 @ float32 and float32 @
    float64 are errors there, and here."""
    for lib in (loom, torch):
        a, b = lib.tensor([[1, 2]]), lib.ones(2, 1)
        with pytest.raises(RuntimeError):
            a @ b
        with pytest.raises(RuntimeError):
            b.t() @ b.double()
    assert (loom.ones(1, 2) @ loom.ones(2, 1)).tolist() == [[2.0]]


def test_casts():
    x = loom.tensor([1.7, -1.7, 0.0])
    assert x.long().tolist() == [1, -1, 0]
    assert x.bool().tolist() == [True, True, False]
    assert x.to(loom.float64).dtype is loom.float64
    h = x.half()
    assert h.dtype is loom.float16 and h.numpy().dtype == np.float16
    b = x.to(loom.bfloat16)
    with pytest.raises(BufferError, match="NumPy"):
        b.numpy()
    assert b.float().tolist() == pytest.approx([1.703125, -1.703125, 0.0])


def test_the_op_table_is_the_raw_namespace():
    assert "matmul" in loom.ops.TABLE and len(loom.ops.TABLE) > 90
    a = loom.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert loom.ops.matmul(a, a, trans_b=1).tolist() == [[5.0, 11.0], [11.0, 25.0]]
    assert loom.ops.sum(a, axes=[1], keepdim=1).tolist() == [[3.0], [7.0]]
    assert "sum over axes" in loom.ops.sum.__doc__


def test_operators_either_way_round():
    t = loom.tensor([1.0, 2.0])
    assert (2 + t).tolist() == [3.0, 4.0] and (2 - t).tolist() == [1.0, 0.0]
    assert (2 * t).tolist() == [2.0, 4.0] and (1 / t).tolist() == [1.0, 0.5]
    assert (1.0 < t).tolist() == [False, True] and (t == 1.0).tolist() == [True, False]
    assert (-t).tolist() == [-1.0, -2.0] and (2 ** t).tolist() == [2.0, 4.0]
    r = np.float32(2) * t
    assert isinstance(r, loom.Tensor) and r.tolist() == [2.0, 4.0]
    assert {t: 1}[t] == 1  # hashed by identity, as PyTorch's


def test_bitwise_operators_as_torch():
    """& | ^ ~ << >> are bitwise on integers and logical on bool, numbers
    on either side."""
    a = np.array([6, 5, -3, 0, 127], np.int64)
    b = np.array([3, 1, 7, -1, 2], np.int64)
    for x, y in ((a, b), (a > 2, b > 0)):
        mine, theirs = [], []
        for m, out in ((loom, mine), (torch, theirs)):
            p, q = m.from_numpy(x.copy()), m.from_numpy(y.copy())
            out += [p & q, p | q, p ^ q, ~p, p & 1, 3 | p, True ^ q if x.dtype == bool else 5 ^ q]
            if x.dtype != bool:
                out += [p << 2, p >> 1, 1 << m.from_numpy(np.array([0, 3, 62], np.int64))]
        for u, v in zip(mine, theirs):
            assert u.dtype.name == str(v.dtype).replace("torch.", "")
            assert u.tolist() == v.tolist()
    with pytest.raises(ValueError, match="bitwise_and"):
        loom.tensor([1.5]) & loom.tensor([2.5])


# ---- values outside tests found wrong ----

def test_math_at_extremes_as_torch():
    """isclose beside an infinity, fmod of a divisor far larger than the
    dividend, hypot past float32's squares, exp2 and round(decimals) in
    float16 and bfloat16, a Python int past an integer dtype in a true
    division, and var's positional unbiased."""
    inf = float("inf")
    cases = [
        lambda m: m.isclose(m.tensor([0.0, 1e30, inf, -inf, 5.0]),
                            m.tensor([inf, inf, inf, inf, -inf])),
        lambda m: m.fmod(m.tensor([-1.0, 0.5, -1.0, 7.5, -7.5]),
                         m.tensor([1e8, -1e30, inf, 2.0, 2.0])),
        lambda m: m.fmod(m.tensor([7, -7, 7, -7]), m.tensor([3, 3, -3, -3])),
        lambda m: m.hypot(m.tensor([1e30, 1e-30, 2e19, inf, 3.0, 0.0]),
                          m.tensor([1e30, 1e-30, 0.0, float("nan"), 4.0, 0.0])),
        lambda m: m.exp2(m.tensor([10.0, 100.0, -3.0], dtype=m.bfloat16)).float(),
        lambda m: m.exp2(m.tensor([10.0, 15.5, -3.0], dtype=m.float16)).float(),
        lambda m: m.exp2(m.tensor([122.2, -100.7, 0.5])),
        lambda m: m.round(m.tensor([1234.5, 60000.0, 1.2345], dtype=m.float16).float(), decimals=2),
        lambda m: m.tensor([-3, 1, 5, 100], dtype=m.int8) / 1000,
        lambda m: 2 ** 40 / m.tensor([-3, 1, 5, 100], dtype=m.int32),
        lambda m: m.arange(12.0).reshape(3, 4).var(False),
        lambda m: m.arange(12.0).reshape(3, 4).std(True),
    ]
    for case in cases:
        np.testing.assert_allclose(np.asarray(case(loom).tolist(), dtype=np.float64),
                                   np.asarray(case(torch).tolist(), dtype=np.float64),
                                   rtol=1e-6, atol=0, equal_nan=True)
    half = loom.round(loom.tensor([1234.5, 60000.0], dtype=loom.float16), decimals=2)
    assert half.tolist() == [1234.0, 60000.0]  # in float32, rounded back: no inf


def test_nan_bounds_empty_cumulative_extremes_and_bool_signs_as_torch():
    nan = float("nan")
    cases = [
        lambda m: m.clamp(m.tensor([-3.0, 0.0, 3.0]), min=m.tensor([nan, -1.0, nan])),
        lambda m: m.clamp(m.tensor([-3.0, 0.0, 3.0]), nan, 1.0),
        lambda m: m.square(m.tensor([True, False, True])),
        lambda m: m.sign(m.tensor([True, False, True])),
        lambda m: m.cummax(m.zeros(0, 3), 0).values,
        lambda m: m.cummin(m.zeros(0, 3), 0).indices,
    ]
    for case in cases:
        mine, theirs = case(loom), case(torch)
        assert mine.dtype.name == str(theirs.dtype).split(".")[1]
        np.testing.assert_array_equal(np.asarray(mine.tolist()), np.asarray(theirs.tolist()))
    for bad in ("m.lerp(m.ones(2), m.ones(2, dtype=m.float64), 0.5)",
                "m.lerp(m.ones(2, dtype=m.int64), m.ones(2, dtype=m.int64), 0.5)",
                "m.frac(m.ones(2, dtype=m.int64))"):
        for m in (loom, torch):
            with pytest.raises(RuntimeError):
                eval(bad)


def test_float_floor_division_is_pythons_at_edges():
    # the quotient of a - fmod(a, b): 1 // 0.1 is 9 (floor(1 / 0.1) is 10),
    # -5 // inf is -1, inf // 2 is NaN, signed zeros as PyTorch's
    vals = [5.0, -5.0, 0.0, -0.0, 1.0, 0.1, -0.1, 7.5, -7.5, 3.0, -3.0,
            float("inf"), -float("inf"), float("nan")]
    a = [x for x in vals for _ in vals]
    b = [y for _ in vals for y in vals]
    for dtype in ("float32", "float64", "float16"):
        mine = (loom.tensor(a, dtype=getattr(loom, dtype)) //
                loom.tensor(b, dtype=getattr(loom, dtype))).numpy().astype(np.float64)
        theirs = torch.floor_divide(torch.tensor(a, dtype=getattr(torch, dtype)),
                                    torch.tensor(b, dtype=getattr(torch, dtype))).double().numpy()
        np.testing.assert_array_equal(mine, theirs)
        signed = ~np.isnan(theirs)
        np.testing.assert_array_equal(np.signbit(mine[signed]), np.signbit(theirs[signed]))
    assert (loom.tensor([7, -7]) // loom.tensor([2, 2])).tolist() == [3, -4]
    assert loom.div(loom.tensor([1.0]), 0.1, rounding_mode="floor").tolist() == [9.0]


def test_empty_dims_sizes_and_concat_as_torch():
    x = [[1.0, 2.0], [3.0, 5.0]]
    for name in ("sum", "mean", "amax", "nansum", "count_nonzero", "var"):
        for m in (loom, torch):
            assert getattr(m, name)(m.tensor(x), dim=()).ndim == 0, (name, m)
        assert getattr(loom, name)(loom.tensor(x), dim=()).item() == \
            pytest.approx(getattr(torch, name)(torch.tensor(x), dim=()).item())
    assert loom.ones(2, 1, 3).squeeze(()).shape == (2, 1, 3)
    assert loom.tensor([]).median().isnan().item()
    assert loom.cat([loom.ones(2, 2), loom.tensor([], dtype=loom.float64)]).dtype is loom.float64
    assert loom.zeros(loom.tensor(2)).shape == (2,) and loom.zeros(np.int64(3)).shape == (3,)
    for bad, error in (("m.zeros(2.0)", TypeError), ("m.ones(2, 3).reshape(3.0, 2)", TypeError),
                       ("m.ones(2, 3).permute()", TypeError),
                       ("m.ones(2, 3).permute(1)", RuntimeError),
                       ("m.cat([m.ones(2), m.ones(2)], dim=3)", IndexError),
                       ("m.cat([m.tensor(1.0), m.tensor(2.0)])", RuntimeError)):
        for m in (loom, torch):
            with pytest.raises(error):
                eval(bad)
