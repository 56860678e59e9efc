"""Squeeze-excite's int8 operators as accelerator programs: global average pooling
(``qnn.global_avg_pool_q31``) and the channel-wise scale (``qnn.mul_q31`` by a
per-channel tensor), bit-exact against independent numpy references (gemmlowp arithmetic
from the tests' support), against the graph's CPU kernels, close to the float
operations, and on the RTL executor against the functional simulator."""

from __future__ import annotations

import numpy as np
import pytest
from support.gemmlowp_reference import multiply_by_quantized_multiplier, requant_single

from tensorfab.compiler import check_program_order
from tensorfab.compiler.tensor.channel_scale import channel_scale_program, mul_attrs
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.global_pool import (
    global_avg_pool_attrs,
    global_avg_pool_program,
)
from tensorfab.isa import PRESETS
from tensorfab.runtime.kernels import KERNELS
from tensorfab.sim import FunctionalSimulator

FSIM = FunctionalSimulator()
CFG = PRESETS["default"]


def scaled(v: np.ndarray, attrs: dict) -> np.ndarray:
    """``v`` (int64) shifted left, scaled as TFLite's MultiplyByQuantizedMultiplier, +
    zero point, clipped to int8."""
    y = multiply_by_quantized_multiplier(v << attrs["left_shift"], attrs["multiplier"],
                                         attrs["shift"])
    return np.clip(y + attrs["zero_point"], -128, 127).astype(np.int8)


def _int8(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return r.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize(("seed", "shape", "tile", "zx"), [
    (0, (1, 3, 9, 9, 1, 16), 64, 0),       # runs split in tiles, the last shorter
    (1, (1, 2, 5, 7, 1, 16), 256, 0),      # a run shorter than a tile, zero point
    (2, (1, 13, 12, 24, 1, 16), 256, 0),   # 13 channel blocks (200 channels padded)
    (3, (1, 1, 1, 1, 1, 16), 8, 0),        # one entry
    (5, (1, 4, 7, 7, 1, 16), 32, -128)])   # an asymmetric model's input zero point
def test_global_pool_equals_reference_and_cpu_kernel(seed, shape, tile, zx) -> None:
    r = np.random.default_rng(seed)
    x = _int8(r, shape)
    pixels = shape[2] * shape[3]
    s_x = float(np.float32(10 ** r.uniform(-2, 0)))
    s_y = float(np.float32(s_x * r.uniform(0.05, 0.5) * (8 if zx else 1)))
    attrs = global_avg_pool_attrs(s_x, s_y, pixels, int(r.integers(-9, 9)) if seed % 2 else 0,
                                  zx)
    p = global_avg_pool_program(CFG, shape, attrs, x, tile=tile)
    check_program_order(p.insns, p.config.dep_queue_depth)
    got = FSIM.run(p).outputs["out"]
    want = scaled((x.astype(np.int64) - zx).sum(axis=(2, 3), keepdims=True), attrs)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, KERNELS["qnn.global_avg_pool_q31"]([x], attrs))
    mean = (x.astype(np.float64) - zx).mean(axis=(2, 3), keepdims=True) * s_x / s_y
    inside = np.abs(mean + attrs["zero_point"]) < 127
    assert np.abs(got - mean - attrs["zero_point"])[inside].max() <= 0.5 + 1e-6


@pytest.mark.parametrize(("seed", "shape", "tile", "za", "zb"), [
    (0, (1, 3, 9, 9, 1, 16), 64, 0, 0),
    (1, (1, 2, 5, 7, 1, 16), 256, 0, 0),     # zero point
    (2, (1, 13, 6, 24, 1, 16), 100, 0, 0),   # runs not multiples of the tile
    (3, (1, 4, 1, 1, 1, 16), 8, 0, 0),
    (5, (1, 3, 5, 9, 1, 16), 32, -114, -128),  # an asymmetric model's zero points
    (7, (1, 2, 3, 3, 1, 16), 8, 17, 0)])
