"""Memory shared with NumPy while ops are lazy: what a recorded op reads is
the value its input had when the op was recorded, as eager PyTorch's,
whoever writes the memory afterwards (the NumPy array from_numpy wraps, a
view from .numpy()); the tensor itself shows the write."""
import numpy as np
import pytest

import loom

torch = pytest.importorskip("torch")


def write_after_from_numpy(m):
    a = np.ones(3, np.float32)
    y = m.from_numpy(a) * 2
    a[:] = 5
    return y.tolist()


def write_through_numpy_after_use(m):
    x = m.tensor([1.0, 1.0, 1.0])
    y = x * 2
    x.numpy()[0] = 100
    return y.tolist() + x.tolist()


def write_through_an_earlier_view(m):
    x = m.tensor([1.0, 1.0, 1.0])
    a = x.numpy()
    y = x * 2
    a[1] = 7
    return y.tolist() + x.tolist()


def eval_loop_refilling_one_buffer(m):
    buf = np.zeros((2, 2), np.float32)
    outs = []
    with m.no_grad():
        for i in range(3):
            buf[:] = i
            outs.append(m.from_numpy(buf) * 3)
    return [o.tolist() for o in outs]


def uses_before_and_after_a_write(m):
    x = m.tensor([1.0, 2.0])
    y = x + 1
    x.numpy()[0] = 50
    z = x * 2
    return y.tolist() + z.tolist()


@pytest.mark.parametrize("program", [write_after_from_numpy, write_through_numpy_after_use,
                                     write_through_an_earlier_view,
                                     eval_loop_refilling_one_buffer,
                                     uses_before_and_after_a_write])
def test_writes_to_shared_memory_as_torch(program):
    assert program(loom) == program(torch)


def test_gradients_of_an_input_refilled_in_place():
    """The backward reads the input as the forward saw it: d/dw sum(a w^2)
    = 2 a w with a's values at the forward (PyTorch's backward here reads
    the zeroed array through the tensor it saved, giving a w)."""
    w0 = np.array([1.0, 2.0, 3.0], np.float32)
    a0 = np.array([1.0, -1.0, 2.0], np.float32)
    w = loom.tensor(w0, requires_grad=True)
    a = a0.copy()
    loss = (loom.from_numpy(a) * w * w).sum()
    a[:] = 0
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * a0 * w0)
