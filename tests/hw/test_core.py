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
    Buffer,
    Gemm,
    Load,
    ProgramBuilder,
    ProgramError,
    Segment,
    Store,
    Uop,
)
from tensorfab.isa.formats import FAST_RESET_LANES
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
    if not run.program.config.perf_counters:  # only CYCLES counts
        assert got == (0, 0, 0) and run.csrs["GEMM_BUSY"] == 0 < run.csrs["CYCLES"], name
        return
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


def fast_reset_program(cfg, rng: np.random.Generator, resets: int):
    """Accumulators loaded with non-zero junk, then ``resets`` fast resets (one micro-op,
    a contiguous inner loop) at random entries, lengths (up to three flag rows) and line
    strides, then every entry stored: fsim says which entries read as zero."""
    e = (cfg.batch, cfg.block_out)
    n = cfg.acc_depth
    junk = rng.integers(1, 127, size=(n, *e), endpoint=True).astype(np.int32)
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("J", "int32", junk.shape, junk))
    bld.add_segment(Segment("out", "int8", (n, *e), output=True))
    shapes = []
    while len(shapes) < resets:
        iter_in = int(rng.integers(1, 3 * FAST_RESET_LANES + 1))
        iter_out = int(rng.integers(1, 4))
        factor_out = int(rng.integers(iter_in, iter_in + 5))
        span = factor_out * (iter_out - 1) + iter_in
        if span <= n:
            shapes.append((int(rng.integers(0, n - span + 1)), iter_out, iter_in, factor_out))
    first, _end = bld.add_uops([Uop(acc=acc) for acc, *_ in shapes])
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=n, stride=n, push_next=True),
             segment="J")
    for k, (_acc, iter_out, iter_in, factor_out) in enumerate(shapes):
        u = first + k
        bld.emit(Gemm(reset=True, uop_begin=u, uop_end=u + 1, iter_out=iter_out,
                      iter_in=iter_in, acc_factor_out=factor_out, acc_factor_in=1,
                      pop_prev=k == 0, push_next=k == resets - 1))
    bld.emit(Store(sram=0, dram=0, y=1, x=n, stride=n, pop_prev=True), segment="out")
    return bld.build()


def test_fast_resets_match_fsim(tmp_path: Path) -> None:
    """The fast reset's lane masks and row steps (hw/fast_reset.py ``ZERO``) against fsim,
    on lines that start and end anywhere in a flag row and span up to three rows."""
    cfg = PRESETS["tiny"]
    rng = np.random.default_rng(5)
    progs = [fast_reset_program(cfg, rng, resets=6) for _ in range(4)]
    for k, prog in enumerate(progs):
        out = FunctionalSimulator().run(prog).outputs["out"]
        assert (out == 0).any() and (out != 0).any(), f"program {k}: a degenerate case"
    for k, run in enumerate(run_on_core(progs, tmp_path, seed=3)):
        assert_matches_fsim(f"fast resets {k}", run)
