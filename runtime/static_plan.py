"""The ahead-of-time host memory plan of a static-shape model: every intermediate value a
CPU kernel makes gets its place in one host arena before the model runs.

The buffers are the outputs of the CPU nodes of a :class:`~.interpreter.GraphProgram`
whose shape the compiler fixed (:attr:`~.interpreter.GraphProgram.value_types`), each
live from the node that makes it to its last reader (to the end when a tuple holds it).
A node of :data:`IN_PLACE_OPS` whose input is such a buffer read for the last time
writes its output over it (one buffer for both, its lifetime the union). Left out: the
model's inputs and constants (the caller's), the model's output (handed to the caller,
so it cannot live in an arena the next run overwrites), accelerator programs' outputs
(in the device's arena, :mod:`.memory_plan`) and values without a fixed type (tuples,
symbolic dims). Lifetimes are counted in the order the VM runs the nodes (the
program's, or another topological order such as :func:`~.overlap_order.overlap_order`'s:
the plan and the executable are made over the same one).
:func:`~.arena_plan.plan_arena` places the buffers; the VM executable
built with the plan (:func:`~.vm_build.build_executable`) allocates the arena once,
when the VM is made, and writes each kernel's result into its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .accel_contract import ACCEL_PROGRAM
from .arena_plan import ArenaPlan, LiveBuffer, plan_arena
from .graph_program import GraphProgram

__all__ = ["ALIGNMENT", "IN_PLACE_OPS", "VIEW_OPS", "HostPlan", "plan_host_arena"]

#: Offsets in the host arena are multiples of this (a cache line).
ALIGNMENT = 64

#: Ops whose output may take its input's bytes when the input is read for the last time:
#: elementwise of one input with the input's size, and the reshapes.
IN_PLACE_OPS = frozenset({
    "relu", "negative", "identity", "device_copy", "on_device", "leaky_relu", "clip",
    "hard_sigmoid", "hard_swish", "erf", "exp", "sqrt", "tanh", "sigmoid",
    "qnn.requantize_fixed", "qnn.requantize_q31", "reshape", "flatten", "squeeze",
    "expand_dims"})

#: The in-place ops whose output is their input's bytes unchanged (C order), only seen
#: in another shape: placed over their input, the output's view of the arena is the
#: result and no kernel runs (:func:`~.vm_build.build_executable`).
VIEW_OPS = frozenset({"reshape", "flatten", "squeeze", "expand_dims"})


@dataclass(frozen=True)
class HostPlan:
    """Where each planned value lives in the host arena.

    Attributes
    ----------
    arena : ArenaPlan
        The buffers' offsets (by buffer key), peak, naive sum and lower bound.
    places : dict[int, tuple[int, tuple[int, ...], str]]
        By slot: byte offset in the arena, shape and dtype name.
    in_place : int
        Values written over their input.
    order : tuple of int or None
        The node order the lifetimes follow (None: the program's).
    """

    arena: ArenaPlan
    places: dict[int, tuple[int, tuple[int, ...], str]]
    in_place: int
    order: tuple[int, ...] | None = None


def plan_host_arena(program: GraphProgram, alignment: int = ALIGNMENT,
                    order: Sequence[int] | None = None) -> HostPlan:
    """The host plan of ``program`` (see the module docstring), its lifetimes in the
    order the VM runs the nodes: ``order`` (node indices, as
    :func:`~.overlap_order.overlap_order` gives; the program's order when None)."""
    nodes = program.nodes
    steps = list(range(len(nodes))) if order is None else [int(k) for k in order]
    if sorted(steps) != list(range(len(nodes))):
        raise ValueError(f"order is not a permutation of the {len(nodes)} nodes")
    end = len(steps)
    last_use: dict[int, int] = {}
    for t, k in enumerate(steps):
        for s in nodes[k].inputs:
            last_use[s] = end if nodes[k].op in ("tuple", "tuple_get_item") else t
    # an accelerator program reads its inputs on the accelerator thread, at some time
    # before the host next waits for it: its inputs live until then
    for t, done in _accel_done(program, steps).items():
        for s in nodes[steps[t]].inputs:
            last_use[s] = max(last_use.get(s, t), done)
    buffer_of: dict[int, int] = {}  # slot -> buffer key (the slot that made the buffer)
    spans: dict[int, list[int]] = {}  # buffer key -> [nbytes, first, last]
    in_place = 0
    for t, k in enumerate(steps):
        node = nodes[k]
        typ = program.value_types.get(node.output)
        if node.op in (ACCEL_PROGRAM, "tuple", "tuple_get_item") or typ is None or \
                node.output == program.output:
            continue
        nbytes = int(np.prod(typ[0], dtype=np.int64)) * np.dtype(typ[1]).itemsize
        src = node.inputs[0] if node.inputs else None
        if (node.op in IN_PLACE_OPS and src in buffer_of and last_use.get(src) == t
                and nbytes <= spans[buffer_of[src]][0]):
            key = buffer_of[src]
            in_place += 1
        else:
            key = node.output
            spans[key] = [nbytes, t, t]
        buffer_of[node.output] = key
        spans[key][2] = max(spans[key][2], last_use.get(node.output, t))
    arena = plan_arena([LiveBuffer(key, n, first, last)
                        for key, (n, first, last) in spans.items()], alignment)
    places = {slot: (arena.offsets[key], *program.value_types[slot])
              for slot, key in buffer_of.items()}
    return HostPlan(arena, places, in_place, None if order is None else tuple(steps))


def _accel_done(program: GraphProgram, steps: Sequence[int]) -> dict[int, int]:
    """By step of an ``accel.program`` node in ``steps`` (the node order): the first
    step at which the VM's host thread waits for it or for a later program (one
    accelerator thread runs them in issue order): a node other than ``accel.program``
    and ``tuple`` that reads an accelerator program's output (the end when none does)."""
    nodes = program.nodes
    end = len(steps)
    accel_out = {nodes[k].output: t for t, k in enumerate(steps)
                 if nodes[k].op == ACCEL_PROGRAM}
    waits = [t for t, k in enumerate(steps)
             if nodes[k].op not in (ACCEL_PROGRAM, "tuple") and
             any(s in accel_out and accel_out[s] < t for s in nodes[k].inputs)]
    done: dict[int, int] = {}
    for t in accel_out.values():
        # a wait at step w on program m >= t means m is done, and t before it
        done[t] = next((w for w in waits if any(
            t <= accel_out[s] < w for s in nodes[steps[w]].inputs if s in accel_out)),
            end)
    return done
