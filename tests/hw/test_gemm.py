"""GemmCore in Verilator under cocotb (testbench: tb_gemm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.hw.gemm import GemmCore, sign_extended
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


def test_sign_extended_extends_signed_values_and_refuses_unsigned_ones() -> None:
    """Each value of a 5-bit signed signal, extended to 8 bits, is the same number; an
    unsigned value is refused, naming it."""
    from amaranth.hdl import Module, Signal, signed
    from amaranth.sim import Simulator

    x = Signal(signed(5))
    y = Signal(8)
    m = Module()
    m.d.comb += y.eq(sign_extended(x, 8))
    got: list[int] = []

    async def bench(ctx: object) -> None:
        for v in range(-16, 16):
            ctx.set(x, v)  # type: ignore[attr-defined]
            got.append(ctx.get(y))  # type: ignore[attr-defined]

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == [v & 0xFF for v in range(-16, 16)]
    with pytest.raises(TypeError, match=r"sign_extended: \(sig flag_word\) is unsigned"):
        sign_extended(Signal(4, name="flag_word"), 8)
