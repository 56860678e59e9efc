"""The AOT static memory plan: the arena planner (greedy by size, hill climb, lower
bound), the host plan of a compiled model, the VM running it without allocating."""

from __future__ import annotations

import itertools
import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.models.resnet import resnet_onnx
from tensorfab.runtime.arena_plan import LiveBuffer, lower_bound, plan_arena
from tensorfab.runtime.artifact import load_executable, load_model, save_model
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.memory_plan import plan_memory
from tensorfab.runtime.resident import ResidentModel
from tensorfab.runtime.static_plan import VIEW_OPS, plan_host_arena
from tensorfab.runtime.vm import VirtualMachine
from tensorfab.runtime.vm_build import build_executable
from tensorfab.sim import FunctionalSimulator


def _check_no_overlap(buffers: list[LiveBuffer], offsets: dict[int, int], align: int) -> None:
    for a, b in itertools.combinations(buffers, 2):
        if a.first <= b.last and b.first <= a.last:  # live at one step
            sa = -(-a.nbytes // align) * align
            sb = -(-b.nbytes // align) * align
            assert offsets[a.key] + sa <= offsets[b.key] or \
                offsets[b.key] + sb <= offsets[a.key], (a, b)
        assert offsets[a.key] % align == 0


def _brute_bound(buffers: list[LiveBuffer]) -> int:
    steps = range(min(b.first for b in buffers), max(b.last for b in buffers) + 1)
    return max(sum(b.nbytes for b in buffers if b.first <= s <= b.last) for s in steps)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 12), st.integers(0, 6)),
                min_size=1, max_size=14),
       st.sampled_from([1, 16, 64]))
