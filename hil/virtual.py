"""The virtual board: the SoC gateware a bitstream holds (host bridge, core, on-chip
memory; :class:`~tensorfab.hw.soc.top.SocTop`) in Verilator, its UART driven bit by
bit from C++ (``sim/harness/soc_harness.cpp``).

Two speeds, the same gateware:

- ``exact``: the board's clock and the bit rate of the board builds (115,200 baud):
  every byte takes as many cycles as on the board;
- ``fast`` (the default): the same SoC built with a UART divisor of 4 clock cycles a
  bit, so the host link costs little simulated time. Everything else (bridge, core,
  memory, the protocol, retries) is what the board runs.

:class:`VirtualBoard` is the simulated board. :class:`InProcessTransport` speaks to it
from the same process; :class:`~tensorfab.hil.board_server.BoardServer` puts it behind
a TCP socket and a pty.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

from amaranth.back import verilog

from tensorfab.hw.soc.top import LEDS, SocTop
from tensorfab.isa import HwConfig
from tensorfab.isa.errors import UsageError
from tensorfab.sim.rtl.build import TopClocking, VerilatedLibrary, build_verilated
from tensorfab.sim.rtl.clock_gates import config_gates, gates_within

__all__ = ["FAST_DIVISOR", "PROBABILITIES", "VIRTUAL_MEM_BYTES", "DirectMemory",
           "InProcessTransport", "LinkFaults", "SocSpec", "VirtualBoard", "check_probability"]

#: Version of the C API of ``sim/harness/soc_harness.cpp`` (``vb_abi``).
SOC_HARNESS_ABI = 2
#: UART divisor (clock cycles a bit) of the fast virtual board.
FAST_DIVISOR = 4
#: On-chip memory of a virtual board not modelled on a board.
VIRTUAL_MEM_BYTES = 1 << 20
#: Bit rate of the board builds (fpga_builds/board_top.py's BAUD).
BOARD_BAUD = 115200
#: Cycles the simulation runs per call before the host side looks at its socket.
CHUNK_CYCLES = 200_000


@dataclass(frozen=True)
class SocSpec:
    """What a virtual board is: configuration, memory, clock and UART divisor.

    Attributes
    ----------
    config : HwConfig
    mem_bytes : int
        On-chip memory (a power of two).
    clock_hz : int
        The SoC clock (what INFO reports, and what cycle counts convert with).
    divisor : int
        UART clock cycles per bit.
    board : str
        The board it models, or ``""``.
    sdram : bool
        Device memory in SDRAM: the SoC's :class:`~tensorfab.hw.soc.sdram.
        SdramController` with the chip modelled in the harness (``mem_bytes`` is the
        chip's size within the core's address range).
    """

    config: HwConfig
    mem_bytes: int
    clock_hz: int
    divisor: int
    board: str = ""
    sdram: bool = False

    @classmethod
    def for_board(cls, board: str | None, config: HwConfig | None = None, *,
                  exact: bool = False, mem_bytes: int | None = None,
                  sdram: bool | None = None) -> SocSpec:
        """The SoC of ``board`` (its default config, device memory and clock), or of no
        board (``config`` required, :data:`VIRTUAL_MEM_BYTES` on-chip, 100 MHz).

        ``sdram``: device memory in SDRAM (True) or on-chip (False); None: the board's
        (SDRAM on a board that has it,
        :meth:`~tensorfab.fpga_builds.boards.Board.uses_sdram`), on-chip without a
        board. ``mem_bytes`` sets the on-chip memory.

        Raises
        ------
        UsageError
            ``mem_bytes`` with the memory in SDRAM, ``sdram`` on a board without one,
            or a memory that is not a power of two of at least one bus beat.
        """
        in_sdram = bool(sdram)
        if board:
            from tensorfab.fpga_builds.board_top import board_clock_mhz
            from tensorfab.fpga_builds.boards import board_config, get_board
            from tensorfab.fpga_builds.errors import FpgaBuildError

            b = get_board(board)
            cfg = config or board_config(b.config)
            clock_hz = round(board_clock_mhz(b, None) * 1e6)
            mem = mem_bytes if mem_bytes is not None else b.mem_bytes
            try:
                in_sdram = b.uses_sdram(sdram)
            except FpgaBuildError as e:
                raise UsageError(f"virtual board: {e}") from None
        else:
            if config is None:
                raise UsageError("a virtual board without --board needs a config")
            cfg, clock_hz = config, 100_000_000
            mem = mem_bytes if mem_bytes is not None else VIRTUAL_MEM_BYTES
        if in_sdram and mem_bytes is not None:
            raise UsageError(f"virtual {board or 'board'}: mem_bytes (--mem-bytes) sizes "
                             "on-chip memory, but this board's device memory is its SDRAM: "
                             "add --memory on-chip (sdram=0 in a URL)")
        if mem & (mem - 1) or mem < cfg.mem_bus_bytes:
            raise UsageError(f"virtual board memory {mem} is not a power of two of at least "
                             "one bus beat")
        divisor = clock_hz // BOARD_BAUD if exact else FAST_DIVISOR
        spec = cls(cfg, mem, clock_hz, divisor, board or "")
        return spec.with_sdram() if in_sdram else spec

    @property
    def baud(self) -> int:
        """The UART's bit rate at :attr:`clock_hz`."""
        return self.clock_hz // self.divisor

    @property
    def exact(self) -> bool:
        """At the board builds' bit rate."""
        return self.baud <= BOARD_BAUD

    def soc(self) -> SocTop:
        """The gateware."""
        return SocTop(self.config, mem_bytes=self.mem_bytes, clk_hz=self.clock_hz,
                      baud=self.baud, sdram=self.sdram)

    def with_sdram(self) -> SocSpec:
        """The same SoC with its device memory in SDRAM (the ULX3S's chip)."""
        from tensorfab.hw.soc.sdram import sdram_size_bytes

        return replace(self, sdram=True, mem_bytes=sdram_size_bytes(self.config))


#: The SoC's top module in its Verilog.
SOC_MODULE = "tensorfab_soc"
#: The core inside it (``SocTop``'s submodule ``core``), and the core's reset input that
#: ``SocTop``'s ``ResetInserter`` adds (the host link's RESET).
SOC_CORE, SOC_CORE_RESETS = f"{SOC_MODULE}.core", ("core_reset",)
#: The profile-guided build's training run (``python -m TRAINING --train DIR``).
TRAINING = "tensorfab.hil.virtual_train"
#: The SDRAM pins the harness samples before each clock edge.
SDRAM_SAMPLED = tuple(f"sdram__{pin}" for pin in ("cs", "ras", "cas", "we", "ba", "a",
                                                     "dq_oe", "dq_o"))


def soc_clocking(spec: SocSpec, *, clock_gates: bool = True, two_evals: bool = False,
                 pgo: bool = True) -> TopClocking | None:
    """How the virtual board's harness clocks the SoC of ``spec``: the core harness's
    techniques (:class:`~tensorfab.sim.rtl.build.TopClocking`): the reset registered in
    a wrapper, one evaluation per cycle, the core's units of
    :func:`~tensorfab.sim.rtl.clock_gates.config_gates` on gated clocks (only in the
    Verilog given to Verilator; the SoC's and every FPGA build's Verilog has one
    clock), profile-guided (:mod:`tensorfab.hil.virtual_train`). ``None`` with neither
    gates nor one evaluation: the SoC itself, evaluated twice per cycle, not
    profile-guided (the plain build the others are checked against)."""
    if two_evals and not clock_gates:
        return None
    gates = (gates_within(config_gates(spec.config), "soc.core", SOC_CORE_RESETS)
             if clock_gates else ())
    return TopClocking("soc", ("rst",), SDRAM_SAMPLED if spec.sdram else (), SOC_CORE,
                       gates, two_evals, TRAINING if pgo else "")


def build_soc(spec: SocSpec, *, clock_gates: bool = True, two_evals: bool = False,
              pgo: bool = True) -> VerilatedLibrary:
    """The virtual board's library for ``spec`` (built once, cached with the RTL
    executor's builds), clocked as :func:`soc_clocking` says (the defaults: the
    fastest; ``clock_gates=False, two_evals=True``: the plain build)."""
    def design() -> str:
        os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
        return verilog.convert(spec.soc(), name=SOC_MODULE, emit_src=False)

    name = f"soc-{spec.config.name}-{spec.mem_bytes}-d{spec.divisor}" \
        + ("-sdram" if spec.sdram else "")
    params = {"config": spec.config.to_dict(), "mem_bytes": spec.mem_bytes,
              "clock_hz": spec.clock_hz, "baud": spec.baud, "sdram": spec.sdram}
    defines: dict[str, str | int] = {"SOC_LED_BUSY": LEDS.index("busy")}
    if spec.sdram:
        defines |= sdram_defines(spec.clock_hz)
    return build_verilated(name, design, params, SOC_MODULE, "soc_harness.cpp", defines,
                           soc_clocking(spec, clock_gates=clock_gates, two_evals=two_evals,
                                        pgo=pgo))


def sdram_defines(clock_hz: int) -> dict[str, str | int]:
    """The harness's SDRAM chip: its size, columns and timing in cycles of ``clock_hz``
    (the controller's :class:`~tensorfab.hw.soc.sdram.SdramTiming`)."""
    from tensorfab.hw.soc.sdram import SdramGeometry, SdramTiming

    g, t = SdramGeometry(), SdramTiming()

    def c(ns: float) -> int:
        return t.clocks(ns, clock_hz)

    return {"SOC_SDRAM": 1, "SDRAM_WORDS": g.size_bytes // 2, "SDRAM_COLS": g.cols,
            "SDRAM_T_RP": c(t.t_rp), "SDRAM_T_RCD": c(t.t_rcd), "SDRAM_T_RAS": c(t.t_ras),
            "SDRAM_T_RC": c(t.t_rc), "SDRAM_T_RRD": c(t.t_rrd), "SDRAM_T_WR": c(t.t_wr),
            "SDRAM_T_RFC": c(t.t_rfc), "SDRAM_T_MRD": t.t_mrd,
            "SDRAM_T_REFI": int(t.t_refi * clock_hz / 1e9), "SDRAM_T_INIT": c(t.t_init),
            "SDRAM_INIT_REFRESHES": t.init_refreshes}


#: The fields of :class:`LinkFaults` that are probabilities.
PROBABILITIES = ("bit_flip", "drop", "delay")


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_probability(value: object, name: str) -> None:
    """Refuse a ``value`` that is not a probability (a number from 0 to 1, not a bool),
    naming it ``name`` (``LinkFaults.drop``; a command line's ``--drop``).

    Raises
    ------
    UsageError
    """
    if not _is_real(value) or not 0.0 <= value <= 1.0:
        raise UsageError(f"{name}: {value!r} is not a probability (a number from 0 to 1)")


@dataclass(frozen=True)
class LinkFaults:
    """Faults injected into the bytes crossing the virtual board's UART.

    Attributes
    ----------
    bit_flip : float
        Probability that a byte has one bit flipped.
    drop : float
        Probability that a byte is lost.
    delay : float
        Probability that a byte is held back for ``delay_seconds`` (in the TCP
        server; the in-process transport holds it for ``delay_cycles``).
    delay_seconds : float
    reset_at_cycle : int, optional
        Press the board's reset once its clock passes this cycle (a reset in the middle
        of a run).
    seed : int

    Raises
    ------
    UsageError
        A probability that is not a number from 0 to 1 (:func:`check_probability`), a
        ``delay_seconds`` that is not a finite number ≥ 0, a ``reset_at_cycle`` that is
        not ``None`` or an integer ≥ 0, a ``seed`` that is not an integer.
    """

    bit_flip: float = 0.0
    drop: float = 0.0
    delay: float = 0.0
    delay_seconds: float = 0.002
    reset_at_cycle: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in PROBABILITIES:
            check_probability(getattr(self, name), f"LinkFaults.{name}")
        d = self.delay_seconds
        if not _is_real(d) or not 0.0 <= d < math.inf:
            raise UsageError(f"LinkFaults.delay_seconds: {d!r} is not a number of seconds "
                             "(finite, 0 or more)")
        r = self.reset_at_cycle
        if r is not None and (not _is_integer(r) or r < 0):
            raise UsageError(f"LinkFaults.reset_at_cycle: {r!r} is not a cycle (an integer, "
                             "0 or more, or None for no reset)")
        if not _is_integer(self.seed):
            raise UsageError(f"LinkFaults.seed: {self.seed!r} is not an integer")

    def injectors(self) -> tuple[FaultInjector, FaultInjector]:
        """Injectors for the bytes to the board and those from it (seeded apart)."""
        return FaultInjector(self), FaultInjector(replace(self, seed=self.seed + 1))


class FaultInjector:
    """Applies :class:`LinkFaults` to byte strings, counting what it did."""

    def __init__(self, faults: LinkFaults) -> None:
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.flipped = self.dropped = self.delayed = 0

    def apply(self, data: bytes) -> tuple[bytes, bool]:
        """The bytes after faults, and whether the last part should be delayed."""
        f = self.faults
        if not (f.bit_flip or f.drop or f.delay):
            return data, False
        out = bytearray()
        delay = False
        for byte in data:
            r = self.rng.random()
            if r < f.drop:
                self.dropped += 1
                continue
            if r < f.drop + f.bit_flip:
                byte ^= 1 << self.rng.randrange(8)
                self.flipped += 1
            if self.rng.random() < f.delay:
                self.delayed += 1
                delay = True
            out.append(byte)
        return bytes(out), delay

    def counts(self) -> dict[str, int]:
        return {"flipped": self.flipped, "dropped": self.dropped, "delayed": self.delayed}


class VirtualBoard:
    """One simulated board (the SoC in Verilator) and its UART.

    Parameters
    ----------
    spec : SocSpec
    clock_gates, two_evals, pgo : bool
        How the harness clocks the SoC and how it is compiled (:func:`build_soc`;
        the defaults are the fastest, the same cycles as the others).
    build : VerilatedLibrary, optional
        A library of ``spec``'s SoC to load instead of :func:`build_soc`'s (the
        profile-guided build's training run, :mod:`tensorfab.hil.virtual_train`).
    """

    def __init__(self, spec: SocSpec, *, clock_gates: bool = True, two_evals: bool = False,
                 pgo: bool = True, build: VerilatedLibrary | None = None) -> None:
        self.spec = spec
        self.build = build or build_soc(spec, clock_gates=clock_gates, two_evals=two_evals,
                                        pgo=pgo)
        self._lib = _load(self.build.library)
        self._handle = ctypes.c_void_p(self._lib.vb_new(spec.divisor))
        self.reset()

    # the C API, one method each
    def reset(self, cycles: int = 8) -> None:
        """Hold the board's reset (power-up, or its reset button mid-run)."""
        self._lib.vb_reset(self._handle, cycles)

    def push(self, data: bytes) -> None:
        """Bytes the host sends (queued on the UART's receive line)."""
        if data:
            self._lib.vb_push(self._handle, data, len(data))

    def run(self, max_cycles: int = CHUNK_CYCLES, idle_cycles: int | None = None) -> bool:
        """Clock until a response is complete, ``max_cycles`` passed, or nothing has
        happened for ``idle_cycles``; True when the board is idle."""
        idle = idle_cycles if idle_cycles is not None else 400 * self.spec.divisor
        return bool(self._lib.vb_run(self._handle, max_cycles, idle))

    def take(self) -> bytes:
        """Bytes the board has sent since the last call."""
        buf = ctypes.create_string_buffer(65536)
        n = self._lib.vb_take(self._handle, buf, len(buf))
        return buf.raw[:n]

    @property
    def pending(self) -> int:
        """Bytes the host sent that the board has not received yet."""
        return int(self._lib.vb_pending(self._handle))

    @property
    def cycle(self) -> int:
        """Clock cycles since the board was made."""
        return int(self._lib.vb_cycle(self._handle))

    @property
    def leds(self) -> dict[str, bool]:
        """The status LEDs by name."""
        v = int(self._lib.vb_leds(self._handle))
        return {name: bool(v >> i & 1) for i, name in enumerate(LEDS)}

    @property
    def framing_errors(self) -> int:
        """Bytes from the board whose stop bit was wrong."""
        return int(self._lib.vb_framing_errors(self._handle))

    @property
    def sdram_violations(self) -> tuple[int, str]:
        """The SDRAM chip's timing violations and the first as text ((0, "") without
        SDRAM, or when the controller kept every rule)."""
        first = self._lib.vb_sdram_first_violation(self._handle) or b""
        return int(self._lib.vb_sdram_violations(self._handle)), first.decode()

    @property
    def sdram_commands(self) -> int:
        """Commands the SDRAM chip took (0 without SDRAM)."""
        return int(self._lib.vb_sdram_commands(self._handle))

    def write_memory(self, addr: int, data: bytes) -> None:
        """Write the SDRAM chip's contents directly, as a debugger would: no clock
        passes and the SoC sees nothing (:class:`DirectMemory`).

        Raises
        ------
        UsageError
            A board without SDRAM (its on-chip memory is inside the Verilated model),
            or a range past the chip's end.
        """
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        if self._lib.vb_mem_write(self._handle, addr, buf, len(data)) != len(data):
            raise UsageError(_direct_refusal(self.spec, addr, len(data)))

    def read_memory(self, addr: int, nbytes: int) -> bytes:
        """Read the SDRAM chip's contents directly (see :meth:`write_memory`).

        Raises
        ------
        UsageError
            As :meth:`write_memory`.
        """
        buf = ctypes.create_string_buffer(nbytes)
        if self._lib.vb_mem_read(self._handle, addr, buf, nbytes) != nbytes:
            raise UsageError(_direct_refusal(self.spec, addr, nbytes))
        return buf.raw[:nbytes]

    def close(self) -> None:
        """Free the simulation."""
        if self._handle:
            self._lib.vb_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self) -> VirtualBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _direct_refusal(spec: SocSpec, addr: int, nbytes: int) -> str:
    """Why direct access to ``nbytes`` bytes at ``addr`` of ``spec``'s board fails."""
    if not spec.sdram:
        return ("direct memory access needs a virtual board with SDRAM (sdram=1): "
                "on-chip memory is reached over the host link only")
    return (f"direct memory access to bytes {addr:#x}..{addr + nbytes:#x} is past the "
            "SDRAM chip's end")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    if lib.vb_abi() != SOC_HARNESS_ABI:
        raise UsageError(f"{path}: virtual board harness ABI {lib.vb_abi()}, expected "
                         f"{SOC_HARNESS_ABI}: delete the stale build")
    lib.vb_new.restype = ctypes.c_void_p
    lib.vb_new.argtypes = [ctypes.c_int]
    lib.vb_free.argtypes = [ctypes.c_void_p]
    lib.vb_reset.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.vb_push.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.vb_run.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
    lib.vb_run.restype = ctypes.c_int
    lib.vb_take.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.vb_pending.argtypes = [ctypes.c_void_p]
    lib.vb_cycle.argtypes = [ctypes.c_void_p]
    lib.vb_cycle.restype = ctypes.c_uint64
    lib.vb_leds.argtypes = [ctypes.c_void_p]
    lib.vb_leds.restype = ctypes.c_uint32
    lib.vb_framing_errors.argtypes = [ctypes.c_void_p]
    lib.vb_framing_errors.restype = ctypes.c_uint32
    lib.vb_sdram_violations.argtypes = [ctypes.c_void_p]
    lib.vb_sdram_violations.restype = ctypes.c_uint64
    lib.vb_sdram_first_violation.argtypes = [ctypes.c_void_p]
    lib.vb_sdram_first_violation.restype = ctypes.c_char_p
    lib.vb_sdram_commands.argtypes = [ctypes.c_void_p]
    lib.vb_sdram_commands.restype = ctypes.c_uint64
    for name in ("vb_mem_write", "vb_mem_read"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p,
                                       ctypes.c_uint64]
        getattr(lib, name).restype = ctypes.c_int64
    return lib


class DirectMemory:
    """Device memory reads and writes of a :class:`~.board.BoardDevice` straight into a
    virtual board's SDRAM chip, as a debugger's memory access: only commands (START,
    STATUS, CSRs) cross the UART. Loading a model of megabytes over the simulated UART
    costs ~40 clock cycles a byte; this costs none, and the runs are the same.

    Parameters
    ----------
    board : VirtualBoard
        A board with SDRAM.

    Raises
    ------
    UsageError
        ``board`` has no SDRAM.
    """

    def __init__(self, board: VirtualBoard) -> None:
        if not board.spec.sdram:
            raise UsageError(_direct_refusal(board.spec, 0, 0))
        self.board = board

    def write_mem(self, addr: int, data: bytes) -> None:
        """Write ``data`` at byte ``addr``."""
        self.board.write_memory(addr, data)

    def read_mem(self, addr: int, nbytes: int) -> bytes:
        """``nbytes`` bytes from byte ``addr``."""
        return self.board.read_memory(addr, nbytes)


class InProcessTransport:
    """A :class:`~tensorfab.hil.transport.Transport` straight into a
    :class:`VirtualBoard` of this process: writes queue bytes on its UART, reads clock
    it until it answers. Faults, when given, hit both directions.

    Time is simulated: a read's ``timeout`` counts byte times of the board's UART
    (``timeout / byte_seconds``), so retries behave as on a board whatever the
    simulation's speed.
    """

    def __init__(self, board: VirtualBoard, faults: LinkFaults | None = None) -> None:
        self.board = board
        self.byte_seconds = 10.0 / board.spec.baud
        faults = faults or LinkFaults()
        self.faults_in, self.faults_out = faults.injectors()
        self._rx = b""
        self._reset_at = faults.reset_at_cycle
        self._delayed = b""

    def write(self, data: bytes) -> None:
        data, delay = self.faults_in.apply(data)
        if delay:  # held back: reaches the board with the next write or read
            self._delayed += data
            return
        self.board.push(self._delayed + data)
        self._delayed = b""

    def press_reset_at(self, cycle: int) -> None:
        """Reset the board once its clock reaches ``cycle``."""
        self._reset_at = cycle

    def _clock(self, cycles: int) -> None:
        if self._delayed:
            self.board.push(self._delayed)
            self._delayed = b""
        if self._reset_at is not None and self.board.cycle + cycles >= self._reset_at:
            self.board.run(max(0, self._reset_at - self.board.cycle))
            self.board.reset()
            self._reset_at = None
            return
        self.board.run(cycles)

    def read(self, size: int, timeout: float) -> bytes:
        if not self._rx:
            cycles = int(timeout / self.byte_seconds * 10 * self.board.spec.divisor) + 1
            start = self.board.cycle
            while not self._rx and self.board.cycle - start < cycles:
                self._clock(min(CHUNK_CYCLES, cycles - (self.board.cycle - start)))
                self._rx, _ = self.faults_out.apply(self.board.take())
            # the rest of a response still on the wire: the host's deadlines are wall
            # time, which a slow (exact) UART would otherwise outlast mid-frame
            while self._rx and self.board.leds["tx"]:
                self._clock(CHUNK_CYCLES)
                more, _ = self.faults_out.apply(self.board.take())
                self._rx += more
        out, self._rx = self._rx[:size], self._rx[size:]
        return out

    def discard_input(self) -> None:
        self._rx = b""

    def close(self) -> None:
        pass
