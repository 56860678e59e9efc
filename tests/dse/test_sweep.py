"""The design-space sweep: the space file, invalid points, the timing-model figures
against an independent count, the on-disk cache and the Parquet output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tensorfab.dse.cluster import dask_client
from tensorfab.dse.results import write_parquet
from tensorfab.dse.space import load_space, space_points
from tensorfab.dse.sweep import evaluate, known_workloads, run_sweep, workload_by_name
from tensorfab.isa import HwConfig, UsageError
from tensorfab.sim.timing.model import program_timing

SPACE = """\
block_in: [8, 16]
block_out: [8, 16]
clock_mhz: [50]
"""


def _space(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return p


def test_space_points_span_the_product_and_keep_invalid_reasons(tmp_path: Path) -> None:
    space = load_space(_space(tmp_path, SPACE + "batch: [1, 3]\n"))
    points = space_points(space)
    assert len(points) == 8
    bad = [p for p in points if p.config is None]
    assert len(bad) == 4 and all(p.values["batch"] == 3 for p in bad)
    assert all("HwConfig.batch = 3" in p.invalid_reason and "power of two"
               in p.invalid_reason for p in bad)
    good = [p.config for p in points if p.config is not None]
    assert {(c.block_in, c.block_out, c.clock_mhz) for c in good} == {
        (8, 8, 50), (8, 16, 50), (16, 8, 50), (16, 16, 50)}


def test_bad_space_files_name_file_line_and_field(tmp_path: Path, capsys) -> None:
    p = _space(tmp_path, "block_in: [8, 16]\nblock_width: [4]\n")
    with pytest.raises(UsageError, match=r"space.yaml:2: field 'block_width'"):
        load_space(p)
    p = _space(tmp_path, "block_in: [8, 16\nbatch: [1]\n")
    with pytest.raises(UsageError, match=r"space.yaml:\d+: not valid YAML"):
        load_space(p)
    p = _space(tmp_path, "block_in: []\n")
    with pytest.raises(UsageError, match=r"space.yaml:1: field 'block_in' needs"):
        load_space(p)
    # a value that is not a number of the field's type was an invalid point of the sweep
    # ("HwConfig.block_in = 'abc': must be an integer"); it is refused with its line
    for text, message in [
            ("block_in: [abc]\n", "space.yaml:1: field 'block_in': 'abc' is not an integer "
                                  "(it needs a non-empty list of integers)"),
            ("block_out: [8]\nblock_in:\n  - 8\n  - abc\n",
             "space.yaml:4: field 'block_in': 'abc' is not an integer"),
            ("batch: [1, 2.5]\n", "space.yaml:1: field 'batch': 2.5 is not an integer"),
            ("batch: [true]\n", "space.yaml:1: field 'batch': True is not an integer"),
            ("clock_mhz: [25, fast]\n", "space.yaml:1: field 'clock_mhz': 'fast' is not a "
                                        "number (it needs a non-empty list of numbers)"),
            ("sequential_multiplier: [false, 1]\n",
             "space.yaml:1: field 'sequential_multiplier': 1 is not true or false (it "
             "needs a non-empty list of true or false)"),
            ("block_in: {a: 1}\n", "space.yaml:1: field 'block_in': {'a': 1} is not an "
                                   "integer"),
            # a repeated value was swept as two points of one config, whose rows the
            # summary then summed: twice the cycles and MACs of that point
            ("block_in: [8, 8]\n", "space.yaml:1: field 'block_in': 8 is listed twice "
                                   "(list each value once"),
            ("clock_mhz:\n  - 50\n  - 25\n  - 50.0\n",
             "space.yaml:4: field 'clock_mhz': 50.0 is listed twice"),
            # a field given twice kept its last list (YAML's rule) and silently dropped
            # the first: block_in [8] and [16] swept block_in 16 alone
            ("block_in: [8]\nbatch: [1]\nblock_in: [16]\n",
             "space.yaml:3: field 'block_in' is given twice (first on line 1); give it "
             "once, with all its values in one list")]:
        with pytest.raises(UsageError) as info:
            load_space(_space(tmp_path, text))
        assert str(info.value).startswith(f"{tmp_path / message}"), info.value
    assert load_space(_space(tmp_path, "clock_mhz: [25, 62.5]\nbatch: 1\n")) == {
        "clock_mhz": [25, 62.5], "batch": [1]}
    space = load_space(_space(tmp_path, "sequential_multiplier: [false, true]\n"))
    assert [p.config.sequential_multiplier for p in space_points(space)  # type: ignore[union-attr]
            ] == [False, True]
    from tensorfab.cli import main

    capsys.readouterr()
    assert main(["dse", "--space", str(_space(tmp_path, "block_in: [abc]\n")),
                 "--workloads", "dense64", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path / 'space.yaml'}:1: field "
                                       "'block_in': 'abc' is not an integer (it needs a "
                                       "non-empty list of integers)\n")
    with pytest.raises(UsageError, match="unknown workload 'nope'"):
        workload_by_name(["dense64", "nope"])
    # --workloads '' (or ',') swept nothing and wrote a points.parquet without columns,
    # which the next sweep into that folder refused as not a file the command writes
    with pytest.raises(UsageError, match=r"^--workloads names no workload; give one or "
                                         r"more of resnet18, C2, .*dense64, digits or an "
                                         r"ONNX file, comma-separated$"):
        workload_by_name([])
    capsys.readouterr()
    assert main(["dse", "--space", str(_space(tmp_path, "block_in: [8]\n")),
                 "--workloads", ",", "--out", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith("error: --workloads names no workload")
    assert not (tmp_path / "empty").exists()


def test_evaluate_matches_the_timing_model_and_mac_count() -> None:
    from tensorfab.compiler.tensor.operators import compile_workload

    cfg = HwConfig(block_in=8, block_out=8, clock_mhz=50.0)
    r = evaluate(cfg.to_json(), "dense64")
    wl = known_workloads()["dense64"]
    assert r["macs"] == 16 * 64 * 64
    assert r["cycles"] == round(program_timing(compile_workload(wl, cfg).program).cycles)
    # MACs over what the 1x8x8 core could do in those cycles
    assert r["utilization"] == pytest.approx(16 * 64 * 64 / (r["cycles"] * 64))
    assert 0 < r["utilization"] <= 1
    assert r["gops"] == pytest.approx(2 * 16 * 64 * 64 / (r["cycles"] / 50e6) / 1e9)


def test_sweep_on_a_local_cluster_is_free_on_rerun(tmp_path: Path) -> None:
    points = space_points(load_space(_space(tmp_path, SPACE)))
    with dask_client(workers=1) as client:
        first = run_sweep(points, ["dense64"], client, tmp_path / "cache")
        again = run_sweep(points, ["dense64"], client, tmp_path / "cache")
    assert (first.computed, first.cached) == (4, 0)
    assert (again.computed, again.cached) == (0, 4)
    assert again.cache_hit_ratio == 1.0
    assert [r["cycles"] for r in again.rows] == [r["cycles"] for r in first.rows]
    for r in first.rows:
        want = evaluate(r["config"], "dense64")
        assert r["cycles"] == want["cycles"]
    # bigger GEMM core, fewer cycles
    cyc = {(r["block_in"], r["block_out"]): r["cycles"] for r in first.rows}
    assert cyc[(16, 16)] < cyc[(8, 8)]
    table = pq.read_table(write_parquet(first.rows, tmp_path / "points.parquet"))
    assert table.num_rows == 4
    assert table.column("cycles").to_pylist() == [r["cycles"] for r in first.rows]
    assert json.loads(table.column("config").to_pylist()[0])["block_in"] == 8


def test_dse_command_writes_parquet_pareto_png_and_a_config_compile_accepts(
        tmp_path: Path) -> None:
    import subprocess
    import sys

    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.models.digits_cnn import load_digits_split, model_path
    from tensorfab.sim.png_figure import is_tensorfab_png

    exe = str(Path(sys.executable).parent / "tensorfab")
    space = _space(tmp_path, SPACE)
    run = subprocess.run([exe, "dse", "--space", str(space), "--workloads", "dense64",
                          "--workers", "1", "--out", str(tmp_path / "out"), "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(run.stdout)
    assert "dashboard: http://127.0.0.1:" in run.stderr
    assert report["valid_points"] == 4 and report["computed"] == 4
    table = pq.read_table(report["parquet"])
    assert table.num_rows == 4
    assert is_tensorfab_png(report["pareto_png"])
    # resources estimated on the 85F: only 1x8x8 fits (the others need 196 to 388 DSPs:
    # one per MAC, four per ALU lane, four in load/store, and with block_in 16 (REQUANT)
    # four per lane of the store's requantization, of 156)
    by = {(s["name"]): s for s in report["summary"]}
    assert report["board"] == "ulx3s-85f" and report["fitting_points"] == 1
    dsp = {(json.loads(c)["block_in"], json.loads(c)["block_out"]): d
           for c, d in zip(table.column("config").to_pylist(),
                           table.column("dsp_est").to_pylist(), strict=True)}
    assert dsp == {(8, 8): 100, (8, 16): 196, (16, 8): 196, (16, 16): 388}
    assert table.column("fits").to_pylist().count(True) == 1
    fastest = max(report["summary"], key=lambda s: s["gops"])
    cfg = board_config(report["best_config_json"])
    assert cfg.name == report["best_config"] != fastest["name"]
    assert by[cfg.name]["fits"] and not by[fastest["name"]]["fits"]
    assert (cfg.block_in, cfg.block_out, cfg.clock_mhz) == (8, 8, 50.0)
    assert by[cfg.name]["gops_per_dsp"] == pytest.approx(by[cfg.name]["gops"] / 100)
    assert report["pareto_front_size"] == len(report["pareto_fronts"]["LUT"]) >= 1
    np.save(tmp_path / "calib.npy", load_digits_split(0)[0][:64])
    subprocess.run([exe, "compile", str(model_path()), "--config",
                    report["best_config_json"], "--calib", str(tmp_path / "calib.npy"),
                    "--shape", "image=1,1,8,8", "-o", str(tmp_path / "d.tfm")],
                   capture_output=True, text=True, timeout=300, check=True)
    assert (tmp_path / "d.tfm").stat().st_size > 0


def test_dse_board_filter_keeps_only_fitting_points(tmp_path: Path) -> None:
    """--board ulx3s-25f (28 DSPs): no point of the space fits, so none is listed and
    no best config is written (the cache from nothing: the same sweep, computed)."""
    import subprocess
    import sys

    exe = str(Path(sys.executable).parent / "tensorfab")
    out = tmp_path / "out"
    out.mkdir()
    # a stale one from an earlier sweep
    (out / "best_config.json").write_text(HwConfig(name="dse-old").to_json() + "\n")
    run = subprocess.run([exe, "dse", "--space", str(_space(tmp_path, SPACE)),
                          "--workloads", "dense64", "--workers", "1", "--board",
                          "ulx3s-25f", "--out", str(out), "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(run.stdout)
    assert report["board"] == "ulx3s-25f" and report["board_filter"]
    assert report["fitting_points"] == 0 and report["summary"] == []
    assert report["best_config"] is None and not (out / "best_config.json").exists()
    bad = subprocess.run([exe, "dse", "--space", str(_space(tmp_path, SPACE)),
                          "--board", "icebreaker", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "icebreaker is ice40" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_check_rtl_compares_sampled_points_with_the_rtl(tmp_path: Path) -> None:
    """--check-rtl 1 on a one-point space of a small core: the RTL's cycles (its own
    Verilator model) against the timing model's, within the model's 3 % target."""
    import subprocess
    import sys

    space = _space(tmp_path, "block_in: [4]\nblock_out: [4]\ninp_depth: [256]\n"
                   "wgt_depth: [128]\nacc_depth: [256]\nuop_depth: [512]\n"
                   "mem_bus_width: [32]\n")
    run = subprocess.run([str(Path(sys.executable).parent / "tensorfab"), "dse",
                          "--space", str(space), "--workloads", "dense64", "--workers",
                          "1", "--check-rtl", "1", "--out", str(tmp_path / "out"),
                          "--json"], capture_output=True, text=True, timeout=1500,
                         check=True)
    check = json.loads(run.stdout)["rtl_check"]
    (c,) = check["checked"]
    assert c["workload"] == "dense64" and c["rtl_cycles"] > 0
    assert c["error"] == pytest.approx((c["model_cycles"] - c["rtl_cycles"])
                                       / c["rtl_cycles"])
    assert check["max_abs_error"] == abs(c["error"]) <= 0.03


def test_dse_out_refuses_a_file_and_files_a_sweep_did_not_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dse --out FILE` was a NotADirectoryError traceback after starting the cluster,
    and `--out FOLDER` replaced (or, for best_config.json, deleted) the user's files of
    the sweep's names. Both are now refused before the sweep, one line each."""
    from tensorfab.cli import main

    space = tmp_path / "space.yaml"
    space.write_text("block_in: [8]\nblock_out: [8]\n")
    a_file = tmp_path / "outfile"
    a_file.write_text("mine\n")
    assert main(["dse", "--space", str(space), "--workloads", "dense64", "--workers", "1",
                 "--out", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert f"--out {a_file} is a file; name a folder" in err and "Traceback" not in err
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("summary.json", "best_config.json"):
        (folder / name).write_text('{"my": "notes"}\n')
        assert main(["dse", "--space", str(space), "--workloads", "dense64",
                     "--workers", "1", "--out", str(folder)]) == 2
        err = capsys.readouterr().err
        assert f"{folder / name} exists and is not a file this command writes" in err
        assert "--force" in err
        assert (folder / name).read_text() == '{"my": "notes"}\n'
        (folder / name).unlink()
    assert not (folder / "cache").exists()
