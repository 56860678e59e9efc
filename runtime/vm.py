"""The virtual machine: runs an :class:`~.vm_executable.Executable` over the kernels of a
:class:`~.loaded_model.LoadedModel`, accelerator programs as futures.

An ``INVOKE_ACCEL`` hands the program to the VM's accelerator thread and returns at
once with a :class:`concurrent.futures.Future` in its register; the CPU kernels after
it that do not read that register run meanwhile, and the first instruction that reads
it waits. The accelerator thread runs programs one at a time in issue order (one
device), so a program reading another's future never waits on the host. The RTL
executor and the board's host link release the GIL while the accelerator runs, so the
overlap is real time saved; the functional simulator is numpy and overlaps less.

Each run records a timeline (:attr:`VirtualMachine.timeline`): one slice per CPU kernel
on the ``cpu`` track, one per accelerator program on the ``accelerator`` track, one per
wait on the ``wait`` track, in wall time; :func:`vm_trace` makes it a Perfetto trace.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .blas_threads import limited_blas
from .device_tensor import DeviceTensor, host_value
from .graph_program import GraphProgram, Node, _check_inputs, input_values
from .inline_rule import InlineRule, Site
from .kernels import KERNELS, KernelError
from .shape_functions import SHAPE_FUNCTIONS
from .vm_decode import VMError, decode_function, kernel_nodes
from .vm_executable import Executable, Op

__all__ = ["Instrument", "ModelHost", "Slice", "VMError", "VirtualMachine", "overlap_seconds",
           "vm_trace"]

# opcodes as plain ints: comparing enum members costs more than the dispatch
(_MOVE, _CONST, _ALLOC_STORAGE, _ALLOC_TENSOR, _INVOKE, _INVOKE_ACCEL, _SHAPE_FUNC, _IF,
 _GOTO, _CALL, _RET, _TUPLE, _GET_ITEM, _KILL, _INVOKE_INTO) = (int(op) for op in Op)


class Instrument:
    """Hooks around each kernel call the VM makes for a
    :class:`~.loaded_model.LoadedModel` (no-ops here; subclass and override; set with
    :meth:`~.loaded_model.LoadedModel.set_instrument`).

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


