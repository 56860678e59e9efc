"""Benchmark: 512³ int8 GEMM on the functional simulator (default preset, 2 vthreads).

Prints a human summary, then one JSON object as the last line. Exits non-zero if the
simulated result is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys

from tensorfab.sim.bench_fsim import run_fsim_gemm_bench


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
