"""BurstIssuer: the beats owed follow the commands and beats exactly, a command offered
stays offered unchanged until taken, a transfer's commands add up to its rows × beats,
and ``drained`` (what a halted engine waits for) means no command held offered and no
beat owed. By k-induction, at the engines' ``max_burst`` of 32, for transfers of up to
7 rows of up to 127 beats (so that rows split into bursts; the counters' other bits
take the same paths).

The helper invariants that make the properties inductive tie the issuer's registers
(by name) to each other and to the spec's counts: the flags with the counters they
stand for, ``owing`` with the beats owed, the beats owed within the hold-back limit
plus a burst, and the beats still to issue with the rows and beats left.
"""

from __future__ import annotations

from pathlib import Path

from amaranth.hdl import Assert, Assume, Cover, Fragment, Module, Mux, Signal, Value

from formal.symbiyosys import assert_proved, assert_refuted, driven_signals, free
from tensorfab.hw.burst import BurstIssuer, owed_limit_bits
from tensorfab.isa import get_config

CFG = get_config("tiny")
#: the engines' longest burst (LoadEngine, StoreEngine)
MAX_BURST = 32
#: bits of a transfer's rows and of a row's beats
ROWS_BITS, BEATS_BITS = 3, 7
#: cycles within which the covers are reached, and the mutant's BMC
BOUND = 12
#: k of the k-induction
INDUCTION_DEPTH = 3


def burst_spec(dut: BurstIssuer, *, helpers: bool = True) -> Module:
    """The issuer between a free engine (start, issue, beats it is owed) and a free
    memory (command ready). The ``helpers`` (invariants over the issuer's registers
    that make the properties inductive) are left out for a mutant's BMC, so that its
    counterexample breaks a property."""
    m = Module()
    fragment = Fragment.get(dut, None)
    m.submodules.dut = fragment
    m.d.comb += [dut.start.eq(free(1)), dut.addr.eq(free(dut.addr.shape())),
                 dut.rows.eq(free(ROWS_BITS)), dut.row_beats.eq(free(BEATS_BITS)),
                 dut.stride.eq(64), dut.issue.eq(free(1)), dut.beat.eq(free(1)),
                 dut.cmd.ready.eq(free(1))]
    taken = dut.cmd.valid & dut.cmd.ready
    owed = Signal(12)
    beats = Signal(12)  # beats of the commands of this transfer
    expected = Signal(12)
    m.d.sync += owed.eq(owed + Mux(taken, dut.cmd.payload.len + 1, 0) - dut.beat)
    with m.If(dut.start):
        m.d.sync += [beats.eq(0), expected.eq(dut.rows * dut.row_beats)]
    with m.Elif(taken):
        m.d.sync += beats.eq(beats + dut.cmd.payload.len + 1)
    m.d.comb += [Assume(~dut.beat | (owed != 0)),
                 # (a DMA engine loads a transfer in CHECK, drained, issuing nothing)
                 Assume(~dut.start | (dut.drained & ~dut.issue)),
                 Assume(~dut.start | (dut.rows != 0) & (dut.row_beats != 0))]
    stalled = Signal()
    held = Signal.like(dut.cmd.payload)
    m.d.sync += [stalled.eq(dut.cmd.valid & ~dut.cmd.ready), held.eq(dut.cmd.payload)]
    started = Signal()
    with m.If(dut.start):
        m.d.sync += started.eq(1)
    m.d.comb += [
        Assert(dut.owed == owed, "owed does not follow the commands and beats"),
        Assert(~stalled | (dut.cmd.valid & (dut.cmd.payload.as_value() == held.as_value())),
               "an offered command withdrawn or changed"),
        Assert(~dut.drained | ((owed == 0) & ~stalled), "drained with a beat or command owed"),
        Assert(~(dut.drained & ~dut.issue) | ~dut.cmd.valid,
               "a command offered by a drained issuer told not to issue"),
        Assert(~dut.cmd.valid | (dut.cmd.payload.len < MAX_BURST), "a burst too long"),
        Assert(beats <= expected, "more beats than the transfer has"),
        Assert(~(started & dut.issued) | (beats == expected),
               "issued before all of the transfer's beats were"),
        # a transfer's commands all taken, a row split into bursts
        Cover(started & dut.issued & (expected == MAX_BURST + 1)),
        # a transfer halted mid-way (issue dropped) drains
        Cover(started & ~dut.issued & (beats != 0) & dut.drained & ~dut.issue),
    ]
    if helpers:
        m.d.comb += issuer_invariants(driven_signals(fragment), dut, owed, stalled, started,
                                      expected - beats)
    return m


def issuer_invariants(reg: dict[str, Signal], dut: BurstIssuer, owed: Value, stalled: Value,
                      started: Value, to_issue: Value) -> list[Assert]:
    """The issuer's registers consistent with each other and with the spec's counts:
    the flags with the counters they stand for, ``owing`` with ``owed``, ``stuck``
    with the spec's stall, and the beats still to issue (``to_issue``: the transfer's
    less the commands') with the rows and beats left."""
    rows_left, row_beats, beats_left = reg["rows_left"], reg["row_beats"], reg["beats_left"]
    mb = dut.max_burst
    rows, beats = rows_left[:ROWS_BITS], row_beats[:BEATS_BITS]
    left = Mux(reg["has_rows"], rows * beats - beats + beats_left[:BEATS_BITS], 0)
    limit = 1 << owed_limit_bits(mb)  # no new command offered from here on
    return [
        Assert(owed < limit + mb),
        Assert(~reg["stuck"] | (owed < limit)),
        Assert(dut.owing == (owed != 0)),
        Assert(reg["stuck"] == stalled),
        Assert(reg["has_rows"] == (rows_left != 0)),
        Assert(reg["long"] == (beats_left > mb)),
        Assert(reg["row_long"] == (row_beats > mb)),
        Assert((rows_left < 1 << ROWS_BITS) & (row_beats < 1 << BEATS_BITS)
               & (beats_left <= row_beats)),
        Assert(~reg["has_rows"] | (beats_left != 0)),
        Assert(~started | (to_issue == left)),
        Assert(started | ~reg["has_rows"]),
    ]


class OwingForgetsTheLastBeat(BurstIssuer):
    """Mutant: ``owing`` (and so ``drained``) counts only two beats owed or more."""

    def elaborate(self, platform: object) -> Module:
        m = super().elaborate(platform)
        m.d.sync += self.owing.eq(self.owed[1:] != 0)
        return m


def test_burst_issuer_proved(tmp_path: Path) -> None:
    assert_proved(burst_spec(BurstIssuer(CFG, MAX_BURST)), tmp_path, depth=INDUCTION_DEPTH,
                  cover_depth=BOUND)


def test_burst_issuer_mutant_refuted(tmp_path: Path) -> None:
    assert_refuted(burst_spec(OwingForgetsTheLastBeat(CFG, MAX_BURST), helpers=False), tmp_path,
                   depth=BOUND)
