"""Spatial padding with a constant (``nn.pad`` of an int8 activation) as an accelerator
program: equal to numpy's padding of the blocked tensor on fsim, for rows that fit a
tile and rows wider than one, and on the RTL executor against the functional
simulator."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler import check_program_order
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.pad import pad_program, spatial_pads
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator

FSIM = FunctionalSimulator()
CFG = PRESETS["default"]


def _padded(x: np.ndarray, pads: tuple[int, int, int, int], value: int) -> np.ndarray:
    top, left, bottom, right = pads
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right), (0, 0), (0, 0)),
                  constant_values=value)


@pytest.mark.parametrize(("seed", "shape", "pads", "value", "tile"), [
    (0, (1, 2, 5, 7, 1, 16), (1, 1, 1, 1), -128, 256),  # an asymmetric model's zero point
    (1, (1, 3, 9, 9, 1, 16), (2, 0, 1, 3), 17, 32),     # rows in groups, uneven pads
    (2, (1, 1, 4, 40, 1, 16), (1, 2, 0, 1), -5, 16),    # rows wider than a tile
    (3, (1, 2, 3, 3, 1, 16), (1, 1, 1, 1), 0, 8),       # pads of zero
    (4, (1, 1, 1, 1, 1, 16), (0, 0, 0, 0), 9, 8)])      # nothing to pad
def test_fsim_equals_numpy(seed, shape, pads, value, tile) -> None:
    x = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
    p = pad_program(CFG, shape, pads, value, x, tile=tile)
    check_program_order(p.insns, p.config.dep_queue_depth)
    np.testing.assert_array_equal(FSIM.run(p).outputs["out"], _padded(x, pads, value))


def test_pads_of_other_axes_and_bad_values_are_refused() -> None:
    assert spatial_pads((0, 0, 1, 2, 0, 0, 3, 4)) == (1, 2, 3, 4)
    assert spatial_pads((0, 1, 1, 1, 0, 0, 1, 1)) is None  # channels
    assert spatial_pads((0, 0, 1, 1, 0, 0, -1, 1)) is None
    with pytest.raises(CompileError, match="int8 value"):
        pad_program(CFG, (1, 1, 2, 2, 1, 16), (1, 1, 1, 1), 200)
    with pytest.raises(CompileError, match="one batch block"):
        pad_program(CFG, (2, 1, 2, 2, 1, 16), (1, 1, 1, 1), 0)


@pytest.mark.slow
def test_rtl_equals_fsim() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    x = np.random.default_rng(5).integers(-128, 128, (1, 3, 7, 11, 1, 16)).astype(np.int8)
    p = pad_program(CFG, x.shape, (1, 2, 2, 1), -128, x, tile=32)
    np.testing.assert_array_equal(RtlSimulator().run(p).outputs["out"],
                                  FSIM.run(p).outputs["out"])
