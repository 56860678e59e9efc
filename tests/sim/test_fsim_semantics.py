"""Functional simulator: instruction semantics against numpy / pure-Python references.

Every program here reads its results back through STORE only. Full int32
accumulator values are recovered by copying the results four times, shifting copy
``k`` right by ``8k`` and storing the low bytes, then reassembling the words.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Program,
    ProgramError,
    Segment,
    Store,
    Uop,
    uop_format,
)
from tensorfab.isa.formats import BINARY_ALU_OPS
from tensorfab.sim import Counters, Device, FunctionalSimulator, RunResult

TINY = PRESETS["tiny"]  # batch 1, 4x4 blocks, acc depth 256
SMALL = PRESETS["small"]  # batch 1, 8x8 blocks
BATCH2 = HwConfig(name="batch2", batch=2, block_in=4, block_out=8, inp_depth=256,
                  wgt_depth=128, acc_depth=256, uop_depth=512, dram_addr_width=24,
                  mem_bus_width=32, dep_queue_depth=4, cmd_queue_depth=4)
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1

Addr = Callable[[str, int], int]


# ----------------------------------------------------------------------------- helpers
def assemble(cfg: HwConfig, make: Callable[[Addr], list[Insn]], uops: list[Uop],
             segments: list[Segment]) -> Program:
    """Program whose LOAD/STORE addresses come from its own layout: ``make(at)`` builds
    the instructions, ``at(name, entry_bytes)`` is segment ``name``'s base in entries."""
    prog = Program(cfg, make(lambda name, eb: 0), uops, segments)
    lay = prog.layout()
    prog.insns = make(lambda name, eb: lay[name].offset // eb)
    prog.validate()
    return prog


def wrap32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def run_compute(cfg: HwConfig, body: list[Insn], body_uops: list[Uop], n_result: int, *,
                acc0: np.ndarray | None = None, inp: np.ndarray | None = None,
                wgt: np.ndarray | None = None, fast: bool = True) -> np.ndarray:
    """Load ``acc0``/``inp``/``wgt`` at entry 0 of their buffers, run the compute
    instructions ``body`` (micro-ops ``body_uops`` at micro-op entry 0), and return
    accumulators ``0 .. n_result-1`` as int32 ``(n_result, batch, block_out)``."""
    assert 5 * n_result <= cfg.acc_depth
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    nu = len(body_uops)
    uops = list(body_uops) + [Uop(acc=n_result * (1 + k), src=0) for k in range(4)]
    extract: list[Insn] = []
    for k in range(4):
        u = nu + k
        extract.append(Alu(op=AluOp.MOV, uop_begin=u, uop_end=u + 1, iter_out=n_result,
                           dst_factor_out=1, src_factor_out=1))
        if k:
            extract.append(Alu(op=AluOp.SHR, use_imm=True, imm=8 * k, uop_begin=u,
                               uop_end=u + 1, iter_out=n_result, dst_factor_out=1))
    compute = list(body) + extract
    compute[0] = dataclasses.replace(compute[0], pop_prev=True)
    compute[-1] = dataclasses.replace(compute[-1], push_next=True)
    segs = [Segment("out", "int8", (4, n_result, b, bo), output=True)]
    loads: list[tuple[Buffer, str, int]] = []
    for name, arr, buf, shape in (("acc0", acc0, Buffer.ACC, (b, bo)),
                                  ("inp", inp, Buffer.INP, (b, bi)),
                                  ("wgt", wgt, Buffer.WGT, (bo, bi))):
        if arr is not None:
            arr = np.asarray(arr)
            segs.append(Segment(name, "int32" if name == "acc0" else "int8",
                                (len(arr), *shape), data=arr))
            loads.append((buf, name, len(arr)))
    ub = uop_format(cfg).bytes

    def make(at: Addr) -> list[Insn]:
        insns: list[Insn] = [Load(buffer=Buffer.UOP, sram=0, dram=at("uops", ub), y=1,
                                  x=len(uops), stride=len(uops))]
        for buf, name, n in loads:
            eb = {Buffer.ACC: 4 * b * bo, Buffer.INP: b * bi, Buffer.WGT: bo * bi}[buf]
            insns.append(Load(buffer=buf, sram=0, dram=at(name, eb), y=1, x=n, stride=n))
        insns[-1] = dataclasses.replace(insns[-1], push_next=True)
        insns += compute
        insns.append(Store(pop_prev=True, sram=n_result, dram=at("out", b * bo), y=1,
                           x=4 * n_result, stride=4 * n_result))
        insns.append(Finish())
        return insns

    prog = assemble(cfg, make, uops, segs)
    res = FunctionalSimulator(fast=fast).run(prog)
    raw = res.outputs["out"].view(np.uint8).astype(np.int64)
    words = raw[0] | raw[1] << 8 | raw[2] << 16 | raw[3] << 24
    return words.astype(np.uint32).view(np.int32)


# ------------------------------------------------------------------------ ALU reference
def ref_alu(op: AluOp, a: int, b: int) -> int:
    """One ALU operation on Python ints, straight from the table in docs/isa.md."""
    if op is AluOp.ADD:
        return wrap32(a + b)
    if op is AluOp.MUL:
        return wrap32(a * b)
    if op is AluOp.MIN:
        return min(a, b)
    if op is AluOp.MAX:
        return max(a, b)
    if op is AluOp.SHR:
        return a >> (b & 31)
    if op is AluOp.SHR_RND:  # round a / 2^s to nearest, ties away from zero
        q = Fraction(a, 1 << (b & 31))
        mag = int(abs(q) + Fraction(1, 2))
        return wrap32(mag if q >= 0 else -mag)
    if op is AluOp.SHL:
        return wrap32(a << (b & 31))
    if op is AluOp.CLIP:
        return wrap32(min(max(a, -b - 1), b))
    if op is AluOp.MOV:
        return b
    if op is AluOp.MULHI:  # a·b / 2^31 rounded half up, the one overflow saturated
        return min(math.floor(Fraction(a * b, 1 << 31) + Fraction(1, 2)), I32_MAX)
    raise AssertionError(op)


EDGE = [0, 1, -1, 2, -2, 3, -3, 5, -5, 127, 128, -128, -129, 255, 256, 32767, -32768,
        0x4000_0000, -0x4000_0000, I32_MAX, I32_MIN, I32_MAX - 1, I32_MIN + 1, 12345678,
        -12345678, 31, 32, 33, 63]


def alu_operands(rng: np.random.Generator, n_entries: int, width: int) -> tuple[np.ndarray,
                                                                                np.ndarray]:
    """``a`` and ``b`` operand blocks: every pair of edge values, then random values."""
    total = n_entries * width
    pairs = [(x, y) for x in EDGE for y in EDGE][:total]
    a = np.array([p[0] for p in pairs] + list(rng.integers(I32_MIN, I32_MAX, total
                                                             - len(pairs), endpoint=True)))
    b = np.array([p[1] for p in pairs] + list(rng.integers(I32_MIN, I32_MAX, total
                                                             - len(pairs), endpoint=True)))
    return a.astype(np.int32), b.astype(np.int32)


def alu_program(cfg: HwConfig, a: np.ndarray, b: np.ndarray | None, op: AluOp,
                imm: int | None, fast: bool) -> np.ndarray:
    """Run ``acc[0..n) = OP(acc[0..n), acc[n..2n) or imm)``; return the results."""
    shape = (cfg.batch, cfg.block_out)
    n = a.size // (cfg.batch * cfg.block_out)
    init = a.reshape(n, *shape) if b is None else np.concatenate(
        [a.reshape(n, *shape), b.reshape(n, *shape)])
    if imm is None:
        insn = Alu(op=op, uop_begin=0, uop_end=1, iter_out=n, dst_factor_out=1,
                   src_factor_out=1)
    else:
        insn = Alu(op=op, use_imm=True, imm=imm, uop_begin=0, uop_end=1, iter_out=n,
                   dst_factor_out=1)
    return run_compute(cfg, [insn], [Uop(acc=0, src=n)], n, acc0=init, fast=fast)


# ------------------------------------------------------------------------------ ALU
@pytest.mark.parametrize("op", BINARY_ALU_OPS, ids=lambda o: o.name)
def test_alu_vector_operand(op: AluOp) -> None:
    rng = np.random.default_rng(int(op))
    a, b = alu_operands(rng, 48, TINY.block_out)
    if op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL):
        b &= 31  # other vector shift amounts are SHIFT_RANGE errors
    want = np.array([ref_alu(op, int(x), int(y)) for x, y in zip(a, b, strict=True)])
    for fast in (True, False):
        got = alu_program(TINY, a, b, op, None, fast).ravel()
        np.testing.assert_array_equal(got, want, err_msg=f"{op.name} fast={fast}")


