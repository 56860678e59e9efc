"""Instructions as one flat integer table, what the timing model's compiled code reads.

One row per instruction: its opcode, its four token flags and the fields the model
needs, at positions named by the column constants below (the columns after
:data:`FLAGS` mean different fields per opcode). Made in one pass of ``operator``
attribute getters over the instruction objects, so a program of tens of instructions
costs microseconds; or, for a :class:`~tensorfab.isa.Program`, decoded by compiled code
(:func:`word_table`) from the words its encoder wrote (:meth:`Program.encoded
<tensorfab.isa.Program.encoded>`), at the field positions of the ISA's formats
(:func:`word_fields`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from tensorfab.isa import (
    Alu,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Opcode,
    Store,
    insn_formats,
    uop_format,
)
from tensorfab.isa.insn import fast_reset_condition

from .compiled import compiled

__all__ = ["ALU_DST_FACTOR_IN", "ALU_DST_FACTOR_OUT", "ALU_OP", "ALU_SRC_FACTOR_IN",
           "ALU_SRC_FACTOR_OUT", "ALU_USE_IMM", "COLUMNS", "FAST_RESET", "ITER_IN",
           "ITER_OUT", "LOAD_BUFFER", "LOAD_DRAM", "LOAD_PAD_BOTTOM", "LOAD_PAD_LEFT",
           "LOAD_PAD_RIGHT", "LOAD_PAD_TOP", "LOAD_SRAM", "LOAD_STRIDE", "OPCODE",
           "POP_NEXT", "POP_PREV", "PUSH_NEXT", "PUSH_PREV", "STORE_REQUANT", "UOP_BEGIN",
           "UOP_END", "X",
           "Y", "insn_table", "limb_bits", "uop_indices", "word_field", "word_fields",
           "word_table"]

_HEAD = ("opcode", "pop_prev", "pop_next", "push_prev", "push_next")
#: Fields of each instruction class, in column order after the head.
_FIELDS: dict[type[Insn], tuple[str, ...]] = {
    Load: ("x", "y", "buffer", "pad_top", "pad_bottom", "pad_left", "pad_right", "sram",
           "dram", "stride"),
    Store: ("x", "y", "requant"),
    Gemm: ("uop_begin", "uop_end", "iter_out", "iter_in"),
    Alu: ("uop_begin", "uop_end", "iter_out", "iter_in", "op", "use_imm", "dst_factor_out",
          "dst_factor_in", "src_factor_out", "src_factor_in"),
    Finish: (),
}
#: Columns of the table: the fields, then :data:`FAST_RESET`.
COLUMNS = len(_HEAD) + max(len(f) for f in _FIELDS.values()) + 1
OPCODE, POP_PREV, POP_NEXT, PUSH_PREV, PUSH_NEXT = range(len(_HEAD))


def _column(name: str, *classes: type[Insn]) -> int:
    """The column of field ``name``, the same in each of ``classes``."""
    (k,) = {len(_HEAD) + _FIELDS[cls].index(name) for cls in classes}
    return k


# LOAD and STORE
X, Y = _column("x", Load, Store), _column("y", Load, Store)
STORE_REQUANT = _column("requant", Store)
LOAD_BUFFER, LOAD_PAD_TOP, LOAD_PAD_BOTTOM, LOAD_PAD_LEFT, LOAD_PAD_RIGHT, LOAD_SRAM, \
    LOAD_DRAM, LOAD_STRIDE = (_column(f, Load) for f in (
        "buffer", "pad_top", "pad_bottom", "pad_left", "pad_right", "sram", "dram", "stride"))
# GEMM and ALU
UOP_BEGIN, UOP_END, ITER_OUT, ITER_IN = (_column(f, Gemm, Alu) for f in (
    "uop_begin", "uop_end", "iter_out", "iter_in"))
ALU_OP, ALU_USE_IMM, ALU_DST_FACTOR_OUT, ALU_DST_FACTOR_IN, ALU_SRC_FACTOR_OUT, \
    ALU_SRC_FACTOR_IN = (_column(f, Alu) for f in (
        "op", "use_imm", "dst_factor_out", "dst_factor_in", "src_factor_out",
        "src_factor_in"))
#: 1 for a GEMM the compute engine runs as a fast reset
#: (:func:`~tensorfab.isa.insn.fast_reset_condition`), else 0.
FAST_RESET = COLUMNS - 1


# each class's getter returns a full row: unused columns (and FAST_RESET, filled after)
# repeat a flag (an int: quicker to convert than the opcode, an IntEnum)
_ROW = {cls: attrgetter(*_HEAD, *fields, *["pop_prev"] * (COLUMNS - len(_HEAD) - len(fields)))
        for cls, fields in _FIELDS.items()}


def insn_table(insns: Sequence[Insn]) -> np.ndarray:
    """The ``(len(insns), COLUMNS)`` ``int64`` table of ``insns`` (see the module
    docstring)."""
    row = _ROW
    flat = chain.from_iterable([row[type(insn)](insn) for insn in insns])
    table = np.fromiter(flat, dtype=np.int64, count=len(insns) * COLUMNS
                        ).reshape(len(insns), COLUMNS)
    table[:, FAST_RESET] = 0
    table[[k for k, insn in enumerate(insns)
           if type(insn) is Gemm and insn.reset and fast_reset_condition(insn)],
          FAST_RESET] = 1
    return table


class _TracedField:
    """A GEMM field (plus a constant; no name: the constant alone) as
    :func:`~tensorfab.isa.insn.fast_reset_condition` sees it when :func:`word_fields`
    traces it into terms the compiled decoder checks."""

    def __init__(self, name: str, add: int = 0) -> None:
        self.name = name
        self.add = add

    def __add__(self, k: int) -> _TracedField:
        return _TracedField(self.name, self.add + k)

    def __eq__(self, other: object) -> _TracedTerms:  # type: ignore[override]
        if isinstance(other, _TracedField):
            return _TracedTerms([(_EQUAL, self, other)])
        return _TracedTerms([(_EQUAL, self, _TracedField("", int(other)))])  # type: ignore[call-overload]

    __hash__ = None  # type: ignore[assignment]

    def __and__(self, other: _TracedField | _TracedTerms) -> _TracedTerms:
        return _TracedTerms([(_NONZERO, self, _TracedField(""))]) & other


class _TracedTerms:
    """Conditions all of which hold: ``(kind, a, b)``, ``a == b`` or ``a != 0``."""

    def __init__(self, terms: list[tuple[int, _TracedField, _TracedField]]) -> None:
        self.terms = terms

    def __and__(self, other: _TracedField | _TracedTerms) -> _TracedTerms:
        if isinstance(other, _TracedField):
            other = _TracedTerms([(_NONZERO, other, _TracedField(""))])
        return _TracedTerms(self.terms + other.terms)


class _TracedGemm:
    """A GEMM whose every field is a :class:`_TracedField`."""

    def __getattr__(self, name: str) -> _TracedField:
        return _TracedField(name)


_EQUAL, _NONZERO = 0, 1
# word_fields(): the header (the _W_* indices: the opcode field's width, FINISH's and
# GEMM's opcodes, where the terms start and how many, the micro-op's acc and src
# fields as (offset, width)), then per opcode where its columns start and how many,
# then per opcode its columns as (column, offset, width), then the fast-reset terms as
# (kind, offset a, width a, add a, offset b, width b, add b): a + add a == b + add b,
# or a != 0 (a field of width 0 reads 0)
(_W_OPCODE_BITS, _W_FINISH, _W_GEMM, _W_TERMS, _W_N_TERMS, _W_UOP_ACC, _W_UOP_SRC,
 _W_OPCODES) = (0, 1, 2, 3, 4, 5, 7, 9)
#: Widest field the decoder reads (an ``int64`` less its sign bit).
_MAX_FIELD_BITS = 63


def word_fields(cfg: HwConfig) -> np.ndarray:
    """The ``int64`` array :func:`word_table` and :func:`uop_indices` decode ``cfg``'s
    words with: the bit offset and width of each table column's field per opcode, from
    :func:`~tensorfab.isa.insn_formats` (and :func:`~tensorfab.isa.uop_format`), and
    the terms of :func:`~tensorfab.isa.insn.fast_reset_condition` traced over GEMM's
    fields.

    Raises
    ------
    ValueError
        If a format puts its opcode elsewhere than at bit 0, a field is wider than the
        decoder reads, or the host is big-endian.
    """
    if sys.byteorder != "little":
        raise ValueError("insn_table: the decoder reads words as little-endian int64")
    formats = insn_formats(cfg)
    classes = {cls.opcode: cls for cls in _FIELDS}
    columns: list[list[int]] = []
    for opcode in Opcode:
        fmt = formats[opcode]
        offsets = fmt.offsets()
        if offsets["opcode"]:
            raise ValueError("insn_table: the decoder reads the opcode at bit 0")
        cols = []
        for c, name in enumerate((*_HEAD, *_FIELDS[classes[opcode]])):
            if name not in offsets:  # a field this config's format lacks: it reads 0
                cols += [c, 0, 0]
                continue
            width = fmt.field(name).width
            if width > _MAX_FIELD_BITS:
                raise ValueError(f"insn_table: field {opcode.name}.{name} has {width} bits, "
                                 f"the decoder reads at most {_MAX_FIELD_BITS}")
            cols += [c, offsets[name], width]
        columns.append(cols)
    gemm = formats[Opcode.GEMM]

    def at(f: _TracedField) -> list[int]:
        if not f.name:
            return [0, 0, f.add]
        return [gemm.offsets()[f.name], gemm.field(f.name).width, f.add]

    terms = [v for kind, a, b in fast_reset_condition(_TracedGemm()).terms
             for v in (kind, *at(a), *at(b))]
    uop = uop_format(cfg)
    head = [formats[Opcode.LOAD].field("opcode").width, Opcode.FINISH, Opcode.GEMM, 0,
            len(terms) // 7, uop.offsets()["acc"], uop.field("acc").width,
            uop.offsets()["src"], uop.field("src").width]
    assert len(head) == _W_OPCODES
    starts = np.cumsum([len(head) + 2 * len(Opcode)] + [len(c) for c in columns])
    head[_W_TERMS] = int(starts[-1])
    index = [v for op in Opcode for v in (starts[op], len(columns[op]) // 3)]
    return np.array([*head, *index, *(v for c in columns for v in c), *terms],
                    dtype=np.int64)


@compiled(inline=True)
def word_field(words: np.ndarray, i: int, offset: int, width: int) -> int:
    """The unsigned field of ``width`` bits at bit ``offset`` of word ``i`` of
    ``words``, each word little-endian in a row of ``int64`` (the lowest first).
    Inlined into its compiled callers, so a call in their loops counts no
    references to ``words``."""
    limb = offset >> 6
    return limb_bits(words[i, limb], words[i, min(limb + 1, words.shape[1] - 1)],
                     offset & 63, width)


@compiled
def limb_bits(lo: int, hi: int, shift: int, width: int) -> int:
    """The ``width`` bits from bit ``shift`` of the 128-bit ``hi:lo`` (``int64``s)."""
    v = lo >> shift
    if shift + width > 64:
        v = (v & ((1 << (64 - shift)) - 1)) | (hi << (64 - shift))
    return v & ((1 << width) - 1)


@compiled
def word_table(words: np.ndarray, wf: np.ndarray) -> np.ndarray:
    """The table (:func:`insn_table`, unused columns 0) of the encoded instruction
    words ``words`` (one little-endian word per ``uint8`` row; the host is
    little-endian) but their FINISH, by the positions of :func:`word_fields`; the
    fast-reset column from its traced terms."""
    limbs = words.view(np.int64)
    opcode_mask = (1 << wf[_W_OPCODE_BITS]) - 1
    finish = wf[_W_FINISH]
    n = 0
    for i in range(limbs.shape[0]):
        if limbs[i, 0] & opcode_mask != finish:
            n += 1
    table = np.zeros((n, COLUMNS), np.int64)
    r = 0
    for i in range(limbs.shape[0]):
        opcode = limbs[i, 0] & opcode_mask
        if opcode == finish:
            continue
        first = wf[_W_OPCODES + 2 * opcode]
        for q in range(first, first + 3 * wf[_W_OPCODES + 2 * opcode + 1], 3):
            table[r, wf[q]] = word_field(limbs, i, wf[q + 1], wf[q + 2])
        if opcode == wf[_W_GEMM]:
            fast = 1
            for q in range(wf[_W_TERMS], wf[_W_TERMS] + 7 * wf[_W_N_TERMS], 7):
                a = word_field(limbs, i, wf[q + 1], wf[q + 2]) + wf[q + 3]
                b = word_field(limbs, i, wf[q + 4], wf[q + 5]) + wf[q + 6]
                if (a != b) if wf[q] == _EQUAL else (a == 0):
                    fast = 0
            table[r, FAST_RESET] = fast
        r += 1
    return table


@compiled
def uop_indices(uops: np.ndarray, wf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(acc, src)`` of each encoded micro-op word (one little-endian word per
    ``uint8`` row), by the positions of :func:`word_fields`."""
    n, nb = uops.shape
    fields = np.empty((2, n), np.int64)
    acc = fields[0]
    src = fields[1]
    if nb % 8 == 0:  # whole limbs: read in place
        _uop_fields(uops.view(np.int64), wf, acc, src)
        return acc, src
    limbs = np.zeros((n, ((nb + 7) >> 3) + 1), np.int64)  # a spare limb (zero) after
    for i in range(n):
        for b in range(nb):
            limbs[i, b >> 3] |= np.int64(uops[i, b]) << (8 * (b & 7))
    _uop_fields(limbs, wf, acc, src)
    return acc, src


@compiled
def _uop_fields(limbs: np.ndarray, wf: np.ndarray, acc: np.ndarray, src: np.ndarray
                ) -> None:
    """Fill ``acc`` and ``src`` from the micro-op words ``limbs`` (``int64`` rows)."""
    for i in range(limbs.shape[0]):
        acc[i] = word_field(limbs, i, wf[_W_UOP_ACC], wf[_W_UOP_ACC + 1])
        src[i] = word_field(limbs, i, wf[_W_UOP_SRC], wf[_W_UOP_SRC + 1])
