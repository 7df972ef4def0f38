"""loom.nn's RNN, LSTM, GRU (and cells, packed sequences) against torch.nn
with the same weights, copied through NumPy: outputs, final states, and
the gradients of a loss w.r.t. the input, the initial states and every
parameter; and torch's errors for wrong inputs."""
import math
import warnings

import numpy as np
import pytest

import loom
import loom.nn as nn
from loom.nn.utils import rnn as lrnn

torch = pytest.importorskip("torch")
trnn = torch.nn.utils.rnn
rng = np.random.default_rng(7)
I, H = 4, 5


def twins(kind, *args, **kwargs):
    """The layer in torch and in loom, loom holding torch's weights."""
    torch.manual_seed(0)
    theirs, mine = getattr(torch.nn, kind)(*args, **kwargs), getattr(nn, kind)(*args, **kwargs)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return mine, theirs


def leaf(a):
    """The same values as a loom and a torch leaf requiring grad."""
    return loom.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(mine, theirs, what, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=rtol,
                               atol=atol, err_msg=what)


def flat(result):
    """(output, state or (h, c)) as a list of tensors."""
    out, state = result
    out = out.data if isinstance(out, (lrnn.PackedSequence, trnn.PackedSequence)) else out
    return [out] + (list(state) if isinstance(state, tuple) else [state])


def check_grads(mine, theirs, results, leaves):
    """A loss of every result: the gradients of the leaves and parameters."""
    loss_m, loss_t = 0, 0
    for m, t in zip(*results):
        w = randn(*t.shape)
        loss_m = loss_m + (m * loom.from_numpy(w)).sum()
        loss_t = loss_t + (t * torch.from_numpy(w)).sum()
    loss_m.backward()
    loss_t.backward()
    for k, (m, t) in enumerate(leaves):
        close(m.grad, t.grad, f"grad of input {k}")
    for (name, p), (_, tp) in zip(mine.named_parameters(), theirs.named_parameters()):
        close(p.grad, tp.grad, f"grad of {name}")
    loom.step()


def run_both(mine, theirs, x, hx=None):
    """Runs both on x (and hx: None, an array or a pair of arrays); checks
    outputs, final states and gradients."""
    leaves = [leaf(x)]
    if hx is not None:
        leaves += [leaf(h) for h in (hx if isinstance(hx, tuple) else (hx,))]
    args_m, args_t = [leaves[0][0]], [leaves[0][1]]
    if hx is not None:
        hs_m, hs_t = [m for m, _ in leaves[1:]], [t for _, t in leaves[1:]]
        args_m.append(tuple(hs_m) if isinstance(hx, tuple) else hs_m[0])
        args_t.append(tuple(hs_t) if isinstance(hx, tuple) else hs_t[0])
    got, want = flat(mine(*args_m)), flat(theirs(*args_t))
    for k, (m, t) in enumerate(zip(got, want)):
        assert tuple(m.shape) == tuple(t.shape), k
        close(m, t, ["output", "h_n", "c_n"][k])
    check_grads(mine, theirs, (got, want), leaves)


KINDS = [("LSTM", {}), ("GRU", {}), ("RNN", {}), ("RNN", {"nonlinearity": "relu"})]
OPTIONS = [dict(), dict(num_layers=2), dict(bidirectional=True),
           dict(num_layers=2, bidirectional=True, batch_first=True), dict(bias=False)]


@pytest.mark.parametrize("kind,extra", KINDS)
@pytest.mark.parametrize("options", OPTIONS)
def test_layers_match_torch(kind, extra, options):
    mine, theirs = twins(kind, I, H, **extra, **options)
    shape = (3, 6, I) if options.get("batch_first") else (6, 3, I)
    run_both(mine, theirs, randn(*shape))


@pytest.mark.parametrize("kind,extra", KINDS)
def test_initial_state(kind, extra):
    mine, theirs = twins(kind, I, H, num_layers=2, bidirectional=True, **extra)
    h0 = randn(4, 3, H)
    run_both(mine, theirs, randn(6, 3, I), (h0, randn(4, 3, H)) if kind == "LSTM" else h0)


@pytest.mark.parametrize("options", [dict(), dict(num_layers=2, bidirectional=True),
                                     dict(batch_first=True, bias=False)])
