"""Functional simulator: every error names the instruction index, engine and field."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Gemm,
    HwConfig,
    IllegalInstruction,
    Insn,
    Load,
    Opcode,
    Program,
    ProgramError,
    Segment,
    Store,
    Uop,
    insn_formats,
    uop_format,
)
from tensorfab.sim import DeadlockError, FunctionalSimulator, RaceError, TokenError

TINY = PRESETS["tiny"]  # 4x4 blocks, inp 256, wgt 128, acc 256, uop 512, 4 tokens per queue
Addr = Callable[[str, int], int]


def assemble(cfg: HwConfig, make: Callable[[Addr], list[Insn]], uops: list[Uop] | None = None,
             segments: list[Segment] | None = None) -> Program:
    """Program whose LOAD/STORE addresses come from its own layout (``at(name, entry
    bytes)`` is segment ``name``'s base in entries)."""
    prog = Program(cfg, make(lambda name, eb: 0), list(uops or [Uop()]), list(segments or []))
    lay = prog.layout()
    prog.insns = make(lambda name, eb: lay[name].offset // eb)
    return prog


def segs(cfg: HwConfig = TINY) -> list[Segment]:
    """``x``: 8 input entries, ``w``: 4 weight entries, ``out``: 8 output entries."""
    return [Segment("x", "int8", (8, cfg.batch, cfg.block_in), data=np.ones(
                (8, cfg.batch, cfg.block_in))),
            Segment("w", "int8", (4, cfg.block_out, cfg.block_in)),
            Segment("out", "int8", (8, cfg.batch, cfg.block_out), output=True)]


def run(prog: Program, dram: np.ndarray | None = None) -> None:
    FunctionalSimulator().run(prog, dram)


def ub(cfg: HwConfig = TINY) -> int:
    return uop_format(cfg).bytes


def load_x(at: Addr, **kw: object) -> Load:
    fields: dict = dict(buffer=Buffer.INP, sram=0, dram=at("x", 4), y=1, x=4, stride=4)
    fields.update(kw)
    return Load(**fields)


def load_uops(at: Addr, n: int = 1, **kw: object) -> Load:
    return Load(buffer=Buffer.UOP, sram=0, dram=at("uops", ub()), y=1, x=n, stride=n, **kw)


# ----------------------------------------------------------------------------- tokens
def test_deadlock_missing_push_names_waiting_engine_queue_and_index() -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at),                      # 0: forgets push_next
        load_x(at),                         # 1
        Gemm(pop_prev=True, iter_out=4),    # 2: waits for a token that never comes
        Finish(),                           # 3
    ], segments=segs())
    with pytest.raises(DeadlockError, match=r"compute engine at instruction 2 \(gemm\) waits "
                       r"to pop from load→compute \(empty\)") as info:
        run(prog)
    err = info.value
    assert (err.index, err.engine, err.field) == (2, "compute", "pop_prev")
    assert [(w.engine, w.index, w.action, w.queue) for w in err.waits] == [
        ("compute", 2, "pop", "load→compute")]
    assert "load" in str(err) and "finished" in str(err)


def test_deadlock_push_into_full_queue() -> None:
    depth = TINY.dep_queue_depth  # 4

    def make(at: Addr) -> list[Insn]:
        loads = [load_x(at, push_next=True) for _ in range(depth + 1)]  # 0..4
        return [*loads,
                Alu(pop_next=True, op=AluOp.ADD, use_imm=True, imm=1),  # 5: store never pushes
                Finish()]

    prog = assemble(TINY, make, segments=segs())
    with pytest.raises(DeadlockError) as info:
        run(prog)
    msg = str(info.value)
    assert f"load engine at instruction {depth} (load.inp) waits to push into load→compute " \
           "(full)" in msg
    assert "compute engine at instruction 5 (alu.add) waits to pop from store→compute " \
           "(empty)" in msg
    assert (info.value.index, info.value.engine, info.value.field) == (depth, "load",
                                                                       "push_next")


def test_leftover_tokens_at_finish() -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at, push_next=True),                          # 0
        load_x(at, push_next=True),                             # 1: never popped
        Gemm(pop_prev=True, reset=True, push_next=True),        # 2
        Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=1, stride=1),  # 3
        Finish(),                                               # 4
    ], segments=segs())
    with pytest.raises(TokenError, match=r"1 token\(s\) left in load→compute .* pushed by "
                       r"load instruction\(s\) 1") as info:
        run(prog)
    err = info.value
    assert (err.index, err.engine, err.field) == (1, "load", "push_next")
    assert (err.queue, err.count, err.pushers) == ("load→compute", 1, [1])


