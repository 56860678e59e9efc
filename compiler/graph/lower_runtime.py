"""Lowering of a graph-IR function to the runtime's :class:`GraphProgram`, and
:func:`evaluate`, which runs a function on the CPU interpreter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorfab.runtime.interpreter import GraphProgram, InputSpec, Node, run_program

from .device import VirtualDevice
from .infer import infer_types
from .ir import (
    Call,
    Constant,
    Function,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    free_variable_error,
    post_order,
)
from .types import GraphError, TensorType


def lower_to_runtime(fn: Function, constant_slots: dict[int, int] | None = None
                     ) -> GraphProgram:
    """The :class:`~tensorfab.runtime.interpreter.GraphProgram` computing ``fn``.

    A let-bound variable shares its value's slot; device annotations lower to identity
    kernels (on the CPU a copy moves nothing), layout transforms to their kernel.
    ``constant_slots``, if given, receives each constant's slot by ``id`` of its
    :class:`Constant` (the ``.tfm`` text form names constants by slot).

    Raises
    ------
    GraphError
        For a nested function (the interpreter runs first-order programs) or a parameter
        that is not a tensor.
    """
    infer_types(fn)
    slot_of: dict[int, int] = {}
    inputs: list[InputSpec] = []
    constants: dict[int, np.ndarray] = {}
    nodes: list[Node] = []
    count = 0

    def new_slot(key: int) -> int:
        nonlocal count
        slot_of[key] = count
        count += 1
        return slot_of[key]

    for p in fn.params:
        t = p.checked_type
        if not isinstance(t, TensorType):
            raise GraphError(f"parameter %{p.name} has type {t}; the interpreter takes "
                             "tensors")
        inputs.append(InputSpec(p.name, new_slot(id(p)), t.shape, t.dtype))
    all_nodes = list(post_order(fn.body))
    let_value = {id(e.var): e.value for e in all_nodes if isinstance(e, Let)}
    for e in all_nodes:
        if id(e) in slot_of:
            continue
        if isinstance(e, Constant):
            constants[new_slot(id(e))] = e.data
            if constant_slots is not None:
                constant_slots[id(e)] = slot_of[id(e)]
        elif isinstance(e, Call):
            args = tuple(slot_of[id(a)] for a in e.args)
            nodes.append(Node(e.op, args, _plain_attrs(e.attrs), new_slot(id(e)), e.name))
        elif isinstance(e, Tuple):
            args = tuple(slot_of[id(f)] for f in e.fields)
            nodes.append(Node("tuple", args, {}, new_slot(id(e))))
        elif isinstance(e, TupleGetItem):
            nodes.append(Node("tuple_get_item", (slot_of[id(e.tuple_value)],),
                              {"index": e.index}, new_slot(id(e))))
        elif isinstance(e, Let):
            slot_of[id(e)] = slot_of[id(e.body)]
        elif isinstance(e, Var):
            if id(e) not in let_value:
                raise free_variable_error(e)
            slot_of[id(e)] = slot_of[id(let_value[id(e)])]
        elif isinstance(e, Function):
            raise GraphError("a nested function cannot be lowered to the interpreter")
    program = GraphProgram(inputs, constants, nodes, slot_of[id(fn.body)], count,
                           _value_types(all_nodes, slot_of))
    program.validate()
    return program


def _value_types(exprs: list[Any], slot_of: dict[int, int]
                 ) -> dict[int, tuple[tuple[int, ...], str]]:
    """Shape and dtype of each call's value with a tensor type of fixed dims, by slot."""
    out: dict[int, tuple[tuple[int, ...], str]] = {}
    for e in exprs:
        t = getattr(e, "checked_type", None) if isinstance(e, Call) else None
        if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
            out[slot_of[id(e)]] = (tuple(int(d) for d in t.shape), t.dtype)
    return out


def _plain_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as plain data for the runtime (virtual devices as their text)."""
    def plain(v: Any) -> Any:
        if isinstance(v, VirtualDevice):
            return str(v)
        if isinstance(v, tuple):
            return tuple(plain(x) for x in v)
        return v
    return {k: plain(v) for k, v in attrs.items()}


def evaluate(fn: Function, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> Any:
    """Run ``fn`` on the CPU interpreter (inputs by parameter name or in order)."""
    return run_program(lower_to_runtime(fn), inputs)