def test_lstm_projection(options):
    mine, theirs = twins("LSTM", I, H, proj_size=3, **options)
    assert mine.weight_hr_l0.shape == (3, H)
    d = 2 if options.get("bidirectional") else 1
    n = d * options.get("num_layers", 1)
    x = randn(3, 6, I) if options.get("batch_first") else randn(6, 3, I)
    run_both(mine, theirs, x, (randn(n, 3, 3), randn(n, 3, H)))


@pytest.mark.parametrize("kind,extra", KINDS)
@pytest.mark.parametrize("with_h0", [False, True])
def test_unbatched_input(kind, extra, with_h0):
    mine, theirs = twins(kind, I, H, num_layers=2, bidirectional=True, batch_first=True,
                         **extra)
    hx = None
    if with_h0:
        hx = (randn(4, H), randn(4, H)) if kind == "LSTM" else randn(4, H)
    run_both(mine, theirs, randn(6, I), hx)


def packed_both(x, lengths, enforce_sorted, batch_first=False):
    (xm, xt) = leaf(x)
    pm = lrnn.pack_padded_sequence(xm, lengths, batch_first, enforce_sorted)
    pt = trnn.pack_padded_sequence(xt, torch.tensor(lengths), batch_first, enforce_sorted)
    return (xm, xt), pm, pt


def check_packed(pm, pt):
    close(pm.data, pt.data, "data")
    np.testing.assert_array_equal(pm.batch_sizes.numpy(), pt.batch_sizes.numpy())
    for name in ("sorted_indices", "unsorted_indices"):
        m, t = getattr(pm, name), getattr(pt, name)
        assert (m is None) == (t is None), name
        if m is not None:
            np.testing.assert_array_equal(m.numpy(), t.numpy(), err_msg=name)


@pytest.mark.parametrize("kind,extra", KINDS)
@pytest.mark.parametrize("lengths,enforce_sorted", [([6, 4, 4, 1], True),
                                                    ([3, 6, 1, 5], False)])
def test_packed_sequences(kind, extra, lengths, enforce_sorted):
    mine, theirs = twins(kind, I, H, num_layers=2, bidirectional=True, **extra)
    x = randn(6, 4, I)
    h0 = randn(4, 4, H)
    hx = (h0, randn(4, 4, H)) if kind == "LSTM" else h0
    hm = tuple(leaf(h) for h in (hx if kind == "LSTM" else (hx,)))
    (xm, xt), pm, pt = packed_both(x, lengths, enforce_sorted)
    check_packed(pm, pt)
    state_m = tuple(m for m, _ in hm) if kind == "LSTM" else hm[0][0]
    state_t = tuple(t for _, t in hm) if kind == "LSTM" else hm[0][1]
    out_m, out_t = mine(pm, state_m), theirs(pt, state_t)
    check_packed(out_m[0], out_t[0])
    got, want = flat(out_m), flat(out_t)
    for k, (m, t) in enumerate(zip(got[1:], want[1:])):
        close(m, t, f"final state {k}")
    pad_m, len_m = lrnn.pad_packed_sequence(out_m[0], batch_first=True, padding_value=-1.0)
    pad_t, len_t = trnn.pad_packed_sequence(out_t[0], batch_first=True, padding_value=-1.0)
    close(pad_m, pad_t, "padded output")
    np.testing.assert_array_equal(len_m.numpy(), len_t.numpy())
    check_grads(mine, theirs, (got + [pad_m], want + [pad_t]), [(xm, xt)] + list(hm))


def test_lstm_projection_packed():
    mine, theirs = twins("LSTM", I, H, proj_size=2, bidirectional=True)
    (xm, xt), pm, pt = packed_both(randn(5, 3, I), [2, 5, 3], False)
    got, want = flat(mine(pm)), flat(theirs(pt))
    for k, (m, t) in enumerate(zip(got, want)):
        close(m, t, str(k))
    check_grads(mine, theirs, (got, want), [(xm, xt)])


