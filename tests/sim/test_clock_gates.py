"""Gated clocks of the RTL executor's build (sim/rtl/clock_gates.py).

A gate is an ``EnableInserter`` that must change nothing: checked here in Amaranth's
simulator (the unit with and without the inserter, side by side on the same random
inputs), on the Verilog the build gives Verilator, and on the built model (the same
results, cycles and timelines with and without the gates).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from amaranth.hdl import EnableInserter, Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from tensorfab.hw.alu import AluSignature, VectorAlu
from tensorfab.hw.gemm import GemmCore
from tensorfab.isa import PRESETS, AluOp, Program
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.rtl.build import CORE, TOP, HarnessBuildError, build_harness, core_source
from tensorfab.sim.rtl.clock_gates import (
    CLOCK_GATES,
    ClockGate,
    ClockGateError,
    config_gates,
    enable_terms,
    gate_verilog,
)
from tensorfab.sim.testing.blocked_gemm import build_blocked_gemm

TINY = PRESETS["tiny"]


class _Gated(wiring.Component):
    """``unit`` under ``EnableInserter`` of ``in_valid`` or any of its copies 1 to
    ``depth`` cycles late: the gate's enable (the unit's valid chain is ``in_valid``
    delayed; VectorAlu: ``en2``, ``out_valid``; GemmCore: ``valid_d*``, ``out_valid``),
    or ``extra``: ticks the build's enable adds (the ALU's: the cycles its operand
    registers in the compute engine load), which the test drives at random."""

    def __init__(self, unit: wiring.Component, depth: int) -> None:
        self.unit = unit
        self.depth = depth
        self.extra = Signal()
        super().__init__(unit.signature)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        chain = [self.in_valid]
        for k in range(self.depth):
            d = Signal(name=f"d{k + 1}")
            m.d.sync += d.eq(chain[-1])
            chain.append(d)
        enable = chain[0] | self.extra
        for d in chain[1:]:
            enable = enable | d
        m.submodules.unit = unit = EnableInserter(enable)(self.unit)
        wiring.connect(m, wiring.flipped(self), unit)
        return m


def test_alu_gate_changes_nothing() -> None:
    """The ALU gated as the build gates it equals the ALU: every output on every cycle,
    with random operations in bursts, idle gaps, random inputs while idle and random
    extra ticks while idle."""
    cfg = TINY
    top = Module()
    top.submodules.plain = plain = VectorAlu(cfg)
    top.submodules.gated = gated = _Gated(VectorAlu(cfg), 2)
    assert gated.signature == AluSignature(cfg)
    rng = np.random.default_rng(27)
    ops = list(AluOp)
    width = cfg.acc_width
    rec_bits = len(plain.rec)
    mismatches: list[str] = []

    async def bench(ctx) -> None:
        for cycle in range(400):
            valid = int(rng.random() < (0.6 if (cycle // 25) % 2 else 0.05))
            ctx.set(gated.extra, int(rng.random() < 0.3))
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


def test_gemm_gate_changes_no_result() -> None:
    """The GEMM core gated as the build gates it: the same valid chain on every cycle
    and the same results on every cycle that has one (the compute engine reads
    nothing else), with random operands on idle cycles too."""
    cfg = TINY
    top = Module()
    top.submodules.plain = plain = GemmCore(cfg)
    top.submodules.gated = gated = _Gated(GemmCore(cfg), plain.latency)
    rng = np.random.default_rng(28)
    mismatches: list[str] = []
    seen = {"valid": 0}

    async def bench(ctx) -> None:
        for cycle in range(200):
            valid = int(rng.random() < (0.6 if (cycle // 20) % 2 else 0.05))
            for dut in (plain, gated):
                ctx.set(dut.in_valid, valid)
            for b in range(cfg.batch):
                for i in range(cfg.block_in):
                    x = int(rng.integers(-128, 128))
                    for dut in (plain, gated):
                        ctx.set(dut.inp[b][i], x)
                for o in range(cfg.block_out):
                    acc = int(rng.integers(-(1 << 31), 1 << 31))
                    for dut in (plain, gated):
                        ctx.set(dut.acc_in[b][o], acc)
            for i in range(cfg.block_in):
                for o in range(cfg.block_out):
                    w = int(rng.integers(0, 256))
                    for dut in (plain, gated):
                        ctx.set(dut.wgt[i][o], w)
            await ctx.tick()
            out_valid = ctx.get(plain.out_valid)
            if out_valid != ctx.get(gated.out_valid):
                mismatches.append(f"cycle {cycle}: out_valid")
            if out_valid:
                seen["valid"] += 1
                for name in ("result", "acc_out"):
                    if ctx.get(getattr(plain, name)) != ctx.get(getattr(gated, name)):
                        mismatches.append(f"cycle {cycle}: {name}")

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen["valid"] > 30
    assert not mismatches, mismatches[:10]


def test_gate_verilog_clocks_the_unit_by_the_wrappers_input() -> None:
    text = core_source(TINY)
    gated = gate_verilog(text, CORE, TOP, CLOCK_GATES)
    for gate in CLOCK_GATES:
        start = gated.index(f"module \\{CORE}.{gate.module} (")
        body = gated[start:gated.index("endmodule", start)]
        # only the registers the gate leaves ungated keep clk
        kept = re.findall(r"always @\(posedge clk\)\s*(\\?[\w$]+) <=", body)
        assert sorted(kept) == sorted(gate.ungated)
        assert body.count("posedge clk)") == len(gate.ungated)
        assert f"always @(posedge {TOP}.{gate.clock})" in body
    # the ALU's operand, operation and result registers in the ALU pipeline are on its
    # clock
    start = gated.index(f"module \\{CORE}.compute.alu (")
    body = gated[start:gated.index("endmodule", start)]
    for reg in ("a3_a", "a3_b", "a3_rec", "alu_op", "a6_data", "a6_addr"):
        assert re.search(rf"always @\(posedge {TOP}\.clk_alu\)\s*{reg} <=", body)
    # the engines' sequencers and burst issuers share their engine's clock
    for sub in ("store.seq", "store.bursts", "store.fifo", "fetch.fifo"):
        start = gated.index(f"module \\{CORE}.{sub} (")
        body = gated[start:gated.index("endmodule", start)]
        assert "posedge clk)" not in body and f"posedge {TOP}.clk_{sub.split('.')[0]})" in body
    # every other module keeps clk
    assert gated.count("always @(posedge clk)") == text.count("always @(posedge clk)") - sum(
        gated.count(f"posedge {TOP}.{g.clock})") for g in CLOCK_GATES)


@pytest.mark.parametrize(("gate", "message"), [
    (ClockGate("x", "compute.nothing", "core.compute.nothing", ("v",)),
     "no module tensorfab_core.compute.nothing"),
    (ClockGate("alu", "compute.alu.vector", "core.compute.alu.vector",
               ("in_valid", "renamed")),
     "has no signal 'renamed'"),
    (ClockGate("store", "store", "core.store", ("seq.busy & ~seq.renamed",)),
     "module tensorfab_core.store.seq has no signal 'renamed'"),
    (ClockGate("store", "store", "core.store", ("/renamed",)),
     "module tensorfab_core has no signal 'renamed'"),
    (ClockGate("store", "store", "core.store", ("seq.busy",), ungated=("protect", "renamed")),
     "has no register 'renamed' clocked by clk"),
    (ClockGate("alu", "compute.alu.vector", "core.compute.alu.vector", ("in_valid",),
               joined=("compute.alu.renamed",)),
     "module tensorfab_core.compute.alu has no register 'renamed' clocked by clk"),
])
def test_gate_naming_what_the_core_lacks_is_an_error(gate: ClockGate, message: str) -> None:
    with pytest.raises(ClockGateError, match=message):
        gate_verilog(core_source(TINY), CORE, TOP, (gate,))


def test_build_gates_the_units() -> None:
    built = build_harness(TINY)
    assert "gated clocks: alu, gemm, store, fetch" in built.clocking
    model = (built.directory / "tf_model.h").read_text()
    for gate in ("alu", "gemm", "store", "fetch"):
        assert f"X(clk_{gate}, en_{gate}, __Vtrigprevexpr___TOP__clk_{gate}__0)" in model
    # each unit's registers are evaluated under a trigger of their own
    nba = "".join(p.read_text() for p in (built.directory / "obj").glob("Vcore___024root__*.cpp"))
    for bit in ("2ULL", "4ULL", "8ULL", "0x0000000000000010ULL"):
        assert f"if (({bit} & vlSelfRef.__VnbaTriggered[0U]))" in nba


def test_a_gate_whose_enable_reads_an_input_is_refused(monkeypatch) -> None:
    from tensorfab.sim.rtl import build as rtl_build

    bad = CLOCK_GATES[0]
    # an enable the wrapper computes from a core input: the harness could not know it
    monkeypatch.setattr(rtl_build, "config_gates", lambda cfg: (bad,))
    real = rtl_build.wrapper_ports

    def from_input(verilog, core, gates):
        names, lines = real(verilog, core, gates)
        return names, [ln.replace("(|core.compute.alu.vector.in_valid)",
                                  "(|mem__cmd__ready)")
                       for ln in lines]
    monkeypatch.setattr(rtl_build, "wrapper_ports", from_input)
    with pytest.raises(HarnessBuildError, match="en_alu depend on an input"):
        build_harness(TINY, pgo=False)


def _gemm_with_epilogue(clip: int = 5) -> Program:
    """A blocked GEMM of tiny with a shift-and-clip ALU epilogue, two threads."""
    return build_blocked_gemm(TINY, 16, 32, 32, vthreads=2, rng=np.random.default_rng(3),
                              epilogue=[(AluOp.SHR, 3), (AluOp.CLIP, clip)])


@pytest.mark.slow
def test_gated_model_equals_ungated() -> None:
    """The same results, cycles, CSRs and timelines with the gates and without, on a
    blocked GEMM with an ALU epilogue and a REQUANT-free shift and clip."""
    prog = _gemm_with_epilogue(127)
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


def _one_core_session(build) -> tuple:
    """What one core shows over a blocked GEMM with a shift-and-clip epilogue, the
    same GEMM with an illegal opcode at its fourth instruction (an error while the
    fetch unit still has words), the GEMM again without a reset (the restart), then
    each program of the directed suite after a reset (some are so short that fetch
    waits for their last word): each run's status, cycles and memory."""
    from support.error_programs import patched_opcode
    from support.isa_programs import directed_programs

    from tensorfab.sim.rtl import Harness

    prog = _gemm_with_epilogue()
    runs = [(prog, prog.dram_image(), False), (prog, patched_opcode(prog, 3), False),
            (prog, prog.dram_image(), False)]
    runs += [(p, p.dram_image(), True) for p in directed_programs(TINY).values()]
    seen = []
    with Harness(build) as h:
        h.reset()
        for p, image, reset in runs:
            if reset:
                h.reset()
            h.load_dram(image)
            h.start(p.insn_base, len(p.insns), image.size)
            status = h.run(200_000, hang_cycles=5_000)
            seen.append((status.name, h.run_cycles, h.read_dram().tobytes()))
    return tuple(seen)


