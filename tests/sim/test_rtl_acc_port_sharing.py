"""The accumulators' shared write port on the RTL: an accumulator LOAD running while the
compute engine zeroes entries (a fast reset), resets them through the pipeline and
adds to them with the ALU, on other entries and with no token between them, so that
the load engine's writes wait on the compute engine's (the load registers whether the
port is taken from the compute engine's next claim of it). The DRAM image after the
program must equal the functional simulator's; the random programs rarely run a LOAD
beside a fast reset."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    Gemm,
    HwConfig,
    Load,
    Program,
    ProgramBuilder,
    Segment,
    Store,
    Uop,
)
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import MemoryTiming, RtlSimulator

#: (entries the LOAD writes, fast-reset lines, the line's stride, entries per line)
SHAPES = ((40, 60, 1, 1), (30, 20, 3, 2), (60, 40, 2, 1), (20, 8, 9, 9))
TIMINGS = (MemoryTiming(), MemoryTiming(read_latency=1, bandwidth=64, max_outstanding=16),
           MemoryTiming(read_latency=3, bandwidth=2))


def overlapping_program(cfg: HwConfig, rng: np.random.Generator, n: int, lines: int,
                        stride: int, per_line: int) -> Program:
    """An accumulator LOAD of ``n`` entries, then without waiting for it a fast reset
    of ``lines`` lines (``per_line`` entries, ``stride`` apart) above them, ALU adds
    and a pipelined reset there, and a STORE of everything after all of it."""
    lanes = (cfg.batch, cfg.block_out)
    x = rng.integers(-2**31, 2**31 - 1, size=(n, *lanes), dtype=np.int64).astype(np.int32)
    base = n + 4
    span = (lines - 1) * stride + per_line
    assert base + span + 8 < cfg.acc_depth
    b = ProgramBuilder(cfg)
    b.add_segment(Segment("X", "int32", x.shape, x))
    b.add_segment(Segment("out", "int8", (cfg.acc_depth - 1, *lanes), output=True))
    fast = b.add_uops([Uop(acc=base)])[0]
    alu = b.add_uops([Uop(acc=base + k, src=base + k) for k in range(4)])
    relay = b.add_uops([Uop(acc=cfg.acc_depth - 1)])[0]
    b.load_uops(push_next=True)
    b.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=n, stride=n, push_next=True),
           segment="X")
    # the fast reset's form: one micro-op, acc_factor_in 1, every other factor 0
    b.emit(Gemm(reset=True, uop_begin=fast, uop_end=fast + 1, iter_out=lines,
                iter_in=per_line, acc_factor_out=stride, acc_factor_in=1, pop_prev=True))
    b.emit(Alu(op=AluOp.ADD, use_imm=True, imm=5, uop_begin=alu[0], uop_end=alu[1],
               iter_out=3, iter_in=1))
    # two micro-ops: a reset through the pipeline, not the fast form
    b.emit(Gemm(reset=True, uop_begin=alu[0], uop_end=alu[0] + 2, iter_out=4, iter_in=2,
                acc_factor_out=2, acc_factor_in=1))
    b.emit(Alu(op=AluOp.ADD, use_imm=True, imm=7, uop_begin=alu[0], uop_end=alu[1],
               iter_out=2, iter_in=1))
    # the LOAD's token reaches the STORE through a GEMM that waits for it
    b.emit(Gemm(reset=True, uop_begin=relay, uop_end=relay + 1, pop_prev=True,
                push_next=True))
    b.emit(Store(sram=0, dram=0, y=1, x=base + span, stride=base + span, pop_prev=True),
           segment="out")
    return b.build()


@pytest.mark.parametrize("timing", TIMINGS, ids=["default", "fast", "slow"])
@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_acc_load_beside_compute_writes(preset: str, timing: MemoryTiming) -> None:
    cfg = PRESETS[preset]
    rng = np.random.default_rng(1)
    sim = RtlSimulator(timing)
    for n, lines, stride, per_line in SHAPES:
        n = min(n, cfg.acc_depth // 4)
        lines = min(lines, cfg.acc_depth // (4 * stride))
        program = overlapping_program(cfg, rng, n, lines, stride, per_line)
        want = FunctionalSimulator().run(program).dram
        got = sim.run(program).dram
        assert np.array_equal(got, want), (n, lines, stride, per_line)
