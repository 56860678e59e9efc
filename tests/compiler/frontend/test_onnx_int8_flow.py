"""Small ONNX models an ML engineer brings, through ``compile_onnx``'s int8 flow on the
functional simulator, against onnxruntime: the float model (tensorfab's quantizer, within
int8's error) and onnxruntime's own QDQ model (exactly as onnxruntime executes it)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from ort_reference import reference_session

from tensorfab.compiler.frontend import OnnxImportError, quantize_onnx
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.runtime.interpreter import run_program

RNG = np.random.default_rng(20261128)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes: list[onnx.NodeProto], x_shape: tuple[int, ...],
          initializers: dict[str, np.ndarray], opset: int = 17,
          elem_type: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    """A graph of ``nodes`` from input ``x`` to output ``y``."""
    graph = helper.make_graph(
        nodes, "user_model", [helper.make_tensor_value_info("x", elem_type, x_shape)],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)
    return onnx.shape_inference.infer_shapes(m)


def run_int8(m: onnx.ModelProto, x: np.ndarray, calibration: np.ndarray | None = None,
             config: str | None = "default") -> np.ndarray:
    compiled = compile_onnx(m, config=config, calibration=calibration,
                            input_shapes={"x": x.shape})
    return run_program(compiled.program, {"x": x})


def check_float_model_in_int8(m: onnx.ModelProto, x: np.ndarray,
                              calibration: np.ndarray, tolerance: float = 0.1) -> None:
    """tensorfab's int8 result within ``tolerance`` of the float output's range
    (calibrated on ``x`` too: no value of it saturates)."""
    ref = reference_session(m).run(None, {"x": x})[0]
    ours = run_int8(m, x, np.concatenate([x, calibration]))
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= tolerance * np.abs(ref).max()


def check_qdq_model(m: onnx.ModelProto, x: np.ndarray, calibration: np.ndarray,
                    **quantizer_options: object) -> None:
    """onnxruntime's QDQ model of ``m``: tensorfab's int8 flow gives onnxruntime's
    result (the int8 arithmetic differs by at most one output step)."""
    qdq = quantize_onnx(m, [{"x": calibration[i:i + len(x)]}
                            for i in range(0, len(calibration), len(x))],
                        **quantizer_options)  # type: ignore[arg-type]
    ref = reference_session(qdq).run(None, {"x": x})[0]
    ours = run_int8(qdq, x)
    step = np.diff(np.unique(ref)).min()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1.01 * step)


def conv_then(nodes: list[onnx.NodeProto], initializers: dict[str, np.ndarray]
              ) -> onnx.ModelProto:
    """A 3x3 convolution ``x`` (2, 4, 6, 6) -> ``c`` (2, 8, 6, 6), then ``nodes``."""
    conv = helper.make_node("Conv", ["x", "W"], ["c"], name="conv0", pads=[1, 1, 1, 1])
    return model([conv, *nodes], (2, 4, 6, 6), {"W": f32(8, 4, 3, 3, scale=0.3),
                                                **initializers})


def test_clip_with_only_a_max_or_only_a_min_after_a_convolution() -> None:
    """Clip with its ``min`` input omitted crashed quantization (``float(None)`` in the
    PTQ, ``cannot convert float NaN to integer`` lowering a QDQ model)."""
    x, calib = f32(2, 4, 6, 6), f32(8, 4, 6, 6)
    for inputs, bounds in ((["c", "", "hi"], {"hi": np.array(0.3, np.float32)}),
                           (["c", "lo"], {"lo": np.array(0.0, np.float32)}),
                           (["c", "lo"], {"lo": np.array(-0.2, np.float32)})):
        m = conv_then([helper.make_node("Clip", inputs, ["y"], name="clip0")], bounds)
        check_float_model_in_int8(m, x, calib)
        check_qdq_model(m, x, calib)


def test_clip_with_min_above_max_gives_max_everywhere() -> None:
    """Clip(min=6, max=0): ONNX sets every value to max. onnxruntime's QDQ model of it
    (``--quantizer ort``) failed to compile with "clip bounds (..) must satisfy -32768 <=
    lo <= hi <= 32767", naming no node."""
    x, calib = f32(2, 4, 6, 6), f32(8, 4, 6, 6)
    conv = helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv0", pads=[1, 1, 1, 1])
    m = model([conv, helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip0")],
              (2, 4, 6, 6), {"W": f32(8, 4, 3, 3, scale=0.3), "B": f32(8, scale=0.1),
                             "lo": np.array(6.0, np.float32), "hi": np.array(0.0, np.float32)})
    np.testing.assert_allclose(reference_session(m).run(None, {"x": x})[0], 0.0)
    for quantizer in ("tensorfab", "ort"):
        compiled = compile_onnx(m, config="default", calibration=np.concatenate([x, calib]),
                                quantizer=quantizer, input_shapes={"x": x.shape})
        ours = run_program(compiled.program, {"x": x})
        np.testing.assert_allclose(ours, 0.0, atol=0.01)


def test_onnxruntime_quantizer_keeps_the_model_and_reads_a_reshape_shape() -> None:
    """``quantize_onnx`` (``--quantizer ort``) handed onnxruntime's pre-processing the
    ModelProto, which moved its initializers into external data in place: the caller's
    model then referred to a deleted ``foo.bin`` (onnxruntime and the checker refused
    it), and a Reshape's constant shape could not be read (``Data of TensorProto (...)
    should be stored in /tmp/pre.quant.../foo.bin``)."""
    m = conv_then([helper.make_node("Reshape", ["c", "shape"], ["t"], name="reshape0"),
                   helper.make_node("MatMul", ["t", "G"], ["y"], name="dense0")],
                  {"shape": np.array([2, 8, -1], np.int64), "G": f32(36, 5, scale=0.3)})
    before = m.SerializeToString()
    x, calib = f32(2, 4, 6, 6), f32(8, 4, 6, 6)
    quantize_onnx(m, [{"x": calib[:2]}])
    assert m.SerializeToString() == before
    compiled = compile_onnx(m, config="default", calibration=np.concatenate([x, calib]),
                            quantizer="ort", input_shapes={"x": x.shape})
    ref = reference_session(m).run(None, {"x": x})[0]
    ours = run_program(compiled.program, {"x": x})
    assert np.abs(ours - ref).max() <= 0.05 * np.abs(ref).max()
    check_qdq_model(m, x, calib)


def test_squeeze_excite_scale_written_first_in_asymmetric_uint8() -> None:
    """``Mul(sigmoid_scale, activation)`` (the scale first) of an asymmetric uint8 QDQ
    model: the accelerator's channel-scale program took the operands in either order
    but kept the zero points in the node's order, subtracting the activation's zero
    point from the scale and the other way round: almost every output was wrong by
    ~100 steps, silently."""
    conv = helper.make_node("Conv", ["x", "W"], ["a"], name="conv0", pads=[1, 1, 1, 1])
    nodes = [conv, helper.make_node("GlobalAveragePool", ["a"], ["g"], name="pool0"),
             helper.make_node("Conv", ["g", "W1"], ["h"], name="excite0"),
             helper.make_node("Sigmoid", ["h"], ["s"], name="gate0"),
             helper.make_node("Mul", ["s", "a"], ["y"], name="scale0")]
    m = model(nodes, (2, 4, 6, 6), {"W": f32(8, 4, 3, 3, scale=0.3),
                                    "W1": f32(8, 8, 1, 1, scale=0.3)})
    check_qdq_model(m, f32(2, 4, 6, 6), f32(8, 4, 6, 6), symmetric=False,
                    activation_dtype="uint8")


def test_one_output_channel_convolution_in_asymmetric_per_channel_qdq() -> None:
    """A convolution with one output channel (a mask or depth head) in onnxruntime's
    asymmetric per-channel QDQ form: its requantization (one scale, a zero point) was
    neither fixed-point form, the partitioner put it on the accelerator all the same,
    and compiling failed with ``AcceleratorLoweringError: fewer accelerator programs
    than accelerator convolutions``."""
    x, calib = f32(2, 4, 6, 6), f32(8, 4, 6, 6)
    for dtype in ("uint8", "int8"):
        head = helper.make_node("Conv", ["x", "W"], ["c"], name="head0", pads=[1, 1, 1, 1])
        m = model([head, helper.make_node("Relu", ["c"], ["y"], name="relu0")],
                  (2, 4, 6, 6), {"W": f32(1, 4, 3, 3, scale=0.3)})
        check_qdq_model(m, x, calib, symmetric=False, activation_dtype=dtype)


def qat_conv(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> onnx.ModelProto:
    """A quantization-aware-trained export: the float weight goes through
    QuantizeLinear and DequantizeLinear in the model, as the activations do."""
    w = f32(*w_shape, scale=0.3)
    q = helper.make_node
    nodes = [q("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             q("DequantizeLinear", ["xq", "sx", "z"], ["xd"]),
             q("QuantizeLinear", ["W", "sw", "z"], ["wq"], name="weight_q"),
             q("DequantizeLinear", ["wq", "sw", "z"], ["wd"], name="weight_dq"),
             q("Conv", ["xd", "wd"], ["c"], name="conv0"),
             q("QuantizeLinear", ["c", "sy", "z"], ["yq"]),
             q("DequantizeLinear", ["yq", "sy", "z"], ["y"])]
    return model(nodes, x_shape, {"W": w, "sx": np.array(0.03, np.float32),
                                  "sw": np.array(np.abs(w).max() / 127, np.float32),
                                  "sy": np.array(0.05, np.float32),
                                  "z": np.array(0, np.int8)}, opset=13)


def test_convolution_of_a_weight_quantized_in_the_model() -> None:
    """A QAT export quantizes its float weight in the graph. The weight's QuantizeLinear
    was not folded, so the convolution looked like a product of two activations and was
    lowered as a matmul: an input (1, 4, 6, 3) gave a (8, 4, 6, 3) matmul result instead
    of the (1, 8, 4, 1) convolution, silently, and other shapes failed with a
    TypeInferenceError about qnn.matmul_integer. Now the weight folds to int8 and the
    convolution runs on the accelerator, as onnxruntime computes it."""
    for x_shape in ((1, 4, 6, 3), (2, 4, 6, 6)):
        m = qat_conv(x_shape, (8, 4, 3, 3))
        x = f32(*x_shape)
        ref = reference_session(m).run(None, {"x": x})[0]
        compiled = compile_onnx(m, config="default", input_shapes={"x": x_shape})
        assert compiled.cpu_convolutions == ()
        ours = run_program(compiled.program, {"x": x})
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, rtol=0, atol=0.05 * 1.01)  # one step


def test_why_a_convolution_stayed_float_names_float16_and_asymmetric_weights() -> None:
    """A float16 model given calibration data, or a QDQ model with uint8 weights (zero
    point 128), ran its convolutions in float on the CPU with the reason 'not quantized
    to int8 (a float convolution)', though the user had asked for int8; the reason now
    says what kept it float."""
    conv = helper.make_node("Conv", ["x", "W"], ["y"], name="conv0", pads=[1, 1, 1, 1])
    half = model([conv], (2, 4, 6, 6), {"W": f32(8, 4, 3, 3, scale=0.3).astype(np.float16)},
                 elem_type=onnx.TensorProto.FLOAT16)
    x, calib = f32(2, 4, 6, 6).astype(np.float16), f32(8, 4, 6, 6).astype(np.float16)
    compiled = compile_onnx(half, config="default", calibration=calib,
                            input_shapes={"x": x.shape})
    assert "a float16 convolution: tensorfab's quantizer takes float32 ones; --quantizer " \
           "ort quantizes this model" in compiled.cpu_convolutions[0]
    by_ort = compile_onnx(half, config="default", calibration=np.concatenate([x, calib]),
                          quantizer="ort", input_shapes={"x": x.shape})
    assert by_ort.cpu_convolutions == ()
    ref = reference_session(half).run(None, {"x": x})[0].astype(np.float32)
    ours = run_program(by_ort.program, {"x": x}).astype(np.float32)
    assert np.abs(ours - ref).max() <= 0.05 * np.abs(ref).max()

    w = f32(8, 4, 3, 3, scale=0.3)
    sw = np.float32(np.abs(w).max() / 127)
    q = helper.make_node
    nodes = [q("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             q("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             q("DequantizeLinear", ["Wq", "sw", "zw"], ["wd"]),
             q("Conv", ["xd", "wd"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             q("QuantizeLinear", ["c", "sy", "zx"], ["yq"]),
             q("DequantizeLinear", ["yq", "sy", "zx"], ["y"])]
    uint8_weights = model(nodes, (2, 4, 6, 6), {
        "Wq": np.clip(np.rint(w / sw) + 100, 0, 255).astype(np.uint8),
        "sw": np.array(sw), "zw": np.array(100, np.uint8),
        "sx": np.array(0.03, np.float32), "zx": np.array(0, np.int8),
        "sy": np.array(0.05, np.float32)}, opset=13)
    compiled = compile_onnx(uint8_weights, config="default", input_shapes={"x": (2, 4, 6, 6)})
    assert "its weight's QDQ pair has zero points" in compiled.cpu_convolutions[0]
    x = f32(2, 4, 6, 6)
    np.testing.assert_allclose(run_program(compiled.program, {"x": x}),
                               reference_session(uint8_weights).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def test_onnxruntime_quantizer_failure_is_one_error_naming_the_model() -> None:
    """onnxruntime's quantizer failing inside (a Gemm whose C is (M, N) made it raise
    'The truth value of an array with more than one element is ambiguous' from
    qdq_quantizer.py; calibration data for an input the model lacks, an
    onnxruntime InvalidArgument) reached the user as a traceback through onnxruntime;
    now it is an OnnxImportError naming the model, the quantizer and the error."""
    m = conv_then([helper.make_node("Relu", ["c"], ["y"], name="relu0")], {})
    with pytest.raises(OnnxImportError, match=r"^quantize_onnx: onnxruntime's quantizer fails "
                                              r"on this model: .*image.*\(.* in .*\); "
                                              r"tensorfab's own quantizer"):
        quantize_onnx(m, [{"image": f32(2, 4, 6, 6)}])
    gemm = model([helper.make_node("Gemm", ["x", "W", "C"], ["y"], name="fc0", transB=1)],
                 (4, 16), {"W": f32(8, 16, scale=0.3), "C": f32(4, 8)})
    try:
        compile_onnx(gemm, config="default", calibration=f32(16, 16), quantizer="ort")
    except OnnxImportError as e:  # onnxruntime 1.32's quantizer fails on it
        assert str(e).startswith("<model>: quantize_onnx: onnxruntime's quantizer fails")
    x = f32(4, 16)
    ours = run_int8(gemm, x, np.concatenate([x, f32(16, 16)]))
    ref = reference_session(gemm).run(None, {"x": x})[0]
    assert np.abs(ours - ref).max() <= 0.05 * np.abs(ref).max()


def unoptimized_session(m: onnx.ModelProto) -> ort.InferenceSession:
    """onnxruntime without graph optimizations: QDQ as its definition (dequantize, float
    operator, quantize). Its fused integer kernels scale a per-channel weight by the
    output channel whatever the DequantizeLinear's axis, which is wrong here."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def weight_quantized_along(op: str, w: np.ndarray, axis: int, x_shape: tuple[int, ...],
                           zero_point: int = 0, **attrs: object) -> onnx.ModelProto:
    """``op`` of a QDQ activation and a weight quantized per channel along ``axis``."""
    others = tuple(i for i in range(w.ndim) if i != axis)
    sw = (np.abs(w).max(axis=others) / 127).astype(np.float32)
    per_axis = sw.reshape([-1 if i == axis else 1 for i in range(w.ndim)])
    q = helper.make_node
    nodes = [q("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             q("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             q("DequantizeLinear", ["Wq", "sw", "zw"], ["wd"], axis=axis),
             q(op, ["xd", "wd"], ["c"], name="layer0", **attrs),
             q("QuantizeLinear", ["c", "sy", "zx"], ["yq"]),
             q("DequantizeLinear", ["yq", "sy", "zx"], ["y"])]
    return model(nodes, x_shape, {
        "Wq": np.clip(np.rint(w / per_axis), -127, 127).astype(np.int8), "sw": sw,
        "zw": np.zeros(sw.shape, np.int8), "sx": np.array(0.03, np.float32),
        "zx": np.array(zero_point, np.int8), "sy": np.array(0.1, np.float32)}, opset=13)


@pytest.mark.parametrize("op, w_shape, axis, x_shape, zero_point, attrs", [
    ("MatMul", (16, 16), 0, (4, 16), 0, {}),
    ("MatMul", (16, 16), 0, (4, 16), 5, {}),
    ("Gemm", (16, 16), 1, (4, 16), 0, {"transB": 1}),
    ("Conv", (8, 8, 3, 3), 1, (2, 8, 6, 6), 0, {"pads": [1, 1, 1, 1]}),
    ("Conv", (8, 8, 3, 3), 1, (2, 8, 6, 6), 5, {"pads": [1, 1, 1, 1]}),
    ("Conv", (8, 8, 3, 3), 2, (2, 8, 6, 6), 0, {"pads": [1, 1, 1, 1]})])
def test_weight_quantized_per_channel_along_a_reduction_axis(
        op: str, w_shape: tuple, axis: int, x_shape: tuple, zero_point: int,
        attrs: dict) -> None:
    """A per-channel weight scale along an axis the layer sums over (a MatMul weight
    quantized per row, a Conv weight per input channel; a weight shared by a MatMul and
    a Gemm with transB gets one axis for both) was taken for per-output-channel scales:
    150-250 output steps off, silently (per kernel row: a TypeInferenceError). Such a
    layer now stays in float between its dequantize and quantize, as QDQ defines it."""
    w = f32(*w_shape, scale=0.3)
    w[:3] *= 8  # scales differing along every axis
    w[:, :3] *= 5
    m = weight_quantized_along(op, w, axis, x_shape, zero_point, **attrs)
    x = f32(*x_shape)
    ref = unoptimized_session(m).run(None, {"x": x})[0]
    compiled = compile_onnx(m, config="default", input_shapes={"x": x_shape})
    np.testing.assert_allclose(run_program(compiled.program, {"x": x}), ref, rtol=0,
                               atol=0.1 * 1.01)


def test_weight_shared_by_a_matmul_and_a_transposing_gemm() -> None:
    """onnxruntime's quantizer gives a weight read by MatMul(x, W) and Gemm(x, W,
    transB=1) one DequantizeLinear, per channel along MatMul's output axis, which is
    the Gemm's reduction axis."""
    w = f32(16, 16, scale=0.3)
    w[:, :4] *= 10
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm0"),
             helper.make_node("Gemm", ["x", "W"], ["b"], name="fc0", transB=1),
             helper.make_node("Add", ["a", "b"], ["y"], name="add0")]
    m = model(nodes, (4, 16), {"W": w})
    x, calib = f32(4, 16), f32(32, 16)
    qdq = quantize_onnx(m, [{"x": calib[i:i + 4]} for i in range(0, 32, 4)])
    ref = unoptimized_session(qdq).run(None, {"x": x})[0]
    ours = run_int8(qdq, x)
    step = np.diff(np.unique(ref)).min()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1.01 * step)


def test_quantized_model_given_calibration_data_is_not_quantized_again(tmp_path,
                                                                      capsys) -> None:
    """``tensorfab run qdq.onnx --quantizer ort`` (calibrating on the input, as run does
    without --calib) and ``compile qdq.onnx --calib ... --quantizer ort`` ran
    onnxruntime's quantizer on the QDQ model, which failed as '<model>: the onnx
    checker rejects the model: Graph must be in single static assignment (SSA) form'
    (and run said it calibrated on the input); an already quantized model is now
    compiled as it is."""
    from tensorfab.cli import main

    m = conv_then([helper.make_node("Relu", ["c"], ["y"], name="relu0")], {})
    x, calib = f32(2, 4, 6, 6), f32(8, 4, 6, 6)
    qdq = quantize_onnx(m, [{"x": calib[:2]}, {"x": calib[2:4]}])
    ref = reference_session(qdq).run(None, {"x": x})[0]
    for quantizer in ("ort", "tensorfab"):
        compiled = compile_onnx(qdq, config="default", calibration=calib,
                                quantizer=quantizer, input_shapes={"x": x.shape})
        np.testing.assert_array_equal(run_program(compiled.program, {"x": x}), ref)
    path, inputs, out = tmp_path / "qdq.onnx", tmp_path / "x.npy", tmp_path / "y.npy"
    onnx.save(qdq, path)
    np.save(inputs, x)
    assert main(["run", str(path), "--input", str(inputs), "--quantizer", "ort",
                 "-o", str(out)]) == 0
    assert "calibrating" not in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(out), ref)


def test_model_input_returned_as_an_output_stays_exact_in_int8() -> None:
    """A graph output that is the model's input (passed through next to the computed
    output) came back quantized and dequantized by tensorfab's quantizer (off by up to
    half an int8 step) instead of equal to the input, as onnxruntime returns it."""
    conv = helper.make_node("Conv", ["x", "W"], ["c"], name="conv0", pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [conv, helper.make_node("Relu", ["c"], ["y"], name="relu0")], "passthrough",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (2, 4, 6, 6))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, (2, 8, 6, 6)),
         helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (2, 4, 6, 6))],
        [numpy_helper.from_array(f32(8, 4, 3, 3, scale=0.3), "W")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 9)
    x = f32(2, 4, 6, 6)
    y, x_out = run_int8(m, x, np.concatenate([x, f32(8, 4, 6, 6)]))
    np.testing.assert_array_equal(x_out, x)
    ref = reference_session(m).run(None, {"x": x})[0]
    assert np.abs(y - ref).max() <= 0.05 * np.abs(ref).max()