IMMS = {
    AluOp.SHR: [0, 1, 7, 31], AluOp.SHR_RND: [0, 1, 2, 7, 31], AluOp.SHL: [0, 1, 8, 31],
    AluOp.CLIP: [127, 0, -5, 32767, -32768], AluOp.ADD: [1, -1, 32767, -32768],
    AluOp.MUL: [-1, 3, 32767, -32768], AluOp.MIN: [0, -7, 32767], AluOp.MAX: [0, 9, -32768],
    AluOp.MOV: [0, -32768, 32767], AluOp.MULHI: [0, 1, -1, 16384, 32767, -32768],
}


@pytest.mark.parametrize("op", BINARY_ALU_OPS, ids=lambda o: o.name)
def test_alu_immediate(op: AluOp) -> None:
    rng = np.random.default_rng(100 + int(op))
    a = np.array(EDGE + list(rng.integers(I32_MIN, I32_MAX, 4 * 16 - len(EDGE),
                                          endpoint=True)), dtype=np.int32)
    for imm in IMMS[op]:
        b = imm << 16 if op is AluOp.MULHI else imm  # MULHI: the high half
        want = np.array([ref_alu(op, int(x), b) for x in a])
        got = alu_program(TINY, a, None, op, imm, fast=True).ravel()
        np.testing.assert_array_equal(got, want, err_msg=f"{op.name} imm={imm}")


