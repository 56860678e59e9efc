"""MobileNetV3's activations: hard-swish spelled out in ONNX recognized as ``hard_swish``,
hard-sigmoid folded into the convolution before it (both checked against onnxruntime on
the float model), and in int8 the whole block — hard-swish, squeeze-excite's pooling,
gate and channel-wise scale — on the accelerator, equal to the CPU integer graph and
close to float."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.compiler.frontend import from_onnx
from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.ir import Call, post_order
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.mobile_activations import fold_hard_sigmoid, recognize_hard_swish
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models.cnn_topologies import mobilenet_v3_block
from tensorfab.runtime.profiling import profile_program
from tensorfab.sim import get_device


def _ops(fn) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.op for e in post_order(fn) if isinstance(e, Call)]


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _input(seed: int, n: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (n, 3, 16, 16)).astype(np.float32)


def test_rewrites_keep_the_float_values() -> None:
    model = mobilenet_v3_block()
    fn = fold_constants(fold_batch_norm(from_onnx(model)))
    rewritten = fold_hard_sigmoid(recognize_hard_swish(fn))
    ops = _ops(rewritten)
    assert ops.count("hard_swish") == 2 and "hard_sigmoid" not in ops
    assert "divide" not in ops and ops.count("clip") == 1  # the folded gate's clip(0, 1)
    x = _input(0)
    np.testing.assert_allclose(evaluate(rewritten, [x]), _ort(model, x), rtol=1e-4,
                               atol=1e-5)


def _swish_model(divisor: float, shared: bool = True) -> onnx.ModelProto:
    """``x · clip(x + 3, 0, 6) / divisor`` of a convolution's output ``x`` (``shared``:
    the same tensor in both places)."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("three", 3.0), ("zero", 0.0), ("six", 6.0), ("d", divisor))]
    inits.append(numpy_helper.from_array(
        np.random.default_rng(0).normal(0, 1, (4, 2, 1, 1)).astype(np.float32), "w"))
    other = "x" if shared else "x2"
    nodes = [helper.make_node("Conv", ["in", "w"], ["x"]),
             helper.make_node("Conv", ["in", "w"], ["x2"]),
             helper.make_node("Add", [other, "three"], ["a"]),
             helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
             helper.make_node("Mul", ["x", "c"], ["m"]),
             helper.make_node("Div", ["m", "d"], ["y"])]
    graph = helper.make_graph(nodes, "swish",
                              [helper.make_tensor_value_info("in", TensorProto.FLOAT,
                                                             (1, 2, 3, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             (1, 4, 3, 3))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(("divisor", "shared", "found"), [
    (6.0, True, True), (5.0, True, False), (6.0, False, False)])
def test_only_hard_swish_itself_is_recognized(divisor, shared, found) -> None:
    fn = fold_constants(from_onnx(_swish_model(divisor, shared)))
    assert ("hard_swish" in _ops(recognize_hard_swish(fn))) is found


def test_hard_sigmoid_of_a_shared_convolution_is_not_folded() -> None:
    inits = [numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["in", "w", "b"], ["c"]),
             helper.make_node("HardSigmoid", ["c"], ["g"]),
             helper.make_node("Add", ["c", "g"], ["y"])]
    graph = helper.make_graph(nodes, "hs",
                              [helper.make_tensor_value_info("in", TensorProto.FLOAT,
                                                             (1, 2, 3, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             (1, 2, 3, 3))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    fn = fold_constants(from_onnx(model))
    assert "hard_sigmoid" in _ops(fold_hard_sigmoid(fn))


def _ort_uint8(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's default static quantization of ``model`` (uint8 QDQ)."""
    from tensorfab.compiler.frontend import quantize_onnx

    return quantize_onnx(model, [{"x": c[None]} for c in _input(1, 8)], symmetric=False,
                         preprocess=False, activation_dtype="uint8")


def test_qdq_forms_are_recognized_through_their_rounding_points() -> None:
    """onnxruntime's QDQ model spells hard-swish with a quantize/dequantize pair after
    each operator and drops the Clip (the pair after the Add represents [0, 6]); the
    gate's convolution is quantized before HardSigmoid. Both rewrites see through the
    pairs; the rewritten graph rounds once per pattern, so its values stay within a
    few output steps of the QDQ graph's."""
    qdq = _ort_uint8(mobilenet_v3_block())
    fn = fold_constants(from_onnx(qdq))
    assert "clip" not in _ops(fn)
    rewritten = fold_hard_sigmoid(recognize_hard_swish(fn))
    ops = _ops(rewritten)
    assert ops.count("hard_swish") == 2 and "hard_sigmoid" not in ops
    assert "divide" not in ops and ops.count("multiply") == 1  # squeeze-excite's scale
    step = float(next(numpy_helper.to_array(i) for i in qdq.graph.initializer
                      if i.name == "fc_scale"))
    for seed in range(3):
        x = _input(10 + seed)
        assert np.abs(evaluate(rewritten, [x]) - evaluate(fn, [x])).max() <= 3 * step


def test_a_quantized_add_without_the_clip_range_is_no_hard_swish() -> None:
    qdq = _ort_uint8(mobilenet_v3_block())
    for init in qdq.graph.initializer:  # the stem's pair now represents [0, 7]
        if init.name == "stem.hswish.clip_scale":
            init.CopyFrom(numpy_helper.from_array(np.array(7 / 255, np.float32), init.name))
    fn = fold_constants(from_onnx(qdq))
    assert _ops(recognize_hard_swish(fn)).count("hard_swish") == 1


def test_ort_uint8_block_stays_on_the_accelerator() -> None:
    """The QDQ model's hard-swish, gate and scale run as int8 programs with zero points,
    bit-exact against the integer graph, closer to float than onnxruntime's own QDQ
    arithmetic plus one step."""
    model = mobilenet_v3_block()
    qdq = _ort_uint8(model)
    float_model = mobilenet_v3_block()
    compiled = compile_onnx(qdq, config="default")
    float_ops = [op for op in compiled.cpu_operators if op.split()[0] in (
        "multiply", "add", "clip", "divide", "hard_swish", "hard_sigmoid",
        "nn.global_avg_pool2d", "qnn.mul_q31", "qnn.hard_swish_q31")]
    assert float_ops == []
    step = float(next(numpy_helper.to_array(i) for i in qdq.graph.initializer
                      if i.name == "fc_scale"))
    for seed in range(3):
        x = _input(20 + seed)
        profile = profile_program(compiled.program, {"x": x}, get_device("fsim"))
        if seed == 0:
            layers = [r.op for r in profile.layers if r.device == "accel"]
            assert sum(op.startswith("hard_swish") for op in layers) == 2
            assert sum(op.startswith("mul_q31") for op in layers) == 1
        np.testing.assert_array_equal(profile.output,
                                      evaluate(compiled.integer_function, [x]))
        want = _ort(float_model, x)
        ort_error = np.abs(_ort(qdq, x) - want).max()
        assert np.abs(np.asarray(profile.output) - want).max() <= ort_error + step


def test_int8_block_stays_on_the_accelerator() -> None:
    model = mobilenet_v3_block()
    compiled = compile_onnx(model, config="default", calibration=_input(1, 8))
    float_ops = [op for op in compiled.cpu_operators if op.split()[0] in (
        "multiply", "add", "clip", "divide", "hard_swish", "hard_sigmoid",
        "nn.global_avg_pool2d", "qnn.mul_q31", "qnn.hard_swish_q31",
        "qnn.global_avg_pool_q31")]
    assert float_ops == []
    x = _input(2)
    profile = profile_program(compiled.program, {"x": x}, get_device("fsim"))
    layers = [r.op for r in profile.layers if r.device == "accel"]
    assert sum(op.startswith("hard_swish") for op in layers) == 2
    assert sum(op.startswith("global_avg_pool") for op in layers) == 2
    assert sum(op.startswith("mul_q31") for op in layers) == 1
    np.testing.assert_array_equal(profile.output, evaluate(compiled.integer_function, [x]))
    want = _ort(model, x).ravel().astype(np.float64)
    got = np.ravel(profile.output).astype(np.float64)
    assert got @ want / np.linalg.norm(got) / np.linalg.norm(want) > 0.99


@pytest.mark.parametrize(("op", "attrs", "message"), [
    ("qnn.hard_swish_q31", {"offset": 3, "upper": 40000, "multiplier": 1 << 30, "shift": 0},
     r"offset 3 and upper 40000 must satisfy 0 <= offset <= upper <= 32767"),
    ("qnn.hard_swish_q31", {"t_shift": 17, "offset": 3, "upper": 6, "multiplier": 1,
                            "shift": 0}, r"t_shift 17 outside 0..16"),
    ("qnn.global_avg_pool_q31", {"multiplier": 1, "shift": 0, "input_zero_point": 300},
     r"input_zero_point 300 outside -128..127"),
    ("qnn.global_avg_pool_q31", {"multiplier": 1, "shift": 0, "left_shift": 25},
     r"left_shift 25 \(with shift 0\) lets values up to 128 overflow 32 bits"),
    ("qnn.global_avg_pool_q31", {"multiplier": 1, "shift": 0, "left_shift": 2,
                                 "rounding": "single"},
     r"left_shift 2 with rounding='single'"),
    ("qnn.global_avg_pool_q31", {"multiplier": 1, "shift": 0, "rounding": "triple"},
     r"rounding='triple'; expected 'double' or 'single'")])
def test_vector_operators_name_bad_attributes(op, attrs, message) -> None:
    from tensorfab.compiler.graph.infer import infer_types
    from tensorfab.compiler.graph.ir import Var
    from tensorfab.compiler.graph.types import TensorType, TypeInferenceError

    x = Var("x", TensorType((1, 16, 1, 1), "int8"))
    with pytest.raises(TypeInferenceError, match=rf"in call {op}.*{message}"):
        infer_types(Call(op, [x], attrs))
