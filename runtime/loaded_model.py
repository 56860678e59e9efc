"""A compiled model loaded for running: each accelerator program decoded once, run by
the VM, and an instrument hook around each kernel call.

:class:`LoadedModel` runs a :class:`~.interpreter.GraphProgram` with its
:class:`~.vm.VirtualMachine`, over the program's executable (the ``.tfm``'s ``vm.json``,
:attr:`~.interpreter.GraphProgram.executable`, or one built from the graph): the VM
runs a CPU node's kernel of :data:`~.kernels.KERNELS` itself and hands an
``accel.program`` node to :meth:`LoadedModel.call`, which runs its program on the
model's :class:`~tensorfab.sim.Device` (standalone, its whole image per run; the node's
``executor`` when the model has no device). :class:`~.resident.ResidentModel` is the
same with the model placed in the device's memory once. An :class:`Instrument` set with
:meth:`LoadedModel.set_instrument` (as TVM's ``set_instrument``) sees every kernel call
the VM makes, before and after it runs: the per-layer profile (:mod:`.profiling`) is
one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorfab.isa import Program

from .accel_contract import ACCEL_PROGRAM, accel_nodes, decode_program, program_blob
from .device_tensor import host_value
from .graph_program import GraphProgram, Node
from .kernels import KERNELS, run_accel_program
from .vm import Instrument, VirtualMachine
from .vm_build import build_executable
from .vm_executable import Executable

__all__ = ["Instrument", "LoadedModel"]


class LoadedModel:
    """``program`` ready to run, its accelerator programs on ``device``.

    Parameters
    ----------
    program : GraphProgram
        The model (:func:`~.artifact.load_model`, or the compiler's lowering).
    device : Device or None
        The executor of its accelerator programs; None runs each on its node's
        ``executor`` attribute.
    executable : Executable, optional
        What the VM runs: by default the program's own
        (:attr:`~.interpreter.GraphProgram.executable`, a ``.tfm``'s ``vm.json``), else
        one built from the graph (:func:`~.vm_build.build_executable`).
    futures : bool
        Run accelerator programs on the VM's accelerator thread while independent CPU
        kernels go on (True), or inline, one node after the other (False).

    Attributes
    ----------
    accel_programs : dict[int, Program]
        Each ``accel.program`` node's program by node index, decoded once.
    instrument : Instrument or None
        The hook around each node (:meth:`set_instrument`).
    executable : Executable
        What :attr:`vm` runs.
    """

    def __init__(self, program: GraphProgram, device: Any = None,
                 executable: Executable | None = None, *, futures: bool = False) -> None:
        self.program = program
        self.device = device
        self.accel_programs: dict[int, Program] = {
            k: decode_program(program_blob(program, k)) for k, _ in accel_nodes(program)}
        self.instrument: Instrument | None = None
        if executable is None:
            executable = program.executable or build_executable(program)
        self.executable = executable
        self.futures = futures
        self._vm: VirtualMachine | None = None

    @property
    def vm(self) -> VirtualMachine:
        """The model's VM (made on first use; its host arena allocated once)."""
        if self._vm is None:
            self._vm = VirtualMachine(self, self.executable, futures=self.futures)
        return self._vm

    def set_instrument(self, instrument: Instrument | None) -> None:
        """Call ``instrument`` around every kernel node of later runs (None: none)."""
        self.instrument = instrument

    def close(self) -> None:
        """Stop the VM's accelerator thread (a resident model also releases its device
        memory)."""
        if self._vm is not None:
            self._vm.close()

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
        """Run one kernel node, with the instrument around it: how the VM runs an
        accelerator program (``INVOKE_ACCEL``; it runs CPU kernels itself, with the same
        hooks)."""
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
        """Run one input set (by name, or in order) on the model's VM; the model's
        output on the host.

        Raises
        ------
        RuntimeInputError
            Inputs that do not match the program's (see
            :func:`~.interpreter.input_values`).
        """
        return self.vm.run(inputs)
