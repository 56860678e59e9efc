"""Load and store engines and the memory arbiter in Verilator (testbench: tb_load_store.py)."""

from __future__ import annotations

import pytest

from hw.dma_top import LoadStoreTop
from tensorfab.isa import PRESETS
from tensorfab.sim.testing.cocotb_runner import build, run

#: Not a preset: a bus beat holds two weight-tile rows (the load engine's column
#: registers then take two bytes per beat), which no preset exercises.
WIDE_BEAT = PRESETS["tiny"].replace(name="tiny-batch2-bus64", batch=2, mem_bus_width=64)


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_load_store(preset: str) -> None:
    built = build(LoadStoreTop(PRESETS[preset]), "load_store_top", {"preset": preset})
    run(built, "hw.tb_load_store")


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["small", "large"])
def test_load_store_more_presets(preset: str) -> None:
    built = build(LoadStoreTop(PRESETS[preset]), "load_store_top", {"preset": preset})
    run(built, "hw.tb_load_store")


def test_load_store_beat_wider_than_a_weight_row() -> None:
    built = build(LoadStoreTop(WIDE_BEAT), "load_store_top",
                  {"preset": WIDE_BEAT.name, "config": WIDE_BEAT.to_dict()})
    run(built, "hw.tb_load_store")
