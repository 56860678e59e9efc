"""BurstIssuer: the beats owed follow the commands and beats exactly, a command offered
stays offered unchanged until taken, a transfer's commands add up to its rows × beats,
and ``drained`` (what a halted engine waits for) means no command held offered and no
beat owed. By bounded model checking, with ``max_burst`` 4 and transfers of at most 3 rows
of at most 7 beats, so that rows split into bursts."""

from __future__ import annotations

from pathlib import Path

from amaranth.hdl import Assert, Assume, Cover, Module, Mux, Signal

from formal.symbiyosys import assert_proved, assert_refuted, free
from tensorfab.hw.burst import BurstIssuer
from tensorfab.isa import get_config

CFG = get_config("tiny")
MAX_BURST = 4
#: cycles checked
BOUND = 12


def burst_spec(dut: BurstIssuer) -> Module:
    """The issuer between a free engine (start, issue, beats it is owed) and a free
    memory (command ready)."""
    m = Module()
    m.submodules.dut = dut
    m.d.comb += [dut.start.eq(free(1)), dut.addr.eq(free(dut.addr.shape())),
                 dut.rows.eq(free(2)), dut.row_beats.eq(free(3)), dut.stride.eq(64),
                 dut.issue.eq(free(1)), dut.beat.eq(free(1)), dut.cmd.ready.eq(free(1))]
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
        Cover(started & dut.issued & (expected == 6) & dut.drained),
        # a transfer halted mid-way (issue dropped) drains
        Cover(started & ~dut.issued & (beats != 0) & dut.drained & ~dut.issue),
    ]
    return m


class OwingForgetsTheLastBeat(BurstIssuer):
    """Mutant: ``owing`` (and so ``drained``) counts only two beats owed or more."""

    def elaborate(self, platform: object) -> Module:
        m = super().elaborate(platform)
        m.d.sync += self.owing.eq(self.owed[1:] != 0)
        return m


def test_burst_issuer_proved(tmp_path: Path) -> None:
    assert_proved(burst_spec(BurstIssuer(CFG, MAX_BURST)), tmp_path, mode="bmc", depth=BOUND,
                  cover_depth=BOUND)


def test_burst_issuer_mutant_refuted(tmp_path: Path) -> None:
    assert_refuted(burst_spec(OwingForgetsTheLastBeat(CFG, MAX_BURST)), tmp_path, depth=BOUND)
