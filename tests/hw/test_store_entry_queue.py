"""The store's EntryQueue against Amaranth's SyncFIFOBuffered of the same depth (reset by
its flush), cycle by cycle: the same flags and head, and ``r_rdy_next`` is the next
cycle's ``r_rdy``."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, ResetInserter, Signal
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from tensorfab.hw.store import EntryQueue


@pytest.mark.parametrize(("depth", "seed"), [(2, 0), (3, 0), (3, 1), (6, 0), (6, 1), (6, 2)])
def test_entry_queue_is_a_buffered_fifo(depth: int, seed: int) -> None:
    m = Module()
    m.submodules.dut = dut = EntryQueue(8, depth)
    flush = Signal()
    ref = SyncFIFOBuffered(width=8, depth=depth)
    m.submodules.ref = ResetInserter({"sync": flush})(ref)
    m.d.comb += dut.flush.eq(flush)
    rng = random.Random(seed)
    seen = {"read": 0, "full": 0, "flush_with_entries": 0}

    async def bench(ctx) -> None:
        expected_rdy: int | None = None
        for step in range(1500):
            p_push, p_pop = (0.8, 0.4) if step // 100 % 2 else (0.3, 0.8)
            push, pop = rng.random() < p_push, rng.random() < p_pop
            fl, value = rng.random() < 0.03, rng.randrange(256)
            ctx.set(flush, fl)
            for port in (dut, ref):
                ctx.set(port.w_en, push)
                ctx.set(port.w_data, value)
                ctx.set(port.r_en, pop)
            rdy = ctx.get(ref.r_rdy)
            assert ctx.get(dut.r_rdy) == rdy
            assert expected_rdy is None or rdy == expected_rdy
            assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy)
            if rdy:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data)
            expected_rdy = ctx.get(dut.r_rdy_next)
            seen["read"] += rdy and pop
            seen["full"] += not ctx.get(ref.w_rdy)
            seen["flush_with_entries"] += fl and ctx.get(ref.level) > 1
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(seen.values()), seen


def test_entry_queue_needs_two_entries() -> None:
    with pytest.raises(ValueError, match="depth = 1"):
        EntryQueue(8, 1)
