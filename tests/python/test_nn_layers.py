"""The layers of loom.nn against torch.nn with the same weights (loaded
through state_dict): outputs, gradients, and BatchNorm's running
statistics."""
import numpy as np
import pytest

import loom
import loom.nn as nn

torch = pytest.importorskip("torch")
rng = np.random.default_rng(3)


def twin(make, *shapes, train=True, rtol=1e-4, atol=1e-5, out_index=None):
    """Builds the layer in both, copies PyTorch's weights into Loom's, runs
    both on the same inputs, checks outputs and input/weight gradients."""
    torch.manual_seed(0)
    theirs, mine = make(torch.nn), make(nn)
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    mine.train(train), theirs.train(train)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ins = [loom.tensor(x, requires_grad=True) for x in xs]
    tins = [torch.tensor(x, requires_grad=True) for x in xs]
    out = mine(*ins)
    tout = theirs(*tins)
    if out_index is not None:
        out, tout = out[out_index], tout[out_index]
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=rtol,
                               atol=atol)
    w = rng.standard_normal(tout.shape).astype(np.float32)
    (out * loom.from_numpy(w)).sum().backward()
    (tout * torch.from_numpy(w)).sum().backward()
    for (name, p), (_, tp) in zip(mine.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    for i, (x, tx) in enumerate(zip(ins, tins)):
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=f"input {i}")
    loom.step()
    return mine, theirs


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1), dict(padding="same"),
                                    dict(dilation=2, groups=2, bias=False)])
def test_conv2d(kwargs):
    twin(lambda m: m.Conv2d(4, 6, 3, **kwargs), (2, 4, 9, 9))


def test_conv_transpose2d():
    twin(lambda m: m.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
         (2, 4, 5, 5))


def test_batch_norm2d_training_updates_running_statistics():
    mine, theirs = twin(lambda m: m.BatchNorm2d(5), (4, 5, 3, 3))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(mine, name).numpy(),
                                   getattr(theirs, name).numpy(), rtol=1e-5, err_msg=name)
    twin(lambda m: m.BatchNorm2d(5), (4, 5, 3, 3), train=False)


@pytest.mark.parametrize("make", [
    lambda m: m.MaxPool2d(2), lambda m: m.MaxPool2d(3, stride=2, padding=1),
    lambda m: m.AvgPool2d(2), lambda m: m.AvgPool2d(3, stride=1, padding=1),
    lambda m: m.AdaptiveAvgPool2d(1), lambda m: m.AdaptiveAvgPool2d((2, 3)),
])
def test_pooling(make):
    twin(lambda m: m.Sequential(m.Conv2d(2, 2, 1), make(m)), (2, 2, 6, 6))


def test_multihead_attention():
    def make(m):
        class Wrap(m.Module):
            def __init__(self):
                super().__init__()
                self.attn = m.MultiheadAttention(8, 2)

            def forward(self, x):
                return self.attn(x, x, x, need_weights=False)[0]
        return Wrap()
    twin(make, (5, 3, 8))


def _mha_pair(embed, heads, batch_first, dropout=0.0):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(embed, heads, dropout, batch_first=batch_first)
    mine = nn.MultiheadAttention(embed, heads, dropout, batch_first=batch_first)
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return mine, theirs


@pytest.mark.parametrize("case", ["bool_mask", "float_mask", "padding", "both_3d",
                                  "per_head", "unbatched", "seq_first"])
