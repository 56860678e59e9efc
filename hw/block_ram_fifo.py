"""A FIFO in a memory with a synchronous read: one that FPGA block RAM can hold."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["BlockRamFifo", "holds_next", "level_flags"]


def level_flags(m: Module, level: Signal, depth: int, push: Value, pop: Value
                ) -> tuple[Signal, Signal]:
    """A queue's ``level`` of ``depth`` entries after this cycle's ``push`` and ``pop``,
    and whether it then holds an entry and has room, as registers set from the level
    and the push and pop (the level's comparisons only are chosen between by them), so
    that what follows a queue's readiness starts at flip-flops.

    ``push`` and ``pop`` are the write and the read taken (a push only with room, a pop
    only with an entry).

    Returns
    -------
    (Signal, Signal)
        The "holds an entry" and "has room" registers (reset: empty, with room).
    """
    nonempty = Signal()
    not_full = Signal(init=1)
    m.d.sync += [level.eq(level + push - pop),
                 nonempty.eq(holds_next(level, push, pop)),
                 not_full.eq(pop | (level < depth - 1) | ((level == depth - 1) & ~push))]
    return nonempty, not_full


def holds_next(level: Value, push: Value, pop: Value) -> Value:
    """Whether a queue at ``level`` holds an entry after this cycle's ``push`` and
    ``pop`` (taken as in :func:`level_flags`, whose "holds an entry" register it sets)."""
    return push | (level > 1) | ((level == 1) & ~pop)


class BlockRamFifo(wiring.Component):
    """``depth`` entries, first in first out, read into a register.

    The write side is Amaranth's ``SyncFIFO``'s: an entry written in one cycle can be
    read from the next, and a full queue takes no write (not even while read). A read
    (``r_en`` while ``r_rdy``) takes the head out of the queue into ``r_data`` at the
    clock edge: ``r_data`` holds the last entry read, from the cycle after its read
    until the next read (a reset leaves it as it is). Synthesis merges that register
    into the memory's read port (a synchronous read port enabled by the read), so the
    entries can sit in block RAM, whose reads are synchronous (an iCE40, which has no
    LUT RAM, keeps a small FIFO with an asynchronous read in flip-flops, one logic
    cell per bit).

    A ``SyncFIFO`` followed by a register loaded on each read behaves the same.

    Parameters
    ----------
    width : int
        Bits per entry.
    depth : int
        Entries (at least 2).
    ram_style : str or None
        Yosys' ``ram_style`` attribute of the memory (``"block"`` asks for block RAM
        however small the memory is); None leaves the choice to the synthesis tool.

    Attributes
    ----------
    w_data : In(width)
        The entry to write.
    w_en : In(1)
        Write ``w_data`` (taken when ``w_rdy``).
    w_rdy : Out(1)
        Not full (a register, :func:`level_flags`).
    r_en : In(1)
        Read the head into ``r_data`` (taken when ``r_rdy``).
    r_rdy : Out(1)
        Not empty (a register, :func:`level_flags`).
    r_data : Out(width)
        The entry of the last read.
    level : Out(range(depth + 1))
        Entries in the queue (not counting ``r_data``).
    """

    def __init__(self, width: int, depth: int, ram_style: str | None = None) -> None:
        if depth < 2:
            raise ValueError(f"BlockRamFifo: depth = {depth}; at least 2")
        self.width = width
        self.depth = depth
        self.ram_style = ram_style
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_en": In(1), "r_rdy": Out(1), "r_data": Out(width),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # no_rw_check: Yosys may leave a read of the entry written in the same cycle
        # undefined (it never happens, see below), instead of emulating the read-first
        # behaviour of the read below with a register per bit and a bypass
        attrs = {"no_rw_check": 1}
        if self.ram_style is not None:
            attrs["ram_style"] = self.ram_style
        m.submodules.storage = storage = Memory(shape=unsigned(self.width), depth=self.depth,
                                                init=[], attrs=attrs)
        wp = storage.write_port()
        # an asynchronous read into a register loaded by each read: Yosys merges the
        # two into the block RAM's synchronous read port (with no_rw_check: a
        # synchronous port of Amaranth's own is read-first, which it would emulate)
        rp = storage.read_port(domain="comb")
        produce = Signal(range(self.depth))
        consume = Signal(range(self.depth))
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy

        def after(ptr: Signal) -> Mux:
            return Mux(ptr == self.depth - 1, 0, ptr + 1)
        # a read never meets a write of the same entry: an entry is readable the
        # cycle after its write, and a full queue (the one state where the write
        # pointer is the read pointer with an entry there) takes no write
        not_empty, not_full = level_flags(m, self.level, self.depth, push, pop)
        m.d.comb += [self.w_rdy.eq(not_full), self.r_rdy.eq(not_empty),
                     wp.addr.eq(produce), wp.data.eq(self.w_data), wp.en.eq(push),
                     rp.addr.eq(consume)]
        # not reset: a reset of the register would keep it out of the block RAM
        head = Signal(self.width, reset_less=True)
        m.d.comb += self.r_data.eq(head)
        with m.If(pop):
            m.d.sync += head.eq(rp.data)
        with m.If(push):
            m.d.sync += produce.eq(after(produce))
        with m.If(pop):
            m.d.sync += consume.eq(after(consume))
        return m
