"""The timing model (sim/timing): its parts against hand-worked cycles, the ``timing``
device against the functional simulator, and its cycles against the RTL executor."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.isa import PRESETS, Alu, Buffer, Gemm, Load, Store, UsageError
from tensorfab.isa.device import open_device
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import TimingSimulator, program_timing
from tensorfab.sim.timing.alu_interlock import interlock_stalls
from tensorfab.sim.timing.model import DEFAULT_TIMING, FINISH_CYCLES, load_walk, simulate

#: Error bounds of the model against the RTL (docs/compiler.md, "Timing model"; 200
#: programs: tiny max 2.5 % mean 0.30 %, small 2.3 % / 0.24 %, default 1.1 % /
#: 0.19 %): per program (issue 33's target), and over a preset's programs (6 in the
#: fast subset, 200 in the slow test).
MAX_ERROR = 0.03
MEAN_ERROR = {6: 0.01, 200: 0.004}


def test_interlock_holds_a_reader_of_the_three_micro_ops_ahead() -> None:
    # the same entry three times: each waits 4 cycles for the one before
    assert interlock_stalls(np.array([5, 5, 5]), None) == 2 * 3
    # distinct entries: one per cycle
    assert interlock_stalls(np.arange(8), np.arange(8) + 100) == 0
    # a source written two micro-ops ahead: the third passes at 4 instead of 2
    assert interlock_stalls(np.array([0, 1, 2]), np.array([9, 9, 0])) == 2
    # four ahead: forwarded, no hold
    assert interlock_stalls(np.array([0, 1, 2, 3, 4]), np.array([9, 9, 9, 9, 0])) == 0


def test_load_walk_overlaps_padding_with_the_read_latency() -> None:
    p = DEFAULT_TIMING
    plain = Load(buffer=Buffer.INP, y=1, x=4)
    assert load_walk(plain, 4, p) == p.read_latency + 4
    # top padding shorter than the latency costs nothing
    padded = Load(buffer=Buffer.INP, y=1, x=4, pad_top=1, pad_left=2, pad_right=2)
    assert padded.cols == 8 and load_walk(padded, 4, p) == p.read_latency + 4 + 2
    # one-beat rows: at most `outstanding` reads in flight
    many = Load(buffer=Buffer.UOP, y=160, x=1, stride=3)
    assert load_walk(many, 1, p) == pytest.approx(p.read_latency
                                                  + 160 * (p.read_latency + 1) / p.outstanding)


def test_tokens_are_pushed_at_the_end_and_finish_ends_the_program() -> None:
    # the compute engine drains an ALU instruction's pipeline before it retires
    # (hw/compute.py, DRAIN): the next instruction and the store waiting for its token
    # start at its end; FINISH is taken after the last compute instruction and the core
    # is done FINISH_CYCLES later, a cycle after the last STORE
    cfg = PRESETS["default"]
    insns = [Alu(uop_begin=0, uop_end=4, iter_out=1, iter_in=1, push_next=True),
             Gemm(uop_begin=0, uop_end=1, iter_out=1, iter_in=1),
             Store(y=1, x=1, stride=1, pop_prev=True)]
    t = simulate(insns, cfg, fetch=False)
    assert t is not None
    assert t.start[1] == t.end[0]
    assert t.start[2] == t.end[0]
    assert t.cycles == max(t.end[1] + FINISH_CYCLES, t.end[2] + 1)
    alone = simulate(insns[:1], cfg, fetch=False)
    assert alone is not None and alone.cycles == alone.end[0] + FINISH_CYCLES


def test_timing_device_is_registered_and_computes_the_outputs() -> None:
    cfg = PRESETS["tiny"]
    program = random_program(cfg, 3)
    dev = open_device("timing")
    assert isinstance(dev, TimingSimulator)
    got = dev.run(program)
    want = FunctionalSimulator().run(program)
    assert got.device == "timing" and got.counters == want.counters
    for name, arr in want.outputs.items():
        np.testing.assert_array_equal(got.outputs[name], arr)
    fast = open_device("timing", functional=False).run(program)
    assert fast.cycles == got.cycles == round(program_timing(program).cycles)
    for engine in ("load", "compute", "store"):
        assert 0 <= got.stall[engine] <= got.busy[engine] <= got.cycles
    assert set(got.to_json()) >= {"cycles", "busy", "stall"}


@pytest.mark.parametrize("latency", [0, -5, 2.5, "20", True])
def test_timing_device_refuses_a_read_latency_the_rtl_memory_would(latency: object) -> None:
    # open_device("timing", read_latency=-5) estimated 946 cycles for a program of 1,414
    # (0 and 2.5 likewise gave figures; "20" was a TypeError from inside the model)
    with pytest.raises(UsageError) as info:
        open_device("timing", read_latency=latency)
    assert str(info.value) == (f"read_latency = {latency!r}: the memory's read latency is "
                               "a number of cycles, an integer from 1 to 2**32 - 1 (as "
                               "MemoryTiming.read_latency)")
    assert open_device("timing", read_latency=1).params.read_latency == 3


@pytest.mark.parametrize("functional", ["no", 0, None])
def test_timing_device_refuses_a_functional_that_is_no_bool(functional: object) -> None:
    # open_device("timing", functional="no") computed the outputs ("no" is truthy)
    with pytest.raises(UsageError, match=rf"functional = {functional!r}: give True"):
        open_device("timing", functional=functional)
    assert open_device("timing", functional=np.bool_(False)).functional is False


def _errors(preset: str, seeds: range) -> np.ndarray:
    from tensorfab.sim.rtl import RtlSimulator

    cfg = PRESETS[preset]
    rtl = RtlSimulator()
    out = []
    for seed in seeds:
        program = random_program(cfg, seed)
        want = rtl.run(program).cycles
        out.append((round(program_timing(program).cycles) - want) / want)
    return np.abs(np.array(out))


@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
def test_random_programs_match_the_rtl(preset: str) -> None:
    err = _errors(preset, range(6))
    assert err.max() <= MAX_ERROR, err
    assert err.mean() <= MEAN_ERROR[6], err


@pytest.mark.parametrize(("preset", "seed", "bound"),
                         [("tiny", 41, 0.01), ("small", 15, 0.01), ("default", 131, 0.01),
                          ("default", 59, 0.01), ("tiny", 170, 0.02), ("small", 73, 0.01)])
def test_programs_the_model_missed_most_before_fetch_and_port_timing(preset: str, seed: int,
                                                                    bound: float) -> None:
    # without the fetch unit's bursts on the bus and with accumulator loads held by the
    # compute engine during their read latency and for every data beat: -10.6 %, +9.6 %,
    # +5.4 %, +4.1 % (59: a 16-entry accumulator LOAD beside an ALU instruction); with
    # the fetch's reads charged to LOADs as a fraction of the beats to come, not in the
    # memory's order, and the ALU's drain holding the engine: -6.3 % (170), +3.5 % (73,
    # now +0.3 %). 170 is at -1.7 %: a fetch burst's command comes a cycle before its
    # fourth LOAD's first read in the RTL and a cycle after it in the model
    (err,) = _errors(preset, range(seed, seed + 1))
    assert err <= bound, err


@pytest.mark.parametrize(("preset", "seed"),
                         [("tiny", 83), ("small", 197), ("tiny", 184), ("small", 1360),
                          ("default", 1913), ("tiny", 1748), ("tiny", 1544)])
def test_programs_the_model_missed_most_before_port_order_and_read_buffer(preset: str,
                                                                         seed: int) -> None:
    # before the accumulator port's order (compute writes last, padding in the walk's
    # order, two entries of slack), the walk absorbing delays once, the memory's read
    # buffer and a write commanded before a LOAD's reads: -4.9 % (83: a padded
    # accumulator LOAD beside two GEMMs), -3.8 % (197), +2.6 % (184: padding between
    # rows taken before the data), -3.2 % (1360: four bursts among a padded LOAD's
    # reads), -3.5 % (1748: bursts waiting in the memory behind a padded LOAD's rows),
    # -2.9 % (1544: a write commanded before a LOAD's reads); 1913 reached +3.1 % on
    # the way (a LOAD's buffered data sharing the bus with a write); now 1.6 % or less
    (err,) = _errors(preset, range(seed, seed + 1))
    assert err <= 0.02, err


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
def test_two_hundred_random_programs_match_the_rtl(preset: str) -> None:
    err = _errors(preset, range(200))
    assert err.max() <= MAX_ERROR, (int(err.argmax()), err.max())
    assert err.mean() <= MEAN_ERROR[200], err.mean()


def test_programs_the_model_missed_most_before_alu_write_runs() -> None:
    # before an ALU instruction's runs of accumulator writes held an accumulator LOAD's
    # data beyond the load engine's slack (the model let it run at the interlock
    # bubbles' average share): -3.7 % (tiny 2232: runs of 41, 9 and 17 writes stalled a
    # 16-entry LOAD's data 47 cycles); now -1.4 %
    (err,) = _errors("tiny", range(2232, 2233))
    assert err <= 0.02, err


def test_loads_reads_take_turns_with_a_writes_bursts() -> None:
    # ResNet-18's C9 with tile(oc=4, ic=1) and two threads: in the default placement an
    # INP LOAD beside a 392-beat STORE takes 799 cycles in the RTL (its reads take turns
    # with the write's bursts), and the model had it served after 613 (-0.77 % over the
    # program, level with the packed placement); the model ranks the two as the RTL does
    from tensorfab.compiler import RESNET18_CONV
    from tensorfab.compiler.tensor.operators import compile_workload
    from tensorfab.compiler.tensor.schedule import Schedule
    from tensorfab.compiler.tensor.tile_search import SIM_TOLERANCE
    from tensorfab.sim.rtl import RtlSimulator

    cfg, wl = PRESETS["default"], RESNET18_CONV["C9"]
    spread = Schedule(wl, cfg).tile(oc=4, ic=1).virtual_thread(2)
    packed = Schedule(wl, cfg).tile(oc=4, ic=1).virtual_thread(2).place("inp", 225) \
        .place("wgt", 36)
    rtl, model = [], []
    for schedule in (spread, packed):
        program = compile_workload(wl, cfg, schedule=schedule).program
        rtl.append(RtlSimulator().run(program).cycles)
        model.append(program_timing(program).cycles)
    assert rtl[1] < rtl[0] * (1 - SIM_TOLERANCE), rtl  # the packed placement is faster
    assert model[1] < model[0] * (1 - SIM_TOLERANCE), model
    for m, r in zip(model, rtl, strict=True):
        assert abs(m - r) / r <= 0.005, (model, rtl)


@pytest.mark.parametrize("functional", [True, False])
def test_deadlock_names_the_waiting_instructions(functional: bool) -> None:
    """`sim --target timing` of a program whose compute pops a token no load pushes
    said only 'the timing model found the program's dependency tokens deadlocked';
    now, as on fsim, which engine waits at which instruction on which queue."""
    from tensorfab.isa.asm import assemble
    from tensorfab.sim.errors import DeadlockError

    prog = assemble(".config tiny\n.uop acc=0 src=0 wgt=0\n"
                    "load.uop sram=0 dram=uops y=1 x=1 stride=1\n"
                    "alu.add uop=0:1 iter=1,1 imm=1 pop_prev\nfinish\n")
    with pytest.raises(DeadlockError, match=r"compute engine at instruction 1 \(alu\.add\) "
                       r"waits to pop from load→compute") as info:
        TimingSimulator(functional=functional).run(prog)
    assert info.value.index == 1 and info.value.field == "pop_prev"
