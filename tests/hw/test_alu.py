"""VectorAlu in Verilator under cocotb (testbench: tb_alu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.hw.alu import VectorAlu
from tensorfab.isa import PRESETS
from tensorfab.sim.testing.cocotb_runner import build, run


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_vector_alu(preset: str, tmp_path: Path) -> None:
    built = build(VectorAlu(PRESETS[preset]), "vector_alu", {"preset": preset})
    run(built, "hw.tb_alu", test_dir=tmp_path)
