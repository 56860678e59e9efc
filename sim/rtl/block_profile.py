"""Where the Verilated model spends its time, per block of the design.

:func:`profile_blocks` builds the harness library for a configuration with debug line
tables (``-O3 -g``, no profile guidance, so the code is what the compiler makes of the
model alone), runs a program on it for a number of cycles under Valgrind's
``callgrind`` (from a small C++ driver, so no Python runs under the profiler), and
attributes the machine instructions executed inside the harness's ``tf_run`` to the
blocks of the design:

* each instruction's source line (callgrind's line-level costs) is mapped to the C++
  statement around it in Verilator's output;
* the statement to the first design signal it names (Verilator names a signal by its
  hierarchy, ``tf_harness_top__DOT__core__DOT__compute__DOT__alu__DOT__…``; for a
  Verilator temporary, the signal of the statement that uses it);
* the signal to its block, ``depth`` levels below the core (``compute.alu``);
  lines of the harness and its memory model are ``harness and memory model``, all
  other code (Verilator's runtime and its inline helpers for wide words, the C and
  C++ libraries) ``verilator runtime and libraries``.

Instruction counts repeat to the last digit from run to run where wall time on a
shared machine does not, which is what makes them the measure for design changes.
The attribution is good to about ±10 % per row (an optimising compiler's line tables
give some instructions to a neighbouring statement); the total is exact.
``tensorfab bench rtl-speed --profile`` prints the table (docs/architecture.md,
"Where Verilator's time goes").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tensorfab.isa import Program
from tensorfab.isa.errors import TensorfabError

from .build import HARNESS_DIR, HARNESS_SOURCES, _cxx, build_harness
from .harness import DEFAULT_MEMORY, MemoryTiming

__all__ = ["BlockProfile", "ProfileError", "attribute_lines", "block_of", "parse_callgrind",
           "profile_blocks"]

#: Extra C++ flags of the profiled build: line tables, and no AVX-512 (Valgrind
#: cannot run it).
PROFILE_CXXFLAGS = ("-g", "-mno-avx512f")
#: The block of lines in Verilator's runtime headers and of the harness's own code.
RUNTIME_BLOCK = "verilator runtime and libraries"
HARNESS_BLOCK = "harness and memory model"
#: The harness's own sources (``tf_model.h`` is made per build).
HARNESS_FILES = frozenset({*HARNESS_SOURCES, "tf_model.h"})
#: The block of statements that name no design signal (loop counters, trigger flags).
UNNAMED_BLOCK = "(scheduling, no signal)"

_DESIGN_PREFIX = "tf_harness_top__DOT__"
_IDENT = re.compile(r"\b(tf_harness_top__DOT__\w+|__V\w+)")
# Verilator's suffixes of a signal's delayed copies and per-scope names
_DELAYED = re.compile(r"^__V(?:dly(?:Val|Set|Dim\d+|vset)?__|dlyvdim\d+__|dlyvlsb__)")


class ProfileError(TensorfabError):
    """The profile could not be made (Valgrind missing, the run failed)."""


@dataclass(frozen=True)
class BlockProfile:
    """Machine instructions per simulated cycle, per block of the design.

    Attributes
    ----------
    config : str
        The configuration profiled.
    cycles : int
        Cycles run under the profiler.
    instructions : int
        Machine instructions executed inside ``tf_run`` over those cycles.
    blocks : dict of str to float
        Instructions per cycle of each block, largest first.
    depth : int
        Hierarchy levels below the core that name a block.
    """

    config: str
    cycles: int
    instructions: int
    blocks: dict[str, float]
    depth: int

    @property
    def per_cycle(self) -> float:
        """Machine instructions per simulated cycle (the sum of :attr:`blocks`)."""
        return self.instructions / self.cycles if self.cycles else 0.0

    def to_json(self) -> dict[str, object]:
        """The JSON object ``rtl-speed --profile`` reports."""
        return {"config": self.config, "cycles": self.cycles,
                "instructions": self.instructions,
                "instructions_per_cycle": round(self.per_cycle, 1), "depth": self.depth,
                "blocks": {k: round(v, 1) for k, v in self.blocks.items()}}


# ----------------------------------------------------------------- callgrind output
def _compressed(names: dict[str, str], text: str) -> str:
    """A callgrind name spec ``(id) name`` or ``(id)`` (name compression)."""
    m = re.fullmatch(r"\((\d+)\)(?:\s+(.*))?", text.strip())
    if m is None:
        return text.strip()
    if m.group(2) is not None:
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), f"({m.group(1)})")


def parse_callgrind(lines: Iterable[str]) -> Counter[tuple[str, int]]:
    """Self cost (the first event, ``Ir``) per ``(source file, line)`` of a callgrind
    output file written with line positions (the default).

    A call's inclusive cost (the cost line after ``calls=``) is not counted: the
    callee's own lines carry it.

    Raises
    ------
    ProfileError
        The file's ``summary:`` or ``totals:`` line differs from the sum of the self
        costs read (a format this parser does not follow).
    """
    files: dict[str, str] = {}
    totals: list[int] = []
    costs: Counter[tuple[str, int]] = Counter()
    current = "?"
    line_no = 0
    after_call = False
    for raw in lines:
        line = raw.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        key, sep, rest = line.partition("=")
        if sep and key in ("fl", "fi", "fe"):
            current = _compressed(files, rest)
            continue
        if sep and key in ("cfl", "cfi"):
            _compressed(files, rest)  # defines the name, does not change the position
            continue
        if sep and key == "calls":
            after_call = True
            continue
        if line.startswith(("summary:", "totals:")):
            totals.append(int(line.split(":", 1)[1].split()[0]))
            continue
        if sep or not (line[0].isdigit() or line[0] in "+-*"):
            continue  # fn=, ob=, cfn=, events: ...
        fields = line.split()
        pos = fields[0]
        if pos == "*":
            pass
        elif pos[0] in "+-":
            line_no += int(pos)
        else:
            line_no = int(pos)
        if after_call:
            after_call = False
            continue
        if len(fields) > 1:
            costs[(current, line_no)] += int(fields[1])
    read = sum(costs.values())
    if any(t != read for t in totals):
        raise ProfileError(f"callgrind output: the lines' costs sum to {read:,}, its "
                           f"summary says {totals[0]:,}")
    return costs


# ------------------------------------------------------------- source attribution
def block_of(signal: str, depth: int) -> str:
    """The block of a Verilator signal name: its hierarchy ``depth`` levels below the
    core (``core`` itself for the core's own signals, ``top`` for the harness
    wrapper's)."""
    name = signal[len(_DESIGN_PREFIX):] if signal.startswith(_DESIGN_PREFIX) else signal
    parts = name.split("__DOT__")
    if parts[0] != "core":
        return "top"
    scopes = parts[1:-1]
    return ".".join(scopes[:depth]) if scopes else "core"


def _signal(ident: str) -> str | None:
    """The design signal an identifier names (through Verilator's delayed copies)."""
    if ident.startswith(_DESIGN_PREFIX):
        return ident
    bare = _DELAYED.sub("", ident)
    return bare if bare.startswith(_DESIGN_PREFIX) else None


_STATEMENT_END = re.compile(r"[;{}]\s*$")


def _statement(lines: list[str], index: int) -> str:
    """The C++ statement around line ``index`` (0-based)."""
    start = index
    while start > 0 and not _STATEMENT_END.search(lines[start - 1]):
        start -= 1
    end = index
    while end < len(lines) - 1 and not _STATEMENT_END.search(lines[end]):
        end += 1
    return " ".join(lines[start:end + 1])


def _line_block(lines: list[str], index: int, depth: int) -> str:
    text = _statement(lines, index)
    idents = _IDENT.findall(text)
    for ident in idents:
        sig = _signal(ident)
        if sig is not None:
            return block_of(sig, depth)
    temps = [i for i in idents if i.startswith(("__Vtemp", "__Vfunc", "__VdfgRegularize"))]
    if temps:  # a temporary: the block of the next statement that reads it
        for k in range(index + 1, min(index + 80, len(lines))):
            if temps[0] in lines[k]:
                for ident in _IDENT.findall(_statement(lines, k)):
                    sig = _signal(ident)
                    if sig is not None:
                        return block_of(sig, depth)
    return UNNAMED_BLOCK


def attribute_lines(costs: Counter[tuple[str, int]], sources: dict[str, list[str]],
                    depth: int = 2) -> Counter[str]:
    """Sum line costs per block.

    Parameters
    ----------
    costs : Counter
        Cost per ``(file, line)`` (:func:`parse_callgrind`).
    sources : dict of str to list of str
        The Verilated model's C++ files by base name (``Vcore___024root__0.cpp``) and
        their lines.
    depth : int
        Hierarchy levels below the core that name a block.

    Returns
    -------
    Counter
        Cost per block.
    """
    out: Counter[str] = Counter()
    for (path, line), cost in costs.items():
        base = os.path.basename(path)
        if base in sources and 0 < line <= len(sources[base]):
            out[_line_block(sources[base], line - 1, depth)] += cost
        elif base in HARNESS_FILES:
            out[HARNESS_BLOCK] += cost
        else:
            out[RUNTIME_BLOCK] += cost
    return out


# ------------------------------------------------------------------------ the run
def profile_blocks(program: Program, *, cycles: int = 70_000,
                   memory: MemoryTiming = DEFAULT_MEMORY, depth: int = 2) -> BlockProfile:
    """Profile the first ``cycles`` cycles of ``program`` on the Verilated core.

    Parameters
    ----------
    program : Program
        What the core runs (its configuration is the one profiled).
    cycles : int
        Cycles run under the profiler (Valgrind runs the model about 50 times slower).
    memory : MemoryTiming
        The memory model's timing.
    depth : int
        Hierarchy levels below the core that name a block.

    Returns
    -------
    BlockProfile

    Raises
    ------
    ProfileError
        ``valgrind`` is not on the PATH, or the profiled run failed.
    """
    from .device import RtlSimulator

    if cycles <= 0:
        raise ProfileError(f"cycles = {cycles}: profile at least one cycle")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise ProfileError("rtl-speed --profile needs Valgrind's callgrind: `valgrind` is "
                           "not on the PATH (install the valgrind package)")
    built = build_harness(program.config, cxxflags=PROFILE_CXXFLAGS, pgo=False)
    sim = RtlSimulator(memory)
    image = sim.initial_image(program, None)
    with tempfile.TemporaryDirectory(prefix="tf-profile-") as tmp:
        work = Path(tmp)
        driver = work / "profile_driver"
        compiled = subprocess.run([_cxx(), "-O2", "-std=gnu++17", "-o", str(driver),
                                   str(HARNESS_DIR / "profile_driver.cpp"), "-ldl"],
                                  capture_output=True, text=True, check=False)
        if compiled.returncode:
            raise ProfileError(f"compiling the profile driver failed:\n{compiled.stderr}")
        image.tofile(work / "image.bin")
        m = memory
        out = work / "callgrind.out"
        cmd = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}",
               "--collect-atstart=no", "--toggle-collect=tf_run", str(driver),
               str(built.library), str(work / "image.bin"), str(program.insn_base),
               str(len(program.insns)), str(cycles), str(m.read_latency),
               str(m.write_latency), str(m.bandwidth), str(m.max_outstanding),
               str(m.read_buffer), str(int(m.onchip))]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        done = re.search(r"cycles (\d+) status (\d+)", run.stdout)
        if run.returncode or done is None or not out.exists():
            raise ProfileError(f"the profiled run failed (exit {run.returncode}):\n"
                               f"{run.stdout}{run.stderr[-2000:]}")
        with out.open() as fh:
            costs = parse_callgrind(fh)
    obj = built.directory / "obj"
    sources = {p.name: p.read_text().splitlines() for p in obj.glob("*.cpp")}
    blocks = attribute_lines(costs, sources, depth)
    ran = int(done.group(1))
    total = sum(blocks.values())
    per_cycle = {k: v / ran for k, v in blocks.most_common()}
    return BlockProfile(program.config.name, ran, total, per_cycle, depth)
