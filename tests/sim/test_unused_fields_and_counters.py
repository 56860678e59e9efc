"""Where the ISA could be read two ways, fsim and the RTL agree (docs/isa.md): fields an
instruction does not use are ignored, and a LOAD whose source lies in the instruction
stream counts its bytes as load bytes on both."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    Finish,
    Gemm,
    Load,
    Program,
    Segment,
    Store,
    Uop,
    uop_format,
)
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator

TINY = PRESETS["tiny"]


def _program(compute: Gemm | Alu, uops: list[Uop], first: list[Load] = ()) -> Program:
    """``first``, load the micro-ops, run ``compute``, store one accumulator row."""
    out = Segment("y", "int8", (1, TINY.batch, TINY.block_out), output=True)

    def build(uop_at: int, y_at: int) -> Program:
        return Program(TINY, [
            *first,
            Load(buffer=Buffer.UOP, sram=0, dram=uop_at, y=1, x=len(uops), push_next=True),
            type(compute)(**{**compute.__dict__, "pop_prev": True, "push_next": True}),
            Store(sram=0, dram=y_at, y=1, x=1, pop_prev=True, push_prev=True),
            Finish(pop_next=True)], uops, [out])

    lay = build(0, 0).layout()
    return build(lay["uops"].offset // uop_format(TINY).bytes,
                 lay["y"].offset // TINY.out_entry_bytes)


def _same(prog: Program) -> None:
    want = FunctionalSimulator().run(prog)
    got = RtlSimulator().run(prog)
    assert np.array_equal(got.dram, want.dram)
    assert got.counters.to_dict() | {"cycles": None} == want.counters.to_dict() | {
        "cycles": None}


@pytest.mark.parametrize("case", ["gemm-reset", "alu-imm"])
def test_unused_index_past_the_buffer_is_ignored(case: str) -> None:
    """The second iteration's source index (factor × 1) lies past the buffer, but the
    instruction reads no source: both executors run it."""
    if case == "gemm-reset":
        compute = Gemm(reset=True, uop_begin=0, uop_end=1, iter_out=2, iter_in=1,
                       acc_factor_out=1, inp_factor_out=TINY.inp_depth - 1,
                       wgt_factor_out=TINY.wgt_depth - 1)
    else:
        compute = Alu(op=AluOp.MOV, use_imm=True, imm=5, uop_begin=0, uop_end=1,
                      iter_out=2, iter_in=1, dst_factor_out=1,
                      src_factor_out=TINY.acc_depth - 1)
    _same(_program(compute, [Uop(acc=0, src=1, wgt=1)]))


def test_load_from_the_instruction_stream_counts_as_load_bytes() -> None:
    first = [Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=1)]  # the stream as data
    p = _program(Alu(op=AluOp.ADD, use_imm=True, imm=0, uop_begin=0, uop_end=1),
                 [Uop(acc=0, src=0, wgt=0)], first)
    want = FunctionalSimulator().run(p)
    assert want.counters.load_bytes_acc == TINY.acc_entry_bytes
    _same(p)
