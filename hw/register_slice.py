"""A two-entry FIFO whose head is a register: a command slice with no RAM read on its
output."""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """Two entries, first in first out, with the ports and timing of Amaranth's
    ``SyncFIFO(depth=2)``: an entry written in one cycle can be read in the next, a full
    slice takes no write (not even while read), an empty one has nothing to read.

    ``SyncFIFO`` keeps its entries in a small memory, which an FPGA build maps to LUT
    RAM: its read data comes out of the RAM's address decoder. Here ``r_data`` is a
    flip-flop (the second entry waits in another), so whatever follows a read starts
    at a register.

    Parameters
    ----------
    width : int
        Bits per entry.
    """

    def __init__(self, width: int) -> None:
        self.width = width
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        head = Signal(self.width)
        tail = Signal(self.width)
        count = Signal(range(3))
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        m.d.comb += [self.r_data.eq(head), self.r_rdy.eq(count != 0),
                     self.w_rdy.eq(count != 2)]
        with m.If(pop):
            m.d.sync += head.eq(tail)
        with m.If(push):
            # the new entry goes to the head if the head is free after this cycle
            with m.If((count == 0) | ((count == 1) & pop)):
                m.d.sync += head.eq(self.w_data)
            with m.Else():
                m.d.sync += tail.eq(self.w_data)
        m.d.sync += count.eq(count + push - pop)
        return m
