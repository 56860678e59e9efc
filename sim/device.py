"""The executor interface: :class:`Device`, its :class:`RunResult` and :class:`Counters`.

Every executor (the functional simulator, the RTL simulation, a board) implements
:class:`Device`: it takes a :class:`~tensorfab.isa.Program` and optionally a DRAM
image, runs it and returns the final DRAM image, the program's outputs and
activity counters.
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfab.isa import ErrorCode, Program, ProgramError, TensorfabError


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
    dram : numpy.ndarray
        Final DRAM image (``uint8``).
    outputs : dict[str, numpy.ndarray]
        Every segment marked ``output``, read from :attr:`dram`.
    counters : Counters
        Activity counters.
    cycles : int | None
        Clock cycles of the run; ``None`` for untimed executors.
    device : str
        Name of the executor.
    """

    dram: np.ndarray
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


__all__ = ["DEVICES", "Counters", "Device", "RunResult", "get_device"]
