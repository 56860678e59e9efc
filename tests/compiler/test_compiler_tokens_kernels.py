"""Token insertion, micro-op kernel deduplication, the tile search and the cost model."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler import (
    DENSE_LAYERS,
    RESNET18_CONV,
    Schedule,
    Step,
    Workload,
    check_program_order,
    compile_workload,
    conv2d,
    default_schedule,
    estimate_cost,
    insert_tokens,
    program_traffic,
)
from tensorfab.compiler.tensor.residency import plan_steps
from tensorfab.isa import PRESETS, Buffer, Gemm, Load, ProgramError, Store
from tensorfab.sim import FunctionalSimulator


def _step(v, tile, loads=1, stores=0):
    return Step(v, tile, [(Load(buffer=Buffer.INP), "inp")] * loads, [Gemm()],
                [(Store(), "out")] * stores)


def test_insert_tokens_round_robin():
    steps = [_step(0, 0), _step(1, 1), _step(0, 0, stores=1), _step(1, 1, stores=1),
             _step(0, 2, stores=1), _step(1, 3, loads=0, stores=1)]
    insns = [i for i, _ in insert_tokens(steps)]
    peak = check_program_order(insns, 2)
    assert max(peak.values()) <= 2
    loads = [i for i in insns if isinstance(i, Load)]
    assert [ld.pop_next for ld in loads] == [False, False, True, True, True]
    assert all(ld.push_next for ld in loads)
    gemms = [i for i in insns if isinstance(i, Gemm)]
    # the last step has no loads: no l2c pop; its tile reuses thread 1's accumulators
    assert not gemms[-1].pop_prev and gemms[-1].pop_next


def test_insert_tokens_out_of_order_reuse_needs_no_extra_token():
    """Thread 1 reuses its slot before thread 0: tile 3's wait for tile 0's store is
    implied by tile 2's wait for tile 1's (later) store, the store engine being in
    order, so only one store→compute token is used."""
    steps = [_step(0, 0, stores=1), _step(1, 1, stores=1), _step(1, 2, stores=1),
             _step(0, 3, stores=1)]
    insns = [i for i, _ in insert_tokens(steps)]
    check_program_order(insns, 2)
    gemms = [i for i in insns if isinstance(i, Gemm)]
    assert [g.pop_next for g in gemms] == [False, False, True, False]
    stores = [i for i in insns if isinstance(i, Store)]
    assert [s.push_prev for s in stores] == [False, True, False, False]


def test_insert_tokens_shared_resources():
    """Steps of two threads reading one weight region: one load, and each thread's
    compute waits for it once."""
    w = ("wgt", 0)
    steps = [Step(0, 0, [(Load(buffer=Buffer.WGT), "wgt")], [Gemm()], [(Store(), "out")],
                  writes=(w,), reads=(w,)),
             Step(1, 1, [], [Gemm()], [(Store(), "out")], writes=(), reads=(w,)),
             Step(0, 2, [(Load(buffer=Buffer.WGT), "wgt")], [Gemm()], [(Store(), "out")],
                  writes=(w,), reads=(w,))]
    insns = [i for i, _ in insert_tokens(steps)]
    check_program_order(insns, 2)
    loads = [i for i in insns if isinstance(i, Load)]
    gemms = [i for i in insns if isinstance(i, Gemm)]
    assert [ld.pop_next for ld in loads] == [False, True]  # waits for both readers
    assert [g.pop_prev for g in gemms] == [True, False, True]
    assert [g.push_prev for g in gemms] == [False, True, False]


def test_insert_tokens_rejects_interrupted_tile():
    with pytest.raises(ProgramError, match="interrupted"):
        insert_tokens([_step(0, 0), _step(0, 1, stores=1), _step(0, 0, stores=1)])


def test_check_program_order_catches_a_missing_push():
    bad = [Load(buffer=Buffer.INP), Gemm(pop_prev=True)]
    with pytest.raises(ProgramError, match="pops l2c"):
        check_program_order(bad, 4)


@pytest.mark.parametrize("vthreads", [1, 2, 4])
def test_kernels_deduplicated_and_loaded_once(vthreads):
    op = compile_workload(RESNET18_CONV["C5"], PRESETS["default"], vthreads=vthreads)
    prog = op.program
    uop_loads = [i for i in prog.insns if isinstance(i, Load) and i.buffer is Buffer.UOP]
    # the table loads once, in pieces in program order: the first step's kernels
    # ahead of everything, each later step's new kernels with that step's loads
    assert prog.insns[0] is uop_loads[0]
    base = uop_loads[0].dram  # the table's address
    assert [i.dram - base for i in uop_loads] == [i.sram for i in uop_loads]
    ends = [i.sram + i.x for i in uop_loads]
    assert [i.sram for i in uop_loads] == [0, *ends[:-1]] and ends[-1] == len(prog.uops)
    FunctionalSimulator().run(prog)  # no micro-op read before its load (race checks)
    gemm_ranges = {(i.uop_begin, i.uop_end) for i in prog.insns
                   if isinstance(i, Gemm) and not i.reset}
    # one GEMM kernel per thread, reduction-tile size and pair of operand regions
    combos = {(s.vthread, s.tic, s.inp_region, s.wgt_region) for s in plan_steps(op.plan)}
    assert len(gemm_ranges) == len(combos)
    assert len(prog.uops) <= PRESETS["default"].uop_depth


def test_weights_stay_resident_across_spatial_tiles():
    """With the whole reduction in one step, weights are reloaded only when the
    output-channel tile changes, and both threads read the one copy."""
    cfg = PRESETS["default"]
    wl = RESNET18_CONV["C2"]
    s = Schedule(wl, cfg).tile(oh=2, ow=56, ic=4).virtual_thread(2)
    op = compile_workload(wl, cfg, schedule=s)
    wloads = [i for i in op.program.insns if isinstance(i, Load) and i.buffer is Buffer.WGT]
    assert len(wloads) == 1  # shared by the two threads
    FunctionalSimulator().run(op.program)


@pytest.mark.parametrize("preset", ["tiny", "small", "default", "large"])
def test_default_schedule_for_every_preset(preset):
    cfg = PRESETS[preset]
    for wl, v in ((RESNET18_CONV["C4"], 4), (RESNET18_CONV["C11"], 2),
                  (DENSE_LAYERS["fc1000"], 1)):
        plan = default_schedule(wl, cfg, v).plan()
        assert plan.inp_entries() <= cfg.inp_depth // v


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny", "small", "default", "large"])
def test_default_schedule_every_layer_every_preset(preset):
    cfg = PRESETS[preset]
    for wl in {**RESNET18_CONV, **DENSE_LAYERS}.values():
        for v in (1, 2, 4):
            default_schedule(wl, cfg, v).plan()


@pytest.mark.parametrize("preset", ["tiny", "large"])
def test_other_presets_run_correctly(preset):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 70, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (40, 70, 3, 3), dtype=np.int8)
    got = conv2d(cfg, x, w, stride=2, padding=1, vthreads=2).run()
    from tensorfab.sim.testing.numpy_reference import conv2d_acc, epilogue
    np.testing.assert_array_equal(got, epilogue(conv2d_acc(x, w, (2, 2), (1, 1, 1, 1))))


def test_cost_model_overlap_and_traffic():
    cfg = PRESETS["default"]
    wl = RESNET18_CONV["C2"]
    s1 = Schedule(wl, cfg).tile(oh=2, ow=56, ic=4).plan()
    s2 = Schedule(wl, cfg).tile(oh=2, ow=56, ic=4).virtual_thread(2).plan()
    e1, e2 = estimate_cost(s1), estimate_cost(s2)
    assert e2.cycles < e1.cycles  # loads hide behind compute with two threads
    assert e1.compute_cycles >= wl.macs / cfg.peak_macs_per_cycle
    op = compile_workload(wl, cfg, schedule=Schedule(wl, cfg).tile(oh=2, ow=56, ic=4))
    traffic = program_traffic(op.program)
    assert traffic["wgt"] == 64 * 64 * 9  # weights loaded once
    assert traffic["out"] == 64 * 56 * 56
    # the estimate's DRAM bytes are within 20% of the program's
    assert abs(e1.dram_bytes - traffic["total"]) < 0.2 * traffic["total"]


def test_dense_uses_one_load_per_step():
    cfg = PRESETS["default"]
    wl = Workload.dense(64, 256, 64)
    op = compile_workload(wl, cfg, schedule=Schedule(wl, cfg).tile(ic=8))
    inp = [i for i in op.program.insns if isinstance(i, Load) and i.buffer is Buffer.INP]
    assert len(inp) == 2 and inp[0].y == 64 and inp[0].x == 8
