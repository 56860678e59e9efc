"""A core built without performance counters (``HwConfig.perf_counters`` False).

- the directed ISA programs agree with the functional simulator on the DRAM image
  and every counter, in the same cycles as the core with counters (CYCLES, which it
  keeps, and the harness's clock count), while the other eleven counter CSRs read 0;
- the config field takes only booleans, named in the error.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.isa_programs import directed_programs

from tensorfab.hw.csr import COUNTERS, KEPT_COUNTER
from tensorfab.isa import PRESETS, ConfigError, HwConfig
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator

TINY = PRESETS["tiny"]
#: directed programs covering every engine: loads and stores, GEMM with its fast
#: reset, the ALU with MUL/MULHI and REQUANT
PROGRAMS = ("save_load_out", "padded_acc_all", "gemm_vt1", "alu_mul", "alu_mulhi",
            "requant")


def test_no_counters_same_results_and_cycles() -> None:
    lean = TINY.replace(name="tiny-lean", perf_counters=False)
    programs = directed_programs(TINY)
    names = [n for n in programs if any(n.startswith(p) for p in PROGRAMS)]
    assert len(names) >= len(PROGRAMS), sorted(programs)
    sim = RtlSimulator()
    for name in names:
        # the same program for both cores (perf_counters changes no encoding)
        without = dataclasses.replace(programs[name], config=lean)
        ref = FunctionalSimulator().run(without)
        got = sim.run(without)
        counted = sim.run(programs[name])
        assert np.array_equal(got.dram, ref.dram), name
        assert got.counters == ref.counters == counted.counters, name
        assert got.cycles == got.csrs["CYCLES"] == counted.cycles == counted.csrs["CYCLES"] > 0
        assert all(got.csrs[c] == 0 for c in COUNTERS if c != KEPT_COUNTER), (name, got.csrs)


@pytest.mark.parametrize("value", [0, 1, "no", None])
def test_perf_counters_must_be_boolean(value: object) -> None:
    with pytest.raises(ConfigError, match="perf_counters"):
        HwConfig(perf_counters=value)  # type: ignore[arg-type]
