"""Load a bitstream onto a board with openFPGALoader."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .boards import get_board
from .errors import FpgaBuildError, ToolMissing

__all__ = ["program_board", "program_command"]


def program_command(board_name: str, bitstream: str | Path, *, flash: bool = False,
                    loader: str | None = None) -> list[str]:
    """The openFPGALoader command that loads ``bitstream`` (SRAM, or flash).

    A DFU board (``dfu_ids``: the OrangeCrab) takes the file through its bootloader,
    which writes flash: no ``-m``/``-f``."""
    board = get_board(board_name)
    tool = loader or os.environ.get("OPENFPGALOADER", "openFPGALoader")
    mode = [] if board.dfu_ids else ["-f"] if flash else ["-m"]
    return [tool, "-b", board.loader_board, *mode, str(bitstream)]


def program_board(board_name: str, bitstream: str | Path, *, flash: bool = False,
                  dry_run: bool = False) -> list[str]:
    """Program the board (or, with ``dry_run``, only return the command).

    Raises
    ------
    FpgaBuildError
        The bitstream does not exist, or openFPGALoader failed.
    ToolMissing
        openFPGALoader is not installed.
    """
    cmd = program_command(board_name, bitstream, flash=flash)
    if not Path(bitstream).is_file():
        raise FpgaBuildError(f"{bitstream}: no such bitstream")
    if dry_run:
        return cmd
    if shutil.which(cmd[0]) is None:
        raise ToolMissing(f"{cmd[0]} is not installed: programming needs openFPGALoader "
                          "(apt-get install openfpgaloader, or set OPENFPGALOADER); "
                          "`tensorfab fpga program --dry-run` prints the command")
    done = subprocess.run(cmd, check=False)
    if done.returncode:
        raise FpgaBuildError(f"{' '.join(cmd)} exited with {done.returncode}")
    return cmd
