"""VectorAlu in Verilator under cocotb (testbench: tb_alu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.hw.alu import VectorAlu
from tensorfab.isa import PRESETS
from tensorfab.sim.testing.cocotb_runner import build, run


@pytest.mark.parametrize(("preset", "per_product", "sequential", "load_enable"),
                         [("tiny", False, False, False), ("default", False, False, False),
                          ("tiny", True, False, False), ("tiny", False, True, False),
                          ("default", True, True, False), ("default", True, False, True)],
                         ids=["tiny", "default", "tiny-per-product", "tiny-sequential",
                              "default-sequential-per-product",
                              "default-per-product-load-enable"])
def test_vector_alu(preset: str, per_product: bool, sequential: bool, load_enable: bool,
                    tmp_path: Path) -> None:
    """The ALU against the reference; ``per_product`` is the ECP5 build's datapath (a
    registered multiplier per partial product), simulated through its model;
    ``sequential`` the config option's one multiplier per lane (``default``: with
    REQUANT); ``load_enable`` the compute engine's form, whose first-cycle registers
    also load dropped operations (``alu_loads_between_operations``)."""
    cfg = PRESETS[preset].replace(sequential_multiplier=sequential)
    built = build(VectorAlu(cfg, per_product=per_product, load_enable=load_enable),
                  "vector_alu", {"preset": preset, "per_product": per_product,
                                 "sequential": sequential, "load_enable": load_enable})
    run(built, "hw.tb_alu", test_dir=tmp_path)
