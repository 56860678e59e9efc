"""The SoC on a board: clock (PLL on ECP5), power-on reset, UART pins, LEDs."""

from __future__ import annotations

from amaranth.build import ResourceError
from amaranth.hdl import ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, Signal

from tensorfab.hw.soc.sdram import sdram_size_bytes
from tensorfab.hw.soc.top import LEDS, SocTop
from tensorfab.isa import HwConfig

from .boards import Board
from .errors import FpgaBuildError

__all__ = ["BoardTop", "board_clock_mhz", "ecp5_pll_params"]

#: UART bit rate of the board builds (the FTDI parts of all three boards take it).
BAUD = 115200


def ecp5_pll_params(in_mhz: float, out_mhz: float) -> dict[str, int]:
    """EHXPLLL dividers giving exactly ``out_mhz`` from ``in_mhz`` (VCO 400–800 MHz).

    Raises
    ------
    ValueError
        If no divider set gives the frequency exactly.
    """
    for clki in range(1, 129):
        for fb in range(1, 81):
            if abs(in_mhz * fb / clki - out_mhz) > 1e-6:
                continue
            for op in range(1, 129):
                if 400 <= out_mhz * op <= 800:
                    return {"CLKI_DIV": clki, "CLKFB_DIV": fb, "CLKOP_DIV": op,
                            "CLKOP_CPHASE": op - 1}
    raise ValueError(f"no ECP5 PLL setting makes {out_mhz} MHz from {in_mhz} MHz")


def board_clock_mhz(board: Board, clock_mhz: float | None) -> float:
    """The SoC clock of a build: ``clock_mhz``, or the board's default
    (:attr:`Board.clock_mhz`, else :attr:`Board.target_mhz`), checked.

    Raises
    ------
    FpgaBuildError
        If the board cannot make the clock (see :class:`BoardTop`).
    """
    if clock_mhz is None:
        clock_mhz = board.clock_mhz or board.target_mhz
    if not clock_mhz > 0:
        raise FpgaBuildError(f"{board.name}: clock {clock_mhz} MHz must be positive")
    in_mhz = board.clock_in_mhz
    if abs(clock_mhz - in_mhz) <= 1e-6:
        return clock_mhz
    if board.family != "ecp5":
        raise FpgaBuildError(f"{board.name}: no PLL wired; the SoC runs at the board clock, "
                             f"{in_mhz:g} MHz (asked for {clock_mhz:g} MHz)")
    try:
        ecp5_pll_params(in_mhz, clock_mhz)
    except ValueError as exc:
        raise FpgaBuildError(f"{board.name}: {exc}") from None
    return clock_mhz


