"""Instructions and micro-ops as Python objects, with encode, decode and legality checks.

The attribute names of these dataclasses are the field names of the formats in
:mod:`.formats`; positions and widths come only from there.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .config import HwConfig
from .csr import ErrorCode
from .errors import IllegalInstruction, UsageError
from .fields import FieldRangeError
from .formats import (
    ENGINE_OF,
    FAST_RESET_LANES,
    MAX_SHIFT,
    REQUANT_RECORD_BYTES,
    REQUANT_RECORD_WORDS,
    SHIFT_OPS,
    AluOp,
    Buffer,
    Engine,
    Opcode,
    alu_requant_supported,
    insn_formats,
    insn_width,
    requant_supported,
    uop_format,
)


@dataclass(frozen=True)
class Insn:
    """Base of all instructions: the four dependency-token flags."""

    opcode: ClassVar[Opcode]
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def engine(self) -> Engine:
        """Engine that executes this instruction."""
        return ENGINE_OF[self.opcode]

    @property
    def mnemonic(self) -> str:
        """Assembly mnemonic (``load.inp``, ``alu.add``, ``gemm``...)."""
        return self.opcode.name.lower()

    def values(self) -> dict[str, int]:
        """Field values keyed by format field name (opcode included)."""
        out = {"opcode": int(self.opcode)}
        for name in _field_names(type(self)):
            out[name] = int(getattr(self, name))
        return out


@functools.cache
def _field_names(cls: type[Insn]) -> tuple[str, ...]:
    """The dataclass field names of an instruction class (``dataclasses.fields`` is
    slow enough to matter when encoding thousands of instructions)."""
    return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class Load(Insn):
    """2-D DMA from DRAM into an on-chip buffer, with zero padding on four sides.

    Writes ``(pad_top + y + pad_bottom) × (pad_left + x + pad_right)`` consecutive
    entries starting at ``sram``; row ``r`` of the data comes from DRAM entries
    ``dram + r*stride .. dram + r*stride + x - 1``.
    """

    opcode: ClassVar[Opcode] = Opcode.LOAD
    buffer: Buffer = Buffer.INP
    sram: int = 0
    dram: int = 0
    y: int = 1
    x: int = 1
    stride: int = 1
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0

    @property
    def mnemonic(self) -> str:
        return f"load.{self.buffer.name.lower()}"

    @property
    def rows(self) -> int:
        """Rows written including padding."""
        return self.pad_top + self.y + self.pad_bottom

    @property
    def cols(self) -> int:
        """Entries per row written including padding."""
        return self.pad_left + self.x + self.pad_right


@dataclass(frozen=True)
class Store(Insn):
    """2-D DMA of accumulator entries, narrowed to int8 (low byte), into DRAM.

    With ``requant`` (configs with REQUANT), each entry is narrowed through REQUANT's
    arithmetic with the per-channel records held in accumulator entries ``rec`` to
    ``rec + 2`` (docs/isa.md, "STORE").
    """

    opcode: ClassVar[Opcode] = Opcode.STORE
    sram: int = 0
    dram: int = 0
    y: int = 1
    x: int = 1
    stride: int = 1
    requant: bool = False
    rec: int = 0


@dataclass(frozen=True)
class Gemm(Insn):
    """``acc[a] += inp[i] @ wgt[w].T`` over micro-ops inside a two-level loop."""

    opcode: ClassVar[Opcode] = Opcode.GEMM
    reset: bool = False
    uop_begin: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    acc_factor_out: int = 0
    acc_factor_in: int = 0
    inp_factor_out: int = 0
    inp_factor_in: int = 0
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0


@dataclass(frozen=True)
class Alu(Insn):
    """``acc[dst] = op(acc[dst], acc[src] or imm)`` over micro-ops inside a two-level loop."""

    opcode: ClassVar[Opcode] = Opcode.ALU
    op: AluOp = AluOp.ADD
    use_imm: bool = False
    imm: int = 0
    uop_begin: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0

    @property
    def mnemonic(self) -> str:
        return f"alu.{self.op.name.lower()}"


@dataclass(frozen=True)
class Finish(Insn):
    """End of the program: the core reports done once load and store are idle."""

    opcode: ClassVar[Opcode] = Opcode.FINISH


@dataclass(frozen=True)
class Uop:
    """A micro-op: accumulator, source and weight indices."""

    acc: int = 0
    src: int = 0
    wgt: int = 0


INSN_CLASSES: dict[Opcode, type[Insn]] = {
    Opcode.LOAD: Load,
    Opcode.STORE: Store,
    Opcode.GEMM: Gemm,
    Opcode.ALU: Alu,
    Opcode.FINISH: Finish,
}


@functools.cache
def _bool_fields(cls: type[Insn]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if isinstance(f.default, bool))


def buffer_depth(cfg: HwConfig, buffer: Buffer) -> int:
    """Entries of the on-chip buffer ``buffer``."""
    return {Buffer.UOP: cfg.uop_depth, Buffer.WGT: cfg.wgt_depth,
            Buffer.INP: cfg.inp_depth, Buffer.ACC: cfg.acc_depth}[buffer]


def buffer_entry_bytes(cfg: HwConfig, buffer: Buffer) -> int:
    """Bytes one entry of ``buffer`` occupies in DRAM."""
    return {Buffer.UOP: uop_format(cfg).bytes, Buffer.WGT: cfg.wgt_entry_bytes,
            Buffer.INP: cfg.inp_entry_bytes, Buffer.ACC: cfg.acc_entry_bytes}[buffer]


def dram_unit_of(cfg: HwConfig, opcode: Opcode, buffer: Buffer = Buffer.INP) -> int:
    """Bytes per unit of the ``dram`` field of a LOAD into ``buffer`` (entries of the
    buffer) or of a STORE (output entries)."""
    if opcode is Opcode.LOAD:
        return buffer_entry_bytes(cfg, buffer)
    if opcode is Opcode.STORE:
        return cfg.out_entry_bytes
    raise ValueError(f"{opcode.name} has no dram field")


def dram_unit(cfg: HwConfig, insn: Insn) -> int:
    """Bytes per unit of ``insn``'s ``dram`` field (:func:`dram_unit_of`)."""
    return dram_unit_of(cfg, insn.opcode, getattr(insn, "buffer", Buffer.INP))


