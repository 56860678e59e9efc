"""One-pass requantization (``Epilogue(rounding="single")``, the REQUANT instruction):
conv2d, dense and grouped matmul bit-exact against an integer reference written here,
within one LSB of float, on fsim and (a subset) on RTL."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.requant_cases import float_conv, quantized_case, single_rounding

from tensorfab.compiler import (
    RESNET18_CONV,
    CompileError,
    Epilogue,
    batch_matmul,
    conv2d,
    dense,
    fold_input_zero_point,
)
from tensorfab.isa import PRESETS, AluOp
from tensorfab.sim.testing.numpy_reference import conv2d_acc, dense_acc

DEFAULT = PRESETS["default"]


def test_one_pass_epilogue_is_one_requant() -> None:
    ep = Epilogue.from_scales(np.array([0.01, 0.02, 3.0]), zero_point=-3, relu=True,
                              bias=True, rounding="single")
    assert ep.one_pass and ep.channel_tiles == 0 and ep.vector_tiles() == []
    # by default the STOREs requantize: no ALU pass, three accumulator entries a block
    assert ep.store_requant and ep.alu_ops() == []
    assert ep.record_entries(DEFAULT, 40, groups=2) == 0
    assert ep.acc_record_entries(DEFAULT, 40, groups=2) == 18
    alu = dataclasses.replace(ep, requant_stage="alu")
    assert not alu.store_requant and alu.alu_ops() == [(AluOp.REQUANT, "records")]
    assert alu.record_entries(DEFAULT, 40, groups=2) == 6
    assert alu.acc_record_entries(DEFAULT, 40, groups=2) == 0
    with pytest.raises(CompileError, match="requant_stage 'dma' is neither"):
        dataclasses.replace(ep, requant_stage="dma")
    with pytest.raises(CompileError, match="needs per-channel"):
        Epilogue(rounding="single")
    with pytest.raises(CompileError, match="neither"):
        Epilogue(rounding="triple")


def test_config_without_requant_is_a_named_compile_error() -> None:
    rng = np.random.default_rng(0)
    x, w, bias, _, zy, scales = quantized_case(rng, (1, 8, 5, 5), (8, 8, 3, 3), 72)
    ep = Epilogue.from_scales(scales, zero_point=zy, rounding="single")
    with pytest.raises(CompileError, match=r"'small' has no REQUANT.*rounding='double'"):
        conv2d(PRESETS["small"], x, w, bias, epilogue=ep)


@pytest.mark.parametrize("rounding", ["single", "double"])
def test_scales_for_another_channel_count_name_the_multipliers(rounding: str) -> None:
    """Eight scales for sixteen output channels: the one-pass path blamed the bias
    ('16 bias values for 8 channels'); both paths now name the multipliers."""
    rng = np.random.default_rng(0)
    x, w, bias, _, zy, scales = quantized_case(rng, (1, 16, 5, 5), (16, 16, 3, 3), 144)
    ep = Epilogue.from_scales(scales[:8], zero_point=zy, rounding=rounding)
    with pytest.raises(CompileError, match="the epilogue has 8 per-channel multiplier "
                                           "values, the operator 16 output channels"):
        conv2d(PRESETS["default"], x, w, bias, epilogue=ep)


@pytest.mark.parametrize("relu", [False, True])
def test_conv2d_one_pass_bit_exact_fsim(relu: bool) -> None:
    rng = np.random.default_rng(20 + relu)
    x, w, bias, zx, zy, scales = quantized_case(rng, (1, 24, 9, 9), (40, 24, 3, 3), 24 * 9)
    scales[3] = 2.5  # a scale above 1 (a positive exponent)
    acc = conv2d_acc(x.astype(np.int64) - zx, w, (1, 1), (0, 0, 0, 0)) \
        + bias.reshape(1, -1, 1, 1)
    want = single_rounding(acc, scales, zy, lo=zy if relu else -128)
    ep = Epilogue.from_scales(scales, zero_point=zy, relu=relu, rounding="single")
    op = conv2d(DEFAULT, x, w, fold_input_zero_point(bias, w, zx), epilogue=ep)
    assert [i.mnemonic for i in op.program.insns if i.mnemonic.startswith("alu")] \
        == ["alu.requant"] * sum(i.mnemonic == "alu.requant" for i in op.program.insns)
    np.testing.assert_array_equal(op.run("fsim"), want)


def test_clip_bounds_go_into_the_records() -> None:
    rng = np.random.default_rng(3)
    x, w, bias, _, zy, scales = quantized_case(rng, (1, 16, 6, 6), (20, 16, 1, 1), 16)
    ep = Epilogue.from_scales(scales, zero_point=zy, rounding="single")
    ep = Epilogue(**{**ep.__dict__, "clip": (-20, 30)})
    acc = conv2d_acc(x.astype(np.int64), w, (1, 1), (0, 0, 0, 0)) + bias.reshape(1, -1, 1, 1)
    op = conv2d(DEFAULT, x, w, bias, epilogue=ep)
    np.testing.assert_array_equal(op.run("fsim"), single_rounding(acc, scales, zy, -20, 30))
    # ReLU at a zero point above the clip's top: max(v, zp) then min(., hi) is hi, as the
    # double-rounding path's MAX then MIN gives it
    ep = Epilogue(**{**ep.__dict__, "zero_point": 40, "relu": True})
    op = conv2d(DEFAULT, x, w, bias, epilogue=ep)
    np.testing.assert_array_equal(op.run("fsim"), np.full(op.out_shape, 30))


def test_dense_and_grouped_matmul_one_pass_fsim() -> None:
    rng = np.random.default_rng(5)
    x, w, bias, zx, zy, scales = quantized_case(rng, (12, 200), (70, 200), 200)
    ep = Epilogue.from_scales(scales, zero_point=zy, rounding="single")
    op = dense(DEFAULT, x, w, fold_input_zero_point(bias, w, zx), epilogue=ep)
    acc = dense_acc(x.astype(np.int64) - zx, w) + bias
    np.testing.assert_array_equal(op.run("fsim"), single_rounding(acc, scales, zy))
    # two groups, each its own operands and bias: records per group
    a = rng.integers(-128, 128, (2, 9, 48)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 48, 20)).astype(np.int8)
    gbias = rng.integers(-5000, 5000, (2, 20)).astype(np.int32)
    s = rng.uniform(1e-3, 5e-3, 20)
    op = batch_matmul(DEFAULT, a, b, gbias,
                      epilogue=Epilogue.from_scales(s, rounding="single"))
    acc = np.einsum("gmk,gkn->gmn", a.astype(np.int64), b.astype(np.int64)) \
        + gbias[:, None, :]
    np.testing.assert_array_equal(op.run("fsim"), single_rounding(acc, s, 0, axis=2))


def test_resnet18_last_stage_one_pass_exact_and_closer_to_float() -> None:
    """ResNet-18 C11 (7×7, 512→512, 3×3), per-channel scales: equal to the integer
    reference; within 1 LSB of float and at least as close as TFLite's arithmetic."""
    wl = RESNET18_CONV["C11"]
    rng = np.random.default_rng(11)
    x, w, bias, zx, zy, scales = quantized_case(
        rng, (1, wl.in_channels, wl.height, wl.width), (wl.out_channels, wl.in_channels, 3, 3),
        wl.in_channels * 9)
    pt, pb, pl, pr = wl.padding
    xp = np.full((1, wl.in_channels, wl.height + pt + pb, wl.width + pl + pr), zx, np.int8)
    xp[:, :, pt:pt + wl.height, pl:pl + wl.width] = x
    acc = conv2d_acc(xp.astype(np.int64) - zx, w, wl.stride, (0, 0, 0, 0)) \
        + bias.reshape(1, -1, 1, 1)
    ep = Epilogue.from_scales(scales, zero_point=zy, rounding="single")
    op = conv2d(DEFAULT, xp, w, fold_input_zero_point(bias, w, zx), stride=wl.stride,
                padding=0, epilogue=ep)
    got = op.run("fsim")
    np.testing.assert_array_equal(got, single_rounding(acc, scales, zy))
    diff = np.abs(got.astype(np.int64) - float_conv(acc, scales, zy, relu=False))
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.9999


