"""bench sdram-resnet18 (benches/sdram_resnet18.py) on a small image and the ``tiny``
config (the SDRAM board the SoC tests build): ResNet-18 resident in the virtual board's
SDRAM gives fsim's output, the chip sees no violation, and the stalls are counted per
program against the RTL executor's ideal memory (the full run: ``tensorfab bench
sdram-resnet18``)."""

from __future__ import annotations

import pytest

from tensorfab.benches.sdram_resnet18 import run_sdram_resnet18_bench


@pytest.mark.slow
def test_resnet18_in_sdram_matches_fsim_and_counts_stalls() -> None:
    got = run_sdram_resnet18_bench("tiny", image_size=32)
    assert got["matches_fsim"] == {"ideal": True, "sdram": True}
    assert got["sdram_violations"] == 0 and got["sdram_first_violation"] == ""
    assert got["sdram_commands"] > 1000
    assert 0 < got["device_memory_bytes"] <= got["sdram_bytes"]
    layers = got["layers"]
    assert len(layers) == got["accel_programs"] > 20
    assert got["cycles"]["ideal"] == sum(row["ideal"] for row in layers)
    assert got["cycles"]["sdram"] == sum(row["sdram"] for row in layers)
    # the SDRAM never makes the core faster than the ideal memory, and costs something
    assert all(row["sdram"] >= row["ideal"] for row in layers)
    assert got["stall_ratio"] == pytest.approx(
        got["cycles"]["sdram"] / got["cycles"]["ideal"], abs=1e-4)
    assert 1.0 < got["stall_ratio"] < 3.0
    worst = got["stall_ratio_per_program"]
    assert worst["max"] == max(row["ratio"] for row in layers)
