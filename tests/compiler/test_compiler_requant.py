"""Exact per-channel requantization in the compiler: TFLite's QuantizeMultiplier, input
zero points folded into the bias, MULHI / SHR_RND with per-channel vector operands;
conv2d and dense bit-exact against a TFLite-style integer reference written in the tests
(tests/support/gemmlowp_reference.py) on the functional simulator, a subset on RTL."""

from __future__ import annotations

import numpy as np
import pytest
from support.gemmlowp_reference import quantize_multiplier, requantize
from support.requant_cases import float_conv, quantized_case

from tensorfab.compiler import (
    RESNET18_CONV,
    Epilogue,
    conv2d,
    dense,
    fold_input_zero_point,
    quantize_multiplier_q31,
)
from tensorfab.isa import PRESETS, AluOp
from tensorfab.sim.testing.numpy_reference import conv2d_acc, dense_acc

DEFAULT = PRESETS["default"]


def test_quantize_multiplier_matches_tflite() -> None:
    rng = np.random.default_rng(0)
    scales = np.concatenate([rng.uniform(0, 1, 2000), 10.0 ** rng.uniform(-12, 3, 2000),
                             [1.0, 0.5, 0.25, 1 - 2 ** -40, 2 ** -31, 2 ** -33, 0.0, 3.0,
                              1e12]])
    for s in scales:
        assert quantize_multiplier_q31(float(s)) == quantize_multiplier(float(s)), s
    m, e = quantize_multiplier_q31(0.1234)
    assert 1 << 30 <= m < 1 << 31 and abs(m * 2.0 ** (e - 31) - 0.1234) < 1e-9
    with pytest.raises(ValueError, match="non-negative"):
        quantize_multiplier_q31(-1.0)


def test_epilogue_per_channel_ops_and_errors() -> None:
    ep = Epilogue.from_scales(np.array([0.01, 0.02, 3.0]), zero_point=-3, relu=True,
                              bias=True)
    assert ep.vector_tiles() == ["left_shift", "multiplier", "right_shift"]
    assert ep.channel_tiles == 4
    assert ep.alu_ops() == [(AluOp.SHL, "left_shift"), (AluOp.MULHI, "multiplier"),
                            (AluOp.SHR_RND, "right_shift"), (AluOp.ADD, -3),
                            (AluOp.MAX, -3), (AluOp.CLIP, 127)]
    with pytest.raises(ValueError, match="channel 1: shift -40"):
        Epilogue(multiplier=(1 << 30, 1 << 30), shift=(0, -40))
    with pytest.raises(ValueError, match="both multiplier and shift"):
        Epilogue(multiplier=(1 << 30,))
    with pytest.raises(ValueError, match="exclusive"):
        Epilogue(requant=(3, 4), multiplier=(1 << 30,), shift=(-1,))
    with pytest.raises(ValueError, match="zero_point 200"):
        Epilogue(zero_point=200)


def test_epilogue_refuses_what_is_not_an_integer() -> None:
    """Epilogue(zero_point=2.5) was accepted and truncated (an ADD of 2.5 that the
    encoder made 2; a multiplier of 2.5 became 2); every integer field now refuses a
    fraction, naming the field, and a whole float still means its integer."""
    from tensorfab.compiler import CompileError

    for kw, message in [
            (dict(zero_point=2.5), r"^zero_point 2\.5 is not an integer$"),
            (dict(zero_point=float("nan")), r"^zero_point nan is not an integer$"),
            (dict(zero_point=True), r"^zero_point True is not an integer$"),
            (dict(headroom=np.float32(1.5)), r"^headroom 1\.5 is not an integer$"),
            (dict(requant=(93.5, 14)), r"^requant\[0\] 93\.5 is not an integer$"),
            (dict(clip=(0, 99.5)), r"^clip\[1\] 99\.5 is not an integer$"),
            (dict(multiplier=(1 << 30, 2.5), shift=(-1, -1)),
             r"^multiplier\[1\] 2\.5 is not an integer$")]:
        with pytest.raises(CompileError, match=message):
            Epilogue(**kw)
    ep = Epilogue(requant=(np.int64(93), 14.0), zero_point=3.0)
    assert ep.requant == (93, 14) and ep.zero_point == 3
    assert all(type(v) is int for v in (*ep.requant, ep.zero_point))
    assert ep.alu_ops() == [(AluOp.MUL, 93), (AluOp.SHR_RND, 14), (AluOp.ADD, 3),
                            (AluOp.CLIP, 127)]


