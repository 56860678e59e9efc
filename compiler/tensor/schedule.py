"""A small schedule language whose primitives are recorded, printed and replayed.

A :class:`Schedule` starts from one tile covering each whole axis, one virtual thread
and buffers split evenly between threads, and is changed only through primitives:

``split(axis, factor)`` / ``tile(**factors)``
    Tile size along an axis: ``b`` (batch entries), ``oc`` / ``ic`` (output / input
    channel blocks), ``oh`` / ``ow`` (output pixels).
``reorder(*axes)``
    Order of the output tile loops, outermost first (``b``, ``oc``, ``oh``, ``ow``; the
    reduction over ``ic`` tiles always runs inside a group of virtual threads).
``virtual_thread(n)``
    Interleave ``n`` instruction streams, each with its own buffer slots.
``place(buffer, pitch)``
    Buffer placement: thread ``v``'s slot in ``inp``, ``wgt`` or ``acc`` starts at entry
    ``v · pitch`` (default ``depth // n``).

Every call appends a :class:`Primitive` to :attr:`Schedule.trace`; ``str(schedule)``
prints it one primitive per line, :meth:`Schedule.replay` rebuilds a schedule from a
trace, and two schedules compare equal when their workloads, configs and traces do.
:meth:`Schedule.plan` validates the result: a tile that overflows its buffer slot, too
many virtual threads or micro-ops raise :class:`ScheduleError` naming the primitive
responsible and the limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tensorfab.isa import HwConfig, Opcode, insn_formats
from tensorfab.isa.formats import MAX_XFER

from .errors import CompileError
from .residency import kernel_uop_count
from .tensorize import MAX_ITER
from .tile_plan import AXES, OUTER_AXES, TilePlan, tile_starts
from .workload import Workload

#: Largest LOAD/STORE size or stride field.
#: Buffers a schedule places.
BUFFERS = ("inp", "wgt", "acc")


class ScheduleError(CompileError):
    """An invalid schedule.

    Attributes
    ----------
    primitive : str
        The primitive that made the schedule invalid, as printed in the trace.
    limit : str
        The hardware limit broken (``inp_depth``, ``dep_queue_depth``...).
    """

    def __init__(self, primitive: str, limit: str, message: str) -> None:
        self.primitive = primitive
        self.limit = limit
        super().__init__(f"{primitive}: {message} (limit: {limit})")


@dataclass(frozen=True)
class Primitive:
    """One recorded schedule primitive: its name and arguments."""

    name: str
    args: tuple[object, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.args)})"


def max_pad(cfg: HwConfig) -> int:
    """Largest padding a LOAD applies on one side."""
    return (1 << insn_formats(cfg)[Opcode.LOAD].field("pad_top").width) - 1


class Schedule:
    """A recorded schedule of one :class:`Workload` on one :class:`HwConfig`.

    Parameters
    ----------
    workload : Workload
        The operator.
    cfg : HwConfig
        The target.
    bias : int
        Per-channel accumulator tiles the operator keeps (the bias and exact
        requantization vectors, :meth:`.Epilogue.channel_tiles`; ``True``: the bias).
    records : int
        Weight entries reserved for REQUANT records (:meth:`.Epilogue.record_entries`).
    residual : bool
        Reserve one output tile per thread at the top of the input buffer for a
        residual epilogue (:attr:`.TilePlan.residual`).
    acc_records : int
        Accumulator entries reserved for the records of requantizing STOREs
        (:meth:`.Epilogue.acc_record_entries`).

    Examples
    --------
    >>> s = Schedule(Workload.conv2d(1, 64, 56, 56, 64, 3, 1, 1), PRESETS["default"])
    >>> s.tile(oh=8, ow=56).virtual_thread(2)  # doctest: +SKIP
    >>> print(s)  # doctest: +SKIP
    tile(oh=8, ow=56)
    virtual_thread(2)
    """

    def __init__(self, workload: Workload, cfg: HwConfig, *, bias: int = False,
                 records: int = 0, residual: bool = False, acc_records: int = 0) -> None:
        self.workload = workload
        self.cfg = cfg
        self.bias = bias
        self.records = records
        self.residual = residual
        self.acc_records = acc_records
        self.trace: list[Primitive] = []
        self._extents = workload.extents(cfg)
        self._tiles = dict(self._extents)
        self._order: tuple[str, ...] = OUTER_AXES
        self._vthreads = 1
        self._pitch: dict[str, int | None] = dict.fromkeys(BUFFERS)
        self._set_by: dict[str, str] = {}  # axis / "vthreads" / buffer -> primitive text

    # ------------------------------------------------------------------ primitives
    def _record(self, name: str, *args: object) -> str:
        p = Primitive(name, tuple(args))
        self.trace.append(p)
        return str(p)

    def split(self, axis: str, factor: int) -> Schedule:
        """Tile ``axis`` into tiles of ``factor`` (the last one shifted back to overlap
        on output axes, shorter on ``ic``).

        Raises
        ------
        ScheduleError
            Unknown axis, or ``factor`` outside ``1..extent``.
        """
        text = self._record("split", axis, factor)
        self._split(text, axis, factor)
        return self

    def tile(self, **factors: int) -> Schedule:
        """Several :meth:`split` at once, recorded as one ``tile(...)`` primitive."""
        p = Primitive("tile", tuple(f"{a}={f}" for a, f in factors.items()))
        self.trace.append(p)
        for axis, factor in factors.items():
            self._split(str(p), axis, factor)
        return self

    def _split(self, text: str, axis: str, factor: int) -> None:
        if axis not in AXES:
            raise ScheduleError(text, "axes", f"unknown axis {axis!r} (axes: "
                                f"{', '.join(AXES)})")
        ext = self._extents[axis]
        if not isinstance(factor, int) or not 1 <= factor <= ext:
            raise ScheduleError(text, f"{axis} extent", f"tile {factor!r} outside 1..{ext}")
        self._tiles[axis] = factor
        self._set_by[axis] = text

    def reorder(self, *axes: str) -> Schedule:
        """Set the output tile loop order, outermost first; axes left out keep their
        relative order after the given ones.

        Raises
        ------
        ScheduleError
            An unknown or repeated axis, or the reduction axis ``ic``.
        """
        text = self._record("reorder", *axes)
        if "ic" in axes:
            raise ScheduleError(text, "reduction", "the ic tile loop always runs inside a "
                                "group of virtual threads and cannot be reordered")
        bad = [a for a in axes if a not in OUTER_AXES]
        if bad or len(set(axes)) != len(axes):
            raise ScheduleError(text, "axes", f"axes must be distinct names among "
                                f"{', '.join(OUTER_AXES)}")
        self._order = tuple(axes) + tuple(a for a in self._order if a not in axes)
        return self

    def virtual_thread(self, n: int) -> Schedule:
        """Use ``n`` virtual threads.

        Raises
        ------
        ScheduleError
            ``n < 1`` or more than ``dep_queue_depth`` (tokens of all threads must fit a
            queue).
        """
        text = self._record("virtual_thread", n)
        if not isinstance(n, int) or n < 1:
            raise ScheduleError(text, "vthreads", f"{n!r} virtual threads: need at least 1")
        if n > self.cfg.dep_queue_depth:
            raise ScheduleError(text, "dep_queue_depth",
                                f"{n} virtual threads need up to {n} tokens in a queue, the "
                                f"queues hold {self.cfg.dep_queue_depth}")
        self._vthreads = n
        self._set_by["vthreads"] = text
        return self

    def place(self, buffer: str, pitch: int) -> Schedule:
        """Place thread ``v``'s slot of ``buffer`` at entry ``v · pitch``.

        Raises
        ------
        ScheduleError
            Unknown buffer or non-positive pitch.
        """
        text = self._record("place", buffer, pitch)
        if buffer not in BUFFERS:
            raise ScheduleError(text, "buffers", f"unknown buffer {buffer!r} (buffers: "
                                f"{', '.join(BUFFERS)})")
        if not isinstance(pitch, int) or pitch < 1:
            raise ScheduleError(text, f"{buffer}_depth", f"pitch {pitch!r} must be positive")
        self._pitch[buffer] = pitch
        self._set_by[buffer] = text
        return self

    # --------------------------------------------------------------------- replay
    def replay(self, trace: Iterable[Primitive]) -> Schedule:
        """Apply recorded primitives to this schedule (in order) and return it."""
        for p in trace:
            if p.name == "tile":
                pairs = (str(a).split("=") for a in p.args)
                self.tile(**{k: int(v) for k, v in pairs})
            else:
                getattr(self, p.name)(*p.args)
        return self

    @classmethod
    def from_trace(cls, workload: Workload, cfg: HwConfig, trace: Iterable[Primitive], *,
                   bias: bool = False, records: int = 0, residual: bool = False,
                   acc_records: int = 0) -> Schedule:
        """A new schedule with ``trace`` replayed."""
        return cls(workload, cfg, bias=bias, records=records, residual=residual,
                   acc_records=acc_records).replay(trace)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.trace)

    def __repr__(self) -> str:
        return f"Schedule({self.workload.describe()!r}, {self.cfg.name!r}, " \
               f"[{'; '.join(str(p) for p in self.trace)}])"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.workload, self.cfg, self.bias, self.records, self.residual,
                self.acc_records, self.trace) == (
                    other.workload, other.cfg, other.bias, other.records, other.residual,
                    other.acc_records, other.trace)

    __hash__ = None  # type: ignore[assignment]  # mutable

    # ------------------------------------------------------------------ validation
    def _who(self, *keys: str) -> str:
        """The latest primitive that set any of ``keys`` (the default tiling if none)."""
        texts = [self._set_by[k] for k in keys if k in self._set_by]
        if not texts:
            return "default (whole-axis tiles)"
        order = {str(p): i for i, p in enumerate(self.trace)}
        return max(texts, key=lambda t: order.get(t, -1))

    def plan(self) -> TilePlan:
        """Validate and resolve the schedule.

        Raises
        ------
        ScheduleError
            A slot overflows its buffer, slots overlap or run past a buffer, a loop or
            transfer exceeds its field, the micro-ops exceed ``uop_depth``, or padding
            exceeds the LOAD's pad field.
        """
        cfg, wl = self.cfg, self.workload
        v = self._vthreads
        reserved = math.prod(self._tiles[a] for a in ("b", "oc", "oh", "ow")) * v \
            if self.residual else 0
        depth = {"inp": cfg.inp_depth - reserved, "wgt": cfg.wgt_depth - self.records,
                 "acc": cfg.acc_depth - self.acc_records}
        if depth["wgt"] < 1:
            raise ScheduleError("epilogue", "wgt_depth", f"{self.records} REQUANT records "
                                f"fill the {cfg.wgt_depth}-entry weight buffer")
        if depth["acc"] < 1:
            raise ScheduleError("epilogue", "acc_depth", f"{self.acc_records} entries of "
                                f"STORE records fill the {cfg.acc_depth}-entry "
                                "accumulator buffer")
        pitches = {}
        for b in BUFFERS:
            p = self._pitch[b]
            if p is None:
                p = depth[b] // v
                if p < 1:
                    raise ScheduleError(self._who("vthreads"), f"{b}_depth",
                                        f"{v} threads cannot share {depth[b]} {b} entries")
            elif p * (v - 1) >= depth[b]:
                raise ScheduleError(self._who(b, "vthreads"), f"{b}_depth",
                                    f"the slot of thread {v - 1} starts at {p * (v - 1)}, "
                                    f"past {b}_depth {depth[b]}")
            pitches[b] = p
        plan = TilePlan(wl, cfg, tuple((a, self._tiles[a]) for a in AXES), self._order, v,
                        tuple(pitches.items()), self.bias, self.records, self.residual,
                        self.acc_records)
        pad = max_pad(cfg)
        if max(wl.padding) > pad:
            raise ScheduleError("workload", "pad field",
                                f"padding {wl.padding} exceeds the LOAD's {pad}-entry pad")
        self._check_slot(plan, "inp", plan.inp_entries(),
                         f"input tile {plan.tile('b')}×{plan.tile('ic')}×"
                         f"{plan.window[0]}×{plan.window[1]}", ("b", "ic", "oh", "ow"))
        self._check_slot(plan, "wgt", plan.wgt_entries(),
                         f"weight tile {plan.tile('oc')}×{plan.tile('ic')}×"
                         f"{wl.kernel[0]}×{wl.kernel[1]}", ("oc", "ic"))
        what = f"output tile {plan.tile('b')}×{plan.tile('oc')}×{plan.tile('oh')}×" \
               f"{plan.tile('ow')}" + (f" + {int(self.bias)}×{plan.tile('oc')} per-channel"
                                       if self.bias else "")
        self._check_slot(plan, "acc", plan.acc_entries, what, ("b", "oc", "oh", "ow"))
        self._check_fields(plan)
        uops = kernel_uop_count(plan)
        if uops > cfg.uop_depth:
            raise ScheduleError(self._who("b", "oc", "oh", "ow", "ic", "vthreads"),
                                "uop_depth", f"the micro-op kernels need {uops} entries, "
                                f"uop_depth is {cfg.uop_depth}")
        return plan

    def _check_slot(self, plan: TilePlan, buffer: str, need: int, what: str,
                    axes: tuple[str, ...]) -> None:
        pitch = plan.pitch(buffer)
        depth = {"inp": plan.inp_capacity, "wgt": self.cfg.wgt_depth,
                 "acc": plan.acc_capacity}[buffer]
        v = plan.vthreads
        if need > pitch:
            share = f"{buffer}_depth {depth} / {v} threads" if self._pitch[buffer] is None \
                else f"placed pitch {pitch}"
            raise ScheduleError(self._who(*axes, "vthreads", buffer), f"{buffer}_depth",
                                f"{what} = {need} entries overflows the {pitch}-entry "
                                f"{buffer} slot ({share})")
        if pitch * (v - 1) + need > depth:
            raise ScheduleError(self._who(*axes, "vthreads", buffer), f"{buffer}_depth",
                                f"the slot of thread {v - 1} ends at entry "
                                f"{pitch * (v - 1) + need}, past {buffer}_depth {depth}")

    def _check_fields(self, plan: TilePlan) -> None:
        wl = plan.workload
        ext = plan.extents
        strides = {"input row stride": plan.row_step * wl.width,
                   "weight row stride": ext["ic"] * wl.kernel[0] * wl.kernel[1],
                   "output row stride": wl.out_width}
        for what, value in strides.items():
            if value > MAX_XFER:
                raise ScheduleError("workload", "LOAD/STORE stride field",
                                    f"{what} {value} exceeds {MAX_XFER}")
        if plan.out_entries // plan.tile("ow") > MAX_ITER and plan.tile("ow") > MAX_ITER:
            raise ScheduleError(self._who("oh", "ow"), "loop extent",
                                f"tile loops exceed {MAX_ITER}")

    # ---------------------------------------------------------------- convenience
    @property
    def vthreads(self) -> int:
        """Virtual threads set so far."""
        return self._vthreads

    def tiles(self) -> dict[str, int]:
        """Current tile sizes by axis."""
        return dict(self._tiles)

    def n_tiles(self) -> int:
        """Output tiles of the current tiling."""
        n = self.workload.groups
        for a in OUTER_AXES:
            n *= len(tile_starts(self._extents[a], self._tiles[a]))
        return n


__all__ = ["BUFFERS", "MAX_XFER", "Primitive", "Schedule", "ScheduleError", "max_pad"]
