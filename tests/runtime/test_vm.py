"""The VM (runtime/vm.py): the same results as the interpreter, control flow and frames,
futures overlapping the accelerator with CPU kernels, shape functions, the executable in
the .tfm (version 2; version 1 files still load), NaN/inf refused for a quantized model."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tensorfab.runtime.accel_contract import ACCEL_PROGRAM, accel_nodes, program_blob
from tensorfab.runtime.artifact import (
    ModelFileError,
    load_executable,
    load_model,
    save_model,
)
from tensorfab.runtime.interpreter import (
    GraphProgram,
    InputSpec,
    Node,
    RuntimeInputError,
    run_program,
)
from tensorfab.runtime.kernels import KERNELS
from tensorfab.runtime.loaded_model import Instrument, LoadedModel
from tensorfab.runtime.resident import ResidentModel
from tensorfab.runtime.shape_functions import SHAPE_FUNCTIONS
from tensorfab.runtime.static_plan import plan_host_arena
from tensorfab.runtime.vm import VirtualMachine, VMError, overlap_seconds, vm_trace
from tensorfab.runtime.vm_build import build_executable
from tensorfab.runtime.vm_executable import Executable, ExecutableFormatError, Op, VMFunction
from tensorfab.sim import FunctionalSimulator

DATA = Path(__file__).parent / "data"
#: written by ``save_model`` before the VM existed (format version 1), with its input
#: and the interpreter's output at the time
V1_FILE = DATA / "digits_tiny_v1.tfm"


@pytest.fixture(scope="module")
def digits() -> tuple[GraphProgram, np.ndarray, np.ndarray]:
    io = np.load(DATA / "digits_tiny_v1_io.npz")
    return load_model(V1_FILE), io["x"], io["y"]


def test_version_1_file_loads_and_runs_on_the_vm(digits) -> None:
    program, x, y = digits
    exe = load_executable(V1_FILE, program)  # built from the graph: v1 has no vm.json
    with VirtualMachine(LoadedModel(program, FunctionalSimulator()), exe) as vm:
        np.testing.assert_array_equal(vm.run([x]), y)
    np.testing.assert_array_equal(run_program(program, [x]), y)


def test_version_2_stores_the_executable(digits, tmp_path) -> None:
    program, x, y = digits
    path = tmp_path / "d.tfm"
    save_model(program, path)
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("graph.json"))["version"] == 2
        assert "vm.json" in z.namelist()
    exe = load_executable(path)
    # fixed input shapes: built with the static plans (a v1 graph has no value types,
    # so only the device arena is planned)
    assert exe.to_json() == build_executable(program, plan_host_arena(program)).to_json()
    assert set(exe.memory_plan) == {"device"}
    with ResidentModel(load_model(path), FunctionalSimulator()) as model, \
            VirtualMachine(model, exe) as vm:
        np.testing.assert_array_equal(vm.run({"image": x}), y)
        assert model.last_run is None  # the VM ran it, not the interpreter
    # a damaged executable is one error naming the file
    damaged = tmp_path / "damaged.tfm"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(damaged, "w") as z:
        for name in ("graph.json", "constants.npz"):
            z.writestr(name, src.read(name))
        z.writestr("vm.json", json.dumps({"functions": [{"name": "main", "num_params": 1,
                                                          "num_registers": 1,
                                                          "code": [["GOTO", 7]]}],
                                          "attrs": []}))
    with pytest.raises(ModelFileError, match=r"damaged\.tfm: vm\.json: .*pc 0: jump outside"):
        load_executable(damaged)


def test_vm_runs_every_kernel_node_once_with_the_instrument_around_it(digits) -> None:
    program, x, _ = digits

    class Count(Instrument):
        def __init__(self) -> None:
            self.nodes: list[int] = []
            self.results: list[object] = []

        def after(self, index, node, args, attrs, out, result) -> None:
            assert node is program.nodes[index]
            self.nodes.append(index)
            self.results.append(result)

    model = LoadedModel(program, FunctionalSimulator())
    count = Count()
    model.set_instrument(count)
    with VirtualMachine(model, build_executable(program)) as vm:
        vm.run([x])
    kernels = [k for k, n in enumerate(program.nodes)
               if n.op not in ("tuple", "tuple_get_item")]
    assert count.nodes == kernels
    accel = [k for k, _ in accel_nodes(program)]
    # an accelerator program's executor result; None for a CPU kernel
    assert [k for k, r in zip(count.nodes, count.results, strict=True)
            if r is not None] == accel


def test_the_runtime_runs_a_tfm_without_importing_the_compiler() -> None:
    code = f"""
