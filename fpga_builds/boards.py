"""The boards tensorfab builds for: platform, clock target, device memory, programmer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from amaranth.build import Attrs, PinsN, Platform, Resource
from amaranth_boards.icebreaker import ICEBreakerPlatform
from amaranth_boards.orangecrab_r0_2 import (
    OrangeCrabR0_2_25FPlatform,
    OrangeCrabR0_2_85FPlatform,
)
from amaranth_boards.resources import UARTResource
from amaranth_boards.ulx3s import ULX3S_25F_Platform, ULX3S_85F_Platform

from .board_configs import CONFIG_DIR, board_config

if TYPE_CHECKING:
    from tensorfab.isa import HwConfig

__all__ = ["BOARDS", "CONFIG_DIR", "DEVICE_CAPACITY", "MEMORIES", "ORANGECRAB_DFU_IDS",
           "ORANGECRAB_UART_PINS", "Board", "board_config", "get_board"]


def _without_loader(cls: type) -> type:
    """The ULX3S platforms list openFPGALoader as a required tool even when only
    building; programming is :mod:`tensorfab.fpga_builds.program`'s job, so the
    build does not require it."""

    class Platform_(cls):  # type: ignore[misc, valid-type]
        @property
        def required_tools(self) -> list[str]:
            return [t for t in super().required_tools if t != "openFPGALoader"]

    Platform_.__name__ = cls.__name__
    return Platform_


#: The OrangeCrab's UART, on its feather header (``io`` connector pins 0 and 1, the
#: Feather's RX/TX positions): a 3.3 V USB-serial adapter goes there.
ORANGECRAB_UART_PINS = {"rx": "0", "tx": "1"}

#: USB vendor and product of the OrangeCrab's DFU bootloader (the ``dfu-suffix``
#: arguments of amaranth-boards' platform).
ORANGECRAB_DFU_IDS = (0x1209, 0x5AF0)


def _orangecrab_with_uart(cls: type) -> type:
    """amaranth-boards' OrangeCrab has USB only and runs ``dfu-suffix`` after packing:
    add a UART on the header and the RGB LED's three colours as ``led`` 0–2 (active
    low), and leave the DFU suffix to :mod:`tensorfab.fpga_builds.dfu` (the flow
    appends it), so building needs nothing beyond the YoWASP wheels."""

    class Platform_(cls):  # type: ignore[misc, valid-type]
        resources = (
            *cls.resources,
            UARTResource(0, **ORANGECRAB_UART_PINS, conn=("io", 0),
                         attrs=Attrs(IO_TYPE="LVCMOS33", PULLMODE="UP")),
            *(Resource("led", i, PinsN(pin, dir="o"), Attrs(IO_TYPE="LVCMOS33"))
              for i, pin in enumerate(("K4", "M3", "J3"))),
        )

        @property
        def required_tools(self) -> list[str]:
            return [t for t in super().required_tools if t != "dfu-suffix"]

        @property
        def command_templates(self) -> list[str]:
            return [t for t in super().command_templates if "dfu-suffix" not in t]

    Platform_.__name__ = cls.__name__
    return Platform_


#: What each device has, in :mod:`.breakdown`'s categories (nextpnr's ``available``
#: counts: LUT4s (TRELLIS_COMB) or logic cells (ICESTORM_LC), flip-flops, multiplier
#: blocks, block RAMs); ``logic`` in the breakdown's unit (ECP5: LUT4, iCE40: LC).
DEVICE_CAPACITY: dict[str, dict[str, int]] = {
    "LFE5U-25F": {"logic": 24288, "LUT": 24288, "FF": 24288, "DSP": 28, "BRAM": 56},
    "LFE5U-85F": {"logic": 83640, "LUT": 83640, "FF": 83640, "DSP": 156, "BRAM": 208},
    "iCE40UP5K": {"logic": 5280, "LUT": 5280, "FF": 5280, "DSP": 8, "BRAM": 30},
}


#: Where a board's device memory can be: its SDRAM, or the FPGA's block RAM (SPRAM on
#: the UP5K).
MEMORIES = ("sdram", "on-chip")


@dataclass(frozen=True)
class Board:
    """One board.

    Attributes
    ----------
    name : str
        CLI name (``ulx3s-85f``).
    family : str
        ``ecp5`` or ``ice40``.
    platform : Callable[[], Platform]
        Makes the amaranth-boards platform.
    target_mhz : float
        The clock the timing work aims at (100 MHz on ECP5, the issue's target): what
        ``tensorfab bench fpga`` builds against and reports ``timing_met`` for.
    mem_bytes : int
        On-chip memory that serves as device memory where the board has no SDRAM, or
        when a build asks for it (``--memory on-chip``; on iCE40: the UP5K's SPRAM).
    config : str
        The default configuration: the largest that fits (measured; docs/fpga.md), or,
        on a board where none fits (``fits`` false), the smallest.
    loader_board : str
        openFPGALoader's ``-b`` name.
    dsp : str
        Resource name of a multiplier block in nextpnr's report.
    dfu_ids : tuple of int, optional
        USB vendor and product ids: the flow appends a DFU suffix to the bitstream.
    clock_mhz : float, optional
        The clock a build runs at by default (a PLL makes it from the board clock when
        they differ): the default config meets it, measured (docs/fpga.md). None:
        ``target_mhz``.
    fits : bool
        Whether the default config fits the device (measured): False where no config
        fits yet.
    sdram_bytes : int, optional
        The board's SDR SDRAM (the ULX3S's 32 MB): its device memory by default
        (:class:`~tensorfab.hw.soc.sdram.SdramController`, :meth:`uses_sdram`); None:
        none, the device memory is on-chip.
    timing_closure_mhz : float, optional
        Builds at this clock or above run nextpnr with its timing-closure options
        (:data:`~.flow.TIMING_CLOSURE_OPTIONS`) unless told otherwise: where they were
        measured to make the target at every seed tried (docs/fpga.md). None: never
        by default.
    """

    name: str
    family: str
    platform: Callable[[], Platform]
    target_mhz: float
    mem_bytes: int
    config: str
    loader_board: str
    dsp: str
    dfu_ids: tuple[int, int] | None = None
    clock_mhz: float | None = None
    fits: bool = True
    sdram_bytes: int | None = None
    timing_closure_mhz: float | None = None

    @property
    def device(self) -> str:
        """The FPGA part (``LFE5U-25F``, ``iCE40UP5K``)."""
        return str(self.platform().device)

    @property
    def capacity(self) -> dict[str, int]:
        """What the device has (:data:`DEVICE_CAPACITY`)."""
        return DEVICE_CAPACITY[self.device]

    @property
    def default_memory(self) -> str:
        """Where the board's device memory is unless a build says otherwise: ``sdram``
        on a board with SDRAM, else ``on-chip`` (:data:`MEMORIES`)."""
        return "sdram" if self.sdram_bytes is not None else "on-chip"

    def uses_sdram(self, memory: str | bool | None = None) -> bool:
        """Whether device memory ``memory`` (one of :data:`MEMORIES`, or a flag: True
        ``sdram``, False ``on-chip``; None: the board's :attr:`default_memory`) is the
        board's SDRAM.

        Raises
        ------
        FpgaBuildError
            An unknown memory, or ``sdram`` on a board without one (naming the boards
            that have one).
        """
        from .errors import FpgaBuildError

        if isinstance(memory, bool):
            memory = "sdram" if memory else "on-chip"
        memory = memory or self.default_memory
        if memory not in MEMORIES:
            raise FpgaBuildError(f"memory {memory!r}: not one of {', '.join(MEMORIES)}")
        if memory == "sdram" and self.sdram_bytes is None:
            with_sdram = ", ".join(b.name for b in BOARDS.values() if b.sdram_bytes)
            raise FpgaBuildError(f"{self.name}: no SDRAM on this board (boards with one: "
                                 f"{with_sdram})")
        return memory == "sdram"

    def memory_bytes(self, cfg: HwConfig, memory: str | None = None) -> int:
        """Bytes of device memory a model for ``cfg`` has on this board: the SDRAM
        within the config's address range, or the on-chip memory (``memory`` as in
        :meth:`uses_sdram`).

        Raises
        ------
        FpgaBuildError
            As :meth:`uses_sdram`.
        """
        if self.uses_sdram(memory):
            from tensorfab.hw.soc.sdram import sdram_size_bytes

            return sdram_size_bytes(cfg)
        return self.mem_bytes

    @property
    def clock_in_mhz(self) -> float:
        """The board's oscillator (the platform's default clock), in MHz."""
        return self.platform().default_clk_frequency / 1e6


BOARDS: dict[str, Board] = {
    b.name: b for b in (
        Board("ulx3s-85f", "ecp5", _without_loader(ULX3S_85F_Platform), 100.0, 64 * 1024,
              "ecp5-85f", "ulx3s", "MULT18X18D", clock_mhz=70.0,
              sdram_bytes=32 << 20),
        Board("ulx3s-25f", "ecp5", _without_loader(ULX3S_25F_Platform), 100.0, 16 * 1024,
              "ecp5-25f", "ulx3s", "MULT18X18D", clock_mhz=80.0,
              sdram_bytes=32 << 20, timing_closure_mhz=100.0),
        Board("icebreaker", "ice40", ICEBreakerPlatform, 12.0, 32 * 1024,
              "up5k", "ice40_generic", "ICESTORM_DSP", fits=False),
        Board("orangecrab-25f", "ecp5", _orangecrab_with_uart(OrangeCrabR0_2_25FPlatform),
              100.0, 16 * 1024, "ecp5-25f", "orangecrab", "MULT18X18D", ORANGECRAB_DFU_IDS,
              clock_mhz=80.0),
        Board("orangecrab-85f", "ecp5", _orangecrab_with_uart(OrangeCrabR0_2_85FPlatform),
              100.0, 64 * 1024, "ecp5-85f", "orangecrab", "MULT18X18D", ORANGECRAB_DFU_IDS,
              clock_mhz=56.0),
    )
}


def get_board(name: str) -> Board:
    """A board by CLI name.

    Raises
    ------
    FpgaBuildError
        For an unknown name (the message lists the known ones).
    """
    from .errors import FpgaBuildError

    if name not in BOARDS:
        raise FpgaBuildError(f"unknown board {name!r} (known: {', '.join(BOARDS)})")
    return BOARDS[name]
