"""Forms other exporters than PyTorch's write (tf2onnx, Keras, skl2onnx),
through `loom run` as a user runs it, against values computed here with
NumPy or by hand:
  - Pow of an integer base by a float exponent (raised in float, then
    truncated: ONNX Runtime's result);
  - Cast to the narrow integer types Loom holds widened (uint8, int16,
    uint16 in i32; uint32 in i64), wrapping as a C cast does;
  - Conv and MaxPool with auto_pad SAME at stride 1 over symbolic height
    and width (Keras' Input(shape=(None, None, 3))), at two sizes;
  - Resize with tf_half_pixel_for_nn, which keeps the axes it does not
    resize (batch, channels) as they are;
  - Resize by f32 scales as PyTorch exports interpolate(scale_factor),
    against PyTorch's interpolate;
  - Resize whose sizes come from Shape(x) with a symbolic batch, against
    the same model with a fixed batch;
  - GridSample over a symbolic batch and grid, against the model with
    fixed shapes;
  - two inputs whose batch dims tf2onnx names apart (unk__10, unk__11)
    or skl2onnx leaves unnamed, joined by a Concat (one symbol per
    position after the first try fails; sizes that differ fail the run);
  - DepthToSpace and SpaceToDepth over a symbolic batch, GatherElements
    and GatherND (tf.boolean_mask's NonZero, Transpose, GatherND) over
    symbolic dims, at two sizes;
  - sizes as data over a symbolic T: arange(1, T + 1), x * (5 - T) where
    it is negative, pe[2:T]; slices that start at a symbolic dim
    (x[:, T-2:], pe[P:P+T], pe[T:9:2]); max and average pools with
    ceil_mode over a symbolic height and width; an average pool counting
    its pads with ceil_mode, whose last window divides by its part inside
    the padded input;
  - Pad's wrap mode, against NumPy's;
  - a Loop whose body's condition is Cast of an outer True (PyTorch's
    form), with a Slice by the iteration number;
  - a name two nodes define: refused at load; an op builder's error
    names the node; a bfloat16 output is written as float32;
  - Squeeze without axes over a symbolic dim (run with the dim fixed to
    the input's size), x[N, D] + bias[5] and the split into heads
    [B, T, 2, C/2] (the same; --dim and the files may both give sizes),
    --dim by tf2onnx's names of merged dims, and reduction axes given in the other opset's
    place: refused at load, naming them.
  exporter_forms_test.py LOOM_CLI"""
import sys

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from cli_harness import check, finish, run_model

loom = sys.argv[1]


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "forms", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


def run(m, feeds, extra=()):
    return run_model(loom, m, feeds, extra)


def f32(name, dims):
    return helper.make_tensor_value_info(name, TP.FLOAT, dims)


def expect(got, name, want, what, tol=0.0):
    if isinstance(got, str):
        check(False, f"{what}: {got}")
        return
    g = got[name]
    ok = g.shape == want.shape and np.allclose(g, want, rtol=tol, atol=tol)
    check(ok, f"{what}: got {g.shape} {g.ravel()[:12]}, want {want.shape} {want.ravel()[:12]}")


# ---- Pow: int base, float exponent ----
m = model([helper.make_node("Pow", ["x", "e"], ["y"])],
          [helper.make_tensor_value_info("x", TP.INT64, [3]), f32("e", [3])],
          [helper.make_tensor_value_info("y", TP.INT64, [3])], opset=15)
expect(run(m, {"x": np.array([4, 9, 2], np.int64), "e": np.array([0.5, 0.5, 2.7], np.float32)}),
       "y", np.array([2, 3, 6]), "int64 ^ float")

# ---- Casts to narrow integer types ----
v = np.array([-2.5, 255.9, 300.0, 40000.0, -1.0, 70000.0], np.float32)
wrapped = {TP.UINT8: [254, 255, 44, 64, 255, 112], TP.INT16: [-2, 255, 300, -25536, -1, 4464],
           TP.UINT16: [65534, 255, 300, 40000, 65535, 4464],
           TP.UINT32: [4294967294, 255, 300, 40000, 4294967295, 70000]}
