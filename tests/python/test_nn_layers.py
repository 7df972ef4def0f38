"""The layers of loom.nn against torch.nn with the same weights (loaded
through state_dict): outputs, gradients, and BatchNorm's running
statistics."""
import numpy as np
import pytest

import loom
import loom.nn as nn

torch = pytest.importorskip("torch")
rng = np.random.default_rng(3)


def twin(make, *shapes, train=True, rtol=1e-4, atol=1e-5, out_index=None):
    """Builds the layer in both, copies PyTorch's weights into Loom's, runs
    both on the same inputs, checks outputs and input/weight gradients."""
    torch.manual_seed(0)
    theirs, mine = make(torch.nn), make(nn)
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    mine.train(train), theirs.train(train)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    out = mine(*[loom.from_numpy(x) for x in xs])
    tout = theirs(*[torch.from_numpy(x) for x in xs])
    if out_index is not None:
        out, tout = out[out_index], tout[out_index]
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=rtol,
                               atol=atol)
    w = rng.standard_normal(tout.shape).astype(np.float32)
    (out * loom.from_numpy(w)).sum().backward()
    (tout * torch.from_numpy(w)).sum().backward()
    for (name, p), (_, tp) in zip(mine.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    loom.step()
    return mine, theirs


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1), dict(padding="same"),
                                    dict(dilation=2, groups=2, bias=False)])
def test_conv2d(kwargs):
    twin(lambda m: m.Conv2d(4, 6, 3, **kwargs), (2, 4, 9, 9))


def test_conv_transpose2d():
    twin(lambda m: m.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
         (2, 4, 5, 5))


def test_batch_norm2d_training_updates_running_statistics():
    mine, theirs = twin(lambda m: m.BatchNorm2d(5), (4, 5, 3, 3))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(mine, name).numpy(),
                                   getattr(theirs, name).numpy(), rtol=1e-5, err_msg=name)
    twin(lambda m: m.BatchNorm2d(5), (4, 5, 3, 3), train=False)


@pytest.mark.parametrize("make", [
    lambda m: m.MaxPool2d(2), lambda m: m.MaxPool2d(3, stride=2, padding=1),
    lambda m: m.AvgPool2d(2), lambda m: m.AvgPool2d(3, stride=1, padding=1),
    lambda m: m.AdaptiveAvgPool2d(1), lambda m: m.AdaptiveAvgPool2d((2, 3)),
])
def test_pooling(make):
    twin(lambda m: m.Sequential(m.Conv2d(2, 2, 1), make(m)), (2, 2, 6, 6))


def test_multihead_attention():
    def make(m):
        class Wrap(m.Module):
            def __init__(self):
                super().__init__()
                self.attn = m.MultiheadAttention(8, 2)

            def forward(self, x):
                return self.attn(x, x, x, need_weights=False)[0]
        return Wrap()
    twin(make, (5, 3, 8))


def test_recurrent_cells_and_lstm():
    twin(lambda m: m.LSTMCell(4, 6), (3, 4), out_index=0)
    twin(lambda m: m.GRUCell(4, 6), (3, 4))
    twin(lambda m: m.LSTM(4, 6, num_layers=2), (5, 3, 4), out_index=0)
    twin(lambda m: m.LSTM(4, 6, batch_first=True), (3, 5, 4), out_index=0)


def test_module_to_float64():
    m = nn.Linear(3, 2).to(loom.float64)
    assert m.weight.dtype is loom.float64 and m.weight.requires_grad
    assert m(loom.ones(1, 3, dtype=loom.float64)).dtype is loom.float64


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder(norm_first):
    def make(m):
        layer = m.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                          norm_first=norm_first)
        return m.TransformerEncoder(layer, 2)
    twin(make, (2, 5, 16), rtol=2e-4, atol=2e-5)


def test_deepcopy_and_clone():
    import copy
    m = nn.Linear(3, 2)
    c = copy.deepcopy(m)
    assert c.weight is not m.weight and c.weight.requires_grad
    np.testing.assert_array_equal(c.weight.detach().numpy(), m.weight.detach().numpy())
    x = loom.ones(2, requires_grad=True)
    (x.clone() * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
