"""GEMM: ``acc[a] += inp[x] @ wgt[w].T`` over micro-ops in a two-level loop.

GEMM iterations commute (sums into accumulators; reset writes zeros), so an
instruction is evaluated as one tensor contraction instead of iteration by
iteration. The iteration space is split into *dimensions*: the outer loop, the
inner loop and the micro-op range (factored into affine sub-dimensions when the
micro-op table is a regular grid). Each index (accumulator, input, weight) is a
base plus one offset per dimension, and a dimension's role follows from which
indices it moves:

====================  =============================================
moves                 role
====================  =============================================
acc, inp, wgt         batch of independent matmuls
acc, inp              rows (M) of the matmul
acc, wgt              columns (N)
inp, wgt              reduction (K)
inp only / wgt only   reduction pre-summed into the operand
acc only              the result is added at several accumulators
nothing               the result is added several times
====================  =============================================

The contraction is one (batched) BLAS matmul in float32 or float64, exact because
every partial sum of int8 products stays below the mantissa range (int64 when it
would not); results are added to the accumulators modulo 2^32. The analysis (range
checks, index grids, roles) is a :class:`GemmPlan`, cached per instruction until the
micro-op table changes, so repeated instructions only gather, multiply and scatter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import Gemm

from .machine import Machine, check_loop_index, check_uop_field
from .race import Access, Gather, Span

_PRODUCT_BITS = 14  # |int8 × int8| <= 2^14


class _Dim:
    """One iteration dimension: extent, the (acc, inp, wgt) offsets along it
    (``(3, n)`` int64, first column zero) and which of the three it moves."""

    __slots__ = ("moves", "n", "off")

    def __init__(self, n: int, off: np.ndarray) -> None:
        self.n = n
        self.off = off
        a, x, w = off.any(axis=1).tolist()
        self.moves: tuple[bool, bool, bool] = (a, x, w)


def factor_table(table: np.ndarray) -> list[np.ndarray] | None:
    """Split a micro-op table into affine grid dimensions.

    Parameters
    ----------
    table : numpy.ndarray
        ``(3, U)`` int64: acc, src and wgt fields of consecutive micro-ops.

    Returns
    -------
    list[numpy.ndarray] | None
        Offset arrays ``(3, n_d)``, outermost first, with
        ``table[:, u] == table[:, 0] + sum_d off_d[:, u_d]`` where ``u_d`` are the
        mixed-radix digits of ``u``; ``None`` if the table is not such a grid.
    """
    n = table.shape[1]
    if n == 1:
        return []
    diffs = np.diff(table, axis=1)
    step = diffs[:, :1]
    same = (diffs == step).all(axis=0)
    run = n if same.all() else int(np.argmin(same)) + 1
    if n % run:
        return None
    inner = step * np.arange(run, dtype=np.int64)
    if run == n:
        return [inner]
    rows = table.reshape(3, n // run, run)
    if not np.array_equal(rows - rows[:, :, :1], np.broadcast_to(inner[:, None, :],
                                                                  rows.shape)):
        return None
    outer = factor_table(np.ascontiguousarray(rows[:, :, 0]))
    return None if outer is None else [*outer, inner]


def _dims(insn: Gemm, table: np.ndarray) -> tuple[list[_Dim], int]:
    """Iteration dimensions (extent > 1 and moving something) and the multiplicity
    of the dimensions that move nothing."""
    dims = []
    for n, f in ((insn.iter_out, (insn.acc_factor_out, insn.inp_factor_out,
                                  insn.wgt_factor_out)),
                 (insn.iter_in, (insn.acc_factor_in, insn.inp_factor_in,
                                 insn.wgt_factor_in))):
        dims.append(_Dim(n, np.array(f, dtype=np.int64)[:, None] * np.arange(n)))
    factored = factor_table(table)
    if factored is None:
        dims.append(_Dim(table.shape[1], table - table[:, :1]))
    else:
        dims += [_Dim(off.shape[1], off) for off in factored]
    mult = 1
    kept = []
    for d in dims:
        if d.n == 1:
            continue
        if not any(d.moves):
            mult *= d.n
        else:
            kept.append(d)
    return kept, mult


def _grid(base: int, dims: list[_Dim], row: int) -> np.ndarray:
    """``base + sum_d dims[d].off[row]`` over the grid of ``dims`` (C order)."""
    g = np.asarray(base, dtype=np.int64)
    for d in dims:
        g = np.add.outer(g, d.off[row])
    return g


def _size(dims: list[_Dim]) -> int:
    return math.prod(d.n for d in dims)


def _compute_dtype(terms: int) -> np.dtype:
    bound = terms << _PRODUCT_BITS
    if bound <= 1 << 24:
        return np.dtype(np.float32)
    if bound <= 1 << 53:
        return np.dtype(np.float64)
    return np.dtype(np.int64)


@dataclass(frozen=True)
class _Contraction:
    """How :func:`_dense` shapes the gathered operands (extents of the batch, M, N, K,
    input-only and weight-only reduction, and accumulator-only dimensions)."""

    bs: int
    ms: int
    ns: int
    ks: int
    xrs: int
    wrs: int
    abs_: int
    mult: int
    dtype: np.dtype


@dataclass(frozen=True)
class GemmPlan:
    """Everything about a GEMM instruction that depends only on it and the micro-op
    table: range-checked index arrays and the evaluation strategy.

    Attributes
    ----------
    reset : bool
        Reset instruction (only :attr:`a` is used).
    uops : Span
        Micro-op entries read.
    a, x, w : numpy.ndarray
        Accumulator, input and weight indices (grids for the dense evaluation,
        per-iteration triples for the reference one).
    contraction : _Contraction | None
        Dense evaluation parameters; ``None`` for the reference evaluation.
    unique : bool
        Whether :attr:`a` has no repeated index.
    n_iter : int
        Micro-op executions.
    """

    reset: bool
    uops: Span
    a: np.ndarray
    x: np.ndarray
    w: np.ndarray
    contraction: _Contraction | None
    unique: bool
    n_iter: int


def _dense_plan(insn: Gemm, table: np.ndarray, cfg_bi: int) -> tuple[np.ndarray, np.ndarray,
                                                                       np.ndarray, _Contraction]:
    dims, mult = _dims(insn, table)
    a0, x0, w0 = (int(v) for v in table[:, 0])
    groups: dict[tuple[bool, bool, bool], list[_Dim]] = {}
    for d in dims:
        groups.setdefault(d.moves, []).append(d)
    bd = groups.get((True, True, True), [])
    md = groups.get((True, True, False), [])
    nd = groups.get((True, False, True), [])
    kd = groups.get((False, True, True), [])
    xr = groups.get((False, True, False), [])
    wr = groups.get((False, False, True), [])
    ab = groups.get((True, False, False), [])
    gx = _grid(x0, bd + md + kd + xr, 1).ravel()
    gw = _grid(w0, bd + nd + kd + wr, 2).ravel()
    ga = _grid(a0, bd + md + nd + ab, 0).ravel()
    ks, xrs, wrs = _size(kd), _size(xr), _size(wr)
    c = _Contraction(_size(bd), _size(md), _size(nd), ks, xrs, wrs, _size(ab), mult,
                     _compute_dtype(ks * cfg_bi * xrs * wrs))
    return ga, gx, gw, c


def _dense(m: Machine, plan: GemmPlan) -> None:
    """``acc[a] += X @ W.T`` as one (batched) matmul; see the module docstring."""
    c = plan.contraction
    assert c is not None
    b, bi, bo = m.cfg.batch, m.cfg.block_in, m.cfg.block_out
    bs, ms, ns, ks = c.bs, c.ms, c.ns, c.ks
    xt = m.inp[plan.x].astype(c.dtype).reshape(bs, ms, ks, c.xrs, b, bi)
    xt = xt.sum(axis=3) if c.xrs > 1 else xt[:, :, :, 0]
    xm = xt.transpose(0, 1, 3, 2, 4).reshape(bs, ms * b, ks * bi)
    wt = m.wgt[plan.w].astype(c.dtype).reshape(bs, ns, ks, c.wrs, bo, bi)
    wt = wt.sum(axis=3) if c.wrs > 1 else wt[:, :, :, 0]
    wm = wt.transpose(0, 1, 3, 2, 4).reshape(bs, ns * bo, ks * bi)
    r = (xm[0] @ wm[0].T)[None] if bs == 1 else np.matmul(xm, wm.transpose(0, 2, 1))
    r = r.reshape(bs, ms, b, ns, bo).transpose(0, 1, 3, 2, 4).astype(np.int64)
    r = r.reshape(bs * ms * ns, 1, b, bo)
    if c.mult > 1:
        r *= c.mult
    if c.abs_ > 1:
        r = np.broadcast_to(r, (bs * ms * ns, c.abs_, b, bo))
    v32 = r.reshape(-1, b, bo).astype(np.int32)  # modulo 2^32
    if plan.unique:
        m.acc[plan.a] += v32
    else:
        np.add.at(m.acc, plan.a, v32)


def _triples(insn: Gemm, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Accumulator, input and weight index of every iteration, in loop order."""
    i = np.arange(insn.iter_out)[:, None, None]
    j = np.arange(insn.iter_in)[None, :, None]
    ua, us, uw = (t[None, None, :] for t in table)
    a = (ua + i * insn.acc_factor_out + j * insn.acc_factor_in).ravel()
    x = (us + i * insn.inp_factor_out + j * insn.inp_factor_in).ravel()
    w = (uw + i * insn.wgt_factor_out + j * insn.wgt_factor_in).ravel()
    return a, x, w


