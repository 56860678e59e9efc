"""VectorAlu in Verilator under cocotb (testbench: tb_alu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtl.runner import build, run
from tensorfab.hw.alu import VectorAlu
from tensorfab.isa import PRESETS


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_vector_alu(preset: str, tmp_path: Path) -> None:
    built = build(VectorAlu(PRESETS[preset]), "vector_alu", {"preset": preset})
    run(built, "rtl.tb_alu", test_dir=tmp_path)
