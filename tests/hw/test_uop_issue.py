"""UopIssue in Amaranth's simulator against the micro-ops it is given.

The testbench plays the compute engine around the block: it steps through a list of
micro-ops (word and loop offsets) while ``hold`` is low, emulates the micro-op
buffer's registered read and the ALU pipeline's S3 register, and raises ``error``
as the engine's error register does. Checked on every cycle, against the micro-ops
in order: each leaves at S2 once, in order, with its index sums; the buffer reads at
S1C are those of the micro-op there; ``hold`` is high exactly when that micro-op is
an ALU op in range that reads the entry one of the micro-ops at S2, S3 or S4 writes
(so it reaches S2 four cycles after that writer), and a micro-op at S1C not held
reaches S2 on the next cycle. Range errors: the first out-of-range micro-op raises
``uop_bad`` or ``range_bad`` at S1C and none after it leaves; fields an instruction
does not use are not checked.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import pytest
from amaranth.sim import Simulator

from tensorfab.hw.layouts import uop_layout
from tensorfab.hw.uop_issue import UopIssue
from tensorfab.hw.uop_loop import INDEX_WIDTH
from tensorfab.isa import PRESETS, HwConfig

CFG = PRESETS["tiny"]
#: Cycles from a micro-op's S2 to the ALU's S4 (the interlock's reach).
INTERLOCK_REACH = 3


@dataclass
class Insn:
    """An instruction's kind and its micro-ops: ``(acc, src, wgt)`` fields and the
    loop offsets added to them."""

    gemm: bool
    reset: bool = False
    use_imm: bool = False
    requant: bool = False
    uops: list[tuple[tuple[int, int, int], tuple[int, int, int]]] = field(default_factory=list)

    @property
    def src_used(self) -> bool:  # docs/isa.md: fields an instruction does not use
        return not self.reset if self.gemm else not self.use_imm and not self.requant

    @property
    def wgt_used(self) -> bool:
        return not self.reset if self.gemm else self.requant


def indices(uop: tuple[tuple[int, int, int], tuple[int, int, int]]) -> tuple[int, ...]:
    """The destination, source and weight indices of a micro-op."""
    fields, offsets = uop
    return tuple((f + o) % (1 << INDEX_WIDTH) for f, o in zip(fields, offsets, strict=True))


def check(cfg: HwConfig, insn: Insn, uop: tuple) -> tuple[bool, bool]:
    """The range checks of a micro-op at S1C: its source field past the source buffer
    (``uop_bad``, the engine's ``UOP_RANGE``), an index past its buffer
    (``range_bad``, ``SRAM_RANGE``; the engine takes ``uop_bad`` first)."""
    src_depth = cfg.inp_depth if insn.gemm else cfg.acc_depth
    a, s, w = indices(uop)
    return (insn.src_used and uop[0][1] >= src_depth,
            a >= cfg.acc_depth or (insn.src_used and s >= src_depth)
            or (insn.wgt_used and w >= cfg.wgt_depth))


def word(cfg: HwConfig, fields: tuple[int, int, int]) -> int:
    layout = uop_layout(cfg)
    return sum(v << layout[name].offset for name, v in zip(("acc", "src", "wgt"), fields,
                                                           strict=True))


def run(cfg: HwConfig, insns: list[Insn], seed: int) -> dict:
    """Issue ``insns`` one after the other (the pipeline drained between them) and
    check every cycle; returns what left at S2 and the error raised, if any."""
    rng = random.Random(seed)
    dut = UopIssue(cfg)
    mask = (1 << cfg.acc_bits) - 1
    out: dict = {"s2": [], "error": None}

    async def bench(ctx) -> None:
        error = False
        cycle = 0
        a3 = (False, 0)  # the ALU pipeline's S3: (valid, entry)
        s2_history: list[tuple[int, int]] = []  # (cycle, entry) of ALU micro-ops at S2
        for insn in insns:
            ctx.set(dut.start, 1)
            ctx.set(dut.is_gemm, insn.gemm)
            ctx.set(dut.is_alu, not insn.gemm)
            ctx.set(dut.is_requant, insn.requant)
            ctx.set(dut.is_reset, insn.reset)
            ctx.set(dut.src_used, insn.src_used)
            ctx.set(dut.wgt_used, insn.wgt_used)
            await ctx.tick()
            cycle += 1
            ctx.set(dut.start, 0)
            for name in ("is_gemm", "is_alu", "is_reset", "is_requant", "src_used",
                         "wgt_used"):
                ctx.set(getattr(dut, name), rng.randrange(2))  # registered at the start
            stepped = 0  # micro-ops read
            left = 0  # micro-ops out at S2
            ram_out = rng.randrange(1 << len(dut.uop_data))
            at = 0  # the micro-op at S1C (the next one to get there)
            moves_on: int | None = None  # the micro-op reaching S2 on the next cycle
            while True:
                if (stepped == len(insn.uops) or error) and not ctx.get(dut.busy):
                    break
                ctx.set(dut.uop_data, ram_out)
                ctx.set(dut.a3_valid, a3[0])
                ctx.set(dut.a3_dst, a3[1])
                ctx.set(dut.error, error)
                hold = ctx.get(dut.hold)
                running = stepped < len(insn.uops) and not error
                ctx.set(dut.stepping, running and not hold)
                ctx.set(dut.issuing, running and not hold)
                if running:
                    offsets = insn.uops[stepped][1]
                    for k in range(3):
                        ctx.set(dut.offsets[k], offsets[k])
                else:
                    for k in range(3):
                        ctx.set(dut.offsets[k], rng.randrange(1 << 16))
                # S2: the micro-op that left S1C on the previous cycle
                s2_valid = ctx.get(dut.s2_valid)
                assert s2_valid == (moves_on is not None), f"cycle {cycle}: S1C to S2"
                if s2_valid:
                    assert not error, f"cycle {cycle}: a micro-op left after the error"
                    a, s, _w = indices(insn.uops[moves_on])
                    got = (ctx.get(dut.s2_dst), ctx.get(dut.s2_src), ctx.get(dut.s2_alu),
                           ctx.get(dut.s2_reset))
                    assert got == (a & mask, s & mask, not insn.gemm,
                                   insn.gemm and insn.reset), f"cycle {cycle}: S2"
                    out["s2"].append(cycle)
                    if not insn.gemm:
                        s2_history.append((cycle, a & mask))
                    left += 1
                # S1C: the reads and the interlock of the micro-op there
                at_s1c = ctx.get(dut.inp_rd.en) if insn.gemm else ctx.get(dut.dst_rd.en)
                want_hold = False
                if at_s1c:
                    uop = insn.uops[at]
                    a, s, w = indices(uop)
                    reads = {
                        "inp_rd": (insn.gemm, s % (1 << cfg.inp_bits)),
                        "wgt_rd": (insn.gemm or insn.requant, w % (1 << cfg.wgt_bits)),
                        "src_rd": (not insn.gemm, s & mask),
                        "dst_rd": (not insn.gemm, a & mask)}
                    for name, (en, addr) in reads.items():
                        port = getattr(dut, name)
                        assert ctx.get(port.en) == en, f"cycle {cycle}: {name}.en"
                        if en:
                            assert ctx.get(port.addr) == addr, f"cycle {cycle}: {name}.addr"
                    uop_bad, range_bad = check(cfg, insn, uop)
                    assert ctx.get(dut.uop_bad) == uop_bad, f"cycle {cycle}: uop_bad"
                    assert ctx.get(dut.range_bad) == range_bad, f"cycle {cycle}: range_bad"
                    bad = uop_bad or range_bad
                    if bad and not error:
                        out["error"] = (at, "uop_bad" if uop_bad else "range_bad")
                    entries = {a & mask} | ({s & mask} if insn.src_used else set())
                    want_hold = (not insn.gemm and not bad
                                 and any(t >= cycle - 2 and e in entries
                                         for t, e in s2_history))
                else:
                    assert not ctx.get(dut.uop_bad) and not ctx.get(dut.range_bad)
                    for name in ("inp_rd", "wgt_rd", "src_rd", "dst_rd"):
                        assert not ctx.get(getattr(dut, name).en), f"cycle {cycle}: {name}"
                assert hold == want_hold, f"cycle {cycle}: hold"
                moves_on = None
                if at_s1c and not hold:  # it leaves S1C: to S2, or dropped
                    if not (error or ctx.get(dut.uop_bad) or ctx.get(dut.range_bad)):
                        moves_on = at
                    at += 1
                if ctx.get(dut.stepping):
                    ram_out = word(cfg, insn.uops[stepped][0])
                    stepped += 1
                next_a3 = (bool(s2_valid) and not insn.gemm and not error,
                           ctx.get(dut.s2_dst) if s2_valid and not insn.gemm else a3[1])
                error = error or ctx.get(dut.uop_bad) or ctx.get(dut.range_bad)
                await ctx.tick()
                cycle += 1
                a3 = next_a3
            if out["error"] is None:
                assert left == len(insn.uops)
            else:
                assert left == out["error"][0]
                break
            for _ in range(rng.randrange(3)):
                await ctx.tick()
                cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def random_insn(cfg: HwConfig, rng: random.Random, entries: int = 4) -> Insn:
    """Micro-ops on a few entries (the interlock), in range."""
    gemm = rng.random() < 0.4
    insn = Insn(gemm, reset=gemm and rng.random() < 0.3,
                use_imm=not gemm and rng.random() < 0.3,
                requant=not gemm and rng.random() < 0.2)
    for _ in range(rng.randint(1, 14)):
        fields = (rng.randrange(entries), rng.randrange(entries), rng.randrange(entries))
        offsets = tuple(rng.randrange(entries) for _ in range(3))
        insn.uops.append((fields, offsets))
    return insn


@pytest.mark.parametrize("seed", range(4))
def test_issue_order_reads_and_interlock(seed: int) -> None:
    rng = random.Random(seed)
    insns = [random_insn(CFG, rng) for _ in range(12)]
    out = run(CFG, insns, seed)
    assert out["error"] is None
    assert len(out["s2"]) == sum(len(insn.uops) for insn in insns)


def test_back_to_back_without_hazards() -> None:
    """Micro-ops on distinct entries leave one per cycle."""
    insn = Insn(gemm=False, uops=[((k, 50 + k, 0), (0, 0, 0)) for k in range(10)])
    out = run(CFG, [insn], 0)
    assert out["s2"] == list(range(out["s2"][0], out["s2"][0] + 10))


def test_dependent_alu_ops_four_cycles_apart() -> None:
    insn = Insn(gemm=False, uops=[((3, 3, 0), (0, 0, 0))] * 4)
    out = run(CFG, [insn], 0)
    assert [b - a for a, b in zip(out["s2"], out["s2"][1:], strict=False)] == [4, 4, 4]


@pytest.mark.parametrize(("insn", "bad"), [
    (Insn(gemm=True), ("acc", "range_bad")),
    (Insn(gemm=True), ("src", "range_bad")),
    (Insn(gemm=True), ("wgt", "range_bad")),
    (Insn(gemm=False), ("acc", "range_bad")),
    (Insn(gemm=False), ("src", "range_bad")),
    (Insn(gemm=False, requant=True), ("wgt", "range_bad")),
])
def test_range_errors(insn: Insn, bad: tuple[str, str]) -> None:
    kind, name = bad
    depth = {"acc": CFG.acc_depth, "src": CFG.inp_depth if insn.gemm else CFG.acc_depth,
             "wgt": CFG.wgt_depth}[kind]
    k = ("acc", "src", "wgt").index(kind)
    good = ((1, 2, 3), (0, 0, 0))
    offsets = [0, 0, 0]
    offsets[k] = depth - 1  # a field of 1..3 plus this is past the buffer
    insn = dataclasses.replace(insn, uops=[good, good, ((1, 2, 3), tuple(offsets)), good])
    out = run(CFG, [insn], 1)
    assert out["error"] == (2, name)


def test_source_field_past_a_shallower_input_buffer() -> None:
    narrow = dataclasses.replace(CFG, name="tiny-narrow-input", inp_depth=CFG.acc_depth // 2)
    good = ((1, 2, 3), (0, 0, 0))
    insn = Insn(gemm=True, uops=[good, ((1, narrow.inp_depth, 3), (0, 0, 0)), good])
    assert run(narrow, [insn], 2)["error"] == (1, "uop_bad")


def test_unused_fields_are_not_checked() -> None:
    far = ((1, CFG.acc_depth - 1, CFG.wgt_depth - 1), (0, 5, 5))
    insns = [Insn(gemm=True, reset=True, uops=[far] * 3),
             Insn(gemm=False, use_imm=True, uops=[far] * 3)]
    out = run(CFG, insns, 3)
    assert out["error"] is None and len(out["s2"]) == 6
