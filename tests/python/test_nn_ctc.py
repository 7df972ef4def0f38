"""F.ctc_loss and nn.CTCLoss against PyTorch's: padded and concatenated
targets, every reduction, another blank, repeated labels, targets no
alignment fits (inf, or 0 with zero_infinity), and the gradient to the
logits under log_softmax."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
rng = np.random.default_rng(17)


def case(T, C, target_lengths, input_lengths, concat=False, reduction="mean",
         zero_infinity=False, blank=0, repeats=False):
    n = len(target_lengths)
    x = rng.standard_normal((T, n, C)).astype(np.float32)
    s = max(max(target_lengths), 1)
    labels = rng.integers(0, C - 1, (n, s))
    labels[labels >= blank] += 1  # never the blank
    if repeats:
        labels[:, 1::2] = labels[:, ::2][:, :labels[:, 1::2].shape[1]]
    targets = np.concatenate([labels[i, :k] for i, k in enumerate(target_lengths)]) \
        if concat else labels
    mx, tx = loom.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    args = (blank, reduction, zero_infinity)
    mine = F.ctc_loss(F.log_softmax(mx, 2), loom.tensor(targets),
                      loom.tensor(np.array(input_lengths)), list(target_lengths), *args)
    theirs = TF.ctc_loss(TF.log_softmax(tx, 2), torch.tensor(targets),
                         torch.tensor(input_lengths), torch.tensor(target_lengths), *args)
    np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-5,
                               atol=1e-5)
    mine.sum().backward()
    theirs.sum().backward()
    finite = np.isfinite(theirs.detach().numpy()).all()
    if finite:
        np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("concat", [False, True])
def test_ctc_loss(reduction, concat):
    case(12, 5, [3, 4, 1], [12, 10, 7], concat, reduction)
    case(30, 8, [5, 7, 1, 6], [30, 25, 3, 20], concat, reduction, repeats=True)


def test_ctc_loss_blank_empty_targets_and_impossible_alignments():
    case(12, 5, [3, 0, 2], [12, 10, 7], reduction="sum", blank=2)
    case(6, 5, [3, 5, 2], [6, 4, 3], reduction="none", zero_infinity=True)
    case(6, 5, [3, 5, 2], [6, 4, 3], reduction="none")
    case(6, 5, [3, 3], [6, 5], reduction="mean", repeats=True)  # 1 1 1 needs 5 frames


def test_ctc_module_and_bad_lengths():
    x = F.log_softmax(loom.randn(8, 2, 4), 2)
    loss = nn.CTCLoss(blank=3)(x, loom.tensor([[0, 1], [2, 2]]), [8, 6], [2, 2])
    assert loss.shape == () and float(loss) > 0
    with pytest.raises(ValueError, match="one length per batch entry"):
        F.ctc_loss(x, loom.tensor([[0, 1], [2, 2]]), [8], [2, 2])
    with pytest.raises(ValueError, match="input lengths must lie in"):
        F.ctc_loss(x, loom.tensor([[0, 1], [2, 2]]), [9, 6], [2, 2])
    with pytest.raises(ValueError, match="sum.target_lengths."):
        F.ctc_loss(x, loom.tensor([0, 1, 2]), [8, 6], [2, 2])
