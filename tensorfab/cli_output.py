"""Where the command line may write: one overwrite policy for every output file, the
command line's usage error, how a result is printed (JSON or a summary), the help
text's form, and the progress display of long work. Shared by the
command modules (``cli``, ``model_cli``, ``cli_fpga``), which import it and not each
other."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from tensorfab.isa import TensorfabError

__all__ = ["CliError", "HelpFormatter", "check_writable", "examples", "print_result",
           "working"]

_err_console = Console(stderr=True, soft_wrap=True)


class CliError(TensorfabError):
    """A usage error of the command line (bad path, refusing to overwrite...)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help text as written (examples keep their lines): every command's formatter."""


def examples(*lines: str) -> str:
    """A command's ``--help`` epilog: its example command lines."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def check_writable(out: Path, force: bool, ours: Callable[[Path], bool], *,
                    suffixes: Sequence[str] = (), inputs: Sequence[Path] = ()) -> Path:
    """Check, before any work, that ``out`` can be written: its folder exists and is
    writable, it is not a folder, its suffix is one of ``suffixes`` (when given), it is
    none of the command's ``inputs`` (even with ``force``), and it is not a file
    tensorfab did not write (``ours``) unless ``force``.

    One policy for every output of the command line; a :class:`CliError` otherwise.
    """
    if out.is_dir():
        raise CliError(f"{out} is a folder; name a file to write")
    for given in inputs:
        if out.exists() and given.exists() and os.path.samefile(out, given):
            alias = "" if out == given else f" (the input {given})"
            raise CliError(f"{out}{alias}: the output would overwrite the input; name "
                           "another output with -o")
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
            raise CliError(f"{out} exists and is not a file this command writes; "
                           "pass --force to overwrite it")
        if not os.access(out, os.W_OK):
            raise CliError(f"cannot write {out}: the file is read-only")
    return out


def print_result(result: object, as_json: bool, human: Callable[[], None], *,
                 indent: int | None = None) -> None:
    """A command's result, the command line's one convention: with ``--json`` only the
    result as one JSON object on stdout (notes go to stderr; ``indent`` for a result
    meant to be edited as a file), else its summary for people (``human`` prints it)."""
    if as_json:
        print(json.dumps(result, indent=indent))
    else:
        human()


@contextmanager
def working(text: str, quiet: bool = False, console: Console | None = None
            ) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr saying what is happening, with the steps of any RTL model
    build in the block (which is cached, so said once); quiet: nothing; stderr not a
    terminal: only a build's first and last line. Yields a function that changes the
    text. ``console``: where to show it (default: stderr)."""
    err = console if console is not None else _err_console
    if quiet:
        yield lambda _text: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from tensorfab.sim.rtl.build import build_steps

    if not err.is_terminal:  # a log: no spinner, only the build's start and end

        def note(now: str) -> None:
            if now.startswith(("building", "built")):
                err.print(escape(now), highlight=False)

        with build_steps(note):
            yield lambda _text: None
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(escape(text), total=None)

        def say(now: str) -> None:
            bar.update(task, description=escape(now), refresh=True)

        def step(now: str) -> None:
            if now.startswith("built"):  # the one line worth keeping; back to the work
                bar.console.print(escape(now), highlight=False)
                say(text)
            else:
                say(now)

        with build_steps(step):
            yield say
