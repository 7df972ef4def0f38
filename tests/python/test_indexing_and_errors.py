"""Indexing with lists and several index tensors, float indices refused,
creation dtypes, and the exceptions PyTorch raises for bad arguments
(type and message), against PyTorch."""
import numpy as np
import pytest

import loom
import loom.nn.functional as F

torch = pytest.importorskip("torch")

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def raises_as_torch(mine, theirs):
    """mine raises the exception type theirs raises, with torch's message."""
    with pytest.raises(Exception) as t:
        theirs()
    with pytest.raises(type(t.value)) as m:
        mine()
    assert str(m.value) == str(t.value)


# ---- indexing ----

INDICES = [
    lambda x: x[[0, 1]], lambda x: x[[1, 0], [2, 1]], lambda x: x[:, [0, 2]],
    lambda x: x[[[0, 1], [1, 0]]], lambda x: x[0, :, [1, 2]], lambda x: x[[0, 1], 0, [1, 2]],
    lambda x: x[:, [0, 1], [1, 2]], lambda x: x[[0, 1], :, [1, 2]], lambda x: x[[True, False]],
    lambda x: x[:, [True, False, True]], lambda x: x[..., [-1, 0]], lambda x: x[[-1]],
    lambda x: x[None, [1, 0], 1:], lambda x: x[[[0], [1]], :, [[1, 2]]], lambda x: x[x > 5],
    lambda x: x[:, x[0] > 5], lambda x: x[True], lambda x: x[1, [0, 2], -1],
    lambda x: x[np.array([1, 0])],
]


@pytest.mark.parametrize("k", range(len(INDICES)))
def test_list_and_multi_tensor_indices_match_torch(k):
    mine, theirs = INDICES[k](loom.tensor(A)), INDICES[k](torch.tensor(A))
    assert tuple(mine.shape) == tuple(theirs.shape)
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


# The forms _common_index takes without the general walk, with their
# neighbours that it must hand on: bool and 0-d cases, too many indices,
# ints out of range, a full slice with a step.
COMMON = [
    lambda x, t: x[t([1, 0, 1])], lambda x, t: x[t([-1])], lambda x, t: x[:, -1],
    lambda x, t: x[:, 2], lambda x, t: x[:, :, 0], lambda x, t: x[0, :], lambda x, t: x[(1,)],
    lambda x, t: x[:, None], lambda x, t: x[:, :, :, None], lambda x, t: x[None, :],
    lambda x, t: x[:, ::2], lambda x, t: x[t([True, False])], lambda x, t: x[:, True],
]


