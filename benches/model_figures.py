"""The figures every whole-model benchmark reports about one int8 inference: MACs on the
accelerator, host traffic against the input and output, the CPU operators, cycles and
utilization per accelerator program, and the same inference in Verilator."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["accelerator_figures", "cosine", "int8_run_figures", "model_bench_main",
           "profile_entry", "rtl_figures"]


def model_bench_main(argv: Sequence[str] | None, description: str,
                     run: Callable[[str, str, list[str] | None], dict[str, Any]]) -> int:
    """The command line of a benchmark over a set of models: ``--target``,
    ``--config`` and ``--models A,B`` (default: all), then ``run(target, config,
    models)``'s JSON printed as the last line."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--target", default="fsim")
    ap.add_argument("--config", default="default")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    args = ap.parse_args(argv)
    models = [s for s in args.models.split(",") if s] or None
    print(json.dumps(run(args.target, args.config, models)))
    return 0


def cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """The cosine of ``a`` and ``b`` flattened; None when either is all zeros (an int8
    output can be: onnxruntime's QDQ softmax, quantized on a fixed [0, 1] range, is all
    zeros for a near-uniform distribution of 1000 classes)."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return None if norms == 0.0 else float(a @ b / norms)


def int8_run_figures(compiled: Any, feeds: Mapping[str, np.ndarray], device: Any,
                     macs: int, reference: np.ndarray) -> dict[str, Any]:
    """One profiled run of the compiled model ``compiled`` (a
    :class:`~tensorfab.compiler.model_compile.CompiledModel`) on ``feeds`` on ``device``:
    ``accel_macs``, ``accel_mac_fraction`` (of the model's own ``macs``),
    ``host_bytes`` against ``io_bytes`` (inputs + output), ``exact`` (the output equals
    the CPU integer graph's), ``cosine`` (:func:`cosine` with the float ``reference``,
    5 digits), ``top1_agree`` (the same largest entry), ``cpu_operators``,
    ``run_seconds``."""
    from tensorfab.compiler.graph.lower_runtime import evaluate
    from tensorfab.runtime.profiling import profile_program

    t0 = time.perf_counter()
    profile = profile_program(compiled.program, feeds, device)
    seconds = time.perf_counter() - t0
    out = np.asarray(profile.output)
    exact = np.array_equal(out, evaluate(compiled.integer_function, list(feeds.values())))
    similarity = cosine(out, reference)
    return {
        "accel_macs": profile.accel_macs,
        "accel_mac_fraction": round(profile.accel_macs / macs, 4),
        "host_bytes": None if profile.host_traffic is None else profile.host_traffic.total,
        "io_bytes": int(sum(v.nbytes for v in feeds.values()) + out.nbytes),
        "exact": bool(exact),
        "cosine": None if similarity is None else round(similarity, 5),
        "top1_agree": bool(np.argmax(out) == np.argmax(reference)),
        "cpu_operators": list(compiled.cpu_operators),
        "run_seconds": round(seconds, 3),
    }


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
