"""``fpga build --seeds`` and ``bench fpga --board/--config``: the plumbing around the
builds (the builds themselves are tested by test_fpga_flow's real bitstream)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tensorfab.cli import main
from tensorfab.fpga_builds.errors import FpgaBuildError
from tensorfab.fpga_builds.seeds import parse_seeds, seed_summary

#: fmax per seed of the fake builds (around a 100 MHz target).
FMAX = {1: 100.4, 2: 98.1, 3: 103.0}


def fake_build(board_name: str, config: str, out_dir: Path, *, seed: int,
               allow_timing_failure: bool, clock_mhz: float | None, **_kw: Any) -> dict:
    """A report of the shape build_bitstream writes, its fmax by seed."""
    assert allow_timing_failure
    out = Path(out_dir)
    out.mkdir(parents=True)
    target = clock_mhz or 80.0
    report = {"board": board_name, "config": config, "target_mhz": target,
              "fmax_mhz": FMAX[seed], "timing_met": FMAX[seed] >= target,
              "options": {"seed": seed}, "bitstream": str(out / "top.bit")}
    (out / "report.json").write_text(json.dumps(report))
    return report


def test_parse_seeds() -> None:
    assert parse_seeds("1,2, 3") == [1, 2, 3]
    for bad, what in (("1,,2", "'' is not a seed"), ("-1", "'-1' is not a seed"),
                      ("1,1", "seed 1 given twice")):
        with pytest.raises(FpgaBuildError, match=what):
            parse_seeds(bad)


def test_summary_counts_the_seeds_that_met() -> None:
    reports = [{
        "board": "b", "config": "c", "target_mhz": 100.0, "fmax_mhz": FMAX[s],
        "timing_met": FMAX[s] >= 100.0, "options": {"seed": s},
        "bitstream": f"/x/seed-{s}/top.bit"} for s in (1, 2, 3)]
    summary = seed_summary(reports)
    assert (summary["met"], summary["of"]) == (2, 3)
    assert [r["seed"] for r in summary["seeds"]] == [1, 2, 3]
    assert summary["seeds"][1]["slack_ns"] == pytest.approx(10 - 1000 / 98.1, abs=1e-3)
    assert summary["seeds"][0]["slack_ns"] > 0
    assert (summary["fmax_mhz_min"], summary["fmax_mhz_max"]) == (98.1, 103.0)


def test_build_seeds_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorfab.fpga_builds import flow

    monkeypatch.setattr(flow, "build_bitstream", fake_build)
    out = tmp_path / "b"
    args = ["fpga", "build", "--board", "ulx3s-25f", "--clock-mhz", "100", "-o", str(out),
            "--seeds", "1,2,3"]
    assert main([*args, "--json", "--allow-timing-failure"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == json.loads((out / "seeds.json").read_text())
    assert [(r["seed"], r["timing_met"]) for r in summary["seeds"]] == [
        (1, True), (2, False), (3, True)]
    assert all((out / f"seed-{s}" / "report.json").exists() for s in (1, 2, 3))
    # without --allow-timing-failure: every seed reported, then one error naming seed 2
    out.rename(tmp_path / "old")
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "timing met at 2 of 3 seeds" in captured.out
    assert "seed 2: 98.1 MHz / 100 MHz" in captured.out
    # the ULX3S's default memory is its SDRAM: the on-chip build is named as for one seed
    assert captured.err.strip().splitlines() == [
        "note: the device memory is the board's SDRAM (its default); --memory on-chip "
        "builds the SoC without the SDRAM controller, in block RAM (docs/fpga.md: the "
        "25F's 100 MHz builds)",
        f"error: ulx3s-25f ecp5-25f: timing missed at seed(s) 2 of 1,2,3 (100 MHz); "
        f"see {out / 'seeds.json'}"]
    out.rename(tmp_path / "older")
    assert main([*args, "--memory", "on-chip"]) == 2  # (chosen: no note)
    assert capsys.readouterr().err.strip().splitlines()[0].startswith("error: ulx3s-25f")


def test_bench_filters() -> None:
    from tensorfab.benches.fpga import DEFAULT_MATRIX, select_builds

    assert select_builds() == DEFAULT_MATRIX
    assert {b for b, _, _ in select_builds(board="ulx3s-25f")} == {"ulx3s-25f"}
    assert select_builds(board="ulx3s-85f", config="tiny") == (("ulx3s-85f", "tiny", True),)
    assert {c for _, c, _ in select_builds(config="tiny")} == {"tiny"}
    # a pair the matrix does not list is a build of its own
    assert select_builds(board="ulx3s-85f", config="ecp5-25f") == (
        ("ulx3s-85f", "ecp5-25f", True),)
    with pytest.raises(FpgaBuildError, match="unknown board"):
        select_builds(board="de0")
    with pytest.raises(FpgaBuildError, match="no build of the benchmark has it"):
        select_builds(config="default")


def test_bench_cli_filter_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "fpga", "--board", "de0", "--json"]) == 2
    assert "--board 'de0': unknown board" in capsys.readouterr().err
    assert main(["bench", "fsim-gemm", "--board", "ulx3s-25f"]) == 2
    assert "has no --board option" in capsys.readouterr().err


def test_a_missed_clock_with_the_default_sdram_names_the_on_chip_build(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ULX3S build that misses its clock with its default memory (the SDRAM) says that
    ``--memory on-chip`` builds it without the controller; the memory asked for reaches
    the build (None: the board's default)."""
    from tensorfab.fpga_builds import flow
    from tensorfab.fpga_builds.errors import TimingFailure

    asked: list[bool | None] = []

    def missing(board_name: str, config: str, out_dir: Path, **kw: Any) -> dict:
        asked.append(kw["sdram"])
        raise TimingFailure("clock sync reaches 91.54 MHz, target 100.00 MHz", "sync",
                            91.54, 100.0, -0.92)

    monkeypatch.setattr(flow, "build_bitstream", missing)
    note = "--memory on-chip builds the SoC without the SDRAM controller"
    for more, noted in (([], True), (["--memory", "on-chip"], False),
                        (["--memory", "sdram"], False)):
        args = ["fpga", "build", "--board", "ulx3s-25f", "--clock-mhz", "100", "-o",
                str(tmp_path / f"b{len(asked)}"), *more]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "reaches 91.54 MHz" in err and (note in err) == noted, err
    assert asked == [None, False, True]


def test_bench_entries_route_as_measured(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench fpga`` builds the 85F's ``ecp5-85f`` at 100 MHz with router2 (its default
    build at 70 MHz takes router1) and leaves every other entry to ``fpga build``'s
    default router."""
    from tensorfab.benches import fpga as bench

    routers: dict[tuple[str, str], str | None] = {}

    def built(board_name: str, config: str, out_dir: Path, **kw: Any) -> dict:
        routers[board_name, config] = kw["router"]
        return {"board": board_name, "config": config, "target_mhz": kw["clock_mhz"],
                "fmax_mhz": 50.0, "timing_met": False, "peak_gops": 6.4}

    monkeypatch.setattr(bench, "build_bitstream", built)
    bench.run_fpga_bench(bench.select_builds(board="ulx3s-85f"), out_dir=tmp_path)
    assert routers == {("ulx3s-85f", "ecp5-85f"): "router2", ("ulx3s-85f", "small"): None,
                       ("ulx3s-85f", "tiny"): None}
