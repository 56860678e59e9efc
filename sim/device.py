"""The executor interface: :class:`Device`, its :class:`RunResult` and :class:`Counters`.

Every executor (the functional simulator, the RTL simulation, a board) implements
:class:`Device`: it takes a :class:`~tensorfab.isa.Program` and optionally a DRAM
image, runs it and returns the final DRAM image, the program's outputs and
activity counters.

:meth:`Device.open_memory` gives a :class:`DeviceMemory` instead: the device's DRAM kept
across runs, written and read by the host in parts, so that a model's weights are
placed once and activations stay on the device between programs
(:mod:`tensorfab.runtime.resident`).
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfab.isa import ErrorCode, HwConfig, Program, ProgramError, TensorfabError
from tensorfab.isa.errors import UsageError


@dataclass
class Counters:
    """Activity of one run.

    Attributes
    ----------
    load_insns, compute_insns, store_insns : int
        Instructions retired by each engine (FINISH counts for compute).
    load_bytes_inp, load_bytes_wgt, load_bytes_acc, load_bytes_uop : int
        DRAM bytes read by LOADs into each buffer (padding excluded).
    store_bytes : int
        DRAM bytes written by STOREs.
    gemm_macs : int
        Multiply-accumulates: ``batch × block_in × block_out`` per non-reset GEMM
        micro-op execution.
    gemm_uops : int
        GEMM micro-op executions, reset included.
    alu_ops : int
        ALU element operations: ``batch × block_out`` per ALU micro-op execution.
    alu_uops : int
        ALU micro-op executions.
    """

    load_insns: int = 0
    compute_insns: int = 0
    store_insns: int = 0
    load_bytes_inp: int = 0
    load_bytes_wgt: int = 0
    load_bytes_acc: int = 0
    load_bytes_uop: int = 0
    store_bytes: int = 0
    gemm_macs: int = 0
    gemm_uops: int = 0
    alu_ops: int = 0
    alu_uops: int = 0

    def to_dict(self) -> dict[str, int]:
        """Counters as a plain ``{name: value}`` dict (JSON-ready)."""
        return {k: int(v) for k, v in dataclasses.asdict(self).items()}


@dataclass
class RunResult:
    """What a :class:`Device` returns from :meth:`Device.run`.

    Attributes
    ----------
    dram : numpy.ndarray | None
        Final DRAM image (``uint8``); ``None`` for a run in a :class:`DeviceMemory`
        (the memory keeps it).
    outputs : dict[str, numpy.ndarray]
        Every segment marked ``output``, read from :attr:`dram` (empty for a run in a
        :class:`DeviceMemory`: read what you need with :meth:`DeviceMemory.read`).
    counters : Counters
        Activity counters.
    cycles : int | None
        Clock cycles of the run; ``None`` for untimed executors.
    device : str
        Name of the executor.
    """

    dram: np.ndarray | None
    outputs: dict[str, np.ndarray]
    counters: Counters = field(default_factory=Counters)
    cycles: int | None = None
    device: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary: device, cycles, counters and output names with shapes."""
        return {
            "device": self.device,
            "cycles": self.cycles,
            "counters": self.counters.to_dict(),
            "outputs": {name: {"shape": list(arr.shape), "dtype": str(arr.dtype)}
                        for name, arr in self.outputs.items()},
        }


class Device(ABC):
    """An executor of programs.

    Subclasses set :attr:`name` and implement :meth:`run`.
    """

    #: Short executor name (``fsim``, ``rtl``...), reported in :attr:`RunResult.device`.
    name: str = "device"

    @abstractmethod
    def run(self, program: Program, dram: np.ndarray | None = None) -> RunResult:
        """Execute ``program``.

        Parameters
        ----------
        program : Program
            The program (its config, instruction count and segment layout).
        dram : numpy.ndarray | None
            Initial DRAM image (``uint8``, at least ``program.dram_size`` bytes);
            ``None`` means ``program.dram_image()``. It is not modified.

        Returns
        -------
        RunResult
            Final image, outputs and counters.
        """

    def open_memory(self, config: HwConfig, size: int) -> DeviceMemory:
        """A DRAM of ``size`` bytes (zeros) that persists across runs of programs for
        ``config``: the default keeps the image on the host and runs each program
        with :meth:`run`; executors with memory of their own override it."""
        return ImageMemory(self, config, size)

    @staticmethod
    def initial_image(program: Program, dram: np.ndarray | None = None) -> np.ndarray:
        """A private, writable copy of the starting DRAM image.

        Raises
        ------
        ProgramError
            If ``dram`` is not a 1-D ``uint8`` array of at least ``program.dram_size``
            bytes, or exceeds the config's address space (code ``DRAM_RANGE``).
        """
        if dram is None:
            return program.dram_image()
        arr = np.asarray(dram)
        if arr.dtype != np.uint8 or arr.ndim != 1:
            raise ProgramError(f"the DRAM image must be a 1-D uint8 array, got {arr.dtype} "
                               f"with shape {arr.shape}", code=ErrorCode.DRAM_RANGE)
        need = program.dram_size
        if arr.size < need:
            raise ProgramError(f"the DRAM image has {arr.size} bytes, the program needs "
                               f"{need}", code=ErrorCode.DRAM_RANGE)
        if arr.size > program.config.dram_bytes:
            raise ProgramError(f"the DRAM image has {arr.size} bytes, more than the "
                               f"{program.config.dram_addr_width}-bit address space",
                               code=ErrorCode.DRAM_RANGE)
        return arr.copy()


