"""`loom run`, `loom bench` and `loom explain` on ONNX models, as a user runs
them: outputs written as NAME.npy and right, bench's JSON, explain's
description, and clear errors for bad arguments and bad files.
  cli_test.py LOOM_CLI SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from cli_harness import check, finish

loom, src = sys.argv[1], sys.argv[2]
seeds = os.path.join(src, "tests", "fuzz", "corpus", "onnx")
def run(*args):
    p = subprocess.run([loom, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as d:
    # add_mul.onnx: z = (x + y) * w, w as tests/fuzz/make_onnx_seeds.py made it.
    w = np.random.default_rng(0).uniform(-1, 1, (2, 3)).astype(np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    y = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    model = os.path.join(seeds, "add_mul.onnx")
    out = os.path.join(d, "out")
    rc, so, se = run("run", model, "--input", "x=" + os.path.join(d, "x.npy"),
                     "--input", "y=" + os.path.join(d, "y.npy"), "--output-dir", out)
    check(rc == 0, "run add_mul: " + se)
    z = np.load(os.path.join(out, "z.npy")) if rc == 0 else None
    check(z is not None and np.allclose(z, (x + y) * w, rtol=1e-6, atol=1e-6),
          f"add_mul output {z} != {(x + y) * w}")

    # A model at a path of any name (a .pb file, as TensorFlow tools write
    # them); a path that is no model says what is wrong with it.
    import shutil
    pb = os.path.join(d, "model.pb")
    shutil.copy(model, pb)
    rc, so, se = run("run", pb, "--input", "x=" + os.path.join(d, "x.npy"),
                     "--input", "y=" + os.path.join(d, "y.npy"), "--output-dir", out)
    check(rc == 0 and np.allclose(np.load(os.path.join(out, "z.npy")), (x + y) * w, rtol=1e-6),
          "run model.pb: " + se)
    for cmd in ("run", "bench", "explain"):
        rc, so, se = run(cmd, os.path.join(d, "missing_model"))
        check(rc == 1 and "missing_model" in se and "No such file" in se,
              f"{cmd} of a missing path: {rc} {se}")

    # A symbolic dim given with --dim, inputs random.
    rc, so, se = run("run", os.path.join(seeds, "matmul_layernorm.onnx"), "--dim", "B=3",
                     "--output-dir", out)
    check(rc == 0, "run with --dim: " + se)
    if rc == 0:
        check(np.load(os.path.join(out, "y.npy")).shape == (3, 3, 6), "--dim B=3 output shape")
    rc, so, se = run("run", os.path.join(seeds, "matmul_layernorm.onnx"), "--output-dir", out)
    check(rc != 0 and "B" in se, "a symbolic dim without --dim fails naming it: " + se)

    rc, so, se = run("bench", model, "--runs", "5", "--threads", "1",
                     "--input", "x=" + os.path.join(d, "x.npy"),
                     "--input", "y=" + os.path.join(d, "y.npy"))
    check(rc == 0, "bench: " + se)
    if rc == 0:
        line = json.loads(so.strip().splitlines()[-1])
        for key in ("load_ms", "compile_ms", "first_run_ms", "p50_ms", "p90_ms", "p99_ms",
                    "runs_per_s", "arena_bytes", "lower_bound_bytes", "peak_rss_bytes"):
            check(key in line, "bench JSON has " + key)
        check(line.get("p50_ms", -1) <= line.get("p99_ms", -2), "p50 <= p99")

    rc, so, se = run("explain", os.path.join(seeds, "conv_pool_gemm.onnx"))
    check(rc == 0, "explain: " + se)
    for text in ("opsets: ai.onnx 17", "Conv 1", "every op is supported", "memory"):
        check(text in so, "explain prints " + repr(text))

    # Output sizes that depend on the data: the interpreter runs the model.
    xz = np.array([[0, 1, 0, 2], [3, 0, 0, 0], [0, 0, 4, 5]], dtype=np.float32)
    np.save(os.path.join(d, "xz.npy"), xz)
    rc, so, se = run("run", os.path.join(seeds, "nonzero.onnx"), "--input",
                     "x=" + os.path.join(d, "xz.npy"), "--output-dir", out)
    check(rc == 0 and "interpreter" in se, "run NonZero: " + se)
    if rc == 0:
        check(np.array_equal(np.load(os.path.join(out, "y.npy")), np.transpose(np.nonzero(xz))),
              "NonZero's output")

    # Errors: a missing file, a truncated model, an unknown input name.
    rc, so, se = run("run", os.path.join(d, "none.onnx"))
    check(rc != 0 and "none.onnx" in se, "missing model: " + se)
    data = open(os.path.join(seeds, "conv_pool_gemm.onnx"), "rb").read()
    cut = os.path.join(d, "cut.onnx")
    with open(cut, "wb") as f:
        f.write(data[: len(data) // 2])
    rc, so, se = run("run", cut)
    check(rc != 0 and "ONNX" in se, "truncated model: " + se)
    rc, so, se = run("run", model, "--input", "nosuch=" + os.path.join(d, "x.npy"))
    check(rc != 0 and "nosuch" in se, "unknown input name: " + se)

    # An empty file, an input of another dtype or rank, an input twice, a
    # --dim no input has or one that contradicts an input file.
    empty = os.path.join(d, "empty.onnx")
    open(empty, "wb").close()
    rc, so, se = run("run", empty)
    check(rc != 0 and "empty" in se, "empty model: " + se)
    np.save(os.path.join(d, "x64.npy"), x.astype(np.float64))
    np.save(os.path.join(d, "x3.npy"), x[None])
    y_arg = "y=" + os.path.join(d, "y.npy")
    for bad, words in (("x64.npy", ("'x'", "f64", "f32")), ("x3.npy", ("'x'", "rank 3", "rank 2"))):
        rc, so, se = run("run", model, "--input", "x=" + os.path.join(d, bad), "--input", y_arg,
                         "--output-dir", out)
        check(rc != 0 and all(w in se for w in words), f"input {bad}: " + se)
    rc, so, se = run("run", model, "--input", "x=" + os.path.join(d, "x.npy"), "--input",
                     "x=" + os.path.join(d, "x.npy"), "--input", y_arg, "--output-dir", out)
    check(rc != 0 and "twice" in se, "an input given twice: " + se)
    ln = os.path.join(seeds, "matmul_layernorm.onnx")
    rc, so, se = run("run", ln, "--dim", "B=3", "--dim", "Q=2", "--output-dir", out)
    check(rc != 0 and "Q" in se and "no input" in se, "an unknown --dim: " + se)
    np.save(os.path.join(d, "b3.npy"), np.zeros((3, 3, 4), np.float32))
    rc, so, se = run("run", ln, "--input", "x=" + os.path.join(d, "b3.npy"), "--dim", "B=4",
                     "--output-dir", out)
    check(rc != 0 and "B=4" in se and "is 3" in se, "a --dim against an input file: " + se)

    # One input given and one not: no random stand-in beside real data.
    rc, so, se = run("run", model, "--input", "x=" + os.path.join(d, "x.npy"),
                     "--output-dir", out)
    check(rc != 0 and "'y' is not given" in se, "an input left out: " + se)

    # An op Loom imports only over static dims (ScatterElements' data) over a
    # symbolic batch: loaded again with the batch fixed to the input
    # files' size, as ONNX Runtime's free dimension overrides.
    from onnx import TensorProto as TP, helper
    t = lambda n, ty, dims: helper.make_tensor_value_info(n, ty, dims)
    g = helper.make_graph([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1,
                                            reduction="add")], "scatter",
                          [t("d", TP.FLOAT, ["N", 5]), t("i", TP.INT64, ["N", 2]),
                           t("u", TP.FLOAT, ["N", 2])], [t("y", TP.FLOAT, None)])
    scatter = os.path.join(d, "scatter.onnx")
    with open(scatter, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString())
    rng = np.random.default_rng(3)
    dd, ii = rng.standard_normal((3, 5)).astype(np.float32), np.array([[0, 4], [2, 2], [1, 3]])
    uu = rng.standard_normal((3, 2)).astype(np.float32)
    args = []
    for name, v in (("d", dd), ("i", ii), ("u", uu)):
        np.save(os.path.join(d, name + ".npy"), v)
        args += ["--input", f"{name}=" + os.path.join(d, name + ".npy")]
    o3 = os.path.join(d, "o3")
    rc, so, se = run("run", scatter, *args, "--output-dir", o3)
    want = dd.copy()
    for r in range(3):
        for k in range(2):
            want[r, ii[r, k]] += uu[r, k]
    check(rc == 0 and "fixed to the sizes given" in se, "scatter over a symbolic batch: " + se)
    if rc == 0:
        check(np.allclose(np.load(os.path.join(o3, "y.npy")), want, rtol=1e-6, atol=1e-6),
              "scatter over a symbolic batch, values")

    # Outputs whose names differ only in characters a file name cannot
    # hold ('a::b', 'a__b'): two files, the second with its index.
    vi = lambda n: helper.make_tensor_value_info(n, TP.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a::b"]),
                           helper.make_node("Neg", ["x"], ["a__b"])], "names", [vi("x")],
                          [vi("a::b"), vi("a__b")])
    names = os.path.join(d, "names.onnx")
    with open(names, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    v = np.array([-1.0, 2.0, -3.0], np.float32)
    np.save(os.path.join(d, "v.npy"), v)
    o2 = os.path.join(d, "o2")
    rc, so, se = run("run", names, "--input", "x=" + os.path.join(d, "v.npy"), "--output-dir", o2)
    check(rc == 0 and sorted(os.listdir(o2)) == ["a__b.npy", "a__b_1.npy"],
          f"colliding output names: {se} {os.listdir(o2) if rc == 0 else ''}")
    if rc == 0:
        check(np.array_equal(np.load(os.path.join(o2, "a__b.npy")), np.maximum(v, 0)) and
              np.array_equal(np.load(os.path.join(o2, "a__b_1.npy")), -v),
              "colliding output names keep both outputs")

    # External data: read from the model's folder at its offset; a
    # location that leaves the folder through a link, and an offset that
    # is not a number, are refused.
    ext = os.path.join(d, "ext")
    os.mkdir(ext)
    wv = np.arange(3, dtype=np.float32) + 0.5
    outside = os.path.join(d, "outside.bin")
    for path in (os.path.join(ext, "w.bin"), outside):
        with open(path, "wb") as f:
            f.write(b"\0" * 8 + wv.tobytes())
    os.symlink(outside, os.path.join(ext, "link.bin"))

    def ext_model(name, location, offset):
        w = TP(name="w", data_type=TP.FLOAT, dims=[3], data_location=TP.EXTERNAL)
        for k, v in (("location", location), ("offset", offset), ("length", "12")):
            e = w.external_data.add()
            e.key, e.value = k, v
        g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [vi("x")],
                              [vi("y")], initializer=[w])
        path = os.path.join(ext, name)
        with open(path, "wb") as f:
            f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                    .SerializeToString())
        return path

    o4 = os.path.join(d, "o4")
    rc, so, se = run("run", ext_model("good.onnx", "w.bin", "8"), "--input",
                     "x=" + os.path.join(d, "v.npy"), "--output-dir", o4)
    check(rc == 0 and np.array_equal(np.load(os.path.join(o4, "y.npy")), v + wv),
          "external data at an offset: " + se)
    rc, so, se = run("run", ext_model("link.onnx", "link.bin", "8"), "--input",
                     "x=" + os.path.join(d, "v.npy"), "--output-dir", o4)
    check(rc != 0 and "leaves the model's folder" in se, "external data through a link: " + se)
    rc, so, se = run("run", ext_model("offset.onnx", "w.bin", "8abc"), "--input",
                     "x=" + os.path.join(d, "v.npy"), "--output-dir", o4)
    check(rc != 0 and "'8abc' is not a byte count" in se, "external data offset 8abc: " + se)

    # x[:, :512] over a symbolic T run at T = 10: ONNX clamps the bound; the
    # run is made again with the dims fixed to the input's sizes.
    consts = [helper.make_tensor(n, TP.INT64, [1], [v]) for n, v in
              (("s0", 0), ("e0", 512), ("a0", 1))]
    g = helper.make_graph([helper.make_node("Slice", ["x", "s0", "e0", "a0"], ["y"])], "clamp",
                          [helper.make_tensor_value_info("x", TP.FLOAT, ["B", "T"])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, ["B", None])],
                          initializer=consts)
    clamp = os.path.join(d, "clamp.onnx")
    with open(clamp, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                .SerializeToString())
    xt = np.arange(20, dtype=np.float32).reshape(2, 10)
    np.save(os.path.join(d, "xt.npy"), xt)
    o5 = os.path.join(d, "o5")
    rc, so, se = run("run", clamp, "--input", "x=" + os.path.join(d, "xt.npy"), "--output-dir", o5)
    check(rc == 0 and np.array_equal(np.load(os.path.join(o5, "y.npy")), xt),
          "a Slice bound past a symbolic dim's size: " + se)

    # Attributes of the wrong type, group 0, more Split outputs than the
    # axis has elements: errors naming the node and what is wrong, where
    # the op would otherwise have run with a default.
    def one_node(name, node, x_shape, opset=13, inits=()):
        g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TP.FLOAT, None)
                               for o in node.output], initializer=list(inits))
        path = os.path.join(d, name + ".onnx")
        with open(path, "wb") as f:
            f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
                    .SerializeToString())
        return path

    wconv = helper.make_tensor("w", TP.FLOAT, [4, 1, 1, 1], [1.0, 2.0, 3.0, 4.0])
    x4 = np.arange(8, dtype=np.float32).reshape(1, 4, 1, 2)
    np.save(os.path.join(d, "x4.npy"), x4)
    typed = [
        ("conv_group_string", helper.make_node("Conv", ["x", "w"], ["y"], name="c", group="4"),
         [1, 4, 1, 2], [wconv], ("'c' (Conv)", "attribute group is a STRING", "an INT")),
        ("conv_group_zero", helper.make_node("Conv", ["x", "w"], ["y"], name="c", group=0),
         [1, 4, 1, 2], [wconv], ("'c' (Conv)", "group is 0")),
        ("leaky_alpha_int", helper.make_node("LeakyRelu", ["x"], ["y"], name="l", alpha=2),
         [1, 4, 1, 2], [], ("'l' (LeakyRelu)", "attribute alpha is an INT", "a FLOAT")),
        ("transpose_perm_floats", helper.make_node("Transpose", ["x"], ["y"], name="t",
                                                   perm=[3.0, 2.0, 1.0, 0.0]),
         [1, 4, 1, 2], [], ("'t' (Transpose)", "attribute perm is FLOATS", "INTS")),
        ("split_unequal", helper.make_node("Split", ["x"], [f"y{k}" for k in range(3)],
                                           name="s", axis=1),
         [1, 4, 1, 2], [], ("'s' (Split)", "4 elements do not split into 3 equal parts")),
        ("split_too_many", helper.make_node("Split", ["x"], [f"y{k}" for k in range(6)],
                                            name="s", axis=1, num_outputs=6),
         [1, 4, 1, 2], [], ("'s' (Split)", "4 elements cannot be split into 6 parts")),
    ]
    for name, node, shape, inits, words in typed:
        opset = 18 if name == "split_too_many" else 13
        rc, so, se = run("run", one_node(name, node, shape, opset=opset, inits=inits), "--input",
                         "x=" + os.path.join(d, "x4.npy"), "--output-dir", os.path.join(d, name))
        check(rc == 1 and all(w in se for w in words), f"{name}: {rc} {se}")
    # Pad's wrap with a negative pad crops first, then wraps what is left,
    # as ONNX Runtime: [0 1 2 3] cropped by 2 at the end is [0 1]; one
    # before it wraps from its end: [1 0 1].
    pads = helper.make_tensor("p", TP.INT64, [4], [0, 1, 0, -2])
    xw = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.save(os.path.join(d, "xw.npy"), xw)
    rc, so, se = run("run", one_node("pad_wrap", helper.make_node(
        "Pad", ["x", "p"], ["y"], mode="wrap"), [1, 4], opset=19, inits=[pads]),
        "--input", "x=" + os.path.join(d, "xw.npy"), "--output-dir", os.path.join(d, "pw"))
    check(rc == 0 and np.array_equal(np.load(os.path.join(d, "pw", "y.npy")), [[1.0, 0.0, 1.0]]),
          "Pad wrap with a negative pad: " + se)
    # ReduceMax and ReduceMin over an axis of size 0: the dtype's lowest and
    # highest values (ONNX's rule since 1.15; ONNX Runtime gives the same).
    empty_cases = [("ReduceMax", TP.FLOAT, np.float32, -np.inf),
                   ("ReduceMin", TP.FLOAT, np.float32, np.inf),
                   ("ReduceMax", TP.INT32, np.int32, np.iinfo(np.int32).min),
                   ("ReduceMin", TP.INT64, np.int64, np.iinfo(np.int64).max)]
    for op, tp, npt, want in empty_cases:
        for keep in (0, 1):
            axes = helper.make_tensor("a", TP.INT64, [1], [1])
            g = helper.make_graph(
                [helper.make_node(op, ["x", "a"], ["y"], keepdims=keep)], "empty",
                [helper.make_tensor_value_info("x", tp, [3, 0])],
                [helper.make_tensor_value_info("y", tp, None)], initializer=[axes])
            path = os.path.join(d, f"{op}_{npt.__name__}_{keep}.onnx")
            with open(path, "wb") as f:
                f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
                        .SerializeToString())
            np.save(os.path.join(d, "xe.npy"), np.zeros((3, 0), npt))
            out = os.path.join(d, f"e_{op}_{npt.__name__}_{keep}")
            rc, so, se = run("run", path, "--input", "x=" + os.path.join(d, "xe.npy"),
                             "--output-dir", out)
            y = np.load(os.path.join(out, "y.npy")) if rc == 0 else None
            check(rc == 0 and y.dtype == npt and y.shape == ((3, 1) if keep else (3,)) and
                  np.all(y == want), f"{op} over an empty axis, {npt.__name__}: {y} {se}")
    # The same models with attributes as the op takes them run (and group 4
    # is a depthwise 1x1 convolution: channel c times c + 1).
    rc, so, se = run("run", one_node("conv_group_int", helper.make_node(
        "Conv", ["x", "w"], ["y"], group=4), [1, 4, 1, 2], inits=[wconv]),
        "--input", "x=" + os.path.join(d, "x4.npy"), "--output-dir", os.path.join(d, "cg"))
    check(rc == 0 and np.array_equal(np.load(os.path.join(d, "cg", "y.npy")),
                                      x4 * np.arange(1, 5, dtype=np.float32)[None, :, None, None]),
          "Conv with group 4: " + se)
    rc, so, se = run("run", one_node("leaky_alpha_float", helper.make_node(
        "LeakyRelu", ["x"], ["y"], alpha=2.0), [1, 4, 1, 2]),
        "--input", "x=" + os.path.join(d, "x4.npy"), "--output-dir", os.path.join(d, "la"))
    check(rc == 0 and np.array_equal(np.load(os.path.join(d, "la", "y.npy")), x4),
          "LeakyRelu with a float alpha: " + se)

    # Numbers are whole numbers in range; a flag of another command is refused.
    for flags in (["--threads", "2x"], ["--runs", "99999999999999999999"], ["--dim", "B=3x"],
                  ["--output-dir", d]):
        rc, so, se = run("bench", os.path.join(seeds, "matmul_layernorm.onnx"), "--dim", "B=2",
                         *flags)
        check(rc == 2 and ("whole number" in se or "usage" in se), f"bench {flags}: {rc} {se}")

finish("onnx cli")
