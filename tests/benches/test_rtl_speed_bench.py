"""The rtl-speed benchmark's harness timing (tensorfab.benches.rtl_speed), on the tiny preset."""

from __future__ import annotations

import os

import numpy as np

from tensorfab.benches.rtl_speed import bench_memory, bench_program, harness_speed, plot_rtl_speed
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator

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


def test_plot_rtl_speed_writes_a_png(tmp_path) -> None:
    result = {"config": "default", "m": 64, "n": 256, "k": 512,
              "harness_cycles_per_s_by_cpu": {"0": 1.5e6, "1": 0.8e6},
              "harness_long_cycles_per_s_by_cpu": {"0": 1.6e6, "1": 1.2e6},
              "cocotb_cycles_per_s": 2000.0, "pysim_cycles_per_s": None,
              "target_cycles_per_s": 1_000_000}
    path = plot_rtl_speed(result, tmp_path / "sub" / "speed.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
