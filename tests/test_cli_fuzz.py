"""Fuzzing the command line's readers in-process: mutated assembly, random and mutated
binaries. Every input either works or ends in one of tensorfab's errors naming the file
(and line/column or byte offset)."""

import re

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.isa import PRESETS
from tensorfab.isa.disasm import disassemble
from tensorfab.sim.testing.input_fuzz import (
    mutate_bytes,
    mutate_header,
    mutate_text,
    random_blob,
)
from tensorfab.sim.testing.random_program import random_program

LOCATED = re.compile(r":\d+:\d+: |byte \d+|header: |not a tensorfab program|no instructions"
                     r"|version \d+")


def _seeds():
    """Random legal programs on two configs; big segments start as zeros (no .data lines),
    so that most mutations hit instructions rather than data."""
    progs = [random_program(PRESETS[name], seed, max_steps=3) for name in ("tiny", "small")
             for seed in (1, 2, 3)]
    for p in progs:
        for i, s in enumerate(p.segments):
            if s.size > 32 and i % 2:
                s.data = None
    return [disassemble(p) for p in progs], [p.to_bytes() for p in progs]


SEED_TEXTS, SEED_BLOBS = _seeds()


def _check(capsys, argv, path):
    """Run the CLI; a failure must be exactly one error line naming the file."""
    code = main([*argv, str(path)])
    err = capsys.readouterr().err
    if code == 0:
        return True
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert str(path) in err, err
    return False


def _fuzz_bin(tmp_path, capsys, n, seed, make):
    rng = np.random.default_rng(seed)
    path = tmp_path / "m.bin"
    ok = 0
    for i in range(n):
        path.write_bytes(make(SEED_BLOBS[i % len(SEED_BLOBS)], rng))
        code = main(["disasm", str(path)])
        err = capsys.readouterr().err
        if code == 0:
            ok += 1
            continue
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert str(path) in err and LOCATED.search(err), err
    return ok


def _asm_errors_located(tmp_path, capsys, n, seed):
    """Like _fuzz_asm but also asserts the line/column of every assembly error."""
    rng = np.random.default_rng(seed)
    src, out = tmp_path / "m.s", tmp_path / "m.bin"
    ok = 0
    for i in range(n):
        src.write_bytes(mutate_text(SEED_TEXTS[i % len(SEED_TEXTS)], rng))
        code = main(["asm", "--force", "-o", str(out), str(src)])
        err = capsys.readouterr().err
        if code == 0:
            ok += 1
            assert main(["disasm", str(out)]) == 0
            capsys.readouterr()
            continue
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert f"{src}:" in err and LOCATED.search(err), err
    return ok


def test_fuzz_mutated_assembly(tmp_path, capsys):
    ok = _asm_errors_located(tmp_path, capsys, 2000, seed=10)
    assert 0 < ok < 2000  # both paths taken


def test_fuzz_random_binaries(tmp_path, capsys):
    _fuzz_bin(tmp_path, capsys, 2000, 11, lambda _, rng: random_blob(rng))


def test_fuzz_mutated_binaries(tmp_path, capsys):
    ok = _fuzz_bin(tmp_path, capsys, 2000, 12, mutate_bytes)
    assert ok > 0


def test_fuzz_mutated_binary_headers(tmp_path, capsys):
    _fuzz_bin(tmp_path, capsys, 1000, 13, mutate_header)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 25))
def test_fuzz_long(tmp_path, capsys, seed):
    _asm_errors_located(tmp_path, capsys, 20000, seed)
    _fuzz_bin(tmp_path, capsys, 20000, seed, mutate_bytes)
    _fuzz_bin(tmp_path, capsys, 20000, seed, mutate_header)
