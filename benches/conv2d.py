"""Benchmark: VTA's ResNet-18 conv layers C2–C11 compiled with the default schedule.

For every layer and virtual-thread count (default 1, 2, 4) the script compiles the
layer, runs it on the selected device (``--target``, any name of
:data:`tensorfab.sim.DEVICES`; ``fsim`` is untimed, so its cycles are ``null``),
checks the result against a numpy reference, and reports per layer::

    {"macs", "dram_bytes", "roofline_cycles", "model_cycles", "cycles", "insns",
     "uops", "tiling"}

``dram_bytes`` counts what the program's LOADs and STOREs move plus its instruction
words; ``roofline_cycles`` is ``max(macs / peak MACs per cycle, dram_bytes / bus bytes
per cycle)``; ``model_cycles`` is the tile search's analytic estimate. Prints one line
per layer, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from tensorfab.compiler import (
    RESNET18_CONV,
    CompiledOp,
    Workload,
    conv2d,
    estimate_cost,
    program_traffic,
    roofline_cycles,
)
from tensorfab.isa import PRESETS, HwConfig
from tensorfab.sim import DEVICES, get_device


def reference(x: np.ndarray, w: np.ndarray, wl: Workload) -> np.ndarray:
    """Low bytes of the exact convolution (the program has no epilogue)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (pt, pb, pl, pr) = wl.stride, wl.padding
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), dtype=np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh, ow = wl.out_height, wl.out_width
    out = np.zeros((n, o, oh, ow), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, i, j].astype(np.int64))
    return (out & 0xFF).astype(np.uint8).view(np.int8)


def measure(cfg: HwConfig, wl: Workload, vthreads: int, target: str | None,
            rng: np.random.Generator) -> dict:
    """Compile (and, with a target, run and check) one layer; return its record."""
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width),
                     dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, *wl.kernel), dtype=np.int8)
    t0 = time.perf_counter()
    op: CompiledOp = conv2d(cfg, x, w, stride=wl.stride, padding=wl.padding,
                            vthreads=vthreads)
    compile_s = time.perf_counter() - t0
    traffic = program_traffic(op.program)["total"]
    record = {
        "macs": wl.macs,
        "dram_bytes": traffic,
        "roofline_cycles": roofline_cycles(cfg.peak_macs_per_cycle, cfg.mem_bus_bytes,
                                           wl.macs, traffic),
        "model_cycles": round(estimate_cost(op.plan).cycles),
        "cycles": None,
        "insns": len(op.program.insns),
        "uops": len(op.program.uops),
        "tiling": op.plan.describe(),
        "compile_s": round(compile_s, 3),
    }
    if target is not None:
        t0 = time.perf_counter()
        result = get_device(target).run(op.program)
        record["run_s"] = round(time.perf_counter() - t0, 3)
        record["cycles"] = result.cycles
        got = op.unpack(result.outputs["out"])
        record["correct"] = bool(np.array_equal(got, reference(x, w, wl)))
    return record


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="fsim", choices=sorted(DEVICES),
                    help="device that runs the programs (default fsim: untimed)")
    ap.add_argument("--compile-only", action="store_true", help="do not run the programs")
    ap.add_argument("--config", default="default", choices=sorted(PRESETS))
    ap.add_argument("--vthreads", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", nargs="+", default=list(RESNET18_CONV),
                    choices=list(RESNET18_CONV))
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    cfg = PRESETS[args.config]
    target = None if args.compile_only else args.target
    rng = np.random.default_rng(0)
    layers: dict[str, dict] = {}
    for name in args.layers:
        for v in args.vthreads:
            rec = measure(cfg, RESNET18_CONV[name], v, target, rng)
            layers[f"{name}/vt{v}"] = rec
            if not args.json:
                print(f"{name} vt={v}: {rec['tiling']}  insns={rec['insns']} "
                      f"dram={rec['dram_bytes']} roofline={rec['roofline_cycles']:.0f} "
                      f"model={rec['model_cycles']} cycles={rec['cycles']}"
                      + (f" correct={rec['correct']}" if "correct" in rec else ""),
                      flush=True)
    out = {"bench": "conv2d", "config": cfg.name, "target": target, "layers": layers,
           "all_correct": all(r.get("correct", True) for r in layers.values())}
    print(json.dumps(out))
    if not out["all_correct"]:
        sys.exit(1)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
