"""Directed ISA tests (after TVM VTA's test_vta_insn.py) on the functional simulator.

Every program comes from ``isa_programs``; the expected results are computed here,
independently, from docs/isa.md: int64 numpy arithmetic wrapped to int32, then the
low byte that STORE keeps.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np
import pytest
from support.gemmlowp_reference import saturating_rounding_doubling_high_mul
from support.isa_programs import (
    PAD_CASES,
    PAD_X,
    PAD_Y,
    build_alu,
    build_alu_reduction,
    build_gemm,
    build_load_store_acc,
    build_padded_load_acc,
    build_padded_load_inp,
    build_relu,
    build_requant,
)

from tensorfab.isa import PRESETS, Alu, AluOp, Buffer, Gemm, Load, Program, Store, uop_format
from tensorfab.isa.formats import BINARY_ALU_OPS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.blocked_gemm import (
    GemmTiling,
    build_blocked_gemm,
    pack_activations,
    pack_weights,
    unpack_outputs,
)

PRESET_NAMES = ["tiny", "small", "default"]


@pytest.fixture(params=PRESET_NAMES)
def cfg(request):
    return PRESETS[request.param]


# ----------------------------------------------------------------- references
def wrap32(x: np.ndarray) -> np.ndarray:
    """Wrap int64 values to int32 (two's complement)."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def low_byte(x: np.ndarray) -> np.ndarray:
    """STORE narrowing: keep the low 8 bits, as int8."""
    return (np.asarray(x, dtype=np.int64) & 0xFF).astype(np.uint8).view(np.int8)


def alu_ref(op: AluOp, a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """``OP(a, b)`` per the ALU table of docs/isa.md (int32 in, int32 out, as int64)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.broadcast_to(np.asarray(b, dtype=np.int64), a.shape)
    s = b & 31
    if op is AluOp.ADD:
        r = a + b
    elif op is AluOp.MUL:
        r = a * b
    elif op is AluOp.MIN:
        r = np.minimum(a, b)
    elif op is AluOp.MAX:
        r = np.maximum(a, b)
    elif op is AluOp.SHR:
        r = a >> s
    elif op is AluOp.SHR_RND:
        mask = (np.int64(1) << s) - 1
        rem = a & mask
        thr = (mask >> 1) + (a < 0)
        r = (a >> s) + (rem > thr)
    elif op is AluOp.SHL:
        r = a << s
    elif op is AluOp.CLIP:
        r = np.minimum(np.maximum(a, -b - 1), b)
    elif op is AluOp.MOV:
        r = b.copy()
    elif op is AluOp.MULHI:
        return saturating_rounding_doubling_high_mul(a, b)
    else:  # pragma: no cover
        raise AssertionError(op)
    return wrap32(r)


def gemm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """int32 accumulation of int8 operands (wrapping), as int64."""
    return wrap32(a.astype(np.int64) @ b.astype(np.int64))


def from_lanes(lanes: np.ndarray) -> np.ndarray:
    """Reassemble int32 values from the 4 byte-lane output of the ALU programs."""
    u = lanes.astype(np.uint8).astype(np.uint32)
    word = u[0] | (u[1] << 8) | (u[2] << 16) | (u[3] << 24)
    return word.view(np.int32).astype(np.int64)


def pad_ref(x: np.ndarray, pad: tuple[int, int, int, int]) -> np.ndarray:
    """Zero-padded 2-D block of entries, as a padded LOAD writes it."""
    top, bottom, left, right = pad
    out = np.zeros((top + PAD_Y + bottom, left + PAD_X + right, *x.shape[2:]), np.int64)
    out[top: top + PAD_Y, left: left + PAD_X] = x[:, :PAD_X]
    return out


# -------------------------------------------------------------------- helpers
def run(prog: Program):
    res = FunctionalSimulator().run(prog)
    assert res.counters.to_dict() == expected_counters(prog)
    return res


def expected_counters(prog: Program) -> dict[str, int]:
    """The activity counters a run of ``prog`` must report, derived from its instructions
    (every instruction retires once; loops execute ``uops × iter_out × iter_in`` times)."""
    cfg = prog.config
    c = dict.fromkeys(("load_insns", "compute_insns", "store_insns", "load_bytes_inp",
                       "load_bytes_wgt", "load_bytes_acc", "load_bytes_uop", "store_bytes",
                       "gemm_macs", "gemm_uops", "alu_ops", "alu_uops"), 0)
    uop_bytes = uop_format(cfg).bytes
    entry = {Buffer.INP: cfg.inp_entry_bytes, Buffer.WGT: cfg.wgt_entry_bytes,
             Buffer.ACC: cfg.acc_entry_bytes, Buffer.UOP: uop_bytes}
    for insn in prog.insns:
        if isinstance(insn, Load):
            c["load_insns"] += 1
            c[f"load_bytes_{insn.buffer.name.lower()}"] += insn.y * insn.x * entry[insn.buffer]
        elif isinstance(insn, Store):
            c["store_insns"] += 1
            c["store_bytes"] += insn.y * insn.x * cfg.out_entry_bytes
        else:
            c["compute_insns"] += 1
        if isinstance(insn, Gemm | Alu):
            execs = (insn.uop_end - insn.uop_begin) * insn.iter_out * insn.iter_in
            if isinstance(insn, Gemm):
                c["gemm_uops"] += execs
                c["gemm_macs"] += 0 if insn.reset else execs * cfg.peak_macs_per_cycle
            else:
                c["alu_uops"] += execs
                c["alu_ops"] += execs * cfg.batch * cfg.block_out
    return c


# ----------------------------------------------------------- load/store, padding
def test_save_load_out(cfg):
    prog, inp = build_load_store_acc(cfg, np.random.default_rng(1))
    out = run(prog).outputs["out"]
    x = inp["X"]
    cols = x.shape[1] - 1
    want = np.zeros(out.shape, np.int8)
    want[:, :cols] = low_byte(x[:, :cols])
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("side", list(PAD_CASES))
def test_padded_load_inp(cfg, side):
    pad = PAD_CASES[side]
    prog, inp = build_padded_load_inp(cfg, np.random.default_rng(2), pad)
    out = run(prog).outputs["out"]
    padded = pad_ref(inp["X"], pad)  # (rows, cols, batch, block_in)
    want = low_byte(padded @ inp["W"][0].astype(np.int64).T)
    np.testing.assert_array_equal(out, want)
    # Junk (all non-zero) filled the entries first: zeros in ``out`` come from padding.
    assert np.all(inp["J"] != 0)


@pytest.mark.parametrize("side", list(PAD_CASES))
def test_padded_load_acc(cfg, side):
    pad = PAD_CASES[side]
    prog, inp = build_padded_load_acc(cfg, np.random.default_rng(3), pad)
    out = run(prog).outputs["out"]
    np.testing.assert_array_equal(out, low_byte(pad_ref(inp["X"], pad)))


# ---------------------------------------------------------------------- GEMM
@pytest.mark.parametrize("vthreads", [1, 2, 4])
def test_blocked_gemm(cfg, vthreads):
    prog, inp = build_gemm(cfg, np.random.default_rng(10 + vthreads), vthreads=vthreads)
    res = run(prog)
    a, b = inp["A"], inp["B"]
    m, k = a.shape
    n = b.shape[1]
    np.testing.assert_array_equal(unpack_outputs(cfg, res.outputs["C"]),
                                  low_byte(gemm_ref(a, b)))
    assert res.counters.gemm_macs == m * n * k


@pytest.mark.parametrize("vthreads", [1, 2, 3, 4])
def test_blocked_gemm_ragged_tiles(vthreads):
    """Edge tiles along every dimension and several k-tiles per output tile."""
    cfg = PRESETS["tiny"]
    M, N, K = 8, 7, 11
    prog, inp = build_gemm(cfg, np.random.default_rng(20 + vthreads), m=M * cfg.batch,
                           n=N * cfg.block_out, k=K * cfg.block_in, vthreads=vthreads,
                           tiling=GemmTiling(3, 3, 5, vthreads))
    res = run(prog)
    np.testing.assert_array_equal(unpack_outputs(cfg, res.outputs["C"]),
                                  low_byte(gemm_ref(inp["A"], inp["B"])))
    assert res.counters.gemm_macs == M * N * K * cfg.peak_macs_per_cycle


def test_blocked_gemm_epilogue(cfg):
    epilogue = [(AluOp.SHR_RND, 9), (AluOp.CLIP, 127)]
    prog, inp = build_gemm(cfg, np.random.default_rng(30), vthreads=2, epilogue=epilogue)
    out = unpack_outputs(cfg, run(prog).outputs["C"])
    want = gemm_ref(inp["A"], inp["B"])
    for op, imm in epilogue:
        want = alu_ref(op, want, imm)
    np.testing.assert_array_equal(out, want.astype(np.int8))
    assert np.any(np.abs(want) == 127) and np.any(np.abs(want) < 127)


def test_pack_roundtrip():
    cfg = PRESETS["tiny"].replace(batch=2)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (6, 8), dtype=np.int8)
    b = rng.integers(-128, 128, (8, 12), dtype=np.int8)
    pa, pb = pack_activations(cfg, a), pack_weights(cfg, b)
    assert pa.shape == (3, 2, 2, 4) and pb.shape == (3, 2, 4, 4)
    np.testing.assert_array_equal(pa[1, 1], a[2:4, 4:8])
    np.testing.assert_array_equal(pb[2, 1], b[4:8, 8:12].T)
    c = np.einsum("xkbi,nkoi->xnbo", pa.astype(np.int64), pb.astype(np.int64))
    np.testing.assert_array_equal(unpack_outputs(cfg, c), a.astype(np.int64) @ b)


@pytest.mark.parametrize(("dims", "name"), [((3, 8, 8), "m"), ((4, 6, 8), "n"),
                                            ((4, 8, 5), "k")])
def test_blocked_gemm_rejects_ragged_dims(dims, name):
    cfg = PRESETS["tiny"].replace(batch=2)
    with pytest.raises(ValueError, match=rf"^{name} = "):
        build_blocked_gemm(cfg, *dims)


def _happens_before(prog: Program) -> tuple[dict[int, set[int]], list[int]]:
    """Successor sets of the instruction order implied by engines and FIFO tokens."""
    succ: dict[int, set[int]] = defaultdict(set)
    last_on_engine: dict[object, int] = {}
    queues = {q: deque() for q in ("l2c", "c2l", "c2s", "s2c")}
    pops_of: dict[str, list[int]] = {q: [] for q in queues}
    pushes_of: dict[str, list[int]] = {q: [] for q in queues}
    for i, insn in enumerate(prog.insns):
        if insn.engine in last_on_engine:
            succ[last_on_engine[insn.engine]].add(i)
        last_on_engine[insn.engine] = i
        eng = insn.engine.name.lower()
        prev_q, next_q = {"load": (None, "l2c"), "compute": ("l2c", "c2s"),
                          "store": ("c2s", None)}[eng]
        back_prev = {"compute": "c2l", "store": "s2c"}.get(eng)
        back_next = {"load": "c2l", "compute": "s2c"}.get(eng)
        if insn.pop_prev:
            pops_of[prev_q].append(i)
        if insn.pop_next:
            pops_of[back_next].append(i)
        if insn.push_prev:
            pushes_of[back_prev].append(i)
        if insn.push_next:
            pushes_of[next_q].append(i)
    for q in queues:
        assert len(pushes_of[q]) == len(pops_of[q]), f"unbalanced {q}"
        for src, dst in zip(pushes_of[q], pops_of[q], strict=True):
            succ[src].add(dst)
    return succ, [i for i, insn in enumerate(prog.insns)
                  if isinstance(insn, Load) and insn.buffer is Buffer.INP]


def _reaches(succ: dict[int, set[int]], src: int, dst: int) -> bool:
    todo, seen = [src], {src}
    while todo:
        node = todo.pop()
        if node == dst:
            return True
        for nxt in succ[node] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return False


@pytest.mark.parametrize("vthreads", [1, 2, 4])
def test_vthreads_overlap_loads_with_compute(vthreads):
    """With v threads the inp load of step s+j (j < v) is not ordered after step s's GEMM."""
    cfg = PRESETS["small"]
    prog, _ = build_gemm(cfg, np.random.default_rng(0), vthreads=vthreads)
    succ, inp_loads = _happens_before(prog)
    gemms = [i for i, insn in enumerate(prog.insns)
             if isinstance(insn, Gemm) and not insn.reset]
    assert len(gemms) == len(inp_loads) >= 2 * vthreads
    for s in range(len(gemms) - vthreads):
        for j in range(1, vthreads + 1):
            blocked = _reaches(succ, gemms[s], inp_loads[s + j])
            assert blocked == (j == vthreads), (s, j)


# ----------------------------------------------------------------------- ALU
ALU_OPS = list(BINARY_ALU_OPS)  # REQUANT: test_fsim_requant_fused.py


@pytest.mark.parametrize("use_imm", [True, False], ids=["imm", "vec"])
@pytest.mark.parametrize("op", ALU_OPS, ids=[op.name for op in ALU_OPS])
def test_alu(cfg, op, use_imm):
    prog, inp = build_alu(cfg, np.random.default_rng(100 + op), op, use_imm=use_imm)
    out = run(prog).outputs["out"]
    b = int(inp["imm"]) if use_imm else inp["Y"]
    if use_imm and op is AluOp.MULHI:
        b <<= 16  # MULHI's immediate is the high half of its multiplier
    want = alu_ref(op, inp["X"], b)
    np.testing.assert_array_equal(from_lanes(out), want)
    np.testing.assert_array_equal(out[0], low_byte(want))


@pytest.mark.parametrize("op", [AluOp.SHR, AluOp.SHR_RND, AluOp.SHL])
@pytest.mark.parametrize("imm", [0, 1, 7, 31])
def test_alu_shift_edges(op, imm):
    cfg = PRESETS["tiny"]
    prog, inp = build_alu(cfg, np.random.default_rng(7), op, use_imm=True, imm=imm)
    np.testing.assert_array_equal(from_lanes(run(prog).outputs["out"]),
                                  alu_ref(op, inp["X"], imm))


@pytest.mark.parametrize("imm", [-32768, -1, 0, 127, 32767])
@pytest.mark.parametrize("op", [AluOp.ADD, AluOp.MUL, AluOp.CLIP])
def test_alu_imm_sign_extension(op, imm):
    cfg = PRESETS["small"]
    prog, inp = build_alu(cfg, np.random.default_rng(8), op, use_imm=True, imm=imm)
    np.testing.assert_array_equal(from_lanes(run(prog).outputs["out"]),
                                  alu_ref(op, inp["X"], imm))


def test_shr_rnd_ties_away_from_zero():
    # gemmlowp RoundingDivideByPOT on a few hand-checked values.
    a = np.array([5, -5, 6, -6, 7, -7, 4, -4, 0, -1, 1, -(1 << 31), (1 << 31) - 1])
    assert list(alu_ref(AluOp.SHR_RND, a, 1)) == [3, -3, 3, -3, 4, -4, 2, -2, 0, -1, 1,
                                                  -(1 << 30), 1 << 30]


def test_relu(cfg):
    prog, inp = build_relu(cfg, np.random.default_rng(5))
    out = from_lanes(run(prog).outputs["out"])
    np.testing.assert_array_equal(out, np.maximum(inp["X"].astype(np.int64), 0))


def test_requant(cfg):
    prog, inp = build_requant(cfg, np.random.default_rng(6))
    out = run(prog).outputs["out"]
    x, mul, shift = inp["X"].astype(np.int64), int(inp["mul"]), int(inp["shift"])
    prod = x * mul
    assert np.all(np.abs(prod) < (1 << 31))  # no wrap: a plain rounding reference holds
    # Round half away from zero, then saturate to int8.
    q = np.sign(prod) * ((np.abs(prod) + (1 << (shift - 1))) >> shift)
    want = np.clip(q, -128, 127)
    np.testing.assert_array_equal(from_lanes(out), want)
    np.testing.assert_array_equal(out[0], want.astype(np.int8))


@pytest.mark.parametrize("op", [AluOp.MAX, AluOp.MIN, AluOp.ADD])
@pytest.mark.parametrize("apart", [1, 2, 3])
def test_alu_reduction(cfg, op, apart):
    prog, inp = build_alu_reduction(cfg, np.random.default_rng(9), op, groups=6, apart=apart)
    out = run(prog).outputs["out"]
    x = inp["X"].astype(np.int64)
    want = x[:, 0]
    for w in range(1, x.shape[1]):
        want = alu_ref(op, want, x[:, w])
    np.testing.assert_array_equal(out, low_byte(want))