def test_conv2d_one_pass_on_rtl() -> None:
    from tensorfab.sim import FunctionalSimulator
    from tensorfab.sim.rtl import RtlSimulator

    rng = np.random.default_rng(7)
    x, w, bias, _, zy, scales = quantized_case(rng, (1, 16, 8, 8), (48, 16, 3, 3), 16 * 9)
    scales[0] = 1.5
    # the ALU's REQUANT pass (the other stage, the requantizing STOREs, is the default
    # the other RTL tests compile)
    ep = Epilogue.from_scales(scales, zero_point=zy, relu=True, rounding="single",
                              requant_stage="alu")
    op = conv2d(DEFAULT, x, w, bias, padding=1, epilogue=ep, vthreads=2)
    acc = conv2d_acc(x.astype(np.int64), w, (1, 1), (1, 1, 1, 1)) + bias.reshape(1, -1, 1, 1)
    res = RtlSimulator().run(op.program)
    ref = FunctionalSimulator().run(op.program)
    np.testing.assert_array_equal(res.dram, ref.dram)
    assert res.counters == ref.counters
    np.testing.assert_array_equal(op.unpack(res.outputs["out"]),
                                  single_rounding(acc, scales, zy, lo=zy))


def test_timing_model_covers_one_pass_on_rtl() -> None:
    """ResNet-18 C4 (1×1, the layer an epilogue costs most): the compiler's timing
    model is within 5 % of the RTL's cycles with REQUANT, and the output equals fsim."""
    from tensorfab.compiler.tensor.timing import simulate
    from tensorfab.sim import FunctionalSimulator
    from tensorfab.sim.rtl import RtlSimulator

    wl = RESNET18_CONV["C4"]
    rng = np.random.default_rng(4)
    x, w, bias, _, zy, scales = quantized_case(
        rng, (1, wl.in_channels, wl.height, wl.width), (wl.out_channels, wl.in_channels, 1, 1),
        wl.in_channels)
    ep = Epilogue.from_scales(scales, zero_point=zy, rounding="single")
    op = conv2d(DEFAULT, x, w, bias, stride=wl.stride, padding=wl.padding, epilogue=ep)
    res = RtlSimulator().run(op.program)
    np.testing.assert_array_equal(res.dram, FunctionalSimulator().run(op.program).dram)
    model = simulate(op.program.insns, DEFAULT)
    assert model is not None and abs(model.cycles - res.cycles) < 0.05 * res.cycles


