"""The rtl-speed benchmark's harness timing (tensorfab.sim.bench_rtl), on the tiny preset."""

from __future__ import annotations

import os

import numpy as np

from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.bench_rtl import bench_memory, bench_program, harness_speed

TINY = PRESETS["tiny"]


def test_harness_speed_times_every_cpu_and_restores_affinity() -> None:
    prog = bench_program(TINY, 8, 8, 16)
    before = os.sched_getaffinity(0)
    h = harness_speed(prog, bench_memory(), repeat=2)
    assert os.sched_getaffinity(0) == before
    by_cpu = h["cycles_per_s_by_cpu"]
    want_keys = {str(c) for c in before} if len(before) > 1 else {"any"}
    assert set(by_cpu) == want_keys
    # two repeats per CPU, each rate from the same cycle count
    assert len(h["run_seconds"]) == 2 * len(want_keys)
    assert h["cycles_per_s"] == max(by_cpu.values())
    assert h["cycles_per_s"] == h["cycles"] / min(h["run_seconds"])
    # the timed runs computed the program's result
    ref = FunctionalSimulator().run(prog)
    assert np.array_equal(h["result"].dram, ref.dram)