def test_shr_rnd_ties_both_signs() -> None:
    a = np.array([6, -6, 2, -2, 10, -10, 1, -1, 3, -3, 5, -5, 7, -7, 0, I32_MIN],
                 dtype=np.int32)
    got = alu_program(TINY, a, None, AluOp.SHR_RND, 2, fast=True).ravel()
    # x/4: 1.5 -> 2, -1.5 -> -2, 0.5 -> 1, -0.5 -> -1, 2.5 -> 3, -2.5 -> -3, ...
    np.testing.assert_array_equal(got, [2, -2, 1, -1, 3, -3, 0, 0, 1, -1, 1, -1, 2, -2, 0,
                                        -(1 << 29)])


def test_alu_reduction_max_pool_and_sum() -> None:
    """dst fixed, src moving: 4 windows of 3 entries with stride 2 (overlapping)."""
    rng = np.random.default_rng(7)
    n_src = 9
    src = rng.integers(-1000, 1000, (n_src, 1, 4)).astype(np.int32)
    base, windows, size, stride = 16, 4, 3, 2
    init = np.zeros((base + n_src, 1, 4), dtype=np.int32)
    init[base:] = src
    uops = [Uop(acc=0, src=base), Uop(acc=windows, src=base)]
    body: list[Insn] = [
        Alu(op=AluOp.MOV, uop_begin=0, uop_end=1, iter_out=windows, dst_factor_out=1,
            src_factor_out=stride),
        Alu(op=AluOp.MAX, uop_begin=0, uop_end=1, iter_out=windows, iter_in=size,
            dst_factor_out=1, src_factor_out=stride, src_factor_in=1),
        Alu(op=AluOp.ADD, uop_begin=1, uop_end=2, iter_out=windows, iter_in=size,
            dst_factor_out=1, src_factor_out=stride, src_factor_in=1),
    ]
    win = np.stack([src[w * stride: w * stride + size] for w in range(windows)])
    want_max = win.max(axis=1)
    want_sum = win.astype(np.int64).sum(axis=1)
    for fast in (True, False):
        got = run_compute(TINY, body, uops, 2 * windows, acc0=init, fast=fast)
        np.testing.assert_array_equal(got[:windows], want_max)
        np.testing.assert_array_equal(got[windows:], want_sum)


