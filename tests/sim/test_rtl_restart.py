"""One core, many programs: after any error the core accepts the next start without a
reset, and the next program runs as on a fresh core (a board runs many programs on one
core; the fetch unit and the engines may still owe reads when the error stops them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.error_programs import patched_opcode, patched_word, tiny_error_programs
from support.isa_programs import build_gemm

from tensorfab.isa import PRESETS, ErrorCode, HwConfig, Opcode, Program, insn_formats
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import Harness, RunStatus
from tensorfab.sim.rtl.build import build_harness

TINY = PRESETS["tiny"]
#: An 8-bit memory bus: an instruction word takes many beats, so many reads are in flight.
BUS8 = dataclasses.replace(TINY, name="tiny-bus8", mem_bus_width=8)


def _run(h: Harness, program: Program, image: np.ndarray, limit: int,
         count: int | None = None) -> RunStatus:
    h.load_dram(image)
    h.start(0, len(program.insns) if count is None else count, image.size)
    return h.run(limit, hang_cycles=5_000)


Case = tuple[str, Program, np.ndarray, ErrorCode, int | None]


def _error_cases(cfg: HwConfig, good: Program) -> list[Case]:
    """(name, program, image, expected code, instruction count or None): an illegal
    opcode at each of the first seven instructions (reads still in flight behind it),
    a field the config cannot hold, a stream without FINISH, and on tiny every error
    program of the core's error suite."""
    cases: list[Case] = [(f"bad opcode at {k}", good, patched_opcode(good, k),
                          ErrorCode.BAD_OPCODE, None) for k in range(min(7, len(good.insns)))]
    bad_field = insn_formats(cfg)[Opcode.GEMM].pack({
        "opcode": Opcode.GEMM, "uop_begin": 0, "uop_end": cfg.uop_depth + 1, "iter_out": 1,
        "iter_in": 1})
    cases.append(("bad field at 1", good, patched_word(good, 1, bad_field),
                  ErrorCode.BAD_FIELD, None))
    cases.append(("no FINISH", good, good.dram_image(), ErrorCode.NO_FINISH,
                  len(good.insns) - 1))
    if cfg == TINY:
        progs, images, expect = tiny_error_programs()
        for k, (p, img, (code, _)) in enumerate(zip(progs, images, expect, strict=True)):
            cases.append((f"error program {k} ({code.name})", p,
                          img if img is not None else p.dram_image(), code, None))
    return cases


@pytest.mark.parametrize("cfg", [TINY, BUS8], ids=lambda c: c.name)
def test_restart_after_every_error_without_reset(cfg: HwConfig) -> None:
    good, _ = build_gemm(cfg, np.random.default_rng(3), vthreads=2)
    want = FunctionalSimulator().run(good).dram
    codes = set()
    with Harness(build_harness(cfg)) as h:
        h.reset()
        for name, bad, image, code, count in _error_cases(cfg, good):
            status = _run(h, bad, image, 50_000, count)
            assert status is RunStatus.ERROR, f"{name}: {status.name}"
            assert h.read_csr("ERROR_CODE") == code, name
            codes.add(code)
            status = _run(h, good, good.dram_image(), 500_000)
            assert status is RunStatus.DONE, f"restart after {name}: {status.name} " \
                f"(STATUS={h.read_csr('STATUS'):#x})"
            assert np.array_equal(h.read_dram()[:want.size], want), f"after {name}"
    if cfg == TINY:
        # every error code but UOP_RANGE: tiny's micro-op fields are exactly as wide as
        # its buffers' indices, so no micro-op can name an entry past them
        assert codes == set(ErrorCode) - {ErrorCode.NONE, ErrorCode.UOP_RANGE}
