"""What ``fpga build`` prints for people: the resources used (used / available / %),
one timing line, and progress lines in a log (stderr not a terminal)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from rich.console import Console

from tensorfab.cli_fpga import resource_table, timing_line
from tensorfab.fpga_builds.flow import run_logged

#: A report as flow.build_bitstream writes it (measured ulx3s-25f ecp5-25f, trimmed).
REPORT = {
    "board": "ulx3s-25f", "config": "ecp5-25f", "seconds": 902.7,
    "resources": {"ALU54B": {"used": 0, "available": 14},
                  "DCCA": {"used": 1, "available": 56},
                  "BRAM": {"used": 19, "available": 56},
                  "DSP": {"used": 20, "available": 28},
                  "LUT": {"used": 12803, "available": 24288},
                  "FF": {"used": 6241, "available": 24288},
                  "USRMCLK": {"used": 0, "available": 1}},
    "fmax_mhz": 96.12, "target_mhz": 80.0, "timing_met": True,
}


def _text(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=100)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_resource_table_shows_what_is_used() -> None:
    text = _text(resource_table(REPORT))
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert header.split() == ["┃", "resource", "┃", "used", "┃", "available", "┃", "%", "┃"]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()
            if line.startswith("│")]
    assert rows == [["DSP", "20", "28", "71"], ["LUT", "12,803", "24,288", "53"],
                        ["BRAM", "19", "56", "34"], ["FF", "6,241", "24,288", "26"],
                        ["DCCA", "1", "56", "2"]]


def test_timing_line() -> None:
    assert timing_line(REPORT) == "timing met at 96.12 MHz (target 80)"
    missed = timing_line(REPORT | {"target_mhz": 100.0, "timing_met": False})
    assert missed.startswith("timing missed: 96.12 MHz, target 100 (rebuild with "
                             "--clock-mhz 96 or less")


def test_progress_reaches_a_log(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=100)
    script = "print('Info: synth'); print('noise'); print('Info: place')"
    rc, step, _ = run_logged([sys.executable, "-c", script], tmp_path, {}, tmp_path / "log",
                             console=console, label="b", step_of=lambda line: (
                                 line.split()[1] if line.startswith("Info:") else None))
    assert (rc, step) == (0, "place")
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[0] == "b: elaboration" and len(lines) == 3
    assert lines[1].startswith("b: synth (") and lines[2].startswith("b: place (")
    assert (tmp_path / "log").read_text().splitlines() == ["Info: synth", "noise",
                                                           "Info: place"]
