"""A sweep's rows on disk: the Parquet table of all points and the summary per point."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["pareto_front", "plot_pareto", "point_summary", "write_best_config",
           "write_parquet"]


def write_parquet(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write the sweep's rows (one per point and workload) as a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    columns = sorted({k for r in rows for k in r})
    table = pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows])
    pq.write_table(table, p)
    return p


def point_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per valid config: total timing-model cycles over the workloads, total MACs and
    the GOPS at the config's clock (``None`` when a workload did not compile)."""
    from tensorfab.isa import HwConfig

    by_cfg: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("valid"):
            by_cfg.setdefault(r["config"], []).append(r)
    out = []
    for cfg_json, rs in by_cfg.items():
        cfg = HwConfig.from_json(cfg_json)
        ok = all(r.get("cycles") for r in rs)
        cycles = sum(r["cycles"] for r in rs) if ok else None
        macs = sum(r["macs"] for r in rs)
        out.append({"name": cfg.name, "config": cfg_json,
                    "macs_per_cycle": cfg.batch * cfg.block_in * cfg.block_out,
                    "clock_mhz": cfg.clock_mhz, "cycles": cycles, "macs": macs,
                    "gops": 2 * macs * cfg.clock_mhz / cycles / 1e3 if cycles else None})
    return out


def pareto_front(items: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points (cost, gain) no other point beats: lower or equal cost and
    higher or equal gain, one of them strictly."""
    front = []
    for i, (c, g) in enumerate(items):
        if not any((c2 <= c and g2 >= g and (c2 < c or g2 > g))
                   for j, (c2, g2) in enumerate(items) if j != i):
            front.append(i)
    return front


def plot_pareto(summary: Sequence[dict[str, Any]], path: str | Path) -> list[str]:
    """Scatter of GOPS (timing model, estimated) against the GEMM core's MACs per cycle,
    the Pareto front drawn as a line; returns the names of the front's configs."""
    from tensorfab.sim.png_figure import png_figure

    ok = [s for s in summary if s["gops"] is not None]
    pts = [(s["macs_per_cycle"], s["gops"]) for s in ok]
    front = pareto_front(pts)
    with png_figure(path, (6.0, 4.0)) as (_, ax):
        ax.scatter([c for c, _ in pts], [g for _, g in pts], s=14, color="0.6",
                   label="points")
        fp = sorted(pts[i] for i in front)
        ax.plot([c for c, _ in fp], [g for _, g in fp], "o-", color="C3",
                label="Pareto front")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GEMM MACs per cycle (batch × block_in × block_out)")
        ax.set_ylabel("GOPS over the workloads (estimated)")
        ax.legend()
    return [ok[i]["name"] for i in front]


def write_best_config(summary: Sequence[dict[str, Any]], path: str | Path) -> str | None:
    """Write the highest-GOPS config of ``summary`` as a HwConfig JSON file (the form
    ``--config`` accepts); returns its name, ``None`` when no point has figures."""
    ok = [s for s in summary if s["gops"] is not None]
    if not ok:
        return None
    best = max(ok, key=lambda s: s["gops"])
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(best["config"] + "\n")
    return str(best["name"])
