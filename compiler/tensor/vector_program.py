"""What the accelerator's int8 vector programs share (hard-swish, the channel-wise
multiply of squeeze-excite, global average pooling): the check of a blocked operand, a
Q31 output scale with headroom, the ALU micro-ops that apply it, and the software-pipelined
loop over tiles that brings int8 tiles into the accumulators and stores them back.

Every such program moves an int8 tile into the accumulators by a GEMM with an identity
weight entry (exact), computes on it with the vector ALU, and stores the low byte of each
accumulator. The output scale is TFLite's MultiplyByQuantizedMultiplier on the ALU (SHL,
MULHI by a Q31 multiplier held in an accumulator entry, SHR_RND), after a left shift by
the headroom the values leave below 2^31 so that MULHI's rounding falls far below the
result's; then the zero point and the int8 clip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer, alu_requant_supported
from tensorfab.isa.insn import Alu, Gemm, Load, Store, Uop
from tensorfab.isa.program import Segment
from tensorfab.isa.requant_record import pack_requant_records

from .errors import CompileError

__all__ = ["OutputScale", "Tile", "VectorLoop", "block_entries", "blocked_groups",
           "declare_segments", "group_tiles", "load_constants", "output_scale",
           "output_scale_ops", "scale_uop", "single", "uniform_tiles",
           "vector_program_refusal"]


def vector_program_refusal(cfg: HwConfig) -> str | None:
    """What ``cfg`` lacks to run vector programs (residual adds, activations, channel
    scales and permutations, which move int8 entries of ``batch × block_in`` values
    through accumulator entries of ``batch × block_out``, with the vector ALU): ``"the
    vector ALU ..."`` or ``"block_in == block_out (got ...), 8-bit inputs and 32-bit
    accumulators"``, or ``None`` when it has it."""
    if not cfg.vector_alu:
        return "the vector ALU (vector_alu is false)"
    if cfg.block_in != cfg.block_out or cfg.inp_width != 8 or cfg.acc_width != 32:
        return (f"block_in == block_out (got {cfg.block_in}, {cfg.block_out}), 8-bit "
                "inputs and 32-bit accumulators")
    return None


def block_entries(cfg: HwConfig, shape: tuple[int, ...], what: str,
                  attrs: Mapping[str, Any] | None = None, names: Sequence[str] = ()) -> int:
    """Entries of ``batch × block_in`` values in a tensor of ``shape`` that a vector
    program of ``what`` reads.

    Raises
    ------
    CompileError
        A config without ``block_in == block_out``, 8-bit inputs and 32-bit accumulators;
        missing attributes among ``names``; a size that is no whole number of entries.
    """
    lacks = vector_program_refusal(cfg)
    if lacks is not None:
        raise CompileError(f"config {cfg.name!r}: {what} needs {lacks}")
    missing = [k for k in names if attrs is None or k not in attrs]
    if missing:
        raise CompileError(f"{what}: missing attributes {', '.join(missing)}")
    lanes = cfg.batch * cfg.block_in
    size = int(np.prod(shape))
    if size % lanes:
        raise CompileError(f"{what} of shape {shape}: {size} values are not whole entries "
                           f"of {lanes} (use the blocked layout)")
    return size // lanes


def blocked_groups(cfg: HwConfig, shape: tuple[int, ...], what: str,
                   attrs: Mapping[str, Any], names: Sequence[str]) -> tuple[int, int]:
    """``(groups, per_group)`` of a blocked ``NCHW{n}n{c}c`` activation: its runs of
    ``H·W`` entries, one per batch block and channel block (the checks of
    :func:`block_entries`, and 6-D)."""
    block_entries(cfg, shape, what, attrs, names)
    if len(shape) != 6:
        raise CompileError(f"{what} of shape {shape}: the program takes a blocked "
                           "NCHW{n}n{c}c activation (6-D)")
    return shape[0] * shape[1], shape[2] * shape[3]


@dataclass(frozen=True)
class OutputScale:
    """``y = MultiplyByQuantizedMultiplier(SHL(v, left_shift), multiplier, shift)``."""

    left_shift: int
    multiplier: int
    shift: int

    def attrs(self, zero_point: int = 0) -> dict[str, int]:
        """The operator attributes of this scale and the output's ``zero_point``."""
        return {"left_shift": self.left_shift, "multiplier": self.multiplier,
                "shift": self.shift, "zero_point": zero_point}


def output_scale(real: float, largest: int) -> OutputScale:
    """The Q31 scale of ``real`` for values of magnitude at most ``largest``, with the
    largest left shift that keeps ``largest`` (shifted, and by a positive exponent)
    below 2^31."""
    from .requant import quantize_multiplier_q31

    left = max(0, 30 - int(largest).bit_length())
    while True:
        multiplier, shift = quantize_multiplier_q31(real / (1 << left))
        if left == 0 or int(largest) << (left + max(shift, 0)) < 1 << 31:
            return OutputScale(left, multiplier, shift)
        left -= 1


