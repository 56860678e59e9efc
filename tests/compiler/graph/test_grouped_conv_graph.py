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


def _grouped_residual_onnx() -> onnx.ModelProto:
    """``relu(a + gconv(a))`` with ``a = relu(conv(x))``: a ``groups=4`` 1×1 convolution
    of 64 channels (four super-groups of one 16-channel group) with the residual add
    fused."""
    rng = np.random.default_rng(5)
    w1 = rng.normal(0, np.sqrt(2 / 288), (64, 32, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.03, (64, 16, 1, 1)).astype(np.float32)  # factors >= 256
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"]),
        helper.make_node("Conv", ["a", "w2"], ["c2"], group=4),
        helper.make_node("Add", ["a", "c2"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "grouped_residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 8, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 64, 8, 8))],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_grouped_convolution_with_a_fused_residual_is_bit_exact() -> None:
    """The fused residual's per-channel factors and its input segment follow the
    super-groups (each its own factors, the residual in the output's one-image layout)."""
    rng = np.random.default_rng(6)
    calib = rng.normal(0, 1, (4, 32, 8, 8)).astype(np.float32)
    compiled = compile_onnx(_grouped_residual_onnx(), config="default", calibration=calib)
    fused = [e for e in post_order(compiled.function) if isinstance(e, Call)
             and e.op == "accel.program" and e.attrs.get("extra_input_segment") == "res"]
    assert len(fused) == 1 and compiled.cpu_convolutions == ()
    x = rng.normal(0, 1, (1, 32, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_program(compiled.program, [x]),
                                  run_program(lower_to_runtime(compiled.integer_function),
                                              [x]))
