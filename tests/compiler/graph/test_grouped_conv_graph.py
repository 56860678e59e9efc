"""Grouped and depthwise convolutions of an ONNX model on the accelerator: the
partitioner takes them (block-diagonal super-groups), the compiled model equals its
integer graph on the CPU kernels bit for bit (fsim, and resident on the RTL), and the
profile counts the model's own MACs (numpy count from the ONNX file)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.profiling import profile_program
from tensorfab.runtime.resident import ResidentModel
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator

#: (name, in, out, groups, kernel, stride)
#: the depthwise 3×3 has 24 channels: 32 groups on 16-lane blocks, 8 of them padding
CONVS = [("c0", 16, 24, 1, 3, 1), ("dw", 24, 24, 24, 3, 1), ("pw", 24, 48, 1, 1, 1),
         ("g2", 48, 64, 2, 3, 2), ("dw5", 64, 64, 64, 5, 1)]


def mobile_block_onnx(seed: int = 0) -> onnx.ModelProto:
    """Conv, a depthwise 3×3, a pointwise 1×1, a groups=2 3×3/2 and a depthwise 5×5,
    each followed by Relu."""
    rng = np.random.default_rng(seed)
    inits, nodes, prev = [], [], "x"
    for name, ci, co, g, k, s in CONVS:
        w = (rng.standard_normal((co, ci // g, k, k)) * (1.5 / np.sqrt(ci // g * k * k)))
        inits += [numpy_helper.from_array(w.astype(np.float32), f"{name}.w"),
                  numpy_helper.from_array((rng.standard_normal(co) * 0.1).astype(np.float32),
                                          f"{name}.b")]
        nodes += [helper.make_node("Conv", [prev, f"{name}.w", f"{name}.b"], [f"{name}.y"],
                                   group=g, pads=[k // 2] * 4, strides=[s, s]),
                  helper.make_node("Relu", [f"{name}.y"], [f"{name}.r"])]
        prev = f"{name}.r"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    graph = helper.make_graph(
        nodes, "mobile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _numpy_macs() -> int:
    size, total = 12, 0
    for _, ci, co, g, k, s in CONVS:
        size //= s
        total += size * size * co * (ci // g) * k * k
    return total


def test_grouped_convolutions_run_on_the_accelerator_bit_exact() -> None:
    rng = np.random.default_rng(1)
    calib = np.maximum(rng.standard_normal((8, 16, 12, 12)), 0).astype(np.float32)
    compiled = compile_onnx(mobile_block_onnx(), config="default", calibration=calib)
    assert compiled.cpu_convolutions == ()
    programs = [e for e in post_order(compiled.function)
                if isinstance(e, Call) and e.op == "accel.program"]
    assert len(programs) == len(CONVS)
    x = calib[:1]
    want = run_program(lower_to_runtime(compiled.integer_function), [x])
    profile = profile_program(compiled.program, [x], FunctionalSimulator())
    np.testing.assert_array_equal(profile.output, want)
    assert profile.accel_macs == _numpy_macs()
    with ResidentModel(compiled.program, RtlSimulator()) as resident:
        rtl = profile_program(compiled.program, [x], resident.device, resident=resident)
    np.testing.assert_array_equal(rtl.output, want)
