"""Cycles the compute engine's ALU interlock adds to each ALU instruction.

The compute pipeline (:class:`tensorfab.hw.compute.ComputeEngine`) holds an ALU
micro-op at S1C while one of the micro-ops at S2, S3 or S4 writes an accumulator entry
it reads (its destination always, its source unless the operation takes an immediate or
is REQUANT). A micro-op that passes S1C at cycle ``t`` lets a dependent one pass at
``t + 4`` at the earliest, so each micro-op passes at
``max(previous + 1, max(dependency + 4))``. The pipeline drains between instructions,
so only micro-ops of one instruction interact. The indices come from the micro-ops the
program's UOP loads put on chip (followed in program order, as a race-free program
sees them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorfab.isa import Alu, AluOp, Buffer, Insn, Load, Program, uop_format
from tensorfab.isa.program import UOP_SEGMENT

__all__ = ["INTERLOCK_DISTANCE", "alu_interlock_cycles", "interlock_stalls"]

#: Cycles from one micro-op passing S1C to a micro-op reading its result passing it.
INTERLOCK_DISTANCE = 4


def interlock_stalls(dst: np.ndarray, src: np.ndarray | None) -> int:
    """Cycles the interlock holds a sequence of ALU micro-ops, in issue order.

    Parameters
    ----------
    dst : numpy.ndarray
        Accumulator entry each micro-op writes (and reads).
    src : numpy.ndarray | None
        Entry each reads besides, ``None`` when the operation reads no second entry.
    """
    n = dst.size
    dep = np.zeros((INTERLOCK_DISTANCE - 1, n), dtype=bool)
    for d in range(1, INTERLOCK_DISTANCE):
        hit = dst[d:] == dst[:-d]
        if src is not None:
            hit |= src[d:] == dst[:-d]
        dep[d - 1, d:] = hit
    if not dep.any():
        return 0
    first = int(np.flatnonzero(dep.any(axis=0))[0])
    # held[i]: cycles micro-op i passes later than one per cycle would; a dependency
    # on the one d ahead makes it at least held[i - d] + INTERLOCK_DISTANCE - d
    deps = dep.tolist()
    held = [0] * n
    for i in range(first, n):
        h = held[i - 1] if i else 0
        for d in range(1, INTERLOCK_DISTANCE):
            if deps[d - 1][i]:
                h = max(h, held[i - d] + INTERLOCK_DISTANCE - d)
        held[i] = h
    return held[-1]


def _decode_uops(program: Program, image: np.ndarray, load: Load
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(acc, src)`` fields of the micro-ops ``load`` copies from ``image``."""
    cfg = program.config
    fmt = uop_format(cfg)
    eb = fmt.bytes
    rows = [image[(load.dram + r * load.stride) * eb:(load.dram + r * load.stride + load.x) * eb]
            for r in range(load.y)]
    raw = np.concatenate(rows).reshape(-1, eb) if rows else np.zeros((0, eb), np.uint8)
    words = np.zeros(raw.shape[0], dtype=np.uint64)
    for b in range(min(eb, -(-fmt.used_bits // 8))):
        words |= raw[:, b].astype(np.uint64) << np.uint64(8 * b)
    offsets = fmt.offsets()
    out = []
    for name in ("acc", "src"):
        mask = np.uint64((1 << fmt.field(name).width) - 1)
        out.append(((words >> np.uint64(offsets[name])) & mask).astype(np.int64))
    return out[0], out[1]


class _UopTable:
    """The program's micro-op table as arrays, at its entry address in DRAM."""

    def __init__(self, program: Program) -> None:
        eb = uop_format(program.config).bytes
        self.base, rem = divmod(program.layout()[UOP_SEGMENT].offset, eb)
        self.usable = not rem and bool(program.uops)
        self.acc = np.array([u.acc for u in program.uops], dtype=np.int64)
        self.src = np.array([u.src for u in program.uops], dtype=np.int64)

    def read(self, load: Load) -> tuple[np.ndarray, np.ndarray] | None:
        """``(acc, src)`` of the micro-ops ``load`` copies (what the DRAM image holds
        there); ``None`` when it reads outside the table."""
        if not self.usable:
            return None
        first = load.dram - self.base
        if load.y == 1:
            if first < 0 or first + load.x > self.acc.size:
                return None
            return self.acc[first:first + load.x], self.src[first:first + load.x]
        rows = first + np.arange(load.y, dtype=np.int64)[:, None] * load.stride
        idx = (rows + np.arange(load.x, dtype=np.int64)[None, :]).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self.acc.size):
            return None
        return self.acc[idx], self.src[idx]


def _reads_src(insn: Alu) -> bool:
    return not insn.use_imm and insn.op is not AluOp.REQUANT


def alu_interlock_cycles(program: Program, insns: Sequence[Insn] | None = None
                         ) -> list[float]:
    """Interlock cycles of each instruction of ``program`` (0 for all but ALU).

    Parameters
    ----------
    program : Program
        The program: its DRAM image holds the micro-ops its UOP loads copy on chip.
    insns : sequence of Insn, optional
        The instructions, when not ``program.insns`` (the same micro-op loads).
    """
    insns = program.insns if insns is None else insns
    depth = program.config.uop_depth
    uop_acc = np.zeros(depth, dtype=np.int64)
    uop_src = np.zeros(depth, dtype=np.int64)
    image: np.ndarray | None = None
    table: _UopTable | None = None
    acc_mask = program.config.acc_depth - 1
    out = [0.0] * len(insns)
    cache: dict[tuple, int] = {}
    for k, insn in enumerate(insns):
        if isinstance(insn, Load) and insn.buffer is Buffer.UOP:
            if table is None:
                table = _UopTable(program)
            from_table = table.read(insn)
            if from_table is None:
                if image is None:
                    image = program.dram_image()
                from_table = _decode_uops(program, image, insn)
            grid_a, grid_s = from_table
            if insn.rows * insn.cols != grid_a.size:  # padded: zeros around the data
                grid_a = np.zeros(insn.rows * insn.cols, dtype=np.int64)
                grid_s = np.zeros_like(grid_a)
                idx = ((np.arange(insn.y)[:, None] + insn.pad_top) * insn.cols
                       + insn.pad_left + np.arange(insn.x)[None, :]).ravel()
                grid_a[idx], grid_s[idx] = from_table
            end = min(depth, insn.sram + grid_a.size)
            uop_acc[insn.sram:end] = grid_a[:end - insn.sram]
            uop_src[insn.sram:end] = grid_s[:end - insn.sram]
        elif isinstance(insn, Alu):
            lo, hi = insn.uop_begin, insn.uop_end
            ua, us = uop_acc[lo:hi], uop_src[lo:hi]
            reads_src = _reads_src(insn)
            key = (insn, ua.tobytes(), us.tobytes() if reads_src else b"")
            stall = cache.get(key)
            if stall is None:
                i = np.arange(insn.iter_out, dtype=np.int64)[:, None, None]
                j = np.arange(insn.iter_in, dtype=np.int64)[None, :, None]
                dst = ((ua[None, None, :] + i * insn.dst_factor_out
                        + j * insn.dst_factor_in).ravel()) & acc_mask
                src = ((us[None, None, :] + i * insn.src_factor_out
                        + j * insn.src_factor_in).ravel() & acc_mask) if reads_src else None
                stall = cache[key] = interlock_stalls(dst, src)
            out[k] = float(stall)
    return out