def test_pop_after_finish_is_underflow() -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at, push_next=True),                          # 0
        Gemm(pop_prev=True, reset=True, push_next=True),        # 1
        Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=1, stride=1),  # 2
        Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=1, stride=1),  # 3: no token
        Finish(),                                               # 4
    ], segments=segs())
    with pytest.raises(TokenError, match=r"underflow.*store engine at instruction 3 \(store\) "
                       r"waits to pop from compute→store") as info:
        run(prog)
    err = info.value
    assert (err.index, err.engine, err.field, err.queue) == (3, "store", "pop_prev",
                                                             "compute→store")


# ------------------------------------------------------------------------------ races
def test_race_read_after_unordered_write() -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at, push_next=True),                   # 0
        load_x(at),                                      # 1: no token after it
        Gemm(pop_prev=True, reset=True),                 # 2: ordered after 0 only
        Gemm(iter_out=4, inp_factor_out=1),              # 3: reads inp[0..3]
        Finish(),
    ], segments=segs())
    with pytest.raises(RaceError, match=r"compute instruction 3 \(gemm\) reads inp\[0\.\.3\] "
                       r"written by load instruction 1 \(load\.inp\) with no token") as info:
        run(prog)
    err = info.value
    assert (err.index, err.engine, err.field, err.kind) == (3, "compute", "inp", "RAW")
    assert (err.other_index, err.other_engine, err.lo, err.hi) == (1, "load", 0, 3)


def test_race_write_after_unordered_read() -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at),                                   # 0
        load_x(at, push_next=True),                      # 1
        load_x(at, pop_next=True, sram=2),               # 2: overwrites inp[2..5]
        Gemm(pop_prev=True, reset=True, push_prev=True),  # 3: lets load 2 go
        Gemm(iter_out=4, inp_factor_out=1),              # 4: reads inp[0..3], after the push
        Finish(),
    ], segments=segs())
    with pytest.raises(RaceError, match=r"load instruction 2 \(load\.inp\) writes inp\[2\.\.3\] "
                       r"read by compute instruction 4 \(gemm\) with no token") as info:
        run(prog)
    err = info.value
    assert (err.index, err.engine, err.field, err.kind) == (2, "load", "inp", "WAR")
    assert (err.other_index, err.other_engine) == (4, "compute")


def test_race_on_dram_between_store_and_load() -> None:
    prog = assemble(TINY, lambda at: [
        load_x(at, pop_next=True, dram=at("out", 4)),    # 0: reads what store 2 writes
        Gemm(reset=True, push_next=True),                # 1
        Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=4, stride=4),  # 2
        Finish(push_prev=True),                          # 3: token to load, not after 2
    ], segments=segs())
    with pytest.raises(RaceError, match=r"load instruction 0 \(load\.inp\) reads DRAM bytes "
                       r"0x[0-9a-f]+\.\.0x[0-9a-f]+ \(segment 'out'\) written by store "
                       r"instruction 2") as info:
        run(prog)
    assert (info.value.index, info.value.engine, info.value.field) == (0, "load", "dram")


def test_tokens_order_the_same_accesses() -> None:
    """The race programs above, with the missing tokens added, run cleanly."""
    prog = assemble(TINY, lambda at: [
        load_uops(at),                                   # 0
        load_x(at, push_next=True),                      # 1
        load_x(at, pop_next=True, sram=2, push_next=True),  # 2
        Gemm(pop_prev=True, reset=True),                 # 3
        Gemm(iter_out=4, inp_factor_out=1, push_prev=True),  # 4
        Gemm(pop_prev=True, iter_out=4, inp_factor_out=1, push_next=True),  # 5
        Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=4, stride=4),  # 6
        Finish(),
    ], segments=segs())
    run(prog)


# ----------------------------------------------------------------------- memory ranges
def test_sram_range_load_block_past_depth() -> None:
    prog = assemble(TINY, lambda at: [
        load_x(at, sram=TINY.inp_depth - 2, y=1, x=4),   # entries 254..257
        Finish(),
    ], segments=segs())
    with pytest.raises(ProgramError, match=r"instruction 0, load engine, field sram: "
                       r"load\.inp: writes inp\[254\.\.257\]") as info:
        run(prog)
    assert (info.value.code, info.value.index, info.value.engine, info.value.field) == (
        ErrorCode.SRAM_RANGE, 0, "load", "sram")