def test_multihead_attention_masks_and_weights(case):
    """PyTorch's conventions: a bool attn_mask / key_padding_mask marks what
    may not be attended to, a float one is added; the weights come back
    averaged over heads unless average_attn_weights=False; unbatched
    (L, E) inputs; need_weights defaults to True."""
    n, lq, e, h = 2, 4, 8, 2
    mine, theirs = _mha_pair(e, h, batch_first=case != "seq_first")
    shape = (lq, e) if case == "unbatched" else (lq, n, e) if case == "seq_first" else (n, lq, e)
    x = rng.standard_normal(shape).astype(np.float32)
    causal = np.triu(np.ones((lq, lq), bool), 1)
    pad = np.zeros((n, lq), bool)
    pad[1, -1] = True
    kw = {"bool_mask": dict(attn_mask=causal),
          "float_mask": dict(attn_mask=rng.standard_normal((lq, lq)).astype(np.float32)),
          "padding": dict(key_padding_mask=pad),
          "both_3d": dict(attn_mask=np.repeat(causal[None], n * h, 0), key_padding_mask=pad),
          "per_head": dict(attn_mask=causal, average_attn_weights=False),
          "unbatched": dict(attn_mask=causal),
          "seq_first": dict(key_padding_mask=pad)}[case]

    def args(lib, conv):
        return {k: conv(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    xm = loom.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    out, w = mine(xm, xm, xm, **args(loom, loom.tensor))
    tout, tw = theirs(xt, xt, xt, **args(torch, torch.tensor))
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)
    g = rng.standard_normal(tout.shape).astype(np.float32)
    (out * loom.tensor(g)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-4)
    assert mine(xm, xm, xm, need_weights=False)[1] is None
    loom.step()


def test_scaled_dot_product_attention_arguments_in_torch_order():
    """(q, k, v, attn_mask, dropout_p, is_causal, scale), as PyTorch's
    (whose math, softmax(q k^T * scale + mask) v with a bool mask marking
    what may be attended to, is written out here in NumPy)."""
    q, k, v = (rng.standard_normal((2, 3, 5, 4)).astype(np.float32) for _ in range(3))
    allowed = np.tril(np.ones((5, 5), bool))
    for args, keep, scale in (((None, 0.0, True), allowed, 0.5), ((allowed,), allowed, 0.5),
                              ((None, 0.0, False, 0.3), np.ones((5, 5), bool), 0.3)):
        mine = nn.functional.scaled_dot_product_attention(
            *(loom.tensor(a) for a in (q, k, v)),
            *(loom.tensor(a) if isinstance(a, np.ndarray) else a for a in args))
        scores = np.where(keep, q @ k.swapaxes(-1, -2) * scale, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        want = p / p.sum(-1, keepdims=True) @ v
        np.testing.assert_allclose(mine.numpy(), want, rtol=1e-4, atol=1e-5)


def test_transformer_encoder_masks():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    mine_layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    mine_layer.load_state_dict({k: v.numpy() for k, v in layer.state_dict().items()})
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    causal = np.triu(np.ones((4, 4), bool), 1)
    pad = np.array([[False] * 4, [False, False, False, True]])
    with loom.no_grad():
        mine = mine_layer(loom.tensor(x), loom.tensor(causal), loom.tensor(pad))
    with torch.no_grad():
        theirs = layer(torch.tensor(x), torch.tensor(causal), torch.tensor(pad))
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-5)


def test_recurrent_cells_and_lstm():
    twin(lambda m: m.LSTMCell(4, 6), (3, 4), out_index=0)
    twin(lambda m: m.GRUCell(4, 6), (3, 4))
    twin(lambda m: m.LSTM(4, 6, num_layers=2), (5, 3, 4), out_index=0)
    twin(lambda m: m.LSTM(4, 6, batch_first=True), (3, 5, 4), out_index=0)


def test_module_to_float64():
    m = nn.Linear(3, 2).to(loom.float64)
    assert m.weight.dtype is loom.float64 and m.weight.requires_grad
    assert m(loom.ones(1, 3, dtype=loom.float64)).dtype is loom.float64


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder(norm_first):
    def make(m):
        layer = m.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                          norm_first=norm_first)
        return m.TransformerEncoder(layer, 2)
    twin(make, (2, 5, 16), rtol=2e-4, atol=2e-5)