def test_alu_sequential_dependencies() -> None:
    """Iterations see earlier ones: a prefix sum (src = previous dst), repeated shifts
    of one destination, repeated MOV (last wins), and a repeated destination that is
    also a later source."""
    rng = np.random.default_rng(8)
    vals = rng.integers(I32_MIN, I32_MAX, (12, 1, 4), endpoint=True).astype(np.int32)
    init = vals.copy()
    uops = [Uop(acc=1, src=0), Uop(acc=8, src=0), Uop(acc=9, src=10), Uop(acc=10, src=11),
            Uop(acc=10, src=10)]
    body: list[Insn] = [
        # acc[d] += acc[d-1] for d = 1..7: prefix sums over entries 0..7
        Alu(op=AluOp.ADD, uop_begin=0, uop_end=1, iter_out=7, dst_factor_out=1,
            src_factor_out=1),
        # acc[8] >>= 1, three times (repeated destination, immediate)
        Alu(op=AluOp.SHR_RND, use_imm=True, imm=1, uop_begin=1, uop_end=2, iter_out=3),
        # acc[9] = acc[10], then acc[11]: the last MOV wins
        Alu(op=AluOp.MOV, uop_begin=2, uop_end=3, iter_out=2, src_factor_out=1),
        # acc[10] += acc[11]; acc[10] += acc[10] (sees the first update)
        Alu(op=AluOp.ADD, uop_begin=3, uop_end=5),
    ]
    want = [int(v) for v in vals[:, 0, :].ravel()]
    w = np.array(want, dtype=np.int64).reshape(12, 4)
    for d in range(1, 8):
        w[d] = [wrap32(int(x) + int(y)) for x, y in zip(w[d], w[d - 1], strict=True)]
    for _ in range(3):
        w[8] = [ref_alu(AluOp.SHR_RND, int(x), 1) for x in w[8]]
    w[9] = w[11]
    w[10] = [wrap32(int(x) + int(y)) for x, y in zip(w[10], w[11], strict=True)]
    w[10] = [wrap32(2 * int(x)) for x in w[10]]
    for fast in (True, False):
        got = run_compute(TINY, body, uops, 12, acc0=init, fast=fast)
        np.testing.assert_array_equal(got[:, 0, :], w)


@pytest.mark.parametrize("seed", range(16))
def test_alu_random_loops_fast_equals_reference(seed: int) -> None:
    """Random ops, operands, loop extents, factors (often 0: repeated destinations,
    overlapping sources and destinations) against the loop of docs/isa.md."""
    rng = np.random.default_rng(1000 + seed)
    n = 40
    vals = rng.integers(-3000, 3000, (n, 1, 4)).astype(np.int32)
    vals[rng.random((n, 1, 4)) < 0.2] = I32_MAX
    body: list[Insn] = []
    uops: list[Uop] = []
    want = [[int(v) for v in row] for row in vals[:, 0, :]]
    for _ in range(4):
        op = BINARY_ALU_OPS[int(rng.integers(0, len(BINARY_ALU_OPS)))]
        o, i_ = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        f = [int(rng.choice([0, 0, 1, 2, 5])) for _ in range(4)]
        span_d = (o - 1) * f[0] + (i_ - 1) * f[1]
        span_s = (o - 1) * f[2] + (i_ - 1) * f[3]
        us = [Uop(acc=int(rng.integers(0, n - span_d)), src=int(rng.integers(0, n - span_s)))
              for _ in range(int(rng.integers(1, 4)))]
        # vector shift amounts outside 0..31 are SHIFT_RANGE errors: shifts take imm
        use_imm = bool(rng.random() < 0.3) or op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL)
        imm = int(rng.integers(0, 32)) if op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL) \
            else int(rng.integers(-32768, 32768))
        insn = Alu(op=op, use_imm=use_imm, imm=imm if use_imm else 0, uop_begin=len(uops),
                   uop_end=len(uops) + len(us), iter_out=o, iter_in=i_, dst_factor_out=f[0],
                   dst_factor_in=f[1], src_factor_out=f[2], src_factor_in=f[3])
        uops += us
        body.append(insn)
        for i in range(o):
            for j in range(i_):
                for u in us:
                    d = u.acc + i * f[0] + j * f[1]
                    src = u.src + i * f[2] + j * f[3]
                    b_imm = imm << 16 if op is AluOp.MULHI else imm
                    b = [b_imm] * 4 if use_imm else list(want[src])
                    want[d] = [ref_alu(op, x, y) for x, y in zip(want[d], b, strict=True)]
    for fast in (True, False):
        got = run_compute(TINY, body, uops, n, acc0=vals, fast=fast)
        np.testing.assert_array_equal(got[:, 0, :], want, err_msg=f"fast={fast}")


# ----------------------------------------------------------------------------- GEMM
def ref_gemm(acc: np.ndarray, inp: np.ndarray, wgt: np.ndarray, insn: Gemm,
             uops: list[Uop]) -> None:
    """The loop of docs/isa.md, one iteration at a time (int64, then wrap)."""
    for i in range(insn.iter_out):
        for j in range(insn.iter_in):
            for u in range(insn.uop_begin, insn.uop_end):
                a = uops[u].acc + i * insn.acc_factor_out + j * insn.acc_factor_in
                x = uops[u].src + i * insn.inp_factor_out + j * insn.inp_factor_in
                w = uops[u].wgt + i * insn.wgt_factor_out + j * insn.wgt_factor_in
                if insn.reset:
                    acc[a] = 0
                else:
                    s = acc[a] + inp[x].astype(np.int64) @ wgt[w].astype(np.int64).T
                    acc[a] = (s + (1 << 31)) % (1 << 32) - (1 << 31)