def _reference(m: Machine, plan: GemmPlan) -> None:
    """Iteration-by-iteration products (vectorized over iterations), for testing."""
    prod = np.einsum("tbk,tok->tbo", m.inp[plan.x].astype(np.int64),
                     m.wgt[plan.w].astype(np.int64))
    np.add.at(m.acc, plan.a, prod.astype(np.int32))


def _is_unique(index: np.ndarray) -> bool:
    return index.size < 2 or bool((np.diff(index) > 0).all()) or \
        np.unique(index).size == index.size


def plan_gemm(m: Machine, access: Access, insn: Gemm, fast: bool = True) -> GemmPlan:
    """Range-check a GEMM instruction against the current micro-op table and plan it.

    Raises
    ------
    ProgramError
        ``UOP_RANGE`` or ``SRAM_RANGE``, naming the instruction of ``access``.
    """
    cfg = m.cfg
    lo, hi = insn.uop_begin, insn.uop_end
    table = np.stack([m.uop_acc[lo:hi], m.uop_src[lo:hi], m.uop_wgt[lo:hi]])
    loops = (insn.iter_out, insn.iter_in)
    check_uop_field(access, table[0], lo, "acc", "acc", cfg.acc_depth)
    check_loop_index(access, table[0], lo, loops, (insn.acc_factor_out, insn.acc_factor_in),
                     ("acc_factor_out", "acc_factor_in", "acc"), "acc", cfg.acc_depth)
    n_iter = insn.iter_out * insn.iter_in * (hi - lo)
    none = np.zeros(0, dtype=np.int64)
    if insn.reset:
        if fast:
            dims, _ = _dims(insn, table)
            ga = _grid(int(table[0, 0]), [d for d in dims if d.moves[0]], 0).ravel()
        else:
            ga = _triples(insn, table)[0]
        return GemmPlan(True, Span(lo, hi), ga, none, none, None, True, n_iter)
    check_uop_field(access, table[1], lo, "src", "inp", cfg.inp_depth)
    check_uop_field(access, table[2], lo, "wgt", "wgt", cfg.wgt_depth)
    check_loop_index(access, table[1], lo, loops, (insn.inp_factor_out, insn.inp_factor_in),
                     ("inp_factor_out", "inp_factor_in", "src"), "inp", cfg.inp_depth)
    check_loop_index(access, table[2], lo, loops, (insn.wgt_factor_out, insn.wgt_factor_in),
                     ("wgt_factor_out", "wgt_factor_in", "wgt"), "wgt", cfg.wgt_depth)
    if not fast:
        a, x, w = _triples(insn, table)
        return GemmPlan(False, Span(lo, hi), a, x, w, None, False, n_iter)
    a, x, w, c = _dense_plan(insn, table, cfg.block_in)
    return GemmPlan(False, Span(lo, hi), a, x, w, c, _is_unique(a), n_iter)


