"""Tensors: creation, dtypes, NumPy sharing, laziness, indexing, errors."""
import gc
import os

import numpy as np
import pytest

import loom
from loom import _C


def test_tensor_from_lists_takes_pytorch_default_dtypes():
    assert loom.tensor([1.5, 2]).dtype is loom.float32
    assert loom.tensor([1, 2]).dtype is loom.int64
    assert loom.tensor([True]).dtype is loom.bool
    assert loom.tensor(np.zeros(2)).dtype is loom.float64  # arrays keep theirs
    t = loom.tensor([[1, 2, 3], [4, 5, 6]], dtype=loom.float64)
    assert t.shape == (2, 3) and t.ndim == 2 and t.numel() == 6 and t.size(1) == 3
    assert t.tolist() == [[1, 2, 3], [4, 5, 6]]


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64, np.float16, np.int8, np.int32,
                                      np.int64, np.bool_])
def test_from_numpy_shares_memory_both_ways(np_dtype):
    a = (np.arange(12) % 3).astype(np_dtype).reshape(3, 4)
    t = loom.from_numpy(a)
    assert t.dtype.name == np.dtype(np_dtype).name.replace("bool", "bool")
    b = t.numpy()
    assert np.shares_memory(a, b)
    a[1, 2] = 1
    assert b[1, 2] == 1
    np.testing.assert_array_equal(b, a)


def test_from_numpy_of_a_strided_view_wraps_it():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    v = a[::2, 1::2]
    t = loom.from_numpy(v)
    np.testing.assert_array_equal((t + 0).numpy(), v)
    np.testing.assert_array_equal(t.numpy(), v)


def test_unsupported_numpy_dtypes_are_type_errors():
    with pytest.raises(TypeError, match="uint8|dtype"):
        loom.from_numpy(np.zeros(3, dtype=np.uint8))
    with pytest.raises(TypeError):
        loom.from_numpy([1, 2])


def test_ops_are_lazy_until_python_needs_a_value():
    a = loom.tensor([1.0, 2.0, 3.0])
    b = a * 2 + 1
    assert b._lazy
    assert b.tolist() == [3.0, 5.0, 7.0]
    assert not b._lazy
    c = (b - 1).sum()
    assert c.item() == 12.0 and float(c) == 12.0 and int(c) == 12


def test_a_lazy_tensor_outlives_its_step():
    a = loom.tensor([1.0, -2.0])
    kept = a.abs() * 3
    loom.step()  # the step ends: kept is made real
    assert not kept._lazy
    assert kept.tolist() == [3.0, 6.0]
    assert (kept + 1).tolist() == [4.0, 7.0]  # entered again in a new step


def test_bool_of_a_tensor_branches():
    x = loom.tensor([1.0, 2.0])
    took = []
    for v in (1.0, -1.0, 2.0):
        s = (x * v).sum()
        took.append("pos" if s > 0 else "neg")
    assert took == ["pos", "neg", "pos"]
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x > 0)


@pytest.mark.parametrize("index", [
    1, -1, (slice(None), 2), (Ellipsis, 1), (slice(1, None), slice(None, None, 2)),
    (None, 0), (0, None, slice(1, 3)), (slice(None), None), (Ellipsis, None),
    (slice(-3, -1), 1, 2), (2, 1, 0),
])
def test_basic_indexing_matches_numpy(index):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    np.testing.assert_array_equal(loom.from_numpy(a)[index].numpy(), a[index])


def test_integer_array_and_mask_indexing_match_numpy():
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    t = loom.from_numpy(a)
    idx = np.array([4, 0, 2, 2])
    np.testing.assert_array_equal(t[loom.from_numpy(idx)].numpy(), a[idx])
    np.testing.assert_array_equal(t[:, loom.tensor([3, 1])].numpy(), a[:, [3, 1]])
    mask = a > 7
    np.testing.assert_array_equal(t[loom.from_numpy(mask)].numpy(), a[mask])


def test_bad_indices_raise_index_errors():
    t = loom.zeros(2, 3)
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t[loom.tensor([0.5])]


def test_an_index_out_of_range_fails_its_read_and_nothing_else():
    """The error surfaces where the value is read (the ops are lazy); a
    value that does not depend on it still reads in the same step, and
    reading the failed value again fails again, as eager ops would. The
    index is lazy: a real one is checked at once (IndexError, as PyTorch's;
    tests/python/test_indexing_and_errors.py)."""
    x = loom.tensor([1.0, 2.0, 3.0])
    bad = x[loom.tensor([0, 7]) * 1] * 2
    fine = x * 10
    with pytest.raises(ValueError, match="out of range"):
        bad.tolist()
    assert fine.tolist() == [10.0, 20.0, 30.0]
    with pytest.raises(ValueError, match="out of range"):
        bad.numpy()
    assert (x + 1).tolist() == [2.0, 3.0, 4.0]
    loom.step()  # the failed value keeps its error; the step ends cleanly
    with pytest.raises(ValueError, match="out of range"):
        bad.tolist()