def test_deepcopy_and_clone():
    import copy
    m = nn.Linear(3, 2)
    c = copy.deepcopy(m)
    assert c.weight is not m.weight and c.weight.requires_grad
    np.testing.assert_array_equal(c.weight.detach().numpy(), m.weight.detach().numpy())
    x = loom.ones(2, requires_grad=True)
    (x.clone() * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("kwargs", [dict(momentum=None), dict(affine=False),
                                    dict(track_running_stats=False),
                                    dict(momentum=None, affine=False)])
@pytest.mark.parametrize("dims", [1, 2])
def test_batch_norm_options_match_torch(kwargs, dims):
    """momentum=None (a cumulative average), affine=False (no weight and
    bias) and track_running_stats=False (no buffers; batch statistics in
    eval too): the same state_dict keys, outputs over three batches of
    different statistics, the buffers after them, then eval."""
    make = lambda m: getattr(m, f"BatchNorm{dims}d")(3, **kwargs)  # noqa: E731
    shape = (4, 3, 5) if dims == 1 else (4, 3, 2, 2)
    theirs, mine = make(torch.nn), make(nn)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    for step in range(3):
        x = rng.standard_normal(shape).astype(np.float32) * (step + 1) + step
        np.testing.assert_allclose(mine(loom.tensor(x)).detach().numpy(),
                                   theirs(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(mine.state_dict()[name].numpy(), value.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    mine.eval(), theirs.eval()
    np.testing.assert_allclose(mine(loom.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    mine.train(), theirs.train()
    layer_twin(make, shape)


def layer_twin(make, shape):
    """twin's check, with the input's gradient too (a layer may have no
    parameters)."""
    torch.manual_seed(0)
    theirs, mine = make(torch.nn), make(nn)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    a = rng.standard_normal(shape).astype(np.float32)
    x, tx = loom.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, tout = mine(x), theirs(tx)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    w = rng.standard_normal(tout.shape).astype(np.float32)
    (out * loom.from_numpy(w)).sum().backward()
    (tout * torch.from_numpy(w)).sum().backward()
    pairs = [("input", x, tx)] + [(n, p, tp) for (n, p), (_, tp) in
                                  zip(mine.named_parameters(), theirs.named_parameters())]
    for name, p, tp in pairs:
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    loom.step()


def test_batch_norm_cumulative_average_under_compile():
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    ours, theirs = nn.BatchNorm2d(3, momentum=None), torch.nn.BatchNorm2d(3, momentum=None)
    f = loom.compile(lambda a: ours(a))
    for step in range(3):
        f(loom.from_numpy(x * (step + 1)))
        theirs(torch.from_numpy(x * (step + 1)))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(ours, name).numpy(),
                                   getattr(theirs, name).numpy(), rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("make, shape", [
    (lambda m: m.PReLU(), (4, 3, 5)),
    (lambda m: m.PReLU(3, init=0.1), (4, 3, 5)),
    (lambda m: m.ReLU6(), (4, 10)),
    (lambda m: m.Mish(), (4, 10)),
    (lambda m: m.LogSigmoid(), (4, 10)),
    (lambda m: m.GLU(1), (4, 6, 3)),
    (lambda m: m.GroupNorm(2, 6), (4, 6, 3, 2)),
    (lambda m: m.GroupNorm(3, 6, eps=1e-3, affine=False), (4, 6, 5)),
    (lambda m: m.Conv1d(4, 6, 3), (2, 4, 9)),
    (lambda m: m.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2, bias=False),
     (2, 4, 11)),
    (lambda m: m.Conv1d(4, 6, 5, padding="same"), (2, 4, 9)),
    (lambda m: m.Sequential(m.Linear(6, 6), m.Unflatten(1, (2, 3))), (4, 6)),
], ids=["prelu", "prelu-channels", "relu6", "mish", "logsigmoid", "glu", "groupnorm",
        "groupnorm-no-affine", "conv1d", "conv1d-strided-groups", "conv1d-same", "unflatten"])
def test_added_layers_match_torch(make, shape):
    layer_twin(make, shape)


@pytest.mark.parametrize("nonlinearity, param", [
    ("linear", None), ("conv1d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
    ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None)])
def test_calculate_gain_is_torch_s(nonlinearity, param):
    assert nn.init.calculate_gain(nonlinearity, param) == \
        torch.nn.init.calculate_gain(nonlinearity, param)


@pytest.mark.parametrize("name, kwargs, std", [
    ("xavier_normal_", dict(gain=2.0), 2.0 * (2.0 / 700) ** 0.5),
    ("kaiming_normal_", dict(), (2.0 / 300) ** 0.5),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), (2.0 / 400) ** 0.5),
    ("kaiming_uniform_", dict(nonlinearity="linear"), (1.0 / 300) ** 0.5),
    # a and b are values, not multiples of std; N(0, 1) cut at +-2 has sd 0.8796
    ("trunc_normal_", dict(std=0.02, a=-0.04, b=0.04), 0.02 * 0.8796),
])
def test_initializers_draw_torch_s_spread(name, kwargs, std):
    """400 x 300 draws: mean and standard deviation within a few percent of
    the formula's (for torch's own draws too)."""
    for init, w in ((nn.init, loom.zeros(400, 300)), (torch.nn.init, torch.zeros(400, 300))):
        a = getattr(init, name)(w, **kwargs).numpy()
        assert abs(a.mean()) < 0.02 * std and abs(a.std() / std - 1) < 0.02, (init, a.std())


def test_trunc_normal_stays_within_its_bounds():
    w = nn.init.trunc_normal_(loom.zeros(200, 100), mean=1.0, std=2.0, a=-1.0, b=2.0)
    a = w.numpy()
    t = torch.nn.init.trunc_normal_(torch.zeros(200, 100), mean=1.0, std=2.0, a=-1.0, b=2.0)
    assert a.min() >= -1.0 and a.max() <= 2.0
    assert abs(a.mean() - t.mean().item()) < 0.03 and abs(a.std() - t.std().item()) < 0.03


def test_fans_of_a_vector_are_refused_as_torch():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_normal_(loom.zeros(5))


def test_module_options_as_torch():
    """LayerNorm without affine parameters, a buffer kept out of the state
    dict, load_state_dict's named result, half()."""
    x = np.random.default_rng(4).standard_normal((3, 5)).astype(np.float32)
    ln, tln = loom.nn.LayerNorm(5, elementwise_affine=False), torch.nn.LayerNorm(
        5, elementwise_affine=False)
    np.testing.assert_allclose(ln(loom.from_numpy(x)).numpy(),
                               tln(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert list(ln.state_dict()) == list(tln.state_dict()) == []
    assert ln.weight is None and len(list(ln.parameters())) == 0

    for lib in (loom, torch):
        m = lib.nn.Linear(2, 2)
        m.register_buffer("scratch", lib.zeros(3), persistent=False)
        m.register_buffer("kept", lib.ones(1))
        assert list(m.state_dict()) == ["weight", "bias", "kept"]
        assert len(list(m.buffers())) == 2
        result = m.load_state_dict({"weight": np.zeros((2, 2), np.float32) if lib is loom
                                    else torch.zeros(2, 2)}, strict=False)
        assert result.missing_keys == ["bias", "kept"] and result.unexpected_keys == []
    half = loom.nn.Linear(2, 2).half()
    assert half.weight.dtype == loom.float16 and half.bias.dtype == loom.float16


def test_a_parameter_takes_only_a_parameter_and_keeps_its_place():
    for lib in (loom, torch):
        lin = lib.nn.Linear(3, 2)
        with pytest.raises(TypeError, match="cannot assign .* as parameter 'weight'"):
            lin.weight = lib.zeros(2, 3)
        lin.weight = lib.nn.Parameter(lib.zeros(2, 3))
        assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]


def test_loss_argument_checks_as_pytorch():
    x, t = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32), [0, 1, 2]
    p = np.full((3, 5), 0.2, np.float32)
    cases = [
        (lambda L: L.nn.functional.cross_entropy(L.tensor(x), L.tensor(t), label_smoothing=1.5),
         RuntimeError),
        (lambda L: L.nn.functional.cross_entropy(L.tensor(x), L.tensor(t), weight=L.ones(3)),
         RuntimeError),
        (lambda L: L.nn.functional.nll_loss(L.tensor(x), L.tensor(t), weight=L.ones(3)),
         RuntimeError),
        (lambda L: L.nn.functional.cross_entropy(L.tensor(x), L.tensor(p), ignore_index=1),
         RuntimeError),
        (lambda L: L.nn.functional.binary_cross_entropy_with_logits(L.tensor(p), L.tensor(p[:1])),
         ValueError),
        (lambda L: L.nn.functional.binary_cross_entropy(L.tensor(p), L.tensor(p[:1])), ValueError),
        (lambda L: L.nn.functional.gelu(L.tensor(x), approximate="Tanh"), RuntimeError),
    ]
    for fn, exc in cases:
        with pytest.raises(exc):
            fn(torch)
        with pytest.raises(exc):
            fn(loom)
    # a negative smoothing is not applied, by PyTorch 1.13
    mine = loom.nn.functional.cross_entropy(loom.tensor(x), loom.tensor(t), label_smoothing=-0.2)
    theirs = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t),
                                               label_smoothing=-0.2)
    assert abs(float(mine) - float(theirs)) < 1e-5
    mse = loom.nn.functional.mse_loss(loom.tensor(x), loom.tensor(p), size_average=False)
    assert abs(float(mse) - float(((x - p) ** 2).sum())) < 1e-3


def test_loss_weights_are_buffers_of_the_state_dict():
    for lib in (loom, torch):
        crit = lib.nn.CrossEntropyLoss(weight=lib.ones(4))
        bce = lib.nn.BCEWithLogitsLoss(pos_weight=lib.ones(4))
        assert list(crit.state_dict()) == ["weight"] and list(bce.state_dict()) == ["pos_weight"]


@pytest.mark.parametrize("name", ["ReLU", "LeakyReLU", "ELU", "Hardtanh", "ReLU6", "SiLU",
                                  "Hardswish"])
def test_inplace_activations_write_their_input(name):
    data = [-1.5, -0.5, 0.5, 2.0]
    mine, theirs = loom.tensor(data), torch.tensor(data)
    getattr(loom.nn, name)(inplace=True)(mine)
    getattr(torch.nn, name)(inplace=True)(theirs)
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6)


