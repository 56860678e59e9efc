"""The RTL executor: ``Core(cfg)`` in Verilator with a C++ memory model.

:class:`RtlSimulator` (device ``rtl``) runs a :class:`~tensorfab.isa.Program` on the
Verilated core through the harness library of :mod:`tensorfab.sim.rtl_build` (built
once per configuration and RTL, cached): it loads the DRAM image into the memory
model, programs the CSRs as a host does (INSN_BASE = 0, INSN_COUNT, DRAM_SIZE = image
size, CTRL = 1) and clocks the core in C++ until STATUS reports done or error, so no
Python runs per cycle. :class:`Harness` is the lower-level handle on one core
instance (DRAM, CSRs, start, run, statistics, activity intervals).

Errors are those of the functional simulator where the hardware can tell:
``STATUS.error`` raises :class:`~tensorfab.isa.ProgramError` (or
:class:`~tensorfab.isa.IllegalInstruction`) with the core's ERROR_CODE and
ERROR_INDEX; a core that stops making progress, or does not finish within the cycle
limit, raises :class:`HangError`, which tells what each engine was doing.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import (
    CSR_BY_NAME,
    CSRS,
    Buffer,
    Engine,
    ErrorCode,
    Gemm,
    HwConfig,
    IllegalInstruction,
    Insn,
    Load,
    Program,
    ProgramError,
    TensorfabError,
    buffer_entry_bytes,
    decode_insn,
)
from tensorfab.isa.csr import STATUS_DONE
from tensorfab.isa.errors import UsageError

from .device import Counters, Device, RunResult
from .errors import Wait
from .fsim import POPS, PUSHES, QUEUE_NAMES
from .race import ENGINE_NAMES
from .rtl_build import DEFAULT_THREADS, HARNESS_ABI, HarnessBuild, build_harness
from .trace import Interval

__all__ = [
    "DEFAULT_MEMORY",
    "HangError",
    "Harness",
    "HarnessError",
    "MemoryTiming",
    "RtlRunResult",
    "RtlSimulator",
    "RunStatus",
]

#: Error codes the fetch unit reports from the instruction word alone.
_DECODE_CODES = (ErrorCode.BAD_OPCODE, ErrorCode.RESERVED_BITS, ErrorCode.BAD_FIELD)


class RunStatus(IntEnum):
    """How :meth:`Harness.run` stopped."""

    DONE = 1  #: STATUS.done
    ERROR = 2  #: STATUS.error
    LIMIT = 3  #: the cycle limit
    HANG = 4  #: no engine working and the memory port idle for ``hang_cycles`` cycles
    FAULT = 5  #: the memory model saw an access it cannot serve


class HarnessError(TensorfabError):
    """The harness itself failed: a memory fault, a library that does not match."""


@dataclass(frozen=True)
class MemoryTiming:
    """Timing of the harness's memory model (docs/architecture.md, "RTL executor").

    The defaults model a 64-bit bus at the core clock: 20 cycles from a read
    command to its first data beat, then one beat per cycle.

    Attributes
    ----------
    read_latency : int
        Cycles from the clock edge that accepts a read command to the edge that
        hands over its first beat (at least 1).
    write_latency : int
        Cycles from a write command to the acceptance of its first beat (at least 1;
        1: posted writes).
    bandwidth : int
        Bytes per cycle over both directions. At most one beat moves per cycle, so
        values at or above the bus width (``mem_bus_width / 8``) mean one beat per
        cycle; below it a beat moves only on accrued credit.
    max_outstanding : int
        Commands accepted and not yet complete; further commands wait.
    read_buffer : int
        Read beats the memory produces ahead of the core taking them.
    """

    read_latency: int = 20
    write_latency: int = 1
    bandwidth: int = 8
    max_outstanding: int = 16
    read_buffer: int = 8

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or value < 1 or value >= 1 << 32:
                raise UsageError(f"MemoryTiming.{f.name} = {value!r} must be an integer "
                                 "between 1 and 2**32 - 1")


#: The memory of :class:`RtlSimulator` unless told otherwise.
DEFAULT_MEMORY = MemoryTiming()


# -------------------------------------------------------------------- the library
_U64P = ctypes.POINTER(ctypes.c_uint64)
_U8P = ctypes.POINTER(ctypes.c_uint8)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "tf_abi": (ctypes.c_int, []),
    "tf_stat_names": (ctypes.c_char_p, []),
    "tf_config_json": (ctypes.c_char_p, []),
    "tf_create": (ctypes.c_void_p, []),
    "tf_destroy": (None, [ctypes.c_void_p]),
    "tf_set_mem": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_uint32] * 5),
    "tf_set_attribution": (None, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, _U64P,
                                  _U8P, ctypes.c_uint64]),
    "tf_load_dram": (None, [ctypes.c_void_p, _U8P, ctypes.c_uint64]),
    "tf_dram_size": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tf_read_dram": (None, [ctypes.c_void_p, _U8P, ctypes.c_uint64]),
    "tf_reset": (None, [ctypes.c_void_p, ctypes.c_uint32]),
    "tf_csr_write": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]),
    "tf_csr_read": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]),
    "tf_start": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_uint32] * 3),
    "tf_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]),
    "tf_close_trace": (None, [ctypes.c_void_p]),
    "tf_drain": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
    "tf_run_cycles": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tf_total_cycles": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tf_activity": (ctypes.c_uint32, [ctypes.c_void_p]),
    "tf_mem_pending": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tf_message": (ctypes.c_char_p, [ctypes.c_void_p]),
    "tf_stats": (ctypes.c_uint64, [ctypes.c_void_p, _U64P, ctypes.c_uint64]),
    "tf_num_intervals": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tf_get_intervals": (None, [ctypes.c_void_p, _U64P, ctypes.c_uint64]),
}
_LIBS: dict[Path, ctypes.CDLL] = {}


def _library(path: Path) -> ctypes.CDLL:
    if path not in _LIBS:
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        if lib.tf_abi() != HARNESS_ABI:
            raise HarnessError(f"{path}: harness ABI {lib.tf_abi()}, expected {HARNESS_ABI}")
        _LIBS[path] = lib
    return _LIBS[path]


def _activity_names() -> tuple[str, ...]:
    from tensorfab.hw.core import ACTIVITY

    return ACTIVITY


class Harness:
    """One Verilated core with its memory model, driven from Python between runs.

    Parameters
    ----------
    build : HarnessBuild
        The library (:func:`~tensorfab.sim.rtl_build.build_harness`).
    memory : MemoryTiming
        Memory model timing.

    Examples
    --------
    >>> h = Harness(build_harness(prog.config))  # doctest: +SKIP
    >>> h.load_dram(prog.dram_image()); h.reset()  # doctest: +SKIP
    >>> h.start(0, len(prog.insns), prog.dram_size)  # doctest: +SKIP
    >>> h.run(1_000_000)  # doctest: +SKIP
    <RunStatus.DONE: 1>
    """

    def __init__(self, build: HarnessBuild, memory: MemoryTiming = DEFAULT_MEMORY) -> None:
        self.build = build
        self.config: HwConfig = build.config
        self._lib = _library(build.library)
        self._stat_names = self._lib.tf_stat_names().decode().split(",")
        self._activity = _activity_names()
        handle = self._lib.tf_create()
        if not handle:
            raise HarnessError("the harness could not create the Verilated model")
        self._h: int | None = handle
        self.set_memory(memory)

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Free the model (the object is unusable afterwards)."""
        if self._h is not None:
            self._lib.tf_destroy(self._h)
            self._h = None

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()

    @property
    def handle(self) -> int:
        if self._h is None:
            raise HarnessError("the harness was closed")
        return self._h

    # ------------------------------------------------------------------ set-up
    def set_memory(self, memory: MemoryTiming) -> None:
        """Set the memory model's timing (also resets its state and statistics)."""
        m = memory
        if self._lib.tf_set_mem(self.handle, m.read_latency, m.write_latency, m.bandwidth,
                                m.max_outstanding, m.read_buffer):
            raise UsageError(f"invalid memory timing {memory}")
        self.memory = memory

    def set_attribution(self, insn_region: tuple[int, int],
                        loads: Sequence[tuple[int, Buffer]] = ()) -> None:
        """How read bytes are counted: reads inside ``insn_region`` (byte range) are
        instruction fetch, the others belong to ``loads`` in order (bytes, buffer)."""
        loads = [(n, b) for n, b in loads if n > 0]
        nbytes = (ctypes.c_uint64 * max(1, len(loads)))(*[n for n, _ in loads])
        bufs = (ctypes.c_uint8 * max(1, len(loads)))(*[int(b) for _, b in loads])
        self._lib.tf_set_attribution(self.handle, insn_region[0], insn_region[1], nbytes, bufs,
                                     len(loads))

    def load_dram(self, image: np.ndarray) -> None:
        """Replace the memory with ``image`` (``uint8``; its size is the memory's)."""
        arr = np.ascontiguousarray(image, dtype=np.uint8)
        self._lib.tf_load_dram(self.handle, arr.ctypes.data_as(_U8P), arr.size)

    def read_dram(self) -> np.ndarray:
        """A copy of the whole memory."""
        n = self._lib.tf_dram_size(self.handle)
        out = np.empty(n, dtype=np.uint8)
        self._lib.tf_read_dram(self.handle, out.ctypes.data_as(_U8P), n)
        return out

    def reset(self, cycles: int = 2) -> None:
        """Hold ``rst`` for ``cycles`` clocks; clears the memory model's state and
        statistics (not its contents)."""
        self._lib.tf_reset(self.handle, cycles)

    # ------------------------------------------------------------------ CSRs
    @staticmethod
    def _offset(reg: str | int) -> int:
        return CSR_BY_NAME[reg].offset if isinstance(reg, str) else int(reg)

    def write_csr(self, reg: str | int, value: int) -> None:
        """Write a CSR (by name or byte offset); takes one clock cycle."""
        if self._lib.tf_csr_write(self.handle, self._offset(reg), value & 0xFFFFFFFF):
            raise HarnessError(f"memory fault: {self.message}")

    def read_csr(self, reg: str | int) -> int:
        """Read a CSR (combinational; no clock)."""
        return int(self._lib.tf_csr_read(self.handle, self._offset(reg)))

    def read_csrs(self) -> dict[str, int]:
        """Every CSR by name."""
        return {c.name: self.read_csr(c.offset) for c in CSRS}

    # ------------------------------------------------------------------ running
    def start(self, insn_base: int, insn_count: int, dram_size: int) -> None:
        """Write INSN_BASE, INSN_COUNT, DRAM_SIZE and CTRL = 1 (four clock cycles); the
        run's cycle count and activity intervals start after the CTRL write."""
        if self._lib.tf_start(self.handle, insn_base, insn_count, dram_size & 0xFFFFFFFF):
            raise HarnessError(f"memory fault: {self.message}")

    def run(self, max_cycles: int, hang_cycles: int = 0, trace: bool = False) -> RunStatus:
        """Clock the core until done, error, ``max_cycles`` more cycles, ``hang_cycles``
        cycles without anything happening (0: never) or a memory fault.

        Several calls continue one run (activity intervals stay open across them);
        call :meth:`close_trace` after a last :attr:`RunStatus.LIMIT`.
        """
        return RunStatus(self._lib.tf_run(self.handle, max_cycles, hang_cycles, int(trace)))

    def close_trace(self) -> None:
        """End the open activity intervals at the current cycle."""
        self._lib.tf_close_trace(self.handle)

    def drain(self, max_cycles: int = 100_000) -> bool:
        """Clock until the memory model is idle; whether it became idle."""
        return self._lib.tf_drain(self.handle, max_cycles) == 0

    @property
    def run_cycles(self) -> int:
        """Clock cycles since the CTRL write of the last start."""
        return int(self._lib.tf_run_cycles(self.handle))

    @property
    def total_cycles(self) -> int:
        """Clock cycles since the model was created."""
        return int(self._lib.tf_total_cycles(self.handle))

    @property
    def activity(self) -> dict[str, bool]:
        """Activity bits of the last cycle, by name (``hw.core.ACTIVITY``)."""
        a = int(self._lib.tf_activity(self.handle))
        return {name: bool(a >> k & 1) for k, name in enumerate(self._activity)}

    @property
    def message(self) -> str:
        """The memory model's last fault."""
        return self._lib.tf_message(self.handle).decode()

    def stats(self) -> dict[str, int]:
        """Memory statistics since the last reset: commands, bytes read (by
        instruction fetch and by LOADs into each buffer, see :meth:`set_attribution`)
        and written."""
        n = len(self._stat_names)
        out = (ctypes.c_uint64 * n)()
        self._lib.tf_stats(self.handle, out, n)
        return dict(zip(self._stat_names, (int(v) for v in out), strict=True))

    def intervals(self) -> list[Interval]:
        """Activity intervals recorded by the last traced run, by start cycle."""
        n = int(self._lib.tf_num_intervals(self.handle))
        if n == 0:
            return []
        raw = np.empty(3 * n, dtype=np.uint64)
        self._lib.tf_get_intervals(self.handle, raw.ctypes.data_as(_U64P), n)
        triples = raw.reshape(n, 3)
        names = [name.split("_", 1) for name in self._activity]
        out = [Interval(names[int(b)][0], names[int(b)][1], int(s), int(e))
               for b, s, e in triples]
        out.sort(key=lambda iv: (iv.start, iv.track, iv.kind))
        return out