def output_scale_ops(attrs: Mapping[str, Any], alu: Callable[..., Alu],
                     value: tuple[int, int], scaled: tuple[int, int]) -> list[Alu]:
    """ALU instructions applying ``attrs``' ``left_shift``, ``multiplier``, ``shift`` and
    ``zero_point`` and the int8 clip to the values of micro-op span ``value``, or with
    ``rounding="single"`` one REQUANT; ``scaled`` is the span of :func:`scale_uop`.
    ``alu(span, op, imm)`` builds one instruction (``imm`` None: the source operand)."""
    if single(attrs):
        return [alu(scaled, AluOp.REQUANT, None)]
    shift, left = attrs["shift"], attrs["left_shift"]
    ops = []
    if left + max(shift, 0):
        ops.append(alu(value, AluOp.SHL, left + max(shift, 0)))
    ops.append(alu(scaled, AluOp.MULHI, None))
    if shift < 0:
        ops.append(alu(value, AluOp.SHR_RND, -shift))
    if attrs["zero_point"]:
        ops.append(alu(value, AluOp.ADD, attrs["zero_point"]))
    ops.append(alu(value, AluOp.CLIP, 127))
    return ops


def single(attrs: Mapping[str, Any]) -> bool:
    """Whether the output scale is one REQUANT (``rounding="single"``)."""
    return attrs.get("rounding", "double") == "single"


def scale_uop(attrs: Mapping[str, Any], acc: int) -> Uop:
    """The micro-op of the output scale's instruction on accumulator entry ``acc``: its
    operand is the REQUANT record's weight entry (1, the micro-op's ``wgt``) or the
    accumulator entry holding the Q31 multiplier (0, its ``src``)."""
    return Uop(acc=acc, wgt=1) if single(attrs) else Uop(acc=acc, src=0)


def declare_segments(pb: ProgramBuilder, inputs: Sequence[tuple[str, tuple[int, ...],
                                                                 np.ndarray | None]],
                     out_shape: tuple[int, ...], attrs: Mapping[str, Any]) -> None:
    """The segments of a vector program: its int8 ``inputs`` (name, shape, contents or
    None), ``out`` (int8, the output), ``identity`` (the weight entry that moves an
    input tile into the accumulators) and the output scale's operand: ``q31`` (one
    accumulator entry holding the multiplier in every lane) or, with
    ``rounding="single"``, ``record`` (a weight entry whose every row is the REQUANT
    record of the scale, the zero point and the int8 clamp).

    Raises
    ------
    CompileError
        ``rounding="single"`` on a config without REQUANT.
    """
    cfg = pb.cfg
    lanes = cfg.batch * cfg.block_out
    for name, shape, data in inputs:
        pb.add_segment(Segment(name, "int8", shape, data))
    pb.add_segment(Segment("out", "int8", out_shape, output=True))
    pb.add_segment(Segment("identity", "int8", (cfg.block_out, cfg.block_in),
                           np.eye(cfg.block_out, dtype=np.int8)))
    if single(attrs):
        if not alu_requant_supported(cfg):
            raise CompileError(f"config {cfg.name!r} has no REQUANT: rounding='single' "
                               "needs it")
        record = pack_requant_records(
            cfg, multiplier=np.full(cfg.block_out, attrs["multiplier"], np.int64), bias=0,
            shift=31 - attrs["shift"], zero_point=attrs["zero_point"], lo=-128, hi=127)
        pb.add_segment(Segment("record", "int8", record.shape[1:], record[0]))
    else:
        pb.add_segment(Segment("q31", "int32", (1, lanes),
                               np.full((1, lanes), attrs["multiplier"], np.int64)))


def load_constants(pb: ProgramBuilder, **flags: bool) -> None:
    """The loads of a vector program's constants: the micro-ops, ``identity`` to weight
    entry 0, and ``record`` to weight entry 1 or ``q31`` to accumulator entry 0
    (``flags`` on the last)."""
    pb.load_uops()
    pb.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=1, stride=1), segment="identity")
    if any(s.name == "record" for s in pb.segments):
        pb.emit(Load(buffer=Buffer.WGT, sram=1, dram=0, y=1, x=1, stride=1, **flags),
                segment="record")
    else:
        pb.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=1, stride=1, **flags),
                segment="q31")


@dataclass(frozen=True)
class Tile:
    """``count`` entries from entry ``start`` of the input, of operand group ``group``;
    stored from entry ``out_start`` of the output (default: ``start``) as ``rows`` rows
    of ``count / rows`` entries, ``out_stride`` entries apart (default: contiguous)."""

    start: int
    count: int
    group: int = 0
    out_start: int | None = None
    rows: int = 1
    out_stride: int | None = None


