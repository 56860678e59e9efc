"""A permutation of an int8 activation's channels (``qnn.channel_permute``, ShuffleNet's
channel shuffle) as an accelerator program: equal to numpy's permutation of the plain
tensor on fsim, with the gather's cost bounded by the blocks it connects, and on the RTL
executor against the functional simulator."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler import check_program_order
from tensorfab.compiler.tensor.channel_gather import block_sources
from tensorfab.compiler.tensor.channel_permute import channel_permute_program, permuted_channels
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.isa import PRESETS
from tensorfab.isa.insn import Gemm
from tensorfab.runtime.layout_transform import layout_transform
from tensorfab.sim import FunctionalSimulator

FSIM = FunctionalSimulator()
CFG = PRESETS["default"]
LAYOUT = "NCHW1n16c"


def _shuffle(channels: int, groups: int) -> np.ndarray:
    return np.arange(channels).reshape(groups, channels // groups).T.reshape(-1)


@pytest.mark.parametrize(("seed", "channels", "perm", "h", "w", "tile"), [
    (0, 48, "shuffle3", 5, 7, 256),     # ShuffleNet's toy: 3 groups of 16
    (1, 240, "shuffle3", 3, 3, 4),      # a real stage's 240 channels, ragged tiles
    (2, 24, "shuffle2", 4, 4, 8),       # channels padded to two blocks
    (3, 32, "random", 2, 9, 16)])
def test_fsim_equals_numpy(seed, channels, perm, h, w, tile) -> None:
    r = np.random.default_rng(seed)
    p = {"shuffle3": lambda: _shuffle(channels, 3), "shuffle2": lambda: _shuffle(channels, 2),
         "random": lambda: r.permutation(channels)}[perm]()
    plain = r.integers(-128, 128, (1, channels, h, w)).astype(np.int8)
    x = layout_transform(plain, "NCHW", LAYOUT)
    prog = channel_permute_program(CFG, x.shape, p, x, tile=tile)
    check_program_order(prog.insns, prog.config.dep_queue_depth)
    got = FSIM.run(prog).outputs["out"]
    np.testing.assert_array_equal(got, layout_transform(plain[:, p], "NCHW", LAYOUT))
    gemms = sum(1 for i in prog.insns if isinstance(i, Gemm) and not i.reset)
    connected = sum(len(s) for s in block_sources(permuted_channels(p), 16))
    assert gemms == connected * -(-(h * w) // min(tile, h * w))


def test_a_shuffle_connects_each_output_block_with_few_input_blocks() -> None:
    for channels, groups in ((240, 3), (960, 3), (272, 4)):
        sources = block_sources(permuted_channels(_shuffle(channels, groups)), 16)
        assert max(len(s) for s in sources) <= 2 * groups


def test_what_the_program_cannot_take_is_refused() -> None:
    with pytest.raises(CompileError, match="do not permute"):
        channel_permute_program(CFG, (1, 2, 2, 2, 1, 16), [0, 0, *range(2, 32)])
    with pytest.raises(CompileError, match="one batch block"):
        channel_permute_program(CFG, (2, 1, 2, 2, 1, 16), range(16))  # type: ignore[arg-type]
    with pytest.raises(CompileError, match="exceed"):
        channel_permute_program(PRESETS["tiny"], (1, 64, 1, 1, 1, 4),
                                np.random.default_rng(0).permutation(256))


@pytest.mark.slow
def test_rtl_equals_fsim() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    r = np.random.default_rng(5)
    x = r.integers(-128, 128, (1, 6, 5, 7, 1, 16)).astype(np.int8)
    prog = channel_permute_program(CFG, x.shape, _shuffle(96, 3), x, tile=16)
    np.testing.assert_array_equal(RtlSimulator().run(prog).outputs["out"],
                                  FSIM.run(prog).outputs["out"])
