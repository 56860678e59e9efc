"""The per-layer profile (runtime/profiling.py) and the whole-network timeline
(runtime/network_trace.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.interpreter import GraphProgram, InputSpec, Node, run_program
from tensorfab.runtime.network_trace import network_trace, write_network_trace
from tensorfab.runtime.profiling import LayerRecord, Profile, profile_program
from tensorfab.sim import Device, FunctionalSimulator, RunResult
from tensorfab.sim.trace import Interval, is_tensorfab_trace


class TimedFsim(Device):
    """The functional simulator's results with a cycle count and engine intervals made
    up from the instruction count (a stand-in for a timed executor's bookkeeping; the
    outputs are the real simulator's)."""

    name = "timed-fsim"

    def run(self, program, dram=None) -> RunResult:
        result = FunctionalSimulator().run(program, dram)
        n = len(program.insns)
        result.cycles = 10 * n
        result.intervals = [Interval("load", "busy", 0, 4 * n),  # type: ignore[attr-defined]
                            Interval("compute", "busy", 2 * n, 10 * n),
                            Interval("compute", "stall", 2 * n, 3 * n)]
        return result


@pytest.fixture(scope="module")
def digits():
    xtr, _, xte, _ = load_digits_split(0)
    compiled = compile_onnx(model_path(), config="tiny", calibration=xtr[:64],
                            input_shapes={"image": (8, 1, 8, 8)})
    return compiled.program, xte[:8]


def test_profile_records_every_kernel_node_and_gives_the_same_output(digits) -> None:
    program, x = digits
    seen: list[tuple[int, int, str]] = []
    prof = profile_program(program, [x], FunctionalSimulator(),
                           progress=lambda *a: seen.append(a))
    np.testing.assert_array_equal(prof.output, run_program(program, [x]))
    assert [(i, op) for i, _, op in seen] == [(r.index, r.op) for r in prof.layers]
    assert {n for _, n, _ in seen} == {len(program.nodes)}
    kernel_nodes = [n for n in program.nodes if n.op not in ("tuple", "tuple_get_item")]
    assert [r.index for r in prof.layers] == [program.nodes.index(n) for n in kernel_nodes]
    accel = [r for r in prof.layers if r.device == "accel"]
    # conv1, conv2 and the classifier as a 1x1 convolution (dense_as_conv)
    assert len(accel) == 3 and all(r.op.startswith("conv2d_integer+add") for r in accel)
    # fsim is untimed: the cycles are the compiler's estimates, marked as such
    assert all(r.estimated and r.cycles and r.cycles > 0 for r in accel)
    assert prof.estimated and prof.total_cycles == sum(r.cycles for r in accel)
    cpu = [r for r in prof.layers if r.device == "cpu"]
    assert all(r.cycles is None and not r.estimated for r in cpu)
    starts = [r.start for r in prof.layers]
    assert starts == sorted(starts) and all(r.seconds >= 0 for r in prof.layers)
    assert sum(r.seconds for r in prof.layers) <= prof.seconds
    # MACs are the layers' own (batch 8; conv1 1→8 channels 8×8, conv2 8→16 channels
    # 4×4, 3×3 kernels), the GEMM core's include the channel padding (tiny blocks by 4)
    assert [r.macs for r in accel] == [8 * 8 * 8 * 8 * 1 * 9, 8 * 16 * 4 * 4 * 8 * 9,
                                       8 * 64 * 10]
    # conv1 as a 1x1 convolution over its 3x3 patches (stem_im2col): 9 values in 3 blocks
    # of 4 lanes
    assert accel[0].gemm_macs == 8 * 8 * 8 * 8 * 12 and accel[1].gemm_macs == accel[1].macs
    assert accel[2].gemm_macs == 8 * 64 * 12  # 10 outputs in 4-lane blocks
    peak = 1 * 4 * 4  # tiny: batch 1, 4x4 block
    for r in accel:
        assert r.peak == peak
        assert r.utilization == pytest.approx(r.macs / (r.cycles * peak))
        assert r.gemm_busy == pytest.approx(r.gemm_macs / (r.cycles * peak))
    assert prof.accel_macs == sum(r.macs for r in accel)
    assert prof.utilization == pytest.approx(prof.accel_macs / (prof.total_cycles * peak))


def test_timed_executor_cycles_and_network_trace(digits, tmp_path) -> None:
    program, x = digits
    prof = profile_program(program, [x], TimedFsim())
    accel = [r for r in prof.layers if r.device == "accel"]
    assert not prof.estimated and all(len(r.intervals) == 3 for r in accel)
    path = write_network_trace(prof, tmp_path / "t.json", title="digits")
    assert is_tensorfab_trace(path)
    trace = json.loads(path.read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    network = [e for e in xs if e["pid"] == 1]
    assert [e["name"] for e in network] == [r.op for r in prof.layers]
    assert {e["tid"] for e in network if e["cat"] == "accel"} == {2}
    assert {e["tid"] for e in network if e["cat"] == "cpu"} == {1}
    engines = [e for e in xs if e["pid"] == 2]
    assert len(engines) == 3 * len(accel)
    # the time axis is hardware time: nodes one after another, an accelerator program
    # lasting its cycles at the config's clock (tiny: 24 MHz), a CPU operator its wall time
    clock_mhz = 24.0
    assert trace["otherData"]["clock_mhz"] == clock_mhz
    ends = [e["ts"] + e["dur"] for e in network]
    assert [e["ts"] for e in network] == pytest.approx([0.0, *ends[:-1]])
    by_index = {e["args"]["index"]: e for e in network}
    for rec in prof.layers:
        want = rec.cycles / clock_mhz if rec.device == "accel" else rec.seconds * 1e6
        assert by_index[rec.index]["dur"] == pytest.approx(want)
    for rec in accel:  # each program's engine slices lie inside its network slice, at
        mine = [e for e in engines if e["args"]["layer"] == rec.index]  # their cycles
        assert rec.hardware_seconds == rec.cycles / (clock_mhz * 1e6)
        lo = by_index[rec.index]["ts"]
        hi = lo + by_index[rec.index]["dur"]
        assert all(lo - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-6 for e in mine)
        load = next(e for e in mine if e["name"] == "busy" and e["cat"] == "load")
        assert load["args"]["cycles"] == 4 * rec.cycles // 10  # the true cycles are kept
        assert load["ts"] == pytest.approx(lo) and load["dur"] == pytest.approx(
            load["args"]["cycles"] / clock_mhz)
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"cpu", "accelerator", "load", "compute"}


def test_trace_of_a_cpu_only_program() -> None:
    p = GraphProgram([InputSpec("a", 0, (3,), "float32")], {},
                     [Node("relu", (0,), {}, 1), Node("exp", (1,), {}, 2)], 2)
    prof = profile_program(p, [np.array([-1, 0, 2], np.float32)], FunctionalSimulator())
    np.testing.assert_allclose(prof.output, np.exp([0, 0, 2]).astype(np.float32))
    assert prof.total_cycles is None
    trace = network_trace(prof)
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["relu", "exp"]
    assert not any(e["pid"] == 2 for e in trace["traceEvents"])


def test_record_json() -> None:
    r = LayerRecord(3, "conv", "accel", [(1, 2)], (1, 4), 0.5, 0.25, 100, 800, 0.5)
    assert r.to_json() == {"index": 3, "name": "", "op": "conv", "device": "accel",
                           "in_shapes": [[1, 2]], "out_shape": [1, 4], "seconds": 0.25,
                           "cycles": 100, "macs": 800, "utilization": 0.5,
                           "gemm_macs": None, "estimated": False, "clock_hz": None,
                           "hardware_seconds": None}
    r.clock_hz = 24e6
    assert r.to_json()["hardware_seconds"] == 100 / 24e6
    assert Profile(None, [r], 1.0, "x").total_cycles == 100
