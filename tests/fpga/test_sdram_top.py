"""The ULX3S top with its device memory in the SDRAM: the pins amaranth-boards names,
the inverted SDRAM clock, the memory size; boards without SDRAM refuse."""

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
    assert BoardTop(board, board_config("tiny")).memory == "bram"


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_board_without_sdram() -> None:
    with pytest.raises(FpgaBuildError, match="orangecrab-25f: no SDRAM on this board"):
        BoardTop(BOARDS["orangecrab-25f"], board_config("ecp5-25f"), sdram=True)
