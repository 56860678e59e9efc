"""cocotb testbench of :class:`tensorfab.hw.alu.VectorAlu` against a numpy reference.

The ALU is a three-cycle pipeline (``VectorAlu.LATENCY == 2``): operations are fed one
per cycle, back to back or with idle cycles between them (tests/hw/pipeline_driver.py),
and each ``result`` and ``shift_error`` is checked when ``out_valid`` brings it. MULHI
is checked against the gemmlowp transcription in tests/support, REQUANT against Python
integers with records packed here into the weight buffer's byte order.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from support.gemmlowp_reference import saturating_rounding_doubling_high_mul

from hw.pipeline_driver import drive_pipeline, reset_pipeline
from hw.vectors import pack, unpack
from tensorfab.isa import PRESETS, AluOp, HwConfig
from tensorfab.isa.formats import SEQUENTIAL_MULTIPLY_CYCLES, alu_requant_supported
from tensorfab.sim.testing.cocotb_runner import params_from_env

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def tb_config() -> HwConfig:
    """The preset of the build's parameters, with the sequential multiplier when they
    say ``sequential``."""
    params = params_from_env()
    cfg = PRESETS[params["preset"]]
    return cfg.replace(sequential_multiplier=True) if params.get("sequential") else cfg


def spacing(cfg: HwConfig) -> int:
    """Cycles between two operations: the sequential multiplier holds its operands
    over its cycles (every operation spaced so, as the issue spaces an instruction's
    multiplying micro-ops; a new instruction comes after the pipeline drains)."""
    return SEQUENTIAL_MULTIPLY_CYCLES if cfg.sequential_multiplier else 1


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
    elif op == AluOp.MULHI:
        r = saturating_rounding_doubling_high_mul(a, b)
    else:  # illegal codes, and REQUANT where the config has none
        r = np.zeros_like(a)
    return wrap32(r).astype(np.int32)


#: REQUANT record fields in row byte order: (name, bytes, signed), little-endian.
RECORD = [("multiplier", 4, True), ("bias", 4, True), ("shift", 1, False),
          ("zero_point", 1, True), ("lo", 1, True), ("hi", 1, True)]


def requant_reference(a: int, r: dict[str, int]) -> int:
    """docs/isa.md's REQUANT with Python integers."""
    t = (a + r["bias"] + (1 << 31)) % (1 << 32) - (1 << 31)
    p = t * (r["multiplier"] & 0x7FFFFFFF)  # the low 31 bits, unsigned
    n = r["shift"]
    q, rem = divmod(abs(p), 1 << n)
    if n and 2 * rem >= 1 << n:
        q += 1
    v = (q if p >= 0 else -q) + r["zero_point"]
    return min(max(v, r["lo"]), r["hi"])


def record_entry(cfg: HwConfig, records: list[dict[str, int]]) -> int:
    """The weight-buffer entry holding one record per output channel: row ``o`` byte
    ``k`` sits at entry byte ``k·block_out + o``, offset by 128 (rows too short for a
    record keep its first bytes)."""
    rows = np.zeros((cfg.block_out, max(cfg.block_in, 12)), dtype=np.int64)
    for o, r in enumerate(records):
        k = 0
        for name, size, _ in RECORD:
            v = r[name] & ((1 << (8 * size)) - 1)
            for _ in range(size):
                rows[o, k] = v & 0xFF
                v >>= 8
                k += 1
    entry = 0
    for o in range(cfg.block_out):
        for k in range(cfg.block_in):
            entry |= int(rows[o, k] ^ 0x80) << (8 * (k * cfg.block_out + o))
    return entry


def random_records(rng: random.Random, cfg: HwConfig, edges: bool) -> list[dict[str, int]]:
    """A record per channel; shifts 0..62 (and past 62 now and then)."""
    out = []
    for _ in range(cfg.block_out):
        lo = rng.randint(-128, 127)
        out.append({
            "multiplier": rng.choice([INT32_MIN, INT32_MAX, 0, 1, -1, 1 << 30])
            if edges else rng.randint(INT32_MIN, INT32_MAX),
            "bias": rng.choice([INT32_MIN, INT32_MAX, 0, -1]) if edges
            else rng.randint(INT32_MIN, INT32_MAX),
            "shift": rng.choice([0, 1, 30, 31, 32, 61, 62]) if edges else rng.randint(0, 62),
            "zero_point": rng.randint(-128, 127), "lo": lo,
            "hi": rng.choice([127, rng.randint(lo, 127)])})
    return out


