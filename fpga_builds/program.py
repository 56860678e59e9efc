"""Load a bitstream onto a board with openFPGALoader."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from .boards import get_board
from .build_files import BUILD_NAME
from .errors import FpgaBuildError, ToolMissing

__all__ = ["bitstream_device", "check_bitstream", "program_board", "program_command"]

#: The ECP5 parts by the IDCODE their bitstreams verify (the VERIFY_ID command, 0xE2).
ECP5_IDCODES = {
    0x21111043: "LFE5U-12F", 0x41111043: "LFE5U-25F", 0x41112043: "LFE5U-45F",
    0x41113043: "LFE5U-85F", 0x01111043: "LFE5UM-25F", 0x01112043: "LFE5UM-45F",
    0x01113043: "LFE5UM-85F", 0x81111043: "LFE5UM5G-25F", 0x81112043: "LFE5UM5G-45F",
    0x81113043: "LFE5UM5G-85F",
}
#: The synchronisation word an iCE40 bitstream starts with (after its comment).
ICE40_SYNC = b"\x7e\xaa\x99\x7e"
#: How far into the file the identification of a bitstream is looked for.
_HEAD_BYTES = 4096


def program_command(board_name: str, bitstream: str | Path, *, flash: bool = False,
                    loader: str | None = None) -> list[str]:
    """The openFPGALoader command that loads ``bitstream`` (SRAM, or flash).

    A DFU board (``dfu_ids``: the OrangeCrab) takes the file through its bootloader,
    which writes flash: no ``-m``/``-f``."""
    board = get_board(board_name)
    tool = loader or os.environ.get("OPENFPGALOADER", "openFPGALoader")
    mode = [] if board.dfu_ids else ["-f"] if flash else ["-m"]
    return [tool, "-b", board.loader_board, *mode, str(bitstream)]


def bitstream_device(data: bytes) -> str | None:
    """The device a bitstream is for, from its first bytes: an ECP5 part
    (``LFE5U-25F``) by the IDCODE it verifies, ``iCE40`` for an iCE40 bitstream (which
    names no part), None for anything else."""
    head = data[:_HEAD_BYTES]
    at = head.find(b"\xe2\x00\x00\x00")  # VERIFY_ID, three zero bytes, the IDCODE
    while at >= 0:
        idcode = int.from_bytes(head[at + 4:at + 8], "big")
        if idcode in ECP5_IDCODES:
            return ECP5_IDCODES[idcode]
        at = head.find(b"\xe2\x00\x00\x00", at + 1)
    return "iCE40" if ICE40_SYNC in head else None


def check_bitstream(board_name: str, bitstream: str | Path) -> None:
    """Check that ``bitstream`` exists and is a bitstream of the board's device.

    Raises
    ------
    FpgaBuildError
        A missing file, a file that is no bitstream, or one for another device (the
        message names the file, its device and the board's).
    """
    board = get_board(board_name)
    path = Path(bitstream)
    if path.is_dir():
        suffix = ".bin" if board.family == "ice40" else ".bit"
        inside = sorted(p.name for p in path.glob(f"*{suffix}"))
        hint = (f"give the bitstream in it ({', '.join(str(path / n) for n in inside)})"
                if inside else f"it holds no {suffix} file (a build's bitstream is "
                f"{BUILD_NAME}{suffix} in its -o folder)")
        raise FpgaBuildError(f"{bitstream} is a folder, not a bitstream: {hint}")
    if not path.is_file():
        raise FpgaBuildError(f"{bitstream}: no such bitstream")
    with path.open("rb") as f:
        found = bitstream_device(f.read(_HEAD_BYTES))
    device = board.device
    want = "iCE40" if board.family == "ice40" else device
    build = f"`tensorfab fpga build --board {board.name}`"
    if found is None:
        kind = "an iCE40 .bin" if board.family == "ice40" else "an ECP5 .bit"
        raise FpgaBuildError(f"{bitstream}: not {kind} bitstream (board {board.name} has "
                             f"{device}); give the bitstream of {build}")
    if found != want:
        raise FpgaBuildError(f"{bitstream}: a bitstream for {found}, but board "
                             f"{board.name} has {device}; build one with {build}")


def program_board(board_name: str, bitstream: str | Path, *, flash: bool = False,
                  dry_run: bool = False) -> list[str]:
    """Program the board (or, with ``dry_run``, only return the command).

    Raises
    ------
    FpgaBuildError
        The bitstream does not exist, is no bitstream of the board's device
        (:func:`check_bitstream`), or openFPGALoader failed.
    ToolMissing
        openFPGALoader is not installed.
    """
    cmd = program_command(board_name, bitstream, flash=flash)
    check_bitstream(board_name, bitstream)
    if dry_run:
        return cmd
    if shutil.which(cmd[0]) is None:
        raise ToolMissing(f"{cmd[0]} is not installed: programming needs openFPGALoader "
                          "(apt-get install openfpgaloader, or set OPENFPGALOADER); "
                          "`tensorfab fpga program --dry-run` prints the command")
    done = subprocess.run(cmd, check=False)
    if done.returncode:
        raise FpgaBuildError(f"{shlex.join(cmd)} exited with {done.returncode}")
    return cmd
