"""Residual adds on the accelerator: ``qnn.add_q31`` (TFLite's int8 ADD) as a program.

The graph's int8 residual add (``qnn.add_q31``, see :mod:`tensorfab.compiler.graph.ops`)
is computed by the CPU kernel with the functional simulator's ALU arithmetic. This
module builds the same computation as an accelerator program, operation for operation,
so its result is bit-exact with the CPU kernel:

1. each operand tile (int8, one input-buffer entry per ``batch × block_in`` values) is
   brought into the accumulators by a GEMM with an identity weight entry
   (``acc = x @ I``, exact), both operands in one GEMM instruction;
2. ``ADD -zero_point`` of an operand with one (asymmetric models), ``SHL left_shift``
   (both), ``MULHI`` by the operand's Q31 multiplier (a vector
   operand: an accumulator entry holding the multiplier in every lane, loaded once),
   ``SHL`` / ``SHR_RND`` by the operand's exponent; for the operand with the larger
   scale (multiplier ``2^30``, exponent 0) ``SHL left_shift`` + ``MULHI`` is exactly
   ``SHL left_shift - 1``, one micro-op instead of two;
3. ``ADD`` of the two, then the output multiplier the same way, ``ADD zero_point``,
   ``CLIP 127`` (and ``MAX 0`` for a fused ``relu``); the STORE keeps the low byte.

Tiles of ``tile`` entries alternate between two buffer slots (input and accumulator), so
the loads of a tile and the store of the previous one overlap its computation; the
instructions are emitted in software-pipelined order (the loads of tile ``t + 2`` after
the computation of tile ``t``) so the in-order fetch never holds a load behind a
computation that waits for it.

Cost per output entry: 2 GEMM micro-ops + 7–10 ALU micro-ops (one micro-op per cycle on
the compute engine), plus ~11 instructions per tile; the data moved is 3 bytes per
element. Needs ``block_in == block_out``, 8-bit inputs and 32-bit accumulators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer
from tensorfab.isa.insn import Alu, Gemm, Load, Store, Uop
from tensorfab.isa.program import Program, Segment

from .vector_program import block_entries

__all__ = ["ADD_Q31_ATTRS", "residual_add_program"]

#: The attributes of ``qnn.add_q31`` the program reads.
ADD_Q31_ATTRS = ("left_shift", "a_multiplier", "a_shift", "b_multiplier", "b_shift",
                 "out_multiplier", "out_shift", "zero_point")

#: Accumulator entries of the Q31 multipliers (a, b, out), loaded once.
_CONSTS = 3


def _half(attrs: Mapping[str, Any], k: str) -> bool:
    """Whether operand ``k``'s scaling ``MULHI(SHL(x, L), 2^30)`` (multiplier 2^30, exponent
    0: the operand with the larger scale) is exactly ``SHL(x, L - 1)``: ``x · 2^(L+30)``
    is a multiple of 2^31 and gemmlowp's nudge (below 2^30 in magnitude) never carries."""
    return attrs[f"{k}_multiplier"] == 1 << 30 and attrs[f"{k}_shift"] == 0 \
        and attrs["left_shift"] >= 1


