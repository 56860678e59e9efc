"""Views of a FIFO's entries for formal specs: where each entry is in an Amaranth
``SyncFIFO``/``SyncFIFOBuffered``, a :class:`~tensorfab.hw.register_slice.BufferedFifo`, a
:class:`~tensorfab.hw.register_slice.RegisterSlice`
or an :class:`~tensorfab.hw.register_slice.AlternatingSlice`,
and the invariants that keep its pointers and level consistent, for helper invariants
that make a FIFO's contract (or a property of a block holding one) inductive."""

from __future__ import annotations

from dataclasses import dataclass, field

from amaranth.hdl import Fragment, Module, Mux, Value
from amaranth.lib.fifo import SyncFIFOBuffered

from formal.symbiyosys import driven_signals, elaborate_here
from tensorfab.hw.register_slice import AlternatingSlice, BufferedFifo, RegisterSlice

__all__ = ["FifoView", "RingView", "alternating_slice_view", "buffered_fifo_view",
           "ready_flags", "register_slice_view", "slice_view"]


@dataclass
class FifoView:
    """A FIFO elaborated with its entries in view, for the helper invariants that
    make the contract inductive.

    Attributes
    ----------
    fragment : Fragment
        The FIFO, elaborated (the spec's submodule).
    entries : list of Value
        ``entries[i]``: the ``i``-th entry from the head (meaningful below the level).
    invariants : list of Value
        The FIFO's own consistency: pointers in range, its level counts the same
        entries as its pointers (and output register).
    statements : list of Assign
        Combinational statements the spec adds (the addresses of the read ports
        through which it sees the memory).
    level : Value
        The FIFO's own count of its entries.
    """

    fragment: Fragment
    entries: list[Value]
    invariants: list[Value] = field(default_factory=list)
    statements: list = field(default_factory=list)
    level: Value = field(default_factory=lambda: Value.cast(0))


def _wrap(value: Value, modulo: int) -> Value:
    """``value % modulo`` for a ``value`` below ``2 * modulo``."""
    return Mux(value >= modulo, value - modulo, value)


class RingView:
    """The ring memory (``storage``) of an Amaranth FIFO module, through read ports
    the spec adds before the module is elaborated."""

    def __init__(self, module: Module, depth: int) -> None:
        self.depth = depth
        self.peeks = [module.submodules.storage.read_port(domain="comb") for _ in range(depth)]

    def entries(self, fragment: Fragment, level: Value) -> tuple[list[Value], list[Value], list]:
        """Once elaborated: the entries from ``consume`` on, the invariants
        (``produce`` and ``consume`` in range, ``level`` entries from ``consume`` to
        ``produce``) and the read ports' addresses."""
        reg = driven_signals(fragment)
        produce, consume, depth = reg["produce"], reg["consume"], self.depth
        statements = [peek.addr.eq(_wrap(consume + n, depth))
                      for n, peek in enumerate(self.peeks)]
        invariants = [produce < depth, consume < depth, level <= depth,
                      _wrap(consume + level, depth) == produce]
        return [peek.data for peek in self.peeks], invariants, statements


def buffered_fifo_view(fifo: BufferedFifo) -> FifoView:
    """:class:`~tensorfab.hw.register_slice.BufferedFifo`: the head in the read port's
    output register while ``r_rdy``, the others in a ring of ``depth - 1``; its ready
    flags (registers) say the ring is not full and not empty."""
    module = elaborate_here(fifo)
    inner = fifo.depth - 1
    ring = RingView(module, inner)
    fragment = Fragment.get(module, None)
    reg = driven_signals(fragment)
    inner_level = reg["inner_level"]
    stored, invariants, statements = ring.entries(fragment, inner_level)
    invariants += [fifo.w_rdy == (inner_level != inner),
                   reg["nonempty"] == (inner_level != 0)]
    entries = [Mux(fifo.r_rdy, fifo.r_data if i == 0 else stored[i - 1], stored[min(i, inner - 1)])
               for i in range(fifo.depth)]
    invariants.append(fifo.level == inner_level + fifo.r_rdy)
    return FifoView(fragment, entries, invariants, statements, fifo.level)


def ready_flags(dut: RegisterSlice | AlternatingSlice) -> list[Value]:
    """A RegisterSlice's (or AlternatingSlice's) ready flags (registers of their own)
    say not empty and not full: the invariants that tie them to its level (at most the depth)."""
    return [dut.level <= dut.depth, dut.r_rdy == (dut.level != 0),
            dut.w_rdy == (dut.level != dut.depth)]


def register_slice_view(dut: RegisterSlice) -> FifoView:
    """RegisterSlice: the head register while the level is not 0, then the tail (a
    register for a depth of 2, a ``SyncFIFO`` ring of ``depth - 1`` beyond); its ready
    flags (registers) say not empty and not full."""
    module = elaborate_here(dut)
    tail = module.submodules.tail
    invariants = [tail.level == Mux(dut.level == 0, 0, dut.level - 1), *ready_flags(dut)]
    statements: list = []
    if isinstance(tail, SyncFIFOBuffered):  # depth 1: a register
        stored = [tail.r_data]
    else:
        tail_module = elaborate_here(tail)
        ring = RingView(tail_module, tail.depth)
        tail_fragment = Fragment.get(tail_module, None)
        tail.elaborate = lambda platform: tail_fragment  # elaborated once, in view
        stored, tail_invariants, statements = ring.entries(tail_fragment, tail.level)
        invariants += tail_invariants
    fragment = Fragment.get(module, None)
    head = driven_signals(fragment)["head"]
    return FifoView(fragment, [head, *stored], invariants, statements, dut.level)


def alternating_slice_view(dut: AlternatingSlice) -> FifoView:
    """AlternatingSlice: the entry at the read pointer, then the other one; the write
    pointer is the read pointer moved on by the level; its ready flags (registers) say
    not empty and not full."""
    module = elaborate_here(dut)
    fragment = Fragment.get(module, None)
    reg = driven_signals(fragment)
    entries, r_ptr, w_ptr = (reg["entry0"], reg["entry1"]), reg["r_ptr"], reg["w_ptr"]
    invariants = [w_ptr == (r_ptr ^ (dut.level == 1)), *ready_flags(dut)]
    return FifoView(fragment, [Mux(r_ptr, entries[1], entries[0]),
                               Mux(r_ptr, entries[0], entries[1])],
                    invariants, [], dut.level)


def slice_view(dut: RegisterSlice | AlternatingSlice) -> FifoView:
    """The view of either kind of slice."""
    if isinstance(dut, AlternatingSlice):
        return alternating_slice_view(dut)
    return register_slice_view(dut)
