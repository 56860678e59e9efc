"""GemmCore in Verilator under cocotb (testbench: tb_gemm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.hw.gemm import GemmCore
from tensorfab.isa import PRESETS
from tensorfab.sim.testing.cocotb_runner import build, run


@pytest.mark.parametrize(
    "preset", ["tiny", pytest.param("default", marks=pytest.mark.slow)])  # default: ~27 s cold
def test_gemm_core(preset: str, tmp_path: Path) -> None:
    core = GemmCore(PRESETS[preset])
    built = build(core, "gemm_core", {"preset": preset, "latency": core.latency})
    run(built, "hw.tb_gemm", test_dir=tmp_path)


def test_gemm_latency_formula() -> None:
    latency = GemmCore.pipeline_latency
    assert latency(PRESETS["tiny"]) == 4
    assert latency(PRESETS["default"]) == 5
    assert latency(PRESETS["default"], levels_per_stage=1) == 7
    assert latency(PRESETS["large"], levels_per_stage=5) == 4
    assert latency(PRESETS["tiny"].replace(block_in=1, mem_bus_width=8)) == 3
