"""A board as a :class:`~tensorfab.isa.device.Device`: programs and data over the host link.

:class:`BoardDevice` runs a program on whatever is at the other end of a
:class:`~tensorfab.hil.link.HostLink` (a board's serial port, a virtual board's socket
or pty, a virtual board in this process): it checks that the board's HwConfig is the
program's, writes the DRAM image, starts the core, polls STATUS, and reads back the
image, the counters and the cycle count from the board's own CSRs. The result is the
:class:`~tensorfab.isa.device.RunResult` fsim and rtl return. :class:`BoardMemory`
keeps a model's weights on the board across runs (:meth:`BoardDevice.open_memory`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tensorfab.isa import PRESETS, Buffer, ErrorCode, HwConfig, Load, Program, ProgramError, Store
from tensorfab.isa.device import Device, DeviceMemory, RunResult
from tensorfab.isa.errors import UsageError
from tensorfab.isa.hostlink import config_crc
from tensorfab.isa.insn import buffer_entry_bytes
from tensorfab.sim.rtl.device import core_counters

from .errors import BoardConfigMismatch, BoardResetError, BoardTimeout
from .link import HostLink

__all__ = ["BoardDevice", "BoardMemory", "BoardRunResult", "MemoryAccess", "config_crc",
           "find_config", "program_traffic"]


def find_config(crc: int) -> tuple[str, HwConfig] | None:
    """The preset or board config whose :func:`config_crc` is ``crc`` (its name and
    config), or ``None``: what a board's INFO says it was built for."""
    from tensorfab.fpga_builds.boards import CONFIG_DIR

    known = dict(PRESETS) | {p.stem: HwConfig.from_json(p.read_text())
                             for p in sorted(CONFIG_DIR.glob("*.json"))}
    for name, cfg in known.items():
        if config_crc(cfg) == crc:
            return name, cfg
    return None


def _known_config(crc: int) -> str:
    """The name of a preset or board config with this CRC, or the CRC itself."""
    found = find_config(crc)
    if found is not None:
        return f"{found[0]} (CRC 0x{crc:08x})"
    return f"an unknown config (CRC 0x{crc:08x})"


def program_traffic(program: Program) -> dict[str, int]:
    """DRAM bytes each buffer's LOADs read and the STOREs write, as the RTL memory
    model counts them (padding excluded): what a board's CSRs do not count."""
    cfg = program.config
    out = {"bytes_load_inp": 0, "bytes_load_wgt": 0, "bytes_load_acc": 0,
           "bytes_load_uop": 0, "bytes_written": 0}
    for insn in program.insns:
        if isinstance(insn, Load):
            key = f"bytes_load_{Buffer(insn.buffer).name.lower()}"
            out[key] += insn.y * insn.x * buffer_entry_bytes(cfg, insn.buffer)
        elif isinstance(insn, Store):
            out["bytes_written"] += insn.y * insn.x * cfg.out_entry_bytes
    return out


@dataclass
class BoardRunResult(RunResult):
    """:class:`~tensorfab.isa.device.RunResult` of a board, with its CSRs.

    Attributes
    ----------
    csrs : dict[str, int]
        STATUS, ERROR_CODE, ERROR_INDEX and the counters, read from the board.
    seconds : float
        Wall time of the run on the host, link traffic included.
    clock_hz : int
        The board's clock (cycles / clock_hz is the hardware time).
    """

    csrs: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    clock_hz: int = 0

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["csrs"] = dict(self.csrs)
        out["clock_hz"] = self.clock_hz
        return out


class MemoryAccess(Protocol):
    """How the host reads and writes a board's device memory: its :class:`HostLink`,
    or a virtual board's :class:`~.virtual.DirectMemory`."""

    def write_mem(self, addr: int, data: bytes) -> None:
        """Write ``data`` at byte ``addr``."""

    def read_mem(self, addr: int, nbytes: int) -> bytes:
        """``nbytes`` bytes from byte ``addr``."""