def edge_vectors(rng: random.Random, lanes: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Edge cases: extreme values, shifts 0 and 31 and above, rounding ties."""
    specials = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX]
    shifts = [0, 1, 2, 30, 31, 32, 33, 63, -1, -32, INT32_MIN, INT32_MAX]
    out = []

    def vec(pool: list[int]) -> np.ndarray:
        return np.array([rng.choice(pool) for _ in range(lanes)], dtype=np.int32)

    for op in AluOp:
        if op is AluOp.REQUANT:
            continue  # requant_cases
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
    for _ in range(10):  # MULHI: exact ties of both signs (odd a times 2^30), negatives
        a = np.array([rng.choice([-1, 1]) * (2 * rng.randint(0, 1 << 20) + 1)
                      for _ in range(lanes)], dtype=np.int32)
        b = np.array([rng.choice([1 << 30, -(1 << 30)]) for _ in range(lanes)],
                     dtype=np.int32)
        out.append((int(AluOp.MULHI), a, b))
    for _ in range(6):  # MULHI: Q31 multipliers in [2^30, 2^31) on accumulator-like sums
        a = np.array([rng.randint(-(1 << 24), 1 << 24) for _ in range(lanes)], dtype=np.int32)
        b = np.array([rng.randint(1 << 30, INT32_MAX) for _ in range(lanes)], dtype=np.int32)
        out.append((int(AluOp.MULHI), a, b))
    out.append((int(AluOp.MULHI), np.full(lanes, INT32_MIN, np.int32),
                np.full(lanes, INT32_MIN, np.int32)))  # the one saturating case
    for op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL):  # shifts 0 and 31, negative ties
        for s in (0, 31):
            a = vec(specials + [-(1 << 30), -3, 3, (1 << 30) + (1 << 29)])
            out.append((int(op), a, np.full(lanes, s, np.int32)))
    for op in range(len(AluOp), 16):  # illegal codes give zeros
        out.append((op, vec(specials), vec(specials)))
    return out


def random_vectors(rng: np.random.Generator, lanes: int, count: int
                   ) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Random operations with full-range and small operands (shift amounts mostly
    legal, sometimes not: ``shift_error``)."""
    out = []
    for i in range(count):
        op = int(rng.integers(0, AluOp.REQUANT))
        if i % 2:
            a = rng.integers(INT32_MIN, INT32_MAX, lanes, endpoint=True, dtype=np.int64)
            b = rng.integers(INT32_MIN, INT32_MAX, lanes, endpoint=True, dtype=np.int64)
        else:
            a = rng.integers(-1000, 1000, lanes, dtype=np.int64)
            b = rng.integers(-40, 40, lanes, dtype=np.int64)
        if op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL) and rng.random() < 0.8:
            b = rng.integers(0, 32, lanes, dtype=np.int64)  # legal: the result counts
        out.append((op, a.astype(np.int32), b.astype(np.int32)))
    return out


def shift_error_reference(op: int, b: np.ndarray) -> bool:
    """docs/isa.md: a vector shift amount outside 0..31 is a SHIFT_RANGE error."""
    shifts = (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL)
    return op in shifts and bool(((b < 0) | (b > 31)).any())


async def run_requant(dut, cfg: HwConfig, cases: list[tuple[np.ndarray, list[dict[str, int]]]],
                      gaps: random.Random | None = None) -> None:
    """REQUANT of each ``(a, records)``, one per cycle; where the config has no REQUANT
    it gives zeros like an illegal code."""
    lanes = cfg.batch * cfg.block_out
    outputs = await drive_pipeline(dut, cases, lambda case: apply_requant(dut, cfg, *case),
                                   lambda: capture(dut, lanes), gaps=gaps,
                                   spacing=spacing(cfg))
    for n, ((a, records), (have, error)) in enumerate(zip(cases, outputs, strict=True)):
        want_error, want = requant_expected(cfg, a, records)
        assert error == want_error, f"requant #{n}: shift_error"
        if want_error:
            continue
        if have.tolist() != want:
            bad = [k for k in range(lanes) if have[k] != want[k]]
            raise AssertionError(f"requant #{n}: lanes {bad} a={a[bad].tolist()} "
                                 f"records={[records[k % cfg.block_out] for k in bad]} "
                                 f"want={[want[k] for k in bad]} got={have[bad].tolist()}")