def test_packing_utilities():
    x = randn(3, 5, 2)  # batch_first
    (xm, xt), pm, pt = packed_both(x, [2, 5, 4], False, batch_first=True)
    check_packed(pm, pt)
    for kwargs in (dict(), dict(batch_first=True, total_length=7, padding_value=3.0)):
        (m, lm), (t, lt) = lrnn.pad_packed_sequence(pm, **kwargs), \
            trnn.pad_packed_sequence(pt, **kwargs)
        close(m, t, str(kwargs))
        np.testing.assert_array_equal(lm.numpy(), lt.numpy())
    seqs = [randn(n, 2) for n in (3, 5, 1)]
    for batch_first in (False, True):
        close(lrnn.pad_sequence([loom.tensor(s) for s in seqs], batch_first, 9.0),
              trnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first, 9.0), "pad")
    check_packed(lrnn.pack_sequence([loom.tensor(s) for s in seqs], enforce_sorted=False),
                 trnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False))
    back = lrnn.unpack_sequence(lrnn.pack_sequence([loom.tensor(s) for s in seqs], False))
    for m, s in zip(back, seqs):
        np.testing.assert_array_equal(m.numpy(), s)


@pytest.mark.parametrize("kind,extra", [("LSTMCell", {}), ("GRUCell", {}), ("RNNCell", {}),
                                        ("RNNCell", {"nonlinearity": "relu"}),
                                        ("GRUCell", {"bias": False})])
@pytest.mark.parametrize("batched", [True, False])
def test_cells(kind, extra, batched):
    mine, theirs = twins(kind, I, H, **extra)
    x = randn(3, I) if batched else randn(I)
    hs = [randn(*x.shape[:-1], H) for _ in range(2 if kind == "LSTMCell" else 1)]
    leaves = [leaf(x)] + [leaf(h) for h in hs]
    state_m = tuple(m for m, _ in leaves[1:]) if kind == "LSTMCell" else leaves[1][0]
    state_t = tuple(t for _, t in leaves[1:]) if kind == "LSTMCell" else leaves[1][1]
    got, want = mine(leaves[0][0], state_m), theirs(leaves[0][1], state_t)
    got, want = (list(got), list(want)) if kind == "LSTMCell" else ([got], [want])
    for m, t in zip(got, want):
        close(m, t, kind)
    check_grads(mine, theirs, (got, want), leaves)
    got, want = mine(leaves[0][0]), theirs(leaves[0][1])  # no hx: zeros
    for m, t in zip(*((got, want) if kind == "LSTMCell" else ((got,), (want,)))):
        close(m, t, "no hx")


def test_initialization_as_torch():
    for layer in (nn.GRU(3, 16, num_layers=2, bidirectional=True), nn.LSTM(3, 16, proj_size=4),
                  nn.RNNCell(3, 16)):
        for name, p in layer.named_parameters():
            a = p.detach().numpy()
            assert np.abs(a).max() <= 0.25 and np.abs(a).max() > 0.2, name
    assert repr(nn.LSTM(4, 6, 2, batch_first=True, bidirectional=True)) == \
        repr(torch.nn.LSTM(4, 6, 2, batch_first=True, bidirectional=True))


