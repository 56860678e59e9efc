"""The SoC top: core, on-chip memory, UART host bridge, status LEDs."""

from __future__ import annotations

from amaranth.hdl import Module, ResetInserter, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect

from tensorfab.hw.core import Core
from tensorfab.hw.register_slice import AlternatingSlice, RegisterSlice
from tensorfab.isa import HwConfig
from tensorfab.isa import hostlink as hl

from .bridge import HostBridge, link_info
from .memory import OnChipMemory
from .sdram import SdramController, SdramPinsSignature
from .uart import UartRx, UartTx

__all__ = ["LEDS", "SocTop"]

#: Status LEDs of :attr:`SocTop.leds`, LSB first.
LEDS: tuple[str, ...] = ("heartbeat", "busy", "done", "error", "rx", "tx")


class SocTop(wiring.Component):
    """Core + on-chip memory + UART host bridge, for a board or a simulated board.

    The memory port belongs to the core while it runs and to the host bridge
    otherwise. The RESET command of the host link resets the core and the memory
    controller (not the bridge), which also recovers a memory transfer an error
    cut short.

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.
    mem_bytes : int
        On-chip memory standing in for DRAM (a power of two).
    clk_hz : int
        Clock frequency (for the UART divisor and INFO).
    baud : int
        UART bit rate; ``clk_hz // baud`` must be at least 4.
    spram : bool
        Put the on-chip memory in the iCE40UP5K's SPRAM (see :class:`OnChipMemory`).
    sdram : bool
        Device memory in an SDR SDRAM chip (:class:`~tensorfab.hw.soc.sdram.
        SdramController`, the ULX3S's 32 MB) instead of on-chip memory; ``mem_bytes``
        is then the chip's size within the core's address range.
    sdram_board_delay : int
        The controller's ``board_delay`` (1 on the ULX3S, 0 in simulation).

    Attributes
    ----------
    uart_rx : In(1)
        Serial input (idle high).
    uart_tx : Out(1)
        Serial output.
    leds : Out(len(LEDS))
        Status, named by :data:`LEDS`.
    sdram : Out(SdramPinsSignature())
        The SDRAM chip's pins (with ``sdram`` only).
    """

    def __init__(self, cfg: HwConfig, *, mem_bytes: int, clk_hz: int, baud: int,
                 spram: bool = False, sdram: bool = False,
                 sdram_board_delay: int = 0) -> None:
        self.cfg = cfg
        self.spram = spram
        self.controller = SdramController(cfg, clk_hz, board_delay=sdram_board_delay) \
            if sdram else None
        if self.controller is not None:
            mem_bytes = self.controller.size_bytes
        self.mem_bytes = mem_bytes
        self.clk_hz = int(clk_hz)
        self.baud = int(baud)
        self.divisor = self.clk_hz // self.baud
        self.info = link_info(cfg, mem_bytes, self.clk_hz, self.baud)
        members = {"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1),
                   "leds": Out(len(LEDS))}
        if sdram:
            members["sdram"] = Out(SdramPinsSignature())
        super().__init__(members)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.uart_rx = rx = UartRx(self.divisor)
        m.submodules.uart_tx = tx = UartTx(self.divisor)
        bridge = HostBridge(self.cfg, self.info,
                            rx_timeout=self.divisor * 10 * hl.RX_TIMEOUT_BYTES)
        m.submodules.bridge = bridge
        core_reset = Signal()
        m.submodules.core = core = ResetInserter(core_reset)(Core(self.cfg))
        if self.controller is not None:
            # a RESET aborts the controller's transfer; the chip's side (refresh,
            # open rows, timers) runs on
            m.submodules.memory = memory = self.controller
            connect(m, wiring.flipped(self.sdram), memory.sdram)
            m.d.comb += memory.abort.eq(core_reset)
        else:
            m.submodules.memory = memory = ResetInserter(core_reset)(
                OnChipMemory(self.cfg, self.mem_bytes, spram=self.spram))
        m.d.comb += [rx.rx.eq(self.uart_rx), self.uart_tx.eq(tx.tx),
                     core_reset.eq(bridge.core_reset), bridge.core_busy.eq(core.running)]
        connect(m, rx.data, bridge.rx)
        connect(m, bridge.tx, tx.data)
        connect(m, bridge.csr, core.csr)

        # the memory port: the core's while it runs, the bridge's otherwise
        port = memory.port
        wdata = self._through_slice(m, port.wdata, core_reset, "wdata_slice", into=True)
        for name in ("cmd", "wdata"):
            ours, theirs = getattr(core.mem, name), getattr(bridge.mem, name)
            dst = wdata if name == "wdata" else port.cmd
            with m.If(core.running):
                m.d.comb += [dst.valid.eq(ours.valid), dst.payload.eq(ours.payload),
                             ours.ready.eq(dst.ready)]
            with m.Else():
                m.d.comb += [dst.valid.eq(theirs.valid), dst.payload.eq(theirs.payload),
                             theirs.ready.eq(dst.ready)]
        rdata = self._through_slice(m, port.rdata, core_reset, "rdata_slice", into=False)
        m.d.comb += [core.mem.rdata.payload.eq(rdata.payload),
                     bridge.mem.rdata.payload.eq(rdata.payload)]
        with m.If(core.running):
            m.d.comb += [core.mem.rdata.valid.eq(rdata.valid),
                         rdata.ready.eq(core.mem.rdata.ready)]
        with m.Else():
            m.d.comb += [bridge.mem.rdata.valid.eq(rdata.valid),
                         rdata.ready.eq(bridge.mem.rdata.ready)]

        # LEDs: a 1 Hz-ish heartbeat, core status, UART activity
        beat = Signal(max(1, (self.clk_hz // 2).bit_length()))
        m.d.sync += beat.eq(beat + 1)
        status = {"heartbeat": beat[-1], "busy": core.running, "done": core.done,
                  "error": Signal(), "rx": rx.busy, "tx": tx.busy}
        m.d.comb += status["error"].eq(core.error)
        m.d.comb += [self.leds[i].eq(status[n]) for i, n in enumerate(LEDS)]
        return m

    def _through_slice(self, m: Module, stream_: stream.Interface, reset: Signal,
                       name: str, *, into: bool) -> stream.Interface:
        """A data stream of the memory port as the core and the bridge see it: the port's
        own for on-chip memory; through a two-entry queue of registers (emptied by the
        core's reset, as the controller's transfer is aborted) for the SDRAM controller,
        so that neither side's ``ready`` reaches the other's logic in one cycle: the
        controller's read queue and write path against the load and store engines' (on
        the 85F paths of 13.9 and 13.0 ns). One cycle more from a read command to its
        data and from a write beat to the chip; beats still flow one a cycle. ``into``:
        the stream goes into the port (write data), else it comes out of it (read data).

        The write data pass a :class:`~tensorfab.hw.register_slice.RegisterSlice` (the
        controller sees its head, a register). The read data pass an
        :class:`~tensorfab.hw.register_slice.AlternatingSlice`, whose entries' enables
        do not depend on the reader's ``ready``: that ``ready`` comes from the core's
        arbiter and load engine across the die, and a head reloaded on each read would
        take it to the enable of every bit (the 85F's critical path at 100 MHz); the
        core sees a multiplexer after two registers instead."""
        if self.controller is None:
            return stream_
        width = len(stream_.payload.as_value())
        slice_ = ResetInserter(reset)(RegisterSlice(width, 2) if into
                                      else AlternatingSlice(width))
        m.submodules[name] = slice_
        outer = stream.Signature(stream_.payload.shape()).create()
        src, dst = (outer, stream_) if into else (stream_, outer)
        m.d.comb += [slice_.w_data.eq(src.payload.as_value()), slice_.w_en.eq(src.valid),
                     src.ready.eq(slice_.w_rdy),
                     dst.payload.eq(slice_.r_data), dst.valid.eq(slice_.r_rdy),
                     slice_.r_en.eq(dst.ready)]
        return outer
