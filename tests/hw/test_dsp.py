"""RegisteredMultiplier: its model against Python's product, cycle by cycle; on an ECP5
build, the DSP block with its own output register (what Yosys and nextpnr get)."""

from __future__ import annotations

import gc
import random
import warnings

import pytest
from amaranth.hdl import Fragment, Instance, UnusedElaboratable
from amaranth.sim import Simulator

from tensorfab.fpga_builds.boards import BOARDS
from tensorfab.fpga_builds.flow import board_platform
from tensorfab.hw.alu import VectorAlu
from tensorfab.hw.dsp import RegisteredMultiplier
from tensorfab.hw.gemm import GemmCore
from tensorfab.isa import PRESETS


def _instances(elaboratable: object, platform: object) -> list[Instance]:
    """Every Instance in the design, elaborated for ``platform``."""
    found = []
    todo = [Fragment.get(elaboratable, platform)]
    while todo:
        frag = todo.pop()
        if isinstance(frag, Instance):
            found.append(frag)
        todo.extend(sub for sub, _name, _loc in frag.subfragments)
    return found


def _products(dut: RegisteredMultiplier, steps: list[tuple[int, int, int]]) -> list[int]:
    """``p`` after each tick, with ``(a, b, en)`` of each step set before it."""
    got: list[int] = []

    async def bench(ctx) -> None:
        for a, b, en in steps:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.en, en)
            await ctx.tick()
            got.append(ctx.get(dut.p))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize(("a_width", "b_width"), [(8, 8), (18, 18), (3, 11)])
def test_model_is_a_product_a_cycle_later(a_width: int, b_width: int) -> None:
    dut = RegisteredMultiplier(a_width, b_width)
    rng = random.Random(a_width * 100 + b_width)
    pairs = [((1 << a_width) - 1, (1 << b_width) - 1), (0, 5)]
    pairs += [(rng.randrange(1 << a_width), rng.randrange(1 << b_width)) for _ in range(40)]
    # the value read after a tick is the product of the operands set before it
    assert _products(dut, [(a, b, 1) for a, b in pairs]) == [a * b for a, b in pairs]


@pytest.mark.parametrize(("a_width", "b_width"), [(17, 17), (16, 5)])
def test_signed_model_holds_its_product_without_enable(a_width: int, b_width: int) -> None:
    dut = RegisteredMultiplier(a_width, b_width, signed=True)
    rng = random.Random(a_width + b_width)

    def lo(width: int) -> int:
        return -(1 << (width - 1))

    def hi(width: int) -> int:
        return (1 << (width - 1)) - 1
    steps = [(lo(a_width), lo(b_width), 1), (lo(a_width), hi(b_width), 1), (-1, 1, 0),
             (hi(a_width), -1, 1), (3, 3, 0), (5, -7, 0)]
    steps += [(rng.randint(lo(a_width), hi(a_width)), rng.randint(lo(b_width), hi(b_width)),
               rng.randrange(2)) for _ in range(40)]
    want, held = [], 0
    for a, b, en in steps:
        held = a * b if en else held
        want.append(held)
    assert _products(dut, steps) == want


def test_ecp5_build_uses_the_dsp_blocks_output_register() -> None:
    platform = board_platform(BOARDS["ulx3s-25f"], dsp=True)
    (dsp,) = _instances(RegisteredMultiplier(8, 8), platform)
    assert dsp.type == "MULT18X18D"
    params = dict(dsp.parameters)
    assert params["REG_OUTPUT_CLK"] == "CLK0"
    # the block's defaults (NONE): no input or pipeline registers
    assert not {"REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_PIPELINE_CLK"} & set(params)
    ports = dict(dsp.ports)
    assert {f"A{n}" for n in range(18)} | {"P0", "P35", "CLK0"} <= set(ports)


def test_no_dsp_builds_and_other_families_use_the_model() -> None:
    for platform in (board_platform(BOARDS["ulx3s-25f"], dsp=False),
                     board_platform(BOARDS["icebreaker"], dsp=True), None):
        assert _instances(RegisteredMultiplier(8, 8), platform) == []


def test_signed_ecp5_multiplier_sign_extends_and_enables() -> None:
    platform = board_platform(BOARDS["ulx3s-25f"], dsp=True)
    dut = RegisteredMultiplier(17, 16, signed=True)
    (dsp,) = _instances(dut, platform)
    ports = {name: repr(value) for name, (value, _dir) in dsp.ports.items()}
    assert ports["SIGNEDA"] == ports["SIGNEDB"] == "(const 1'd1)"
    # A17 repeats a's sign bit (A16); B16 and B17 repeat b's (B15)
    assert ports["A17"] == ports["A16"] != ports["A15"]
    assert ports["B16"] == ports["B17"] == ports["B15"] != ports["B14"]
    assert "en" in ports["CE0"]
    assert dict(dsp.parameters)["REG_OUTPUT_CE"] == "CE0"


def test_vector_alu_on_ecp5_has_four_dsps_per_lane() -> None:
    cfg = PRESETS["tiny"]
    platform = board_platform(BOARDS["ulx3s-25f"], dsp=True)
    dsps = [i for i in _instances(VectorAlu(cfg), platform) if i.type == "MULT18X18D"]
    assert len(dsps) == 4 * cfg.batch * cfg.block_out
    assert _instances(VectorAlu(cfg), None) == []


def test_gemm_core_on_ecp5_has_one_dsp_per_product() -> None:
    cfg = PRESETS["tiny"]
    platform = board_platform(BOARDS["ulx3s-25f"], dsp=True)
    dsps = [i for i in _instances(GemmCore(cfg), platform) if i.type == "MULT18X18D"]
    assert len(dsps) == cfg.batch * cfg.block_in * cfg.block_out
    assert _instances(GemmCore(cfg), None) == []


@pytest.mark.parametrize("widths", [(0, 8), (8, 19)])
def test_widths_out_of_range(widths: tuple[int, int]) -> None:
    with warnings.catch_warnings():
        # the refused object is still an Elaboratable, never used
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError,
                           match=r"RegisteredMultiplier: (a|b)_width = (0|19); 1 to 18"):
            RegisteredMultiplier(*widths)
        gc.collect()
