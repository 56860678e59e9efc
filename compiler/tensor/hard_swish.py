"""int8 hard-swish on the accelerator: ``qnn.hard_swish_q31`` as a program.

The graph's ``qnn.hard_swish_q31`` (see :mod:`tensorfab.compiler.graph.ops`) is computed
by the CPU kernel with the functional simulator's ALU arithmetic; this module builds the
same computation as an accelerator program, operation for operation, so both agree bit
for bit:

1. each int8 tile is brought into the accumulators by a GEMM with an identity weight
   entry (``x = q @ I``, exact);
2. ``ADD -input_zero_point`` (an asymmetric input only), ``t = MOV x``, ``SHL t_shift``,
   ``ADD offset``, ``MAX 0``, ``MIN upper``
   (``relu6(x + 3)`` in units of ``x``'s step over ``2^t_shift``), ``x = MUL x, t``;
3. ``SHL left_shift`` (with the output exponent when it is positive), ``MULHI`` by the
   Q31 multiplier (an accumulator entry holding it in every lane, loaded once),
   ``SHR_RND`` by a negative exponent, ``ADD zero_point``, ``CLIP 127``; the STORE keeps
   the low byte.

Tiles alternate between two buffer slots in software-pipelined order
(:class:`.vector_program.VectorLoop`). Cost per output entry: 2 GEMM micro-ops (reset and identity)
and 9–12 ALU micro-ops; 2 bytes moved per element. Needs ``block_in == block_out``,
8-bit inputs and 32-bit accumulators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.insn import Alu, Uop
from tensorfab.isa.program import Program

from .vector_program import (
    Tile,
    VectorLoop,
    block_entries,
    declare_segments,
    load_constants,
    output_scale,
    output_scale_ops,
    scale_uop,
    uniform_tiles,
)

__all__ = ["HARD_SWISH_ATTRS", "hard_swish_attrs", "hard_swish_program"]

#: The attributes of ``qnn.hard_swish_q31`` the program reads.
HARD_SWISH_ATTRS = ("t_shift", "offset", "upper", "left_shift", "multiplier", "shift",
                    "zero_point")


#: Largest ``upper`` (``6 / s_x``): a 16-bit ALU immediate.
MAX_UPPER = 32767


def hard_swish_attrs(s_x: float, s_y: float, zero_point: int = 0,
                     input_zero_point: int = 0) -> dict[str, int] | None:
    """The ``qnn.hard_swish_q31`` attributes of ``quantize(hard_swish((x - z_x) · s_x),
    s_y, zero_point)`` (``z_x = input_zero_point``).

    ``t`` is computed in units of ``s_x / 2^k`` (``x`` shifted left by ``k = t_shift``,
    the largest with ``6 · 2^k / s_x`` a 16-bit immediate), so that 3 and 6 rounded to
    its steps, ``offset = round(3 · 2^k / s_x)`` and ``upper = round(6 · 2^k / s_x)``,
    are exact to a fraction of an input step. The product ``x · t`` is in units of
    ``s_x² / 2^k`` and scaled by ``s_x² / (2^k · 6 s_y)`` (:func:`.vector_program.
    output_scale`, headroom from its largest magnitude ``128 · upper``, ``256 · upper``
    with an input zero point).

    Returns
    -------
    dict | None
        The attributes, or None when ``6 / s_x`` itself is no 16-bit immediate (an input
        range under 0.02: the CPU keeps it).
    """
    if not 6.0 / s_x <= MAX_UPPER:
        return None
    t_shift = min(max(0, int(np.floor(np.log2(MAX_UPPER * s_x / 6.0)))), 16)
    while np.rint(6.0 * (1 << t_shift) / s_x) > MAX_UPPER:
        t_shift -= 1
    upper = int(np.rint(6.0 * (1 << t_shift) / s_x))
    offset = int(np.rint(3.0 * (1 << t_shift) / s_x))
    scale = output_scale(s_x * s_x / ((1 << t_shift) * 6.0 * s_y),
                         (256 if input_zero_point else 128) * upper)
    return ({"t_shift": t_shift, "offset": offset, "upper": upper,
             "input_zero_point": input_zero_point} | scale.attrs(zero_point))


def hard_swish_program(cfg: HwConfig, shape: tuple[int, ...], attrs: Mapping[str, Any],
                       x: np.ndarray | None = None, *, tile: int = 256) -> Program:
    """A program computing ``qnn.hard_swish_q31(x)`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    shape : tuple[int, ...]
        Shape of the input and the result (any layout whose values come in whole entries
        of ``batch × block_in``; the operation is element-wise).
    attrs : Mapping[str, Any]
        The ``qnn.hard_swish_q31`` attributes (:data:`HARD_SWISH_ATTRS`).
    x : numpy.ndarray | None
        Initial contents of segment ``x`` (int8; None: zeros).
    tile : int
        Entries per tile (at most half the input buffer, a quarter of the accumulators).

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
    entries = block_entries(cfg, tuple(shape), "qnn.hard_swish_q31", attrs,
                            HARD_SWISH_ATTRS)
    t = max(1, min(tile, entries, cfg.inp_depth // 2, (cfg.acc_depth - 1) // 4))
    pb = ProgramBuilder(cfg)
    declare_segments(pb, [("x", shape, x)], shape, attrs)
    loop = VectorLoop(pb, t, constants=1, acc_tiles=2)
    spans = []  # per slot: the input's values at X, t at X + t
    for s in loop.slots:
        xa = s["acc"]
        u = {"x": Uop(acc=xa), "t_mov": Uop(acc=xa + t, src=xa), "t": Uop(acc=xa + t),
             "mul": Uop(acc=xa, src=xa + t), "scaled": scale_uop(attrs, xa)}
        spans.append({k: pb.add_uops([v]) for k, v in u.items()})
    load_constants(pb)

    def compute(slot: int, tile: Tile) -> list[Alu]:
        u, alu = spans[slot], VectorLoop.alu_over(tile.count)
        ops = []
        if attrs.get("input_zero_point", 0):
            ops.append(alu(u["x"], AluOp.ADD, -attrs["input_zero_point"]))
        ops.append(alu(u["t_mov"], AluOp.MOV, None, True))
        if attrs["t_shift"]:
            ops.append(alu(u["t"], AluOp.SHL, attrs["t_shift"]))
        ops += [alu(u["t"], AluOp.ADD, attrs["offset"]), alu(u["t"], AluOp.MAX, 0),
                alu(u["t"], AluOp.MIN, attrs["upper"]), alu(u["mul"], AluOp.MUL, None, True)]
        return ops + output_scale_ops(attrs, alu, u["x"], u["scaled"])

    loop.run(uniform_tiles(entries, t), "x", "out", compute)
    return pb.build()
