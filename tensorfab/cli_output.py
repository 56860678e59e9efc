"""Where the command line may write: one overwrite policy for every output file, and
the command line's usage error. Shared by the command modules (``cli``, ``model_cli``,
``cli_fpga``), which import it and not each other."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from tensorfab.isa import TensorfabError

__all__ = ["CliError", "check_writable"]


class CliError(TensorfabError):
    """A usage error of the command line (bad path, refusing to overwrite...)."""


def check_writable(out: Path, force: bool, ours: Callable[[Path], bool], *,
                    suffixes: Sequence[str] = ()) -> Path:
    """Check, before any work, that ``out`` can be written: its folder exists and is
    writable, it is not a folder, its suffix is one of ``suffixes`` (when given), and
    it is not a file tensorfab did not write (``ours``) unless ``force``.

    One policy for every output of the command line; a :class:`CliError` otherwise.
    """
    if out.is_dir():
        raise CliError(f"{out} is a folder; name a file to write")
    if suffixes and out.suffix.lower() not in suffixes:
        kind = f"a {out.suffix} file" if out.suffix else "a file without a suffix"
        raise CliError(f"{out}: cannot write {kind} here; name it {' or '.join(suffixes)}")
    folder = out.parent
    if not folder.is_dir():
        raise CliError(f"cannot write {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(f"cannot write {out}: folder {folder} is not writable")
    if out.exists():
        if not force and not ours(out):
            raise CliError(f"{out} exists and was not written by tensorfab; "
                           "pass --force to overwrite it")
        if not os.access(out, os.W_OK):
            raise CliError(f"cannot write {out}: the file is read-only")
    return out