@pytest.mark.parametrize("k", range(len(COMMON)))
def test_common_index_forms_match_torch(k):
    for lazy in (False, True):
        def tensor(v):
            i = loom.tensor(v)
            return i * 1 if lazy and i.dtype != loom.bool else i
        mine, theirs = COMMON[k](loom.tensor(A), tensor), COMMON[k](torch.tensor(A), torch.tensor)
        assert tuple(mine.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.parametrize("index", [lambda: (slice(None), 3), lambda: (slice(None), -4),
                                   lambda: (slice(None),) * 3 + (0,),
                                   lambda: (slice(None),) * 4 + (None,)])
def test_common_index_forms_out_of_range_raise_as_torch(index):
    raises_as_torch(lambda: loom.tensor(A)[index()], lambda: torch.tensor(A)[index()])


def test_gradient_through_common_index_forms():
    w = rng_array((4, 3))
    x, tx = loom.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    for lib, v in ((loom, x), (torch, tx)):
        rows = lib.tensor([3, 0, 3])
        (v[rows][:, 1] * 2 + v[:, -1][:, None].sum()).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_gradient_through_two_index_tensors():
    w = rng_array((2, 3, 4))
    x, tx = loom.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    c = rng_array((3, 3))
    (x[[1, 0, 1], :, [2, 1, -2]] * loom.tensor(c)).sum().backward()
    (tx[[1, 0, 1], :, [2, 1, -2]] * torch.tensor(c)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_lazy_index_tensor_is_not_read():
    x = loom.tensor(A)
    i = loom.tensor([1, 0]) * 1  # lazy
    assert i._lazy
    y = x[:, i, [3, 0]]
    assert i._lazy
    np.testing.assert_array_equal(y.numpy(), A[:, [1, 0], [3, 0]])


def rng_array(shape):
    return np.random.default_rng(5).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("index", [1.7, [1.0], np.float32(0.0)])
def test_float_index_is_refused(index):
    with pytest.raises(IndexError, match="only integers|must be long"):
        loom.tensor(A)[index]


def test_float_tensor_index_is_refused():
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        loom.tensor(A)[loom.tensor([1.0])]


def test_float_index_message_is_torch_s():
    raises_as_torch(lambda: loom.tensor(A)[1.7], lambda: torch.tensor(A)[1.7])


@pytest.mark.parametrize("index", [lambda: [0, 7], lambda: (slice(None), [0, 7]),
                                   lambda: ([0, 1], [0, 9]), lambda: [0, -7]])
def test_out_of_range_index_raises_index_error_as_torch(index):
    raises_as_torch(lambda: loom.tensor(A[0])[index()], lambda: torch.tensor(A[0])[index()])


def test_out_of_range_real_index_tensor_is_checked():
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 2"):
        loom.tensor(A)[loom.tensor([0, 5])]


@pytest.mark.parametrize("lazy", [False, True])
def test_assignment_at_list_indices_matches_torch(lazy):
    x, tx = loom.tensor(A), torch.tensor(A)
    if lazy:
        x = x * 1
    for t in (x, tx):
        t[[0, 1], [2, 0]] = 100.0
        t[:, [0, 2]] = -1.0
        t[[True, False]] = 5.0
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


# ---- dtypes and values ----

@pytest.mark.parametrize("fill", [True, 3, 2.5])
def test_full_infers_the_dtype_as_torch(fill):
    mine, theirs = loom.full((2, 3), fill), torch.full((2, 3), fill)
    assert mine.dtype.name == str(theirs.dtype).split(".")[1]
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_integers_to_negative_powers_are_refused(dtype):
    a = np.array([2, 3]).astype(dtype)
    raises_as_torch(lambda: loom.tensor(a) ** -1, lambda: torch.tensor(a) ** -1)
    raises_as_torch(lambda: loom.tensor(a).pow(-2), lambda: torch.tensor(a).pow(-2))


def test_floats_and_positive_integer_powers_still_work():
    np.testing.assert_array_equal((loom.tensor([2, 3]) ** 2).numpy(), [4, 9])
    np.testing.assert_allclose((loom.tensor([2.0, 4.0]) ** -1).numpy(), [0.5, 0.25])


def test_clamp_with_tensor_bounds_matches_torch_with_gradients():
    rng = np.random.default_rng(2)
    a, lo, hi = rng.uniform(-2, 2, (3, 4)), rng.uniform(-1, 0, (4,)), rng.uniform(0, 1, (3, 1))
    mine = [loom.tensor(v, requires_grad=True) for v in (a, lo, hi)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (a, lo, hi)]
    for m, lib, xs in ((loom, loom, mine), (torch, torch, theirs)):
        (m.clamp(xs[0], xs[1], xs[2]).sum() + xs[0].clamp(min=xs[1]).sum() * 2 +
         xs[0].clamp(max=xs[2]).sum() * 3).backward()
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy())
    np.testing.assert_allclose(loom.tensor(a).clamp(min=loom.tensor(lo)).numpy(),
                               torch.tensor(a).clamp(min=torch.tensor(lo)).numpy())


# ---- errors ----

ERRORS = {
    "cat-empty": (lambda m: m.cat([])),
    "transpose": (lambda m: m.ones(2, 3).transpose(0, 3)),
    "squeeze": (lambda m: m.ones(2, 3).squeeze(4)),
    "split": (lambda m: m.ones(2, 3).split(5, dim=7)),
    "permute": (lambda m: m.ones(2, 3).permute(0, 5)),
    "unsqueeze": (lambda m: m.ones(2, 3).unsqueeze(-4)),
    "unsqueeze-0d": (lambda m: m.ones(()).unsqueeze(2)),
    "stack": (lambda m: m.stack([m.ones(2)], 3)),
    "flatten": (lambda m: m.ones(2, 3).flatten(3)),
    "arange-step-0": (lambda m: m.arange(0, 5, 0)),
    "tensor-overflow": (lambda m: m.tensor([2 ** 63])),
    "tensor-underflow": (lambda m: m.tensor([-2 ** 63 - 1])),
    "cross-entropy-target": (lambda m: m.nn.functional.cross_entropy(m.ones(2, 3),
                                                                     m.tensor([0, 7]))),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    raises_as_torch(lambda: ERRORS[name](loom), lambda: ERRORS[name](torch))


def test_from_numpy_of_an_unsupported_dtype_names_it():
    for make in (loom.from_numpy, loom.tensor):
        with pytest.raises(TypeError, match="uint8.*float32, float64"):
            make(np.zeros(3, np.uint8))


def test_load_of_a_torch_save_file_says_it_is_not_safetensors(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(ValueError, match="not a safetensors file"):
        loom.load(str(path))


def test_torch_reads_a_loom_tensor_through_numpy_and_dlpack():
    """torch.tensor(t) itself cannot take a loom tensor: PyTorch 1.13 reads
    objects other than its tensors and NumPy arrays as nested sequences of
    Python numbers. These conversions work."""
    t = loom.tensor([1.5, 2.5])
    for theirs in (torch.tensor(np.asarray(t)), torch.as_tensor(t.numpy()),
                   torch.from_dlpack(t), torch.tensor(t.tolist())):
        np.testing.assert_array_equal(theirs.numpy(), [1.5, 2.5])


def test_cross_entropy_ignore_index_is_not_out_of_range():
    loss = F.cross_entropy(loom.ones(2, 3), loom.tensor([0, -100]))
    assert np.isfinite(loss.item())


# ---- assignment, splitting and arguments found by outside tests ----

@pytest.mark.parametrize("lazy", [False, True])
def test_assignment_with_an_int_before_an_index_tensor_is_not_transposed(lazy):
    """x[0, :, idx] = v reads as PyTorch's x[0][:, idx] (the int selects
    first), where NumPy would put idx's dim first: a square v landed
    transposed, a (4, 2) one was refused."""
    v = np.arange(16, dtype=np.float32).reshape(4, 4)
    got = {}
    for m in (loom, torch):
        x = m.zeros(2, 4, 5)
        if m is loom and lazy:
            x = x * 1
        x[0, :, m.tensor([0, 1, 2, 3])] = m.tensor(v)
        x[1, ..., m.tensor([4, 1])] = m.ones(4, 2) * 3
        x[1, m.tensor([True, False, True, False]), 2] = 7
        got[m] = np.asarray(x.tolist())
    np.testing.assert_array_equal(got[loom], got[torch])


@pytest.mark.parametrize("case", ["zeros(0).chunk(2)", "zeros(0, 3).split(1)",
                                  "zeros(3, 0).split(2, 1)", "zeros(0, 2).unbind(0)",
                                  "zeros(2, 0).split(0, 1)", "zeros(5).chunk(3)",
                                  "zeros(4).split([1, 3])"])
def test_pieces_of_empty_and_uneven_dims_as_torch(case):
    shapes = [[tuple(p.shape) for p in eval(f"m.{case}")] for m in (loom, torch)]
    assert shapes[0] == shapes[1]


@pytest.mark.parametrize("case", [
    "m.zeros(2, 3).chunk(0)", "m.zeros(2, 3).split(0, 1)", "m.zeros(4).split(-1)",
    "m.zeros(4).split([1, 1])", "m.zeros(2, 3, 4).t()", "m.zeros(2, 3, 4).flatten(2, 1)",
    "m.zeros(2, 3).repeat(2)", "m.arange(5, 2)", "m.arange(0, 1, -1)",
    "m.mm(m.zeros(3), m.zeros(3, 4))", "m.bmm(m.zeros(1, 2, 3), m.zeros(5, 3, 4))",
    "m.bmm(m.zeros(2, 3), m.zeros(1, 3, 4))", "list(m.tensor(3.0))"])
def test_bad_arguments_raise_as_torch(case):
    raises_as_torch(lambda: eval(case, {"m": loom}), lambda: eval(case, {"m": torch}))


@pytest.mark.parametrize("case", [
    "m.where(m.tensor([1, 2], dtype=m.int8) > 1, m.tensor([1, 2], dtype=m.int8), 300)",
    "m.where(m.tensor([1, 2], dtype=m.int8) > 1, 2 ** 40, m.tensor([1, 2], dtype=m.int8))",
    "m.clamp(m.tensor([1, 2], dtype=m.int8), max=300)",
    "m.clamp(m.tensor([1, 2], dtype=m.int8), min=-300)"])
def test_numbers_past_the_dtype_of_where_and_clamp_raise(case):
    for m in (loom, torch):
        with pytest.raises(RuntimeError, match="without overflow"):
            eval(case)


def test_creation_forms_found_by_outside_tests():
    assert tuple(loom.randint(10, (3, 2)).shape) == (3, 2)
    assert loom.tensor(np.float64(1 / 3)).dtype is loom.float64
    assert loom.tensor([1.0, np.float64(2)]).dtype is loom.float64
    assert loom.tensor([1.0, 2.0]).dtype is loom.float32
    assert loom.tensor(np.int32(3)).dtype is loom.int32


@pytest.mark.parametrize("index", [
    lambda m: (m.tensor([True, False]), slice(1, 1)),
    lambda m: (m.tensor([True, True]), slice(None), slice(4, None)),
    lambda m: (slice(None), slice(1, 1), m.tensor([True, False, True, False])),
    lambda m: (m.tensor([[1], [1]]), m.tensor([[2], [0]]), slice(1, 1))])
def test_masks_and_index_tensors_beside_an_empty_slice(index):
    shapes = [tuple(m.arange(24.0).reshape(2, 3, 4)[index(m)].shape) for m in (loom, torch)]
    assert shapes[0] == shapes[1]


@pytest.mark.parametrize("index, value", [("2:1", "ones(2, 1)"), ("x < 0", "ones(6)"),
                                          ("[]", "ones(2, 1)")])
def test_a_value_of_the_wrong_shape_is_refused_by_an_empty_selection(index, value):
    for m in (loom, torch):
        x = m.arange(24.0).reshape(4, 6) * 1
        with pytest.raises((ValueError, RuntimeError)):
            exec(f"x[{index}] = m.{value}")


def test_in_place_ops_on_shared_bfloat16_memory():
    """bfloat16 has no NumPy dtype to write shared memory through: a DLPack
    import, an exported tensor and a parameter under no_grad still change
    in place (others see it)."""
    x = torch.tensor([1.0, 0.0, 3.0], dtype=torch.bfloat16)
    t = loom.from_dlpack(x)
    t.add_(1)
    assert x.tolist() == [2.0, 1.0, 4.0] and t.float().tolist() == [2.0, 1.0, 4.0]
    t2 = loom.tensor([1.0, 2.0]).bfloat16()
    shared = torch.from_dlpack(t2)
    t2.fill_(3)
    assert shared.tolist() == [3.0, 3.0]
    w = loom.nn.Parameter(loom.ones(3, dtype=loom.bfloat16))
    with loom.no_grad():
        w.sub_(0.5)
    assert w.float().tolist() == [0.5, 0.5, 0.5]
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.sub_(0.5)


@pytest.mark.parametrize("case", [
    "x.gather(0, m.tensor(0))", "x.index_select(0, m.tensor([0]))", "x.index_select(-1, m.tensor(0))",
    "x.scatter(0, m.tensor(0), 5.0)", "x.topk(1).values", "x.topk(1).indices", "x.flip(0)",
    "x.movedim(0, 0)", "m.arange(3.0).index_select(0, m.tensor(1))",
    "m.nonzero(m.tensor(3), as_tuple=True)[0]", "m.where(m.tensor(False))[0]"])
def test_dim_taking_ops_read_a_0d_tensor_as_one_element(case):
    got = []
    for m in (loom, torch):
        x = m.tensor(2.5)
        r = eval(case)
        got.append((tuple(r.shape), r.tolist()))
    assert got[0] == got[1]
