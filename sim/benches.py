"""Benchmarks the ``tensorfab bench NAME`` command runs, by name.

Each returns a JSON-ready dict; the command prints it as its last line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _fsim_gemm() -> dict[str, Any]:
    from .bench_fsim import run_fsim_gemm_bench

    return run_fsim_gemm_bench()


BENCHES: dict[str, Callable[[], dict[str, Any]]] = {
    "fsim-gemm": _fsim_gemm,
}