# ----------------------------------------------------------------------- results
@dataclass
class RtlRunResult(RunResult):
    """:class:`~tensorfab.sim.RunResult` of the RTL executor, with what the core and
    the memory model report.

    Attributes
    ----------
    csrs : dict[str, int]
        Every CSR at the end of the run.
    memory : dict[str, int]
        Memory-model statistics (:meth:`Harness.stats`).
    intervals : list[Interval] | None
        Engine activity intervals when traced.
    """

    csrs: dict[str, int] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    intervals: list[Interval] | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["csrs"] = dict(self.csrs)
        out["memory"] = dict(self.memory)
        return out


class HangError(ProgramError):
    """The core neither finished nor reported an error.

    Either nothing happened any more (no engine working, the memory port idle) for
    ``hang_cycles`` cycles, which in hardware means for ever (typically a token no
    instruction pushes), or the cycle limit ran out.

    Attributes
    ----------
    reason : str
        ``hang`` (nothing happening) or ``limit``.
    cycles : int
        Cycles the core ran.
    waits : list[Wait]
        Engines blocked on a token queue or on fetch, by instruction index;
        :attr:`index`, :attr:`engine` and :attr:`field` are the first token wait's.
    engines : dict[str, str]
        What each engine was doing, one sentence each.
    retired : dict[str, int]
        Instructions retired per engine (LOAD_INSNS, COMPUTE_INSNS, STORE_INSNS).
    last_retired : dict[str, int | None]
        Program index of each engine's last retired instruction.
    csrs : dict[str, int]
        Every CSR.
    activity : dict[str, bool]
        Activity bits of the last cycle.
    """

    def __init__(self, message: str, *, reason: str, cycles: int, waits: list[Wait],
                 engines: dict[str, str], retired: dict[str, int],
                 last_retired: dict[str, int | None], csrs: dict[str, int],
                 activity: dict[str, bool]) -> None:
        self.reason = reason
        self.cycles = cycles
        self.waits = waits
        self.engines = engines
        self.retired = retired
        self.last_retired = last_retired
        self.csrs = csrs
        self.activity = activity
        token = [w for w in waits if w.action in ("pop", "push")]
        first = (token or waits or [None])[0]
        super().__init__(message, index=first.index if first else None,
                         engine=first.engine if first else None,
                         field=(first.flag or None) if first else None)


