"""GEMM-core occupancy on a compute-bound GEMM in RTL simulation.

Prints one JSON object as the last line: cycles, gemm_busy_cycles and
gemm_busy_fraction (target: at least 0.95 between the first and last GEMM micro-op).
Same as ``tensorfab bench rtl-gemm-busy --json``.
"""

from __future__ import annotations

import json

from tensorfab.sim.bench_rtl_gemm import run_rtl_gemm_busy_bench

if __name__ == "__main__":
    print(json.dumps(run_rtl_gemm_busy_bench()))