@pytest.mark.slow
@pytest.mark.parametrize(("unit", "term"), [("store", "seq.insn__valid & seq.insn__ready"),
                                            ("fetch", "busy & ~dispatching"),
                                            ("alu", "/compute.seq.exec__start")])
def test_a_shortened_enable_changes_the_run(monkeypatch, unit: str, term: str) -> None:
    """The store engine's, fetch's and the ALU's gates are no narrower than a core
    needs: without one term of its enable, a unit misses cycles it has work in (the
    ALU's operation register, on its clock, misses the instruction that sets it: the
    epilogue's CLIP runs as its SHR; fetch, without its term for a word staged while
    the head register is empty, leaves a short program's last word in its stage), and
    what the full gates run as the functional simulator does hangs or goes wrong."""
    from tensorfab.sim.rtl import build as rtl_build

    full = _one_core_session(build_harness(TINY, pgo=False))
    prog = _gemm_with_epilogue()
    want = FunctionalSimulator().run(prog).dram.tobytes()
    assert [(status, dram[:len(want)] == want) for status, _, dram in full[:3]] == \
        [("DONE", True), ("ERROR", False), ("DONE", True)]
    assert {status for status, _, _ in full[3:]} == {"DONE"}
    short = tuple(dataclasses.replace(g, enable=tuple(t for t in g.enable if t != term))
                  if g.name == unit else g for g in CLOCK_GATES)
    assert short != CLOCK_GATES
    monkeypatch.setattr(rtl_build, "config_gates", lambda cfg: short)
    assert _one_core_session(build_harness(TINY, pgo=False)) != full


