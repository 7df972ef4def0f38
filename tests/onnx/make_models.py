#!/usr/bin/python3
"""Writes the small ONNX models that tests/test_onnx.c loads, into
tests/onnx/models/. Run with a Python that has the onnx package
(Debian's python3-onnx: /usr/bin/python3 tests/onnx/make_models.py).

shape_chain.onnx: x (batch, seq, 64) through the shape computations
PyTorch exports (Shape, Gather, Unsqueeze, Concat, Reshape, arithmetic on
dims, ConstantOfShape, Expand, Range), so that its dims stay symbolic:
  z = x viewed as (batch, seq, 4, 16), each 16-vector times W (16, 16),
      through a transpose to (batch, 4, seq, 16) and back
  y = z * 0.5 + position along seq
bitwise.onnx: BitwiseAnd, Or, Xor, Not and BitShift LEFT on uint8 inputs
a, b, sa (4); BitShift RIGHT on uint64 x, s (5).
dynamic_batch.onnx: x (batch, 2, 3, 4) with the batch symbolic, as
PyTorch exports F.interpolate, x[1:] and x.flip(0):
  up = Resize(x, scales (1, 1, 2, 2), nearest, asymmetric)
  tail = Slice(x, 1:INT64_MAX on axis 0)
  back = Slice(x, -1:-INT64_MAX:-1 on axis 0)
symbolic_values.onnx: x (T, B, 4), both symbolic, against a constant table
pe (10, 4), pe[i][j] = i / 2 - j, with T computed as PyTorch exports
x.size(0) (Shape, Gather) and used as a tensor:
  pos = x + pe[:T] (unsqueezed over B)        (PyTorch's positional encoding)
  odd = pe[1:T + 1:2]
  scaled = x * float(T)
  last = x[T - 1]
  back = x[arange(T - 1, -1, -1)]                (PyTorch's flip by indices)
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper


def w_values():
    i, j = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    return (((i * 3 + j * 5) % 7 - 3) / 8.0).astype(np.float32)


def const(name, values):
    """An int64 Constant node (a scalar, or a vector for a list)."""
    return helper.make_node("Constant", [], [name], name=name,
                            value=helper.make_tensor(name + "_v", TensorProto.INT64,
                                                     np.shape(values), np.ravel(values).tolist()))


def shape_chain():
    n = helper.make_node
    nodes = [
        const("zero", 0), const("one", 1), const("axes0", [0]), const("sixty_four", 64),
        const("sixteen", 16), const("heads_dim", [4, 16]), const("sixteen_v", [16]),
        const("one_v", [1]), const("axes02", [0, 2]),
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "zero"], ["b"], axis=0),
        n("Gather", ["shape", "one"], ["t"], axis=0),
        n("Unsqueeze", ["b", "axes0"], ["b1"]),
        n("Unsqueeze", ["t", "axes0"], ["t1"]),
        n("Concat", ["b1", "t1", "heads_dim"], ["shape4"], axis=0),
        n("Reshape", ["x", "shape4"], ["h"]),
        n("Transpose", ["h"], ["ht"], perm=[0, 2, 1, 3]),
        n("MatMul", ["ht", "W"], ["m"]),
        n("Transpose", ["m"], ["mt"], perm=[0, 2, 1, 3]),
        # (batch, seq * 64 / 16, 16), then back through Shape of x.
        n("Mul", ["t", "sixty_four"], ["t64"]),
        n("Div", ["t64", "sixteen"], ["t4"]),
        n("Unsqueeze", ["t4", "axes0"], ["t41"]),
        n("Concat", ["b1", "t41", "sixteen_v"], ["shape3"], axis=0),
        n("Reshape", ["mt", "shape3"], ["r3"]),
        n("Shape", ["x"], ["shape_again"]),
        n("Reshape", ["r3", "shape_again"], ["z"]),
        # A mask of 0.5 of shape (batch, seq, 1), expanded to x's shape.
        n("Concat", ["b1", "t1", "one_v"], ["mask_shape"], axis=0),
        n("ConstantOfShape", ["mask_shape"], ["mask"],
          value=helper.make_tensor("half", TensorProto.FLOAT, [1], [0.5])),
        n("Expand", ["mask", "shape_again"], ["mask_x"]),
        n("Mul", ["z", "mask_x"], ["zm"]),
        # Positions 0..seq-1, as (1, seq, 1).
        n("Range", ["zero", "t", "one"], ["pos"]),
        n("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        n("Unsqueeze", ["posf", "axes02"], ["pos3"]),
        n("Add", ["zm", "pos3"], ["y"]),
    ]
    w = helper.make_tensor("W", TensorProto.FLOAT, [16, 16], w_values().ravel().tolist())
    graph = helper.make_graph(
        nodes, "shape_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 64])],
        [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="loom tests/onnx/make_models.py")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def bitwise():
    """The bit ops of opset 18 on unsigned types, which Loom holds widened
    (uint8 as int32) or as the int64 of their bits (uint64)."""
    n = helper.make_node
    nodes = [
        n("BitwiseAnd", ["a", "b"], ["and"]),
        n("BitwiseOr", ["a", "b"], ["or"]),
        n("BitwiseXor", ["a", "b"], ["xor"]),
        n("BitwiseNot", ["a"], ["not"]),
        n("BitShift", ["a", "sa"], ["shl"], direction="LEFT"),
        n("BitShift", ["x", "s"], ["shr"], direction="RIGHT"),
    ]
    u8 = lambda name: helper.make_tensor_value_info(name, TensorProto.UINT8, [4])
    u64 = lambda name: helper.make_tensor_value_info(name, TensorProto.UINT64, [5])
    graph = helper.make_graph(nodes, "bitwise", [u8("a"), u8("b"), u8("sa"), u64("x"), u64("s")],
                              [u8("and"), u8("or"), u8("xor"), u8("not"), u8("shl"), u64("shr")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def dynamic_batch():
    n = helper.make_node
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)
    big = 2**63 - 1
    nodes = [
        n("Resize", ["x", "", "scales"], ["up"], mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        n("Slice", ["x", "s1", "e1", "a0"], ["tail"]),
        n("Slice", ["x", "s2", "e2", "a0", "st2"], ["back"]),
    ]
    inits = [helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2]),
             i64("s1", [1]), i64("e1", [big]), i64("a0", [0]),
             i64("s2", [-1]), i64("e2", [-big]), i64("st2", [-1])]
    graph = helper.make_graph(
        nodes, "dynamic_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3, 4])],
        [helper.make_tensor_value_info("up", TensorProto.FLOAT, ["batch", 2, 6, 8]),
         helper.make_tensor_value_info("tail", TensorProto.FLOAT, [None, 2, 3, 4]),
         helper.make_tensor_value_info("back", TensorProto.FLOAT, ["batch", 2, 3, 4])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="loom tests/onnx/make_models.py")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def symbolic_values():
    n = helper.make_node
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)
    i, j = np.meshgrid(np.arange(10), np.arange(4), indexing="ij")
    pe = (i / 2 - j).astype(np.float32)
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "zero"], ["t"], axis=0),
        n("Unsqueeze", ["t", "a0"], ["tv"]),
        n("Slice", ["pe", "s0", "tv", "a0"], ["head"]),
        n("Unsqueeze", ["head", "a1"], ["head3"]),
        n("Add", ["x", "head3"], ["pos"]),
        n("Add", ["tv", "s1"], ["t1"]),
        n("Slice", ["pe", "s1", "t1", "a0", "st2"], ["odd"]),
        n("Cast", ["t"], ["tf"], to=TensorProto.FLOAT),
        n("Mul", ["x", "tf"], ["scaled"]),
        n("Sub", ["t", "one"], ["t_1"]),
        n("Gather", ["x", "t_1"], ["last"], axis=0),
        n("Range", ["t_1", "minus1", "minus1"], ["rev"]),
        n("Gather", ["x", "rev"], ["back"], axis=0),
    ]
    inits = [helper.make_tensor("pe", TensorProto.FLOAT, [10, 4], pe.ravel().tolist()),
             helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("minus1", TensorProto.INT64, [], [-1]),
             i64("a0", [0]), i64("a1", [1]), i64("s0", [0]), i64("s1", [1]), i64("st2", [2])]
    f = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
    graph = helper.make_graph(
        nodes, "symbolic_values", [f("x", ["T", "B", 4])],
        [f("pos", ["T", "B", 4]), f("odd", [None, 4]), f("scaled", ["T", "B", 4]),
         f("last", ["B", 4]), f("back", ["T", "B", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="loom tests/onnx/make_models.py")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    os.makedirs(out, exist_ok=True)
    onnx.save(shape_chain(), os.path.join(out, "shape_chain.onnx"))
    onnx.save(bitwise(), os.path.join(out, "bitwise.onnx"))
    onnx.save(dynamic_batch(), os.path.join(out, "dynamic_batch.onnx"))
    onnx.save(symbolic_values(), os.path.join(out, "symbolic_values.onnx"))
