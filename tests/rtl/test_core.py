"""The whole core on Verilator, compared with the functional simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from isa_programs import build_gemm, build_load_store_acc

from rtl.core_harness import run_on_core
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator


def check_against_fsim(runs) -> None:
    for k, r in enumerate(runs):
        ref = FunctionalSimulator().run(r.program)
        assert not r.timed_out, f"program {k}: no done/error within the cycle limit"
        assert r.error is None, f"program {k}: core error {r.error} at {r.csrs['ERROR_INDEX']}"
        assert r.done
        mism = np.flatnonzero(r.dram != ref.dram)
        assert mism.size == 0, (f"program {k}: {mism.size} DRAM bytes differ, first at "
                                f"{mism[0]:#x} (layout {r.program.layout()})")
        c = ref.counters
        assert (r.csrs["LOAD_INSNS"], r.csrs["COMPUTE_INSNS"], r.csrs["STORE_INSNS"]) == (
            c.load_insns, c.compute_insns, c.store_insns)


@pytest.mark.parametrize("preset", ["tiny"])
def test_smoke(preset: str, tmp_path: Path) -> None:
    cfg = PRESETS[preset]
    rng = np.random.default_rng(0)
    progs = [build_load_store_acc(cfg, rng)[0],
             build_gemm(cfg, rng, m=8, n=8, k=8, vthreads=1)[0]]
    check_against_fsim(run_on_core(progs, tmp_path))