class DeviceMemory(ABC):
    """A device's DRAM kept across program runs (see :meth:`Device.open_memory`).

    The host writes and reads parts of it (counted in :attr:`host_bytes_written` and
    :attr:`host_bytes_read`, the traffic a board's host link would carry) and runs
    programs placed in it (:func:`tensorfab.isa.placement.place_program`).

    Parameters
    ----------
    config : HwConfig
        The configuration of every program run in it.
    size : int
        Bytes of memory.
    """

    def __init__(self, config: HwConfig, size: int) -> None:
        if not 0 < size <= config.dram_bytes:
            raise UsageError(f"a device memory of {size} bytes does not fit the "
                             f"{config.dram_addr_width}-bit address space of {config.name}")
        self.config = config
        self.size = int(size)
        self.host_bytes_written = 0
        self.host_bytes_read = 0

    def _check_range(self, addr: int, nbytes: int, what: str) -> None:
        if addr < 0 or nbytes < 0 or addr + nbytes > self.size:
            raise UsageError(f"{what} of {nbytes} bytes at {addr:#x} is outside the "
                             f"{self.size}-byte device memory")

    def write(self, addr: int, data: np.ndarray) -> None:
        """Write ``data`` (any array; its bytes) at byte ``addr``."""
        raw = np.ascontiguousarray(data).view(np.uint8).ravel()
        self._check_range(addr, raw.size, "a write")
        self._write(addr, raw)
        self.host_bytes_written += raw.size

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` bytes from byte ``addr`` (``uint8``)."""
        self._check_range(addr, nbytes, "a read")
        self.host_bytes_read += nbytes
        return self._read(addr, nbytes)

    def run(self, program: Program) -> RunResult:
        """Run a program placed in this memory; it reads and writes the memory in place.

        Returns
        -------
        RunResult
            Counters and cycles; ``dram`` is ``None`` and ``outputs`` empty.

        Raises
        ------
        ProgramError
            As :meth:`Device.run`; also a program for another config, or one that
            reaches past the memory (``DRAM_RANGE``).
        """
        if program.config != self.config:
            raise UsageError(f"a program for {program.config.name} cannot run in a memory "
                             f"opened for {self.config.name}")
        if program.dram_size > self.size:
            raise ProgramError(f"the program reaches byte {program.dram_size:#x}, past the "
                               f"{self.size}-byte device memory", code=ErrorCode.DRAM_RANGE)
        return self._run(program)

    def close(self) -> None:  # noqa: B027 - most memories hold nothing to release
        """Release the memory (and the executor's state behind it)."""

    def __enter__(self) -> DeviceMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def _write(self, addr: int, raw: np.ndarray) -> None: ...

    @abstractmethod
    def _read(self, addr: int, nbytes: int) -> np.ndarray: ...

    @abstractmethod
    def _run(self, program: Program) -> RunResult: ...


class ImageMemory(DeviceMemory):
    """A :class:`DeviceMemory` kept as a host image, each program run by
    :meth:`Device.run` on it (the default of :meth:`Device.open_memory`)."""

    def __init__(self, device: Device, config: HwConfig, size: int) -> None:
        super().__init__(config, size)
        self.device = device
        self.image = np.zeros(self.size, dtype=np.uint8)

    def _write(self, addr: int, raw: np.ndarray) -> None:
        self.image[addr: addr + raw.size] = raw

    def _read(self, addr: int, nbytes: int) -> np.ndarray:
        return self.image[addr: addr + nbytes].copy()

    def _run(self, program: Program) -> RunResult:
        result = self.device.run(program, self.image)
        assert result.dram is not None
        self.image = result.dram
        result.dram, result.outputs = None, {}
        return result


#: Executors by name, as ``module:class`` of a :class:`Device` built without arguments.
DEVICES: dict[str, str] = {
    "fsim": "tensorfab.sim.fsim:FunctionalSimulator",
}


def get_device(name: str) -> Device:
    """A new executor by name (see :data:`DEVICES`).

    Raises
    ------
    TensorfabError
        If ``name`` is not a known executor.
    """
    if name not in DEVICES:
        raise TensorfabError(f"unknown executor {name!r} (known: {', '.join(DEVICES)})")
    module, cls = DEVICES[name].split(":")
    device = getattr(importlib.import_module(module), cls)()
    assert isinstance(device, Device)
    return device


__all__ = ["DEVICES", "Counters", "Device", "DeviceMemory", "ImageMemory", "RunResult",
           "get_device"]