class VectorLoop:
    """The pipelined tile loop of a vector program: each tile loaded from ``segment`` into
    one of two input-buffer slots, moved into that slot's accumulators by an identity
    GEMM, computed on by the instructions ``compute`` returns, and stored to ``out``.

    The accumulators hold ``constants`` entries first (loaded or computed before
    :meth:`run`), then per slot ``acc_tiles`` tiles of ``tile`` entries (the first gets
    the input; the rest are scratch for ``compute``).

    Parameters
    ----------
    pb : ProgramBuilder
        The program under construction (segments declared, micro-ops not yet loaded).
    tile : int
        Entries per tile.
    constants : int
        Accumulator entries before the slots.
    acc_tiles : int
        Accumulator tiles per slot.
    """

    def __init__(self, pb: ProgramBuilder, tile: int, constants: int = 1,
                 acc_tiles: int = 1) -> None:
        self.pb, self.tile = pb, tile
        self.slots = []
        for s in range(2):
            inp, acc = tile * s, constants + acc_tiles * tile * s
            self.slots.append({"inp": inp, "acc": acc,
                               "reset": pb.add_uops([Uop(acc=acc)]),
                               "gemm": pb.add_uops([Uop(acc=acc, src=inp)])})

    @staticmethod
    def alu_over(count: int) -> Callable[..., Alu]:
        """``alu(span, op, imm, vector=False)``: one ALU instruction over ``count``
        entries of the micro-op ``span`` (``imm`` None: the source operand, stepping
        with the destination when ``vector``)."""
        def alu(span: tuple[int, int], op: AluOp, imm: int | None,
                vector: bool = False) -> Alu:
            return Alu(op=op, use_imm=imm is not None, imm=imm or 0, uop_begin=span[0],
                       uop_end=span[1], iter_out=1, iter_in=count, dst_factor_out=0,
                       dst_factor_in=1, src_factor_out=0, src_factor_in=1 if vector else 0)
        return alu

    def run(self, tiles: Sequence[Tile], segment: str, out: str,
            compute: Callable[[int, Tile], list[Alu]]) -> None:
        """Emit the loop over ``tiles``; ``compute(slot, tile)`` returns the ALU
        instructions of one tile in slot ``slot`` (0 or 1), the last one signalling the
        store (none: the tile is stored as it came, the GEMM signals)."""
        pb, n = self.pb, len(tiles)

        def load(i: int) -> None:
            pb.emit(Load(buffer=Buffer.INP, sram=self.slots[i % 2]["inp"],
                         dram=tiles[i].start, y=1, x=tiles[i].count, stride=tiles[i].count,
                         pop_next=i >= 2, push_next=True), segment=segment)

        for i in range(min(2, n)):
            load(i)
        for i, t in enumerate(tiles):
            s = self.slots[i % 2]
            pb.emit(Gemm(reset=True, uop_begin=s["reset"][0], uop_end=s["reset"][1],
                         iter_out=1, iter_in=t.count, acc_factor_in=1, pop_prev=True,
                         pop_next=i >= 2))
            ops = compute(i % 2, t)
            pb.emit(Gemm(uop_begin=s["gemm"][0], uop_end=s["gemm"][1], iter_out=1,
                         iter_in=t.count, acc_factor_in=1, inp_factor_in=1,
                         push_prev=i + 2 < n, push_next=not ops))
            if ops:
                ops[-1] = dataclasses.replace(ops[-1], push_next=True)
            for op in ops:
                pb.emit(op)
            cols = t.count // t.rows
            pb.emit(Store(sram=s["acc"], dram=t.start if t.out_start is None else t.out_start,
                          y=t.rows, x=cols, stride=t.out_stride or cols, pop_prev=True,
                          push_prev=i + 2 < n), segment=out)
            if i + 2 < n:
                load(i + 2)


def uniform_tiles(entries: int, tile: int) -> list[Tile]:
    """Tiles of ``tile`` entries over ``entries`` (the last shifted back to end at the
    last entry: elementwise programs compute some entries twice, identically)."""
    n = -(-entries // tile)
    return [Tile(min(i * tile, entries - tile), tile) for i in range(n)]


def group_tiles(groups: int, per_group: int, tile: int) -> list[Tile]:
    """Tiles of at most ``tile`` entries within each of ``groups`` consecutive runs of
    ``per_group`` entries (the last of a run shifted back within it), tagged with the
    run's index."""
    t = min(tile, per_group)
    return [Tile(g * per_group + start.start, t, g)
            for g in range(groups) for start in uniform_tiles(per_group, t)]
