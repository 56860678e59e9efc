"""A sweep's rows on disk: the Parquet table of all points and the summary per point."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["point_summary", "write_parquet"]


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
