"""A virtual board modelled on a board has that board's device memory: a ULX3S's
SDRAM by default (``sdram=0`` for on-chip), the others' on-chip memory; the memory's
place and size are checked before any SoC is built."""

from __future__ import annotations

import pytest

from tensorfab.fpga_builds.boards import BOARDS, board_config
from tensorfab.hil.targets import VirtualBoardDevice
from tensorfab.hil.virtual import SocSpec
from tensorfab.isa.device import open_device
from tensorfab.isa.errors import UsageError


@pytest.mark.parametrize("name", list(BOARDS))
def test_a_board_model_has_the_boards_device_memory(name: str) -> None:
    board = BOARDS[name]
    cfg = board_config(board.config)
    spec = SocSpec.for_board(name)
    assert spec.sdram == (board.sdram_bytes is not None)
    assert spec.mem_bytes == board.memory_bytes(cfg)
    on_chip = SocSpec.for_board(name, sdram=False)
    assert (on_chip.sdram, on_chip.mem_bytes) == (False, board.mem_bytes)
    dev = open_device(f"virtual://{name}")
    assert isinstance(dev, VirtualBoardDevice)
    assert dev.sdram == spec.sdram and dev.memory_bytes(cfg) == spec.mem_bytes
    assert open_device(f"virtual://{name}?sdram=0").memory_bytes(cfg) == board.mem_bytes


def test_ulx3s_memory_choices_and_refusals() -> None:
    cfg = board_config("ecp5-25f")
    assert open_device("virtual://ulx3s-25f").memory_bytes(cfg) == 16 << 20
    small = open_device("virtual://ulx3s-25f?sdram=0&mem_bytes=4096")
    assert (small.sdram, small.memory_bytes(cfg)) == (False, 4096)
    direct = open_device("virtual://ulx3s-25f?direct_memory=1")  # SDRAM by default
    assert direct.sdram and direct.direct_memory
    for target, says in (
            ("virtual://ulx3s-25f?mem_bytes=4096", r"\(--mem-bytes\) sizes on-chip memory"),
            ("virtual://orangecrab-25f?sdram=1", "orangecrab-25f: no SDRAM on this board"),
            ("virtual://ulx3s-25f?sdram=0&direct_memory=1", "direct_memory needs sdram"),
            # a size of 0 is refused, not taken for the board's own
            ("virtual://ulx3s-25f?sdram=0&mem_bytes=0",
             "virtual board memory 0 is not a power of two")):
        with pytest.raises(UsageError, match=says):
            open_device(target)
    # no board: on-chip unless asked
    assert not open_device("virtual").sdram and open_device("virtual://?sdram=1").sdram
