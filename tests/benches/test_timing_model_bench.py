"""``tensorfab bench timing-model`` on a few programs: its JSON keys and figures."""

from __future__ import annotations

import json

from tensorfab.benches.timing_model import HELDOUT_SEED, TARGETS, main, residual_add_attrs
from tensorfab.compiler.tensor.residual_add import residual_add_program
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import program_timing


def test_bench_reports_errors_against_the_rtl(capsys) -> None:
    from tensorfab.sim.rtl import RtlSimulator

    out = main(["--programs", "2", "--heldout", "2", "--presets", "tiny", "--no-workloads",
                "--json"])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == json.loads(json.dumps(out))
    tiny = out["random"]["tiny"]

    def errors(seeds: range) -> list[float]:
        programs = [random_program(PRESETS["tiny"], s) for s in seeds]
        rtl = [RtlSimulator().run(p).cycles for p in programs]
        model = [round(program_timing(p).cycles) for p in programs]
        return [abs(m - r) / r for m, r in zip(model, rtl, strict=True)]

    bench = errors(range(2))
    assert tiny["max_error"] == max(bench) and out["max_error_random"] == max(bench)
    # the held-out programs are scored apart, and count for the error target
    heldout = errors(range(HELDOUT_SEED, HELDOUT_SEED + 2))
    assert tiny["heldout_programs"] == 2
    assert tiny["max_error_heldout"] == out["max_error_heldout"] == max(heldout)
    assert out["mean_error_heldout"] == sum(heldout) / 2
    assert out["meets_targets"]["max_error"] == (max(bench + heldout)
                                                 <= TARGETS["max_error"])
    assert tiny["speed_ratio"] > 1.0 and tiny["speed_ratio_cpu"] > 1.0
    assert tiny["model_seconds_from_insns"] > 0.0
    assert set(out) >= {"workloads", "mean_error_random", "max_error_workloads",
                        "speed_ratio", "speed_ratio_cpu", "speed_ratio_from_insns",
                        "targets", "meets_targets"}


def test_residual_add_attrs_build_a_program_the_fsim_runs() -> None:
    cfg = PRESETS["default"]
    p = residual_add_program(cfg, (1, 1, 2, 2, 1, 16), residual_add_attrs())
    FunctionalSimulator().run(p)
