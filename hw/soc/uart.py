"""8N1 UART receiver and transmitter with byte streams."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UartRx", "UartTx"]


def _check_divisor(divisor: int) -> None:
    if not isinstance(divisor, int) or divisor < 4:
        raise ValueError(f"UART divisor {divisor!r}: needs at least 4 clock cycles per bit")


class UartRx(wiring.Component):
    """Receive 8N1 bytes: start bit, eight data bits LSB first, one stop bit.

    The line is synchronised by two flip-flops, each bit sampled in its middle.
    A byte is offered on :attr:`data` until taken; a byte that arrives while the
    previous one is still offered replaces it (overrun). A frame whose stop bit is
    low is dropped (framing error) and the receiver waits for an idle line.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (``clk_hz // baud``), at least 4.

    Attributes
    ----------
    rx : In(1)
        The serial line (idle high).
    data : Out(stream.Signature(8))
        Received bytes.
    busy : Out(1)
        A frame is being received.
    """

    def __init__(self, divisor: int) -> None:
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "data": Out(stream.Signature(8)),
                          "busy": Out(1)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        line = Signal(init=1)
        m.submodules.sync_rx = FFSynchronizer(self.rx, line, init=1)
        timer = Signal(range(self.divisor * 3 // 2 + 1))
        bits = Signal(4)
        shreg = Signal(8)
        with m.If(self.data.ready):
            m.d.sync += self.data.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"), m.If(~line):  # start bit: first data bit 1.5 bits later
                m.d.sync += [timer.eq(self.divisor * 3 // 2 - 1), bits.eq(0)]
                m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += self.busy.eq(1)
                with m.If(timer == 0):
                    m.d.sync += [timer.eq(self.divisor - 1), shreg.eq(Cat(shreg[1:], line)),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                m.d.comb += self.busy.eq(1)
                with m.If(timer == 0):
                    with m.If(line):
                        m.d.sync += [self.data.payload.eq(shreg), self.data.valid.eq(1)]
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "BREAK"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("BREAK"):  # framing error: wait for the line to go idle
                m.d.comb += self.busy.eq(1)
                with m.If(line):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """Send 8N1 bytes taken from a stream.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, at least 4.

    Attributes
    ----------
    data : In(stream.Signature(8))
        Bytes to send; one is taken when the line is idle.
    tx : Out(1)
        The serial line (idle high).
    busy : Out(1)
        A frame is on the line.
    """

    def __init__(self, divisor: int) -> None:
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1),
                          "busy": Out(1)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        timer = Signal(range(self.divisor))
        bits = Signal(range(11))
        shreg = Signal(10, init=0x3FF)
        m.d.comb += self.tx.eq(shreg[0])
        with m.If(bits == 0):
            m.d.comb += self.data.ready.eq(1)
            with m.If(self.data.valid):
                # start bit, data LSB first, stop bit
                m.d.sync += [shreg.eq((self.data.payload << 1) | (1 << 9)), bits.eq(10),
                             timer.eq(self.divisor - 1)]
        with m.Else():
            m.d.comb += self.busy.eq(1)
            with m.If(timer == 0):
                m.d.sync += [shreg.eq((shreg >> 1) | (1 << 9)), bits.eq(bits - 1),
                             timer.eq(self.divisor - 1)]
            with m.Else():
                m.d.sync += timer.eq(timer - 1)
        return m
