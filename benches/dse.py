"""``tensorfab bench dse``: a design-space sweep of 24 points on a LocalCluster of two
workers, then the same sweep again.

Space: block_in, block_out ∈ {8, 16}, wgt_depth ∈ {256, 1024}, clock_mhz ∈ {25, 50,
100}; workloads ``dense64`` and ``fc1000`` (``--resnet18`` adds ResNet-18's
convolutions). Cycles are the timing model's estimates, resources the resource
model's (fitted to Yosys builds, :mod:`tensorfab.dse.resource_model`) on the ULX3S 85F.
The Pareto front is over throughput (GOPS summed over the workloads, higher better)
against the estimated LUTs (lower better; ``pareto_front_size_dsp``: against DSPs).
``resource_model_error`` is the model's leave-one-out relative error on its builds per
resource (mean and max). Last line::

    {"points", "valid_points", "rows", "workers", "seconds", "points_per_second",
     "rerun_seconds", "cache_hit_ratio", "fitting_points", "pareto_front_size",
     "pareto_front_size_dsp", "pareto_axes", "resource_model_error"}
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

__all__ = ["BENCH_BOARD", "BENCH_SPACE", "run_dse_bench"]

#: The swept HwConfig fields and their values (24 points).
BENCH_SPACE: dict[str, list[Any]] = {"block_in": [8, 16], "block_out": [8, 16],
                                     "wgt_depth": [256, 1024],
                                     "clock_mhz": [25.0, 50.0, 100.0]}

#: The board the points' resources are estimated on.
BENCH_BOARD = "ulx3s-85f"


def run_dse_bench(workers: int = 2, resnet18: bool = False) -> dict[str, Any]:
    """Sweep :data:`BENCH_SPACE` twice on a LocalCluster; see the module docstring."""
    from tensorfab.dse.cluster import dask_client
    from tensorfab.dse.resource_model import ResourceModel
    from tensorfab.dse.results import add_resources, pareto_fronts, point_summary
    from tensorfab.dse.space import space_points
    from tensorfab.dse.sweep import run_sweep, workload_by_name

    workloads = workload_by_name(["dense64", "fc1000"] + (["resnet18"] if resnet18 else []))
    points = space_points(BENCH_SPACE)
    with tempfile.TemporaryDirectory() as cache, dask_client(workers=workers) as client:
        first = run_sweep(points, workloads, client, cache)
        again = run_sweep(points, workloads, client, cache)
    model = ResourceModel.load()
    summary = [s for s in point_summary(first.rows) if s["gops"] is not None]
    add_resources(summary, model, BENCH_BOARD)
    fronts = pareto_fronts(summary)
    valid = sum(p.config is not None for p in points)
    return {"points": len(points), "valid_points": valid, "rows": len(first.rows),
            "workloads": workloads, "workers": workers,
            "seconds": round(first.seconds, 3),
            "points_per_second": round(valid / first.seconds, 3),
            "rerun_seconds": round(again.seconds, 3),
            "cache_hit_ratio": again.cache_hit_ratio,
            "board": BENCH_BOARD,
            "fitting_points": sum(s["fits"] for s in summary),
            "pareto_front_size": len(fronts["LUT"]),
            "pareto_front": fronts["LUT"],
            "pareto_front_size_dsp": len(fronts["DSP"]),
            "pareto_axes": "GOPS (timing model, estimated) vs LUT (resource model, "
                           "estimated); _dsp: vs DSP",
            "resource_model_error": model.held_out_error(),
            "resource_model_builds": len(model.data["builds"])}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``python -m tensorfab.benches.dse [--resnet18]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--resnet18", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = run_dse_bench(args.workers, args.resnet18)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
