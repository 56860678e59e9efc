"""REQUANT (bias, per-channel multiplier, one rounding shift, zero point and clamp in
one ALU pass) in the functional simulator, against Python integers."""

from __future__ import annotations

import numpy as np
import pytest
from support.requant_cases import INT32_MAX, INT32_MIN, random_records, requant_reference

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    IllegalInstruction,
    Load,
    Program,
    ProgramBuilder,
    ProgramError,
    Segment,
    Store,
    Uop,
    UsageError,
)
from tensorfab.isa.insn import check_insn
from tensorfab.isa.requant_record import pack_requant_records, unpack_requant_records
from tensorfab.sim import FunctionalSimulator


def _program(cfg, x: np.ndarray, rec: np.ndarray, which: list[int], **loops: int
             ) -> Program:
    """acc[0:k] = x; REQUANT entry k with the record entry which[k]; store."""
    k = x.shape[0]
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", x.shape, x))
    bld.add_segment(Segment("R", "int8", rec.shape, rec))
    bld.add_segment(Segment("out", "int8", (k, cfg.batch, cfg.block_out), output=True))
    begin, end = bld.add_uops([Uop(acc=i, src=0, wgt=w) for i, w in enumerate(which)])
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, x=rec.shape[0]), segment="R")
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, x=k, push_next=True), segment="X")
    bld.emit(Alu(op=AluOp.REQUANT, uop_begin=begin, uop_end=end, pop_prev=True,
                 push_next=True, **loops))
    bld.emit(Store(sram=0, dram=0, x=k, pop_prev=True), segment="out")
    return bld.build()


def _unit_records(cfg, shift: int) -> np.ndarray:
    """One record entry: multiplier 1, no bias, ``shift``, zero point 0, int8 clamp."""
    return pack_requant_records(cfg, multiplier=np.ones(cfg.block_out), bias=0, shift=shift,
                                zero_point=0, lo=-128, hi=127)


def test_records_round_trip() -> None:
    cfg = PRESETS["default"]
    f = random_records(np.random.default_rng(0), 40)
    rec = pack_requant_records(cfg, **f)
    assert rec.shape == (3, cfg.block_out, cfg.block_in)
    back = unpack_requant_records(rec.reshape(-1, cfg.block_in))
    for name, v in f.items():
        np.testing.assert_array_equal(back[name][:40], v)
        assert not back[name][40:].any()


@pytest.mark.parametrize("preset", ["default", "large"])
def test_requant_matches_python_integers(preset: str) -> None:
    cfg = PRESETS[preset]
    rng = np.random.default_rng(1)
    blocks = 3
    f = random_records(rng, blocks * cfg.block_out)
    rec = pack_requant_records(cfg, **f)
    k = 24
    x = rng.integers(INT32_MIN, INT32_MAX, (k, cfg.batch, cfg.block_out), endpoint=True)
    x[0, 0, :4] = [INT32_MIN, INT32_MAX, 0, -1]
    x[1] = rng.integers(-(1 << 20), 1 << 20, (cfg.batch, cfg.block_out))
    x = x.astype(np.int32)
    which = [i % blocks for i in range(k)]
    out = FunctionalSimulator(cfg).run(_program(cfg, x, rec, which)).outputs["out"]
    for i in range(k):
        for b in range(cfg.batch):
            for o in range(cfg.block_out):
                c = which[i] * cfg.block_out + o
                want = requant_reference(int(x[i, b, o]), *(int(f[k][c]) for k in (
                    "multiplier", "bias", "shift", "zero_point", "lo", "hi")))
                assert int(out[i, b, o]) == want, (i, b, o)


def test_ties_round_away_from_zero() -> None:
    cfg = PRESETS["default"]
    rec = _unit_records(cfg, shift=1)
    x = np.zeros((1, cfg.batch, cfg.block_out), dtype=np.int32)
    x[0, 0, :6] = [1, -1, 3, -3, 2, -2]
    out = FunctionalSimulator(cfg).run(_program(cfg, x, rec, [0])).outputs["out"]
    assert out[0, 0, :6].tolist() == [1, -1, 2, -2, 1, -1]


def test_shift_past_62_is_shift_range_naming_the_record() -> None:
    cfg = PRESETS["default"]
    rec = _unit_records(cfg, shift=3)
    rec[0, 5, 8] = 63  # channel 5's shift byte
    x = np.ones((2, cfg.batch, cfg.block_out), dtype=np.int32)
    with pytest.raises(ProgramError) as exc:
        FunctionalSimulator(cfg).run(_program(cfg, x, rec, [0, 0]))
    assert exc.value.code is ErrorCode.SHIFT_RANGE
    assert exc.value.index == 3 and exc.value.field == "wgt"
    assert "63" in str(exc.value) and "row 5" in str(exc.value)


