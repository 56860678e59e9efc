"""The virtual board clocked as the core's harness (sim/harness/clocking.h): the SoC
with its reset registered, one evaluation per cycle, the Verilated root's evaluation
called directly and the core's units on gated clocks (``build_soc``'s default), against
the plain build of the same SoC (two evaluations per cycle, no gates, no wrapper): the
same CYCLES, CSRs and memory on the same programs, errors included, each also equal to
the functional simulator. docs/hil.md, "The virtual board's speed"."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from support.error_programs import tiny_error_programs
from support.isa_programs import directed_programs

from tensorfab.hil.board import BoardDevice
from tensorfab.hil.link import HostLink
from tensorfab.hil.virtual import (
    SOC_CORE,
    SOC_CORE_RESETS,
    InProcessTransport,
    SocSpec,
    VirtualBoard,
    soc_clocking,
)
from tensorfab.isa import PRESETS, Program, ProgramError
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl.build import HarnessBuildError, TopClocking
from tensorfab.sim.rtl.clock_gates import CLOCK_GATES, gates_within
from tensorfab.sim.testing.random_program import random_program

CFG = PRESETS["tiny"]
MEM = 1 << 16
SPEC = SocSpec.for_board(None, CFG, mem_bytes=MEM)


def _device(**options: bool) -> BoardDevice:
    transport = InProcessTransport(VirtualBoard(SPEC, **options))
    return BoardDevice(HostLink(transport, timeout=64 * transport.byte_seconds))


@pytest.fixture(scope="module")
def boards() -> Iterator[tuple[BoardDevice, BoardDevice]]:
    fast, plain = _device(), _device(clock_gates=False, two_evals=True)
    yield fast, plain
    for dev in (fast, plain):
        dev.link.transport.board.close()


def _outcome(dev: BoardDevice, prog: Program, image: np.ndarray | None) -> tuple:
    """What a run shows over the link: memory, CYCLES and every CSR, or the error."""
    try:
        r = dev.run(prog, image)
    except ProgramError as exc:
        return ("error", str(exc))
    return (r.dram.tobytes(), r.cycles, r.csrs)


def _compare(boards: tuple[BoardDevice, BoardDevice],
             progs: list[tuple[Program, np.ndarray | None]]) -> int:
    """Each program on both boards: the same outcome, fsim's memory when it ends well;
    returns how many ended with an error."""
    fast, plain = boards
    errors = 0
    for prog, image in progs:
        got = _outcome(fast, prog, image)
        assert got == _outcome(plain, prog, image), prog
        if got[0] == "error":
            errors += 1
        else:
            want = FunctionalSimulator().run(prog, image).dram
            assert got[0] == want.tobytes()
    return errors


def test_the_builds_are_clocked_as_they_say(boards) -> None:
    fast, plain = (dev.link.transport.board.build for dev in boards)
    assert fast.clocking.startswith("one evaluation per cycle; gated clocks: alu, gemm, "
                                    "store, fetch; profile-guided (trained on ")
    assert plain.clocking == "two evaluations per cycle (requested)"
    wrapper = (fast.directory / "top.v").read_text()
    assert "rst_q <= rst;" in wrapper and "soc.core.core_reset" in wrapper
    assert "clk_alu" not in (plain.directory / "top.v").read_text()


def test_fast_board_equals_plain_board(boards) -> None:
    """A representative set: GEMMs, ALU operations, padding, random programs, errors
    (the whole suite is the slow test below)."""
    directed = directed_programs(CFG)
    names = ("gemm_vt2", "gemm_vt4", "padded_acc_all", "requant", "alu_shr_rnd_vec",
             "alu_reduction_add_apart3")
    progs = [(directed[n], None) for n in names]
    progs += [(random_program(CFG, seed), None) for seed in range(3)]
    errors, images, _ = tiny_error_programs()
    progs += list(zip(errors[:3], images[:3], strict=True))
    assert _compare(boards, progs) == 3


@pytest.mark.slow
def test_fast_board_equals_plain_board_on_the_whole_suite(boards) -> None:
    """Every directed program, 12 random programs and every error program of the
    core's suite."""
    progs = [(p, None) for p in directed_programs(CFG).values()]
    progs += [(random_program(CFG, seed), None) for seed in range(100, 112)]
    errors, images, _ = tiny_error_programs()
    progs += list(zip(errors, images, strict=True))
    assert _compare(boards, progs) == len(errors)


def test_soc_gates_tick_at_every_reset_of_the_core() -> None:
    """Inside the SoC the core is reset by ``rst`` and by the host link's RESET
    (``SocTop``'s ``ResetInserter``): a gate that ticks at the one ticks at the other;
    the instance paths are the wrapper's."""
    gates = {g.name: g for g in gates_within(CLOCK_GATES, "soc.core", SOC_CORE_RESETS)}
    for gate in CLOCK_GATES:
        inner = gates[gate.name]
        assert inner.instance == f"soc.{gate.instance}" and inner.core_instance == "soc.core"
        assert ("/core_reset" in inner.enable) == ("/rst" in gate.enable)
        assert set(gate.enable) <= set(inner.enable)
    assert {n for n, g in gates.items() if "/core_reset" in g.enable} == {"alu", "store",
                                                                          "fetch"}


def test_a_gate_enable_reading_an_input_is_refused(monkeypatch) -> None:
    """With the reset not registered, the ALU's, the store engine's and fetch's enables
    read an input of the SoC (``rst``): the harness would need them before the edge, so
    the build refuses (after Verilator, before any compile)."""
    from tensorfab.hil import virtual

    clocking = soc_clocking(SPEC)
    assert clocking is not None and clocking.registered == ("rst",)
    unregistered = TopClocking(clocking.instance, (), clocking.sampled, SOC_CORE,
                               clocking.gates)
    monkeypatch.setattr(virtual, "soc_clocking", lambda spec, **_: unregistered)
    with pytest.raises(HarnessBuildError, match=r"clock gate enable\(s\) en_alu, en_fetch, "
                       "en_store depend on an input"):
        virtual.build_soc(SPEC)
