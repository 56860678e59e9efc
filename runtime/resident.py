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

from .accel_contract import ACCEL_PROGRAM, accel_nodes, decode_program, program_blob
from .arena_plan import ArenaPlan
from .device_tensor import DeviceTensor, host_value
from .graph_program import GraphProgram
from .kernels import segment_operand
from .loaded_model import LoadedModel
from .memory_plan import MemoryPlan, plan_memory
from .vm_executable import Executable

__all__ = ["DeviceTensor", "HostTraffic", "ResidentModel", "host_value", "planned_host_traffic",
           "standalone_host_bytes"]


@dataclass(frozen=True)
class HostTraffic:
    """Bytes the host moved to and from device memory in one run (activations only; the
    static area is written once at load)."""

    written: int
    read: int

    @property
    def total(self) -> int:
        return self.written + self.read


class ResidentModel(LoadedModel):
    """``program`` loaded on ``device``, ready to run inputs: a
    :class:`~.loaded_model.LoadedModel` (its dispatch and instrument hook) whose
    accelerator programs run in place in one device memory.

    Parameters
    ----------
    program : GraphProgram
        A model with ``accel.program`` nodes (all for one config).
    device : Device
        The executor (:class:`~tensorfab.sim.Device`); its
        :meth:`~tensorfab.sim.Device.open_memory` holds the model.
    activations : ArenaPlan, optional
        The device activation plan made ahead of time; by default the one stored with
        the model's executable (:meth:`~.vm_executable.Executable.device_plan`, a
        ``.tfm``'s ``vm.json``), else planned here.
    executable : Executable, optional
        What the VM runs (see :class:`~.loaded_model.LoadedModel`).
    futures : bool
        Accelerator programs on the VM's accelerator thread (see
        :class:`~.loaded_model.LoadedModel`).

    Raises
    ------
    MemoryPlanError
        Programs that cannot share one memory (see :func:`.memory_plan.plan_memory`).
    TensorfabError
        A program without accelerator nodes (nothing to load).
    """

    def __init__(self, program: GraphProgram, device: Any,
                 activations: ArenaPlan | None = None,
                 executable: Executable | None = None, *, futures: bool = False) -> None:
        super().__init__(program, device, executable, futures=futures)
        if activations is None:
            activations = self.executable.device_plan()
        plan = plan_memory(program, self.accel_programs, activations)
        if plan is None:
            raise TensorfabError("the model has no accelerator programs to load on a device")
        self.plan: MemoryPlan = plan
        self.memory = device.open_memory(plan.config, plan.size)
        for addr, data in plan.static:
            self.memory.write(addr, data)
        self.load_bytes = self.memory.host_bytes_written
        self.last_run: HostTraffic | None = None

    def close(self) -> None:
        """Stop the VM's accelerator thread and release the device memory."""
        super().close()
        self.memory.close()

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
                placed.program, name, host_value(v), f"node {index} ({ACCEL_PROGRAM}): {what}"))
        result = self.memory.run(placed.program)
        out = placed.program.segment(placed.output_segment)
        return DeviceTensor(self.memory, placed.output.addr, out.shape, out.dtype), result

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> Any:
        """Run one input set; the model's output on the host, the host link's traffic
        in :attr:`last_run`."""
        w0, r0 = self.memory.host_bytes_written, self.memory.host_bytes_read
        out = super().run(inputs)
        self.last_run = HostTraffic(self.memory.host_bytes_written - w0,
                                    self.memory.host_bytes_read - r0)
        return out


def standalone_host_bytes(program: GraphProgram) -> int:
    """Host traffic of one run with every accelerator program standalone, the baseline a
    :class:`ResidentModel` improves on: each program's whole image (instructions,
    weights, input) written and its output read, per run."""
    total = 0
    for k, node in accel_nodes(program):
        p = decode_program(program_blob(program, k))
        total += p.dram_size + p.segment(node.attrs["output_segment"]).nbytes
    return total


def planned_host_traffic(program: GraphProgram, plan: MemoryPlan) -> HostTraffic:
    """The host link's traffic of one :meth:`ResidentModel.run` of ``program`` loaded
    with ``plan``, without running it (what :attr:`ResidentModel.last_run` counts).

    Written: each accelerator program's input, and a residual add's second input, unless
    the plan reads it in place from the program that produced it. Read: each
    accelerator program's output that a CPU operator, an input not read in place or the
    model's output needs on the host, once.

    Parameters
    ----------
    program : GraphProgram
        The compiled model.
    plan : MemoryPlan
        Its device memory plan (:func:`.memory_plan.plan_memory`).
    """
    origin: dict[int, Any] = {}  # slot -> accel node producing it (or a tuple of them)
    read: set[int] = set()

    def needs_host(v: Any) -> None:
        if isinstance(v, tuple):
            for x in v:
                needs_host(x)
        elif v is not None:
            read.add(v)

    written = 0
    for k, node in enumerate(program.nodes):
        args = [origin.get(s) for s in node.inputs]
        if node.op == "tuple":
            origin[node.output] = tuple(args)
            continue
        if node.op == "tuple_get_item":
            packed = args[0]
            origin[node.output] = (packed[node.attrs["index"]]
                                   if isinstance(packed, tuple) else None)
            continue
        if node.op != ACCEL_PROGRAM:
            for v in args:
                needs_host(v)
            continue
        placed = plan.programs[k]
        origin[node.output] = k
        operands = [(args[0], placed.input_on_device, placed.input_segment)]
        operands += [(v, placed.extra_on_device, node.attrs["extra_input_segment"])
                     for v in args[2:]]
        for v, on_device, segment in operands:
            if on_device and v is not None:
                continue  # read in place
            needs_host(v)
            written += placed.program.segment(segment).nbytes
    needs_host(origin.get(program.output))
    out_bytes = sum(plan.programs[k].program.segment(plan.programs[k].output_segment).nbytes
                    for k in read)
    return HostTraffic(written, out_bytes)