def _outcome(sim: RtlSimulator, prog) -> tuple:
    """What a run shows: results, cycles, counters and timelines, or the error."""
    from tensorfab.isa import ProgramError

    try:
        r = sim.run(prog)
    except ProgramError as exc:
        return ("error", str(exc))
    return (r.dram.tobytes(), r.cycles, r.csrs, r.intervals)


@pytest.mark.slow
def test_gated_model_equals_ungated_on_random_and_error_programs() -> None:
    """The store engine's and fetch's gates on random programs (loads, GEMMs, ALU
    epilogues, stores, 1-4 virtual threads) and on every error program of the core's
    suite (halts with reads in flight): the same outcome with the gates and without."""
    from support.error_programs import tiny_error_programs

    from tensorfab.sim.testing.random_program import random_program

    gated_sim = RtlSimulator(trace=True)
    plain_sim = RtlSimulator(trace=True)
    plain_sim.build = lambda cfg: build_harness(cfg, clock_gates=False)  # type: ignore[method-assign]
    progs = [random_program(TINY, seed) for seed in range(8)]
    errors, _images, _expect = tiny_error_programs()
    progs += [p for p, image in zip(errors, _images, strict=True) if image is None]
    seen_error = 0
    for prog in progs:
        gated = _outcome(gated_sim, prog)
        assert gated == _outcome(plain_sim, prog)
        seen_error += gated[0] == "error"
    assert seen_error >= 3


