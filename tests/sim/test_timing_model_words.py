"""The timing model read from a program's encoded words: the words the ``Program``
keeps, the table and micro-op indices decoded from them against the instruction
objects, the ALU interlock's micro-ops against a reading of the DRAM image, and the
compiled code's cache keyed by the files it calls into."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
    Uop,
    decode_uop,
    encode_insn,
    encode_uop,
    uop_format,
)
from tensorfab.isa.insn import fast_reset_condition
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import insn_table as col
from tensorfab.sim.timing import program_timing
from tensorfab.sim.timing.alu_interlock import alu_interlock_cycles, interlock_stalls
from tensorfab.sim.timing.insn_table import insn_table, uop_indices, word_fields, word_table

PRESET_NAMES = ("tiny", "small", "default")
SEEDS = range(6)


def _used_columns(insn: object) -> list[int]:
    """The table columns that hold a field of ``insn``'s class, and FAST_RESET."""
    return [*range(len(col._HEAD) + len(col._FIELDS[type(insn)])), col.FAST_RESET]


def _timing_lists(p: Program) -> list:
    t = program_timing(p)
    return [t.cycles, t.busy, t.stall, t.start, t.end]


def test_program_keeps_the_encoders_words_until_it_changes() -> None:
    p = random_program(PRESETS["small"], 3)
    assert p.kept_encoded() is None
    words = p.encoded()
    nb = p.insn_bytes
    want = b"".join(encode_insn(insn, p.config, i).to_bytes(nb, "little")
                    for i, insn in enumerate(p.insns))
    assert words.insns.tobytes() == want and words.insns.shape == (len(p.insns), nb)
    ub = uop_format(p.config).bytes
    assert words.uops.tobytes() == b"".join(encode_uop(u, p.config).to_bytes(ub, "little")
                                            for u in p.uops)
    assert words.uop_offset == p.uop_offset
    assert p.kept_encoded() is words and p.encoded() is words
    assert not words.insns.flags.writeable
    assert p.encode_insns().tobytes() == want  # from the kept words
    p.insns[0] = dataclasses.replace(p.insns[0], push_next=not p.insns[0].push_next)
    assert p.kept_encoded() is None  # an edit in place is seen
    assert p.encoded().insns.tobytes() != want
    p.uops.append(Uop(1, 2, 3))
    assert p.kept_encoded() is None
    p.encoded()
    p.placement = {"insns": 0, "uops": 4096, **{s.name: 8192 * (k + 1)
                                                for k, s in enumerate(p.segments)}}
    assert p.kept_encoded() is None
    assert dataclasses.replace(p).kept_encoded() is None  # a copy starts without


def _assert_same_table(p: Program) -> int:
    """The table and micro-op indices decoded from ``p``'s words equal those of its
    instruction objects; returns the fast resets among them."""
    wf = word_fields(p.config)
    insns = [i for i in p.insns if type(i) is not Finish]
    want = insn_table(insns)
    got = word_table(p.encoded().insns, wf)
    assert got.shape == want.shape
    for r, insn in enumerate(insns):
        cols = _used_columns(insn)
        assert list(got[r, cols]) == list(want[r, cols]), (r, insn)
    acc, src = uop_indices(p.encoded().uops, wf)
    assert list(acc) == [u.acc for u in p.uops] and list(src) == [u.src for u in p.uops]
    return int(got[:, col.FAST_RESET].sum())


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_words_decode_to_the_table_of_the_instruction_objects(preset: str) -> None:
    for seed in SEEDS:
        _assert_same_table(random_program(PRESETS[preset], seed))


def test_a_compiled_layers_words_decode_to_its_table_fast_reset_included() -> None:
    from tensorfab.compiler.tensor import DENSE_LAYERS
    from tensorfab.compiler.tensor.operators import compile_workload

    program = compile_workload(DENSE_LAYERS["fc1000"], PRESETS["default"]).program
    assert _assert_same_table(program) == 1