for to, want in wrapped.items():
    m = model([helper.make_node("Cast", ["x"], ["y"], to=to)], [f32("x", [6])],
              [helper.make_tensor_value_info("y", to, [6])])
    expect(run(m, {"x": v}), "y", np.array(want), f"cast to {TP.DataType.Name(to)}")

# ---- SAME padding at stride 1 over symbolic H and W ----


def box3(x):
    """3x3 sums (ones kernel) and maxima with zero / -inf padding, NCHW."""
    n, c, h, w = x.shape
    z = np.zeros((n, c, h + 2, w + 2), np.float64)
    z[:, :, 1:-1, 1:-1] = x
    s = sum(z[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3))
    z[:] = -np.inf
    z[:, :, 1:-1, 1:-1] = x
    mx = np.max([z[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=0)
    return s.sum(axis=1, keepdims=True), mx


w = numpy_helper.from_array(np.ones((1, 2, 3, 3), np.float32), "w")
m = model([helper.make_node("Conv", ["x", "w"], ["conv"], auto_pad="SAME_UPPER"),
           helper.make_node("MaxPool", ["x"], ["pool"], kernel_shape=[3, 3], auto_pad="SAME_LOWER")],
          [f32("x", ["N", 2, "H", "W"])], [f32("conv", None), f32("pool", None)], [w])
rng = np.random.default_rng(4)
for shape in ((1, 2, 5, 7), (2, 2, 4, 3)):
    x = rng.standard_normal(shape).astype(np.float32)
    got = run(m, {"x": x})
    conv, pool = box3(x.astype(np.float64))
    expect(got, "conv", conv.astype(np.float32), f"SAME conv on {shape}", 1e-5)
    expect(got, "pool", pool.astype(np.float32), f"SAME max pool on {shape}", 0)

# ---- Resize tf_half_pixel_for_nn keeps batch and channels ----
sizes = numpy_helper.from_array(np.array([2, 3, 4, 3], np.int64), "sizes")
m = model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_half_pixel_for_nn",
                            nearest_mode="round_prefer_ceil")],
          [f32("x", [2, 3, 2, 3])], [f32("y", [2, 3, 4, 3])], [sizes], opset=11)
x = np.arange(36, dtype=np.float32).reshape(2, 3, 2, 3)
# rows (i + 0.5) / 2 = 0.25, 0.75, 1.25, 1.75 round to 0, 1, 1, 2 -> 1 (the last)
expect(run(m, {"x": x}), "y", x[:, :, [0, 1, 1, 1], :], "tf_half_pixel_for_nn")

# ---- Resize by f32 scales, as PyTorch exports interpolate(scale_factor)
# (opset 13+): sized and mapped in f32, as PyTorch computes them (5 * 1.4f
# is 7 there, 6.9999999 in f64; 11 / 2.2f reads pixel 5, not 4) ----
import torch  # noqa: E402  (the reference's values: scripts/setup.sh installs it)
import torch.nn.functional as TF  # noqa: E402

x = rng.standard_normal((1, 2, 5, 10)).astype(np.float32)
for sf, mode, ct in ((1.4, "nearest", "asymmetric"), (2.2, "nearest", "asymmetric"),
                     (0.6, "nearest", "asymmetric"), (1.4, "linear", "pytorch_half_pixel")):
    scales = numpy_helper.from_array(np.array([1, 1, sf, sf], np.float32), "scales")
    m = model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                                coordinate_transformation_mode=ct, nearest_mode="floor")],
              [f32("x", [1, 2, 5, 10])], [f32("y", None)], [scales])
    want = TF.interpolate(torch.from_numpy(x), scale_factor=sf,
                          mode="nearest" if mode == "nearest" else "bilinear").numpy()
    expect(run(m, {"x": x}), "y", want, f"resize {mode} by scale {sf}", 1e-5)

# ---- Resize to sizes from Shape(x) over a symbolic batch ----


def resize_by_shape(batch):
    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Slice", ["sh", "s0", "s2"], ["nc"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                              coordinate_transformation_mode="half_pixel")]
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    return model(nodes, [f32("x", [batch, 3, 5, 7])], [f32("y", None)],
                 [i64("s0", [0]), i64("s2", [2]), i64("hw", [9, 4])])