def test_fold_input_zero_point_refuses_what_is_not_an_integer() -> None:
    """A float zero point was truncated (2.5 folded as 2: a silently wrong bias), and so
    were float weights and biases; each is refused now, as the operators refuse them
    (one check), and a whole float still means its integer."""
    from tensorfab.compiler import CompileError

    w, bias = np.ones((2, 3), np.int8), np.array([10, 20], np.int32)
    with pytest.raises(CompileError, match=r"^input zero point = 2\.5 is not an integer"):
        fold_input_zero_point(bias, w, 2.5)
    with pytest.raises(CompileError, match=r"input zero point = nan is not an integer"):
        fold_input_zero_point(bias, w, float("nan"))
    with pytest.raises(CompileError, match=r"input zero point = 300 is outside the int8 "
                                           r"range -128\.\.127"):
        fold_input_zero_point(bias, w, 300)
    with pytest.raises(CompileError, match=r"bias\[1\] = 0\.9 is not an integer"):
        fold_input_zero_point(np.array([1.0, 0.9]), w, 2)
    with pytest.raises(CompileError, match=r"weights\[0, 1\] = 0\.5 is not an integer"):
        fold_input_zero_point(bias, np.array([[1, 0.5, 1], [1, 1, 1]]), 2)
    np.testing.assert_array_equal(fold_input_zero_point(bias, w, 2.0), [4, 14])
    np.testing.assert_array_equal(fold_input_zero_point(bias, w, np.int8(-2)), [16, 26])


