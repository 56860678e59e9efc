"""AluPipeline in Amaranth's simulator against the functional simulator's ALU.

Random ALU instructions (every operation, vector and immediate operands, REQUANT on
a config that has it), each a run of micro-ops on a handful of accumulator entries so
that most read what one just before them writes. Each micro-op enters at the
earliest cycle the issue's interlock would let it (four cycles after the last
micro-op writing an entry it reads: S7's results forwarded), or later. The operands
come from an accumulator array that the pipeline's own writes update (the buffer's
read ports are transparent to its write port). Every write, with its cycle, must be
the one of the micro-ops run in order through ``alu_apply``/``requant_apply``
(``tensorfab.sim.fsim_alu``, the functional simulator's ALU); a shift out of range
raises ``shift_error`` and writes nothing. With ``error`` raised at a random cycle,
the micro-ops at S2 to S5 then are dropped and the one at S6 is written.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.sim import Simulator

from tensorfab.hw.alu_pipeline import AluPipeline
from tensorfab.hw.signatures import WGT_OFFSET, wgt_entry_order
from tensorfab.isa import PRESETS, AluOp, HwConfig
from tensorfab.isa.formats import (
    ALU_INTERLOCK_DISTANCE,
    ALU_PIPELINE_STAGES,
    MAX_SHIFT,
    REQUANT_MAX_SHIFT,
    SHIFT_OPS,
    alu_imm_operand,
    alu_requant_supported,
)
from tensorfab.isa.requant_record import pack_requant_records, unpack_requant_records
from tensorfab.sim.fsim_alu import alu_apply, requant_apply

#: Accumulator entries the micro-ops use (few: most micro-ops depend on the one ahead).
ENTRIES = 5
#: Weight entries holding REQUANT records.
RECORDS = 3
#: Cycles from a micro-op's entry at S2 to its write at S7.
WRITE_DELAY = ALU_PIPELINE_STAGES
INT32 = (-(1 << 31), (1 << 31) - 1)


@dataclass
class Uop:
    """One ALU micro-op: its entries, its record entry, and its S2 cycle."""

    dst: int
    src: int
    wgt: int
    cycle: int = 0


@dataclass
class Insn:
    op: AluOp
    use_imm: bool
    imm: int
    uops: list[Uop]
    start: int = 0


def lanes(cfg: HwConfig) -> int:
    return cfg.batch * cfg.block_out


def entry_bits(values: np.ndarray) -> int:
    """An accumulator entry (int32 lanes, lane 0 lowest) as an integer."""
    return sum((int(v) & 0xFFFF_FFFF) << (32 * k) for k, v in enumerate(values.reshape(-1)))


def entry_values(bits: int, n: int) -> np.ndarray:
    u = np.array([(bits >> (32 * k)) & 0xFFFF_FFFF for k in range(n)], dtype=np.int64)
    return np.where(u >= 1 << 31, u - (1 << 32), u)


def wgt_bits(cfg: HwConfig, tile: np.ndarray) -> int:
    """A weight tile (``block_out × block_in`` int8) as the buffer stores it."""
    out = 0
    flat = tile.reshape(-1)
    for src, dst in enumerate(wgt_entry_order(cfg)):
        out |= ((int(flat[src]) + WGT_OFFSET) & 0xFF) << (8 * dst)
    return out


def random_values(rng: random.Random, n: int, shift: bool) -> np.ndarray:
    if shift:
        return np.array([rng.randint(-2, MAX_SHIFT + 3) if rng.random() < 0.05
                         else rng.randint(0, MAX_SHIFT) for _ in range(n)], dtype=np.int64)
    edges = [INT32[0], INT32[0] + 1, -1, 0, 1, INT32[1]]
    return np.array([rng.choice(edges) if rng.random() < 0.2 else rng.randint(*INT32)
                     for _ in range(n)], dtype=np.int64)


def random_records(cfg: HwConfig, rng: random.Random) -> np.ndarray:
    """A weight entry of REQUANT records; now and then a shift past REQUANT_MAX_SHIFT."""
    n = cfg.block_out
    lo = np.array([rng.randint(-128, 0) for _ in range(n)])
    rows = pack_requant_records(
        cfg, multiplier=[rng.randint(0, (1 << 31) - 1) for _ in range(n)],
        bias=[rng.randint(*INT32) for _ in range(n)],
        shift=[rng.randint(0, REQUANT_MAX_SHIFT) for _ in range(n)],
        zero_point=[rng.randint(-128, 127) for _ in range(n)], lo=lo,
        hi=[rng.randint(int(v), 127) for v in lo])[0]
    if rng.random() < 0.2:
        rows.view(np.uint8)[rng.randrange(n), 8] = rng.randint(REQUANT_MAX_SHIFT + 1, 255)
    return rows


def shift_error(op: AluOp, b: np.ndarray | int, rows: np.ndarray) -> bool:
    """docs/isa.md's SHIFT_RANGE: a shift by a lane outside 0..MAX_SHIFT, or a REQUANT
    record whose shift is past REQUANT_MAX_SHIFT."""
    if op is AluOp.REQUANT:
        return bool((unpack_requant_records(rows)["shift"] > REQUANT_MAX_SHIFT).any())
    b = np.asarray(b)
    return op in SHIFT_OPS and bool(((b < 0) | (b > MAX_SHIFT)).any())


def program(cfg: HwConfig, rng: random.Random, count: int) -> list[Insn]:
    """Random instructions, scheduled: each micro-op enters S2 no sooner than the
    interlock allows (often exactly then), instructions one after the other with the
    pipeline drained between them."""
    ops = [op for op in AluOp if op is not AluOp.REQUANT or alu_requant_supported(cfg)]
    out = []
    cycle = 1
    for _ in range(count):
        op = rng.choice(ops)
        use_imm = op is not AluOp.REQUANT and rng.random() < 0.3
        imm = rng.randint(-2, MAX_SHIFT + 2) if op in SHIFT_OPS else rng.randint(-32768, 32767)
        insn = Insn(op, use_imm, imm, [], start=cycle)
        cycle += 1
        written: dict[int, int] = {}  # entry → the cycle its last writer entered S2
        for _ in range(rng.randint(1, 12)):
            u = Uop(rng.randrange(ENTRIES), rng.randrange(ENTRIES), rng.randrange(RECORDS))
            reads = [u.dst] + ([u.src] if not use_imm and op is not AluOp.REQUANT else [])
            earliest = max([cycle] + [written[e] + ALU_INTERLOCK_DISTANCE
                                      for e in reads if e in written])
            u.cycle = earliest + (0 if rng.random() < 0.7 else rng.randint(1, 3))
            written[u.dst] = u.cycle
            cycle = u.cycle + 1
            insn.uops.append(u)
        cycle += WRITE_DELAY + rng.randint(0, 2)  # drained
        out.append(insn)
    return out


def expected(cfg: HwConfig, insns: list[Insn], acc: np.ndarray, wgt: np.ndarray,
             error_at: int) -> dict[str, dict[int, object]]:
    """What the pipeline must do, by cycle: the writes, ``shift_error``, S3 and
    ``busy``; the micro-ops run in order on a copy of ``acc``."""
    acc = acc.copy()
    shape = (cfg.batch, cfg.block_out)
    out: dict[str, dict[int, object]] = {"writes": {}, "shift": {}, "a3": {}, "busy": {}}
    for insn in insns:
        for u in insn.uops:
            t = u.cycle
            a = acc[u.dst].reshape(shape)
            if insn.op is AluOp.REQUANT:
                b, result = 0, requant_apply(a, wgt[u.wgt])
            else:
                b = alu_imm_operand(insn.op, insn.imm) if insn.use_imm \
                    else acc[u.src].reshape(shape)
                result = alu_apply(insn.op, a, b)
            bad = shift_error(insn.op, b, wgt[u.wgt])
            # S3 (the entries registered), S4 (the operands), the ALU's second and
            # third cycle, the write: each reached unless the error came before
            stages = {t + 1: error_at > t, t + 2: error_at > t + 1, t + 3: error_at > t + 2,
                      t + 4: error_at > t + 2, t + 5: error_at > t + 3 and not bad}
            if error_at > t:
                out["a3"][t + 1] = u.dst
            for c, busy in stages.items():
                if busy:
                    out["busy"][c] = 1
            if bad and error_at > t + 2:
                out["shift"][t + 4] = 1
            if stages[t + 5]:
                acc[u.dst] = result.reshape(-1)
                out["writes"][t + 5] = (u.dst, entry_bits(acc[u.dst]))
    return out


def run(cfg: HwConfig, seed: int, count: int, error_after: int | None = None) -> int:
    """Run ``count`` random instructions; with ``error_after``, ``error`` rises that many
    cycles after a random micro-op enters S2. Returns the number of writes."""
    rng = random.Random(seed)
    n = lanes(cfg)
    insns = program(cfg, rng, count)
    last = insns[-1].uops[-1].cycle + WRITE_DELAY + 3
    error_at = last + 1
    if error_after is not None:
        error_at = rng.choice([u for insn in insns for u in insn.uops]).cycle + error_after
    acc = np.stack([random_values(rng, n, False) for _ in range(ENTRIES)])
    if alu_requant_supported(cfg):
        wgt = np.stack([random_records(cfg, rng) for _ in range(RECORDS)])
    else:
        wgt = np.array([rng.randint(-128, 127) for _ in range(RECORDS * cfg.block_out
                                                             * cfg.block_in)],
                       dtype=np.int8).reshape(RECORDS, cfg.block_out, cfg.block_in)
    for insn in insns:  # shift amounts in the entries that shifts read
        if insn.op in SHIFT_OPS and not insn.use_imm:
            for u in insn.uops:
                if rng.random() < 0.5:
                    acc[u.src] = random_values(rng, n, True)
    want = expected(cfg, insns, acc, wgt, error_at)
    starts = {insn.start: insn for insn in insns}
    entering = {u.cycle: u for insn in insns for u in insn.uops}
    dut = AluPipeline(cfg)
    got: dict[str, dict[int, object]] = {"writes": {}, "shift": {}, "a3": {}, "busy": {}}
    buffer = acc.copy()

    async def bench(ctx) -> None:
        en_next = 0
        dst_reg = 0
        for cycle in range(last + 1):
            insn = starts.get(cycle)
            ctx.set(dut.start, insn is not None)
            if insn is not None:
                ctx.set(dut.op, insn.op)
                ctx.set(dut.use_imm, insn.use_imm)
                ctx.set(dut.imm, insn.imm)
            else:  # the fields change after the start: registered
                ctx.set(dut.op, rng.randrange(16))
                ctx.set(dut.use_imm, rng.randrange(2))
                ctx.set(dut.imm, rng.randint(-32768, 32767))
            u = entering.get(cycle)
            ctx.set(dut.valid, u is not None)
            ctx.set(dut.error, cycle >= error_at)
            dst, src = (u.dst, u.src) if u is not None else (rng.randrange(ENTRIES),) * 2
            ctx.set(dut.dst, dst)
            ctx.set(dut.src, src)
            # the engine's register of the destination read: at S3, the entry at S2
            ctx.set(dut.s3_dst_data, dst_reg)
            dst_reg = entry_bits(buffer[dst])
            ctx.set(dut.src_data, entry_bits(buffer[src]))
            ctx.set(dut.rec, wgt_bits(cfg, wgt[u.wgt if u is not None else 0]))
            assert ctx.get(dut.acc_wr.en) == en_next, f"cycle {cycle}: acc_wr_next"
            en_next = ctx.get(dut.acc_wr_next)
            if ctx.get(dut.acc_wr.en):
                addr, bits = ctx.get(dut.acc_wr.addr), ctx.get(dut.acc_wr.data)
                got["writes"][cycle] = (addr, bits)
                buffer[addr] = entry_values(bits, n)
            if ctx.get(dut.shift_error):
                got["shift"][cycle] = 1
            if ctx.get(dut.a3_valid):
                got["a3"][cycle] = ctx.get(dut.a3_dst)
            if ctx.get(dut.busy):
                got["busy"][cycle] = 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for key in want:
        assert got[key] == want[key], key
    return len(want["writes"])


@pytest.mark.parametrize("seed", range(3))
def test_tiny_against_the_functional_alu(seed: int) -> None:
    assert run(PRESETS["tiny"], seed, count=20) > 50


def test_default_with_requant() -> None:
    cfg = PRESETS["default"]
    assert alu_requant_supported(cfg)
    assert run(cfg, 7, count=14) > 20


@pytest.mark.parametrize("after", range(6))
def test_error_drops_s2_to_s5(after: int) -> None:
    """``error`` rising 0..5 cycles after a micro-op enters: it is dropped at S2, S3,
    S4, S5, or written from S6 and S7."""
    for seed in range(3):
        run(PRESETS["tiny"], 100 + seed, count=4, error_after=after)