x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
fixed = run(resize_by_shape(2), {"x": x})
if isinstance(fixed, str):
    check(False, f"resize by shape, fixed batch: {fixed}")
else:
    expect(run(resize_by_shape("N"), {"x": x}), "y", fixed["y"], "resize by shape, symbolic", 1e-6)

# ---- GridSample over a symbolic batch and grid (PyTorch's dynamic_axes
# export of grid_sample), against the same model with fixed shapes ----


def grid_sample(n, ho, wo, mode):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode="border")
    return model([node], [f32("x", [n, 3, 5, 6]), f32("g", [n, ho, wo, 2])], [f32("y", None)],
                 opset=16)


for batch, mode in ((2, "bilinear"), (3, "nearest")):
    x = rng.standard_normal((batch, 3, 5, 6)).astype(np.float32)
    gr = rng.uniform(-1.2, 1.2, (batch, 4, 7, 2)).astype(np.float32)
    fixed = run(grid_sample(batch, 4, 7, mode), {"x": x, "g": gr})
    if isinstance(fixed, str):
        check(False, f"grid_sample {mode}, fixed shapes: {fixed}")
    else:
        expect(run(grid_sample("N", "Ho", "Wo", mode), {"x": x, "g": gr}), "y", fixed["y"],
               f"grid_sample {mode} over a symbolic batch of {batch}", 1e-6)

# ---- Inputs whose batches the exporter named apart, or not at all ----
a = rng.standard_normal((4, 3)).astype(np.float32)
b = rng.standard_normal((4, 2)).astype(np.float32)
for da, db in ((["unk__10", 3], ["unk__11", 2]), ([None, 3], [None, 2])):
    m = model([helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
               helper.make_node("ReduceSum", ["y", "one"], ["s"], keepdims=1),
               helper.make_node("Add", ["a", "s"], ["z"])],
              [f32("a", da), f32("b", db)], [f32("y", None), f32("z", None)],
              [numpy_helper.from_array(np.array([1], np.int64), "one")])
    got = run(m, {"a": a, "b": b})
    y = np.concatenate([a, b], 1)
    expect(got, "y", y, f"concat of inputs with batches {da[0]}, {db[0]}")
    expect(got, "z", a + y.sum(1, keepdims=True), f"add over batches {da[0]}, {db[0]}", 1e-5)
    got = run(m, {"a": a, "b": b[:3]})
    check(isinstance(got, str) and "dim0" in got, f"batches 4 and 3: {got}")

# ---- A symbolic dim meeting a static one (x[N, D] + bias[5]; a Reshape
# to [B, T, 2, C/2], the split into heads) cannot be proven to agree:
# `loom run` loads the model again with the dims fixed to the sizes the
# input files and --dim give (both at once too) ----
m = model([helper.make_node("Add", ["x", "bias"], ["y"])], [f32("x", ["N", "D"])],
          [f32("y", None)], [numpy_helper.from_array(np.arange(5, dtype=np.float32), "bias")])
x = rng.standard_normal((2, 5)).astype(np.float32)
want = x + np.arange(5, dtype=np.float32)
expect(run(m, {"x": x}), "y", want, "x[N, D] + bias[5], D from the input's file")
expect(run(m, {"x": x}, ["--dim", "D=5", "--dim", "N=2"]), "y", want,
       "x[N, D] + bias[5] with --dim D=5 and the input's file")
got = run(m, {"x": x}, ["--dim", "D=4"])
check(isinstance(got, str) and "'D'" in got and "5" in got, f"--dim D=4 against a file of D 5: {got}")
split = [helper.make_node("Shape", ["x"], ["sh"]),
         helper.make_node("Slice", ["sh", "z1", "t2", "z1"], ["bt"]),
         helper.make_node("Gather", ["sh", "two"], ["c"], axis=0),
         helper.make_node("Div", ["c", "two"], ["half"]),
         helper.make_node("Unsqueeze", ["half", "z1"], ["half1"]),
         helper.make_node("Concat", ["bt", "two1", "half1"], ["to"], axis=0),
         helper.make_node("Reshape", ["x", "to"], ["y"])]
