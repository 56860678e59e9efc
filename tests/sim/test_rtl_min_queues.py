"""Configs at the bottom of the validator's ranges build and run: command and token
queues of depth 2 (the validator accepts them, so the hardware must too)."""

from __future__ import annotations

import dataclasses

import numpy as np
from support.isa_programs import directed_programs

from tensorfab.hw.verilog import CORE_LINT_WAIVERS, CORE_TOP, core_verilog, lint
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.testing.random_program import random_program

MIN_QUEUES = dataclasses.replace(PRESETS["tiny"], name="tiny-q2", cmd_queue_depth=2,
                                 dep_queue_depth=2)
#: the directed programs use up to four virtual threads, so four tokens per queue
MIN_CMD = dataclasses.replace(MIN_QUEUES, name="tiny-c2", dep_queue_depth=4)


def test_depth_two_queues_lint_clean() -> None:
    assert lint(core_verilog(MIN_QUEUES), CORE_TOP, CORE_LINT_WAIVERS) == []


def test_depth_two_queues_run_like_fsim() -> None:
    rtl = RtlSimulator()
    programs = dict(directed_programs(MIN_CMD))
    programs.update({f"random {seed}": random_program(MIN_QUEUES, seed) for seed in range(12)})
    for name, prog in programs.items():
        want = FunctionalSimulator().run(prog)
        got = rtl.run(prog)
        assert np.array_equal(got.dram, want.dram), name
        assert got.counters.gemm_macs == want.counters.gemm_macs, name
