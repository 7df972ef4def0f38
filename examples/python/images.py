"""Procedurally generated images for the vision examples: four classes of
3-channel pictures (stripes across, stripes down, a checkerboard, a disc)
with random phase, colour and noise."""
import numpy as np

CLASSES = ("stripes across", "stripes down", "checkerboard", "disc")


def batch(rng, n, size=32):
    y = rng.integers(0, len(CLASSES), n)
    ii, jj = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    images = np.empty((n, 3, size, size), np.float32)
    for k in range(n):
        period = rng.integers(3, 8)
        phase = rng.integers(0, period)
        if y[k] == 0:
            pattern = ((ii + phase) // period) % 2
        elif y[k] == 1:
            pattern = ((jj + phase) // period) % 2
        elif y[k] == 2:
            pattern = (((ii + phase) // period) + ((jj + phase) // period)) % 2
        else:
            ci, cj = rng.integers(size // 4, 3 * size // 4, 2)
            pattern = ((ii - ci) ** 2 + (jj - cj) ** 2 < (size // 4) ** 2).astype(int)
        colour = rng.uniform(0.5, 1.0, 3)[:, None, None]
        images[k] = colour * pattern + rng.normal(0, 0.2, (3, size, size))
    return images, y.astype(np.int64)