def test_no_two_live_buffers_share_bytes_and_the_peak_respects_the_bound(
        spec: list[tuple[int, int, int]], align: int) -> None:
    buffers = [LiveBuffer(k, n, first, first + span)
               for k, (n, first, span) in enumerate(spec)]
    plan = plan_arena(buffers, align)
    _check_no_overlap(buffers, plan.offsets, align)
    assert plan.lower_bound <= plan.peak <= plan.naive_sum
    assert plan.peak == max(plan.offsets[b.key] + -(-b.nbytes // align) * align
                            for b in buffers)
    if align == 1:
        assert plan.lower_bound == _brute_bound(buffers)
    assert plan_arena(list(reversed(buffers)), align) == plan  # deterministic ties


def test_hill_climb_reaches_the_bound_where_greedy_by_size_does_not() -> None:
    # greedy by size puts the 5-byte buffers first and leaves a hole the others
    # cannot share; swapping the order finds a placement at the bound
    buffers = [LiveBuffer(0, 3, 3, 6), LiveBuffer(1, 5, 4, 6), LiveBuffer(2, 2, 2, 3),
               LiveBuffer(3, 5, 1, 2)]
    greedy = plan_arena(buffers, hill_climb_steps=0)
    assert (greedy.peak, greedy.lower_bound, greedy.method) == (10, 8, "greedy-by-size")
    climbed = plan_arena(buffers)
    assert (climbed.peak, climbed.method) == (8, "hill-climb")
    _check_no_overlap(buffers, climbed.offsets, 1)
    assert lower_bound(buffers) == 8


@pytest.fixture(scope="module")
def digits_static():
    xtr, _, xte, _ = load_digits_split(0)
    program = compile_onnx(model_path(), config="tiny", calibration=xtr[:64],
                           input_shapes={"image": (8, 1, 8, 8)}).program
    return program, xte[:8]


def test_digits_cnn_at_the_lower_bound_in_both_arenas(digits_static) -> None:
    program, _ = digits_static
    host = plan_host_arena(program)
    assert host.arena.peak == host.arena.lower_bound < host.arena.naive_sum
    assert host.in_place >= 3  # device copies, flatten, reshape over their inputs
    device = plan_memory(program).activations
    assert device.peak == device.lower_bound < device.naive_sum


def test_static_executable_runs_without_allocating_and_is_stored(digits_static,
                                                                  tmp_path) -> None:
    program, x = digits_static
    plan = plan_host_arena(program)
    exe = build_executable(program, plan)
    want = run_program(program, [x])
    # every planned value is placed in the arena, none is left to the kernels
    code = exe.functions[0].code
    allocs = [i for i in code if i[0].name == "ALLOC_TENSOR"]
    assert len(allocs) == len(plan.places)
    # a reshape placed over its input is its output's view: no kernel runs for it
    views = [n for n in program.nodes if n.op in VIEW_OPS and n.output in plan.places
             and plan.places[n.output][0] == plan.places.get(n.inputs[0], (-1,))[0]]
    assert views
    kernels = [i for i in code if i[0].name in ("INVOKE", "INVOKE_INTO")]
    assert len(kernels) == sum(n.op not in ("accel.program", "tuple", "tuple_get_item")
                               for n in program.nodes) - len(views)
    path = tmp_path / "static.tfm"
    save_model(program, path, executable=exe)
    with zipfile.ZipFile(path) as z:
        stored = json.loads(z.read("vm.json"))
    assert stored["pools"] == {"host": plan.arena.peak}
    assert stored["memory_plan"]["host"]["lower_bound"] == plan.arena.lower_bound
    exe = load_executable(path)
    with ResidentModel(load_model(path), FunctionalSimulator()) as model, \
            VirtualMachine(model, exe) as vm:
        arena = vm.arenas["host"]
        for _ in range(3):  # the arena reused run after run
            np.testing.assert_array_equal(vm.run([x]), want)
            assert vm.storage_allocations == 0
        assert vm.arenas["host"] is arena and arena.nbytes == plan.arena.peak
    # the same executable without its planned arena allocates on the run path
    exe.pools.clear()
    with ResidentModel(program, FunctionalSimulator()) as model, \
            VirtualMachine(model, exe) as vm:
        np.testing.assert_array_equal(vm.run([x]), want)
        assert vm.storage_allocations == 1


@pytest.fixture(scope="module")
def small_resnet():
    rng = np.random.default_rng(0)
    model = resnet_onnx(stages=((6, 1), (10, 2)), blocks_per_stage=1, image_size=16,
                        classes=10)
    return compile_onnx(model, config="tiny",
                        calibration=rng.standard_normal((8, 3, 16, 16)).astype(np.float32),
                        input_shapes={"input": (2, 3, 16, 16)}).program


def test_residual_topology_at_the_lower_bound_and_correct(small_resnet) -> None:
    rng = np.random.default_rng(1)
    program = small_resnet
    plan = plan_host_arena(program)
    device = plan_memory(program).activations
    assert plan.arena.peak <= 1.05 * plan.arena.lower_bound
    assert device.peak <= 1.05 * device.lower_bound
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    with ResidentModel(program, FunctionalSimulator()) as m, \
            VirtualMachine(m, build_executable(program, plan)) as vm:
        np.testing.assert_array_equal(vm.run([x]), run_program(program, [x]))
        assert vm.storage_allocations == 0


def test_accelerator_inputs_keep_their_bytes_until_the_host_waits(small_resnet) -> None:
    # the accelerator thread reads a program's inputs some time before the host waits
    # for its output: no value made in between may take their bytes
    from tensorfab.runtime.accel_contract import accel_nodes

    program = small_resnet
    plan = plan_host_arena(program)
    accel_out = {n.output: k for k, n in accel_nodes(program)}
    for k, node in accel_nodes(program):
        wait = next((w for w in range(k + 1, len(program.nodes))
                     if program.nodes[w].op not in ("accel.program", "tuple")
                     and any(accel_out.get(s, -1) >= k for s in program.nodes[w].inputs)),
                    len(program.nodes))
        for s in (s for s in node.inputs if s in plan.places):
            off, shape, dtype = plan.places[s]
            end = off + int(np.prod(shape)) * np.dtype(dtype).itemsize
            for n in program.nodes[k + 1: wait]:
                if n.output in plan.places:
                    o, sh, dt = plan.places[n.output]
                    assert o + int(np.prod(sh)) * np.dtype(dt).itemsize <= off or end <= o


def test_the_device_plan_is_stored_and_used_at_load(digits_static, tmp_path) -> None:
    program, x = digits_static
    path = tmp_path / "m.tfm"
    save_model(program, path)  # fixed shapes: the static executable, both plans
    exe = load_executable(path)
    stored = exe.device_plan()
    assert stored is not None and stored.peak == stored.lower_bound
    # a different valid placement (the area twice as large, everything moved up by
    # its old size) is what the model uses when given
    moved = type(stored)({k: v + stored.peak for k, v in stored.offsets.items()},
                         2 * stored.peak, stored.naive_sum, stored.lower_bound, "stored")
    with ResidentModel(load_model(path), FunctionalSimulator(), moved) as model, \
            VirtualMachine(model, exe) as vm:
        assert model.plan.activations == moved
        assert model.plan.activation_bytes == 2 * stored.peak
        np.testing.assert_array_equal(vm.run([x]), run_program(program, [x]))
    # offsets that put two live buffers on the same bytes are refused
    from tensorfab.runtime.memory_plan import MemoryPlanError

    clash = type(stored)(dict.fromkeys(stored.offsets, 0), stored.peak, 0, 0, "stored")
    with pytest.raises(MemoryPlanError, match=r"stored device memory plan does not fit "
                       r"the model: buffers .* are live at once and share bytes"):
        ResidentModel(program, FunctionalSimulator(), clash)
