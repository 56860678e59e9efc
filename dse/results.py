"""A sweep's rows on disk: the Parquet table of all points and the summary per point
with its estimated resources, the Pareto fronts and the best fitting config."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["PARETO_AXES", "add_resources", "pareto_front", "pareto_fronts", "plot_pareto",
           "point_summary", "write_best_config", "write_parquet"]


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
        macs = sum(r["macs"] or 0 for r in rs)  # None: a model that did not compile
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


def add_resources(summary: Sequence[dict[str, Any]], model: Any, board: str) -> None:
    """Give each point of ``summary`` its estimated resources on ``board`` and whether
    it fits, in place.

    Adds ``lut_est``, ``ff_est``, ``dsp_est``, ``bram_est`` (the resource model's
    estimates, :class:`~tensorfab.dse.resource_model.ResourceModel`), ``board``,
    ``fits`` (every estimate within the board's device), ``over`` (the resources
    beyond it), ``gops_per_klut`` and ``gops_per_dsp`` (``None`` without GOPS or
    DSPs).
    """
    from tensorfab.isa import HwConfig

    for s in summary:
        est = model.estimate(HwConfig.from_json(s["config"]), board)
        fits, over = model.fits(est, board)
        gops = s.get("gops")
        s.update({f"{r.lower()}_est": v for r, v in est.items()})
        s.update({"board": board, "fits": fits, "over": over,
                  "gops_per_klut": gops / (est["LUT"] / 1e3) if gops and est["LUT"]
                  else None,
                  "gops_per_dsp": gops / est["DSP"] if gops and est["DSP"] else None})


#: The cost axes of the Pareto fronts: summary key and axis label.
PARETO_AXES = {"LUT": ("lut_est", "LUT4 slots (estimated)"),
               "DSP": ("dsp_est", "DSP blocks, MULT18X18D (estimated)"),
               "BRAM": ("bram_est", "block RAMs, DP16KD (estimated)")}


def pareto_fronts(summary: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Names of the points on the front of GOPS against each resource of
    :data:`PARETO_AXES` (points without GOPS left out)."""
    ok = [s for s in summary if s["gops"] is not None]
    return {res: [ok[i]["name"] for i in pareto_front([(s[key], s["gops"]) for s in ok])]
            for res, (key, _) in PARETO_AXES.items()}


def plot_pareto(summary: Sequence[dict[str, Any]], path: str | Path,
                board: Any = None) -> dict[str, list[str]]:
    """Scatter of GOPS (timing model, estimated) against each estimated resource (one
    panel per resource of :data:`PARETO_AXES`), each Pareto front drawn as a line, and
    with ``board`` (a :class:`~tensorfab.fpga_builds.boards.Board`) what its device
    has as a vertical line; returns :func:`pareto_fronts`."""
    from tensorfab.sim.png_figure import png_figure

    ok = [s for s in summary if s["gops"] is not None]
    fronts = pareto_fronts(ok)
    with png_figure(path, (13.0, 4.0)) as (fig, first):
        first.remove()
        for k, (res, (key, label)) in enumerate(PARETO_AXES.items()):
            ax = fig.add_subplot(1, len(PARETO_AXES), k + 1)
            ax.scatter([s[key] for s in ok], [s["gops"] for s in ok], s=14, color="0.6",
                       label="points")
            names = set(fronts[res])
            fp = sorted((s[key], s["gops"]) for s in ok if s["name"] in names)
            ax.plot([c for c, _ in fp], [g for _, g in fp], "o-", color="C3",
                    label="Pareto front")
            if board is not None:
                ax.axvline(board.capacity[res], color="C0", linestyle="--",
                           label=f"{board.name} has {board.capacity[res]}")
            ax.set_xlabel(label)
            ax.set_ylabel("GOPS over the workloads (estimated)")
            ax.legend()
    return fronts


def write_best_config(summary: Sequence[dict[str, Any]], path: str | Path) -> str | None:
    """Write the highest-GOPS config of ``summary`` that fits its board (``fits``) as
    a HwConfig JSON file (the form ``--config`` accepts); returns its name, ``None``
    when no fitting point has figures (then a best config of an earlier sweep there is
    removed)."""
    ok = [s for s in summary if s["gops"] is not None and s.get("fits")]
    if not ok:
        Path(path).unlink(missing_ok=True)
        return None
    best = max(ok, key=lambda s: s["gops"])
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(best["config"] + "\n")
    return str(best["name"])
