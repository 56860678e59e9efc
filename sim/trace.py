"""Engine timelines: activity intervals, Chrome/Perfetto trace JSON and a PNG plot.

The RTL executor records, for each activity bit of the core
(:data:`tensorfab.hw.core.ACTIVITY`), the run-length intervals of cycles in which
it was high. Bit ``<track>_<kind>`` gives an :class:`Interval` on track ``<track>``
(``load``, ``compute``, ``gemm``, ``alu``, ``store``) of kind ``busy`` (the engine
holds an instruction; the GEMM core or ALU accepts a micro-op) or ``stall`` (of
those cycles, waiting on a dependency token). A stall interval lies inside a busy
interval of the same track.

:func:`write_chrome_trace` writes the Trace Event Format read by Perfetto
(ui.perfetto.dev) and ``chrome://tracing``: one thread (track) per engine, busy
slices with the stall slices nested inside them. :func:`plot_timeline` draws the
same as a PNG with matplotlib.

:func:`attribute_intervals` names the instruction of every interval: each engine
holds one instruction at a time, in program order, with at least one idle cycle
between two, so its k-th busy interval is its k-th instruction; a stall belongs to
the busy interval holding it, and GEMM/ALU activity to the compute instruction whose
interval holds it. Slices and plot labels then read ``#7 load.inp`` instead of
``busy``.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .png_figure import png_figure

if TYPE_CHECKING:
    from tensorfab.isa import Program

__all__ = ["TRACKS", "Interval", "attribute_intervals", "is_tensorfab_trace",
           "plot_timeline", "trace_events", "write_chrome_trace"]

#: ``otherData.generator`` of the trace files written here.
GENERATOR = "tensorfab"

#: Tracks in display order.
TRACKS: tuple[str, ...] = ("load", "compute", "gemm", "alu", "store")


class Interval(NamedTuple):
    """Cycles ``[start, end)`` in which ``track`` was ``kind`` (``busy``/``stall``).

    Cycles count from the first cycle after the start (CTRL write) of the run.
    ``index`` and ``insn`` name the instruction the engine held (program index and
    canonical assembly) once :func:`attribute_intervals` has run.
    """

    track: str
    kind: str
    start: int
    end: int
    index: int | None = None
    insn: str = ""

    @property
    def cycles(self) -> int:
        """Length in cycles."""
        return self.end - self.start

    @property
    def label(self) -> str:
        """``#index mnemonic`` of the instruction, else the kind."""
        if self.index is None:
            return self.kind
        return f"#{self.index} {self.insn.split(' ', 1)[0]}"


#: The engine track whose instructions a unit's activity belongs to.
_UNIT_ENGINE = {"gemm": "compute", "alu": "compute"}


def attribute_intervals(intervals: Iterable[Interval], program: Program) -> list[Interval]:
    """``intervals`` with the instruction of each named (see the module docstring).

    Parameters
    ----------
    intervals : iterable of Interval
        Activity intervals of one run of ``program`` (complete or cut short by an
        error, a hang or an interrupt).
    program : Program
        The program that ran.

    Returns
    -------
    list of Interval
        The same intervals, in the same order, with ``index`` and ``insn`` set where an
        instruction holds them (busy intervals past the end of an engine's stream, and
        activity outside any busy interval of its engine, stay unnamed).
    """
    from tensorfab.isa.disasm import format_insn

    from .race import ENGINE_NAMES

    ivs = list(intervals)
    streams: dict[str, list[int]] = {}
    for i, insn in enumerate(program.insns):
        streams.setdefault(ENGINE_NAMES[insn.engine], []).append(i)
    texts: dict[int, str] = {}

    def text(i: int) -> str:
        if i not in texts:
            texts[i] = format_insn(program.insns[i], program)
        return texts[i]

    # the k-th busy interval of an engine holds its k-th instruction
    held: dict[str, tuple[list[int], list[int], list[int]]] = {}
    for track, stream in streams.items():
        busy = sorted((iv for iv in ivs if iv.track == track and iv.kind == "busy"),
                      key=lambda iv: iv.start)
        pairs = list(zip(busy, stream, strict=False))
        held[track] = ([b.start for b, _ in pairs], [b.end for b, _ in pairs],
                       [i for _, i in pairs])

    def holder(track: str, iv: Interval) -> int | None:
        starts, ends, index = held.get(track, ([], [], []))
        k = bisect_right(starts, iv.start) - 1
        if k >= 0 and iv.end <= ends[k]:
            return index[k]
        return None

    out = []
    for iv in ivs:
        i = holder(_UNIT_ENGINE.get(iv.track, iv.track), iv)
        out.append(iv if i is None else iv._replace(index=i, insn=text(i)))
    return out


def _tracks(intervals: Sequence[Interval]) -> list[str]:
    seen = {iv.track for iv in intervals}
    return [t for t in TRACKS if t in seen] + sorted(seen - set(TRACKS))


