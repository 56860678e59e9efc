"""On-chip memory standing in for DRAM, serving the core's memory port."""

from __future__ import annotations

from typing import NamedTuple

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from tensorfab.hw.mem_port import MemPortSignature
from tensorfab.isa import HwConfig
from tensorfab.isa.config import log2

from ..register_slice import RegisterSlice
from .spram import Ice40Spram

__all__ = ["OnChipMemory"]

#: Read beats the output queue holds (three keep one beat per cycle: see
#: :meth:`OnChipMemory.elaborate`).
_OUT_DEPTH = 3


class _Port(NamedTuple):
    """The signals of a memory port this module drives (address, data, enable)."""

    addr: Signal
    data: Signal
    en: Signal


class OnChipMemory(wiring.Component):
    """A block-RAM memory behind the memory-port protocol (docs/architecture.md).

    One beat per cycle in both directions: a write command takes its ``len + 1``
    beats from ``wdata``; a read command streams ``len + 1`` beats out of
    ``rdata``, the first three cycles after the command is taken (its address, the
    RAM's read, then a small output queue, so that neither the RAM's output nor the
    reader's ready shares a clock period with the other side's logic), and full
    throughput under back-pressure.
    Commands are served in order. Addresses wrap at the memory's size (the core
    checks DRAM_SIZE, the host bridge checks its requests).

    Parameters
    ----------
    cfg : HwConfig
        Gives the bus width.
    size_bytes : int
        Memory size, a power of two and at least one beat.
    spram : bool
        Use the iCE40UP5K's single-port RAM (:class:`~tensorfab.hw.soc.spram.Ice40Spram`,
        up to 32 KiB per 16 bits of bus) instead of block RAM. Its data output is
        undefined after a write; a read beat is in the output queue by then.

    Attributes
    ----------
    port : In(MemPortSignature(cfg))
        The memory side of a memory port.
    """

    def __init__(self, cfg: HwConfig, size_bytes: int, *, spram: bool = False) -> None:
        if size_bytes < cfg.mem_bus_bytes or size_bytes & (size_bytes - 1):
            raise ValueError(f"memory size {size_bytes}: must be a power of two of at least "
                             f"one {cfg.mem_bus_bytes}-byte beat")
        self.cfg = cfg
        self.size_bytes = size_bytes
        self.depth = size_bytes // cfg.mem_bus_bytes
        self.spram = spram
        if spram:
            Ice40Spram.check_shape(cfg.mem_bus_width, self.depth)
        super().__init__({"port": In(MemPortSignature(cfg))})

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        if self.spram:
            m.submodules.ram = spram = Ice40Spram(cfg.mem_bus_width, self.depth)
            wp = _Port(Signal(range(self.depth)), Signal(cfg.mem_bus_width), Signal())
            rp = _Port(Signal(range(self.depth)), spram.rdata, Signal())
            m.d.comb += [spram.addr.eq(wp.addr), spram.wdata.eq(wp.data),
                         spram.we.eq(wp.en), spram.en.eq(wp.en | rp.en)]
        else:
            m.submodules.ram = ram = Memory(shape=unsigned(cfg.mem_bus_width),
                                            depth=self.depth, init=[])
            wp = ram.write_port()
            rp = ram.read_port()
        shift = log2(cfg.mem_bus_bytes)
        addr = Signal(range(self.depth))
        left = Signal(8)
        port = self.port
        # Read beats go through a small queue, so the reader's ready reaches nothing
        # but the queue (not the RAM's enable and address), and the reader sees
        # registers, not the RAM's output. A beat is issued only when the queue has
        # room for it and the beat still in the RAM's read; a queue of three keeps
        # one beat per cycle. The queue's head is a register (a LUT RAM's read began
        # FPGA critical paths into the readers).
        m.submodules.out = out = RegisterSlice(cfg.mem_bus_width, _OUT_DEPTH)
        in_flight = Signal()
        issue = Signal()
        room = out.level + in_flight < _OUT_DEPTH
        m.d.sync += in_flight.eq(issue)
        m.d.comb += [wp.addr.eq(addr), wp.data.eq(port.wdata.payload.data),
                     rp.addr.eq(addr), rp.en.eq(issue),
                     out.w_data.eq(rp.data), out.w_en.eq(in_flight),
                     port.rdata.valid.eq(out.r_rdy), port.rdata.payload.data.eq(out.r_data),
                     out.r_en.eq(port.rdata.ready)]
        with m.FSM():
            with m.State("IDLE"):
                # a read's beats leave the RAM for the queue the cycle after their
                # read, so a write right after a read clobbers nothing (SPRAM too)
                m.d.comb += port.cmd.ready.eq(1)
                with m.If(port.cmd.valid):
                    m.d.sync += [addr.eq(port.cmd.payload.addr >> shift),
                                 left.eq(port.cmd.payload.len)]
                    with m.If(port.cmd.payload.write):
                        m.next = "WRITE"
                    with m.Else():
                        m.next = "READ"
            with m.State("WRITE"):
                m.d.comb += [port.wdata.ready.eq(1), wp.en.eq(port.wdata.valid)]
                with m.If(port.wdata.valid):
                    m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
                    with m.If(left == 0):
                        m.next = "IDLE"
            with m.State("READ"):
                m.d.comb += issue.eq(room)
                with m.If(room):
                    m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
                    with m.If(left == 0):
                        m.next = "IDLE"
        return m