i64s = [numpy_helper.from_array(np.array(v, np.int64), k)
        for k, v in (("z1", [0]), ("t2", [2]), ("two", 2), ("two1", [2]))]
m = model(split, [f32("x", ["B", "T", "C"])], [f32("y", None)], i64s)
x = rng.standard_normal((2, 3, 8)).astype(np.float32)
expect(run(m, {"x": x}), "y", x.reshape(2, 3, 2, 4), "split into heads over a symbolic C")
# tf2onnx's names for dims the import merges (unk__10 and unk__11 are dim0)
m = model([helper.make_node("Add", ["a", "b"], ["y"])],
          [f32("a", ["unk__10", 4]), f32("b", ["unk__11", 4])], [f32("y", None)])
got = run(m, {}, ["--dim", "unk__10=3", "--dim", "unk__11=3"])
check(isinstance(got, dict) and got["y"].shape == (3, 4), f"--dim by tf2onnx's names: {got}")

# ---- Squeeze without axes over a symbolic dim: refused over the symbol,
# so `loom run` loads the model again with N fixed to the input's size
# (which dims go is known then) ----
m = model([helper.make_node("Squeeze", ["x"], ["y"])], [f32("x", ["N", 1, 3])], [f32("y", None)])
x = np.arange(3, dtype=np.float32).reshape(1, 1, 3)
expect(run(m, {"x": x}), "y", x.reshape(3), "squeeze without axes over N, fixed to 1")

# ---- Block moves and GatherElements over symbolic dims ----


def depth_to_space(x, b, crd):
    n, c, h, w = x.shape
    if crd:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return t.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(x, b):
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


m = model([helper.make_node("DepthToSpace", ["x"], ["dcr"], blocksize=2, mode="DCR"),
           helper.make_node("DepthToSpace", ["x"], ["crd"], blocksize=2, mode="CRD"),
           helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=2),
           helper.make_node("GatherElements", ["x", "i"], ["ge"], axis=2)],
          [f32("x", ["N", 8, 4, 6]), helper.make_tensor_value_info("i", TP.INT64, ["N", 8, "K", 6])],
          [f32("dcr", None), f32("crd", None), f32("s2d", None), f32("ge", None)])
for n_, k in ((1, 3), (3, 5)):
    x = rng.standard_normal((n_, 8, 4, 6)).astype(np.float32)
    i = rng.integers(-4, 4, (n_, 8, k, 6)).astype(np.int64)
    got = run(m, {"x": x, "i": i})
    expect(got, "dcr", depth_to_space(x, 2, False), f"DepthToSpace DCR, batch {n_}")
    expect(got, "crd", depth_to_space(x, 2, True), f"DepthToSpace CRD, batch {n_}")
    expect(got, "s2d", space_to_depth(x, 2), f"SpaceToDepth, batch {n_}")
    expect(got, "ge", np.take_along_axis(x, i % 4, 2), f"GatherElements, ({n_}, 8, {k}, 6)")
    # an index past its axis but inside the data (the next row's element,
    # flattened) fails the run, as in ONNX Runtime, instead of reading it
    for bad in (4, -5):
        i[0, 0, 0, 0] = bad
        got = run(m, {"x": x, "i": i})
        check(isinstance(got, str) and "out of range" in got,
              f"GatherElements index {bad} on an axis of 4: {got if isinstance(got, str) else 'ran'}")

# ---- tf.boolean_mask (NonZero, Transpose, GatherND) and GatherND over a
# symbolic batch ----
m = model([helper.make_node("NonZero", ["mask"], ["nz"]),
           helper.make_node("Transpose", ["nz"], ["at"], perm=[1, 0]),
           helper.make_node("GatherND", ["x", "at"], ["picked"]),
           helper.make_node("GatherND", ["x", "j"], ["rows"], batch_dims=1)],
          [f32("x", ["N", 4, 3]), helper.make_tensor_value_info("mask", TP.BOOL, ["N", 4]),
           helper.make_tensor_value_info("j", TP.INT64, ["N", 2, 1])],
          [f32("picked", None), f32("rows", None)])
