"""int8 hard-swish (``qnn.hard_swish_q31``) as an accelerator program: bit-exact against
an independent numpy reference (gemmlowp arithmetic written in the tests' support), against
the graph's CPU kernel, within one int8 step of float hard-swish, and on the RTL executor
against the functional simulator."""

from __future__ import annotations

import numpy as np
import pytest
from support.gemmlowp_reference import multiply_by_quantized_multiplier, requant_single

from tensorfab.compiler import check_program_order
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.hard_swish import hard_swish_attrs, hard_swish_program
from tensorfab.isa import PRESETS, AluOp
from tensorfab.runtime.kernels import KERNELS
from tensorfab.sim import FunctionalSimulator

FSIM = FunctionalSimulator()


def reference(x: np.ndarray, attrs: dict) -> np.ndarray:
    """``x · relu6(x + offset)`` in int64, scaled as TFLite's MultiplyByQuantizedMultiplier
    after the left shift, + zero point, clipped to int8."""
    x = x.astype(np.int64) - attrs.get("input_zero_point", 0)
    t = np.clip((x << attrs["t_shift"]) + attrs["offset"], 0, attrs["upper"])
    p = (x * t) << attrs["left_shift"]
    y = multiply_by_quantized_multiplier(p, attrs["multiplier"], attrs["shift"])
    return np.clip(y + attrs["zero_point"], -128, 127).astype(np.int8)


def _case(seed: int, shape: tuple[int, ...], zx: int = 0):
    r = np.random.default_rng(seed)
    x = r.integers(-128, 128, shape).astype(np.int8)
    s_x = float(np.float32(10 ** r.uniform(-2.2, 0)))
    s_y = float(np.float32(s_x * r.uniform(0.3, 1.5)))
    attrs = hard_swish_attrs(s_x, s_y, int(r.integers(-10, 10)) if seed % 2 else 0, zx)
    assert attrs is not None
    return x, s_x, s_y, attrs


@pytest.mark.parametrize(("seed", "shape", "tile", "zx"), [
    (0, (1, 4, 9, 9, 1, 16), 64, 0),      # ragged last tile (324 entries)
    (1, (1, 2, 5, 7, 1, 16), 256, 0),     # fewer entries than a tile, zero point
    (2, (1, 8, 12, 24, 1, 16), 256, 0),
    (3, (1, 16, 3, 3, 1, 16), 32, 0),
    (5, (1, 3, 5, 9, 1, 16), 64, 23),     # an asymmetric model's input zero point
    (6, (1, 2, 4, 4, 1, 16), 16, -128)])
def test_fsim_equals_reference_and_cpu_kernel(seed, shape, tile, zx) -> None:
    x, _, _, attrs = _case(seed, shape, zx)
    p = hard_swish_program(PRESETS["default"], shape, attrs, x, tile=tile)
    check_program_order(p.insns, p.config.dep_queue_depth)
    got = FSIM.run(p).outputs["out"]
    np.testing.assert_array_equal(got, reference(x, attrs))
    np.testing.assert_array_equal(got, KERNELS["qnn.hard_swish_q31"]([x], attrs))


@pytest.mark.parametrize(("seed", "zx"), [(k, 0) for k in range(6)] + [(6, 40), (7, -128)])
def test_close_to_float_hard_swish(seed, zx) -> None:
    x, s_x, s_y, attrs = _case(seed, (256,), zx)
    x = np.arange(-128, 128, dtype=np.int8)
    real = (x.astype(np.float64) - zx) * s_x
    want = real * np.clip(real + 3, 0, 6) / 6 / s_y + attrs["zero_point"]
    got = KERNELS["qnn.hard_swish_q31"]([x], attrs).astype(np.float64)
    inside = (want > -128.5) & (want < 127.5)
    # the output's rounding, 3 and 6 rounded to a fraction of x's step
    assert np.abs(got - want)[inside].max() <= 0.51
    assert np.all(got[want >= 127.5] == 127)


@pytest.mark.parametrize("seed", range(3))
def test_single_rounding_is_one_requant(seed) -> None:
    from tensorfab.compiler.graph.fixed_point import single_rounding

    x, _, _, attrs = _case(seed, (1, 3, 7, 9, 1, 16))
    attrs = attrs | single_rounding(attrs)
    p = hard_swish_program(PRESETS["default"], x.shape, attrs, x, tile=64)
    assert sum(i.op == AluOp.REQUANT for i in p.insns if hasattr(i, "op")) >= 1
    got = FSIM.run(p).outputs["out"]
    t = np.clip((x.astype(np.int64) << attrs["t_shift"]) + attrs["offset"], 0, attrs["upper"])
    want = requant_single(x * t, attrs["multiplier"], attrs["shift"], attrs["zero_point"])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, KERNELS["qnn.hard_swish_q31"]([x], attrs))
    with pytest.raises(CompileError, match="has no REQUANT"):
        hard_swish_program(PRESETS["tiny"], (1, 1, 2, 2, 1, 4), attrs)


def test_tiny_input_range_is_left_to_the_cpu() -> None:
    assert hard_swish_attrs(1e-4, 1e-4) is None


def test_config_without_equal_blocks_is_refused() -> None:
    shape = (1, 1, 2, 2, 1, 16)
    attrs = hard_swish_attrs(0.05, 0.05)
    with pytest.raises(CompileError, match="block_in == block_out"):
        hard_swish_program(PRESETS["default"].replace(block_out=8), shape, attrs)
    with pytest.raises(CompileError, match="missing attributes t_shift, offset"):
        hard_swish_program(PRESETS["default"], shape, {})


@pytest.mark.slow
def test_rtl_equals_fsim() -> None:
    from tensorfab.compiler.graph.fixed_point import single_rounding
    from tensorfab.sim.rtl import RtlSimulator

    x, _, _, attrs = _case(4, (1, 4, 6, 20, 1, 16))
    _, _, _, asym = _case(5, (1,), -100)
    for a in (attrs, attrs | single_rounding(attrs), asym):
        p = hard_swish_program(PRESETS["default"], x.shape, a, x, tile=128)
        want = FSIM.run(p)
        got = RtlSimulator().run(p)
        np.testing.assert_array_equal(got.outputs["out"], want.outputs["out"])
