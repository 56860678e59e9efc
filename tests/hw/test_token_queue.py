"""TokenQueue in Amaranth's Python simulator against a cycle-level Python model."""

from __future__ import annotations

import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from tensorfab.hw.token_queue import TokenQueue


@pytest.mark.parametrize("depth", [1, 2, 4, 8])
def test_token_queue_random_traffic(depth: int) -> None:
    dut = TokenQueue(depth)
    rng = random.Random(depth)
    seen = {"push": 0, "pop": 0, "full": 0, "both": 0}

    async def bench(ctx) -> None:
        model = 0
        for _ in range(400):
            push = rng.random() < 0.5
            pop = rng.random() < 0.5
            ctx.set(dut.push.valid, push)
            ctx.set(dut.pop.ready, pop)
            assert ctx.get(dut.count) == model
            assert ctx.get(dut.push.ready) == (model < depth)
            assert ctx.get(dut.pop.valid) == (model > 0)
            pushed = push and model < depth
            popped = pop and model > 0
            seen["push"] += pushed
            seen["pop"] += popped
            seen["both"] += pushed and popped
            seen["full"] += model == depth
            model += int(pushed) - int(popped)
            await ctx.tick()
        assert ctx.get(dut.count) == model

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    if depth == 1:  # never both: a full queue refuses the push, an empty one the pop
        assert seen.pop("both") == 0
    assert all(seen.values()), seen  # every situation occurred


def test_token_queue_fill_and_drain() -> None:
    depth = 4
    dut = TokenQueue(depth)

    async def bench(ctx) -> None:
        ctx.set(dut.push.valid, 1)
        for n in range(depth):
            assert ctx.get(dut.count) == n
            await ctx.tick()
        assert ctx.get(dut.count) == depth
        assert not ctx.get(dut.push.ready)
        await ctx.tick()  # a push into a full queue is refused
        assert ctx.get(dut.count) == depth
        ctx.set(dut.pop.ready, 1)  # full: pop proceeds, push refused
        await ctx.tick()
        assert ctx.get(dut.count) == depth - 1
        await ctx.tick()  # not full: push and pop together keep the count
        assert ctx.get(dut.count) == depth - 1
        ctx.set(dut.push.valid, 0)
        for n in range(depth - 1, 0, -1):
            assert ctx.get(dut.count) == n
            await ctx.tick()
        assert ctx.get(dut.count) == 0
        assert not ctx.get(dut.pop.valid)
        await ctx.tick()  # a pop from an empty queue is refused
        assert ctx.get(dut.count) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_token_queue_rejects_zero_depth() -> None:
    with warnings.catch_warnings():
        # the half-built component is collected unelaborated; that is expected here
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="depth") as excinfo:
            TokenQueue(0)
        del excinfo
        gc.collect()
