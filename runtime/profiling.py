"""A per-layer profile of one run of a :class:`~.interpreter.GraphProgram`.

:func:`profile_program` runs the program on its VM (:class:`~.loaded_model.LoadedModel`,
the one dispatch) with a :class:`LayerProfiler` instrument that records, for every
kernel call, where it ran (``cpu``: a numpy kernel; ``accel``: an
``accel.program`` node, run on the given :class:`~tensorfab.sim.Device`), its argument
and result shapes and its wall time; for accelerator programs also the executor's
cycles as its own counters measured them (``None`` on the untimed functional
simulator), the hardware time they take at the device's clock (a board's clock as its
INFO reports it, else the config's :attr:`~tensorfab.isa.HwConfig.clock_mhz`), the
engines' busy cycles from the counter CSRs, the GEMM core's
multiply-accumulates (:attr:`~tensorfab.sim.Counters.gemm_macs`, padding channels
included), the utilization ``gemm_macs / (cycles × peak MACs per cycle)`` and, on an
executor that records them (``rtl`` with ``trace``), the engines' activity intervals.
``tensorfab run`` prints the profile as a table and writes it as one Perfetto timeline
(:mod:`.network_trace`).

By default the model is loaded on the device once (:class:`~.resident.ResidentModel`):
weights placed in its memory, activations kept there between accelerator programs, the
host link's traffic counted (:attr:`Profile.host_traffic`). Loading it (building the
device's model on rtl or a virtual board, writing the weights) is timed on its own
(:attr:`Profile.load_seconds`), apart from the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfab.isa import TensorfabError

from .accel_contract import ACCEL_PROGRAM, accel_nodes
from .graph_program import GraphProgram, Node
from .loaded_model import Instrument, LoadedModel
from .memory_plan import MemoryPlan
from .resident import HostTraffic, ResidentModel

__all__ = ["BUSY_CSRS", "LayerProfiler", "LayerRecord", "Profile", "engine_busy",
           "profile_program"]


#: The counter CSR of each engine's busy cycles.
BUSY_CSRS = {"load": "LOAD_BUSY", "compute": "COMPUTE_BUSY", "gemm": "GEMM_BUSY",
             "alu": "ALU_BUSY", "store": "STORE_BUSY"}


def engine_busy(csrs: Mapping[str, int] | None) -> dict[str, int]:
    """Busy cycles per engine from a run's counter CSRs (empty without them)."""
    if not csrs:
        return {}
    return {engine: int(csrs[name]) for engine, name in BUSY_CSRS.items() if name in csrs}


def _shape(v: Any) -> tuple[int, ...] | None:
    if type(v) is np.ndarray:  # the common case first: its shape is a tuple of ints
        return v.shape
    if isinstance(v, np.ndarray) or hasattr(v, "addr"):  # a host array or a DeviceTensor
        return tuple(int(d) for d in v.shape)
    return None