class ModelHost(Protocol):
    """What the VM runs over (a :class:`~.loaded_model.LoadedModel`): the program, its
    instrument, and ``call``, which runs an ``accel.program`` node on the device."""

    program: GraphProgram
    instrument: Instrument | None

    def call(self, index: int, node: Node, args: list[Any],
             attrs: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class Slice:
    """One slice of a run's timeline: ``track`` (``cpu``, ``accelerator``, ``wait``),
    its name and start/end in seconds from the start of the run."""

    track: str
    name: str
    start: float
    end: float


class VirtualMachine:
    """``executable`` ready to run on ``model``'s kernels and device.

    Parameters
    ----------
    model : ModelHost
        A :class:`~.loaded_model.LoadedModel`: the program whose constants,
        accelerator programs and device the executable uses (a
        :class:`~.resident.ResidentModel` keeps activations on the device).
    executable : Executable
        Built by :func:`~.vm_build.build_executable` or read from a ``.tfm``.
    futures : bool
        Run accelerator programs on their own thread (True), or inline.
    kernels, shape_functions : mapping, optional
        Kernels (and their shape functions) of this executable beyond the runtime's
        (:data:`~.kernels.KERNELS`): a bucketed model's (:mod:`.bucketed`).

    Attributes
    ----------
    timeline : list of Slice
        The last run's slices.
    storage_allocations : int
        Buffers ``ALLOC_STORAGE`` allocated in the last run (the arenas of a statically
        planned executable are allocated once, when the VM is made, and not counted).
    inline_rule : InlineRule
        The handoff estimate and the ``INVOKE_ACCEL`` sites (function, pc) the next run
        runs inline (:attr:`inline_sites`, :attr:`handoff_seconds`;
        :mod:`.inline_rule`).
    """

    def __init__(self, model: ModelHost, executable: Executable, *,
                 futures: bool = True,
                 kernels: Mapping[str, Callable[..., Any]] | None = None,
                 shape_functions: Mapping[str, Callable[..., Any]] | None = None) -> None:
        executable.validate()
        self.kernels = {**KERNELS, **(kernels or {})}
        self.shape_functions = {**SHAPE_FUNCTIONS, **(shape_functions or {})}
        self.model = model
        self.executable = executable
        self.futures = futures
        self.arenas = {name: np.zeros(nbytes, np.uint8)
                       for name, nbytes in executable.pools.items()}
        self._slices: list[tuple[str, str, float, float]] = []
        self.storage_allocations = 0
        self._pool: ThreadPoolExecutor | None = None
        self._last: Future | None = None  # the last program issued to the thread
        # by issued program: its site, issue time and end time (set when it ends)
        self._issued: dict[Future, tuple[tuple[int, int], float, list[float]]] = {}
        # the run's measures: host work by site, handoffs (:mod:`.inline_rule`)
        self._site_work: dict[Site, float] = {}
        self._handoffs: list[float] = []
        self.inline_rule = InlineRule()
        # by function: ALLOC_TENSOR views of the arenas (pc -> (storage, view)), made
        # once: a planned tensor is the same view of the same arena in every run
        self._views: list[dict[int, tuple[np.ndarray, np.ndarray]]] = [
            {} for _ in executable.functions]
        self._arena_ids = {id(a) for a in self.arenas.values()}
        self._t0 = 0.0
        self._symbols: dict[str, int] = {}
        nodes = executable.nodes or kernel_nodes(model.program, len(executable.attrs))
        self._code = [decode_function(f.name, f.code, executable, nodes, index == 0, self.kernels)
                      for index, f in enumerate(executable.functions)]

    def close(self) -> None:
        """Stop the accelerator thread."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> VirtualMachine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def inline_sites(self) -> set[Site]:
        """``INVOKE_ACCEL`` sites (function, pc) the next run runs inline: the host's
        work before it read the program's result took less than two handoffs between
        the threads (:attr:`handoff_seconds`)."""
        return self.inline_rule.inline_sites

    @property
    def handoff_seconds(self) -> float | None:
        """The handoff estimate (:class:`~.inline_rule.InlineRule`): a low quantile of
        the recent times from a program's end to the host going on after waiting for
        it."""
        return self.inline_rule.handoff_seconds

    # ---------------------------------------------------------------------- running
    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> Any:
        """Run ``main`` on ``inputs`` (by name or in order); the output on the host.

        Raises
        ------
        RuntimeInputError
            Inputs that do not match the model's, or NaN/inf in an input a quantized
            model quantizes (names the input).
        VMError
            A malformed run (a kernel without a shape function, a bad branch value).
        """
        program = self.model.program
        values = input_values(program, inputs)
        self._symbols = _check_inputs(program, values)
        self._slices = []
        self.storage_allocations = 0
        self._t0 = time.perf_counter()
        if self.futures and self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="tensorfab-accel")
        self._issued, self._handoffs, self._site_work = {}, [], {}
        try:
            with limited_blas():  # once for the run, not per kernel (about 10 µs each)
                out = self._call(0, values)
                return self._host(self._resolve(out))
        finally:
            self._inline_short_waits()

    def _inline_short_waits(self) -> None:
        """After a run: the program sites whose host work before it read the result
        (as last measured with the program issued) took less than two handoffs (there
        and back) run inline from the next run on: the overlap they bought was less
        than it cost (:class:`~.inline_rule.InlineRule`)."""
        self.inline_rule.update(self._handoffs, self._site_work)

    def _call(self, index: int, args: list[Any]) -> Any:
        fn = self.executable.functions[index]
        regs: list[Any] = [None] * fn.num_registers
        regs[:len(args)] = args
        code = self._code[index]
        views = self._views[index]
        record = self._slices.append  # atomic under the GIL: both threads append
        hook = self.model.instrument
        clock = time.perf_counter
        pc = 0
        try:
            while True:
                ins = code[pc]
                op = ins[0]
                pc += 1
                if op in (_INVOKE, _INVOKE_INTO):
                    # (op, dst, kernel, attrs, arg registers, kernel function, resolve,
                    #  symbolic reshape, node)
                    args_ = [regs[r] for r in ins[4]]
                    if ins[6]:  # an argument may be a future or in device memory
                        args_ = [self._host(self._resolve(a)) for a in args_]
                    attrs = ins[3]
                    if ins[7] and self._symbols:
                        attrs = {**attrs, "newshape": tuple(self._symbols.get(d, d)
                                                            for d in attrs["newshape"])}
                    if hook is None:
                        start = clock()
                        value = ins[5](args_, attrs)
                    else:  # the slice without the hooks' time
                        node, value, start = self._instrumented(hook, ins, args_, attrs)
                    # the slice holds the kernel and the write of its result to its place
                    if op == _INVOKE:
                        regs[ins[1]] = value
                    else:
                        out = regs[ins[1]]
                        if value.shape != out.shape or value.dtype != out.dtype:
                            raise VMError(f"function {fn.name!r} pc {pc - 1}: {ins[2]} made "
                                          f"{value.dtype}{value.shape}, its planned place "
                                          f"holds {out.dtype}{out.shape}")
                        np.copyto(out, value)
                    record(("cpu", ins[2], start, clock()))
                    if hook is not None:
                        hook.after(ins[8], node, args_, attrs, value, None)
                elif op == _KILL:
                    regs[ins[1]] = None
                elif op == _INVOKE_ACCEL:
                    # (op, dst, node, arg registers, read back to the host, inline)
                    regs[ins[1]] = self._invoke_accel(
                        ins[2], [regs[r] for r in ins[3]], ins[4],
                        ins[5] or (index, pc - 1) in self.inline_sites, (index, pc - 1))
                elif op == _CONST:
                    regs[ins[1]] = self.model.program.constants[ins[2]]
                elif op == _MOVE:
                    regs[ins[1]] = regs[ins[2]]
                elif op == _GET_ITEM:
                    regs[ins[1]] = self._resolve(regs[ins[2]])[ins[3]]
                elif op == _TUPLE:
                    regs[ins[1]] = tuple(regs[r] for r in ins[2:])
                elif op == _SHAPE_FUNC:
                    fn_shape = self.shape_functions.get(ins[2])
                    if fn_shape is None:
                        raise VMError(f"function {fn.name!r} pc {pc - 1}: no shape function for "
                                      f"{ins[2]!r}")
                    regs[ins[1]] = fn_shape([_shape_of(self._resolve(regs[r])) for r in ins[4:]],
                                            self.executable.attrs[ins[3]])
                elif op == _ALLOC_STORAGE:
                    arena = self.arenas.get(ins[3])
                    if arena is None or arena.nbytes < ins[2]:  # not planned: allocated now
                        self.storage_allocations += 1
                        arena = np.zeros(ins[2], np.uint8)
                    regs[ins[1]] = arena
                elif op == _ALLOC_TENSOR:
                    storage = regs[ins[2]]
                    view = views.get(pc)
                    if view is not None and view[0] is storage:
                        regs[ins[1]] = view[1]
                        continue
                    literal = not isinstance(ins[5], int)
                    shape = ins[5] if literal else regs[ins[5]]
                    dtype = np.dtype(ins[4])
                    n = math.prod(shape) * dtype.itemsize
                    regs[ins[1]] = storage[ins[3]: ins[3] + n].view(dtype).reshape(shape)
                    if literal and id(storage) in self._arena_ids:
                        views[pc] = (storage, regs[ins[1]])
                elif op == _IF:
                    cond = np.asarray(self._resolve(regs[ins[1]]))
                    if cond.size != 1:
                        raise VMError(f"function {fn.name!r} pc {pc - 1}: IF on a value of "
                                      f"shape {cond.shape}; it takes a scalar")
                    pc = ins[2] if bool(cond.reshape(())) else ins[3]
                elif op == _GOTO:
                    pc = ins[1]
                elif op == _CALL:
                    regs[ins[1]] = self._call(ins[2], [regs[r] for r in ins[3:]])
                elif op == _RET:
                    return regs[ins[1]]
                else:  # validate() refused it already
                    raise VMError(f"function {fn.name!r} pc {pc - 1}: opcode {op}")
        except KernelError as exc:  # no cost until raised: named here, not per kernel
            ins = code[pc - 1]
            if ins[0] in (_INVOKE, _INVOKE_INTO):
                self._name_node(exc, ins[8], ins[2])
            raise

    def _name_node(self, exc: KernelError, index: int, op: str) -> None:
        """Name node ``index`` (running ``op``) in ``exc``, raised by its kernel."""
        name = self.model.program.nodes[index].name if index >= 0 else ""
        exc.name_node(name, op, index)

    def _instrumented(self, hook: Instrument, ins: tuple[Any, ...], args: list[Any],
                      attrs: Mapping[str, Any]) -> tuple[Node, Any, float]:
        """Run a decoded ``INVOKE`` after ``hook.before`` (``hook.failed`` if it
        raises); its node, value and start time (the caller records the slice and calls
        ``hook.after``)."""
        index = ins[8]
        node = (self.model.program.nodes[index] if index >= 0 else
                Node(ins[2], (), ins[3], -1))
        hook.before(index, node, args, attrs)
        start = time.perf_counter()
        try:
            value = ins[5](args, attrs)
        except BaseException as exc:
            hook.failed(index, node, args, attrs, exc)
            raise
        return node, value, start

    def _invoke_accel(self, index: int, args: list[Any], read_back: bool, inline: bool,
                      site: tuple[int, int]) -> Any:
        """Run node ``index``'s program: a future on the accelerator thread, or, when
        ``inline`` (the host has nothing to do before it reads the result) or without
        futures, now on this thread, once the programs in flight are done (the device
        runs one program at a time, in issue order, and a handoff to the other thread
        and back would only add its latency). With ``read_back``, its output is read to
        the host right after it (a CPU kernel reads it: the host then finds it read).
        ``site`` (function, pc) is where the host's work before it reads an issued
        program's result is measured (:meth:`_inline_short_waits`)."""
        model = self.model
        node = model.program.nodes[index]

        def run() -> Any:
            values = [self._resolve(a, host=False) for a in args]
            start = time.perf_counter()
            try:
                out = model.call(index, node, values, node.attrs)
            except KernelError as exc:
                self._name_node(exc, index, node.op)
                raise
            if read_back:
                host_value(out)  # a DeviceTensor keeps what it read
            self._record("accelerator", str(node.attrs.get("layer") or index), start)
            ended[0] = time.perf_counter()
            return out

        ended = [0.0]

        if self._pool is None:
            return run()
        if inline:
            self._drain()
            return run()
        self._last = self._pool.submit(run)
        self._issued[self._last] = (site, time.perf_counter(), ended)
        return self._last

    def _drain(self) -> None:
        """Wait for the programs in flight (the last one issued: they run in order)."""
        if self._last is not None:
            self._resolve(self._last)
            self._last = None

    def _host(self, v: Any) -> Any:
        """``v`` on the host; device memory is never touched by two threads at once:
        while a program is in flight, it is read on the accelerator thread."""
        if type(v) is DeviceTensor and v.on_host:
            return v.numpy()
        if self._pool is None or not _on_device(v):
            return host_value(v)
        if self._last is None or self._last.done():
            self._last = None
            return host_value(v)
        return self._pool.submit(host_value, v).result()

    def _resolve(self, v: Any, host: bool = True) -> Any:
        """``v`` with futures waited for; on the ``host`` thread, the first wait for
        an issued program measures the host's work since its issue and, when the host
        waited past the program's end, the handoff."""
        if isinstance(v, Future):
            issued = self._issued.pop(v, None) if host else None
            if issued is not None:
                site, t_issue, ended = issued
                self._site_work[site] = time.perf_counter() - t_issue
            if not v.done():
                start = time.perf_counter()
                out = v.result()
                self._record("wait", "wait for the accelerator", start)
                if issued is not None and ended[0]:
                    self._handoffs.append(time.perf_counter() - ended[0])
                return out
            return v.result()
        if isinstance(v, tuple):
            return tuple(self._resolve(x, host) for x in v)
        return v

    def _record(self, track: str, name: str, start: float) -> None:
        self._slices.append((track, name, start, time.perf_counter()))

    @property
    def timeline(self) -> list[Slice]:
        """The last run's slices, in seconds from its start."""
        t0 = self._t0
        return [Slice(track, name, a - t0, b - t0) for track, name, a, b in self._slices]


def _on_device(v: Any) -> bool:
    if isinstance(v, tuple):
        return any(_on_device(x) for x in v)
    return isinstance(v, DeviceTensor)


def _shape_of(v: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in np.shape(v)) if not hasattr(v, "addr") else tuple(v.shape)


def overlap_seconds(timeline: Sequence[Slice]) -> float:
    """Seconds during which a CPU kernel and an accelerator program ran at once."""
    cpu = sorted((s.start, s.end) for s in timeline if s.track == "cpu")
    accel = sorted((s.start, s.end) for s in timeline if s.track == "accelerator")
    total, j = 0.0, 0
    for a0, a1 in accel:
        while j < len(cpu) and cpu[j][1] <= a0:
            j += 1
        k = j
        while k < len(cpu) and cpu[k][0] < a1:
            total += max(0.0, min(a1, cpu[k][1]) - max(a0, cpu[k][0]))
            k += 1
    return total


def vm_trace(timeline: Sequence[Slice], title: str = "vm") -> dict[str, Any]:
    """The Trace Event Format object (ui.perfetto.dev) of a VM run's timeline: one
    process, tracks ``cpu``, ``accelerator`` and ``wait`` (host waiting on a future)."""
    tids = {"cpu": 1, "accelerator": 2, "wait": 3}
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                                     "args": {"name": title}}]
    for track, tid in tids.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                       "args": {"name": track}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid,
                       "args": {"sort_index": tid}})
    for s in timeline:
        events.append({"name": s.name, "cat": s.track, "ph": "X", "pid": 1,
                       "tid": tids[s.track], "ts": s.start * 1e6,
                       "dur": (s.end - s.start) * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
