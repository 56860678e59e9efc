"""The figures every whole-model benchmark reports about one int8 inference: MACs on the
accelerator, host traffic against the input and output, the CPU operators, cycles and
utilization per accelerator program, and the same inference in Verilator."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["accelerator_figures", "profile_entry", "rtl_figures"]


def profile_entry(profile: Any) -> dict[str, Any]:
    """A run's total cycles and utilization, and per accelerator program its source
    node names, cycles, MACs and utilization."""
    return {"total_cycles": profile.total_cycles,
            "utilization": None if profile.utilization is None
            else round(profile.utilization, 4),
            "layers": [{"node": r.name or r.op, "op": r.op, "cycles": r.cycles,
                        "macs": r.macs,
                        "utilization": None if r.utilization is None
                        else round(r.utilization, 4)}
                       for r in profile.layers if r.device == "accel"]}


def accelerator_figures(profile: Any, cpu_operators: Any, macs: int,
                        io_bytes: int) -> dict[str, Any]:
    """``macs``, ``accel_macs``, ``accel_mac_fraction``, ``accel_programs``,
    ``host_bytes``, ``io_bytes``, ``host_bytes_ratio``, ``cpu_operators`` and ``fsim``
    (:func:`profile_entry`) of one resident run's ``profile``; ``macs`` is the model's
    own count (:func:`~tensorfab.compiler.frontend.onnx_macs.onnx_macs`), ``io_bytes``
    its input and output bytes."""
    host = None if profile.host_traffic is None else profile.host_traffic.total
    return {
        "macs": macs,
        "accel_macs": profile.accel_macs,
        "accel_mac_fraction": round(profile.accel_macs / macs, 4),
        "accel_programs": sum(1 for r in profile.layers if r.device == "accel"),
        "host_bytes": host,
        "io_bytes": io_bytes,
        "host_bytes_ratio": None if host is None else round(host / io_bytes, 3),
        "cpu_operators": list(cpu_operators),
        "fsim": profile_entry(profile),
    }


def rtl_figures(program: Any, feeds: Mapping[str, np.ndarray],
                fsim_output: np.ndarray) -> dict[str, Any]:
    """The same inference cycle-accurately in Verilator: :func:`profile_entry`, wall
    ``seconds`` and ``matches_fsim`` (its output equal to ``fsim_output``)."""
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim import get_device

    t0 = time.perf_counter()
    rtl = profile_program(program, feeds, get_device("rtl"))
    return profile_entry(rtl) | {
        "seconds": round(time.perf_counter() - t0, 3),
        "matches_fsim": bool(np.array_equal(np.asarray(rtl.output), fsim_output))}
