"""Benchmark: simulated cycles per second of the RTL executor (Verilator harness)
against the cocotb testbench and Amaranth's Python simulator, one GEMM program on
the default preset.

Prints a human summary, then one JSON object as the last line (keys
``harness_cycles_per_s``, ``cocotb_cycles_per_s``, ``pysim_cycles_per_s``,
``speedup_vs_cocotb``...; see :func:`tensorfab.sim.bench_rtl.run_rtl_speed_bench`).
"""

from __future__ import annotations

import argparse
import json
import sys

from tensorfab.sim.bench_rtl import run_rtl_speed_bench


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5, help="harness runs; the fastest counts")
    ap.add_argument("--pysim-seconds", type=float, default=15.0,
                    help="wall-clock budget of the Amaranth simulation")
    ap.add_argument("--no-cocotb", action="store_true", help="skip the cocotb run")
    ap.add_argument("--no-pysim", action="store_true", help="skip the Amaranth simulation")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    result = run_rtl_speed_bench(args.m, args.n, args.k, repeat=args.repeat,
                                 pysim_seconds=args.pysim_seconds,
                                 with_cocotb=not args.no_cocotb, with_pysim=not args.no_pysim)
    if not args.json:
        def rate(key: str) -> str:
            v = result.get(key)
            return "n/a" if v is None else f"{v:,.0f} cycles/s"

        print(f"GEMM {args.m}x{args.n}x{args.k} on {result['config']}: "
              f"{result['harness_cycles']:,} cycles")
        print(f"  harness   {rate('harness_cycles_per_s')} "
              f"(long GEMM: {rate('harness_long_cycles_per_s')})")
        per_cpu = ", ".join(f"CPU {cpu}: {v:,.0f}"
                            for cpu, v in result["harness_cycles_per_s_by_cpu"].items())
        print(f"  harness per CPU (fastest run on each): {per_cpu}")
        print(f"  cocotb    {rate('cocotb_cycles_per_s')}  cycles match: "
              f"{result['cycles_match']}")
        print(f"  pysim     {rate('pysim_cycles_per_s')}")
        if result.get("plot"):
            print(f"  chart: {result['plot']}")
        print(f"  target {result['target_cycles_per_s']:,} cycles/s: "
              f"{'met' if result['meets_target'] else 'NOT met'}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
