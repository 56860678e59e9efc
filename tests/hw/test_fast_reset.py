"""FastReset in Amaranth's simulator against the lines it must zero.

Random lines (start entry, length, count, stride) of the tiny preset: the entries the
zero-flag port marks must be exactly ``acc + i·acc_factor_out + [0, iter_in)``, each
cycle one row of flags, as many cycles as the lines cover rows, ``done`` on the last
one; out-of-range micro-op fields and lines past the buffer fail with their codes.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from amaranth.sim import Simulator

from tensorfab.hw.fast_reset import FastReset
from tensorfab.hw.signatures import zero_lanes
from tensorfab.isa import PRESETS, ErrorCode, HwConfig

CFG = PRESETS["tiny"]
LANES = zero_lanes(CFG)


def run(acc: int, iter_out: int, iter_in: int, f_out: int, src: int = 0, wgt: int = 0,
        stop_at: int | None = None, cfg: HwConfig = CFG) -> dict:
    """Drive one fast reset; what the port zeroed, per cycle, and how it ended."""
    dut = FastReset(cfg)
    out: dict = {"rows": [], "done": 0, "fail": None, "uop_reads": 0}

    async def bench(ctx) -> None:
        ctx.set(dut.iter_out, iter_out)
        ctx.set(dut.iter_in, iter_in)
        ctx.set(dut.acc_factor_out, f_out)
        ctx.set(dut.acc, acc)
        ctx.set(dut.src, src)
        ctx.set(dut.wgt, wgt)
        ctx.set(dut.start, 1)
        en_next = ctx.get(dut.acc_zero_next)  # acc_zero.en's value after the edge
        await ctx.tick()
        ctx.set(dut.start, 0)
        for cycle in range(4 * iter_out * (iter_in + LANES) + 10):
            ctx.set(dut.stop, stop_at is not None and cycle >= stop_at)
            assert ctx.get(dut.acc_zero.en) == en_next, f"cycle {cycle}: acc_zero_next"
            out["uop_reads"] += ctx.get(dut.uop_rd_en)
            if ctx.get(dut.fail):
                out["fail"] = ctx.get(dut.code)
                ctx.set(dut.stop, 1)
            if ctx.get(dut.acc_zero.en):
                # the port is taken in the ZERO state only: zeroing, failing or stopped
                assert ctx.get(dut.zeroing) or ctx.get(dut.fail) or ctx.get(dut.stop)
                mask = ctx.get(dut.acc_zero.mask)
                assert ctx.get(dut.zeroed) == bin(mask).count("1")
                assert ctx.get(dut.zeroing) == (mask != 0)
                if mask:
                    out["rows"].append((ctx.get(dut.acc_zero.row), mask))
            else:
                assert ctx.get(dut.zeroed) == 0 and ctx.get(dut.acc_zero.mask) == 0
            out["done"] += ctx.get(dut.done)
            en_next = ctx.get(dut.acc_zero_next)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def entries(rows: list[tuple[int, int]]) -> list[int]:
    return [row * LANES + k for row, mask in rows for k in range(LANES) if mask >> k & 1]


@pytest.mark.parametrize("seed", range(4))
def test_zeroes_exactly_the_lines(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(6):
        iter_in = rng.choice([1, 2, LANES - 1, LANES, LANES + 1, 3 * LANES + 2])
        iter_out = rng.randrange(1, 4)
        f_out = rng.randrange(0, 2 * iter_in + 3)
        span = (iter_out - 1) * f_out + iter_in
        acc = rng.randrange(0, CFG.acc_depth - span + 1)
        got = run(acc, iter_out, iter_in, f_out)
        lines = [acc + i * f_out + n for i in range(iter_out) for n in range(iter_in)]
        assert sorted(entries(got["rows"])) == sorted(lines)
        pieces = sum(len({e // LANES for e in range(acc + i * f_out, acc + i * f_out + iter_in)})
                     for i in range(iter_out))
        assert len(got["rows"]) == pieces
        assert got["done"] == 1 and got["fail"] is None and got["uop_reads"] == 1


def test_input_field_checked() -> None:
    # an input buffer shallower than the accumulators': the source field can point
    # past it (the weight field is as wide as the weight buffer's index)
    narrow = dataclasses.replace(CFG, name="tiny-narrow-input", inp_depth=CFG.acc_depth // 2)
    got = run(0, 1, 2, 0, src=narrow.inp_depth, cfg=narrow)
    assert got["fail"] == ErrorCode.UOP_RANGE and got["rows"] == [] and got["done"] == 0
    got = run(0, 1, 2, 0, src=narrow.inp_depth - 1, cfg=narrow)
    assert got["fail"] is None and entries(got["rows"]) == [0, 1]


def test_line_past_the_buffer_fails() -> None:
    acc = CFG.acc_depth - 2
    got = run(acc, 2, 2, 4)
    assert got["fail"] == ErrorCode.SRAM_RANGE and got["done"] == 0
    assert entries(got["rows"]) == [acc, acc + 1]  # the first line, in range, is zeroed


def test_stop_ends_it() -> None:
    got = run(0, 3, 3 * LANES, 3 * LANES, stop_at=5)
    assert got["done"] == 0 and 0 < len(got["rows"]) < 9