for n_ in (2, 5):
    x = rng.standard_normal((n_, 4, 3)).astype(np.float32)
    mask = rng.random((n_, 4)) < 0.5
    j = rng.integers(-4, 4, (n_, 2, 1)).astype(np.int64)
    got = run(m, {"x": x, "mask": mask, "j": j})
    expect(got, "picked", x[mask], f"boolean mask over batch {n_}")
    expect(got, "rows", np.stack([x[b][j[b, :, 0]] for b in range(n_)]), f"GatherND rows, {n_}")

# ---- Sizes as data, PyTorch's exports over a symbolic T: arange(1, T + 1)
# (RoBERTa's positions), x * (5 - T) (negative at T > 5), pe[2:T] ----
i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
m = model([helper.make_node("Shape", ["x"], ["sh"]),
           helper.make_node("Gather", ["sh", "one_s"], ["t"], axis=0),
           helper.make_node("Add", ["t", "one_s"], ["t1"]),
           helper.make_node("Range", ["one_s", "t1", "one_s"], ["pos"]),
           helper.make_node("Cast", ["pos"], ["posf"], to=TP.FLOAT),
           helper.make_node("Mul", ["x", "posf"], ["by_pos"]),
           helper.make_node("Sub", ["five", "t"], ["left"]),
           helper.make_node("Cast", ["left"], ["leftf"], to=TP.FLOAT),
           helper.make_node("Mul", ["x", "leftf"], ["by_left"]),
           helper.make_node("Unsqueeze", ["t", "zero_v"], ["tv"]),
           helper.make_node("Slice", ["pe", "two_v", "tv", "zero_v"], ["pe_tail"])],
          [f32("x", [1, "T"])], [f32("by_pos", None), f32("by_left", None), f32("pe_tail", None)],
          [i64("one_s", 1), i64("five", 5), i64("zero_v", [0]), i64("two_v", [2]),
           numpy_helper.from_array(np.arange(10, dtype=np.float32), "pe")])
for t in (3, 7):
    x = rng.standard_normal((1, t)).astype(np.float32)
    got = run(m, {"x": x})
    expect(got, "by_pos", x * np.arange(1, t + 1), f"x * arange(1, T + 1) at T = {t}", 1e-6)
    expect(got, "by_left", x * (5 - t), f"x * (5 - T) at T = {t}", 1e-6)
    expect(got, "pe_tail", np.arange(2, t, dtype=np.float32), f"pe[2:T] at T = {t}")

# ---- Slices that start at a symbolic dim: x[:, T-2:], a cache's
# pe[P:P+T] (GPT-2's causal mask under past keys), pe[T:9:2] ----
m = model([helper.make_node("Shape", ["x"], ["sx"]),
           helper.make_node("Shape", ["past"], ["sp"]),
           helper.make_node("Gather", ["sx", "one_v"], ["tv"], axis=0),
           helper.make_node("Gather", ["sp", "one_v"], ["pv"], axis=0),
           helper.make_node("Sub", ["tv", "two_v"], ["t2"]),
           helper.make_node("Slice", ["x", "t2", "big_v", "one_v"], ["x_tail"]),
           helper.make_node("Add", ["pv", "tv"], ["pt"]),
           helper.make_node("Slice", ["pe", "pv", "pt", "zero_v"], ["pe_past"]),
           helper.make_node("Slice", ["pe", "tv", "nine_v", "zero_v", "two_v"], ["pe_step"])],
          [f32("x", [1, "T", 2]), f32("past", [1, "P", 2])],
          [f32("x_tail", None), f32("pe_past", None), f32("pe_step", None)],
          [i64("one_v", [1]), i64("two_v", [2]), i64("zero_v", [0]), i64("nine_v", [9]),
           i64("big_v", [2**63 - 1]), numpy_helper.from_array(np.arange(10, dtype=np.float32), "pe")])
