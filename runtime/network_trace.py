"""One Perfetto/Chrome timeline of a whole network run (from a :class:`~.profiling.Profile`).

Process 1, ``network``, is the run in wall-clock time: a ``cpu`` track with a slice per
CPU kernel and an ``accelerator`` track with a slice per accelerator program (its
arguments hold shapes, cycles, MACs and utilization). When the executor recorded engine
activity (``rtl`` with tracing), process 2, ``accelerator engines``, holds the engine
tracks of :mod:`tensorfab.sim.trace` (``load``, ``compute``, ``gemm``, ``alu``,
``store``; slices named by instruction, token stalls nested): each program's cycles are
stretched over its wall-time slice, so the engines line up under it, and every engine
slice keeps its true ``first_cycle`` and ``cycles`` in its arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tensorfab.sim.trace import GENERATOR, TRACKS, trace_events

from .profiling import Profile

__all__ = ["network_trace", "write_network_trace"]

_NETWORK, _ENGINES = 1, 2
_CPU, _ACCEL = 1, 2


def _meta(pid: int, tid: int, what: str, name: str) -> list[dict[str, Any]]:
    events = [{"name": what, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}]
    if what == "thread_name":
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return events


def network_trace(profile: Profile, title: str = "network") -> dict[str, Any]:
    """The Trace Event Format object of ``profile`` (see the module docstring)."""
    events: list[dict[str, Any]] = [*_meta(_NETWORK, 0, "process_name", title),
                                    *_meta(_NETWORK, _CPU, "thread_name", "cpu"),
                                    *_meta(_NETWORK, _ACCEL, "thread_name", "accelerator")]
    engine_tid: dict[str, int] = {}
    for rec in profile.layers:
        args: dict[str, Any] = {k: v for k, v in rec.to_json().items()
                                if v is not None and k not in ("op", "device")}
        events.append({"name": rec.op, "cat": rec.device, "ph": "X", "pid": _NETWORK,
                       "tid": _ACCEL if rec.device == "accel" else _CPU,
                       "ts": rec.start * 1e6, "dur": rec.seconds * 1e6, "args": args})
        if not (rec.intervals and rec.cycles):
            continue
        per_us = rec.cycles / max(rec.seconds * 1e6, 1e-9)  # cycles per microsecond
        sub = trace_events(rec.intervals, clock_mhz=per_us)["traceEvents"]
        names = {e["tid"]: e["args"]["name"] for e in sub if e["name"] == "thread_name"}
        for e in sub:
            if e["ph"] != "X":
                continue
            track = names[e["tid"]]
            if track not in engine_tid:
                engine_tid[track] = len(engine_tid) + 1
            e = {**e, "pid": _ENGINES, "tid": engine_tid[track],
                 "ts": e["ts"] + rec.start * 1e6,
                 "args": {**e["args"], "layer": rec.index}}
            events.append(e)
    if engine_tid:
        events += _meta(_ENGINES, 0, "process_name", "accelerator engines")
        order = sorted(engine_tid, key=lambda t: TRACKS.index(t) if t in TRACKS else 99)
        for k, track in enumerate(order, start=1):
            events += _meta(_ENGINES, engine_tid[track], "thread_name", track)
            events[-1]["args"]["sort_index"] = k
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": GENERATOR, "time_unit": "1 us = 1 us of wall time",
                          "executor": profile.executor,
                          "total_cycles": profile.total_cycles}}


def write_network_trace(profile: Profile, path: str | Path, title: str = "network") -> Path:
    """Write :func:`network_trace` of ``profile`` to ``path`` (``.json``); returns it."""
    path = Path(path)
    path.write_text(json.dumps(network_trace(profile, title)))
    return path