import sys, numpy as np
from tensorfab.runtime.artifact import load_executable, load_model
from tensorfab.runtime.loaded_model import LoadedModel
from tensorfab.runtime.vm import VirtualMachine
from tensorfab.sim import FunctionalSimulator
p = load_model({str(V1_FILE)!r})
io = np.load({str(DATA / 'digits_tiny_v1_io.npz')!r})
exe = load_executable({str(V1_FILE)!r}, p)
with VirtualMachine(LoadedModel(p, FunctionalSimulator()), exe) as vm:
    assert np.array_equal(vm.run([io['x']]), io['y'])
print(sorted(m for m in sys.modules if m.startswith('tensorfab.compiler')))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_nan_or_inf_in_a_quantized_models_input_names_the_input(digits) -> None:
    program, x, _ = digits
    bad = x.copy()
    bad[1, 0, 2, 3] = np.nan
    with VirtualMachine(LoadedModel(program, FunctionalSimulator()),
                        build_executable(program)) as vm:
        with pytest.raises(RuntimeInputError, match=r"input 'image': nan at index "
                           r"\(1, 0, 2, 3\); a quantized model takes finite values"):
            vm.run([bad])
        bad[1, 0, 2, 3] = -np.inf
        with pytest.raises(RuntimeInputError, match=r"input 'image': -inf"):
            vm.run([bad])
    # the interpreter and the loaded model (tensorfab run's profile) refuse it too
    from tensorfab.runtime.profiling import profile_program

    with pytest.raises(RuntimeInputError, match=r"input 'image': -inf at index"):
        run_program(program, {"image": bad})
    with pytest.raises(RuntimeInputError, match=r"input 'image': -inf at index"):
        profile_program(program, [bad], FunctionalSimulator())
    good = x.copy()
    good[0, 0, 0, 0] = 1e30  # finite: saturates, as int8 quantization does
    assert np.isfinite(run_program(program, [good])).all()


def _loop_executable() -> Executable:
    """main(x, n): r = x; while n > 0: r = twice(r); n = n - 1; return r, where twice
    is a called function (its own frame)."""
    twice = VMFunction("twice", 1, 2, [(Op.INVOKE, 1, "add", 0, 0, 0), (Op.RET, 1)])
    main = VMFunction("main", 2, 6, [
        (Op.CONST, 2, 0),                         # 0: r2 = 0
        (Op.CONST, 3, 1),                         # 1: r3 = 1
        (Op.MOVE, 4, 0),                          # 2: r = x
        (Op.INVOKE, 5, "maximum", 0, 1, 2),       # 3: loop: max(n, 0) ...
        (Op.INVOKE, 5, "subtract", 0, 5, 2),      # 4: ... - 0
        (Op.IF, 5, 6, 9),                         # 5: n > 0 ?
        (Op.CALL, 4, 1, 4),                       # 6: r = twice(r)
        (Op.INVOKE, 1, "subtract", 0, 1, 3),      # 7: n -= 1
        (Op.GOTO, 3),                             # 8
        (Op.RET, 4),                              # 9
    ])
    return Executable([main, twice], [{}])


def test_control_flow_calls_and_frames() -> None:
    # CONST reads the model's constant slots 0 and 1 (the inputs' slots are unused)
    program = GraphProgram([InputSpec("x", 0, (3,), "float32"), InputSpec("n", 1, (), "int64")],
                           {0: np.array(0, np.int64), 1: np.array(1, np.int64)}, [], 0)
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with VirtualMachine(LoadedModel(program), _loop_executable()) as vm:
        for n in (0, 1, 5):
            np.testing.assert_array_equal(vm.run([x, np.array(n, np.int64)]), x * 2 ** n)


def test_malformed_instructions_are_refused_before_running() -> None:
    exe = _loop_executable()
    exe.functions[0].code[6] = (Op.CALL, 4, 9, 4)
    with pytest.raises(ExecutableFormatError, match=r"'main' pc 6: call of function 9"):
        exe.validate()
    exe = _loop_executable()
    exe.functions[1].code[0] = (Op.INVOKE, 7, "add", 0, 0, 0)
    with pytest.raises(ExecutableFormatError, match=r"'twice' pc 0: register 7 outside"):
        exe.validate()