def test_conv_transpose_output_size_and_factory_arguments():
    w = np.random.default_rng(1).standard_normal((2, 3, 3, 3)).astype(np.float32)
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 4)).astype(np.float32)
    outs = []
    for lib in (loom, torch):
        m = lib.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, bias=False,
                                   padding_mode="zeros", device="cpu", dtype=lib.float32)
        m.load_state_dict({"weight": lib.tensor(w)})
        outs.append(m(lib.tensor(x), output_size=[8, 8]).detach().numpy())
        with pytest.raises(ValueError):
            m(lib.tensor(x), output_size=[10, 10])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    assert outs[0].shape == (1, 3, 8, 8)
    loom.nn.Conv2d(2, 3, 3, device="cpu", dtype=loom.float64)(loom.zeros(1, 2, 4, 4,
                                                                         dtype=loom.float64))


@pytest.mark.parametrize("make,shapes", [
    (lambda m: m.ConstantPad1d((1, 2), 3.5), [(2, 3, 4)]),
    (lambda m: m.ConstantPad3d((1, 0, 2, 1, 0, 1), 0.5), [(1, 2, 3, 4, 5)]),
    (lambda m: m.ZeroPad2d((1, 2, 0, 1)), [(2, 3, 4, 5)]),
    (lambda m: m.ReflectionPad1d(2), [(2, 3, 5)]),
    (lambda m: m.ReflectionPad2d((1, 2, 2, 1)), [(2, 3, 4, 5)]),
    (lambda m: m.ReplicationPad2d(2), [(2, 3, 4, 5)]),
    (lambda m: m.ReplicationPad3d(1), [(1, 2, 3, 4, 5)]),
    (lambda m: m.Threshold(0.1, 20.0), [(3, 4)]),
    (lambda m: m.Hardshrink(0.6), [(3, 4)]),
    (lambda m: m.Softshrink(0.3), [(3, 4)]),
    (lambda m: m.Softmax2d(), [(2, 3, 4, 5)]),
    (lambda m: m.CosineSimilarity(1), [(3, 4), (3, 4)]),
    (lambda m: m.PairwiseDistance(), [(3, 4), (3, 4)]),
    (lambda m: m.InstanceNorm1d(3), [(2, 3, 6)]),
    (lambda m: m.InstanceNorm2d(3, affine=True), [(2, 3, 4, 5)]),
    (lambda m: m.InstanceNorm2d(3), [(3, 4, 5)]),
    (lambda m: m.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), [(2, 3, 7)]),
    (lambda m: m.ConvTranspose1d(4, 6, 2, groups=2, dilation=2), [(2, 4, 5)]),
])
def test_padding_shrinks_instance_norm_and_conv_transpose1d(make, shapes):
    twin(make, *shapes)


