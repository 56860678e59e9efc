"""MULHI and the per-channel rounding shift in the functional simulator, against the
gemmlowp / TFLite reference written in tests/support/gemmlowp_reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from support.gemmlowp_reference import (
    INT32_MAX,
    INT32_MIN,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Load,
    Program,
    ProgramError,
    Segment,
    Store,
    Uop,
    uop_format,
)
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.fsim_alu import alu_apply

EDGES = [INT32_MIN, INT32_MIN + 1, -(1 << 30), -2, -1, 0, 1, 2, 1 << 30, INT32_MAX - 1,
         INT32_MAX]


def test_reference_on_hand_checked_values() -> None:
    # the single overflow case saturates
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX
    # x * 0.5 in Q31: 2^30; ties round toward +inf (nudge and truncation)
    assert saturating_rounding_doubling_high_mul(3, 1 << 30) == 2  # 1.5 -> 2
    assert saturating_rounding_doubling_high_mul(-3, 1 << 30) == -1  # -1.5 -> -1
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MAX) == INT32_MIN + 1
    assert rounding_divide_by_pot(-5, 1) == -3 and rounding_divide_by_pot(5, 1) == 3
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.75 / 8) == (3 << 29, -3)
    m, s = quantize_multiplier(1 / 3)
    assert m == 1431655765 and s == -1
    assert multiply_by_quantized_multiplier(np.array([300]), m, s)[0] == 100


def test_mulhi_edges_and_random() -> None:
    a, b = np.meshgrid(np.array(EDGES), np.array(EDGES))
    np.testing.assert_array_equal(alu_apply(AluOp.MULHI, a, b),
                                  saturating_rounding_doubling_high_mul(a, b))
    rng = np.random.default_rng(0)
    for lo in (INT32_MIN, -(1 << 16)):
        a = rng.integers(lo, -lo, size=20000, dtype=np.int64)
        b = rng.integers(INT32_MIN, INT32_MAX, size=20000, endpoint=True, dtype=np.int64)
        np.testing.assert_array_equal(alu_apply(AluOp.MULHI, a, b),
                                      saturating_rounding_doubling_high_mul(a, b))


def test_shr_rnd_is_rounding_divide_by_pot() -> None:
    rng = np.random.default_rng(1)
    s = rng.integers(0, 32, size=20000)
    x = rng.integers(INT32_MIN, INT32_MAX, size=20000, endpoint=True)
    ties = (rng.integers(-300, 300, size=20000) << s) + np.where(s > 0, 1 << np.maximum(s - 1, 0),
                                                                  0)
    x[::2] = ((ties[::2] + (1 << 31)) % (1 << 32)) - (1 << 31)
    np.testing.assert_array_equal(alu_apply(AluOp.SHR_RND, x, s), rounding_divide_by_pot(x, s))


def _vector_program(cfg, x: np.ndarray, m: np.ndarray, s: np.ndarray) -> Program:
    """acc[0:n] = X; MULHI by vector M (entry n), SHR_RND by vector S (entry n+1)."""
    n = x.shape[0]
    e = (cfg.batch, cfg.block_out)
    segs = [Segment("X", "int32", (n, *e), x), Segment("M", "int32", (1, *e), m),
            Segment("S", "int32", (1, *e), s), Segment("out", "int8", (n, *e), output=True)]
    uops = [Uop(acc=0, src=n), Uop(acc=0, src=n + 1)]

    def make(at):
        ab = cfg.acc_entry_bytes
        return [Load(buffer=Buffer.UOP, sram=0, dram=at("uops", uop_format(cfg).bytes), x=2),
                Load(buffer=Buffer.ACC, sram=0, dram=at("X", ab), x=n),
                Load(buffer=Buffer.ACC, sram=n, dram=at("M", ab), x=1),
                Load(buffer=Buffer.ACC, sram=n + 1, dram=at("S", ab), x=1, push_next=True),
                Alu(op=AluOp.MULHI, uop_begin=0, uop_end=1, iter_in=n, dst_factor_in=1,
                    pop_prev=True),
                Alu(op=AluOp.SHR_RND, uop_begin=1, uop_end=2, iter_in=n, dst_factor_in=1),
                Alu(op=AluOp.CLIP, use_imm=True, imm=127, uop_begin=0, uop_end=1, iter_in=n,
                    dst_factor_in=1, push_next=True),
                Store(sram=0, dram=at("out", cfg.out_entry_bytes), x=n, pop_prev=True),
                Finish()]
    prog = Program(cfg, make(lambda name, eb: 0), uops, segs)
    lay = prog.layout()
    prog.insns = make(lambda name, eb: lay[name].offset // eb)
    prog.validate()
    return prog


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_per_channel_requant_program(preset: str) -> None:
    cfg = PRESETS[preset]
    rng = np.random.default_rng(2)
    e = (cfg.batch, cfg.block_out)
    x = rng.integers(-(1 << 24), 1 << 24, size=(16, *e)).astype(np.int32)
    scales = rng.uniform(1e-6, 0.9, size=e)
    q = [quantize_multiplier(float(v)) for v in scales.ravel()]
    m = np.array([mq for mq, _ in q], dtype=np.int32).reshape(1, *e)
    s = np.array([-sq for _, sq in q], dtype=np.int32).reshape(1, *e)
    out = FunctionalSimulator(cfg).run(_vector_program(cfg, x, m, s)).outputs["out"]
    want = np.clip(multiply_by_quantized_multiplier(x, m, -s), -128, 127)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("bad", [32, -1, INT32_MIN])
def test_vector_shift_out_of_range_is_shift_range(bad: int) -> None:
    cfg = PRESETS["tiny"]
    e = (cfg.batch, cfg.block_out)
    x = np.ones((4, *e), dtype=np.int32)
    s = np.full((1, *e), 3, dtype=np.int32)
    s.reshape(-1)[-1] = bad
    m = np.full((1, *e), 1 << 30, dtype=np.int32)
    with pytest.raises(ProgramError) as exc:
        FunctionalSimulator(cfg).run(_vector_program(cfg, x, m, s))
    assert exc.value.code is ErrorCode.SHIFT_RANGE
    assert exc.value.index == 5 and exc.value.field == "src"
    assert str(bad) in str(exc.value)


def test_shift_range_on_the_rtl_executor() -> None:
    """The RTL executor reports the same SHIFT_RANGE error, index and engine."""
    from tensorfab.sim.rtl import RtlSimulator

    cfg = PRESETS["tiny"]
    e = (cfg.batch, cfg.block_out)
    s = np.full((1, *e), 40, dtype=np.int32)
    prog = _vector_program(cfg, np.ones((4, *e), dtype=np.int32),
                           np.full((1, *e), 1 << 30, dtype=np.int32), s)
    with pytest.raises(ProgramError) as exc:
        RtlSimulator().run(prog)
    assert exc.value.code is ErrorCode.SHIFT_RANGE
    assert exc.value.index == 5
    assert "compute" in str(exc.value)