def residual_add_program(cfg: HwConfig, shape: tuple[int, ...], attrs: Mapping[str, Any],
                         a: np.ndarray | None = None, b: np.ndarray | None = None, *,
                         relu: bool = False, tile: int = 256) -> Program:
    """A program computing ``qnn.add_q31(a, b)`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    shape : tuple[int, ...]
        Shape of both operands and of the result (any layout whose values come in whole
        entries of ``batch × block_in``; the add is element-wise).
    attrs : Mapping[str, Any]
        The ``qnn.add_q31`` attributes (:data:`ADD_Q31_ATTRS`).
    a, b : numpy.ndarray | None
        Initial contents of segments ``a`` and ``b`` (int8; None: zeros).
    relu : bool
        Apply ``max(y, 0)`` to the int8 result (a ``relu`` reading the add, fused: one
        ``MAX 0`` after ``CLIP``).
    tile : int
        Entries per tile (at most a quarter of the input buffer).

    Returns
    -------
    Program
        Segments ``a``, ``b`` (int8 inputs), ``out`` (int8 output), ``q31`` and
        ``identity`` (constants).

    Raises
    ------
    CompileError
        For a configuration or shape the program cannot take, or missing attributes.
    """
    entries = block_entries(cfg, tuple(shape), "a residual add", attrs, ADD_Q31_ATTRS)
    t = max(1, min(tile, entries, cfg.inp_depth // 4, (cfg.acc_depth - _CONSTS) // 4))
    lanes = cfg.batch * cfg.block_out
    pb = ProgramBuilder(cfg)
    pb.add_segment(Segment("a", "int8", shape, a))
    pb.add_segment(Segment("b", "int8", shape, b))
    pb.add_segment(Segment("out", "int8", shape, output=True))
    mults = np.array([attrs["a_multiplier"], attrs["b_multiplier"], attrs["out_multiplier"]],
                     np.int64)
    pb.add_segment(Segment("q31", "int32", (_CONSTS, lanes),
                           np.repeat(mults[:, None], lanes, 1)))
    pb.add_segment(Segment("identity", "int8", (cfg.block_out, cfg.block_in),
                           np.eye(cfg.block_out, dtype=np.int8)))

    # per slot: inputs a at A, b at A + t; accumulators x at X, y at X + t
    slots = []
    for s in range(2):
        ia, xa = 2 * t * s, _CONSTS + 2 * t * s
        u = {"x": Uop(acc=xa), "gemm": Uop(acc=xa, src=ia), "y": Uop(acc=xa + t),
             "y_mulhi": Uop(acc=xa + t, src=1), "add": Uop(acc=xa, src=xa + t),
             "out": Uop(acc=xa, src=2)}
        slots.append({k: pb.add_uops([v]) for k, v in u.items()} | {"inp": ia, "acc": xa})

    pb.load_uops()
    pb.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=1, stride=1), segment="identity")
    pb.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=_CONSTS, stride=_CONSTS),
            segment="q31")

    n = -(-entries // t)
    starts = [min(i * t, entries - t) for i in range(n)]  # the last tile shifts back

    def loads(i: int) -> None:
        s = slots[i % 2]
        pb.emit(Load(buffer=Buffer.INP, sram=s["inp"], dram=starts[i], y=1, x=t, stride=t,
                     pop_next=i >= 2), segment="a")
        pb.emit(Load(buffer=Buffer.INP, sram=s["inp"] + t, dram=starts[i], y=1, x=t,
                     stride=t, push_next=True), segment="b")

    def alu(span: tuple[int, int], op: AluOp, imm: int | None, *, both: bool = False,
            src: tuple[int, int] = (0, 0), **flags: bool) -> Alu:
        return Alu(op=op, use_imm=imm is not None, imm=imm or 0, uop_begin=span[0],
                   uop_end=span[1], iter_out=2 if both else 1, iter_in=t,
                   dst_factor_out=t if both else 0, dst_factor_in=1,
                   src_factor_out=src[0], src_factor_in=src[1], **flags)

    def scale(s: dict, key: str, shift: int, out: list[Alu]) -> None:
        if shift > 0:
            out.append(alu(s[key], AluOp.SHL, shift))
        elif shift < 0:
            out.append(alu(s[key], AluOp.SHR_RND, -shift))

    for i in range(min(2, n)):
        loads(i)
    for i in range(n):
        s = slots[i % 2]
        pb.emit(Gemm(reset=True, uop_begin=s["x"][0], uop_end=s["x"][1], iter_out=1,
                     iter_in=2 * t, acc_factor_in=1, pop_prev=True, pop_next=i >= 2))
        pb.emit(Gemm(uop_begin=s["gemm"][0], uop_end=s["gemm"][1], iter_out=2, iter_in=t,
                     acc_factor_out=t, acc_factor_in=1, inp_factor_out=t, inp_factor_in=1,
                     push_prev=i + 2 < n))
        left, half = attrs["left_shift"], (_half(attrs, "a"), _half(attrs, "b"))
        ops: list[Alu] = []
        zeros = (attrs.get("a_zero_point", 0), attrs.get("b_zero_point", 0))
        if zeros[0] and zeros[0] == zeros[1]:
            ops.append(alu(s["x"], AluOp.ADD, -zeros[0], both=True))
        else:
            for key, z in zip(("x", "y"), zeros, strict=True):
                if z:
                    ops.append(alu(s[key], AluOp.ADD, -z))
        if half[0] == half[1]:  # both operands alike: one instruction each
            if left:
                ops.append(alu(s["x"], AluOp.SHL, left - half[0], both=True))
        else:
            for key, h in (("x", half[0]), ("y", half[1])):
                if left - h:
                    ops.append(alu(s[key], AluOp.SHL, left - h))
        # SHL by a positive exponent comes before MULHI, SHR_RND by a negative one after
        for key, k in (("x", "a"), ("y", "b")):
            if attrs[f"{k}_shift"] > 0:
                scale(s, key, attrs[f"{k}_shift"], ops)
        if not any(half):
            ops.append(alu(s["x"], AluOp.MULHI, None, both=True, src=(1, 0)))
        elif not half[0]:
            ops.append(alu(s["x"], AluOp.MULHI, None))
        elif not half[1]:
            ops.append(alu(s["y_mulhi"], AluOp.MULHI, None))
        for key, k in (("x", "a"), ("y", "b")):
            if attrs[f"{k}_shift"] < 0:
                scale(s, key, attrs[f"{k}_shift"], ops)
        ops.append(alu(s["add"], AluOp.ADD, None, src=(0, 1)))
        if attrs["out_shift"] > 0:
            scale(s, "x", attrs["out_shift"], ops)
        ops.append(alu(s["out"], AluOp.MULHI, None))
        if attrs["out_shift"] < 0:
            scale(s, "x", attrs["out_shift"], ops)
        if attrs["zero_point"]:
            ops.append(alu(s["x"], AluOp.ADD, attrs["zero_point"]))
        ops.append(alu(s["x"], AluOp.CLIP, 127, push_next=not relu))
        if relu:
            ops.append(alu(s["x"], AluOp.MAX, 0, push_next=True))
        for op in ops:
            pb.emit(op)
        pb.emit(Store(sram=s["acc"], dram=starts[i], y=1, x=t, stride=t, pop_prev=True,
                      push_prev=i + 2 < n), segment="out")
        if i + 2 < n:
            loads(i + 2)
    return pb.build()
