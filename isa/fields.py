"""Bit-field declarations: a :class:`Format` is an ordered list of :class:`Field`.

A format is the *only* place where bit positions exist. Encoders, decoders, the
Amaranth ``lib.data`` layouts of the hardware decoder and docs/isa.md are all
computed from formats, never written by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

from .errors import TensorfabError


class FieldRangeError(TensorfabError, ValueError):
    """A value does not fit the field it is meant for."""

    def __init__(self, fmt: str, field: str, value: int, lo: int, hi: int) -> None:
        self.format = fmt
        self.field = field
        self.value = value
        super().__init__(
            f"{fmt}.{field} = {value} does not fit the field (allowed {lo}..{hi})")


@dataclass(frozen=True)
class Field:
    """One field of a format.

    Parameters
    ----------
    name : str
        Field name; also the attribute name of the instruction dataclass.
    width : int
        Width in bits (derived from the HwConfig where it depends on it).
    doc : str
        One-line description for docs/isa.md.
    signed : bool
        Two's-complement field.
    enum : type[IntEnum] | None
        Enumeration the field's values come from, if any.
    """

    name: str
    width: int
    doc: str
    signed: bool = False
    enum: type[IntEnum] | None = None

    @property
    def lo(self) -> int:
        """Smallest encodable value."""
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        """Largest encodable value."""
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class Format:
    """A word of ``width`` bits made of ``fields`` packed from bit 0 upward.

    Bits above the last field are reserved and must be zero.
    """

    name: str
    fields: tuple[Field, ...]
    width: int

    def __post_init__(self) -> None:
        used = sum(f.width for f in self.fields)
        if used > self.width:
            raise ValueError(f"format {self.name}: fields need {used} bits > width {self.width}")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"format {self.name}: duplicate field names")

    @property
    def used_bits(self) -> int:
        """Bits covered by fields."""
        return sum(f.width for f in self.fields)

    @property
    def bytes(self) -> int:
        """Bytes one word occupies in memory."""
        return self.width // 8

    @cached_property
    def reserved_mask(self) -> int:
        """Mask of the reserved bits (must be zero in a legal word)."""
        return ((1 << self.width) - 1) & ~((1 << self.used_bits) - 1)

    def offsets(self) -> dict[str, int]:
        """Bit offset of every field's least significant bit."""
        out: dict[str, int] = {}
        pos = 0
        for f in self.fields:
            out[f.name] = pos
            pos += f.width
        return out

    def field(self, name: str) -> Field:
        """The field called ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"format {self.name} has no field {name!r}")

    def pack(self, values: Mapping[str, int]) -> int:
        """Pack field values into a word; missing fields are zero.

        Raises
        ------
        FieldRangeError
            If a value does not fit its field.
        KeyError
            If ``values`` names a field the format lacks.
        """
        names, packing = self._packing
        if not names.issuperset(values):
            for key in values:
                self.field(key)  # raises, naming the key
        word = 0
        for name, lo, hi, mask, pos in packing:
            v = int(values.get(name, 0))
            if not lo <= v <= hi:
                raise FieldRangeError(self.name, name, v, lo, hi)
            word |= (v & mask) << pos
        return word

    def pack_mask(self, name: str) -> int:
        """The bits of field ``name`` in a word."""
        return ((1 << self.field(name).width) - 1) << self.offsets()[name]

    @cached_property
    def _packing(self) -> tuple[frozenset[str], tuple[tuple[str, int, int, int, int], ...]]:
        """The field names, and per field its name, range, mask and bit offset."""
        offsets = self.offsets()
        return (frozenset(offsets), tuple((f.name, f.lo, f.hi, (1 << f.width) - 1,
                                           offsets[f.name]) for f in self.fields))

    def unpack(self, word: int) -> dict[str, int]:
        """Field values of a word (reserved bits are ignored; see :attr:`reserved_mask`)."""
        out: dict[str, int] = {}
        for name, _lo, hi, mask, pos in self._packing[1]:
            v = (word >> pos) & mask
            if v > hi:  # a signed field's negative value
                v -= mask + 1
            out[name] = v
        return out
