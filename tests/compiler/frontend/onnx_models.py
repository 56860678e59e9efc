"""Multi-node ONNX models made with onnx.helper from fixed seeds (a small CNN, a
BERT-style encoder layer, a QDQ-quantized conv net)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs,
                              initializer=[numpy_helper.from_array(v, k)
                                           for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    onnx.checker.check_model(model)
    return model


def small_cnn(opset: int = 13) -> onnx.ModelProto:
    """Conv-BN-Relu, MaxPool, depthwise Conv + Add residual, GAP, Flatten, Gemm, Softmax;
    a symbolic batch dim ``N``."""
    r = np.random.default_rng(100)
    f = np.float32
    inits = {
        "w1": r.standard_normal((8, 3, 3, 3)).astype(f) * 0.4, "b1": r.standard_normal(8).astype(f),
        "g": r.uniform(0.5, 1.5, 8).astype(f), "be": r.standard_normal(8).astype(f),
        "m": r.standard_normal(8).astype(f) * 0.1, "v": r.uniform(0.5, 1.5, 8).astype(f),
        "wd": r.standard_normal((8, 1, 3, 3)).astype(f) * 0.4,
        "fc": r.standard_normal((5, 8)).astype(f), "fcb": r.standard_normal(5).astype(f),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "g", "be", "m", "v"], ["bn"],
                         epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "wd"], ["dw"], group=8, auto_pad="SAME_UPPER"),
        helper.make_node("Add", ["dw", "p1"], ["res"]),
        helper.make_node("Clip", ["res", "lo", "hi"], ["cl"]),
        helper.make_node("GlobalAveragePool", ["cl"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["fl"]),
        helper.make_node("Gemm", ["fl", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
    ]
    inits["lo"] = np.array(0.0, f)
    inits["hi"] = np.array(6.0, f)
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        ["N", 3, 10, 10])],
                  [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 5])],
                  inits, opset)


def encoder_layer(batch: int = 2, seq: int = 6, d: int = 8, heads: int = 2,
                  opset: int = 17) -> onnx.ModelProto:
    """A BERT-style layer as exporters write it: Shape/Gather/Unsqueeze/Concat/Reshape
    chains, an attention mask from an int64 input, Erf GELU, LayerNormalization."""
    r = np.random.default_rng(200)
    f = np.float32
    dh = d // heads
    inits = {f"w{k}": r.standard_normal((d, d)).astype(f) * 0.3 for k in "qkvo"}
    inits |= {f"b{k}": r.standard_normal(d).astype(f) * 0.1 for k in "qkvo"}
    inits |= {"w1": r.standard_normal((d, 2 * d)).astype(f) * 0.3,
              "w2": r.standard_normal((2 * d, d)).astype(f) * 0.3,
              "ln_g": r.uniform(0.5, 1.5, d).astype(f), "ln_b": r.standard_normal(d).astype(f),
              "zero": np.array([0], np.int64), "one": np.array([1], np.int64),
              "heads": np.array([heads], np.int64), "dh": np.array([dh], np.int64),
              "dmodel": np.array([d], np.int64), "i0": np.array(0, np.int64),
              "i1": np.array(1, np.int64), "onef": np.array(1.0, f),
              "neg": np.array(-10000.0, f), "scale": np.array(1 / np.sqrt(dh), f),
              "half": np.array(0.5, f), "sqrt2": np.array(np.sqrt(2.0), f)}
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["xs"]),
        n("Gather", ["xs", "i0"], ["B"], axis=0),
        n("Gather", ["xs", "i1"], ["S"], axis=0),
        n("Unsqueeze", ["B", "zero"], ["B1"]),
        n("Unsqueeze", ["S", "zero"], ["S1"]),
        n("Concat", ["B1", "S1", "heads", "dh"], ["hshape"], axis=0),
        n("Concat", ["B1", "S1", "dmodel"], ["mshape"], axis=0),
        # mask: (1 - mask) * -10000, shaped (B, 1, 1, S)
        n("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        n("Sub", ["onef", "maskf"], ["inv"]),
        n("Mul", ["inv", "neg"], ["madd"]),
        n("Unsqueeze", ["madd", "one"], ["m1"]),
        n("Unsqueeze", ["m1", "one"], ["m2"]),
    ]
    for k in "qkv":
        nodes += [n("MatMul", ["x", f"w{k}"], [f"{k}0"]),
                  n("Add", [f"{k}0", f"b{k}"], [f"{k}1"]),
                  n("Reshape", [f"{k}1", "hshape"], [f"{k}2"]),
                  n("Transpose", [f"{k}2"], [f"{k}h"],
                    perm=[0, 2, 3, 1] if k == "k" else [0, 2, 1, 3])]
    nodes += [
        n("MatMul", ["qh", "kh"], ["sc0"]),
        n("Mul", ["sc0", "scale"], ["sc1"]),
        n("Add", ["sc1", "m2"], ["sc2"]),
        n("Softmax", ["sc2"], ["att"], axis=-1),
        n("Dropout", ["att"], ["attd"]),
        n("MatMul", ["attd", "vh"], ["ctx0"]),
        n("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", "mshape"], ["ctx"]),
        n("MatMul", ["ctx", "wo"], ["o0"]),
        n("Add", ["o0", "bo"], ["o1"]),
        n("Add", ["o1", "x"], ["res1"]),
        n("LayerNormalization", ["res1", "ln_g", "ln_b"], ["h"], epsilon=1e-5),
        n("MatMul", ["h", "w1"], ["u"]),
        n("Div", ["u", "sqrt2"], ["u1"]),
        n("Erf", ["u1"], ["u2"]),
        n("Add", ["u2", "onef"], ["u3"]),
        n("Mul", ["u", "u3"], ["u4"]),
        n("Mul", ["u4", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["f"]),
        n("Add", ["f", "h"], ["y"]),
    ]
    return _model(nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d]),
                   helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, seq])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d])],
                  inits, opset)


def qdq_cnn(opset: int = 13) -> onnx.ModelProto:
    """Q/DQ around a conv with int8 weights (per-channel), relu, a dense layer."""
    r = np.random.default_rng(300)
    f = np.float32
    inits = {
        "xs": np.array(0.02, f), "xz": np.array(0, np.int8),
        "wq": r.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8),
        "ws": r.uniform(0.002, 0.006, 6).astype(f), "wz": np.zeros(6, np.int8),
        "b": r.standard_normal(6).astype(f) * 0.1,
        "ys": np.array(0.05, f), "yz": np.array(-10, np.int8),
        "fq": r.integers(-127, 128, (6, 4)).astype(np.int8), "fs": np.array(0.01, f),
        "fz": np.array(0, np.int8),
    }
    n = helper.make_node
    nodes = [
        n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        n("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["rl"]),
        n("QuantizeLinear", ["rl", "ys", "yz"], ["rq"]),
        n("DequantizeLinear", ["rq", "ys", "yz"], ["rd"]),
        n("GlobalAveragePool", ["rd"], ["gp"]),
        n("Flatten", ["gp"], ["fl"]),
        n("DequantizeLinear", ["fq", "fs", "fz"], ["fd"]),
        n("MatMul", ["fl", "fd"], ["y"]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits, opset)