def test_if_on_a_tensor_is_an_error_naming_the_pc() -> None:
    exe = Executable([VMFunction("main", 1, 1, [(Op.IF, 0, 1, 1), (Op.RET, 0)])])
    program = GraphProgram([InputSpec("x", 0, (2,), "float32")], {}, [], 0)
    with VirtualMachine(LoadedModel(program), exe) as vm, \
            pytest.raises(VMError, match=r"'main' pc 0: IF on a value of shape \(2,\)"):
        vm.run([np.zeros(2, np.float32)])


def test_shape_functions_agree_with_the_kernels(digits) -> None:
    # every node of the digits model with a shape function, at two batch sizes
    program, x, _ = digits
    seen: set[str] = set()

    class Check(Instrument):
        def after(self, index, node, args, attrs, out, result) -> None:
            fn = SHAPE_FUNCTIONS.get(node.op)
            if fn is not None:
                got = fn([tuple(np.shape(a)) for a in args], attrs)
                assert got == tuple(np.shape(out)), (index, node.op)
                seen.add(node.op)

    model = LoadedModel(program, FunctionalSimulator())
    model.set_instrument(Check())
    model.run([x])
    assert {"qnn.quantize", "nn.im2col", "nn.max_pool2d", "flatten", "reshape",
            ACCEL_PROGRAM, "qnn.dequantize"} <= seen
    assert set(SHAPE_FUNCTIONS) <= set(KERNELS)


def test_shape_function_instruction_on_a_symbolic_batch() -> None:
    # y = relu(x) allocated from its shape function in a storage, then filled
    program = GraphProgram([InputSpec("x", 0, ("batch", 3), "float32")], {}, [], 0)
    exe = Executable([VMFunction("main", 1, 5, [
        (Op.SHAPE_FUNC, 1, "relu", 0, 0),
        (Op.ALLOC_STORAGE, 2, 4 * 3 * 16, "host"),
        (Op.ALLOC_TENSOR, 3, 2, 0, "float32", 1),
        (Op.INVOKE, 4, "relu", 0, 0),
        (Op.TUPLE, 0, 3, 4),
        (Op.RET, 0),
    ])], [{}])
    for batch in (1, 5):
        x = np.arange(batch * 3, dtype=np.float32).reshape(batch, 3) - 4
        with VirtualMachine(LoadedModel(program), exe) as vm:
            alloc, y = vm.run([x])
            assert alloc.shape == (batch, 3) and vm.storage_allocations == 1
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    exe.functions[0].code[0] = (Op.SHAPE_FUNC, 1, "layout_transform", 0, 0)
    with VirtualMachine(LoadedModel(program), exe) as vm, \
            pytest.raises(VMError, match="no shape function for 'layout_transform'"):
        vm.run([np.zeros((2, 3), np.float32)])


def _branches(digits) -> tuple[GraphProgram, list[np.ndarray]]:
    """One accelerator program on one input and a chain of CPU kernels on another,
    independent of it: the VM runs the chain while the accelerator works."""
    program = digits[0]
    k, node = next(accel_nodes(program))
    blob = program_blob(program, k)
    seg = LoadedModel(program).accel_programs[k].segment(node.attrs["input_segment"])
    nodes = [Node(ACCEL_PROGRAM, (0, 2), node.attrs, 3)]
    slot = 1
    for _ in range(6):
        nodes.append(Node("tanh", (slot,), {}, 4 + len(nodes)))
        slot = nodes[-1].output
    nodes.append(Node("tuple", (3, slot), {}, 4 + len(nodes)))
    g = GraphProgram([InputSpec("a", 0, seg.shape, seg.dtype),
                      InputSpec("b", 1, (256, 1024), "float32")], {2: blob}, nodes,
                     nodes[-1].output)
    rng = np.random.default_rng(0)
    return g, [rng.integers(-128, 128, seg.shape).astype(np.int8),
               rng.standard_normal((256, 1024)).astype(np.float32)]