def torch_view_model(multiply: bool) -> onnx.ModelProto:
    """``x.view(x.size(0), -1)`` (or ``x.size(1) * x.size(2) * x.size(3)``: ``multiply``)
    of a convolution's output, exported with a dynamic batch: Shape → Gather →
    Unsqueeze → Concat → Reshape, whose rank ONNX's shape inference leaves unknown."""
    q = helper.make_node
    nodes = [q("Conv", ["x", "W"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             q("Shape", ["c"], ["shape"]), q("Gather", ["shape", "zero"], ["n"], axis=0),
             q("Unsqueeze", ["n", "axis0"], ["n1"])]
    if multiply:
        nodes += [q("Gather", ["shape", "one"], ["c1"], axis=0),
                  q("Mul", ["c1", "k36"], ["features"]),
                  q("Unsqueeze", ["features", "axis0"], ["rest"])]
    else:
        nodes.append(q("Constant", [], ["rest"], value_ints=[-1]))
    nodes += [q("Concat", ["n1", "rest"], ["flat_shape"], axis=0),
              q("Reshape", ["c", "flat_shape"], ["flat"], name="view0"),
              q("Gemm", ["flat", "G"], ["y"], name="fc0", transB=1)]
    graph = helper.make_graph(
        nodes, "torch_export",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 6, 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(v, k) for k, v in {
            "W": f32(4, 3, 3, 3, scale=0.3), "G": f32(5, 144, scale=0.1),
            "zero": np.array(0, np.int64), "one": np.array(1, np.int64),
            "k36": np.array(36, np.int64), "axis0": np.array([0], np.int64)}.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_run_time_shape_of_unknown_rank_says_to_fix_the_input_shape() -> None:
    """A Reshape whose shape is computed at run time from a symbolic batch with
    arithmetic, and whose rank ONNX's shape inference leaves unknown, failed to compile
    for the CPU with '... with parameters computed at run time the rank must be known'
    and nothing to do about it; the error now gives the --shape that makes the shape a
    constant at import, with which it compiles."""
    m = torch_view_model(multiply=True)
    with pytest.raises(OnnxImportError, match=r"node 'view0' \(op_type Reshape, opset 13\)"
                                              r".*rank must be known: pass --shape "
                                              r"x=1,3,6,6"):
        compile_onnx(m)
    x = f32(2, 3, 6, 6)
    ours = run_program(compile_onnx(m, input_shapes={"x": x.shape}).program, {"x": x})
    np.testing.assert_allclose(ours, reference_session(m).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def test_pytorch_view_of_a_symbolic_batch_compiles_for_any_batch() -> None:
    """``x.view(x.size(0), -1)`` with a dynamic batch: the shape (N, -1) is known at
    import though computed at run time, so the Reshape is a static one over the symbol
    N (it failed with '... the rank must be known')."""
    m = torch_view_model(multiply=False)
    compiled = compile_onnx(m)
    for batch in (1, 3):
        x = f32(batch, 3, 6, 6)
        np.testing.assert_allclose(run_program(compiled.program, {"x": x}),
                                   reference_session(m).run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)


def _integer_conv_then_clip(kind: str, bounds: tuple[str, str]) -> onnx.ModelProto:
    """``xf`` (float) → QuantizeLinear → ``kind`` (ConvInteger: int32 sums; QLinearConv:
    int8) → Clip with each bound a constant (``const``), left out (``none``) or a graph
    input (``input``: ``b0``, ``b1``) → Cast to float ``y``."""
    from onnx import TensorProto

    out_type = TensorProto.INT32 if kind == "ConvInteger" else TensorProto.INT8
    dtype = np.int32 if kind == "ConvInteger" else np.int8
    w = RNG.integers(-20, 21, (8, 4, 3, 3)).astype(np.int8)
    inits = {"W": w, "qs": np.array(0.02, np.float32), "qz": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["xf", "qs", "qz"], ["x"], name="q0")]
    if kind == "ConvInteger":
        nodes.append(helper.make_node("ConvInteger", ["x", "W"], ["c"], name="conv0",
                                      pads=[1, 1, 1, 1]))
    else:
        inits.update(ws=np.array(0.01, np.float32), wz=np.array(0, np.int8),
                     ys=np.array(0.05, np.float32), yz=np.array(0, np.int8))
        nodes.append(helper.make_node("QLinearConv", ["x", "qs", "qz", "W", "ws", "wz", "ys",
                                                      "yz"], ["c"], name="conv0",
                                      pads=[1, 1, 1, 1]))
    inputs = [helper.make_tensor_value_info("xf", TensorProto.FLOAT, [2, 4, 6, 6])]
    names = []
    for i, (how, value) in enumerate(zip(bounds, (-5, 50), strict=True)):
        names.append("" if how == "none" else f"b{i}")
        if how == "const":
            inits[f"b{i}"] = np.array(value, dtype)
        elif how == "input":
            inputs.append(helper.make_tensor_value_info(f"b{i}", out_type, []))
    while names and not names[-1]:
        names.pop()
    nodes += [helper.make_node("Clip", ["c", *names], ["k"], name="clip0"),
              helper.make_node("Cast", ["k"], ["y"], name="cast0", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [2, 8, 6, 6])], [numpy_helper.from_array(v, k)
                                                 for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind", ["ConvInteger", "QLinearConv"])
@pytest.mark.parametrize("bounds", [("const", "const"), ("const", "none"), ("none", "const"),
                                    ("none", "none"), ("input", "input")])
def test_integer_convolution_then_clip_with_any_bounds(kind: str,
                                                       bounds: tuple[str, str]) -> None:
    """An integer convolution followed by Clip, compiled for the accelerator, failed
    inside the compiler: ConvInteger (int32 sums, no requantization) with 'fewer
    accelerator programs than accelerator convolutions' (its chain placed on the
    accelerator, which stores int8, then never lowered), QLinearConv's with a bound left
    out with "int() argument must be ... not 'NoneType'". Now ConvInteger stays on the
    CPU (and says why) and a missing bound is int8's: the accelerator's result equals
    the CPU kernels' exactly and onnxruntime's within its rounding (one int8 step)."""
    from tensorfab.runtime.accel_contract import accel_nodes

    m = _integer_conv_then_clip(kind, bounds)
    feeds = {"xf": f32(2, 4, 6, 6, scale=2.0)}
    if bounds[0] == "input":
        dtype = np.int32 if kind == "ConvInteger" else np.int8
        feeds.update(b0=np.array(-5, dtype), b1=np.array(50, dtype))
    want = reference_session(m).run(None, feeds)[0]
    compiled = compile_onnx(m, config="default")
    got = run_program(compiled.program, feeds)
    cpu = run_program(compile_onnx(m).program, feeds)
    np.testing.assert_array_equal(got, cpu)
    np.testing.assert_allclose(got, want, rtol=0, atol=0 if kind == "ConvInteger" else 1)
    on_accel = len(list(accel_nodes(compiled.program)))
    if kind == "ConvInteger":
        assert on_accel == 0
        assert any("no requantization to int8 follows it" in line
                   for line in compiled.cpu_convolutions)
    elif bounds[0] != "input":  # (bounds computed at run time: max/min on the CPU)
        assert on_accel == 1


def _int8_boundary_conv(form: str, int8_input: bool, int8_output: bool,
                        dtype: type = np.int8, x_zero_point: int | None = None
                        ) -> onnx.ModelProto:
    """``x`` (1, 8, 8, 8) → a 3x3 convolution to 16 channels → ``y``, as ``QLinearConv``
    or in QDQ form (``DequantizeLinear`` → ``Conv`` → ``QuantizeLinear``). ``x`` is the
    int8 graph input itself (else a float one, quantized first); ``y`` is the int8
    result itself (else dequantized to float); with ``dtype`` uint8 both are uint8 with
    zero point 128. Every node reads the one zero-point initializer ``z``, but with
    ``x_zero_point`` the input's nodes read their own, ``zx``, of that value. The
    scales multiply to 1 (0.5 · 0.25 / 0.125), so no result is rounded and any layout
    error shows as a wrong value."""
    from onnx import TensorProto

    rng = np.random.default_rng(8)
    inits = {"W": rng.integers(-3, 4, (16, 8, 3, 3)).astype(np.int8),
             "xs": np.array(0.5, np.float32), "ws": np.array(0.25, np.float32),
             "ys": np.array(0.125, np.float32), "wz": np.array(0, np.int8),
             "z": np.array(128 if dtype == np.uint8 else 0, dtype)}
    zx = "z"
    if x_zero_point is not None:
        zx, inits["zx"] = "zx", np.array(x_zero_point, dtype)
    x = "x" if int8_input else "xq"
    y = "y" if int8_output else "yq"
    nodes = [] if int8_input else [helper.make_node("QuantizeLinear", ["x", "xs", zx],
                                                    ["xq"], name="quantize_x")]
    if form == "QLinearConv":
        nodes.append(helper.make_node("QLinearConv", [x, "xs", zx, "W", "ws", "wz", "ys",
                                                      "z"], [y], name="conv0",
                                      pads=[1, 1, 1, 1]))
    else:
        nodes += [helper.make_node("DequantizeLinear", [x, "xs", zx], ["xf"], name="dq_x"),
                  helper.make_node("DequantizeLinear", ["W", "ws", "wz"], ["wf"],
                                   name="dq_w"),
                  helper.make_node("Conv", ["xf", "wf"], ["cf"], name="conv0",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", ["cf", "ys", "z"], [y], name="q_y")]
    if not int8_output:
        nodes.append(helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["y"],
                                      name="dq_y"))
    types = {True: helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
             False: TensorProto.FLOAT}
    graph = helper.make_graph(
        nodes, "int8_boundary",
        [helper.make_tensor_value_info("x", types[int8_input], [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", types[int8_output], [1, 16, 8, 8])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 9)
    return m


@pytest.mark.parametrize("form", ["QLinearConv", "QDQ"])
@pytest.mark.parametrize("int8_input, int8_output", [(True, False), (False, True),
                                                     (True, True)])
def test_int8_graph_input_and_output_at_an_accelerator_convolution(
        form: str, int8_input: bool, int8_output: bool) -> None:
    """An int8 graph input read by an accelerator convolution, and an int8 graph output
    computed by one, failed to compile with an internal LayoutPlanningError ("its data
    is a plain tensor already on the accelerator", "the result ... is a blocked tensor
    on accel(default)"): the partitioner placed the parameter and the result where the
    chain runs. Now they stay on the CPU, with a copy and a layout transform at the
    chain's borders: the convolution runs on the accelerator and its result equals
    onnxruntime's exactly (int8 where the model returns int8)."""
    from tensorfab.runtime.accel_contract import accel_nodes

    m = _int8_boundary_conv(form, int8_input, int8_output)
    rng = np.random.default_rng(9)
    x = (rng.integers(-8, 9, (1, 8, 8, 8)).astype(np.int8) if int8_input
         else (rng.integers(-8, 9, (1, 8, 8, 8)) * 0.5).astype(np.float32))
    want = reference_session(m).run(None, {"x": x})[0]
    assert np.abs(want.astype(np.float32)).max() >= (127 if int8_output else 15.875)
    compiled = compile_onnx(m, config="default")
    assert len(list(accel_nodes(compiled.program))) == 1
    got = run_program(compiled.program, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _equal_on_cpu_and_accelerator(m: onnx.ModelProto, x: np.ndarray, want: np.ndarray
                                  ) -> None:
    """``m`` compiled all on the CPU and for ``default`` (its convolution then one
    accelerator program) gives ``want`` on ``x`` exactly, of ``want``'s dtype."""
    from tensorfab.runtime.accel_contract import accel_nodes

    for config in (None, "default"):
        compiled = compile_onnx(m, config=config)
        assert len(list(accel_nodes(compiled.program))) == (config is not None)
        got = run_program(compiled.program, {"x": x})
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_uint8_graph_output_of_an_accelerator_convolution() -> None:
    """A uint8 graph output (onnxruntime's default activation type) computed by a
    QuantizeLinear came back as int8, every value 128 less: the asymmetric lowering
    computes uint8 tensors as int8 ones with their zero points shifted, and did not
    shift the model's result back. Now the result is onnxruntime's, uint8 and exact,
    with the convolution on the accelerator (QDQ form)."""

    m = _int8_boundary_conv("QDQ", False, True, np.uint8)
    x = (np.random.default_rng(10).integers(-8, 9, (1, 8, 8, 8)) * 0.5).astype(np.float32)
    want = reference_session(m).run(None, {"x": x})[0]
    assert want.dtype == np.uint8 and want.min() == 0 and want.max() == 255
    _equal_on_cpu_and_accelerator(m, x, want)


@pytest.mark.parametrize("form", ["QLinearConv", "QDQ"])
@pytest.mark.parametrize("uint8_input, uint8_output", [(False, False), (False, True),
                                                       (True, False), (True, True)])
@pytest.mark.parametrize("x_zero_point", [None, 100])
def test_uint8_convolution_with_uint8_input_output_and_zero_points(
        form: str, uint8_input: bool, uint8_output: bool, x_zero_point: int | None) -> None:
    """uint8 (asymmetric) convolutions, computed as int8 ones 128 less. QLinearConv on a
    uint8 QuantizeLinear failed to compile (``TypeInferenceError``: a zero point uint8,
    its tensor int8): its integer convolution and requantization were not shifted. A
    zero-point initializer shared by several nodes was shifted for all of them, also
    for one that stays uint8 (a uint8 model input's DequantizeLinear, QLinearConv's
    requantization): ``TypeInferenceError`` again. And a uint8 model input's
    DequantizeLinear was left uint8, so the convolution after it ran in float on the
    CPU. Now each reader gets its own shifted zero point, a uint8 input is shifted on
    the CPU (``x - 128``) and the convolution runs on the accelerator like the int8
    one (QLinearConv's with input zero point 100 too: see
    :func:`test_int8_qlinear_conv_with_an_input_zero_point_on_the_accelerator`); the
    result is onnxruntime's exactly (the scales multiply to 1), uint8 where the model
    returns uint8."""

    m = _int8_boundary_conv(form, uint8_input, uint8_output, np.uint8, x_zero_point)
    ints = np.random.default_rng(11).integers(-8, 9, (1, 8, 8, 8))
    x = ((ints + (x_zero_point or 128)).astype(np.uint8) if uint8_input
         else (ints * 0.5).astype(np.float32))
    want = reference_session(m).run(None, {"x": x})[0]
    _equal_on_cpu_and_accelerator(m, x, want)


@pytest.mark.parametrize("form", ["QLinearConv", "QDQ"])
@pytest.mark.parametrize("int8_input, int8_output", [(True, True), (False, False)])
@pytest.mark.parametrize("x_zero_point", [5, -7])
def test_int8_qlinear_conv_with_an_input_zero_point_on_the_accelerator(
        form: str, int8_input: bool, int8_output: bool, x_zero_point: int) -> None:
    """An integer convolution (QLinearConv's ``qnn.conv2d_integer``) whose int8 input
    has a nonzero zero point ran on the CPU, while its QDQ form went to the accelerator
    by the asymmetric lowering. Now both take that lowering: the input padded with its
    zero point (pads 1 around a 3x3 kernel: padding with 0 would change every border
    output), the zero point's share of the sums taken out by a bias, one accelerator
    program, onnxruntime's result exactly (the scales multiply to 1)."""

    m = _int8_boundary_conv(form, int8_input, int8_output, np.int8, x_zero_point)
    ints = np.random.default_rng(13).integers(-8, 9, (1, 8, 8, 8))
    x = ((ints + x_zero_point).astype(np.int8) if int8_input
         else (ints * 0.5).astype(np.float32))
    want = reference_session(m).run(None, {"x": x})[0]
    _equal_on_cpu_and_accelerator(m, x, want)


def test_qlinear_conv_with_a_bias_and_an_input_zero_point_on_the_accelerator() -> None:
    """QLinearConv with a bias and an int8 input zero point, scales that round: the
    zero point's correction joins the model's bias (one bias add in the accelerator's
    epilogue), the accelerator's result is the CPU kernels' exactly and onnxruntime's
    within one int8 step."""
    from onnx import TensorProto

    from tensorfab.runtime.accel_contract import accel_nodes

    rng = np.random.default_rng(14)
    inits = {"W": rng.integers(-20, 21, (8, 4, 3, 3)).astype(np.int8),
             "B": rng.integers(-300, 301, 8).astype(np.int32),
             "xs": np.array(0.02, np.float32), "xz": np.array(5, np.int8),
             "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8),
             "ys": np.array(0.05, np.float32), "yz": np.array(-3, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_x"),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "W", "ws", "wz", "ys", "yz",
                                              "B"], ["yq"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_y")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 9)
    x = f32(1, 4, 6, 6)
    want = reference_session(m).run(None, {"x": x})[0]
    compiled = compile_onnx(m, config="default")
    assert len(list(accel_nodes(compiled.program))) == 1
    got = run_program(compiled.program, {"x": x})
    np.testing.assert_array_equal(got, run_program(compile_onnx(m).program, {"x": x}))
    np.testing.assert_allclose(got, want, rtol=0, atol=0.05 * 1.0001)


def test_conv_integer_with_an_input_zero_point_is_exact() -> None:
    """ConvInteger with a nonzero input zero point (its input padded with it, the
    zero point's share taken out of the int32 sums): onnxruntime's sums exactly, on
    the CPU (no requantization follows) with and without an accelerator config."""
    from onnx import TensorProto

    rng = np.random.default_rng(15)
    inits = {"W": rng.integers(-20, 21, (8, 4, 3, 3)).astype(np.int8),
             "xz": np.array(-9, np.int8)}
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "W", "xz"], ["y"], name="conv0",
                          pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 8, 6, 6])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 9)
    x = rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8)
    want = reference_session(m).run(None, {"x": x})[0]
    for config in (None, "default"):
        np.testing.assert_array_equal(
            run_program(compile_onnx(m, config=config).program, {"x": x}), want)


def test_uint8_qlinear_matmul_and_a_zero_point_shared_with_a_uint8_reader() -> None:
    """QLinearMatMul on a uint8 QuantizeLinear failed to compile as QLinearConv did
    (``TypeInferenceError``). And a uint8 tensor read by an operator that does not
    commute with the shift by 128 (a Cast to float), whose zero point a
    DequantizeLinear shares, must be read as uint8 there and as int8 with a shifted
    zero point in the DequantizeLinear; a MaxPool between passes the shifted tensor on.
    Exact: the scales multiply to 1."""
    from onnx import TensorProto

    from tensorfab.runtime.accel_contract import accel_nodes

    q = helper.make_node
    rng = np.random.default_rng(12)
    scales = {"xs": np.array(0.5, np.float32), "ws": np.array(0.25, np.float32),
              "ys": np.array(0.125, np.float32), "wz": np.array(0, np.int8)}
    dense = model([q("QuantizeLinear", ["x", "xs", "z"], ["xq"], name="quantize_x"),
                   q("QLinearMatMul", ["xq", "xs", "z", "W", "ws", "wz", "ys", "zy"],
                     ["yq"], name="dense0"),
                   q("DequantizeLinear", ["yq", "ys", "zy"], ["y"], name="dq_y")],
                  (4, 16), {**scales, "W": rng.integers(-3, 4, (16, 12)).astype(np.int8),
                            "z": np.array(128, np.uint8), "zy": np.array(120, np.uint8)})
    x = (rng.integers(-8, 9, (4, 16)) * 0.5).astype(np.float32)
    want = reference_session(dense).run(None, {"x": x})[0]
    for config in (None, "default"):
        compiled = compile_onnx(dense, config=config)
        np.testing.assert_array_equal(run_program(compiled.program, {"x": x}), want)
    assert len(list(accel_nodes(compiled.program))) == 1

    cast = model([q("QuantizeLinear", ["x", "xs", "z"], ["xq"], name="quantize_x"),
                  q("MaxPool", ["xq"], ["xp"], name="pool0", kernel_shape=[2, 2]),
                  q("Cast", ["xp"], ["xc"], name="cast0", to=TensorProto.FLOAT),
                  q("DequantizeLinear", ["xp", "xs", "z"], ["xd"], name="dq_x"),
                  q("Add", ["xc", "xd"], ["y"], name="add0")],
                 (1, 4, 6, 6), {**scales, "z": np.array(120, np.uint8)})
    x = (rng.integers(-8, 9, (1, 4, 6, 6)) * 0.5).astype(np.float32)
    got = run_program(compile_onnx(cast).program, {"x": x})
    np.testing.assert_array_equal(got, reference_session(cast).run(None, {"x": x})[0])
