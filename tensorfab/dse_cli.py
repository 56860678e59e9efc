"""``tensorfab dse``: sweep HwConfig fields over workloads on the timing model, on a
dask cluster, results cached on disk and written as Parquet."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from .cli_output import print_result

__all__ = ["add_dse_command"]


def cmd_dse(args: argparse.Namespace) -> int:
    import sys

    from rich.progress import Progress

    from tensorfab.dse.cluster import dask_client
    from tensorfab.dse.results import point_summary, write_parquet
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
    invalid = [{"values": p.values, "reason": p.invalid_reason}
               for p in points if p.config is None]
    report = {"points": len(points), "valid_points": len(points) - len(invalid),
              "workloads": workloads, "computed": result.computed,
              "cached": result.cached, "cache_hit_ratio": result.cache_hit_ratio,
              "seconds": round(result.seconds, 3), "parquet": str(parquet),
              "invalid": invalid,
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
        print(f"all points: {parquet}")

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