def test_an_optional_term_counts_where_the_core_has_its_signal() -> None:
    """The ALU gate's ``?seq_running``: the sequential multiplier's phases tick the ALU
    in a config with it (without, its later phases never ran: the core hung), and a
    config without that hardware has no such signal and no such term."""
    alu = next(g for g in CLOCK_GATES if g.name == "alu")
    assert "?seq_running" in alu.enable

    def names(cfg) -> set[str]:
        return {name for term in enable_terms(core_source(cfg), CORE, alu)
                for _neg, name in term}

    running = "core.compute.alu.vector.seq_running"
    assert running not in names(TINY)
    assert running in names(TINY.replace(sequential_multiplier=True))
    # a term without "?" is still required
    required = dataclasses.replace(alu, enable=(*alu.enable, "seq_running"))
    with pytest.raises(ClockGateError, match="has no signal 'seq_running'"):
        enable_terms(core_source(TINY), CORE, required)


def test_a_core_without_the_vector_alu_has_no_alu_gate() -> None:
    """config_gates leaves out the gate of a unit the config does not have: the build of
    a core without the vector ALU (the iCEBreaker's up5k) would find no module for it."""
    from tensorfab.fpga_builds.board_configs import board_config

    up5k = board_config("up5k")
    assert not up5k.vector_alu
    assert [g.name for g in config_gates(up5k)] == ["gemm", "store", "fetch"]
    assert config_gates(TINY) == CLOCK_GATES
    assert "compute.alu" not in core_source(up5k)
    assert "compute.alu.vector" in core_source(TINY)
