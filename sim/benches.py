"""Benchmarks the ``tensorfab bench NAME`` command runs, by name.

Each returns a JSON-ready dict; the command prints it as its last line. A benchmark
whose function takes ``target`` (or ``plot``) accepts the command's ``--target`` (or
``--plot``) option.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _fsim_gemm() -> dict[str, Any]:
    from .bench_fsim import run_fsim_gemm_bench

    return run_fsim_gemm_bench()


def _rtl_speed(plot: str | None = None) -> dict[str, Any]:
    from .bench_rtl import run_rtl_speed_bench

    kw: dict[str, Any] = {} if plot is None else {"plot": plot or None}
    return run_rtl_speed_bench(**kw)


def _rtl_gemm_busy() -> dict[str, Any]:
    from .bench_rtl_gemm import run_rtl_gemm_busy_bench

    return run_rtl_gemm_busy_bench()


def _conv2d(target: str = "rtl", plot: str | None = None) -> dict[str, Any]:
    from .bench_conv2d import run_conv2d_bench

    kw: dict[str, Any] = {} if plot is None else {"plot": plot or None}
    return run_conv2d_bench(target, **kw)


def _fpga(plot: str | None = None) -> dict[str, Any]:
    from tensorfab.fpga_builds.bench import run_fpga_bench

    return run_fpga_bench(plot="build/fpga-bench/utilization.png" if plot is None
                          else plot or None)


BENCHES: dict[str, Callable[..., dict[str, Any]]] = {
    "fsim-gemm": _fsim_gemm,
    "rtl-speed": _rtl_speed,
    "rtl-gemm-busy": _rtl_gemm_busy,
    "conv2d": _conv2d,
    "fpga": _fpga,
}