def test_shape_errors_are_value_errors_naming_the_op():
    with pytest.raises(ValueError, match="matmul"):
        loom.zeros(2, 3) @ loom.zeros(2, 3)
    with pytest.raises(ValueError):
        loom.zeros(2, 3) + loom.zeros(4)
    with pytest.raises(TypeError):
        loom.zeros(2) + "a"
    with pytest.raises(TypeError, match="unexpected keyword"):
        loom.ops.sum(loom.zeros(2), axis=0)
    # the step goes on after an error
    assert (loom.ones(2) + 1).tolist() == [2.0, 2.0]


def test_creation_functions():
    assert loom.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert loom.ones((2,), dtype=loom.int32).tolist() == [1, 1]
    assert loom.full((2, 2), 7.0).tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert loom.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert loom.arange(0, 1, 0.25).dtype is loom.float32
    loom.manual_seed(3)
    a = loom.randn(4, 4).numpy()
    loom.manual_seed(3)
    np.testing.assert_array_equal(loom.randn(4, 4).numpy(), a)
    assert abs(float(loom.randn(10000).mean())) < 0.05


def test_repr_prints_the_data():
    assert repr(loom.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert "dtype=loom.int32" in repr(loom.tensor([1], dtype=loom.int32))
    assert "requires_grad=True" in repr(loom.ones(1, requires_grad=True))


@pytest.mark.skipif(os.environ.get("LOOM_SANITIZED") == "1",
                    reason="AddressSanitizer keeps freed memory in quarantine")
def test_many_steps_keep_memory_flat():
    def rss_kb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4

    loom.set_compile_mode("wait")  # no compile lands during the measurement
    # the compiles earlier tests queued finish first: their modules and the
    # workers' buffers are not this loop's
    _C._at_exit(-1.0)
    x = loom.randn(64, 64)
    w = loom.randn(64, 64, requires_grad=True)
    opt = loom.optim.SGD([w], lr=1e-4)

    def step():
        opt.zero_grad()
        loss = ((x @ w).tanh() ** 2).mean()
        loss.backward()
        opt.step()
        return float(loss)

    def growth_kb(steps):
        gc.collect()
        before = rss_kb()
        for _ in range(steps):
            step()
        gc.collect()
        return rss_kb() - before

    try:
        for _ in range(300):
            step()
        # a leak grows both windows; a one-time event (the allocator taking
        # a new arena) only one of them
        grew = [growth_kb(10000), growth_kb(10000)]
        assert min(grew) < 8 * 1024, f"resident memory grew over 10,000 steps: {grew} KiB"
    finally:
        loom.set_compile_mode("tiered")


def test_dlpack_exchange_with_torch_shares_memory():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    mine = loom.from_dlpack(t)
    t[0, 0] = 100.0
    assert mine.numpy()[0, 0] == 100.0
    view = t[:, 1::2]
    np.testing.assert_array_equal(loom.from_dlpack(view).numpy(), view.numpy())
    np.testing.assert_array_equal((loom.from_dlpack(view) * 2).numpy(), view.numpy() * 2)
    a = loom.ones(2, 3)
    theirs = torch.from_dlpack(a)
    theirs[1, 2] = 5.0
    assert a.numpy()[1, 2] == 5.0
    for d in (loom.float64, loom.float16, loom.bfloat16, loom.int8, loom.int32, loom.int64):
        x = loom.tensor([1, 2, 3]).to(d)
        assert str(torch.from_dlpack(x).dtype) == "torch." + d.name
        assert loom.from_dlpack(torch.from_dlpack(x)).dtype is d
    np.testing.assert_array_equal(np.from_dlpack(loom.arange(4)), np.arange(4))
    del t, theirs  # the lenders outlive no borrower: no crash at collection


def test_dlpack_refuses_what_it_cannot_hold():
    class NotCpu:
        def __dlpack__(self, stream=None):
            return np.arange(3).__dlpack__()

    with pytest.raises(AttributeError):
        loom.from_dlpack(object())
    with pytest.raises(ValueError, match="stream"):
        loom.ones(2).__dlpack__(stream=1)
    assert loom.from_dlpack(NotCpu()).tolist() == [0, 1, 2]


def test_zero_dim_tensors():
    s = loom.tensor(3.5)
    assert s.shape == () and s.ndim == 0 and s.item() == 3.5
    assert loom.tensor(2).shape == () and (s * loom.tensor(2.0)).item() == 7.0


def test_an_inference_loop_that_keeps_its_output_ends_a_step_at_each_read():
    """out = x @ w kept alive into the next iteration, and a lazy running
    sum: the program's read ends the step (nothing requires grad) and makes
    them real, so each iteration replays the same compiled segments instead
    of growing one trace (reads inside loom's own modules, such as an index
    list's, do not: test_lazy_index_tensor_is_not_read)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    loom.set_compile_mode("wait")
    try:
        before = loom.stats()
        out, expect, acc, expect_acc = None, None, loom.zeros(()), 0.0
        with loom.no_grad():
            for _ in range(40):
                x = rng.standard_normal((3, 8)).astype(np.float32)
                prev, prev_expect = out, expect
                out, expect = loom.from_numpy(x) @ loom.from_numpy(w), x @ w
                acc = acc + out.sum()
                expect_acc += float(expect.sum())
                assert out.sum().item() == pytest.approx(float(expect.sum()), rel=1e-5, abs=1e-4)
                if prev is not None:
                    assert not prev._lazy
                    np.testing.assert_allclose(prev.numpy(), prev_expect, rtol=1e-5, atol=1e-5)
        after = loom.stats()
    finally:
        loom.set_compile_mode("tiered")
    assert acc.item() == pytest.approx(expect_acc, rel=1e-4, abs=1e-3)
    assert after["steps"] - before["steps"] >= 40
    assert after["compiles"] - before["compiles"] <= 4


def test_an_eval_loop_without_no_grad_ends_a_step_per_iteration():
    """Outputs that require grad (no no_grad) read and dropped at once:
    the step ends at the next op recorded after they died, so the loop
    does not grow one step; values as NumPy's."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    lw = loom.tensor(w, requires_grad=True)
    before = loom.stats()["steps"]
    for _ in range(30):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        got = (loom.from_numpy(x) @ lw).relu().sum().item()
        assert got == pytest.approx(float(np.maximum(x @ w, 0).sum()), rel=1e-5, abs=1e-5)
    assert loom.stats()["steps"] - before >= 29
    # a read before backward does not end the step the backward needs
    loss = (loom.from_numpy(x) @ lw).sum()
    assert loss.item() == pytest.approx(float((x @ w).sum()), rel=1e-5, abs=1e-5)
    y = loss * 2
    y.backward()
    np.testing.assert_allclose(lw.grad.numpy(), 2 * np.repeat(x.sum(0)[:, None], 3, 1),
                               rtol=1e-5)


def test_explain_names_each_break_and_its_line():
    import inspect

    def program(x):
        y = (x * 2).sum()
        if y > 0:  # the branch
            z = x.exp()
        else:
            z = -x
        rows = loom.nonzero(z > 1)  # data-dependent shape
        return z.numpy(), rows.shape  # the read

    e = loom.explain(program, loom.tensor([1.0, -2.0, 3.0]))
    first = inspect.getsourcelines(program)[1]
    where = [(reason.split(":")[0].split(" (")[0], int(at.rsplit(":", 1)[1]))
             for reason, at in e.breaks]
    assert where == [("bool() of a tensor", first + 2),
                     ("an output shape that depends on data", first + 6),
                     ("the data read", first + 7)]
    assert all(at.startswith(__file__) for _, at in e.breaks)
    # the read ends the step (nothing requires grad), which makes y real: a
    # fourth segment, as the condition's segment (the first time) keeps only
    # what it was asked for
    assert e.counters["segments"] == 4
    assert "graph breaks: 3" in str(e) and "loom_trace_cond" in str(e)
    np.testing.assert_allclose(e.result[0], np.exp([1.0, -2.0, 3.0]), rtol=1e-6)


def test_slice_assignment_into_real_tensors():
    a = loom.zeros(3, 4)
    a[1] = 5.0
    a[:, 2] = loom.tensor([1.0, 2.0, 3.0])
    a[loom.tensor([0, 2]), 0] = -1.0
    expect = np.zeros((3, 4), np.float32)
    expect[1] = 5
    expect[:, 2] = [1, 2, 3]
    expect[[0, 2], 0] = -1
    np.testing.assert_array_equal(a.numpy(), expect)
    with pytest.raises(RuntimeError, match="requires grad"):
        loom.ones(2, requires_grad=True)[0] = 2.0


@pytest.mark.parametrize("index,value", [
    (1, 5.0),
    ((slice(None), 2), "row3"),
    ((slice(0, 3, 2), slice(1, None)), "scalar_t"),
    ((Ellipsis, None, -1), "col"),
    (([0, 2, 1], [3, 1, 1]), "pair"),  # distinct: torch leaves repeats undefined
    ("mask", 0.25),
])
def test_assignment_into_lazy_values_matches_torch_with_gradients(index, value):
    """x = w * 1; x[index] = value; loss(x): values and the gradients to w
    and to the assigned tensor, as torch.autograd gives them."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((3, 4))
    values = {"row3": rng.standard_normal(3), "scalar_t": np.array(2.5),
              "col": rng.standard_normal((3, 1)), "pair": rng.standard_normal(3)}
    results = []
    for lib in (loom, torch):
        w = lib.tensor(w0, requires_grad=True)
        v = lib.tensor(values[value], requires_grad=True) if isinstance(value, str) else value
        idx = (w.detach() > 0) if isinstance(index, str) else index
        if isinstance(idx, tuple) and isinstance(idx[0], list):
            idx = tuple(lib.tensor(i) for i in idx)
        x = w * 1
        x[idx] = v * 2 if isinstance(value, str) else v
        (x * x.tanh()).sum().backward()
        results.append([x.detach().numpy(), w.grad.numpy()] +
                       ([v.grad.numpy()] if isinstance(value, str) else []))
    for mine, theirs in zip(*results):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)


def test_assignment_into_a_real_tensor_keeps_the_gradients_as_torch():
    """Values that require grad assigned into a buffer made by zeros(),
    and a plain assignment into one while the step holds a value that
    requires grad: gradients flow as torch.autograd's."""
    torch = pytest.importorskip("torch")
    results = []
    for lib in (loom, torch):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        out = lib.zeros(3, 2)
        out[0] = w * 2
        out[1] = w * w
        y = w * 3
        scale = lib.zeros(2)
        scale[0] = 5.0  # the step holds y, which requires grad
        (out.sum() + w.sum() + (y * scale).sum()).backward()
        results.append(w.grad.numpy().copy())
    np.testing.assert_allclose(results[0], [20.0, 7.0])
    np.testing.assert_allclose(results[0], results[1])


def test_assignment_into_a_lazy_value_inside_compile_and_errors():
    f = loom.compile(lambda a: _set_first_row(a * 2))
    for k in range(2):
        a = loom.tensor(np.full((2, 3), k + 1.0))
        np.testing.assert_array_equal(f(a).numpy(), [[7.0] * 3, [2.0 * (k + 1)] * 3])
    assert not next(iter(f.entries.values()))[0].graph_break
    x = loom.zeros(2, 3) + 1
    with pytest.raises(ValueError, match="cannot be assigned"):
        x[0] = loom.ones(4)
    with pytest.raises(IndexError):
        x[5] = 1.0
    x[:, 0] = loom.ones(1, 2)  # leading 1s dropped, as PyTorch
    assert x.tolist() == [[1.0] * 3] * 2


def _set_first_row(x):
    x[0] = 7.0
    return x


def test_in_place_ops_change_the_tensor():
    """x += y, add_/sub_/mul_/div_/clamp_/fill_/zero_/copy_ as PyTorch's: the
    same object changes, a real tensor's memory too (a view of it sees it),
    a lazy one names the new value; a float result into an integer tensor
    and a shape change are refused."""
    import torch
    for lib in (loom, torch):
        x = lib.zeros(3)
        y = x
        x += 1
        x.mul_(3)
        x.add_(lib.ones(3), alpha=2)
        x.sub_(lib.tensor([0.5, 1.0, 1.5]), alpha=2)
        x.div_(2).clamp_(max=1.5)
        assert y is x and x.tolist() == [1.5, 1.5, 1.0], lib
    base = np.zeros(4, np.float32)
    t = loom.from_numpy(base)
    t.fill_(2.5)
    assert base.tolist() == [2.5] * 4  # the shared memory changed
    t.copy_([1, 2, 3, 4])
    assert base.tolist() == [1, 2, 3, 4]
    t.zero_()
    assert base.tolist() == [0] * 4
    lazy = loom.ones(2) * 2
    lazy += lazy
    assert lazy.tolist() == [4.0, 4.0]
    with pytest.raises(RuntimeError, match="can't be cast"):
        i = loom.arange(4)
        i += 0.5
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        v = loom.zeros(3)
        v += loom.ones(2, 3)
