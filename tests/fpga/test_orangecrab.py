"""The OrangeCrab boards: a UART on the header, no dfu-suffix tool, the DFU suffix
written by the flow (checked against a bitwise CRC written here)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from tensorfab.fpga_builds.board_top import BoardTop
from tensorfab.fpga_builds.boards import BOARDS, ORANGECRAB_DFU_IDS, board_config
from tensorfab.fpga_builds.dfu import add_dfu_suffix, dfu_suffix
from tensorfab.fpga_builds.program import program_command


def crc32_no_final_xor(data: bytes) -> int:
    """dfu-util's CRC: reflected 0xEDB88320, initial 0xFFFFFFFF, no final inversion."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc


@pytest.mark.parametrize("data", [b"", b"\x00", bytes(range(256)) * 3])
def test_dfu_suffix_fields_and_crc(data: bytes) -> None:
    suffix = dfu_suffix(data, 0x1209, 0x5AF0)
    assert len(suffix) == 16
    device, pid, vid, bcd = struct.unpack_from("<HHHH", suffix)
    assert (device, pid, vid, bcd) == (0xFFFF, 0x5AF0, 0x1209, 0x0100)
    assert suffix[8:11] == b"UFD" and suffix[11] == 16
    (crc,) = struct.unpack_from("<I", suffix, 12)
    assert crc == crc32_no_final_xor(data + suffix[:12])
    # the CRC appended little-endian leaves a zero residue
    assert crc32_no_final_xor(data + suffix) == 0


def test_add_dfu_suffix(tmp_path: Path) -> None:
    bit = tmp_path / "top.bit"
    bit.write_bytes(b"\xff\x00bitstream")
    add_dfu_suffix(bit, *ORANGECRAB_DFU_IDS)
    data = bit.read_bytes()
    assert data[:-16] == b"\xff\x00bitstream"
    assert data[-16:] == dfu_suffix(b"\xff\x00bitstream", 0x1209, 0x5AF0)
    with pytest.raises(ValueError, match="vid 0x10000"):
        dfu_suffix(b"", 0x10000, 1)


@pytest.mark.parametrize("name", ["orangecrab-25f", "orangecrab-85f"])
def test_orangecrab_platform(name: str, tmp_path: Path) -> None:
    board = BOARDS[name]
    platform = board.platform()
    assert "dfu-suffix" not in platform.required_tools
    assert board.dfu_ids == ORANGECRAB_DFU_IDS
    assert platform.device == ("LFE5U-25F" if name.endswith("25f") else "LFE5U-85F")
    plan = platform.build(BoardTop(board, board_config(board.config)), name="top",
                          build_dir=str(tmp_path), do_build=False)
    assert "dfu-suffix" not in plan.files["build_top.sh"]
    lpf = plan.files["top.lpf"]
    # header pins io:0 (N17) and io:1 (M18): the UART's rx and tx
    assert re.search(r'LOCATE COMP "uart_0__rx__io" SITE "N17"', lpf), lpf
    assert re.search(r'LOCATE COMP "uart_0__tx__io" SITE "M18"', lpf), lpf
    for i, site in enumerate(("K4", "M3", "J3")):
        assert f'LOCATE COMP "led_{i}__io" SITE "{site}"' in lpf
    text = plan.files["top.il"]
    # the PLL only when the default clock is not the 48 MHz oscillator (25F: 48 MHz)
    assert ("EHXPLLL" in text) == ((board.clock_mhz or board.target_mhz) != 48.0)
    at_100 = board.platform().build(BoardTop(board, board_config(board.config), 100.0),
                                    "top", build_dir=str(tmp_path / "at100"), do_build=False)
    assert "EHXPLLL" in at_100.files["top.il"]  # 48 MHz -> 100 MHz


def test_orangecrab_program_command() -> None:
    assert program_command("orangecrab-85f", "top.bit", loader="ofl") == [
        "ofl", "-b", "orangecrab", "top.bit"]
