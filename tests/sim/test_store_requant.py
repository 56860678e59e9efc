"""A requantizing STORE (``store ... rec=R``): REQUANT's arithmetic applied on the way
to DRAM with records held in accumulator entries, against Python integers."""

from __future__ import annotations

import numpy as np
import pytest
from support.isa_programs import store_requant_program
from support.requant_cases import INT32_MAX, INT32_MIN, random_records, requant_reference

from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.isa import (
    PRESETS,
    ErrorCode,
    HwConfig,
    IllegalInstruction,
    ProgramError,
    Store,
    check_insn,
    decode_insn,
    encode_insn,
)
from tensorfab.isa.asm import assemble
from tensorfab.isa.disasm import disassemble
from tensorfab.isa.requant_record import pack_requant_acc_records, pack_requant_records
from tensorfab.sim import FunctionalSimulator


def expected(cfg, x: np.ndarray, f: dict[str, np.ndarray]) -> np.ndarray:
    """Every lane of ``x`` through its channel's record, as Python integers."""
    want = np.zeros(x.shape, dtype=np.int64)
    for idx in np.ndindex(*x.shape):
        o = idx[-1]
        want[idx] = requant_reference(int(x[idx]), *(int(f[k][o]) for k in
                                             ("multiplier", "bias", "shift", "zero_point",
                                              "lo", "hi")))
    return want


def _config(name: str) -> HwConfig:
    """A preset, or the iCEBreaker's ``up5k``: no vector ALU, block_in 2, and the STOREs
    requantize."""
    return PRESETS[name] if name in PRESETS else board_config(name)


@pytest.mark.parametrize("preset", ["default", "large", "up5k"])
def test_requantizing_store_matches_python_integers(preset: str) -> None:
    cfg = _config(preset)
    rng = np.random.default_rng(7)
    f = random_records(rng, cfg.block_out)
    x = rng.integers(INT32_MIN, INT32_MAX, (12, cfg.batch, cfg.block_out), endpoint=True)
    x.reshape(-1)[:4] = [INT32_MIN, INT32_MAX, 0, -1]
    rec = pack_requant_acc_records(cfg, **f)
    out = FunctionalSimulator(cfg).run(store_requant_program(
        cfg, x.astype(np.int32), rec, 20, y=3, stride=5)).outputs["out"]
    want = expected(cfg, x, f).reshape(3, 4, cfg.batch, cfg.block_out)
    got = out.reshape(-1, cfg.batch, cfg.block_out)
    for r in range(3):
        np.testing.assert_array_equal(got[5 * r: 5 * r + 4], want[r])


def test_acc_records_hold_the_weight_rows_bytes() -> None:
    """Record word k of channel o is bytes 4k..4k+3 of the channel's weight-row record."""
    cfg = PRESETS["default"]
    f = random_records(np.random.default_rng(8), 2 * cfg.block_out)
    rows = pack_requant_records(cfg, **f).view(np.uint8)  # (2, block_out, block_in)
    acc = pack_requant_acc_records(cfg, **f)
    assert acc.shape == (6, cfg.batch, cfg.block_out)
    for blk in range(2):
        for k in range(3):
            word = rows[blk, :, 4 * k: 4 * k + 4].astype(np.uint32)
            le = word[:, 0] | word[:, 1] << 8 | word[:, 2] << 16 | word[:, 3] << 24
            np.testing.assert_array_equal(acc[3 * blk + k, 0].view(np.uint32), le)
            assert not acc[3 * blk + k, 1:].any()


def test_shift_past_62_is_shift_range_before_anything_is_written() -> None:
    cfg = PRESETS["default"]
    f = random_records(np.random.default_rng(9), cfg.block_out)
    rec = pack_requant_acc_records(cfg, **f)
    rec[2, 0, 5] = (rec[2, 0, 5] & ~0xFF) | 63
    prog = store_requant_program(cfg, np.ones((4, cfg.batch, cfg.block_out), np.int32), rec, 8)
    with pytest.raises(ProgramError) as exc:
        FunctionalSimulator(cfg).run(prog)
    assert exc.value.code is ErrorCode.SHIFT_RANGE and exc.value.field == "rec"
    assert exc.value.index == len(prog.insns) - 2
    assert "channel 5" in str(exc.value) and "acc[10]" in str(exc.value)


