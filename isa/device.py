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
import functools
import importlib.metadata
import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .config import HwConfig
from .csr import ErrorCode
from .errors import ProgramError, TensorfabError, UsageError
from .program import Program


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


def require_program(program: object, where: str) -> Program:
    """``program`` if it is a :class:`Program`; else a :class:`UsageError` saying that
    ``where`` (``fsim: run``) takes one and how to get one from a file or its bytes."""
    if isinstance(program, Program):
        return program
    text = repr(str(program) if isinstance(program, Path) else program)
    text = text if len(text) <= 60 else f"{text[:57]}..."
    got = "None" if program is None else f"a {type(program).__name__} ({text})"
    suffix = str(program).rsplit(".", 1)[-1].lower() if isinstance(program, str | Path) else ""
    read_s = "tensorfab.isa.asm.assemble_file(path) for a .s file"
    read_bin = "Program.from_bytes(Path(path).read_bytes()) for a .bin file"
    if isinstance(program, bytes | bytearray | memoryview):
        how = "Program.from_bytes(blob) for a program binary's bytes"
    elif suffix in ("s", "asm"):
        how = f"{read_s} (or assemble(text) for its text)"
    elif suffix == "bin":
        how = read_bin
    else:
        how = f"{read_s}, {read_bin}, or ProgramBuilder / the compiler"
    raise UsageError(f"{where} takes a Program, not {got}: get one with {how}")


class Device(ABC):
    """An executor of programs.

    Subclasses set :attr:`name` and implement :meth:`run`; the :meth:`run` of each
    subclass first refuses a ``program`` that is not a :class:`Program` (a path to a
    file, say) with a :class:`UsageError` saying how to get one
    (:func:`require_program`).
    """

    #: Short executor name (``fsim``, ``rtl``...), reported in :attr:`RunResult.device`.
    name: str = "device"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if run is None or getattr(run, "_requires_program", False):
            return

        @functools.wraps(run)
        def checked_run(self: Device, *args: Any, **kw: Any) -> Any:
            if args or "program" in kw:
                require_program(args[0] if args else kw["program"], f"{self.name}: run")
            return run(self, *args, **kw)

        checked_run._requires_program = True  # type: ignore[attr-defined]
        cls.run = checked_run  # type: ignore[method-assign]

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
        if size <= 0:
            raise UsageError(f"a device memory of {size} bytes: give a positive size")
        if size > config.dram_bytes:
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
        require_program(program, "DeviceMemory.run")
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


# ------------------------------------------------------------------ the registry
#: Entry-point group naming the device factories of installed packages
#: (``scheme = "module:attr"``, pyproject.toml's ``[project.entry-points]``).
ENTRY_POINT_GROUP = "tensorfab.devices"

#: A device factory: ``factory(target, **options) -> Device``, or a :class:`Device`
#: subclass built as ``cls(**options)``.
DeviceFactory = Callable[..., Device] | type[Device]

_FACTORIES: dict[str, DeviceFactory] = {}


def register_device(scheme: str, factory: DeviceFactory, *, replace: bool = False) -> None:
    """Make ``open_device("scheme...")`` call ``factory``.

    Parameters
    ----------
    scheme : str
        A plain name (``fsim``) or a URL scheme (``tcp`` serves ``tcp://host:port``).
    factory : callable or Device subclass
        Called as ``factory(target, **options)``; a :class:`Device` subclass is built
        as ``cls(**options)``.
    replace : bool
        Replace an earlier registration of ``scheme`` instead of refusing it.

    Raises
    ------
    UsageError
        If ``scheme`` is registered already and ``replace`` is false.
    """
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise UsageError(f"device scheme {scheme!r}: lower-case letters, digits, '+', '.', "
                         "'-', starting with a letter")
    if scheme in _FACTORIES and not replace and _FACTORIES[scheme] is not factory:
        raise UsageError(f"device scheme {scheme!r} is registered already")
    _FACTORIES[scheme] = factory


@cache
def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def device_schemes() -> list[str]:
    """Every scheme :func:`open_device` knows (registered or installed), sorted."""
    return sorted(set(_FACTORIES) | set(_entry_points()))


def target_scheme(target: str) -> str:
    """The scheme of a target: ``tcp`` for ``tcp://host:port``, the name itself for
    ``fsim``."""
    return target.split("://", 1)[0] if "://" in target else target


def _factory(scheme: str) -> DeviceFactory | None:
    if scheme not in _FACTORIES and scheme in _entry_points():
        _FACTORIES[scheme] = _entry_points()[scheme].load()
    return _FACTORIES.get(scheme)


def _check_options(target: str, factory: DeviceFactory, options: dict[str, Any]) -> None:
    """Refuse an option the factory does not take, naming those it does (a factory that
    takes ``**options`` checks its own)."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # (a factory without a signature checks its own)
        return
    if not isinstance(factory, type) and params:
        params = params[1:]  # (the target)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in options:
        if key not in names:
            raise UsageError(f"open_device({target!r}): no option {key!r} (its options: "
                             f"{', '.join(names) or 'none'})")


def open_device(target: str, **options: Any) -> Device:
    """A new executor for ``target``: a name (``fsim``, ``rtl``, ``virtual``) or a URL
    (``serial:///dev/ttyUSB0``, ``tcp://127.0.0.1:9000``), with the factory's
    keyword ``options``.

    Raises
    ------
    TensorfabError
        If no factory serves the target's scheme.
    UsageError
        If ``target`` is not a string, or an option is not one the factory takes.

    Examples
    --------
    >>> open_device("fsim").name
    'fsim'
    """
    if not isinstance(target, str):
        raise UsageError(f"open_device: the target is a name or URL such as 'fsim' or "
                         f"'tcp://127.0.0.1:9000', not {target!r}")
    scheme = target_scheme(target)
    factory = _factory(scheme)
    if factory is None:
        known = ", ".join(device_schemes()) or "none: is tensorfab installed (pip install -e .)?"
        raise TensorfabError(f"unknown executor {target!r} (known: {known})")
    _check_options(target, factory, options)
    device = (factory(**options) if isinstance(factory, type) else factory(target, **options))
    if not isinstance(device, Device):
        raise TensorfabError(f"the factory of {scheme!r} made a {type(device).__name__}, "
                             "not a Device")
    return device


#: The name :func:`open_device` had before targets took URLs.
get_device = open_device


__all__ = ["ENTRY_POINT_GROUP", "Counters", "Device", "DeviceFactory", "DeviceMemory",
           "ImageMemory", "RunResult", "device_schemes", "get_device", "open_device",
           "register_device", "target_scheme"]