def test_channel_scale_equals_reference_and_cpu_kernel(seed, shape, tile, za, zb) -> None:
    r = np.random.default_rng(seed)
    x = _int8(r, shape)
    s = r.integers(zb, 128, (shape[0], shape[1], 1, 1, shape[4], shape[5])).astype(np.int8)
    s_x, s_s = (float(np.float32(10 ** r.uniform(-2, 0))) for _ in range(2))
    s_y = float(np.float32(s_x * s_s * 127 * r.uniform(0.5, 1.5) * (2 if za else 1)))
    attrs = mul_attrs(s_x, s_s, s_y, int(r.integers(-9, 9)) if seed % 2 else 0, za, zb)
    p = channel_scale_program(CFG, shape, attrs, x, s, tile=tile)
    check_program_order(p.insns, p.config.dep_queue_depth)
    got = FSIM.run(p).outputs["out"]
    product = (x.astype(np.int64) - za) * (s.astype(np.int64) - zb)
    np.testing.assert_array_equal(got, scaled(product, attrs))
    np.testing.assert_array_equal(got, KERNELS["qnn.mul_q31"]([x, s], attrs))
    real = product.astype(np.float64) * s_x * s_s / s_y + attrs["zero_point"]
    inside = np.abs(real) < 127
    assert np.abs(got - real)[inside].max() <= 0.5 + 1e-6


def test_single_rounding_is_one_requant() -> None:
    from tensorfab.compiler.graph.fixed_point import single_rounding

    r = np.random.default_rng(9)
    shape = (1, 3, 5, 11, 1, 16)
    x = _int8(r, shape)
    s = r.integers(0, 128, (1, 3, 1, 1, 1, 16)).astype(np.int8)
    pool = global_avg_pool_attrs(0.05, 0.02, 55, 4, -7)
    pool |= single_rounding(pool)
    got = FSIM.run(global_avg_pool_program(CFG, shape, pool, x, tile=16)).outputs["out"]
    total = (x.astype(np.int64) + 7).sum(axis=(2, 3), keepdims=True)
    want = requant_single(total, pool["multiplier"], pool["shift"], 4)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, KERNELS["qnn.global_avg_pool_q31"]([x], pool))
    mul = mul_attrs(0.05, 0.008, 0.05, -3)
    mul |= single_rounding(mul)
    got = FSIM.run(channel_scale_program(CFG, shape, mul, x, s, tile=16)).outputs["out"]
    want = requant_single(x.astype(np.int64) * s, mul["multiplier"], mul["shift"], -3)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, KERNELS["qnn.mul_q31"]([x, s], mul))


def test_plain_layouts_and_full_buffers_are_refused() -> None:
    attrs = mul_attrs(0.1, 0.01, 0.1)
    with pytest.raises(CompileError, match="blocked"):
        channel_scale_program(CFG, (1, 16, 4, 4), attrs)
    with pytest.raises(CompileError, match="blocked"):
        global_avg_pool_program(CFG, (1, 16, 4, 4), attrs)
    with pytest.raises(CompileError, match="do not fit"):
        global_avg_pool_program(CFG, (1, CFG.acc_depth, 2, 2, 1, 16), attrs)
    with pytest.raises(CompileError, match="missing attributes"):
        channel_scale_program(CFG, (1, 1, 2, 2, 1, 16), {})


@pytest.mark.slow
def test_rtl_equals_fsim() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    r = np.random.default_rng(7)
    shape = (1, 5, 6, 30, 1, 16)
    x = _int8(r, shape)
    s = r.integers(0, 128, (1, 5, 1, 1, 1, 16)).astype(np.int8)
    from tensorfab.compiler.graph.fixed_point import single_rounding

    rtl = RtlSimulator()
    pool, mul = global_avg_pool_attrs(0.1, 0.01, 180), mul_attrs(0.1, 0.008, 0.1, 3)
    asym = mul_attrs(0.1, 0.004, 0.1, -5, 30, -128)
    for p in (global_avg_pool_program(CFG, shape, pool, x, tile=64),
              channel_scale_program(CFG, shape, asym, x, s, tile=64),
              global_avg_pool_program(CFG, shape, pool | single_rounding(pool), x, tile=64),
              channel_scale_program(CFG, shape, mul, x, s, tile=64),
              channel_scale_program(CFG, shape, mul | single_rounding(mul), x, s, tile=64)):
        want = FSIM.run(p)
        got = rtl.run(p)
        np.testing.assert_array_equal(got.outputs["out"], want.outputs["out"])
