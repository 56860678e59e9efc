"""RegisterSlice (its tail in flip-flops or in block RAM) and AlternatingSlice against
Amaranth's SyncFIFO of the same depth and a deque, cycle by cycle; BufferedFifo against
Amaranth's SyncFIFOBuffered."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.sim import Simulator

from tensorfab.hw.register_slice import AlternatingSlice, BufferedFifo, RegisterSlice

from .fifo_stimulus import run_fifo_stimulus


@pytest.mark.parametrize(("depth", "seed", "block_ram"),
                         [(2, 0, False), (2, 1, False), (2, 2, False), (3, 0, False),
                          (3, 1, False), (5, 0, False), (16, 0, False),
                          (3, 0, True), (3, 1, True), (5, 0, True), (16, 0, True),
                          (16, 1, True)])
def test_register_slice_is_a_fifo(depth: int, seed: int, block_ram: bool) -> None:
    m = Module()
    m.submodules.dut = dut = RegisterSlice(8, depth, block_ram=block_ram)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)

    def head(ctx, model, last) -> None:  # the queue's first entry shows while not empty
        if model:
            assert ctx.get(dut.r_data) == ctx.get(ref.r_data) == model[0]

    seen = run_fifo_stimulus(m, dut, ref, depth, seed, head)
    assert all(seen.values()), seen  # every situation occurred


def test_register_slice_needs_two_entries() -> None:
    with pytest.raises(ValueError, match="depth = 1"):
        RegisterSlice(8, 1)


def test_register_slice_in_block_ram_needs_three_entries() -> None:
    with pytest.raises(ValueError, match="depth = 2; at least 3 in block RAM"):
        RegisterSlice(8, 2, block_ram=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alternating_slice_is_a_fifo(seed: int) -> None:
    m = Module()
    m.submodules.dut = dut = AlternatingSlice(8)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=2)

    def head(ctx, model, last) -> None:  # the queue's first entry shows while not empty
        if model:
            assert ctx.get(dut.r_data) == ctx.get(ref.r_data) == model[0]

    seen = run_fifo_stimulus(m, dut, ref, 2, seed, head)
    assert all(seen.values()), seen  # every situation occurred


@pytest.mark.parametrize(("depth", "seed"), [(3, 0), (3, 1), (4, 0), (4, 1), (5, 0), (8, 0),
                                             (8, 1)])
def test_buffered_fifo_is_amaranths_buffered_fifo_cycle_for_cycle(depth: int,
                                                                   seed: int) -> None:
    """BufferedFifo beside SyncFIFOBuffered under the same random pushes and pops (phases
    that fill and empty the queue): every port equal in every cycle, the read data
    while r_rdy, and the entries out in the order they went in."""
    m = Module()
    m.submodules.dut = dut = BufferedFifo(8, depth)
    m.submodules.ref = ref = SyncFIFOBuffered(width=8, depth=depth)
    rng = random.Random(seed)
    seen = {"full": 0, "both": 0, "stalled_read": 0}

    async def bench(ctx) -> None:
        pushed: list[int] = []
        popped: list[int] = []
        for step in range(1200):
            p_push, p_pop = (0.8, 0.3) if (step // 100) % 2 == 0 else (0.3, 0.8)
            push, pop, value = rng.random() < p_push, rng.random() < p_pop, rng.randrange(256)
            for port in (dut, ref):
                ctx.set(port.w_en, push)
                ctx.set(port.w_data, value)
                ctx.set(port.r_en, pop)
            for name in ("w_rdy", "r_rdy", "level"):
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), (step, name)
            r_rdy, w_rdy = ctx.get(ref.r_rdy), ctx.get(ref.w_rdy)
            if r_rdy:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), step
            seen["full"] += not w_rdy
            seen["both"] += push and pop and w_rdy and r_rdy
            seen["stalled_read"] += r_rdy and not pop
            if push and w_rdy:
                pushed.append(value)
            if pop and r_rdy:
                popped.append(ctx.get(dut.r_data))
            await ctx.tick()
        assert popped == pushed[:len(popped)] and len(popped) > 300

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(seen.values()), seen


def test_buffered_fifo_needs_three_entries() -> None:
    with pytest.raises(ValueError, match="depth = 2; at least 3"):
        BufferedFifo(8, 2)
