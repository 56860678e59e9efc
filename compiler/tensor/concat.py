"""Channel concatenation on the accelerator: ``qnn.concat_q31(a, b)`` as a program.

Two int8 activations in the blocked layout ``NCHW{batch}n{block}c`` with one batch block
(``N ≤ batch``), the same height and width, and ``a``'s channels a whole number of
blocks: then the concatenation along the channels is ``a``'s entries followed by
``b``'s (``b``'s padding channels, if any, are the result's). Each input tile comes
into the accumulators by a GEMM with an identity weight entry
(:class:`.vector_program.VectorLoop`), is requantized to the output's scale by one
REQUANT with that input's record (``(x - z_x) · s_x / s_y + z_y``, rounded once) unless
its scale and zero point are the output's already, and is stored at its place in the
output. The graph's ``qnn.concat_q31`` (see :mod:`tensorfab.compiler.graph.ops`) is
computed by the CPU kernel with the same REQUANT arithmetic, so both agree bit for bit.

Cost per output entry: 2 GEMM micro-ops, 1 ALU micro-op for an input that is
requantized, none for one that is copied; 2 bytes moved per element. Needs
``block_in == block_out``, 8-bit inputs and 32-bit accumulators, and REQUANT for an
input whose scale differs from the output's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer, requant_supported
from tensorfab.isa.insn import Alu, Load, Uop
from tensorfab.isa.program import Program, Segment
from tensorfab.isa.requant_record import pack_requant_records

from .errors import CompileError
from .vector_program import Tile, VectorLoop, block_entries, uniform_tiles

__all__ = ["CONCAT_ATTRS", "CONCAT_INPUTS", "concat_attrs", "concat_program",
           "is_copy", "record_fields"]

#: The two inputs' names: their segments and the prefixes of their attributes.
CONCAT_INPUTS = ("a", "b")

#: The attributes of ``qnn.concat_q31`` the program reads.
CONCAT_ATTRS = tuple(f"{x}_{k}" for x in CONCAT_INPUTS
                     for k in ("multiplier", "shift", "zero_point")) + ("zero_point",)

#: ``(multiplier, shift)`` of a scale of exactly 1 (TFLite's Q31 form of 1.0).
_UNIT = (1 << 30, 1)


def concat_attrs(s_a: float, z_a: int, s_b: float, z_b: int, s_y: float, z_y: int
                 ) -> dict[str, int]:
    """The ``qnn.concat_q31`` attributes of ``quantize(concatenate((a - z_a) s_a,
    (b - z_b) s_b), s_y, z_y)``: per input the Q31 multiplier and exponent of
    ``s_x / s_y`` (exactly 1 when the scales are equal) and its zero point."""
    from .requant import quantize_multiplier_q31

    attrs = {"zero_point": z_y}
    for x, s, z in (("a", s_a, z_a), ("b", s_b, z_b)):
        m, e = _UNIT if np.float32(s) == np.float32(s_y) else quantize_multiplier_q31(
            float(np.float32(s)) / float(np.float32(s_y)))
        attrs |= {f"{x}_multiplier": m, f"{x}_shift": e, f"{x}_zero_point": z}
    return attrs


def is_copy(attrs: Mapping[str, Any], x: str) -> bool:
    """Whether input ``x`` enters the output unchanged (scale 1, the output's zero
    point)."""
    return ((attrs[f"{x}_multiplier"], attrs[f"{x}_shift"]) == _UNIT
            and attrs[f"{x}_zero_point"] == attrs["zero_point"])


def record_fields(attrs: Mapping[str, Any], x: str) -> dict[str, int]:
    """The REQUANT record of input ``x``: ``clamp(RDBPOT((v - z_x) · m, 31 - e) + z_y,
    -128, 127)``."""
    return {"multiplier": attrs[f"{x}_multiplier"], "bias": -attrs[f"{x}_zero_point"],
            "shift": 31 - attrs[f"{x}_shift"], "zero_point": attrs["zero_point"],
            "lo": -128, "hi": 127}


def concat_program(cfg: HwConfig, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                   attrs: Mapping[str, Any], a: np.ndarray | None = None,
                   b: np.ndarray | None = None, *, tile: int = 256) -> Program:
    """A program computing ``qnn.concat_q31(a, b)`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    a_shape, b_shape : tuple[int, ...]
        Blocked ``NCHW{batch}n{block}c`` shapes (6-D) of the inputs.
    attrs : Mapping[str, Any]
        The ``qnn.concat_q31`` attributes (:data:`CONCAT_ATTRS`).
    a, b : numpy.ndarray | None
        Initial contents of segments ``a`` and ``b`` (int8; None: zeros).
    tile : int
        Entries per tile.

    Returns
    -------
    Program
        Segments ``a``, ``b`` (int8 inputs), ``out`` (int8 output), ``identity`` and, per
        requantized input, ``record_a``/``record_b`` (constants).

    Raises
    ------
    CompileError
        For a configuration or shapes the program cannot take, missing attributes, or a
        requantized input on a config without REQUANT.
    """
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    entries = {x: block_entries(cfg, s, "qnn.concat_q31", attrs, CONCAT_ATTRS)
               for x, s in (("a", a_shape), ("b", b_shape))}
    if len(a_shape) != 6 or len(b_shape) != 6:
        raise CompileError(f"qnn.concat_q31 of shapes {a_shape} and {b_shape}: the program "
                           "takes blocked NCHW{n}n{c}c activations (6-D)")
    if a_shape[0] != 1 or b_shape[0] != 1 or a_shape[2:] != b_shape[2:]:
        raise CompileError(f"qnn.concat_q31 of shapes {a_shape} and {b_shape}: the inputs "
                           "need one batch block and the same height, width and blocking")
    out_shape = (1, a_shape[1] + b_shape[1], *a_shape[2:])
    scaled = [x for x in CONCAT_INPUTS if not is_copy(attrs, x)]
    if scaled and not requant_supported(cfg):
        raise CompileError(f"config {cfg.name!r} has no REQUANT: qnn.concat_q31 can only "
                           f"copy inputs at the output's scale ({', '.join(scaled)} differ)")
    t = max(1, min(tile, max(entries.values()), cfg.inp_depth // 2, cfg.acc_depth // 2))
    pb = ProgramBuilder(cfg)
    pb.add_segment(Segment("a", "int8", a_shape, a))
    pb.add_segment(Segment("b", "int8", b_shape, b))
    pb.add_segment(Segment("out", "int8", out_shape, output=True))
    pb.add_segment(Segment("identity", "int8", (cfg.block_out, cfg.block_in),
                           np.eye(cfg.block_out, dtype=np.int8)))
    entry = {x: 1 + i for i, x in enumerate(scaled)}  # weight entries of the records
    for x in scaled:
        rows = pack_requant_records(cfg, **{k: np.full(cfg.block_out, v, np.int64)
                                            for k, v in record_fields(attrs, x).items()})
        pb.add_segment(Segment(f"record_{x}", "int8", rows.shape[1:], rows[0]))
    loop = VectorLoop(pb, t, constants=0)
    spans = [{x: pb.add_uops([Uop(acc=slot["acc"], wgt=entry[x])]) for x in scaled}
             for slot in loop.slots]
    pb.load_uops()
    pb.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=1, stride=1), segment="identity")
    for x in scaled:
        pb.emit(Load(buffer=Buffer.WGT, sram=entry[x], dram=0, y=1, x=1, stride=1),
                segment=f"record_{x}")

    def compute(slot: int, tile: Tile) -> list[Alu]:
        x = tile.segment or "a"
        if x not in entry:
            return []
        return [VectorLoop.alu_over(tile.count)(spans[slot][x], AluOp.REQUANT, None)]

    tiles = [Tile(u.start, u.count, segment=x, out_start=u.start + offset)
             for x, offset in (("a", 0), ("b", entries["a"]))
             for u in uniform_tiles(entries[x], min(t, entries[x]))]
    loop.run(tiles, "a", "out", compute)
    return pb.build()
