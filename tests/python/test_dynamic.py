"""The dynamic models of examples/python/dynamic.py through Loom: they run
and learn, compiled runs agree with the eager fallback's, data-dependent
routing and recursion work, and the ops they use match PyTorch."""
import os
import sys

import numpy as np
import pytest

import loom

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import dynamic  # noqa: E402

torch = pytest.importorskip("torch")


@pytest.fixture
def compile_mode():
    yield loom.set_compile_mode
    loom.set_compile_mode("tiered")


@pytest.mark.parametrize("name,steps", [("lstm", 2), ("treelstm", 4), ("moe", 3), ("gnn", 3)])
def test_compiled_runs_match_the_eager_fallback(name, steps, compile_mode):
    compile_mode("interpret")
    eager, items, _ = dynamic.WORKLOADS[name](loom, steps, 3)
    compile_mode("wait")
    compiled, items2, _ = dynamic.WORKLOADS[name](loom, steps, 3)
    assert items == items2 > 0
    np.testing.assert_allclose(compiled, eager, rtol=2e-4)
    assert all(np.isfinite(eager))


@pytest.mark.parametrize("name,steps", [("lstm", 3), ("treelstm", 4), ("moe", 3), ("gnn", 3)])
def test_losses_match_pytorch_from_the_same_weights(name, steps):
    """The same script run by PyTorch and by Loom, Loom's modules loaded
    with PyTorch's initial weights: the same data, so the same losses over
    the first steps (forward, backward and Adam each step)."""
    weights = []

    def take(modules):
        weights.extend({k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                       for m in modules)

    def give(modules):
        for m, w in zip(modules, weights):
            m.load_state_dict(w)

    theirs = dynamic.WORKLOADS[name](torch, steps, 5, init=take)[0]
    mine = dynamic.WORKLOADS[name](loom, steps, 5, init=give)[0]
    np.testing.assert_allclose(mine, theirs, rtol=2e-4)


def test_moe_and_gnn_learn():
    moe = dynamic.moe(loom, 25, 0)[0]
    assert np.mean(moe[-5:]) < 0.6 * np.mean(moe[:5])
    gnn = dynamic.gnn(loom, 40, 0)[0]
    assert np.mean(gnn[-5:]) < np.mean(gnn[:5])


def test_the_same_script_runs_on_torch():
    for name in dynamic.WORKLOADS:
        losses, items, _ = dynamic.WORKLOADS[name](torch, 1, 0)
        assert items > 0 and np.isfinite(losses[0])


def test_scatter_index_add_any_all_against_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    src = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([4, 0, 4, 2])
    mine = loom.from_numpy(x).index_add(0, loom.from_numpy(idx), loom.from_numpy(src))
    theirs = torch.from_numpy(x).index_add(0, torch.from_numpy(idx), torch.from_numpy(src))
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6)
    b = rng.random((3, 4)) > 0.5
    for dim in (None, 0, 1):
        tb = torch.from_numpy(b)
        np.testing.assert_array_equal(
            loom.from_numpy(b).any(dim).numpy(),
            (tb.any() if dim is None else tb.any(dim)).numpy())
        np.testing.assert_array_equal(
            loom.from_numpy(b).all(dim).numpy(),
            (tb.all() if dim is None else tb.all(dim)).numpy())


def test_sync_keeps_values_lazy_and_right():
    x = loom.tensor([1.0, 2.0])
    y = x * 3
    loom.sync()
    z = y + 1
    assert z.tolist() == [4.0, 7.0]
    with pytest.raises(ValueError, match="compile mode"):
        loom.set_compile_mode("fast")


def test_rows_that_nonzero_picks_are_symbolic_from_the_first_step():
    """An MoE's routing: the rows nonzero picks differ in count every step.
    Their size is symbolic from its first sighting (data_dims), so the
    segments that read them compile once: no second compile keyed on the
    first step's count, with PyTorch's values every step."""
    loom.set_compile_mode("wait")
    try:
        rng = np.random.default_rng(3)
        wn = rng.standard_normal((5, 3)).astype(np.float32)
        before = loom.stats()
        for _ in range(6):
            xn = rng.standard_normal((32, 5)).astype(np.float32)
            outs = []
            for lib in (torch, loom):
                x, w = lib.tensor(xn), lib.tensor(wn)
                rows = lib.nonzero(x[:, 0] > 0)[:, 0]
                outs.append(float(((x[rows] @ w).relu() * 2).sum()))
            assert outs[1] == pytest.approx(outs[0], rel=1e-5, abs=1e-5)
        after = loom.stats()
        assert after["recompiles"] == before["recompiles"]
        assert after["interpreted"] == before["interpreted"]
    finally:
        loom.set_compile_mode("tiered")


def test_a_cell_over_x_t_of_one_input_compiles_its_body_once():
    """for t in range(L): h = cell(x[t], h); loom.sync(), L changing every
    step: x[t] of the real input is taken out before the segment, so that
    the body is one graph whatever t (it was a new key at every t, past
    the recompile limit within a step), with PyTorch's losses and weights."""
    loom.set_compile_mode("wait")
    try:
        rng = np.random.default_rng(7)
        torch.manual_seed(0)
        tc, tl = torch.nn.GRUCell(3, 6), torch.nn.Linear(6, 1)
        lc, ll = loom.nn.GRUCell(3, 6), loom.nn.Linear(6, 1)
        for t_mod, l_mod in ((tc, lc), (tl, ll)):
            l_mod.load_state_dict({k: loom.tensor(v.detach().numpy())
                                   for k, v in t_mod.state_dict().items()})
        topt = torch.optim.Adam(list(tc.parameters()) + list(tl.parameters()), lr=0.01)
        lopt = loom.optim.Adam(list(lc.parameters()) + list(ll.parameters()), lr=0.01)
        before = loom.stats()
        for _ in range(12):
            n = int(rng.integers(1, 12))
            xn = rng.standard_normal((n, 4, 3)).astype(np.float32)
            yn = rng.standard_normal((4, 1)).astype(np.float32)
            losses = []
            for lib, cell, lin, opt in ((torch, tc, tl, topt), (loom, lc, ll, lopt)):
                opt.zero_grad()
                h, x = lib.zeros(4, 6), lib.tensor(xn)
                for t in range(n):
                    h = cell(x[t], h)
                    if lib is loom:
                        loom.sync()
                loss = ((lin(h) - lib.tensor(yn)) ** 2).mean()
                loss.backward()
                opt.step()
                losses.append(float(loss))
            assert losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-6)
        after = loom.stats()
        assert after["recompiles"] - before["recompiles"] <= 2
        assert after["interpreted"] == before["interpreted"]
        np.testing.assert_allclose(lc.weight_hh.detach().numpy(), tc.weight_hh.detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
    finally:
        loom.set_compile_mode("tiered")
