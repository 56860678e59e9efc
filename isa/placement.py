"""Placing a program's regions at chosen DRAM addresses, so that several programs (the
layers of a model) live in one device DRAM at once and share activation buffers.

A program built by :class:`~tensorfab.isa.builder.ProgramBuilder` addresses each of its
segments through absolute ``dram`` fields of its LOAD and STORE instructions.
:func:`place_program` moves every region (instructions, micro-ops, each segment) to the
address given and rewrites each transfer's ``dram`` field by its region's displacement;
a transfer that does not lie inside one region cannot be moved and is an error naming the
instruction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from .errors import ProgramError
from .fields import FieldRangeError
from .formats import insn_formats
from .insn import Insn, Load, Store, dram_unit, encode_insn
from .program import (
    UOP_SEGMENT,
    EncodedWords,
    Program,
    Region,
    check_placement,
    placement_alignment,
)

__all__ = ["check_placement", "place_program", "placement_alignment", "transfer_bytes"]


def transfer_bytes(program: Program, insn: Insn) -> tuple[int, int]:
    """The DRAM byte range ``[start, end)`` a LOAD or STORE reads or writes."""
    assert isinstance(insn, Load | Store)
    unit = dram_unit(program.config, insn)
    start = insn.dram * unit
    return start, start + ((insn.y - 1) * insn.stride + insn.x) * unit


def _region_of(regions: list[Region], start: int, end: int) -> Region | None:
    for r in regions:
        if r.offset <= start and end <= r.offset + r.nbytes:
            return r
    return None


def place_program(program: Program, addresses: Mapping[str, int]) -> Program:
    """``program`` with each region at ``addresses[name]`` (bytes).

    Parameters
    ----------
    program : Program
        A program whose transfers each lie inside one of its regions (every program the
        builder and the compiler make).
    addresses : Mapping[str, int]
        A byte address for ``insns``, ``uops`` and every segment, each a multiple of
        :func:`placement_alignment`.

    Raises
    ------
    ProgramError
        A missing or unaligned address, overlapping regions, or a transfer that spans
        regions (naming the instruction and its field).
    """
    names = ["insns", UOP_SEGMENT, *(s.name for s in program.segments)]
    missing = [n for n in names if n not in addresses]
    extra = [n for n in addresses if n not in names]
    if missing or extra:
        raise ProgramError(f"placement: regions missing {missing}, unknown {extra}; the "
                           f"program has {names}")
    old = program.layout()
    regions = [old[n] for n in names if old[n].nbytes]
    moved: list[Insn] = []
    shifted: list[int] = []  # the instructions whose dram field changed
    for i, insn in enumerate(program.insns):
        if isinstance(insn, Load | Store):
            start, end = transfer_bytes(program, insn)
            r = _region_of(regions, start, end)
            if r is None:
                raise ProgramError(f"bytes [{start:#x}, {end:#x}) do not lie inside one region "
                                   "of the program, so it cannot be placed", index=i,
                                   field="dram")
            shift = addresses[r.name] - r.offset
            unit = dram_unit(program.config, insn)
            if shift % unit:
                raise ProgramError(f"region {r.name!r} moves by {shift} bytes, not a whole "
                                   f"number of {unit}-byte entries", index=i, field="dram")
            if shift:
                insn = dataclasses.replace(insn, dram=insn.dram + shift // unit)
                shifted.append(i)
        moved.append(insn)
    placed = Program(program.config, moved, list(program.uops), list(program.segments),
                     {n: int(addresses[n]) for n in names})
    check_placement(placed)
    kept = program.kept_encoded()
    if kept is not None:
        placed.keep_encoded(_shifted_words(placed, kept, shifted))
    return placed


def _shifted_words(placed: Program, kept: EncodedWords, shifted: Sequence[int]
                   ) -> EncodedWords:
    """``placed``'s words from its unplaced program's (``kept``): the same but the
    ``dram`` field of the instructions ``shifted``, packed again (an instruction whose
    new address does not fit the field is encoded whole, which names it)."""
    words = kept.insns.copy()
    formats = insn_formats(placed.config)
    nb = words.shape[1]
    for i in shifted:
        insn = placed.insns[i]
        fmt = formats[insn.opcode]
        try:
            bits = fmt.pack({"dram": insn.dram})
        except FieldRangeError:
            encode_insn(insn, placed.config, i)  # raises IllegalInstruction
            raise
        old = int.from_bytes(words[i].tobytes(), "little")
        words[i] = np.frombuffer(((old & ~fmt.pack_mask("dram")) | bits).to_bytes(nb, "little"),
                                 np.uint8)
    words.flags.writeable = False
    return EncodedWords(words, kept.uops, placed.uop_offset)
