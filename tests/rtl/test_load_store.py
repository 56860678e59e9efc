"""Load and store engines and the memory arbiter in Verilator (testbench: tb_load_store.py)."""

from __future__ import annotations

import pytest

from rtl.dma_top import LoadStoreTop
from rtl.runner import build, run
from tensorfab.isa import PRESETS


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_load_store(preset: str) -> None:
    built = build(LoadStoreTop(PRESETS[preset]), "load_store_top", {"preset": preset})
    run(built, "rtl.tb_load_store")


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["small", "large"])
def test_load_store_more_presets(preset: str) -> None:
    built = build(LoadStoreTop(PRESETS[preset]), "load_store_top", {"preset": preset})
    run(built, "rtl.tb_load_store")
