"""UopLoop in Amaranth's simulator against the loops written in Python.

Random loop bounds and factors; ``step`` comes and goes at random (the compute
engine's interlock). Every stepped iteration must be the next one of the nested
loops of docs/isa.md, with its offsets, and ``last`` exactly on the final one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from amaranth.sim import Simulator

from tensorfab.hw.uop_loop import INDEX_WIDTH, UopLoop

UOP_BITS = 5
FACTOR_WIDTH = 6


def iterations(begin: int, end: int, iter_out: int, iter_in: int,
               f_out: list[int], f_in: list[int]) -> Iterator[tuple[int, list[int]]]:
    """The loops of a GEMM or ALU instruction: (micro-op, offsets) per iteration."""
    for i in range(iter_out):
        for j in range(iter_in):
            for u in range(begin, end):
                yield u, [(i * fo + j * fi) % (1 << INDEX_WIDTH)
                          for fo, fi in zip(f_out, f_in, strict=True)]


@pytest.mark.parametrize("seed", range(3))
def test_loop_order_and_offsets(seed: int) -> None:
    rng = random.Random(seed)
    dut = UopLoop(UOP_BITS, FACTOR_WIDTH)
    checked = [0]

    async def bench(ctx) -> None:
        for _ in range(12):
            begin = rng.randrange(0, 1 << UOP_BITS)
            end = rng.randrange(begin + 1, min(begin + 4, 1 << UOP_BITS) + 1)
            iter_out, iter_in = rng.randrange(1, 4), rng.randrange(1, 4)
            f_out = [rng.randrange(1 << FACTOR_WIDTH) for _ in range(3)]
            f_in = [rng.randrange(1 << FACTOR_WIDTH) for _ in range(3)]
            ctx.set(dut.start, 1)
            ctx.set(dut.uop_begin, begin)
            ctx.set(dut.uop_end, end)
            ctx.set(dut.iter_out, iter_out)
            ctx.set(dut.iter_in, iter_in)
            for k in range(3):
                ctx.set(dut.factor_out[k], f_out[k])
                ctx.set(dut.factor_in[k], f_in[k])
            await ctx.tick()
            ctx.set(dut.start, 0)
            # fields change after the start: the loop must have registered them
            ctx.set(dut.uop_end, 0)
            ctx.set(dut.iter_out, 0)
            expected = list(iterations(begin, end, iter_out, iter_in, f_out, f_in))
            for n, (u, offsets) in enumerate(expected):
                while True:
                    step = rng.random() < 0.7
                    ctx.set(dut.step, step)
                    assert ctx.get(dut.uop) == u
                    assert [ctx.get(dut.offsets[k]) for k in range(3)] == offsets
                    assert ctx.get(dut.last) == (n == len(expected) - 1)
                    await ctx.tick()
                    if step:
                        break
                checked[0] += 1
            ctx.set(dut.step, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert checked[0] > 12