def describe_hang(program: Program, csrs: Mapping[str, int], activity: Mapping[str, bool],
                  ) -> tuple[list[Wait], dict[str, str], dict[str, int], dict[str, int | None]]:
    """What each engine of a stuck core is doing, from its CSRs and activity bits.

    Per engine, the retired-instruction counter locates the next instruction of its
    stream in the program; an engine that is busy and stalled waits on a token of
    that instruction: a queue it pops whose tokens (pushed by the producer's retired
    instructions minus popped by the consumer's) ran out, else a queue it pushes.
    An engine that holds no instruction waits for fetch to dispatch its next one.

    Returns
    -------
    waits : list[Wait]
        By instruction index.
    engines : dict[str, str]
        One sentence per engine.
    retired : dict[str, int]
        Retired instructions per engine.
    last_retired : dict[str, int | None]
        Program index of each engine's last retired instruction.
    """
    streams: dict[Engine, list[tuple[int, Insn]]] = {e: [] for e in Engine}
    for i, insn in enumerate(program.insns):
        streams[insn.engine].append((i, insn))
    retired = {e: csrs[f"{ENGINE_NAMES[e].upper()}_INSNS"] for e in Engine}
    pushed = dict.fromkeys(QUEUE_NAMES, 0)
    popped = dict.fromkeys(QUEUE_NAMES, 0)
    for e in Engine:
        for _, insn in streams[e][: retired[e]]:
            for flag, q in PUSHES[e]:
                pushed[q] += bool(getattr(insn, flag))
            for flag, q in POPS[e]:
                popped[q] += bool(getattr(insn, flag))
    depth = program.config.dep_queue_depth
    waits: list[Wait] = []
    engines: dict[str, str] = {}
    last: dict[str, int | None] = {}
    for e in Engine:
        name = ENGINE_NAMES[e]
        stream, r = streams[e], retired[e]
        last[name] = stream[r - 1][0] if 0 < r <= len(stream) else None
        done = f"retired {r} of {len(stream)}" + (
            f" (last: instruction {last[name]})" if last[name] is not None else "")
        busy, stall = activity.get(f"{name}_busy"), activity.get(f"{name}_stall")
        if not stream:
            engines[name] = f"{name} engine has no instructions"
            continue
        if r >= len(stream):
            engines[name] = f"{name} engine finished ({done})"
            continue
        index, insn = stream[r]
        here = f"instruction {index} ({insn.mnemonic})"
        if busy and stall:
            mine = [Wait(name, index, insn.mnemonic, "pop", QUEUE_NAMES[q], flag)
                    for flag, q in POPS[e]
                    if getattr(insn, flag) and pushed[q] - popped[q] <= 0]
            if not mine:
                pushes = [(flag, q) for flag, q in PUSHES[e] if getattr(insn, flag)]
                full = [(f, q) for f, q in pushes if pushed[q] - popped[q] >= depth]
                mine = [Wait(name, index, insn.mnemonic, "push", QUEUE_NAMES[q], flag)
                        for flag, q in (full or pushes)]
            waits += mine
            what = "; ".join(w.describe() for w in mine) or f"{name} engine at {here} stalls"
            engines[name] = f"{what} ({done})"
        elif busy:
            units = [u for u in ("gemm", "alu") if name == "compute"
                     and activity.get(f"{u}_busy")]
            extra = f", {' and '.join(units)} busy" if units else ""
            engines[name] = (f"{name} engine at {here} is working (no token wait{extra}; "
                             f"{done})")
        else:
            w = Wait(name, index, insn.mnemonic, "fetch", "", "")
            waits.append(w)
            engines[name] = f"{w.describe()} ({done})"
    waits.sort(key=lambda w: w.index)
    return (waits, engines, {ENGINE_NAMES[e]: retired[e] for e in Engine}, last)


