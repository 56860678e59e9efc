"""AluPipeline in Amaranth's simulator against the ALU's operations applied in order.

Random instructions of the tiny preset (an operation with a vector or an immediate
operand), their micro-ops issued back to back as the compute engine issues them:
never one that reads what one of the three before it writes (the engine holds those
back), so reads of what the fourth before writes meet S6's forwarding. The
accumulator entries the pipeline writes must be those of the operations applied one
after another (``sim/fsim_alu.alu_apply``). Also: ``drop`` and an out-of-range shift.
REQUANT, whose records come from the weight buffer, runs in the directed suite.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from tensorfab.hw.alu_pipeline import AluPipeline
from tensorfab.isa import PRESETS, AluOp
from tensorfab.isa.formats import IMM_WIDTH, MULHI_IMM_SHIFT
from tensorfab.sim.fsim_alu import alu_apply

CFG = PRESETS["tiny"]
LANES = CFG.batch * CFG.block_out
DEPTH = 8  # entries the test uses (of the buffer's acc_depth)
OPS = [op for op in AluOp if op is not AluOp.REQUANT]


def pack(v: np.ndarray) -> int:
    return int.from_bytes(v.astype("<i4").tobytes(), "little")


def unpack(word: int) -> np.ndarray:
    return np.frombuffer(word.to_bytes(4 * LANES, "little"), dtype="<i4").copy()


def operand(rng: random.Random, op: AluOp) -> tuple[bool, int]:
    """(use_imm, imm): shifts take an immediate in range; others either."""
    if op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL):
        return True, rng.randrange(32)
    if op is AluOp.CLIP:
        return True, rng.randrange(1 << (IMM_WIDTH - 1))
    if rng.random() < 0.5:
        return True, rng.randrange(-(1 << (IMM_WIDTH - 1)), 1 << (IMM_WIDTH - 1))
    return False, 0


def simulate(program: list, mem: np.ndarray, drop_at: int | None = None) -> dict:
    """Run ``program`` (instructions: (op, use_imm, imm, [(dst, src), ...])) with its
    micro-ops issued as early as the interlock allows; the memory the writes leave,
    each cycle's (issued micro-op, a3), the shift errors seen."""
    dut = AluPipeline(CFG)
    mem = mem.copy()
    seen: dict = {"a3": [], "issued": [], "shift_bad": 0, "writes": 0}

    async def bench(ctx) -> None:
        cycle = 0
        recent: list[int | None] = [None, None, None]  # dst issued 1, 2, 3 cycles ago

        async def clock(issue: tuple[int, int] | None, use_imm: bool) -> None:
            nonlocal cycle
            snapshot = mem.copy()
            drop = drop_at is not None and cycle >= drop_at
            ctx.set(dut.drop, int(drop))
            ctx.set(dut.issue, int(issue is not None))
            if issue is not None:
                dst, src = issue
                ctx.set(dut.dst, dst)
                ctx.set(dut.src, src)
                ctx.set(dut.dst_data, pack(snapshot[dst]))
                ctx.set(dut.src_data, pack(snapshot[src]))
                seen["issued"].append((cycle, dst, src, drop))
            seen["a3"].append((ctx.get(dut.a3_valid), ctx.get(dut.a3_addr)))
            seen["shift_bad"] += ctx.get(dut.shift_bad)
            write = (ctx.get(dut.wr_en), ctx.get(dut.wr_addr), ctx.get(dut.wr_data))
            await ctx.tick()
            ctx.set(dut.start, 0)
            if write[0]:
                mem[write[1]] = unpack(write[2])
                seen["writes"] += 1
            recent[:] = [issue[0] if issue else None, *recent[:2]]
            cycle += 1

        for op, use_imm, imm, uops in program:
            ctx.set(dut.start, 1)
            ctx.set(dut.insn_op, op)
            ctx.set(dut.insn_use_imm, int(use_imm))
            ctx.set(dut.insn_imm, imm)
            # the engine's first micro-op reaches S2 four cycles after the start
            for _ in range(4):
                await clock(None, use_imm)
            for dst, src in uops:
                reads = {dst} if use_imm else {dst, src}
                while reads & set(recent):  # the engine's interlock: a bubble
                    await clock(None, use_imm)
                await clock((dst, src), use_imm)
            while True:  # drain between instructions, as the engine does
                busy = ctx.get(dut.busy)
                await clock(None, use_imm)
                if not busy:
                    break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    seen["mem"] = mem
    return seen


