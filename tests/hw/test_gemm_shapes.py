"""GemmCore's operand packing on tile shapes the presets do not have, in Amaranth's
simulator, against numpy.

The packing groups a weight column into 64-bit halves and those into even and odd
bytes; shapes with fewer than eight output channels, a single input channel or
several batch rows take other branches of it than the presets do. The per-product
datapath (an ECP5 build's, one registered multiplier per product, here their model)
must give the same results at the same latency.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from tensorfab.hw.gemm import GemmCore
from tensorfab.isa import PRESETS, HwConfig

SHAPES = {
    "b2-i8-o2": dict(batch=2, block_in=8, block_out=2, mem_bus_width=16),
    "b4-i2-o16": dict(batch=4, block_in=2, block_out=16, mem_bus_width=8),
    "b1-i1-o1": dict(batch=1, block_in=1, block_out=1, mem_bus_width=8),
    "b1-i4-o32": dict(batch=1, block_in=4, block_out=32, mem_bus_width=32),
}


def _pack(values: np.ndarray, dtype: str) -> int:
    return int.from_bytes(np.ascontiguousarray(values, dtype=dtype).tobytes(), "little")


@pytest.mark.parametrize("per_product", [False, True], ids=["packed", "per-product"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gemm_core_packing_matches_numpy(shape: str, per_product: bool) -> None:
    cfg: HwConfig = PRESETS["tiny"].replace(**SHAPES[shape])
    dut = GemmCore(cfg, per_product=per_product)
    rng = np.random.default_rng(len(shape))
    si, sw, sa = (cfg.batch, cfg.block_in), (cfg.block_out, cfg.block_in), (cfg.batch,
                                                                             cfg.block_out)
    work = [(np.full(si, -128), np.full(sw, -128), np.full(sa, (1 << 31) - 1)),
            (np.full(si, 127), np.full(sw, -128), np.zeros(sa)),
            (np.full(si, -128), np.full(sw, 127), np.full(sa, -(1 << 31)))]
    work += [(rng.integers(-128, 128, si), rng.integers(-128, 128, sw),
              rng.integers(-(1 << 31), 1 << 31, sa)) for _ in range(5)]
    got: list[int] = []

    async def bench(ctx) -> None:
        for inp, wgt, acc in work:
            ctx.set(dut.inp.as_value(), _pack(inp, "<i1"))
            # the weight buffer's format: column-major, sign bits inverted
            ctx.set(dut.wgt.as_value(), _pack(wgt.T.astype(np.int8).view(np.uint8) ^ 0x80,
                                              "<u1"))
            ctx.set(dut.acc_in.as_value(), _pack(acc, "<i4"))
            ctx.set(dut.in_valid, 1)
            await ctx.tick()
            if ctx.get(dut.out_valid):
                got.append(ctx.get(dut.acc_out.as_value()))
        ctx.set(dut.in_valid, 0)
        for _ in range(dut.latency + 1):
            await ctx.tick()
            if ctx.get(dut.out_valid):
                got.append(ctx.get(dut.acc_out.as_value()))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(work)
    for (inp, wgt, acc), word in zip(work, got, strict=True):
        want = (acc.astype(np.int64) + inp.astype(np.int64) @ wgt.astype(np.int64).T) % (1 << 32)
        have = np.frombuffer(word.to_bytes(4 * cfg.batch * cfg.block_out, "little"),
                             "<u4").reshape(sa)
        np.testing.assert_array_equal(have, want)
