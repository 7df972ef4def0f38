"""loom.nn's window layers (Unfold, Fold, ChannelShuffle, LocalResponseNorm,
LPPool, adaptive max pools, ReflectionPad3d), in-place activations and the
margin and multi-label losses against PyTorch's: outputs and gradients."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

from test_nn_layers import twin

torch = pytest.importorskip("torch")
TF = torch.nn.functional
rng = np.random.default_rng(11)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=(2, 3), stride=2),
                                    dict(kernel_size=3, padding=1, dilation=2, stride=(1, 2))])
def test_unfold_and_fold_round_trip(kwargs):
    twin(lambda m: m.Unfold(**kwargs), (2, 3, 8, 9))
    twin(lambda m: m.Unfold(**kwargs), (3, 8, 9))  # unbatched
    x = torch.randn(2, 3, 8, 9)
    cols = TF.unfold(x, **kwargs)
    twin(lambda m: m.Fold((8, 9), **kwargs), tuple(cols.shape))
    twin(lambda m: m.Fold((8, 9), **kwargs), tuple(cols.shape[1:]))


def test_fold_refuses_a_column_count_that_does_not_match():
    with pytest.raises(RuntimeError, match="number of sliding blocks"):
        F.fold(loom.zeros(1, 12, 10), (5, 6), 2)
    with pytest.raises(RuntimeError, match="divisible by the product of kernel_size"):
        F.fold(loom.zeros(1, 10, 20), (5, 6), 2)


def test_channel_shuffle_local_response_norm_and_lp_pools():
    x = rng.standard_normal((2, 6, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(nn.ChannelShuffle(3)(loom.tensor(x)).numpy(),
                                  torch.nn.ChannelShuffle(3)(torch.tensor(x)).numpy())
    with pytest.raises(ValueError, match="divisible by groups"):
        F.channel_shuffle(loom.tensor(x), 4)
    for shape in ((2, 7, 9), (2, 7, 5, 6), (2, 7, 3, 4, 5)):
        twin(lambda m: m.LocalResponseNorm(3, alpha=0.1, beta=0.6, k=2.0), shape)
        twin(lambda m: m.LocalResponseNorm(4), shape)
    twin(lambda m: m.LPPool2d(2, 3, stride=2), (2, 3, 9, 8))
    twin(lambda m: m.LPPool2d(3, (2, 3), ceil_mode=True), (2, 3, 9, 8))
    twin(lambda m: m.LPPool1d(2, 3, stride=2), (2, 3, 11))


def test_adaptive_max_pools_and_reflection_pad3d():
    twin(lambda m: m.AdaptiveMaxPool1d(4), (2, 3, 12))
    twin(lambda m: m.AdaptiveMaxPool3d((2, 3, 1)), (2, 3, 4, 6, 5))
    twin(lambda m: m.ReflectionPad3d((1, 2, 0, 1, 2, 1)), (2, 3, 4, 5, 6))
    y, i = F.adaptive_max_pool1d(loom.tensor(np.array([[[3., 1., 4., 1., 5., 9.]]],
                                                      dtype=np.float32)), 2, True)
    assert y.tolist() == [[[4.0, 9.0]]] and i.tolist() == [[[2, 5]]]


@pytest.mark.parametrize("name,args", [("elu_", (0.7,)), ("celu_", (1.3,)), ("selu_", ()),
                                       ("leaky_relu_", (0.2,)), ("hardtanh_", (-0.5, 0.8))])
def test_in_place_activations(name, args):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    mine, theirs = loom.tensor(x), torch.tensor(x)
    out = getattr(F, name)(mine, *args)
    getattr(TF, name)(theirs, *args)
    assert out is mine
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


def loss_twin(mine_fn, theirs_fn, *arrays, grad=(0,)):
    ins = [loom.tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
    tins = [torch.tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
    out, tout = mine_fn(*ins), theirs_fn(*tins)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    (out.sum()).backward()
    tout.sum().backward()
    for i in grad:
        np.testing.assert_allclose(ins[i].grad.numpy(), tins[i].grad.numpy(), rtol=1e-4,
                                   atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_margin_losses(reduction):
    x = rng.standard_normal((5, 4)).astype(np.float32)
    signs = rng.choice([-1.0, 1.0], (5, 4)).astype(np.float32)
    signs[0, 0] = 0.5  # neither 1 nor -1: both terms, as PyTorch's
    r = dict(reduction=reduction)
    loss_twin(lambda a, t: F.hinge_embedding_loss(a, t, 0.7, **r),
              lambda a, t: TF.hinge_embedding_loss(a, t, 0.7, **r), x, signs)
    loss_twin(lambda a, t: F.soft_margin_loss(a, t, **r),
              lambda a, t: TF.soft_margin_loss(a, t, **r), x, signs)
    y = (rng.random((5, 4)) > 0.5).astype(np.float32)
    w = rng.random(4).astype(np.float32)
    loss_twin(lambda a, t, w: F.multilabel_soft_margin_loss(a, t, w, **r),
              lambda a, t, w: TF.multilabel_soft_margin_loss(a, t, w, **r), x, y, w)
    classes = rng.integers(0, 4, 5)
    for p, margin in ((1, 1.0), (2, 0.5)):
        loss_twin(lambda a, t, w: F.multi_margin_loss(a, t, p, margin, w, **r),
                  lambda a, t, w: TF.multi_margin_loss(a, t, p, margin, w, **r),
                  x, classes, w)
    lists = np.array([[3, 0, -1, 1], [1, 2, 3, 0], [-1, 2, 0, 0], [2, -1, -1, -1],
                      [0, 0, -1, 2]], dtype=np.int64)
    loss_twin(lambda a, t: F.multilabel_margin_loss(a, t, **r),
              lambda a, t: TF.multilabel_margin_loss(a, t, **r), x, lists)
    a, p_, n_ = (rng.standard_normal((5, 6)).astype(np.float32) for _ in range(3))
    for swap in (False, True):
        loss_twin(lambda *t: F.triplet_margin_with_distance_loss(*t, margin=0.5, swap=swap,
                                                                 **r),
                  lambda *t: TF.triplet_margin_with_distance_loss(*t, margin=0.5, swap=swap,
                                                                  **r),
                  a, p_, n_, grad=(0, 1, 2))
    cosine = dict(distance_function=lambda u, v: 1 - F.cosine_similarity(u, v))
    loss_twin(lambda *t: F.triplet_margin_with_distance_loss(*t, **cosine, **r),
              lambda *t: TF.triplet_margin_with_distance_loss(
                  *t, distance_function=lambda u, v: 1 - TF.cosine_similarity(u, v), **r),
              a, p_, n_, grad=(0, 1, 2))


def test_loss_modules_and_single_samples():
    x = rng.standard_normal(4).astype(np.float32)
    loss_twin(lambda a, t: nn.MultiMarginLoss()(a, t),
              lambda a, t: torch.nn.MultiMarginLoss()(a, t), x, np.array(2))
    loss_twin(lambda a, t: nn.MultiLabelMarginLoss()(a, t),
              lambda a, t: torch.nn.MultiLabelMarginLoss()(a, t), x, np.array([3, 1, -1, 0]))
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ValueError, match="margin to be greater than 0"):
        F.triplet_margin_with_distance_loss(loom.zeros(2, 3), loom.zeros(2, 3),
                                            loom.zeros(2, 3), margin=0.0)


def test_pools_with_indices_give_values_and_indices():
    x = rng.standard_normal((2, 3, 8, 6)).astype(np.float32)
    for mine, theirs, args in (
            (F.max_pool2d_with_indices, TF.max_pool2d_with_indices, (2,)),
            (F.adaptive_max_pool2d_with_indices, TF.adaptive_max_pool2d_with_indices, (2,)),
            (F.max_pool1d_with_indices, TF.max_pool1d_with_indices, (3,)),
            (F.adaptive_max_pool1d_with_indices, TF.adaptive_max_pool1d_with_indices, (3,))):
        a = x if "2d" in mine.func.__name__ else x.reshape(2, 3, 48)
        (y, i), (ty, ti) = mine(loom.tensor(a), *args), theirs(torch.tensor(a), *args)
        np.testing.assert_array_equal(y.numpy(), ty.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())


@pytest.mark.parametrize("dims,kwargs", [(1, dict(kernel_size=2)), (2, dict(kernel_size=2)),
                                         (2, dict(kernel_size=3, stride=2, padding=1)),
                                         (3, dict(kernel_size=2))])
def test_max_unpool_puts_each_maximum_back(dims, kwargs):
    shape = (2, 3) + (8, 7, 6)[:dims]
    x = rng.standard_normal(shape).astype(np.float32)
    pool = getattr(TF, f"max_pool{dims}d")
    y, idx = pool(torch.tensor(x), return_indices=True, **kwargs)
    mine_in = loom.tensor(y.numpy(), requires_grad=True)
    theirs_in = y.detach().requires_grad_(True)
    unpool = f"MaxUnpool{dims}d"
    out = getattr(nn, unpool)(**kwargs)(mine_in, loom.tensor(idx.numpy()), shape[2:])
    tout = getattr(torch.nn, unpool)(**kwargs)(theirs_in, idx, shape[2:])
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    w = rng.standard_normal(shape).astype(np.float32)
    (out * loom.tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(mine_in.grad.numpy(), theirs_in.grad.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="invalid output_size"):
        getattr(F, f"max_unpool{dims}d")(mine_in, loom.tensor(idx.numpy()), 2,
                                         output_size=(1,) * dims)
