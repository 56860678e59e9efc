"""A compiled model loaded for running: each accelerator program decoded once, one
dispatch for every node, and an instrument hook around it.

:class:`LoadedModel` runs a :class:`~.interpreter.GraphProgram`: a CPU node with its
kernel of :data:`~.kernels.KERNELS`, an ``accel.program`` node on the model's
:class:`~tensorfab.sim.Device` (standalone, its whole image per run; the node's
``executor`` when the model has no device). :class:`~.resident.ResidentModel` is the
same with the model placed in the device's memory once. An :class:`Instrument` set with
:meth:`LoadedModel.set_instrument` (as TVM's ``set_instrument``) sees every kernel node
before and after it runs: the per-layer profile (:mod:`.profiling`) is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorfab.isa import Program

from .accel_contract import ACCEL_PROGRAM, accel_nodes, decode_program, program_blob
from .device_tensor import host_value
from .interpreter import GraphProgram, Node, run_program
from .kernels import KERNELS, run_accel_program

__all__ = ["Instrument", "LoadedModel"]


class Instrument:
    """Hooks around each kernel node a :class:`LoadedModel` runs (no-ops here; subclass
    and override).

    ``index``, ``node``, ``args`` (argument values; a :class:`~.device_tensor.DeviceTensor`
    for an activation kept on the device) and ``attrs`` (the node's attributes, symbols
    bound) describe the call.
    """

    def before(self, index: int, node: Node, args: list[Any],
               attrs: Mapping[str, Any]) -> None:
        """Called before the node runs."""

    def after(self, index: int, node: Node, args: list[Any], attrs: Mapping[str, Any],
              out: Any, result: Any) -> None:
        """Called after it ran: its value ``out`` and, for an accelerator program, the
        executor's :class:`~tensorfab.sim.RunResult` (``None`` for a CPU kernel)."""

    def failed(self, index: int, node: Node, args: list[Any], attrs: Mapping[str, Any],
               exc: BaseException) -> None:
        """Called when the node raised ``exc`` (re-raised after the call)."""


class LoadedModel:
    """``program`` ready to run, its accelerator programs on ``device``.

    Parameters
    ----------
    program : GraphProgram
        The model (:func:`~.artifact.load_model`, or the compiler's lowering).
    device : Device or None
        The executor of its accelerator programs; None runs each on its node's
        ``executor`` attribute.

    Attributes
    ----------
    accel_programs : dict[int, Program]
        Each ``accel.program`` node's program by node index, decoded once.
    instrument : Instrument or None
        The hook around each node (:meth:`set_instrument`).
    """

    def __init__(self, program: GraphProgram, device: Any = None) -> None:
        self.program = program
        self.device = device
        self.accel_programs: dict[int, Program] = {
            k: decode_program(program_blob(program, k)) for k, _ in accel_nodes(program)}
        self.instrument: Instrument | None = None

    def set_instrument(self, instrument: Instrument | None) -> None:
        """Call ``instrument`` around every kernel node of later runs (None: none)."""
        self.instrument = instrument

    def close(self) -> None:
        """Release what the model holds on its device (nothing here)."""

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_accel(self, index: int, x: Any, *extra: Any) -> tuple[Any, Any]:
        """Run node ``index``'s program on input ``x`` (and a residual add's second
        input); its output and the :class:`~tensorfab.sim.RunResult`."""
        attrs = self.program.nodes[index].attrs
        device = self.device
        if device is None:
            from tensorfab.sim import get_device

            device = get_device(attrs["executor"])
        result = run_accel_program(host_value(x), self.accel_programs[index], attrs, device,
                                   *(host_value(v) for v in extra))
        return result.outputs[attrs["output_segment"]], result

    def call(self, index: int, node: Node, args: list[Any], attrs: Mapping[str, Any]) -> Any:
        """Run one kernel node (the :data:`~.interpreter.NodeCall` of :meth:`run`), with
        the instrument around it."""
        hook = self.instrument
        if hook is not None:
            hook.before(index, node, args, attrs)
        try:
            if node.op == ACCEL_PROGRAM:
                out, result = self.run_accel(index, args[0], *args[2:])
            else:
                out, result = KERNELS[node.op]([host_value(a) for a in args], attrs), None
        except BaseException as exc:
            if hook is not None:
                hook.failed(index, node, args, attrs, exc)
            raise
        if hook is not None:
            hook.after(index, node, args, attrs, out, result)
        return out

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> Any:
        """Run one input set (by name, or in order); the model's output on the host.

        Raises
        ------
        RuntimeInputError
            Inputs that do not match the program's (see :func:`~.interpreter.run_program`).
        """
        return host_value(run_program(self.program, inputs, call=self.call))
