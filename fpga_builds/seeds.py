"""Several nextpnr placement seeds of one build: each seed's fmax and whether it met."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import FpgaBuildError

__all__ = ["build_seeds", "parse_seeds", "seed_summary"]


def parse_seeds(text: str) -> list[int]:
    """``--seeds``' value: comma-separated non-negative integers, no repeats.

    Raises
    ------
    FpgaBuildError
        For an empty list, a value that is not an integer, a negative one or a repeat
        (names the value).
    """
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise FpgaBuildError(f"--seeds {text!r}: {part!r} is not a seed (give "
                                 "non-negative integers separated by commas, e.g. 1,2,3)")
        if int(part) in seeds:
            raise FpgaBuildError(f"--seeds {text!r}: seed {part} given twice")
        seeds.append(int(part))
    return seeds


def seed_summary(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One result for the builds of several seeds (same board, config and clock).

    Returns
    -------
    dict
        ``board``, ``config``, ``target_mhz``, ``seeds`` (per seed: ``seed``,
        ``fmax_mhz``, ``timing_met``, ``slack_ns`` at the target, ``report``),
        ``met`` (how many met) and ``of``, ``fmax_mhz_min``/``max``.
    """
    first = reports[0]
    target = first["target_mhz"]
    rows = [{"seed": r["options"]["seed"], "fmax_mhz": r["fmax_mhz"],
             "timing_met": r["timing_met"],
             "slack_ns": round(1000 / target - 1000 / r["fmax_mhz"], 3)
             if r["fmax_mhz"] else None,
             "report": str(Path(r["bitstream"]).parent / "report.json")}
            for r in reports]
    fmax = [r["fmax_mhz"] for r in reports]
    return {"board": first["board"], "config": first["config"], "target_mhz": target,
            "seeds": rows, "met": sum(r["timing_met"] for r in reports), "of": len(rows),
            "fmax_mhz_min": min(fmax), "fmax_mhz_max": max(fmax)}


def build_seeds(build: Callable[..., dict[str, Any]], seeds: Sequence[int],
                out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Build once per seed into ``out_dir/seed-N`` and summarise (:func:`seed_summary`).

    Parameters
    ----------
    build : callable
        :func:`tensorfab.fpga_builds.flow.build_bitstream` (its ``seed``, ``out_dir``
        and ``allow_timing_failure`` are set here; ``kwargs`` go to it too).
    seeds : sequence of int
        Placement seeds, built one after the other.
    out_dir : path
        Where the builds' folders go; ``seeds.json`` there gets the summary.

    Returns
    -------
    dict
        The summary, written to ``out_dir/seeds.json`` as well.
    """
    out = Path(out_dir)
    reports = [build(out_dir=out / f"seed-{seed}", seed=seed, allow_timing_failure=True,
                     **kwargs) for seed in seeds]
    summary = seed_summary(reports)
    (out / "seeds.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