def reference(program: list, mem: np.ndarray, dropped: set[int] | None = None) -> np.ndarray:
    mem = mem.copy()
    n = 0
    for op, use_imm, imm, uops in program:
        b_imm = imm << MULHI_IMM_SHIFT if op is AluOp.MULHI else imm
        for dst, src in uops:
            if dropped is None or n not in dropped:
                b = np.int64(b_imm) if use_imm else mem[src]
                mem[dst] = alu_apply(op, mem[dst], b)
            n += 1
    return mem


def random_program(rng: random.Random, insns: int) -> list:
    program = []
    for _ in range(insns):
        op = rng.choice(OPS)
        use_imm, imm = operand(rng, op)
        uops = [(rng.randrange(DEPTH), rng.randrange(DEPTH)) for _ in range(rng.randrange(1, 9))]
        program.append((op, use_imm, imm, uops))
    return program


def random_memory(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(-(1 << 31), 1 << 31, size=(DEPTH, LANES), dtype=np.int64).astype(np.int32)


@pytest.mark.parametrize("seed", range(4))
def test_micro_ops_as_the_operations_in_order(seed: int) -> None:
    rng = random.Random(seed)
    mem = random_memory(np.random.default_rng(seed))
    program = random_program(rng, 12)
    seen = simulate(program, mem)
    assert np.array_equal(seen["mem"], reference(program, mem))
    assert seen["writes"] == sum(len(u) for *_, u in program) and seen["shift_bad"] == 0
    # a3 is the micro-op issued the cycle before
    issued = {c: dst for c, dst, _, _ in seen["issued"]}
    for cycle, (valid, addr) in enumerate(seen["a3"]):
        assert valid == (cycle - 1 in issued)
        if valid:
            assert addr == issued[cycle - 1]


def test_forwarding_from_s6() -> None:
    """ADDs into one entry, each issued four cycles after the one before (the earliest
    the interlock lets it): each reads S6's result, not the buffer's older value."""
    mem = random_memory(np.random.default_rng(7))
    program = [(AluOp.ADD, True, 3, [(2, 0)] * 6), (AluOp.ADD, False, 0, [(5, 2)] * 3)]
    seen = simulate(program, mem)
    issued = [c for c, *_ in seen["issued"]]
    assert issued[1] - issued[0] == 4
    assert np.array_equal(seen["mem"], reference(program, mem))


def test_drop_stops_the_micro_ops_before_s5() -> None:
    """``drop`` from cycle k on: micro-ops issued at k-2 or later are never written,
    those before are."""
    mem = random_memory(np.random.default_rng(3))
    uops = [(k, k) for k in range(DEPTH)]
    program = [(AluOp.ADD, True, 1, uops)]
    seen = simulate(program, mem, drop_at=9)  # micro-ops issued from cycle 4 on
    written = {n for n, (cycle, *_rest) in enumerate(seen["issued"]) if cycle <= 9 - 3}
    assert np.array_equal(seen["mem"], reference(program, mem, dropped=set(range(8)) - written))
    assert seen["writes"] == len(written) == 3


def test_an_out_of_range_shift_is_not_written() -> None:
    mem = random_memory(np.random.default_rng(4))
    mem[1] = [1, 40, 2, 3]  # a shift amount past 31 in one lane
    program = [(AluOp.SHR, False, 0, [(0, 1)]), (AluOp.ADD, True, 1, [(3, 3)])]
    seen = simulate(program, mem)
    assert seen["shift_bad"] == 1 and seen["writes"] == 1
    expect = mem.copy()
    expect[3] = alu_apply(AluOp.ADD, mem[3], np.int64(1))
    assert np.array_equal(seen["mem"], expect)