def test_fast_reset_terms_traced_from_the_isa_decide_as_the_isa() -> None:
    cfg = PRESETS["default"]
    base = Gemm(reset=True, uop_begin=5, uop_end=6, iter_out=2, iter_in=3, acc_factor_in=1)
    variants = [base, dataclasses.replace(base, reset=False),
                dataclasses.replace(base, uop_end=7), dataclasses.replace(base, uop_begin=4),
                dataclasses.replace(base, acc_factor_in=2),
                dataclasses.replace(base, acc_factor_out=9),
                dataclasses.replace(base, inp_factor_out=1),
                dataclasses.replace(base, inp_factor_in=1),
                dataclasses.replace(base, wgt_factor_out=1),
                dataclasses.replace(base, wgt_factor_in=1)]
    words = np.frombuffer(b"".join(encode_insn(g, cfg).to_bytes(16, "little")
                                   for g in variants), dtype=np.uint8).reshape(-1, 16)
    got = word_table(words, word_fields(cfg))[:, col.FAST_RESET]
    assert list(got) == [int(bool(fast_reset_condition(g))) for g in variants]
    assert list(got) == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0]


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_encoded_and_unencoded_programs_time_alike(preset: str) -> None:
    for seed in SEEDS:
        p = random_program(PRESETS[preset], seed)
        from_objects = _timing_lists(p)  # never encoded: the table from the Insn objects
        p.encoded()
        assert _timing_lists(p) == from_objects, seed


def _reference_interlock(p: Program) -> list[float]:
    """Each instruction's interlock cycles from a dict of the micro-op buffer, filled
    by the UOP loads from the DRAM image (decoded by the ISA), and
    :func:`interlock_stalls` of each ALU instruction's micro-op sequence."""
    cfg = p.config
    eb = uop_format(cfg).bytes
    image = p.dram_image()
    on_chip: dict[int, tuple[int, int]] = {}
    out = []
    for insn in p.insns:
        out.append(0.0)
        if isinstance(insn, Load) and insn.buffer is Buffer.UOP:
            for r in range(insn.y):
                for c in range(insn.x):
                    entry = insn.sram + r * insn.x + c
                    a = (insn.dram + r * insn.stride + c) * eb
                    raw = image[a:a + eb]
                    u = decode_uop(int.from_bytes(raw.tobytes(), "little"), cfg)
                    if entry < cfg.uop_depth:
                        on_chip[entry] = (u.acc, u.src) if raw.size == eb else (0, 0)
        elif isinstance(insn, Alu):
            dst, src = [], []
            mask = cfg.acc_depth - 1
            for i in range(insn.iter_out):
                for j in range(insn.iter_in):
                    for e in range(insn.uop_begin, min(insn.uop_end, cfg.uop_depth)):
                        a, s = on_chip.get(e, (0, 0))
                        dst.append((a + i * insn.dst_factor_out + j * insn.dst_factor_in) & mask)
                        src.append((s + i * insn.src_factor_out + j * insn.src_factor_in) & mask)
            reads = not insn.use_imm and insn.op is not AluOp.REQUANT
            out[-1] = float(interlock_stalls(np.array(dst), np.array(src) if reads else None))
    return out


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_interlock_reads_the_micro_ops_the_uop_loads_put_on_chip(preset: str) -> None:
    held = 0.0
    for seed in SEEDS:
        p = random_program(PRESETS[preset], seed)
        want = _reference_interlock(p)
        assert alu_interlock_cycles(p) == want, seed
        held += sum(want)
    assert held > 0  # some ALU micro-ops were held


def test_interlock_micro_ops_outside_the_table_come_from_the_dram_image() -> None:
    p = random_program(PRESETS["small"], 0)
    # a UOP load that reads past the micro-op table (into the segments), before an ALU
    loads = [k for k, i in enumerate(p.insns)
             if isinstance(i, Load) and i.buffer is Buffer.UOP]
    k = loads[0]
    p.insns[k] = dataclasses.replace(p.insns[k], dram=p.insns[k].dram + len(p.uops))
    want = _reference_interlock(p)
    assert alu_interlock_cycles(p) == want
    fresh = _timing_lists(p)
    p.encoded()
    assert _timing_lists(p) == fresh  # the words' path falls back to the image too


_CALLEE = """
from tensorfab.sim.timing.compiled import compiled

@compiled
def callee(x):
    return x + {value}
"""

_CALLER = """
import callee
from tensorfab.sim.timing.compiled import compiled

@compiled(uses=(callee,))
def caller(x):
    return callee.callee(x) * 10

print(caller(1))
"""


def test_a_cached_function_is_recompiled_when_a_file_it_calls_into_changes(
        tmp_path: Path) -> None:
    (tmp_path / "caller.py").write_text(textwrap.dedent(_CALLER))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path / "nb"))
    env.pop("NUMBA_DISABLE_JIT", None)
    out = []
    for value in (1, 2):
        (tmp_path / "callee.py").write_text(textwrap.dedent(_CALLEE.format(value=value)))
        time.sleep(0.01)  # a later modification time
        run = subprocess.run([sys.executable, str(tmp_path / "caller.py")], env=env,
                             capture_output=True, text=True, timeout=300, check=True)
        out.append(int(run.stdout.strip()))
    assert out == [20, 30]
    assert list((tmp_path / "nb").rglob("*.nbi"))  # it was cached