for t, p in ((3, 2), (5, 4)):
    x = rng.standard_normal((1, t, 2)).astype(np.float32)
    got = run(m, {"x": x, "past": np.zeros((1, p, 2), np.float32)})
    expect(got, "x_tail", x[:, t - 2:], f"x[:, T-2:] at T = {t}")
    expect(got, "pe_past", np.arange(p, p + t, dtype=np.float32), f"pe[P:P+T] at T, P = {t}, {p}")
    expect(got, "pe_step", np.arange(t, 9, 2, dtype=np.float32), f"pe[T:9:2] at T = {t}")

# ---- Pools with ceil_mode over a symbolic height and width (GoogLeNet's
# MaxPool(3, 2, ceil_mode=True) exported with dynamic sizes), against a
# loop over the windows, each clipped to the padded input ----
def pool_ceil(x, k, s, pad, fn):
    n, c, h, w = x.shape
    outs = []
    for size in (h, w):
        o = -(-(size + 2 * pad - k) // s) + 1
        if (o - 1) * s >= size + pad:
            o -= 1
        outs.append(o)
    y = np.zeros((n, c, *outs), np.float32)
    for i in range(outs[0]):
        for j in range(outs[1]):
            r0, c0 = i * s - pad, j * s - pad
            win = x[:, :, max(r0, 0):min(r0 + k, h), max(c0, 0):min(c0 + k, w)]
            y[:, :, i, j] = fn(win, axis=(2, 3))
    return y


m = model([helper.make_node("MaxPool", ["x"], ["mx"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], ceil_mode=1),
           helper.make_node("AveragePool", ["x"], ["av"], kernel_shape=[2, 2], strides=[2, 2],
                            ceil_mode=1)],
          [f32("x", [1, 2, "H", "W"])], [f32("mx", None), f32("av", None)])
for h, w in ((7, 8), (9, 6)):
    x = rng.standard_normal((1, 2, h, w)).astype(np.float32)
    got = run(m, {"x": x})
    expect(got, "mx", pool_ceil(x, 3, 2, 1, np.max), f"max pool ceil_mode at {h}x{w}")
    expect(got, "av", pool_ceil(x, 2, 2, 0, np.mean), f"average pool ceil_mode at {h}x{w}", 1e-6)


# ---- AveragePool counting its pads with ceil_mode (nn.AvgPool2d(3, 2, 1,
# ceil_mode=True)'s default): a window that ceil_mode lets run past the
# padded input divides by its part inside the padded input, as PyTorch and
# ONNX Runtime do, not by the kernel's size ----
def avg_pool_counting_pads(x, k, s, pads):
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    outs = []
    for size, end_pad in zip(xp.shape[2:], (bottom, right)):
        o = -(-(size - k) // s) + 1  # ceil_mode; the last window starts before the end pad
        outs.append(o - 1 if (o - 1) * s >= size - end_pad else o)
    y = np.zeros(x.shape[:2] + tuple(outs), np.float32)
    for i in range(outs[0]):
        for j in range(outs[1]):
            win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            y[:, :, i, j] = win.sum(axis=(2, 3)) / (win.shape[2] * win.shape[3])
    return y


for dims, pads in (((1, 2, 8, 8), [1, 1, 1, 1]), ((1, 1, 8, 9), [0, 1, 2, 0])):
    m = model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                pads=pads, count_include_pad=1, ceil_mode=1)],
              [f32("x", list(dims))], [f32("y", None)], opset=19)
    x = rng.standard_normal(dims).astype(np.float32)
    expect(run(m, {"x": x}), "y", avg_pool_counting_pads(x, 3, 2, pads),
           f"average pool counting pads {pads} with ceil_mode over {dims[2]}x{dims[3]}", 1e-6)

# ---- A Loop whose body's condition is Cast(an outer True), as PyTorch
# exports every loop (nn.EmbeddingBag): unrolled, so a Slice by the
# iteration number has constant bounds ----
two = numpy_helper.from_array(np.array(2, np.int64), "two")
ax0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
body = helper.make_graph(
    [helper.make_node("Mul", ["i", "two"], ["s"]), helper.make_node("Add", ["s", "two"], ["e"]),
     helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
     helper.make_node("Unsqueeze", ["e", "ax0"], ["e1"]),
     helper.make_node("Slice", ["x", "s1", "e1", "ax0"], ["sl"]),
     helper.make_node("ReduceSum", ["sl", "ax0"], ["y"], keepdims=0),
     helper.make_node("Cast", ["yes"], ["go"], to=TP.BOOL)], "body",
    [helper.make_tensor_value_info("i", TP.INT64, []), helper.make_tensor_value_info("c", TP.BOOL, [])],
    [helper.make_tensor_value_info("go", TP.BOOL, []), f32("y", [3])])
