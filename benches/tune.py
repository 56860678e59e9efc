"""``tensorfab bench tune``: the schedule tuner on ResNet-18's convolutions C2-C11 and the
dense layers (``default`` preset, default epilogue): per layer the RTL cycles of the tile
search's pick and of the tuned schedule, the MAC-limit bound (blocked MACs at one GEMM
micro-op per cycle) and the floor no schedule beats (:func:`~tensorfab.dse.tuner.cycle_floor`:
the compute engine's micro-ops, or the bus beats of the weights and the output), how
close the pick already was to them, the tuning seconds and the measurements made. Last
line::

    {"layers": {name: {"rtl_before", "rtl_after", "model_before", "model_after",
                       "mac_bound", "before_over_bound", "floor", "before_over_floor",
                       "after_over_floor", "speedup", "tuning_seconds", "measured"}},
     "faster", "slower", "unchanged_max_over_floor", "layers_count", "tuning_seconds",
     "trials"}

``unchanged_max_over_floor``: of the layers the tuner did not make faster on RTL, how far
the tile search's pick is above the floor at most (what any schedule could still gain).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tensorfab.isa import PRESETS

__all__ = ["run_tune_bench"]


def run_tune_bench(config: str = "default", trials: int = 256, log: Path | None = None,
                   layers: list[str] | None = None, progress: bool = False) -> dict[str, Any]:
    """Tune each layer (timing model), then run both schedules on the RTL."""
    from tensorfab.compiler.tensor import DENSE_LAYERS, RESNET18_CONV
    from tensorfab.dse.tuner import tune_workload

    cfg = PRESETS[config]
    work = {**RESNET18_CONV, **DENSE_LAYERS}
    out: dict[str, Any] = {}
    for name in layers or list(work):
        r = tune_workload(name, work[name], cfg, trials=trials, log=log, verify_rtl=True)
        assert r.rtl_baseline is not None and r.rtl_best is not None
        out[name] = {"rtl_before": r.rtl_baseline, "rtl_after": r.rtl_best,
                     "model_before": r.baseline_cycles, "model_after": r.best_cycles,
                     "mac_bound": r.mac_bound,
                     "before_over_bound": round(r.rtl_baseline / r.mac_bound, 4),
                     "floor": r.floor,
                     "before_over_floor": round(r.rtl_baseline / r.floor, 4),
                     "after_over_floor": round(r.rtl_best / r.floor, 4),
                     "speedup": round(r.rtl_baseline / r.rtl_best, 4),
                     "tuning_seconds": r.seconds, "measured": r.measured}
        if progress:
            print(f"{name}: {out[name]}", file=sys.stderr)
    unchanged = [v["before_over_floor"] for v in out.values()
                 if v["rtl_after"] >= v["rtl_before"]]
    return {"layers": out, "config": config, "trials": trials, "layers_count": len(out),
            "faster": sum(v["rtl_after"] < v["rtl_before"] for v in out.values()),
            "slower": sum(v["rtl_after"] > v["rtl_before"] for v in out.values()),
            "unchanged_max_over_floor": max(unchanged, default=None),
            "tuning_seconds": round(sum(v["tuning_seconds"] for v in out.values()), 3)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``python -m tensorfab.benches.tune [--trials N] [--layers C2,fc1000]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--layers", default="")
    ap.add_argument("--log")
    ap.add_argument("--json", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    res = run_tune_bench(trials=args.trials, log=Path(args.log) if args.log else None,
                         layers=[s for s in args.layers.split(",") if s] or None,
                         progress=not args.json)
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
