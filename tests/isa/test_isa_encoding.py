import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import alus, configs, gemms, insns, loads, stores, uops

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Gemm,
    IllegalInstruction,
    Load,
    Opcode,
    Store,
    decode_insn,
    decode_uop,
    encode_insn,
    encode_uop,
    insn_formats,
    insn_width,
)
from tensorfab.isa.errors import UsageError
from tensorfab.isa.formats import requant_supported
from tensorfab.isa.insn import INSN_CLASSES

DEFAULT = PRESETS["default"]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), cfg=configs)
def test_encode_decode_round_trip(data, cfg):
    insn = data.draw(insns(cfg))
    word = encode_insn(insn, cfg)
    assert 0 <= word < 1 << insn_width(cfg)
    assert decode_insn(word, cfg) == insn
    assert encode_insn(decode_insn(word, cfg), cfg) == word


@settings(max_examples=100, deadline=None)
@given(data=st.data(), cfg=configs)
def test_uop_round_trip(data, cfg):
    u = data.draw(uops(cfg))
    assert decode_uop(encode_uop(u, cfg), cfg) == u


@pytest.mark.parametrize("cfg", list(PRESETS.values()), ids=list(PRESETS))
def test_formats_fit_and_match_dataclasses(cfg):
    for op, fmt in insn_formats(cfg).items():
        assert fmt.used_bits <= insn_width(cfg)
        names = {f.name for f in fmt.fields} - {"opcode"}
        declared = {f.name for f in dataclasses.fields(INSN_CLASSES[op])}
        if op is Opcode.STORE and not requant_supported(cfg):
            declared -= {"requant", "rec"}  # a requantizing STORE needs REQUANT
        assert names == declared


def test_field_positions_are_contiguous_from_zero():
    fmt = insn_formats(DEFAULT)[Load.opcode]
    offs = fmt.offsets()
    pos = 0
    for f in fmt.fields:
        assert offs[f.name] == pos
        pos += f.width


def test_known_encoding_of_gemm():
    # opcode GEMM=2 in bits 2:0, pop_prev at bit 3, reset at bit 7, uop_end at 8+13
    g = Gemm(reset=True, uop_begin=0, uop_end=1, pop_prev=True)
    word = encode_insn(g, DEFAULT)
    assert word & 0b111 == 2
    assert word >> 3 & 1 == 1
    assert word >> 7 & 1 == 1
    assert word >> (8 + 13) & ((1 << 14) - 1) == 1


@pytest.mark.parametrize("word,code,field", [
    (7, ErrorCode.BAD_OPCODE, "opcode"),
    (5, ErrorCode.BAD_OPCODE, "opcode"),
    (4 | 1 << 100, ErrorCode.RESERVED_BITS, "reserved"),
])
def test_decode_rejects_illegal_words(word, code, field):
    with pytest.raises(IllegalInstruction) as exc:
        decode_insn(word, DEFAULT, index=17)
    assert exc.value.code is code
    assert exc.value.index == 17
    assert exc.value.field == field
    assert "instruction 17" in str(exc.value)


def test_decode_rejects_bad_alu_op():
    fmt = insn_formats(DEFAULT)[Alu.opcode]
    word = fmt.pack({"opcode": 3, "op": 12, "uop_end": 1, "iter_out": 1, "iter_in": 1})
    with pytest.raises(IllegalInstruction, match=r"instruction 3.*field op.*not a valid AluOp"):
        decode_insn(word, DEFAULT, index=3)


@pytest.mark.parametrize("insn,field", [
    (Load(buffer=Buffer.INP, y=0), "y"),
    (Load(buffer=Buffer.INP, x=0), "x"),
    (Load(buffer=Buffer.INP, sram=DEFAULT.inp_depth), "sram"),
    (Load(buffer=Buffer.UOP, pad_left=1), "pad_left"),
    (Load(pop_prev=True), "pop_prev"),
    (Store(push_next=True), "push_next"),
    (Gemm(uop_begin=3, uop_end=3), "uop_end"),
    (Gemm(uop_end=DEFAULT.uop_depth + 1), "uop_end"),
    (Gemm(iter_in=0), "iter_in"),
    (Alu(op=AluOp.SHR, use_imm=True, imm=32), "imm"),
    (Alu(op=AluOp.ADD, use_imm=False, imm=4), "imm"),
    (Alu(op=AluOp.ADD, use_imm=True, imm=1 << 15), "imm"),
])
def test_encode_rejects_illegal_fields(insn, field):
    with pytest.raises(IllegalInstruction) as exc:
        encode_insn(insn, DEFAULT, index=9)
    assert exc.value.field == field
    assert exc.value.code is ErrorCode.BAD_FIELD
    assert "instruction 9" in str(exc.value) and f"field {field}" in str(exc.value)