def test_futures_overlap_the_accelerator_with_independent_cpu_kernels(digits,
                                                                      tmp_path) -> None:
    from tensorfab.sim.rtl import RtlSimulator

    g, inputs = _branches(digits)
    want = run_program(g, inputs)
    device = RtlSimulator()
    with VirtualMachine(LoadedModel(g, device), build_executable(g)) as vm:
        got = vm.run(inputs)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        tracks = {s.track for s in vm.timeline}
        accel = [s for s in vm.timeline if s.track == "accelerator"]
        assert len(accel) == 1 and tracks >= {"cpu", "accelerator"}
        assert overlap_seconds(vm.timeline) > 0
        trace = vm_trace(vm.timeline, "branches")
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"cpu", "accelerator", "wait"}
    (tmp_path / "t.json").write_text(json.dumps(trace))
    with VirtualMachine(LoadedModel(g, device), build_executable(g), futures=False) as vm:
        vm.run(inputs)
        assert overlap_seconds(vm.timeline) == 0


def test_a_symbolic_batch_runs_at_any_size() -> None:
    # the float digits CNN keeps its symbolic batch on the CPU: one executable, any N
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.models import load_digits_split
    from tensorfab.models.digits_cnn import model_path

    program = compile_onnx(model_path()).program
    assert isinstance(program.inputs[0].shape[0], str)
    exe = build_executable(program)
    xte = load_digits_split(0)[2]
    with VirtualMachine(LoadedModel(program), exe) as vm:
        for n in (1, 3, 7):
            np.testing.assert_array_equal(vm.run([xte[:n]]), run_program(program, [xte[:n]]))


_X = np.random.default_rng(0).standard_normal((2, 3, 7, 9)).astype(np.float32)


@pytest.mark.parametrize(("op", "inputs", "attrs"), [
    ("strided_slice", [_X], {"begin": (1, -1, 0), "end": (3, -8, 100), "axes": (1, 3, 2),
                             "steps": (1, -2, 3)}),
    ("reduce_sum", [_X], {"axes": (1, 3), "keepdims": True}),
    ("reduce_max", [_X], {"axes": None, "keepdims": False}),
    ("mean", [_X], {"axes": (-1,), "keepdims": False}),
    ("less", [_X, _X[:1]], {}),
    ("nn.max_pool2d_indices", [_X], {"pool_size": (3, 3), "strides": (2, 2),
                                     "padding": (1, 1, 1, 1), "dilation": (1, 1),
                                     "ceil_mode": True, "storage_order": 0}),
    ("nn.pad", [_X], {"pads": (0, 1, 2, 0, 0, 0, 1, 3), "mode": "constant", "value": 0.0}),
    ("transpose", [_X], {"axes": (0, 2, 3, 1)}),
    ("concatenate", [_X, _X], {"axis": -1}),
    ("split", [_X], {"axis": 3, "sections": (4, 5)}),
    ("expand_dims", [_X], {"axes": (0, -1)}),
])
def test_shape_functions_of_ops_the_digits_cnn_lacks(op, inputs, attrs) -> None:
    out = KERNELS[op](inputs, attrs)
    want = tuple(np.shape(o) for o in out) if isinstance(out, tuple) else np.shape(out)
    assert SHAPE_FUNCTIONS[op]([i.shape for i in inputs], attrs) == want


def test_overlap_order_moves_independent_cpu_nodes_beside_an_accelerator_program() -> None:
    from tensorfab.runtime.overlap_order import overlap_order

    def node(op: str, inputs: tuple[int, ...], out: int) -> Node:
        return Node(op, inputs, {}, out)

    # 0 -> accel -> 1 -> relu -> 2 ; 0 -> tanh -> 3 ; add(2, 3) -> 4 ; accel(4) -> 5 ;
    # relu(5) -> 6 ; a device_copy of 0 is never moved
    program = GraphProgram([InputSpec("x", 0, (4,), "float32")], {},
                           [node(ACCEL_PROGRAM, (0,), 1), node("nn.relu", (1,), 2),
                            node("tanh", (0,), 3), node("add", (2, 3), 4),
                            node("device_copy", (0,), 7),
                            node(ACCEL_PROGRAM, (4,), 5), node("nn.relu", (5,), 6)], 6)
    # tanh runs while the first program is in flight; nothing passes the second program
    assert overlap_order(program) == [0, 2, 1, 3, 4, 5, 6]


def test_the_overlap_order_gives_the_interpreters_result(digits) -> None:
    from tensorfab.runtime.overlap_order import overlap_order

    program, x, y = digits
    order = overlap_order(program)
    assert sorted(order) == list(range(len(program.nodes)))
    accel = [k for k, _ in accel_nodes(program)]
    assert [k for k in order if k in set(accel)] == accel
    with ResidentModel(program, FunctionalSimulator()) as model, \
            VirtualMachine(model, build_executable(program, order=order)) as vm:
        np.testing.assert_array_equal(vm.run([x]), y)
    plan = plan_host_arena(program, order=order)
    with ResidentModel(program, FunctionalSimulator()) as model, \
            VirtualMachine(model, build_executable(program, plan, order)) as vm:
        np.testing.assert_array_equal(vm.run([x]), y)
        assert vm.storage_allocations == 0


