"""Benchmark: VTA's ResNet-18 conv layers C2–C11 compiled with the default schedule.

For every layer and virtual-thread count (default 1, 2, 4) the script compiles the
layer, runs it on the selected device (``--target``, any name of
:data:`tensorfab.sim.DEVICES`, default ``rtl``; ``fsim`` is untimed, so its cycles
are ``null``), checks the result against numpy and the functional simulator, and
prints per layer and thread count ``cycles``, ``macs``, ``utilization``,
``roofline_cycles`` and more (see :mod:`tensorfab.sim.bench_conv2d`), then one JSON
object as the last line. ``tensorfab bench conv2d --target rtl --json`` runs the same.
"""

from __future__ import annotations

import argparse
import json
import sys

from tensorfab.compiler import RESNET18_CONV
from tensorfab.isa import PRESETS
from tensorfab.sim import DEVICES
from tensorfab.sim.bench_conv2d import run_conv2d_bench


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtl", choices=sorted(DEVICES),
                    help="device that runs the programs (default rtl)")
    ap.add_argument("--compile-only", action="store_true", help="do not run the programs")
    ap.add_argument("--config", default="default", choices=sorted(PRESETS))
    ap.add_argument("--vthreads", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", nargs="+", default=list(RESNET18_CONV),
                    choices=list(RESNET18_CONV))
    ap.add_argument("--plot", default="build/bench/conv2d-{target}-{config}.png",
                    help="PNG of the utilization ('' for none)")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    out = run_conv2d_bench(args.target, args.config, args.vthreads, args.layers,
                           plot=args.plot or None, compile_only=args.compile_only,
                           progress=not args.json)
    print(json.dumps(out))
    if not out["all_correct"]:
        sys.exit(1)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
