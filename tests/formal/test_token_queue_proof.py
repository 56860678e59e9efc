"""TokenQueue: no token lost or invented, a pop refused exactly when empty, a push
exactly when full; by k-induction at every depth the presets use."""

from __future__ import annotations

from pathlib import Path

import pytest
from amaranth.hdl import Assert, Cover, Module, Signal

from formal.symbiyosys import assert_proved, assert_refuted, free
from tensorfab.hw.token_queue import TokenQueue
from tensorfab.isa import PRESETS

PRESET_DEPTHS = sorted({cfg.dep_queue_depth for cfg in PRESETS.values()})


def token_queue_spec(dut: TokenQueue) -> Module:
    """The queue against a model counter fed by the handshakes: the count equals the
    model's, stays within the depth, and the two ``ready``/``valid`` outputs say
    exactly not-full and not-empty."""
    m = Module()
    m.submodules.dut = dut
    depth = dut.depth
    m.d.comb += [dut.push.valid.eq(free(1)), dut.pop.ready.eq(free(1))]
    pushed = dut.push.valid & dut.push.ready
    popped = dut.pop.valid & dut.pop.ready
    model = Signal(range(depth + 2))
    m.d.sync += model.eq(model + pushed - popped)
    m.d.comb += [
        Assert(model <= depth, "more tokens than the depth"),
        Assert(dut.count == model, "a token lost or invented"),
        Assert(dut.pop.valid == (model != 0), "pop offered when empty or refused when not"),
        Assert(dut.push.ready == (model != depth), "push taken when full or refused when not"),
        # full, popped, and a push offered in the same cycle (refused: ready is registered)
        Cover((dut.count == depth) & popped & dut.push.valid),
        # a push and a pop together, in the middle
        Cover((dut.count == depth - 1) & pushed & popped),
    ]
    return m


class CountingOnPush(TokenQueue):
    """Mutant: a push in the cycle of a pop still counts up (the pop is forgotten)."""

    def elaborate(self, platform: object) -> Module:
        m = Module()
        push = self.push.valid & self.push.ready
        pop = self.pop.ready & self.pop.valid
        m.d.comb += [self.push.ready.eq(self.count < self.depth),
                     self.pop.valid.eq(self.count != 0)]
        with m.If(push):
            m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(pop):
            m.d.sync += self.count.eq(self.count - 1)
        return m


@pytest.mark.parametrize("depth", PRESET_DEPTHS)
def test_token_queue_proved(depth: int, tmp_path: Path) -> None:
    assert_proved(token_queue_spec(TokenQueue(depth)), tmp_path, depth=2,
                  cover_depth=depth + 3)


def test_token_queue_mutant_refuted(tmp_path: Path) -> None:
    assert_refuted(token_queue_spec(CountingOnPush(4)), tmp_path, depth=6)