def test_instance_norm_running_statistics_and_factory_arguments():
    mine, theirs = twin(lambda m: m.InstanceNorm2d(3, affine=True, track_running_stats=True),
                        (2, 3, 4, 5))
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(mine, name).numpy(), getattr(theirs, name).numpy(),
                                   rtol=1e-5, err_msg=name)
    twin(lambda m: m.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 4, 5),
         train=False)
    for make in (lambda m, **k: m.LayerNorm(3, **k), lambda m, **k: m.GroupNorm(1, 3, **k),
                 lambda m, **k: m.Embedding(5, 3, **k), lambda m, **k: m.PReLU(**k),
                 lambda m, **k: m.Bilinear(3, 3, 2, **k),
                 lambda m, **k: m.MultiheadAttention(4, 2, **k),
                 lambda m, **k: m.TransformerEncoderLayer(4, 2, 8, **k),
                 lambda m, **k: m.InstanceNorm1d(3, affine=True, **k)):
        layer = make(nn, device="cpu", dtype=loom.float64)
        assert {p.dtype for p in layer.parameters()} == {loom.float64}
        with pytest.raises(RuntimeError):
            make(nn, device="cuda")


def test_grouped_transpose_convolution_over_symbolic_channels():
    # the channel dim symbolic: it takes the weight's 4, which groups divide
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    for n in (1, 3):
        x = rng.standard_normal((n, 4, 5, 5)).astype(np.float32)
        mine = nn.functional.conv_transpose2d(
            loom.dynamic(loom.dynamic(loom.from_numpy(x), 0), 1), loom.from_numpy(w), groups=2)
        theirs = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w),
                                                      groups=2)
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)


