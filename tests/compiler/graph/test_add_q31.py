"""Residual adds in int8 (``qnn.add_q31``): TFLite's int8 ADD as the reference, QDQ
models by onnxruntime, and tensorfab's own post-training quantization."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_reference import reference_session
from support.gemmlowp_reference import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.infer import infer_types
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.ptq import quantize_graph
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.compiler.graph.types import GraphError
from tensorfab.runtime.kernels import KERNELS


def tflite_add(a: np.ndarray, b: np.ndarray, sa: float, sb: float, sy: float) -> np.ndarray:
    """TFLite reference_ops::Add for int8 with zero points 0 (double-precision set-up)."""
    left = 20
    twice_max = 2 * max(sa, sb)
    ma, ea = quantize_multiplier(sa / twice_max)
    mb, eb = quantize_multiplier(sb / twice_max)
    mo, eo = quantize_multiplier(twice_max / ((1 << left) * sy))
    a2 = multiply_by_quantized_multiplier(a.astype(np.int64) << left, ma, ea)
    b2 = multiply_by_quantized_multiplier(b.astype(np.int64) << left, mb, eb)
    y = multiply_by_quantized_multiplier(a2 + b2, mo, eo)
    return np.clip(y, -128, 127).astype(np.int8)


def _attrs(sa: float, sb: float, sy: float) -> dict:
    twice_max = 2 * max(sa, sb)
    out = {"left_shift": 20, "zero_point": 0}
    for k, real in (("a", sa / twice_max), ("b", sb / twice_max),
                    ("out", twice_max / ((1 << 20) * sy))):
        out[f"{k}_multiplier"], out[f"{k}_shift"] = quantize_multiplier(real)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_kernel_equals_tflite_int8_add_and_is_within_one_lsb_of_float(seed) -> None:
    r = np.random.default_rng(seed)
    a = r.integers(-128, 128, 20000).astype(np.int8)
    b = r.integers(-128, 128, 20000).astype(np.int8)
    sa, sb = (float(np.float32(10 ** r.uniform(-3, -1))) for _ in range(2))
    sy = float(np.float32((sa + sb) * r.uniform(0.6, 2.0)))
    got = KERNELS["qnn.add_q31"]([a, b], _attrs(sa, sb, sy))
    np.testing.assert_array_equal(got, tflite_add(a, b, sa, sb, sy))
    exact = np.clip(np.rint((a * np.float64(sa) + b * np.float64(sb)) / sy), -128, 127)
    assert np.abs(got - exact).max() <= 1


def test_bad_attributes_name_the_call() -> None:
    x = gb.var("x", (1, 4, 2, 2), "int8")
    y = gb.var("y", (1, 4, 2, 2), "int8")
    attrs = {**_attrs(0.1, 0.1, 0.2), "left_shift": 30}
    with pytest.raises(GraphError, match=r"qnn.add_q31.*left_shift 30"):
        gb.function([x, y], Call("qnn.add_q31", [x, y], attrs))
    attrs = {**_attrs(0.1, 0.1, 0.2), "b_multiplier": 1 << 31}
    with pytest.raises(GraphError, match=r"qnn.add_q31.*b: multiplier 2147483648 must be"):
        gb.function([x, y], Call("qnn.add_q31", [x, y], attrs))
    attrs = {**_attrs(0.1, 0.1, 0.2), "out_shift": 31}
    with pytest.raises(GraphError, match=r"qnn.add_q31.*out: .* shift 31 in -31..30"):
        gb.function([x, y], Call("qnn.add_q31", [x, y], attrs))
    attrs = {**_attrs(0.1, 0.1, 0.2), "zero_point": 200}
    with pytest.raises(GraphError, match=r"qnn.add_q31.*zero_point 200 outside -128..127"):
        gb.function([x, y], Call("qnn.add_q31", [x, y], attrs))


def test_accel_program_third_argument_needs_its_segment() -> None:
    x = gb.var("x", (1, 4, 2, 2), "int8")
    y = gb.var("y", (1, 4, 2, 2), "int8")
    blob = gb.var("p", (8,), "uint8")
    with pytest.raises(GraphError, match=r"accel.program.*a third argument needs "
                       r"extra_input_segment"):
        gb.function([x, blob, y], Call("accel.program", [x, blob, y],
                                       {"out_shape": (1, 4, 2, 2)}))


def residual_block_onnx(seed: int = 0) -> onnx.ModelProto:
    """conv-relu-conv, + the block input, relu; then a second identical block."""
    rng = np.random.default_rng(seed)
    inits, nodes, prev = [], [], "x"
    for blk in range(2):
        for i in range(2):
            name = f"w{blk}{i}"
            inits += [numpy_helper.from_array(
                (rng.standard_normal((16, 16, 3, 3)) * 0.12).astype(np.float32), name),
                numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32),
                                        f"b{blk}{i}")]
        nodes += [
            helper.make_node("Conv", [prev, f"w{blk}0", f"b{blk}0"], [f"c{blk}0"], pads=[1] * 4),
            helper.make_node("Relu", [f"c{blk}0"], [f"r{blk}0"]),
            helper.make_node("Conv", [f"r{blk}0", f"w{blk}1", f"b{blk}1"], [f"c{blk}1"],
                             pads=[1] * 4),
            helper.make_node("Add", [f"c{blk}1", prev], [f"s{blk}"]),
            helper.make_node("Relu", [f"s{blk}"], [f"y{blk}"])]
        prev = f"y{blk}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 16, 8, 8]) for n in "xy"]
    graph = helper.make_graph(nodes, "blocks", [io[0]], [io[1]], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _adds(f) -> int:
    return sum(isinstance(e, Call) and e.op == "qnn.add_q31" for e in post_order(f))


def test_onnxruntime_qdq_residual_adds_lower_to_int8_within_one_lsb() -> None:
    r = np.random.default_rng(2)
    calib = [{"x": np.maximum(r.standard_normal((2, 16, 8, 8)), 0).astype(np.float32)}
             for _ in range(4)]
    qdq = quantize_onnx(residual_block_onnx(), calib, per_channel=True)
    g = lower_qdq(fold_constants(from_onnx(qdq)))
    assert _adds(g) == 2
    x = np.maximum(r.standard_normal((2, 16, 8, 8)), 0).astype(np.float32)
    want = reference_session(qdq).run(None, {"x": x})[0]
    got = evaluate(g, {"x": x})
    # the output's quantization step: the last QuantizeLinear's scale
    last_q = [n for n in qdq.graph.node if n.op_type == "QuantizeLinear"][-1]
    step = float(next(numpy_helper.to_array(i) for i in qdq.graph.initializer
                      if i.name == last_q.input[1]))
    diff = np.rint(np.abs(got - want) / step)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.999


def test_tensorfab_ptq_quantizes_residual_adds() -> None:
    r = np.random.default_rng(3)
    f = fold_constants(from_onnx(residual_block_onnx()))
    batches = [{"x": np.maximum(r.standard_normal((2, 16, 8, 8)), 0).astype(np.float32)}
               for _ in range(4)]
    g = lower_qdq(fold_constants(quantize_graph(f, batches)))
    assert _adds(g) == 2
    infer_types(g)
    float_adds = [e for e in post_order(g) if isinstance(e, Call) and e.op == "add"
                  and e.checked_type.dtype == "float32"]
    assert not float_adds  # the only adds left are the convolutions' int32 biases
    x = batches[0]["x"]
    want, got = evaluate(f, {"x": x}), evaluate(g, {"x": x})
    # int8 end to end: within a few output steps of float
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