def test_sram_range_store_source_past_depth() -> None:
    prog = assemble(TINY, lambda at: [
        Gemm(reset=True, push_next=True),                # 0
        Store(pop_prev=True, sram=TINY.acc_depth - 1, dram=at("out", 4), y=1, x=2,
              stride=2),                                  # 1
        Finish(),
    ], segments=segs())
    with pytest.raises(ProgramError, match=r"instruction 1, store engine, field sram") as info:
        run(prog)
    assert info.value.code is ErrorCode.SRAM_RANGE


@pytest.mark.parametrize(("fields", "field", "text"), [
    (dict(iter_out=3, inp_factor_out=200), "inp_factor_out", r"inp index 400 = .* \(iteration "
     r"i=2, j=0\)"),
    (dict(iter_in=5, acc_factor_in=100), "acc_factor_in", r"acc index 300 = .* \(iteration "
     r"i=0, j=3\)"),
    (dict(iter_out=2, iter_in=2, wgt_factor_out=64, wgt_factor_in=64), "wgt",
     r"wgt index 128 = .* past the wgt depth 128 \(iteration i=1, j=1\)"),
])
def test_sram_range_gemm_index_names_factor(fields: dict, field: str, text: str) -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at, push_next=True),                   # 0
        Gemm(pop_prev=True, **fields),                   # 1
        Finish(),
    ], segments=segs())
    with pytest.raises(ProgramError, match=text) as info:
        run(prog)
    err = info.value
    assert (err.code, err.index, err.engine, err.field) == (ErrorCode.SRAM_RANGE, 1,
                                                            "compute", field)


def test_sram_range_alu_dst_factor() -> None:
    prog = assemble(TINY, lambda at: [
        load_uops(at, push_next=True),
        Alu(pop_prev=True, op=AluOp.MAX, iter_out=9, dst_factor_out=32, src_factor_out=1),
        Finish(),
    ], segments=segs())
    with pytest.raises(ProgramError, match=r"instruction 1, compute engine, field "
                       r"dst_factor_out: alu\.max: acc index 256") as info:
        run(prog)
    assert info.value.code is ErrorCode.SRAM_RANGE


def test_dram_range_load_past_end_of_image() -> None:
    prog = assemble(TINY, lambda at: [
        load_x(at, y=2, stride=1 << 12),                 # second row far past the end
        Finish(),
    ], segments=segs())
    with pytest.raises(ProgramError, match=r"instruction 0, load engine, field dram: .*past "
                       r"the end of DRAM") as info:
        run(prog)
    assert (info.value.code, info.value.field) == (ErrorCode.DRAM_RANGE, "dram")


def test_dram_range_store_into_instruction_stream() -> None:
    prog = assemble(TINY, lambda at: [
        Gemm(reset=True, push_next=True),
        Store(pop_prev=True, sram=0, dram=1, y=1, x=1, stride=1),  # byte 4: instruction 0
        Finish(),
    ], segments=segs())
    with pytest.raises(ProgramError, match=r"instruction 1, store engine, field dram: .*inside "
                       r"the instruction stream") as info:
        run(prog)
    assert info.value.code is ErrorCode.DRAM_RANGE


def test_uop_range_src_past_inp_depth() -> None:
    cfg = HwConfig(inp_depth=256, acc_depth=2048)  # src_bits 11 > inp_bits 8
    assert cfg.src_bits > cfg.inp_bits
    prog = assemble(cfg, lambda at: [
        Load(buffer=Buffer.UOP, sram=0, dram=at("uops", ub(cfg)), y=1, x=3, stride=3,
             push_next=True),
        Gemm(pop_prev=True, uop_begin=0, uop_end=3),
        Finish(),
    ], uops=[Uop(acc=0, src=1), Uop(acc=1, src=5), Uop(acc=2, src=300)])
    with pytest.raises(ProgramError, match=r"micro-op 2: src = 300 is past the inp depth 256"
                       ) as info:
        run(prog)
    err = info.value
    assert (err.code, err.index, err.engine, err.field) == (ErrorCode.UOP_RANGE, 1,
                                                            "compute", "src")


