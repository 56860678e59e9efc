"""The instruction decoder's legality check (``InsnCheck``) against the ISA, on every
preset and the iCEBreaker's ``up5k``.

Proved for every word: ``ok`` exactly when the code is NONE; BAD_OPCODE exactly for
the opcodes the ISA does not declare (and ALU in a config without the vector ALU);
RESERVED_BITS exactly for a declared opcode with a bit of its format's reserved mask
set (from the ISA's ``Format``, not the hardware's layouts); BAD_FIELD exactly when
the ISA's field rules reject the word, the reference being
:func:`tensorfab.isa.check_insn` itself run on symbolic fields
(:mod:`formal.isa_reference`). Cross-checked on tiny as well: covers make the solver
find, for every opcode, a word of each verdict its random words can have, and words
with each field at zero and at all ones; :func:`tensorfab.isa.decode_insn` (which
applies :func:`tensorfab.isa.check_insn`) must give every one of them the hardware's
verdict.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from amaranth.hdl import Assert, Cat, Cover, Module, Value

import tensorfab.hw.insn_check as insn_check_module
from formal.isa_reference import bad_field_logic
from formal.symbiyosys import (
    assert_proved,
    assert_refuted,
    cover_traces,
    first_values,
    free,
    mutant,
)
from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.hw.insn_check import InsnCheck
from tensorfab.isa import (
    PRESETS,
    ErrorCode,
    HwConfig,
    IllegalInstruction,
    Opcode,
    decode_insn,
    get_config,
    insn_formats,
    insn_width,
)

CFG = get_config("tiny")
OPCODE_BITS = 3


def insn_check_spec(dut: InsnCheck, *, covers: bool = True) -> Module:
    """The check on a free word, with the properties above, and with ``covers`` (on
    tiny) the covers."""
    m = Module()
    m.submodules.dut = dut
    cfg = dut.cfg
    m.d.comb += dut.word.eq(free(insn_width(cfg)))
    opcode = dut.word[:OPCODE_BITS]
    known = Cat(*(opcode == op for op in declared_opcodes(cfg))).any()
    fmts = insn_formats(cfg)
    reserved = 0
    for op in declared_opcodes(cfg):
        mask = fmts[op].reserved_mask
        if mask:
            reserved = reserved | ((opcode == op) & ((dut.word & mask) != 0))
    m.d.comb += [
        Assert(dut.ok == (dut.code == ErrorCode.NONE), "ok is not code == NONE"),
        Assert((dut.code == ErrorCode.BAD_OPCODE) == ~known, "BAD_OPCODE not the ISA's"),
        Assert((dut.code == ErrorCode.RESERVED_BITS) == (known & reserved),
               "RESERVED_BITS not the format's reserved mask"),
        Assert(dut.code <= ErrorCode.BAD_FIELD, "a code the check does not give"),
        Assert((dut.code == ErrorCode.BAD_FIELD)
               == (known & ~reserved & isa_bad_field(dut.word, cfg)),
               "BAD_FIELD not the ISA's check_insn"),
    ]
    if not covers:
        return m
    for value in range(len(Opcode), 1 << OPCODE_BITS):
        m.d.comb += Cover(opcode == value)
    for op in Opcode:
        fmt = fmts[op]
        is_op = opcode == op
        m.d.comb += [Cover(is_op & (dut.code == code)) for code in sampled_verdicts(op)]
        for name, offset in fmt.offsets().items():
            if name == "opcode":
                continue
            bits = dut.word[offset:offset + fmt.field(name).width]
            m.d.comb += [Cover(is_op & (bits == 0) & ~reserved),
                         Cover(is_op & (bits == (1 << len(bits)) - 1) & ~reserved)]
    return m


def declared_opcodes(cfg: HwConfig) -> list[Opcode]:
    """The opcodes of ``cfg``'s instructions: all but ALU in a config without the
    vector ALU."""
    return [op for op in Opcode if op is not Opcode.ALU or cfg.vector_alu]


def isa_bad_field(word: Value, cfg: HwConfig) -> Value:
    """The ISA's field rules on ``word`` (by its opcode), from ``check_insn`` itself
    (:func:`formal.isa_reference.bad_field_logic`)."""
    opcode = word[:OPCODE_BITS]
    return Cat(*((opcode == op) & bad_field_logic(word, cfg, op)
                 for op in declared_opcodes(cfg))).any()


def sampled_verdicts(op: Opcode) -> set[ErrorCode]:
    """The verdicts the ISA gives some of 2000 random words of opcode ``op`` (those
    every check must be able to reach: FINISH, for one, has no field rule)."""
    rng = random.Random(op)
    width = insn_width(CFG)
    return {isa_verdict((rng.getrandbits(width) & ~((1 << OPCODE_BITS) - 1)) | op)
            for _ in range(2000)}


def isa_verdict(word: int) -> ErrorCode:
    """What the ISA says of ``word``."""
    try:
        decode_insn(word, CFG)
    except IllegalInstruction as exc:
        return ErrorCode(exc.code)
    return ErrorCode.NONE


class AcceptsOpcodeSeven(InsnCheck):
    """Mutant: opcode 7 passes as legal."""

    def elaborate(self, platform: object) -> Module:
        m = super().elaborate(platform)
        with m.If(self.word[:OPCODE_BITS] == 7):
            m.d.comb += self.code.eq(ErrorCode.NONE)
        return m


def test_insn_check_proved_and_cross_checked(tmp_path: Path) -> None:
    result = assert_proved(insn_check_spec(InsnCheck(CFG)), tmp_path, depth=1, cover_depth=1)
    traces = cover_traces(result)
    # (a trace that reaches several covers serves them all)
    assert len(traces) >= 20, f"{len(traces)} cover traces"
    mismatches = []
    verdicts = set()
    for vcd in traces:
        seen = first_values(vcd, ("top", "dut"), {"word", "code"})
        want = isa_verdict(seen["word"])
        verdicts.add(want)
        if seen["code"] != want:
            mismatches.append(f"{seen['word']:#x}: hardware {seen['code']}, ISA {want.name}")
    assert not mismatches, mismatches[:5]
    assert verdicts == set(ErrorCode) & {ErrorCode.NONE, ErrorCode.BAD_OPCODE,
                                         ErrorCode.RESERVED_BITS, ErrorCode.BAD_FIELD}


@pytest.mark.parametrize("preset", [*sorted(set(PRESETS) - {"tiny"}), "up5k"])
def test_insn_check_proved_on_other_presets(preset: str, tmp_path: Path) -> None:
    """The same equivalences with each preset's field widths and buffer depths, and on
    the iCEBreaker's ``up5k``, without the vector ALU (its ALU words BAD_OPCODE, its
    STOREs' requantization fields at a block_in of 2)."""
    cfg = get_config(preset) if preset in PRESETS else board_config(preset)
    assert_proved(insn_check_spec(InsnCheck(cfg), covers=False), tmp_path, depth=1)


def test_insn_check_mutant_refuted(tmp_path: Path) -> None:
    assert_refuted(insn_check_spec(AcceptsOpcodeSeven(CFG)), tmp_path, depth=1)


def test_insn_check_field_rule_mutant_refuted(tmp_path: Path) -> None:
    """Mutant: an empty micro-op range (``uop_begin == uop_end``) passes."""
    broken = mutant(insn_check_module, "InsnCheck", "v.uop_begin >= v.uop_end",
                    "v.uop_begin > v.uop_end")
    assert_refuted(insn_check_spec(broken(CFG)), tmp_path, depth=1, failing="isa_bad_field")