def apply_requant(dut, cfg: HwConfig, a: np.ndarray, records: list[dict[str, int]]) -> None:
    """Set the inputs to REQUANT ``a`` with ``records``."""
    dut.op.value = int(AluOp.REQUANT)
    dut.a.value = pack(a, "<i4")
    dut.b.value = 0
    dut.rec.value = record_entry(cfg, records)


def apply_op(dut, op: int, a: np.ndarray, b: np.ndarray) -> None:
    """Set the inputs to ``op`` on ``a`` and ``b``."""
    dut.op.value = op
    dut.a.value = pack(a, "<i4")
    dut.b.value = pack(b, "<i4")


def requant_expected(cfg: HwConfig, a: np.ndarray, records: list[dict[str, int]]
                     ) -> tuple[bool, list[int]]:
    """``shift_error`` and the lanes' results of REQUANT, from docs/isa.md (zeros and no
    error where the config has no REQUANT, like an illegal code)."""
    supported = alu_requant_supported(cfg)
    want_error = supported and any(r["shift"] > 62 for r in records)
    want = [requant_reference(int(a[k]), records[k % cfg.block_out]) if supported else 0
            for k in range(cfg.batch * cfg.block_out)]
    return want_error, want


def capture(dut, lanes: int) -> tuple[np.ndarray, bool]:
    """The result vector and ``shift_error`` of the cycle."""
    return (unpack(dut.result.value.to_unsigned(), "<i4", lanes),
            bool(int(dut.shift_error.value)))


def requant_cases(cfg: HwConfig, rng: random.Random, count: int
                  ) -> list[tuple[np.ndarray, list[dict[str, int]]]]:
    """Edge and random accumulators with edge and random records."""
    lanes = cfg.batch * cfg.block_out
    specials = [INT32_MIN, INT32_MIN + 1, -(1 << 30), -3, -1, 0, 1, 3, 1 << 30, INT32_MAX]
    out = []
    for i in range(count):
        edges = i % 2 == 0
        if i % 3 == 0:
            a = [rng.choice(specials) for _ in range(lanes)]
        elif i % 3 == 1:
            a = [rng.randint(INT32_MIN, INT32_MAX) for _ in range(lanes)]
        else:
            a = [rng.randint(-(1 << 20), 1 << 20) for _ in range(lanes)]
        records = random_records(rng, cfg, edges)
        if i % 7 == 3:  # ties: multiplier 1, bias 0, a = k·2^n ± 2^(n-1)
            for r in records:
                r.update(multiplier=1, bias=0, shift=rng.randint(1, 20))
            a = [rng.choice([-1, 1]) * (rng.randint(0, 100) * (1 << records[k % cfg.block_out]
                 ["shift"]) + (1 << (records[k % cfg.block_out]["shift"] - 1)))
                 for k in range(lanes)]
        if i % 11 == 5:
            records[rng.randrange(cfg.block_out)]["shift"] = rng.choice([63, 200, 255])
        out.append((np.array(a, dtype=np.int64).astype(np.int32), records))
    return out


async def run_stream(dut, ops: list[tuple[int, np.ndarray, np.ndarray]], cfg: HwConfig,
                     gaps: random.Random | None = None,
                     dropped: list[tuple[int, np.ndarray, np.ndarray]] | None = None) -> None:
    """Apply ``ops`` one per cycle (:func:`spacing` apart; with idle cycles between
    some of them when ``gaps`` is given) and check every result and ``shift_error``
    flag. With ``dropped``, each idle cycle's inputs are one of those, chosen at
    random, which ``in_valid`` does not take (with ``load_enable`` they load the first
    cycle's registers: the compute engine's dropped micro-ops)."""
    lanes = cfg.batch * cfg.block_out
    pick = random.Random(9)
    outputs = await drive_pipeline(
        dut, ops, lambda item: apply_op(dut, *item), lambda: capture(dut, lanes), gaps=gaps,
        spacing=spacing(cfg),
        on_idle=None if dropped is None else lambda: apply_op(dut, *pick.choice(dropped)))
    for n, ((op, a, b), (have, error)) in enumerate(zip(ops, outputs, strict=True)):
        want_error = shift_error_reference(op, b)
        if error != want_error:
            raise AssertionError(f"op #{n} {op}: shift_error {int(error)}, "
                                 f"want {int(want_error)} (b={b.tolist()})")
        if want_error:
            continue  # the engine discards the result
        want = alu_reference(op, a, b)
        if not np.array_equal(want, have):
            bad = np.nonzero(want != have)[0]
            raise AssertionError(
                f"op #{n} {AluOp(op).name if op < len(AluOp) else op}: lanes {bad.tolist()} "
                f"a={a[bad].tolist()} b={b[bad].tolist()} want={want[bad].tolist()} "
                f"got={have[bad].tolist()}")


