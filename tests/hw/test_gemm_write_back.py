"""GemmWriteBack in Amaranth's simulator against a numpy accumulator array.

Random GEMM micro-ops (an entry of a few, ``reset`` now and then, random products;
zero for a resetting one, as the GEMM core's ``in_clear`` makes them), mostly back to
back, so that most accumulate into an entry one, two or three micro-ops ahead wrote:
the write-back reads the entry three cycles before it writes, takes its own sums for
the two writes in between and relies on the read port's transparency for the one
before. The accumulator buffer is emulated (a synchronous read port transparent to
the write port, which takes the block's own writes, and the engine's register of the
read data); each write, with its cycle, must
be ``0 if reset else acc[a] + products`` (int32 lanes, wrapping) of the micro-ops
applied in order to a numpy array.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from tensorfab.hw.gemm import GemmCore
from tensorfab.hw.gemm_write_back import GemmWriteBack
from tensorfab.isa import PRESETS, HwConfig

#: Accumulator entries the micro-ops use.
ENTRIES = 3
INT32 = (-(1 << 31), (1 << 31) - 1)


def entry_bits(values: np.ndarray) -> int:
    return sum((int(v) & 0xFFFF_FFFF) << (32 * k) for k, v in enumerate(values))


def entry_values(bits: int, n: int) -> np.ndarray:
    u = np.array([(bits >> (32 * k)) & 0xFFFF_FFFF for k in range(n)], dtype=np.int64)
    return np.where(u >= 1 << 31, u - (1 << 32), u)


def run(cfg: HwConfig, latency: int, seed: int, count: int = 60) -> int:
    """Drive ``count`` random micro-ops; returns how many wrote."""
    rng = random.Random(seed)
    lanes = cfg.batch * cfg.block_out
    # (S2 cycle, entry, reset, products)
    uops = []
    cycle = 1
    for _ in range(count):
        cycle += 0 if rng.random() < 0.7 else rng.randint(1, latency + 1)
        products = np.array([rng.choice([INT32[0], INT32[1], rng.randint(*INT32)])
                             for _ in range(lanes)], dtype=np.int64)
        reset = rng.random() < 0.15
        uops.append((cycle, rng.randrange(ENTRIES), reset, products * (not reset)))
        cycle += 1
    last = cycle + latency + 2
    acc = np.array([[rng.randint(*INT32) for _ in range(lanes)] for _ in range(ENTRIES)],
                   dtype=np.int64)

    # the reference: the micro-ops in order
    golden = acc.copy()
    want_writes: dict[int, tuple[int, int]] = {}
    want_busy: set[int] = set()
    for t, entry, reset, products in uops:
        total = np.zeros(lanes, dtype=np.int64) if reset else golden[entry] + products
        golden[entry] = (total + (1 << 31)) % (1 << 32) - (1 << 31)
        want_writes[t + latency] = (entry, entry_bits(golden[entry]))
        want_busy |= set(range(t, t + latency + 1))

    entering = {t: (entry, reset) for t, entry, reset, _ in uops}
    writing = {t + latency: products for t, _, _, products in uops}
    dut = GemmWriteBack(cfg, latency)
    buffer = acc.copy()
    got_writes: dict[int, tuple[int, int]] = {}
    got_busy: set[int] = set()

    async def bench(ctx) -> None:
        read_data = fetched = 0
        en_next = 0
        for cycle in range(last):
            entry, reset = entering.get(cycle, (rng.randrange(ENTRIES), rng.random() < 0.5))
            ctx.set(dut.valid, cycle in entering)
            ctx.set(dut.addr, entry)
            ctx.set(dut.reset, reset)
            products = writing.get(cycle)
            for k in range(lanes):
                ctx.set(dut.products[k], int(products[k]) if products is not None
                        else rng.randint(*INT32))
            ctx.set(dut.fetched, fetched)  # the engine's register of the read data
            fetched = read_data
            # the engine's write port: this block's write (nothing else writes while
            # GEMM micro-ops are in flight)
            en = ctx.get(dut.acc_wr.en)
            assert en == en_next, f"cycle {cycle}: acc_wr_next was not the next en"
            en_next = ctx.get(dut.acc_wr_next)
            addr, data = ctx.get(dut.acc_wr.addr), ctx.get(dut.acc_wr.data)
            if en:
                got_writes[cycle] = (addr, data)
                buffer[addr] = entry_values(data, lanes)
            if ctx.get(dut.busy):
                got_busy.add(cycle)
            if ctx.get(dut.acc_rd.en):  # transparent: this cycle's write is seen
                read_data = entry_bits(buffer[ctx.get(dut.acc_rd.addr)])
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got_writes == want_writes
    assert got_busy == want_busy
    assert (buffer == golden).all()
    return len(got_writes)


@pytest.mark.parametrize("latency", [3, GemmCore.pipeline_latency(PRESETS["tiny"]), 6])
@pytest.mark.parametrize("seed", range(2))
def test_accumulates_in_order(latency: int, seed: int) -> None:
    assert run(PRESETS["tiny"], latency, seed) == 60


def test_default_config() -> None:
    cfg = PRESETS["default"]
    assert run(cfg, GemmCore.pipeline_latency(cfg), 5, count=40) == 40


def test_latency_below_three_refused() -> None:
    with pytest.raises(ValueError, match="latency = 2; at least 3"):
        GemmWriteBack(PRESETS["tiny"], 2)