class BoardDevice(Device):
    """A board over a :class:`HostLink`.

    Parameters
    ----------
    link : HostLink
        The link (its transport decides serial, socket or in-process).
    memory : MemoryAccess, optional
        How device memory is read and written (default: over ``link``).
    run_timeout : float
        Seconds a program may run before :class:`BoardTimeout` (wall time).
    poll_interval : float
        Seconds between STATUS polls while a program runs.
    name : str
        Reported in :attr:`RunResult.device`.
    """

    def __init__(self, link: HostLink, *, run_timeout: float = 600.0,
                 poll_interval: float = 0.0, name: str = "board",
                 memory: MemoryAccess | None = None) -> None:
        self.link = link
        self.memory: MemoryAccess = memory or link
        self.run_timeout = run_timeout
        self.poll_interval = poll_interval
        self.name = name
        self.info = link.info()

    @property
    def transfer_progress(self) -> Callable[[str, int, int], None] | None:
        """Called as memory moves over the link (:attr:`HostLink.transfer_progress`)."""
        return self.link.transfer_progress

    @transfer_progress.setter
    def transfer_progress(self, report: Callable[[str, int, int], None] | None) -> None:
        self.link.transfer_progress = report

    # ------------------------------------------------------------------ checks
    def check_config(self, cfg: HwConfig) -> None:
        """Refuse a program for another config than the board's, naming both.

        Raises
        ------
        BoardConfigMismatch
        """
        if config_crc(cfg) != self.info.config_crc:
            raise BoardConfigMismatch(
                f"the board runs {_known_config(self.info.config_crc)}, the program is for "
                f"{cfg.name} (CRC 0x{config_crc(cfg):08x}): build and program the board "
                f"for {cfg.name}, or compile for the board's config")

    # ---------------------------------------------------------------- Device
    def run(self, program: Program, dram: np.ndarray | None = None) -> BoardRunResult:
        """Write the image, run, read the whole image back (see the class)."""
        self.check_config(program.config)
        image = self.initial_image(program, dram)
        beat = self.info.beat_bytes
        size = -(-image.size // beat) * beat
        if size > self.info.mem_bytes:
            raise ProgramError(f"{self.name}: the program's DRAM image has {image.size} "
                               f"bytes, more than the board's memory of "
                               f"{self.info.mem_bytes}", code=ErrorCode.DRAM_RANGE)
        padded = np.zeros(size, np.uint8)
        padded[:image.size] = image
        t0 = time.monotonic()
        self.link.reset()
        self.memory.write_mem(0, padded.tobytes())
        result = self._execute(program, size, lambda: padded)
        final = np.frombuffer(self.memory.read_mem(0, size), np.uint8)[:image.size].copy()
        result.seconds = time.monotonic() - t0
        result.dram = final
        result.outputs = program.outputs(final)
        return result

    def open_memory(self, config: HwConfig, size: int) -> BoardMemory:
        """The board's memory, kept across runs (weights written once)."""
        return BoardMemory(self, config, size)

    def memory_bytes(self, config: HwConfig) -> int:
        """Bytes of device memory a model for ``config`` can use (the board's, from its
        INFO)."""
        return self.info.mem_bytes

    def _execute(self, program: Program, dram_size: int, image: Any) -> BoardRunResult:
        """START a program placed in the board's memory, wait for it, read its CSRs."""
        self.link.reset()
        self.link.start(program.insn_base, len(program.insns), dram_size)
        deadline = time.monotonic() + self.run_timeout
        while True:
            st = self.link.status()
            if st.done or st.error:
                break
            if not st.busy:
                raise BoardResetError(
                    f"{self.name}: the board was reset while {program.config.name}'s program "
                    f"ran (STATUS idle after START, {st.cycles} cycles counted): its result "
                    "is lost; run it again")
            if time.monotonic() > deadline:
                raise BoardTimeout(f"{self.name}: the program did not finish within "
                                   f"{self.run_timeout:g} s ({st.cycles:,} cycles)")
            if self.poll_interval:
                time.sleep(self.poll_interval)
        counters = self.link.counters()
        csrs = {"STATUS": st.status, "ERROR_CODE": st.error_code,
                "ERROR_INDEX": st.error_index} | counters
        if st.error:
            from tensorfab.sim.rtl.diagnosis import core_error

            raise core_error(program, image(), st.error_code, st.error_index)
        return BoardRunResult(
            dram=None, outputs={},
            counters=core_counters(program, csrs, program_traffic(program)),
            cycles=counters["CYCLES"], device=self.name, csrs=csrs,
            clock_hz=self.info.clock_hz)

    def close(self) -> None:
        """Close the link."""
        self.link.close()


class BoardMemory(DeviceMemory):
    """A board's memory kept across runs: the host writes and reads parts of it over
    the link (whole beats on the wire; unaligned parts read-modify-write) and runs
    placed programs in it."""

    def __init__(self, device: BoardDevice, config: HwConfig, size: int) -> None:
        device.check_config(config)
        if size > device.info.mem_bytes:
            raise UsageError(f"{device.name}: a device memory of {size} bytes does not fit "
                             f"the board's {device.info.mem_bytes} bytes")
        super().__init__(config, size)
        self.device = device
        self._beat = device.info.beat_bytes

    def _span(self, addr: int, nbytes: int) -> tuple[int, int]:
        lo = addr // self._beat * self._beat
        hi = -(-(addr + nbytes) // self._beat) * self._beat
        return lo, hi

    def _write(self, addr: int, raw: np.ndarray) -> None:
        lo, hi = self._span(addr, raw.size)
        if (lo, hi) == (addr, addr + raw.size):
            self.device.memory.write_mem(addr, raw.tobytes())
            return
        block = bytearray(self.device.memory.read_mem(lo, hi - lo))
        block[addr - lo: addr - lo + raw.size] = raw.tobytes()
        self.device.memory.write_mem(lo, bytes(block))

    def _read(self, addr: int, nbytes: int) -> np.ndarray:
        lo, hi = self._span(addr, nbytes)
        data = self.device.memory.read_mem(lo, hi - lo)
        return np.frombuffer(data, np.uint8)[addr - lo: addr - lo + nbytes].copy()

    def _run(self, program: Program) -> BoardRunResult:
        return self.device._execute(program, self.size,
                                    lambda: self._read(0, self.size))

