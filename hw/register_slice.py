"""A FIFO whose head is a register: a queue with no RAM read on its output."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .block_ram_fifo import BlockRamFifo, holds_next, level_flags

__all__ = ["AlternatingSlice", "BufferedFifo", "RegisterSlice"]


class RegisterSlice(wiring.Component):
    """``depth`` entries, first in first out, with the ports and timing of Amaranth's
    ``SyncFIFO(depth=depth)``: an entry written in one cycle can be read in the next, a
    full queue takes no write (not even while read), an empty one has nothing to read.

    ``SyncFIFO`` keeps its entries in a small memory, which an FPGA build maps to LUT
    RAM: its read data comes out of the RAM's address decoder. Here ``r_data`` is a
    flip-flop, the head, refilled from the other ``depth - 1`` entries (a register
    for a depth of 2, a ``SyncFIFO`` beyond; without a reset: ``r_data`` is defined
    only while ``r_rdy``), so whatever follows a read starts at a register;
    ``level`` is a register too, and so are ``r_rdy`` and ``w_rdy`` (set from the
    level and this cycle's push and pop, not compared with the level after it: what a
    consumer does with a beat and whether it may write then start at flip-flops).

    With ``block_ram`` the other entries sit in a :class:`~.block_ram_fifo.BlockRamFifo`
    (block RAM, for an iCE40, which has no LUT RAM), whose read register is the head
    when the head came from there, and ``r_data`` chooses between it and a register
    that takes an entry written straight to the head: the same ports and timing, but
    ``r_data`` is a multiplexer after two registers.

    Parameters
    ----------
    width : int
        Bits per entry.
    depth : int
        Entries (at least 2; at least 3 with ``block_ram``).
    block_ram : bool
        The entries behind the head in block RAM.

    Attributes
    ----------
    w_data, w_en, w_rdy, r_data, r_en, r_rdy, level
        ``SyncFIFO``'s ports.
    r_rdy_next : Out(1)
        ``r_rdy`` in the next cycle.
    """

    def __init__(self, width: int, depth: int = 2, block_ram: bool = False) -> None:
        if depth < (3 if block_ram else 2):
            raise ValueError(f"RegisterSlice: depth = {depth}; at least "
                             f"{3 if block_ram else 2}" + (" in block RAM" if block_ram else ""))
        self.width = width
        self.depth = depth
        self.block_ram = block_ram
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1), "r_rdy_next": Out(1),
            "level": Out(range(depth + 1)),
        })

    def _ready_flags(self, m: Module, push: Value, pop: Value) -> tuple[Value, Value]:
        """``r_rdy``, ``w_rdy`` and ``level`` (:func:`~.block_ram_fifo.level_flags`).

        Returns whether the head is free after this cycle (the new entry goes there)
        and whether a read refills the head from the tail (the level is over 1), from
        ``r_rdy`` and a register that says the level is 1: a read then reaches the
        head's enable through a gate or two, not the level's comparisons."""
        nonempty, not_full = level_flags(m, self.level, self.depth, push, pop)
        one = Signal()  # level == 1
        level = self.level
        m.d.sync += one.eq(Mux(push, (level == 0) | ((level == 1) & pop),
                               (level == 2) & pop | (level == 1) & ~pop))
        m.d.comb += [self.r_rdy.eq(nonempty), self.w_rdy.eq(not_full),
                     self.r_rdy_next.eq(holds_next(self.level, push, pop))]
        return ~nonempty | (one & pop), ~one

    def elaborate(self, platform: object) -> Module:
        m = Module()
        if self.block_ram:
            return self._elaborate_block_ram(m)
        # (a SyncFIFO of depth 1 has zero-bit pointers, which Verilator misreads; the
        # buffered one of depth 1 is a plain register)
        m.submodules.tail = tail = (SyncFIFOBuffered(width=self.width, depth=1)
                                    if self.depth == 2
                                    else SyncFIFO(width=self.width, depth=self.depth - 1))
        # (no reset: ``r_rdy`` says whether it holds an entry, and a reset, or an
        # EntryQueue's flush through a ResetInserter, would reach every bit)
        head = Signal(self.width, reset_less=True)
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        m.d.comb += self.r_data.eq(head)
        to_head, refill = self._ready_flags(m, push, pop)
        m.d.comb += [tail.w_data.eq(self.w_data), tail.w_en.eq(push & ~to_head),
                     tail.r_en.eq(pop)]
        with m.If(pop & refill):
            m.d.sync += head.eq(tail.r_data)
        with m.If(push & to_head):
            m.d.sync += head.eq(self.w_data)
        return m

    def _elaborate_block_ram(self, m: Module) -> Module:
        """The entries behind the head in a BlockRamFifo: a pop that leaves the head
        to the tail reads the tail into its register; a push to the head goes to a
        register of its own; ``from_tail`` says which one the head is."""
        m.submodules.tail = tail = BlockRamFifo(self.width, self.depth - 1, ram_style="block")
        pushed = Signal(self.width, reset_less=True)
        from_tail = Signal()
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        m.d.comb += self.r_data.eq(Mux(from_tail, tail.r_data, pushed))
        # the new entry goes to the head if the head is free after this cycle (then
        # the tail is empty: it never refills the head in the same cycle)
        to_head, refill = self._ready_flags(m, push, pop)
        m.d.comb += [tail.w_data.eq(self.w_data), tail.w_en.eq(push & ~to_head),
                     tail.r_en.eq(pop)]
        with m.If(pop & refill):
            m.d.sync += from_tail.eq(1)
        with m.If(push & to_head):
            m.d.sync += [pushed.eq(self.w_data), from_tail.eq(0)]
        return m


class AlternatingSlice(wiring.Component):
    """Two entries, first in first out, in two registers written in turn and read in
    turn: the ports and timing of Amaranth's ``SyncFIFO(depth=2)``, like a two-entry
    :class:`RegisterSlice`, but no register's enable depends on the read.

    A push writes the entry ``w_ptr`` points at, a pop moves ``r_ptr`` on; ``r_data``
    is the entry at ``r_ptr``, a multiplexer after the two registers. An entry's
    enable is the push and ``w_ptr`` (flip-flops of the write side): the reader's
    ``r_en`` reaches only the pointer, ``level`` and the ready flags, a few flip-flops,
    where a :class:`RegisterSlice`'s head reloads on a pop (``r_en`` fans out to an
    enable of every bit of the entry). ``r_rdy``, ``w_rdy`` and ``level`` are registers
    (:func:`~.block_ram_fifo.level_flags`); the entries have no reset (``r_data`` is
    defined only while ``r_rdy``).

    Parameters
    ----------
    width : int
        Bits per entry.

    Attributes
    ----------
    w_data, w_en, w_rdy, r_data, r_en, r_rdy, level
        ``SyncFIFO``'s ports.
    """

    #: Entries.
    depth = 2

    def __init__(self, width: int) -> None:
        self.width = width
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(3)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        entries = [Signal(self.width, name=f"entry{i}", reset_less=True) for i in range(2)]
        w_ptr = Signal()
        r_ptr = Signal()
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        nonempty, not_full = level_flags(m, self.level, self.depth, push, pop)
        m.d.comb += [self.r_rdy.eq(nonempty), self.w_rdy.eq(not_full),
                     self.r_data.eq(Mux(r_ptr, entries[1], entries[0]))]
        for i, entry in enumerate(entries):
            with m.If(push & (w_ptr == i)):
                m.d.sync += entry.eq(self.w_data)
        m.d.sync += [w_ptr.eq(w_ptr ^ push), r_ptr.eq(r_ptr ^ pop)]
        return m


class BufferedFifo(wiring.Component):
    """Amaranth's ``SyncFIFOBuffered(width, depth)`` cycle for cycle (the same ports,
    levels, latency and read data), with ``w_rdy`` a register.

    Like ``SyncFIFOBuffered`` it keeps ``depth - 1`` entries in a memory read into the
    head register ``r_data`` (a synchronous read: LUT RAM and its output register on
    an ECP5). There ``w_rdy`` is a comparison of the memory's level, whose fan-out
    through a writer's handshake (the fetch unit's dispatch to the command queues)
    reached every register the write enables; here it, and whether the memory holds
    an entry, are registers set from the level and the cycle's push and pop
    (:func:`~.block_ram_fifo.level_flags`), so whatever follows them starts at
    flip-flops.

    Parameters
    ----------
    width : int
        Bits per entry.
    depth : int
        Entries (at least 3: ``SyncFIFOBuffered`` of depth 2 holds a memory of one).

    Attributes
    ----------
    w_data, w_en, w_rdy, r_data, r_en, r_rdy, level
        ``SyncFIFOBuffered``'s ports.
    w_stream, r_stream
        Its streams, as Amaranth's FIFOs give them.
    """

    def __init__(self, width: int, depth: int) -> None:
        if depth < 3:
            raise ValueError(f"BufferedFifo: depth = {depth}; at least 3")
        self.width = width
        self.depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)),
        })

    @property
    def w_stream(self) -> stream.Interface:
        """The write side as a stream (``w_data``, ``w_en``, ``w_rdy``)."""
        w_stream = stream.Signature(self.width).flip().create()
        w_stream.payload, w_stream.valid, w_stream.ready = self.w_data, self.w_en, self.w_rdy
        return w_stream

    @property
    def r_stream(self) -> stream.Interface:
        """The read side as a stream (``r_data``, ``r_rdy``, ``r_en``)."""
        r_stream = stream.Signature(self.width).create()
        r_stream.payload, r_stream.valid, r_stream.ready = self.r_data, self.r_rdy, self.r_en
        return r_stream

    def elaborate(self, platform: object) -> Module:
        m = Module()
        inner = self.depth - 1
        inner_level = Signal(range(inner + 1))
        push = self.w_en & self.w_rdy
        inner_rdy = Signal()  # the memory holds an entry
        pop = inner_rdy & (~self.r_rdy | self.r_en)  # the memory's head to r_data
        holds, not_full = level_flags(m, inner_level, inner, push, pop)
        m.d.comb += [inner_rdy.eq(holds), self.w_rdy.eq(not_full)]

        m.submodules.storage = storage = Memory(shape=self.width, depth=inner, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="sync")
        produce = Signal(range(inner))
        consume = Signal(range(inner))
        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(push),
                     r_port.addr.eq(consume), r_port.en.eq(pop), self.r_data.eq(r_port.data)]
        with m.If(push):
            m.d.sync += produce.eq(Mux(produce == inner - 1, 0, produce + 1))
        with m.If(pop):
            m.d.sync += [consume.eq(Mux(consume == inner - 1, 0, consume + 1)),
                         self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += self.level.eq(inner_level + self.r_rdy)
        return m
