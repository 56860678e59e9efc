"""Random programs on the core (Verilator + cocotb) against the functional simulator.

At least 200 programs per CI run across presets tiny, small and default (seeded,
so every run checks the same programs); more with ``make test-all``. A failure
prints the preset and seed and the command that replays that one program with
waveforms (``python tests/hw/replay.py PRESET SEED``).
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.core_harness import run_on_core
from tensorfab.sim.testing.random_program import describe, random_program

#: (preset, first seed, programs) per CI run: 210 programs.
CI_SWEEP = [("tiny", 0, 90), ("small", 1000, 70), ("default", 2000, 50)]
SLOW_SWEEP = [("tiny", 10_000, 400), ("small", 20_000, 300), ("default", 30_000, 200)]


def replay_command(preset: str, seed: int) -> str:
    return f"TENSORFAB_WAVES=fst .venv/bin/python tests/hw/replay.py {preset} {seed}"


def compare(preset: str, seeds: range, runs) -> list[str]:
    failures = []
    for seed, run in zip(seeds, runs, strict=True):
        ref = FunctionalSimulator().run(run.program)
        c = ref.counters
        problems = []
        if run.timed_out:
            problems.append("no done/error within the cycle limit")
        elif run.error is not None:
            problems.append(f"core error {run.error.name} at instruction "
                            f"{run.csrs['ERROR_INDEX']}")
        else:
            mism = np.flatnonzero(run.dram != ref.dram)
            if mism.size:
                problems.append(f"{mism.size} DRAM bytes differ, first at {mism[0]:#x}")
            got = (run.csrs["LOAD_INSNS"], run.csrs["COMPUTE_INSNS"],
                   run.csrs["STORE_INSNS"])
            if got != (c.load_insns, c.compute_insns, c.store_insns):
                problems.append(f"instruction counters {got} != fsim "
                                f"{(c.load_insns, c.compute_insns, c.store_insns)}")
            if run.csrs["GEMM_BUSY"] != c.gemm_uops or run.csrs["ALU_BUSY"] != c.alu_uops:
                problems.append(f"GEMM/ALU micro-ops {run.csrs['GEMM_BUSY']}/"
                                f"{run.csrs['ALU_BUSY']} != fsim {c.gemm_uops}/{c.alu_uops}")
        if problems:
            failures.append(f"{preset} seed {seed}: {'; '.join(problems)}\n"
                            f"  {describe(run.program, listing=False)}\n"
                            f"  replay: {replay_command(preset, seed)}")
    return failures


def sweep(preset: str, first: int, count: int, tmp_path) -> None:
    cfg = PRESETS[preset]
    seeds = range(first, first + count)
    programs = [random_program(cfg, s) for s in seeds]
    runs = run_on_core(programs, tmp_path, seed=first, max_cycles=100_000)
    failures = compare(preset, seeds, runs)
    assert not failures, f"{len(failures)} of {count} random programs differ:\n" + \
        "\n".join(failures)


@pytest.mark.parametrize(("preset", "first", "count"), CI_SWEEP)
def test_random_programs(preset: str, first: int, count: int, tmp_path) -> None:
    sweep(preset, first, count, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "first", "count"), SLOW_SWEEP)
def test_random_programs_long(preset: str, first: int, count: int, tmp_path) -> None:
    sweep(preset, first, count, tmp_path)


def test_ci_sweep_has_200_programs() -> None:
    assert sum(n for _, _, n in CI_SWEEP) >= 200