def random_gemm(rng: np.random.Generator, cfg: HwConfig, n_acc: int, n_inp: int,
                n_wgt: int, uop_begin: int, grid: bool) -> tuple[Gemm, list[Uop]]:
    """A GEMM with random loop extents, factors (often 0) and micro-ops that keeps
    every index inside ``n_acc`` / ``n_inp`` / ``n_wgt``."""
    def factor(limit: int) -> int:
        return int(rng.choice([0, 0, 1, int(rng.integers(1, max(2, limit)))]))

    o, i_ = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    fa = (factor(n_acc // 4), factor(n_acc // 4))
    fx = (factor(n_inp // 4), factor(n_inp // 4))
    fw = (factor(n_wgt // 4), factor(n_wgt // 4))

    def room(n: int, f: tuple[int, int]) -> int:
        return n - (o - 1) * f[0] - (i_ - 1) * f[1]

    ra, rx, rw = room(n_acc, fa), room(n_inp, fx), room(n_wgt, fw)
    if min(ra, rx, rw) < 1:
        return random_gemm(rng, cfg, n_acc, n_inp, n_wgt, uop_begin, grid)
    if grid:  # an affine 2-D micro-op grid
        g1, g2 = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        st = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(3)]
        cols = []
        for r, (s1, s2) in zip((ra, rx, rw), st, strict=True):
            s1 = s1 if (g1 - 1) * s1 + (g2 - 1) * s2 < r else 0
            s2 = s2 if (g1 - 1) * s1 + (g2 - 1) * s2 < r else 0
            b0 = int(rng.integers(0, r - (g1 - 1) * s1 - (g2 - 1) * s2))
            cols.append([b0 + p * s1 + q * s2 for p in range(g1) for q in range(g2)])
        uops = [Uop(acc=a, src=x, wgt=w) for a, x, w in zip(*cols, strict=True)]
    else:
        n_u = int(rng.integers(1, 6))
        uops = [Uop(acc=int(rng.integers(0, ra)), src=int(rng.integers(0, rx)),
                    wgt=int(rng.integers(0, rw))) for _ in range(n_u)]
    insn = Gemm(uop_begin=uop_begin, uop_end=uop_begin + len(uops), iter_out=o, iter_in=i_,
                acc_factor_out=fa[0], acc_factor_in=fa[1], inp_factor_out=fx[0],
                inp_factor_in=fx[1], wgt_factor_out=fw[0], wgt_factor_in=fw[1])
    return insn, uops


@pytest.mark.parametrize("cfg", [TINY, BATCH2], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(12))
def test_gemm_random_loops_fast_equals_reference(cfg: HwConfig, seed: int) -> None:
    rng = np.random.default_rng(seed)
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    n_acc, n_inp, n_wgt = 24, 40, 30
    acc0 = rng.integers(I32_MIN, I32_MAX, (n_acc, b, bo), endpoint=True).astype(np.int32)
    inp = rng.integers(-128, 128, (n_inp, b, bi)).astype(np.int8)
    wgt = rng.integers(-128, 128, (n_wgt, bo, bi)).astype(np.int8)
    body: list[Insn] = []
    uops: list[Uop] = []
    want = acc0.astype(np.int64)
    for k in range(5):
        insn, us = random_gemm(rng, cfg, n_acc, n_inp, n_wgt, len(uops), grid=k % 2 == 0)
        if k == 3:
            insn = dataclasses.replace(insn, reset=True)
        uops += us
        body.append(insn)
        ref_gemm(want, inp, wgt, insn, uops)
    got_fast = run_compute(cfg, body, uops, n_acc, acc0=acc0, inp=inp, wgt=wgt, fast=True)
    got_slow = run_compute(cfg, body, uops, n_acc, acc0=acc0, inp=inp, wgt=wgt, fast=False)
    np.testing.assert_array_equal(got_fast, want)
    np.testing.assert_array_equal(got_slow, got_fast)


STRUCTURED = {
    # micro-ops over k with one accumulator; i over rows, j over output blocks
    "rows_cols_k": (dict(iter_out=3, iter_in=2, acc_factor_out=2, acc_factor_in=1,
                         inp_factor_out=4, wgt_factor_in=4),
                    [Uop(acc=0, src=k, wgt=k) for k in range(4)]),
    # mirrored: input moves with j, weights with i
    "mirrored": (dict(iter_out=2, iter_in=3, acc_factor_out=1, acc_factor_in=2,
                      inp_factor_in=4, wgt_factor_out=4),
                 [Uop(acc=0, src=k, wgt=k) for k in range(4)]),
    # micro-ops over an (m, n) grid, reduction in the loops
    "grid_uops_k_loops": (dict(iter_out=2, iter_in=2, inp_factor_out=1, wgt_factor_out=1,
                               inp_factor_in=2, wgt_factor_in=2),
                          [Uop(acc=m * 3 + n, src=m * 4, wgt=n * 4) for m in range(2)
                           for n in range(3)]),
    # every index moves with i: a batch of independent products; j repeats (x2)
    "batched_repeated": (dict(iter_out=4, iter_in=2, acc_factor_out=1, inp_factor_out=1,
                              wgt_factor_out=1), [Uop(acc=0, src=0, wgt=0)]),
    # input-only and weight-only reductions, accumulator-only broadcast
    "presum_broadcast": (dict(iter_out=3, iter_in=2, inp_factor_out=1, wgt_factor_in=1),
                         [Uop(acc=a, src=5, wgt=7) for a in (0, 4)]),
    # colliding accumulators across iterations
    "collisions": (dict(iter_out=3, iter_in=3, acc_factor_out=1, acc_factor_in=1,
                        inp_factor_out=2, wgt_factor_in=3),
                   [Uop(acc=0, src=1, wgt=2), Uop(acc=1, src=3, wgt=0)]),
}


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_gemm_structured_shapes(name: str) -> None:
    cfg = SMALL
    fields, uops = STRUCTURED[name]
    rng = np.random.default_rng(len(name))
    acc0 = rng.integers(-1000, 1000, (12, 1, 8)).astype(np.int32)
    inp = rng.integers(-128, 128, (16, 1, 8)).astype(np.int8)
    wgt = rng.integers(-128, 128, (16, 8, 8)).astype(np.int8)
    insn = Gemm(uop_begin=0, uop_end=len(uops), **fields)
    want = acc0.astype(np.int64)
    ref_gemm(want, inp, wgt, insn, uops)
    for fast in (True, False):
        got = run_compute(cfg, [insn], uops, 12, acc0=acc0, inp=inp, wgt=wgt, fast=fast)
        np.testing.assert_array_equal(got, want, err_msg=f"fast={fast}")


def test_gemm_extreme_values_wrap() -> None:
    """-128 * -128 summed over many products, onto INT32_MAX: wraps modulo 2^32."""
    cfg = SMALL
    inp = np.full((8, 1, 8), -128, dtype=np.int8)
    wgt = np.full((8, 8, 8), -128, dtype=np.int8)
    acc0 = np.full((2, 1, 8), I32_MAX, dtype=np.int32)
    insn = Gemm(uop_begin=0, uop_end=8, iter_out=2, acc_factor_out=1)
    uops = [Uop(acc=0, src=k, wgt=k) for k in range(8)]
    want = np.full((2, 1, 8), wrap32(I32_MAX + 8 * 8 * 128 * 128), dtype=np.int64)
    got = run_compute(cfg, [insn], uops, 2, acc0=acc0, inp=inp, wgt=wgt)
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------- LOAD / STORE
def test_store_narrows_to_low_byte_and_strides() -> None:
    cfg = TINY
    vals = np.array([0, 1, -1, 127, 128, 255, 256, -128, -129, 383, I32_MAX, I32_MIN,
                     0x12345678, -0x12345678, 1000, -1000] * 2, dtype=np.int32).reshape(8,
                                                                                        1, 4)
    out_rows, out_cols = 3, 5

    def make(at: Addr) -> list[Insn]:
        out = at("out", 4)
        return [
            Load(buffer=Buffer.ACC, sram=0, dram=at("acc0", 16), y=1, x=8, stride=8,
                 push_next=True),
            Alu(pop_prev=True, push_next=True, op=AluOp.ADD, use_imm=True, imm=0),
            # 2 rows of 3 entries, stride 5: entries (0..2) and (5..7) of the out grid
            Store(pop_prev=True, sram=0, dram=out, y=2, x=3, stride=5),
            Finish(),
        ]

    prog = assemble(cfg, make, [Uop()], [
        Segment("acc0", "int32", (8, 1, 4), data=vals),
        Segment("out", "int8", (out_rows * out_cols, 1, 4),
                data=np.full((out_rows * out_cols, 1, 4), 77), output=True)])
    res = FunctionalSimulator().run(prog)
    want = np.full((out_rows * out_cols, 1, 4), 77, dtype=np.int64)
    low = ((vals.astype(np.int64) + 128) % 256) - 128
    want[0:3] = low[0:3]
    want[5:8] = low[3:6]
    np.testing.assert_array_equal(res.outputs["out"], want)


def test_store_overlapping_rows_later_rows_win() -> None:
    cfg = TINY
    vals = np.arange(12, dtype=np.int32).reshape(12, 1, 1) * np.ones((1, 1, 4), np.int32)

    def make(at: Addr) -> list[Insn]:
        return [
            Load(buffer=Buffer.ACC, sram=0, dram=at("acc0", 16), y=1, x=12, stride=12,
                 push_next=True),
            Alu(pop_prev=True, push_next=True, op=AluOp.ADD, use_imm=True, imm=0),
            Store(pop_prev=True, sram=0, dram=at("out", 4), y=3, x=4, stride=2),
            Finish(),
        ]

    prog = assemble(cfg, make, [Uop()], [Segment("acc0", "int32", (12, 1, 4), data=vals),
                                         Segment("out", "int8", (8, 1, 4), output=True)])
    got = FunctionalSimulator().run(prog).outputs["out"][:, 0, 0]
    # row 0 -> 0..3 gets 0,1,2,3; row 1 -> 2..5 gets 4..7; row 2 -> 4..7 gets 8..11
    np.testing.assert_array_equal(got, [0, 1, 4, 5, 8, 9, 10, 11])


@pytest.mark.parametrize("pad", [(0, 0, 0, 0), (1, 2, 3, 1), (0, 1, 0, 2), (3, 0, 1, 0)])
def test_load_padding_layout_acc(pad: tuple[int, int, int, int]) -> None:
    """LOAD.ACC of a strided 2-D window with padding, read back through STORE."""
    cfg = TINY
    top, bottom, left, right = pad
    y, x, stride = 3, 2, 5
    src = np.arange(1, 21 * 4 + 1, dtype=np.int32).reshape(21, 1, 4) % 100
    rows, cols = top + y + bottom, left + x + right
    n = rows * cols

    def make(at: Addr) -> list[Insn]:
        return [
            Load(buffer=Buffer.ACC, sram=3, dram=at("src", 16) + 1, y=y, x=x, stride=stride,
                 pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
                 push_next=True),
            Alu(pop_prev=True, push_next=True, op=AluOp.ADD, use_imm=True, imm=0),
            Store(pop_prev=True, sram=3, dram=at("out", 4), y=1, x=n, stride=n),
            Finish(),
        ]

    prog = assemble(cfg, make, [Uop()], [Segment("src", "int32", (21, 1, 4), data=src),
                                         Segment("out", "int8", (n, 1, 4), output=True)])
    res = FunctionalSimulator().run(prog)
    window = np.stack([src[1 + r * stride: 1 + r * stride + x] for r in range(y)])
    want = np.pad(window, ((top, bottom), (left, right), (0, 0), (0, 0)))
    np.testing.assert_array_equal(res.outputs["out"], want.reshape(n, 1, 4))
    assert res.counters.load_bytes_acc == y * x * 16


def test_load_padding_layout_inp_through_identity_gemm() -> None:
    """LOAD.INP with padding, observed with GEMM against an identity weight block."""
    cfg = TINY
    top, bottom, left, right = 1, 1, 2, 1
    y, x, stride = 2, 3, 4
    src = np.arange(-50, -50 + 12 * 4, dtype=np.int8).reshape(12, 1, 4)
    rows, cols = top + y + bottom, left + x + right
    n = rows * cols
    eye = np.eye(4, dtype=np.int8)[None]

    def make(at: Addr) -> list[Insn]:
        return [
            Load(buffer=Buffer.UOP, sram=0, dram=at("uops", uop_format(cfg).bytes), y=1, x=1,
                 stride=1),
            Load(buffer=Buffer.WGT, sram=0, dram=at("eye", 16), y=1, x=1, stride=1),
            Load(buffer=Buffer.INP, sram=0, dram=at("src", 4), y=y, x=x, stride=stride,
                 pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
                 push_next=True),
            Gemm(pop_prev=True, reset=True, iter_out=n, acc_factor_out=1),
            Gemm(push_next=True, iter_out=n, acc_factor_out=1, inp_factor_out=1),
            Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=n, stride=n),
            Finish(),
        ]

    prog = assemble(cfg, make, [Uop()], [Segment("eye", "int8", (1, 4, 4), data=eye),
                                         Segment("src", "int8", (12, 1, 4), data=src),
                                         Segment("out", "int8", (n, 1, 4), output=True)])
    res = FunctionalSimulator().run(prog)
    window = np.stack([src[r * stride: r * stride + x] for r in range(y)])
    want = np.pad(window, ((top, bottom), (left, right), (0, 0), (0, 0)))
    np.testing.assert_array_equal(res.outputs["out"], want.reshape(n, 1, 4))
    c = res.counters
    assert (c.load_bytes_inp, c.load_bytes_wgt, c.load_bytes_uop) == (y * x * 4, 16, 4)
    assert c.gemm_uops == 2 * n and c.gemm_macs == n * 16
    assert (c.load_insns, c.compute_insns, c.store_insns) == (3, 3, 1)
    assert c.store_bytes == n * 4


# ------------------------------------------------------------------- interface / result
def test_run_result_interface_and_given_image() -> None:
    cfg = TINY

    def make(at: Addr) -> list[Insn]:
        return [
            Load(buffer=Buffer.ACC, sram=0, dram=at("acc0", 16), y=1, x=2, stride=2,
                 push_next=True),
            Alu(pop_prev=True, push_next=True, op=AluOp.MUL, use_imm=True, imm=3,
                iter_out=2, dst_factor_out=1),
            Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=2, stride=2),
            Finish(),
        ]

    acc0 = np.arange(8, dtype=np.int32).reshape(2, 1, 4)
    prog = assemble(cfg, make, [Uop()], [Segment("acc0", "int32", (2, 1, 4), data=acc0),
                                         Segment("out", "int8", (2, 1, 4), output=True)])
    sim = FunctionalSimulator()
    assert isinstance(sim, Device) and sim.name == "fsim"
    image = prog.dram_image()
    before = image.copy()
    res = sim.run(prog, image)
    assert isinstance(res, RunResult) and isinstance(res.counters, Counters)
    np.testing.assert_array_equal(image, before)  # the given image is not modified
    np.testing.assert_array_equal(res.outputs["out"], acc0 * 3)
    np.testing.assert_array_equal(prog.read_segment(res.dram, "out"), acc0 * 3)
    assert res.cycles is None and res.device == "fsim"
    assert res.counters.alu_uops == 2 and res.counters.alu_ops == 8
    js = res.to_json()
    assert js["outputs"] == {"out": {"shape": [2, 1, 4], "dtype": "int8"}}
    assert js["counters"]["store_bytes"] == 8 and js["cycles"] is None
    # a larger image is fine; a smaller one is an error
    big = np.concatenate([image, np.zeros(64, np.uint8)])
    np.testing.assert_array_equal(sim.run(prog, big).outputs["out"], acc0 * 3)
    with pytest.raises(ProgramError, match="needs"):
        sim.run(prog, image[:-1])


def test_gemm_long_reduction_and_every_matmul_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 micro-ops into one accumulator (a non-affine table: float64 products), and
    the same with the float32 / int64 products forced."""
    import tensorfab.sim.fsim_gemm as fsim_gemm

    cfg = TINY
    rng = np.random.default_rng(11)
    inp = rng.integers(-128, 128, (256, 1, 4)).astype(np.int8)
    wgt = rng.integers(-128, 128, (128, 4, 4)).astype(np.int8)
    uops = [Uop(acc=0, src=k % 256, wgt=(7 * k) % 128) for k in range(300)]
    insn = Gemm(uop_begin=0, uop_end=300, iter_out=2, acc_factor_out=1, inp_factor_out=0)
    want = np.zeros((2, 1, 4), dtype=np.int64)
    ref_gemm(want, inp, wgt, insn, uops)
    got = run_compute(cfg, [insn], uops, 2, inp=inp, wgt=wgt)
    np.testing.assert_array_equal(got, want)
    for dtype in (np.int64, np.float64):
        monkeypatch.setattr(fsim_gemm, "_compute_dtype", lambda terms, dt=dtype: np.dtype(dt))
        got = run_compute(cfg, [insn], uops, 2, inp=inp, wgt=wgt)
        np.testing.assert_array_equal(got, want, err_msg=str(dtype))


def test_get_device() -> None:
    from tensorfab.isa import TensorfabError
    from tensorfab.sim import get_device

    dev = get_device("fsim")
    assert isinstance(dev, FunctionalSimulator) and dev.name == "fsim"
    with pytest.raises(TensorfabError, match="unknown executor 'nope'"):
        get_device("nope")