def test_uop_range_alu_src_past_acc_depth() -> None:
    cfg = HwConfig(inp_depth=2048, acc_depth=256)  # src_bits 11 > acc_bits 8
    prog = assemble(cfg, lambda at: [
        Load(buffer=Buffer.UOP, sram=4, dram=at("uops", ub(cfg)), y=1, x=1, stride=1,
             push_next=True),
        Alu(pop_prev=True, op=AluOp.ADD, uop_begin=4, uop_end=5),
        Finish(),
    ], uops=[Uop(acc=0, src=1000)])
    with pytest.raises(ProgramError, match=r"micro-op 4: src = 1000 is past the acc depth"
                       ) as info:
        run(prog)
    assert (info.value.code, info.value.index, info.value.field) == (ErrorCode.UOP_RANGE, 1,
                                                                     "src")


# ------------------------------------------------------------------ encodings / FINISH
def _program_for_patching() -> Program:
    return assemble(TINY, lambda at: [
        load_uops(at, push_next=True),                   # 0
        Gemm(pop_prev=True, reset=True),                 # 1
        Alu(op=AluOp.ADD, use_imm=True, imm=1),          # 2
        Finish(),                                        # 3
    ], segments=segs())


def test_illegal_opcode_patched_into_image() -> None:
    prog = _program_for_patching()
    image = prog.dram_image()
    nb = prog.insn_bytes
    image[2 * nb] = (image[2 * nb] & 0xF8) | 7  # instruction 2: opcode 7
    with pytest.raises(IllegalInstruction, match=r"instruction 2.*unknown opcode 7") as info:
        run(prog, image)
    assert (info.value.code, info.value.index, info.value.field) == (ErrorCode.BAD_OPCODE, 2,
                                                                     "opcode")


def test_reserved_bits_patched_into_image() -> None:
    prog = _program_for_patching()
    assert insn_formats(TINY)[Opcode.GEMM].reserved_mask >> (prog.insn_bytes * 8 - 1)
    image = prog.dram_image()
    nb = prog.insn_bytes
    image[2 * nb - 1] |= 0x80  # top bit of instruction 1 (GEMM)
    with pytest.raises(IllegalInstruction, match=r"instruction 1, compute engine, field "
                       r"reserved: gemm: reserved bits set") as info:
        run(prog, image)
    assert (info.value.code, info.value.index) == (ErrorCode.RESERVED_BITS, 1)


def test_finish_patched_out_of_image() -> None:
    prog = _program_for_patching()
    image = prog.dram_image()
    nb = prog.insn_bytes
    image[1 * nb: 2 * nb] = image[3 * nb: 4 * nb]  # instruction 1 becomes a FINISH
    with pytest.raises(ProgramError, match=r"instruction 1, compute engine.*FINISH must be the "
                       r"last instruction") as info:
        run(prog, image)
    assert info.value.code is ErrorCode.NO_FINISH


def test_words_patched_into_an_image_after_a_good_run_are_decoded_again() -> None:
    """A simulator that has run a program keeps its decoded words; the same program
    with an instruction patched (illegal, or legal but different) is decoded anew."""
    sim = FunctionalSimulator()
    prog = _program_for_patching()
    good = sim.run(prog).dram
    nb = prog.insn_bytes
    image = prog.dram_image()
    image[2 * nb] = (image[2 * nb] & 0xF8) | 7
    for _ in range(2):
        with pytest.raises(IllegalInstruction, match=r"instruction 2.*unknown opcode 7"):
            sim.run(prog, image)
    # instruction 2 (ALU ADD imm 1) becomes the FINISH: its result is never written
    image = prog.dram_image()
    image[2 * nb: 3 * nb] = image[3 * nb: 4 * nb]
    with pytest.raises(ProgramError, match=r"instruction 2.*FINISH must be the last"):
        sim.run(prog, image)
    np.testing.assert_array_equal(sim.run(prog).dram, good)


def test_program_without_finish() -> None:
    prog = Program(TINY, [Alu(op=AluOp.ADD, use_imm=True, imm=1)], [Uop()])
    with pytest.raises(ProgramError, match=r"instruction 1, compute engine.*does not end with "
                       r"FINISH") as info:
        run(prog)
    assert (info.value.code, info.value.index, info.value.engine) == (ErrorCode.NO_FINISH, 1,
                                                                      "compute")


def test_image_smaller_than_program() -> None:
    prog = _program_for_patching()
    with pytest.raises(ProgramError, match="DRAM image has") as info:
        run(prog, prog.dram_image()[:-4])
    assert info.value.code is ErrorCode.DRAM_RANGE