@dataclass
class LayerRecord:
    """One kernel node of a profiled run.

    Attributes
    ----------
    index : int
        The node's position in the program.
    op : str
        The operator; an accelerator program's ``layer`` label when it has one
        (``conv2d+add+requantize_q31+relu``), else ``accel.program``.
    device : str
        ``cpu`` or ``accel``.
    in_shapes : list of tuple
        Shapes of the tensor arguments (an accelerator program's bytes left out).
    out_shape : tuple or None
        Shape of the result (None for a tuple).
    start, seconds : float
        Start (from the start of the run) and wall time, in seconds.
    cycles : int or None
        Cycles of an accelerator program on a timed executor; on an untimed one (the
        functional simulator) the compiler's estimate when the node has one
        (``estimated_cycles``), and then :attr:`estimated` is set.
    macs : int or None
        Multiply-accumulates of an accelerator program: the layer's own (without the
        blocked layout's channel padding) when the compiler recorded them (``macs``
        attribute), else :attr:`gemm_macs`.
    utilization : float or None
        ``macs / (cycles × peak)`` of an accelerator program (with cycles).
    gemm_macs : int or None
        Multiply-accumulates the GEMM core executed (padding included);
        ``gemm_macs / (cycles × peak)`` is how busy the core was (:attr:`gemm_busy`).
    peak : int or None
        Peak MACs per cycle of the accelerator program's config.
    intervals : list
        Engine activity (:class:`tensorfab.sim.trace.Interval`) of an accelerator
        program on an executor that records it.
    clock_hz : float or None
        The clock measured cycles convert with (None without measured cycles).
    busy : dict[str, int]
        Busy cycles per engine (``load``, ``compute``, ``store``, ``gemm``, ``alu``)
        from the counter CSRs of an executor that reports them (rtl, boards).
    name : str
        The source model's node name(s) the kernel computes (``conv1+relu1``; the ONNX
        node names joined for a fused accelerator program), empty when unknown.
    """

    index: int
    op: str
    device: str
    in_shapes: list[tuple[int, ...]]
    out_shape: tuple[int, ...] | None
    start: float
    seconds: float
    cycles: int | None = None
    macs: int | None = None
    utilization: float | None = None
    intervals: list = field(default_factory=list)
    estimated: bool = False
    gemm_macs: int | None = None
    peak: int | None = None
    clock_hz: float | None = None
    busy: dict[str, int] = field(default_factory=dict)
    name: str = ""

    @property
    def hardware_seconds(self) -> float | None:
        """Measured cycles / clock: the time the accelerator took (None on an untimed
        executor, whose cycles are estimates)."""
        if self.cycles is None or self.estimated or not self.clock_hz:
            return None
        return self.cycles / self.clock_hz

    @property
    def gemm_busy(self) -> float | None:
        """``gemm_macs / (cycles × peak)``: the share of the GEMM core's capacity used,
        padding included."""
        if not (self.cycles and self.peak and self.gemm_macs is not None):
            return None
        return self.gemm_macs / (self.cycles * self.peak)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data (without the intervals)."""
        return {"index": self.index, "name": self.name, "op": self.op, "device": self.device,
                "in_shapes": [list(s) for s in self.in_shapes],
                "out_shape": list(self.out_shape) if self.out_shape is not None else None,
                "seconds": round(self.seconds, 6), "cycles": self.cycles, "macs": self.macs,
                "utilization": None if self.utilization is None
                else round(self.utilization, 4), "gemm_macs": self.gemm_macs,
                "estimated": self.estimated, "clock_hz": self.clock_hz,
                "hardware_seconds": self.hardware_seconds}


@dataclass
class Profile:
    """The result and per-layer records of :func:`profile_program`.

    Attributes
    ----------
    seconds : float
        Wall time of the run (the model's load left out).
    load_seconds : float or None
        Wall time of loading the model on the device (building the device's model,
        writing programs and weights), once; None when it was loaded before, or when
        each program runs standalone (``resident=False``).
    """

    output: Any
    layers: list[LayerRecord]
    seconds: float
    executor: str
    host_traffic: HostTraffic | None = None
    memory_plan: MemoryPlan | None = None
    load_seconds: float | None = None

    @property
    def hardware_seconds(self) -> float | None:
        """Hardware time of all accelerator programs (None if unknown for one)."""
        times = [r.hardware_seconds for r in self.layers if r.device == "accel"]
        if not times or any(t is None for t in times):
            return None
        return float(sum(t for t in times if t is not None))

    @property
    def clock_hz(self) -> float | None:
        """The accelerator's clock, when every accelerator program has the same one."""
        clocks = {r.clock_hz for r in self.layers if r.device == "accel"}
        return clocks.pop() if len(clocks) == 1 else None

    @property
    def estimated(self) -> bool:
        """Whether the cycles are the compiler's estimates (an untimed executor)."""
        return any(r.estimated for r in self.layers)

    @property
    def accel_macs(self) -> int:
        """Multiply-accumulates of all accelerator programs (see :attr:`LayerRecord.macs`)."""
        return int(sum(r.macs or 0 for r in self.layers if r.device == "accel"))

    @property
    def utilization(self) -> float | None:
        """Accelerator MACs / (cycles × peak) over all accelerator programs."""
        accel = [r for r in self.layers if r.device == "accel"]
        capacity = sum((r.cycles or 0) * (r.peak or 0) for r in accel)
        if not accel or any(r.cycles is None for r in accel) or not capacity:
            return None
        return self.accel_macs / capacity

    @property
    def total_cycles(self) -> int | None:
        """Cycles of all accelerator programs (None if unknown for one)."""
        cycles = [r.cycles for r in self.layers if r.device == "accel"]
        if not cycles or any(c is None for c in cycles):
            return None
        return int(sum(c for c in cycles if c is not None))


class LayerProfiler(Instrument):
    """The :class:`~.loaded_model.Instrument` recording a :class:`LayerRecord` per
    kernel node of ``model``'s run, times from ``t0`` (``time.perf_counter()``);
    ``progress`` is called before each node with its index, the node count and its op."""

    def __init__(self, model: LoadedModel, t0: float,
                 progress: Callable[[int, int, str], None] | None = None) -> None:
        self.model = model
        self.t0 = t0
        self.progress = progress
        # a LayerRecord per node, or a CPU kernel's fields until :attr:`layers` is read
        # (building the record costs more than the rest of the hooks)
        self._rows: list[LayerRecord | tuple[Any, ...]] = []
        # by node: the VM's accelerator thread runs programs while CPU kernels go on
        self._start: dict[int, float] = {}

    @property
    def layers(self) -> list[LayerRecord]:
        """The records so far, in the order the nodes ran."""
        rows = self._rows
        for k, row in enumerate(rows):
            if isinstance(row, tuple):
                index, node, shapes, out_shape, start, seconds = row
                rows[k] = LayerRecord(index, node.op, "cpu",
                                      [s for s in shapes if s is not None], out_shape,
                                      start, seconds, name=node.name)
        return rows  # type: ignore[return-value]

    def before(self, index: int, node: Node, args: list[Any],
               attrs: Mapping[str, Any]) -> None:
        if self.progress is not None:
            self.progress(index, len(self.model.program.nodes),
                          str(attrs.get("layer") or node.op))
        self._start[index] = time.perf_counter()

    def after(self, index: int, node: Node, args: list[Any], attrs: Mapping[str, Any],
              out: Any, result: Any) -> None:
        start = self._start.pop(index, self.t0)
        seconds = time.perf_counter() - start
        if node.op != ACCEL_PROGRAM:
            self._rows.append((index, node, [_shape(a) for a in args], _shape(out),
                               start - self.t0, seconds))
            return
        config = self.model.accel_programs[index].config
        peak = config.peak_macs_per_cycle
        gemm_macs = int(result.counters.gemm_macs)
        recorded = int(attrs.get("macs", -1))  # the model's own MACs; -1: unknown
        macs = recorded if recorded >= 0 else gemm_macs
        cycles = None if result.cycles is None else int(result.cycles)
        estimated = cycles is None and bool(attrs.get("estimated_cycles"))
        clock_hz = (None if cycles is None else
                    float(getattr(result, "clock_hz", 0) or config.clock_mhz * 1e6))
        if estimated:
            cycles = int(attrs["estimated_cycles"])
        self._rows.append(LayerRecord(
            index, str(attrs.get("layer") or node.op), "accel", [_shape(args[0])],
            _shape(out), start - self.t0, seconds, cycles, macs,
            macs / (cycles * peak) if cycles else None,
            list(getattr(result, "intervals", None) or []), estimated, gemm_macs,
            peak, clock_hz, engine_busy(getattr(result, "csrs", None)), node.name))

    def failed(self, index: int, node: Node, args: list[Any], attrs: Mapping[str, Any],
               exc: BaseException) -> None:
        if node.op != ACCEL_PROGRAM or not isinstance(exc, (TensorfabError,
                                                            KeyboardInterrupt)):
            return
        # the layer that stopped, with its executor's timeline up to there
        intervals = list(getattr(exc, "intervals", None) or [])
        cycles = getattr(exc, "cycles", None) or max((i.end for i in intervals),
                                                     default=None)
        clock = self.model.accel_programs[index].config.clock_mhz * 1e6
        self._rows.append(LayerRecord(
            index, f"{attrs.get('layer') or node.op} (stopped)", "accel",
            [_shape(args[0])], None, self._start.get(index, self.t0) - self.t0,
            time.perf_counter() - self._start.get(index, self.t0), cycles, intervals=intervals,
            clock_hz=None if cycles is None else clock, name=node.name))


def profile_program(program: GraphProgram,
                    inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
                    device: Any,
                    progress: Callable[[int, int, str], None] | None = None, *,
                    resident: bool | LoadedModel = True) -> Profile:
    """Run ``program`` on ``inputs`` with every accelerator program on ``device`` (a
    :class:`~tensorfab.sim.Device`), recording each node (see the module docstring) with
    a :class:`LayerProfiler` set on the model as its instrument.
    ``progress`` is called before each node with its index, the node count and its op.
    ``resident``: load the model on the device once (True; or an already loaded
    :class:`~.loaded_model.LoadedModel` of ``program``, such as a
    :class:`~.resident.ResidentModel`), or run each accelerator program standalone with
    its own image (False).

    Raises
    ------
    RuntimeInputError
        Inputs that do not match the program's (as :func:`~.interpreter.run_program`).
    TensorfabError, KeyboardInterrupt
        A failed or interrupted run, with ``profile``: the :class:`Profile` up to there
        (no output; the layer that stopped last, ``(stopped)``, with its timeline when
        the executor records one).
    """
    load_seconds = None
    if isinstance(resident, LoadedModel):
        model = resident
    elif resident and any(True for _ in accel_nodes(program)):
        t_load = time.perf_counter()
        model = ResidentModel(program, device)
        load_seconds = time.perf_counter() - t_load
    else:
        model = LoadedModel(program, device)
    t0 = time.perf_counter()
    profiler = LayerProfiler(model, t0, progress)
    previous = model.instrument
    model.set_instrument(profiler)
    executor = str(getattr(device, "name", type(device).__name__))
    try:
        output = model.run(inputs)
        seconds = time.perf_counter() - t0  # the run, not the building of its records
    except (TensorfabError, KeyboardInterrupt) as exc:
        # the run up to where it stopped, for a timeline of a failed or interrupted run
        exc.profile = Profile(None, profiler.layers,  # type: ignore[attr-defined]
                              time.perf_counter() - t0, executor)
        raise
    finally:
        model.set_instrument(previous)
        if model is not resident:
            model.close()
    on_device = isinstance(model, ResidentModel)
    return Profile(output, profiler.layers, seconds, executor,
                   model.last_run if on_device else None,
                   model.plan if on_device else None, load_seconds)
