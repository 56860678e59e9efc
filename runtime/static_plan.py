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
symbolic dims). :func:`~.arena_plan.plan_arena` places the buffers; the VM executable
built with the plan (:func:`~.vm_build.build_executable`) allocates the arena once,
when the VM is made, and writes each kernel's result into its place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .accel_contract import ACCEL_PROGRAM
from .arena_plan import ArenaPlan, LiveBuffer, plan_arena
from .interpreter import GraphProgram

__all__ = ["ALIGNMENT", "IN_PLACE_OPS", "HostPlan", "plan_host_arena"]

#: Offsets in the host arena are multiples of this (a cache line).
ALIGNMENT = 64

#: Ops whose output may take its input's bytes when the input is read for the last time:
#: elementwise of one input with the input's size, and the reshapes.
IN_PLACE_OPS = frozenset({
    "relu", "negative", "identity", "device_copy", "on_device", "leaky_relu", "clip",
    "hard_sigmoid", "hard_swish", "erf", "exp", "sqrt", "tanh", "sigmoid",
    "qnn.requantize_fixed", "qnn.requantize_q31", "reshape", "flatten", "squeeze",
    "expand_dims"})


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
    """

    arena: ArenaPlan
    places: dict[int, tuple[int, tuple[int, ...], str]]
    in_place: int


def plan_host_arena(program: GraphProgram, alignment: int = ALIGNMENT) -> HostPlan:
    """The host plan of ``program`` (see the module docstring)."""
    end = len(program.nodes)
    last_use: dict[int, int] = {}
    for k, node in enumerate(program.nodes):
        for s in node.inputs:
            last_use[s] = end if node.op in ("tuple", "tuple_get_item") else k
    # an accelerator program reads its inputs on the accelerator thread, at some time
    # before the host next waits for it: its inputs live until then
    for k, done in _accel_done(program).items():
        for s in program.nodes[k].inputs:
            last_use[s] = max(last_use.get(s, k), done)
    buffer_of: dict[int, int] = {}  # slot -> buffer key (the slot that made the buffer)
    spans: dict[int, list[int]] = {}  # buffer key -> [nbytes, first, last]
    in_place = 0
    for k, node in enumerate(program.nodes):
        typ = program.value_types.get(node.output)
        if node.op in (ACCEL_PROGRAM, "tuple", "tuple_get_item") or typ is None or \
                node.output == program.output:
            continue
        nbytes = int(np.prod(typ[0], dtype=np.int64)) * np.dtype(typ[1]).itemsize
        src = node.inputs[0] if node.inputs else None
        if (node.op in IN_PLACE_OPS and src in buffer_of and last_use.get(src) == k
                and nbytes <= spans[buffer_of[src]][0]):
            key = buffer_of[src]
            in_place += 1
        else:
            key = node.output
            spans[key] = [nbytes, k, k]
        buffer_of[node.output] = key
        spans[key][2] = max(spans[key][2], last_use.get(node.output, k))
    arena = plan_arena([LiveBuffer(key, n, first, last)
                        for key, (n, first, last) in spans.items()], alignment)
    places = {slot: (arena.offsets[key], *program.value_types[slot])
              for slot, key in buffer_of.items()}
    return HostPlan(arena, places, in_place)


def _accel_done(program: GraphProgram) -> dict[int, int]:
    """By ``accel.program`` node: the first node at which the VM's host thread waits for
    it or for a later program (one accelerator thread runs them in issue order): a node
    other than ``accel.program`` and ``tuple`` that reads an accelerator program's
    output (the end of the program when none does)."""
    end = len(program.nodes)
    accel_out = {n.output: k for k, n in enumerate(program.nodes) if n.op == ACCEL_PROGRAM}
    waits = [k for k, n in enumerate(program.nodes)
             if n.op not in (ACCEL_PROGRAM, "tuple") and
             any(s in accel_out and accel_out[s] < k for s in n.inputs)]
    done: dict[int, int] = {}
    for k in accel_out.values():
        # a wait at node w on program m >= k means m is done, and k before it
        done[k] = next((w for w in waits if any(
            k <= accel_out[s] < w for s in program.nodes[w].inputs if s in accel_out)),
            end)
    return done
