"""The accelerator-program contract: the one declaration of the ``accel.program`` op.

An ``accel.program`` node runs a compiled accelerator program. Its argument 0 is written
to the program's input segment, argument 1 is the program itself (its TFABPROG bytes as
a uint8 vector, :meth:`tensorfab.isa.Program.to_bytes`), an optional argument 2 is
written to ``extra_input_segment`` (a residual add's second operand); the result is the
output segment. The compiler registers the op from :data:`ACCEL_PROGRAM_ATTRS` (its
type rule and defaults) and builds the calls with :data:`ACCEL_PROGRAM`; the runtime's
kernel table, the loaded model, the memory plan, the ``.tfm`` reader and the listings
decode the bytes with :func:`decode_program`. The runtime sits below the compiler in
the import order, so both import this module.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorfab.isa import Program

__all__ = ["ACCEL_PROGRAM", "ACCEL_PROGRAM_ARGS", "ACCEL_PROGRAM_ATTRS", "ACCEL_PROGRAM_DOC",
           "AccelAttr", "accel_nodes", "decode_program", "program_blob"]

#: The op name of an accelerator-program call.
ACCEL_PROGRAM = "accel.program"

#: Its argument count: the input and the program's bytes, and optionally a second input.
ACCEL_PROGRAM_ARGS = (2, 3)


@dataclass(frozen=True)
class AccelAttr:
    """One attribute of ``accel.program``: its name, its default (unused when
    ``required``) and what it means."""

    name: str
    default: Any
    required: bool
    doc: str


#: Every attribute an ``accel.program`` node carries (defaults filled in by the compiler).
ACCEL_PROGRAM_ATTRS: tuple[AccelAttr, ...] = (
    AccelAttr("out_shape", None, True, "shape of the result (the output segment's)"),
    AccelAttr("input_segment", "inp", False, "segment argument 0 is written to"),
    AccelAttr("output_segment", "out", False, "segment the result is read from"),
    AccelAttr("executor", "fsim", False,
              "target the node runs on when no loaded model gives a device"),
    AccelAttr("layer", "", False, "a label for profiles"),
    AccelAttr("estimated_cycles", 0, False, "the timing model's estimate, 0 if unknown"),
    AccelAttr("macs", -1, False,
              "the model's own multiply-accumulates in the layer, without channel padding "
              "or a residual add's identity GEMM, -1 if unknown"),
    AccelAttr("extra_input_segment", "", False,
              "segment argument 2 is written to (a residual add's second operand or a "
              "fused residual)"),
)

#: The op's one-line description (the compiler's registry shows it).
ACCEL_PROGRAM_DOC = (
    "run a compiled accelerator program (argument 1: its TFABPROG bytes) on argument 0, "
    "written to its input segment, and an optional argument 2 written to "
    "extra_input_segment (a residual add's or a fused residual's second operand); the "
    "result is its output segment (layer: a label for profiles; estimated_cycles: the "
    "timing model's estimate; macs: the model's own multiply-accumulates in the layer, "
    "without channel padding or a residual add's identity GEMM, -1 if unknown)")


@functools.lru_cache(maxsize=64)
def _decode(blob: bytes) -> Program:
    return Program.from_bytes(blob, ACCEL_PROGRAM)


def decode_program(blob: np.ndarray) -> Program:
    """The :class:`~tensorfab.isa.Program` of an ``accel.program`` node's byte constant.

    Parameters
    ----------
    blob : numpy.ndarray
        The node's argument 1 (uint8 TFABPROG bytes).

    Raises
    ------
    tensorfab.isa.BinaryFormatError
        Bytes that are not a program.
    """
    return _decode(np.ascontiguousarray(blob, np.uint8).tobytes())


def program_blob(program: Any, index: int) -> np.ndarray:
    """The program bytes of node ``index`` of a
    :class:`~tensorfab.runtime.interpreter.GraphProgram` (its argument-1 constant)."""
    return program.constants[program.nodes[index].inputs[1]]


def accel_nodes(program: Any) -> Iterator[tuple[int, Any]]:
    """``(index, node)`` of every ``accel.program`` node of a
    :class:`~tensorfab.runtime.interpreter.GraphProgram`, in order."""
    return ((k, n) for k, n in enumerate(program.nodes) if n.op == ACCEL_PROGRAM)
