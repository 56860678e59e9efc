"""cocotb testbench of :class:`tensorfab.hw.alu.VectorAlu` against a numpy reference."""

from __future__ import annotations

import random

import cocotb
import numpy as np

from hw.pipeline_driver import drive_pipeline, reset_pipeline
from hw.vectors import pack, unpack
from tensorfab.isa import PRESETS, AluOp
from tensorfab.sim.testing.cocotb_runner import params_from_env

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32."""
    return ((x.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def alu_reference(op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """docs/isa.md's ALU table, computed in int64 numpy."""
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    s = b & 31
    if op == AluOp.ADD:
        r = a + b
    elif op == AluOp.MUL:
        r = a * b
    elif op == AluOp.MIN:
        r = np.minimum(a, b)
    elif op == AluOp.MAX:
        r = np.maximum(a, b)
    elif op == AluOp.SHR:
        r = a >> s
    elif op == AluOp.SHR_RND:
        mask = (np.int64(1) << s) - 1
        rem = a & mask
        thr = (mask >> 1) + (a < 0)
        r = (a >> s) + (rem > thr)
    elif op == AluOp.SHL:
        r = a << s
    elif op == AluOp.CLIP:
        r = np.minimum(np.maximum(a, wrap32(-b - 1)), b)
    elif op == AluOp.MOV:
        r = b
    else:
        r = np.zeros_like(a)
    return wrap32(r).astype(np.int32)


def edge_vectors(rng: random.Random, lanes: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Edge cases: extreme values, shifts 0 and 31 and above, rounding ties."""
    specials = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX]
    shifts = [0, 1, 2, 30, 31, 32, 33, 63, -1, -32, INT32_MIN, INT32_MAX]
    out = []

    def vec(pool: list[int]) -> np.ndarray:
        return np.array([rng.choice(pool) for _ in range(lanes)], dtype=np.int32)

    for op in AluOp:
        for _ in range(6):
            out.append((int(op), vec(specials), vec(specials)))
    for op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL):
        for _ in range(10):
            out.append((int(op), vec(specials), vec(shifts)))
        for _ in range(10):  # ties and near-ties: a = k * 2^s + 2^(s-1) + {-1, 0, 1}
            s = np.array([rng.randint(1, 31) for _ in range(lanes)], dtype=np.int64)
            k = np.array([rng.randint(-(1 << 8), 1 << 8) for _ in range(lanes)], dtype=np.int64)
            d = np.array([rng.choice([-1, 0, 0, 1]) for _ in range(lanes)], dtype=np.int64)
            a = wrap32((k << s) + (np.int64(1) << (s - 1)) + d).astype(np.int32)
            out.append((int(op), a, s.astype(np.int32)))
    for _ in range(10):  # CLIP with saturation bounds 2^(n-1) - 1 and odd b
        b = np.array([rng.choice([0, 1, 127, 32767, INT32_MAX, -1, INT32_MIN, -5])
                      for _ in range(lanes)], dtype=np.int32)
        out.append((int(AluOp.CLIP), vec(specials + [200, -200, 40000]), b))
    for op in range(len(AluOp), 16):  # illegal codes give zeros
        out.append((op, vec(specials), vec(specials)))
    return out


def random_vectors(rng: np.random.Generator, lanes: int, count: int
                   ) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Random operations with full-range and small operands."""
    out = []
    for i in range(count):
        op = int(rng.integers(0, len(AluOp)))
        if i % 2:
            a = rng.integers(INT32_MIN, INT32_MAX, lanes, endpoint=True, dtype=np.int64)
            b = rng.integers(INT32_MIN, INT32_MAX, lanes, endpoint=True, dtype=np.int64)
        else:
            a = rng.integers(-1000, 1000, lanes, dtype=np.int64)
            b = rng.integers(-40, 40, lanes, dtype=np.int64)
        out.append((op, a.astype(np.int32), b.astype(np.int32)))
    return out


async def run_stream(dut, ops: list[tuple[int, np.ndarray, np.ndarray]], lanes: int,
                     gaps: random.Random | None = None) -> None:
    """Drive ``ops`` back to back (or with random idle cycles) and check every result."""
    expected = [alu_reference(op, a, b) for op, a, b in ops]

    def apply(item: tuple[int, np.ndarray, np.ndarray]) -> None:
        op, a, b = item
        dut.op.value = op
        dut.a.value = pack(a, "<i4")
        dut.b.value = pack(b, "<i4")

    got = await drive_pipeline(dut, ops, apply,
                               lambda: unpack(dut.result.value.to_unsigned(), "<i4", lanes),
                               gaps=gaps, max_idle=20)
    for n, ((op, a, b), want, have) in enumerate(zip(ops, expected, got, strict=True)):
        if not np.array_equal(want, have):
            bad = np.nonzero(want != have)[0]
            raise AssertionError(
                f"op #{n} {AluOp(op).name if op < len(AluOp) else op}: lanes {bad.tolist()} "
                f"a={a[bad].tolist()} b={b[bad].tolist()} want={want[bad].tolist()} "
                f"got={have[bad].tolist()}")


async def reset(dut) -> None:
    """Start the clock and hold reset for two cycles."""
    await reset_pipeline(dut, (dut.op, dut.a, dut.b))


@cocotb.test()
async def alu_edge_cases(dut) -> None:
    """Extreme operands, every shift amount class, rounding ties, illegal codes."""
    cfg = PRESETS[params_from_env()["preset"]]
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    await run_stream(dut, edge_vectors(random.Random(1), lanes), lanes)


@cocotb.test()
async def alu_random_back_to_back(dut) -> None:
    """Random operations, one per cycle."""
    cfg = PRESETS[params_from_env()["preset"]]
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    await run_stream(dut, random_vectors(np.random.default_rng(2), lanes, 300), lanes)


@cocotb.test()
async def alu_random_with_gaps(dut) -> None:
    """Random operations with idle cycles between them."""
    cfg = PRESETS[params_from_env()["preset"]]
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    await run_stream(dut, random_vectors(np.random.default_rng(3), lanes, 100), lanes,
                     gaps=random.Random(4))
