"""Global average pooling on the accelerator: ``qnn.global_avg_pool_q31`` as a program.

The graph's ``qnn.global_avg_pool_q31`` (see :mod:`tensorfab.compiler.graph.ops`) is
the int32 sum over the spatial axes scaled to int8; this program computes the same:

1. accumulator entries ``1..G`` (one per channel block and batch block) are loaded with
   ``-H·W·z`` (``z`` the input's zero point, 0 for a symmetric model);
2. the input (blocked ``NCHW{n}n{c}c``: a run of ``H·W`` entries per channel block) is
   loaded in tiles alternating between two input-buffer slots, and each tile is summed
   into its block's entry by a GEMM with an identity weight entry whose accumulator
   index does not step (exact; a GEMM reads the accumulator it adds to with the previous
   write forwarded);
3. the output scale (:func:`.vector_program.output_scale_ops`: ``1 / (H·W)`` and the
   scales), the zero point and the int8 clip over the ``G`` sums, one STORE.

Cost: one GEMM micro-op per input entry, 4–6 ALU micro-ops per output entry; one byte
moved per input element. Needs ``block_in == block_out``, 8-bit inputs and 32-bit
accumulators.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfab.isa import HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer
from tensorfab.isa.insn import Gemm, Load, Store, Uop
from tensorfab.isa.program import Program, Segment

from .errors import CompileError
from .vector_program import (
    Tile,
    VectorLoop,
    blocked_groups,
    declare_segments,
    load_constants,
    output_scale,
    output_scale_ops,
    scale_uop,
)

__all__ = ["GLOBAL_POOL_ATTRS", "global_avg_pool_attrs", "global_avg_pool_program"]

#: The attributes of ``qnn.global_avg_pool_q31`` the program reads.
GLOBAL_POOL_ATTRS = ("left_shift", "multiplier", "shift", "zero_point")


def global_avg_pool_attrs(s_x: float, s_y: float, pixels: int, zero_point: int = 0,
                          input_zero_point: int = 0) -> dict[str, int]:
    """The ``qnn.global_avg_pool_q31`` attributes of ``quantize(mean((x - z_x) · s_x),
    s_y, zero_point)`` over ``pixels`` values: the sum scaled by ``s_x / (pixels · s_y)``
    (headroom from its largest magnitude, ``128 · pixels``, twice that with an input
    zero point)."""
    scale = output_scale(s_x / (pixels * s_y), (256 if input_zero_point else 128) * pixels)
    return scale.attrs(zero_point) | {"input_zero_point": input_zero_point}


def global_avg_pool_program(cfg: HwConfig, shape: tuple[int, ...],
                            attrs: Mapping[str, Any], x: np.ndarray | None = None, *,
                            tile: int = 256) -> Program:
    """A program computing ``qnn.global_avg_pool_q31(x)`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    shape : tuple[int, ...]
        Shape of ``x``, blocked ``NCHW{batch}n{block}c`` (6-D); the result has it with
        ``H = W = 1``.
    attrs : Mapping[str, Any]
        The ``qnn.global_avg_pool_q31`` attributes (:data:`GLOBAL_POOL_ATTRS`).
    x : numpy.ndarray | None
        Initial contents of segment ``x`` (int8; None: zeros).
    tile : int
        Entries per tile (at most half the input buffer).

    Returns
    -------
    Program
        Segments ``x`` (int8 input), ``out`` (int8 output), ``q31`` and ``identity``
        (constants).

    Raises
    ------
    CompileError
        For a configuration or shape the program cannot take, or missing attributes.
    """
    shape = tuple(shape)
    groups, per_group = blocked_groups(cfg, shape, "qnn.global_avg_pool_q31", attrs,
                                       GLOBAL_POOL_ATTRS)
    if groups + 1 > cfg.acc_depth:
        raise CompileError(f"qnn.global_avg_pool_q31 of shape {shape}: {groups} sums do not "
                           f"fit the accumulators of config {cfg.name!r}")
    t = max(1, min(tile, per_group, cfg.inp_depth // 2))
    pb = ProgramBuilder(cfg)
    declare_segments(pb, [("x", shape, x)], (shape[0], shape[1], 1, 1, shape[4], shape[5]),
                     attrs)
    lanes = cfg.batch * cfg.block_out
    start = -per_group * attrs.get("input_zero_point", 0)  # Σ (x - z) = Σ x - H·W·z
    pb.add_segment(Segment("start", "int32", (groups, lanes),
                           np.full((groups, lanes), start, np.int64)))
    sums = pb.add_uops([Uop(acc=1)])
    scaled = pb.add_uops([scale_uop(attrs, 1)])
    add = [[pb.add_uops([Uop(acc=1 + g, src=slot * t)]) for g in range(groups)]
           for slot in range(2)]
    load_constants(pb)
    # the sums start at -H·W·z: loaded before the tiles on the load engine, so the
    # first GEMM (after its tile's token) follows it
    pb.emit(Load(buffer=Buffer.ACC, sram=1, dram=0, y=1, x=groups, stride=groups),
            segment="start")

    tiles = [Tile(g * per_group + j, min(t, per_group - j), g)
             for g in range(groups) for j in range(0, per_group, t)]
    n = len(tiles)

    def load(i: int) -> None:
        pb.emit(Load(buffer=Buffer.INP, sram=(i % 2) * t, dram=tiles[i].start, y=1,
                     x=tiles[i].count, stride=tiles[i].count, pop_next=i >= 2,
                     push_next=True), segment="x")

    for i in range(min(2, n)):
        load(i)
    for i, tl in enumerate(tiles):
        span = add[i % 2][tl.group]
        pb.emit(Gemm(uop_begin=span[0], uop_end=span[1], iter_out=1, iter_in=tl.count,
                     acc_factor_in=0, inp_factor_in=1, pop_prev=True, push_prev=i + 2 < n))
        if i + 2 < n:
            load(i + 2)

    ops = output_scale_ops(attrs, VectorLoop.alu_over(groups), sums, scaled)
    for op in ops[:-1]:
        pb.emit(op)
    pb.emit(dataclasses.replace(ops[-1], push_next=True))
    pb.emit(Store(sram=1, dram=0, y=1, x=groups, stride=groups, pop_prev=True),
            segment="out")
    return pb.build()