def test_dropout_between_layers():
    mine, theirs = twins("GRU", I, H, num_layers=3, dropout=0.5)
    mine.eval(), theirs.eval()
    x = randn(6, 3, I)
    close(mine(loom.tensor(x))[0], theirs(torch.tensor(x))[0], "eval: no dropout")
    mine.train()
    trained = mine(loom.tensor(x))[0].detach().numpy()
    assert not np.allclose(trained, theirs(torch.tensor(x))[0].detach().numpy())
    with pytest.warns(UserWarning, match="dropout"):
        nn.RNN(I, H, dropout=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.LSTM(I, H, num_layers=2, dropout=0.3)


def raises_as_torch(make_mine, make_theirs, match):
    """Both raise a ValueError or RuntimeError, Loom's message matching."""
    with pytest.raises((ValueError, RuntimeError)):
        make_theirs()
    with pytest.raises((ValueError, RuntimeError), match=match):
        make_mine()


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_errors_of_wrong_inputs(kind):
    mine, theirs = twins(kind, I, H, num_layers=2)

    def call(lib, model, x, h=None):
        x = lib.tensor(x)
        if h is None:
            return lambda: model(x)
        h = lib.tensor(h)
        return lambda: model(x, (h, h) if kind == "LSTM" else h)

    def both(x, h, match):
        raises_as_torch(call(loom, mine, x, h), call(torch, theirs, x, h), match)

    both(randn(6, 3, I + 1), None, "input_size. Expected 4, got 5")
    both(randn(6, 3, I), randn(2, 4, H), r"Expected hidden(\[0\])? size \(2, 3, 5\), "
                                         r"got \[2, 4, 5\]")
    both(randn(6, 3, I), randn(2, 3, H + 1), "Expected hidden")
    both(randn(6, 3, I), randn(3, H), "hx should also be 3-D")
    both(randn(6, I), randn(2, 1, H), "hx should also be 2-D")
    with pytest.raises(ValueError, match="2-D or 3-D"):
        mine(loom.tensor(randn(2, 6, 3, I)))
    packed = lrnn.pack_padded_sequence(loom.tensor(randn(6, 3, I + 1)), [6, 3, 2])
    with pytest.raises(RuntimeError, match="input_size"):
        mine(packed)


def test_errors_of_packing_and_options():
    x = randn(5, 3, 2)
    for lengths, match in (([2, 5, 3], "sorted in decreasing order"), ([5, 3, 0], "> 0|<= 0"),
                           ([5, 3], "len\\(lengths\\)")):
        raises_as_torch(lambda: lrnn.pack_padded_sequence(loom.tensor(x), lengths),
                        lambda: trnn.pack_padded_sequence(torch.tensor(x), lengths), match)
    with pytest.raises(ValueError, match="exceeds"):
        lrnn.pack_padded_sequence(loom.tensor(x), [6, 3, 2])
    pm = lrnn.pack_padded_sequence(loom.tensor(x), [5, 3, 2])
    pt = trnn.pack_padded_sequence(torch.tensor(x), [5, 3, 2])
    raises_as_torch(lambda: lrnn.pad_packed_sequence(pm, total_length=4),
                    lambda: trnn.pad_packed_sequence(pt, total_length=4), "total_length")
    for kind, kwargs, match in (("GRU", dict(proj_size=2), "proj_size argument"),
                                ("LSTM", dict(proj_size=5), "smaller than hidden_size"),
                                ("LSTM", dict(proj_size=-1), "positive integer"),
                                ("RNN", dict(nonlinearity="gelu"), "nonlinearity"),
                                ("GRU", dict(dropout=1.5), "dropout should be")):
        raises_as_torch(lambda: getattr(nn, kind)(I, H, **kwargs),
                        lambda: getattr(torch.nn, kind)(I, H, **kwargs), match)


def test_cell_errors():
    cell = nn.LSTMCell(I, H)
    with pytest.raises(RuntimeError, match="inconsistent input_size"):
        cell(loom.tensor(randn(3, I + 1)))
    h = loom.tensor(randn(2, H))
    with pytest.raises(RuntimeError, match="batch size"):
        cell(loom.tensor(randn(3, I)), (h, h))
    with pytest.raises(RuntimeError, match="inconsistent hidden_size"):
        nn.GRUCell(I, H)(loom.tensor(randn(3, I)), loom.tensor(randn(3, H + 1)))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        nn.RNNCell(I, H)(loom.tensor(randn(2, 3, I)))


def test_module_state_round_trip():
    mine, theirs = twins("LSTM", I, H, num_layers=2, bidirectional=True, proj_size=2)
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert len(mine.all_weights) == 4 and all(len(w) == 5 for w in mine.all_weights)
    mine.flatten_parameters()
    bound = 1 / math.sqrt(H)
    assert all(np.abs(p.detach().numpy()).max() <= bound for p in mine.parameters())


def test_long_sequences_and_large_batches():
    """More steps and sequences than one concat or split op takes."""
    mine, theirs = twins("GRU", 2, 3, bidirectional=True)
    run_both(mine, theirs, randn(70, 2, 2))
    seqs = [randn(n % 5 + 1, 2) for n in range(70)]
    close(lrnn.pad_sequence([loom.tensor(s) for s in seqs], True),
          trnn.pad_sequence([torch.tensor(s) for s in seqs], True), "pad 70")
