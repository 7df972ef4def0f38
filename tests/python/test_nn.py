"""loom.nn against torch.nn: a PyTorch state_dict loads and gives the same
outputs and gradients; the losses match PyTorch's."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

torch = pytest.importorskip("torch")


class LoomNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh())
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.norm(self.body(x)))


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 16), torch.nn.Tanh())
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.norm(self.body(x)))


def test_a_pytorch_state_dict_loads_and_matches():
    torch.manual_seed(0)
    theirs, mine = TorchNet(), LoomNet()
    assert [k for k, _ in mine.named_parameters()] == [k for k, _ in theirs.named_parameters()]
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    y = np.array([0, 3, 1, 1, 2])
    out, tout = mine(loom.from_numpy(x)), theirs(torch.from_numpy(x))
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    F.cross_entropy(out, loom.from_numpy(y)).backward()
    torch.nn.functional.cross_entropy(tout, torch.from_numpy(y)).backward()
    for (name, p), (_, tp) in zip(mine.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-5,
                                   err_msg=name)


def test_load_state_dict_checks_keys_and_shapes():
    m = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="missing keys"):
        m.load_state_dict({"weight": np.zeros((2, 3), np.float32)})
    with pytest.raises(RuntimeError, match="size mismatch"):
        m.load_state_dict({"weight": np.zeros((3, 2), np.float32), "bias": np.zeros(2)})


@pytest.mark.parametrize("kwargs", [{}, {"ignore_index": 2}, {"label_smoothing": 0.1},
                                    {"reduction": "sum"}, {"reduction": "none"}])
def test_cross_entropy_against_torch(kwargs):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 5)).astype(np.float32)
    y = rng.integers(0, 5, 7)
    mine = F.cross_entropy(loom.from_numpy(x), loom.from_numpy(y), **kwargs)
    theirs = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(y),
                                               **kwargs)
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lazy_target", [False, True])
@pytest.mark.parametrize("shape", [(7, 5), (3, 5, 4)])
def test_cross_entropy_mean_and_its_gradient_against_torch(lazy_target, shape):
    """The mean over a real target none of whose items is ignored takes a
    shorter form (no masks): its value and gradient as torch's, as the
    general form's for a lazy target; an out-of-range class raises."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 5, (shape[0],) + shape[2:])
    lx = loom.tensor(x, requires_grad=True)
    ly = loom.from_numpy(y) + 0 if lazy_target else loom.from_numpy(y)
    assert ly._lazy == lazy_target
    loss = F.cross_entropy(lx, ly)
    loss.backward()
    tx = torch.tensor(x, requires_grad=True)
    want = torch.nn.functional.cross_entropy(tx, torch.from_numpy(y))
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        F.cross_entropy(loom.ones(2, 5), loom.tensor([0, 5]))


def test_other_losses_against_torch():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((4, 3)).astype(np.float32) * 5 for _ in range(2))
    t = (rng.random((4, 3)) > 0.5).astype(np.float32)
    la, lb, lt = loom.from_numpy(a), loom.from_numpy(b), loom.from_numpy(t)
    ta, tb, tt = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(t)
    tf = torch.nn.functional
    np.testing.assert_allclose(F.mse_loss(la, lb).item(), tf.mse_loss(ta, tb).item(), rtol=1e-5)
    np.testing.assert_allclose(F.l1_loss(la, lb).item(), tf.l1_loss(ta, tb).item(), rtol=1e-5)
    np.testing.assert_allclose(F.binary_cross_entropy_with_logits(la, lt).item(),
                               tf.binary_cross_entropy_with_logits(ta, tt).item(), rtol=1e-5)


def test_module_tree_and_modes():
    net = LoomNet()
    assert len(list(net.parameters())) == 8
    assert [n for n, _ in net.named_children()] == ["body", "norm", "head"]
    net.eval()
    assert not any(m.training for m in net.modules())
    assert "Linear(in_features=6, out_features=16, bias=True)" in repr(net)
    d = nn.Dropout(0.5)
    x = loom.ones(1000)
    assert d.eval()(x) is x
    kept = d.train()(x).numpy()
    assert set(np.unique(kept)) <= {0.0, 2.0} and 300 < (kept > 0).sum() < 700


def test_training_with_modules_learns_and_compiles_once():
    loom.manual_seed(4)
    rng = np.random.default_rng(4)
    x = loom.from_numpy(rng.standard_normal((64, 6)).astype(np.float32))
    y = loom.from_numpy((rng.standard_normal(64) > 0).astype(np.int64))
    net = LoomNet()
    opt = loom.optim.AdamW(net.parameters(), lr=1e-2)
    first = None
    for i in range(60):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        first = first if first is not None else float(loss)
    assert float(loss) < 0.5 * first


def test_save_and_load_round_trip_every_dtype(tmp_path):
    tensors = {"w": loom.randn(3, 4), "b": loom.tensor([1, 2], dtype=loom.int8),
               "h": loom.tensor([0.5]).half(), "bf": loom.tensor([1.5, -2]).to(loom.bfloat16),
               "m": loom.tensor([True, False]), "s": loom.tensor(7), "e": loom.zeros(0, 3)}
    path = tmp_path / "m.safetensors"
    loom.save(tensors, str(path))
    back = loom.load(str(path))
    assert list(back) == list(tensors)
    for k, t in tensors.items():
        assert back[k].dtype is t.dtype and back[k].shape == t.shape
        assert loom._C.to_bytes(back[k]) == loom._C.to_bytes(t)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".loom-save")]


