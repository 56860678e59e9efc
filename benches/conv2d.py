"""``tensorfab bench conv2d``: VTA's ResNet-18 convolutions C2–C11 compiled with the
default schedule and run on a device (default: the RTL executor).

For every layer and virtual-thread count (1, 2, 4) the benchmark compiles the layer
(random int8 operands, no epilogue), runs it, checks the output against numpy and the
functional simulator's, and records::

    {"cycles", "macs", "utilization", "roofline_cycles", "roofline_utilization",
     "dram_bytes", "model_cycles", "insns", "tiling", "correct"}

``utilization`` is useful MACs / (cycles × peak MACs per cycle); ``roofline_cycles``
is ``max(macs / peak MACs per cycle, dram_bytes / bytes per cycle)`` with the bytes the
program moves (LOAD and STORE data, instruction words) and the memory's bandwidth
(the RTL executor's memory model: ``min(MemoryTiming.bandwidth, bus bytes)``);
``roofline_utilization`` is the utilization that bound allows; ``model_cycles`` is the
compiler's timing model (:func:`tensorfab.compiler.tensor.timing.simulate`). Per layer the
best thread count is reported, and ``mean_utilization_best`` is the mean over the
layers of the best count's utilization. A PNG (matplotlib) shows the utilization of
every layer and thread count next to its roofline bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.compiler import RESNET18_CONV
from tensorfab.isa import PRESETS, HwConfig
from tensorfab.sim.png_figure import png_figure
from tensorfab.sim.testing.numpy_reference import conv2d_acc

__all__ = ["MEMORY_HEAVY", "TARGETS", "plot_utilization", "run_conv2d_bench"]

#: Targets of the benchmark (issue #5).
TARGETS = {"mean_utilization_best": 0.90, "roofline_ratio": 1.15}
#: A layer is memory-heavy when moving its operands and result once takes at least this
#: fraction of its compute-bound cycles.
MEMORY_HEAVY = 0.5


def reference(x: np.ndarray, w: np.ndarray, stride: tuple[int, int],
              padding: tuple[int, int, int, int]) -> np.ndarray:
    """Low bytes of the exact convolution (the benchmark has no epilogue)."""
    return (conv2d_acc(x, w, stride, padding) & 0xFF).astype(np.uint8).view(np.int8)


def _bytes_per_cycle(cfg: HwConfig, device: Any) -> float:
    memory = getattr(device, "memory", None)
    bw = getattr(memory, "bandwidth", None)
    return float(min(bw, cfg.mem_bus_bytes)) if bw else float(cfg.mem_bus_bytes)


def _compulsory_bytes(cfg: HwConfig, wl: Any) -> int:
    """Bytes of the padded operands and result, each moved once."""
    ext = wl.extents(cfg)
    inp = ext["b"] * ext["ic"] * wl.height * wl.width * cfg.inp_entry_bytes
    wgt = ext["oc"] * ext["ic"] * wl.kernel[0] * wl.kernel[1] * cfg.wgt_entry_bytes
    out = ext["b"] * ext["oc"] * wl.out_height * wl.out_width * cfg.out_entry_bytes
    return inp + wgt + out


def run_conv2d_bench(target: str = "rtl", config: str | HwConfig = "default",
                     vthreads: Sequence[int] = (1, 2, 4), layers: Sequence[str] | None = None,
                     plot: str | Path | None = "build/bench/conv2d-{target}-{config}.png",
                     compile_only: bool = False, check_fsim: bool = True, seed: int = 0,
                     progress: bool = False) -> dict[str, Any]:
    """Run the benchmark (see the module docstring).

    Parameters
    ----------
    target : str
        Device name (:func:`tensorfab.isa.device.open_device`); ``fsim`` is untimed (``cycles``
        null).
    config : str or HwConfig
        Preset name or configuration.
    vthreads : sequence of int
        Virtual-thread counts of the default schedule.
    layers : sequence of str, optional
        Layer names (default C2–C11).
    plot : str or Path, optional
        PNG to write (``{target}`` and ``{config}`` are filled in); None: no plot.
    compile_only : bool
        Compile only (no run; cycles null).
    check_fsim : bool
        Also run the functional simulator and compare its output.
    seed : int
        Seed of the random operands.
    progress : bool
        Print one line per run as it completes.

    Returns
    -------
    dict
        ``layers`` (per layer, per thread count as a string, the record above),
        ``best`` (per layer: thread count, utilization, cycles over the roofline, speed-up
        of two threads over one), ``mean_utilization_best``, ``targets`` (each target
        and whether it is met), ``all_correct`` and context.
    """
    from tensorfab.compiler import RESNET18_CONV, conv2d, program_traffic, roofline_cycles
    from tensorfab.compiler.tensor.timing import simulate
    from tensorfab.sim import FunctionalSimulator, get_device

    cfg = PRESETS[config] if isinstance(config, str) else config
    names = list(layers) if layers is not None else list(RESNET18_CONV)
    device = None if compile_only else get_device(target)
    timed = device is not None and target != "fsim"
    bw = _bytes_per_cycle(cfg, device)
    peak = cfg.peak_macs_per_cycle
    rng = np.random.default_rng(seed)
    t_start = time.perf_counter()
    out_layers: dict[str, dict[str, Any]] = {}
    correct = True
    for name in names:
        wl = RESNET18_CONV[name]
        x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width),
                         dtype=np.int8)
        w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, *wl.kernel),
                         dtype=np.int8)
        want = reference(x, w, wl.stride, wl.padding)
        per: dict[str, Any] = {}
        for v in vthreads:
            t0 = time.perf_counter()
            op = conv2d(cfg, x, w, stride=wl.stride, padding=wl.padding, vthreads=v)
            compile_s = time.perf_counter() - t0
            traffic = program_traffic(op.program)["total"]
            roof = roofline_cycles(peak, bw, wl.macs, traffic)
            model = simulate(op.program.insns, cfg)
            rec: dict[str, Any] = {
                "cycles": None, "macs": wl.macs, "utilization": None,
                "roofline_cycles": round(roof, 1),
                "roofline_utilization": round(wl.macs / (roof * peak), 4),
                "dram_bytes": traffic,
                "model_cycles": round(model.cycles) if model is not None else None,
                "insns": len(op.program.insns), "uops": len(op.program.uops),
                "tiling": op.plan.describe(), "compile_s": round(compile_s, 3),
            }
            if device is not None:
                t0 = time.perf_counter()
                res = device.run(op.program)
                rec["run_s"] = round(time.perf_counter() - t0, 3)
                ok = bool(np.array_equal(op.unpack(res.outputs["out"]), want))
                if check_fsim and target != "fsim":
                    ref = FunctionalSimulator().run(op.program)
                    ok = ok and np.array_equal(res.outputs["out"], ref.outputs["out"])
                rec["correct"] = ok
                correct = correct and ok
                if timed:
                    rec["cycles"] = int(res.cycles)
                    rec["utilization"] = round(wl.macs / (res.cycles * peak), 4)
            per[str(v)] = rec
            if progress:
                print(f"{name} vt={v}: {rec['tiling']} cycles={rec['cycles']} "
                      f"util={rec['utilization']} roofline={rec['roofline_cycles']:.0f} "
                      f"model={rec['model_cycles']} correct={rec.get('correct')}", flush=True)
        out_layers[name] = per
    best = _best(cfg, names, out_layers, bw) if timed else {}
    result: dict[str, Any] = {
        "bench": "conv2d", "config": cfg.name, "target": target if device else None,
        "peak_macs_per_cycle": peak, "bytes_per_cycle": bw,
        "memory": _memory_json(device),
        "vthreads": list(vthreads), "layers": out_layers, "best": best,
        "mean_utilization_best": (round(float(np.mean([b["utilization"]
                                                       for b in best.values()])), 4)
                                  if best else None),
        "all_correct": correct,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    if best:
        result["targets"] = _targets(result)
    if plot is not None and timed:
        path = Path(str(plot).format(target=target, config=cfg.name))
        plot_utilization(result, path)
        result["plot"] = str(path)
    return result


def _memory_json(device: Any) -> dict[str, Any] | None:
    memory = getattr(device, "memory", None)
    if memory is None:
        return None
    import dataclasses

    return dataclasses.asdict(memory) if dataclasses.is_dataclass(memory) else None


def _best(cfg: HwConfig, names: list[str], layers: dict[str, dict[str, Any]], bw: float
          ) -> dict[str, Any]:
    from tensorfab.compiler import RESNET18_CONV

    best = {}
    for name in names:
        per = layers[name]
        v, rec = max(per.items(), key=lambda kv: kv[1]["utilization"])
        wl = RESNET18_CONV[name]
        compute = wl.macs / cfg.peak_macs_per_cycle
        entry = {"vthreads": int(v), "utilization": rec["utilization"], "cycles": rec["cycles"],
                 "roofline_ratio": round(rec["cycles"] / rec["roofline_cycles"], 4),
                 "memory_heavy": _compulsory_bytes(cfg, wl) / bw >= MEMORY_HEAVY * compute}
        if "1" in per and "2" in per:
            entry["speedup_2_over_1"] = round(per["1"]["cycles"] / per["2"]["cycles"], 3)
        best[name] = entry
    return best


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    best = result["best"]
    worst = max(b["roofline_ratio"] for b in best.values())
    heavy = {n: b.get("speedup_2_over_1") for n, b in best.items() if b["memory_heavy"]}
    return {
        "mean_utilization_best": {"want": f">= {TARGETS['mean_utilization_best']}",
                                  "got": result["mean_utilization_best"],
                                  "met": result["mean_utilization_best"]
                                  >= TARGETS["mean_utilization_best"]},
        "within_roofline": {"want": f"cycles <= {TARGETS['roofline_ratio']} x roofline "
                                    "(best thread count)",
                            "got": worst, "met": worst <= TARGETS["roofline_ratio"]},
        "two_threads_faster_on_memory_heavy": {
            "want": "cycles(1 thread) / cycles(2 threads) > 1 on memory-heavy layers",
            "got": heavy,
            "met": all(s is not None and s > 1.0 for s in heavy.values())},
    }


def plot_utilization(result: dict[str, Any], path: str | Path) -> Path:
    """Bar chart of utilization per layer and thread count, each bar with the
    utilization its roofline allows as a marker; returns ``path``."""
    import matplotlib

    names = list(result["layers"])
    vts = [str(v) for v in result["vthreads"]]
    width = 0.8 / max(1, len(vts))
    with png_figure(path, (max(6.0, 1.1 * len(names)), 4.2)) as (_fig, ax):
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        for k, v in enumerate(vts):
            xs = [i + (k - (len(vts) - 1) / 2) * width for i in range(len(names))]
            util = [result["layers"][n][v]["utilization"] or 0.0 for n in names]
            roof = [result["layers"][n][v]["roofline_utilization"] for n in names]
            ax.bar(xs, util, width * 0.9, color=colors[k % len(colors)], label=f"{v} thread"
                   + ("s" if v != "1" else ""))
            ax.scatter(xs, roof, marker="_", s=200, color="black", zorder=3,
                       label="roofline bound" if k == 0 else None)
        ax.axhline(TARGETS["mean_utilization_best"], color="gray", lw=0.8, ls="--")
        ax.set_xticks(range(len(names)), names)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("MAC utilization")
        mean = result.get("mean_utilization_best")
        ax.set_title(f"conv2d on {result['target']} ({result['config']}): mean of best "
                     f"= {mean}")
        ax.legend(loc="lower left", fontsize=8, ncols=len(vts) + 1)
    return Path(path)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtl", metavar="TARGET",
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
