"""Residual adds fused into the convolution before them (``fuse_residual_adds``):
``compile_onnx`` (default ``residual_adds="auto"``) turns each ``qnn.add_q31`` [+ relu]
of a residual model into a ``qnn.requantize_residual_q31`` compiled into its
convolution's program; the accelerator's output equals the fused integer graph on the
CPU kernels bit for bit (fsim, and resident on the RTL), and the fused int8 model is
no farther from the float model (onnxruntime) than the unfused one."""

from __future__ import annotations

import numpy as np
from ort_reference import reference_session
from test_add_q31 import residual_block_onnx

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.compiler.graph.residual_fusion import fuse_residual_adds
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.profiling import profile_program
from tensorfab.runtime.resident import ResidentModel
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator


def _calibration() -> np.ndarray:
    r = np.random.default_rng(11)
    return np.maximum(r.standard_normal((8, 16, 8, 8)), 0).astype(np.float32)


def _ops(fn, op: str) -> list[Call]:
    return [e for e in post_order(fn) if isinstance(e, Call) and e.op == op]


def test_fused_programs_equal_the_fused_integer_graph_on_fsim_and_rtl() -> None:
    compiled = compile_onnx(residual_block_onnx(), config="default",
                            calibration=_calibration())
    assert not _ops(compiled.function, "qnn.add_q31")
    assert len(_ops(compiled.integer_function, "qnn.requantize_residual_q31")) == 2
    programs = _ops(compiled.function, "accel.program")
    assert len(programs) == 4  # four convolutions, no separate add program
    fused = [p for p in programs if p.attrs["extra_input_segment"] == "res"]
    assert len(fused) == 2 and all("requantize_residual_q31" in p.attrs["layer"]
                                   for p in fused)
    x = np.maximum(np.random.default_rng(12).standard_normal((2, 16, 8, 8)), 0
                   ).astype(np.float32)
    reference = run_program(lower_to_runtime(compiled.integer_function), [x])
    np.testing.assert_array_equal(run_program(compiled.program, [x]), reference)
    with ResidentModel(compiled.program, RtlSimulator()) as resident:
        profile = profile_program(compiled.program, [x], resident.device, resident=resident)
    np.testing.assert_array_equal(profile.output, reference)


def test_fusion_is_no_farther_from_float_than_the_separate_add() -> None:
    model = residual_block_onnx()
    r = np.random.default_rng(3)
    calib = [{"x": np.maximum(r.standard_normal((2, 16, 8, 8)), 0).astype(np.float32)}
             for _ in range(4)]
    qdq = quantize_onnx(model, calib, per_channel=True)
    separate = fixed_point_requantize(lower_qdq(fold_constants(from_onnx(qdq))),
                                      per_channel=True, rounding="single")
    fused = fuse_residual_adds(separate)
    assert len(_ops(separate, "qnn.add_q31")) == 2
    assert not _ops(fused, "qnn.add_q31")
    float_session = reference_session(residual_block_onnx())
    err = {"separate": [], "fused": []}
    for _ in range(8):
        x = np.maximum(r.standard_normal((2, 16, 8, 8)), 0).astype(np.float32)
        want = float_session.run(None, {"x": x})[0]
        for name, g in (("separate", separate), ("fused", fused)):
            got = np.asarray(run_program(lower_to_runtime(g), [x]))
            err[name].append(np.abs(got - want).mean())
    assert np.mean(err["fused"]) <= np.mean(err["separate"]) * 1.01, err


def _onnx_conv_macs(model) -> int:
    """The model's convolution MACs counted in numpy from the ONNX file: output
    elements × input channels per group × kernel taps, per Conv node."""
    from onnx import numpy_helper

    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    shapes = {"x": (2, 16, 8, 8)}
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            w = weights[node.input[1]]
            n, _, h, wd = shapes[node.input[0]]
            out = (n, w.shape[0], h, wd)  # 3×3, padding 1, stride 1
            total += int(np.prod(out)) * int(np.prod(w.shape[1:]))
            shapes[node.output[0]] = out
        else:
            shapes[node.output[0]] = shapes[node.input[0]]
    return total


def test_accel_macs_count_the_models_own_multiply_accumulates() -> None:
    # the residual adds as programs (their identity GEMM) or fused: either way the
    # profile counts the four convolutions' MACs, no padding, no identity GEMM
    model = residual_block_onnx()
    want = _onnx_conv_macs(model)
    assert want == 4 * 2 * 16 * 64 * 16 * 9
    x = _calibration()[:2]
    for mode in ("accel", "auto"):
        compiled = compile_onnx(residual_block_onnx(), config="default",
                                calibration=_calibration(), residual_adds=mode)
        profile = profile_program(compiled.program, [x], FunctionalSimulator())
        assert profile.accel_macs == want, mode
        adds = [r for r in profile.layers if r.op.startswith("add_q31")]
        assert len(adds) == (2 if mode == "accel" else 0)
        assert all(r.macs == 0 and r.gemm_macs > 0 for r in adds)
