"""Operand regions shared by the threads (residency), the timing model and the
dispatch order."""

from __future__ import annotations

import pytest

from tensorfab.compiler import RESNET18_CONV, Schedule, check_program_order, compile_workload
from tensorfab.compiler.tensor.lower import plan_instructions
from tensorfab.compiler.tensor.residency import assign_regions, plan_steps, thread_regions
from tensorfab.compiler.tensor.tile_search import search_plan
from tensorfab.compiler.tensor.timing import DEFAULT_TIMING, fast_reset, insn_work, simulate
from tensorfab.compiler.tensor.tokens import dispatch_order, insert_tokens
from tensorfab.isa import PRESETS, Buffer, Engine, Gemm, Load, Store
from tensorfab.isa.formats import UOP_INDEX_STAGES
from tensorfab.sim import FunctionalSimulator

CFG = PRESETS["default"]


def test_assign_regions_reuses_and_prefers_far_next_use():
    keys = [(0,), (1,), (0,), (2,), (0,), (1,)]
    out = assign_regions(keys, 2, [0] * len(keys), recent=0)
    assert [load for _, load in out] == [True, True, False, True, False, True]
    # key 2 evicts key 1 (next used last), keeping key 0 (used next)
    assert out[3][0] == out[1][0] and out[4][0] == out[0][0]


def test_assign_regions_spares_the_recent_regions():
    """A region used by the last ``recent`` uses is not replaced while another is."""
    keys = [(0,), (1,), (2,), (3,)]
    out = assign_regions(keys, 2, [0, 1, 0, 1], recent=1)
    assert [r for r, _ in out] == [0, 1, 0, 1]


def test_thread_regions_one_per_thread():
    keys = [(0,), (0,), (0,), (1,)]
    assert thread_regions(keys, [0, 1, 0, 1]) == [(0, True), (1, True), (0, False), (1, True)]


def test_shared_weights_loaded_once_for_two_threads():
    wl = RESNET18_CONV["C2"]
    plan = Schedule(wl, CFG).tile(oh=2, ow=56, ic=4).virtual_thread(2).plan()
    steps = plan_steps(plan)
    assert sum(s.load_wgt for s in steps) == 1
    assert {s.wgt_region for s in steps} == {0}
    assert {s.inp_region for s in steps} == {0, 1}


def test_fallback_to_thread_regions_when_kernels_do_not_fit():
    cfg = CFG.replace(name="few-uops", uop_depth=128)
    wl = RESNET18_CONV["C7"]
    s = Schedule(wl, cfg).tile(oc=8, oh=14, ow=1, ic=4).virtual_thread(4)
    s.place("inp", 56).place("wgt", 32)
    plan = s.plan()
    shared = plan_steps(plan, shared=True)
    combos = {(x.vthread, x.tic, x.inp_region, x.wgt_region) for x in shared}
    assert len(combos) * 4 > 128  # 4 micro-ops per GEMM kernel (ic unrolled)
    steps = plan_steps(plan)
    assert all(x.inp_region == x.vthread == x.wgt_region for x in steps)
    op = compile_workload(wl, cfg, schedule=s)
    assert len(op.program.uops) <= cfg.uop_depth


def test_fast_reset_form():
    assert fast_reset(Gemm(reset=True, uop_begin=3, uop_end=4, iter_out=1, iter_in=9,
                           acc_factor_in=1))
    assert not fast_reset(Gemm(reset=True, uop_begin=3, uop_end=5, iter_in=9,
                               acc_factor_in=1))
    assert not fast_reset(Gemm(reset=True, uop_begin=3, uop_end=4, iter_in=9,
                               acc_factor_in=1, inp_factor_in=1))
    assert not fast_reset(Gemm(uop_begin=3, uop_end=4, iter_in=9, acc_factor_in=1))
    fixed, beats = insn_work(Gemm(reset=True, uop_begin=0, uop_end=1, iter_out=1,
                                  iter_in=160, acc_factor_in=1), CFG)
    assert (fixed, beats) == (DEFAULT_TIMING.compute_fixed + 11, 0.0)


def test_simulate_serial_chain():
    """A load, a GEMM waiting for it, a store waiting for the GEMM."""
    p = DEFAULT_TIMING
    insns = [Load(buffer=Buffer.INP, y=2, x=4, stride=4, push_next=True),
             Gemm(uop_begin=0, uop_end=2, iter_out=3, iter_in=5, pop_prev=True,
                  push_next=True),
             Store(y=1, x=10, stride=10, pop_prev=True)]
    t = simulate(insns, CFG)
    # the read latency, then the two rows' beats back to back
    load = p.load_fixed + p.read_latency + 2 * 4 * CFG.inp_entry_bytes / CFG.mem_bus_bytes
    gemm = p.compute_fixed + UOP_INDEX_STAGES + 30
    store = p.store_fixed + 10 * CFG.out_entry_bytes / CFG.mem_bus_bytes
    assert t.start[1] == pytest.approx(p.start + load)
    # the core is done a cycle after its last STORE
    assert t.cycles == pytest.approx(p.start + load + gemm + store + 1)


def test_simulate_orders_the_memory_and_detects_deadlock():
    ld = Load(buffer=Buffer.WGT, y=1, x=4, stride=4)
    st = Store(y=1, x=64, stride=64)
    t = simulate([ld, st], CFG)
    load_alone = simulate([ld], CFG).end[0]
    store_alone = simulate([st], CFG).end[0]
    # the memory serves commands in order: the store's write (its data ready a cycle
    # after the load's first read command) waits for the reads commanded before it,
    # the load's four 32-beat commands leave as the read budget allows, so its later
    # reads share the bus with the write's beats
    assert store_alone < t.end[1] < load_alone + store_alone
    assert t.end[0] > load_alone
    assert simulate([Gemm(pop_prev=True)], CFG) is None


def test_dispatch_order_keeps_engine_order_and_tokens():
    wl = RESNET18_CONV["C7"]
    plan = search_plan(wl, CFG, 2, refine=False)
    from tensorfab.compiler.tensor.lower import _EpilogueShape, _Lowering, lookahead

    steps = _Lowering(plan, _EpilogueShape(False, 0)).steps()
    emitted = insert_tokens(steps, lookahead(CFG))
    ordered = dispatch_order(emitted, CFG)
    assert sorted(map(id, ordered)) == sorted(map(id, emitted))
    for e in Engine:
        assert [x for x in ordered if x[0].engine is e] == [x for x in emitted
                                                           if x[0].engine is e]
    check_program_order([i for i, _ in ordered], CFG.dep_queue_depth)
    # stores of a tile no longer precede the next thread's loads in program order
    first_store = next(k for k, (i, _) in enumerate(ordered) if isinstance(i, Store))
    loads_before = sum(isinstance(i, Load) for i, _ in ordered[:first_store])
    assert loads_before > sum(isinstance(i, Load) for i, _ in emitted[:first_store])


@pytest.mark.parametrize("vthreads", [1, 2])
def test_search_result_runs_and_matches_its_timing(vthreads):
    wl = RESNET18_CONV["C10"]
    op = compile_workload(wl, CFG, vthreads=vthreads)
    insns = [i for i, _ in plan_instructions(op.plan)]
    t1 = simulate(insns, CFG)
    t2 = simulate(op.program.insns, CFG)
    assert t1 is not None and t2 is not None
    assert t1.cycles == pytest.approx(t2.cycles, rel=0.01)
    FunctionalSimulator().run(op.program)  # race and token checks
