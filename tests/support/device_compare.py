"""One comparison of a device's run with the functional simulator's, for every test
that runs programs on a device."""

from __future__ import annotations

import numpy as np

from tensorfab.isa import Program
from tensorfab.isa.device import RunResult
from tensorfab.sim import FunctionalSimulator

#: The counters a device reports that must equal fsim's (cycles and stalls may not).
COMPARED_COUNTERS = ("load_insns", "compute_insns", "store_insns", "gemm_uops", "gemm_macs",
                     "load_bytes_inp", "load_bytes_wgt", "store_bytes")


def fsim_differences(program: Program, got: RunResult, name: str = "") -> list[str]:
    """What differs between ``got`` and fsim's run of ``program`` (empty when nothing):
    the final DRAM image, each output and :data:`COMPARED_COUNTERS`."""
    ref = FunctionalSimulator().run(program)
    out = []
    if got.dram is None or not np.array_equal(got.dram, ref.dram):
        where = "" if got.dram is None or got.dram.shape != ref.dram.shape else \
            f" at bytes {np.flatnonzero(got.dram != ref.dram)[:8].tolist()}"
        out.append(f"{name}: the final DRAM image differs from fsim's{where}")
    for key, want in ref.outputs.items():
        if key not in got.outputs or not np.array_equal(got.outputs[key], want):
            out.append(f"{name}: output {key!r} differs from fsim's")
    for key in COMPARED_COUNTERS:
        g, w = getattr(got.counters, key), getattr(ref.counters, key)
        if g != w:
            out.append(f"{name}: counter {key} is {g}, fsim's {w}")
    return out


def assert_same_as_fsim(program: Program, got: RunResult, name: str = "") -> None:
    """Assert that ``got`` equals fsim's run of ``program`` bit for bit (see
    :func:`fsim_differences`)."""
    diffs = fsim_differences(program, got, name)
    assert not diffs, "\n".join(diffs)
