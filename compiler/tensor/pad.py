"""Spatial padding with a constant on the accelerator: ``nn.pad`` of an int8 activation
as a program.

An asymmetric model pads its convolutions' input with the input's zero point ``z``
(the float model's zeros), where the accelerator's LOAD pads with 0. This program
writes the padded tensor (blocked ``NCHW{batch}n{block}c``, one batch block) in device
memory: an accumulator tile holding ``z`` in every lane (a GEMM reset and ``ADD z``) is
stored over the whole output first; then rows of the input come into the accumulators
by the identity GEMM (:class:`.vector_program.VectorLoop`, several whole rows per tile)
and are stored into the interior, row by row ``W + left + right`` entries apart. The
store engine keeps program order, so the interior overwrites the fill.

Cost: 2 GEMM micro-ops per input entry and the fill's one store per output tile; the
output is written once whole and the interior a second time. Needs ``block_in ==
block_out``, 8-bit inputs and 32-bit accumulators.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer
from tensorfab.isa.insn import Alu, Gemm, Load, Store, Uop
from tensorfab.isa.program import Program, Segment

from .errors import CompileError
from .vector_program import Tile, VectorLoop, block_entries, uniform_tiles

__all__ = ["pad_program", "spatial_pads"]


def spatial_pads(pads: Sequence[int]) -> tuple[int, int, int, int] | None:
    """``(top, left, bottom, right)`` of NCHW or blocked ``NCHW{n}n{c}c`` ``pads``
    (ONNX order: the begins of the axes, then their ends) that pad only the height and
    width, else None."""
    pads = tuple(int(p) for p in pads)
    rank = len(pads) // 2
    if rank not in (4, 6) or len(pads) % 2 or min(pads) < 0:
        return None
    begins, ends = pads[:rank], pads[rank:]
    if any(begins[i] or ends[i] for i in range(rank) if i not in (2, 3)):
        return None
    return begins[2], begins[3], ends[2], ends[3]


def pad_program(cfg: HwConfig, shape: tuple[int, ...], pads: tuple[int, int, int, int],
                value: int, x: np.ndarray | None = None, *, tile: int = 256) -> Program:
    """A program padding the blocked int8 ``x`` by ``pads`` (top, left, bottom, right)
    with ``value`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    shape : tuple[int, ...]
        Blocked ``NCHW{batch}n{block}c`` shape (6-D) of ``x``, one batch block.
    pads : tuple[int, int, int, int]
        Rows above and below, columns left and right: ``(top, left, bottom, right)``.
    value : int
        The int8 value of the padding.
    x : numpy.ndarray | None
        Initial contents of segment ``x`` (int8; None: zeros).
    tile : int
        Entries per tile (whole rows when a row fits).

    Returns
    -------
    Program
        Segments ``x`` (int8 input), ``out`` (int8 output) and ``identity``.

    Raises
    ------
    CompileError
        For a configuration or shape the program cannot take, or a value outside int8.
    """
    shape = tuple(shape)
    block_entries(cfg, shape, "nn.pad")
    if len(shape) != 6 or shape[0] != 1:
        raise CompileError(f"nn.pad of shape {shape}: the program takes a blocked "
                           "NCHW{n}n{c}c activation (6-D) with one batch block")
    if not -128 <= value <= 127 or min(pads) < 0:
        raise CompileError(f"nn.pad by {pads} with {value}: needs pads >= 0 and an int8 "
                           "value")
    top, left, bottom, right = pads
    blocks, h, w = shape[1], shape[2], shape[3]
    ho, wo = h + top + bottom, w + left + right
    out_shape = (1, blocks, ho, wo, *shape[4:])
    t = max(1, min(tile, cfg.inp_depth // 2, cfg.acc_depth // 4))
    fill = min(t, blocks * ho * wo)
    pb = ProgramBuilder(cfg)
    pb.add_segment(Segment("x", "int8", shape, x))
    pb.add_segment(Segment("out", "int8", out_shape, output=True))
    pb.add_segment(Segment("identity", "int8", (cfg.block_out, cfg.block_in),
                           np.eye(cfg.block_out, dtype=np.int8)))
    loop = VectorLoop(pb, t, constants=fill)
    fill_uop = pb.add_uops([Uop(acc=0)])
    pb.load_uops()
    pb.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=1, stride=1, push_next=True),
            segment="identity")
    pb.emit(Gemm(reset=True, uop_begin=fill_uop[0], uop_end=fill_uop[1], iter_out=1,
                 iter_in=fill, acc_factor_in=1, pop_prev=True, push_next=not value))
    if value:
        pb.emit(Alu(op=AluOp.ADD, use_imm=True, imm=value, uop_begin=fill_uop[0],
                    uop_end=fill_uop[1], iter_out=1, iter_in=fill, dst_factor_in=1,
                    push_next=True))
    for i, part in enumerate(uniform_tiles(blocks * ho * wo, fill)):
        pb.emit(Store(sram=0, dram=part.start, y=1, x=fill, stride=fill, pop_prev=i == 0),
                segment="out")
    loop.run(_interior_tiles(blocks, h, w, top, left, ho, wo, t), "x", "out",
             lambda _slot, _tile: [])
    return pb.build()


def _interior_tiles(blocks: int, h: int, w: int, top: int, left: int, ho: int, wo: int,
                    t: int) -> list[Tile]:
    """Tiles of whole input rows (as many as fit ``t`` entries), or of parts of a row
    wider than ``t``, each stored at its place in the padded output."""
    tiles = []
    for b in range(blocks):
        if w <= t:
            k = min(h, t // w)
            for y in range(0, h, k):
                rows = min(k, h - y)
                tiles.append(Tile((b * h + y) * w, rows * w,
                                  out_start=(b * ho + y + top) * wo + left,
                                  rows=rows, out_stride=wo))
            continue
        for y in range(h):
            for part in uniform_tiles(w, t):
                tiles.append(Tile((b * h + y) * w + part.start, part.count,
                                  out_start=(b * ho + y + top) * wo + left + part.start))
    return tiles