def test_a_saved_file_has_open_s_mode_and_trailing_bytes_are_refused(tmp_path):
    import os
    path = tmp_path / "m.safetensors"
    loom.save({"w": loom.ones(3)}, str(path))
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    with open(path, "ab") as f:
        f.write(b"\0" * 16)
    with pytest.raises(ValueError, match="no tensor's"):
        loom.load(str(path))


def test_a_save_killed_midway_leaves_the_old_file_and_its_temporary_is_removed(tmp_path):
    """kill -9 while loom.save writes 200 MB: the file keeps its old
    contents (the write goes to a temporary renamed over it), and the next
    save into the directory removes the dead process's temporary."""
    import os
    import signal
    import subprocess
    import sys
    import time
    path = tmp_path / "m.safetensors"
    loom.save({"w": loom.ones(3)}, str(path))
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, loom\n"
        "big = {f't{i}': loom.randn(1000, 1000) for i in range(50)}\n"
        "print('ready', flush=True)\n"
        "while True: loom.save(big, sys.argv[1])\n"), str(path)],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stdout.readline() == b"ready\n"
        deadline = time.monotonic() + 60
        while not [p for p in tmp_path.iterdir() if p.name.startswith(".loom-save-")]:
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.001)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".loom-save-")]
    back = loom.load(str(path))  # the old file, or a whole new one
    assert list(back) in (["w"], [f"t{i}" for i in range(50)])
    assert left  # killed inside a write, which takes far longer than the kill
    loom.save({"v": loom.zeros(2)}, str(tmp_path / "other.safetensors"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".loom-save-")]


def test_a_saved_model_loads_into_a_new_one(tmp_path):
    a, b = LoomNet(), LoomNet()
    loom.save(a.state_dict(), str(tmp_path / "net.safetensors"))
    b.load_state_dict(loom.load(str(tmp_path / "net.safetensors")))
    for (name, u), (_, v) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_array_equal(u.numpy(), v.numpy(), err_msg=name)
    x = loom.randn(3, 6)
    with loom.no_grad():
        # one run may be interpreted and the other compiled (tiered
        # lookups), whose sums round in another order
        np.testing.assert_allclose(a(x).numpy(), b(x).numpy(), rtol=1e-6, atol=1e-7)


def test_malformed_files_are_refused(tmp_path):
    import struct
    good = tmp_path / "g.safetensors"
    loom.save({"w": loom.ones(4)}, str(good))
    raw = good.read_bytes()
    cases = {
        "short": b"\x01\x02",
        "huge_header": struct.pack("<Q", 1 << 40) + b"{}",
        "not_json": struct.pack("<Q", 4) + b"{{{{",
        "truncated": raw[:-3],
        "bad_dtype": raw.replace(b'"F32"', b'"X32"'),
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(ValueError):
            loom.load(str(p))
    with pytest.raises(OSError):
        loom.load(str(tmp_path / "missing"))
    with pytest.raises(TypeError):
        loom.save({"w": np.zeros(3)}, str(tmp_path / "x"))


def test_a_submodule_assigned_over_none_is_registered():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.extra = None
            self.extra = nn.Linear(2, 2)

    b = Block()
    assert isinstance(b.extra, nn.Linear) and len(list(b.parameters())) == 2


def test_freeze_after_a_forward_keeps_the_others_gradients():
    """requires_grad_(False) on a leaf the step already used: its backward
    skips that leaf and still fills the others' .grad, and an optimizer
    step updates those, as PyTorch's graph (recorded with the flag on)."""

    def go(lib, nn):
        lib.manual_seed(0)
        a, b = nn.Linear(2, 3), nn.Linear(3, 1)
        if lib is loom:
            ta, tb = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)
            a.load_state_dict({k: v.detach().numpy() for k, v in ta.state_dict().items()})
            b.load_state_dict({k: v.detach().numpy() for k, v in tb.state_dict().items()})
        opt = lib.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
        h = a(lib.tensor([[1.0, 2.0], [3.0, -1.0]]))
        a.weight.requires_grad_(False)
        q = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([0.5, 1.0, 1.5], requires_grad=True)
        y = (b(h).sum() + (q * w).sum())
        q.requires_grad_(False)
        y.backward()
        grads = [a.bias.grad, b.weight.grad, w.grad]
        assert a.weight.grad is None and q.grad is None
        opt.step()
        return [g.detach().numpy().copy() for g in grads] + \
            [p.detach().numpy().copy() for p in (a.weight, a.bias, b.weight)]

    torch.manual_seed(0)
    theirs = go(torch, torch.nn)
    torch.manual_seed(0)
    for m, t in zip(go(loom, nn), theirs):
        np.testing.assert_allclose(m, t, rtol=1e-5, atol=1e-6)


def test_freeze_and_convert_after_a_forward():
    """requires_grad_(False) and to(float64) after the model has run in the
    step (fine-tuning set-up after a look at the loss), as PyTorch allows;
    a frozen layer then gets no gradient while the others train."""
    m = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    x = loom.ones(5, 4)
    before = m(x).sum().item()
    m[0].requires_grad_(False)
    m(x).sum().backward()
    assert m[0].weight.grad is None and m[1].weight.grad is not None
    assert m(x).sum().item() == pytest.approx(before, rel=1e-6)
    m.to(loom.float64)
    assert m[1].weight.dtype is loom.float64 and m(x.double()).dtype is loom.float64
