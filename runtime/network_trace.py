"""One Perfetto/Chrome timeline of a whole network run (from a :class:`~.profiling.Profile`).

The time axis is hardware time: the nodes follow one another, each accelerator program
lasting its measured cycles at the device's clock (a board's START to done, from its
own CYCLE counter), each CPU operator its wall time on the host. Simulation time (rtl,
a virtual board) and the model's one-time load are not on the axis; every slice keeps
its wall time in its arguments (``seconds``). On an untimed executor (fsim), whose
cycles are estimates, an accelerator program lasts its wall time and its slice says so
(``"time": "wall"``).

Process 1, ``network``, has a ``cpu`` track with a slice per CPU kernel and an
``accelerator`` track with a slice per accelerator program (its arguments hold shapes,
cycles, hardware time, MACs and utilization), and, when the executor reports its
counter CSRs (rtl, boards), a counter track per engine (``load busy``, ``compute
busy``, ...) holding the engine's busy cycles during each program. When the executor
recorded engine activity (``rtl`` with tracing), process 2, ``accelerator engines``,
holds the engine tracks of :mod:`tensorfab.sim.trace` (``load``, ``compute``, ``gemm``,
``alu``, ``store``; slices named by instruction, token stalls nested), at their cycles
on the same hardware-time axis, inside their program's slice.
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
    ts = 0.0  # microseconds on the hardware-time axis
    for rec in profile.layers:
        hardware = rec.hardware_seconds
        dur = (rec.seconds if hardware is None else hardware) * 1e6
        args: dict[str, Any] = {k: v for k, v in rec.to_json().items()
                                if v is not None and k not in ("op", "device")}
        if rec.device == "accel":
            args["time"] = "wall" if hardware is None else "hardware"
        events.append({"name": rec.op, "cat": rec.device, "ph": "X", "pid": _NETWORK,
                       "tid": _ACCEL if rec.device == "accel" else _CPU,
                       "ts": ts, "dur": dur, "args": args})
        if hardware is not None:
            for engine, cycles in rec.busy.items():
                name = f"{engine} busy"
                events.append({"name": name, "ph": "C", "pid": _NETWORK, "ts": ts,
                               "args": {"cycles": cycles}})
                events.append({"name": name, "ph": "C", "pid": _NETWORK, "ts": ts + dur,
                               "args": {"cycles": 0}})
        if rec.intervals and hardware is not None and rec.clock_hz:
            sub = trace_events(rec.intervals, clock_mhz=rec.clock_hz / 1e6)["traceEvents"]
            names = {e["tid"]: e["args"]["name"] for e in sub if e["name"] == "thread_name"}
            for e in sub:
                if e["ph"] != "X":
                    continue
                track = names[e["tid"]]
                if track not in engine_tid:
                    engine_tid[track] = len(engine_tid) + 1
                events.append({**e, "pid": _ENGINES, "tid": engine_tid[track],
                               "ts": e["ts"] + ts, "args": {**e["args"], "layer": rec.index}})
        ts += dur
    if engine_tid:
        events += _meta(_ENGINES, 0, "process_name", "accelerator engines")
        order = sorted(engine_tid, key=lambda t: TRACKS.index(t) if t in TRACKS else 99)
        for k, track in enumerate(order, start=1):
            events += _meta(_ENGINES, engine_tid[track], "thread_name", track)
            events[-1]["args"]["sort_index"] = k
    clock = profile.clock_hz
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": GENERATOR,
                          "time_unit": "1 us = 1 us of hardware time (accelerator programs "
                                       "at the device's clock, CPU operators their wall "
                                       "time)",
                          "executor": profile.executor,
                          "clock_mhz": None if clock is None else clock / 1e6,
                          "total_cycles": profile.total_cycles,
                          "hardware_seconds": profile.hardware_seconds,
                          "wall_seconds": profile.seconds,
                          "load_seconds": profile.load_seconds}}


def write_network_trace(profile: Profile, path: str | Path, title: str = "network") -> Path:
    """Write :func:`network_trace` of ``profile`` to ``path`` (``.json``); returns it."""
    path = Path(path)
    path.write_text(json.dumps(network_trace(profile, title)))
    return path
