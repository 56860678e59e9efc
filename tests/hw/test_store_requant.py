"""StoreRequant in Amaranth's simulator against Python integers.

The three record words are loaded one a cycle (as the store engine reads them), then
random entries (the int32 edges among them) go in with gaps and back to back, and a
flush drops the ones in flight. Each entry must come out STORE_REQUANT_LATENCY cycles
later as every lane's ``clamp(RDBPOT((a + bias) · M, shift) + zp, lo, hi)`` low byte
with its channel's record; ``shift_bad`` must say whether any record's shift is past 62.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator
from support.requant_cases import INT32_MAX, INT32_MIN, requant_reference

from tensorfab.hw.store_requant import STORE_REQUANT_LATENCY, StoreRequant
from tensorfab.isa import PRESETS
from tensorfab.isa.requant_record import pack_requant_acc_records

INT32 = (INT32_MIN, INT32_MAX)


def bits(values: np.ndarray) -> int:
    return sum((int(v) & 0xFFFF_FFFF) << (32 * k) for k, v in enumerate(values.ravel()))


@pytest.mark.parametrize(("preset", "bad_shift"), [("default", False), ("default", True),
                                                   ("large", False)])
def test_store_requant_against_python_integers(preset: str, bad_shift: bool) -> None:
    cfg = PRESETS[preset]
    rng = random.Random(5)
    bo = cfg.block_out
    f = {"multiplier": [rng.choice([0, 1 << 30, INT32[1], rng.randint(0, INT32[1])])
                        for _ in range(bo)],
         "bias": [rng.randint(*INT32) for _ in range(bo)],
         "shift": [rng.choice([0, 1, 31, 62, rng.randint(0, 62)]) for _ in range(bo)],
         "zero_point": [rng.randint(-128, 127) for _ in range(bo)]}
    f["lo"] = [rng.randint(-128, 127) for _ in range(bo)]
    f["hi"] = [rng.randint(lo, 127) for lo in f["lo"]]
    for k, v in {"multiplier": 1, "bias": 0, "shift": 1, "zero_point": 0, "lo": -128,
                 "hi": 127}.items():
        f[k][0] = v  # channel 0 halves its odd accumulators: a tie each
    words = pack_requant_acc_records(cfg, **f)  # (3, batch, block_out)
    if bad_shift:
        words[2, 0, bo - 1] = (int(words[2, 0, bo - 1]) & ~0xFF) | 63
    lanes = cfg.batch * bo
    entries = [np.array([rng.choice([INT32[0], INT32[1], 0, -1, rng.randint(*INT32)])
                         for _ in range(lanes)], dtype=np.int64) for _ in range(40)]
    for e in entries:
        e[0] = rng.randrange(-255, 256, 2)  # odd: channel 0 rounds a tie
    # the cycles entries go in (gaps and runs), and a flush a cycle after entry 30's
    schedule, cycle = [], 4
    for _ in entries:
        cycle += 1 if rng.random() < 0.6 else rng.randint(2, 4)
        schedule.append(cycle)
    flush_at = schedule[30] + 1
    want = {}
    for t, e in zip(schedule, entries, strict=True):
        if t + STORE_REQUANT_LATENCY > flush_at and t <= flush_at:
            continue  # in flight at the flush: dropped
        out = [requant_reference(int(a), *(f[k][i % bo] for k in ("multiplier", "bias", "shift",
                                                          "zero_point", "lo", "hi")))
               for i, a in enumerate(e)]
        want[t + STORE_REQUANT_LATENCY] = bytes(v & 0xFF for v in out)
    dut = StoreRequant(cfg)
    got: dict[int, bytes] = {}
    shift_bad: list[int] = []
    going = dict(zip(schedule, entries, strict=True))

    async def bench(ctx) -> None:
        for k in range(3):  # the records, one a cycle, as the store engine reads them
            ctx.set(dut.acc, bits(words[k]))
            ctx.set(dut.rec_load, 1 << k)
            await ctx.tick()
        ctx.set(dut.rec_load, 0)
        for cycle in range(3, schedule[-1] + STORE_REQUANT_LATENCY + 3):
            e = going.get(cycle)
            ctx.set(dut.in_valid, e is not None)
            ctx.set(dut.acc, bits(e) if e is not None else rng.getrandbits(32 * lanes))
            ctx.set(dut.flush, cycle == flush_at)
            if ctx.get(dut.out_valid):
                got[cycle] = int(ctx.get(dut.out)).to_bytes(lanes, "little")
            shift_bad.append(ctx.get(dut.shift_bad))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert set(shift_bad) == {int(bad_shift)}
    if bad_shift:
        return  # the store engine stops such a STORE before its entries
    assert got == want