def test_functional_in_place_activations_write_their_input():
    for m in (loom, torch):
        x = m.tensor([-1.0, 0.5, 2.0])
        assert m.nn.functional.relu_(x) is x and x.tolist() == [0.0, 0.5, 2.0]
        assert m.nn.functional.threshold_(x, 1.0, -3.0) is x and x.tolist() == [-3.0, -3.0, 2.0]


@pytest.mark.parametrize("make,shapes", [
    (lambda m: m.TransformerDecoderLayer(8, 2, 16, dropout=0.0), [(5, 2, 8), (6, 2, 8)]),
    (lambda m: m.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                         norm_first=True, activation="gelu"),
     [(2, 5, 8), (2, 6, 8)]),
    (lambda m: m.TransformerDecoder(m.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2,
                                    m.LayerNorm(8)), [(5, 2, 8), (6, 2, 8)]),
    (lambda m: m.Transformer(8, 2, 2, 2, 16, dropout=0.0), [(6, 2, 8), (5, 2, 8)]),
    (lambda m: m.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True, norm_first=True),
     [(2, 6, 8), (2, 5, 8)]),
])
def test_transformer_decoder_and_whole_model(make, shapes):
    twin(make, *shapes, rtol=1e-4, atol=1e-5)


def test_transformer_masks_as_torch():
    mask = {m: m.nn.Transformer.generate_square_subsequent_mask(5) for m in (loom, torch)}
    np.testing.assert_array_equal(mask[loom].numpy(), mask[torch].numpy())
    pad = np.array([[False] * 4 + [True] * 2, [False] * 6])
    out = {}
    for m in (torch, loom):
        m.manual_seed(0)
    theirs = torch.nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
    mine = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    src = rng.standard_normal((2, 6, 8)).astype(np.float32)
    tgt = rng.standard_normal((2, 5, 8)).astype(np.float32)
    for m, model in ((torch, theirs), (loom, mine)):
        out[m] = model(m.tensor(src), m.tensor(tgt), tgt_mask=mask[m],
                       src_key_padding_mask=m.tensor(pad),
                       memory_key_padding_mask=m.tensor(pad)).detach().numpy()
    np.testing.assert_allclose(out[loom], out[torch], rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError):
        mine(loom.tensor(src), loom.tensor(tgt[:1]))


