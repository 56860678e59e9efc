"""The VM's reading of an executable before it runs: each function's code with opcodes
as plain ints and ``INVOKE``, ``INVOKE_INTO`` and ``INVOKE_ACCEL`` pre-decoded with
what the code tells statically (the kernel function, whether an argument may be a
future or in device memory, whether a program's result is read by the host, whether
the host has work to overlap it), so that the run loop (:mod:`.vm`) builds nothing per
call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tensorfab.isa import TensorfabError

from .accel_contract import ACCEL_PROGRAM
from .graph_program import GraphProgram
from .vm_executable import Executable, Op

__all__ = ["VMError", "decode_function", "kernel_nodes"]

(_MOVE, _CONST, _ALLOC_STORAGE, _ALLOC_TENSOR, _INVOKE, _INVOKE_ACCEL, _SHAPE_FUNC, _IF,
 _GOTO, _CALL, _RET, _TUPLE, _GET_ITEM, _KILL, _INVOKE_INTO) = (int(op) for op in Op)


class VMError(TensorfabError):
    """A run the VM cannot go on with (names the function, pc and what is wrong)."""


def kernel_nodes(program: GraphProgram, count: int) -> list[int]:
    """The node of each of ``count`` attribute sets of an executable stored without its
    node table: the program's kernel nodes in order, as the builder made them (-1 each
    when the counts differ)."""
    nodes = [k for k, n in enumerate(program.nodes)
             if n.op not in (ACCEL_PROGRAM, "tuple", "tuple_get_item")]
    return nodes if len(nodes) == count else [-1] * count


def decode_function(name: str, code: list[tuple[Any, ...]], executable: Executable,
            nodes: list[int], entry: bool,
            kernels: Mapping[str, Callable[..., Any]]) -> list[tuple[Any, ...]]:
    """A function's code with opcodes as plain ints (comparing enum members costs more
    than the dispatch) and each ``INVOKE``/``INVOKE_INTO`` pre-decoded to ``(op, dst,
    kernel, attrs, arg registers, kernel function, resolve, symbolic reshape, node)``:
    ``resolve`` is whether an argument register may hold a future or a value in device
    memory (written by ``INVOKE_ACCEL``, ``CALL``, ``GET_ITEM``, ``TUPLE`` or ``MOVE``
    of such, or a parameter of a function other than ``main``, whose inputs are host
    arrays); the others read host arrays only and skip the check."""
    maybe_remote: set[int] = set()
    if not entry:
        maybe_remote.update(range(max((r for i in code for r in _dst(i)), default=-1) + 1))
    grown = True
    while grown:  # to a fixed point: a loop may copy a register written further down
        before = len(maybe_remote)
        for ins in code:
            op = int(ins[0])
            if op in (_INVOKE_ACCEL, _CALL, _TUPLE) or (
                    op in (_GET_ITEM, _MOVE) and ins[2] in maybe_remote):
                maybe_remote.add(ins[1])
        grown = len(maybe_remote) > before
    # accelerator outputs a host instruction reads (all but another program and
    # SHAPE_FUNC, which reads the shape only)
    host_read = {r for ins in code if int(ins[0]) not in (_INVOKE_ACCEL, _SHAPE_FUNC)
                 for r in _reads(ins)}
    jumps = any(int(ins[0]) in (_IF, _GOTO, _CALL) for ins in code)
    out = []
    for pc, ins in enumerate(code):
        op = int(ins[0])
        if op == _INVOKE_ACCEL:
            out.append((op, ins[1], ins[2], tuple(ins[3:]), ins[1] in host_read,
                        not jumps and _read_before_host_work(code, pc)))
        elif op in (_INVOKE, _INVOKE_INTO):
            if ins[2] not in kernels:
                raise VMError(f"function {name!r} pc {pc}: no CPU kernel {ins[2]!r}")
            attrs = executable.attrs[ins[3]]
            shape = attrs.get("newshape") if ins[2] == "reshape" else None
            out.append((op, ins[1], ins[2], attrs, tuple(ins[4:]), kernels[ins[2]],
                        any(r in maybe_remote for r in ins[4:]),
                        bool(shape) and any(isinstance(d, str) for d in shape),
                        nodes[ins[3]]))
        else:
            out.append((op, *ins[1:]))
    return out


def _read_before_host_work(code: list[tuple[Any, ...]], pc: int) -> bool:
    """Whether the ``INVOKE_ACCEL`` at ``pc`` has its result (or a later program's
    made from it) read before the host has a CPU kernel to run that does not read it:
    then nothing would overlap it."""
    waits = {code[pc][1]}  # its result and what is made from it without the host
    for ins in code[pc + 1:]:
        op = int(ins[0])
        if op in (_INVOKE, _INVOKE_INTO, _SHAPE_FUNC, _GET_ITEM, _RET, _IF):
            return not waits.isdisjoint(_reads(ins))
        if op in (_INVOKE_ACCEL, _MOVE, _TUPLE) and not waits.isdisjoint(_reads(ins)):
            waits.add(ins[1])
    return True


def _reads(ins: tuple[Any, ...]) -> tuple[int, ...]:
    """The registers an instruction reads."""
    op = int(ins[0])
    if op in (_INVOKE, _INVOKE_INTO, _SHAPE_FUNC):
        return tuple(ins[4:])
    if op in (_INVOKE_ACCEL, _CALL):
        return tuple(ins[3:])
    if op == _TUPLE:
        return tuple(ins[2:])
    if op in (_MOVE, _GET_ITEM):
        return (ins[2],)
    if op in (_RET, _IF):
        return (ins[1],)
    if op == _ALLOC_TENSOR:
        return (ins[2],) + ((ins[5],) if isinstance(ins[5], int) else ())
    return ()


def _dst(ins: tuple[Any, ...]) -> tuple[int, ...]:
    """The register an instruction writes (none for a jump, ``KILL`` or ``RET``)."""
    return () if int(ins[0]) in (_IF, _GOTO, _KILL, _RET) else (ins[1],)
