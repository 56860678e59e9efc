"""Benchmark: FPGA bitstreams per board and configuration (YoWASP Yosys + nextpnr).

Builds each board's configurations, prints a summary, then one JSON object as the
last line: ``{"builds": [{board, config, fmax_mhz, target_mhz, timing_met,
peak_gops, resources: {name: {used, available}}, ...}]}``.
"""

from __future__ import annotations

import argparse
import json
import sys

from tensorfab.fpga_builds.bench import DEFAULT_MATRIX, run_fpga_bench


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", default="build/fpga-bench/utilization.png")
    ap.add_argument("--reuse", action="store_true", help="reuse existing reports")
    ap.add_argument("--out", default="build/fpga-bench", help="build directories")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    result = run_fpga_bench(DEFAULT_MATRIX, out_dir=args.out, plot=args.plot or None,
                            reuse=args.reuse)
    if not args.json:
        for b in result["builds"]:
            print(f"{b['board']:12s} {b['config']:8s} {b['fmax_mhz']:7.1f} / "
                  f"{b['target_mhz']:.0f} MHz  {b['peak_gops']:.2f} GOPS")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
