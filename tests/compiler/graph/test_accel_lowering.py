"""Random int8 convolution chains through partitioning, planning, blocked layouts and the
tensor compiler: the functional simulator's result equals the CPU interpreter's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfab.compiler.graph import CPU, Call, Function, accel, post_order
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.partitioning import annotate_accelerator
from tensorfab.compiler.graph.planning import plan_devices


def compile_for(f: Function, cfg: str) -> Function:
    dev = accel(cfg)
    return lower_accelerator_chains(pack_accel_layouts(plan_devices(
        annotate_accelerator(fixed_point_requantize(f), dev))))


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_random_conv_chains(data) -> None:
    cfg = data.draw(st.sampled_from(["tiny", "small", "default"]))
    r = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    c, o = data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20))
    k = data.draw(st.sampled_from([1, 3]))
    h = data.draw(st.integers(k, 7))
    stride = data.draw(st.sampled_from([1, 2]))
    pad = data.draw(st.integers(0, k // 2))
    x = gb.var("x", (1, c, h, h), "int8", device=CPU)
    w = r.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    y = gb.conv2d_integer(x, w, np.int8(0), np.int8(0), strides=(stride, stride),
                          padding=(pad,) * 4)
    if data.draw(st.booleans()):
        y = gb.add(y, r.integers(-5000, 5000, (o, 1, 1)).astype(np.int32))
    y = gb.requantize(y, np.float32(data.draw(st.floats(1e-4, 2e-2))), np.int8(0),
                      out_dtype="int8")
    tail = data.draw(st.sampled_from(["none", "relu", "clip"]))
    if tail == "relu":
        y = gb.relu(y)
    elif tail == "clip":
        y = gb.clip(y, a_min=-20, a_max=90)
    f = gb.function([x], gb.negative(y), result_device=CPU)
    compiled = compile_for(f, cfg)
    assert [e.op for e in post_order(compiled) if isinstance(e, Call)].count(
        "accel.program") == 1
    xv = r.integers(-128, 128, (1, c, h, h)).astype(np.int8)
    np.testing.assert_array_equal(evaluate(compiled, [xv]),
                                  evaluate(fixed_point_requantize(f), [xv]))


def test_chain_without_requantization_stays_on_the_interpreter() -> None:
    x = gb.var("x", (1, 4, 5, 5), "int8", device=CPU)
    w = np.ones((4, 4, 3, 3), np.int8)
    acc = gb.conv2d_integer(x, w, np.int8(0), np.int8(0))
    f = gb.function([x], gb.cast(acc, dtype="float32"), result_device=CPU)
    compiled = compile_for(f, "tiny")
    names = [e.op for e in post_order(compiled) if isinstance(e, Call)]
    assert "accel.program" not in names and "qnn.conv2d_integer" in names
    xv = np.ones((1, 4, 5, 5), np.int8)
    np.testing.assert_array_equal(evaluate(compiled, [xv]), np.full((1, 4, 3, 3), 36.0))


def _padded_chain(pads: tuple, stride: int = 1, dilation: tuple = (1, 1)) -> Function:
    r = np.random.default_rng(sum(pads) + stride)
    x = gb.var("x", (1, 6, 7, 7), "int8", device=CPU)
    y = gb.requantize(gb.conv2d_integer(x, r.integers(-128, 128, (5, 6, 3, 3)).astype(np.int8),
                                        np.int8(0), np.int8(0), padding=pads,
                                        strides=(stride, stride), dilation=dilation),
                      np.float32(0.004), np.int8(0), out_dtype="int8")
    return gb.function([x], y, result_device=CPU)


# (top, left, bottom, right) as ONNX pads: SAME_UPPER with stride 2 pads (0, 0, 1, 1)
@pytest.mark.parametrize("pads, stride", [((1, 0, 0, 0), 1), ((0, 1, 0, 2), 1),
                                          ((0, 0, 1, 1), 2), ((2, 1, 0, 1), 2)])
def test_asymmetric_padding_runs_on_the_accelerator(pads: tuple, stride: int) -> None:
    f = _padded_chain(pads, stride)
    compiled = compile_for(f, "tiny")
    assert [e.op for e in post_order(compiled) if isinstance(e, Call)].count(
        "accel.program") == 1
    xv = np.random.default_rng(5).integers(-128, 128, (1, 6, 7, 7)).astype(np.int8)
    np.testing.assert_array_equal(evaluate(compiled, [xv]),
                                  evaluate(fixed_point_requantize(f), [xv]))


@pytest.mark.parametrize("pads, stride, dilation", [((0, 0, 1, 1), 2, (1, 1)),
                                                    ((2, 1, 2, 3), 1, (2, 2))])
def test_asymmetric_padding_and_dilation_on_the_rtl(pads, stride, dilation) -> None:
    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim.rtl import RtlSimulator

    f = _padded_chain(pads, stride, dilation)
    program = lower_to_runtime(compile_for(f, "tiny"))
    xv = np.random.default_rng(6).integers(-128, 128, (1, 6, 7, 7)).astype(np.int8)
    profile = profile_program(program, [xv], RtlSimulator())
    accel = [r for r in profile.layers if r.device == "accel"]
    assert len(accel) == 1 and accel[0].cycles and not profile.estimated  # ran on the RTL
    np.testing.assert_array_equal(profile.output,
                                  evaluate(fixed_point_requantize(f), [xv]))


@pytest.mark.parametrize("dilation, on_accel", [((2, 2), True), ((1, 2), True),
                                                 ((3, 3), False)])
def test_dilated_convolution_on_the_accelerator_up_to_the_taps_ratio(dilation, on_accel
                                                                      ) -> None:
    # 3x3 at dilation 2 runs as a 5x5 kernel with zero taps (25 / 9 MACs); at dilation 3
    # (7x7: 49 / 9) it stays on the CPU
    f = _padded_chain((2, 2, 2, 2), 1, dilation=dilation)
    compiled = compile_for(f, "tiny")
    names = [e.op for e in post_order(compiled) if isinstance(e, Call)]
    assert ("accel.program" in names) == on_accel
    assert ("qnn.conv2d_integer" in names) != on_accel
    xv = np.random.default_rng(7).integers(-128, 128, (1, 6, 7, 7)).astype(np.int8)
    np.testing.assert_array_equal(evaluate(compiled, [xv]),
                                  evaluate(fixed_point_requantize(f), [xv]))


def test_padding_past_the_loads_pad_field_stays_on_the_cpu_with_the_reason() -> None:
    from tensorfab.compiler.graph.partitioning import cpu_convolutions
    from tensorfab.compiler.tensor.schedule import max_pad
    from tensorfab.isa import PRESETS

    big = max_pad(PRESETS["tiny"]) + 1
    f = _padded_chain((big, 0, 1, 0), 1)
    compiled = compile_for(f, "tiny")
    names = [e.op for e in post_order(compiled) if isinstance(e, Call)]
    assert "accel.program" not in names and "qnn.conv2d_integer" in names
    (line,) = cpu_convolutions(compiled, PRESETS["tiny"])
    assert f"padding ({big}, 0, 1, 0): a LOAD of tiny pads at most {big - 1}" in line
    xv = np.random.default_rng(8).integers(-128, 128, (1, 6, 7, 7)).astype(np.int8)
    np.testing.assert_array_equal(evaluate(compiled, [xv]),
                                  evaluate(fixed_point_requantize(f), [xv]))


def test_epilogue_errors_name_the_source_nodes() -> None:
    """An epilogue the tensor compiler refuses ('clip bounds (50, -50) must satisfy
    -32768 <= lo <= hi <= 32767') named no node; now the chain's source nodes (the names
    the ONNX frontend gives its calls) and operators lead the message."""
    from tensorfab.compiler.graph.ir import name_new_calls
    from tensorfab.compiler.tensor.errors import CompileError

    r = np.random.default_rng(6)
    x = gb.var("x", (1, 4, 5, 5), "int8", device=CPU)
    conv = gb.conv2d_integer(x, r.integers(-128, 128, (4, 4, 3, 3)).astype(np.int8),
                             np.int8(0), np.int8(0))
    name_new_calls([conv], "conv0", set())
    y = gb.clip(gb.requantize(conv, np.float32(0.004), np.int8(0), out_dtype="int8"),
                a_min=50, a_max=-50)
    name_new_calls([y], "relu6_0", set())
    f = gb.function([x], gb.negative(y), result_device=CPU)
    with pytest.raises(CompileError, match=r"^nodes 'conv0', 'relu6_0' \(qnn\.conv2d_integer\+"
                                           r"qnn\.requantize_fixed\+clip on the accelerator\): "
                                           r"clip bounds \(50, -50\) must satisfy"):
        compile_for(f, "tiny")