def run_gemm(m: Machine, access: Access, plan: GemmPlan) -> None:
    """Execute a planned GEMM: race checks, effect, counters."""
    tr = m.trackers
    tr["uop"].read(access, plan.uops)
    m.counters.gemm_uops += plan.n_iter
    if plan.reset:
        tr["acc"].write(access, Gather(plan.a))
        m.acc[plan.a] = 0
        return
    cfg = m.cfg
    m.counters.gemm_macs += plan.n_iter * cfg.batch * cfg.block_in * cfg.block_out
    tr["inp"].read(access, Gather(plan.x))
    tr["wgt"].read(access, Gather(plan.w))
    tr["acc"].read(access, Gather(plan.a))
    tr["acc"].write(access, Gather(plan.a))
    if plan.contraction is None:
        _reference(m, plan)
    else:
        _dense(m, plan)


def exec_gemm(m: Machine, access: Access, insn: Gemm, fast: bool = True) -> None:
    """Execute a GEMM instruction (range checks, race checks, effect, counters).

    Plans are cached per instruction and micro-op table (:meth:`.Machine.cached_plan`).

    Parameters
    ----------
    fast : bool
        Use the dense-contraction evaluation; ``False`` evaluates every iteration's
        product separately (same result, for testing).
    """
    key = (insn, fast)
    plan = m.cached_plan(key)
    if plan is None:
        plan = m.remember(key, plan_gemm(m, access, insn, fast))
    run_gemm(m, access, plan)


__all__ = ["GemmPlan", "exec_gemm", "factor_table", "plan_gemm", "run_gemm"]