def _waits_then_independent(digits) -> tuple[GraphProgram, list[np.ndarray]]:
    """An accelerator program, a CPU node reading its output first and then a chain of
    CPU kernels independent of it (fixed shapes, typed): in the program's order the VM
    waits for the program before the chain; in the overlap order the chain runs
    beside it."""
    program = digits[0]
    k, node = next(accel_nodes(program))
    seg = LoadedModel(program).accel_programs[k].segment(node.attrs["input_segment"])
    out = LoadedModel(program).accel_programs[k].segment(node.attrs["output_segment"])
    nodes = [Node(ACCEL_PROGRAM, (0, 2), node.attrs, 3),
             Node("negative", (3,), {}, 4)]
    slot = 1
    for _ in range(6):
        nodes.append(Node("tanh", (slot,), {}, 3 + len(nodes)))
        slot = nodes[-1].output
    nodes.append(Node("tuple", (4, slot), {}, 3 + len(nodes)))
    types = {3: (tuple(out.shape), str(out.dtype)), 4: (tuple(out.shape), str(out.dtype))}
    types.update({n.output: ((256, 1024), "float32") for n in nodes if n.op == "tanh"})
    g = GraphProgram([InputSpec("a", 0, seg.shape, seg.dtype),
                      InputSpec("b", 1, (256, 1024), "float32")],
                     {2: program_blob(program, k)}, nodes, nodes[-1].output,
                     value_types=types)
    rng = np.random.default_rng(1)
    return g, [rng.integers(-128, 128, seg.shape).astype(np.int8),
               rng.standard_normal((256, 1024)).astype(np.float32)]


def test_a_loaded_tfm_runs_in_the_overlap_order_and_overlaps(digits, tmp_path) -> None:
    from tensorfab.runtime.overlap_order import overlap_order

    g, inputs = _waits_then_independent(digits)
    order = overlap_order(g)
    assert order != list(range(len(g.nodes)))  # the chain moves up beside the program
    want = run_program(g, inputs)
    path = tmp_path / "branches.tfm"
    save_model(g, path)
    loaded = load_model(path)
    exe = loaded.executable
    assert exe is not None and exe.pools == {"host": exe.memory_plan["host"]["peak"]}
    # the stored code runs the nodes in the overlap order
    ran = [exe.nodes[i[3]] if i[0] in (Op.INVOKE, Op.INVOKE_INTO) else i[2]
           for i in exe.functions[0].code if i[0] in (Op.INVOKE, Op.INVOKE_INTO,
                                                      Op.INVOKE_ACCEL)]
    assert ran == [k for k in order if g.nodes[k].op != "tuple"]
    # the host plan's lifetimes follow that order: a plan over the program's order
    # does not go with it
    with pytest.raises(ValueError, match="another node order"):
        build_executable(g, plan_host_arena(g), order)
    overlaps = []
    for _ in range(3):  # on two shared vCPUs one run may see no overlap
        with ResidentModel(loaded, FunctionalSimulator(), futures=True) as model:
            for _ in range(2):  # the arena reused run after run
                got = model.run(inputs)
                for a, b in zip(got, want, strict=True):
                    np.testing.assert_array_equal(a, b)
            assert model.vm.storage_allocations == 0
            overlaps.append(overlap_seconds(model.vm.timeline))
        if overlaps[-1] > 0:
            break
    assert max(overlaps) > 0, overlaps
    # the program's order waits for the accelerator before the chain: no overlap
    with ResidentModel(g, FunctionalSimulator(), executable=build_executable(g),
                       futures=True) as model:
        model.run(inputs)
        assert overlap_seconds(model.vm.timeline) == 0


