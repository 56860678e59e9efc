"""``tensorfab bench rtl-gemm-busy``: how busy the GEMM core stays on a compute-bound
GEMM in RTL simulation (the Verilator harness, default memory timing)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tensorfab.isa import PRESETS, HwConfig
from tensorfab.sim.testing.blocked_gemm import GemmTiling, build_blocked_gemm, unpack_outputs


def gemm_busy_fraction(intervals) -> tuple[int, int, int]:
    """``(first, last, busy)``: the cycle of the first GEMM micro-op, one past the
    last, and the cycles in between in which the GEMM core accepted a micro-op."""
    gemm = [iv for iv in intervals if iv.track == "gemm" and iv.kind == "busy"]
    if not gemm:
        raise ValueError("the run has no GEMM activity")
    first = min(iv.start for iv in gemm)
    last = max(iv.end for iv in gemm)
    return first, last, sum(iv.cycles for iv in gemm)


def run_rtl_gemm_busy_bench(m: int = 512, n: int = 256, k: int = 256,
                            cfg: HwConfig | None = None, seed: int = 0) -> dict[str, Any]:
    """Run a GEMM whose weight tile (all of k, 256 output channels) is reused across
    64-row input tiles, two virtual threads, and measure the GEMM core's occupancy.

    Returns
    -------
    dict
        ``cycles`` (whole run), ``gemm_busy_cycles``, ``gemm_busy_fraction`` (busy
        cycles over the cycles from the first to the last GEMM micro-op) and context.
    """
    from tensorfab.sim.rtl import RtlSimulator

    cfg = cfg or PRESETS["default"]
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int64)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int64)
    tiling = GemmTiling(64 // cfg.batch, n // cfg.block_out, k // cfg.block_in, 2)
    program = build_blocked_gemm(cfg, m, n, k, vthreads=2, a=a, b=b, tiling=tiling)
    sim = RtlSimulator(trace=True)
    sim.build(cfg)  # compile (or find in the cache) before timing
    t0 = time.perf_counter()
    result = sim.run(program)
    seconds = time.perf_counter() - t0
    want = ((a @ b) & 0xFF).astype(np.uint8).view(np.int8)
    got = unpack_outputs(cfg, result.outputs["C"])
    if not np.array_equal(got, want):
        raise AssertionError("rtl-gemm-busy: the RTL result differs from numpy")
    first, last, busy = gemm_busy_fraction(result.intervals)
    return {
        "config": cfg.name, "m": m, "n": n, "k": k, "vthreads": 2,
        "instructions": len(program.insns),
        "macs": m * n * k,
        "cycles": result.cycles,
        "gemm_first_cycle": first, "gemm_last_cycle": last,
        "gemm_busy_cycles": busy,
        "gemm_busy_fraction": busy / (last - first),
        "utilization": m * n * k / (result.cycles * cfg.peak_macs_per_cycle),
        "sim_seconds": seconds,
        "target_gemm_busy_fraction": 0.95,
        "meets_target": busy / (last - first) >= 0.95,
    }