def tflite_conv(x, w, bias, zx, zy, scales, stride, padding, relu):
    """TFLite's integer conv2d: Σ (x - zx)·w + bias (padding is zx, i.e. real zero),
    then MultiplyByQuantizedMultiplier per channel, + zy, clamp (ReLU: at zy)."""
    n, c, h, wd = x.shape
    pt, pb, pl, pr = padding
    xp = np.full((n, c, h + pt + pb, wd + pl + pr), zx, dtype=np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    acc = conv2d_acc(xp - zx, w, stride, (0, 0, 0, 0)) + bias.reshape(1, -1, 1, 1)
    q = [quantize_multiplier(float(s)) for s in scales]
    m = np.array([a for a, _ in q]).reshape(1, -1, 1, 1)
    e = np.array([b for _, b in q]).reshape(1, -1, 1, 1)
    return requantize(acc, m, e, zy, lo=zy if relu else -128), acc


def compile_quantized_conv(cfg, x, w, bias, zx, zy, scales, stride, padding, relu,
                           vthreads=2):
    """The compiler's side: zx folded into the bias; padding with zx is padding of the
    folded sum with zeros only where the window is inside the image, so the test pads
    x with zx itself and compiles an unpadded conv over the padded input."""
    ep = Epilogue.from_scales(scales, zero_point=zy, relu=relu)
    pt, pb, pl, pr = padding
    n, c, h, wd = x.shape
    xp = np.full((n, c, h + pt + pb, wd + pl + pr), zx, dtype=np.int8)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    return conv2d(cfg, xp, w, fold_input_zero_point(bias, w, zx), stride=stride,
                  padding=0, epilogue=ep, vthreads=vthreads)


@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
@pytest.mark.parametrize("relu", [False, True])
def test_conv2d_per_channel_bit_exact_fsim(preset: str, relu: bool) -> None:
    cfg = PRESETS[preset]
    rng = np.random.default_rng(len(preset) + 10 * relu)
    x, w, bias, zx, zy, scales = quantized_case(rng, (1, 24, 9, 9), (40, 24, 3, 3), 24 * 9)
    scales[3] = 2.5  # a scale above 1: a positive exponent, the SHL vector
    want, _ = tflite_conv(x, w, bias, zx, zy, scales, (1, 1), (1, 1, 1, 1), relu)
    op = compile_quantized_conv(cfg, x, w, bias, zx, zy, scales, (1, 1), (1, 1, 1, 1), relu)
    assert "left_shift" in op.epilogue.vector_tiles()
    np.testing.assert_array_equal(op.run("fsim"), want)


def test_dense_per_channel_bit_exact_fsim() -> None:
    rng = np.random.default_rng(5)
    x, w, bias, zx, zy, scales = quantized_case(rng, (12, 200), (70, 200), 200)
    ep = Epilogue.from_scales(scales, zero_point=zy)
    op = dense(DEFAULT, x, w, fold_input_zero_point(bias, w, zx), epilogue=ep)
    acc = dense_acc(x.astype(np.int64) - zx, w) + bias
    q = [quantize_multiplier(float(s)) for s in scales]
    want = requantize(acc, np.array([a for a, _ in q]), np.array([b for _, b in q]), zy)
    np.testing.assert_array_equal(op.run("fsim"), want)


def test_resnet18_last_stage_exact_and_within_one_lsb_of_float() -> None:
    """Acceptance: ResNet-18 C11 (7×7, 512→512, 3×3) with per-channel scales."""
    wl = RESNET18_CONV["C11"]
    rng = np.random.default_rng(11)
    x, w, bias, zx, zy, scales = quantized_case(
        rng, (1, wl.in_channels, wl.height, wl.width), (wl.out_channels, wl.in_channels, 3, 3),
        wl.in_channels * 9)
    want, acc = tflite_conv(x, w, bias, zx, zy, scales, wl.stride, wl.padding, relu=False)
    op = compile_quantized_conv(DEFAULT, x, w, bias, zx, zy, scales, wl.stride, wl.padding,
                                relu=False)
    got = op.run("fsim")
    np.testing.assert_array_equal(got, want)
    diff = np.abs(got.astype(np.int64) - float_conv(acc, scales, zy, relu=False))
    assert diff.max() <= 1
    assert (diff == 0).mean() >= 0.999
    assert 0.05 < (np.abs(got) > 60).mean() < 0.6  # the scales use the int8 range


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_conv2d_per_channel_on_rtl(preset: str) -> None:
    from tensorfab.sim import FunctionalSimulator
    from tensorfab.sim.rtl import RtlSimulator

    cfg = PRESETS[preset]
    rng = np.random.default_rng(7)
    x, w, bias, zx, zy, scales = quantized_case(rng, (1, 16, 8, 8), (48, 16, 3, 3), 16 * 9)
    scales[0] = 1.5
    want, _ = tflite_conv(x, w, bias, zx, zy, scales, (1, 1), (1, 1, 1, 1), relu=True)
    op = compile_quantized_conv(cfg, x, w, bias, zx, zy, scales, (1, 1), (1, 1, 1, 1), True)
    res = RtlSimulator().run(op.program)
    ref = FunctionalSimulator().run(op.program)
    np.testing.assert_array_equal(res.dram, ref.dram)
    assert res.counters == ref.counters
    np.testing.assert_array_equal(op.unpack(res.outputs["out"]), want)


def test_headroom_moves_shift_before_mulhi_and_rounds_closer_to_float() -> None:
    """With the accumulator bound, the sums are shifted left by k before MULHI and
    right by r + k after: SRDHM(x << k, M) then RoundingDivideByPOT(r + k), bit for bit,
    closer to round(acc · scale) than TFLite's double rounding."""
    from support.gemmlowp_reference import (
        rounding_divide_by_pot,
        saturating_rounding_doubling_high_mul,
    )

    from tensorfab.compiler import accumulator_bound

    rng = np.random.default_rng(9)
    x, w, bias, zx, zy, scales = quantized_case(rng, (64, 64), (96, 64), 64)
    scales *= 2.0
    bias = fold_input_zero_point(bias, w, zx)
    bound = accumulator_bound(64, int(np.abs(bias).max()))
    ep = Epilogue.from_scales(scales, zero_point=zy, acc_bound=bound)
    assert ep.headroom == 31 - bound.bit_length() > 0
    got = dense(DEFAULT, x, w, bias, epilogue=ep).run("fsim").astype(np.int64)
    acc = dense_acc(x, w) + bias
    q = [quantize_multiplier(float(s)) for s in scales]
    m = np.array([a for a, _ in q])
    r = -np.array([b for _, b in q])
    k = np.where(r > 0, np.minimum(31 - r, ep.headroom), 0)
    want = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(acc << k, m), r + k)
    np.testing.assert_array_equal(got, np.clip(want + zy, -128, 127))
    exact = requantize(acc, m, -r, zy)
    y = np.floor(acc * scales + 0.5) + zy
    flt = np.clip(y, -128, 127)
    assert (got == flt).mean() > (exact == flt).mean()
    assert np.abs(got - flt).max() <= 1
