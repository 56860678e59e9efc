"""``tensorfab dse``: sweep HwConfig fields over workloads on the timing model, on a
dask cluster, results cached on disk and written as Parquet."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from .cli_output import print_result

__all__ = ["add_advise_command", "add_dse_command"]


def cmd_dse(args: argparse.Namespace) -> int:
    import sys

    from rich.progress import Progress

    from tensorfab.dse.cluster import dask_client
    from tensorfab.dse.results import plot_pareto, point_summary, write_best_config, write_parquet
    from tensorfab.dse.space import load_space, space_points
    from tensorfab.dse.sweep import run_sweep, workload_by_name

    space = load_space(args.space)
    workloads = workload_by_name([w for w in args.workloads.split(",") if w])
    points = space_points(space)
    out = Path(args.out)
    with dask_client(args.scheduler, args.workers) as client:
        print(f"dashboard: {client.dashboard_link}", file=sys.stderr)
        with Progress(transient=True, disable=args.json) as bar:
            task = bar.add_task("sweep", total=None)
            result = run_sweep(points, workloads, client, out / "cache",
                               lambda d, t: bar.update(task, completed=d, total=t))
    parquet = write_parquet(result.rows, out / "points.parquet")
    summary = point_summary(result.rows)
    front = plot_pareto(summary, out / "pareto.png")
    best = write_best_config(summary, out / "best_config.json")
    invalid = [{"values": p.values, "reason": p.invalid_reason}
               for p in points if p.config is None]
    report = {"points": len(points), "valid_points": len(points) - len(invalid),
              "workloads": workloads, "computed": result.computed,
              "cached": result.cached, "cache_hit_ratio": result.cache_hit_ratio,
              "seconds": round(result.seconds, 3), "parquet": str(parquet),
              "invalid": invalid, "pareto_png": str(out / "pareto.png"),
              "pareto_front_size": len(front), "best_config": best,
              "best_config_json": str(out / "best_config.json") if best else None,
              "summary": [{k: v for k, v in s.items() if k != "config"} for s in summary],
              "cycles_source": "timing model (estimated)"}

    def human() -> None:
        print(f"{report['points']} points ({report['valid_points']} valid) x "
              f"{len(workloads)} workloads: {result.computed} computed, "
              f"{result.cached} from the cache, {result.seconds:.1f} s")
        for inv in invalid:
            print(f"  invalid {inv['values']}: {inv['reason']}")
        print(f"{'config':48} {'MAC/cyc':>8} {'MHz':>6} {'cycles (est.)':>14} "
              f"{'GOPS':>8}")
        for s in sorted(summary, key=lambda s: -(s["gops"] or 0)):
            cyc = "-" if s["cycles"] is None else str(s["cycles"])
            gops = "-" if s["gops"] is None else f"{s['gops']:.3f}"
            print(f"{s['name']:48} {s['macs_per_cycle']:>8} {s['clock_mhz']:>6g} "
                  f"{cyc:>14} {gops:>8}")
        print(f"all points: {parquet}; Pareto front ({len(front)} points): "
              f"{out / 'pareto.png'}")
        if best:
            print(f"highest GOPS (estimated): {best} -> {out / 'best_config.json'}")

    print_result(report, args.json, human)
    (out / "summary.json").write_text(json.dumps(report, indent=1))
    return 0


def add_dse_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``dse`` with the parser's ``command`` helper."""
    d = command(
        "dse", "design-space sweep: HwConfig fields over workloads on the timing model, "
        "on a dask cluster, cached on disk",
        "tensorfab dse --space space.yaml --workloads dense64,fc1000 --workers 2")
    d.add_argument("--space", required=True,
                   help="YAML file: HwConfig field -> list of values")
    d.add_argument("--workloads", default="dense64",
                   help="comma-separated: resnet18, C2..C11, fc1000, proj, dense64")
    d.add_argument("--scheduler", default=None,
                   help="existing dask scheduler (tcp://host:8786); default: a "
                        "LocalCluster here")
    d.add_argument("--workers", type=int, default=2, help="LocalCluster workers")
    d.add_argument("--out", default="dse-out",
                   help="output folder (points.parquet, summary.json, cache/)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.set_defaults(func=cmd_dse)


def cmd_advise(args: argparse.Namespace) -> int:
    from tensorfab.dse.advice import advise

    from .cli_output import working
    from .model_cli import _calibration, _shapes

    with working(f"compiling {Path(args.model).name} per configuration", quiet=args.json):
        result = advise(args.model, args.board, _calibration(args.calib),
                        _shapes(args.shape) or None,
                        args.configs.split(",") if args.configs else None)

    def human() -> None:
        print(f"board {result['board']}: {result['board_memory_bytes']:,} bytes of "
              f"device memory, {result['clock_mhz']:g} MHz")
        print(f"{'config':12} {'memory (B)':>11} {'fits':>5} {'resources':>9} "
              f"{'cycles (est.)':>14} {'ms (est.)':>10}")
        for r in result["configs"]:
            if r["error"]:
                print(f"{r['config']:12} does not compile: {r['error']}")
                continue
            fits = "yes" if r["fits_memory"] else "NO"
            print(f"{r['config']:12} {r['device_memory_bytes']:>11,} {fits:>5} "
                  f"{r['resources']:>9} {r['estimated_cycles']:>14,} "
                  f"{r['estimated_latency_ms']:>10.3f}")
        print(f"build: {result['build'] or 'no configuration known to fit'}"
              + (f" (fastest within memory, resources unknown: "
                 f"{result['fastest_fitting_memory']})"
                 if result["fastest_fitting_memory"] not in (None, result["build"]) else ""))

    print_result(result, args.json, human)
    return 0


def add_advise_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``advise`` with the parser's ``command`` helper."""
    a = command(
        "advise", "which accelerator configuration to build for a model on a board: "
        "device memory, estimated cycles and latency per configuration",
        "tensorfab advise digits.onnx --board ulx3s-85f --calib calib.npy "
        "--shape image=1,1,8,8")
    a.add_argument("model", help="ONNX model")
    a.add_argument("--board", required=True, help="board name (tensorfab board list)")
    a.add_argument("--calib", help="calibration inputs (.npy or .npz) for int8")
    a.add_argument("--shape", action="append",
                   help="fixed input shape NAME=D,D,... (repeatable)")
    a.add_argument("--configs", help="comma-separated configs (default: presets and "
                   "board configs)")
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.set_defaults(func=cmd_advise)
