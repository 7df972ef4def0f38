"""loom.nn's 3-d layers (Conv3d, pooling, BatchNorm3d, InstanceNorm3d) and
their functional forms against PyTorch's, with the same weights: outputs,
input and weight gradients, running statistics, and a small 3-d CNN's
training."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

from test_nn_layers import twin

torch = pytest.importorskip("torch")
rng = np.random.default_rng(5)


@pytest.mark.parametrize("kwargs", [
    dict(), dict(stride=2, padding=1), dict(stride=(2, 1, 3), padding=(1, 0, 2)),
    dict(padding="same", dilation=(2, 1, 1)), dict(dilation=2, groups=2, bias=False),
    dict(padding="valid"), dict(padding=1, padding_mode="replicate"),
    dict(padding=(1, 2, 1), padding_mode="circular"),
    dict(padding="same", padding_mode="reflect")])
def test_conv3d(kwargs):
    twin(lambda m: m.Conv3d(4, 6, 3, **kwargs), (2, 4, 7, 8, 9))


def test_conv3d_even_kernel_same_padding_and_unbatched_input():
    twin(lambda m: m.Conv3d(3, 2, (2, 4, 3), padding="same"), (2, 3, 5, 6, 7))
    twin(lambda m: m.Conv3d(3, 2, 3, padding=1), (3, 5, 6, 7))


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), dilation=(2, 1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)])
def test_max_pool3d(kwargs):
    twin(lambda m: m.MaxPool3d(**kwargs), (2, 3, 9, 8, 7))


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3, 2), divisor_override=5)])
def test_avg_pool3d(kwargs):
    twin(lambda m: m.AvgPool3d(**kwargs), (2, 3, 9, 8, 7))


@pytest.mark.parametrize("size", [1, (1, 1, 1), 2, (4, 3, 5), (3, None, 2), (9, 8, 7)])
def test_adaptive_avg_pool3d(size):
    twin(lambda m: m.AdaptiveAvgPool3d(size), (2, 3, 9, 8, 7))


def test_batch_norm3d_training_then_eval():
    mine, theirs = twin(lambda m: m.BatchNorm3d(4), (3, 4, 5, 6, 7))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(mine, name).numpy(),
                                   getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((2, 4, 3, 4, 5)).astype(np.float32)
    mine.eval(), theirs.eval()
    np.testing.assert_allclose(mine(loom.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="expected 5D input"):
        mine(loom.tensor(x[0]))


def test_instance_norm3d():
    twin(lambda m: m.InstanceNorm3d(4, affine=True), (2, 4, 5, 6, 7))


def test_bad_arguments_are_refused_with_their_names():
    x = loom.zeros(2, 4, 5, 6, 7)
    with pytest.raises(ValueError, match="to have 8 channels, but got 4"):
        F.conv3d(x, loom.zeros(6, 4, 3, 3, 3), groups=2)
    with pytest.raises(ValueError, match="5D .batched. input to conv3d"):
        F.conv3d(loom.zeros(4, 5, 6), loom.zeros(6, 4, 3, 3, 3))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        F.conv3d(x, loom.zeros(6, 4, 7, 3, 3))
    with pytest.raises(ValueError, match="at most half of the kernel"):
        F.max_pool3d(x, 3, padding=2)
    with pytest.raises(NotImplementedError, match="return_indices"):
        F.max_pool3d(x, 2, return_indices=True)


def test_a_small_3d_cnn_trains_as_torch():
    def make(lib):
        m = lib.nn
        return m.Sequential(m.Conv3d(2, 4, 3, padding=1), m.BatchNorm3d(4), m.ReLU(),
                            m.MaxPool3d(2), m.Conv3d(4, 6, 3, stride=(1, 2, 2)), m.ReLU(),
                            m.AdaptiveAvgPool3d(1), m.Flatten(), m.Linear(6, 3))
    torch.manual_seed(0)
    theirs, mine = make(torch), make(loom)
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    opt = loom.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        x = rng.standard_normal((4, 2, 8, 10, 10)).astype(np.float32)
        y = rng.integers(0, 3, 4)
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        topt.step()
        opt.zero_grad()
        loss = F.cross_entropy(mine(loom.tensor(x)), loom.tensor(y))
        loss.backward()
        opt.step()
        assert abs(float(loss) - float(tloss)) < 1e-4 * max(1.0, abs(float(tloss))), step


@pytest.mark.parametrize("kwargs", [
    dict(), dict(stride=2, padding=1), dict(stride=(2, 1, 3), padding=(1, 0, 1),
                                            output_padding=(1, 0, 2)),
    dict(stride=2, dilation=(2, 1, 2), output_padding=1, groups=2, bias=False),
    dict(stride=3, padding=2, output_padding=(2, 1, 0))])
def test_conv_transpose3d(kwargs):
    twin(lambda m: m.ConvTranspose3d(4, 6, 3, **kwargs), (2, 4, 4, 5, 6))


def test_conv_transpose3d_output_size_and_unbatched_input():
    mine, theirs = twin(lambda m: m.ConvTranspose3d(3, 2, 3, stride=2), (3, 4, 5, 6))
    x = rng.standard_normal((1, 3, 4, 5, 6)).astype(np.float32)
    got = mine(loom.tensor(x), output_size=(10, 12, 13))
    want = theirs(torch.tensor(x), output_size=(10, 12, 13))
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(ValueError, match="valid sizes range"):
        mine(loom.tensor(x), output_size=(12, 12, 13))
