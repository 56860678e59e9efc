"""RegisterSlice (its tail in flip-flops or in block RAM) against Amaranth's SyncFIFO of the
same depth and a deque, cycle by cycle."""

from __future__ import annotations

import random
from collections import deque

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFO
from amaranth.sim import Simulator

from tensorfab.hw.register_slice import RegisterSlice


@pytest.mark.parametrize(("depth", "seed", "block_ram"),
                         [(2, 0, False), (2, 1, False), (2, 2, False), (3, 0, False),
                          (3, 1, False), (5, 0, False), (16, 0, False),
                          (3, 0, True), (3, 1, True), (5, 0, True), (16, 0, True),
                          (16, 1, True)])
def test_register_slice_is_a_fifo(depth: int, seed: int, block_ram: bool) -> None:
    m = Module()
    m.submodules.dut = dut = RegisterSlice(8, depth, block_ram=block_ram)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)
    rng = random.Random(seed)
    # pushes outnumber pops for a while, then pops: the queue fills and empties
    phases = [(0.75, 0.4), (0.3, 0.7)] * 4
    seen = {"push": 0, "pop": 0, "both": 0, "full": 0, "push_when_full": 0}

    async def bench(ctx) -> None:
        model: deque[int] = deque()
        for step in range(800):
            p_push, p_pop = phases[step * len(phases) // 800]
            push, pop, value = rng.random() < p_push, rng.random() < p_pop, rng.randrange(256)
            for port in (dut, ref):
                ctx.set(port.w_en, push)
                ctx.set(port.w_data, value)
                ctx.set(port.r_en, pop)
            assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy) == (len(model) < depth)
            assert ctx.get(dut.level) == ctx.get(ref.level) == len(model)
            assert ctx.get(dut.r_rdy) == ctx.get(ref.r_rdy) == (len(model) > 0)
            if model:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data) == model[0]
            pushed, popped = push and len(model) < depth, pop and len(model) > 0
            seen["push"] += pushed
            seen["pop"] += popped
            seen["both"] += pushed and popped
            seen["full"] += len(model) == depth
            seen["push_when_full"] += push and len(model) == depth
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


def test_register_slice_needs_two_entries() -> None:
    with pytest.raises(ValueError, match="depth = 1"):
        RegisterSlice(8, 1)


def test_register_slice_in_block_ram_needs_three_entries() -> None:
    with pytest.raises(ValueError, match="depth = 2; at least 3 in block RAM"):
        RegisterSlice(8, 2, block_ram=True)
