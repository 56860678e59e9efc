"""The fetch buffer in block RAM (HwConfig.fetch_block_ram, the iCEBreaker's up5k):
the directed programs and random ones run on the RTL as in fsim, in the same cycles
as with the buffer in LUT RAM."""

from __future__ import annotations

import dataclasses

import numpy as np
from support.isa_programs import directed_programs

from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.testing.random_program import random_program


def test_up5k_fetch_block_ram_runs_like_fsim_in_the_same_cycles() -> None:
    cfg = board_config("up5k")
    assert cfg.fetch_block_ram
    lut_ram = cfg.replace(fetch_block_ram=False)
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
