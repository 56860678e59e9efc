"""The Amaranth layouts of :mod:`tensorfab.hw.layouts` agree with the ISA formats."""

from __future__ import annotations

import random

import pytest
from amaranth.lib import data

from tensorfab.hw.layouts import RESERVED, insn_layout, uop_layout
from tensorfab.isa import PRESETS, Format, Opcode, insn_formats, uop_format

N_RANDOM = 200


def _cases() -> list[tuple[str, str]]:
    return [(p, op.name) for p in PRESETS for op in Opcode] + [(p, "UOP") for p in PRESETS]


def _format_and_layout(preset: str, which: str) -> tuple[Format, data.StructLayout]:
    cfg = PRESETS[preset]
    if which == "UOP":
        return uop_format(cfg), uop_layout(cfg)
    return insn_formats(cfg)[Opcode[which]], insn_layout(cfg, Opcode[which])


@pytest.mark.parametrize(("preset", "which"), _cases())
def test_layout_shape_matches_format(preset: str, which: str) -> None:
    fmt, layout = _format_and_layout(preset, which)
    assert layout.size == fmt.width
    names = [name for name, _ in layout]
    expected = [f.name for f in fmt.fields]
    if fmt.used_bits < fmt.width:
        expected.append(RESERVED)
    assert names == expected
    offsets = fmt.offsets()
    for f in fmt.fields:
        member = layout[f.name]
        assert member.offset == offsets[f.name]
        assert member.shape.width == f.width
        assert member.shape.signed == f.signed


@pytest.mark.parametrize(("preset", "which"), _cases())
def test_pack_and_view_agree(preset: str, which: str) -> None:
    fmt, layout = _format_and_layout(preset, which)
    rng = random.Random(f"{preset}-{which}")
    for i in range(N_RANDOM):
        if i == 0:
            values = {f.name: f.lo for f in fmt.fields}
        elif i == 1:
            values = {f.name: f.hi for f in fmt.fields}
        else:
            values = {f.name: rng.randint(f.lo, f.hi) for f in fmt.fields}
        word = fmt.pack(values)
        # word -> layout view
        view = data.Const(layout, word)
        for f in fmt.fields:
            assert getattr(view, f.name) == values[f.name], (f.name, word)
        if fmt.used_bits < fmt.width:
            assert getattr(view, RESERVED) == 0
        # values -> layout constant -> word
        assert layout.const(values).as_bits() == word


@pytest.mark.parametrize(("preset", "which"), _cases())
def test_random_words_unpack_alike(preset: str, which: str) -> None:
    fmt, layout = _format_and_layout(preset, which)
    rng = random.Random(f"words-{preset}-{which}")
    for _ in range(N_RANDOM):
        word = rng.getrandbits(fmt.width)
        view = data.Const(layout, word)
        unpacked = fmt.unpack(word)
        for f in fmt.fields:
            assert getattr(view, f.name) == unpacked[f.name]
        if fmt.used_bits < fmt.width:
            assert getattr(view, RESERVED) << fmt.used_bits == word & fmt.reserved_mask