class BoardTop(Elaboratable):
    """:class:`SocTop` wired to a board's clock, UART and LEDs.

    Parameters
    ----------
    board : Board
    cfg : HwConfig
    clock_mhz : float, optional
        Clock of the SoC (default: the board's, :func:`board_clock_mhz`). On ECP5 a PLL makes it
        from the board clock; an iCE40 runs at its board clock.
    sdram : bool, optional
        Device memory in the board's SDRAM (:attr:`Board.sdram_bytes`) rather than block
        RAM; None: the board's default (:meth:`Board.uses_sdram`). The chip's clock is
        the SoC clock inverted (a DDR output register driving
        0 then 1), so commands reach it half a cycle after they leave their registers
        and read data is sampled one cycle after the CAS latency (``board_delay`` 1).

    Raises
    ------
    FpgaBuildError
        If the board cannot make ``clock_mhz`` (no PLL on the iCE40 builds, or no ECP5
        PLL setting gives it exactly), or ``sdram`` on a board without SDRAM.
    """

    def __init__(self, board: Board, cfg: HwConfig, clock_mhz: float | None = None, *,
                 sdram: bool | None = None) -> None:
        self.board = board
        self.cfg = cfg
        try:
            self.sdram = board.uses_sdram(sdram)
            self.clock_mhz = board_clock_mhz(board, clock_mhz)
        except FpgaBuildError:
            self._MustUse__silence = True  # refused, never elaborated: no unused warning
            raise

    @property
    def memory(self) -> str:
        """Where the device memory is: ``sdram``, ``spram`` or ``bram``."""
        if self.sdram:
            return "sdram"
        return "spram" if self.board.family == "ice40" else "bram"

    @property
    def mem_bytes(self) -> int:
        """The device memory: the SDRAM within the core's address range, or on-chip."""
        if self.sdram:
            return sdram_size_bytes(self.cfg)
        return self.board.mem_bytes

    def elaborate(self, platform) -> Module:
        board = self.board
        m = Module()
        clk_res = platform.request(platform.default_clk)
        in_mhz = platform.default_clk_frequency / 1e6
        m.domains.sync = sync = ClockDomain("sync")
        locked = Signal()
        if board.family == "ecp5" and abs(in_mhz - self.clock_mhz) > 1e-6:
            params = ecp5_pll_params(in_mhz, self.clock_mhz)
            clk_out = Signal()
            m.submodules.pll = Instance(
                "EHXPLLL",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA",
                p_CLKOP_ENABLE="ENABLED", p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
                **{f"p_{k}": v for k, v in params.items()},
                i_CLKI=clk_res.i, i_CLKFB=clk_out, i_RST=Const(0), i_STDBY=Const(0),
                i_PHASESEL0=Const(0), i_PHASESEL1=Const(0), i_PHASEDIR=Const(0),
                i_PHASESTEP=Const(0), i_PHASELOADREG=Const(0), i_PLLWAKESYNC=Const(0),
                i_ENCLKOP=Const(0), o_CLKOP=clk_out, o_LOCK=locked,
                a_FREQUENCY_PIN_CLKI=str(in_mhz), a_FREQUENCY_PIN_CLKOP=str(self.clock_mhz),
                a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
                a_MFG_GMCREF_SEL="2")
            m.d.comb += ClockSignal("sync").eq(clk_out)
        else:  # board_clock_mhz allows no other clock
            m.d.comb += [ClockSignal("sync").eq(clk_res.i), locked.eq(1)]
        # power-on reset: held until the PLL locks and for 2^8 cycles after
        m.domains.por = ClockDomain("por", reset_less=True)
        m.d.comb += ClockSignal("por").eq(ClockSignal("sync"))
        por = Signal(8)
        with m.If(~locked):
            m.d.por += por.eq(0)
        with m.Elif(~por.all()):
            m.d.por += por.eq(por + 1)
        # the reset leaves a flip-flop of its own (not the counter's AND): it fans out to
        # the whole SoC, and its logic was the head of failing paths into the core
        rst = Signal(init=1)
        m.d.por += rst.eq(~por.all())
        m.d.comb += sync.rst.eq(rst)

        soc = SocTop(self.cfg, mem_bytes=board.mem_bytes,
                     clk_hz=int(self.clock_mhz * 1e6), baud=BAUD,
                     spram=board.family == "ice40", sdram=self.sdram,
                     sdram_board_delay=1)
        m.submodules.soc = soc
        if self.sdram:
            pins = platform.request("sdram", 0, xdr={"clk": 2})
            chip = soc.sdram
            m.d.comb += [pins.clk.o_clk.eq(ClockSignal("sync")), pins.clk.o0.eq(0),
                         pins.clk.o1.eq(1), pins.clk_en.o.eq(chip.clk_en),
                         pins.cs.o.eq(chip.cs), pins.ras.o.eq(chip.ras),
                         pins.cas.o.eq(chip.cas), pins.we.o.eq(chip.we),
                         pins.ba.o.eq(chip.ba), pins.a.o.eq(chip.a), pins.dqm.o.eq(chip.dqm),
                         pins.dq.o.eq(chip.dq_o), pins.dq.oe.eq(chip.dq_oe),
                         chip.dq_i.eq(pins.dq.i)]
        uart = platform.request("uart", 0)
        m.d.comb += [soc.uart_rx.eq(uart.rx.i), uart.tx.o.eq(soc.uart_tx)]
        for i in range(len(LEDS)):
            try:
                led = platform.request("led", i)
            except ResourceError:
                break
            m.d.comb += led.o.eq(soc.leds[i])
        return m
