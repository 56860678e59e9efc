"""The harness library through ctypes: :class:`Harness` is the handle on one Verilated
core instance (DRAM, CSRs, start, run, statistics, activity intervals)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import (
    CSR_BY_NAME,
    CSRS,
    Buffer,
    HwConfig,
    TensorfabError,
)
from tensorfab.isa.errors import UsageError

from ..trace import Interval
from .build import HARNESS_ABI, HarnessBuild


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
    onchip : bool
        Model instead the SoC's on-chip memory (``hw/soc/memory.py``) cycle for cycle,
        as a board and the virtual board have it (:data:`ONCHIP_MEMORY`); the other
        fields are then unused.
    """

    read_latency: int = 20
    write_latency: int = 1
    bandwidth: int = 8
    max_outstanding: int = 16
    read_buffer: int = 8
    onchip: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name == "onchip":
                continue
            value = getattr(self, f.name)
            if not isinstance(value, int) or value < 1 or value >= 1 << 32:
                raise UsageError(f"MemoryTiming.{f.name} = {value!r} must be an integer "
                                 "between 1 and 2**32 - 1")


#: The memory of :class:`RtlSimulator` unless told otherwise.
DEFAULT_MEMORY = MemoryTiming()
#: The SoC's on-chip memory: a run's cycles are then a board's
#: (``RtlSimulator(ONCHIP_MEMORY)``).
ONCHIP_MEMORY = MemoryTiming(read_latency=3, max_outstanding=1, read_buffer=3, onchip=True)


# -------------------------------------------------------------------- the library
_U64P = ctypes.POINTER(ctypes.c_uint64)
_U8P = ctypes.POINTER(ctypes.c_uint8)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "tf_abi": (ctypes.c_int, []),
    "tf_stat_names": (ctypes.c_char_p, []),
    "tf_config_json": (ctypes.c_char_p, []),
    "tf_create": (ctypes.c_void_p, []),
    "tf_destroy": (None, [ctypes.c_void_p]),
    "tf_set_mem": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_uint32] * 6),
    "tf_set_attribution": (None, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, _U64P,
                                  _U8P, ctypes.c_uint64]),
    "tf_load_dram": (None, [ctypes.c_void_p, _U8P, ctypes.c_uint64]),
    "tf_dram_size": (ctypes.c_uint64, [ctypes.c_void_p]),
    "tf_read_dram": (None, [ctypes.c_void_p, _U8P, ctypes.c_uint64]),
    "tf_write_dram_at": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, _U8P,
                                        ctypes.c_uint64]),
    "tf_read_dram_at": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, _U8P,
                                       ctypes.c_uint64]),
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
        The library (:func:`~tensorfab.sim.rtl.build.build_harness`).
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
        """Set the memory model's timing (also resets its state and statistics; the
        core sees the restarted memory after the next :meth:`reset`)."""
        m = memory
        if self._lib.tf_set_mem(self.handle, m.read_latency, m.write_latency, m.bandwidth,
                                m.max_outstanding, m.read_buffer, int(m.onchip)):
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

    @property
    def dram_size(self) -> int:
        """Bytes of the memory (set by :meth:`load_dram`)."""
        return int(self._lib.tf_dram_size(self.handle))

    def read_dram(self) -> np.ndarray:
        """A copy of the whole memory."""
        n = self._lib.tf_dram_size(self.handle)
        out = np.empty(n, dtype=np.uint8)
        self._lib.tf_read_dram(self.handle, out.ctypes.data_as(_U8P), n)
        return out

    def write_dram(self, addr: int, data: np.ndarray) -> None:
        """Write ``data`` (``uint8``) at byte ``addr`` of the memory (no clock)."""
        arr = np.ascontiguousarray(data, dtype=np.uint8)
        if self._lib.tf_write_dram_at(self.handle, addr, arr.ctypes.data_as(_U8P), arr.size):
            raise HarnessError(f"write of {arr.size} bytes at {addr:#x} is outside the "
                               f"{self._lib.tf_dram_size(self.handle)}-byte memory")

    def read_dram_at(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` bytes of the memory from byte ``addr``."""
        out = np.empty(nbytes, dtype=np.uint8)
        if self._lib.tf_read_dram_at(self.handle, addr, out.ctypes.data_as(_U8P), nbytes):
            raise HarnessError(f"read of {nbytes} bytes at {addr:#x} is outside the "
                               f"{self._lib.tf_dram_size(self.handle)}-byte memory")
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
