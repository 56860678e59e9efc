"""Amaranth ``lib.data`` layouts of instructions and micro-ops, derived from the ISA.

Nothing here writes a bit position: every layout is computed from the one
declaration in :mod:`tensorfab.isa.formats`. Fields become struct members in
declaration order (LSB first); the reserved bits above the last field become a
trailing member called ``reserved`` so that the layout is exactly as wide as the
word (a hardware decoder checks ``view.reserved != 0`` for ``RESERVED_BITS``).
Signed fields get signed shapes; enumerated fields are plain unsigned values.
"""

from __future__ import annotations

from amaranth.hdl import Shape, signed, unsigned
from amaranth.lib import data

from tensorfab.isa import Format, HwConfig, Opcode, insn_formats, uop_format

__all__ = ["RESERVED", "format_layout", "insn_layout", "uop_layout"]

#: Name of the member covering the reserved bits above the last field.
RESERVED = "reserved"


def format_layout(fmt: Format) -> data.StructLayout:
    """The struct layout of one ISA format.

    Parameters
    ----------
    fmt : Format
        A format from :func:`~tensorfab.isa.insn_formats` or
        :func:`~tensorfab.isa.uop_format`.

    Returns
    -------
    amaranth.lib.data.StructLayout
        Members in the order of ``fmt.fields`` (``signed`` shapes for signed
        fields), plus ``reserved`` when the fields leave bits unused; its size is
        ``fmt.width``.

    Raises
    ------
    ValueError
        If a field is called ``reserved`` and the format has reserved bits.
    """
    members: dict[str, Shape] = {}
    for f in fmt.fields:
        members[f.name] = signed(f.width) if f.signed else unsigned(f.width)
    spare = fmt.width - fmt.used_bits
    if spare:
        if RESERVED in members:
            raise ValueError(f"format {fmt.name} has a field named {RESERVED!r}")
        members[RESERVED] = unsigned(spare)
    layout = data.StructLayout(members)
    assert layout.size == fmt.width
    return layout


def insn_layout(cfg: HwConfig, opcode: Opcode | int) -> data.StructLayout:
    """The layout of one instruction format.

    Parameters
    ----------
    cfg : HwConfig
        Configuration the field widths derive from.
    opcode : Opcode or int
        Which instruction.

    Returns
    -------
    amaranth.lib.data.StructLayout
        Layout of width ``insn_width(cfg)``.
    """
    return format_layout(insn_formats(cfg)[Opcode(opcode)])


def uop_layout(cfg: HwConfig) -> data.StructLayout:
    """The layout of a micro-op word (``acc``, ``src``, ``wgt``; then ``reserved``).

    Parameters
    ----------
    cfg : HwConfig
        Configuration the index widths derive from.

    Returns
    -------
    amaranth.lib.data.StructLayout
        Layout of width ``uop_format(cfg).width``.
    """
    return format_layout(uop_format(cfg))