async def reset(dut) -> None:
    """Idle inputs, the clock started and the registers reset; with ``load_enable``,
    ``in_load`` high from then on (every cycle loads: it holds with ``in_valid``)."""
    await reset_pipeline(dut, (dut.op, dut.a, dut.b, dut.rec))
    if params_from_env().get("load_enable"):
        dut.in_load.value = 1


@cocotb.test()
async def alu_edge_cases(dut) -> None:
    """Extreme operands, every shift amount class, rounding ties, illegal codes."""
    cfg = tb_config()
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    await run_stream(dut, edge_vectors(random.Random(1), lanes), cfg)


@cocotb.test()
async def alu_random_back_to_back(dut) -> None:
    """Random operations, one after another."""
    cfg = tb_config()
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    await run_stream(dut, random_vectors(np.random.default_rng(2), lanes, 300), cfg)


@cocotb.test()
async def alu_random_with_gaps(dut) -> None:
    """Random operations with idle inputs between them."""
    cfg = tb_config()
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    await run_stream(dut, random_vectors(np.random.default_rng(3), lanes, 100), cfg,
                     gaps=random.Random(4))


@cocotb.test(skip=not params_from_env().get("load_enable"))
async def alu_loads_between_operations(dut) -> None:
    """``load_enable``: dropped operations loaded between random ones change no result."""
    cfg = tb_config()
    lanes = cfg.batch * cfg.block_out
    await reset(dut)  # (in_load high from then on)
    rng = np.random.default_rng(8)
    await run_stream(dut, random_vectors(rng, lanes, 150), cfg, gaps=random.Random(7),
                     dropped=random_vectors(rng, lanes, 200))


@cocotb.test()
async def alu_requant(dut) -> None:
    """REQUANT: edge and random accumulators and records, ties, shifts past 62; back to
    back, then with idle cycles."""
    cfg = tb_config()
    await reset(dut)
    await run_requant(dut, cfg, requant_cases(cfg, random.Random(5), 120))
    await run_requant(dut, cfg, requant_cases(cfg, random.Random(6), 40), gaps=random.Random(7))


@cocotb.test()
async def alu_requant_between_others(dut) -> None:
    """REQUANT interleaved with the other operations, one per cycle: each result is the
    one of its own operation (the two cycles' registers do not mix operations)."""
    cfg = tb_config()
    lanes = cfg.batch * cfg.block_out
    await reset(dut)
    rng = random.Random(8)
    others = random_vectors(np.random.default_rng(9), lanes, 60)
    requants = requant_cases(cfg, rng, 60)
    items = [("op", o) if rng.random() < 0.5 else ("rq", r)
             for o, r in zip(others, requants, strict=True)]

    def apply(item: tuple[str, tuple]) -> None:
        kind, case = item
        if kind == "op":
            apply_op(dut, *case)
        else:
            apply_requant(dut, cfg, *case)

    outputs = await drive_pipeline(dut, items, apply, lambda: capture(dut, lanes),
                                   spacing=spacing(cfg))
    for n, ((kind, case), (have, error)) in enumerate(zip(items, outputs, strict=True)):
        if kind == "op":
            op, a, b = case
            want_error = shift_error_reference(op, b)
            want = alu_reference(op, a, b).tolist()
        else:
            want_error, want = requant_expected(cfg, *case)
        assert error == want_error, f"item #{n} ({kind}): shift_error"
        if not want_error:
            assert have.tolist() == want, f"item #{n} ({kind}): {have.tolist()} != {want}"
