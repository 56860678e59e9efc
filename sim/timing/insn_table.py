"""Instructions as one flat integer table, what the timing model's compiled code reads.

One row per instruction: its opcode, its four token flags and the fields the model
needs, at positions named by the column constants below (the columns after
:data:`FLAGS` mean different fields per opcode). Made in one pass of ``operator``
attribute getters over the instruction objects, so a program of tens of instructions
costs microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from tensorfab.isa import Alu, Finish, Gemm, Insn, Load, Store
from tensorfab.isa.insn import fast_reset_condition

__all__ = ["ALU_DST_FACTOR_IN", "ALU_DST_FACTOR_OUT", "ALU_OP", "ALU_SRC_FACTOR_IN",
           "ALU_SRC_FACTOR_OUT", "ALU_USE_IMM", "COLUMNS", "FAST_RESET", "ITER_IN",
           "ITER_OUT", "LOAD_BUFFER", "LOAD_DRAM", "LOAD_PAD_BOTTOM", "LOAD_PAD_LEFT",
           "LOAD_PAD_RIGHT", "LOAD_PAD_TOP", "LOAD_SRAM", "LOAD_STRIDE", "OPCODE",
           "POP_NEXT", "POP_PREV", "PUSH_NEXT", "PUSH_PREV", "UOP_BEGIN", "UOP_END", "X",
           "Y", "insn_table"]

_HEAD = ("opcode", "pop_prev", "pop_next", "push_prev", "push_next")
#: Fields of each instruction class, in column order after the head.
_FIELDS: dict[type[Insn], tuple[str, ...]] = {
    Load: ("x", "y", "buffer", "pad_top", "pad_bottom", "pad_left", "pad_right", "sram",
           "dram", "stride"),
    Store: ("x", "y"),
    Gemm: ("uop_begin", "uop_end", "iter_out", "iter_in"),
    Alu: ("uop_begin", "uop_end", "iter_out", "iter_in", "op", "use_imm", "dst_factor_out",
          "dst_factor_in", "src_factor_out", "src_factor_in"),
    Finish: (),
}
#: Columns of the table: the fields, then :data:`FAST_RESET`.
COLUMNS = len(_HEAD) + max(len(f) for f in _FIELDS.values()) + 1
OPCODE, POP_PREV, POP_NEXT, PUSH_PREV, PUSH_NEXT = range(len(_HEAD))


def _column(name: str, *classes: type[Insn]) -> int:
    """The column of field ``name``, the same in each of ``classes``."""
    (k,) = {len(_HEAD) + _FIELDS[cls].index(name) for cls in classes}
    return k


# LOAD and STORE
X, Y = _column("x", Load, Store), _column("y", Load, Store)
LOAD_BUFFER, LOAD_PAD_TOP, LOAD_PAD_BOTTOM, LOAD_PAD_LEFT, LOAD_PAD_RIGHT, LOAD_SRAM, \
    LOAD_DRAM, LOAD_STRIDE = (_column(f, Load) for f in (
        "buffer", "pad_top", "pad_bottom", "pad_left", "pad_right", "sram", "dram", "stride"))
# GEMM and ALU
UOP_BEGIN, UOP_END, ITER_OUT, ITER_IN = (_column(f, Gemm, Alu) for f in (
    "uop_begin", "uop_end", "iter_out", "iter_in"))
ALU_OP, ALU_USE_IMM, ALU_DST_FACTOR_OUT, ALU_DST_FACTOR_IN, ALU_SRC_FACTOR_OUT, \
    ALU_SRC_FACTOR_IN = (_column(f, Alu) for f in (
        "op", "use_imm", "dst_factor_out", "dst_factor_in", "src_factor_out",
        "src_factor_in"))
#: 1 for a GEMM the compute engine runs as a fast reset
#: (:func:`~tensorfab.isa.insn.fast_reset_condition`), else 0.
FAST_RESET = COLUMNS - 1


# each class's getter returns a full row: unused columns (and FAST_RESET, filled after)
# repeat a flag (an int: quicker to convert than the opcode, an IntEnum)
_ROW = {cls: attrgetter(*_HEAD, *fields, *["pop_prev"] * (COLUMNS - len(_HEAD) - len(fields)))
        for cls, fields in _FIELDS.items()}


def insn_table(insns: Sequence[Insn]) -> np.ndarray:
    """The ``(len(insns), COLUMNS)`` ``int64`` table of ``insns`` (see the module
    docstring)."""
    row = _ROW
    flat = chain.from_iterable([row[type(insn)](insn) for insn in insns])
    table = np.fromiter(flat, dtype=np.int64, count=len(insns) * COLUMNS
                        ).reshape(len(insns), COLUMNS)
    table[:, FAST_RESET] = 0
    table[[k for k, insn in enumerate(insns)
           if type(insn) is Gemm and insn.reset and fast_reset_condition(insn)],
          FAST_RESET] = 1
    return table
