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
import itertools
import math
from collections.abc import Mapping

from .config import HwConfig
from .errors import ProgramError
from .formats import uop_format
from .insn import Insn, Load, Store, buffer_entry_bytes, dram_unit
from .program import UOP_SEGMENT, Program, Region, dram_alignment

__all__ = ["check_placement", "place_program", "placement_alignment", "transfer_bytes"]


def placement_alignment(program_or_cfg: Program | HwConfig) -> int:
    """The byte alignment a placed region needs: a multiple of every transfer unit and of
    :func:`~tensorfab.isa.program.dram_alignment` (so the region stays aligned for
    every access it serves)."""
    cfg = getattr(program_or_cfg, "config", program_or_cfg)
    from .formats import Buffer

    units = [buffer_entry_bytes(cfg, b) for b in Buffer] + [cfg.out_entry_bytes,
                                                             uop_format(cfg).bytes]
    return math.lcm(dram_alignment(cfg), *units)


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
            insn = dataclasses.replace(insn, dram=insn.dram + shift // unit)
        moved.append(insn)
    placed = Program(program.config, moved, list(program.uops), list(program.segments),
                     {n: int(addresses[n]) for n in names})
    check_placement(placed)
    return placed


def check_placement(program: Program) -> None:
    """Raise :class:`ProgramError` if a placed program's regions are unaligned, overlap
    or leave the DRAM address space."""
    if program.placement is None:
        return
    align = placement_alignment(program)
    lay = program.layout()
    spans = sorted((r.offset, r.offset + r.nbytes, n) for n, r in lay.items()
                   if n != "end" and r.nbytes)
    for n, r in lay.items():
        if n != "end" and r.offset % align:
            raise ProgramError(f"placement: region {n!r} at byte {r.offset:#x} is not "
                               f"aligned to {align} bytes")
    for (_, end_a, a), (start_b, _, b) in itertools.pairwise(spans):
        if start_b < end_a:
            raise ProgramError(f"placement: regions {a!r} and {b!r} overlap at byte "
                               f"{start_b:#x}")
    if lay["end"].offset > program.config.dram_bytes:
        raise ProgramError(f"placement: the program reaches byte {lay['end'].offset:#x}, "
                           f"past the {program.config.dram_addr_width}-bit address space")
