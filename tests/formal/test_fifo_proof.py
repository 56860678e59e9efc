"""RegisterSlice, AlternatingSlice and the core's command FIFOs: the stream protocol on
both sides, the level, and order (the contract form: two arbitrary entries come out in
the order they went in), by k-induction (unbounded).

RegisterSlice at depths 2 (the arbiter's port command slice), 3 (the memory model's
output), 4 (the smallest with a ``SyncFIFO`` tail) and 16 (the arbiter's outstanding
FIFOs); AlternatingSlice (the arbiter's master command slices, the SoC's read data).
The command FIFOs (``BufferedFifo``, Amaranth's ``SyncFIFOBuffered`` with registered
ready flags) at every preset's depth: 4
(tiny), 8 (small), 16 (the larger presets; ``slow``, about a minute). Entries are 4
bits wide: every bit of an entry takes the same path, and the contract needs only two
distinguishable values (the solver's time grows steeply with the width).

The contract alone is not inductive: a state the solver may start the induction from
can hold the tracked entry ``a`` where the spec's count says it is not, or ``b`` twice.
The helper invariants link the spec's counters to the FIFO's internals, read through
a :class:`FifoView` (read ports the spec adds to the FIFO's memory before it is
elaborated, and its pointers by name): the FIFO's level is its pointers' distance (plus
the output register), ``a`` is the entry ``ahead`` places from the head exactly while
it is in the FIFO and no other entry is, ``b`` is at most one entry, behind ``a``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from amaranth.hdl import Assert, Assume, Cover, Module, Signal
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered

import tensorfab.hw.register_slice
from formal.fifo_view import (
    FifoView,
    alternating_slice_view,
    buffered_fifo_view,
    register_slice_view,
)
from formal.symbiyosys import (
    assert_proved,
    assert_refuted,
    free,
    free_const,
    mutant,
)
from tensorfab.hw.register_slice import AlternatingSlice, BufferedFifo, RegisterSlice
from tensorfab.isa import PRESETS

SLICE_DEPTHS = [2, 3, 4, 16]
#: the command FIFOs' depths that the presets use
CMD_QUEUE_DEPTHS = [4, 8, pytest.param(16, marks=pytest.mark.slow)]
WIDTH = 4
#: k of the k-induction
INDUCTION_DEPTH = 3


def command_fifo(width: int, depth: int) -> SyncFIFO | BufferedFifo:
    """The FIFO the core puts between fetch and each engine (hw/core.py)."""
    return BufferedFifo(width, depth) if depth > 2 else SyncFIFO(width=width, depth=depth)


def fifo_spec(dut: SyncFIFO | RegisterSlice | AlternatingSlice, depth: int, width: int, *,
              registered_head: bool, view: FifoView | None = None) -> Module:
    """The FIFO interface (``w_data/w_en/w_rdy``, ``r_data/r_en/r_rdy``, ``level``)
    against its contract.

    Two arbitrary values ``a`` and ``b`` (the solver's choice) are each written once at
    most, ``b`` only after ``a``; then ``b`` is never read before ``a``, and ``a`` comes
    out as the next entry read once every entry written before it has gone. The level
    follows the handshakes; ``w_rdy`` never takes an entry past the depth; an offered
    entry (``r_rdy`` without ``r_en``) stays offered with the same data. With
    ``registered_head`` (RegisterSlice, AlternatingSlice) ``r_rdy`` and ``w_rdy`` are
    exactly not empty and not full.

    With a ``view`` of the FIFO's entries the spec adds the helper invariants that
    make the contract inductive (so that k-induction starts only from states a
    trace can reach): the FIFO's own consistency, ``a`` is the entry ``ahead``
    places from the head exactly while it is in the FIFO, no other entry is ``a``,
    and ``b`` only behind it.
    """
    m = Module()
    m.submodules.dut = dut if view is None else view.fragment
    w_data = free(width)
    m.d.comb += [dut.w_data.eq(w_data), dut.w_en.eq(free(1)), dut.r_en.eq(free(1))]
    push = dut.w_en & dut.w_rdy
    pop = dut.r_en & dut.r_rdy
    level = Signal(range(depth + 2))
    m.d.sync += level.eq(level + push - pop)

    a, b = free_const(width), free_const(width)
    m.d.comb += Assume(a != b)
    # where a and b are: 0 not written yet, 1 in the FIFO, 2 read
    a_at, b_at = Signal(2), Signal(2)
    # entries ahead of a (written before it, not read yet)
    ahead = Signal(range(depth + 2))
    with m.If(push & (w_data == a)):
        m.d.sync += a_at.eq(1)
    with m.If(push & (w_data == b)):
        m.d.sync += b_at.eq(1)
    with m.If(pop & (dut.r_data == a) & (a_at == 1)):
        m.d.sync += a_at.eq(2)
    with m.If(pop & (dut.r_data == b) & (b_at == 1)):
        m.d.sync += b_at.eq(2)
    with m.If((a_at == 0) & push & (w_data == a)):
        m.d.sync += ahead.eq(level - pop)
    with m.Elif((a_at == 1) & pop & (ahead != 0)):
        m.d.sync += ahead.eq(ahead - 1)
    m.d.comb += [
        Assume(~(push & (w_data == a) & (a_at != 0))),
        Assume(~(push & (w_data == b) & ((b_at != 0) | (a_at == 0)))),
    ]

    stalled = Signal()
    held = Signal(width)
    m.d.sync += [stalled.eq(dut.r_rdy & ~dut.r_en), held.eq(dut.r_data)]
    m.d.comb += [
        Assert(level <= depth, "more entries than the depth"),
        Assert(dut.level == level, "level does not follow the handshakes"),
        Assert(~dut.w_rdy | (level != depth), "a write taken when full"),
        Assert(~dut.r_rdy | (level != 0), "a read offered when empty"),
        Assert(~stalled | (dut.r_rdy & (dut.r_data == held)),
               "an offered entry withdrawn or changed while stalled"),
        Assert(~(pop & (dut.r_data == b) & (b_at == 1)) | (a_at == 2), "b read before a"),
        Assert(~((a_at == 1) & (ahead == 0) & dut.r_rdy) | (dut.r_data == a),
               "a not next out once the entries ahead of it have gone"),
        Cover((b_at == 2) & (a_at == 2)),
        Cover((level == depth) & dut.r_en & dut.w_en),
    ]
    if registered_head:
        m.d.comb += [Assert(dut.r_rdy == (level != 0), "r_rdy is not exactly not-empty"),
                     Assert(dut.w_rdy == (level != depth), "w_rdy is not exactly not-full")]
    if view is None:
        return m
    m.d.comb += view.statements
    m.d.comb += [Assert(invariant) for invariant in view.invariants]
    m.d.comb += [Assert((a_at != 3) & (b_at != 3)), Assert(~(b_at != 0) | (a_at != 0)),
                 Assert(~(a_at == 1) | (ahead < level))]
    for i, entry in enumerate(view.entries):
        held_here = i < level
        m.d.comb += [
            Assert(~(held_here & (entry == a)) | ((a_at == 1) & (ahead == i))),
            Assert(~((a_at == 1) & (ahead == i)) | (held_here & (entry == a))),
            Assert(~(held_here & (entry == b))
                   | ((b_at == 1) & ((a_at == 2) | ((a_at == 1) & (ahead < i))))),
            # b once at most (a is once by the assertions above)
            *(Assert(~(held_here & (entry == b) & (other == b))) for other in view.entries[:i]),
        ]
    return m


class SliceHeadNotRefilled(RegisterSlice):
    """Mutant: an entry written as the last one is read goes to the tail, not the head,
    so the head keeps the entry just read."""

    def elaborate(self, platform: object) -> Module:
        m = Module()
        tail = SyncFIFOBuffered(width=self.width, depth=1) if self.depth == 2 \
            else SyncFIFO(width=self.width, depth=self.depth - 1)
        m.submodules.tail = tail
        head = Signal(self.width)
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        m.d.comb += [self.r_data.eq(head), self.r_rdy.eq(self.level != 0),
                     self.w_rdy.eq(self.level != self.depth)]
        to_head = self.level == 0
        m.d.comb += [tail.w_data.eq(self.w_data), tail.w_en.eq(push & ~to_head),
                     tail.r_en.eq(pop)]
        with m.If(pop & tail.r_rdy):
            m.d.sync += head.eq(tail.r_data)
        with m.If(push & to_head):
            m.d.sync += head.eq(self.w_data)
        m.d.sync += self.level.eq(self.level + push - pop)
        return m


@pytest.mark.parametrize("depth", SLICE_DEPTHS)
def test_register_slice_proved(depth: int, tmp_path: Path) -> None:
    dut = RegisterSlice(WIDTH, depth)
    spec = fifo_spec(dut, depth, WIDTH, registered_head=True, view=register_slice_view(dut))
    assert_proved(spec, tmp_path, depth=INDUCTION_DEPTH, cover_depth=depth + 4)


def test_alternating_slice_proved(tmp_path: Path) -> None:
    dut = AlternatingSlice(WIDTH)
    spec = fifo_spec(dut, 2, WIDTH, registered_head=True, view=alternating_slice_view(dut))
    assert_proved(spec, tmp_path, depth=INDUCTION_DEPTH, cover_depth=6)


def test_command_fifo_depths_are_the_presets() -> None:
    depths = {p if isinstance(p, int) else p.values[0] for p in CMD_QUEUE_DEPTHS}
    assert depths == {cfg.cmd_queue_depth for cfg in PRESETS.values()}


@pytest.mark.parametrize("depth", CMD_QUEUE_DEPTHS)
def test_command_fifo_proved(depth: int, tmp_path: Path) -> None:
    dut = command_fifo(WIDTH, depth)
    spec = fifo_spec(dut, depth, WIDTH, registered_head=False, view=buffered_fifo_view(dut))
    assert_proved(spec, tmp_path, depth=INDUCTION_DEPTH, cover_depth=depth + 4)


def test_register_slice_mutant_refuted(tmp_path: Path) -> None:
    spec = fifo_spec(SliceHeadNotRefilled(WIDTH, 4), 4, WIDTH, registered_head=True)
    assert_refuted(spec, tmp_path, depth=10)


def test_command_fifo_mutant_refuted(tmp_path: Path) -> None:
    # the output register is refilled on a write too, even while it holds an entry
    # not read: the entry is lost
    broken = mutant(tensorfab.hw.register_slice, "BufferedFifo",
                    "inner_rdy & (~self.r_rdy | self.r_en)",
                    "inner_rdy & (~self.r_rdy | self.r_en | self.w_en)")
    spec = fifo_spec(broken(width=WIDTH, depth=4), 4, WIDTH, registered_head=False)
    assert_refuted(spec, tmp_path, depth=10)