def test_full_command_queue_deadlocks_like_hardware():
    """Fetch dispatches in order: loads piling up behind a load that waits on compute
    block the compute instruction that would release it."""
    from tensorfab.isa import Buffer, Finish, Gemm, HwConfig, Load, Program, Segment, Uop

    cfg = HwConfig(name="q", block_in=4, block_out=4, inp_depth=64, wgt_depth=64,
                   acc_depth=64, uop_depth=64, cmd_queue_depth=2, mem_bus_width=32)
    seg = Segment("x", "int8", (4, 4))
    depth = cfg.cmd_queue_depth + 1
    # load 0 waits for a compute token; the loads after it fill the load engine's
    # queue, so fetch never dispatches the GEMM (index depth + 1) that pushes the token.
    loads = [Load(buffer=Buffer.INP, dram=0, pop_next=True)]
    loads += [Load(buffer=Buffer.INP, sram=k + 1, dram=0) for k in range(depth)]
    prog = Program(cfg, [*loads, Gemm(push_prev=True), Finish()], [Uop()], [seg])
    with pytest.raises(DeadlockError) as exc:
        FunctionalSimulator().run(prog)
    msg = str(exc.value)
    assert f"fetch at instruction {depth} (load.inp) waits for room in the load engine's " \
           f"command queue (full: {depth} instructions)" in msg
    assert f"compute engine waits for fetch to dispatch instruction {depth + 1} (gemm)" in msg
    assert "load engine at instruction 0 (load.inp) waits to pop from compute→load" in msg
    # with one load fewer the GEMM is dispatched and the program runs to the end
    ok = Program(cfg, [*loads[:-1], Gemm(push_prev=True), Finish()], [Uop()], [seg])
    FunctionalSimulator().run(ok)


def test_a_simulator_plans_each_micro_op_table_on_its_own() -> None:
    """A simulator keeps instruction plans across runs, keyed by the micro-op table:
    the same instruction words over another table compute what a fresh simulator
    computes."""
    def program(acc: int) -> Program:
        return assemble(TINY, lambda at: [
            load_uops(at, push_next=True),
            Alu(pop_prev=True, op=AluOp.ADD, use_imm=True, imm=5, push_next=True),
            Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=2, stride=2),
            Finish(),
        ], uops=[Uop(acc=acc)], segments=segs())

    a, b = program(0), program(1)
    assert a.insns == b.insns
    sim = FunctionalSimulator()
    for prog, entry in ((a, 0), (b, 1), (a, 0)):
        out = sim.run(prog).outputs["out"]
        np.testing.assert_array_equal(out, FunctionalSimulator().run(prog).outputs["out"])
        assert out[entry].min() == 5 and out[1 - entry].max() == 0


def test_a_simulator_reuses_its_race_trackers_arrays_cleared() -> None:
    """The race trackers' arrays are kept across runs and cleared of what a run set, a
    run that stopped on a race included: the same simulator finds the same race again,
    runs the ordered program cleanly, and every kept array is zero."""
    racy = assemble(TINY, lambda at: [
        load_uops(at, push_next=True),
        load_x(at),
        Gemm(pop_prev=True, reset=True),
        Gemm(iter_out=4, inp_factor_out=1),
        Finish(),
    ], segments=segs())
    ordered = assemble(TINY, lambda at: [
        load_uops(at),
        load_x(at, push_next=True),
        load_x(at, pop_next=True, sram=2, push_next=True),
        Gemm(pop_prev=True, reset=True),
        Gemm(iter_out=4, inp_factor_out=1, push_prev=True),
        Gemm(pop_prev=True, iter_out=4, inp_factor_out=1, push_next=True),
        Store(pop_prev=True, sram=0, dram=at("out", 4), y=1, x=4, stride=4),
        Finish(),
    ], segments=segs())
    sim = FunctionalSimulator()
    messages = []
    for prog in (racy, ordered, racy, ordered, ordered):
        if prog is racy:
            with pytest.raises(RaceError) as info:
                sim.run(prog)
            messages.append(str(info.value))
        else:
            np.testing.assert_array_equal(sim.run(prog).outputs["out"],
                                          FunctionalSimulator().run(prog).outputs["out"])
    assert messages[0] == messages[1] and "reads inp[0..3]" in messages[0]
    kept = [a for arrays in sim._zeroed._free.values() for a in arrays]
    assert kept and all(not a.any() for a in kept)
