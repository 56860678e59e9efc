"""The accelerator-program contract declared once (runtime/accel_contract.py): the
compiler's op registry and the runtime's kernel table agree on it and on every op."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.graph.ops import OPS, REQUIRED
from tensorfab.isa import BinaryFormatError
from tensorfab.runtime.accel_contract import (
    ACCEL_PROGRAM,
    ACCEL_PROGRAM_ARGS,
    ACCEL_PROGRAM_ATTRS,
    decode_program,
)
from tensorfab.runtime.kernels import KERNELS


def test_compiler_registry_and_runtime_kernels_name_the_same_ops() -> None:
    assert set(OPS) == set(KERNELS), (sorted(set(OPS) - set(KERNELS)),
                                      sorted(set(KERNELS) - set(OPS)))


def test_compiler_registers_accel_program_from_the_contract() -> None:
    op = OPS[ACCEL_PROGRAM]
    assert op.num_args == ACCEL_PROGRAM_ARGS
    want = {a.name: REQUIRED if a.required else a.default for a in ACCEL_PROGRAM_ATTRS}
    assert dict(op.attrs) == want
    assert ACCEL_PROGRAM in KERNELS


def test_decode_program_rejects_bytes_that_are_not_a_program() -> None:
    with pytest.raises(BinaryFormatError, match=r"accel\.program"):
        decode_program(np.frombuffer(b"not a program at all", np.uint8))


def test_no_module_spells_the_op_name_but_the_contract() -> None:
    # the string literal lives in runtime/accel_contract.py only (docstrings aside)
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for folder in ("isa", "sim", "runtime", "compiler", "tensorfab", "benches", "hil"):
        for path in (root / folder).rglob("*.py"):
            if path.name == "accel_contract.py":
                continue
            tree = ast.parse(path.read_text())
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                    and n.body and isinstance(n.body[0], ast.Expr)}
            offenders += [f"{path.relative_to(root)}:{n.lineno}" for n in ast.walk(tree)
                          if isinstance(n, ast.Constant) and n.value == ACCEL_PROGRAM
                          and id(n) not in docs]
    assert not offenders