m = model([helper.make_node("Loop", ["trips", "yes"], ["out"], body=body)],
          [f32("x", [6, 3])], [f32("out", None)],
          [numpy_helper.from_array(np.array(3, np.int64), "trips"),
           numpy_helper.from_array(np.array(True), "yes"), two, ax0])
x = np.arange(18, dtype=np.float32).reshape(6, 3)
expect(run(m, {"x": x}), "out", x.reshape(3, 2, 3).sum(1), "loop with an outer true condition")

# ---- Pad's wrap mode (opset 19): the tensor as a torus, so pads past the
# axis wrap again (ONNX Runtime's result; NumPy's pad(mode="wrap") agrees
# only for pads within the axis) ----
m = model([helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")], [f32("x", [2, 4, 3])],
          [f32("y", None)], [numpy_helper.from_array(np.array([0, 2, 5, 0, 1, 1], np.int64), "p")],
          opset=19)
x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
torus = x.take((np.arange(7) - 2) % 4, 1).take((np.arange(9) - 5) % 3, 2)
expect(run(m, {"x": x}), "y", torus, "pad wrap")
check(np.array_equal(np.pad(x, ((0, 0), (2, 1), (1, 1)), mode="wrap"),
                     torus[:, :, 4:9]), "the torus is NumPy's wrap for pads within the axis")

# ---- Reduction axes in the other opset's place: refused, not ignored ----
one = numpy_helper.from_array(np.array([1], np.int64), "one")
for op, opset, inputs, attrs, word in (("ReduceSum", 13, ["x"], {"axes": [1]}, "attribute"),
                                       ("ReduceMean", 13, ["x", "one"], {}, "input")):
    m = model([helper.make_node(op, inputs, ["y"], **attrs)], [f32("x", [2, 3])],
              [f32("y", None)], [one] if len(inputs) > 1 else [], opset=opset)
    got = run(m, {"x": np.ones((2, 3), np.float32)})
    check(isinstance(got, str) and word in got, f"{op}-{opset} with axes as an {word}: {got}")

# ---- A name given two values (two nodes write y): refused at load, as
# ONNX Runtime refuses it, not the last definition silently taken ----
m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
          [f32("x", [3])], [f32("y", None)])
got = run(m, {"x": np.ones(3, np.float32)})
check(isinstance(got, str) and "'y' is defined already" in got, f"duplicate definition: {got}")

# A bfloat16 output (a mixed-precision export) is written as float32, the
# same values: NumPy has no bfloat16
x = np.array([1.0, 1.00390625, 1.01171875, 3.14159, -2.7e-5, 65504.5], np.float32)
bits = x.view(np.uint32).astype(np.uint64)
bf16 = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
m = model([helper.make_node("Cast", ["x"], ["y"], to=TP.BFLOAT16)], [f32("x", [6])],
          [helper.make_tensor_value_info("y", TP.BFLOAT16, None)])
got = run(m, {"x": x})
check(isinstance(got, dict) and got["y"].dtype == np.float32 and np.array_equal(got["y"], bf16),
      f"a bfloat16 output written as float32: {got}")

# An op builder's error names the node it came from
m = model([helper.make_node("Relu", ["x"], ["r"]),
           helper.make_node("Add", ["r", "b"], ["y"], name="bias_add")],
          [f32("x", [2, 3])], [f32("y", None)],
          [numpy_helper.from_array(np.ones(4, np.float32), "b")])
got = run(m, {"x": np.ones((2, 3), np.float32)})
check(isinstance(got, str) and "ONNX node 1 'bias_add' (Add): add: cannot broadcast" in got,
      f"a builder's error names its node: {got}")

finish("exporter_forms_test")
