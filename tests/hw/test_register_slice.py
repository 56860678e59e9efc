"""RegisterSlice against Amaranth's SyncFIFO(depth=2) and a deque, cycle by cycle."""

from __future__ import annotations

import random
from collections import deque

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFO
from amaranth.sim import Simulator

from tensorfab.hw.register_slice import RegisterSlice


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_register_slice_is_a_two_entry_fifo(seed: int) -> None:
    m = Module()
    m.submodules.dut = dut = RegisterSlice(8)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=2)
    rng = random.Random(seed)
    seen = {"push": 0, "pop": 0, "both": 0, "full": 0, "push_when_full": 0}

    async def bench(ctx) -> None:
        model: deque[int] = deque()
        for _ in range(600):
            push, pop, value = rng.random() < 0.6, rng.random() < 0.5, rng.randrange(256)
            for port in (dut, ref):
                ctx.set(port.w_en, push)
                ctx.set(port.w_data, value)
                ctx.set(port.r_en, pop)
            assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy) == (len(model) < 2)
            assert ctx.get(dut.r_rdy) == ctx.get(ref.r_rdy) == (len(model) > 0)
            if model:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data) == model[0]
            pushed, popped = push and len(model) < 2, pop and len(model) > 0
            seen["push"] += pushed
            seen["pop"] += popped
            seen["both"] += pushed and popped
            seen["full"] += len(model) == 2
            seen["push_when_full"] += push and len(model) == 2
            if popped:
                model.popleft()
            if pushed:
                model.append(value)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(seen.values()), seen  # every situation occurred
