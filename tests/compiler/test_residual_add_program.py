"""The residual add (``qnn.add_q31``) as an accelerator program: bit-exact against an
independent TFLite int8 ADD reference (numpy here, gemmlowp arithmetic), against the
graph's CPU kernel, and on the RTL executor against the functional simulator (DRAM
image and every counter); the timing model within 10 % of the RTL's cycles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.gemmlowp_reference import multiply_by_quantized_multiplier, quantize_multiplier

from tensorfab.compiler import check_program_order
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.residual_add import residual_add_program
from tensorfab.compiler.tensor.timing import simulate
from tensorfab.isa import PRESETS, AluOp
from tensorfab.runtime.kernels import KERNELS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator

FSIM = FunctionalSimulator()


def add_attrs(sa: float, sb: float, sy: float, zero_point: int = 0) -> dict:
    """TFLite's int8 ADD parameters (left shift 20, operands scaled by s / 2·max)."""
    twice_max = 2 * max(sa, sb)
    out = {"left_shift": 20, "zero_point": zero_point}
    for k, real in (("a", sa / twice_max), ("b", sb / twice_max),
                    ("out", twice_max / ((1 << 20) * sy))):
        out[f"{k}_multiplier"], out[f"{k}_shift"] = quantize_multiplier(real)
    return out


def tflite_add(a: np.ndarray, b: np.ndarray, attrs: dict) -> np.ndarray:
    """TFLite reference_ops::Add (int8), from the attributes, in int64 numpy."""
    left = attrs["left_shift"]
    a2 = multiply_by_quantized_multiplier(a.astype(np.int64) << left, attrs["a_multiplier"],
                                          attrs["a_shift"])
    b2 = multiply_by_quantized_multiplier(b.astype(np.int64) << left, attrs["b_multiplier"],
                                          attrs["b_shift"])
    y = multiply_by_quantized_multiplier(a2 + b2, attrs["out_multiplier"], attrs["out_shift"])
    return np.clip(y + attrs["zero_point"], -128, 127).astype(np.int8)


def _case(seed: int, shape: tuple[int, ...]):
    r = np.random.default_rng(seed)
    a = r.integers(-128, 128, shape).astype(np.int8)
    b = r.integers(-128, 128, shape).astype(np.int8)
    sa, sb = (float(np.float32(10 ** r.uniform(-3, -1))) for _ in range(2))
    sy = float(np.float32((sa + sb) * r.uniform(0.3, 2.0)))
    zp = int(r.integers(-20, 20)) if seed % 2 else 0
    return a, b, add_attrs(sa, sb, sy, zp)


@pytest.mark.parametrize(("seed", "shape", "tile"), [
    (0, (1, 4, 9, 9, 1, 16), 64),      # ragged last tile (324 entries)
    (1, (1, 2, 5, 7, 1, 16), 256),     # fewer entries than a tile
    (2, (1, 8, 14, 14, 1, 16), 256),   # ResNet-like, zero point
    (3, (1, 16, 3, 3, 1, 16), 32)])
def test_fsim_equals_tflite_reference_and_cpu_kernel(seed, shape, tile) -> None:
    a, b, attrs = _case(seed, shape)
    p = residual_add_program(PRESETS["default"], shape, attrs, a, b, tile=tile)
    check_program_order(p.insns, p.config.dep_queue_depth)
    got = FSIM.run(p).outputs["out"]
    np.testing.assert_array_equal(got, tflite_add(a, b, attrs))
    np.testing.assert_array_equal(got, KERNELS["qnn.add_q31"]([a, b], attrs))


@pytest.mark.parametrize(("za", "zb"), [(-128, 5), (17, 17), (0, -60)])
def test_operand_zero_points(za: int, zb: int) -> None:
    # an asymmetric model's add: each operand less its zero point before the scaling
    r = np.random.default_rng(11)
    shape = (1, 3, 5, 6, 1, 16)
    a = r.integers(-128, 128, shape).astype(np.int8)
    b = r.integers(-128, 128, shape).astype(np.int8)
    attrs = add_attrs(0.02, 0.05, 0.06, zero_point=-20) | {"a_zero_point": za,
                                                            "b_zero_point": zb}
    got = FSIM.run(residual_add_program(PRESETS["default"], shape, attrs, a, b)).outputs["out"]
    shifted = {**attrs, "a_zero_point": 0, "b_zero_point": 0}
    want = tflite_add(a.astype(np.int64) - za, b.astype(np.int64) - zb, shifted)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, KERNELS["qnn.add_q31"]([a, b], attrs))


