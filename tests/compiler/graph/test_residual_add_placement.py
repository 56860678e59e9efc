"""Residual adds through the whole pipeline: ``compile_onnx`` of a small residual ONNX
model gives int8 adds (``qnn.add_q31``) that match onnxruntime's QDQ model on the CPU,
and, placed on the accelerator by the partitioner's cost model, the same output bit for
bit on fsim and resident on the RTL; the measured placement (CPU kernel against the
accelerator program) is exact and its rule follows the costs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import numpy_helper
from ort_reference import reference_session
from test_add_q31 import residual_block_onnx

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.compiler.graph.residual_add_placement import (
    measure_residual_adds,
    residual_add_device,
)
from tensorfab.compiler.model_compile import calibration_batches, compile_onnx
from tensorfab.isa import PRESETS
from tensorfab.runtime.artifact import load_graph_text, load_model, save_model
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.profiling import profile_program
from tensorfab.runtime.resident import ResidentModel, planned_host_traffic, standalone_host_bytes
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator


def _calibration() -> np.ndarray:
    r = np.random.default_rng(11)
    return np.maximum(r.standard_normal((8, 16, 8, 8)), 0).astype(np.float32)


def _ops(fn, op: str) -> list[Call]:
    return [e for e in post_order(fn) if isinstance(e, Call) and e.op == op]


def test_compile_onnx_residual_model_int8_adds_match_onnxruntime_qdq() -> None:
    model, calib = residual_block_onnx(), _calibration()
    on_cpu = compile_onnx(model, config="default", calibration=calib, quantizer="ort",
                          residual_adds="cpu")
    adds = _ops(on_cpu.function, "qnn.add_q31")
    assert len(adds) == 2 and all(a.virtual_device.kind == "cpu" for a in adds)
    assert len(_ops(on_cpu.function, "accel.program")) == 4
    # separate adds (not fused into the convolutions) on the accelerator
    auto = compile_onnx(model, config="default", calibration=calib, quantizer="ort",
                        residual_adds="accel")
    assert not _ops(auto.function, "qnn.add_q31")
    programs = _ops(auto.function, "accel.program")
    assert len(programs) == 6
    assert sorted(p.attrs["layer"] for p in programs if p.attrs["extra_input_segment"]) \
        == ["add_q31+relu"] * 2
    # the same QDQ model compile_onnx quantized, run by onnxruntime
    batches = calibration_batches(from_onnx(model), {"x": calib})
    qdq = quantize_onnx(model, batches, per_channel=True)
    x = np.maximum(np.random.default_rng(12).standard_normal((2, 16, 8, 8)), 0
                   ).astype(np.float32)
    want = reference_session(qdq).run(None, {"x": x})[0]
    got = np.asarray(run_program(on_cpu.program, [x]))
    last_q = [n for n in qdq.graph.node if n.op_type == "QuantizeLinear"][-1]
    step = float(next(numpy_helper.to_array(i) for i in qdq.graph.initializer
                      if i.name == last_q.input[1]))
    diff = np.rint(np.abs(got - want) / step)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.999
    # adds on the accelerator: the same output bit for bit, on fsim (standalone programs)
    # and resident on the RTL (the second add reads the first one's output in place)
    np.testing.assert_array_equal(run_program(auto.program, [x]), got)
    with ResidentModel(auto.program, RtlSimulator()) as resident:
        assert sum(p.extra_on_device for p in resident.plan.programs.values()) == 1
        profile = profile_program(auto.program, [x], resident.device, resident=resident)
    np.testing.assert_array_equal(profile.output, got)
    add_runs = [r for r in profile.layers if r.op == "add_q31+relu"]
    assert len(add_runs) == 2 and all(r.device == "accel" and r.cycles for r in add_runs)


def test_model_file_with_accelerator_adds_round_trips(tmp_path) -> None:
    compiled = compile_onnx(residual_block_onnx(), config="default",
                            calibration=_calibration(), residual_adds="accel")
    path = tmp_path / "m.tfm"
    save_model(compiled.program, path, graph_text=compiled.graph_text)
    x = _calibration()[:2]
    np.testing.assert_array_equal(run_program(load_model(path), [x]),
                                  run_program(compiled.program, [x]))
    text = load_graph_text(path)
    assert text is not None and text.count('extra_input_segment="b"') == 2


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


@pytest.mark.parametrize(("preset", "auto_adds"), [("tiny", 0), ("small", 0), ("large", 2)])
def test_every_preset_runs_the_adds_on_the_accelerator_bit_exact(preset, auto_adds) -> None:
    # forced onto the accelerator, the adds give the CPU kernel's output bit for bit;
    # the cost model keeps them on the CPU where the clock is slow and the blocks small
    # (tiny 24 MHz, 4 lanes; small 50 MHz, 8: no REQUANT, so no fusion either); on
    # large (REQUANT) auto fuses them into the convolutions (a program with a second
    # input each), exact against its own integer graph on the CPU
    model, calib = residual_block_onnx(), _calibration()
    x = calib[:2]
    got = {}
    for mode in ("cpu", "accel", "auto"):
        c = compile_onnx(model, config=preset, calibration=calib, residual_adds=mode)
        adds = [p for p in _ops(c.function, "accel.program") if p.attrs["extra_input_segment"]]
        got[mode] = (len(adds), run_program(c.program, [x]),
                     run_program(lower_to_runtime(c.integer_function), [x]))
    assert (got["cpu"][0], got["accel"][0], got["auto"][0]) == (0, 2, auto_adds)
    np.testing.assert_array_equal(got["accel"][1], got["cpu"][1])
    np.testing.assert_array_equal(got["auto"][1], got["auto"][2])
    if preset != "large":
        np.testing.assert_array_equal(got["auto"][1], got["cpu"][1])


def test_resident_second_input_of_the_wrong_shape_is_refused() -> None:
    program = compile_onnx(residual_block_onnx(), config="default",
                           calibration=_calibration(), residual_adds="accel").program
    with ResidentModel(program, FunctionalSimulator()) as model:
        k = next(i for i, n in enumerate(program.nodes)
                 if n.op == "accel.program" and len(n.inputs) == 3)
        placed = model.plan.programs[k]
        seg = placed.program.segment(placed.input_segment)
        x = np.zeros(seg.shape, seg.dtype)
        with pytest.raises(Exception, match="second input int8\\(3,\\) does not fit segment"):
            model.run_accel(k, x, np.zeros(3, np.int8))


def test_kernel_second_input_of_the_wrong_dtype_is_refused() -> None:
    # the accel.program kernel checks the second operand as it checks the input (it
    # used to cast it to int8 silently)
    from tensorfab.runtime.accel_contract import decode_program
    from tensorfab.runtime.kernels import KernelError, run_accel_program

    program = compile_onnx(residual_block_onnx(), config="default",
                           calibration=_calibration(), residual_adds="accel").program
    node = next(n for n in program.nodes if n.op == "accel.program" and len(n.inputs) == 3)
    blob = program.constants[node.inputs[1]]
    prog = decode_program(blob)
    a = prog.segment(node.attrs["input_segment"])
    b = prog.segment(node.attrs["extra_input_segment"])
    x = np.zeros(a.shape, np.int8)
    with pytest.raises(KernelError, match=r"accel.program: second input int32"
                       rf"\({b.shape[0]}, .*does not fit segment 'b' \(int8"):
        run_accel_program(x, prog, dict(node.attrs), FunctionalSimulator(),
                          np.zeros(b.shape, np.int32))
    got = run_accel_program(x, prog, dict(node.attrs), FunctionalSimulator(),
                            np.zeros(b.shape, np.int8))
    assert got.outputs[node.attrs["output_segment"]].shape == prog.segment("out").shape


def test_planned_host_traffic_counts_the_adds_in_place_operands() -> None:
    # two adds on the accelerator, the second reading its second operand in place, CPU
    # operators between programs: the plan's traffic is what a resident run counts
    calib = _calibration()
    block = compile_onnx(residual_block_onnx(), config="default", calibration=calib,
                         quantizer="ort", residual_adds="accel").program
    with ResidentModel(block, FunctionalSimulator()) as model:
        assert any(p.extra_on_device for p in model.plan.programs.values())
        model.run([calib[:2]])
        counted = model.last_run
        assert planned_host_traffic(block, model.plan) == counted
    assert 0 < counted.total < standalone_host_bytes(block)
