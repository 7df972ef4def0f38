"""RNN, GRU and LSTM over a sequence length known only when the model runs
(a symbolic dim: Loom runs the step as the body of a loop), through
`loom run` as a user runs it:
  - ONNX's conformance cases of the three ops (Debian's libonnx-testdata)
    with X's sequence and batch dims made symbolic, against their
    expected outputs;
  - layers with what those cases lack (both directions, reverse,
    sequence_lens, initial states, peepholes, layout 1, GRU's
    linear_before_reset, other activations), over one or two sequence
    lengths, against the same model with a fixed length (the unrolled import, which
    the conformance suite checks).
  symbolic_rnn_test.py LOOM_CLI ONNX_TESTDATA"""
import glob
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cli_harness import check, finish, run_model

loom, data = sys.argv[1], sys.argv[2]


def symbolic(model, layout):
    """model with X's sequence dim "T" and its batch dim "B" (also the
    batch dim of the inputs that have one), outputs' dims left open."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    t_axis, b_axis = (1, 0) if layout else (0, 1)
    batch_axes = {"X": b_axis, "initial_h": 0 if layout else 1, "initial_c": 0 if layout else 1,
                  "sequence_lens": 0}
    node = m.graph.node[0]
    names = dict(zip(["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"],
                     node.input))
    role = {v: k for k, v in names.items() if v}
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        r = role.get(vi.name)
        if r == "X":
            dims[t_axis].dim_param = "T"
        if r in batch_axes:
            dims[batch_axes[r]].dim_param = "B"
    for vi in m.graph.output:
        for dim in vi.type.tensor_type.shape.dim:
            dim.dim_param = "?"
    return m


def close(got, want, what):
    if isinstance(got, str):
        check(False, f"{what}: {got}")
        return
    for name, w in want.items():
        g = got.get(name)
        ok = g is not None and g.shape == w.shape and np.allclose(g, w, rtol=1e-4, atol=1e-5)
        check(ok, f"{what}: output {name} " + ("missing" if g is None else
              f"shape {g.shape} vs {w.shape}" if g.shape != w.shape else
              f"max diff {np.abs(g - w).max():.3g}"))


# ---- ONNX's conformance cases, symbolic ----

cases = sorted(glob.glob(os.path.join(data, "node", "test_*rnn*")) +
               glob.glob(os.path.join(data, "node", "test_gru*")) +
               glob.glob(os.path.join(data, "node", "test_lstm*")))
check(len(cases) >= 10, f"{len(cases)} RNN, GRU and LSTM cases in {data}/node")
for case in cases:
    model = onnx.load(os.path.join(case, "model.onnx"))
    layout = next((a.i for a in model.graph.node[0].attribute if a.name == "layout"), 0)
    for ds in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        def read(kind):
            out = {}
            for k, f in enumerate(sorted(glob.glob(os.path.join(ds, kind + "_*.pb")))):
                t = onnx.TensorProto()
                with open(f, "rb") as fh:
                    t.ParseFromString(fh.read())
                vis = model.graph.input if kind == "input" else model.graph.output
                out[t.name or vis[k].name] = numpy_helper.to_array(t)
            return out
        close(run_model(loom, symbolic(model, layout), read("input")), read("output"),
              f"{os.path.basename(case)} with a symbolic sequence")


# ---- Layers against their unrolled import ----

rng = np.random.default_rng(7)
F = TensorProto.FLOAT


def layer(op, hidden, inp, dirs, extra_inputs=(), **attrs):
    """A model of one `op` node reading X, W, R, B and extra_inputs
    [(onnx input slot, name, array)], its weights constants."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    w = rng.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.4
    r = rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.4
    b = rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.2
    slots = ["X", "W", "R", "B", "", "", "", ""]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(b, "B")]
    feeds = []
    for slot, name, a in extra_inputs:
        slots[slot] = name
        if name == "P":
            inits.append(numpy_helper.from_array(a, name))
        else:
            feeds.append((name, a))
    while slots and not slots[-1]:
        slots.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, slots, outs, hidden_size=hidden, **attrs)
    return node, inits, feeds, outs


def model_of(node, inits, x_shape, feeds, outs):
    ins = [helper.make_tensor_value_info("X", F, list(x_shape))]
    for name, a in feeds:
        dt = TensorProto.INT32 if a.dtype == np.int32 else F
        ins.append(helper.make_tensor_value_info(name, dt, list(a.shape)))
    g = helper.make_graph([node], "layer", ins,
                          [helper.make_tensor_value_info(o, F, None) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 7
    return m


CONFIGS = [
    ("LSTM", {"direction": "bidirectional"}, ("h", "c")),
    ("LSTM", {"direction": "reverse"}, ("lens",)),
    ("LSTM", {"direction": "bidirectional", "layout": 1}, ("lens", "h", "c")),
    ("LSTM", {}, ("P",)),
    ("LSTM", {"input_forget": 1, "clip": 0.5}, ()),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, ("lens", "h")),
    ("GRU", {"direction": "reverse"}, ("h",)),
    ("GRU", {"layout": 1}, ("lens",)),
    ("RNN", {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}, ("lens", "h")),
    ("RNN", {"layout": 1, "direction": "reverse"}, ()),
]

for c, (op, attrs, extras) in enumerate(CONFIGS):
    hidden, inp, batch = 5, 3, 4
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    # every layer over 6 steps, the first three over 2 as well (each run
    # compiles its model: the test's time in CI)
    for steps in (6, 2) if c < 3 else (6,):
        extra = []
        if "lens" in extras:
            lens = rng.integers(0, steps + 1, batch).astype(np.int32)
            lens[0] = steps
            extra.append((4, "sequence_lens", lens))
        state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        if "h" in extras:
            extra.append((5, "initial_h", rng.standard_normal(state).astype(np.float32)))
        if "c" in extras:
            extra.append((6, "initial_c", rng.standard_normal(state).astype(np.float32)))
        if "P" in extras:
            extra.append((7, "P", rng.standard_normal((dirs, 3 * hidden)).astype(np.float32)))
        node, inits, feeds, outs = layer(op, hidden, inp, dirs, extra, **attrs)
        x_shape = (batch, steps, inp) if layout else (steps, batch, inp)
        x = rng.standard_normal(x_shape).astype(np.float32)
        fixed = model_of(node, inits, x_shape, feeds, outs)
        inputs = dict([("X", x)] + feeds)
        what = f"{op} {attrs} {extras} over {steps} steps"
        want = run_model(loom, fixed, inputs)
        if isinstance(want, str):
            check(False, f"{what}, fixed length: {want}")
            continue
        close(run_model(loom, symbolic(fixed, layout), inputs), want, what + ", symbolic")

finish("symbolic_rnn_test")
