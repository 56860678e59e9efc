"""Cycles the compute engine's ALU interlock adds to each ALU instruction.

The compute pipeline (:class:`tensorfab.hw.compute.ComputeEngine`, whose
:class:`tensorfab.hw.uop_issue.UopIssue` has the interlock) holds an ALU micro-op at
S1C while one of the micro-ops at S2, S3 or S4 writes an accumulator entry it reads
(its destination always, its source unless the operation takes an immediate or is
REQUANT). A micro-op that passes S1C at cycle ``t`` lets a dependent one pass at
``t + 4`` at the earliest, so each micro-op passes at
``max(previous + 1, max(dependency + 4))``; with a config's ``sequential_multiplier``,
a multiplying instruction's (MUL, MULHI, REQUANT) at ``max(previous +
SEQUENTIAL_MULTIPLY_CYCLES, max(dependency + SEQUENTIAL_MULTIPLY_DISTANCE))``, and it
drains ``SEQUENTIAL_MULTIPLY_CYCLES - 1`` cycles later (:mod:`tensorfab.isa.formats`).
The pipeline drains between instructions,
so only micro-ops of one instruction interact. The indices come from the micro-ops the
program's UOP loads put on chip (followed in program order, as a race-free program
sees them). Compiled with numba (:mod:`.model` says how).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorfab.isa import AluOp, Buffer, HwConfig, Insn, Opcode, Program, uop_format
from tensorfab.isa.formats import (
    ALU_INTERLOCK_DISTANCE,
    SEQUENTIAL_MULTIPLY_CYCLES,
    SEQUENTIAL_MULTIPLY_DISTANCE,
)

from . import insn_table as col
from .compiled import compiled
from .insn_table import insn_table

__all__ = ["INTERLOCK_LAYOUT", "alu_interlock_cycles",
           "fill_interlock_cycles", "interlock_layout", "interlock_stalls",
           "table_interlock_cycles"]

#: What the compiled code reads of the table and the ISA (numba's cache is keyed by
#: this file's source only): columns, then Opcode.LOAD, Opcode.ALU, Buffer.UOP,
#: AluOp.REQUANT, AluOp.MUL, AluOp.MULHI, ALU_INTERLOCK_DISTANCE,
#: SEQUENTIAL_MULTIPLY_DISTANCE; :func:`interlock_layout` adds the config's spacing.
INTERLOCK_LAYOUT = np.array(
    [col.OPCODE, col.LOAD_BUFFER, col.LOAD_SRAM, col.LOAD_DRAM, col.Y, col.X,
     col.LOAD_STRIDE, col.LOAD_PAD_TOP, col.LOAD_PAD_LEFT, col.LOAD_PAD_RIGHT,
     col.LOAD_PAD_BOTTOM, col.UOP_BEGIN, col.UOP_END, col.ITER_OUT, col.ITER_IN, col.ALU_OP,
     col.ALU_USE_IMM, col.ALU_DST_FACTOR_OUT, col.ALU_DST_FACTOR_IN, col.ALU_SRC_FACTOR_OUT,
     col.ALU_SRC_FACTOR_IN, Opcode.LOAD, Opcode.ALU, Buffer.UOP, AluOp.REQUANT, AluOp.MUL,
     AluOp.MULHI, ALU_INTERLOCK_DISTANCE, SEQUENTIAL_MULTIPLY_DISTANCE], dtype=np.int64)
(_L_OPCODE, _L_BUFFER, _L_SRAM, _L_DRAM, _L_Y, _L_X, _L_STRIDE, _L_PAD_TOP, _L_PAD_LEFT,
 _L_PAD_RIGHT, _L_PAD_BOTTOM, _L_UOP_BEGIN, _L_UOP_END, _L_ITER_OUT, _L_ITER_IN, _L_OP,
 _L_USE_IMM, _L_DST_OUT, _L_DST_IN, _L_SRC_OUT, _L_SRC_IN, _L_LOAD, _L_ALU, _L_UOP,
 _L_REQUANT, _L_MUL, _L_MULHI, _L_DISTANCE, _L_SEQ_DISTANCE, _L_SPACING) = range(30)


def interlock_layout(cfg: HwConfig) -> np.ndarray:
    """:data:`INTERLOCK_LAYOUT` and the cycles between two multiplying micro-ops of
    ``cfg`` (``SEQUENTIAL_MULTIPLY_CYCLES`` with its ``sequential_multiplier``, else 1)."""
    spacing = SEQUENTIAL_MULTIPLY_CYCLES if cfg.sequential_multiplier else 1
    return np.append(INTERLOCK_LAYOUT, np.int64(spacing))


@compiled(inline=True)
def _stalls(loop: np.ndarray, n: int, reads_src: bool, distance: int, spacing: int) -> int:
    """:func:`interlock_stalls` of the ``n`` micro-ops whose destinations and sources
    are ``loop[0, :n]`` and ``loop[1, :n]`` (the sources ignored unless ``reads_src``),
    passing at least ``spacing`` cycles apart, each one's cycles held in ``loop[2]``
    (read by index: a view would count references)."""
    for i in range(n):
        h = loop[2, i - 1] + spacing - 1 if i else 0
        for d in range(1, min(distance, i + 1)):
            if loop[0, i] == loop[0, i - d] or (reads_src and loop[1, i] == loop[0, i - d]):
                h = max(h, loop[2, i - d] + distance - d)
        loop[2, i] = h
    return loop[2, n - 1] if n else 0


@compiled(inline=True)
def _port_held(loop: np.ndarray, n: int, slack: float) -> float:
    """Cycles the runs of accumulator writes of the ``n`` micro-ops passing S1C
    ``loop[2, :n]`` cycles late (each one's write a fixed number of cycles after it
    passes) hold a LOAD's data off the write port: of each run of consecutive writes,
    those beyond the first ``slack`` (which the load engine's registers absorb)."""
    out = 0.0
    run = 0
    for i in range(n):
        if i and loop[2, i] > loop[2, i - 1]:  # a bubble before it: a new run
            out += max(0.0, run - slack)
            run = 0
        run += 1
    return out + max(0.0, run - slack)


def interlock_stalls(dst: np.ndarray, src: np.ndarray | None) -> int:
    """Cycles the interlock holds a sequence of ALU micro-ops, in issue order.

    Parameters
    ----------
    dst : numpy.ndarray
        Accumulator entry each micro-op writes (and reads).
    src : numpy.ndarray | None
        Entry each reads besides, ``None`` when the operation reads no second entry.
    """
    dst = np.asarray(dst, dtype=np.int64)
    reads = src is not None
    loop = np.empty((3, dst.size), np.int64)
    loop[0] = dst
    loop[1] = np.asarray(src if reads else dst, dtype=np.int64)
    return int(_stalls(loop, dst.size, reads, ALU_INTERLOCK_DISTANCE, 1))


@compiled
def fill_interlock_cycles(table: np.ndarray, uop_acc: np.ndarray, uop_src: np.ndarray,
                          base: int, strict: bool, depth: int, acc_mask: int,
                          lay: np.ndarray, slack: float, out: np.ndarray) -> bool:
    """Fill ``out[0]`` with the interlock cycles of each instruction of ``table``
    (:func:`.insn_table.insn_table`) and ``out[1]`` with the cycles its runs of
    accumulator writes hold a LOAD's data off the write port beyond ``slack`` each
    (:func:`_port_held`); the micro-ops a UOP load copies from DRAM entry
    ``a`` are ``uop_acc/src[a - base]``. False when ``strict`` and a load reads outside
    them (outside them is zero otherwise). ``lay`` is :func:`interlock_layout`.

    An ALU instruction's micro-op ``u`` is the one the last UOP load before it wrote
    to entry ``u`` (0 if none did): found by looking back over the loads rather than
    by keeping the whole micro-op buffer, which would cost more to clear than a
    program of tens of instructions takes to time."""
    n_rows = table.shape[0]
    rows = np.empty((3, n_rows), np.int64)
    loads = rows[0]  # the UOP loads' rows in program order
    first_entry = rows[1]  # and the entries each writes
    end_entry = rows[2]
    n_loads = 0
    longest = 0  # micro-ops of the longest ALU instruction, and its loop
    longest_loop = 0
    for k in range(n_rows):
        out[0, k] = 0.0
        out[1, k] = 0.0
        opcode = table[k, lay[_L_OPCODE]]
        if opcode == lay[_L_LOAD] and table[k, lay[_L_BUFFER]] == lay[_L_UOP]:
            if strict:
                for r in range(table[k, lay[_L_Y]]):
                    a = table[k, lay[_L_DRAM]] - base + r * table[k, lay[_L_STRIDE]]
                    if a < 0 or a + table[k, lay[_L_X]] > uop_acc.size:
                        return False
            loads[n_loads] = k
            first_entry[n_loads] = table[k, lay[_L_SRAM]]
            end_entry[n_loads] = min(depth, table[k, lay[_L_SRAM]] + (
                table[k, lay[_L_PAD_TOP]] + table[k, lay[_L_Y]] + table[k, lay[_L_PAD_BOTTOM]]) * (
                table[k, lay[_L_PAD_LEFT]] + table[k, lay[_L_X]] + table[k, lay[_L_PAD_RIGHT]]))
            n_loads += 1
        elif opcode == lay[_L_ALU]:
            n_uops = max(0, min(table[k, lay[_L_UOP_END]], depth) - table[k, lay[_L_UOP_BEGIN]])
            longest = max(longest, n_uops)
            longest_loop = max(longest_loop,
                               n_uops * table[k, lay[_L_ITER_OUT]] * table[k, lay[_L_ITER_IN]])
    work = np.empty(2 * longest + 3 * longest_loop, np.int64)  # (one allocation)
    entry_acc = work[:longest]
    entry_src = work[longest:2 * longest]
    # destinations, sources, cycles held
    loop = work[2 * longest:].reshape((3, longest_loop))
    seen = 0  # UOP loads before row k
    for k in range(n_rows):
        if seen < n_loads and loads[seen] == k:
            seen += 1
            continue
        if table[k, lay[_L_OPCODE]] != lay[_L_ALU]:
            continue
        lo = table[k, lay[_L_UOP_BEGIN]]
        n_uops = max(0, min(table[k, lay[_L_UOP_END]], depth) - lo)
        for u in range(n_uops):
            entry_acc[u] = 0
            entry_src[u] = 0
            for j in range(seen - 1, -1, -1):
                if first_entry[j] <= lo + u < end_entry[j]:
                    # what load j writes to the entry (0 for padding and for DRAM
                    # entries outside uop_acc/src); read in place, as a helper's
                    # array arguments would count references
                    ld = loads[j]
                    cols = (table[ld, lay[_L_PAD_LEFT]] + table[ld, lay[_L_X]]
                            + table[ld, lay[_L_PAD_RIGHT]])
                    r = (lo + u - table[ld, lay[_L_SRAM]]) // cols - table[ld, lay[_L_PAD_TOP]]
                    c = (lo + u - table[ld, lay[_L_SRAM]]) % cols - table[ld, lay[_L_PAD_LEFT]]
                    if 0 <= r < table[ld, lay[_L_Y]] and 0 <= c < table[ld, lay[_L_X]]:
                        a = (table[ld, lay[_L_DRAM]] - base + r * table[ld, lay[_L_STRIDE]]
                             + c)
                        if 0 <= a < uop_acc.size:
                            entry_acc[u] = uop_acc[a]
                            entry_src[u] = uop_src[a]
                    break
        iter_out = table[k, lay[_L_ITER_OUT]]
        iter_in = table[k, lay[_L_ITER_IN]]
        reads_src = table[k, lay[_L_USE_IMM]] == 0 and table[k, lay[_L_OP]] != lay[_L_REQUANT]
        dst_out = table[k, lay[_L_DST_OUT]]
        dst_in = table[k, lay[_L_DST_IN]]
        src_out = table[k, lay[_L_SRC_OUT]]
        src_in = table[k, lay[_L_SRC_IN]]
        m = 0
        for i in range(iter_out):
            for j in range(iter_in):
                for u in range(n_uops):
                    loop[0, m] = (entry_acc[u] + i * dst_out + j * dst_in) & acc_mask
                    loop[1, m] = (entry_src[u] + i * src_out + j * src_in) & acc_mask
                    m += 1
        op = table[k, lay[_L_OP]]
        spacing = 1
        distance = lay[_L_DISTANCE]
        if lay[_L_SPACING] > 1 and (op == lay[_L_MUL] or op == lay[_L_MULHI]
                                    or op == lay[_L_REQUANT]):
            spacing = lay[_L_SPACING]
            distance = lay[_L_SEQ_DISTANCE]
        # (the last micro-op's result comes spacing - 1 cycles later too)
        out[0, k] = float(_stalls(loop, m, reads_src, distance, spacing)
                          + (spacing - 1 if m else 0))
        out[1, k] = _port_held(loop, m, slack)
    return True


def _decoded_image(program: Program) -> tuple[np.ndarray, np.ndarray]:
    """``(acc, src)`` of every micro-op-sized entry of the program's DRAM image."""
    fmt = uop_format(program.config)
    eb = fmt.bytes
    image = program.dram_image()
    raw = image[:image.size // eb * eb].reshape(-1, eb)
    words = np.zeros(raw.shape[0], dtype=np.uint64)
    for b in range(min(eb, -(-fmt.used_bits // 8))):
        words |= raw[:, b].astype(np.uint64) << np.uint64(8 * b)
    offsets = fmt.offsets()
    out = []
    for name in ("acc", "src"):
        mask = np.uint64((1 << fmt.field(name).width) - 1)
        out.append(((words >> np.uint64(offsets[name])) & mask).astype(np.int64))
    return out[0], out[1]


def table_interlock_cycles(program: Program, table: np.ndarray, slack: float = 0.0
                           ) -> np.ndarray:
    """:func:`fill_interlock_cycles`' two rows for the instructions of ``table``
    (:func:`.insn_table.insn_table`): the interlock cycles, and the cycles the runs of
    accumulator writes hold a LOAD's data beyond ``slack`` each."""
    cfg = program.config
    out = np.zeros((2, table.shape[0]))
    if not (table[:, col.OPCODE] == Opcode.ALU).any():
        return out
    args = (cfg.uop_depth, cfg.acc_depth - 1, interlock_layout(cfg), slack, out)
    eb = uop_format(cfg).bytes
    base, rem = divmod(program.uop_offset, eb)
    if not rem and program.uops:
        uops = program.uops
        acc = np.array([u.acc for u in uops], dtype=np.int64)
        src = np.array([u.src for u in uops], dtype=np.int64)
        if fill_interlock_cycles(table, acc, src, base, True, *args):
            return out
    acc, src = _decoded_image(program)
    fill_interlock_cycles(table, acc, src, 0, False, *args)
    return out


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
    return table_interlock_cycles(program, insn_table(insns))[0].tolist()