@pytest.mark.parametrize("executor", ["fsim", "rtl"])
def test_record_entry_past_the_weight_buffer_is_sram_range(executor: str) -> None:
    """Both executors stop a REQUANT whose record index leaves the weight buffer with
    SRAM_RANGE at the same instruction (fsim also names the factor)."""
    from tensorfab.sim import get_device

    cfg = PRESETS["default"]
    rec = _unit_records(cfg, shift=3)
    x = np.ones((2, cfg.batch, cfg.block_out), dtype=np.int32)
    prog = _program(cfg, x, rec, [0, 0], iter_out=2, src_factor_out=cfg.wgt_depth)
    with pytest.raises(ProgramError) as exc:
        get_device(executor).run(prog)
    assert exc.value.code is ErrorCode.SRAM_RANGE and exc.value.index == 3
    if executor == "fsim":
        assert exc.value.field == "src_factor_out"


def test_requant_is_illegal_where_a_weight_row_cannot_hold_a_record() -> None:
    with pytest.raises(IllegalInstruction, match="no REQUANT"):
        check_insn(Alu(op=AluOp.REQUANT), PRESETS["small"])
    with pytest.raises(IllegalInstruction, match="no immediate"):
        check_insn(Alu(op=AluOp.REQUANT, use_imm=True), PRESETS["default"])


def test_rtl_equals_fsim_and_reports_the_same_errors() -> None:
    """The core's REQUANT (weight-buffer records, loops over them) matches fsim, and a
    bad shift stops it with SHIFT_RANGE at the same instruction."""
    from tensorfab.sim.rtl import RtlSimulator

    cfg = PRESETS["default"]
    rng = np.random.default_rng(3)
    f = random_records(rng, 2 * cfg.block_out)
    rec = pack_requant_records(cfg, **f)
    x = rng.integers(INT32_MIN, INT32_MAX, (6, cfg.batch, cfg.block_out), endpoint=True)
    prog = _program(cfg, x.astype(np.int32), rec, [0, 1, 1], iter_out=2, dst_factor_out=3)
    want = FunctionalSimulator(cfg).run(prog).outputs["out"]
    have = RtlSimulator().run(prog).outputs["out"]
    np.testing.assert_array_equal(have, want)
    rec[0, 1, 3] |= -128  # bit 31 of channel 1's multiplier: ignored by both
    prog = _program(cfg, x.astype(np.int32), rec, [0, 1, 1], iter_out=2, dst_factor_out=3)
    np.testing.assert_array_equal(RtlSimulator().run(prog).outputs["out"], want)
    np.testing.assert_array_equal(FunctionalSimulator(cfg).run(prog).outputs["out"], want)
    rec[1, 2, 8] = 63
    prog = _program(cfg, x.astype(np.int32), rec, [0, 1, 1], iter_out=2, dst_factor_out=3)
    with pytest.raises(ProgramError) as exc:
        RtlSimulator().run(prog)
    assert exc.value.code is ErrorCode.SHIFT_RANGE and exc.value.index == 3


def test_packing_errors_name_the_field_and_channel() -> None:
    cfg = PRESETS["default"]
    fields = {"multiplier": [1 << 30, 1 << 30], "bias": 0, "shift": [3, 63],
              "zero_point": 0, "lo": -128, "hi": 127}
    with pytest.raises(UsageError, match=r"REQUANT shift of channel 1 is 63, outside 0\.\.62"):
        pack_requant_records(cfg, **fields)
    with pytest.raises(UsageError, match=r"multiplier of channel 0 is -1, outside "
                                         r"0\.\.2147483647"):
        pack_requant_records(cfg, **{**fields, "multiplier": -1, "shift": 3})
    with pytest.raises(UsageError, match="different channel counts: multiplier 2, bias 3"):
        pack_requant_records(cfg, **{**fields, "shift": 3, "bias": [0, 0, 0]})
    with pytest.raises(UsageError, match="need the fields"):
        pack_requant_records(cfg, multiplier=1)
    with pytest.raises(UsageError,
                       match="'small' has no REQUANT in its ALU: a weight row holds 8 bytes"):
        pack_requant_records(PRESETS["small"], **fields)
