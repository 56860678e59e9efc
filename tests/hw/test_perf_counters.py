"""A core built without performance counters (``HwConfig.perf_counters`` False).

- the directed ISA programs agree with the functional simulator on the DRAM image
  and every counter, in the same cycles as the core with counters (the harness's
  clock count gives them), while the counter CSRs read 0;
- the config field takes only booleans, named in the error.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.isa_programs import directed_programs

from tensorfab.hw.csr import COUNTERS
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
    with_counters = directed_programs(TINY)
    without = directed_programs(lean)
    names = [n for n in with_counters if any(n.startswith(p) for p in PROGRAMS)]
    assert len(names) >= len(PROGRAMS), sorted(with_counters)
    sim = RtlSimulator()
    for name in names:
        ref = FunctionalSimulator().run(without[name])
        got = sim.run(without[name])
        counted = sim.run(with_counters[name])
        assert np.array_equal(got.dram, ref.dram), name
        assert got.counters == ref.counters == counted.counters, name
        assert got.cycles == counted.cycles == counted.csrs["CYCLES"] > 0, name
        assert all(got.csrs[c] == 0 for c in COUNTERS), (name, got.csrs)


@pytest.mark.parametrize("value", [0, 1, "no", None])
def test_perf_counters_must_be_boolean(value: object) -> None:
    with pytest.raises(ConfigError, match="perf_counters"):
        HwConfig(perf_counters=value)  # type: ignore[arg-type]
