"""RegisterSlice and the core's command FIFOs: the stream protocol on both sides, the
level, and order (the contract form: two arbitrary entries come out in the order they
went in), by bounded model checking from reset.

RegisterSlice at depths 2, 3 and 4 (to 2·depth + 2 cycles: every state of the FIFO and
each entry's whole stay in it): 2 is every command slice of the arbiter, 3 the memory
model's output, 4 the smallest with a ``SyncFIFO`` tail, the structure of the arbiter's
16-deep outstanding FIFOs (whose 34-cycle bound the solver does not finish in minutes).
The command FIFOs (Amaranth's ``SyncFIFOBuffered``) at the tiny preset's depth 4 to
2·depth + 2 cycles and the small preset's 8 to depth + 3 (filled, then drained by
three); 16 is only tested. Entries are 4 bits wide: every bit of an entry takes the
same path, and the contract needs only two distinguishable values (the solver's time
grows steeply with the width)."""

from __future__ import annotations

from pathlib import Path

import pytest
from amaranth.hdl import Assert, Assume, Cover, Module, Signal
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered

from formal.symbiyosys import assert_proved, assert_refuted, free, free_const
from tensorfab.hw.register_slice import RegisterSlice
from tensorfab.isa import PRESETS

#: (depth, where the core uses it)
SLICE_DEPTHS = [2, 3, 4]
#: command-FIFO depth of a preset: cycles checked
CMD_QUEUE_BOUNDS = {4: 10, 8: 11}
WIDTH = 4


def command_fifo(width: int, depth: int) -> SyncFIFO:
    """The FIFO the core puts between fetch and each engine (hw/core.py)."""
    return (SyncFIFOBuffered(width=width, depth=depth) if depth > 2
            else SyncFIFO(width=width, depth=depth))


def fifo_spec(dut: SyncFIFO | RegisterSlice, depth: int, width: int, *,
              registered_head: bool) -> Module:
    """The FIFO interface (``w_data/w_en/w_rdy``, ``r_data/r_en/r_rdy``, ``level``)
    against its contract.

    Two arbitrary values ``a`` and ``b`` (the solver's choice) are each written once at
    most, ``b`` only after ``a``; then ``b`` is never read before ``a``, and ``a`` comes
    out as the next entry read once every entry written before it has gone. The level
    follows the handshakes; ``w_rdy`` never takes an entry past the depth; an offered
    entry (``r_rdy`` without ``r_en``) stays offered with the same data. With
    ``registered_head`` (RegisterSlice) ``r_rdy`` and ``w_rdy`` are exactly not empty
    and not full.
    """
    m = Module()
    m.submodules.dut = dut
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
    spec = fifo_spec(RegisterSlice(WIDTH, depth), depth, WIDTH, registered_head=True)
    assert_proved(spec, tmp_path, mode="bmc", depth=2 * depth + 2, cover_depth=depth + 4)


def test_command_fifo_depths_are_the_presets() -> None:
    assert set(CMD_QUEUE_BOUNDS) | {16} == {cfg.cmd_queue_depth for cfg in PRESETS.values()}


@pytest.mark.parametrize("depth", sorted(CMD_QUEUE_BOUNDS))
def test_command_fifo_proved(depth: int, tmp_path: Path) -> None:
    spec = fifo_spec(command_fifo(WIDTH, depth), depth, WIDTH, registered_head=False)
    assert_proved(spec, tmp_path, mode="bmc", depth=CMD_QUEUE_BOUNDS[depth],
                  cover_depth=depth + 4)


def test_register_slice_mutant_refuted(tmp_path: Path) -> None:
    spec = fifo_spec(SliceHeadNotRefilled(WIDTH, 4), 4, WIDTH, registered_head=True)
    assert_refuted(spec, tmp_path, depth=10)
