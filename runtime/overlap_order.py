"""An order of a program's nodes that gives the VM's futures CPU work to overlap.

The VM issues an accelerator program and goes on with the next instruction; the first
one that reads its result waits. In the compiler's order a CPU node that reads the
program's result usually comes first (the relayout of its output), so independent CPU
work after it (a dense layer's float outlier matmul, the next projection's quantize and
relayout) waits too. :func:`overlap_order` keeps every node's dependencies and the
accelerator programs' relative order, and when the next node would wait on an
accelerator program still in flight, first moves up the later CPU nodes, up to the next
accelerator program, whose inputs are all ready and none of them in flight.

Only host computations move (not ``device_copy``, tuples or accelerator programs), and
only earlier than in the program: a moved node reads its inputs within their lifetimes,
so a resident model's device-memory plan (made in the program's order) still holds. A
host arena planned in the program's order does not: an executable built with this
order has no host plan.
"""

from __future__ import annotations

from .accel_contract import ACCEL_PROGRAM
from .graph_program import GraphProgram

__all__ = ["overlap_order"]

#: Nodes never moved: they place values in device memory or only regroup values.
_FIXED = frozenset({ACCEL_PROGRAM, "device_copy", "tuple", "tuple_get_item"})


def overlap_order(program: GraphProgram) -> list[int]:
    """The node indices of ``program`` in the order described in the module docstring
    (a permutation of ``range(len(program.nodes))``)."""
    nodes = program.nodes
    ready = {i.slot for i in program.inputs} | set(program.constants)
    in_flight: set[int] = set()
    done = [False] * len(nodes)
    order: list[int] = []

    def emit(k: int) -> None:
        node = nodes[k]
        order.append(k)
        done[k] = True
        ready.add(node.output)
        if node.op == ACCEL_PROGRAM:  # another program reading it waits on the device
            in_flight.add(node.output)
        else:
            in_flight.difference_update(node.inputs)

    for k, node in enumerate(nodes):
        if done[k]:
            continue
        if node.op != ACCEL_PROGRAM and in_flight.intersection(node.inputs):
            for j in range(k + 1, len(nodes)):
                later = nodes[j]
                if later.op == ACCEL_PROGRAM:
                    break
                if (not done[j] and later.op not in _FIXED
                        and all(s in ready and s not in in_flight for s in later.inputs)):
                    emit(j)
        emit(k)
    return order
