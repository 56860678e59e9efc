"""Random push/pop stimulus for a FIFO under test beside Amaranth's SyncFIFO and a deque,
cycle by cycle: the flags and level checked here, the data by the caller's check."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

from amaranth.hdl import Module
from amaranth.sim import Simulator

#: ``check(ctx, model, last)``: asserts the data outputs before a cycle's edge, given the
#: reference queue ``model`` and the entry of the last read (None before the first).
DataCheck = Callable[[Any, deque, "int | None"], None]


def run_fifo_stimulus(m: Module, dut: Any, ref: Any, depth: int, seed: int,
                      check: DataCheck, steps: int = 800) -> dict[str, int]:
    """Drive ``dut`` and ``ref`` (both in ``m``) with the same random pushes and pops for
    ``steps`` cycles; pushes outnumber pops for a while, then pops, so the queue fills
    and empties. Returns how often each situation occurred (``push``, ``pop``, ``both``,
    ``full``, ``push_when_full``, ``held``: a cycle after a read without a pop)."""
    rng = random.Random(seed)
    phases = [(0.75, 0.4), (0.3, 0.7)] * 4
    seen = {"push": 0, "pop": 0, "both": 0, "full": 0, "push_when_full": 0, "held": 0}

    async def bench(ctx) -> None:
        model: deque[int] = deque()
        last: int | None = None
        for step in range(steps):
            p_push, p_pop = phases[step * len(phases) // steps]
            push, pop, value = rng.random() < p_push, rng.random() < p_pop, rng.randrange(256)
            for port in (dut, ref):
                ctx.set(port.w_en, push)
                ctx.set(port.w_data, value)
                ctx.set(port.r_en, pop)
            assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy) == (len(model) < depth)
            assert ctx.get(dut.level) == ctx.get(ref.level) == len(model)
            assert ctx.get(dut.r_rdy) == ctx.get(ref.r_rdy) == (len(model) > 0)
            check(ctx, model, last)
            pushed, popped = push and len(model) < depth, pop and len(model) > 0
            seen["push"] += pushed
            seen["pop"] += popped
            seen["both"] += pushed and popped
            seen["full"] += len(model) == depth
            seen["push_when_full"] += push and len(model) == depth
            seen["held"] += last is not None and not popped
            if popped:
                last = model.popleft()
            if pushed:
                model.append(value)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return seen
