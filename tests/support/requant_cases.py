"""Quantized test cases shared by the requantization tests (tests/compiler, the REQUANT
tests of tests/sim and tests/hw): random int8 operands with per-channel scales, random
REQUANT records, the float, one-rounding and per-lane Python-integer references they
are judged by, and where a compiled program requantizes."""

from __future__ import annotations

import numpy as np

from tensorfab.isa import Alu, AluOp, Program, Store
from tensorfab.isa.formats import REQUANT_RECORD_WORDS

from .gemmlowp_reference import quantize_multiplier


def quantized_case(rng: np.random.Generator, x_shape: tuple[int, ...],
                   w_shape: tuple[int, ...], reduction: int):
    """Asymmetric int8 activations (zero point zx), symmetric per-channel int8 weights,
    int32 bias, per-channel real scales mapping about ±4σ of the sums to int8."""
    zx = int(rng.integers(-128, -60))
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    w_sigma = rng.uniform(5, 60, w_shape[0]).reshape(-1, *([1] * (len(w_shape) - 1)))
    w = np.clip(np.round(rng.normal(0, 1, w_shape) * w_sigma), -127, 127).astype(np.int8)
    sigma = np.sqrt(reduction) * 74 * w_sigma.reshape(-1)
    bias = np.round(rng.normal(0, 1, w_shape[0]) * sigma / 4).astype(np.int32)
    scales = 127 / (4 * sigma) * rng.uniform(0.5, 2, w_shape[0])
    zy = int(rng.integers(-20, 20))
    return x, w, bias, zx, zy, scales


def float_conv(acc, scales, zy, relu):
    """The float reference: round(acc · scale) in float64, + zy, clamp."""
    y = np.floor(acc * scales.reshape(1, -1, 1, 1) + 0.5) + zy
    return np.clip(y, zy if relu else -128, 127).astype(np.int64)


def single_rounding(acc: np.ndarray, scales: np.ndarray, zy: int, lo: int = -128,
                    hi: int = 127, axis: int = 1) -> np.ndarray:
    """clamp(round_half_away(acc · M · 2^(e - 31)) + zy) with TFLite's (M, e) per channel,
    in Python integers (one rounding of the exact product)."""
    q = [quantize_multiplier(float(s)) for s in scales]
    acc = np.moveaxis(np.asarray(acc, dtype=object), axis, -1)
    out = np.empty(acc.shape, dtype=np.int64)
    for idx in np.ndindex(acc.shape):
        m, e = q[idx[-1]]
        p, n = int(acc[idx]) * m, 31 - e
        r, rem = divmod(abs(p), 1 << n)
        r += 2 * rem >= 1 << n
        out[idx] = min(max((r if p >= 0 else -r) + zy, lo), hi)
    return np.moveaxis(out, -1, axis)


def assert_requant_stage(program: Program, stage: str) -> None:
    """Where ``program`` (a one-pass conv2d / dense program of :func:`.lower.lower`)
    requantizes: ``"store"``, only requantizing STOREs and no ALU REQUANT, each STORE
    writing one block of output channels of ``out`` and reading that block's records
    (``rec`` = the records' first entry + 3 × the block, groups' blocks in order);
    ``"alu"``, ALU REQUANTs and plain STOREs."""
    insns = program.insns
    requants = [i for i in insns if isinstance(i, Alu) and i.op is AluOp.REQUANT]
    stores = [i for i in insns if isinstance(i, Store)]
    assert stores
    if stage == "alu":
        assert requants and not any(s.requant for s in stores)
        return
    assert not requants and all(s.requant for s in stores)
    cfg = program.config
    records = program.segment("records")
    assert records.dtype == "int32" and records.shape[1:] == (cfg.batch, cfg.block_out)
    base = cfg.acc_depth - records.shape[0]
    out = program.segment("out")  # (G·N/batch, O/block_out, OH, OW, ...)
    pixels = out.shape[2] * out.shape[3]
    ob = out.shape[1]
    images = out.shape[0] // (records.shape[0] // REQUANT_RECORD_WORDS // ob)  # a group's
    out_base = program.layout()["out"].offset // (cfg.batch * cfg.block_out)  # int8 entries
    for s in stores:
        entries = [s.dram - out_base + r * s.stride + c for r in range(s.y) for c in range(s.x)]
        # group g's channel block o has records g·ob + o
        blocks = {e // (ob * pixels) // images * ob + e // pixels % ob for e in entries}
        assert len(blocks) == 1, (s, blocks)
        assert s.rec == base + REQUANT_RECORD_WORDS * blocks.pop(), s


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def requant_reference(a: int, m: int, b: int, n: int, zp: int, lo: int, hi: int) -> int:
    """REQUANT of one accumulator as docs/isa.md writes it, with Python's unbounded
    integers: ``clamp(RDBPOT((a + b) · (m & 0x7fffffff), n) + zp, lo, hi)``."""
    t = (a + b + (1 << 31)) % (1 << 32) - (1 << 31)
    p = t * (m & 0x7FFFFFFF)
    q, r = divmod(abs(p), 1 << n)  # round |p| / 2^n half away from zero
    if 2 * r >= (1 << n) and n > 0:
        q += 1
    v = (q if p >= 0 else -q) + zp
    return min(max(v, lo), hi)


def random_records(rng: np.random.Generator, channels: int) -> dict[str, np.ndarray]:
    """Random legal REQUANT record fields of ``channels`` channels, the edge
    multipliers and shifts among them (as many as there are channels)."""
    n = rng.integers(0, 63, channels)
    n[:4] = [0, 1, 31, 62][:channels]
    m = rng.integers(0, INT32_MAX, channels, endpoint=True)
    m[:3] = [INT32_MAX, 1 << 30, 0][:channels]
    lo = rng.integers(-128, 128, channels)
    hi = np.maximum(lo, rng.integers(-128, 128, channels))
    hi[:4], lo[:4] = 127, -128
    return {"multiplier": m, "bias": rng.integers(INT32_MIN, INT32_MAX, channels, endpoint=True),
            "shift": n, "zero_point": rng.integers(-128, 128, channels), "lo": lo, "hi": hi}
