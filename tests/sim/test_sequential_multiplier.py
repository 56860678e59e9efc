"""HwConfig.sequential_multiplier on the RTL: one 16×16 multiplier per ALU lane over
SEQUENTIAL_MULTIPLY_CYCLES cycles. Programs run as the functional simulator says,
multiplying ALU instructions take the cycles the issue's spacing gives them, and the
timing model follows the option (tests/hw/test_alu.py checks the ALU's arithmetic)."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import numpy as np
import pytest
from amaranth.sim import Simulator
from hw.test_uop_issue import word
from support.isa_programs import directed_programs

from tensorfab.hw.uop_issue import UopIssue
from tensorfab.isa import PRESETS, HwConfig
from tensorfab.isa.formats import (
    MULTIPLYING_ALU_OPS,
    SEQUENTIAL_MULTIPLY_CYCLES,
    SEQUENTIAL_MULTIPLY_DISTANCE,
)
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import program_timing

#: the timing model's bound on one random program's error (test_timing_model.py)
MAX_ERROR = 0.06

TINY_SEQ = PRESETS["tiny"].replace(name="tiny-seq", sequential_multiplier=True)


def _multiplies(prog) -> bool:
    return any(getattr(insn, "op", None) in MULTIPLYING_ALU_OPS for insn in prog.insns)


def _runs_like_fsim(cfg: HwConfig, seeds: range) -> None:
    parallel = cfg.replace(sequential_multiplier=False)
    rtl = RtlSimulator(max_cycles=2_000_000)
    programs = dict(directed_programs(cfg))
    programs.update({f"random {seed}": random_program(cfg, seed) for seed in seeds})
    slower = 0
    for name, prog in programs.items():
        got = rtl.run(prog)
        assert np.array_equal(got.dram, FunctionalSimulator().run(prog).dram), name
        if name.startswith("random"):
            predicted = program_timing(prog).cycles
            assert abs(predicted - got.cycles) / got.cycles <= MAX_ERROR, name
        if _multiplies(prog):  # (a multiplying instruction may hide behind the others)
            other = rtl.run(dataclasses.replace(prog, config=parallel))
            assert got.cycles >= other.cycles, name
            slower += got.cycles > other.cycles
    assert slower >= 10


def test_tiny_with_a_sequential_multiplier_runs_like_fsim() -> None:
    _runs_like_fsim(TINY_SEQ, range(40))


def test_compiled_programs_estimate_the_multipliers_cycles() -> None:
    """The ``estimated_cycles`` the compiler gives each accelerator program (what
    ``compile`` shows and ``advise`` ranks configs by) count the multiplier's cycles:
    within 1 % of the RTL's on the digits CNN, whose MULHI epilogue multiplies every
    output entry. They came from the instructions without their micro-ops, so without
    the ALU interlock: one cycle a MULHI micro-op, 13 % low on ``ecp5-25f-4x4``."""
    from tensorfab.models.digits_int8 import compile_digits_int8
    from tensorfab.runtime.accel_contract import accel_nodes, decode_program, program_blob

    graph = compile_digits_int8(batch=1, config=TINY_SEQ).program
    rtl = RtlSimulator()
    for k, node in accel_nodes(graph):
        prog = decode_program(program_blob(graph, k))
        assert _multiplies(prog)
        got = rtl.run(prog).cycles
        assert abs(node.attrs["estimated_cycles"] - got) <= 0.01 * got, node.attrs["layer"]


@pytest.mark.slow
def test_default_with_a_sequential_multiplier_runs_like_fsim() -> None:
    """With REQUANT on the ALU too (default's records)."""
    _runs_like_fsim(PRESETS["default"].replace(name="default-seq",
                                               sequential_multiplier=True), range(40))


def _s2_cycles(dsts: list[int], multiplies: bool) -> list[int]:
    """The cycles at which an ALU instruction's micro-ops (immediate operand,
    destinations ``dsts``) reach S2 of the issue of ``TINY_SEQ``."""
    dut = UopIssue(TINY_SEQ)
    seen: list[int] = []

    async def bench(ctx) -> None:
        ctx.set(dut.start, 1)
        ctx.set(dut.is_alu, 1)
        ctx.set(dut.is_mul, multiplies)
        await ctx.tick()
        ctx.set(dut.start, 0)
        stepped, data = 0, 0
        for cycle in range(12 * len(dsts)):
            hold = ctx.get(dut.hold)
            going = stepped < len(dsts) and not hold
            ctx.set(dut.stepping, going)
            ctx.set(dut.issuing, going)
            ctx.set(dut.uop_data, data)
            if ctx.get(dut.s2_valid):
                seen.append(cycle)
            if going:
                data = word(TINY_SEQ, (dsts[stepped], 0, 0))
                stepped += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == len(dsts)
    return [b - a for a, b in pairwise(seen)]


def test_issue_spaces_multiplying_micro_ops() -> None:
    """Distinct entries: SEQUENTIAL_MULTIPLY_CYCLES apart (a cycle apart for another
    operation); the same entry: SEQUENTIAL_MULTIPLY_DISTANCE apart (4 for another)."""
    assert _s2_cycles([1, 2, 3, 4], True) == [SEQUENTIAL_MULTIPLY_CYCLES] * 3
    assert _s2_cycles([1, 2, 3, 4], False) == [1] * 3
    assert _s2_cycles([5, 5, 5], True) == [SEQUENTIAL_MULTIPLY_DISTANCE] * 2
    assert _s2_cycles([5, 5, 5], False) == [4] * 2
    # two back: the spacing already covers it
    assert _s2_cycles([5, 6, 5], True) == [SEQUENTIAL_MULTIPLY_CYCLES] * 2


def test_the_option_round_trips_and_is_checked() -> None:
    assert HwConfig.from_dict(TINY_SEQ.to_dict()) == TINY_SEQ
    assert "sequential_multiplier" not in PRESETS["tiny"].to_dict()
    with pytest.raises(Exception, match="sequential_multiplier"):
        PRESETS["tiny"].replace(sequential_multiplier=1)
