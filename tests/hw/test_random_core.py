"""Random programs on the core (Verilator + cocotb) against the functional simulator.

At least 200 programs per CI run across presets tiny, small and default (seeded,
so every run checks the same programs); more with ``make test-all``. A failure
prints the preset and seed and the command that replays that one program with
waveforms (``python -m tensorfab.sim.testing.replay PRESET SEED``).
"""

from __future__ import annotations

import pytest

from tensorfab.isa import PRESETS
from tensorfab.sim.testing.core_harness import run_on_core
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.testing.replay import compare

#: (preset, first seed, programs) per CI run: 210 programs.
CI_SWEEP = [("tiny", 0, 90), ("small", 1000, 70), ("default", 2000, 50)]
SLOW_SWEEP = [("tiny", 10_000, 400), ("small", 20_000, 300), ("default", 30_000, 200)]


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
