"""ComputeFields in Amaranth's simulator against the ISA's own instruction objects.

The instructions of random programs (every opcode; GEMMs with and without reset,
ALU operations with a vector, an immediate and REQUANT), encoded by
``tensorfab.isa.encode_insn``: the loops must be the instruction's fields, its kind the
opcode's, and what is registered at the start what docs/isa.md says its micro-ops
read.
"""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

from tensorfab.hw.compute_fields import ComputeFields
from tensorfab.isa import PRESETS, Alu, AluOp, Finish, Gemm, encode_insn
from tensorfab.isa.formats import requant_supported
from tensorfab.sim.testing.random_program import random_program


def expected(insn) -> dict[str, int]:
    """What the engine must see of ``insn``."""
    out = {"is_gemm": isinstance(insn, Gemm), "is_alu": isinstance(insn, Alu),
           "is_finish": isinstance(insn, Finish)}
    if isinstance(insn, Gemm):
        out |= {"factor_out": [insn.acc_factor_out, insn.inp_factor_out, insn.wgt_factor_out],
                "factor_in": [insn.acc_factor_in, insn.inp_factor_in, insn.wgt_factor_in],
                "q_gemm": 1, "q_alu": 0, "q_requant": 0, "q_reset": insn.reset,
                "src_used": not insn.reset, "wgt_used": not insn.reset}
    if isinstance(insn, Alu):
        requant = insn.op is AluOp.REQUANT
        out |= {"factor_out": [insn.dst_factor_out, insn.src_factor_out, insn.src_factor_out],
                "factor_in": [insn.dst_factor_in, insn.src_factor_in, insn.src_factor_in],
                "q_gemm": 0, "q_alu": 1, "q_requant": requant,
                "src_used": not insn.use_imm and not requant, "wgt_used": requant}
    if isinstance(insn, Gemm | Alu):
        out |= {name: getattr(insn, name) for name in ("uop_begin", "uop_end", "iter_out",
                                                       "iter_in")}
    return {k: [int(x) for x in v] if isinstance(v, list) else int(v) for k, v in out.items()}


@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
def test_fields_of_random_instructions(preset: str) -> None:
    cfg = PRESETS[preset]
    insns = [i for seed in range(6) for i in random_program(cfg, seed).insns]
    if requant_supported(cfg):
        insns.append(Alu(op=AluOp.REQUANT, uop_begin=1, uop_end=3, iter_out=2, iter_in=3,
                         dst_factor_out=4, src_factor_in=1))
    insns.append(Gemm(reset=True, uop_end=2, iter_out=3, acc_factor_out=2))
    kinds = {type(i).__name__ for i in insns}
    assert {"Gemm", "Alu", "Finish", "Load", "Store"} <= kinds
    dut = ComputeFields(cfg)
    checked = []

    async def bench(ctx) -> None:
        for insn in insns:
            want = expected(insn)
            ctx.set(dut.word, encode_insn(insn, cfg))
            ctx.set(dut.start, 1)
            comb = {k: v for k, v in want.items() if not k.startswith(("q_", "src_", "wgt_"))}
            for name, value in comb.items():
                got = ([ctx.get(getattr(dut, name)[k]) for k in range(3)]
                       if name.startswith("factor") else ctx.get(getattr(dut, name)))
                assert got == value, (insn, name)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.word, 0)  # registered: the word may change after the start
            for name, value in want.items():
                if name.startswith(("q_", "src_", "wgt_")):
                    assert ctx.get(getattr(dut, name)) == value, (insn, name)
            checked.append(insn)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(checked) == len(insns)
