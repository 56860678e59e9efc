"""The ULX3S top with its device memory in the SDRAM (the board's default): the pins
amaranth-boards names, the inverted SDRAM clock, the memory size; boards without SDRAM
refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.fpga_builds.board_top import BoardTop
from tensorfab.fpga_builds.boards import BOARDS, board_config
from tensorfab.fpga_builds.errors import FpgaBuildError


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_ulx3s_sdram_top(tmp_path: Path) -> None:
    board = BOARDS["ulx3s-85f"]
    top = BoardTop(board, board_config("tiny"), sdram=True)
    assert (top.memory, top.mem_bytes) == ("sdram", 16 << 20)  # 24 address bits of 32 MB
    plan = board.platform().build(top, name="top", build_dir=str(tmp_path), do_build=False)
    il, lpf = plan.files["top.il"], plan.files["top.lpf"]
    assert "cell \\ODDRX1F " in il  # the chip's clock, inverted
    for pin, site in (("clk", "F19"), ("cs", "P20"), ("dq", "J16"), ("a", "M20")):
        assert f'LOCATE COMP "sdram_0__{pin}__io' in lpf and f'SITE "{site}"' in lpf
    assert BoardTop(board, board_config("small"), sdram=True).mem_bytes == 32 << 20
    assert BoardTop(board, board_config("tiny"), sdram=False).memory == "bram"


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_device_memory_is_the_sdram_where_a_board_has_one() -> None:
    """A ULX3S's device memory is its SDRAM unless a build asks for on-chip memory; the
    other boards' is on-chip; a config reaches the SDRAM within its addresses."""
    for name, board in BOARDS.items():
        has = board.sdram_bytes is not None
        assert board.default_memory == ("sdram" if has else "on-chip"), name
        assert BoardTop(board, board_config(board.config)).memory == (
            "sdram" if has else "spram" if board.family == "ice40" else "bram"), name
        assert board.uses_sdram() == has and not board.uses_sdram("on-chip")
        assert board.memory_bytes(board_config(board.config), "on-chip") == board.mem_bytes
    u85 = BOARDS["ulx3s-85f"]
    assert u85.sdram_bytes == 32 << 20
    # 24-bit addresses reach 16 MB, 28-bit all 32 MB, up5k's 16-bit 64 KiB
    for config, reach in (("tiny", 16 << 20), ("small", 32 << 20), ("up5k", 64 << 10)):
        assert u85.memory_bytes(board_config(config)) == reach, config
    with pytest.raises(FpgaBuildError, match="memory 'dram': not one of sdram, on-chip"):
        u85.uses_sdram("dram")


def test_board_without_sdram() -> None:
    import gc
    import warnings

    gc.collect()  # (the other tests' unelaborated tops warn now, not below)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(FpgaBuildError, match="orangecrab-25f: no SDRAM on this board"
                           ) as refused:
            BoardTop(BOARDS["orangecrab-25f"], board_config("ecp5-25f"), sdram=True)
        del refused  # (its traceback holds the refused top)
        gc.collect()
    # the refused top was never meant to be elaborated: Amaranth does not warn of it
    assert [str(w.message) for w in caught] == []
