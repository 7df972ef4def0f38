"""Writes the seeds of the ONNX importer's fuzzer (tests/fuzz/fuzz_onnx.c)
into tests/fuzz/corpus/onnx/: small models covering the importer's forms.
Run with Debian's python3-onnx: python3 tests/fuzz/make_onnx_seeds.py"""
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "onnx")


def init(name, shape, seed=0):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(name, nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def main():
    os.makedirs(OUT, exist_ok=True)
    n = helper.make_node
    save("add_mul", [n("Add", ["x", "y"], ["s"]), n("Mul", ["s", "w"], ["z"])],
         [vi("x", [2, 3]), vi("y", [3])], [vi("z", [2, 3])], [init("w", [2, 3])])
    save("conv_pool_gemm",
         [n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
          n("Relu", ["c"], ["r"]), n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
          n("Flatten", ["p"], ["f"]), n("Gemm", ["f", "g"], ["y"], transB=1)],
         [vi("x", [1, 2, 8, 8])], [vi("y", [1, 5])],
         [init("w", [4, 2, 3, 3]), init("b", [4], 1), init("g", [5, 64], 2)])
    save("shape_chain",
         [n("Shape", ["x"], ["s"]), n("Gather", ["s", "zero"], ["b"], axis=0),
          n("Unsqueeze", ["b", "zero"], ["b1"]), n("Concat", ["b1", "rest"], ["shape"], axis=0),
          n("Reshape", ["x", "shape"], ["y"])],
         [vi("x", ["N", 4, 2])], [vi("y", ["N", 8])],
         [ints("zero", [0]), ints("rest", [8])])
    save("constants",
         [n("Constant", [], ["a"], value_float=2.5), n("Constant", [], ["k"], value_ints=[1, 3]),
          n("Constant", [], ["t"], value=init("tv", [3], 3)),
          n("Mul", ["x", "a"], ["m"]), n("Add", ["m", "t"], ["s"]),
          n("Greater", ["s", "t"], ["c"]), n("Where", ["c", "s", "t"], ["w"]),
          n("Reshape", ["w", "k"], ["y"]), n("Cast", ["y"], ["z"], to=TensorProto.INT64)],
         [vi("x", [3])], [vi("z", [1, 3], TensorProto.INT64)])
    save("reduce_softmax",
         [n("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
          n("Sub", ["x", "m"], ["d"]), n("Softmax", ["d"], ["s"], axis=-1),
          n("ReduceSum", ["s", "ax"], ["r"], keepdims=0),
          n("TopK", ["s", "k"], ["v", "i"], axis=1)],
         [vi("x", [2, 5])], [vi("r", [5]), vi("v", [2, 2]), vi("i", [2, 2], TensorProto.INT64)],
         [ints("ax", [0]), ints("k", [2])], opset=13)
    save("slice_pad_split",
         [n("Slice", ["x", "st", "en", "ax"], ["s"]),
          n("Pad", ["s", "pads"], ["p"], mode="reflect"), n("Transpose", ["p"], ["t"], perm=[1, 0]),
          n("Split", ["t", "parts"], ["a", "b"], axis=0), n("Concat", ["b", "a"], ["y"], axis=0)],
         [vi("x", [4, 6])], [vi("y", [6, 4])],
         [ints("st", [0, 1]), ints("en", [4, 5]), ints("ax", [0, 1]),
          ints("pads", [0, 1, 0, 1]), ints("parts", [2, 4])])
    save("matmul_layernorm",
         [n("MatMul", ["x", "w"], ["m"]),
          n("LayerNormalization", ["m", "g", "b"], ["l"], axis=-1, epsilon=1e-5),
          n("Gelu", ["l"], ["y"], domain="")],
         [vi("x", ["B", 3, 4])], [vi("y", ["B", 3, 6])],
         [init("w", [4, 6]), init("g", [6], 1), init("b", [6], 2)], opset=20)
    then_g = helper.make_graph([n("Add", ["x", "x"], ["o"])], "then", [], [vi("o", [2])])
    else_g = helper.make_graph([n("Neg", ["x"], ["o"])], "else", [], [vi("o", [2])])
    save("if_outer", [n("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
         [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", [2])])
    body = helper.make_graph(
        [n("Identity", ["cond"], ["cond_out"]), n("Add", ["acc", "x"], ["acc_out"])], "body",
        [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("acc", [2])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2])])
    save("loop_sum", [n("Loop", ["trips", "", "a0"], ["y"], body=body)],
         [vi("x", [2]), vi("a0", [2])], [vi("y", [2])], [ints("trips", 3)])
    save("nonzero", [n("NonZero", ["x"], ["i"]), n("Transpose", ["i"], ["y"])],
         [vi("x", [3, 4])], [vi("y", None, TensorProto.INT64)])
    save("lstm",
         [n("LSTM", ["x", "w", "r", "b"], ["y", "h"], hidden_size=3)],
         [vi("x", [4, 1, 2])], [vi("y", [4, 1, 1, 3]), vi("h", [1, 1, 3])],
         [init("w", [1, 12, 2]), init("r", [1, 12, 3], 1), init("b", [1, 24], 2)])


if __name__ == "__main__":
    main()
