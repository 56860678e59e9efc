"""The whole core on Verilator under cocotb, compared with the functional simulator.

Every directed ISA program of the foundation suite (tests/isa_programs.py) runs on
the RTL for presets tiny, small and default under a memory with random latency and
back-pressure; the final DRAM image and the instruction counters must equal the
functional simulator's. One simulator process runs all programs of a preset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.isa_programs import directed_programs

from tensorfab.hw.verilog import CORE_LINT_WAIVERS, CORE_TOP, core_verilog, lint
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
    insn_formats,
    uop_format,
)
from tensorfab.isa.formats import Opcode
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.core_harness import CoreRun, run_on_core

PRESET_NAMES = ["tiny", "small", "default"]


def assert_matches_fsim(name: str, run: CoreRun) -> None:
    ref = FunctionalSimulator().run(run.program)
    assert not run.timed_out, f"{name}: no done/error within the cycle limit"
    assert run.error is None, (f"{name}: core error {run.error.name} at instruction "
                               f"{run.csrs['ERROR_INDEX']}")
    assert run.done
    mism = np.flatnonzero(run.dram != ref.dram)
    if mism.size:
        regions = {n: r for n, r in run.program.layout().items() if r.nbytes}
        where = next((n for n, r in regions.items()
                      if r.offset <= mism[0] < r.offset + r.nbytes), "?")
        raise AssertionError(f"{name}: {mism.size} DRAM bytes differ from fsim, first at "
                             f"{mism[0]:#x} in segment {where}")
    c = ref.counters
    got = (run.csrs["LOAD_INSNS"], run.csrs["COMPUTE_INSNS"], run.csrs["STORE_INSNS"])
    assert got == (c.load_insns, c.compute_insns, c.store_insns), name
    assert run.csrs["GEMM_BUSY"] == c.gemm_uops, name


@pytest.fixture(scope="module", params=PRESET_NAMES)
def directed_runs(request, tmp_path_factory) -> tuple[str, dict[str, CoreRun]]:
    preset = request.param
    progs = directed_programs(PRESETS[preset])
    runs = run_on_core(list(progs.values()), tmp_path_factory.mktemp(f"core-{preset}"),
                       seed=11)
    return preset, dict(zip(progs, runs, strict=True))


def test_directed_programs_match_fsim(directed_runs) -> None:
    preset, runs = directed_runs
    failures = []
    for name, run in runs.items():
        try:
            assert_matches_fsim(name, run)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{preset}: {len(failures)} of {len(runs)} programs differ:\n" \
        + "\n".join(failures)


def _tiny_error_programs() -> tuple[list[Program], list[np.ndarray | None], list[tuple]]:
    """Programs that must stop the core with an error, and the expected (code, index)."""
    cfg = PRESETS["tiny"]
    seg = Segment("x", "int8", (8, 4), np.arange(32) - 16)
    out = Segment("y", "int8", (8, 4), output=True)
    ok = [Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=1, push_next=True),
          Finish(pop_prev=True)]
    progs: list[Program] = []
    images: list[np.ndarray | None] = []
    expect: list[tuple] = []

    def add(insns, code, index, patch=None):
        p = Program(cfg, insns, [Uop()], [seg, out])
        image = None
        if patch is not None:
            image = p.dram_image()
            nb = p.insn_bytes
            image[patch[0] * nb: (patch[0] + 1) * nb] = np.frombuffer(
                patch[1].to_bytes(nb, "little"), dtype=np.uint8)
        progs.append(p)
        images.append(image)
        expect.append((code, index))

    base = [Load(buffer=Buffer.INP, sram=0, dram=0, y=1, x=1), *ok]
    # illegal words patched into the stream at index 1
    add(base, ErrorCode.BAD_OPCODE, 1, (1, 7))
    fmt = insn_formats(cfg)[Opcode.FINISH]
    add(base, ErrorCode.RESERVED_BITS, 1, (1, int(Opcode.FINISH) | 1 << (fmt.width - 1)))
    # DMA past the end of DRAM (the image is a few hundred bytes)
    far = Load(buffer=Buffer.INP, sram=0, dram=1 << 16, y=1, x=1)
    add([Load(buffer=Buffer.INP, y=1, x=1), far, *ok], ErrorCode.DRAM_RANGE, 1)
    # SRAM block past the buffer
    deep = Load(buffer=Buffer.INP, sram=cfg.inp_depth - 2, dram=0, y=2, x=2)
    add([deep, *ok], ErrorCode.SRAM_RANGE, 0)
    # store into the instruction stream
    add([*ok[:1], Store(sram=0, dram=0, y=1, x=1), ok[1]], ErrorCode.DRAM_RANGE, 1)
    # ALU: vector shift amounts outside 0..31, a vector operand index past the buffer
    uops = [Uop(acc=1, src=0), Uop(acc=0, src=1)]

    def alu_case(b: int, insn: Alu, code: ErrorCode) -> None:
        pre = [Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=2, push_next=True),
               Alu(op=AluOp.MOV, use_imm=True, imm=b, uop_begin=0, uop_end=1, pop_prev=True),
               Alu(op=AluOp.MOV, use_imm=True, imm=-7, uop_begin=1, uop_end=2)]
        p = Program(cfg, [*pre, insn, Finish()], uops, [seg, out])
        pre[0] = Load(buffer=Buffer.UOP, sram=0, y=1, x=2, push_next=True,
                      dram=p.layout()["uops"].offset // uop_format(cfg).bytes)
        p = Program(cfg, [*pre, insn, Finish()], uops, [seg, out])
        progs.append(p)
        images.append(None)
        expect.append((code, len(pre)))

    vec = {"uop_begin": 1, "uop_end": 2, "iter_out": 3}
    alu_case(32, Alu(op=AluOp.SHR_RND, **vec), ErrorCode.SHIFT_RANGE)
    alu_case(-1, Alu(op=AluOp.SHL, **vec), ErrorCode.SHIFT_RANGE)
    alu_case(32767, Alu(op=AluOp.SHR, **vec), ErrorCode.SHIFT_RANGE)
    alu_case(3, Alu(op=AluOp.MULHI, src_factor_out=cfg.acc_depth // 2, **vec),
             ErrorCode.SRAM_RANGE)
    return progs, images, expect


def test_errors_stop_the_core_with_code_and_index(tmp_path: Path) -> None:
    progs, images, expect = _tiny_error_programs()
    for k, (prog, image, (code, index)) in enumerate(zip(progs, images, expect, strict=True)):
        if image is None:  # the functional simulator reports the same error
            with pytest.raises(ProgramError) as exc:
                FunctionalSimulator(prog.config).run(prog)
            assert (exc.value.code, exc.value.index) == (code, index), f"case {k}: fsim"
    runs = run_on_core(progs, tmp_path, images=images, max_cycles=20_000)
    for k, (run, (code, index)) in enumerate(zip(runs, expect, strict=True)):
        assert not run.timed_out, f"case {k}: the core hung instead of reporting {code.name}"
        assert run.error is code, f"case {k}: expected {code.name}, got {run.error}"
        assert run.csrs["ERROR_INDEX"] == index, f"case {k}: wrong index"
        assert not run.done


@pytest.mark.parametrize("preset", ["tiny", pytest.param("default", marks=pytest.mark.slow)])
def test_core_verilog_lints_clean(preset: str) -> None:
    text = core_verilog(PRESETS[preset])
    assert lint(text, CORE_TOP, CORE_LINT_WAIVERS) == []
