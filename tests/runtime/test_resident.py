"""A model loaded on a device once (runtime/resident.py, runtime/memory_plan.py):
programs and weights placed in one device memory, activations kept there between
consecutive accelerator programs, results equal to running every program standalone."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.isa import ErrorCode, ProgramError, get_config
from tensorfab.isa.errors import UsageError
from tensorfab.runtime.accel_contract import decode_program
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.memory_plan import plan_memory
from tensorfab.runtime.profiling import profile_program
from tensorfab.runtime.resident import (
    DeviceTensor,
    ResidentModel,
    planned_host_traffic,
    standalone_host_bytes,
)
from tensorfab.sim import FunctionalSimulator


def conv_chain_onnx(seed: int = 0) -> onnx.ModelProto:
    """conv 3x3 -> relu -> conv 3x3 -> relu -> conv 1x1 -> global average pool: three
    convolutions back to back, then a CPU operator."""
    rng = np.random.default_rng(seed)
    shapes = [(16, 8, 3, 3), (16, 16, 3, 3), (8, 16, 1, 1)]
    inits, nodes, prev = [], [], "x"
    for i, s in enumerate(shapes):
        w = (rng.standard_normal(s) * 0.2).astype(np.float32)
        b = (rng.standard_normal(s[0]) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        pad = s[2] // 2
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                      pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["y"]))
    graph = helper.make_graph(
        nodes, "conv_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [2, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def chain():
    rng = np.random.default_rng(3)
    calib = rng.standard_normal((16, 8, 6, 6)).astype(np.float32)
    program = compile_onnx(conv_chain_onnx(), config="tiny", calibration=calib).program
    xs = [rng.standard_normal((2, 8, 6, 6)).astype(np.float32) for _ in range(2)]
    return program, xs


def _accel_nodes(program):
    return [k for k, n in enumerate(program.nodes) if n.op == "accel.program"]


def test_plan_keeps_chained_activations_on_the_device_without_overlap(chain) -> None:
    program, _ = chain
    plan = plan_memory(program)
    accel = _accel_nodes(program)
    assert list(plan.programs) == accel and len(accel) == 4
    # the 2nd and 3rd convolutions and the pooling read their input where the previous
    # program wrote it
    flags = [plan.programs[k].input_on_device for k in accel]
    assert flags == [False, True, True, True]
    for a, b in itertools.pairwise(accel):
        assert plan.programs[b].input.addr == plan.programs[a].output.addr
    # buffers live at the same time never share a byte; all sit above the static area
    bufs = {(p.input.addr, p.input.nbytes, p.input.first, p.input.last)
            for p in plan.programs.values()}
    bufs |= {(p.output.addr, p.output.nbytes, p.output.first, p.output.last)
             for p in plan.programs.values()}
    for (a0, an, af, al), (b0, bn, bf, bl) in itertools.combinations(sorted(bufs), 2):
        if af <= bl and bf <= al:
            assert a0 + an <= b0 or b0 + bn <= a0
    assert min(b[0] for b in bufs) >= plan.static_bytes
    assert max(b[0] + b[1] for b in bufs) <= plan.size
    # every static region is inside the static area and none overlap
    spans = sorted((a, a + d.size) for a, d in plan.static)
    assert all(e0 <= s1 for (_, e0), (s1, _) in itertools.pairwise(spans))
    assert spans[-1][1] <= plan.static_bytes
    assert "from device" in plan.text() and "from host" in plan.text()


def test_resident_run_equals_standalone_programs_and_moves_fewer_bytes(chain) -> None:
    program, xs = chain
    with ResidentModel(program, FunctionalSimulator()) as model:
        loaded = model.memory.host_bytes_written
        assert loaded == model.load_bytes == sum(d.size for _, d in model.plan.static)
        for x in xs:  # a new input runs without reloading anything
            got = model.run([x])
            np.testing.assert_array_equal(got, run_program(program, [x]))
            traffic = model.last_run
            first, last = (model.plan.programs[k] for k in _accel_nodes(program)[::3])
            # only the first program's input goes down and the last one's output up
            assert traffic.written == first.input.nbytes
            assert traffic.read == last.output.nbytes
            assert traffic.total < standalone_host_bytes(program)
        assert model.memory.host_bytes_written == loaded + len(xs) * first.input.nbytes


def test_planned_host_traffic_is_what_a_resident_run_counts(chain) -> None:
    program, xs = chain
    with ResidentModel(program, FunctionalSimulator()) as model:
        model.run([xs[0]])
        assert planned_host_traffic(program, model.plan) == model.last_run


def test_profile_runs_resident_by_default_and_equals_standalone(chain) -> None:
    program, xs = chain
    resident = profile_program(program, [xs[0]], FunctionalSimulator())
    standalone = profile_program(program, [xs[0]], FunctionalSimulator(), resident=False)
    np.testing.assert_array_equal(resident.output, standalone.output)
    assert resident.host_traffic is not None and standalone.host_traffic is None
    assert resident.memory_plan.size > resident.memory_plan.static_bytes
    assert [r.op for r in resident.layers] == [r.op for r in standalone.layers]


def test_resident_model_on_the_rtl_equals_fsim_with_the_same_cycles(chain) -> None:
    from tensorfab.sim.rtl import RtlSimulator

    program, xs = chain
    rtl = profile_program(program, [xs[1]], RtlSimulator())
    np.testing.assert_array_equal(rtl.output, run_program(program, [xs[1]]))
    standalone = profile_program(program, [xs[1]], RtlSimulator(), resident=False)
    assert ([r.cycles for r in rtl.layers if r.device == "accel"]
            == [r.cycles for r in standalone.layers if r.device == "accel"])


def test_device_tensor_is_read_once_and_only_when_needed(chain) -> None:
    program, _ = chain
    with ResidentModel(program, FunctionalSimulator()) as model:
        k = _accel_nodes(program)[0]
        seg = model.plan.programs[k].program.segment(model.plan.programs[k].input_segment)
        x = np.zeros(seg.shape, seg.dtype)
        out, result = model.run_accel(k, x)
        assert isinstance(out, DeviceTensor) and result.outputs == {} and result.dram is None
        before = model.memory.host_bytes_read
        a = out.numpy()
        b = out.numpy()
        assert a is b and model.memory.host_bytes_read == before + out.nbytes
        with pytest.raises(Exception, match="does not fit segment"):
            model.run_accel(k, np.zeros((1, 2), np.int8))


def test_device_memory_errors_name_what_is_wrong(chain) -> None:
    program, _ = chain
    cfg = get_config("tiny")
    with FunctionalSimulator().open_memory(cfg, 4096) as mem:
        with pytest.raises(UsageError, match="outside the 4096-byte device memory"):
            mem.read(4000, 200)
        with pytest.raises(UsageError, match="outside"):
            mem.write(-1, np.zeros(4, np.uint8))
        node = program.nodes[_accel_nodes(program)[0]]
        p = decode_program(program.constants[node.inputs[1]])
        assert p.dram_size > 4096
        with pytest.raises(ProgramError) as e:
            mem.run(p)
        assert e.value.code is ErrorCode.DRAM_RANGE and "4096-byte device memory" in str(e.value)
    with (FunctionalSimulator().open_memory(get_config("small"), 1 << 16) as other,
          pytest.raises(UsageError, match="opened for small")):
        other.run(p)
    with pytest.raises(UsageError, match="address space"):
        FunctionalSimulator().open_memory(cfg, cfg.dram_bytes + 1)
