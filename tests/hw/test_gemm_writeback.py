"""GemmWriteback in Amaranth's simulator against an accumulator written in numpy.

Random GEMM micro-ops of the tiny preset (entry, reset or accumulate, products)
enter one per cycle or with bubbles, back to back on one entry as often as not; the
test plays the accumulator buffer (a registered read port that sees the write of
its cycle, the write-back as its write port) and the GEMM core (the products of the
micro-op at S2+L). Every entry must end as the sum of its micro-ops' products since
its last reset, wrapped to 32 bits: the read ahead of the write-back and the
forwarding of the write it cannot see. A write by another unit (the ALU) in the
cycle between must be forwarded too.
"""

from __future__ import annotations

import gc
import random
import warnings

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from tensorfab.hw.gemm_writeback import GemmWriteback
from tensorfab.isa import PRESETS

CFG = PRESETS["tiny"]
LANES = CFG.batch * CFG.block_out
DEPTH = 4  # entries the test uses: many micro-ops on the same entry


def pack(v: np.ndarray) -> int:
    return int.from_bytes(v.astype("<i4").tobytes(), "little")


def unpack(word: int) -> np.ndarray:
    return np.frombuffer(word.to_bytes(4 * LANES, "little"), dtype="<i4").copy()


def run(uops: list, latency: int, foreign: dict[int, tuple[int, np.ndarray]]) -> np.ndarray:
    """Issue ``uops`` ((entry, reset, products) or None for a bubble), one a cycle;
    ``foreign``: cycle -> (entry, value) written by another unit in that cycle (only
    in cycles the write-back does not write). The accumulator at the end."""
    dut = GemmWriteback(CFG, latency)
    mem = np.zeros((DEPTH, LANES), dtype=np.int32)

    async def bench(ctx) -> None:
        pipe: list = [None] * (latency + 1)  # the micro-op at S2+k
        read_data = 0
        for cycle in range(len(uops) + latency + 3):
            uop = uops[cycle] if cycle < len(uops) else None
            pipe = [uop, *pipe[:-1]]
            ctx.set(dut.valid, int(uop is not None))
            if uop is not None:
                ctx.set(dut.addr, uop[0])
                ctx.set(dut.reset, int(uop[1]))
            at_wb = pipe[latency]
            ctx.set(dut.products, [int(v) % (1 << 32) for v in at_wb[2]] if at_wb is not None
                    else [0] * LANES)
            ctx.set(dut.rd_data, read_data)
            rd = (ctx.get(dut.rd_en), ctx.get(dut.rd_addr))
            wb = (ctx.get(dut.wb_valid), ctx.get(dut.wb_addr), ctx.get(dut.wb_data))
            assert wb[0] == (at_wb is not None)
            write = None
            if wb[0]:
                assert wb[1] == at_wb[0]
                write = (wb[1], unpack(wb[2]))
                assert cycle not in foreign
            elif cycle in foreign:
                write = foreign[cycle]
            ctx.set(dut.acc_wr_en, int(write is not None))
            if write is not None:
                ctx.set(dut.acc_wr_addr, write[0])
                ctx.set(dut.acc_wr_data, pack(write[1]))
            await ctx.tick()
            # the buffer: a read sees the write of its own cycle (its data registered)
            if write is not None:
                mem[write[0]] = write[1]
            read_data = pack(mem[rd[1]]) if rd[0] else read_data

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return mem


def random_uops(rng: random.Random, n: int) -> list:
    out = []
    for _ in range(n):
        if rng.random() < 0.2:
            out.append(None)
            continue
        products = np.array([rng.randrange(-(1 << 31), 1 << 31) for _ in range(LANES)],
                            dtype=np.int64).astype(np.int32)
        out.append((rng.randrange(DEPTH), rng.random() < 0.15, products))
    return out


def reference(uops: list, foreign: dict, latency: int) -> np.ndarray:
    mem = np.zeros((DEPTH, LANES), dtype=np.int64)
    events = [(c + latency, u) for c, u in enumerate(uops) if u is not None]
    events += [(c, ("foreign", v)) for c, v in foreign.items()]
    for _, u in sorted(events, key=lambda e: e[0]):
        if u[0] == "foreign":
            entry, value = u[1]
            mem[entry] = value
        elif u[1]:
            mem[u[0]] = 0
        else:
            mem[u[0]] = (mem[u[0]] + u[2]) % (1 << 32)
    return ((mem + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


@pytest.mark.parametrize("latency", [2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_entries_sum_their_products(latency: int, seed: int) -> None:
    rng = random.Random(seed)
    uops = random_uops(rng, 60)
    assert np.array_equal(run(uops, latency, {}), reference(uops, {}, latency))


def test_a_foreign_write_in_between_is_forwarded() -> None:
    """Another unit writes entry 1 in the cycle between a micro-op's read and its
    write-back: the write-back adds to that value."""
    latency = 3
    p = np.arange(1, LANES + 1, dtype=np.int32)
    uops = [(1, False, p), None, None, None, None, (1, False, p), None, None, None]
    # micro-op 5 reads at cycle 5 + latency - 2 = 6 and writes back at 8
    foreign = {7: (1, np.full(LANES, 100, dtype=np.int32))}
    got = run(uops, latency, foreign)
    assert np.array_equal(got, reference(uops, foreign, latency))
    assert list(got[1]) == list(100 + p)


def test_latency_below_two_is_refused() -> None:
    with warnings.catch_warnings():  # the refused component is never elaborated
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="latency = 1") as excinfo:
            GemmWriteback(CFG, 1)
        del excinfo
        gc.collect()
