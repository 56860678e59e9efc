"""The hardware options of the iCEBreaker's `up5k` config on the RTL: the fetch buffer
in block RAM (HwConfig.block_ram_fifos) runs every program as fsim does and in the same
cycles as the buffer in LUT RAM; without the fast reset (HwConfig.fast_reset False)
programs run as fsim does, a resetting GEMM through the micro-op pipeline, and the
timing model follows the option."""

from __future__ import annotations

import dataclasses

import numpy as np
from hw.test_core import fast_reset_program
from support.isa_programs import directed_programs

from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import program_timing

#: the timing model's bound on one random program's error (test_timing_model.py)
MAX_ERROR = 0.06


def test_up5k_runs_like_fsim_and_its_fetch_buffer_keeps_the_cycles() -> None:
    cfg = board_config("up5k")
    assert cfg.block_ram_fifos and not cfg.fast_reset
    lut_ram = cfg.replace(block_ram_fifos=False)
    rtl = RtlSimulator()
    programs = dict(directed_programs(cfg))
    programs.update({f"random {seed}": random_program(cfg, seed) for seed in range(6)})
    for name, prog in programs.items():
        want = FunctionalSimulator().run(prog)
        got = rtl.run(prog)
        assert np.array_equal(got.dram, want.dram), name
        assert got.counters.gemm_macs == want.counters.gemm_macs, name
        # the same program on the core with the buffer in LUT RAM (a different config,
        # the same instruction words and DRAM image)
        other = rtl.run(dataclasses.replace(prog, config=lut_ram))
        assert got.cycles == other.cycles, name


def test_up5k_without_fast_reset_zeroes_through_the_pipeline_as_the_model_says() -> None:
    """Programs of fast-reset-shaped GEMMs over junk accumulators: the same zeros as
    fsim, more cycles than with the fast reset, each within the timing model's
    bound (test_timing_model.py's MAX_ERROR)."""
    cfg = board_config("up5k")
    fast = cfg.replace(fast_reset=True)
    rtl = RtlSimulator()
    rng = np.random.default_rng(7)
    for k in range(3):
        prog = fast_reset_program(cfg, rng, resets=4)
        want = FunctionalSimulator().run(prog)
        assert (want.outputs["out"] == 0).any() and (want.outputs["out"] != 0).any()
        got = rtl.run(prog)
        assert np.array_equal(got.dram, want.dram), k
        with_fast = rtl.run(dataclasses.replace(prog, config=fast))
        assert np.array_equal(with_fast.dram, want.dram), k
        assert got.cycles > with_fast.cycles, k
        for run, program in ((got, prog), (with_fast, dataclasses.replace(prog, config=fast))):
            predicted = program_timing(program).cycles
            assert abs(predicted - run.cycles) / run.cycles <= MAX_ERROR, (k, program.config)
