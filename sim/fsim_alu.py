"""ALU: ``acc[d] = OP(acc[d], acc[s] or imm)`` over micro-ops in a two-level loop.

Iterations take effect in loop order. The instruction is evaluated in one shot
when that order cannot matter (distinct destinations, no source read after an
earlier iteration wrote it), with ``ufunc.at`` for reductions of commutative
operations into repeated destinations, in waves of distinct destinations for other
operations whose sources are not destinations, and otherwise iteration by iteration
(each vectorized over the ``batch × block_out`` vector).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorfab.isa import Alu, AluOp, ErrorCode
from tensorfab.isa.formats import (
    MAX_SHIFT,
    REQUANT_MAX_SHIFT,
    REQUANT_MULTIPLIER_BITS,
    SHIFT_OPS,
    alu_imm_operand,
)
from tensorfab.isa.requant_record import unpack_requant_records

from .machine import Machine, check_loop_index, check_uop_field, range_error
from .race import Access, Gather, Span

_AT_UFUNC = {AluOp.ADD: np.add, AluOp.MUL: np.multiply, AluOp.MIN: np.minimum,
             AluOp.MAX: np.maximum}


def alu_apply(op: AluOp, a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """``OP(a, b)`` element-wise on int32 values, wrapped to int32.

    Parameters
    ----------
    op : AluOp
        The operation.
    a : numpy.ndarray
        Destination operand (any integer dtype holding int32 values).
    b : numpy.ndarray | int
        Source operand or sign-extended immediate, broadcastable to ``a``.

    Returns
    -------
    numpy.ndarray
        int32 result with ``a``'s shape.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if op is AluOp.ADD:
        r = a + b
    elif op is AluOp.MUL:
        r = a * b
    elif op is AluOp.MIN:
        r = np.minimum(a, b)
    elif op is AluOp.MAX:
        r = np.maximum(a, b)
    elif op is AluOp.SHR:
        r = a >> (b & 31)
    elif op is AluOp.SHR_RND:
        s = b & 31
        mask = (np.int64(1) << s) - 1
        thr = (mask >> 1) + (a < 0)
        r = (a >> s) + ((a & mask) > thr)
    elif op is AluOp.SHL:
        r = a << (b & 31)
    elif op is AluOp.CLIP:
        r = np.minimum(np.maximum(a, -b - 1), b)
    elif op is AluOp.MOV:
        r = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape))
    elif op is AluOp.MULHI:
        # gemmlowp SaturatingRoundingDoublingHighMul: (a*b + 2^30) >> 31 equals its
        # nudge-and-truncate form for both signs; only INT32_MIN^2 overflows.
        r = (a * b + (1 << 30)) >> 31
        r = np.where((a == -(1 << 31)) & (b == -(1 << 31)), (1 << 31) - 1, r)
    else:  # pragma: no cover - decode rejects ops 11..15; REQUANT: requant_apply
        raise ValueError(f"ALU op {op!r} has no second operand form")
    return np.broadcast_to(r, a.shape).astype(np.int32)


def requant_apply(a: np.ndarray, rows: np.ndarray,
                  index: np.ndarray | None = None) -> np.ndarray:
    """REQUANT of accumulator entries ``a`` (``(..., batch, block_out)``) with the weight
    entries ``rows`` (``(..., block_out, block_in)`` int8) holding each channel's record.

    ``clamp(RDBPOT((a + bias) · multiplier, shift) + zero_point, lo, hi)`` per lane:
    the bias add wraps to int32, the multiplier is the field's low 31 bits (unsigned),
    the product is exact, the rounding shift rounds half
    away from zero (gemmlowp's ``RoundingDivideByPOT``, on the 64-bit product), the
    clamp is ``min(max(v, lo), hi)``. Shifts must be checked (``<= REQUANT_MAX_SHIFT``)
    by the caller. With ``index``, ``a[i]`` takes the records of ``rows[index[i]]``
    (each distinct weight entry unpacked once).
    """
    return _apply_records(a, unpack_requant_records(rows), index)


