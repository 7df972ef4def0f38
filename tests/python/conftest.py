"""Shared set-up of the Python tests: each test starts a fresh step and
PyTorch runs at one thread (its answers are the reference here)."""
import pytest

import loom

try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # the tests that need it skip
    torch = None


@pytest.fixture(autouse=True)
def fresh_step():
    loom.step()
    yield
    loom.step()
