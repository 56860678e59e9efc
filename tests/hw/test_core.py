"""The whole core on Verilator under cocotb, compared with the functional simulator.

Every directed ISA program of the foundation suite (tests/isa_programs.py) runs on
the RTL for presets tiny, small and default under a memory with random latency and
back-pressure; the final DRAM image and the instruction counters must equal the
functional simulator's. One simulator process runs all programs of a preset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.error_programs import tiny_error_programs
from support.isa_programs import directed_programs

from tensorfab.hw.verilog import CORE_LINT_WAIVERS, CORE_TOP, core_verilog, lint
from tensorfab.isa import (
    PRESETS,
    ProgramError,
)
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.core_harness import CoreRun, run_on_core

PRESET_NAMES = ["tiny", "small", "default"]


def assert_matches_fsim(name: str, run: CoreRun) -> None:
    ref = FunctionalSimulator().run(run.program)
    assert not run.timed_out, f"{name}: no done/error within the cycle limit"
    assert run.error is None, (f"{name}: core error {run.error.name} at instruction "
                               f"{run.csrs['ERROR_INDEX']}")
    assert run.done
    mism = np.flatnonzero(run.dram != ref.dram)
    if mism.size:
        regions = {n: r for n, r in run.program.layout().items() if r.nbytes}
        where = next((n for n, r in regions.items()
                      if r.offset <= mism[0] < r.offset + r.nbytes), "?")
        raise AssertionError(f"{name}: {mism.size} DRAM bytes differ from fsim, first at "
                             f"{mism[0]:#x} in segment {where}")
    c = ref.counters
    got = (run.csrs["LOAD_INSNS"], run.csrs["COMPUTE_INSNS"], run.csrs["STORE_INSNS"])
    assert got == (c.load_insns, c.compute_insns, c.store_insns), name
    assert run.csrs["GEMM_BUSY"] == c.gemm_uops, name


@pytest.fixture(scope="module", params=PRESET_NAMES)
def directed_runs(request, tmp_path_factory) -> tuple[str, dict[str, CoreRun]]:
    preset = request.param
    progs = directed_programs(PRESETS[preset])
    runs = run_on_core(list(progs.values()), tmp_path_factory.mktemp(f"core-{preset}"),
                       seed=11)
    return preset, dict(zip(progs, runs, strict=True))


def test_directed_programs_match_fsim(directed_runs) -> None:
    preset, runs = directed_runs
    failures = []
    for name, run in runs.items():
        try:
            assert_matches_fsim(name, run)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{preset}: {len(failures)} of {len(runs)} programs differ:\n" \
        + "\n".join(failures)


def test_errors_stop_the_core_with_code_and_index(tmp_path: Path) -> None:
    progs, images, expect = tiny_error_programs()
    for k, (prog, image, (code, index)) in enumerate(zip(progs, images, expect, strict=True)):
        if image is None:  # the functional simulator reports the same error
            with pytest.raises(ProgramError) as exc:
                FunctionalSimulator(prog.config).run(prog)
            assert (exc.value.code, exc.value.index) == (code, index), f"case {k}: fsim"
    runs = run_on_core(progs, tmp_path, images=images, max_cycles=20_000)
    for k, (run, (code, index)) in enumerate(zip(runs, expect, strict=True)):
        assert not run.timed_out, f"case {k}: the core hung instead of reporting {code.name}"
        assert run.error is code, f"case {k}: expected {code.name}, got {run.error}"
        assert run.csrs["ERROR_INDEX"] == index, f"case {k}: wrong index"
        assert not run.done


@pytest.mark.parametrize("preset", ["tiny", pytest.param("default", marks=pytest.mark.slow)])
def test_core_verilog_lints_clean(preset: str) -> None:
    text = core_verilog(PRESETS[preset])
    assert lint(text, CORE_TOP, CORE_LINT_WAIVERS) == []