def test_the_per_layer_profile_comes_from_the_vms_kernel_calls(digits, tmp_path) -> None:
    """One dispatch loop: the profiler's rows are the VM's instrument callbacks, in the
    order the executable runs the nodes (the stored overlap order, not the graph's)."""
    from tensorfab.runtime.profiling import profile_program

    g, inputs = _waits_then_independent(digits)
    path = tmp_path / "branches.tfm"
    save_model(g, path)
    loaded = load_model(path)
    with ResidentModel(loaded, FunctionalSimulator()) as model:
        profile = profile_program(loaded, inputs, model.device, resident=model)
        timeline = model.vm.timeline
    exe = loaded.executable
    ran = [exe.nodes[i[3]] if i[0] in (Op.INVOKE, Op.INVOKE_INTO) else i[2]
           for i in exe.functions[0].code if i[0] in (Op.INVOKE, Op.INVOKE_INTO,
                                                      Op.INVOKE_ACCEL)]
    assert [r.index for r in profile.layers] == ran != sorted(ran)
    assert [r.device for r in profile.layers] == [
        "accel" if g.nodes[k].op == ACCEL_PROGRAM else "cpu" for k in ran]
    # each row is one slice of the VM's timeline (one kernel call each)
    assert [s.track for s in timeline] == [
        "accelerator" if r.device == "accel" else "cpu" for r in profile.layers]
    for a, b in zip(profile.output, run_program(g, inputs), strict=True):
        np.testing.assert_array_equal(a, b)


class Threads(Instrument):
    """The thread each accelerator program ran on, in order."""

    def __init__(self) -> None:
        self.accel: list[str] = []

    def after(self, index, node, args, attrs, out, result) -> None:  # type: ignore[no-untyped-def]
        import threading

        if result is not None:
            self.accel.append(threading.current_thread().name)


def test_a_program_whose_result_the_host_reads_next_runs_inline(digits) -> None:
    """A program with host work beside it goes to the accelerator thread; one whose
    result the next CPU kernel reads runs on the host thread (no handoff). Either way
    the host reads its output once, read back right after the program."""
    import threading

    from tensorfab.runtime.overlap_order import overlap_order

    g, inputs = _waits_then_independent(digits)
    want = run_program(g, inputs)
    for order, thread in ((overlap_order(g), "tensorfab-accel"),
                          (range(len(g.nodes)), threading.current_thread().name)):
        with ResidentModel(g, FunctionalSimulator(), executable=build_executable(g, None, order),
                           futures=True) as model:
            threads = Threads()
            model.set_instrument(threads)
            got = model.run(inputs)
            assert threads.accel[0].startswith(thread)
            out = model.accel_programs[0].segment(g.nodes[0].attrs["output_segment"])
            assert model.last_run.read == out.nbytes  # read once
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_loaded_run_does_not_put_a_site_with_host_work_inline(digits) -> None:
    """The VM's inline rule (:mod:`tensorfab.runtime.inline_rule`): after runs whose
    handoffs took 50 µs, a run on a loaded machine whose every handoff took as long as
    the site's independent host work (six ``tanh`` on 256×1024) leaves the site on the
    accelerator thread (the last run's median, the rule before, put it inline), and the
    runs give the outputs of the run without futures."""
    import threading

    from tensorfab.runtime.overlap_order import overlap_order

    g, inputs = _waits_then_independent(digits)
    want = run_program(g, inputs)
    executable = build_executable(g, None, overlap_order(g))
    site = next((0, pc) for pc, ins in enumerate(executable.functions[0].code)
                if ins[0] == Op.INVOKE_ACCEL)
    with ResidentModel(g, FunctionalSimulator(), executable=executable,
                       futures=True) as model:
        vm = model.vm
        for a, b in zip(model.run(inputs), want, strict=True):
            np.testing.assert_array_equal(a, b)
        work = vm.inline_rule.site_work[site]  # measured: the tanh chain's time
        assert work > 1e-3
        rule = vm.inline_rule
        rule.update([50e-6] * 120, {})  # earlier runs on an idle machine
        assert site not in vm.inline_sites and vm.handoff_seconds == 50e-6
        rule.update([work] * 40, {site: work})  # a loaded run: slow handoffs
        assert site not in vm.inline_sites and vm.handoff_seconds == 50e-6
        threads = Threads()
        model.set_instrument(threads)
        for a, b in zip(model.run(inputs), want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert threads.accel == ["tensorfab-accel_0"]
        # a site whose work is shorter than two handoffs goes inline and runs on the
        # host thread, with the same outputs
        rule.update([work] * 400, {site: work})
        assert site in vm.inline_sites
        threads.accel.clear()
        for a, b in zip(model.run(inputs), want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert threads.accel == [threading.current_thread().name]