def trace_events(intervals: Iterable[Interval], *, clock_mhz: float | None = None,
                 process: str = "tensorfab core") -> dict[str, Any]:
    """The Trace Event Format object of ``intervals``.

    Parameters
    ----------
    intervals : iterable of Interval
        Activity intervals.
    clock_mhz : float, optional
        Core clock: timestamps become microseconds at that clock. Without it one
        cycle is shown as one microsecond (the format's time unit), so the time axis
        reads in cycles.
    process : str
        Name of the process row holding the tracks.

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": ..., "otherData": {...}}``.
    """
    ivs = list(intervals)
    scale = 1.0 / clock_mhz if clock_mhz else 1.0
    tracks = _tracks(ivs)
    tid = {t: k + 1 for k, t in enumerate(tracks)}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": process}}]
    for t in tracks:
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid[t],
                       "args": {"name": t}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid[t],
                       "args": {"sort_index": tid[t]}})
    # busy before stall at equal start, so viewers nest the stall inside the busy slice
    order = sorted(ivs, key=lambda iv: (iv.start, iv.kind != "busy", -iv.end))
    for iv in order:
        args: dict[str, Any] = {"kind": iv.kind, "first_cycle": iv.start,
                                "cycles": iv.end - iv.start}
        if iv.index is not None:
            args.update(instruction=iv.index, insn=iv.insn)
        name = iv.label if iv.kind == "busy" or iv.index is None else f"{iv.kind} {iv.label}"
        events.append({"name": name, "cat": iv.track, "ph": "X", "pid": 1,
                       "tid": tid[iv.track], "ts": iv.start * scale,
                       "dur": (iv.end - iv.start) * scale, "args": args})
    unit = f"1 us = {clock_mhz} cycles" if clock_mhz else "1 us = 1 cycle"
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"generator": GENERATOR, "time_unit": unit, "clock_mhz": clock_mhz}}


def write_chrome_trace(intervals: Iterable[Interval], path: str | Path, *,
                       clock_mhz: float | None = None) -> Path:
    """Write ``intervals`` as Chrome/Perfetto trace JSON (one track per engine).

    Parameters
    ----------
    intervals : iterable of Interval
        Activity intervals (e.g. :attr:`tensorfab.sim.rtl.RtlRunResult.intervals`).
    path : str or Path
        Output ``.json``.
    clock_mhz : float, optional
        See :func:`trace_events`.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.write_text(json.dumps(trace_events(intervals, clock_mhz=clock_mhz)))
    return path


def is_tensorfab_trace(path: str | Path) -> bool:
    """Whether ``path`` is a trace JSON written by :func:`write_chrome_trace`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    other = data.get("otherData") if isinstance(data, dict) else None
    return isinstance(other, dict) and other.get("generator") == GENERATOR


#: Colours of the plot by kind.
_COLOURS = {"busy": "#3b7dd8", "stall": "#e8833a"}


def plot_timeline(intervals: Iterable[Interval], path: str | Path, *,
                  title: str | None = None, cycles: int | None = None) -> Path:
    """Draw ``intervals`` as a PNG timeline: one row per engine, busy in blue and
    token stalls in orange over it, each busy bar wide enough for it labelled with its
    instruction (``#7 load.inp``, see :func:`attribute_intervals`).

    Parameters
    ----------
    intervals : iterable of Interval
        Activity intervals.
    path : str or Path
        Output ``.png``.
    title : str, optional
        Figure title.
    cycles : int, optional
        Length of the run (the x axis ends there); default the last interval's end.

    Returns
    -------
    Path
        ``path``.
    """
    from matplotlib.patches import Patch

    ivs = list(intervals)
    tracks = _tracks(ivs) or list(TRACKS)
    end = cycles if cycles is not None else max((iv.end for iv in ivs), default=1)
    with png_figure(path, (12, 0.6 * len(tracks) + 1.4), dpi=120) as (_fig, ax):
        for row, track in enumerate(reversed(tracks)):
            for kind, (lo, height) in (("busy", (0.15, 0.7)), ("stall", (0.3, 0.4))):
                bars = [(iv.start, iv.end - iv.start) for iv in ivs
                        if iv.track == track and iv.kind == kind]
                if bars:
                    ax.broken_barh(bars, (row + lo, height), facecolors=_COLOURS[kind],
                                   linewidth=0)
            for iv in ivs:  # labels on bars of at least 1/25 of the axis
                if (iv.track == track and iv.kind == "busy" and iv.index is not None
                        and iv.cycles * 25 >= max(end, 1)):
                    ax.text(iv.start + iv.cycles / 2, row + 0.5, iv.label, ha="center",
                            va="center", fontsize=6, color="black", clip_on=True)
        ax.set_yticks([r + 0.5 for r in range(len(tracks))], list(reversed(tracks)))
        ax.set_ylim(0, len(tracks))
        ax.set_xlim(0, max(end, 1))
        ax.set_xlabel("cycle")
        ax.legend(handles=[Patch(color=c, label=k) for k, c in _COLOURS.items()],
                  loc="upper right", fontsize="small")
        if title:
            ax.set_title(title)
    return Path(path)
