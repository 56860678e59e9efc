"""Standard CNN topologies (small, seeded: AlexNet's groups=2 convolutions, a ShuffleNet
stage, a DenseNet block) compile and run float and int8, with every MAC of the model on
the accelerator: tensorfab's quantizer and onnxruntime's asymmetric uint8 QDQ models.

References: onnxruntime on the float model and on the QDQ model, and the CPU integer
graph (fsim must equal it bit for bit).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ort_reference import reference_session

from tensorfab.compiler.frontend import quantize_onnx
from tensorfab.compiler.frontend.onnx_macs import onnx_macs
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models.cnn_topologies import TOPOLOGIES
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.profiling import profile_program
from tensorfab.sim import get_device


def _shape(model: onnx.ModelProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)


def _data(model: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray]:
    """(calibration batch of 8, one test input), seeded."""
    shape = _shape(model)
    rng = np.random.default_rng(1)
    return (rng.normal(0, 1, (8, *shape[1:])).astype(np.float32),
            rng.normal(0, 1, shape).astype(np.float32))


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return reference_session(model).run(None, {"x": x})[0]


def _uint8_qdq(model: onnx.ModelProto, calib: np.ndarray) -> onnx.ModelProto:
    """onnxruntime's default static quantization: uint8 activations with zero points,
    per-channel int8 weights, QDQ format."""
    return quantize_onnx(model, [{"x": c[None]} for c in calib], symmetric=False,
                         preprocess=False, activation_dtype="uint8")


def _run_on_fsim(compiled, x: np.ndarray):  # type: ignore[no-untyped-def]
    """(fsim profile, the CPU integer graph's output)."""
    profile = profile_program(compiled.program, {"x": x}, get_device("fsim"))
    return profile, evaluate(compiled.integer_function, [x])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_float_on_the_cpu_equals_onnxruntime(name: str) -> None:
    model = TOPOLOGIES[name]()
    _, x = _data(model)
    compiled = compile_onnx(model)
    np.testing.assert_allclose(run_program(compiled.program, [x]), _ort(model, x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_int8_runs_every_mac_on_the_accelerator(name: str) -> None:
    model = TOPOLOGIES[name]()
    calib, x = _data(model)
    compiled = compile_onnx(model, config="default", calibration=calib)
    assert compiled.cpu_convolutions == ()
    profile, want = _run_on_fsim(compiled, x)
    np.testing.assert_array_equal(profile.output, want)
    # every MAC of the model, and no more (a batch norm's scale counts none)
    assert profile.accel_macs == onnx_macs(model, {"x": _shape(model)})
    assert _cosine(profile.output, _ort(model, x)) > 0.99


def test_batch_norm_after_a_concatenation_runs_on_the_accelerator() -> None:
    """DenseNet's toy grows by 8 channels, half a block: its concatenations gather lanes
    of both inputs, its batch norms are programs of their own, and the block runs on the
    accelerator from the stem's input to the pooling."""
    model = TOPOLOGIES["densenet_block"]()
    calib, x = _data(model)
    compiled = compile_onnx(model, config="default", calibration=calib)
    cpu = [op.split()[0] for op in compiled.cpu_operators]
    assert not set(cpu) & {"multiply", "add", "relu", "nn.batch_norm", "concatenate",
                           "qnn.concat_q31", "qnn.global_avg_pool_q31"}
    profile, want = _run_on_fsim(compiled, x)
    np.testing.assert_array_equal(profile.output, want)
    ops = [r.op for r in profile.layers if r.device == "accel"]
    # 4 convolutions, 3 batch norms, 1 + 2 + 3 concatenation links, the pooling
    assert len(ops) == 4 + 3 + 6 + 1 and ops.count("concat") == 6


def test_concatenations_of_whole_channel_blocks_run_on_the_accelerator() -> None:
    """With a growth of 16 channels every concatenation is a chain of ``qnn.concat_q31``
    programs (16+16, 16+16+16 and the last one's 4 inputs: 1 + 2 + 3 links), and the
    pooling of the last one runs there too: the dense block's activations stay on the
    device, bit-exact with the integer graph. In onnxruntime's
    uint8 QDQ form the batch norms after them stay float on the CPU, so the
    concatenations do too (nothing on the accelerator reads them), with that reason."""
    model = TOPOLOGIES["densenet_block_g16"]()
    calib, x = _data(model)
    compiled = compile_onnx(model, config="default", calibration=calib)
    assert not any(op.startswith("qnn.concat_q31") for op in compiled.cpu_operators)
    profile, want = _run_on_fsim(compiled, x)
    np.testing.assert_array_equal(profile.output, want)
    programs = [r.op for r in profile.layers if r.device == "accel"]
    assert programs.count("concat") == 6 and programs.count("global_avg_pool") == 1
    assert profile.accel_macs == onnx_macs(model, {"x": _shape(model)})
    assert _cosine(profile.output, _ort(model, x)) > 0.99
    qdq = compile_onnx(_uint8_qdq(model, calib), config="default")
    assert "qnn.concat_q31 x3: int8 on the CPU: an input is computed there, or no " \
           "accelerator operator reads the result (it would only travel to the host)" \
        in qdq.cpu_operators
    profile, want = _run_on_fsim(qdq, x)
    np.testing.assert_array_equal(profile.output, want)


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_uint8_qdq_from_onnxruntime_runs_on_the_accelerator(name: str) -> None:
    model = TOPOLOGIES[name]()
    calib, x = _data(model)
    qdq = _uint8_qdq(model, calib)
    compiled = compile_onnx(qdq, config="default")
    assert compiled.cpu_convolutions == ()
    profile, want = _run_on_fsim(compiled, x)
    # residual adds (of two activations) with zero points are int8 programs too
    consts = {i.name for i in model.graph.initializer}
    residual = [n for n in model.graph.node if n.op_type == "Add" and not consts & set(n.input)]
    assert sum(r.op.startswith("add_q31") for r in profile.layers) == len(residual)
    np.testing.assert_array_equal(profile.output, want)
    assert profile.accel_macs == onnx_macs(model, {"x": _shape(model)})
    # the same integer arithmetic as onnxruntime's on the QDQ model: at most one
    # quantum of the output (a rounding tie resolved differently)
    out_scale = next(onnx.numpy_helper.to_array(i) for i in qdq.graph.initializer
                     if i.name == next(n.input[1] for n in reversed(qdq.graph.node)
                                       if n.op_type == "DequantizeLinear"))
    want_ort = _ort(qdq, x)
    diff = np.abs(np.asarray(profile.output) - want_ort)
    assert diff.max() <= float(out_scale) * 1.001
    # without an accelerator, the CPU runs the same integer graph
    on_cpu = run_program(compile_onnx(qdq).program, [x])
    assert np.abs(on_cpu - want_ort).max() <= float(out_scale) * 1.001


def test_uint8_as_int8_keeps_every_dequantized_value() -> None:
    from tensorfab.compiler.frontend import from_onnx
    from tensorfab.compiler.graph.asymmetric_qdq import uint8_as_int8
    from tensorfab.compiler.graph.constant_folding import fold_constants

    model = TOPOLOGIES["alexnet_groups"]()
    calib, x = _data(model)
    fn = fold_constants(from_onnx(_uint8_qdq(model, calib)))
    shifted = uint8_as_int8(fn)
    text = str(shifted)
    assert "uint8" in str(fn) and "uint8" not in text
    np.testing.assert_array_equal(evaluate(shifted, [x]), evaluate(fn, [x]))


def test_channel_affine_as_conv_keeps_the_float_values() -> None:
    from tensorfab.compiler.frontend import from_onnx
    from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
    from tensorfab.compiler.graph.channel_affine_as_conv import channel_affine_as_conv
    from tensorfab.compiler.graph.constant_folding import fold_constants
    from tensorfab.compiler.graph.ir import Call, post_order

    def ops(f) -> list[str]:  # type: ignore[no-untyped-def]
        return [e.op for e in post_order(f) if isinstance(e, Call)]

    model = TOPOLOGIES["densenet_block"]()
    _, x = _data(model)
    fn = fold_constants(fold_batch_norm(from_onnx(model)))
    rewritten = channel_affine_as_conv(fn)
    assert ops(fn).count("multiply") == 3 and "multiply" not in ops(rewritten)
    np.testing.assert_allclose(evaluate(rewritten, [x]), evaluate(fn, [x]), rtol=1e-5,
                               atol=1e-5)


def test_input_normalization_stays_float() -> None:
    from onnx import TensorProto, helper, numpy_helper

    from tensorfab.compiler.frontend import from_onnx
    from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
    from tensorfab.compiler.graph.channel_affine_as_conv import channel_affine_as_conv
    from tensorfab.compiler.graph.ir import Call, post_order

    c = 3
    params = {n: numpy_helper.from_array(np.full(c, v, np.float32), n)
              for n, v in (("g", 2.0), ("b", 0.5), ("m", 0.1), ("v", 1.0))}
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])], "norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, c, 4, 4))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, c, 4, 4))],
        list(params.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    fn = channel_affine_as_conv(fold_batch_norm(from_onnx(model)))
    assert [e.op for e in post_order(fn) if isinstance(e, Call)] == ["multiply", "add"]


def test_channel_shuffles_run_on_the_accelerator_as_gather_programs() -> None:
    """ShuffleNet's reshape → transpose → reshape is one ``qnn.channel_permute``, a
    gather program on the accelerator: exact, no MACs of the model, nothing of the unit
    on the CPU."""
    from tensorfab.compiler.graph.channel_shuffle import channel_permutation
    from tensorfab.compiler.graph.ir import Call, Var
    from tensorfab.compiler.graph.types import TensorType

    model = TOPOLOGIES["shufflenet_unit"]()
    calib, x = _data(model)
    compiled = compile_onnx(model, config="default", calibration=calib)
    assert not any(op.split()[0] in ("reshape", "transpose", "qnn.channel_permute")
                   for op in compiled.cpu_operators)
    profile, want = _run_on_fsim(compiled, x)
    np.testing.assert_array_equal(profile.output, want)
    assert profile.accel_macs == onnx_macs(model, {"x": _shape(model)})
    assert [r.op for r in profile.layers if r.device == "accel"].count("channel_permute") == 2
    # the permutation itself, against numpy's shuffle of channel indices
    v = Var("v", TensorType((1, 12, 2, 3), "int8"))
    split = Call("reshape", [v], {"newshape": (1, 3, 4, 2, 3)})
    shuffled = Call("reshape", [Call("transpose", [split], {"axes": (0, 2, 1, 3, 4)})],
                    {"newshape": (1, 12, 2, 3)})
    found = channel_permutation(shuffled)
    assert found is not None and found[0] is v
    np.testing.assert_array_equal(found[1], np.arange(12).reshape(3, 4).T.reshape(-1))
    # a transpose of the pixels is no permutation of the channels
    five = Call("reshape", [v], {"newshape": (1, 12, 2, 3, 1)})
    mixed = Call("reshape", [Call("transpose", [five], {"axes": (0, 1, 3, 2, 4)})],
                 {"newshape": (1, 12, 2, 3)})
    assert channel_permutation(mixed) is None
    assert channel_permutation(Call("reshape", [split], {"newshape": (1, 12, 2, 3)})) is None


@pytest.mark.parametrize(("name", "pads"), [("shufflenet_unit", 2), ("mobilenet_v3_block", 1)])
def test_zero_point_padding_runs_on_the_accelerator(name: str, pads: int) -> None:
    """onnxruntime's uint8 QDQ model pads a convolution's input with its zero point (an
    ``nn.pad``): between accelerator layers that is a pad program on the device (the
    model input's own padding stays on the CPU, where the input is), exact."""
    model = TOPOLOGIES[name]()
    calib, x = _data(model)
    compiled = compile_onnx(_uint8_qdq(model, calib), config="default")
    profile, want = _run_on_fsim(compiled, x)
    np.testing.assert_array_equal(profile.output, want)
    assert [r.op for r in profile.layers if r.device == "accel"].count("pad") == pads
    assert [op for op in compiled.cpu_operators if op.startswith("nn.pad")] == [
        "nn.pad x1: int8 on the CPU: an input is computed there, or no accelerator "
        "operator reads the result (it would only travel to the host)"]
    assert profile.host_traffic is not None
    assert profile.host_traffic.total <= 3 * (x.nbytes + np.asarray(profile.output).nbytes)


@pytest.mark.slow
def test_new_vector_programs_run_bit_exact_on_rtl() -> None:
    """The concatenation, channel-permutation and zero-point-padding programs inside
    whole models, cycle-accurate in Verilator against the functional simulator."""
    for name, qdq in (("densenet_block", False), ("shufflenet_unit", True)):
        model = TOPOLOGIES[name]()
        calib, x = _data(model)
        compiled = (compile_onnx(_uint8_qdq(model, calib), config="default") if qdq
                    else compile_onnx(model, config="default", calibration=calib))
        rtl = profile_program(compiled.program, {"x": x}, get_device("rtl"))
        fsim, _ = _run_on_fsim(compiled, x)
        np.testing.assert_array_equal(rtl.output, fsim.output)
        ops = {r.op for r in rtl.layers if r.device == "accel"}
        assert ops & {"concat", "pad", "channel_permute"}
