"""Functional-simulator GEMM throughput benchmark (``tensorfab bench fsim-gemm``)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from tensorfab.compiler import dense
from tensorfab.compiler.tensor.tile_plan import AXES
from tensorfab.isa import PRESETS, HwConfig

#: Throughput the functional simulator should reach on the 512³ GEMM.
TARGET_MACS_PER_S = 1e9


def run_fsim_gemm_bench(m: int = 512, n: int = 512, k: int = 512, vthreads: int = 2,
                        cfg: HwConfig | None = None, seed: int = 0, repeat: int = 3) -> dict:
    """Compile an ``m × n × k`` GEMM with :func:`tensorfab.compiler.dense` (what users
    run), run it on the functional simulator, check it.

    Only the simulator runs are timed (not building the program or checking results);
    the program runs ``repeat`` times on fresh simulators and the fastest run counts,
    as :mod:`timeit` does. Every run's result is checked.

    Parameters
    ----------
    m, n, k : int
        GEMM size.
    vthreads : int
        Virtual threads of the schedule.
    cfg : HwConfig | None
        Configuration (default: the ``default`` preset).
    seed : int
        Seed of the random int8 operands.
    repeat : int
        Timed runs (at least 1).

    Returns
    -------
    dict
        ``macs``, ``seconds`` (fastest run), ``macs_per_s``, ``target_macs_per_s``,
        ``meets_target``, plus the config name, the problem size, ``vthreads``, the
        tiling, the number of instructions and every run's time (``run_seconds``).

    Raises
    ------
    AssertionError
        If the simulated result differs from numpy's ``(a @ b)`` low bytes.
    """
    from tensorfab.sim import FunctionalSimulator

    cfg = cfg if cfg is not None else PRESETS["default"]
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    op = dense(cfg, a, b.T, vthreads=vthreads)
    prog = op.program
    tiling = {axis: op.plan.tile(axis) for axis in AXES}
    dram = prog.dram_image()
    want = (a.astype(np.int64) @ b.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    macs = m * n * k
    times = []
    for _ in range(max(1, repeat)):
        sim, image = FunctionalSimulator(), dram.copy()
        t0 = time.perf_counter()
        res = sim.run(prog, image)
        times.append(time.perf_counter() - t0)
        got = op.unpack(res.outputs["out"])
        if not np.array_equal(got, want):
            bad = int(np.count_nonzero(got != want))
            raise AssertionError(f"fsim GEMM {m}x{n}x{k} is wrong: {bad} of {got.size} "
                                 "outputs differ from numpy")
        if res.counters.gemm_macs != macs:
            raise AssertionError(f"fsim counted {res.counters.gemm_macs} GEMM MACs, "
                                 f"expected {macs}")
    seconds = min(times)
    rate = macs / seconds
    return {
        "config": cfg.name,
        "m": m, "n": n, "k": k,
        "vthreads": vthreads,
        "tiling": tiling,
        "compiler": "dense",
        "insns": len(prog.insns),
        "macs": macs,
        "seconds": seconds,
        "run_seconds": times,
        "macs_per_s": rate,
        "target_macs_per_s": TARGET_MACS_PER_S,
        "meets_target": rate >= TARGET_MACS_PER_S,
    }


__all__ = ["TARGET_MACS_PER_S", "run_fsim_gemm_bench"]


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--vthreads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs; the fastest counts")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    result = run_fsim_gemm_bench(args.m, args.n, args.k, args.vthreads, repeat=args.repeat)
    if not args.json:
        print(f"fsim GEMM {args.m}x{args.n}x{args.k}, vthreads={args.vthreads}: "
              f"{result['macs_per_s'] / 1e9:.2f} GMAC/s in {result['seconds']:.3f} s "
              f"(target {result['target_macs_per_s'] / 1e9:.1f} GMAC/s: "
              f"{'met' if result['meets_target'] else 'NOT met'})")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
