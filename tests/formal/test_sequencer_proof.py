"""InsnSequencer: an instruction retires once, only after the tokens its flags ask for
were popped (all in its start cycle) and in the cycle its pushes go out (all of them,
into queues with room); a halt or a failure drops it with no token pushed and nothing
retired. By k-induction, for each engine (each has its own token ports); the helper
invariants say the spec's phase of the instruction is the state machine's state and
the word it holds the spec's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from amaranth.hdl import Assert, Assume, Cover, Fragment, Module, Signal, Value

from formal.symbiyosys import assert_proved, assert_refuted, driven_signals, free
from tensorfab.hw import sequencer
from tensorfab.hw.layouts import format_layout
from tensorfab.hw.sequencer import InsnSequencer
from tensorfab.isa import Engine, get_config, insn_width
from tensorfab.isa.formats import header_format

CFG = get_config("tiny")
#: k of the k-induction
INDUCTION_DEPTH = 3


def sequencer_spec(dut: InsnSequencer, *, helpers: bool = True) -> Module:
    """The sequencer between a free instruction stream, free token queues, a free
    datapath (which answers only for an instruction it was started on) and a free halt.
    The ``helpers`` (the spec's phase and word are the state machine's) make the
    properties inductive; a mutant's BMC runs without them."""
    m = Module()
    fragment = Fragment.get(dut, None)
    m.submodules.dut = fragment
    ex = dut.exec
    width = insn_width(CFG)
    m.d.comb += [dut.insn.valid.eq(free(1)), dut.insn.payload.word.eq(free(width)),
                 dut.insn.payload.index.eq(free(32)), dut.halt.eq(free(1)),
                 ex.done.eq(free(1)), ex.fail.eq(free(1)), ex.code.eq(free(4)),
                 ex.idle.eq(free(1))]
    for f in dut.pops:
        m.d.comb += getattr(dut, f).valid.eq(free(1))
    for f in dut.pushes:
        m.d.comb += getattr(dut, f).ready.eq(free(1))

    # the instruction held: 0 none, 1 taken, 2 started (tokens popped), 3 executed
    phase = Signal(2)
    held = Signal(width)
    flags = format_layout(header_format(CFG))(held)
    taken = dut.insn.valid & dut.insn.ready
    m.d.comb += Assume(~(ex.done & ex.fail))
    m.d.comb += Assume(~(ex.done | ex.fail) | ex.start | (phase == 2))
    with m.If(taken):
        m.d.sync += [phase.eq(1), held.eq(dut.insn.payload.word)]
    with m.If(ex.start):
        m.d.sync += phase.eq(2)
    with m.If(((phase == 2) | ex.start) & ex.done):
        m.d.sync += phase.eq(3)
    with m.If(dut.retire | ((phase != 0) & dut.halt) | (((phase == 2) | ex.start) & ex.fail)):
        m.d.sync += phase.eq(0)

    props = [
        Assert(~taken | (phase == 0), "an instruction taken while one is held"),
        Assert(~dut.insn.ready | ~dut.halt, "an instruction taken during a halt"),
        Assert((phase == 0) | (ex.word == held), "the datapath sees another word"),
        Assert(~ex.start | (phase == 1), "started twice, or without an instruction"),
        Assert(~ex.start | ~dut.halt, "started during a halt"),
        Assert(~dut.retire | ((phase == 3) & ~dut.halt), "retired before done, twice or halted"),
        Cover(dut.retire & (phase == 3)),
    ]
    all_flags = 1
    for f in dut.pops:
        port, flag = getattr(dut, f), getattr(flags, f)
        all_flags = all_flags & flag
        props += [
            Assert(~port.ready | ex.start, f"{f}: a token popped outside a start"),
            Assert(~ex.start | (port.ready == flag), f"{f}: start pops another set of tokens"),
            Assert(~ex.start | ~flag | port.valid, f"{f}: a token popped from an empty queue"),
        ]
    for f in dut.pushes:
        port, flag = getattr(dut, f), getattr(flags, f)
        all_flags = all_flags & flag
        props += [
            Assert(~port.valid | dut.retire, f"{f}: a token pushed outside a retire"),
            Assert(~dut.retire | (port.valid == flag), f"{f}: retire pushes another set"),
            Assert(~dut.retire | ~flag | port.ready, f"{f}: a token pushed into a full queue"),
        ]
    props += [
        Cover(dut.retire & all_flags),
        # dropped by a halt after its tokens were popped
        Cover((phase == 3) & dut.halt & ~ex.idle),
    ]
    m.d.comb += props
    if helpers:
        reg = driven_signals(fragment)
        encoding = fragment.generated["fsm"].encoding
        state = reg["fsm_state"]
        for name, phases in (("IDLE", 0), ("DROP", 0), ("POP", 1), ("EXEC", 2), ("PUSH", 3)):
            m.d.comb += Assert(~(state == encoding[name]) | (phase == phases))
        m.d.comb += [Assert(state < len(encoding)), Assert((phase == 0) | (reg["word"] == held))]
    return m


def _any(terms: list[Value]) -> Value:
    """Mutant of the sequencer's ``_all``: any flag's queue ready counts as all."""
    out: Value = Value.cast(0)
    for t in terms:
        out = out | t
    return out


@pytest.mark.parametrize("engine", [Engine.LOAD, Engine.COMPUTE, Engine.STORE],
                         ids=lambda e: e.name.lower())
def test_sequencer_proved(engine: Engine, tmp_path: Path) -> None:
    assert_proved(sequencer_spec(InsnSequencer(CFG, engine)), tmp_path, depth=INDUCTION_DEPTH,
                  cover_depth=8)


def test_sequencer_mutant_refuted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: the compute engine (two pop and two push queues) starts when any of its
    tokens is there and retires when any of its queues has room."""
    monkeypatch.setattr(sequencer, "_all", _any)
    assert_refuted(sequencer_spec(InsnSequencer(CFG, Engine.COMPUTE), helpers=False), tmp_path,
                   depth=6)