@pytest.mark.parametrize("case", [
    dict(input=[[1, 2, 3], [4, 5, 0]], mode="sum"),
    dict(input=[[1, 2, 3], [4, 5, 0]], mode="max"),
    dict(input=[1, 2, 4, 5, 4, 3, 2, 9], offsets=[0, 2, 2, 5], mode="mean"),
    dict(input=[1, 2, 4, 5, 4, 3, 2, 9], offsets=[0, 2, 2, 5], mode="max"),
    dict(input=[1, 2, 4, 5, 4, 3, 2, 9], offsets=[0, 2, 2, 5, 8], mode="sum",
         include_last_offset=True),
    dict(input=[1, 2, 4, 5, 4, 3, 2, 9], offsets=[0, 3], mode="sum", weighted=True),
    dict(input=[1, 2, 4, 2, 2, 3, 2, 9], offsets=[0, 3, 6], mode="mean", padding_idx=2),
    dict(input=[1, 2, 4, 2, 2, 3, 2, 9], offsets=[0, 3, 6], mode="max", padding_idx=2),
])
def test_embedding_bag_as_torch(case):
    # empty bags give zeros; padding_idx's entries count for nothing
    weight = rng.standard_normal((10, 4)).astype(np.float32)
    got = {}
    for m in (torch, loom):
        w = m.tensor(weight, requires_grad=True)
        kw = dict(mode=case["mode"], include_last_offset=case.get("include_last_offset", False),
                  padding_idx=case.get("padding_idx"))
        if "offsets" in case:
            kw["offsets"] = m.tensor(case["offsets"])
        if case.get("weighted"):
            kw["per_sample_weights"] = m.tensor(np.linspace(0.5, 2, 8).astype(np.float32))
        y = m.nn.functional.embedding_bag(m.tensor(case["input"]), w, **kw)
        (y * m.tensor(np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape)))).sum() \
            .backward()
        got[m] = (y.detach().numpy(), w.grad.numpy())
    for mine, theirs in zip(got[loom], got[torch]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_embedding_bag_module_and_bad_arguments():
    torch.manual_seed(0)
    theirs = torch.nn.EmbeddingBag(10, 3, mode="max")
    mine = nn.EmbeddingBag(10, 3, mode="max")
    mine.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = [[1, 2], [3, 9]]
    np.testing.assert_allclose(mine(loom.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy())
    for bad in ("F.embedding_bag(m.tensor([[1, 2]]), w, offsets=m.tensor([0]))",
                "F.embedding_bag(m.tensor([1, 2]), w)",
                "F.embedding_bag(m.tensor([1, 2]), w, m.tensor([0]), mode='mean', "
                "per_sample_weights=m.ones(2))"):
        for m in (loom, torch):
            F, w = m.nn.functional, m.ones(10, 3)
            with pytest.raises((ValueError, RuntimeError, NotImplementedError)):
                eval(bad)
