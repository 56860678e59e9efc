"""Placed programs (isa/placement.py): every region at an address of its own, the
transfers rewritten; results equal the contiguous program's on fsim and on the RTL."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.tensor.operators import conv2d
from tensorfab.isa import (
    ErrorCode,
    Program,
    ProgramBuilder,
    ProgramError,
    UsageError,
    get_config,
)
from tensorfab.isa.insn import Load, Store
from tensorfab.isa.placement import place_program, placement_alignment
from tensorfab.isa.program import Segment
from tensorfab.sim import FunctionalSimulator


def _conv_program(config: str = "tiny") -> Program:
    cfg = get_config(config)
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 8, (1, 8, 6, 6), dtype=np.int8)
    w = rng.integers(-8, 8, (8, 8, 3, 3), dtype=np.int8)
    return conv2d(cfg, x, w, padding=1).program


def _scattered(program: Program, start: int = 1 << 16, gap: int = 3) -> dict[str, int]:
    """Regions in reverse order from ``start``, ``gap`` alignment units apart."""
    lay = program.layout()
    a = placement_alignment(program)
    addresses, pos = {}, start
    for name in reversed([n for n in lay if n != "end"]):
        addresses[name] = pos
        pos += -(-lay[name].nbytes // a) * a + gap * a
    return addresses


def _numpy_reference(program: Program) -> dict[str, np.ndarray]:
    return FunctionalSimulator().run(program).outputs


def test_placed_program_gives_the_same_outputs_and_moves_every_region() -> None:
    p = _conv_program()
    where = _scattered(p)
    q = place_program(p, where)
    lay = q.layout()
    assert {n: lay[n].offset for n in where} == where and q.insn_base == where["insns"]
    # each transfer moved by its region's displacement, in units of its entries
    old = p.layout()
    for a, b in zip(p.insns, q.insns, strict=True):
        if isinstance(a, Load | Store):
            assert a != b
    got, want = FunctionalSimulator().run(q).outputs, _numpy_reference(p)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    # nothing below the lowest region is touched: the image there stays as given
    image = np.full(q.dram_size, 0xA5, np.uint8)
    image[min(where.values()):] = q.dram_image()[min(where.values()):]
    final = FunctionalSimulator().run(q, image).dram
    assert (final[:min(where.values())] == 0xA5).all()
    assert old["insns"].offset == 0


def test_placed_program_round_trips_through_the_binary_format() -> None:
    q = place_program(_conv_program(), _scattered(_conv_program()))
    r = Program.from_bytes(q.to_bytes())
    assert r.placement == q.placement and r.insns == q.insns
    np.testing.assert_array_equal(r.dram_image(), q.dram_image())


@pytest.mark.parametrize("bad, match", [
    ({"drop": "uops"}, "regions missing \\['uops'\\]"),
    ({"shift": ("insns", 4)}, "region 'insns' at byte .* is not aligned"),
    ({"shift": ("wgt", 4)}, "instruction \\d+, field dram: region 'wgt' moves by .* not a "
                            "whole number of 16-byte entries"),
    ({"overlap": True}, "overlap"),
])
def test_bad_placements_name_the_region(bad, match) -> None:
    p = _conv_program()
    where = _scattered(p)
    if "drop" in bad:
        del where[bad["drop"]]
    if "shift" in bad:
        name, by = bad["shift"]
        where[name] += by
    if "overlap" in bad:
        where["out"] = where["inp"]
    with pytest.raises(ProgramError, match=match):
        place_program(p, where)


def test_a_transfer_spanning_two_segments_cannot_be_placed() -> None:
    cfg = get_config("tiny")
    b = ProgramBuilder(cfg)
    e = cfg.inp_entry_bytes
    b.add_segment(Segment("a", "int8", (2 * e,)))
    b.add_segment(Segment("b", "int8", (2 * e,)))
    b.emit(Load(buffer=2, sram=0, dram=1, y=1, x=2), segment="a")  # a[1] and b[0]
    p = b.build()
    with pytest.raises(ProgramError, match=r"instruction 0.*field dram.*inside one region"):
        place_program(p, _scattered(p))


def test_store_into_a_placed_instruction_stream_is_a_dram_range_error() -> None:
    """The instruction stream is protected where it is placed, not only at 0."""
    p = _conv_program()
    where = _scattered(p)
    where["out"], where["insns"] = where["insns"], where["out"]  # swap two regions
    q = place_program(p, where)
    k = next(i for i, insn in enumerate(q.insns) if isinstance(insn, Store))
    eb = q.config.out_entry_bytes
    q.insns[k] = Store(**{**q.insns[k].__dict__, "dram": q.insn_base // eb})
    with pytest.raises(ProgramError) as e:
        FunctionalSimulator().run(q)
    assert e.value.code is ErrorCode.DRAM_RANGE and e.value.index == k
    assert f"[{q.insn_base:#x}" in str(e.value)


def test_placed_program_on_the_rtl_equals_fsim() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    p = _conv_program()
    q = place_program(p, _scattered(p))
    got = RtlSimulator().run(q)
    want = _numpy_reference(p)
    for k in want:
        np.testing.assert_array_equal(got.outputs[k], want[k])
    standalone = RtlSimulator().run(p)
    assert got.cycles == pytest.approx(standalone.cycles, rel=0.02)


@pytest.mark.parametrize("size", [0, -5])
def test_a_device_memory_of_no_bytes_says_so(size: int) -> None:
    """open_memory(config, 0) said 'a device memory of 0 bytes does not fit the 32-bit
    address space of default', as if it were too large; it now asks for a positive
    size (a size past the address space keeps its message)."""
    cfg = get_config("default")
    with pytest.raises(UsageError, match=f"a device memory of {size} bytes: give a "
                                         "positive size"):
        FunctionalSimulator().open_memory(cfg, size)
    with pytest.raises(UsageError, match="does not fit the 32-bit address space"):
        FunctionalSimulator().open_memory(cfg, cfg.dram_bytes + 1)