def _load_plan(program: Program) -> list[tuple[int, Buffer]]:
    """Bytes each LOAD reads from DRAM (padding excluded), in load-engine order."""
    cfg = program.config
    return [(insn.y * insn.x * buffer_entry_bytes(cfg, insn.buffer), insn.buffer)
            for insn in program.insns if isinstance(insn, Load)]


def _reset_uops(program: Program) -> int:
    """GEMM micro-op executions of the program that only reset accumulators."""
    return sum((g.uop_end - g.uop_begin) * g.iter_out * g.iter_in for g in program.insns
               if isinstance(g, Gemm) and g.reset)


def core_error(program: Program, image: np.ndarray, code: int, index: int) -> ProgramError:
    """The exception for the core's ERROR_CODE and ERROR_INDEX.

    For errors the fetch unit finds in the word itself the Python decoder explains the
    word (field at fault), as the functional simulator does; otherwise the message
    names the instruction and its engine.
    """
    try:
        err = ErrorCode(code)
    except ValueError:
        return ProgramError(f"the core reported the unknown error code {code} at "
                            f"instruction {index}", index=index)
    cfg = program.config
    n, nb = len(program.insns), program.insn_bytes
    tag = f"reported by the core: ERROR_CODE={err.name}, ERROR_INDEX={index}"
    if not 0 <= index < n or (index + 1) * nb > image.size:
        engine = "compute" if err is ErrorCode.NO_FINISH else None
        what = ("the program does not end with FINISH" if err is ErrorCode.NO_FINISH
                else "error past the last instruction")
        return ProgramError(f"{what} ({tag})", code=err, index=index, engine=engine)
    word = int.from_bytes(image[index * nb:(index + 1) * nb].tobytes(), "little")
    try:
        insn = decode_insn(word, cfg, index)
    except IllegalInstruction as exc:
        if err in _DECODE_CODES:
            return IllegalInstruction(f"{exc.detail} ({tag})", code=err, index=index,
                                      engine=exc.engine, field=exc.field)
        return ProgramError(f"{err.name} ({tag}); the word is also illegal: {exc.detail}",
                            code=err, index=index, engine=exc.engine, field=exc.field)
    engine = ENGINE_NAMES[insn.engine]
    msg = f"{insn.mnemonic}: {err.name} ({tag})"
    if err in _DECODE_CODES:
        return IllegalInstruction(msg, code=err, index=index, engine=engine)
    return ProgramError(msg, code=err, index=index, engine=engine)


