"""Residual adds through the whole pipeline: ``compile_onnx`` of a small residual ONNX
model keeps int8 adds (``qnn.add_q31``, CPU) between the accelerator's convolutions and
matches onnxruntime's QDQ model; the measured placement (CPU kernel against the
accelerator program) is exact and its rule follows the costs."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper
from test_add_q31 import residual_block_onnx

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.compiler.graph.residual_add_placement import (
    measure_residual_adds,
    residual_add_device,
    run_with_accel_adds,
)
from tensorfab.compiler.model_compile import calibration_batches, compile_onnx
from tensorfab.isa import PRESETS
from tensorfab.runtime.interpreter import run_program
from tensorfab.sim import FunctionalSimulator


def _calibration() -> np.ndarray:
    r = np.random.default_rng(11)
    return np.maximum(r.standard_normal((8, 16, 8, 8)), 0).astype(np.float32)


def test_compile_onnx_residual_model_int8_adds_match_onnxruntime_qdq() -> None:
    model, calib = residual_block_onnx(), _calibration()
    compiled = compile_onnx(model, config="default", calibration=calib, quantizer="ort")
    adds = [e for e in post_order(compiled.function)
            if isinstance(e, Call) and e.op == "qnn.add_q31"]
    assert len(adds) == 2 and all(a.virtual_device.kind == "cpu" for a in adds)
    assert sum(isinstance(e, Call) and e.op == "accel.program"
               for e in post_order(compiled.function)) == 4
    # the same QDQ model compile_onnx quantized, run by onnxruntime
    batches = calibration_batches(from_onnx(model), {"x": calib})
    qdq = quantize_onnx(model, batches, per_channel=True)
    x = np.maximum(np.random.default_rng(12).standard_normal((2, 16, 8, 8)), 0
                   ).astype(np.float32)
    want = ort.InferenceSession(qdq.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.asarray(run_program(compiled.program, [x]))
    last_q = [n for n in qdq.graph.node if n.op_type == "QuantizeLinear"][-1]
    step = float(next(numpy_helper.to_array(i) for i in qdq.graph.initializer
                      if i.name == last_q.input[1]))
    diff = np.rint(np.abs(got - want) / step)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.999
    # the same model with its adds as accelerator programs: the same output, bit for bit
    ab = run_with_accel_adds(compiled.program, [x], FunctionalSimulator(), compiled.config)
    np.testing.assert_array_equal(ab.output, got)
    assert ab.adds == 2 and ab.add_cycles > 0 and ab.program_cycles > 0


def test_measured_placement_is_exact_and_follows_the_costs() -> None:
    r = np.random.default_rng(3)
    calib = [{"x": np.maximum(r.standard_normal((2, 16, 8, 8)), 0).astype(np.float32)}]
    g = lower_qdq(fold_constants(from_onnx(quantize_onnx(residual_block_onnx(), calib,
                                                         per_channel=True))))
    cfg = PRESETS["default"]
    measured = measure_residual_adds(g, cfg, FunctionalSimulator(), repeats=2)
    assert len(measured) == 2
    for m in measured:
        assert m.exact and m.shape == (2, 16, 8, 8) and m.host_bytes == 3 * 2 * 16 * 64
        assert m.accel_cycles is None or m.accel_cycles > 0
        assert m.accel_estimated_cycles > 0
        accel_s = m.accel_estimated_cycles / (cfg.clock_mhz * 1e6)
        # the rule: accelerator when it is faster than the kernel plus the link
        slow_cpu = dataclasses.replace(m, cpu_seconds=2 * accel_s, accel_cycles=None)
        fast_cpu = dataclasses.replace(m, cpu_seconds=accel_s / 2, accel_cycles=None)
        assert residual_add_device(slow_cpu, cfg) == "accel"
        assert residual_add_device(fast_cpu, cfg) == "cpu"
        # a slow host link makes the CPU placement pay for its transfers
        link = m.host_bytes / accel_s  # moving the bytes takes as long as the program
        assert residual_add_device(fast_cpu, cfg, link_bytes_per_second=link) == "accel"