def test_positive_operand_exponent_takes_the_shl_path() -> None:
    # one operand's scale far above the other's: b's multiplier has exponent < -1 and a's
    # is 0; an out scale > 1 gives a positive output exponent
    r = np.random.default_rng(5)
    shape = (1, 2, 4, 4, 1, 16)
    a = r.integers(-128, 128, shape).astype(np.int8)
    b = r.integers(-128, 128, shape).astype(np.int8)
    attrs = add_attrs(0.5, 0.001, 0.5 / (1 << 22))
    assert attrs["out_shift"] > 0
    got = FSIM.run(residual_add_program(PRESETS["default"], shape, attrs, a, b)).outputs["out"]
    np.testing.assert_array_equal(got, tflite_add(a, b, attrs))


def test_bad_config_and_shape_are_named() -> None:
    attrs = add_attrs(0.1, 0.1, 0.2)
    with pytest.raises(CompileError, match="not whole entries of 16"):
        residual_add_program(PRESETS["default"], (1, 3, 5, 5), attrs)
    narrow = dataclasses.replace(PRESETS["default"], name="narrow", block_out=8)
    with pytest.raises(CompileError, match=r"config 'narrow': a residual add needs "
                       r"block_in == block_out \(got 16, 8\)"):
        residual_add_program(narrow, (1, 16, 2, 2), attrs)
    with pytest.raises(CompileError, match="missing attributes out_shift"):
        residual_add_program(PRESETS["default"], (1, 16, 2, 2),
                             {k: v for k, v in attrs.items() if k != "out_shift"})


@pytest.mark.parametrize(("preset", "seed", "shape", "tile", "relu"), [
    ("default", 7, (1, 4, 9, 9, 1, 16), 64, False),
    ("default", 9, (1, 4, 28, 28, 1, 16), 256, True),  # 64×28×28, zero point, relu
    ("small", 11, (1, 3, 6, 6, 1, 8), 256, True)])      # a tile larger than a quarter
def test_rtl_bit_exact_with_fsim_and_timing_model(preset, seed, shape, tile, relu) -> None:
    a, b, attrs = _case(seed, shape)
    p = residual_add_program(PRESETS[preset], a.shape, attrs, a, b, tile=tile, relu=relu)
    res, ref = RtlSimulator().run(p), FSIM.run(p)
    np.testing.assert_array_equal(res.dram, ref.dram)
    assert res.counters == ref.counters
    want = tflite_add(a, b, attrs)
    np.testing.assert_array_equal(res.outputs["out"], np.maximum(want, 0) if relu else want)
    model = simulate(p.insns, p.config).cycles
    assert abs(model - res.cycles) <= 0.1 * res.cycles


@pytest.mark.parametrize("scales", ["equal", "neither_half"])
def test_larger_scale_shortcut_cases(scales) -> None:
    # equal scales: both operands take the SHL-by-(L-1) shortcut; hand-made multipliers
    # (not 2^30): neither does; both must still equal the reference bit for bit
    r = np.random.default_rng(13)
    shape = (1, 3, 7, 7, 1, 16)
    a = r.integers(-128, 128, shape).astype(np.int8)
    b = r.integers(-128, 128, shape).astype(np.int8)
    if scales == "equal":
        attrs = add_attrs(0.02, 0.02, 0.03)
        assert attrs["a_multiplier"] == attrs["b_multiplier"] == 1 << 30
    else:
        attrs = add_attrs(0.02, 0.013, 0.03) | {"a_multiplier": 1_500_000_000,
                                                "a_shift": -1}
    p = residual_add_program(PRESETS["default"], shape, attrs, a, b, tile=64)
    got = FSIM.run(p).outputs["out"]
    np.testing.assert_array_equal(got, tflite_add(a, b, attrs))
    np.testing.assert_array_equal(got, KERNELS["qnn.add_q31"]([a, b], attrs))
    mulhi = sum(getattr(i, "op", None) is AluOp.MULHI for i in p.insns)
    tiles = -(-a.size // 16 // 64)
    assert mulhi == tiles * (1 if scales == "equal" else 2)  # output stage (+ operands)
