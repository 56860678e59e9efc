"""The FPGA benchmark: build each board's configurations, collect their reports, plot.

Every build keeps its device memory on-chip (``--memory on-chip``) at the board's
``target_mhz``: the figures measure the core's density and clock, which the issue's
targets are about, not the SDRAM controller a ULX3S build has by default."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from tensorfab.fpga_builds.boards import BOARDS
from tensorfab.fpga_builds.errors import DoesNotFit, FpgaBuildError
from tensorfab.fpga_builds.flow import build_bitstream
from tensorfab.fpga_builds.report import check_fit, utilization_from_log

__all__ = ["DEFAULT_MATRIX", "ENTRY_ROUTERS", "plot_utilization", "run_fpga_bench", "select_builds"]

#: (board, config, DSP multipliers) built by default: the presets that fit or show
#: where a board's limit is, and the LUT-multiplier option where DSPs run out.
DEFAULT_MATRIX: tuple[tuple[str, str, bool], ...] = (
    ("ulx3s-85f", "ecp5-85f", True),
    ("ulx3s-85f", "small", True),
    ("ulx3s-85f", "tiny", True),
    ("ulx3s-25f", "ecp5-25f", True),
    ("ulx3s-25f", "ecp5-25f-4x4", True),
    ("ulx3s-25f", "tiny", True),
    ("ulx3s-25f", "tiny", False),
    ("icebreaker", "up5k", True),
    ("icebreaker", "tiny", True),
    ("orangecrab-25f", "ecp5-25f", True),
    ("orangecrab-85f", "ecp5-85f", True),
    ("orangecrab-85f", "tiny", True),
)


#: The router of an entry whose build differs from ``fpga build``'s default one (each
#: entry builds at the board's ``target_mhz`` with on-chip memory): the 85F's
#: ``ecp5-85f`` at 100 MHz routes with router2 (docs/fpga.md), its 70 MHz default with
#: router1.
ENTRY_ROUTERS: dict[tuple[str, str], str] = {("ulx3s-85f", "ecp5-85f"): "router2"}


def select_builds(matrix: tuple[tuple[str, str, bool], ...] = DEFAULT_MATRIX, *,
                  board: str | None = None,
                  config: str | None = None) -> tuple[tuple[str, str, bool], ...]:
    """The entries of ``matrix`` for ``board`` and/or ``config`` (None: any).

    A board and config given together that the matrix does not list are one build
    of their own (DSP multipliers), so any pair can be measured alone.

    Raises
    ------
    FpgaBuildError
        For an unknown board, or a filter no entry matches (the message lists the
        matrix's boards and configs).
    """
    if board is not None and board not in BOARDS:
        raise FpgaBuildError(f"--board {board!r}: unknown board (known: {', '.join(BOARDS)})")
    chosen = tuple(e for e in matrix if board in (None, e[0]) and config in (None, e[1]))
    if chosen:
        return chosen
    if board is not None and config is not None:
        return ((board, config, True),)
    raise FpgaBuildError(f"--config {config!r}: no build of the benchmark has it (its "
                         f"configs: {', '.join(sorted({c for _, c, _ in matrix}))}; give "
                         "--board too to build any pair)")


def _entry(report: dict[str, Any]) -> dict[str, Any]:
    keys = ("board", "config", "fmax_mhz", "target_mhz", "timing_met", "peak_gops",
            "peak_gops_at_target", "macs_per_cycle", "resources", "clocks", "seconds",
            "options", "tools")
    return {k: report[k] for k in keys if k in report}


def run_fpga_bench(matrix: tuple[tuple[str, str, bool], ...] = DEFAULT_MATRIX, *,
                   out_dir: str | Path = "build/fpga-bench", plot: str | None = None,
                   reuse: bool = False) -> dict[str, Any]:
    """Build every entry of ``matrix`` and return ``{"builds": [...]}``.

    Every entry has ``peak_gops`` (2 × MACs per cycle × its fmax; 0 for a build that
    does not fit). A build that does not fit is listed with ``fits: false`` and the resource;
    timing failures are listed with ``timing_met: false`` (the bitstream is kept).
    ``reuse`` takes an existing ``report.json`` instead of building again.
    """
    console = Console(stderr=True)
    out_dir = Path(out_dir)
    builds = []
    t0 = time.monotonic()
    for board, config, dsp in matrix:
        where = out_dir / f"{board}-{Path(config).stem}{'' if dsp else '-lutmul'}"
        try:
            if reuse and (where / "bench-entry.json").exists():
                builds.append(json.loads((where / "bench-entry.json").read_text()))
                continue
            if reuse and (where / "report.json").exists():
                report = json.loads((where / "report.json").read_text())
            elif reuse and (where / "top.tim").exists():  # a build that did not fit
                check_fit(BOARDS[board].family,
                          utilization_from_log((where / "top.tim").read_text()))
                raise FpgaBuildError(f"{where}: no report.json and no overflow in top.tim")
            else:
                report = build_bitstream(board, config, where, dsp=dsp,
                                         allow_timing_failure=True, console=console,
                                         clock_mhz=BOARDS[board].target_mhz,
                                         sdram=False, router=ENTRY_ROUTERS.get((board, config)))
            entry = _entry(report) | {"fits": True}
        except DoesNotFit as exc:
            entry = {"board": board, "config": config, "fits": False, "timing_met": False,
                     "fmax_mhz": 0.0, "target_mhz": BOARDS[board].target_mhz,
                     "peak_gops": 0.0, "resources": {exc.resource: {
                         "used": exc.used, "available": exc.available}}, "error": str(exc),
                     "options": {"dsp": dsp}}
        except FpgaBuildError as exc:
            entry = {"board": board, "config": config, "fits": None, "timing_met": False,
                     "fmax_mhz": 0.0, "target_mhz": BOARDS[board].target_mhz,
                     "peak_gops": 0.0, "resources": {}, "error": str(exc),
                     "options": {"dsp": dsp}}
        console.print(f"{board} {config}{'' if dsp else ' (LUT multipliers)'}: "
                      + (f"{entry['fmax_mhz']} MHz / {entry['target_mhz']} MHz"
                         if entry.get("fits") else entry.get("error", "")), highlight=False)
        where.mkdir(parents=True, exist_ok=True)
        (where / "bench-entry.json").write_text(json.dumps(entry, indent=1))
        builds.append(entry)
    result = {"builds": builds, "seconds": round(time.monotonic() - t0, 1)}
    if plot:
        plot_utilization(builds, plot)
        result["plot"] = plot
    return result


def plot_utilization(builds: list[dict[str, Any]], path: str | Path) -> None:
    """A bar chart of utilization (% of each resource) per board and configuration."""
    from tensorfab.sim.png_figure import png_figure

    names = ("LUT", "FF", "DSP", "BRAM", "SPRAM")
    ok = [b for b in builds if b.get("fits")]
    with png_figure(path, (8, 4)) as (_fig, ax):
        width = 0.8 / max(1, len(ok))
        for i, b in enumerate(ok):
            pct = [100 * b["resources"].get(n, {}).get("used", 0)
                   / max(1, b["resources"].get(n, {}).get("available", 0)) for n in names]
            label = (f"{b['board']} {b['config']}"
                     f"{'' if b['options'].get('dsp', True) else ' LUT-mul'}: "
                     f"{b['fmax_mhz']:.0f}/{b['target_mhz']:.0f} MHz")
            ax.bar([k + i * width for k in range(len(names))], pct, width, label=label)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names)
        ax.set_ylabel("% of the device")
        ax.axhline(100, color="black", linewidth=0.6)
        ax.set_title("FPGA utilization per board and configuration")
        ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", default="build/fpga-bench/utilization.png")
    ap.add_argument("--reuse", action="store_true", help="reuse existing reports")
    ap.add_argument("--out", default="build/fpga-bench", help="build directories")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--board", help="only this board's builds")
    ap.add_argument("--config", help="only this config's builds")
    args = ap.parse_args(argv)
    matrix = select_builds(board=args.board, config=args.config)
    result = run_fpga_bench(matrix, out_dir=args.out, plot=args.plot or None,
                            reuse=args.reuse)
    if not args.json:
        for b in result["builds"]:
            print(f"{b['board']:12s} {b['config']:8s} {b['fmax_mhz']:7.1f} / "
                  f"{b['target_mhz']:.0f} MHz  {b['peak_gops']:.2f} GOPS")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
