"""The static models of examples/python/static_models.py, built by loom.nn
and by torch.nn with PyTorch's weights: the same loss, gradients and,
after one AdamW step each, the same weights. In float64: in float32 a
ReLU whose input rounds to the other side of zero in one library and not
the other (ResNet-18's last blocks hold thousands of values near zero)
moves a gradient by a few percent, which says nothing of either."""
import os
import sys

import numpy as np
import pytest

import loom

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import static_models  # noqa: E402

torch = pytest.importorskip("torch")


SANITIZED = os.environ.get("LOOM_SANITIZED") == "1"


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer", "vit"])
def test_model_matches_torch_through_a_training_step(name):
    if SANITIZED and name != "mlp":
        pytest.skip("float64 through the fallback: minutes under the sanitizers")
    make, shape, classes = static_models.MODELS[name]
    shape = (2, 16, 256) if name == "transformer" else (2,) + shape[1:]
    torch.manual_seed(0)
    theirs = make(torch).double().train()
    mine = make(loom).to(loom.float64).train()
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    y = np.arange(shape[0]) * 7 % classes
    topt = torch.optim.AdamW(theirs.parameters(), lr=1e-3)
    lopt = loom.optim.AdamW(mine.parameters(), lr=1e-3)
    tl = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
    ll = loom.nn.functional.cross_entropy(mine(loom.from_numpy(x)), loom.from_numpy(y))
    tl.backward()
    ll.backward()
    grads = {}
    for (k, p), (_, tp) in zip(mine.named_parameters(), theirs.named_parameters()):
        g = tp.grad.numpy().copy()
        scale = float(np.abs(g).max()) or 1.0
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-6, atol=1e-9 * scale, err_msg=k)
        grads[k] = (g, scale)
    topt.step()
    lopt.step()
    np.testing.assert_allclose(float(ll), float(tl), rtol=1e-9)
    after = mine.state_dict()
    for k, v in theirs.state_dict().items():
        diff = np.abs(after[k].numpy() - v.detach().numpy())
        if k not in grads:  # a buffer: BatchNorm's statistics
            assert diff.max() <= 1e-9, k
            continue
        # Adam's first step moves each weight by about lr * sign(grad): where
        # the gradient is within rounding of zero it may go either way
        g, scale = grads[k]
        near_zero = np.abs(g) <= 1e-9 * scale
        assert diff[~near_zero].max(initial=0) <= 1e-9, k
        assert diff.max() <= 2.1e-3, k