def segment_dram(cfg: HwConfig, insn: Insn, segment: str, byte_offset: int) -> int:
    """The ``dram`` value addressing the first entry of a segment at ``byte_offset``.

    Raises
    ------
    ValueError
        If the segment does not start on a whole entry of ``insn``'s transfer.
    """
    unit = dram_unit(cfg, insn)
    if byte_offset % unit:
        raise ValueError(f"segment {segment!r} at byte {byte_offset} is not aligned to "
                         f"{unit}-byte entries")
    return byte_offset // unit


def fast_reset_lanes(cfg: HwConfig) -> int:
    """Accumulator entries a fast reset zeroes per cycle (one zero-flag row). At most
    half the accumulator depth, so that the flag memory has two rows (a one-row memory
    has a zero-width address, which Amaranth writes as ``wire [-1:0]``)."""
    return min(FAST_RESET_LANES, cfg.acc_depth // 2)


def fast_reset_condition(g):
    """The fast-reset condition over a GEMM's fields: a reset with one micro-op, a
    contiguous inner loop and no input or weight steps.

    Written with ``&`` and ``==`` only, so that it evaluates both on a :class:`Gemm`
    (to a bool) and on the hardware's decoded instruction view (to an Amaranth value).
    """
    return (g.reset & (g.uop_end == g.uop_begin + 1) & (g.acc_factor_in == 1)
            & (g.inp_factor_out == 0) & (g.inp_factor_in == 0)
            & (g.wgt_factor_out == 0) & (g.wgt_factor_in == 0))


def is_fast_reset(insn: Insn) -> bool:
    """Whether the compute engine zeroes this GEMM's accumulators many per cycle
    (:func:`fast_reset_condition`)."""
    return isinstance(insn, Gemm) and bool(fast_reset_condition(insn))


def _illegal(insn: Insn, field: str, message: str, index: int | None,
             code: ErrorCode = ErrorCode.BAD_FIELD) -> IllegalInstruction:
    return IllegalInstruction(f"{insn.mnemonic}: {message}", code=code, index=index,
                              engine=insn.engine.name.lower(), field=field)


def _no_vector_alu(cfg: HwConfig, index: int | None) -> IllegalInstruction:
    """The error of an ALU instruction in a config without the vector ALU: its opcode
    is not one of the config's (``BAD_OPCODE``, as the hardware's check reports it)."""
    return IllegalInstruction(f"alu: config {cfg.name!r} has no vector ALU (vector_alu "
                              "is false)", index=index, code=ErrorCode.BAD_OPCODE,
                              engine=Engine.COMPUTE.name.lower(), field="opcode")


def check_insn(insn: Insn, cfg: HwConfig, index: int | None = None) -> None:
    """Raise :class:`IllegalInstruction` if ``insn`` is not legal for ``cfg``.

    Checks the rules that do not depend on run-time state: dependency flags that
    name a stage the engine does not have, zero sizes, indices past a buffer's
    depth, empty micro-op ranges, zero loop extents, shift amounts and canonical
    immediates; an ALU instruction in a config without the vector ALU.
    """
    if isinstance(insn, Alu) and not cfg.vector_alu:
        raise _no_vector_alu(cfg, index)
    if insn.engine is Engine.LOAD:
        for flag in ("pop_prev", "push_prev"):
            if getattr(insn, flag):
                raise _illegal(insn, flag, "the load engine has no previous stage", index)
    if insn.engine is Engine.STORE:
        for flag in ("pop_next", "push_next"):
            if getattr(insn, flag):
                raise _illegal(insn, flag, "the store engine has no next stage", index)
    if isinstance(insn, Load | Store):
        for name in ("y", "x"):
            if getattr(insn, name) < 1:
                raise _illegal(insn, name, f"{name} = 0: transfers must be at least 1", index)
        depth = buffer_depth(cfg, insn.buffer) if isinstance(insn, Load) else cfg.acc_depth
        if insn.sram >= depth:
            raise _illegal(insn, "sram", f"sram = {insn.sram} is past the buffer depth {depth}",
                           index)
    if isinstance(insn, Store):
        if insn.requant:
            if not requant_supported(cfg):
                raise _illegal(insn, "requant", f"config {cfg.name!r} has no REQUANT in its "
                               f"STOREs (a weight row of {cfg.block_in} bytes cannot hold "
                               f"the ALU's {REQUANT_RECORD_BYTES}-byte record, and the "
                               "STOREs requantize where the ALU does or in a config "
                               "without the vector ALU)", index)
            if insn.rec > cfg.acc_depth - REQUANT_RECORD_WORDS:
                raise _illegal(insn, "rec", f"rec = {insn.rec}: its {REQUANT_RECORD_WORDS} "
                               f"record entries run past the acc depth {cfg.acc_depth}",
                               index)
        elif insn.rec != 0:
            raise _illegal(insn, "rec", "rec must be 0 when requant is clear", index)
    if isinstance(insn, Load) and insn.buffer is Buffer.UOP:
        for name in ("pad_top", "pad_bottom", "pad_left", "pad_right"):
            if getattr(insn, name):
                raise _illegal(insn, name, "micro-op loads cannot be padded", index)
    if isinstance(insn, Gemm | Alu):
        if insn.uop_end > cfg.uop_depth:
            raise _illegal(insn, "uop_end", f"uop_end = {insn.uop_end} is past the micro-op "
                           f"buffer depth {cfg.uop_depth}", index)
        if insn.uop_begin >= insn.uop_end:
            raise _illegal(insn, "uop_end", f"empty micro-op range {insn.uop_begin}:"
                           f"{insn.uop_end}", index)
        for name in ("iter_out", "iter_in"):
            if getattr(insn, name) < 1:
                raise _illegal(insn, name, f"{name} = 0: loop extents must be at least 1",
                               index)
    if isinstance(insn, Alu):
        if insn.use_imm and insn.op in SHIFT_OPS and not 0 <= insn.imm <= MAX_SHIFT:
            raise _illegal(insn, "imm", f"shift amount {insn.imm} outside 0..{MAX_SHIFT}",
                           index)
        if not insn.use_imm and insn.imm != 0:
            raise _illegal(insn, "imm", "imm must be 0 when use_imm is clear", index)
        if insn.op is AluOp.REQUANT:
            if not alu_requant_supported(cfg):
                raise _illegal(insn, "op", f"config {cfg.name!r} has no REQUANT (a weight "
                               f"row of {cfg.block_in} bytes cannot "
                               f"hold its {REQUANT_RECORD_BYTES}-byte record)", index)
            if insn.use_imm:
                raise _illegal(insn, "use_imm", "requant takes no immediate", index)


@functools.cache
def _absent_fields(cfg: HwConfig, cls: type[Insn]) -> tuple[str, ...]:
    """Fields of ``cls`` that ``cfg``'s format lacks (a STORE's requantization on a
    config without REQUANT)."""
    names = {f.name for f in insn_formats(cfg)[cls.opcode].fields}
    return tuple(n for n in _field_names(cls) if n not in names)


@functools.cache
def _field_kinds(cls: type[Insn]) -> tuple[tuple[str, type | None], ...]:
    """Per field of an instruction class its name and the enum its value comes from
    (``None`` for an integer or flag field)."""
    return tuple((f.name, type(f.default) if isinstance(f.default, Buffer | AluOp) else None)
                 for f in dataclasses.fields(cls))


_INT_TYPES = (int, bool)


def _field_value(insn: Insn, name: str, enum: type | None, v: object,
                 index: int | None) -> int:
    """The value of a field whose Python type is not the plain one (``int`` or ``bool``;
    the enum of an enum field): an integer-like object (a NumPy integer or bool) as an ``int``,
    an enum's value given as an integer as its member. Raises :class:`IllegalInstruction` naming the
    instruction kind and the field otherwise (a float is never truncated)."""
    kind = insn.opcode.name.lower()
    try:
        value = int(v) if isinstance(v, np.bool_) else operator.index(v)  # type: ignore
    except TypeError:
        raise IllegalInstruction(f"{kind}: {name} = {v!r} is not an integer",
                                 code=ErrorCode.BAD_FIELD, index=index,
                                 engine=insn.engine.name.lower(), field=name) from None
    if enum is None:
        return value
    try:
        return enum(value)
    except ValueError:
        members = ", ".join(m.name for m in enum)  # type: ignore[attr-defined]
        raise IllegalInstruction(f"{kind}: {name} = {v!r} is not a valid "
                                 f"{enum.__name__} ({members})", code=ErrorCode.BAD_FIELD,
                                 index=index, engine=insn.engine.name.lower(),
                                 field=name) from None


def encode_insn(insn: Insn, cfg: HwConfig, index: int | None = None) -> int:
    """Encode a legal instruction into an integer of :func:`insn_width` bits.

    Every field must be an integer (a ``bool``, an enum member or a NumPy integer too;
    a float is refused, never truncated), and ``buffer`` and ``op`` a value of
    :class:`Buffer` and :class:`AluOp` (a member, or its value as an integer, which is
    checked as that member).

    Raises
    ------
    IllegalInstruction
        If a field is not an integer or not a valid enum value (naming the instruction
        kind and the field), the instruction breaks an ISA rule, or a value does not
        fit its field.
    """
    values = {"opcode": int(insn.opcode)}
    replace = None
    for name, enum in _field_kinds(type(insn)):
        v = getattr(insn, name)
        t = type(v)
        if t is not enum and (enum is not None or t not in _INT_TYPES):
            v = _field_value(insn, name, enum, v, index)
            if enum is not None:
                replace = {**(replace or {}), name: v}
        values[name] = v
    if replace is not None:  # an enum field given as an integer: checked as its member
        insn = dataclasses.replace(insn, **replace)
    check_insn(insn, cfg, index)
    fmt = insn_formats(cfg)[insn.opcode]
    for name in _absent_fields(cfg, type(insn)):  # zero: check_insn refuses anything else
        del values[name]
    try:
        return fmt.pack(values)
    except FieldRangeError as exc:
        raise _illegal(insn, exc.field, str(exc), index) from exc


def decode_insn(word: int, cfg: HwConfig, index: int | None = None) -> Insn:
    """Decode an instruction word, rejecting every illegal encoding.

    Raises
    ------
    IllegalInstruction
        Unknown opcode, set reserved bits, an enum value out of range, or any rule
        of :func:`check_insn`; the error names the index and field.
    """
    if word < 0 or word >> insn_width(cfg):
        raise IllegalInstruction(f"word does not fit {insn_width(cfg)} bits", index=index,
                                 code=ErrorCode.RESERVED_BITS, field="opcode")
    opcode_bits = word & 0b111
    try:
        opcode = Opcode(opcode_bits)
    except ValueError:
        raise IllegalInstruction(f"unknown opcode {opcode_bits}", index=index,
                                 code=ErrorCode.BAD_OPCODE, field="opcode") from None
    if opcode is Opcode.ALU and not cfg.vector_alu:
        raise _no_vector_alu(cfg, index)
    fmt = insn_formats(cfg)[opcode]
    cls = INSN_CLASSES[opcode]
    if word & fmt.reserved_mask:
        raise IllegalInstruction(
            f"{opcode.name.lower()}: reserved bits set (mask {word & fmt.reserved_mask:#x})",
            index=index, code=ErrorCode.RESERVED_BITS, engine=ENGINE_OF[opcode].name.lower(),
            field="reserved")
    values = fmt.unpack(word)
    kwargs: dict[str, object] = {}
    for f in fmt.fields:
        if f.name == "opcode":
            continue
        v = values[f.name]
        if f.enum is not None:
            try:
                kwargs[f.name] = f.enum(v)
            except ValueError:
                raise IllegalInstruction(
                    f"{opcode.name.lower()}: {f.name} = {v} is not a valid {f.enum.__name__}",
                    index=index, code=ErrorCode.BAD_FIELD,
                    engine=ENGINE_OF[opcode].name.lower(), field=f.name) from None
        elif f.name in _bool_fields(cls):
            kwargs[f.name] = bool(v)
        else:
            kwargs[f.name] = v
    insn = cls(**kwargs)  # type: ignore[arg-type]
    check_insn(insn, cfg, index)
    return insn


def encode_uop(uop: Uop, cfg: HwConfig, index: int | None = None) -> int:
    """Encode a micro-op into its word.

    Raises
    ------
    IllegalInstruction
        If an index does not fit its field (code UOP_RANGE).
    """
    try:
        return uop_format(cfg).pack({"acc": uop.acc, "src": uop.src, "wgt": uop.wgt})
    except FieldRangeError as exc:
        raise IllegalInstruction(f"micro-op {index}: {exc}", code=ErrorCode.UOP_RANGE,
                                 field=exc.field) from exc


def decode_uop(word: int, cfg: HwConfig) -> Uop:
    """Decode a micro-op word (reserved bits ignored, as the hardware does).

    Raises
    ------
    UsageError
        If ``word`` is negative or wider than the micro-op word.
    """
    fmt = uop_format(cfg)
    if word < 0 or word >> fmt.width:
        raise UsageError(f"micro-op word {word:#x} does not fit the {fmt.width}-bit "
                         f"micro-op word of config {cfg.name!r}")
    v = fmt.unpack(word)
    return Uop(acc=v["acc"], src=v["src"], wgt=v["wgt"])
