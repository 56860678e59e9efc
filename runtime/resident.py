"""A compiled model loaded on a device: programs and weights placed once in its memory,
activations kept there between accelerator programs.

:class:`ResidentModel` opens one :class:`~tensorfab.sim.DeviceMemory` on the device
(fsim, rtl, a board), writes the static area of its :class:`~.memory_plan.MemoryPlan`
once, and then runs inputs without recompiling or reloading. An accelerator program's
output stays in device memory as a :class:`DeviceTensor`; the host reads it only when a
CPU operator (or the model's output) needs it, and the next program reads it in place.
The host link's traffic of each run is counted (:attr:`ResidentModel.last_run`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorfab.isa import TensorfabError

from .interpreter import GraphProgram, Node, run_program
from .kernels import KERNELS, segment_operand
from .memory_plan import MemoryPlan, plan_memory

__all__ = ["DeviceTensor", "HostTraffic", "ResidentModel", "host_value", "standalone_host_bytes"]


class DeviceTensor:
    """An activation in device memory: ``shape`` and ``dtype`` at byte ``addr``.

    :meth:`numpy` reads it (once) over the host link.
    """

    def __init__(self, memory: Any, addr: int, shape: tuple[int, ...], dtype: str) -> None:
        self.memory = memory
        self.addr = addr
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._host: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """The value, read from device memory on first use."""
        if self._host is None:
            raw = self.memory.read(self.addr, self.nbytes)
            self._host = raw.view(self.dtype).reshape(self.shape)
        return self._host

    def __repr__(self) -> str:
        return f"DeviceTensor({self.dtype}{self.shape} @ {self.addr:#x})"


def host_value(v: Any) -> Any:
    """``v`` with every :class:`DeviceTensor` (also inside tuples) read to the host."""
    if isinstance(v, DeviceTensor):
        return v.numpy()
    if isinstance(v, tuple):
        return tuple(host_value(x) for x in v)
    return v


@dataclass(frozen=True)
class HostTraffic:
    """Bytes the host moved to and from device memory in one run (activations only; the
    static area is written once at load)."""

    written: int
    read: int

    @property
    def total(self) -> int:
        return self.written + self.read


class ResidentModel:
    """``program`` loaded on ``device``, ready to run inputs.

    Parameters
    ----------
    program : GraphProgram
        A model with ``accel.program`` nodes (all for one config).
    device : Device
        The executor (:class:`~tensorfab.sim.Device`); its
        :meth:`~tensorfab.sim.Device.open_memory` holds the model.

    Raises
    ------
    MemoryPlanError
        Programs that cannot share one memory (see :func:`.memory_plan.plan_memory`).
    TensorfabError
        A program without accelerator nodes (nothing to load).
    """

    def __init__(self, program: GraphProgram, device: Any) -> None:
        plan = plan_memory(program)
        if plan is None:
            raise TensorfabError("the model has no accelerator programs to load on a device")
        self.program = program
        self.plan: MemoryPlan = plan
        self.device = device
        self.memory = device.open_memory(plan.config, plan.size)
        for addr, data in plan.static:
            self.memory.write(addr, data)
        self.load_bytes = self.memory.host_bytes_written
        self.last_run: HostTraffic | None = None

    def close(self) -> None:
        """Release the device memory."""
        self.memory.close()

    def __enter__(self) -> ResidentModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_accel(self, index: int, x: Any, *extra: Any) -> tuple[DeviceTensor, Any]:
        """Run node ``index``'s program on input ``x`` (a host array, or the
        :class:`DeviceTensor` its plan reads in place) and an optional second input
        (written to its ``extra_input_segment``); its output and the
        :class:`~tensorfab.sim.RunResult`."""
        placed = self.plan.programs[index]
        node = self.program.nodes[index]
        operands = [(placed.input_segment, placed.input.addr, placed.input_on_device, x,
                     "input")]
        for v in extra:  # a residual add's second operand
            name = node.attrs["extra_input_segment"]
            operands.append((name, placed.program.layout()[name].offset,
                             placed.extra_on_device, v, "second input"))
        for name, addr, on_device, v, what in operands:
            if (on_device and isinstance(v, DeviceTensor) and v.memory is self.memory
                    and v.addr == addr):
                continue  # read in place
            self.memory.write(addr, segment_operand(
                placed.program, name, host_value(v), f"node {index} (accel.program): {what}"))
        result = self.memory.run(placed.program)
        out = placed.program.segment(placed.output_segment)
        return DeviceTensor(self.memory, placed.output.addr, out.shape, out.dtype), result

    def call(self, index: int, node: Node, args: list[Any], attrs: Mapping[str, Any]) -> Any:
        """The :data:`~.interpreter.NodeCall` running accelerator nodes here and the
        others with their CPU kernel."""
        if node.op == "accel.program":
            return self.run_accel(index, args[0], *args[2:])[0]
        return KERNELS[node.op]([host_value(a) for a in args], attrs)

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
            call: Any = None) -> Any:
        """Run one input set; the model's output on the host. ``call`` replaces
        :meth:`call` (the profiler wraps it)."""
        w0, r0 = self.memory.host_bytes_written, self.memory.host_bytes_read
        out = host_value(run_program(self.program, inputs, call=call or self.call))
        self.last_run = HostTraffic(self.memory.host_bytes_written - w0,
                                    self.memory.host_bytes_read - r0)
        return out


def standalone_host_bytes(program: GraphProgram) -> int:
    """Host traffic of one run with every accelerator program standalone, the baseline a
    :class:`ResidentModel` improves on: each program's whole image (instructions,
    weights, input) written and its output read, per run."""
    from .kernels import accel_program_of

    total = 0
    for node in program.nodes:
        if node.op == "accel.program":
            p = accel_program_of(program.constants[node.inputs[1]])
            total += p.dram_size + p.segment(node.attrs["output_segment"]).nbytes
    return total
