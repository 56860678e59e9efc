"""A config without the vector ALU (``vector_alu: false``, the iCEBreaker's ``up5k``):
its errors name what is missing and where, at every layer: an ALU word is BAD_OPCODE at
its index in fsim and in the RTL alike, encoding one is refused, the ISA and the
compiler say what the config lacks."""

from __future__ import annotations

import numpy as np
import pytest
from support.error_programs import patchable_program, patched_opcode

from tensorfab.compiler.tensor import Epilogue, conv2d
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    ConfigError,
    ErrorCode,
    IllegalInstruction,
    UsageError,
    encode_insn,
)
from tensorfab.isa.formats import Opcode
from tensorfab.isa.requant_record import pack_requant_acc_records
from tensorfab.sim import FunctionalSimulator

UP5K = board_config("up5k")


def test_an_alu_word_is_bad_opcode_at_its_index_in_fsim_and_the_rtl() -> None:
    """A GEMM word with its opcode patched to ALU's (3): fsim and the core both stop at
    instruction 2 with BAD_OPCODE, and the message says the config has no vector ALU."""
    from tensorfab.sim.rtl import RtlSimulator

    prog = patchable_program(UP5K)
    image = patched_opcode(prog, 2, int(Opcode.ALU))
    errors = []
    for run in (FunctionalSimulator().run, RtlSimulator().run):
        with pytest.raises(IllegalInstruction, match="has no vector ALU") as info:
            run(prog, image)
        errors.append((info.value.code, info.value.index, info.value.field))
    assert errors == [(ErrorCode.BAD_OPCODE, 2, "opcode")] * 2


def test_encoding_an_alu_instruction_is_refused() -> None:
    with pytest.raises(IllegalInstruction, match="'up5k' has no vector ALU") as info:
        encode_insn(Alu(op=AluOp.ADD, use_imm=True, imm=1), UP5K, index=4)
    assert (info.value.code, info.value.index, info.value.field) == (
        ErrorCode.BAD_OPCODE, 4, "opcode")


def test_config_and_record_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"sequential_multiplier.*needs the vector ALU"):
        UP5K.replace(sequential_multiplier=True)
    # tiny keeps its ALU, and block_in 4 holds no record: its STOREs do not requantize
    with pytest.raises(UsageError, match="'tiny' has no REQUANT in its STOREs"):
        pack_requant_acc_records(PRESETS["tiny"], multiplier=1, bias=0, shift=0,
                                 zero_point=0, lo=-128, hi=127)


def test_an_alu_epilogue_is_refused_and_the_stores_requantize() -> None:
    """conv2d with an ALU epilogue names the missing ALU; the one-rounding epilogue in
    the STOREs compiles and runs on fsim as the reference arithmetic says."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 4, 5, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 4, 3, 3), dtype=np.int8)
    with pytest.raises(CompileError, match="'up5k' has no vector ALU"):
        conv2d(UP5K, x, w, None, stride=1, padding=1, epilogue=Epilogue(requant=(3, 10)))
    scale = 3 / 2 ** 10
    op = conv2d(UP5K, x, w, None, stride=1, padding=1,
                epilogue=Epilogue.from_scales(np.full(6, scale), rounding="single"))
    assert not any(isinstance(i, Alu) for i in op.program.insns)
    out = op.run(FunctionalSimulator())
    acc = np.zeros((1, 6, 5, 5), dtype=np.int64)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for dy in range(3):
        for dx in range(3):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + 5, dx:dx + 5],
                             w[:, :, dy, dx].astype(np.int64))
    want = np.clip(np.sign(acc) * np.floor(np.abs(acc) * scale + 0.5), -128, 127)
    np.testing.assert_array_equal(out, want)
