"""Squeeze-excite's channel-wise scale on the accelerator: ``qnn.mul_q31(x, s)`` of an
activation ``x`` (``N×C×H×W``) and a per-channel ``s`` (``N×C×1×1``), both int8 and
both in device memory, as a program.

The graph's ``qnn.mul_q31`` (see :mod:`tensorfab.compiler.graph.ops`) is computed by the
CPU kernel with the functional simulator's ALU arithmetic; this program computes the same,
operation for operation:

1. ``s`` (one entry per channel block and batch block) is brought into accumulator
   entries ``1..G`` by a GEMM with an identity weight entry, once;
2. each tile of ``x`` (within one channel block: a run of ``H·W`` entries of the blocked
   layout) comes into the accumulators the same way (:class:`.vector_program.VectorLoop`)
   and is multiplied by its block's ``s`` entry (``MUL`` with a source that does not
   step); zero points of an asymmetric model come off both first (``ADD -z``: the
   scale entries once, each tile's entries before the product);
3. the output scale (:func:`.vector_program.output_scale_ops`), the zero point and the
   int8 clip; the STORE keeps the low byte.

Cost per output entry: 2 GEMM micro-ops and 4–6 ALU micro-ops; 2 bytes moved per
element. Needs ``block_in == block_out``, 8-bit inputs and 32-bit accumulators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer
from tensorfab.isa.insn import Alu, Gemm, Load, Uop
from tensorfab.isa.program import Program

from .errors import CompileError
from .vector_program import (
    Tile,
    VectorLoop,
    blocked_groups,
    declare_segments,
    group_tiles,
    load_constants,
    output_scale,
    output_scale_ops,
    scale_uop,
)

__all__ = ["MUL_ATTRS", "channel_scale_program", "mul_attrs"]

#: The attributes of ``qnn.mul_q31`` the program reads.
MUL_ATTRS = ("left_shift", "multiplier", "shift", "zero_point")


def mul_attrs(s_a: float, s_b: float, s_y: float, zero_point: int = 0,
              a_zero_point: int = 0, b_zero_point: int = 0) -> dict[str, int]:
    """The ``qnn.mul_q31`` attributes of ``quantize((a - z_a) s_a · (b - z_b) s_b, s_y,
    zero_point)``: the product scaled by ``s_a · s_b / s_y`` (headroom from its largest
    magnitude, 2^14, or 255 for an operand with a zero point)."""
    largest = (256 if a_zero_point else 128) * (256 if b_zero_point else 128)
    return (output_scale(s_a * s_b / s_y, largest).attrs(zero_point)
            | {"a_zero_point": a_zero_point, "b_zero_point": b_zero_point})


def channel_scale_program(cfg: HwConfig, shape: tuple[int, ...], attrs: Mapping[str, Any],
                          x: np.ndarray | None = None, s: np.ndarray | None = None, *,
                          tile: int = 256) -> Program:
    """A program computing ``qnn.mul_q31(x, s)`` for a per-channel ``s`` (see the module
    docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    shape : tuple[int, ...]
        Shape of ``x`` and the result, blocked ``NCHW{batch}n{block}c`` (6-D); ``s`` has
        its shape with ``H = W = 1``.
    attrs : Mapping[str, Any]
        The ``qnn.mul_q31`` attributes (:data:`MUL_ATTRS`).
    x, s : numpy.ndarray | None
        Initial contents of segments ``x`` and ``s`` (int8; None: zeros).
    tile : int
        Entries per tile.

    Returns
    -------
    Program
        Segments ``x``, ``s`` (int8 inputs), ``out`` (int8 output), ``q31`` and
        ``identity`` (constants).

    Raises
    ------
    CompileError
        For a configuration or shape the program cannot take, or missing attributes.
    """
    shape = tuple(shape)
    groups, per_group = blocked_groups(cfg, shape, "qnn.mul_q31", attrs, MUL_ATTRS)
    s_shape = (shape[0], shape[1], 1, 1, shape[4], shape[5])
    t = max(1, min(tile, per_group, (cfg.inp_depth - groups) // 2,
                   (cfg.acc_depth - 1 - groups) // 2))
    if groups + 2 > min(cfg.inp_depth, cfg.acc_depth - 1):
        raise CompileError(f"qnn.mul_q31 of shape {shape}: {groups} scale entries do not "
                           f"fit the buffers of config {cfg.name!r}")
    pb = ProgramBuilder(cfg)
    declare_segments(pb, [("x", shape, x), ("s", s_shape, s)], shape, attrs)
    loop = VectorLoop(pb, t, constants=1 + groups)
    s_inp = 2 * t  # the scales' input entries, after both slots
    s_reset = pb.add_uops([Uop(acc=1)])
    s_gemm = pb.add_uops([Uop(acc=1, src=s_inp)])
    spans = [{"x": pb.add_uops([Uop(acc=slot["acc"])]),
              "scaled": pb.add_uops([scale_uop(attrs, slot["acc"])]),
              "mul": [pb.add_uops([Uop(acc=slot["acc"], src=1 + g)]) for g in range(groups)]}
             for slot in loop.slots]
    load_constants(pb)
    pb.emit(Load(buffer=Buffer.INP, sram=s_inp, dram=0, y=1, x=groups, stride=groups,
                 push_next=True), segment="s")
    pb.emit(Gemm(reset=True, uop_begin=s_reset[0], uop_end=s_reset[1], iter_out=1,
                 iter_in=groups, acc_factor_in=1, pop_prev=True))
    pb.emit(Gemm(uop_begin=s_gemm[0], uop_end=s_gemm[1], iter_out=1, iter_in=groups,
                 acc_factor_in=1, inp_factor_in=1))
    za, zb = attrs.get("a_zero_point", 0), attrs.get("b_zero_point", 0)
    if zb:
        pb.emit(VectorLoop.alu_over(groups)(s_reset, AluOp.ADD, -zb))

    def compute(slot: int, tile: Tile) -> list[Alu]:
        u, alu = spans[slot], VectorLoop.alu_over(tile.count)
        shift = [alu(u["x"], AluOp.ADD, -za)] if za else []
        return [*shift, alu(u["mul"][tile.group], AluOp.MUL, None),
                *output_scale_ops(attrs, alu, u["x"], u["scaled"])]

    loop.run(group_tiles(groups, per_group, t), "x", "out", compute)
    return pb.build()
