"""The iCEBreaker (iCE40UP5K) board: its configuration, SPRAM memory, nextpnr-ice40's
report, and (slow) the real build's does-not-fit result (docs/fpga.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.cli import main
from tensorfab.fpga_builds.board_top import BoardTop
from tensorfab.fpga_builds.boards import BOARDS, board_config
from tensorfab.fpga_builds.errors import DoesNotFit
from tensorfab.fpga_builds.report import check_fit, resources, utilization_from_log
from tensorfab.hw.soc.memory import OnChipMemory
from tensorfab.hw.soc.spram import SPRAM_DEPTH, SPRAM_WIDTH

#: nextpnr-ice40's utilisation of the up5k build (measured, docs/fpga.md).
UP5K_LOG = """\
Info: Device utilisation:
Info: \t         ICESTORM_LC:   16004/   5280   303%
Info: \t        ICESTORM_RAM:      21/     30    70%
Info: \t               SB_IO:       5/     39    12%
Info: \t               SB_GB:       8/      8   100%
Info: \t        ICESTORM_PLL:       0/      1     0%
Info: \t        ICESTORM_DSP:      16/      8   200%
Info: \t      ICESTORM_SPRAM:       1/      4    25%
"""


def test_ice40_utilisation_and_fit_error() -> None:
    util = utilization_from_log(UP5K_LOG)
    assert util["ICESTORM_SPRAM"] == (1, 4) and util["SB_GB"] == (8, 8)
    res = resources("ice40", util)
    assert res["SPRAM"] == {"used": 1, "available": 4}
    assert res["BRAM"] == {"used": 21, "available": 30}
    assert res["LUT"] == {"used": 16004, "available": 5280}
    with pytest.raises(DoesNotFit, match=r"DSP \(ICESTORM_DSP\) 16 used, 8 available "
                       r"\(over by 8\); also over: ICESTORM_LC 16004/5280") as info:
        check_fit("ice40", util)
    assert info.value.resource == "DSP"


def test_icebreaker_board() -> None:
    board = BOARDS["icebreaker"]
    cfg = board_config(board.config)
    assert (board.config, cfg.name) == ("up5k", "up5k")
    assert cfg.peak_macs_per_cycle == cfg.batch * cfg.block_in * cfg.block_out == 4
    platform = board.platform()
    assert platform.default_clk_frequency == board.target_mhz * 1e6 == 12e6
    # the on-chip memory is the UP5K's SPRAM: 16-bit multiples, at most 4 blocks
    assert cfg.mem_bus_width % SPRAM_WIDTH == 0
    assert board.mem_bytes * 8 <= 4 * SPRAM_DEPTH * SPRAM_WIDTH
    assert board.mem_bytes <= 1 << cfg.dram_addr_width
    OnChipMemory(cfg, board.mem_bytes, spram=True)


def test_icebreaker_top_uses_spram_and_the_uart(tmp_path: Path) -> None:
    board = BOARDS["icebreaker"]
    plan = board.platform().build(BoardTop(board, board_config(board.config)), name="top",
                                  build_dir=str(tmp_path), do_build=False)
    text = plan.files["top.il"]
    assert text.count("cell \\SB_SPRAM256KA ") == 1  # 32 KiB, 16 bits wide
    assert "uart_0__tx" in text and "uart_0__rx" in text


@pytest.mark.slow
def test_up5k_does_not_fit_for_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The smallest core (1x2x2) still needs 3x the UP5K's logic cells and 16 MAC16."""
    assert main(["fpga", "build", "--board", "icebreaker", "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "does not fit: DSP (ICESTORM_DSP)" in err and "8 available" in err
    assert "ICESTORM_LC" in err


def test_bench_matrix_names_known_boards_and_configs() -> None:
    """Every build of ``tensorfab bench fpga`` (the module imports, its boards and
    configurations exist; the iCEBreaker's default config is among them)."""
    from tensorfab.benches.fpga import DEFAULT_MATRIX
    from tensorfab.fpga_builds.flow import ROUTER2_BUILDS

    for board, config, _dsp in DEFAULT_MATRIX:
        assert board in BOARDS, board
        board_config(config)
    assert {(b, BOARDS[b].config) for b in BOARDS} <= {(b, c) for b, c, _ in DEFAULT_MATRIX}
    for board, config, memory in ROUTER2_BUILDS:  # names that exist
        assert board in BOARDS and memory in ("sdram", "on-chip"), (board, memory)
        board_config(config)


def test_build_says_no_config_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The board, not only the config: no build fits the UP5K, and what the smallest
    needs (the overflow of the measured up5k build, without building)."""
    from tensorfab.fpga_builds import flow

    def overflowing(*_args: object, **_kw: object) -> None:
        check_fit("ice40", utilization_from_log(UP5K_LOG))

    monkeypatch.setattr(flow, "build_bitstream", overflowing)
    assert main(["fpga", "build", "--board", "icebreaker", "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0].startswith("note: no config fits icebreaker (iCE40UP5K) yet")
    assert len(lines) == 2 and lines[1].startswith(
        "error: no config fits icebreaker (iCE40UP5K) yet: its smallest build, up5k "
        "(1×2×2), does not fit: DSP (ICESTORM_DSP) 16 used, 8 available"), err
    assert "ICESTORM_LC 16004/5280" in lines[1]
    # another config: its own overflow, after the note
    assert main(["fpga", "build", "--board", "icebreaker", "--config", "tiny", "-o",
                 str(tmp_path / "t")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "building tiny" in lines[0]
    assert lines[1].startswith("error: design does not fit: DSP (ICESTORM_DSP)")