def test_one_pass_errors_name_what_is_wrong() -> None:
    from tensorfab.compiler import Schedule, ScheduleError, Workload

    ep = Epilogue.from_scales(np.full(20, 0.01), rounding="single")
    wl = Workload.conv2d(1, 16, 6, 6, 20, 1, 1, 0)
    x, w = np.ones((1, 16, 6, 6), np.int8), np.ones((20, 16, 1, 1), np.int8)
    with pytest.raises(CompileError, match="reserves 0 accumulator entries for STORE "
                                           "records, the epilogue needs 6"):
        conv2d(DEFAULT, x, w, epilogue=ep, schedule=Schedule(wl, DEFAULT))
    alu = dataclasses.replace(ep, requant_stage="alu")
    with pytest.raises(CompileError, match="reserves 0 weight entries for REQUANT records, "
                                           "the epilogue needs 2"):
        conv2d(DEFAULT, x, w, epilogue=alu, schedule=Schedule(wl, DEFAULT))
    with pytest.raises(ScheduleError, match="1024 REQUANT records fill the 1024-entry"):
        Schedule(wl, DEFAULT, records=DEFAULT.wgt_depth).plan()
    with pytest.raises(ScheduleError, match="2048 entries of STORE records fill the "
                                            "2048-entry accumulator buffer"):
        Schedule(wl, DEFAULT, acc_records=DEFAULT.acc_depth).plan()
    with pytest.raises(CompileError, match="3 bias values for 20 channels"):
        ep.records(DEFAULT, np.zeros(3))
    with pytest.raises(CompileError, match="headroom only applies to rounding='double'"):
        Epilogue(multiplier=(1 << 30,), shift=(0,), rounding="single", headroom=2)