def _apply_records(a: np.ndarray, rec: dict[str, np.ndarray],
                   index: np.ndarray | None) -> np.ndarray:
    """:func:`requant_apply` with the records unpacked (each field ``(..., block_out)``)."""
    if index is not None:
        rec = {k: v[index] for k, v in rec.items()}
    return requant_values(a, **{k: v[..., None, :] for k, v in rec.items()})  # over batch


def requant_values(a: np.ndarray, multiplier: np.ndarray | int, bias: np.ndarray | int,
                   shift: np.ndarray | int, zero_point: np.ndarray | int,
                   lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
    """REQUANT's arithmetic on values (fields broadcast against ``a``): the bias add
    wrapping to int32, the product by the 31-bit unsigned multiplier, one rounding
    shift (half away from zero), the zero point and the clamp; int32 result."""
    t = (np.asarray(a, dtype=np.int64) + bias + (1 << 31)) % (1 << 32) - (1 << 31)
    m = np.asarray(multiplier, dtype=np.int64) & ((1 << REQUANT_MULTIPLIER_BITS) - 1)
    p = t * m  # |p| < 2^62
    n = np.asarray(shift, dtype=np.int64)
    mask = (np.int64(1) << n) - 1
    r = (p >> n) + ((p & mask) > (mask >> 1) + (p < 0))
    return np.minimum(np.maximum(r + zero_point, lo), hi).astype(np.int32)


def _check_records(access: Access, rec: dict[str, np.ndarray], w: np.ndarray) -> None:
    """Raise ``SHIFT_RANGE`` if a REQUANT record's shift is past REQUANT_MAX_SHIFT
    (``rec``: the unpacked records of weight entries ``w``)."""
    shift = rec["shift"]
    bad = np.nonzero(shift > REQUANT_MAX_SHIFT)
    if bad[0].size:
        k, row = int(bad[0][0]), int(bad[1][0])
        raise range_error(access, ErrorCode.SHIFT_RANGE, "wgt",
                          f"REQUANT shift {int(shift[k, row])} outside 0..{REQUANT_MAX_SHIFT} "
                          f"in the record of weight entry {int(w[k])}, row {row}")


def _indices(insn: Alu, base: np.ndarray, f_out: int, f_in: int) -> np.ndarray:
    i = np.arange(insn.iter_out, dtype=np.int64)[:, None, None] * f_out
    j = np.arange(insn.iter_in, dtype=np.int64)[None, :, None] * f_in
    return (base[None, None, :] + i + j).ravel()


def _ranks(d: np.ndarray) -> np.ndarray:
    """For each iteration, how many earlier iterations have the same destination."""
    order = np.argsort(d, kind="stable")
    sd = d[order]
    start = np.r_[True, sd[1:] != sd[:-1]]
    group_start = np.maximum.accumulate(np.where(start, np.arange(sd.size), 0))
    ranks = np.empty(d.size, dtype=np.int64)
    ranks[order] = np.arange(sd.size) - group_start
    return ranks


def _check_shifts(access: Access, op: AluOp, b: np.ndarray, s: np.ndarray) -> None:
    """Raise ``SHIFT_RANGE`` if a shift operation reads a vector lane outside 0..31."""
    if op not in SHIFT_OPS:
        return
    bad = (b < 0) | (b > MAX_SHIFT)
    if bad.any():
        k, lane = (int(v[0]) for v in np.nonzero(bad.reshape(len(s), -1)))
        value = int(b.reshape(len(s), -1)[k, lane])
        raise range_error(access, ErrorCode.SHIFT_RANGE, "src",
                          f"shift amount {value} outside 0..{MAX_SHIFT} in accumulator "
                          f"entry {int(s[k])}, element {lane}")


def _sequential(access: Access, acc: np.ndarray, op: AluOp, d: np.ndarray,
                s: np.ndarray | None, imm: int) -> None:
    for t in range(d.size):
        if s is None:
            b = imm
        else:
            b = acc[s[t]]
            _check_shifts(access, op, b[None], s[t:t + 1])
        acc[d[t]] = alu_apply(op, acc[d[t]], b)


def _strategy(op: AluOp, d: np.ndarray, s: np.ndarray | None, depth: int
              ) -> tuple[str, np.ndarray | None]:
    """How to evaluate iterations with destinations ``d`` and sources ``s`` so that the
    result equals loop order: ``oneshot``, ``ufunc`` (``ufunc.at`` reduction),
    ``waves`` (with the per-iteration wave number) or ``sequential``."""
    counts = np.bincount(d, minlength=depth)
    if counts.max() <= 1:
        if s is not None:
            first_writer = np.full(depth, d.size, dtype=np.int64)
            first_writer[d] = np.arange(d.size)
            if bool((first_writer[s] < np.arange(d.size)).any()):
                return "sequential", None  # reads a value an earlier iteration wrote
        return "oneshot", None
    if s is not None and bool(counts[s].any()):
        return "sequential", None  # a source is also a (repeated) destination
    if op in _AT_UFUNC:
        return "ufunc", None
    return "waves", _ranks(d)


def _evaluate(access: Access, acc: np.ndarray, op: AluOp, d: np.ndarray,
              s: np.ndarray | None, imm: int, strategy: str, ranks: np.ndarray | None
              ) -> None:
    if strategy == "sequential":
        _sequential(access, acc, op, d, s, imm)
    elif strategy == "oneshot":
        b = imm if s is None else acc[s]
        if s is not None:
            _check_shifts(access, op, b, s)
        acc[d] = alu_apply(op, acc[d], b)
    elif strategy == "ufunc":
        b = np.int32(imm) if s is None else acc[s]
        _AT_UFUNC[op].at(acc, d, b)  # int32 arithmetic wraps modulo 2^32
    else:
        assert ranks is not None
        for r in range(int(ranks.max()) + 1):
            sel = ranks == r
            dd = d[sel]
            b = imm if s is None else acc[s[sel]]
            if s is not None:
                _check_shifts(access, op, b, s[sel])
            acc[dd] = alu_apply(op, acc[dd], b)


@dataclass(frozen=True)
class AluPlan:
    """Range-checked indices and evaluation strategy of an ALU instruction (they
    depend only on it and the micro-op table).

    Attributes
    ----------
    uops : Span
        Micro-op entries read.
    d, s : numpy.ndarray
        Destination and source index of every iteration in loop order (``s`` is
        ``None`` with an immediate and for REQUANT).
    strategy : str
        See :func:`_strategy`.
    ranks : numpy.ndarray | None
        Wave of each iteration for the ``waves`` strategy.
    w : numpy.ndarray | None
        REQUANT: the weight entry (record) of every iteration.
    """

    uops: Span
    d: np.ndarray
    s: np.ndarray | None
    strategy: str
    ranks: np.ndarray | None
    w: np.ndarray | None = None


def plan_alu(m: Machine, access: Access, insn: Alu, fast: bool = True) -> AluPlan:
    """Range-check an ALU instruction against the current micro-op table and plan it.

    Raises
    ------
    ProgramError
        ``UOP_RANGE`` or ``SRAM_RANGE``, naming the instruction of ``access``.
    """
    cfg = m.cfg
    lo, hi = insn.uop_begin, insn.uop_end
    ua, us = m.uop_acc[lo:hi], m.uop_src[lo:hi]
    loops = (insn.iter_out, insn.iter_in)
    check_uop_field(access, ua, lo, "acc", "acc", cfg.acc_depth)
    check_loop_index(access, ua, lo, loops, (insn.dst_factor_out, insn.dst_factor_in),
                     ("dst_factor_out", "dst_factor_in", "acc"), "acc", cfg.acc_depth)
    if insn.op is AluOp.REQUANT:  # records in the weight buffer, stepped by src factors
        uw = m.uop_wgt[lo:hi]
        check_loop_index(access, uw, lo, loops, (insn.src_factor_out, insn.src_factor_in),
                         ("src_factor_out", "src_factor_in", "wgt"), "wgt", cfg.wgt_depth)
        d = _indices(insn, ua, insn.dst_factor_out, insn.dst_factor_in)
        w = _indices(insn, uw, insn.src_factor_out, insn.src_factor_in)
        strategy, ranks = _strategy(insn.op, d, None, cfg.acc_depth) if fast \
            else ("sequential", None)
        return AluPlan(Span(lo, hi), d, None, strategy, ranks, w)
    if not insn.use_imm:
        check_uop_field(access, us, lo, "src", "acc", cfg.acc_depth)
        check_loop_index(access, us, lo, loops, (insn.src_factor_out, insn.src_factor_in),
                         ("src_factor_out", "src_factor_in", "src"), "acc", cfg.acc_depth)
    d = _indices(insn, ua, insn.dst_factor_out, insn.dst_factor_in)
    s = None if insn.use_imm else _indices(insn, us, insn.src_factor_out,
                                           insn.src_factor_in)
    strategy, ranks = _strategy(insn.op, d, s, cfg.acc_depth) if fast else ("sequential", None)
    return AluPlan(Span(lo, hi), d, s, strategy, ranks)


def exec_alu(m: Machine, access: Access, insn: Alu, fast: bool = True) -> None:
    """Execute an ALU instruction (range checks, race checks, effect, counters).

    Plans are cached per instruction and micro-op table (:meth:`.Machine.cached_plan`).

    Parameters
    ----------
    fast : bool
        Use one-shot and wave evaluation where loop order cannot matter; ``False``
        runs every iteration in order (same result, for testing).
    """
    key = (insn, fast)
    plan = m.cached_plan(key)
    if plan is None:
        plan = m.remember(key, plan_alu(m, access, insn, fast))
    tr = m.trackers
    tr["uop"].read(access, plan.uops)
    if plan.w is not None:
        tr["wgt"].read(access, Gather(plan.w))
    if plan.s is not None:
        tr["acc"].read(access, Gather(plan.s))
    tr["acc"].read(access, Gather(plan.d))
    tr["acc"].write(access, Gather(plan.d))
    m.counters.alu_uops += plan.d.size
    m.counters.alu_ops += plan.d.size * m.cfg.batch * m.cfg.block_out
    if plan.w is not None:
        _requant(access, m, plan)
        return
    _evaluate(access, m.acc, insn.op, plan.d, plan.s, alu_imm_operand(insn.op, insn.imm),
              plan.strategy, plan.ranks)


def _requant(access: Access, m: Machine, plan: AluPlan) -> None:
    """REQUANT in loop order: all at once, in waves of distinct destinations, or one
    iteration at a time."""
    assert plan.w is not None
    if plan.strategy == "sequential":
        groups = [np.array([t]) for t in range(plan.d.size)]
    elif plan.strategy == "waves":
        assert plan.ranks is not None
        groups = [np.flatnonzero(plan.ranks == r) for r in range(int(plan.ranks.max()) + 1)]
    else:
        groups = [np.arange(plan.d.size)]
    for sel in groups:
        entries, index = np.unique(plan.w[sel], return_inverse=True)
        rec = unpack_requant_records(m.wgt[entries])
        _check_records(access, rec, entries)
        m.acc[plan.d[sel]] = _apply_records(m.acc[plan.d[sel]], rec, index.reshape(-1))


__all__ = ["AluPlan", "alu_apply", "exec_alu", "plan_alu", "requant_apply", "requant_values"]