def test_rules_of_the_requant_fields() -> None:
    cfg = PRESETS["default"]
    with pytest.raises(IllegalInstruction, match="no REQUANT") as exc:
        check_insn(Store(requant=True), PRESETS["tiny"])
    assert exc.value.field == "requant"
    with pytest.raises(IllegalInstruction, match="past the acc depth") as exc:
        check_insn(Store(requant=True, rec=cfg.acc_depth - 2), cfg)
    assert exc.value.field == "rec"
    check_insn(Store(requant=True, rec=cfg.acc_depth - 3), cfg)
    with pytest.raises(IllegalInstruction, match="rec must be 0") as exc:
        check_insn(Store(rec=4), cfg)
    assert exc.value.field == "rec"
    with pytest.raises(IllegalInstruction, match="no REQUANT"):
        encode_insn(Store(requant=True), PRESETS["tiny"])
    insn = Store(sram=3, dram=9, y=2, x=5, stride=7, requant=True, rec=100, pop_prev=True)
    assert decode_insn(encode_insn(insn, cfg), cfg) == insn
    tiny = PRESETS["tiny"]
    assert decode_insn(encode_insn(Store(x=2), tiny), tiny) == Store(x=2)
    # without the vector ALU the STOREs requantize at a block_in of 2
    up5k = board_config("up5k")
    assert (up5k.block_in, up5k.vector_alu) == (2, False)
    assert decode_insn(encode_insn(insn, up5k), up5k) == insn
    assert tiny.replace(vector_alu=False).block_in == 4
    check_insn(Store(requant=True), tiny.replace(vector_alu=False))


def test_assembly_writes_the_records_as_rec() -> None:
    cfg = PRESETS["default"]
    f = random_records(np.random.default_rng(10), cfg.block_out)
    prog = store_requant_program(cfg, np.ones((4, cfg.batch, cfg.block_out), np.int32),
                         pack_requant_acc_records(cfg, **f), 8)
    text = disassemble(prog)
    line = next(t for t in text.splitlines() if t.startswith("store"))
    assert "rec=8" in line and "requant" not in line
    again = assemble(text)
    assert again.insns == prog.insns
    with pytest.raises(Exception, match="rec"):
        assemble(".config tiny\n.segment o int8 1,1,4 output\n"
                 "store sram=0 dram=o y=1 x=1 stride=1 rec=0\n")


@pytest.mark.parametrize("preset", ["default", "up5k"])
def test_rtl_equals_fsim_and_reports_the_same_errors(preset: str) -> None:
    """The core's requantizing STORE matches fsim (rows, a stride, every edge of the
    arithmetic), a bad shift stops it with SHIFT_RANGE at the same instruction, and a
    range error still wins over a bad shift, as fsim orders them."""
    from tensorfab.sim.rtl import RtlSimulator

    cfg = _config(preset)
    rng = np.random.default_rng(11)
    f = random_records(rng, cfg.block_out)
    x = rng.integers(INT32_MIN, INT32_MAX, (12, cfg.batch, cfg.block_out), endpoint=True)
    x.reshape(-1)[:4] = [INT32_MIN, INT32_MAX, 0, -1]
    rec = pack_requant_acc_records(cfg, **f)
    prog = store_requant_program(cfg, x.astype(np.int32), rec, 20, y=3, stride=5)
    rtl = RtlSimulator()
    np.testing.assert_array_equal(rtl.run(prog).outputs["out"],
                                  FunctionalSimulator(cfg).run(prog).outputs["out"])
    rec[2, 0, cfg.block_out - 1] = (rec[2, 0, cfg.block_out - 1] & ~0xFF) | 200
    prog = store_requant_program(cfg, x.astype(np.int32), rec, 20)
    with pytest.raises(ProgramError) as exc:
        rtl.run(prog)
    assert exc.value.code is ErrorCode.SHIFT_RANGE and exc.value.index == len(prog.insns) - 2
    last = prog.insns[-2]
    assert isinstance(last, Store)
    prog.insns[-2] = Store(sram=cfg.acc_depth - 2, dram=last.dram, x=last.x,
                           requant=True, rec=20, pop_prev=True)
    for run in (rtl.run, FunctionalSimulator(cfg).run):
        with pytest.raises(ProgramError) as exc:
            run(prog)
        assert exc.value.code is ErrorCode.SRAM_RANGE
