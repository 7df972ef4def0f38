"""F.affine_grid and F.grid_sample against PyTorch's: every mode, padding
mode and align_corners in 2-d and 3-d, values and the gradients to the
image, the grid and an affine map's theta."""
import numpy as np
import pytest

import loom
import loom.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
rng = np.random.default_rng(13)


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(dims, mode, padding_mode, align_corners):
    shape, gshape = ((2, 3, 5, 6, 7), (2, 4, 3, 5, 3)) if dims == 3 else \
        ((2, 3, 5, 7), (2, 4, 6, 2))
    x = rng.standard_normal(shape).astype(np.float32)
    g = (rng.standard_normal(gshape) * 0.8).astype(np.float32)  # some outside [-1, 1]
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    mx, mg = loom.tensor(x, requires_grad=True), loom.tensor(g, requires_grad=True)
    tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
    y, ty = F.grid_sample(mx, mg, **kw), TF.grid_sample(tx, tg, **kw)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    w = rng.standard_normal(ty.shape).astype(np.float32)
    (y * loom.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    if mode == "bilinear":
        np.testing.assert_allclose(mg.grad.numpy(), tg.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 3, 4, 5, 6), (2, 1, 1, 5)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_into_grid_sample_trains_theta(size, align_corners):
    dims = len(size) - 2
    theta = (np.eye(dims, dims + 1) + 0.2 * rng.standard_normal((2, dims, dims + 1))) \
        .astype(np.float32)
    x = rng.standard_normal(size).astype(np.float32)
    mt, tt = loom.tensor(theta, requires_grad=True), torch.tensor(theta, requires_grad=True)
    grid = F.affine_grid(mt, size, align_corners=align_corners)
    tgrid = TF.affine_grid(tt, size, align_corners=align_corners)
    np.testing.assert_allclose(grid.detach().numpy(), tgrid.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    y = F.grid_sample(loom.tensor(x), grid, align_corners=align_corners)
    ty = TF.grid_sample(torch.tensor(x), tgrid, align_corners=align_corners)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(mt.grad.numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_refused():
    x, g = loom.zeros(1, 2, 4, 4), loom.zeros(1, 3, 3, 2)
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.grid_sample(x, g, mode="bicubic")
    with pytest.raises(ValueError, match="padding_mode"):
        F.grid_sample(x, g, padding_mode="wrap")
    with pytest.raises(ValueError, match="grid"):
        F.grid_sample(x, loom.zeros(1, 3, 3, 3))
    with pytest.raises(ValueError, match="Nx2x3"):
        F.affine_grid(loom.zeros(1, 3, 3), (1, 2, 4, 4))
