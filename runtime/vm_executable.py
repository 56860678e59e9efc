"""The VM's instruction set and executable (what :mod:`.vm` runs and a ``.tfm`` stores).

A register machine, as the Relay VM: each function has a frame of registers, its
parameters in the first ones; an instruction is a tuple ``(opcode, operands...)``.

==================  ==============================================  ======================
opcode              operands                                        effect
==================  ==============================================  ======================
``MOVE``            dst, src                                        ``r[dst] = r[src]``
``CONST``           dst, slot                                       a constant of the model
``ALLOC_STORAGE``   dst, nbytes, pool                               a byte buffer (the
                                                                    pool's arena when
                                                                    planned)
``ALLOC_TENSOR``    dst, storage, offset, dtype, shape              a view of a storage
``INVOKE``          dst, kernel, attrs, args...                     a CPU kernel
``INVOKE_INTO``     out, kernel, attrs, args...                     a CPU kernel whose
                                                                    result is written
                                                                    into tensor ``out``
``INVOKE_ACCEL``    dst, node, args...                              an accelerator program
                                                                    (a future in ``dst``)
``SHAPE_FUNC``      dst, kernel, attrs, args...                     the output shape of a
                                                                    kernel on ``args``
``IF``              cond, then_pc, else_pc                          branch on a scalar
``GOTO``            pc                                              jump
``CALL``            dst, function, args...                          a new frame
``RET``             src                                             return from the frame
``TUPLE``           dst, args...                                    pack
``GET_ITEM``        dst, src, index                                 unpack
``KILL``            reg                                             drop a value after its
                                                                    last use
==================  ==============================================  ======================

``kernel`` names a CPU kernel (:data:`~.kernels.KERNELS`); ``attrs`` indexes the
executable's attribute table; ``node`` is the ``accel.program`` node of the model whose
program runs (decoded once by the :class:`~.loaded_model.LoadedModel`). A read of a
register holding a future waits for it (the accelerator runs meanwhile).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfab.isa import TensorfabError

from .arena_plan import ArenaPlan

__all__ = ["Executable", "ExecutableFormatError", "Op", "VMFunction"]


class ExecutableFormatError(TensorfabError):
    """A VM executable that is malformed (names the function, pc and what is wrong)."""


class Op(enum.IntEnum):
    """The opcodes (see the module docstring)."""

    MOVE = 0
    CONST = 1
    ALLOC_STORAGE = 2
    ALLOC_TENSOR = 3
    INVOKE = 4
    INVOKE_ACCEL = 5
    SHAPE_FUNC = 6
    IF = 7
    GOTO = 8
    CALL = 9
    RET = 10
    TUPLE = 11
    GET_ITEM = 12
    KILL = 13
    INVOKE_INTO = 14


#: Operands before the variable-length argument list, per opcode (None: fixed length).
_FIXED = {Op.MOVE: 2, Op.CONST: 2, Op.ALLOC_STORAGE: 3, Op.ALLOC_TENSOR: 5, Op.INVOKE: 3,
          Op.INVOKE_ACCEL: 2, Op.SHAPE_FUNC: 3, Op.IF: 3, Op.GOTO: 1, Op.CALL: 2, Op.RET: 1,
          Op.TUPLE: 1, Op.GET_ITEM: 3, Op.KILL: 1, Op.INVOKE_INTO: 3}
_VARIADIC = {Op.INVOKE, Op.INVOKE_ACCEL, Op.SHAPE_FUNC, Op.CALL, Op.TUPLE, Op.INVOKE_INTO}


@dataclass
class VMFunction:
    """One function: its name, parameter count, register count and code."""

    name: str
    num_params: int
    num_registers: int
    code: list[tuple[Any, ...]]


@dataclass
class Executable:
    """Functions (``main`` first), the attribute table and the storage pools.

    Attributes
    ----------
    functions : list of VMFunction
        ``functions[0]`` is the entry point; its parameters are the model's inputs.
    attrs : list of dict
        Attribute sets that ``INVOKE`` and ``SHAPE_FUNC`` index.
    pools : dict[str, int]
        Bytes of each statically planned arena (empty for a dynamic executable); the
        VM allocates them once when it is made.
    memory_plan : dict
        The static plan's figures by pool (:meth:`~.arena_plan.ArenaPlan.to_json`:
        offsets, peak, naive sum, lower bound, method), as data.
    nodes : list of int
        The model node each attribute set belongs to (``nodes[a]`` for ``attrs[a]``):
        what an :class:`~.loaded_model.Instrument` is told a kernel call is. Empty in
        an executable stored before it was kept (the model's kernel nodes in order).
    """

    functions: list[VMFunction]
    attrs: list[Mapping[str, Any]] = field(default_factory=list)
    pools: dict[str, int] = field(default_factory=dict)
    memory_plan: dict[str, Any] = field(default_factory=dict)
    nodes: list[int] = field(default_factory=list)

    def device_plan(self) -> ArenaPlan | None:
        """The device activation plan stored with a static executable (None without).

        Raises
        ------
        ExecutableFormatError
            A malformed stored plan.
        """
        data = self.memory_plan.get("device")
        if data is None:
            return None
        try:
            return ArenaPlan.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ExecutableFormatError(f"malformed device memory plan: {e!r}") from None

    def validate(self) -> None:
        """Raise :class:`ExecutableFormatError` on an unknown opcode, a wrong operand
        count, a register outside the frame, a jump or call outside the code, a node
        table of another length than the attribute table."""
        if self.nodes and len(self.nodes) != len(self.attrs):
            raise ExecutableFormatError(f"{len(self.nodes)} nodes for {len(self.attrs)} "
                                        "attribute sets")
        for f in self.functions:
            for pc, ins in enumerate(f.code):
                where = f"function {f.name!r} pc {pc}"
                try:
                    op = Op(ins[0])
                except (ValueError, IndexError):
                    raise ExecutableFormatError(f"{where}: unknown opcode {ins[:1]}") from None
                n = _FIXED[op]
                if len(ins) - 1 < n or (op not in _VARIADIC and len(ins) - 1 != n):
                    raise ExecutableFormatError(f"{where}: {op.name} takes "
                                                f"{n}{'+' if op in _VARIADIC else ''} "
                                                f"operands, got {len(ins) - 1}")
                targets = {Op.IF: ins[2:4], Op.GOTO: ins[1:2]}.get(op, ())
                if any(not 0 <= t < len(f.code) for t in targets):
                    raise ExecutableFormatError(f"{where}: jump outside the code")
                if op == Op.CALL and not 0 <= ins[2] < len(self.functions):
                    raise ExecutableFormatError(f"{where}: call of function {ins[2]}")
                if op in (Op.INVOKE, Op.SHAPE_FUNC, Op.INVOKE_INTO) and \
                        not 0 <= ins[3] < len(self.attrs):
                    raise ExecutableFormatError(f"{where}: attribute set {ins[3]}")
                regs = [r for r in _registers(op, ins) if not 0 <= r < f.num_registers]
                if regs:
                    raise ExecutableFormatError(f"{where}: register {regs[0]} outside the "
                                                f"frame of {f.num_registers}")

    def to_json(self) -> dict[str, Any]:
        """The executable as JSON-ready data (stored in a ``.tfm``)."""
        return {"functions": [{"name": f.name, "num_params": f.num_params,
                               "num_registers": f.num_registers,
                               "code": [[Op(i[0]).name, *i[1:]] for i in f.code]}
                              for f in self.functions],
                "attrs": [dict(a) for a in self.attrs], "pools": dict(self.pools),
                "memory_plan": self.memory_plan, "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Executable:
        """Read :meth:`to_json`'s data (validated).

        Raises
        ------
        ExecutableFormatError
            Malformed data.
        """
        try:
            functions = [VMFunction(f["name"], int(f["num_params"]), int(f["num_registers"]),
                                    [(Op[i[0]], *(_tuple(x) for x in i[1:]))
                                     for i in f["code"]])
                         for f in data["functions"]]
            exe = cls(functions, [{k: _tuple(v) for k, v in a.items()} for a in data["attrs"]],
                      {str(k): int(v) for k, v in data.get("pools", {}).items()},
                      dict(data.get("memory_plan", {})),
                      [int(k) for k in data.get("nodes", [])])
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ExecutableFormatError(f"malformed VM executable: {e!r}") from None
        exe.validate()
        return exe


def _tuple(v: Any) -> Any:
    """JSON lists back to tuples."""
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def _registers(op: Op, ins: tuple[Any, ...]) -> list[int]:
    """The register operands of an instruction."""
    if op in (Op.MOVE,):
        return [ins[1], ins[2]]
    if op in (Op.CONST, Op.ALLOC_STORAGE, Op.KILL, Op.RET):
        return [ins[1]]
    if op == Op.ALLOC_TENSOR:
        return [ins[1], ins[2]] + ([ins[5]] if isinstance(ins[5], int) else [])
    if op in (Op.INVOKE, Op.SHAPE_FUNC, Op.INVOKE_INTO):
        return [ins[1], *ins[4:]]
    if op in (Op.INVOKE_ACCEL, Op.CALL):
        return [ins[1], *ins[3:]]
    if op == Op.TUPLE:
        return [ins[1], *ins[2:]]
    if op == Op.GET_ITEM:
        return [ins[1], ins[2]]
    if op == Op.IF:
        return [ins[1]]
    return []