# ---------------------------------------------------------------------- the device
class RtlSimulator(Device):
    """Cycle-accurate executor: the Amaranth core in Verilator, driven from C++.

    Parameters
    ----------
    memory : MemoryTiming, optional
        Memory model timing (default :data:`DEFAULT_MEMORY`: 20-cycle read latency,
        8 bytes per cycle).
    max_cycles : int
        Cycle limit of a run; past it :class:`HangError` (reason ``limit``).
    hang_cycles : int
        Cycles with no engine working and the memory port idle after which the run
        stops with :class:`HangError` (reason ``hang``); 0 waits for ``max_cycles``.
    trace : bool
        Record engine activity intervals (:attr:`RtlRunResult.intervals`).
    threads : int
        Verilator threads of the model (see docs/architecture.md for measurements).
    verilator_args, cxxflags : sequence of str
        Extra build flags (part of the build's cache key).
    pgo : bool
        Profile-guided build of the model (faster runs, longer first build).

    Examples
    --------
    >>> res = RtlSimulator(trace=True).run(program)  # doctest: +SKIP
    >>> res.cycles, res.counters.gemm_uops  # doctest: +SKIP
    """

    name = "rtl"

    #: Cycles :meth:`run` clocks per call into the library (keeps Ctrl-C responsive).
    CHUNK = 50_000_000

    def __init__(self, memory: MemoryTiming | None = None, *, max_cycles: int = 500_000_000,
                 hang_cycles: int = 10_000, trace: bool = False,
                 threads: int = DEFAULT_THREADS, verilator_args: Sequence[str] = (),
                 cxxflags: Sequence[str] = (), pgo: bool = True) -> None:
        self.memory = memory if memory is not None else DEFAULT_MEMORY
        if max_cycles < 1 or hang_cycles < 0:
            raise UsageError("max_cycles must be positive and hang_cycles not negative")
        self.max_cycles = max_cycles
        self.hang_cycles = hang_cycles
        self.trace = trace
        self.threads = threads
        self.verilator_args = tuple(verilator_args)
        self.cxxflags = tuple(cxxflags)
        self.pgo = pgo

    def build(self, cfg: HwConfig) -> HarnessBuild:
        """The harness library for ``cfg`` (built unless cached)."""
        return build_harness(cfg, threads=self.threads, verilator_args=self.verilator_args,
                             cxxflags=self.cxxflags, pgo=self.pgo)

    def harness(self, cfg: HwConfig) -> Harness:
        """A fresh core instance for ``cfg`` with this simulator's memory timing."""
        return Harness(self.build(cfg), self.memory)

    def run(self, program: Program, dram: np.ndarray | None = None) -> RtlRunResult:
        """Run ``program`` on the core from a copy of ``dram`` (default its image).

        Raises
        ------
        ProgramError
            The core's STATUS.error (code and index from ERROR_CODE and ERROR_INDEX;
            :class:`~tensorfab.isa.IllegalInstruction` for illegal words).
        HangError
            No done or error: nothing happening for ``hang_cycles`` cycles, or
            ``max_cycles`` reached.
        HarnessError
            The memory model faulted (an access outside the image).
        HarnessBuildError
            The harness could not be built.
        """
        image = self.initial_image(program, dram)
        cfg = program.config
        with self.harness(cfg) as h:
            h.load_dram(image)
            h.reset()
            h.set_attribution((0, len(program.insns) * program.insn_bytes), _load_plan(program))
            h.start(0, len(program.insns), image.size)
            status = RunStatus.LIMIT
            left = self.max_cycles
            while left > 0:
                chunk = min(left, self.CHUNK)
                status = h.run(chunk, self.hang_cycles, self.trace)
                if status is not RunStatus.LIMIT:
                    break
                left -= chunk
            if self.trace and status is RunStatus.LIMIT:
                h.close_trace()
            csrs = h.read_csrs()
            if status is RunStatus.FAULT:
                raise HarnessError(f"memory fault after {h.run_cycles} cycles: {h.message} "
                                   "(the core should have reported DRAM_RANGE)")
            if status is RunStatus.ERROR:
                raise core_error(program, image, csrs["ERROR_CODE"], csrs["ERROR_INDEX"])
            if status in (RunStatus.LIMIT, RunStatus.HANG):
                raise self._hang(program, h, csrs, status)
            assert csrs["STATUS"] & STATUS_DONE
            if not h.drain():
                raise HarnessError(f"the core reported done with {h.message or 'memory'} "
                                   "commands still pending")
            final = h.read_dram()
            mem = h.stats()
            intervals = h.intervals() if self.trace else None
        return RtlRunResult(dram=final, outputs=program.outputs(final),
                            counters=self._counters(program, csrs, mem),
                            cycles=csrs["CYCLES"], device=self.name, csrs=csrs, memory=mem,
                            intervals=intervals)

    def _hang(self, program: Program, h: Harness, csrs: dict[str, int],
              status: RunStatus) -> HangError:
        activity = h.activity
        waits, engines, retired, last = describe_hang(program, csrs, activity)
        cycles = h.run_cycles
        if status is RunStatus.HANG:
            reason = "hang"
            head = (f"the core hung: no engine working and the memory idle for "
                    f"{self.hang_cycles} cycles (at cycle {cycles})")
        else:
            reason = "limit"
            head = f"the core did not finish within {self.max_cycles} cycles"
        msg = f"{head}: " + "; ".join(engines.values())
        return HangError(msg, reason=reason, cycles=cycles, waits=waits, engines=engines,
                         retired=retired, last_retired=last, csrs=csrs, activity=activity)

    @staticmethod
    def _counters(program: Program, csrs: Mapping[str, int], mem: Mapping[str, int]
                  ) -> Counters:
        cfg = program.config
        gemm_uops = csrs["GEMM_BUSY"]
        return Counters(
            load_insns=csrs["LOAD_INSNS"], compute_insns=csrs["COMPUTE_INSNS"],
            store_insns=csrs["STORE_INSNS"],
            load_bytes_inp=mem["bytes_load_inp"], load_bytes_wgt=mem["bytes_load_wgt"],
            load_bytes_acc=mem["bytes_load_acc"], load_bytes_uop=mem["bytes_load_uop"],
            store_bytes=mem["bytes_written"],
            gemm_uops=gemm_uops,
            gemm_macs=max(0, gemm_uops - _reset_uops(program)) * cfg.peak_macs_per_cycle,
            alu_uops=csrs["ALU_BUSY"], alu_ops=csrs["ALU_BUSY"] * cfg.batch * cfg.block_out)
