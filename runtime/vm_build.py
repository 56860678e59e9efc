"""A :class:`~.interpreter.GraphProgram` as a VM :class:`~.vm_executable.Executable`.

One function, ``main``: its parameters are the model's inputs (registers 0..n-1), each
constant is loaded once (``CONST``), each node becomes an ``INVOKE`` (a CPU kernel),
an ``INVOKE_ACCEL`` (an ``accel.program`` node) or a ``TUPLE``/``GET_ITEM``, and every
value is dropped (``KILL``) after its last use. With a host plan, a reshape placed over
its input (:data:`~.static_plan.VIEW_OPS`) is only its output's view of the arena.
Nodes keep the program's order, or the order given
(:func:`~.overlap_order.overlap_order`, what a ``.tfm`` stores: independent host nodes
moved up beside an accelerator program in flight, for the futures); a resident model's
device-memory plan holds in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .accel_contract import ACCEL_PROGRAM
from .graph_program import GraphProgram
from .memory_plan import MemoryPlanError, plan_memory
from .static_plan import VIEW_OPS, HostPlan
from .vm_executable import Executable, Op, VMFunction

__all__ = ["build_executable"]


def build_executable(program: GraphProgram, plan: HostPlan | None = None,
                     order: Sequence[int] | None = None) -> Executable:
    """The VM executable running ``program`` (see the module docstring).

    With a host memory ``plan`` (:func:`~.static_plan.plan_host_arena`), every planned
    value is an ``ALLOC_TENSOR`` in the ``host`` arena, filled by ``INVOKE_INTO``; the
    executable's ``pools`` give the arena's size, so the VM allocates it once.
    ``order`` runs the nodes in another topological order (node indices, e.g.
    :func:`~.overlap_order.overlap_order`); a host plan must be made over the same order
    (``plan_host_arena(program, order=order)``), as its lifetimes follow it.
    """
    program.validate()
    steps = None if order is None else tuple(int(k) for k in order)
    if steps is not None and sorted(steps) != list(range(len(program.nodes))):
        raise ValueError(f"order is not a permutation of the {len(program.nodes)} nodes")
    identity = tuple(range(len(program.nodes)))
    if plan is not None and (plan.order or identity) != (steps or identity):
        raise ValueError("the host plan was made over another node order than the "
                         "executable's; plan with plan_host_arena(program, order=order)")
    order = range(len(program.nodes)) if steps is None else steps
    reg: dict[int, int] = {}

    def r(slot: int) -> int:
        if slot not in reg:
            reg[slot] = len(reg)
        return reg[slot]

    for spec in program.inputs:
        r(spec.slot)
    code: list[tuple[Any, ...]] = []
    arena = -1
    if plan is not None and plan.places:
        arena = len(program.inputs)
        reg[-1] = arena  # the arena's register (no slot is negative)
        code.append((Op.ALLOC_STORAGE, arena, plan.arena.peak, "host"))
    for slot in sorted(program.constants):
        if any(slot in n.inputs for n in program.nodes) or slot == program.output:
            code.append((Op.CONST, r(slot), slot))
    last_use: dict[int, int] = {}
    for k in order:
        for s in program.nodes[k].inputs:
            last_use[s] = k
    attrs: list[dict[str, Any]] = []
    nodes: list[int] = []  # the node of each attribute set
    keep = set(program.constants) | {program.output}
    for k in order:
        node = program.nodes[k]
        args = [r(s) for s in node.inputs]
        if node.op == "tuple":
            code.append((Op.TUPLE, r(node.output), *args))
        elif node.op == "tuple_get_item":
            code.append((Op.GET_ITEM, r(node.output), args[0], int(node.attrs["index"])))
        elif node.op == ACCEL_PROGRAM:
            code.append((Op.INVOKE_ACCEL, r(node.output), k, *args))
        elif plan is not None and node.output in plan.places:
            offset, shape, dtype = plan.places[node.output]
            code.append((Op.ALLOC_TENSOR, r(node.output), arena, offset, dtype, shape))
            source = plan.places.get(node.inputs[0]) if node.inputs else None
            over_input = source is not None and (source[0], source[2]) == (offset, dtype)
            if not (node.op in VIEW_OPS and over_input):
                attrs.append(dict(node.attrs))
                nodes.append(k)
                code.append((Op.INVOKE_INTO, r(node.output), node.op, len(attrs) - 1,
                             *args))
            # else placed over its input: the output's view is the result, no kernel
        else:
            attrs.append(dict(node.attrs))
            nodes.append(k)
            code.append((Op.INVOKE, r(node.output), node.op, len(attrs) - 1, *args))
        for s in dict.fromkeys(node.inputs):
            if last_use[s] == k and s not in keep:
                code.append((Op.KILL, reg[s]))
    code.append((Op.RET, r(program.output)))
    pools = {"host": plan.arena.peak} if arena >= 0 and plan is not None else {}
    memory = {"host": plan.arena.to_json()} if arena >= 0 and plan is not None else {}
    if plan is not None:  # the device's activation area planned ahead of time too
        try:
            device = plan_memory(program)
        except MemoryPlanError:  # too large for its config: refused when loaded
            device = None
        if device is not None and device.activations is not None:
            memory["device"] = device.activations.to_json()
    return Executable([VMFunction("main", len(program.inputs), len(reg), code)], attrs,
                      pools, memory, nodes)
