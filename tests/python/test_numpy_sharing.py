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


def reads_recorded_after_a_refill(m):
    a = np.zeros(3, np.float32)
    t = m.from_numpy(a)
    y1 = t + 1
    a[:] = 5
    y2 = t + 1
    return y1.tolist() + y2.tolist()


def lazy_loop_over_one_wrapped_buffer(m):
    """One tensor over a batch array refilled every iteration, the results
    kept lazy (the step never ends); the array strided, as a column slice."""
    base = np.zeros((4, 6), np.float32)
    buf = base[:, ::2]
    t = m.from_numpy(buf)
    outs = []
    for i in range(4):
        buf[:] = i
        buf[0, 1] = -i
        outs.append((t * 2).sum())
    return [float(o) for o in outs]


def write_through_dlpack_of_a_computed_tensor(m):
    t = m.tensor([1.0, 0.0, 3.0]) * 1
    torch.from_dlpack(t)[0] = 5.0
    return (t * 1).tolist() + t.double().tolist()


@pytest.mark.parametrize("program", [write_after_from_numpy, write_through_numpy_after_use,
                                     write_through_an_earlier_view,
                                     eval_loop_refilling_one_buffer,
                                     uses_before_and_after_a_write,
                                     reads_recorded_after_a_refill,
                                     lazy_loop_over_one_wrapped_buffer,
                                     write_through_dlpack_of_a_computed_tensor])
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


def test_a_wrapped_input_that_becomes_a_parameter_reads_its_memory():
    """A from_numpy tensor used as a step's input, then made to require
    grad: later steps read it as a parameter (its memory, refilled too)."""
    a = np.ones(3, np.float32)
    x = loom.from_numpy(a)
    assert float((x * 2).sum()) == 6.0
    loom.step()
    x.requires_grad_(True)
    (x * 3).sum().backward()
    a[:] = 2
    (x * x).sum().backward()
    assert x.grad.tolist() == [7.0, 7.0, 7.0]
