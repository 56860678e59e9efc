"""A transformer block exported the usual way ([1, seq, hidden], Gelu of opset 20,
per-head attention matmuls) compiles with its linears and attention matmuls on the
accelerator: the compiled program on the functional simulator equals its integer graph
on the CPU kernels bit for bit, is close to onnxruntime's float, and every operator left
on the CPU is listed with a reason."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph.activation_matmul_lowering import activation_matmul_refusal
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.isa import get_config
from tensorfab.runtime.interpreter import run_program

SEQ, HIDDEN, HEADS, FFN = 16, 32, 2, 64
OPTIONS = {"activation_matmuls": True, "residual_adds": False, "per_channel_outputs": True}


def block_onnx(seed: int = 0):
    """Self-attention (2 heads) and a GELU feed-forward with residual adds and layer
    norms, input (1, SEQ, HIDDEN)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x, k, n, name):
        w = const(f"{name}.w", (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
        b = const(f"{name}.b", (rng.standard_normal(n) * 0.1).astype(np.float32))
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), b], f"{name}.out")

    d = HIDDEN // HEADS
    heads = const("heads", np.array([1, SEQ, HEADS, d], np.int64))
    q = node("Transpose", [node("Reshape", [linear("x", HIDDEN, HIDDEN, "q"), heads], "qh")],
             "qt", perm=[0, 2, 1, 3])
    k = node("Transpose", [node("Reshape", [linear("x", HIDDEN, HIDDEN, "k"), heads], "kh")],
             "kt", perm=[0, 2, 3, 1])
    v = node("Transpose", [node("Reshape", [linear("x", HIDDEN, HIDDEN, "v"), heads], "vh")],
             "vt", perm=[0, 2, 1, 3])
    s = node("Mul", [node("MatMul", [q, k], "s"), const("scale", np.float32(d ** -0.5))],
             "ss")
    p = node("Softmax", [s], "p", axis=-1)
    c = node("Reshape", [node("Transpose", [node("MatMul", [p, v], "c")], "ct",
                              perm=[0, 2, 1, 3]),
                         const("merged", np.array([1, SEQ, HIDDEN], np.int64))], "cm")
    gamma = const("gamma", np.ones(HIDDEN, np.float32))
    beta = const("beta", np.zeros(HIDDEN, np.float32))
    h = node("LayerNormalization", [node("Add", [linear(c, HIDDEN, HIDDEN, "o"), "x"], "r1"),
                                    gamma, beta], "h", axis=-1)
    f = node("Gelu", [linear(h, HIDDEN, FFN, "f1")], "g")
    node("LayerNormalization", [node("Add", [linear(f, FFN, HIDDEN, "f2"), h], "r2"),
                                gamma, beta], "y", axis=-1)
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.fixture(scope="module")
def compiled():
    model = block_onnx()
    calib = np.random.default_rng(1).standard_normal((8, SEQ, HIDDEN)).astype(np.float32)
    return model, compile_onnx(model, config="default", calibration=calib,
                               quantize_options=OPTIONS)


def test_linears_and_attention_matmuls_get_programs(compiled) -> None:
    _, cm = compiled
    layers = [e.attrs["layer"] for e in post_order(cm.function)
              if isinstance(e, Call) and e.op == "accel.program"]
    assert len(layers) == 8  # q, k, v, o, f1, f2 and the two attention matmuls
    assert sum(layer.startswith("batch_matmul 2x16x16x16") for layer in layers) == 2
    ops = {e.op for e in post_order(cm.function) if isinstance(e, Call)}
    assert "qnn.matmul_integer" not in ops and "matmul" not in ops


def test_every_cpu_operator_has_a_reason(compiled) -> None:
    _, cm = compiled
    by_op = {line.split(" x")[0]: line for line in cm.cpu_operators}
    assert {"nn.layer_norm", "nn.softmax", "erf", "qnn.quantize"} <= by_op.keys()
    assert all(": " in line and line.split(": ", 1)[1] for line in cm.cpu_operators)
    assert "GELU" in by_op["erf"] and "softmax" in by_op["nn.softmax"]


def test_accelerator_run_is_the_integer_graph_and_close_to_float(compiled) -> None:
    model, cm = compiled
    x = np.random.default_rng(2).standard_normal((1, SEQ, HIDDEN)).astype(np.float32)
    got = np.asarray(run_program(cm.program, {"x": x}))  # accel.program on fsim
    exact = np.asarray(evaluate(cm.integer_function, {"x": x}))
    np.testing.assert_array_equal(got, exact)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    cos = (got * want).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))
    assert cos.min() > 0.98, cos


def test_without_the_transformer_options_3d_linears_still_reach_the_accelerator() -> None:
    """The issue's new user: the same block with default quantization still gets its
    dense layers as programs (3-D MatMul is no longer left on the CPU)."""
    calib = np.random.default_rng(1).standard_normal((4, SEQ, HIDDEN)).astype(np.float32)
    cm = compile_onnx(block_onnx(), config="default", calibration=calib)
    n = sum(isinstance(e, Call) and e.op == "accel.program" for e in post_order(cm.function))
    assert n == 6
    assert any(line.startswith("matmul x2: not quantized") for line in cm.cpu_operators)


def test_activation_matmul_refusals_name_the_rule() -> None:
    from tensorfab.compiler.graph import builder as gb

    a = gb.var("a", (1, 2, 16, 8), "int8")
    b = gb.var("b", (1, 2, 8, 12), "int8")
    z = np.zeros((), np.int8)
    fn = gb.function([a, b], gb.matmul_integer(a, b, z, z))
    mm = fn.body
    why = activation_matmul_refusal(mm, get_config("default"))
    assert why is not None and "block_out 16" in why and "columns 12" in why


def test_compile_command_lists_every_cpu_operator(tmp_path, capsys) -> None:
    """``tensorfab compile`` of the block as a new user runs it: its 3-D dense layers
    become programs, and the JSON lists every CPU operator with its reason."""
    import json

    import onnx

    from tensorfab.cli import main

    onnx.save(block_onnx(), tmp_path / "block.onnx")
    np.save(tmp_path / "calib.npy",
            np.random.default_rng(1).standard_normal((4, SEQ, HIDDEN)).astype(np.float32))
    assert main(["compile", str(tmp_path / "block.onnx"), "--config", "default", "--calib",
                 str(tmp_path / "calib.npy"), "-o", str(tmp_path / "block.tfm"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["accel_programs"] == 6
    reasons = dict(line.split(": ", 1) for line in out["cpu_operators"])
    assert reasons["matmul x2"].startswith("not quantized to int8")
    assert "softmax" in reasons["nn.softmax x1"]
