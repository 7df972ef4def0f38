"""torch.nn.functional's spatial transformer pair: affine_grid (the
sampling positions an affine map sends an output grid to) and
grid_sample (an image read at those positions), 2-d and 3-d. A sample
is a weighted sum of the corners around its position, each a gather from
the flattened image: the gradient reaches the image through the gathers
and the grid through the weights, as PyTorch's."""
import numpy as np

from .. import functional as _F


def _base_coords(n, align_corners):
    """n normalized positions over [-1, 1]: the pixels' centers (PyTorch's
    linspace, scaled by (n - 1) / n unless align_corners)."""
    if n <= 1:
        return np.zeros(max(n, 0))
    xs = np.linspace(-1.0, 1.0, n)
    return xs if align_corners else xs * (n - 1) / n


def affine_grid(theta, size, align_corners=None):
    """theta (N, 2, 3) and size (N, C, H, W) -> grid (N, H, W, 2), or
    theta (N, 3, 4) and size (N, C, D, H, W) -> (N, D, H, W, 3): each output
    position's (x, y[, z]) in [-1, 1] mapped by theta."""
    align = bool(align_corners)
    size = [int(s) for s in size]
    dims = len(size) - 2
    if dims not in (2, 3):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    if theta.ndim != 3 or tuple(theta.shape) != (size[0], dims, dims + 1):
        raise ValueError(f"Expected a batch of {dims}D affine matrices of shape "
                         f"Nx{dims}x{dims + 1} for size {size}. Got {list(theta.shape)}.")
    spatial = size[2:]
    axes = [_base_coords(s, align) for s in reversed(spatial)]  # x (width) first
    mesh = np.meshgrid(*axes[::-1], indexing="ij")  # over (D,) H, W
    base = np.stack([m for m in reversed(mesh)] + [np.ones_like(mesh[0])], -1)
    base = base.reshape(1, -1, dims + 1).astype(np.float64 if theta.dtype.name == "float64"
                                                 else np.float32)
    grid = _F.matmul(_F._const(base), theta.transpose(1, 2))
    return grid.reshape(size[0], *spatial, dims)


def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, low2, high2):
    """coord reflected into [low2 / 2, high2 / 2] (PyTorch's
    reflect_coordinates)."""
    if low2 == high2:
        return coord * 0.0
    lo, span = low2 / 2, (high2 - low2) / 2
    coord = _F.abs(coord - lo)
    extra = _F.fmod(coord, span)
    flips = _F.floor(coord / span)
    even = _F.fmod(flips, 2.0) == 0
    return _F.where(even, extra + lo, span - extra + lo)


def _source(coord, size, padding_mode, align_corners):
    """A grid coordinate as a position in pixels, under padding_mode."""
    c = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        c = _F.clamp(c, 0.0, float(size - 1))
    elif padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else \
            _reflect(c, -1, 2 * size - 1)
        c = _F.clamp(c, 0.0, float(size - 1))
    return c


def _gather_corner(flat, positions, sizes, valid):
    """The image (N, C, P) read at integer positions (one (N, L) tensor per
    spatial dim, slowest first), 0 where not valid."""
    index = None
    inside = valid
    for pos, n in zip(positions, sizes):
        ok = (pos >= 0) & (pos <= n - 1)
        inside = ok if inside is None else inside & ok
        p = _F.clamp(pos, 0, n - 1)
        index = p if index is None else index * n + p
    c = flat.shape[1]
    index = index.unsqueeze(1).expand(index.shape[0], c, index.shape[1])
    values = _F.gather(flat, 2, index)
    return values * inside.unsqueeze(1).to(flat.dtype)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """input (N, C, H, W) read at grid (N, Ho, Wo, 2) -> (N, C, Ho, Wo), or
    (N, C, D, H, W) at (N, Do, Ho, Wo, 3); mode 'bilinear' (trilinear in
    3-d) or 'nearest' (halves to even), padding_mode 'zeros', 'border' or
    'reflection'."""
    if mode not in ("bilinear", "nearest"):
        raise NotImplementedError(f"grid_sample: mode {mode!r} is not supported "
                                  f"('bilinear', 'nearest')")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    dims = input.ndim - 2
    if dims not in (2, 3) or grid.ndim != input.ndim or grid.shape[-1] != dims or \
            grid.shape[0] != input.shape[0]:
        raise ValueError(f"grid_sample(): expected a 4-D input with a (N, H, W, 2) grid or a "
                         f"5-D input with a (N, D, H, W, 3) grid of the same N, got input "
                         f"{list(input.shape)} and grid {list(grid.shape)}")
    from .. import int64
    align = bool(align_corners)
    n, c = input.shape[:2]
    sizes = list(input.shape[2:])  # slowest first: (D,) H, W
    out = list(grid.shape[1:-1])
    flat = input.reshape(n, c, -1)
    g = grid.reshape(n, -1, dims)
    # grid's last dim is (x, y[, z]): x indexes W, the fastest dim
    coords = [_source(g[:, :, dims - 1 - k], sizes[k], padding_mode, align)
              for k in range(dims)]
    if mode == "nearest":
        y = _gather_corner(flat, [_F.round(t).to(int64) for t in coords], sizes,
                           None)
        return y.reshape(n, c, *out)
    lows = [_F.floor(t) for t in coords]
    fracs = [t - lo for t, lo in zip(coords, lows)]
    lows = [lo.to(int64) for lo in lows]
    y = None
    for corner in range(1 << dims):
        ups = [(corner >> (dims - 1 - k)) & 1 for k in range(dims)]
        weight = None
        for f, up in zip(fracs, ups):
            w = f if up else 1 - f
            weight = w if weight is None else weight * w
        values = _gather_corner(flat, [lo + up for lo, up in zip(lows, ups)], sizes, None)
        term = values * weight.unsqueeze(1)
        y = term if y is None else y + term
    return y.reshape(n, c, *out)