def test_decoded_illegal_field_reports_index():
    # a legal GEMM word with iter_out forced to 0 by hand
    fmt = insn_formats(DEFAULT)[Gemm.opcode]
    word = fmt.pack(Gemm(uop_end=2).values() | {"iter_out": 0})
    with pytest.raises(IllegalInstruction, match=r"instruction 4.*iter_out"):
        decode_insn(word, DEFAULT, index=4)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_each_kind_round_trips_on_tiny(data):
    cfg = PRESETS["tiny"]
    for strat in (loads(cfg), stores(cfg), gemms(cfg), alus(cfg)):
        insn = data.draw(strat)
        assert decode_insn(encode_insn(insn, cfg), cfg) == insn
    assert decode_insn(encode_insn(Finish(pop_next=True), cfg), cfg) == Finish(pop_next=True)


@pytest.mark.parametrize("word", [-1, 1 << 100])
def test_decode_uop_refuses_a_word_wider_than_a_micro_op(word: int) -> None:
    """decode_uop(1 << 100) gave Uop(0, 0, 0) and decode_uop(-1) Uop(255, 255, 127):
    bits outside the word were dropped silently (decode_insn refuses them)."""
    cfg = PRESETS["tiny"]
    with pytest.raises(UsageError, match=r"does not fit the 32-bit micro-op word of "
                                         r"config 'tiny'"):
        decode_uop(word, cfg)


@pytest.mark.parametrize("insn,field,match", [
    (Load(buffer=Buffer.ACC, sram=1.5), "sram", r"^instruction 7, load engine, field sram: "
                                                r"load: sram = 1\.5 is not an integer"),
    (Load(buffer=Buffer.ACC, y="2"), "y", r"load: y = '2' is not an integer"),
    (Store(dram=None), "dram", r"store: dram = None is not an integer"),
    (Gemm(iter_in=2.0), "iter_in", r"gemm: iter_in = 2\.0 is not an integer"),
    (Load(buffer=5), "buffer", r"load: buffer = 5 is not a valid Buffer \(UOP, WGT, INP, ACC\)"),
    (Alu(op=12), "op", r"alu: op = 12 is not a valid AluOp \(ADD, "),
    (Alu(op=1.0), "op", r"alu: op = 1\.0 is not an integer"),
    (Alu(op=10), "op", r"config 'tiny' has no REQUANT"),  # an int op checked as its member
])
def test_encode_refuses_fields_that_are_not_valid_integers(insn, field, match):
    """encode_insn(Load(sram=1.5)) encoded sram 1, Alu(op=12) a word decode_insn refuses,
    Alu(op=10) (an int, not an AluOp) passed tiny's REQUANT check, Load(buffer=5) raised
    KeyError; now each is an IllegalInstruction naming the instruction kind and field."""
    with pytest.raises(IllegalInstruction, match=match) as info:
        encode_insn(insn, PRESETS["tiny"], 7)
    assert info.value.field == field and info.value.index == 7
    assert info.value.code is ErrorCode.BAD_FIELD


def test_encode_takes_enum_values_and_numpy_integers_as_integers():
    """An enum field given as its integer value, and NumPy integers, encode as the
    members and ints they stand for (the check is on the value, not the type)."""
    import numpy as np
    cfg = DEFAULT
    assert encode_insn(Alu(op=10), cfg) == encode_insn(Alu(op=AluOp.REQUANT), cfg)
    assert encode_insn(Load(buffer=3, sram=np.int64(2), y=np.uint8(2)), cfg) == \
        encode_insn(Load(buffer=Buffer.ACC, sram=2, y=2), cfg)
    assert encode_insn(Load(pop_next=np.bool_(True)), cfg) == encode_insn(Load(pop_next=True),
                                                                           cfg)
