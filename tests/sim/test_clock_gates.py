"""Gated clocks of the RTL executor's build (sim/rtl/clock_gates.py).

A gate is an ``EnableInserter`` that must change nothing: checked here in Amaranth's
simulator (the unit with and without the inserter, side by side on the same random
inputs), on the Verilog the build gives Verilator, and on the built model (the same
results, cycles and timelines with and without the gates).
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import EnableInserter, Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from tensorfab.hw.alu import AluSignature, VectorAlu
from tensorfab.isa import PRESETS, AluOp
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.rtl.build import CORE, TOP, HarnessBuildError, build_harness, core_source
from tensorfab.sim.rtl.clock_gates import (
    CLOCK_GATES,
    ClockGate,
    ClockGateError,
    gate_verilog,
)
from tensorfab.sim.testing.blocked_gemm import build_blocked_gemm

TINY = PRESETS["tiny"]


class _GatedAlu(wiring.Component):
    """VectorAlu under ``EnableInserter(in_valid | en2 | out_valid)``: ``en2`` and
    ``out_valid`` are ``in_valid`` one and two cycles late, so the wrapper keeps them."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        super().__init__(AluSignature(cfg))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        d1, d2 = Signal(), Signal()
        m.d.sync += [d1.eq(self.in_valid), d2.eq(d1)]
        m.submodules.alu = alu = EnableInserter(self.in_valid | d1 | d2)(VectorAlu(self.cfg))
        wiring.connect(m, wiring.flipped(self), alu)
        return m


def test_alu_gate_changes_nothing() -> None:
    """The ALU gated as the build gates it equals the ALU: every output on every cycle,
    with random operations in bursts, idle gaps and random inputs while idle."""
    cfg = TINY
    top = Module()
    top.submodules.plain = plain = VectorAlu(cfg)
    top.submodules.gated = gated = _GatedAlu(cfg)
    rng = np.random.default_rng(27)
    ops = list(AluOp)
    width = cfg.acc_width
    rec_bits = len(plain.rec)
    mismatches: list[str] = []

    async def bench(ctx) -> None:
        for cycle in range(400):
            valid = int(rng.random() < (0.6 if (cycle // 25) % 2 else 0.05))
            op = int(rng.choice(ops))
            shift_ops = (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL)
            for dut in (plain, gated):
                ctx.set(dut.in_valid, valid)
                ctx.set(dut.op, op)
            for i in range(cfg.batch * cfg.block_out):
                a = int(rng.integers(-(1 << (width - 1)), 1 << (width - 1)))
                b = int(rng.integers(-40, 40) if op in shift_ops and rng.random() < 0.9
                        else rng.integers(-(1 << (width - 1)), 1 << (width - 1)))
                for dut in (plain, gated):
                    ctx.set(dut.a[i], a & ((1 << width) - 1))
                    ctx.set(dut.b[i], b & ((1 << width) - 1))
            rec = int.from_bytes(rng.bytes(rec_bits // 8), "little")
            for dut in (plain, gated):
                ctx.set(dut.rec, rec)
            await ctx.tick()
            for name in ("out_valid", "shift_error"):
                if ctx.get(getattr(plain, name)) != ctx.get(getattr(gated, name)):
                    mismatches.append(f"cycle {cycle}: {name}")
            for i in range(cfg.batch * cfg.block_out):
                if ctx.get(plain.result[i]) != ctx.get(gated.result[i]):
                    mismatches.append(f"cycle {cycle}: result[{i}]")

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, mismatches[:10]


def test_gate_verilog_clocks_the_unit_by_the_wrappers_input() -> None:
    text = core_source(TINY)
    gated = gate_verilog(text, CORE, TOP, CLOCK_GATES)
    for gate in CLOCK_GATES:
        start = gated.index(f"module \\{CORE}.{gate.module} (")
        body = gated[start:gated.index("endmodule", start)]
        assert "posedge clk)" not in body
        assert f"always @(posedge {TOP}.{gate.clock})" in body
    # every other module keeps clk
    assert gated.count("always @(posedge clk)") == text.count("always @(posedge clk)") - sum(
        gated.count(f"posedge {TOP}.{g.clock})") for g in CLOCK_GATES)


@pytest.mark.parametrize(("gate", "message"), [
    (ClockGate("x", "compute.nothing", "core.compute.nothing", ("v",)),
     "no module tensorfab_core.compute.nothing"),
    (ClockGate("alu", "compute.alu", "core.compute.alu", ("in_valid", "renamed")),
     "has no signal 'renamed'"),
])
def test_gate_naming_what_the_core_lacks_is_an_error(gate: ClockGate, message: str) -> None:
    with pytest.raises(ClockGateError, match=message):
        gate_verilog(core_source(TINY), CORE, TOP, (gate,))


def test_build_gates_the_alu() -> None:
    built = build_harness(TINY)
    assert "gated clocks: alu" in built.clocking
    model = (built.directory / "tf_model.h").read_text()
    assert "X(clk_alu, en_alu, __Vtrigprevexpr___TOP__clk_alu__0)" in model
    # the ALU's registers are evaluated under a trigger of their own
    nba = "".join(p.read_text() for p in (built.directory / "obj").glob("Vcore___024root__*.cpp"))
    assert "2ULL & vlSelfRef.__VnbaTriggered[0U]" in nba


def test_a_gate_whose_enable_reads_an_input_is_refused(monkeypatch) -> None:
    from tensorfab.sim.rtl import build as rtl_build

    bad = ClockGate("alu", "compute.alu", "core.compute.alu", ("in_valid",))
    # an enable the wrapper computes from a core input: the harness could not know it
    monkeypatch.setattr(rtl_build, "CLOCK_GATES", (bad,))
    real = rtl_build.wrapper_ports

    def from_input(gates):
        names, lines = real(gates)
        return names, [ln.replace("= core.compute.alu.in_valid", "= mem__cmd__ready")
                       for ln in lines]
    monkeypatch.setattr(rtl_build, "wrapper_ports", from_input)
    with pytest.raises(HarnessBuildError, match="en_alu depend on an input"):
        build_harness(TINY, pgo=False)


@pytest.mark.slow
def test_gated_model_equals_ungated() -> None:
    """The same results, cycles, CSRs and timelines with the gates and without, on a
    blocked GEMM with an ALU epilogue and a REQUANT-free shift and clip."""
    prog = build_blocked_gemm(TINY, 16, 32, 32, vthreads=2, rng=np.random.default_rng(3),
                              epilogue=[(AluOp.SHR, 3), (AluOp.CLIP, 127)])
    gated = RtlSimulator(trace=True).run(prog)
    plain_sim = RtlSimulator(trace=True)
    plain_sim.build = lambda cfg: build_harness(cfg, clock_gates=False)  # type: ignore[method-assign]
    assert "gated" not in plain_sim.build(TINY).clocking
    plain = plain_sim.run(prog)
    ref = FunctionalSimulator().run(prog)
    assert np.array_equal(gated.dram, ref.dram)
    assert gated.cycles == plain.cycles
    assert gated.csrs == plain.csrs and gated.intervals == plain.intervals
    assert np.array_equal(gated.dram, plain.dram)
